//! How the ranks of a real NCCL job find each other's telemetry without collscope's bootstrap: through a folder
//! (`COLLSCOPE_RENDEZVOUS_DIR`, default `collscope-rendezvous` in the temporary directory; on several hosts, a
//! shared filesystem). Each rank writes `<dir>/<comm hash>/rank-<rank>.json` (its [`RankEndpoint`]) at `init`,
//! whole (written aside, then renamed), and removes it once its server stops (after the last `finalize` and its
//! linger); the drain thread re-reads the folder now and then until every rank is known, the linger included.

use collscope_debug::file::read_small_string;
use collscope_model::RankEndpoint;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the folder is re-read while ranks are missing.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(1);
/// An endpoint file is a few hundred bytes; anything longer is not one.
const MAX_FILE: u64 = 4096;

/// The folder under the temporary directory when `COLLSCOPE_RENDEZVOUS_DIR` is not set.
pub(crate) fn default_dir() -> PathBuf {
    std::env::temp_dir().join("collscope-rendezvous")
}

/// One rank's place in one communicator's folder.
pub(crate) struct Rendezvous {
    dir: PathBuf,
    mine: PathBuf,
    nranks: u32,
    known: Vec<RankEndpoint>,
    next_read: Instant,
}

#[derive(Debug, thiserror::Error)]
#[error("COLLSCOPE_RENDEZVOUS_DIR: cannot write this rank's endpoint to '{path}': {source}")]
pub(crate) struct RendezvousError {
    path: PathBuf,
    source: std::io::Error,
}

impl Rendezvous {
    /// Writes `me` into `base/<comm_hash>/`.
    pub(crate) fn join(base: &Path, comm_hash: u64, nranks: u32, me: &RankEndpoint) -> Result<Self, RendezvousError> {
        let dir = base.join(format!("{comm_hash:016x}"));
        let mine = dir.join(format!("rank-{}.json", me.rank));
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RendezvousError { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(err(&dir))?;
        let tmp = dir.join(format!(".rank-{}.{}.tmp", me.rank, std::process::id()));
        let json = serde_json::to_vec(me).map_err(|e| err(&tmp)(e.into()))?;
        std::fs::write(&tmp, json).map_err(err(&tmp))?;
        std::fs::rename(&tmp, &mine).map_err(err(&mine))?;
        Ok(Rendezvous { dir, mine, nranks, known: vec![me.clone()], next_read: Instant::now() })
    }

    /// The communicator's size: the job view's reach.
    pub(crate) fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Every rank's endpoint, re-read when due (every [`READ_EVERY`] while ranks are missing); `Some` when the
    /// list changed.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<&[RankEndpoint]> {
        if now < self.next_read || self.known.len() >= self.nranks as usize {
            return None;
        }
        self.next_read = now + READ_EVERY;
        let mut found = self.read();
        found.sort_by_key(|e| e.rank);
        found.dedup_by_key(|e| e.rank);
        if found == self.known || found.is_empty() {
            return None;
        }
        self.known = found;
        Some(&self.known)
    }

    /// The endpoint files of ranks of this communicator; other files (another tool's, half-written ones) are
    /// not endpoints and are passed over.
    fn read(&self) -> Vec<RankEndpoint> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|e| {
                let path = e.ok()?.path();
                let name = path.file_name()?.to_str()?;
                if !(name.starts_with("rank-") && name.ends_with(".json")) {
                    return None;
                }
                let text = read_small_string(&path, MAX_FILE).ok()?;
                serde_json::from_str::<RankEndpoint>(&text).ok().filter(|e| e.rank < self.nranks)
            })
            .collect()
    }

    /// Removes this rank's file, and the folder once it is empty (another rank may still be in it).
    pub(crate) fn leave(&self) {
        let _ = std::fs::remove_file(&self.mine);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(rank: u32) -> RankEndpoint {
        RankEndpoint { rank, host: "h".into(), url: format!("http://127.0.0.1:{}", 9000 + rank) }
    }

    #[test]
    fn ranks_find_each_other_through_the_folder_and_leave_it_empty() {
        let base = tempfile::tempdir().unwrap();
        let mut r0 = Rendezvous::join(base.path(), 0xabc, 3, &endpoint(0)).unwrap();
        let t = Instant::now();
        assert_eq!(r0.poll(t), None, "alone: nothing new");
        let r2 = Rendezvous::join(base.path(), 0xabc, 3, &endpoint(2)).unwrap();
        let other_comm = Rendezvous::join(base.path(), 0xdef, 3, &endpoint(1)).unwrap();
        std::fs::write(base.path().join("0000000000000abc/rank-1.json"), "not json").unwrap();
        assert_eq!(r0.poll(t), None, "not due before a second has passed");
        let seen = r0.poll(t + READ_EVERY).unwrap().to_vec();
        assert_eq!(seen, [endpoint(0), endpoint(2)], "a file that is no endpoint is passed over");
        std::fs::remove_file(base.path().join("0000000000000abc/rank-1.json")).unwrap();
        let r1 = Rendezvous::join(base.path(), 0xabc, 3, &endpoint(1)).unwrap();
        assert_eq!(r0.poll(t + READ_EVERY * 2).map(<[_]>::len), Some(3));
        assert_eq!(r0.poll(t + READ_EVERY * 3), None, "every rank known: no more reads");
        for r in [&r0, &r1, &r2, &other_comm] {
            r.leave();
        }
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0, "every file and folder removed");
    }

    #[test]
    fn an_unwritable_folder_is_named() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("plain-file");
        std::fs::write(&file, "").unwrap();
        let e = Rendezvous::join(&file, 1, 2, &endpoint(0)).err().unwrap().to_string();
        assert!(e.contains("COLLSCOPE_RENDEZVOUS_DIR") && e.contains("plain-file"), "{e}");
    }
}
