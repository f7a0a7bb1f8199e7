//! How the ranks of a real NCCL job find each other's telemetry without collscope's bootstrap: through a folder
//! (`COLLSCOPE_RENDEZVOUS_DIR`, default [`default_dir`]: this user's private runtime folder; on several hosts, a
//! shared filesystem). Each rank writes `<dir>/<comm hash>/rank-<rank>.json` (its [`RankEndpoint`]) at `init`,
//! whole (written aside, then renamed), and removes it once its server stops (after the last `finalize` and its
//! linger); the drain thread re-reads the folder now and then until every rank is known, the linger included.
//!
//! Another local user must not be able to plant endpoints (the job view fetches them) nor make the plugin write
//! elsewhere: every folder is this user's, not a link and not writable by others; files are created exclusively
//! without following links (0600), and read only when they are regular, not links, this user's and small.

use collscope_debug::file::PrivateDirError;
use collscope_model::RankEndpoint;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the folder is re-read while ranks are missing.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(1);
/// An endpoint file is a few hundred bytes; anything longer is not one.
const MAX_FILE: u64 = 4096;
/// The default folder's name, inside this user's runtime folder (or, with a uid suffix, the temporary directory).
const NAME: &str = "collscope-rendezvous";

/// The folder when `COLLSCOPE_RENDEZVOUS_DIR` is not set: in `$XDG_RUNTIME_DIR` when that is this user's private
/// folder (`runtime` is its value), else `collscope-rendezvous-<uid>` in the temporary directory. Either way one
/// user's, never shared with another (see [`private_dir`]).
pub(crate) fn default_dir(runtime: Option<&Path>) -> PathBuf {
    match runtime.filter(|r| r.is_absolute() && check(r).is_ok()) {
        Some(r) => r.join(NAME),
        None => std::env::temp_dir().join(format!("{NAME}-{}", nix::unistd::geteuid())),
    }
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
pub(crate) enum RendezvousError {
    #[error("COLLSCOPE_RENDEZVOUS_DIR: cannot write this rank's endpoint to '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "COLLSCOPE_RENDEZVOUS_DIR: the rendezvous folder '{path}' is refused: {why}; another user could plant or redirect the \
         ranks' endpoints there: set COLLSCOPE_RENDEZVOUS_DIR to a folder you own that others cannot write"
    )]
    Unsafe { path: PathBuf, why: String },
}

/// Why `path` is no folder of this user's alone: a link, not a folder, someone else's, or writable by others.
fn check(path: &Path) -> Result<(), RendezvousError> {
    collscope_debug::file::check_private_dir(path).map_err(|e| refused(path, e))
}

/// Creates `path` (and missing parents) 0700 when absent, then [`check`]s it: an existing one is taken only when
/// it is this user's private folder.
fn private_dir(path: &Path) -> Result<(), RendezvousError> {
    collscope_debug::file::private_dir(path).map_err(|e| refused(path, e))
}

fn refused(path: &Path, e: PrivateDirError) -> RendezvousError {
    let path = path.to_path_buf();
    match e {
        PrivateDirError::Io(source) => RendezvousError::Io { path, source },
        PrivateDirError::Unsafe(why) => RendezvousError::Unsafe { path, why },
    }
}

impl Rendezvous {
    /// Writes `me` into `base/<comm_hash>/`.
    pub(crate) fn join(base: &Path, comm_hash: u64, nranks: u32, me: &RankEndpoint) -> Result<Self, RendezvousError> {
        let dir = base.join(format!("{comm_hash:016x}"));
        let mine = dir.join(format!("rank-{}.json", me.rank));
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RendezvousError::Io { path, source }
        };
        private_dir(base)?;
        private_dir(&dir)?;
        let tmp = dir.join(format!(".rank-{}.{}.tmp", me.rank, std::process::id()));
        let json = serde_json::to_vec(me).map_err(|e| err(&tmp)(e.into()))?;
        // A crashed process with this pid may have left one (removing does not follow a link).
        let _ = std::fs::remove_file(&tmp);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(err(&tmp))?;
        file.write_all(&json).map_err(err(&tmp))?;
        drop(file);
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

    /// The endpoint files of ranks of this communicator; other files (another tool's, half-written ones, links,
    /// another user's) are not endpoints and are passed over.
    fn read(&self) -> Vec<RankEndpoint> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|e| {
                let path = e.ok()?.path();
                let name = path.file_name()?.to_str()?;
                if !(name.starts_with("rank-") && name.ends_with(".json")) {
                    return None;
                }
                let text = read_endpoint(&path)?;
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

/// An endpoint file's text, when it is a regular file (not a link: opened without following one, and without
/// waiting on a FIFO), this user's and at most [`MAX_FILE`] bytes.
fn read_endpoint(path: &Path) -> Option<String> {
    let file: File = collscope_debug::file::open_regular_with(path, OpenOptions::new().read(true), false).ok()?;
    let m = file.metadata().ok()?;
    if !m.is_file() || m.uid() != nix::unistd::geteuid().as_raw() || m.len() > MAX_FILE {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn endpoint(rank: u32) -> RankEndpoint {
        RankEndpoint {
            rank,
            host: "h".into(),
            url: format!("http://127.0.0.1:{}", 9000 + rank),
            pid: None,
            started: None,
        }
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

    /// The mode bits of `path` (not following a link).
    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn refused(base: &Path) -> String {
        match Rendezvous::join(base, 1, 2, &endpoint(0)) {
            Ok(_) => panic!("'{}' was accepted", base.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn folders_are_made_private_and_files_written_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("a/b/rv");
        let r = Rendezvous::join(&base, 0xabc, 2, &endpoint(0)).unwrap();
        assert_eq!(mode(&base), 0o700);
        assert_eq!(mode(&base.join("0000000000000abc")), 0o700);
        assert_eq!(mode(&base.join("0000000000000abc/rank-0.json")), 0o600);
        r.leave();
    }

    #[test]
    fn a_link_a_shared_or_a_foreign_folder_is_refused_naming_the_path_and_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        // A link planted at the base path: nothing is written where it points.
        let target = tmp.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = refused(&link);
        assert!(e.contains("'") && e.contains("link'") && e.contains("symbolic link"), "{e}");
        assert!(e.contains("set COLLSCOPE_RENDEZVOUS_DIR to a folder you own"), "{e}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "nothing written through the link");
        // A folder others can write (as a planted one in the temporary directory would be).
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = refused(&shared);
        assert!(e.contains("shared'") && e.contains("written by other users (mode 777)"), "{e}");
        // A comm folder inside a private base that is a link is refused too.
        let base = tmp.path().join("base");
        std::fs::create_dir(&base).unwrap();
        std::os::unix::fs::symlink(&target, base.join("0000000000000001")).unwrap();
        assert!(refused(&base).contains("symbolic link"));
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        // Someone else's folder: root makes one for uid 65534; any other user finds "/" is root's.
        let foreign = tmp.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
        let foreign = if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&foreign, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            foreign
        } else {
            PathBuf::from("/")
        };
        let e = refused(&foreign);
        assert!(e.contains("belongs to uid") && e.contains("not to this user"), "{e}");
    }

    #[test]
    fn planted_links_fifos_large_files_and_others_files_are_not_endpoints() {
        let base = tempfile::tempdir().unwrap();
        let mut r0 = Rendezvous::join(base.path(), 0xabc, 6, &endpoint(0)).unwrap();
        let dir = base.path().join("0000000000000abc");
        // A link to a real endpoint file elsewhere.
        let outside = base.path().join("outside.json");
        std::fs::write(&outside, serde_json::to_vec(&endpoint(1)).unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("rank-1.json")).unwrap();
        // A FIFO (opening it must not wait for a writer).
        nix::unistd::mkfifo(&dir.join("rank-2.json"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // An endpoint padded past the size an endpoint file has.
        let mut big = serde_json::to_vec(&endpoint(3)).unwrap();
        big.extend(std::iter::repeat_n(b' ', MAX_FILE as usize));
        std::fs::write(dir.join("rank-3.json"), big).unwrap();
        // Another user's file (root can make one; others skip this case).
        let theirs = dir.join("rank-4.json");
        std::fs::write(&theirs, serde_json::to_vec(&endpoint(4)).unwrap()).unwrap();
        let chowned = nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).is_ok();
        if !chowned {
            std::fs::remove_file(&theirs).unwrap();
        }
        let r5 = Rendezvous::join(base.path(), 0xabc, 6, &endpoint(5)).unwrap();
        let started = Instant::now();
        let seen = r0.poll(Instant::now() + READ_EVERY).unwrap().to_vec();
        assert!(started.elapsed() < Duration::from_secs(5), "the FIFO was not waited on");
        assert_eq!(seen, [endpoint(0), endpoint(5)], "only this user's regular, small files");
        r0.leave();
        r5.leave();
    }

    #[test]
    fn the_default_is_the_users_runtime_folder_when_private_else_a_per_user_one() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(default_dir(Some(tmp.path())), tmp.path().join(NAME));
        let uid = nix::unistd::geteuid();
        let fallback = std::env::temp_dir().join(format!("collscope-rendezvous-{uid}"));
        assert_eq!(default_dir(None), fallback);
        assert_eq!(default_dir(Some(Path::new("relative"))), fallback);
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(default_dir(Some(tmp.path())), fallback, "a runtime folder others can write is not used");
    }
}
