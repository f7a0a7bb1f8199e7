//! `collscope serve --log PATH... [--follow]`: the telemetry endpoints (`/metrics`, `/api/v1/snapshot`,
//! `/api/v1/events`, `/healthz`) for a job on real NCCL, from its `NCCL_DEBUG=INFO` logs. With `--follow` the
//! logs are read as they grow, like `tail -F`, across rotation.

use anyhow::{bail, Context};
use clap::Args;
use collscope_core::env::Env;
use collscope_core::model::{Snapshot, Source};
use collscope_logreader::{Options, Reader};
use collscope_telemetry::tail::Tail;
use collscope_telemetry::{LocalRank, Telemetry, TelemetryConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ServeArgs {
    /// NCCL log files or directories (with --follow: files), read as one job.
    #[arg(long = "log", required = true, num_args = 1..)]
    logs: Vec<PathBuf>,
    /// Keep reading the logs as they grow, surviving rotation.
    #[arg(long)]
    follow: bool,
    /// HOST:PORT or PORT to serve on [default: COLLSCOPE_METRICS_ADDR, else 127.0.0.1:9470]; port 0 picks a
    /// free port.
    #[arg(long)]
    metrics_addr: Option<String>,
    /// How often --follow looks for new lines, in milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    poll_ms: u64,
}

/// Log text a follower keeps to re-read; past it the oldest rotated-away part is forgotten.
const FOLLOW_MEMORY: usize = 512 << 20;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM end the serving loop, so the last OTLP push still happens.
fn stop_on_signals() -> anyhow::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // Safety: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }.with_context(|| format!("installing a {sig} handler"))?;
    }
    Ok(())
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut env = Env::from_process();
    if let Some(addr) = &args.metrics_addr {
        env = env.with("COLLSCOPE_METRICS_ADDR", addr);
    }
    let cfg = TelemetryConfig::from_env(&env, LocalRank::default(), |k| std::env::var(k).ok())?;
    if args.follow {
        for p in &args.logs {
            if p.is_dir() || p.as_os_str() == "-" {
                bail!("--follow reads files: '{}' is not one (give the log files themselves)", p.display());
            }
        }
    }
    let files = args.logs.iter().map(|p| p.display().to_string()).collect();
    stop_on_signals()?;
    let telemetry = Telemetry::start(&cfg, Source::Log { files }, None)?;
    let url = telemetry.url();
    println!("collscope: serving {url}/metrics {url}/api/v1/snapshot {url}/api/v1/events {url}/healthz");
    std::io::stdout().flush()?;
    let poll = Duration::from_millis(args.poll_ms);
    if args.follow {
        follow(&telemetry, &args.logs, poll)?;
    } else {
        let snap = collscope_logreader::read_paths(&args.logs, Options::default()).context("reading the logs")?;
        telemetry.with_state(|s| s.ingest(snap));
        while !STOP.load(Ordering::Relaxed) {
            std::thread::sleep(poll);
        }
    }
    telemetry.shutdown()?;
    Ok(())
}

/// One followed file: its tail and its text so far, one part per file the path has named.
struct Followed {
    tail: Tail,
    parts: Vec<Vec<u8>>,
}

impl Followed {
    fn take(&mut self) -> anyhow::Result<bool> {
        let polled = self.tail.poll().with_context(|| format!("following '{}'", self.tail.path().display()))?;
        let changed = polled.restarted || !polled.lines.is_empty() || !polled.lines_before.is_empty();
        if let Some(last) = self.parts.last_mut() {
            last.extend_from_slice(&polled.lines_before);
        }
        if polled.restarted {
            self.parts.push(Vec::new());
        }
        if let Some(last) = self.parts.last_mut() {
            last.extend_from_slice(&polled.lines);
        }
        Ok(changed)
    }
}

/// Reads everything followed so far as one job. Parts before a rotation are named `PATH (rotated N)`.
fn read_all(followed: &[Followed]) -> Snapshot {
    let mut reader = Reader::new(Options::default());
    for f in followed {
        let path = f.tail.path().display().to_string();
        let last = f.parts.len() - 1;
        for (i, part) in f.parts.iter().enumerate() {
            let name = if i == last { path.clone() } else { format!("{path} (rotated {})", last - i) };
            reader.read_bytes(&name, part);
        }
    }
    reader.finish()
}

/// Drops the oldest rotated-away part while the text kept is over `FOLLOW_MEMORY`; true when it dropped any.
fn forget_oldest(followed: &mut [Followed]) -> bool {
    let mut dropped = false;
    while followed.iter().flat_map(|f| &f.parts).map(Vec::len).sum::<usize>() > FOLLOW_MEMORY {
        let Some(f) = followed.iter_mut().filter(|f| f.parts.len() > 1).max_by_key(|f| f.parts[0].len()) else {
            break;
        };
        f.parts.remove(0);
        dropped = true;
    }
    dropped
}

/// Polls the files and re-reads the job whenever they changed, at most as often as reading takes four times
/// over, so a large log does not keep a core busy.
fn follow(telemetry: &Telemetry, paths: &[PathBuf], poll: Duration) -> anyhow::Result<()> {
    let mut followed: Vec<Followed> =
        paths.iter().map(|p| Followed { tail: Tail::new(p), parts: vec![Vec::new()] }).collect();
    let mut pending = false;
    let mut next_read = Instant::now();
    while !STOP.load(Ordering::Relaxed) {
        for f in &mut followed {
            pending |= f.take()?;
        }
        if pending && Instant::now() >= next_read {
            pending = false;
            let rebase = forget_oldest(&mut followed);
            let started = Instant::now();
            let snap = read_all(&followed);
            next_read = Instant::now() + started.elapsed() * 4;
            telemetry.with_state(|s| if rebase { s.rebase(snap) } else { s.ingest(snap) });
        }
        std::thread::sleep(poll);
    }
    Ok(())
}
