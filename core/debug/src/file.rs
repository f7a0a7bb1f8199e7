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
    /// Seen only where links are not followed.
    Symlink,
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
            FileKind::Symlink => "a symbolic link (not followed)",
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
        } else if t.is_symlink() {
            FileKind::Symlink
        } else {
            FileKind::Other
        })
    }
}

/// Opens `path` (following symlinks) for reading if it is a regular file; see [`open_regular_with`].
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    open_regular_with(path, std::fs::OpenOptions::new().read(true), true)
}

/// Opens `path` with `opts` if it is a regular file, never waiting: opened non-blocking, so a FIFO without a
/// peer is refused at once instead of waiting for one; without following a final link unless `follow` (another
/// user's link in a shared folder would choose the file). The check is on the opened file, so a path swapped in
/// between cannot slip past it. The descriptor comes back blocking, its other flags (`O_APPEND`) kept.
pub fn open_regular_with(path: &Path, opts: &mut std::fs::OpenOptions, follow: bool) -> Result<File, FileError> {
    let flags = if follow { libc::O_NONBLOCK } else { libc::O_NONBLOCK | libc::O_NOFOLLOW };
    let file = match opts.custom_flags(flags).open(path) {
        Ok(f) => f,
        // ELOOP for a link, ENXIO for a FIFO without a reader: say what the path is rather than errno's words.
        Err(e) => {
            let seen = if follow { std::fs::metadata(path) } else { std::fs::symlink_metadata(path) };
            return Err(match seen.ok().and_then(|m| FileKind::of(m.file_type())) {
                Some(kind) => FileError::NotRegular(kind),
                None => FileError::Io(e),
            });
        }
    };
    if let Some(kind) = FileKind::of(file.metadata()?.file_type()) {
        return Err(FileError::NotRegular(kind));
    }
    let fd = file.as_raw_fd();
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(file)
}

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

/// Why a folder is not this user's own: a link, not a folder, someone else's, or writable by others.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}; another user could plant or redirect files there")]
    Unsafe(String),
}

/// Creates `path` (and missing parents) 0700 when absent, then takes it only when it is this user's private
/// folder: not a link (not followed), a folder, owned by this user, not writable by others. For folders that
/// may sit in a shared temporary directory (a rendezvous, dumps).
pub fn private_dir(path: &Path) -> Result<(), PrivateDirError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    check_private_dir(path)
}

/// Takes the existing `path` only when it is this user's private folder, as [`private_dir`] does, creating
/// nothing (a folder only looked in, such as `XDG_RUNTIME_DIR`).
pub fn check_private_dir(path: &Path) -> Result<(), PrivateDirError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path)?;
    let me = nix::unistd::geteuid().as_raw();
    let why = if m.file_type().is_symlink() {
        "it is a symbolic link (links are not followed)".to_string()
    } else if !m.is_dir() {
        let kind = FileKind::of(m.file_type()).map_or_else(|| "a regular file".to_string(), |k| k.to_string());
        format!("it is {kind}, not a folder")
    } else if m.uid() != me {
        format!("it belongs to uid {}, not to this user (uid {me})", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!("it can be written by other users (mode {:o})", m.mode() & 0o7777)
    } else {
        return Ok(());
    };
    Err(PrivateDirError::Unsafe(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_file_opened_to_append_stays_appending_and_blocking_and_a_fifo_or_link_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("nccl.log");
        let f = open_regular_with(&log, std::fs::OpenOptions::new().create(true).append(true), true).unwrap();
        let flags = nix::fcntl::fcntl(f.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_eq!((flags & libc::O_NONBLOCK, flags & libc::O_APPEND), (0, libc::O_APPEND));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        let e = open_regular_with(&fifo, std::fs::OpenOptions::new().append(true), true).unwrap_err();
        assert!(matches!(e, FileError::NotRegular(FileKind::Fifo)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        let e = open_regular_with(&link, std::fs::OpenOptions::new().read(true), false).unwrap_err();
        assert_eq!(e.to_string(), "it is a symbolic link (not followed), not a regular file");
        assert!(open_regular_with(&link, std::fs::OpenOptions::new().read(true), true).is_ok());
    }

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
