//! Opening the files collscope reads without trusting what they are: a path may name a device (`/dev/zero`
//! never ends), a FIFO (opening it waits for a writer) or a file far larger than the kind ever is. Files expected
//! to be small (tuning profiles, topology and graph XML, sysfs attributes) are read whole, up to a limit.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("it is {0}, not a regular file")]
    NotRegular(FileKind),
    #[error("it is larger than {limit} bytes, the most expected of it")]
    TooLarge { limit: u64 },
    #[error("it is not UTF-8 text")]
    NotText,
}

/// What a path that is not a regular file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
    Other,
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::Other => "not a file",
        })
    }
}

impl FileKind {
    /// The kind of `t`, or `None` for a regular file.
    pub fn of(t: std::fs::FileType) -> Option<FileKind> {
        Some(if t.is_file() {
            return None;
        } else if t.is_dir() {
            FileKind::Directory
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_socket() {
            FileKind::Socket
        } else {
            FileKind::Other
        })
    }
}

/// Opens `path` (following symlinks) for reading if it is a regular file. Opened non-blocking, so a FIFO is
/// refused at once instead of waiting for a writer; the check is on the opened file, so a path swapped in
/// between cannot slip past it.
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    if let Some(kind) = FileKind::of(file.metadata()?.file_type()) {
        return Err(FileError::NotRegular(kind));
    }
    // Reads of a regular file do not block anyway; clear the flag so the descriptor is a plain one.
    nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()))
        .map_err(std::io::Error::from)?;
    Ok(file)
}

/// The bytes of the regular file `path`, refusing one longer than `limit` (the length is not trusted: sysfs and
/// procfs report sizes that are not the content's).
pub fn read_small(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    open_regular(path)?.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read_small`] as UTF-8 text.
pub fn read_small_string(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read_small(path, limit)?).map_err(|_| FileError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn reads_a_small_file_and_refuses_a_larger_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("small.txt");
        std::fs::write(&p, "0123456789").unwrap();
        assert_eq!(read_small_string(&p, 10).unwrap(), "0123456789");
        let e = read_small(&p, 9).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { limit: 9 }), "{e}");
        assert_eq!(e.to_string(), "it is larger than 9 bytes, the most expected of it");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_small_string(&p, 10), Err(FileError::NotText)));
        let missing = read_small(&dir.path().join("absent"), 10).unwrap_err();
        assert!(matches!(&missing, FileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound), "{missing}");
    }

    #[test]
    fn refuses_devices_symlinks_to_them_fifos_and_directories_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("tuning.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = Instant::now();
        for (path, kind) in [
            (Path::new("/dev/zero"), FileKind::CharDevice),
            (&link, FileKind::CharDevice),
            (&fifo, FileKind::Fifo),
            (dir.path(), FileKind::Directory),
        ] {
            let e = read_small(path, 1 << 20).unwrap_err();
            assert!(matches!(e, FileError::NotRegular(k) if k == kind), "{}: {e}", path.display());
        }
        assert_eq!(
            open_regular(Path::new("/dev/null")).unwrap_err().to_string(),
            "it is a character device, not a regular file"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "no open waited for a writer");
    }
}
