//! A cursor for reading NCCL's printf formats back: literals, numbers and words, left to right, without
//! allocating. Every parser of a frequent line uses it instead of a regex.

/// The unread rest of a message.
#[derive(Debug, Clone, Copy)]
pub struct Scan<'a> {
    rest: &'a str,
}

impl<'a> Scan<'a> {
    pub fn new(s: &'a str) -> Self {
        Scan { rest: s }
    }

    pub fn rest(&self) -> &'a str {
        self.rest
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Consumes `lit` if the rest starts with it.
    // Inlined: with the literal's length known where it is called, the comparison compiles to a few word loads,
    // not a loop over its bytes nor a call to memcmp.
    #[inline]
    pub fn lit(&mut self, lit: &str) -> Option<()> {
        self.rest = self.rest.strip_prefix(lit)?;
        Some(())
    }

    /// Consumes `lit` if the rest starts with it; says whether it did.
    #[inline]
    pub fn eat(&mut self, lit: &str) -> bool {
        self.lit(lit).is_some()
    }

    /// Skips spaces and tabs.
    pub fn ws(&mut self) -> &mut Self {
        let n = self.rest.bytes().take_while(|&b| b == b' ' || b == b'\t').count();
        self.rest = &self.rest[n..];
        self
    }

    /// The text up to the next space (or the end), at least one byte.
    pub fn word(&mut self) -> Option<&'a str> {
        let end = self.rest.bytes().position(|b| b == b' ' || b == b'\t').unwrap_or(self.rest.len());
        self.take(end)
    }

    /// The text up to `delim` (not included, not consumed), at least one byte.
    // Inlined, as `find` is: a literal delimiter's rarest byte is then picked at compile time.
    #[inline]
    pub fn until(&mut self, delim: &str) -> Option<&'a str> {
        let end = find(self.rest, delim)?;
        self.take(end)
    }

    /// The text while `f` holds, at least one byte.
    pub fn take_while(&mut self, f: impl Fn(u8) -> bool) -> Option<&'a str> {
        let end = self.rest.bytes().position(|b| !f(b)).unwrap_or(self.rest.len());
        self.take(end)
    }

    fn take(&mut self, end: usize) -> Option<&'a str> {
        if end == 0 {
            return None;
        }
        let (head, tail) = self.rest.split_at(end);
        self.rest = tail;
        Some(head)
    }

    /// A decimal number, optionally negative when `T` is signed; `None` (nothing consumed) past `T`'s range, as
    /// `str::parse` would say. Accumulated in one pass: this reads most numbers of every line.
    pub fn num<T: Int>(&mut self) -> Option<T> {
        let (n, end) = num_prefix(self.rest.as_bytes())?;
        self.rest = &self.rest[end..];
        Some(n)
    }

    /// A float as printf's `%f`/`%.1f` write it (`12.5`, `-1.0`, `5000`).
    pub fn float(&mut self) -> Option<f64> {
        let end =
            self.rest.bytes().position(|b| !(b.is_ascii_digit() || b == b'.' || b == b'-')).unwrap_or(self.rest.len());
        let v = self.rest[..end].parse().ok()?;
        self.rest = &self.rest[end..];
        Some(v)
    }

    /// Hex digits (`%lx`, `%llx`), with or without `0x`.
    pub fn hex(&mut self) -> Option<u64> {
        self.eat("0x");
        let digits = self.take_while(|b| b.is_ascii_hexdigit())?;
        u64::from_str_radix(digits, 16).ok()
    }

    /// ` key VALUE` anywhere later in the rest: the word after the first ` key `.
    pub fn field(&self, key: &str) -> Option<&'a str> {
        field(self.rest, key)
    }
}

/// The decimal number `b` starts with, as [`Scan::num`] reads it, and how many bytes it takes: for parsers that
/// walk a long line by index rather than through a [`Scan`].
pub fn num_prefix<T: Int>(b: &[u8]) -> Option<(T, usize)> {
    let neg = b.first() == Some(&b'-');
    let from = usize::from(neg);
    let mut end = from;
    let mut v = 0u64;
    while let Some(d) = b.get(end).map(|c| c.wrapping_sub(b'0')).filter(|&d| d < 10) {
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
        end += 1;
    }
    if end == from {
        return None;
    }
    Some((T::from_digits(neg, v)?, end))
}

/// Where the first byte `b` is among the eight bytes of `w` (read little-endian, as [`word_at`] does): one
/// word-wide test instead of eight compares. The classic zero-byte test on `w ^ bbbbbbbb`; its lowest flag is
/// exact (a borrow can only flag bytes above the first match).
pub const fn byte_in_word(w: u64, b: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    let x = w ^ (LO * b as u64);
    let flags = x.wrapping_sub(LO) & !x & (LO << 7);
    if flags == 0 {
        None
    } else {
        Some(flags.trailing_zeros() as usize / 8)
    }
}

/// The eight bytes of `b` from `i` as one word, if there are eight.
pub fn word_at(b: &[u8], i: usize) -> Option<u64> {
    let bytes: [u8; 8] = b.get(i..i.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// An integer type [`Scan::num`] reads.
pub trait Int: Sized {
    /// The value of a decimal's digits (`v`), negated if `neg`, where the type holds it.
    fn from_digits(neg: bool, v: u64) -> Option<Self>;
}

macro_rules! int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            fn from_digits(neg: bool, v: u64) -> Option<Self> {
                // An unsigned type takes no sign, not even `-0` (as `str::parse` says).
                if neg {
                    <$t>::try_from(-i128::from(v)).ok().filter(|_| <$t>::MIN != 0)
                } else {
                    <$t>::try_from(v).ok()
                }
            }
        }
    )*};
}
int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// How often a byte appears in log text, roughly: spaces most, then lowercase letters and digits.
const fn commonness(b: u8) -> u8 {
    match b {
        b' ' => 4,
        b'a'..=b'z' => 3,
        b'0'..=b'9' => 2,
        b'A'..=b'Z' => 1,
        _ => 0,
    }
}

/// The needle's rarest byte (the first of the rarest) and where it is; `None` for an empty needle.
const fn rarest(n: &[u8]) -> Option<(usize, u8)> {
    if n.is_empty() {
        return None;
    }
    let (mut k, mut i) = (0, 1);
    while i < n.len() {
        if commonness(n[i]) < commonness(n[k]) {
            k = i;
        }
        i += 1;
    }
    Some((k, n[k]))
}

/// Where `needle` first occurs in `hay`: a byte search for its rarest byte, then a comparison. For the short
/// delimiters of NCCL's formats this beats building a substring searcher for each call. A literal needle on a
/// hot path is a [`Needle`], its rarest byte picked at compile time.
// Inlined: where the needle is a literal, its rarest byte is then picked at compile time.
#[inline]
pub fn find(hay: &str, needle: &str) -> Option<usize> {
    let (k, rare) = rarest(needle.as_bytes())?;
    find_by(hay.as_bytes(), needle.as_bytes(), k, rare)
}

/// A needle for [`find`] with its rarest byte picked once: `const` needles pick it at compile time.
#[derive(Debug, Clone, Copy)]
pub struct Needle {
    text: &'static str,
    k: usize,
    rare: u8,
}

impl Needle {
    /// Panics (at compile time, for a `const`) on an empty needle.
    pub const fn new(text: &'static str) -> Self {
        match rarest(text.as_bytes()) {
            Some((k, rare)) => Needle { text, k, rare },
            None => panic!("an empty needle"),
        }
    }

    pub fn text(&self) -> &'static str {
        self.text
    }

    /// Where the needle first occurs in `hay`, as [`find`] says.
    pub fn find(&self, hay: &str) -> Option<usize> {
        find_by(hay.as_bytes(), self.text.as_bytes(), self.k, self.rare)
    }
}

/// [`find`] with the needle's rarest byte, `rare` at `k`, chosen.
fn find_by(h: &[u8], n: &[u8], k: usize, rare: u8) -> Option<usize> {
    let mut from = k;
    while from <= h.len() {
        let at = from + memchr::memchr(rare, &h[from..])? - k;
        // Compared byte by byte: a call to memcmp costs more than these few bytes.
        if h.len() - at >= n.len() && h[at..].iter().zip(n).all(|(x, y)| x == y) {
            return Some(at);
        }
        from = at + k + 1;
    }
    None
}

/// Where `needle` last occurs in `hay`.
pub fn rfind(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    let first = *n.first()?;
    let mut end = h.len();
    while let Some(at) = memchr::memrchr(first, &h[..end]) {
        if h[at..].starts_with(n) {
            return Some(at);
        }
        end = at;
    }
    None
}

/// The word after `key ` in `s` (`key` preceded by the start or a space).
pub fn field<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = find(&s[from..], key).map(|i| i + from) {
        let after = i + key.len();
        if (i == 0 || b[i - 1] == b' ') && b.get(after) == Some(&b' ') {
            let mut sc = Scan::new(&s[after + 1..]);
            return sc.word();
        }
        from = after;
    }
    None
}

/// [`field`] for several keys (none holding a space) in one pass over `s`: for each key, the word after its first
/// ` key ` (or `key ` at the start), as [`field`] would find it.
pub fn fields<'a, const N: usize>(s: &'a str, keys: [&str; N]) -> [Option<&'a str>; N] {
    let mut out = [None; N];
    let mut found = [false; N];
    let mut left = N;
    let b = s.as_bytes();
    let shortest = keys.iter().map(|k| k.len()).min().unwrap_or(0);
    let longest = keys.iter().map(|k| k.len()).max().unwrap_or(0);
    let mut start = 0;
    // Each space-separated token that a space follows, and the word after that space. A plain loop: the tokens
    // are a few bytes, shorter than a memchr call's set-up pays for.
    while let Some(len) = b[start..].iter().position(|&c| c == b' ') {
        let (tok, next) = (&b[start..start + len], start + len + 1);
        start = next;
        // Most values (`0x7f3a55d3`, `16`) are no key's length.
        if len < shortest || len > longest {
            continue;
        }
        for (i, key) in keys.iter().enumerate() {
            if !found[i] && key.len() == len && key.as_bytes().iter().zip(tok).all(|(x, y)| x == y) {
                found[i] = true;
                left -= 1;
                let word = b[next..].iter().position(|&c| c == b' ' || c == b'\t').unwrap_or(b.len() - next);
                out[i] = (word > 0).then(|| &s[next..next + word]);
            }
        }
        if left == 0 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_printf_output_back() {
        let mut s = Scan::new("comm 0x55d3 rank -3 nRanks 16 bw 21.500000/ 4.0 busId 1b000");
        s.lit("comm ").unwrap();
        assert_eq!(s.word(), Some("0x55d3"));
        s.lit(" rank ").unwrap();
        assert_eq!(s.num::<i32>(), Some(-3));
        assert_eq!(s.field("nRanks"), Some("16"));
        assert_eq!(s.field("busId"), Some("1b000"));
        assert_eq!(s.field("bus"), None);
        s.lit(" nRanks ").unwrap();
        assert_eq!(s.num::<u32>(), Some(16));
        s.lit(" bw ").unwrap();
        assert_eq!(s.float(), Some(21.5));
        s.lit("/").unwrap();
        assert_eq!(s.ws().float(), Some(4.0));
        s.lit(" busId ").unwrap();
        assert_eq!(s.hex(), Some(0x1b000));
        assert!(s.is_empty());
        assert_eq!(Scan::new("x").num::<u32>(), None);
        assert_eq!(Scan::new("-").num::<i32>(), None);
        assert_eq!(Scan::new("99999999999").num::<u32>(), None);
        // As `str::parse` reads them, at each type's edges.
        for text in
            ["-0", "0", "-1", "255", "256", "-128", "-129", "007", "-", "18446744073709551616", "-9223372036854775808"]
        {
            assert_eq!(Scan::new(text).num::<u8>(), text.parse().ok(), "{text}");
            assert_eq!(Scan::new(text).num::<i8>(), text.parse().ok(), "{text}");
            assert_eq!(Scan::new(text).num::<i64>(), text.parse().ok(), "{text}");
            assert_eq!(Scan::new(text).num::<u64>(), text.parse().ok(), "{text}");
        }
        assert_eq!((find("a -> b -> c", " -> "), rfind("a -> b -> c", " -> ")), (Some(1), Some(6)));
        assert_eq!((find("abc", "x"), find("ab", "abc"), rfind("", "a")), (None, None, None));
        assert_eq!((find("abc", ""), Needle::new(" -> ").find("a -> b -> c")), (None, Some(1)));
    }

    #[test]
    fn byte_in_word_finds_the_first_of_each_byte() {
        for text in [b"ab: cd R", b"\x01\x00\x01\x01RRR\x00", b"\xff\xfe\x7f\x80 \x00\x01\x02"] {
            let w = word_at(text, 0).unwrap();
            for b in 0..=255u8 {
                assert_eq!(byte_in_word(w, b), text.iter().position(|&c| c == b), "{text:?} {b}");
            }
        }
        assert_eq!((word_at(b"ab: cd R", 1), word_at(b"", 0)), (None, None));
    }

    #[test]
    fn fields_finds_what_field_finds() {
        let keys = ["rank", "nranks", "busId", "x", "comm", "a"];
        for s in [
            "ncclCommInitRank comm 0x1 rank 3 nranks 8 cudaDev 1 busId 1b000 - Init START",
            "nranks rank 5 rank 6",
            "rank  5 nranks\t3 nranks 4 busId",
            "x\ty x z comm comm a\tb a",
            "",
            "rank",
            "  rank 1",
        ] {
            let one: Vec<Option<&str>> = keys.iter().map(|k| field(s, k)).collect();
            assert_eq!(fields(s, keys).to_vec(), one, "{s:?}");
        }
    }
}
