//! collscope's log reader: real `NCCL_DEBUG=INFO` logs (NCCL 2.4 to 2.29, any launcher, one file per rank or all
//! ranks interleaved, plain or gzip) into [`collscope_core::model::Snapshot`], with a diagnosis.
//!
//! ```no_run
//! let snap = collscope_logreader::read_paths(&["nccl.log".into()], collscope_logreader::Options::default())?;
//! println!("{:?} on {:?} nodes", snap.nccl_version, snap.nnodes);
//! # Ok::<(), collscope_logreader::ReadError>(())
//! ```

pub mod classify;
pub mod envelope;
mod infer;
pub mod input;
mod job;
pub mod message;
pub mod rules;
mod summary;

pub use summary::{gdrdma, transports_seen};

use collscope_core::model::{Snapshot, Source};
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open log '{path}': {source}")]
    Open { path: String, source: std::io::Error },
    #[error("cannot read log '{path}' (line {line}): {source}")]
    Read { path: String, line: u64, source: std::io::Error },
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep every NCCL line that no parser understood in `unparsed_nccl_lines` (otherwise only counted).
    pub strict: bool,
}

/// A streaming reader: feed it inputs one after the other, then take the snapshot.
pub struct Reader {
    job: job::Job,
}

impl Reader {
    pub fn new(opts: Options) -> Self {
        Reader { job: job::Job::new(opts.strict) }
    }

    /// Reads one input to its end, line by line.
    pub fn read(&mut self, name: &str, input: impl Read) -> Result<(), ReadError> {
        let file = self.job.add_file(name);
        let mut lineno = 0;
        let job = &mut self.job;
        input::for_each_line(input, |line, cut| {
            lineno += 1;
            job.line(file, lineno, line, cut);
        })
        .map_err(|source| ReadError::Read { path: name.to_string(), line: lineno, source })
    }

    /// Reads an in-memory input.
    pub fn read_bytes(&mut self, name: &str, bytes: &[u8]) {
        // Reading from a slice cannot fail.
        let _ = self.read(name, bytes);
    }

    /// Concludes: inferred facts, findings, and the snapshot.
    pub fn finish(mut self) -> Snapshot {
        self.job.finish_lines();
        infer::infer(&mut self.job);
        let findings = rules::diagnose(&self.job);
        let mut job = self.job;
        job.snap.findings = findings;
        job.snap.source = Source::Log { files: job.files.clone() };
        job.snap.log = Some(job.facts);
        job.snap
    }
}

/// Reads files, directories (every file under them) and `-` (stdin) as one job.
pub fn read_paths(paths: &[PathBuf], opts: Options) -> Result<Snapshot, ReadError> {
    let mut reader = Reader::new(opts);
    for p in input::expand(paths)? {
        let name = p.display().to_string();
        reader.read(&name, input::open(&p)?)?;
    }
    Ok(reader.finish())
}
