//! The one place a call's algorithm, protocol and channel count are chosen. For now: `NCCL_ALGO` /
//! `NCCL_PROTO` restrict the candidates (NCCL 2.28.9 `src/graph/tuning.cc` `parseList` grammar:
//! `list;coll:list;...`, `^` to exclude), then a size rule picks among what is left. The tuning model
//! replaces the size rule later.

use crate::env::{Env, EnvError};
use crate::model::{Algorithm, Collective, Protocol};
use std::str::FromStr;

/// Which values of `T` each collective may use.
#[derive(Debug, Clone, PartialEq)]
pub struct EnableList<T> {
    per_coll: Vec<(Collective, Vec<T>)>,
}

impl<T: Copy + PartialEq + FromStr> EnableList<T> {
    /// Parses NCCL's list grammar; `all` are the values a collective may use when nothing restricts it.
    pub fn parse(name: &str, value: Option<&str>, all: &[T]) -> Result<Self, EnvError> {
        let mut per_coll: Vec<(Collective, Vec<T>)> = Collective::ALL.iter().map(|c| (*c, all.to_vec())).collect();
        let Some(value) = value else { return Ok(EnableList { per_coll }) };
        let err = |expected: String| EnvError { name: name.into(), value: value.into(), expected };
        for (i, entry) in value.split(';').filter(|e| !e.trim().is_empty()).enumerate() {
            let (prefix, list) = match entry.split_once(':') {
                Some((p, l)) => (Some(p.trim()), l),
                None if i == 0 => (None, entry),
                None => return Err(err("every entry after the first to start with a collective and ':'".into())),
            };
            let (negate, list) = match list.trim().strip_prefix('^') {
                Some(rest) => (true, rest),
                None => (false, list.trim()),
            };
            let mut named = Vec::new();
            for tok in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                named.push(tok.parse::<T>().map_err(|_| {
                    err(format!("a comma list of {}", std::any::type_name::<T>().rsplit("::").next().unwrap_or("")))
                })?);
            }
            let chosen: Vec<T> =
                if negate { all.iter().copied().filter(|v| !named.contains(v)).collect() } else { named };
            let mut matched = false;
            for (c, v) in per_coll.iter_mut() {
                if prefix.is_none_or(|p| p.eq_ignore_ascii_case(c.as_str())) {
                    *v = chosen.clone();
                    matched = true;
                }
            }
            if !matched {
                return Err(err(format!("collective names from {:?}", Collective::ALL)));
            }
        }
        Ok(EnableList { per_coll })
    }

    pub fn allowed(&self, coll: Collective) -> &[T] {
        self.per_coll.iter().find(|(c, _)| *c == coll).map(|(_, v)| v.as_slice()).unwrap_or(&[])
    }
}

/// What `select` needs from the communicator.
#[derive(Debug, Clone)]
pub struct SelectConfig {
    pub algos: EnableList<Algorithm>,
    pub protos: EnableList<Protocol>,
    pub max_channels: u32,
}

impl SelectConfig {
    pub fn from_env(env: &Env, max_channels: u32) -> Result<Self, EnvError> {
        Ok(SelectConfig {
            algos: EnableList::parse("NCCL_ALGO", env.str("NCCL_ALGO"), &[Algorithm::Tree, Algorithm::Ring])?,
            protos: EnableList::parse("NCCL_PROTO", env.str("NCCL_PROTO"), Protocol::ALL)?,
            max_channels,
        })
    }
}

/// A call's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: u32,
}

/// Chooses how to run `coll` on `bytes` (per rank) over `nranks` ranks.
///
/// Only AllReduce has a Tree implementation; the other collectives run Ring whatever `NCCL_ALGO` says, and
/// point-to-point always uses Simple. Without restrictions: LL up to 16 KiB, LL128 up to 256 KiB, then Simple;
/// Tree for AllReduce up to 64 KiB on more than two ranks; one channel up to 256 KiB, then all of them.
pub fn select(cfg: &SelectConfig, coll: Collective, bytes: u64, nranks: u32) -> Choice {
    let nchannels = if bytes <= 256 << 10 { 1 } else { cfg.max_channels.max(1) };
    if matches!(coll, Collective::Send | Collective::Recv | Collective::SendRecv | Collective::AllToAll) {
        return Choice { algo: Algorithm::Ring, proto: Protocol::Simple, nchannels: 1 };
    }
    let algos = cfg.algos.allowed(coll);
    let algo = if coll == Collective::AllReduce && algos.contains(&Algorithm::Tree) {
        let ring_ok = algos.contains(&Algorithm::Ring);
        if !ring_ok || (bytes <= 64 << 10 && nranks > 2) {
            Algorithm::Tree
        } else {
            Algorithm::Ring
        }
    } else {
        Algorithm::Ring
    };
    let protos = cfg.protos.allowed(coll);
    let by_size = if bytes <= 16 << 10 {
        [Protocol::Ll, Protocol::Ll128, Protocol::Simple]
    } else if bytes <= 256 << 10 {
        [Protocol::Ll128, Protocol::Simple, Protocol::Ll]
    } else {
        [Protocol::Simple, Protocol::Ll128, Protocol::Ll]
    };
    let proto = by_size.into_iter().find(|p| protos.contains(p)).unwrap_or(Protocol::Simple);
    Choice { algo, proto, nchannels }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> SelectConfig {
        SelectConfig::from_env(&Env::from_pairs(pairs.iter().copied()), 2).unwrap()
    }

    #[test]
    fn env_restricts_and_sizes_pick() {
        let c = cfg(&[]);
        assert_eq!(
            select(&c, Collective::AllReduce, 1024, 4),
            Choice { algo: Algorithm::Tree, proto: Protocol::Ll, nchannels: 1 }
        );
        assert_eq!(
            select(&c, Collective::AllReduce, 64 << 20, 4),
            Choice { algo: Algorithm::Ring, proto: Protocol::Simple, nchannels: 2 }
        );
        let c = cfg(&[("NCCL_ALGO", "ring"), ("NCCL_PROTO", "^LL,LL128;allgather:LL128")]);
        assert_eq!(select(&c, Collective::AllReduce, 8, 8).algo, Algorithm::Ring);
        assert_eq!(select(&c, Collective::AllReduce, 8, 8).proto, Protocol::Simple);
        assert_eq!(select(&c, Collective::AllGather, 64 << 20, 8).proto, Protocol::Ll128);
        let c = cfg(&[("NCCL_ALGO", "allreduce:tree")]);
        assert_eq!(select(&c, Collective::AllReduce, 64 << 20, 2).algo, Algorithm::Tree);
    }

    #[test]
    fn bad_lists_name_the_variable() {
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_PROTO", "LL,fast")]), 2).unwrap_err().to_string();
        assert!(e.contains("NCCL_PROTO='LL,fast'") && e.contains("Protocol"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "ring;tree")]), 2).unwrap_err().to_string();
        assert!(e.contains("NCCL_ALGO"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "allredux:ring")]), 2).unwrap_err().to_string();
        assert!(e.contains("collective"), "{e}");
    }
}
