//! The environment parameters the tuning model reads (NCCL 2.28.9 `src/graph/tuning.cc`), read once through
//! [`Env`] so each one that is set is logged as NCCL logs it and a malformed one is an error naming it.

use super::grammar::GrammarError;
use collscope_debug::env::{Env, EnvError};

/// The tuning parameters; `None`/-2 means "NCCL's default".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningParams {
    /// `NCCL_NTHREADS`, -2 when unset.
    pub nthreads: i64,
    /// `NCCL_LL128_NTHREADS`, -2 when unset.
    pub ll128_nthreads: i64,
    pub algo: Option<String>,
    pub proto: Option<String>,
    /// `NCCL_THREAD_THRESHOLDS`: up to six numbers, Tree LL/LL128/Simple then Ring LL/LL128/Simple.
    pub thread_thresholds: Option<String>,
    /// `NCCL_NET_OVERHEAD` in ns, -2 when unset.
    pub net_overhead_ns: i64,
    /// `NCCL_PAT_ENABLE` (2 = decide).
    pub pat_enable: i64,
    /// `NCCL_LL128_C2C`.
    pub ll128_c2c: bool,
}

impl Default for TuningParams {
    fn default() -> Self {
        TuningParams {
            nthreads: -2,
            ll128_nthreads: -2,
            algo: None,
            proto: None,
            thread_thresholds: None,
            net_overhead_ns: -2,
            pat_enable: 2,
            ll128_c2c: true,
        }
    }
}

/// Why a tuning model could not be built or could not choose.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TuningError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    #[error("NCCL_THREAD_THRESHOLDS='{0}' is not valid: expected up to six integers separated by spaces (Tree LL LL128 Simple, Ring LL LL128 Simple)")]
    ThreadThresholds(String),
    #[error("{0}")]
    NoAlgorithm(String),
    #[error("invalid tuning input: {0}")]
    Input(String),
}

impl TuningParams {
    pub fn from_env(env: &Env) -> Result<Self, TuningError> {
        let d = TuningParams::default();
        let p = TuningParams {
            nthreads: env.int("NCCL_NTHREADS", d.nthreads)?,
            ll128_nthreads: env.int("NCCL_LL128_NTHREADS", d.ll128_nthreads)?,
            algo: env.str("NCCL_ALGO").map(str::to_string),
            proto: env.str("NCCL_PROTO").map(str::to_string),
            thread_thresholds: env.str("NCCL_THREAD_THRESHOLDS").map(str::to_string),
            net_overhead_ns: env.int("NCCL_NET_OVERHEAD", d.net_overhead_ns)?,
            pat_enable: env.int("NCCL_PAT_ENABLE", d.pat_enable)?,
            ll128_c2c: env.int("NCCL_LL128_C2C", 1)? != 0,
        };
        p.parsed_thread_thresholds()?;
        Ok(p)
    }

    /// The same parameters without `NCCL_ALGO`/`NCCL_PROTO`: what NCCL would pick unforced.
    pub fn unforced(&self) -> Self {
        TuningParams { algo: None, proto: None, ..self.clone() }
    }

    pub fn forced(&self) -> bool {
        self.algo.is_some() || self.proto.is_some()
    }

    /// NCCL reads the thresholds with `sscanf("%ld %ld ...")`; collscope requires the numbers to be numbers.
    /// Negative values keep the default, as in NCCL.
    pub fn parsed_thread_thresholds(&self) -> Result<[[i64; 3]; 2], TuningError> {
        let mut t = [[-2i64; 3]; 2];
        let Some(s) = &self.thread_thresholds else { return Ok(t) };
        let nums: Vec<&str> = s.split_whitespace().collect();
        if nums.is_empty() || nums.len() > 6 {
            return Err(TuningError::ThreadThresholds(s.clone()));
        }
        for (i, n) in nums.iter().enumerate() {
            t[i / 3][i % 3] = n.parse().map_err(|_| TuningError::ThreadThresholds(s.clone()))?;
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_env_and_rejects_bad_values() {
        let env =
            Env::from_pairs([("NCCL_ALGO", "ring"), ("NCCL_NTHREADS", "256"), ("NCCL_THREAD_THRESHOLDS", "8 8 64")]);
        let p = TuningParams::from_env(&env).unwrap();
        assert_eq!(p.algo.as_deref(), Some("ring"));
        assert_eq!(p.nthreads, 256);
        assert_eq!(p.parsed_thread_thresholds().unwrap(), [[8, 8, 64], [-2, -2, -2]]);
        assert!(p.forced() && !p.unforced().forced());
        let e = TuningParams::from_env(&Env::from_pairs([("NCCL_THREAD_THRESHOLDS", "8 x")])).unwrap_err();
        assert!(e.to_string().contains("NCCL_THREAD_THRESHOLDS='8 x'"), "{e}");
        let e = TuningParams::from_env(&Env::from_pairs([("NCCL_NET_OVERHEAD", "lots")])).unwrap_err();
        assert!(e.to_string().contains("NCCL_NET_OVERHEAD='lots'"), "{e}");
    }
}
