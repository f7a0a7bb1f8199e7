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
    /// Read real NCCL logs.
    Log {
        #[command(subcommand)]
        command: cli::log::LogCommand,
    },
    /// The machine as NCCL sees it: `topo show`, `topo dump`.
    Topo(cli::topo::TopoArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", collscope_core::debug::version_string());
            Ok(())
        }
        Command::Log { command } => cli::log::run(command),
        Command::Topo(args) => cli::topo::run(args),
    }
}
