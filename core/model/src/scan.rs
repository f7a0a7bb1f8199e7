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
    pub fn lit(&mut self, lit: &str) -> Option<()> {
        // Compared byte by byte: a call to memcmp costs more than a literal's few bytes.
        let (r, l) = (self.rest.as_bytes(), lit.as_bytes());
        if r.len() < l.len() || !r.iter().zip(l).all(|(x, y)| x == y) {
            return None;
        }
        self.rest = &self.rest[l.len()..];
        Some(())
    }

    /// Consumes `lit` if the rest starts with it; says whether it did.
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

    /// A decimal number, optionally negative when `T` is signed.
    pub fn num<T: std::str::FromStr>(&mut self) -> Option<T> {
        let b = self.rest.as_bytes();
        let sign = usize::from(b.first() == Some(&b'-'));
        let digits = b[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let v = self.rest[..sign + digits].parse().ok()?;
        self.rest = &self.rest[sign + digits..];
        Some(v)
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

/// How often a byte appears in log text, roughly: spaces most, then lowercase letters and digits.
fn commonness(b: u8) -> u8 {
    match b {
        b' ' => 4,
        b'a'..=b'z' => 3,
        b'0'..=b'9' => 2,
        b'A'..=b'Z' => 1,
        _ => 0,
    }
}

/// Where `needle` first occurs in `hay`: a byte search for its rarest byte, then a comparison. For the short
/// delimiters of NCCL's formats this beats building a substring searcher for each call.
pub fn find(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    let (k, &rare) = n.iter().enumerate().min_by_key(|(_, &b)| commonness(b))?;
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
        assert_eq!((find("a -> b -> c", " -> "), rfind("a -> b -> c", " -> ")), (Some(1), Some(6)));
        assert_eq!((find("abc", "x"), find("ab", "abc"), rfind("", "a")), (None, None, None));
    }
}
