//! `collscope job status --prometheus URL`: every rank of a job as the Prometheus that scrapes it holds it, read
//! with a few PromQL queries however many ranks (`collscope_telemetry::promjob`).

use anyhow::Context;
use clap::{Args, Subcommand};
use collscope_telemetry::promjob::PromJob;

#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// Each rank's state, oldest call in flight, bus bandwidth and the findings raised, from Prometheus.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The Prometheus server that scrapes the ranks, e.g. http://127.0.0.1:9090.
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// Only this Prometheus job's ranks (its `job` label); else every job's collscope ranks.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Print the view as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(cmd: JobCommand) -> anyhow::Result<()> {
    match cmd {
        JobCommand::Status(a) => {
            let view = PromJob::new(&a.prometheus, a.job.as_deref())?.view().context("reading the job view")?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print!("{}", view.text());
            }
            Ok(())
        }
    }
}
