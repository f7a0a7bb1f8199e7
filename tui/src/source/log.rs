//! `--log PATH [--follow]`: NCCL logs read through the log reader. With `--follow` the files are watched and
//! re-read when they grow; a file that disappears (rotated, deleted) shows as "disconnected" until it is back.

use crate::live::{LinkState, Update};
use collscope_model::Snapshot;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

/// How often followed files are checked.
const POLL: Duration = Duration::from_millis(250);
/// A re-read waits at least this many times its own duration, so following a huge log stays cheap.
const READ_COST_FACTOR: u32 = 4;

/// What a file looked like when last read: length and modification time.
pub(super) type Stamp = Vec<(u64, Option<SystemTime>)>;

pub(super) fn stamp(paths: &[PathBuf]) -> Result<Stamp, String> {
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p).map(|m| (m.len(), m.modified().ok())).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

/// Reads (or, when `known` says the files are as already read, first waits for a change) and, with `follow`,
/// keeps re-reading as the files change.
pub(super) fn run<R>(
    paths: Vec<PathBuf>,
    follow: bool,
    read: R,
    known: Option<Stamp>,
    tx: &Sender<Update>,
    stop: &AtomicBool,
) where
    R: Fn(&[PathBuf]) -> Result<Snapshot, String>,
{
    let mut last = known;
    if last.is_some() && tx.send(Update::Link(LinkState::Live { following: follow })).is_err() {
        return;
    }
    let mut earliest_next = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let update = match stamp(&paths) {
            Ok(st) if last.as_ref() != Some(&st) && now >= earliest_next => {
                let started = Instant::now();
                let result = read(&paths);
                earliest_next = Instant::now() + started.elapsed() * READ_COST_FACTOR;
                last = Some(st);
                match result {
                    Ok(snapshot) => {
                        if tx.send(Update::Snapshot(Box::new(snapshot))).is_err() {
                            return;
                        }
                        Some(LinkState::Live { following: follow })
                    }
                    Err(reason) => Some(LinkState::Disconnected { reason, retry_in_s: 1 }),
                }
            }
            Ok(_) => None,
            Err(reason) => {
                last = None;
                Some(LinkState::Disconnected { reason, retry_in_s: 1 })
            }
        };
        if let Some(link) = update {
            if tx.send(Update::Link(link)).is_err() {
                return;
            }
        }
        if !follow {
            let _ = tx.send(Update::Link(LinkState::Ended));
            return;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::Source;
    use std::sync::mpsc;

    /// A reader that counts the lines of the file, standing in for the log reader so the watching is tested
    /// on its own.
    fn count_lines(paths: &[PathBuf]) -> Result<Snapshot, String> {
        let text = std::fs::read_to_string(&paths[0]).map_err(|e| e.to_string())?;
        let mut s = Snapshot::new(Source::Log { files: vec![paths[0].display().to_string()] });
        s.nranks = Some(text.lines().count() as u32);
        Ok(s)
    }

    fn next_snapshot(rx: &mpsc::Receiver<Update>) -> Snapshot {
        loop {
            match rx.recv_timeout(Duration::from_secs(10)).expect("an update within 10 s") {
                Update::Snapshot(s) => return *s,
                _ => continue,
            }
        }
    }

    #[test]
    fn follow_rereads_on_growth_and_reports_a_vanished_file() {
        let dir = std::env::temp_dir().join(format!("collscope-tui-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.log");
        std::fs::write(&path, "one\n").unwrap();
        let (tx, rx) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (p, s) = (vec![path.clone()], stop.clone());
        let worker = std::thread::spawn(move || run(p, true, count_lines, None, &tx, &s));
        assert_eq!(next_snapshot(&rx).nranks, Some(1));
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        assert_eq!(next_snapshot(&rx).nranks, Some(3));
        std::fs::remove_file(&path).unwrap();
        loop {
            if let Update::Link(LinkState::Disconnected { reason, .. }) =
                rx.recv_timeout(Duration::from_secs(10)).unwrap()
            {
                assert!(reason.contains("a.log"), "{reason}");
                break;
            }
        }
        std::fs::write(&path, "back\n").unwrap();
        assert_eq!(next_snapshot(&rx).nranks, Some(1));
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_follow_it_reads_once_and_ends() {
        let dir = std::env::temp_dir().join(format!("collscope-tui-once-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.log");
        std::fs::write(&path, "x\ny\n").unwrap();
        let (tx, rx) = mpsc::channel();
        run(vec![path], false, count_lines, None, &tx, &AtomicBool::new(false));
        let got: Vec<Update> = rx.try_iter().collect();
        assert!(matches!(&got[0], Update::Snapshot(s) if s.nranks == Some(2)));
        assert_eq!(got[1], Update::Link(LinkState::Live { following: false }));
        assert_eq!(got[2], Update::Link(LinkState::Ended));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
