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
    /// Topology tools.
    #[command(subcommand)]
    Topo(TopoCommand),
}

#[derive(Subcommand)]
enum TopoCommand {
    /// Everything NCCL would decide at init for N identical nodes, and per collective and size the
    /// algorithm, protocol and channels it would pick, and why.
    Explain(cli::explain::ExplainArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", collscope_core::debug::version_string());
            Ok(())
        }
        Command::Topo(TopoCommand::Explain(args)) => cli::explain::run(args),
    }
}
