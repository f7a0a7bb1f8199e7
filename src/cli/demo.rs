//! `collscope demo`: the README's main job. Ranks (by default 4 processes on this host) run a training-like
//! loop (`runtime::training`): bucketed gradient AllReduce, FSDP AllGather + ReduceScatter, small AllReduces.
//! Rank 0 prints one line per step and a summary.

use super::ranks::{self, Job, LaunchMode, TransportChoice};
use anyhow::{bail, Result};
use clap::Args;
use collscope_core::runtime::training::{run_training, TrainingConfig};
use std::time::Duration;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Ranks to start (ignored when a launcher started this process).
    #[arg(long, default_value_t = 4)]
    pub nranks: u32,
    #[arg(long, value_enum, default_value = "processes")]
    pub launch: LaunchMode,
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportChoice,
    /// Stop after this many steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop after this many seconds (default 15 when --steps is not given).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Gradient size per step in MiB (f32), all-reduced in 1 MiB buckets.
    #[arg(long, default_value_t = 8)]
    pub grad_mib: usize,
}

pub fn run(args: &DemoArgs) -> Result<()> {
    let max_duration = match (args.duration, args.steps) {
        (Some(d), _) if !(d > 0.0 && d.is_finite()) => bail!("--duration must be a positive number of seconds"),
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(15)),
    };
    if args.steps == Some(0) {
        bail!("--steps must be at least 1");
    }
    let cfg = TrainingConfig {
        grad_elems: args.grad_mib << 18,
        bucket_elems: 1 << 18,
        fsdp_shard: 1 << 16,
        max_steps: args.steps,
        max_duration,
    };
    let job = Job { nranks: args.nranks, launch: args.launch, transport: args.transport };
    ranks::run(&job, |rank| {
        let comm = rank.comm;
        let main = comm.rank() == 0;
        if main {
            println!(
                "collscope demo: {} ranks, {} MiB of gradients in {} buckets, FSDP shards of {} KiB, {}",
                comm.nranks(),
                args.grad_mib,
                cfg.grad_elems.div_ceil(cfg.bucket_elems),
                cfg.fsdp_shard * 4 / 1024,
                match (cfg.max_steps, cfg.max_duration) {
                    (Some(s), _) => format!("{s} steps"),
                    (None, Some(d)) => format!("{:.0} s", d.as_secs_f64()),
                    (None, None) => "unbounded".into(),
                }
            );
        }
        let reports = run_training(comm, &cfg, |r| {
            if main {
                println!(
                    "step {:>4}  {:>8.1} ms  loss {:.4}  {} collectives  {:.1} MB  {:.2} GB/s",
                    r.step,
                    r.secs * 1e3,
                    r.loss,
                    r.collectives,
                    r.bytes as f64 / 1e6,
                    r.bytes as f64 / 1e9 / r.secs.max(1e-9)
                );
            }
        })?;
        if main {
            let total: f64 = reports.iter().map(|r| r.secs).sum();
            let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
            println!(
                "done: {} steps in {:.1} s, {:.2} GB through collectives, every result checked",
                reports.len(),
                total,
                bytes as f64 / 1e9
            );
        }
        Ok(())
    })
}
