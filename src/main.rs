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
    /// The machine as NCCL sees it: `topo show`, `topo dump`.
    Topo(cli::topo::TopoArgs),
    /// Benchmark a collective like nccl-tests (`all_reduce_perf` and friends), byte-compatible output.
    Perf(cli::perf::PerfArgs),
    /// Run a training-like job (DDP AllReduce buckets, FSDP AllGather/ReduceScatter) on 4 local ranks.
    Demo(cli::demo::DemoArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", collscope_core::debug::version_string());
            Ok(())
        }
        Command::Topo(args) => cli::topo::run(args),
        Command::Perf(args) => cli::perf::run(&args),
        Command::Demo(args) => cli::demo::run(&args),
    }
}
