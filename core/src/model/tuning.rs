//! The tuning model's table and the per-call decisions taken from it.

use super::names::{Algorithm, Collective, DataType, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cell of NCCL's TUNING table: base latency (us) and bandwidth (GB/s). NCCL prints cells it never
/// computes as `0/0`, which are left out here; a disabled cell keeps its latency with bandwidth 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TuningCell {
    pub lat_us: f64,
    pub bw_gbps: f64,
}

/// `{Collective: {Algorithm: {Protocol: cell}}}`, the layout `topo explain --json` and `log analyze --json` share.
pub type TuningTable = BTreeMap<Collective, BTreeMap<Algorithm, BTreeMap<Protocol, TuningCell>>>;

/// What was chosen for one call of one size, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub coll: Collective,
    pub bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub n_channels: u32,
    /// Predicted time in us, when known.
    pub time_us: Option<f64>,
    /// The next best (algorithm, protocol, time in us).
    pub runner_up: Option<RunnerUp>,
    /// Why this cell won, in words.
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datatype: Option<DataType>,
    /// Rank that printed or made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerUp {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub time_us: f64,
}
