//! `collscope demo`: the README's main job. Ranks (by default 4 processes on this host) run a training-like
//! loop ([`training`]): bucketed gradient AllReduce, FSDP AllGather + ReduceScatter, small AllReduces.
//! Rank 0 prints one line per step and a summary. On a terminal the launcher shows the TUI connected to rank 0's
//! telemetry instead (`--no-tui` keeps the plain output).

mod fault;
mod summary;
mod training;

use super::ranks::{self, Background, Job, LaunchMode, TransportChoice};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use collscope_debug::env::Env;
use collscope_telemetry::{LocalRank, TelemetryConfig};
use collscope_tui::SourceSpec;
use fault::Fault;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use training::{run_training, TrainingConfig};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
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
    /// Stop after this many seconds [default without --steps: until `q` in the TUI, else 15 s].
    #[arg(long)]
    pub duration: Option<f64>,
    /// Gradient size per step in MiB (f32), all-reduced in 1 MiB buckets.
    #[arg(long, default_value_t = 8)]
    pub grad_mib: usize,
    /// HOST:PORT or PORT for telemetry (each process adds its local rank) [default: COLLSCOPE_METRICS_ADDR,
    /// else 127.0.0.1:9470]; port 0 picks a free one, as does a rank whose port another program holds.
    #[arg(long, overrides_with = "metrics_addr")]
    pub metrics_addr: Option<String>,
    /// Do not open the terminal UI (it opens by default when stdout is a terminal and ranks run as processes).
    #[arg(long)]
    pub no_tui: bool,
    /// With the TUI: write the events stream it shows to FILE, for `collscope tui --replay FILE`.
    #[arg(long, value_name = "FILE", conflicts_with = "no_tui")]
    pub record: Option<PathBuf>,
    /// Given by the demo's launcher to its ranks while its TUI shows them: train until `q` there stops them.
    #[arg(long, hide = true)]
    pub until_stopped: bool,
    /// Cause a failure to see what it looks like: mismatch[:rank=R,step=S], slow:rank=R,factor=F,
    /// stop:rank=R,secs=N[,step=S], kill:rank=R[,step=S]. `/api/v1/job` names a rank the others wait for after
    /// COLLSCOPE_NOT_ARRIVED_S (default 3 s); they abort after COLLSCOPE_TIMEOUT_S, or a silent peer after
    /// COLLSCOPE_PEER_TIMEOUT (default 600 s each, PyTorch's NCCL timeout).
    #[arg(long)]
    pub fault: Option<Fault>,
}

/// How long a rank whose training failed keeps serving its telemetry before it ends.
const LINGER: Duration = Duration::from_secs(10);

/// Where the demo's TUI connects: rank 0's telemetry URL, and the address its ranks are told to serve on when
/// the one they would take has a port another program holds.
struct TuiLink {
    url: String,
    moved_to: Option<String>,
}

/// Where the TUI connects when this process is the launcher of a demo that the TUI should watch: stdout is a
/// terminal, ranks run as processes started here, telemetry is on and its port is known in advance. The ranks'
/// ports are tried first: when another program holds one, chosen or the default, the ranks move to free ports
/// side by side and the TUI follows them (issue 55: a taken port never kills a rank); without such ports the
/// demo runs without the TUI (each rank serves on a free port and prints it).
fn tui_link(args: &DemoArgs) -> Result<Option<TuiLink>> {
    if args.no_tui || args.launch != LaunchMode::Processes || !std::io::stdout().is_terminal() {
        return Ok(None);
    }
    if ranks::launched()?.is_some() {
        return Ok(None);
    }
    let mut env = Env::from_process();
    if let Some(addr) = &args.metrics_addr {
        env = env.with("COLLSCOPE_METRICS_ADDR", addr);
    }
    let rank0 = LocalRank { rank: Some(0), local_rank: 0, local_ranks: args.nranks };
    let cfg = TelemetryConfig::from_env(&env, rank0, collscope_debug::params::process_var)?;
    if !cfg.enabled || cfg.addr.port() == 0 {
        return Ok(None);
    }
    let rank0 = cfg.bind_addr()?;
    let Some(r) = (0..args.nranks).find(|&r| !free_ports(rank0.ip(), u32::from(rank0.port()) + r, 1)) else {
        return Ok(Some(TuiLink { url: format!("http://{rank0}"), moved_to: None }));
    };
    let port = u32::from(rank0.port()) + r;
    let whose = super::telemetry::whose_port(args.metrics_addr.as_deref(), &env);
    let Some(base) = free_base(rank0.ip(), args.nranks) else {
        println!(
            "collscope demo: telemetry port {port} is taken by another program (rank {r}'s, {whose}); running \
             without the TUI, each rank serves on a free port and prints it"
        );
        return Ok(None);
    };
    let moved = std::net::SocketAddr::new(rank0.ip(), base);
    let url = format!("http://{moved}");
    println!(
        "collscope demo: telemetry port {port} is taken by another program (rank {r}'s, {whose}); the ranks serve \
         on ports {base}-{} instead, and the TUI connects to {url}",
        u32::from(base) + args.nranks - 1
    );
    Ok(Some(TuiLink { url, moved_to: Some(moved.to_string()) }))
}

/// Whether ports `first..first + n` of `ip` can all be bound now.
fn free_ports(ip: std::net::IpAddr, first: u32, n: u32) -> bool {
    (first..first + n).all(|p| u16::try_from(p).is_ok_and(|p| std::net::TcpListener::bind((ip, p)).is_ok()))
}

/// A first port of `n` free ones side by side on `ip` (the ranks serve on the base port plus their local rank).
fn free_base(ip: std::net::IpAddr, n: u32) -> Option<u16> {
    (0..100).find_map(|_| {
        let base = std::net::TcpListener::bind((ip, 0)).ok()?.local_addr().ok()?.port();
        free_ports(ip, u32::from(base), n).then_some(base)
    })
}

/// Prints the summary of rank 0's calls in `snap` (the TUI's connected rank, or this process's), with its
/// findings and the job's.
fn print_summary(snap: &collscope_model::Snapshot, job_findings: &[collscope_model::Finding]) {
    let mut findings = snap.findings.clone();
    findings.extend(job_findings.iter().filter(|f| !snap.findings.contains(f)).cloned());
    match summary::summary(snap, 0, &findings) {
        Some(text) => print!("{text}"),
        None => println!("collscope demo: no summary: rank 0's snapshot holds no completed call"),
    }
}

/// What the launcher adds to its own arguments for ranks behind the TUI: train until `q` when nothing else
/// bounds the run; serve where the TUI connects when the ports were moved (a later `--metrics-addr` wins).
fn tui_rank_args(until_q: bool, tui: &TuiLink) -> Vec<String> {
    let until = until_q.then(|| "--until-stopped".to_string());
    let moved = tui.moved_to.clone().map(|a| ["--metrics-addr".to_string(), a]);
    until.into_iter().chain(moved.into_iter().flatten()).collect()
}

pub(crate) fn run(args: &DemoArgs) -> Result<()> {
    if args.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        bail!("--duration must be a positive number of seconds");
    }
    if args.steps == Some(0) {
        bail!("--steps must be at least 1");
    }
    if let Some(f) = &args.fault {
        if f.needs_processes() && args.launch != LaunchMode::Processes {
            bail!("--fault {f:?} stops or kills a process: run the ranks as processes (--launch processes)");
        }
        if f.rank() >= args.nranks && ranks::launched()?.is_none() {
            bail!("--fault names rank {}, but the demo runs ranks 0 to {}", f.rank(), args.nranks.saturating_sub(1));
        }
    }
    let tui = tui_link(args)?;
    let launcher = ranks::launched()?.is_none();
    if args.record.is_some() && tui.is_none() && launcher {
        bail!(
            "--record writes what the TUI shows, and the TUI is not open (it needs a terminal and --launch processes)"
        );
    }
    // Unbounded under the TUI, whose `q` ends the ranks; a run that prints its steps stops by itself.
    let until_stopped = args.until_stopped || tui.is_some();
    let max_duration = match (args.duration, args.steps) {
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) if until_stopped => None,
        (None, None) => Some(Duration::from_secs(15)),
    };
    let cfg = TrainingConfig {
        grad_elems: args.grad_mib << 18,
        bucket_elems: 1 << 18,
        fsdp_shard: 1 << 16,
        max_steps: args.steps,
        max_duration,
        fault: args.fault,
    };
    let background = tui.as_ref().map(|link| Background {
        output: std::env::temp_dir().join(format!("collscope-demo-{}.log", std::process::id())),
        stop: Arc::new(AtomicBool::new(false)),
        rank_args: tui_rank_args(max_duration.is_none() && args.steps.is_none(), link),
    });
    let job = Job { nranks: args.nranks, launch: args.launch, transport: args.transport, background };
    if let (Some(TuiLink { url, .. }), Some(bg)) = (tui, &job.background) {
        // The ranks run in the background, their output kept in a file, while the TUI owns the terminal; `q`
        // there ends them.
        let result = std::thread::scope(|s| {
            let ranks = s.spawn(|| ranks::run(&job, |_| Ok(())));
            let shown = collscope_tui::run_to_quit(SourceSpec::Connect { url, record: args.record.clone() });
            if !ranks.is_finished() {
                println!("collscope demo: stopping the ranks");
                bg.stop.store(true, Ordering::Relaxed);
            }
            let ran = ranks.join().unwrap_or_else(|_| Err(anyhow!("the rank launcher panicked")));
            if let Ok(live) = &shown {
                print_summary(live.home(), live.job.as_ref().map_or(&[], |j| &j.findings[..]));
            }
            shown.map(drop).map_err(anyhow::Error::from).and(ran)
        });
        // Kept only when something failed, so the user can read why.
        if result.is_ok() {
            if let Err(e) = std::fs::remove_file(&bg.output) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    println!("collscope demo: cannot remove the ranks' output {}: {e}", bg.output.display());
                }
            }
        } else {
            println!("collscope demo: the ranks' output is kept in {}", bg.output.display());
        }
        return result;
    }
    let telemetry = super::telemetry::start(args.launch, args.metrics_addr.as_deref())?;
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
                    (None, None) => "until stopped".into(),
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
        });
        let reports = match reports {
            Err(e) if telemetry.is_some() => {
                // What went wrong is in this rank's telemetry (the failure as a finding): keep serving it a
                // while so the TUI and a scraper can read it before the process ends.
                collscope_debug::eprintln_whole!(
                    "collscope demo: rank {}: {e:#}; telemetry stays up {} s",
                    comm.rank(),
                    LINGER.as_secs()
                );
                std::thread::sleep(LINGER);
                return Err(e.into());
            }
            other => other?,
        };
        if main {
            let total: f64 = reports.iter().map(|r| r.secs).sum();
            let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
            println!(
                "done: {} steps in {:.1} s, {:.2} GB through collectives, every result checked",
                reports.len(),
                total,
                bytes as f64 / 1e9
            );
            match &telemetry {
                Some(t) => print_summary(&t.with_state(|s| s.snapshot()), &[]),
                None => println!("collscope demo: no summary: with telemetry off the model keeps no calls"),
            }
        }
        Ok(())
    })?;
    if let Some(t) = telemetry {
        t.shutdown()?;
    }
    Ok(())
}
