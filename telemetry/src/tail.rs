//! Following a file as it grows, like `tail -F`: new bytes since the last poll, whole lines only, across
//! rotation (the path now names another file: the rest of the old one is read first) and truncation in place
//! (`copytruncate`), and while the file is briefly missing.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What one poll found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Whole lines (each ending in `\n`) from the file the path named before, or names now.
    pub lines: Vec<u8>,
    /// The path now names a new file (or the file was truncated): what follows `lines_before` starts it.
    pub restarted: bool,
    /// Lines of the old file read before a restart (its tail, written just before the rotation).
    pub lines_before: Vec<u8>,
}

pub struct Tail {
    path: PathBuf,
    file: Option<File>,
    /// (device, inode) of the open file.
    id: Option<(u64, u64)>,
    /// Bytes of the open file consumed, and a partial last line held back until its newline comes.
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    /// Follows `path` from its start; the file need not exist yet.
    pub fn new(path: &Path) -> Self {
        Tail { path: path.to_path_buf(), file: None, id: None, offset: 0, partial: Vec::new() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads what was appended since the last poll.
    pub fn poll(&mut self) -> std::io::Result<Polled> {
        let mut out = Polled::default();
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => Some(((m.dev(), m.ino()), m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match now {
            // Rotated: finish the old file (a writer may have appended before moving on), then start the new.
            Some((id, _)) if self.id.is_some() && self.id != Some(id) => {
                self.read_new(&mut out.lines_before)?;
                self.partial.clear();
                self.open(id)?;
                out.restarted = true;
            }
            // Truncated in place.
            Some((_, len)) if len < self.offset => {
                self.offset = 0;
                self.partial.clear();
                out.restarted = true;
            }
            Some((id, _)) if self.file.is_none() => self.open(id)?,
            _ => {}
        }
        self.read_new(&mut out.lines)?;
        Ok(out)
    }

    fn open(&mut self, id: (u64, u64)) -> std::io::Result<()> {
        self.file = Some(File::open(&self.path)?);
        self.id = Some(id);
        self.offset = 0;
        Ok(())
    }

    /// Appends the whole lines written since `offset` to `out`, keeping a trailing partial line.
    fn read_new(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let Some(f) = self.file.as_mut() else { return Ok(()) };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = std::mem::take(&mut self.partial);
        let n = f.read_to_end(&mut buf)?;
        self.offset += n as u64;
        match buf.iter().rposition(|b| *b == b'\n') {
            Some(last) => {
                self.partial = buf.split_off(last + 1);
                out.extend_from_slice(&buf);
            }
            None => self.partial = buf,
        }
        Ok(())
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

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("collscope-tail-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn growth_comes_in_whole_lines() {
        let d = dir("grow");
        let p = d.join("nccl.log");
        let mut t = Tail::new(&p);
        assert_eq!(t.poll().unwrap(), Polled::default(), "a missing file is not an error");
        append(&p, "a\nb");
        assert_eq!(t.poll().unwrap().lines, b"a\n");
        append(&p, "c\nd\n");
        assert_eq!(t.poll().unwrap().lines, b"bc\nd\n");
        assert!(t.poll().unwrap().lines.is_empty());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn rotation_reads_the_old_tail_then_the_new_file() {
        let d = dir("rotate");
        let p = d.join("nccl.log");
        append(&p, "one\n");
        let mut t = Tail::new(&p);
        assert_eq!(t.poll().unwrap().lines, b"one\n");
        append(&p, "two\n");
        std::fs::rename(&p, d.join("nccl.log.1")).unwrap();
        assert_eq!(t.poll().unwrap().lines, b"two\n", "while the path is missing the old file is still read");
        append(&d.join("nccl.log.1"), "three\n");
        append(&p, "new\n");
        let got = t.poll().unwrap();
        assert!(got.restarted);
        assert_eq!(got.lines_before, b"three\n");
        assert_eq!(got.lines, b"new\n");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn truncation_in_place_restarts_from_the_top() {
        let d = dir("trunc");
        let p = d.join("nccl.log");
        append(&p, "first line\nsecond line\n");
        let mut t = Tail::new(&p);
        t.poll().unwrap();
        std::fs::write(&p, "x\n").unwrap();
        let got = t.poll().unwrap();
        assert!(got.restarted);
        assert_eq!(got.lines, b"x\n");
        std::fs::remove_dir_all(d).unwrap();
    }
}
