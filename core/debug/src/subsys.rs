//! `NCCL_DEBUG` levels and `NCCL_DEBUG_SUBSYS` masks, with NCCL 2.28.9's values (`nccl_common.h`).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None = 0,
    Version = 1,
    Warn = 2,
    Info = 3,
    Abort = 4,
    Trace = 5,
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "VERSION" => Ok(Level::Version),
            "WARN" => Ok(Level::Warn),
            "INFO" => Ok(Level::Info),
            "ABORT" => Ok(Level::Abort),
            "TRACE" => Ok(Level::Trace),
            _ => Err("one of VERSION, WARN, INFO, ABORT, TRACE".into()),
        }
    }
}

/// A set of debug subsystems (bit mask).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subsys(pub u64);

impl Subsys {
    pub const INIT: Subsys = Subsys(0x1);
    pub const COLL: Subsys = Subsys(0x2);
    pub const P2P: Subsys = Subsys(0x4);
    pub const SHM: Subsys = Subsys(0x8);
    pub const NET: Subsys = Subsys(0x10);
    pub const GRAPH: Subsys = Subsys(0x20);
    pub const TUNING: Subsys = Subsys(0x40);
    pub const ENV: Subsys = Subsys(0x80);
    pub const ALLOC: Subsys = Subsys(0x100);
    pub const CALL: Subsys = Subsys(0x200);
    pub const PROXY: Subsys = Subsys(0x400);
    pub const NVLS: Subsys = Subsys(0x800);
    pub const BOOTSTRAP: Subsys = Subsys(0x1000);
    pub const REG: Subsys = Subsys(0x2000);
    pub const PROFILE: Subsys = Subsys(0x4000);
    pub const RAS: Subsys = Subsys(0x8000);
    pub const ALL: Subsys = Subsys(!0);
    /// NCCL's default when `NCCL_DEBUG_SUBSYS` is unset.
    pub const DEFAULT: Subsys = Subsys(0x1 | 0x1000 | 0x80);

    const NAMES: [(&'static str, Subsys); 17] = [
        ("INIT", Subsys::INIT),
        ("COLL", Subsys::COLL),
        ("P2P", Subsys::P2P),
        ("SHM", Subsys::SHM),
        ("NET", Subsys::NET),
        ("GRAPH", Subsys::GRAPH),
        ("TUNING", Subsys::TUNING),
        ("ENV", Subsys::ENV),
        ("ALLOC", Subsys::ALLOC),
        ("CALL", Subsys::CALL),
        ("PROXY", Subsys::PROXY),
        ("NVLS", Subsys::NVLS),
        ("BOOTSTRAP", Subsys::BOOTSTRAP),
        ("REG", Subsys::REG),
        ("PROFILE", Subsys::PROFILE),
        ("RAS", Subsys::RAS),
        ("ALL", Subsys::ALL),
    ];

    pub fn intersects(self, other: Subsys) -> bool {
        self.0 & other.0 != 0
    }

    /// Parses NCCL's grammar: a comma list of names, optionally led by `^` to mean "all but these".
    pub fn parse_list(s: &str) -> Result<Subsys, String> {
        let (invert, body) = match s.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let mut mask = if invert { !0u64 } else { 0 };
        for tok in body.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let bit =
                Self::NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(tok)).map(|(_, b)| b.0).ok_or_else(|| {
                    format!(
                        "unknown subsystem '{tok}', expected a comma list (optionally led by ^) of {}",
                        Self::NAMES.map(|(n, _)| n).join(", ")
                    )
                })?;
            if invert {
                mask &= !bit;
            } else {
                mask |= bit;
            }
        }
        Ok(Subsys(mask))
    }
}

impl std::ops::BitOr for Subsys {
    type Output = Subsys;
    fn bitor(self, rhs: Subsys) -> Subsys {
        Subsys(self.0 | rhs.0)
    }
}

impl fmt::Debug for Subsys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Subsys({:#x})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsys_grammar() {
        assert_eq!(Subsys::parse_list("INIT,coll").unwrap(), Subsys(0x3));
        let m = Subsys::parse_list("^NET,GRAPH").unwrap();
        assert!(!m.intersects(Subsys::NET) && !m.intersects(Subsys::GRAPH) && m.intersects(Subsys::INIT));
        assert_eq!(Subsys::parse_list("ALL").unwrap(), Subsys::ALL);
        let e = Subsys::parse_list("INIT,BOGUS").unwrap_err();
        assert!(e.contains("'BOGUS'") && e.contains("TUNING"), "{e}");
    }

    #[test]
    fn level_grammar() {
        assert_eq!("info".parse::<Level>().unwrap(), Level::Info);
        assert!("LOUD".parse::<Level>().is_err());
    }
}
