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
    /// Serve metrics, the model and live events for a job on real NCCL, from its logs.
    Serve(cli::serve::ServeArgs),
    /// Read real NCCL logs.
    Log {
        #[command(subcommand)]
        command: cli::log::LogCommand,
    },
    /// Terminal UI: rings, trees, channels, proxy, tuning, operations and findings, live or from NCCL logs.
    Tui(cli::tui::TuiArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", collscope_core::debug::version_string());
            Ok(())
        }
        Command::Log { command } => cli::log::run(command),
        Command::Serve(args) => cli::serve::run(args),
        Command::Tui(args) => cli::tui::run(args),
    }
}
