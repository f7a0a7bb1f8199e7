//! `--record FILE` / `--replay FILE`: the events stream as JSON lines `{"t": seconds, "event": name, "data": ...}`,
//! `t` counted from the start of the recording.

use super::SourceError;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEvent {
    pub t: f64,
    pub event: String,
    pub data: serde_json::Value,
}

pub struct Recorder {
    path: String,
    out: BufWriter<File>,
    start: Instant,
}

impl Recorder {
    pub fn create(path: &Path) -> Result<Self, SourceError> {
        let file =
            File::create(path).map_err(|source| SourceError::Write { path: path.display().to_string(), source })?;
        Ok(Recorder { path: path.display().to_string(), out: BufWriter::new(file), start: Instant::now() })
    }

    /// Appends one event and flushes, so a recording cut short by a crash is still readable.
    pub fn record(&mut self, event: &str, data: serde_json::Value) -> Result<(), SourceError> {
        let entry = RecordedEvent { t: self.start.elapsed().as_secs_f64(), event: event.to_string(), data };
        let mut line = serde_json::to_string(&entry)
            .map_err(|e| SourceError::Event { event: event.to_string(), reason: e.to_string() })?;
        line.push('\n');
        self.out
            .write_all(line.as_bytes())
            .and_then(|_| self.out.flush())
            .map_err(|source| SourceError::Write { path: self.path.clone(), source })
    }
}

pub(super) fn read(path: &Path) -> Result<Vec<RecordedEvent>, SourceError> {
    let shown = path.display().to_string();
    // A recording is a file: a device or FIFO here would be read for ever.
    let file = collscope_debug::file::open_regular(path)
        .map_err(|source| SourceError::Read { path: shown.clone(), source })?;
    let mut events = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| SourceError::Read { path: shown.clone(), source: e.into() })?;
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

    #[test]
    fn a_recording_reads_back_and_a_bad_line_is_named() {
        let dir = std::env::temp_dir().join(format!("collscope-tui-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let mut r = Recorder::create(&path).unwrap();
        r.record("snapshot", serde_json::json!({"a": 1})).unwrap();
        r.record("op", serde_json::json!([1, 2])).unwrap();
        drop(r);
        let events = read(&path).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].event, "op");
        assert!(events[0].t <= events[1].t);
        std::fs::write(&path, "{\"t\":0,\"event\":\"x\",\"data\":1}\nnot json\n").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("r.jsonl:2: not a recorded event"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
