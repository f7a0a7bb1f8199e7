//! `--record FILE` / `--replay FILE`: the events stream as JSON lines `{"t": seconds, "event": name, "data": ...}`,
//! `t` counted from the start of the recording, gzip-compressed (the stream repeats its keys and names, so it
//! compresses about tenfold) and bounded ([`MAX_BYTES`] on disk: past it the recording stops and says so). Beside
//! the stream's events it holds the snapshots the source fetched, some of them keyframes taken every
//! [`super::connect::KEYFRAME_EVERY`] to seek from, and the job view every second. A recording written before
//! compression (plain JSON lines) still replays.

use super::SourceError;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most a recording takes on disk. At the demo's pace (4 ranks) a minute takes well under 1 MiB compressed,
/// so this holds hours of a job; past it the recording ends (the TUI says so) and the session goes on.
pub(super) const MAX_BYTES: u64 = 256 << 20;
/// How often what was recorded reaches the file: a recording cut short by a crash loses at most this much.
/// (Flushing the compressor after every event would cost most of what it saves.)
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// gzip's magic bytes (RFC 1952, 2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEvent {
    pub t: f64,
    pub event: String,
    pub data: serde_json::Value,
}

/// A writer that counts the bytes that went through it: the size of the compressed file.
struct Counted {
    file: File,
    bytes: u64,
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

pub struct Recorder {
    path: String,
    /// `None` once the recording reached its cap (or failed): nothing more is written.
    out: Option<GzEncoder<Counted>>,
    start: Instant,
    flushed: Instant,
    cap: u64,
}

/// One recording written by several threads (the events stream and the job view).
pub(super) type Shared = Arc<Mutex<Recorder>>;

impl Recorder {
    pub fn create(path: &Path) -> Result<Self, SourceError> {
        Recorder::with_cap(path, MAX_BYTES)
    }

    /// A recording that ends once the file holds `cap` bytes.
    pub fn with_cap(path: &Path, cap: u64) -> Result<Self, SourceError> {
        let file =
            File::create(path).map_err(|source| SourceError::Write { path: path.display().to_string(), source })?;
        let out = GzEncoder::new(Counted { file, bytes: 0 }, Compression::default());
        let now = Instant::now();
        Ok(Recorder { path: path.display().to_string(), out: Some(out), start: now, flushed: now, cap })
    }

    /// Appends one event; what was recorded reaches the file at most [`FLUSH_EVERY`] later (see [`flush_due`])
    /// and when the recorder is dropped. The event that takes the file past its cap is the last one:
    /// [`SourceError::RecordingFull`] says so once, and later events are not recorded.
    pub fn record(&mut self, event: &str, data: serde_json::Value) -> Result<(), SourceError> {
        let Some(out) = self.out.as_mut() else { return Ok(()) };
        let entry = RecordedEvent { t: self.start.elapsed().as_secs_f64(), event: event.to_string(), data };
        let mut line = serde_json::to_string(&entry)
            .map_err(|e| SourceError::Event { event: event.to_string(), reason: e.to_string() })?;
        line.push('\n');
        if let Err(source) = out.write_all(line.as_bytes()) {
            self.out = None;
            return Err(SourceError::Write { path: self.path.clone(), source });
        }
        self.flush_if_due()?;
        if self.out.as_ref().is_some_and(|out| out.get_ref().bytes >= self.cap) {
            self.finish()?;
            return Err(SourceError::RecordingFull { path: self.path.clone(), cap_mib: self.cap >> 20 });
        }
        Ok(())
    }

    /// Sends what the compressor holds to the file, once the last time is [`FLUSH_EVERY`] ago.
    fn flush_if_due(&mut self) -> Result<(), SourceError> {
        let Some(out) = self.out.as_mut().filter(|_| self.flushed.elapsed() >= FLUSH_EVERY) else { return Ok(()) };
        self.flushed = Instant::now();
        if let Err(source) = out.flush() {
            self.out = None;
            return Err(SourceError::Write { path: self.path.clone(), source });
        }
        Ok(())
    }

    /// Ends the compressed stream, so the file is whole.
    fn finish(&mut self) -> Result<(), SourceError> {
        match self.out.take().map(|out| out.finish()) {
            Some(Err(source)) => Err(SourceError::Write { path: self.path.clone(), source }),
            _ => Ok(()),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Nobody is left to tell: a recording that cannot be ended is read as one cut short.
        let _ = self.finish();
    }
}

/// Records into a shared recorder; a poisoned lock (a panic while recording) leaves the recording as it is.
pub(super) fn record(recorder: &Shared, event: &str, data: serde_json::Value) -> Result<(), SourceError> {
    match recorder.lock() {
        Ok(mut r) => r.record(event, data),
        Err(_) => Ok(()),
    }
}

/// Flushes a shared recorder if due: called every second (by the job's thread), so a quiet stream's last events
/// reach the file too, not only when the next one comes.
pub(super) fn flush_due(recorder: &Shared) -> Result<(), SourceError> {
    match recorder.lock() {
        Ok(mut r) => r.flush_if_due(),
        Err(_) => Ok(()),
    }
}

/// Ends a shared recording's compressed stream (later events are not recorded): the session is over.
pub(super) fn close(recorder: &Shared) {
    if let Ok(mut r) = recorder.lock() {
        // Nobody is left to tell: a recording that cannot be ended is read as one cut short.
        let _ = r.finish();
    }
}

/// The most text a recording may hold once decompressed: a whole one at [`MAX_BYTES`] compresses about tenfold,
/// and a hostile file (a gzip bomb) must not take all memory.
const MAX_TEXT_BYTES: u64 = MAX_BYTES * 16;

pub(super) fn read(path: &Path) -> Result<Vec<RecordedEvent>, SourceError> {
    read_at_most(path, MAX_TEXT_BYTES)
}

fn read_at_most(path: &Path, max_text: u64) -> Result<Vec<RecordedEvent>, SourceError> {
    let shown = path.display().to_string();
    let read_error = |source: std::io::Error| SourceError::Read { path: shown.clone(), source: source.into() };
    // A recording is a file: a device or FIFO here would be read for ever.
    let mut file = BufReader::new(
        collscope_debug::file::open_regular(path)
            .map_err(|source| SourceError::Read { path: shown.clone(), source })?,
    );
    let compressed = file.fill_buf().map_err(read_error)?.starts_with(&GZIP_MAGIC);
    // A recording from before compression is the same lines, uncompressed.
    let text: Box<dyn BufRead> = if compressed {
        Box::new(BufReader::new(MultiGzDecoder::new(file).take(max_text)))
    } else {
        Box::new(file.take(max_text))
    };
    let (mut events, mut read) = (Vec::new(), 0u64);
    for (i, line) in text.lines().enumerate() {
        let line = match line {
            Ok(line) => line,
            // A recording cut short (its process killed): what reached the file replays, but for the last line,
            // which may be cut.
            Err(e) if compressed && e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(read_error(e)),
        };
        read += line.len() as u64 + 1;
        if read >= max_text {
            return Err(SourceError::Recording {
                path: shown.clone(),
                line: i + 1,
                reason: format!(
                    "the events pass {} MiB (a recording collscope writes is at most {} MiB compressed); not read further",
                    max_text >> 20,
                    MAX_BYTES >> 20
                ),
            });
        }
        if line.trim().is_empty() {
            continue;
        }
        let event: RecordedEvent = serde_json::from_str(&line).map_err(|e| SourceError::Recording {
            path: shown.clone(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        events.push(event);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("collscope-tui-rec-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_recording_reads_back_and_a_bad_line_is_named() {
        let dir = dir("back");
        let path = dir.join("r.jsonl.gz");
        let mut r = Recorder::create(&path).unwrap();
        r.record("snapshot", serde_json::json!({"a": 1})).unwrap();
        r.record("op", serde_json::json!([1, 2])).unwrap();
        drop(r);
        assert!(std::fs::read(&path).unwrap().starts_with(&GZIP_MAGIC), "the file is gzip");
        let events = read(&path).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].event, "op");
        assert!(events[0].t <= events[1].t);
        // A recording from before compression: plain lines, still read, and a bad one named.
        std::fs::write(&path, "{\"t\":0,\"event\":\"x\",\"data\":1}\nnot json\n").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("r.jsonl.gz:2: not a recorded event"), "{err}");
        std::fs::write(&path, "{\"t\":0,\"event\":\"x\",\"data\":1}\n").unwrap();
        assert_eq!(read(&path).unwrap()[0].event, "x");
        // Past the most text a recording may hold (a gzip bomb), reading stops with why.
        let mut r = Recorder::create(&path).unwrap();
        for _ in 0..100 {
            r.record("op", serde_json::json!("x".repeat(1000))).unwrap();
        }
        drop(r);
        let err = read_at_most(&path, 50_000).unwrap_err().to_string();
        assert!(err.contains("the events pass 0 MiB") && err.contains("not read further"), "{err}");
        assert_eq!(read_at_most(&path, 1 << 20).unwrap().len(), 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A repetitive stream (what a job's calls look like) shrinks several times over; past the cap the event
    /// that crossed it is the last, the error says so once, and the file is a whole gzip stream. The cap is
    /// checked on what the compressor wrote, so the file may pass it by what the compressor held then.
    #[test]
    fn a_recording_is_compressed_and_stops_at_its_cap() {
        let dir = dir("cap");
        let path = dir.join("r.gz");
        let event = |i: u64| serde_json::json!({"kind": "op_completed", "data": {"seq": i, "coll": "AllReduce", "bytes": 4096}});
        let cap = 256 << 10;
        let mut r = Recorder::with_cap(&path, cap).unwrap();
        let (mut kept, mut plain) = (0u64, 0usize);
        let full = loop {
            let line = serde_json::to_string(&event(kept)).unwrap().len();
            match r.record("op_completed", event(kept)) {
                Ok(()) => {}
                Err(e) => break e,
            }
            kept += 1;
            plain += line;
            assert!(kept < 10_000_000, "the cap never came");
        };
        assert!(matches!(full, SourceError::RecordingFull { .. }), "{full}");
        assert!(full.to_string().contains("r.gz") && full.to_string().contains("stopped"), "{full}");
        r.record("op_completed", event(kept + 1)).unwrap();
        drop(r);
        let size = std::fs::metadata(&path).unwrap().len();
        assert!((cap..cap + (64 << 10)).contains(&size), "{size} bytes on disk");
        assert!(plain as u64 > 5 * size, "{plain} bytes of JSON took {size} on disk");
        let events = read(&path).unwrap();
        assert_eq!(events.len() as u64, kept + 1, "every event up to the one that crossed the cap");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A recorder that never ended its stream (its process killed): what it flushed replays, the last events
    /// too once a second went by with no event after them (the job's thread flushes every second).
    #[test]
    fn a_recording_cut_short_replays_what_reached_the_file() {
        let dir = dir("cut");
        let path = dir.join("r.gz");
        let mut r = Recorder::create(&path).unwrap();
        r.record("a", serde_json::json!(1)).unwrap();
        r.flushed -= FLUSH_EVERY;
        r.record("b", serde_json::json!(2)).unwrap();
        r.record("c", serde_json::json!(3)).unwrap();
        let names = || read(&path).unwrap().into_iter().map(|e| e.event).collect::<Vec<_>>();
        assert_eq!(names(), ["a", "b"], "c waits in the compressor");
        r.flushed -= FLUSH_EVERY;
        let shared = Arc::new(Mutex::new(r));
        flush_due(&shared).unwrap();
        assert_eq!(names(), ["a", "b", "c"]);
        // Killed now: the stream never gets its end.
        std::mem::forget(shared);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
