//! NCCL-style parameters from the environment. Every variable that is read and set is logged as NCCL does
//! (`NAME set by environment to VALUE.` for integers, without the period for strings, `misc/param.cc`) and
//! recorded for the model. Unlike NCCL, a malformed value is an error naming the variable, the value and what
//! was expected, instead of a silent fallback to the default.

use crate::nccl_info;
use crate::Subsys;
use collscope_model::EnvSetting;
use std::collections::BTreeMap;
use std::num::IntErrorKind;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

/// Largest timeout accepted, in seconds (about 68 years): `Instant + timeout` must not overflow.
pub const MAX_TIMEOUT_S: i64 = i32::MAX as i64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}='{value}' is not valid: expected {expected}")]
pub struct EnvError {
    pub name: String,
    pub value: String,
    pub expected: String,
}

/// A frozen view of the variables a component reads, so tests can give their own without touching the
/// process environment.
#[derive(Debug, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
    seen: Mutex<Vec<EnvSetting>>,
}

impl Clone for Env {
    fn clone(&self) -> Self {
        Env { vars: self.vars.clone(), seen: Mutex::new(self.settings()) }
    }
}

impl Env {
    /// The `NCCL_*` and `COLLSCOPE_*` variables of this process.
    pub fn from_process() -> Self {
        Self::from_pairs(
            crate::params::process_vars()
                .into_iter()
                .filter(|(k, _)| k.starts_with("NCCL_") || k.starts_with("COLLSCOPE_")),
        )
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Env { vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(), seen: Mutex::default() }
    }

    /// A copy with `name` set, for command-line flags that override the environment.
    pub fn with(&self, name: &str, value: &str) -> Self {
        let mut e = self.clone();
        e.vars.insert(name.to_string(), value.to_string());
        e
    }

    fn note(&self, name: &str, value: &str, shown: String) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.iter().any(|s| s.name == name) {
            nccl_info!(Subsys::ENV, "{name} set by environment to {shown}");
            seen.push(EnvSetting { name: name.to_string(), value: value.to_string(), rank: None });
        }
    }

    /// A string parameter; empty counts as unset, as in NCCL.
    pub fn str(&self, name: &str) -> Option<&str> {
        let v = self.vars.get(name).map(String::as_str).filter(|v| !v.is_empty())?;
        self.note(name, v, v.to_string());
        Some(v)
    }

    /// An integer parameter in C's `strtoll(.., 0)` syntax (decimal, `0x` hex, leading `0` octal).
    pub fn int(&self, name: &str, default: i64) -> Result<i64, EnvError> {
        self.int_in(name, default, i64::MIN..=i64::MAX)
    }

    /// An integer parameter that must lie in `range`; a value outside it (or past 64 bits) is reported as out
    /// of range, with the range.
    pub fn int_in(&self, name: &str, default: i64, range: RangeInclusive<i64>) -> Result<i64, EnvError> {
        let Some(v) = self.vars.get(name).filter(|v| !v.is_empty()) else { return Ok(default) };
        let err = |out_of_range: bool| {
            let expected = match (out_of_range, range == (i64::MIN..=i64::MAX)) {
                (false, true) => "an integer (decimal, or 0x hexadecimal)".to_string(),
                (false, false) => format!("an integer from {} to {}", range.start(), range.end()),
                (true, _) => format!("an integer from {} to {}; this one is out of range", range.start(), range.end()),
            };
            EnvError { name: name.to_string(), value: v.clone(), expected }
        };
        let n = match parse_c_int_checked(v) {
            Ok(n) if range.contains(&n) => n,
            Ok(_) | Err(IntErrorKind::PosOverflow | IntErrorKind::NegOverflow) => return Err(err(true)),
            Err(_) => return Err(err(false)),
        };
        self.note(name, v, format!("{n}."));
        Ok(n)
    }

    /// A timeout in whole seconds, from 1 to [`MAX_TIMEOUT_S`] (deadlines are instants that must not overflow).
    pub fn seconds(&self, name: &str, default: i64) -> Result<Duration, EnvError> {
        Ok(Duration::from_secs(self.int_in(name, default, 1..=MAX_TIMEOUT_S)? as u64))
    }

    /// A parameter parsed by its type's `FromStr`; the type's error text says what was expected.
    pub fn parsed<T: FromStr>(&self, name: &str) -> Result<Option<T>, EnvError>
    where
        T::Err: std::fmt::Display,
    {
        let Some(v) = self.vars.get(name).filter(|v| !v.is_empty()) else { return Ok(None) };
        let t = v.parse::<T>().map_err(|e| EnvError {
            name: name.to_string(),
            value: v.clone(),
            expected: e.to_string(),
        })?;
        self.note(name, v, v.clone());
        Ok(Some(t))
    }

    /// Every variable read so far that was set.
    pub fn settings(&self) -> Vec<EnvSetting> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `strtoll(s, &end, 0)` that must consume the whole string.
pub fn parse_c_int(s: &str) -> Option<i64> {
    parse_c_int_checked(s).ok()
}

/// [`parse_c_int`] that tells a number past 64 bits (overflow) from something that is not a number.
fn parse_c_int_checked(s: &str) -> Result<i64, IntErrorKind> {
    let t = s.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        (16, hex)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    // `from_str_radix` takes a sign of its own; a second one ("--5", "0x-5") is not C syntax.
    if digits.starts_with(['+', '-']) {
        return Err(IntErrorKind::InvalidDigit);
    }
    // The sign goes on the digits, so i64::MIN parses and an overflow is reported as one.
    let signed = if neg { format!("-{digits}") } else { digits.to_string() };
    i64::from_str_radix(&signed, radix).map_err(|e| *e.kind())
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::PathType;

    #[test]
    fn ints_follow_strtoll_and_errors_name_the_variable() {
        let env = Env::from_pairs([("NCCL_BUFFSIZE", "0x400000"), ("NCCL_NTHREADS", "abc"), ("NCCL_X", "010")]);
        assert_eq!(env.int("NCCL_BUFFSIZE", 1).unwrap(), 4 << 20);
        assert_eq!(env.int("NCCL_X", 1).unwrap(), 8);
        assert_eq!(env.int("NCCL_UNSET", 7).unwrap(), 7);
        let e = env.int("NCCL_NTHREADS", 1).unwrap_err().to_string();
        assert!(e.contains("NCCL_NTHREADS='abc'") && e.contains("integer"), "{e}");
        let names: Vec<_> = env.settings().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["NCCL_BUFFSIZE", "NCCL_X"]);
        assert_eq!(parse_c_int("-0x10"), Some(-16));
        assert_eq!(parse_c_int("-9223372036854775808"), Some(i64::MIN));
        for bad in ["--5", "0x-5", "+-1", "", "0x"] {
            assert_eq!(parse_c_int(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbers_out_of_range_say_so_and_give_the_range() {
        let env = Env::from_pairs([
            ("COLLSCOPE_TIMEOUT_S", "99999999999999999999"),
            ("NCCL_BIG", "99999999999999999999"),
            ("T0", "0"),
            ("TX", "soon"),
            ("T5", "5"),
        ]);
        let e = env.seconds("COLLSCOPE_TIMEOUT_S", 30).unwrap_err().to_string();
        assert!(e.contains("'99999999999999999999'") && e.contains("out of range"), "{e}");
        assert!(e.contains(&format!("from 1 to {MAX_TIMEOUT_S}")), "{e}");
        let e = env.int("NCCL_BIG", 0).unwrap_err().to_string();
        assert!(e.contains("out of range") && e.contains("9223372036854775807"), "{e}");
        assert!(env.seconds("T0", 30).unwrap_err().to_string().contains("out of range"));
        let e = env.seconds("TX", 30).unwrap_err().to_string();
        assert!(e.contains("TX='soon'") && !e.contains("out of range") && e.contains("from 1 to"), "{e}");
        assert_eq!(env.seconds("T5", 30).unwrap(), Duration::from_secs(5));
        assert_eq!(env.seconds("UNSET", 30).unwrap(), Duration::from_secs(30));
    }

    #[test]
    fn parsed_values_use_the_type_grammar() {
        let env = Env::from_pairs([("NCCL_P2P_LEVEL", "pxb"), ("NCCL_NET_GDR_LEVEL", "FAR")]);
        assert_eq!(env.parsed::<PathType>("NCCL_P2P_LEVEL").unwrap(), Some(PathType::PXB));
        let e = env.parsed::<PathType>("NCCL_NET_GDR_LEVEL").unwrap_err().to_string();
        assert!(e.contains("NCCL_NET_GDR_LEVEL='FAR'") && e.contains("PHB"), "{e}");
        assert_eq!(env.with("NCCL_ALGO", "ring").str("NCCL_ALGO"), Some("ring"));
        assert_eq!(env.str("NCCL_ALGO"), None);
    }
}
