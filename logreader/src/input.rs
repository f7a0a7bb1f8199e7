//! Inputs: files, directories (every regular file under them, in name order), `-` for stdin, gzip by magic
//! bytes. Lines are cut by a fixed buffer so memory stays bounded whatever a file holds.

use crate::ReadError;
use flate2::read::MultiGzDecoder;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Lines longer than this are cut (and counted as truncated): NCCL's own lines are at most ~1 KiB,
/// its longest INFO messages a few KiB.
pub const MAX_LINE: usize = 64 * 1024;

/// Expands the given paths: directories into their files (recursively, sorted), `-` kept as stdin.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            out.push(p.clone());
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| ReadError::Open { path: p.display().to_string(), source: e })?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let open = |e| ReadError::Open { path: dir.display().to_string(), source: e };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(open)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            walk(&e, out)?;
        } else if e.is_file() {
            out.push(e);
        }
    }
    Ok(())
}

/// Opens a path for reading, decompressing gzip when the file starts with its magic bytes.
pub fn open(path: &Path) -> Result<Box<dyn Read>, ReadError> {
    let err = |e| ReadError::Open { path: path.display().to_string(), source: e };
    let raw: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(File::open(path).map_err(err)?)
    };
    let mut buf = BufReader::with_capacity(1 << 16, raw);
    let gz = buf.fill_buf().map_err(err)?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz { Box::new(MultiGzDecoder::new(buf)) } else { Box::new(buf) })
}

/// Calls `f(line, cut)` for every line of `input` (without `\n` or `\r\n`); `cut` says the line was longer
/// than [`MAX_LINE`] and only its start is given.
pub fn for_each_line(mut input: impl Read, mut f: impl FnMut(&[u8], bool)) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 18];
    let mut filled = 0;
    let mut skipping = false;
    loop {
        let n = match input.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let eof = n == 0;
        filled += n;
        let mut start = 0;
        while let Some(i) = memchr::memchr(b'\n', &buf[start..filled]) {
            let end = start + i;
            if skipping {
                skipping = false;
            } else {
                f(trim_cr(&buf[start..end]), false);
            }
            start = end + 1;
        }
        if eof {
            if start < filled && !skipping {
                f(trim_cr(&buf[start..filled]), false);
            }
            return Ok(());
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled >= MAX_LINE {
            if !skipping {
                f(&buf[..MAX_LINE], true);
            }
            skipping = true;
            filled = 0;
        }
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(data: &[u8]) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        for_each_line(data, |l, cut| out.push((l.to_vec(), cut))).unwrap();
        out
    }

    #[test]
    fn splits_lines_and_handles_crlf_and_last_line() {
        let l = lines(b"a\r\nb\n\nc");
        assert_eq!(
            l,
            vec![(b"a".to_vec(), false), (b"b".to_vec(), false), (b"".to_vec(), false), (b"c".to_vec(), false)]
        );
    }

    #[test]
    fn cuts_overlong_lines_and_keeps_going() {
        let mut data = vec![b'x'; MAX_LINE * 5];
        data.extend_from_slice(b"\nnext\n");
        let l = lines(&data);
        assert_eq!(l.len(), 2);
        assert!(l[0].1 && l[0].0.len() == MAX_LINE);
        assert_eq!(l[1], (b"next".to_vec(), false));
    }

    #[test]
    fn reads_gzip_and_reports_missing_files() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("collscope-lr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r0.log.gz");
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"line one\nline two\n").unwrap();
        std::fs::write(&p, e.finish().unwrap()).unwrap();
        let mut got = Vec::new();
        for_each_line(open(&p).unwrap(), |l, _| got.push(String::from_utf8_lossy(l).into_owned())).unwrap();
        assert_eq!(got, vec!["line one", "line two"]);
        assert_eq!(expand(&[dir.clone()]).unwrap(), vec![p]);
        let err = expand(&[dir.join("absent.log")]).unwrap_err().to_string();
        assert!(err.contains("absent.log"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
