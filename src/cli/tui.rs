//! `collscope tui`: picks the source from the arguments and hands the terminal to `collscope-tui`. A modelled
//! machine (`--preset`, `--topo-file`) is computed here, by the NCCL model, and handed over as a static source;
//! a job read through Prometheus (`--prometheus`) is read here too (`collscope_telemetry::promjob`), every few
//! seconds on the TUI's source thread.

use crate::cli::topo::{explain, SourceArgs};
use crate::cli::{job, sizes};
use anyhow::{bail, Context};
use clap::{ArgGroup, Args};
use collscope_model::{RankDump, Snapshot, Source};
use collscope_telemetry::promjob::PromJob;
use collscope_tui::{JobFetch, SourceSpec};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["logs", "log", "dump", "connect", "replay", "preset", "topo_file", "prometheus"])))]
#[command(group(ArgGroup::new("machine").args(["preset", "topo_file"])))]
#[command(group(ArgGroup::new("log_files").multiple(true).args(["logs", "log"])))]
pub(crate) struct TuiArgs {
    /// Real NCCL_DEBUG=INFO log file(s) to read: `collscope tui nccl.log` is `collscope tui --log nccl.log`; a
    /// folder is a job's rank dumps (`--dump DIR`).
    #[arg(value_name = "LOG")]
    pub logs: Vec<PathBuf>,
    /// A folder of rank dumps (the job's COLLSCOPE_DUMP_DIR): the rank strip and findings of `collscope job
    /// analyze DIR`.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
    /// Real NCCL_DEBUG=INFO log file(s) to read.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub log: Vec<PathBuf>,
    /// With log files: keep reading lines as they are appended.
    #[arg(long, requires = "log_files")]
    pub follow: bool,
    /// A running collscope process (its telemetry address, default port 9470), e.g. 127.0.0.1:9470 or
    /// http://127.0.0.1:9470.
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// With --connect: record what the TUI shows (the events stream, the job view; gzip, at most 256 MiB) to FILE
    /// for --replay.
    #[arg(long, value_name = "FILE", requires = "connect")]
    pub record: Option<PathBuf>,
    /// A job's ranks as the Prometheus that scrapes them holds them (the rank strip and the job's findings), e.g.
    /// http://127.0.0.1:9090: a few queries however many ranks.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// With --prometheus: only this Prometheus job's ranks (its `job` label).
    #[arg(long, value_name = "NAME", requires = "prometheus")]
    pub job: Option<String>,
    /// Play back a recording made with --record (P pauses, , and . seek 10 s).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// A modelled machine: what NCCL would decide for it (rings, trees, channels, tuning).
    #[command(flatten)]
    pub machine: SourceArgs,
    /// With --preset/--topo-file: identical nodes in the communicator.
    #[arg(long, value_name = "N", requires = "machine")]
    pub nodes: Option<u32>,
    /// With --preset/--topo-file: ranks per node, the first K GPUs of the topology (default: all of them).
    #[arg(long, value_name = "K", requires = "machine")]
    pub nranks_per_node: Option<u32>,
}

impl TuiArgs {
    fn spec(mut self) -> anyhow::Result<SourceSpec> {
        // One folder given where logs go is a dump folder.
        if self.dump.is_none() && self.log.is_empty() && self.logs.len() == 1 && self.logs[0].is_dir() {
            self.dump = self.logs.pop();
        }
        Ok(if let Some(dir) = self.dump {
            let a = job::analyze(&dir)?;
            for b in &a.bad_files {
                eprintln!("collscope tui: skipped {}: {}", b.path.display(), b.why);
            }
            let first = a.dumps.first().map_or_else(|| Snapshot::new(Source::Runtime), RankDump::snapshot);
            SourceSpec::Dumps { dir, snapshot: Box::new(first), job: Box::new(a.view) }
        } else if let Some(url) = self.connect {
            SourceSpec::Connect { url, record: self.record }
        } else if let Some(url) = self.prometheus {
            let prom = PromJob::new(&url, self.job.as_deref())?;
            let via = format!("via Prometheus {url}");
            let fetch = move || prom.view().map(|v| v.job_view(&url)).map_err(|e| e.to_string());
            SourceSpec::Job { via, fetch: JobFetch(std::sync::Arc::new(fetch)) }
        } else if let Some(file) = self.replay {
            SourceSpec::Replay { file }
        } else if self.log.is_empty() && self.logs.is_empty() {
            let sizes = sizes::parse(sizes::DEFAULT)?;
            let nodes = self.nodes.unwrap_or(1);
            let ex = explain::model(&self.machine, nodes, self.nranks_per_node, &sizes, false)?;
            SourceSpec::Model { snapshot: Box::new(ex.snapshot) }
        } else {
            SourceSpec::Log { paths: self.logs.into_iter().chain(self.log).collect(), follow: self.follow }
        })
    }
}

pub(crate) fn run(args: TuiArgs) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        bail!("collscope tui draws on a terminal, but stdout is not one");
    }
    collscope_tui::run(args.spec()?).context("collscope tui")
}
