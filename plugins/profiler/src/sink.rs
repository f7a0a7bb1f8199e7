//! The sinks the plugin can hand its output to: a JSON-lines file (`COLLSCOPE_PROFILER_DUMP`) here, and
//! collscope's telemetry (`feed`).

use crate::output::Sink;
use collscope_debug::file::{self, FileError, FileKind};
use collscope_model::Event;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Appends each output as one JSON object a line (the shape of `/api/v1/events`). Several processes may append
/// to one file: each drain's lines reach the file in whole writes of an `O_APPEND` descriptor.
pub struct JsonlSink {
    path: PathBuf,
    file: BufWriter<File>,
    failed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("COLLSCOPE_PROFILER_DUMP: cannot open '{path}' for appending: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("COLLSCOPE_PROFILER_DUMP: '{path}' is {what}: expected a regular file (or none, to create one)")]
    NotRegular { path: PathBuf, what: FileKind },
}

impl JsonlSink {
    /// Opens (or creates, 0600) `path` for appending on NCCL's thread, so never waiting: opened non-blocking (a
    /// FIFO without a reader would hold `init` forever) and without following a link (another user's link in
    /// a shared folder would make this process write where they chose), then taken only if a regular file.
    pub fn open(path: &Path) -> Result<Self, DumpError> {
        let mut opts = OpenOptions::new();
        opts.create(true).append(true).mode(0o600);
        let file = file::open_regular_with(path, &mut opts, false).map_err(|e| match e {
            FileError::NotRegular(what) => DumpError::NotRegular { path: path.to_path_buf(), what },
            FileError::Io(source) => DumpError::Io { path: path.to_path_buf(), source },
            other => DumpError::Io { path: path.to_path_buf(), source: std::io::Error::other(other) },
        })?;
        Ok(JsonlSink { path: path.to_path_buf(), file: BufWriter::with_capacity(1 << 16, file), failed: false })
    }

    fn write(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            // NCCL must not notice: the first failure is reported once and the file is left alone.
            if !self.failed {
                collscope_debug::eprintln_whole!(
                    "collscope profiler: writing {}: {e}; no more events are written there",
                    self.path.display()
                );
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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::{fcntl, FcntlArg};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_or_a_link_is_refused_at_once_naming_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("events.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        let e = JsonlSink::open(&fifo).err().expect("a FIFO is no dump file").to_string();
        assert!(started.elapsed() < Duration::from_secs(5), "open waited {:?}", started.elapsed());
        assert!(e.contains("COLLSCOPE_PROFILER_DUMP") && e.contains("events.fifo' is a FIFO"), "{e}");
        // With a reader waiting the open goes through; the opened file is then refused for what it is.
        let reader = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        let e = JsonlSink::open(&fifo).err().expect("a FIFO is no dump file").to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        drop(reader);
        let target = dir.path().join("target.jsonl");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = JsonlSink::open(&link).err().expect("a link is not followed").to_string();
        assert!(e.contains("link.jsonl' is a symbolic link"), "{e}");
        assert!(!target.exists(), "nothing created through the link");
    }

    #[test]
    fn a_regular_file_is_appended_to_blocking_and_a_new_one_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.jsonl");
        let mut sink = JsonlSink::open(&path).unwrap();
        let flags = fcntl(sink.file.get_ref().as_raw_fd(), FcntlArg::F_GETFL).unwrap();
        assert_eq!(flags & libc::O_NONBLOCK, 0, "O_NONBLOCK cleared");
        assert_ne!(flags & libc::O_APPEND, 0, "O_APPEND kept");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        sink.deliver(Event::Endpoints(Vec::new()));
        sink.flush();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    }
}
