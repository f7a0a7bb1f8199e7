//! Following a file as it grows, like `tail -F`: the bytes appended since the last poll, across rotation (the
//! path now names another file: the rest of the old one is read first) and truncation in place
//! (`copytruncate`), and while the file is briefly missing. Nothing is kept: each poll hands its bytes on in
//! pieces of at most [`PIECE`] bytes, and reads at most the budget it is given.

use collscope_debug::file::{open_regular, FileError, FileKind};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most bytes handed on at once.
pub const PIECE: usize = 1 << 16;

/// What a poll hands on, in file order.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes appended to the file being read.
    Bytes(&'a [u8]),
    /// The path now names a new file (or the file was truncated): the bytes that follow start it.
    Restart,
}

pub struct Tail {
    path: PathBuf,
    file: Option<File>,
    /// (device, inode) of the open file.
    id: Option<(u64, u64)>,
    /// Bytes of the open file consumed.
    offset: u64,
    buf: Vec<u8>,
}

impl Tail {
    /// Follows `path` from its start; the file need not exist yet.
    pub fn new(path: &Path) -> Self {
        Tail { path: path.to_path_buf(), file: None, id: None, offset: 0, buf: Vec::new() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands what was appended since the last poll to `f`, up to `budget` bytes; returns how many it read (as
    /// many as `budget`: there may be more). The path must name a regular file, when it names anything.
    pub fn poll(&mut self, budget: u64, mut f: impl FnMut(Piece<'_>)) -> Result<u64, FileError> {
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => match FileKind::of(m.file_type()) {
                None => Some(((m.dev(), m.ino()), m.len())),
                Some(kind) => return Err(FileError::NotRegular(kind)),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let mut read = 0;
        match now {
            // Rotated: finish the old file (a writer may have appended before moving on), then start the new.
            Some((id, _)) if self.id.is_some() && self.id != Some(id) => {
                read = self.read_new(budget, &mut f)?;
                if read == budget {
                    return Ok(read);
                }
                self.open(id)?;
                f(Piece::Restart);
            }
            // Truncated in place.
            Some((_, len)) if len < self.offset => {
                self.offset = 0;
                f(Piece::Restart);
            }
            Some((id, _)) if self.file.is_none() => self.open(id)?,
            _ => {}
        }
        Ok(read + self.read_new(budget - read, &mut f)?)
    }

    fn open(&mut self, id: (u64, u64)) -> Result<(), FileError> {
        self.file = Some(open_regular(&self.path)?);
        self.id = Some(id);
        self.offset = 0;
        Ok(())
    }

    /// Hands on up to `budget` bytes written since `offset`.
    fn read_new(&mut self, budget: u64, f: &mut impl FnMut(Piece<'_>)) -> std::io::Result<u64> {
        let Some(file) = self.file.as_mut() else { return Ok(0) };
        file.seek(SeekFrom::Start(self.offset))?;
        self.buf.resize(PIECE, 0);
        let mut read = 0;
        while read < budget {
            let want = PIECE.min((budget - read) as usize);
            let n = match file.read(&mut self.buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.offset += n as u64;
            read += n as u64;
            f(Piece::Bytes(&self.buf[..n]));
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// One poll as text: the bytes, with `|` where the file restarted.
    fn poll(t: &mut Tail, budget: u64) -> String {
        let mut out = String::new();
        t.poll(budget, |p| match p {
            Piece::Bytes(b) => {
                assert!(!b.is_empty() && b.len() <= PIECE);
                out.push_str(std::str::from_utf8(b).unwrap());
            }
            Piece::Restart => out.push('|'),
        })
        .unwrap();
        out
    }

    #[test]
    fn growth_comes_as_it_was_written() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nccl.log");
        let mut t = Tail::new(&p);
        assert_eq!(poll(&mut t, u64::MAX), "", "a missing file is not an error");
        append(&p, "a\nb");
        assert_eq!(poll(&mut t, u64::MAX), "a\nb");
        append(&p, "c\nd\n");
        assert_eq!(poll(&mut t, u64::MAX), "c\nd\n");
        assert_eq!(poll(&mut t, u64::MAX), "");
    }

    #[test]
    fn rotation_reads_the_old_tail_then_the_new_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nccl.log");
        append(&p, "one\n");
        let mut t = Tail::new(&p);
        assert_eq!(poll(&mut t, u64::MAX), "one\n");
        append(&p, "two\n");
        std::fs::rename(&p, d.path().join("nccl.log.1")).unwrap();
        assert_eq!(poll(&mut t, u64::MAX), "two\n", "while the path is missing the old file is still read");
        append(&d.path().join("nccl.log.1"), "three\n");
        append(&p, "new\n");
        assert_eq!(poll(&mut t, u64::MAX), "three\n|new\n");
    }

    #[test]
    fn truncation_in_place_restarts_from_the_top() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nccl.log");
        append(&p, "first line\nsecond line\n");
        let mut t = Tail::new(&p);
        poll(&mut t, u64::MAX);
        std::fs::write(&p, "x\n").unwrap();
        assert_eq!(poll(&mut t, u64::MAX), "|x\n");
    }

    #[test]
    fn a_poll_reads_no_more_than_its_budget_and_the_next_goes_on() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nccl.log");
        let text: String = (0..100_000).map(|i| format!("{i}\n")).collect();
        append(&p, &text);
        let mut t = Tail::new(&p);
        let mut got = String::new();
        for _ in 0..4 {
            let part = poll(&mut t, 50_000);
            assert_eq!(part.len(), 50_000);
            got.push_str(&part);
        }
        // Rotated with more left in the old file than a poll may read: the restart waits for its end.
        std::fs::rename(&p, d.path().join("nccl.log.1")).unwrap();
        append(&p, "new\n");
        loop {
            let part = poll(&mut t, 50_000);
            if let Some(old) = part.strip_suffix("|new\n") {
                got.push_str(old);
                break;
            }
            assert_eq!(part.len(), 50_000, "no restart before the old file's end");
            got.push_str(&part);
        }
        assert_eq!(got, text);
    }

    #[test]
    fn a_path_that_names_no_regular_file_is_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let zero = d.path().join("zero.log");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (p, kind) in [(fifo, FileKind::Fifo), (zero, FileKind::CharDevice)] {
            let e = Tail::new(&p).poll(u64::MAX, |_| panic!("nothing is read")).unwrap_err();
            assert!(matches!(e, FileError::NotRegular(k) if k == kind), "{e}");
        }
    }
}
