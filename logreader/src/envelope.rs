//! The envelope of one log line: whatever a launcher put in front, NCCL's `host:pid:tid [dev]` prefix, the level
//! and (for WARN/TRACE) the source location, as NCCL 2.28.9's `ncclDebugLog` (`src/debug.cc`) writes them.
//! The prefix is read backwards from the `NCCL INFO|WARN|TRACE` marker, so any launcher prefix in front of it
//! (`[1,0]<stdout>:`, `[rank3]:`, `0: ` from `srun -l`, `(pid=123)`, `| 2024-… |`, line numbers, `node00: `) is
//! tolerated.

use collscope_model::scan;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Trace,
    /// `host:pid:tid NCCL CALL ncclAllReduce(...)` (API call tracing).
    Call,
    /// `NCCL version ...` printed without a prefix.
    Version,
    /// A message without NCCL's prefix at all (`Ring 00 : 6 -> 2 [receive] via NET/IB/0` pasted bare): read as
    /// INFO when the message dispatch knows its first bytes ([`crate::message::parse_bare`]).
    Bare,
}

/// One NCCL line, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub host: Option<&'a str>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub dev: Option<i32>,
    pub level: Level,
    /// NCCL source `file:line` of a WARN or TRACE.
    pub location: Option<&'a str>,
    /// The rank a launcher printed in front of the line (`[1,3]<stdout>:`, `[rank3]:`, `3: `).
    pub launcher_rank: Option<u32>,
    pub msg: &'a str,
    /// Byte offset in the line where the host token starts (or NCCL's prefix, without a host): what comes before
    /// is a launcher's, or another record's glued on.
    pub start: usize,
}

/// A line, NCCL's or another program's. Another program's line carries no launcher rank: [`launcher_rank`] reads
/// it where the line is kept (a warning, a version), not on every line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line<'a> {
    Nccl(Envelope<'a>),
    Other { text: &'a str },
}

/// Whether `chunk` holds a byte `f` accepts: a fold over a fixed 16 bytes, which the compiler makes a few vector
/// instructions, where `any` would test byte by byte.
#[inline(always)]
fn any16(chunk: &[u8; 16], f: impl Fn(u8) -> bool) -> bool {
    chunk.iter().fold(false, |acc, &b| acc | f(b))
}

/// Whether `b` holds a byte `f` accepts, tested by vector compares (see [`any16`]). The last 16 bytes overlap the
/// chunk before them rather than being tested one by one.
#[inline(always)]
pub(crate) fn any_byte(b: &[u8], f: impl Fn(u8) -> bool + Copy) -> bool {
    let Some(last) = b.len().checked_sub(16) else { return b.iter().fold(false, |acc, &x| acc | f(x)) };
    let chunk = |c: &[u8]| <&[u8; 16]>::try_from(c).is_ok_and(|c| any16(c, f));
    // 32 bytes an iteration (two vector tests, one branch). `any` over them, not a fold: its early exit keeps the
    // compiler from vectorising across chunks (strided gathers, several times slower) instead of within each.
    let pair = |c: &[u8]| <&[u8; 32]>::try_from(c).is_ok_and(|c| c.iter().fold(false, |acc, &x| acc | f(x)));
    let mut pairs = b.chunks_exact(32);
    pairs.any(pair) || pairs.remainder().get(..16).is_some_and(chunk) || chunk(&b[last..])
}

/// The bytes of `w` (8 bytes, little-endian) that are an `N`, as their high bits. Exact for every byte: no carry
/// crosses from one byte into the next (the classic zero-byte test is exact only for the first).
fn n_bits(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = w ^ 0x4e4e_4e4e_4e4e_4e4e;
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Where the next `NCCL ` starts in `text`, at or after `from`. Most messages hold no `N`: chunks of 16 bytes
/// without one are passed over by one vector test each ([`any16`]), and in a chunk with one its `N`s are found 8
/// bytes at a time ([`n_bits`]) and compared. (`memmem` set up a searcher on every call, and a memchr per `N` cost
/// more than these short lines.)
fn find_marker(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    let is_n = |c: u8| c == b'N';
    let is_marker = |i: usize| b[i..].starts_with(b"NCCL ");
    let mut at = from;
    while let Some(chunk) = b.get(at..at + 16).and_then(|c| <&[u8; 16]>::try_from(c).ok()) {
        if any16(chunk, is_n) {
            for (half, word) in chunk.chunks_exact(8).enumerate() {
                let mut bits = n_bits(word.try_into().map_or(0, u64::from_le_bytes));
                while bits != 0 {
                    let i = at + 8 * half + bits.trailing_zeros() as usize / 8;
                    if is_marker(i) {
                        return Some(i);
                    }
                    bits &= bits - 1;
                }
            }
        }
        at += 16;
    }
    // Fewer than 16 bytes left: the text's last 16 tell at once whether they hold an `N`.
    if b.len() >= 16 && !any_byte(&b[b.len() - 16..], is_n) {
        return None;
    }
    (at..b.len()).find(|&i| is_n(b[i]) && is_marker(i))
}

/// Whether `text` holds `NCCL ` anywhere (a quick test before [`split`]).
pub fn has_marker(text: &str) -> bool {
    find_marker(text, 0).is_some()
}

/// The bytes of a host name that the forward reading takes (`[A-Za-z0-9._<-]`), one table lookup a byte.
static HOST_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'<');
        c += 1;
    }
    t
};

/// The ASCII digits at `from` (at least one, else `None`): where they end and their value (`None` past u32).
#[inline(always)]
fn number(b: &[u8], from: usize) -> Option<(usize, Option<u32>)> {
    let mut end = from;
    let mut v = 0u64;
    while let Some(d) = b.get(end).map(|c| c.wrapping_sub(b'0')).filter(|&d| d < 10) {
        // Clamped just past u32 (one compare, no overflow checks): a value past u32 stays past it.
        v = (v * 10 + u64::from(d)).min(1 << 32);
        end += 1;
    }
    (end > from).then(|| (end, u32::try_from(v).ok()))
}

/// [`number`] for a pid or tid (4 to 7 digits): read at once by [`digits8`] where 8 bytes are there.
#[inline(always)]
fn long_number(b: &[u8], from: usize) -> Option<(usize, Option<u32>)> {
    match b.get(from..from + 8).and_then(|w| w.try_into().ok()).and_then(|w| digits8(u64::from_le_bytes(w))) {
        Some((n, v)) => (n > 0).then_some((from + n, Some(v))),
        None => number(b, from),
    }
}

/// The digits that start the 8 bytes `w` (little-endian: the first byte lowest) and their value, read at once (a
/// pid or tid is 4 to 7 digits, a loop costs ten instructions a digit); `None` when all 8 are digits, which the
/// loop reads.
fn digits8(w: u64) -> Option<(usize, u32)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // A byte is a digit when its high nibble is 3 before and after adding 6. A carry out of a byte (0xfa and up,
    // no digit) only disturbs the bytes after it, past the first non-digit.
    let other = ((w & (0xf0 * ONES)) ^ (0x30 * ONES)) | ((w.wrapping_add(6 * ONES) & (0xf0 * ONES)) ^ (0x30 * ONES));
    // Each non-zero byte of `other` as its high bit, exactly (no carry crosses bytes).
    let nonzero = (other | ((other & (0x7f * ONES)) + 0x7f * ONES)) & (0x80 * ONES);
    if nonzero == 0 {
        return None;
    }
    let n = nonzero.trailing_zeros() as usize / 8;
    if n == 0 {
        return Some((0, 0));
    }
    // The n digits' values moved to the top bytes (zeros before them), then folded pairwise: 2, 4, 8 digits.
    let mut v = (w.wrapping_sub(0x30 * ONES) & (u64::MAX >> (64 - 8 * n))) << (64 - 8 * n);
    v = (v.wrapping_mul(10) + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_ffff_0000_ffff;
    v = (v.wrapping_mul(10_000) + (v >> 32)) & 0xffff_ffff;
    Some((n, v as u32))
}

/// The common case read forwards: `host:pid:tid [dev] NCCL INFO msg` with nothing before the host. `None` sends
/// the line to the general (backwards) reading. One pass, each byte looked at once: this runs on almost every line.
fn standard(line: &str) -> Option<Envelope<'_>> {
    let b = line.as_bytes();
    // The host name and its colon in one plain loop: a few bytes, shorter than memchr's set-up pays for. An
    // anonymized host (`<cluster_name>`) reads here too: `<` anywhere and `>` at its end are what the general
    // reading takes for the host's own.
    let limit = b.len().min(256);
    let mut name = 0;
    while name < limit && HOST_BYTE[usize::from(b[name])] {
        name += 1;
    }
    if name == limit {
        return None;
    }
    let mut colon = name;
    while b.get(colon) == Some(&b'>') {
        colon += 1;
    }
    if colon == 0 || b.get(colon) != Some(&b':') {
        return None;
    }
    let (pid_end, pid) = long_number(b, colon + 1)?;
    if b.get(pid_end) != Some(&b':') {
        return None;
    }
    let (tid_end, tid) = long_number(b, pid_end + 1)?;
    if b.get(tid_end..tid_end + 2) != Some(b" [") {
        return None;
    }
    let dev_from = tid_end + 2;
    let neg = b.get(dev_from) == Some(&b'-');
    let (dev_end, dev) = number(b, dev_from + usize::from(neg))?;
    let dev = i32::try_from(dev?).ok()?;
    // `] NCCL INFO ` compared at once (the compiler makes it two loads); `] NCCL INFO` ending the line is an empty
    // message.
    const INFO: &[u8; 12] = b"] NCCL INFO ";
    let msg = match b.get(dev_end..dev_end + 12) {
        Some(s) if s == INFO => &line[dev_end + 12..],
        None if b[dev_end..] == INFO[..11] => &line[b.len()..],
        _ => return None,
    };
    Some(Envelope {
        host: Some(&line[..colon]),
        pid,
        tid,
        dev: Some(if neg { -dev } else { dev }),
        level: Level::Info,
        location: None,
        launcher_rank: None,
        msg,
        start: 0,
    })
}

/// Splits a line (without its newline) into its envelope and message.
pub fn split(line: &str) -> Line<'_> {
    if let Some(env) = standard(line) {
        return Line::Nccl(env);
    }
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(pos) = find_marker(line, from) {
        // `NCCL ` cannot overlap itself, and is ASCII: the byte after it is a char boundary.
        from = pos + 5;
        if pos > 0 && !matches!(bytes[pos - 1], b' ' | b':' | b'>' | b']' | b'|' | b'\t') {
            continue;
        }
        let after = &line[pos + 5..];
        let (level, rest) = if let Some(r) = after.strip_prefix("INFO") {
            (Level::Info, r)
        } else if let Some(r) = after.strip_prefix("WARN") {
            (Level::Warn, r)
        } else if let Some(r) = after.strip_prefix("TRACE") {
            (Level::Trace, r)
        } else if let Some(r) = after.strip_prefix("CALL") {
            (Level::Call, r)
        } else if after.starts_with("version ") && prefix_is_launcher_only(&line[..pos]) {
            return Line::Nccl(Envelope {
                host: None,
                pid: None,
                tid: None,
                dev: None,
                level: Level::Version,
                location: None,
                launcher_rank: launcher_rank(&line[..pos]),
                msg: &line[pos..],
                start: pos,
            });
        } else {
            continue;
        };
        if !(rest.is_empty() || rest.starts_with(' ')) {
            continue;
        }
        let msg = rest.strip_prefix(' ').unwrap_or(rest);
        let mut env = parse_prefix(&line[..pos], level, msg);
        env.start = env.start.min(pos);
        return Line::Nccl(env);
    }
    Line::Other { text: line }
}

/// A line without NCCL's prefix, as a candidate bare message: a launcher's prefix in front of it (`[1,0]<stdout>:`,
/// `[rank3]:`, `3: `) is taken off, the message's own indentation (the system tree's) kept.
pub fn bare(line: &str) -> Envelope<'_> {
    let launcher = launcher_end(line);
    Envelope {
        host: None,
        pid: None,
        tid: None,
        dev: None,
        level: Level::Bare,
        location: None,
        launcher_rank: launcher.map(|(rank, _)| rank),
        msg: &line[launcher.map_or(0, |(_, end)| end)..],
        start: 0,
    }
}

/// A launcher's prefix at the start of `line` (Open MPI's `[1,3]<stdout>:`, torchrun's `[rank3]:`, `srun -l`'s
/// `3: `): the rank it names and where the line goes on after it.
fn launcher_end(line: &str) -> Option<(u32, usize)> {
    let b = line.as_bytes();
    let digits = |from: usize| b[from.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let rank = |from: usize, n: usize| line.get(from..from + n)?.parse().ok();
    match b.first()? {
        b'[' if b.starts_with(b"[rank") => {
            let n = digits(5);
            let end = 5 + n;
            (b.get(end..end + 2) == Some(b"]:")).then_some(())?;
            Some((rank(5, n)?, end + 2 + usize::from(b.get(end + 2) == Some(&b' '))))
        }
        b'[' => {
            let close = const { scan::Needle::new(">:") }.find(&line[..floor_char_boundary(line, 32)])?;
            let (_, r) = line[1..close].split_once("]<")?.0.split_once(',')?;
            Some((r.trim().parse().ok()?, close + 2))
        }
        c if c.is_ascii_digit() => {
            let n = digits(0);
            (n <= 6 && b.get(n..n + 2) == Some(b": ")).then_some(())?;
            Some((rank(0, n)?, n + 2))
        }
        _ => None,
    }
}

/// A bare version line has nothing but a launcher prefix (or nothing) before it.
fn prefix_is_launcher_only(prefix: &str) -> bool {
    let p = prefix.trim();
    p.is_empty() || p.ends_with(':') || p.ends_with('|') || p.ends_with(']')
}

/// Where `part` (a slice of `whole`) starts in it.
fn offset(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

fn parse_prefix<'a>(prefix: &'a str, level: Level, msg: &'a str) -> Envelope<'a> {
    let mut env = Envelope {
        host: None,
        pid: None,
        tid: None,
        dev: None,
        level,
        location: None,
        launcher_rank: None,
        msg,
        start: prefix.len(),
    };
    let mut rest = prefix.trim_end();
    if matches!(level, Level::Warn | Level::Trace) {
        if let Some((head, tok)) = last_token(rest) {
            if is_location(tok) {
                env.location = Some(tok);
                rest = head;
            }
        }
    }
    if level == Level::Trace {
        if let Some((head, tok)) = last_token(rest) {
            if tok.parse::<f64>().is_ok() {
                rest = head;
            }
        }
    }
    if let Some((head, tok)) = last_token(rest) {
        if let Some(dev) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')).and_then(|t| t.parse().ok()) {
            env.dev = Some(dev);
            env.start = offset(prefix, tok);
            rest = head;
        }
    }
    if let Some((head, tok)) = last_token(rest) {
        if let Some((host, pid, tid, junk)) = host_pid_tid(tok) {
            env.host = Some(host);
            env.pid = Some(pid);
            env.tid = Some(tid);
            env.start = offset(prefix, host);
            env.launcher_rank = launcher_rank(head).or_else(|| launcher_rank(junk));
            return env;
        }
    }
    env.launcher_rank = launcher_rank(rest);
    env
}

fn last_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_end();
    if s.is_empty() {
        return None;
    }
    match memchr::memrchr2(b' ', b'\t', s.as_bytes()) {
        Some(i) => Some((&s[..i], &s[i + 1..])),
        None => Some(("", s)),
    }
}

/// `misc/socket.cc:518`.
fn is_location(tok: &str) -> bool {
    match tok.rsplit_once(':') {
        Some((file, line)) => {
            !file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) && file.contains('.')
        }
        None => false,
    }
}

/// `host:pid:tid`, where the host may carry a launcher prefix glued to it (`[1,0]<stdout>:node00`).
/// Returns the host, pid, tid and the glued prefix.
fn host_pid_tid(tok: &str) -> Option<(&str, u32, u32, &str)> {
    let (rest, tid) = tok.rsplit_once(':')?;
    let (hostpart, pid) = rest.rsplit_once(':')?;
    let tid = tid.parse().ok()?;
    let pid = pid.parse().ok()?;
    // `[1,0]<stdout>:node00` glues a launcher prefix on; a '>' that ends the part is the host's own
    // (`<cluster_name>` in anonymized logs).
    let cut = hostpart.trim_end_matches('>').rfind([':', '|', '>']).map(|i| i + 1).unwrap_or(0);
    let host = &hostpart[cut..];
    if host.is_empty() {
        return None;
    }
    Some((host, pid, tid, &hostpart[..cut]))
}

/// The rank a launcher put in front of a line: Open MPI's `[1,3]<stdout>:`, torchrun's `[rank3]:` and
/// `srun -l`'s `3: `. `srun -l`'s at the line's start (after blanks); the others in its first 96 bytes, `[rank`
/// before `]<std` wherever each is.
pub fn launcher_rank(text: &str) -> Option<u32> {
    let t = text.trim_start();
    let tb = t.as_bytes();
    let n = tb.iter().take_while(|b| b.is_ascii_digit()).count();
    if (1..=7).contains(&n)
        && tb.get(n) == Some(&b':')
        && matches!(tb.get(n + 1), None | Some(b' '))
        && text.len() - t.len() + n < 96
    {
        return t[..n].parse().ok();
    }
    let head = &text.as_bytes()[..text.len().min(96)];
    // Both other forms need a `[`: most lines of other programs hold none, told by a vector test (see `any_byte`).
    if !any_byte(head, |c| c == b'[') {
        return None;
    }
    // One pass over the brackets (a memchr, not a search for each needle: this runs on every line of other
    // programs). `[rank`: the first one only; `]<std`: the first one, with the last `[` before it.
    let mut rank_tried = false;
    let mut open = None;
    let mut stdio: Option<Option<u32>> = None;
    for i in memchr::memchr2_iter(b'[', b']', head) {
        if head[i] == b'[' {
            if !rank_tried && head[i + 1..].starts_with(b"rank") {
                rank_tried = true;
                if let Some((_, Some(r))) = number(head, i + 5) {
                    return Some(r);
                }
            }
            open = Some(i);
        } else if stdio.is_none() && head[i + 1..].starts_with(b"<std") {
            // The brackets are ASCII, so char boundaries; `[1, 3]` keeps its blanks for `trim`.
            stdio = Some(open.and_then(|o| text[o + 1..i].split_once(',')).and_then(|(_, r)| r.trim().parse().ok()));
            if rank_tried {
                break;
            }
        }
    }
    stdio.flatten()
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nccl(line: &str) -> Envelope<'_> {
        match split(line) {
            Line::Nccl(e) => e,
            other => panic!("not an NCCL line: {other:?}"),
        }
    }

    #[test]
    fn plain_info_line() {
        let e = nccl("node00:20000:30000 [3] NCCL INFO Ring 00 : 3[3] -> 1[1] via P2P/IPC");
        assert_eq!((e.host, e.pid, e.tid, e.dev), (Some("node00"), Some(20000), Some(30000), Some(3)));
        assert_eq!(e.level, Level::Info);
        assert_eq!(e.msg, "Ring 00 : 3[3] -> 1[1] via P2P/IPC");
    }

    #[test]
    fn the_common_prefix_read_forwards_agrees_with_the_general_reading() {
        for line in [
            "node00:20000:30000 [3] NCCL INFO Ring 00 : 3[3] -> 1[1] via P2P/IPC",
            "gpu-a01.cluster_x:1:2 [0] NCCL INFO ",
            "h:1:2 [-1] NCCL INFO x",
            "<cluster_name>:20000:30000 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read",
            "a<b>>:1:2 [0] NCCL INFO x",
        ] {
            let fast = standard(line).unwrap();
            let pos = line.find("NCCL ").unwrap();
            let msg = line[pos + 9..].strip_prefix(' ').unwrap_or("");
            assert_eq!(fast, parse_prefix(&line[..pos], Level::Info, msg), "{line}");
        }
        // A pid past u32 is no pid; the rest of the prefix still reads.
        let e = standard("h:99999999999999999999999:2 [-3] NCCL INFO x").unwrap();
        assert_eq!((e.host, e.pid, e.tid, e.dev, e.msg), (Some("h"), None, Some(2), Some(-3), "x"));
        for line in [
            "[1,0]<stdout>:h:1:2 [0] NCCL INFO x",
            "h.a_b-c:1:2 [0]NCCL INFO x",
            ":1:2 [0] NCCL INFO x",
            "h/x:1:2 [0] NCCL INFO x",
            "h:1:2 [0] NCCL INFOx",
            "h:1: [0] NCCL INFO x",
            "h:1:2 [0] NCCL WARN x",
            "a>b:1:2 [0] NCCL INFO x",
        ] {
            assert!(standard(line).is_none(), "{line}");
        }
    }

    #[test]
    fn warn_with_timestamp_and_location() {
        let e = nccl("[2026-12-01 10:00:00] node1:4242:7 [0] transport.rs:88 NCCL WARN oops");
        assert_eq!(e.level, Level::Warn);
        assert_eq!(e.location, Some("transport.rs:88"));
        assert_eq!(e.host, Some("node1"));
        assert_eq!(e.msg, "oops");
    }

    #[test]
    fn trace_line() {
        let e = nccl("node1:4242:7 [1] 12.500000 p.rs:9 NCCL TRACE 65536 Bytes -> Algo 1 proto 2 time 34.69");
        assert_eq!((e.level, e.location, e.dev), (Level::Trace, Some("p.rs:9"), Some(1)));
    }

    #[test]
    fn launcher_prefixes() {
        let e = nccl("[1,3]<stdout>:node00:20037:30011 [3] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>");
        assert_eq!((e.host, e.launcher_rank, e.dev), (Some("node00"), Some(3), Some(3)));
        let e = nccl("node00: node00:20000:30000 [0] NCCL INFO Trees [0] 1/8/-1->0->-1");
        assert_eq!(e.host, Some("node00"));
        let e = nccl("[rank3]: node00:1:2 [3] NCCL INFO x");
        assert_eq!(e.launcher_rank, Some(3));
        let e = nccl("(pid=123) node00:1:2 [0] NCCL INFO y");
        assert_eq!((e.host, e.msg), (Some("node00"), "y"));
        let e = nccl("| 2024-01-02 03:04:05 | node7:1:2 [0] NCCL INFO z");
        assert_eq!(e.host, Some("node7"));
        let e = nccl("   42  node7:1:2 [0] NCCL INFO z");
        assert_eq!(e.host, Some("node7"));
        let e = nccl("3: node7:1:2 [0] NCCL INFO z");
        assert_eq!((e.host, e.launcher_rank), (Some("node7"), Some(3)));
        let e = nccl("<cluster_name>:20000:30000 [0] NCCL INFO z");
        assert_eq!((e.host, e.start), (Some("<cluster_name>"), 0));
        let e = nccl("sx-03: [2025-06-02 14:10:07] sx-03:7300:7300 [0] NCCL INFO z");
        assert_eq!((e.host, e.launcher_rank, e.start), (Some("sx-03"), None, 29));
        let e = nccl("h:1:2 NCCL CALL ncclAllReduce(0x1)");
        assert_eq!((e.level, e.host), (Level::Call, Some("h")));
    }

    #[test]
    fn bare_lines_and_version() {
        let e = nccl(" [0] NCCL INFO NCCL version 2.5.7+cuda10.0");
        assert_eq!((e.host, e.dev, e.msg), (None, Some(0), "NCCL version 2.5.7+cuda10.0"));
        let e = nccl("[1,0]<stdout>:NCCL version 2.5.6+cuda10.2");
        assert_eq!((e.level, e.msg, e.launcher_rank), (Level::Version, "NCCL version 2.5.6+cuda10.2", Some(0)));
        let e = nccl("[0] misc/socket.cc:518 NCCL WARN Net : Call to recv failed : Connection reset by peer  ");
        assert_eq!((e.dev, e.location), (Some(0), Some("misc/socket.cc:518")));
    }

    #[test]
    fn bare_messages_lose_only_a_launcher_prefix() {
        let b = bare("[1,3]<stdout>:Ring 00 : 6 -> 2 [receive] via NET/IB/0");
        assert_eq!(
            (b.level, b.launcher_rank, b.msg),
            (Level::Bare, Some(3), "Ring 00 : 6 -> 2 [receive] via NET/IB/0")
        );
        let b = bare("[rank5]: comm 0x1 rank 5 nRanks 8 nNodes 1 localRanks 8 localRank 5 MNNVL 0");
        assert_eq!((b.launcher_rank, b.msg.starts_with("comm ")), (Some(5), true));
        let b = bare("12: Trees [0] 1/-1/-1->0->-1");
        assert_eq!((b.launcher_rank, b.msg), (Some(12), "Trees [0] 1/-1/-1->0->-1"));
        let b = bare("  CPU/0-0 (1/1/143)");
        assert_eq!((b.launcher_rank, b.msg), (None, "  CPU/0-0 (1/1/143)"));
        assert_eq!(
            bare("32768 Bytes -> Algo 0 proto 0 time 30.599243").msg,
            "32768 Bytes -> Algo 0 proto 0 time 30.599243"
        );
        assert_eq!(bare("[x]<stdout>:y").launcher_rank, None);
    }

    #[test]
    fn the_marker_is_found_wherever_it_lies_in_the_chunks() {
        // Every position, across the 16-byte chunks and the overlapping tail, in texts of every length near them.
        for len in 0..60 {
            for at in 0..=len.max(5) - 5 {
                let mut t = "xN ".repeat(len).chars().take(len).collect::<String>();
                if len >= 5 {
                    t.replace_range(at..at + 5, "NCCL ");
                }
                let want = (len >= 5).then_some(at);
                assert_eq!(find_marker(&t, 0), want, "{t:?}");
                assert_eq!(has_marker(&t), want.is_some(), "{t:?}");
                assert_eq!(find_marker(&t, at.min(t.len())), want, "{t:?}");
                assert_eq!(find_marker(&t, (at + 1).min(t.len())), None, "{t:?}");
            }
        }
        assert!(!has_marker("NCCL_IB_HCA set by environment to mlx5_0 and NET/IB NVLS NCCL"));
        assert!(has_marker("é NCCL_IB_HCA NET/IB NVLS é h:1:2 [0] NCCL INFO x"));
    }

    #[test]
    fn n_bits_marks_exactly_the_n_bytes() {
        for fill in [0u8, b'N', b'M', b'O', 0x80, 0xce, 0xff] {
            for pos in 0..8 {
                for v in 0..=255u8 {
                    let mut w = [fill; 8];
                    w[pos] = v;
                    let want = w.iter().enumerate().fold(0u64, |m, (i, &c)| m | (u64::from(c == b'N') << (8 * i + 7)));
                    assert_eq!(n_bits(u64::from_le_bytes(w)), want, "{w:?}");
                }
            }
        }
    }

    #[test]
    fn any_byte_sees_every_position() {
        let garbled = |c: u8| (c < 0x20) & (c != b'\t');
        for len in 0..100 {
            for pos in 0..len {
                for c in [0u8, 0x1b, 0x1f, b'\t', b' ', b'N', 0x7f, 0xc3] {
                    let mut b = vec![b'a'; len];
                    b[pos] = c;
                    assert_eq!(any_byte(&b, garbled), garbled(c), "{len} {pos} {c}");
                    assert_eq!(any_byte(&b, |x| x == b'N'), c == b'N', "{len} {pos} {c}");
                }
            }
        }
    }

    #[test]
    fn eight_digits_at_once_read_as_the_loop_does() {
        let looped = |b: &[u8]| {
            let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
            (n < 8).then(|| (n, b[..n].iter().fold(0u32, |v, &c| v * 10 + u32::from(c - b'0'))))
        };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly digits, and every byte value near them.
            let b: [u8; 8] = std::array::from_fn(|i| {
                let r = (x >> (i * 8)) as u8;
                if r.is_multiple_of(4) {
                    r
                } else {
                    b'0' + r % 10
                }
            });
            assert_eq!(digits8(u64::from_le_bytes(b)), looped(&b), "{b:?}");
        }
        for b in
            [*b"1234567:", *b"9999999 ", *b"0000000]", *b"12345678", *b"/:012345", *b"\xfa9999999", *b"\xff9:\xfa9999"]
        {
            assert_eq!(digits8(u64::from_le_bytes(b)), looped(&b), "{b:?}");
        }
    }

    #[test]
    fn launcher_ranks() {
        for (text, rank) in [
            ("3: x", Some(3)),
            ("  1234567:", Some(1_234_567)),
            ("12345678: x", None),
            ("3:x", None),
            ("3 : x", None),
            ("[1,3]<stdout>:x", Some(3)),
            ("[1, 7]<stderr>: x", Some(7)),
            ("[a,+5]<stdout>:", Some(5)),
            ("]<stdout>[rank4]", Some(4)),
            ("x]<std[rank9]", Some(9)),
            ("[1,2]<stdout>:[rank3]:", Some(3)),
            ("[rank]:[2,9]<stdout>:", Some(9)),
            ("[rank99999999999]:[1,2]<stdout>:", Some(2)),
            ("]<stdout>:[1,2]<stdout>:", None),
            ("[80746] [rank4]:[E321 ProcessGroupNCCL.cpp:607] [Rank 4]", Some(4)),
            ("#   Rank  4 Pid   3805 on ip-172-31-41-105 device  4 [0x00] Tesla V100-SXM2-32GB", None),
            ("     8388608       2097152   float     sum   2869.7    2.92    5.48  5e-07", None),
        ] {
            assert_eq!(launcher_rank(text), rank, "{text}");
        }
        // Only the first 96 bytes are looked at.
        assert_eq!(launcher_rank(&format!("{}[rank3]", " ".repeat(90))), Some(3));
        assert_eq!(launcher_rank(&format!("{}[rank3]", " ".repeat(91))), None);
        assert_eq!(launcher_rank(&format!("{}3: x", " ".repeat(94))), Some(3));
        assert_eq!(launcher_rank(&format!("{}3: x", " ".repeat(95))), None);
    }

    #[test]
    fn other_programs_lines_are_context() {
        assert!(matches!(split("# Avg bus bandwidth    : 2.80613"), Line::Other { .. }));
        assert!(matches!(split("we use NCCL for this"), Line::Other { .. }));
        match split("[80746] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog") {
            Line::Other { text } => assert_eq!(launcher_rank(text), Some(4)),
            l => panic!("{l:?}"),
        }
    }
}
