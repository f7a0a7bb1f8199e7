//! Each rank's dump (`COLLSCOPE_DUMP_DIR`, [`collscope_model::RankDump`]) written from the snapshot this server
//! holds, on a call's timeout, a peer's failure, SIGTERM or a request. The folder may sit in a shared temporary
//! directory, so it is hostile: created 0700 when missing, refused when it is a link or another user's, each file
//! written beside its name under a fresh exclusive name and renamed over it (a reader never sees half a file,
//! and a link planted at the name is replaced, never followed), and bounded by `MAX_DUMP_BYTES`.

use collscope_model::dump::MAX_DUMP_BYTES;
use collscope_model::RankDump;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DumpWriteError {
    #[error("cannot write the dump {path} (COLLSCOPE_DUMP_DIR): {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("refused the dump folder {path} (COLLSCOPE_DUMP_DIR): {source}; set it to a folder of yours alone")]
    Folder { path: PathBuf, source: collscope_debug::file::PrivateDirError },
    #[error("rank {rank}'s dump is {bytes} bytes, over the {MAX_DUMP_BYTES} allowed; not written")]
    TooLarge { rank: u32, bytes: usize },
    #[error("cannot encode rank {rank}'s dump: {source}")]
    Encode { rank: u32, source: serde_json::Error },
}

/// Writes `dump` whole to `dir/rank-NNNNN.json`, and says where.
pub fn write(dir: &Path, dump: &RankDump) -> Result<PathBuf, DumpWriteError> {
    collscope_debug::file::private_dir(dir)
        .map_err(|source| DumpWriteError::Folder { path: dir.to_path_buf(), source })?;
    let body = serde_json::to_vec(dump).map_err(|source| DumpWriteError::Encode { rank: dump.rank, source })?;
    if body.len() as u64 > MAX_DUMP_BYTES {
        return Err(DumpWriteError::TooLarge { rank: dump.rank, bytes: body.len() });
    }
    let path = dir.join(RankDump::file_name(dump.rank));
    let err = |source| DumpWriteError::Io { path: path.clone(), source };
    // Created exclusively (0600) under a name a reader skips, then renamed over the final name.
    let mut tmp = tempfile::Builder::new().prefix(".rank-").suffix(".tmp").tempfile_in(dir).map_err(err)?;
    tmp.write_all(&body).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(&path).map_err(|e| err(e.error))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{DumpReason, Snapshot, Source};
    use std::os::unix::fs::PermissionsExt;

    fn dump(rank: u32) -> RankDump {
        let mut s = Snapshot::new(Source::Runtime);
        s.communicators.push(collscope_model::Communicator { rank: Some(rank), ..Default::default() });
        RankDump::of(&s, DumpReason::Request, 1).remove(0)
    }

    #[test]
    fn a_dump_is_written_whole_in_a_private_folder_and_a_planted_link_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dumps");
        let path = write(&dir, &dump(3)).unwrap();
        assert_eq!(path, dir.join("rank-00003.json"));
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let back: RankDump = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, dump(3));
        // Only the file: the temporary one was renamed.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("rank-00004.json")).unwrap();
        write(&dir, &dump(4)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(dir.join("rank-00004.json")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn a_linked_folder_or_a_file_in_its_place_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = write(&link, &dump(0)).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "nothing written through the link");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(write(&file, &dump(0)).is_err());
    }
}
