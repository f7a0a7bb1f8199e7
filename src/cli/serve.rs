//! `collscope serve --log PATH... [--follow]`: the telemetry endpoints (`/metrics`, `/api/v1/snapshot`,
//! `/api/v1/events`, `/healthz`) for a job on real NCCL, from its `NCCL_DEBUG=INFO` logs. With `--follow` the
//! logs are read as they grow, like `tail -F`, across rotation.

use anyhow::{bail, Context};
use clap::Args;
use collscope_debug::env::Env;
use collscope_debug::file::{FileError, FileKind};
use collscope_logreader::{Incoming, Options, Reader};
use collscope_model::{routes, Source};
use collscope_telemetry::tail::{Piece, Tail};
use collscope_telemetry::{LocalRank, Telemetry, TelemetryConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub(crate) struct ServeArgs {
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

/// The most a follower reads of one file before it looks at the time, the signals and the snapshot again.
const POLL_BUDGET: u64 = 16 << 20;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM end the serving loop, so the last OTLP push still happens.
fn stop_on_signals() -> anyhow::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }.with_context(|| format!("installing a {sig} handler"))?;
    }
    Ok(())
}

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut env = Env::from_process();
    if let Some(addr) = &args.metrics_addr {
        env = env.with("COLLSCOPE_METRICS_ADDR", addr);
    }
    let cfg = TelemetryConfig::from_env(&env, LocalRank::default(), collscope_debug::params::process_var)?;
    if args.follow {
        for p in &args.logs {
            if p.as_os_str() == "-" {
                bail!("--follow reads files: '-' is not one (give the log files themselves)");
            }
            // A path not there yet is followed until it appears.
            if let Some(kind) = std::fs::metadata(p).ok().and_then(|m| FileKind::of(m.file_type())) {
                bail!("--follow reads files: '{}' is {kind} (give the log files themselves)", p.display());
            }
            if is_gzip(p) {
                bail!("--follow reads plain text: '{}' is gzip-compressed (serve it without --follow)", p.display());
            }
        }
    }
    // Read before the signal handlers go in: until the server runs, SIGINT and SIGTERM end the process at once,
    // however long (or never-ending) the input.
    let read = if args.follow {
        None
    } else {
        let snap = collscope_logreader::read_paths(&args.logs, Options::default()).context("reading the logs")?;
        collscope_logreader::expect_nccl_lines(&snap, &args.logs)?;
        Some(snap)
    };
    let files = args.logs.iter().map(|p| p.display().to_string()).collect();
    stop_on_signals()?;
    let telemetry = Telemetry::start(&cfg, Source::Log { files }, None)?;
    if let Some(snap) = read {
        telemetry.with_state(|s| s.ingest(snap));
    }
    let url = telemetry.url();
    let (metrics, snapshot, events, healthz) = (routes::METRICS, routes::SNAPSHOT, routes::EVENTS, routes::HEALTHZ);
    println!("collscope: serving {url}{metrics} {url}{snapshot} {url}{events} {url}{healthz}");
    std::io::stdout().flush()?;
    let poll = Duration::from_millis(args.poll_ms);
    if args.follow {
        follow(&telemetry, &args.logs, poll)?;
    } else {
        while !STOP.load(Ordering::Relaxed) {
            std::thread::sleep(poll);
        }
    }
    telemetry.shutdown()?;
    Ok(())
}

/// Whether `path` exists and starts with gzip's magic bytes.
fn is_gzip(path: &std::path::Path) -> bool {
    let mut magic = [0u8; 2];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok()
        && magic == [0x1f, 0x8b]
}

/// One followed path: its tail, the file it names now as the reader's input, how often it restarted, and what it
/// names when that is no file (a device or FIFO put in its place), until it names a file again.
struct Followed {
    tail: Tail,
    input: Option<Incoming>,
    restarts: u32,
    not_a_file: Option<FileKind>,
}

impl Followed {
    /// Feeds what the file gained to `reader`: true when anything changed, and whether the budget ran out. A path
    /// that names a device or FIFO now is waited on as a missing file is, and said once (stderr and a warning of
    /// class `input`): reading it could block or never end, and exiting would end the server.
    fn take(&mut self, reader: &mut Reader) -> anyhow::Result<(bool, bool)> {
        let path = self.tail.path().display().to_string();
        let mut changed = false;
        let polled = self.tail.poll(POLL_BUDGET, |piece| {
            changed = true;
            match piece {
                Piece::Bytes(bytes) => {
                    // After a rotation or truncation the path names new text, read as another file.
                    let input = self.input.get_or_insert_with(|| match self.restarts {
                        0 => reader.incoming(&path),
                        n => reader.incoming(&format!("{path} (rotation {n})")),
                    });
                    reader.feed(input, bytes);
                }
                Piece::Restart => {
                    if let Some(input) = self.input.take() {
                        reader.end(input);
                    }
                    self.restarts += 1;
                }
            }
        });
        let read = match polled {
            Err(FileError::NotRegular(kind)) => {
                if self.not_a_file.replace(kind) != Some(kind) {
                    let text = format!(
                        "following '{path}': it names {kind} now, not a log file; waiting for it to name a file \
                         again (what was read stays)"
                    );
                    eprintln!("collscope: warning: {text}");
                    reader.input_warning(text);
                    changed = true;
                }
                0
            }
            polled => {
                self.not_a_file = None;
                polled.with_context(|| format!("following '{path}'"))?
            }
        };
        Ok((changed, read == POLL_BUDGET))
    }
}

/// Reads the files as they grow into one model (state, not text: memory stays bounded however much is
/// followed) and publishes its snapshot whenever they changed, at most as often as taking it takes four times
/// over, so a large model does not keep a core busy.
fn follow(telemetry: &Telemetry, paths: &[PathBuf], poll: Duration) -> anyhow::Result<()> {
    let mut reader = Reader::new(Options::default());
    let mut followed: Vec<Followed> =
        paths.iter().map(|p| Followed { tail: Tail::new(p), input: None, restarts: 0, not_a_file: None }).collect();
    let mut pending = false;
    let mut next_read = Instant::now();
    while !STOP.load(Ordering::Relaxed) {
        let mut behind = false;
        for f in &mut followed {
            let (changed, more) = f.take(&mut reader)?;
            pending |= changed;
            behind |= more;
        }
        if pending && Instant::now() >= next_read {
            pending = false;
            let started = Instant::now();
            let snap = reader.snapshot();
            next_read = Instant::now() + started.elapsed() * 4;
            telemetry.with_state(|s| s.ingest(snap));
        }
        if !behind {
            std::thread::sleep(poll);
        }
    }
    Ok(())
}
