//! `collscope tui`: picks the source from the arguments and hands the terminal to `collscope-tui`.

use anyhow::{bail, Context};
use clap::{ArgGroup, Args};
use collscope_tui::SourceSpec;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["log", "connect", "replay"])))]
pub struct TuiArgs {
    /// Real NCCL_DEBUG=INFO log file(s) to read.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub log: Vec<PathBuf>,
    /// With --log: keep reading lines as they are appended.
    #[arg(long, requires = "log")]
    pub follow: bool,
    /// A running collscope process (its telemetry address), e.g. http://127.0.0.1:9400.
    #[arg(long, value_name = "URL")]
    pub connect: Option<String>,
    /// With --connect: write the events stream to FILE for --replay.
    #[arg(long, value_name = "FILE", requires = "connect")]
    pub record: Option<PathBuf>,
    /// Play back a recording made with --record.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

impl TuiArgs {
    fn spec(self) -> SourceSpec {
        if let Some(url) = self.connect {
            SourceSpec::Connect { url, record: self.record }
        } else if let Some(file) = self.replay {
            SourceSpec::Replay { file }
        } else {
            SourceSpec::Log { paths: self.log, follow: self.follow }
        }
    }
}

pub fn run(args: TuiArgs) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        bail!("collscope tui draws on a terminal, but stdout is not one");
    }
    collscope_tui::run(args.spec()).context("collscope tui")
}
