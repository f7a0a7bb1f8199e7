//! Inputs: files, directories (the log files under them, in name order), FIFOs, `-` for stdin, gzip by
//! magic bytes. Lines are cut by a fixed buffer so memory stays bounded whatever a file holds; gzip data that
//! stops making sense (a file cut short while copied) ends its input with what decompressed before it.

use crate::ReadError;
use collscope_debug::env::Env;
use collscope_debug::file::FileKind;
use flate2::bufread::MultiGzDecoder;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Lines longer than this are cut (and counted as truncated): NCCL's own lines are at most ~1 KiB,
/// its longest INFO messages a few KiB.
pub const MAX_LINE: usize = 64 * 1024;

/// The inputs the given paths name, and the files of their directories that are not logs.
#[derive(Debug, Default, PartialEq)]
pub struct Expanded {
    pub logs: Vec<PathBuf>,
    pub skipped: Vec<PathBuf>,
}

/// Expands the given paths: directories into their log files (recursively, sorted), `-` kept as stdin. A file
/// named on its own is read whatever it holds. A device or socket is refused: it is no log, and `/dev/zero`
/// would be read for ever.
pub fn expand(paths: &[PathBuf]) -> Result<Expanded, ReadError> {
    let mut out = Expanded::default();
    for p in paths {
        if p.as_os_str() == "-" {
            out.logs.push(p.clone());
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| ReadError::Open { path: p.display().to_string(), source: e })?;
        match FileKind::of(meta.file_type()) {
            Some(FileKind::Directory) => walk(p, &mut out)?,
            None | Some(FileKind::Fifo) => out.logs.push(p.clone()),
            Some(kind) => return Err(ReadError::NotALog { path: p.display().to_string(), kind }),
        }
    }
    Ok(out)
}

/// Files beside logs that hold something else: data, configuration, code and documents.
const NOT_LOGS: &[&str] =
    &["json", "jsonl", "yaml", "yml", "toml", "csv", "xml", "html", "md", "py", "sh", "png", "jpg", "svg", "pdf"];

/// A file in a directory is read when it is gzip or text (no NUL byte at its start) and its extension is not
/// one of [`NOT_LOGS`].
fn is_log(path: &Path) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if ext.is_some_and(|e| NOT_LOGS.contains(&e.as_str())) {
        return false;
    }
    let mut head = [0u8; 4096];
    let n = File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    head[..n].starts_with(&[0x1f, 0x8b]) || memchr::memchr(0, &head[..n]).is_none()
}

fn walk(dir: &Path, out: &mut Expanded) -> Result<(), ReadError> {
    let open = |e| ReadError::Open { path: dir.display().to_string(), source: e };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(open)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            walk(&e, out)?;
        } else if e.is_file() {
            if is_log(&e) {
                out.logs.push(e);
            } else {
                out.skipped.push(e);
            }
        }
    }
    Ok(())
}

/// Bytes one input may hand on (decompressed), unless `COLLSCOPE_LOG_MAX_BYTES` sets another: five times a
/// 50 GB log, so that stdin, a FIFO or a procfs file that never ends (`log analyze - </dev/urandom`) stops with
/// an error naming it instead of being read until killed. A regular file is read only to the size it had when
/// opened, whatever this cap.
pub const MAX_INPUT_BYTES: u64 = 256 << 30;
/// The variable that sets [`MAX_INPUT_BYTES`] (bytes).
pub const MAX_INPUT_BYTES_VAR: &str = "COLLSCOPE_LOG_MAX_BYTES";
/// Bytes without a line end that end an input: NCCL's lines are at most a few KiB (and lines past
/// [`MAX_LINE`] are cut), so this much is no log (`/dev/zero`, binary data) and is refused at once.
pub const MAX_UNENDED_BYTES: u64 = 16 << 20;

/// An opened input: plain text, or gzip decompressed as it is read, bounded (see [`MAX_INPUT_BYTES`]).
pub struct Input {
    source: Source,
    /// Bytes handed on, the most allowed, and those since the last line end.
    total: u64,
    limit: u64,
    unended: u64,
    /// A regular file and its size when opened, to tell whether it grew while read.
    file: Option<(PathBuf, u64)>,
}

/// A file or stdin, buffered.
type Raw = BufReader<Box<dyn Read>>;

enum Source {
    Plain(Raw),
    Gzip { decoder: Box<MultiGzDecoder<Counted<Raw>>>, out: u64, damage: Option<GzipDamage> },
}

/// Where a gzip input stopped making sense; what decompressed before it was read.
#[derive(Debug)]
pub struct GzipDamage {
    /// Compressed bytes the decoder had taken when it failed.
    pub offset: u64,
    /// Bytes it had decompressed until then.
    pub decompressed: u64,
    pub error: std::io::Error,
}

impl std::fmt::Display for GzipDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gzip data damaged at byte {} ({}): read the {} bytes decompressed before it",
            self.offset, self.error, self.decompressed
        )
    }
}

impl Input {
    /// The size the regular file had when opened and the size it has now, when it grew while read (only what it
    /// had when opened is read: a log being written is for `serve --follow`).
    pub fn grown(&self) -> Option<(u64, u64)> {
        let (path, opened) = self.file.as_ref()?;
        let now = std::fs::metadata(path).ok()?.len();
        (now > *opened).then_some((*opened, now))
    }

    /// Checks what a read handed on against the caps.
    fn bound(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.total += bytes.len() as u64;
        self.unended = match memchr::memrchr(b'\n', bytes) {
            Some(i) => (bytes.len() - i - 1) as u64,
            None => self.unended + bytes.len() as u64,
        };
        if self.unended > MAX_UNENDED_BYTES {
            return Err(std::io::Error::other(format!(
                "{MAX_UNENDED_BYTES} bytes without a line end ({} MiB, collscope's cap on a line-less input): not a \
                 text log (a device, or binary data?)",
                MAX_UNENDED_BYTES >> 20
            )));
        }
        if self.total > self.limit {
            return Err(std::io::Error::other(format!(
                "more than {} bytes, the most read of one input ({MAX_INPUT_BYTES_VAR}, default {MAX_INPUT_BYTES}); \
                 set {MAX_INPUT_BYTES_VAR} to read more",
                self.limit
            )));
        }
        Ok(())
    }

    /// The damage that ended a gzip input early, once it has been read to its end.
    pub fn take_damage(&mut self) -> Option<GzipDamage> {
        match &mut self.source {
            Source::Gzip { damage, .. } => damage.take(),
            Source::Plain(_) => None,
        }
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.read_source(buf)?;
        self.bound(&buf[..n])?;
        Ok(n)
    }
}

impl Input {
    fn read_source(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.source {
            Source::Plain(r) => r.read(buf),
            Source::Gzip { damage: Some(_), .. } => Ok(0),
            Source::Gzip { decoder, out, damage } => match decoder.read(buf) {
                Ok(n) => {
                    *out += n as u64;
                    Ok(n)
                }
                // What the data says is wrong (flate2's kinds for a cut or corrupt stream), not the file's I/O.
                Err(e) if is_corrupt(&e) => {
                    *damage = Some(GzipDamage { offset: decoder.get_ref().consumed, decompressed: *out, error: e });
                    Ok(0)
                }
                Err(e) => Err(e),
            },
        }
    }
}

fn is_corrupt(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{InvalidData, InvalidInput, UnexpectedEof};
    matches!(e.kind(), UnexpectedEof | InvalidInput | InvalidData)
}

/// A buffered reader that counts the bytes its user consumed.
struct Counted<R> {
    inner: R,
    consumed: u64,
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, n: usize) {
        self.consumed += n as u64;
        self.inner.consume(n);
    }
}

/// Opens a path for reading, decompressing gzip when the file starts with its magic bytes. A regular file is read
/// to the size it has now; every input hands on at most `COLLSCOPE_LOG_MAX_BYTES` ([`MAX_INPUT_BYTES`]).
pub fn open(path: &Path) -> Result<Input, ReadError> {
    let err = |e| ReadError::Open { path: path.display().to_string(), source: e };
    let limit = Env::from_process()
        .int_in(MAX_INPUT_BYTES_VAR, MAX_INPUT_BYTES as i64, 1..=i64::MAX)
        .map_err(|e| err(std::io::Error::other(e)))? as u64;
    let mut file = None;
    let raw: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = File::open(path).map_err(err)?;
        let meta = f.metadata().map_err(err)?;
        // procfs and sysfs files say 0 whatever they hold: only the byte cap bounds them.
        if meta.is_file() && meta.len() > 0 {
            file = Some((path.to_path_buf(), meta.len()));
            Box::new(f.take(meta.len()))
        } else {
            Box::new(f)
        }
    };
    let mut buf: Raw = BufReader::with_capacity(1 << 16, raw);
    let gz = buf.fill_buf().map_err(err)?.starts_with(&[0x1f, 0x8b]);
    let source = if gz {
        let decoder = Box::new(MultiGzDecoder::new(Counted { inner: buf, consumed: 0 }));
        Source::Gzip { decoder, out: 0, damage: None }
    } else {
        Source::Plain(buf)
    };
    Ok(Input { source, total: 0, limit, unended: 0, file })
}

/// A line as the reader hands it on: text its buffer was checked to be UTF-8 with (one check per buffer, not per
/// line), or bytes not checked yet (a line held across buffers, cut, or holding invalid UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text<'a> {
    Utf8(&'a str),
    Bytes(&'a [u8]),
}

impl<'a> Text<'a> {
    pub fn bytes(self) -> &'a [u8] {
        match self {
            Text::Utf8(s) => s.as_bytes(),
            Text::Bytes(b) => b,
        }
    }
}

/// Cuts bytes that arrive in pieces into lines, holding at most [`MAX_LINE`] of a line not ended yet.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    /// The start of the line not ended yet.
    carry: Vec<u8>,
    /// The line not ended yet was already handed on cut: drop the rest of it.
    skipping: bool,
}

impl Lines {
    /// Calls `f(line, cut)` for every line `data` ends (without `\n` or `\r\n`); `cut` says the line was longer
    /// than [`MAX_LINE`] and only its start is given.
    pub fn push(&mut self, mut data: &[u8], f: &mut impl FnMut(Text, bool)) {
        if !self.carry.is_empty() || self.skipping {
            let Some(i) = memchr::memchr(b'\n', data) else {
                self.hold(data, f);
                return;
            };
            self.hold(&data[..i], f);
            if !std::mem::take(&mut self.skipping) {
                emit(Text::Bytes(&self.carry), f);
            }
            self.carry.clear();
            data = &data[i + 1..];
        }
        let mut start = 0;
        loop {
            // The UTF-8 checked once for all the lines that follow, up to the first invalid byte.
            let rest = &data[start..];
            let valid = match std::str::from_utf8(rest) {
                Ok(s) => s,
                Err(e) => std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap_or_default(),
            };
            let mut pos = 0;
            while let Some(i) = memchr::memchr(b'\n', &valid.as_bytes()[pos..]) {
                emit(Text::Utf8(&valid[pos..pos + i]), f);
                pos += i + 1;
            }
            start += pos;
            // The line with the invalid byte goes on as bytes; a character cut at the end waits in `carry`.
            match (valid.len() < rest.len()).then(|| memchr::memchr(b'\n', &data[start..])).flatten() {
                Some(i) => {
                    emit(Text::Bytes(&data[start..start + i]), f);
                    start += i + 1;
                }
                None => break,
            }
        }
        self.hold(&data[start..], f);
    }

    /// Hands on the last line if it did not end with a newline (the end of the input).
    pub fn finish(&mut self, f: &mut impl FnMut(Text, bool)) {
        if !self.carry.is_empty() && !self.skipping {
            emit(Text::Bytes(&self.carry), f);
        }
        self.carry.clear();
        self.skipping = false;
    }

    /// Keeps `part` of the line not ended yet, handing the line on cut once it passes [`MAX_LINE`].
    fn hold(&mut self, part: &[u8], f: &mut impl FnMut(Text, bool)) {
        if self.skipping {
            return;
        }
        let room = MAX_LINE - self.carry.len();
        if part.len() <= room {
            self.carry.extend_from_slice(part);
        } else {
            self.carry.extend_from_slice(&part[..room]);
            f(Text::Bytes(&self.carry), true);
            self.carry.clear();
            self.skipping = true;
        }
    }
}

/// Calls `f(line, cut)` for every line of `input`, as [`Lines`] cuts them.
pub fn for_each_line(mut input: impl Read, mut f: impl FnMut(Text, bool)) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 18];
    let mut lines = Lines::default();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => {
                lines.finish(&mut f);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        lines.push(&buf[..n], &mut f);
    }
}

/// Hands a whole line on, cut to [`MAX_LINE`], without its `\r`.
fn emit(line: Text, f: &mut impl FnMut(Text, bool)) {
    match line {
        _ if line.bytes().len() > MAX_LINE => f(Text::Bytes(&line.bytes()[..MAX_LINE]), true),
        Text::Utf8(s) => f(Text::Utf8(s.strip_suffix('\r').unwrap_or(s)), false),
        Text::Bytes(b) => f(Text::Bytes(b.strip_suffix(b"\r").unwrap_or(b)), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn lines(data: &[u8]) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        for_each_line(data, |l, cut| out.push((l.bytes().to_vec(), cut))).unwrap();
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
    fn utf8_is_checked_per_buffer_and_an_invalid_line_goes_on_as_bytes() {
        let data = ["h:1:2 [0] NCCL INFO é\nbad ".as_bytes(), b"\xff", b" byte\nafter\r\nlast"].concat();
        let (mut split, mut got) = (Lines::default(), Vec::new());
        let mut f = |l: Text, cut: bool| got.push((format!("{l:?}"), cut));
        split.push(&data, &mut f);
        split.finish(&mut f);
        let want = [
            r#"Utf8("h:1:2 [0] NCCL INFO é")"#,
            r#"Bytes([98, 97, 100, 32, 255, 32, 98, 121, 116, 101])"#,
            r#"Utf8("after")"#,
            r#"Bytes([108, 97, 115, 116])"#,
        ];
        assert_eq!(got.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(), want);
        // A character split between two pieces: its line is whole, and the lines after it are checked text.
        let text = "α\nβγ\nδ\n";
        for cut in 1..text.len() {
            let (mut split, mut got) = (Lines::default(), Vec::new());
            let mut f =
                |l: Text, _| got.push((String::from_utf8(l.bytes().to_vec()).unwrap(), matches!(l, Text::Utf8(_))));
            split.push(&text.as_bytes()[..cut], &mut f);
            split.push(&text.as_bytes()[cut..], &mut f);
            let lines: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
            assert_eq!(lines, ["α", "βγ", "δ"], "cut at {cut}");
            // The last line lies in the second piece unless the cut falls inside it.
            assert!(got.last().unwrap().1 || cut > 8, "cut at {cut}");
        }
    }

    #[test]
    fn lines_are_text_exactly_when_they_are_utf8() {
        // Lines of 0 to 200 bytes, some with a character past ASCII or an invalid byte placed anywhere.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut data = Vec::new();
        let mut want = Vec::new();
        for _ in 0..3000 {
            let mut line: Vec<u8> = (0..next(200)).map(|_| b'a' + next(26) as u8).collect();
            match next(4) {
                0 => line.splice(0..0, "é".bytes()).for_each(drop),
                1 if !line.is_empty() => line.insert(next(line.len() as u64) as usize, 0xff),
                2 => line.extend_from_slice("β".as_bytes()),
                _ => {}
            }
            if next(8) == 0 {
                line.push(b'\r');
            }
            data.extend_from_slice(&line);
            data.push(b'\n');
            let line = line.strip_suffix(b"\r").unwrap_or(&line).to_vec();
            want.push((std::str::from_utf8(&line).is_ok(), line));
        }
        let mut got = Vec::new();
        let mut split = Lines::default();
        split.push(&data, &mut |l: Text, _| got.push((matches!(l, Text::Utf8(_)), l.bytes().to_vec())));
        assert!(want.iter().filter(|w| !w.0).count() > 500, "invalid lines among them");
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "line {i}");
        }
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
        for_each_line(open(&p).unwrap(), |l, _| got.push(String::from_utf8_lossy(l.bytes()).into_owned())).unwrap();
        assert_eq!(got, vec!["line one", "line two"]);
        assert_eq!(expand(std::slice::from_ref(&dir)).unwrap().logs, vec![p.clone()]);
        // Beside the logs: their facts, a binary; named on its own, a file is read whatever it holds.
        std::fs::write(dir.join("r0.json"), "{}").unwrap();
        std::fs::write(dir.join("core"), [0x7f, b'E', b'L', b'F', 0, 0]).unwrap();
        let e = expand(std::slice::from_ref(&dir)).unwrap();
        assert_eq!((e.logs, e.skipped), (vec![p.clone()], vec![dir.join("core"), dir.join("r0.json")]));
        assert_eq!(expand(&[dir.join("r0.json")]).unwrap().logs, vec![dir.join("r0.json")]);
        let err = expand(&[dir.join("absent.log")]).unwrap_err().to_string();
        assert!(err.contains("absent.log"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pieces_of_any_size_give_the_lines_the_whole_gives() {
        let mut data = b"one\r\ntwo\n\n".to_vec();
        data.extend(vec![b'x'; MAX_LINE + 10]);
        data.extend_from_slice(b"\nafter a long line\n");
        data.extend(vec![b'y'; MAX_LINE]);
        data.extend_from_slice(b"\nexactly the limit before\nno newline at the end");
        let whole = lines(&data);
        assert_eq!(whole.len(), 8);
        assert!(whole[3].1 && whole[3].0.len() == MAX_LINE, "the long line is cut and flagged");
        assert_eq!(whole[5], (vec![b'y'; MAX_LINE], false), "a line of exactly MAX_LINE is whole");
        for piece in [1, 2, 3, 7, 4096, MAX_LINE - 1, MAX_LINE + 1] {
            let (mut split, mut got) = (Lines::default(), Vec::new());
            let mut f = |l: Text, cut| got.push((l.bytes().to_vec(), cut));
            for chunk in data.chunks(piece) {
                split.push(chunk, &mut f);
                assert!(split.carry.len() <= MAX_LINE, "at most one line's start is held");
            }
            split.finish(&mut f);
            assert_eq!(got, whole, "pieces of {piece} bytes");
        }
    }

    #[test]
    fn a_cut_gzip_reads_what_decompressed_and_names_where_it_broke() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..2000).map(|i| format!("h:1:2 [0] NCCL INFO line {i} of a job\n")).collect();
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(text.as_bytes()).unwrap();
        let gz = e.finish().unwrap();
        let p = dir.path().join("r0.log.gz");
        std::fs::write(&p, &gz[..gz.len() / 2]).unwrap();
        let mut input = open(&p).unwrap();
        let mut got = Vec::new();
        for_each_line(&mut input, |l, _| got.push(String::from_utf8_lossy(l.bytes()).into_owned())).unwrap();
        let damage = input.take_damage().expect("the cut is reported");
        assert!(got.len() > 100 && got.len() < 2000, "{} lines", got.len());
        assert!(text.starts_with(&got[..got.len() - 1].join("\n")), "the lines before the cut are the log's");
        assert_eq!(damage.offset, gz.len() as u64 / 2, "{damage}");
        assert!(damage.decompressed > 0 && damage.decompressed < text.len() as u64, "{damage}");
        assert!(damage.to_string().starts_with(&format!("gzip data damaged at byte {}", gz.len() / 2)), "{damage}");

        // Garbage after a whole member, and a member with a bad checksum, end the input the same way.
        let mut bad = gz.clone();
        bad.extend_from_slice(b"\x1f\x8bnot gzip");
        std::fs::write(&p, &bad).unwrap();
        let mut input = open(&p).unwrap();
        let mut n = 0;
        for_each_line(&mut input, |_, _| n += 1).unwrap();
        assert_eq!(n, 2000);
        assert!(input.take_damage().is_some());
    }

    #[test]
    fn devices_are_refused_and_fifos_kept() {
        let err = expand(&[PathBuf::from("/dev/zero")]).unwrap_err();
        assert!(matches!(err, ReadError::NotALog { kind: FileKind::CharDevice, .. }), "{err}");
        assert!(err.to_string().starts_with("'/dev/zero' is a character device: expected a log file"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(expand(std::slice::from_ref(&fifo)).unwrap().logs, vec![fifo.clone()]);
        // Inside a directory only regular files are taken.
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.log")).unwrap();
        assert_eq!(expand(&[dir.path().to_path_buf()]).unwrap(), Expanded::default());
    }

    #[test]
    fn a_file_that_grows_while_read_is_read_to_its_size_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("growing.log");
        std::fs::write(&p, "first\n").unwrap();
        let mut input = open(&p).unwrap();
        std::fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"written after\n").unwrap();
        let mut text = String::new();
        input.read_to_string(&mut text).unwrap();
        assert_eq!(text, "first\n");
        assert_eq!(input.grown(), Some((6, 20)));
    }
}
