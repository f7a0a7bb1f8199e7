//! The sinks the plugin can hand its output to: a JSON-lines file (`COLLSCOPE_PROFILER_DUMP`) here, and
//! collscope's telemetry (`feed`).

use crate::output::Sink;
use collscope_model::Event;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Appends each output as one JSON object a line (the shape of `/api/v1/events`). Several processes may append
/// to one file: each drain's lines reach the file in whole writes of an `O_APPEND` descriptor.
pub struct JsonlSink {
    path: PathBuf,
    file: BufWriter<File>,
    failed: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("COLLSCOPE_PROFILER_DUMP: cannot open '{path}' for appending: {source}")]
pub struct DumpError {
    path: PathBuf,
    source: std::io::Error,
}

impl JsonlSink {
    pub fn open(path: &Path) -> Result<Self, DumpError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| DumpError { path: path.to_path_buf(), source })?;
        Ok(JsonlSink { path: path.to_path_buf(), file: BufWriter::with_capacity(1 << 16, file), failed: false })
    }

    fn write(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            // NCCL must not notice: the first failure is reported once and the file is left alone.
            if !self.failed {
                eprintln!("collscope profiler: writing {}: {e}; no more events are written there", self.path.display());
            }
            self.failed = true;
        }
    }
}

impl Sink for JsonlSink {
    fn deliver(&mut self, ev: Event) {
        if self.failed {
            return;
        }
        // A whole line at a time, so the buffer only ever holds (and writes) whole lines.
        let r = serde_json::to_vec(&ev).map_err(std::io::Error::from).and_then(|mut line| {
            line.push(b'\n');
            self.file.write_all(&line)
        });
        self.write(r);
    }

    fn flush(&mut self) {
        if !self.failed {
            let r = self.file.flush();
            self.write(r);
        }
    }
}
