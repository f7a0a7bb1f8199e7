//! The one place a call's algorithm, protocol and channel count are chosen: `NCCL_ALGO` / `NCCL_PROTO`
//! restrict the candidates (the tuning model's `parseList` grammar), then a size rule picks among what is
//! left. NCCL's tuning model needs hardware constants for host memory, which the calibration of the
//! performance work will measure; until then the size rule stands in for it on CPUs.

use crate::env::{Env, EnvError};
use crate::model::{Algorithm, Collective, Protocol};
use crate::tuning::grammar::{parse_algo, parse_proto, EnableMatrix, GrammarError};

/// What `select` needs from the communicator: the `NCCL_ALGO` / `NCCL_PROTO` enable matrices, parsed by the
/// tuning model's grammar, and the channel budget.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectConfig {
    algos: EnableMatrix<7>,
    protos: EnableMatrix<3>,
    pub max_channels: u32,
}

impl SelectConfig {
    pub fn from_env(env: &Env, max_channels: u32) -> Result<Self, EnvError> {
        let named = |name: &str, value: Option<&str>, e: GrammarError| EnvError {
            name: name.into(),
            value: value.unwrap_or_default().into(),
            expected: e.to_string(),
        };
        let algo = env.str("NCCL_ALGO");
        let proto = env.str("NCCL_PROTO");
        Ok(SelectConfig {
            algos: parse_algo(algo).map_err(|e| named("NCCL_ALGO", algo, e))?,
            protos: parse_proto(proto).map_err(|e| named("NCCL_PROTO", proto, e))?,
            max_channels,
        })
    }

    fn row(coll: Collective) -> Option<usize> {
        Collective::TUNED.iter().position(|c| *c == coll)
    }

    fn algo_allowed(&self, coll: Collective, a: Algorithm) -> bool {
        Self::row(coll).is_some_and(|r| self.algos[r][a.id()] != 0)
    }

    fn proto_allowed(&self, coll: Collective, p: Protocol) -> bool {
        Self::row(coll).is_some_and(|r| self.protos[r][p.id()] != 0)
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
    let algo = if coll == Collective::AllReduce && cfg.algo_allowed(coll, Algorithm::Tree) {
        let ring_ok = cfg.algo_allowed(coll, Algorithm::Ring);
        if !ring_ok || (bytes <= 64 << 10 && nranks > 2) {
            Algorithm::Tree
        } else {
            Algorithm::Ring
        }
    } else {
        Algorithm::Ring
    };
    let by_size = if bytes <= 16 << 10 {
        [Protocol::Ll, Protocol::Ll128, Protocol::Simple]
    } else if bytes <= 256 << 10 {
        [Protocol::Ll128, Protocol::Simple, Protocol::Ll]
    } else {
        [Protocol::Simple, Protocol::Ll128, Protocol::Ll]
    };
    let proto = by_size.into_iter().find(|p| cfg.proto_allowed(coll, *p)).unwrap_or(Protocol::Simple);
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
        assert!(e.contains("NCCL_PROTO='LL,fast'") && e.contains("\"fast\"") && e.contains("LL128"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "ring;tree")]), 2).unwrap_err().to_string();
        assert!(e.contains("NCCL_ALGO"), "{e}");
        let e = SelectConfig::from_env(&Env::from_pairs([("NCCL_ALGO", "allredux:ring")]), 2).unwrap_err().to_string();
        assert!(e.contains("\"allredux\"") && e.contains("AllReduce"), "{e}");
    }
}
