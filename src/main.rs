//! The `collscope` command line.

mod cli;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "collscope", version, about = "A collectives runtime built to be seen through")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the NCCL version line collscope logs and the version it models.
    Version,
    /// The machine as NCCL sees it: `topo show`, `topo dump`, and `topo explain` for what NCCL would decide on N nodes.
    Topo(cli::topo::TopoArgs),
    /// Serve metrics, the model and live events for a job on real NCCL, from its logs.
    Serve(cli::serve::ServeArgs),
    /// Read real NCCL logs.
    Log {
        #[command(subcommand)]
        command: cli::log::LogCommand,
    },
    /// Benchmark a collective like nccl-tests (`all_reduce_perf` and friends), byte-compatible output.
    Perf(cli::perf::PerfArgs),
    /// Run a training-like job (DDP AllReduce buckets, FSDP AllGather/ReduceScatter) on 4 local ranks.
    Demo(cli::demo::DemoArgs),
    /// The host tuning model: `tune calibrate` measures it on this machine, `tune show` prints it.
    Tune {
        #[command(subcommand)]
        command: cli::tune::TuneCommand,
    },
    /// Every NCCL_* and COLLSCOPE_* variable collscope reads, with its value and where it came from.
    Env(cli::env::EnvArgs),
    /// A job's ranks through the Prometheus that scrapes them: `job status --prometheus URL`.
    Job {
        #[command(subcommand)]
        command: cli::job::JobCommand,
    },
    /// Terminal UI: rings, trees, channels, proxy, tuning, operations and findings, live or from NCCL logs.
    Tui(cli::tui::TuiArgs),
}

/// Errors are printed as one chain of causes, never with a backtrace: they describe bad input or a failed
/// peer, not a bug, whatever `RUST_BACKTRACE` says. The whole error goes out in one write, so the errors of
/// rank processes sharing the launcher's stderr never cut each other.
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !cli.command.serves() {
        end_quietly_on_a_closed_pipe();
    }
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A cause the line above already quotes (an error whose message ends with its source's, as
            // "AllReduce #15 failed: rank 0: timed out ...") is said once.
            let mut above = e.to_string();
            let mut causes = Vec::new();
            for c in e.chain().skip(1).map(|c| c.to_string()) {
                if !above.contains(&c) {
                    causes.push(format!("    {c}"));
                }
                above = c;
            }
            let caused_by =
                if causes.is_empty() { String::new() } else { format!("\n\nCaused by:\n{}", causes.join("\n")) };
            collscope_debug::eprintln_whole!("Error: {e}{caused_by}");
            std::process::ExitCode::FAILURE
        }
    }
}

impl Command {
    /// Whether the command serves HTTP (telemetry, the TUI's connection). Its sockets must keep SIGPIPE
    /// ignored: hyper writes with `writev`, which, unlike std's `send`, has no MSG_NOSIGNAL, so a client that
    /// goes away would end the process.
    fn serves(&self) -> bool {
        matches!(self, Command::Serve(_) | Command::Demo(_) | Command::Tui(_))
    }
}

/// Rust ignores SIGPIPE, so `collscope log analyze x.log | head -1` would panic in `println!` once `head`
/// exits. With the default action the process ends by SIGPIPE once its reader is gone, as `cat` and nccl-tests
/// do; its sockets are unaffected (std sends with MSG_NOSIGNAL).
fn end_quietly_on_a_closed_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler of ours, and this runs first in main, before any thread starts.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Version => {
            println!("{}", collscope_debug::version_string());
            Ok(())
        }
        Command::Topo(args) => cli::topo::run(args),
        Command::Log { command } => cli::log::run(command),
        Command::Serve(args) => cli::serve::run(args),
        Command::Perf(args) => cli::perf::run(&args),
        Command::Demo(args) => cli::demo::run(&args),
        Command::Tune { command } => cli::tune::run(command),
        Command::Tui(args) => cli::tui::run(args),
        Command::Env(args) => cli::env::run(&args),
        Command::Job { command } => cli::job::run(command),
    }
}
