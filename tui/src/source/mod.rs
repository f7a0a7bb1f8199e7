//! Where the TUI's facts come from. Each source runs on its own thread and sends [`Update`]s; none blocks the UI.
//! - `--log`: real NCCL logs through the log reader, re-read as lines arrive with `--follow`;
//! - `--connect`: a running collscope (`/api/v1/snapshot`, then the `/api/v1/events` stream), and beside it the
//!   whole job (`/api/v1/job`), both optionally recorded;
//! - `--replay`: a recording of that stream, played back at its own pace;
//! - `--preset`/`--topo-file`: a machine modelled by NCCL's model, one snapshot the caller computed;
//! - `--prometheus`: the whole job as the caller reads it (from Prometheus) every few seconds, no rank's snapshot.
//! - a folder of rank dumps: the job view the caller built from them, sent once.

mod connect;
mod job;
mod log;
mod recording;
mod replay;
mod sse;
mod stream;

pub use job::{request_dumps, JobFetch, Shown};
pub use recording::{RecordedEvent, Recorder};
pub use stream::{decode, Decoded};

use crate::app::ReplayCmd;
use crate::live::{LinkState, Update};
use collscope_model::{JobView, Snapshot, Source};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    Log {
        paths: Vec<PathBuf>,
        follow: bool,
    },
    Connect {
        url: String,
        record: Option<PathBuf>,
    },
    Replay {
        file: PathBuf,
    },
    /// A modelled machine (`Source::Model`): a static snapshot, sent once.
    Model {
        snapshot: Box<Snapshot>,
    },
    /// The whole job read by `fetch` (the binary reads Prometheus), said `via` in the title bar.
    Job {
        via: String,
        fetch: JobFetch,
    },
    /// A folder of rank dumps (`COLLSCOPE_DUMP_DIR`), analysed by the binary: the job view built from them (the
    /// rank strip, the job's findings) and the first rank's snapshot, sent once.
    Dumps {
        dir: PathBuf,
        snapshot: Box<Snapshot>,
        job: Box<JobView>,
    },
}

impl SourceSpec {
    /// A short name for the title bar.
    pub fn label(&self) -> String {
        match self {
            SourceSpec::Log { paths, .. } => {
                paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            }
            SourceSpec::Connect { url, .. } => url.clone(),
            SourceSpec::Replay { file } => format!("replay {}", file.display()),
            SourceSpec::Model { snapshot } => match &snapshot.source {
                Source::Model { topology } => format!("model {topology}"),
                _ => "model".into(),
            },
            SourceSpec::Job { via, .. } => via.clone(),
            SourceSpec::Dumps { dir, .. } => format!("dumps {}", dir.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: collscope_debug::file::FileError },
    #[error("cannot write the recording {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error(
        "{path}:{line}: not a recorded event: {reason} (expected one JSON object per line with t, event and data)"
    )]
    Recording { path: String, line: usize, reason: String },
    #[error("the recording {path} stopped at its cap of {cap_mib} MiB (it replays up to there); the session goes on unrecorded")]
    RecordingFull { path: String, cap_mib: u64 },
    #[error("'{url}' is not a collscope URL: expected HOST:PORT or http://HOST:PORT")]
    Url { url: String },
    #[error(transparent)]
    Log(#[from] collscope_logreader::ReadError),
    #[error("event '{event}' from the source is not valid: {reason}")]
    Event { event: String, reason: String },
}

fn read_logs(paths: &[PathBuf]) -> Result<Snapshot, collscope_logreader::ReadError> {
    collscope_logreader::read_paths(paths, collscope_logreader::Options::default())
}

/// Checks the source can start (files exist, URL is well-formed) and starts its thread. The thread ends when
/// `stop` is set or the receiving side hangs up.
/// `control` steers a replay (pause, seek); other sources ignore it. A `--connect` source also starts the thread
/// that follows the whole job and the rank `shown`, whose handle comes back: it closes the recording.
pub fn spawn(
    spec: SourceSpec,
    tx: Sender<Update>,
    control: Receiver<ReplayCmd>,
    stop: Arc<AtomicBool>,
    shown: Shown,
) -> Result<JoinHandle<()>, SourceError> {
    match spec {
        SourceSpec::Log { paths, follow } => {
            // Read once here so a missing or unreadable log is reported before the screen opens.
            let known = log::stamp(&paths).ok();
            let first = read_logs(&paths)?;
            Ok(std::thread::spawn(move || {
                if tx.send(Update::Snapshot(Box::new(first))).is_ok() {
                    let read = |p: &[PathBuf]| read_logs(p).map_err(|e| e.to_string());
                    log::run(paths, follow, read, known, &tx, &stop)
                }
            }))
        }
        SourceSpec::Connect { url, record } => {
            let base = connect::base_url(&url)?;
            let recorder = record.map(|p| Recorder::create(&p).map(|r| Arc::new(Mutex::new(r)))).transpose()?;
            let (job_base, job_tx, job_stop, job_recorder) = (base.clone(), tx.clone(), stop.clone(), recorder.clone());
            // The events stream's thread may wait long on a quiet stream; the job's ends within 50 ms of `stop`
            // (or one fetch) and closes the recording: its handle is the one to wait for.
            std::thread::spawn(move || connect::run(&base, recorder.as_ref(), &tx, &stop));
            Ok(std::thread::spawn(move || job::run(&job_base, &shown, job_recorder.as_ref(), &job_tx, &job_stop)))
        }
        SourceSpec::Replay { file } => {
            let timeline = replay::Timeline::decode(recording::read(&file)?)?;
            Ok(std::thread::spawn(move || replay::run(timeline, &tx, &control, &stop)))
        }
        SourceSpec::Model { snapshot } => Ok(std::thread::spawn(move || {
            if tx.send(Update::Snapshot(snapshot)).is_ok() {
                let _ = tx.send(Update::Link(LinkState::Ended));
            }
        })),
        SourceSpec::Job { fetch, .. } => Ok(std::thread::spawn(move || job::follow_fetch(&fetch, &tx, &stop))),
        SourceSpec::Dumps { snapshot, job, .. } => Ok(std::thread::spawn(move || {
            if tx.send(Update::Snapshot(snapshot)).is_ok() && tx.send(Update::Job(job)).is_ok() {
                let _ = tx.send(Update::Link(LinkState::Ended));
            }
        })),
    }
}
