//! Which channels one collective lands on when it is alone in its kernel plan: NCCL 2.28.9
//! `scheduleCollTasksToPlan` (`src/enqueue.cc`) for a single task. The work is cut into cells of at least
//! 16 KB of traffic and spread so each channel carries about the same traffic, never more channels than the
//! tuner allowed (`nMaxChannels`). This gives the `channel{Lo..Hi}` of NCCL's per-call TUNING line.

use super::choose::Choice;
use collscope_model::{Algorithm, Collective, Protocol};

/// `ncclFuncTrafficPerByte`.
fn traffic_per_byte(coll: Collective, n_ranks: u32) -> u64 {
    match coll {
        Collective::AllReduce => 2,
        Collective::AllGather | Collective::ReduceScatter => n_ranks as u64,
        _ => 1,
    }
}

/// The channels a lone call of `count` elements of `elem_size` bytes runs on, `(lo, hi)` inclusive.
/// `kind_max_channels` is the communicator's limit for the call's kind (`nChannels`, or the NVLS channels);
/// `min_traffic` NCCL's `MinTrafficPerChannel` (per release, [`crate::VersionProfile`]).
pub fn channel_range(
    choice: &Choice,
    count: u64,
    elem_size: u64,
    n_ranks: u32,
    kind_max_channels: u32,
    min_traffic: u64,
) -> (u32, u32) {
    let max_kind = kind_max_channels.max(1) as u64;
    let is_collnet = matches!(choice.algo, Algorithm::CollNetDirect | Algorithm::CollNetChain);
    if is_collnet {
        return (0, choice.n_channels.saturating_sub(1));
    }
    let mut tpb = traffic_per_byte(choice.coll, n_ranks);
    let ll = choice.proto == Protocol::Ll;
    let task_traffic = count * elem_size * tpb * if ll { 4 } else { 1 };
    let kind_traffic = min_traffic.max(task_traffic);
    let kind_channels = (choice.n_channels as u64).min(max_kind).max(1);
    let traffic_per_channel = min_traffic.max(kind_traffic / kind_channels);
    if ll {
        tpb *= 4;
    }
    let cell_size = min_traffic.div_ceil(tpb).div_ceil(16) * 16;
    let elems_per_cell = (cell_size / elem_size).max(1);
    let cells = (count * elem_size).div_ceil(cell_size);
    let traffic_per_cell = cell_size * tpb;
    let mut cells_per_channel = cells.min(traffic_per_channel.div_ceil(traffic_per_cell)).max(1);
    let mut channel_id = 0u64;
    let mut cells_lo = if max_kind == 1 { cells } else { cells.min(traffic_per_channel.div_ceil(traffic_per_cell)) };
    let mut n_mid = ((cells - cells_lo) / cells_per_channel) as i64;
    let mut cells_hi = (cells - cells_lo) % cells_per_channel;
    let n = (cells_lo != 0) as u64 + n_mid as u64 + (cells_hi != 0) as u64;
    if max_kind < n {
        n_mid = max_kind as i64 - 2;
        cells_per_channel = (cells - cells_lo) / (n_mid as u64 + 1);
        cells_hi = cells_per_channel + (cells - cells_lo) % (n_mid as u64 + 1);
    }
    if cells_hi == 0 && n_mid != 0 {
        cells_hi = cells_per_channel;
        n_mid -= 1;
    }
    if cells_lo == 0 {
        channel_id += 1;
        if n_mid == 0 {
            cells_lo = cells_hi;
            cells_hi = 0;
        } else {
            cells_lo = cells_per_channel;
            n_mid -= 1;
        }
    }
    let count_lo = cells_lo * elems_per_cell;
    let n = (count_lo != 0) as u64 + n_mid.max(0) as u64 + (cells_hi != 0) as u64;
    let lo = channel_id as u32;
    (lo, lo + n.max(1) as u32 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::{AlgoTime, Choice};

    fn choice(coll: Collective, proto: Protocol, n_channels: u32) -> Choice {
        let time = AlgoTime { lat_us: 0.0, lat_count: 1, bw_gbps: 1.0, time_us: 0.0 };
        Choice {
            coll,
            bytes: 0,
            algo: Algorithm::Ring,
            proto,
            n_channels,
            n_threads: 512,
            time,
            costs: vec![],
            one_rank: false,
        }
    }

    /// `MinTrafficPerChannel` from 2.23 to 2.28; 2.29 doubled it.
    const K16: u64 = 16 << 10;

    #[test]
    fn min_traffic_per_channel_is_per_release() {
        let c = choice(Collective::AllReduce, Protocol::Simple, 24);
        let at = |v: &str| v.parse::<crate::VersionProfile>().unwrap().min_traffic_per_channel;
        assert_eq!((at("2.28.9"), at("2.29.2")), (K16, 32 << 10));
        // 128 KB AllReduce: 256 KB of traffic in 8 KB cells (16 KB of traffic each) is 16 channels; in 16 KB
        // cells (32 KB each) 8.
        assert_eq!(channel_range(&c, 1 << 15, 4, 8, 24, at("2.28.9")), (0, 15));
        assert_eq!(channel_range(&c, 1 << 15, 4, 8, 24, at("2.29.2")), (0, 7));
    }

    #[test]
    fn small_calls_stay_on_one_channel_large_ones_spread() {
        let c = choice(Collective::AllReduce, Protocol::Simple, 24);
        // 8 KB x 2 traffic per byte = 16 KB: one cell, one channel.
        assert_eq!(channel_range(&c, 2048, 4, 8, 24, K16), (0, 0));
        // 1 MB AllReduce: 128 cells of 8 KB (16 KB traffic); 2 MB / 24 = 87381 B per channel = 6 cells;
        // 6 on the first, 20 x 6 in the middle, 2 on the last: 22 channels.
        assert_eq!(channel_range(&c, 1 << 18, 4, 8, 24, K16), (0, 21));
        // Only as many channels as the tuner allowed.
        let c = choice(Collective::AllReduce, Protocol::Simple, 4);
        assert_eq!(channel_range(&c, 1 << 18, 4, 8, 24, K16), (0, 3));
        // 64 KB AllReduce of LL: 512 KB of traffic, 32 cells of 2 KB, 2 cells per channel: 16 channels.
        let c = choice(Collective::AllReduce, Protocol::Ll, 24);
        assert_eq!(channel_range(&c, 1 << 14, 4, 8, 24, K16), (0, 15));
        let c = choice(Collective::AllReduce, Protocol::Ll, 2);
        assert_eq!(channel_range(&c, 1 << 12, 4, 8, 24, K16), (0, 1));
    }
}
