//! Predicted time of a call on host memory, the shape of NCCL 2.28.9 `ncclTopoGetAlgoTime`
//! (`src/graph/tuning.cc`: latency per step times the steps, plus bytes over bandwidth), with the hardware
//! constants of a [`HostProfile`](super::HostProfile) link.

use super::profile::{CellCost, LinkProfile};
use collscope_model::{Algorithm, Collective, Protocol};

/// One way to run a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: u32,
}

/// Steps a rank waits on a peer: a ring AllReduce's 2(n-1), the other rings' n-1, a tree's way up and down.
/// OneShot's n-1 too: it receives from n-1 peers, though none of those steps waits on another (on cores shared
/// by ranks it took 0.6-1.05x the time of the ring's n-1 chained steps: this prices it on the safe side).
pub(crate) fn steps(coll: Collective, algo: Algorithm, nranks: u32) -> f64 {
    let n = nranks.max(2) as f64;
    match (coll, algo) {
        (Collective::AllReduce, Algorithm::Tree) => 2.0 * n.log2().ceil(),
        (Collective::AllReduce, Algorithm::OneShot) => n - 1.0,
        (Collective::AllReduce, _) => 2.0 * (n - 1.0),
        (Collective::Broadcast | Collective::Reduce | Collective::AllGather | Collective::ReduceScatter, _) => n - 1.0,
        _ => 1.0,
    }
}

/// Bytes each rank sends per byte of the call's per-rank size (`bytes` as the runtime counts it: the whole
/// vector for AllReduce, Broadcast and Reduce, one rank's block for AllGather and ReduceScatter). For a ring
/// AllReduce this is nccl-tests' bus bandwidth factor 2(n-1)/n; a tree AllReduce sends everything up and down
/// whatever the rank count (NCCL 2.28.9 `tuning.cc` turns tree bus bandwidth into algorithm bandwidth by 1/2).
/// OneShot sends its whole vector to every other rank, as an AllGather of the vector sends, then reduces all n
/// in one local pass, counted as one vector more (the ring's reductions are inside its measured bandwidth).
pub(crate) fn bus_factor(coll: Collective, algo: Algorithm, nranks: u32) -> f64 {
    let n = nranks.max(2) as f64;
    match (coll, algo) {
        (Collective::AllReduce, Algorithm::Tree) => 2.0,
        (Collective::AllReduce, Algorithm::OneShot) => n,
        (Collective::AllReduce, _) => 2.0 * (n - 1.0) / n,
        (Collective::AllGather | Collective::ReduceScatter, _) => n - 1.0,
        _ => 1.0,
    }
}

impl CellCost {
    /// Bus bandwidth with `nchannels` channels: each adds one channel's worth, up to what all channels together
    /// reached (NCCL caps the same way with its per-generation maxima).
    pub fn bandwidth(&self, nchannels: u32) -> f64 {
        (nchannels.max(1) as f64 * self.bw_gbps).min(self.max_bw_gbps.max(self.bw_gbps))
    }

    /// Predicted microseconds for `coll` on `bytes` per rank over `nranks` ranks with `nchannels` channels.
    pub fn time_us(&self, coll: Collective, bytes: u64, nranks: u32, nchannels: u32) -> f64 {
        let lat =
            steps(coll, self.algo, nranks) * self.lat_us + nchannels.saturating_sub(1) as f64 * self.channel_lat_us;
        lat + bytes as f64 * bus_factor(coll, self.algo, nranks) / (self.bandwidth(nchannels) * 1e3)
    }
}

/// How much faster, per extra channel, a candidate must be predicted to win: every channel past the first is
/// one more thread per rank, and on a host with fewer cores than busy threads (the usual CPU job: every core
/// already runs a rank) that thread takes time the profile, fitted on a quiet host, does not see. Measured on
/// 2 cores, SHM AllReduce 16 MiB: 1 channel 7.2 GB/s, 2 channels 3.8 GB/s on 2 ranks; 2.9 vs 2.0 on 4 ranks,
/// where the profile predicted 2 channels 2 % faster.
pub(crate) const CHANNEL_MARGIN: f64 = 0.10;

/// The fastest of `candidates` on `link` with its predicted time; None when the profile times none of them.
/// A candidate with more channels must beat by [`CHANNEL_MARGIN`] per extra channel; ties keep the earlier.
pub fn choose(
    link: &LinkProfile,
    coll: Collective,
    bytes: u64,
    nranks: u32,
    candidates: impl IntoIterator<Item = Candidate>,
) -> Option<(Candidate, f64)> {
    let mut best: Option<(Candidate, f64, f64)> = None;
    for c in candidates {
        let Some(cell) = link.cell(c.algo, c.proto) else { continue };
        let t = cell.time_us(coll, bytes, nranks, c.nchannels);
        let weighed = t * (1.0 + CHANNEL_MARGIN * c.nchannels.saturating_sub(1) as f64);
        if best.is_none_or(|(_, _, b)| weighed < b) {
            best = Some((c, t, weighed));
        }
    }
    best.map(|(c, t, _)| (c, t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::Transport;

    fn cell(algo: Algorithm, proto: Protocol, lat_us: f64, bw: f64) -> CellCost {
        CellCost { algo, proto, lat_us, bw_gbps: bw, max_bw_gbps: bw * 1.5, channel_lat_us: 10.0 }
    }

    #[test]
    fn latency_wins_small_and_bandwidth_wins_large() {
        let link = LinkProfile {
            transport: Transport::Shm,
            cells: vec![
                cell(Algorithm::Ring, Protocol::Ll, 1.0, 0.5),
                cell(Algorithm::Ring, Protocol::Simple, 8.0, 4.0),
            ],
        };
        let cands = |n| {
            [Protocol::Ll, Protocol::Simple].into_iter().map(move |proto| Candidate {
                algo: Algorithm::Ring,
                proto,
                nchannels: n,
            })
        };
        let c = |bytes| choose(&link, Collective::AllReduce, bytes, 4, cands(1).chain(cands(2))).unwrap().0;
        assert_eq!((c(64).proto, c(64).nchannels), (Protocol::Ll, 1));
        assert_eq!((c(64 << 20).proto, c(64 << 20).nchannels), (Protocol::Simple, 2));
        // A cell the profile lacks is never chosen.
        let only_tree = [Candidate { algo: Algorithm::Tree, proto: Protocol::Ll, nchannels: 1 }];
        assert_eq!(choose(&link, Collective::AllReduce, 64, 4, only_tree), None);
        // 2 channels give 1.5x one channel's bandwidth here, not 2x.
        assert_eq!(link.cells[1].bandwidth(2), 6.0);
        assert_eq!(link.cells[1].bandwidth(8), 6.0);
        // A second channel predicted 5 % faster does not clear the margin: one thread per rank stays.
        let mut thin = link.clone();
        thin.cells[1].max_bw_gbps = thin.cells[1].bw_gbps * 1.05;
        let c = choose(&thin, Collective::AllReduce, 64 << 20, 4, cands(1).chain(cands(2))).unwrap().0;
        assert_eq!((c.proto, c.nchannels), (Protocol::Simple, 1));
    }

    #[test]
    fn steps_and_factors_follow_the_algorithms() {
        assert_eq!(steps(Collective::AllReduce, Algorithm::Ring, 4), 6.0);
        assert_eq!(steps(Collective::AllReduce, Algorithm::Tree, 8), 6.0);
        assert_eq!(steps(Collective::AllGather, Algorithm::Ring, 8), 7.0);
        assert_eq!(bus_factor(Collective::AllReduce, Algorithm::Ring, 4), 1.5);
        assert_eq!(bus_factor(Collective::AllReduce, Algorithm::Tree, 4), 2.0);
        assert_eq!(bus_factor(Collective::ReduceScatter, Algorithm::Ring, 4), 3.0);
        assert_eq!(steps(Collective::AllReduce, Algorithm::OneShot, 4), 3.0);
        assert_eq!(bus_factor(Collective::AllReduce, Algorithm::OneShot, 4), 4.0);
    }
}
