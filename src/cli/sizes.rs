//! `--sizes`: message sizes as a comma list of sizes and `from:to` ranges (doubling), with binary suffixes
//! (`8`, `64K`, `1M`, `4GiB`, `8:4G`).

use anyhow::{bail, Context, Result};

/// The default sweep: 8 B to 4 GiB, doubling.
pub(crate) const DEFAULT: &str = "8:4G";

fn parse_size(tok: &str) -> Result<u64> {
    let t = tok.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num.parse().with_context(|| format!("size '{t}' does not start with a number"))?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => bail!("size '{t}' has an unknown unit '{other}' (expected B, K, M, G or T, binary)"),
    };
    let v = n.checked_mul(1 << shift).with_context(|| format!("size '{t}' is too large"))?;
    if v == 0 {
        bail!("size '{t}' must be at least 1 byte");
    }
    Ok(v)
}

/// Parses a `--sizes` list; every token that is not a size is named in the error.
pub(crate) fn parse(list: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for tok in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match tok.split_once(':') {
            Some((a, b)) => {
                let (from, to) = (parse_size(a)?, parse_size(b)?);
                if from > to {
                    bail!("size range '{tok}' runs backwards");
                }
                let mut s = from;
                while s <= to {
                    out.push(s);
                    s = s.saturating_mul(2);
                    if s == u64::MAX {
                        break;
                    }
                }
            }
            None => out.push(parse_size(tok)?),
        }
    }
    if out.is_empty() {
        bail!("--sizes '{list}' names no size");
    }
    Ok(out)
}

/// `1.5 MB`-style text for tables.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_ranges_and_units() {
        assert_eq!(parse("8,64K,1MiB").unwrap(), vec![8, 64 << 10, 1 << 20]);
        let d = parse(DEFAULT).unwrap();
        assert_eq!((d.len(), d[0], *d.last().unwrap()), (30, 8, 4 << 30));
        assert_eq!(parse("1k:4k, 1G").unwrap(), vec![1024, 2048, 4096, 1 << 30]);
        assert_eq!(human(1536), "1.5 KB");
        assert_eq!(human(4 << 30), "4 GB");
    }

    #[test]
    fn errors_name_the_token() {
        for (bad, word) in [("8,x", "'x'"), ("4Q", "'Q'"), ("4G:8", "backwards"), ("0", "at least"), (",", "no size")] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(word), "{bad}: {e}");
        }
    }
}
