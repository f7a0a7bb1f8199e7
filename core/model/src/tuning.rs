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

impl TuningCell {
    /// Predicted time in us of one call of `bytes` (NCCL 2.28.9 `src/graph/tuning.cc`, `ncclTopoGetAlgoTime`:
    /// `lat + bytes / (1000 * bw)` for one operation, leaving out its tree correction factors and ring
    /// plateau); `None` for a cell without bandwidth.
    pub fn time_us(&self, bytes: u64) -> Option<f64> {
        (self.bw_gbps > 0.0).then(|| self.lat_us + transfer_us(bytes, self.bw_gbps))
    }
}

/// Microseconds to move `bytes` at `bw_gbps` GB/s: the bandwidth term of NCCL's `ncclTopoGetAlgoTime`
/// (`bytes / (1000 * bw)`).
pub fn transfer_us(bytes: u64, bw_gbps: f64) -> f64 {
    bytes as f64 / (1000.0 * bw_gbps)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_predicts_latency_plus_bytes_over_bandwidth() {
        let c = TuningCell { lat_us: 10.0, bw_gbps: 20.0 };
        // 1 MB at 20 GB/s is 50 us.
        assert_eq!(c.time_us(1_000_000), Some(60.0));
        assert_eq!(c.time_us(0), Some(10.0));
        assert_eq!(TuningCell { lat_us: 10.0, bw_gbps: 0.0 }.time_us(8), None);
        assert_eq!(transfer_us(4_000, 2.0), 2.0);
    }
}
