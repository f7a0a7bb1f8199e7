//! The per-call choice: NCCL 2.28.9 `getAlgoInfo` / `updateCollCostTable` / `topoGetAlgoInfo`
//! (`src/enqueue.cc`) and `ncclTopoGetAlgoTime` (`src/graph/tuning.cc`). Every enabled cell gets a predicted
//! time (latency x launches + bytes / bandwidth, after the tree correction and the ring plateau), the smallest
//! wins, then the channel and thread counts shrink for small messages.

use super::model::{tidy, TuningModel};
use super::params::TuningError;
use collscope_model::tuning::transfer_us;
use collscope_model::{Algorithm, Collective, DataType, Decision, Protocol, RedOp, RunnerUp};
use serde::Serialize;
use std::fmt;

/// One call as the tuner sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallInfo {
    pub coll: Collective,
    /// NCCL's `nBytes`: element size x the larger of send and receive counts (the whole gathered buffer for
    /// AllGather/ReduceScatter).
    pub bytes: u64,
    pub datatype: DataType,
    pub op: RedOp,
    /// Operations aggregated into one launch (`numPipeOps`), at least 1.
    pub num_pipe_ops: u32,
}

impl CallInfo {
    pub fn new(coll: Collective, bytes: u64) -> Self {
        CallInfo { coll, bytes, datatype: DataType::F32, op: RedOp::Sum, num_pipe_ops: 1 }
    }

    /// NCCL's `nBytes` for a call of `count` elements per rank (`ncclFuncMaxSendRecvCount`).
    pub fn bytes_for(coll: Collective, count: u64, datatype: DataType, n_ranks: u32) -> u64 {
        let count = match coll {
            Collective::AllGather | Collective::ReduceScatter => count * n_ranks as u64,
            _ => count,
        };
        count * datatype.size() as u64
    }
}

/// Why a cell was not considered for this call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Skip {
    /// Off in the model (see `TuningModel::off_reasons`).
    Disabled,
    /// `updateCollCostTable` leaves the cell out for this call: the reason.
    ForCall(&'static str),
}

/// A cell's predicted time: `latency * launches + bytes / (1000 * bandwidth)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AlgoTime {
    /// Latency after the ring plateau factor, us.
    pub lat_us: f64,
    /// How many times the latency is paid (`latCount`).
    pub lat_count: u32,
    /// Bandwidth after the tree correction, GB/s.
    pub bw_gbps: f64,
    pub time_us: f64,
}

impl AlgoTime {
    pub fn latency_term(&self) -> f64 {
        self.lat_us * self.lat_count as f64
    }

    pub fn bandwidth_term(&self) -> f64 {
        self.time_us - self.latency_term()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Cost {
    Time(AlgoTime),
    Skipped(Skip),
}

/// What `topoGetAlgoInfo` decides for one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub coll: Collective,
    pub bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    /// `nMaxChannels`: channels after the reduction for small messages.
    pub n_channels: u32,
    /// Threads per block (`nWarps * 32`).
    pub n_threads: u32,
    pub time: AlgoTime,
    /// `[algo][proto]` costs that were compared.
    pub costs: Vec<Vec<Cost>>,
    /// A one-rank communicator: NCCL runs no algorithm but copies (or reduces in place) the buffer
    /// (`ncclLaunchOneRank`, NCCL 2.28.9 src/enqueue.cc); no channels, no threads.
    pub one_rank: bool,
}

impl Choice {
    pub fn cost(&self, a: Algorithm, p: Protocol) -> &Cost {
        &self.costs[a.id()][p.id()]
    }

    /// Every timed cell, fastest first (ties keep NCCL's scan order).
    pub fn ranked(&self) -> Vec<(Algorithm, Protocol, AlgoTime)> {
        let mut v: Vec<_> = Algorithm::NCCL
            .iter()
            .flat_map(|&a| Protocol::ALL.iter().map(move |&p| (a, p)))
            .filter_map(|(a, p)| match self.cost(a, p) {
                Cost::Time(t) if t.time_us >= 0.0 => Some((a, p, *t)),
                _ => None,
            })
            .collect();
        v.sort_by(|x, y| x.2.time_us.total_cmp(&y.2.time_us));
        v
    }

    pub fn runner_up(&self) -> Option<(Algorithm, Protocol, AlgoTime)> {
        self.ranked().into_iter().find(|(a, p, _)| (*a, *p) != (self.algo, self.proto))
    }

    /// Which term of the time decided against the runner-up: "latency", "bandwidth", "latency and
    /// bandwidth" (better in both), or "only choice".
    pub fn deciding_term(&self) -> &'static str {
        let me = &self.time;
        match self.runner_up() {
            None => "only choice",
            Some((_, _, o)) if me.latency_term() < o.latency_term() && me.bandwidth_term() >= o.bandwidth_term() => {
                "latency"
            }
            Some((_, _, o)) if me.bandwidth_term() < o.bandwidth_term() && me.latency_term() >= o.latency_term() => {
                "bandwidth"
            }
            Some(_) => "latency and bandwidth",
        }
    }

    /// Why this cell won, in words: its time split into latency and bandwidth terms against the runner-up's.
    pub fn reason(&self) -> String {
        if self.one_rank {
            return "one rank: NCCL runs no algorithm and copies the buffer (ncclLaunchOneRank)".into();
        }
        let me = &self.time;
        let head = format!(
            "{}/{} {:.1} us = {:.1} us latency + {:.1} us at {:.1} GB/s",
            self.algo,
            self.proto,
            me.time_us,
            me.latency_term(),
            me.bandwidth_term(),
            me.bw_gbps
        );
        match self.runner_up() {
            None => format!("{head}; the only enabled algorithm/protocol"),
            Some((a, p, o)) => format!(
                "{head}; {} decided against {a}/{p} {:.1} us ({:.1} us latency + {:.1} us at {:.1} GB/s)",
                self.deciding_term(),
                o.time_us,
                o.latency_term(),
                o.bandwidth_term(),
                o.bw_gbps
            ),
        }
    }

    /// The shared model's record of this choice.
    pub fn decision(&self) -> Decision {
        Decision {
            coll: self.coll,
            bytes: self.bytes,
            algo: self.algo,
            proto: self.proto,
            n_channels: self.n_channels,
            time_us: Some(tidy(self.time.time_us)),
            runner_up: self.runner_up().map(|(algo, proto, t)| RunnerUp { algo, proto, time_us: tidy(t.time_us) }),
            reason: Some(self.reason()),
            datatype: None,
            rank: None,
        }
    }
}

impl fmt::Display for Choice {
    /// NCCL's TRACE text: `%ld Bytes -> Algo %d proto %d time %f`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} Bytes -> Algo {} proto {} time {:.6}",
            self.bytes,
            self.algo.id(),
            self.proto.id(),
            self.time.time_us
        )
    }
}

/// `ncclNvlsSupported`: which reductions NVLS multicast can do in hardware.
fn nvls_supports(op: RedOp, dt: DataType) -> bool {
    use DataType::*;
    match dt {
        I32 | U32 | I64 | U64 | F16 | Bf16 => matches!(op, RedOp::Sum | RedOp::Max | RedOp::Min),
        F32 | F64 => op == RedOp::Sum,
        _ => false,
    }
}

impl TuningModel {
    /// `ncclTopoGetAlgoTime`; `None` for a disabled cell (NCCL's -1).
    pub fn algo_time(
        &self,
        coll: Collective,
        a: Algorithm,
        p: Protocol,
        bytes: u64,
        num_pipe_ops: u32,
    ) -> Option<AlgoTime> {
        let mut bw = self.bandwidth(coll, a, p);
        let mut lat = self.latency(coll, a, p);
        if bw == 0.0 {
            return None;
        }
        if a == Algorithm::Tree && coll == Collective::AllReduce {
            if let Some(f) = self.constants.tree_correction(p, bytes) {
                bw *= f as f32;
            }
        }
        let inp = &self.input;
        let per_rank_channel = bytes / (inp.coll_channels.max(1) as u64 * inp.n_ranks as u64);
        if a == Algorithm::Ring
            && p == Protocol::Simple
            && inp.n_nodes > 1
            && coll == Collective::AllReduce
            && per_rank_channel >= self.constants.ring_plateau_min_bytes
        {
            let (old, new) = self.constants.ring_plateau_factor;
            lat = (lat as f64 * if inp.min_comp_cap < 80 { old } else { new }) as f32;
        }
        let batch = self.constants.threads.max_dev_work_batch_colls;
        let lat_count = if a == Algorithm::Ring { num_pipe_ops } else { num_pipe_ops.div_ceil(batch) };
        let time = lat * lat_count as f32 + transfer_us(bytes, bw as f64) as f32;
        Some(AlgoTime { lat_us: lat as f64, lat_count, bw_gbps: bw as f64, time_us: time as f64 })
    }

    /// `updateCollCostTable`'s per-call exclusions.
    fn call_skip(&self, call: &CallInfo, a: Algorithm) -> Option<&'static str> {
        let inp = &self.input;
        let t = self.constants.threads;
        // getCollNetSupport: collscope's CollNet model supports every reduction and datatype it has.
        let collnet = self.collnet_enable;
        let nvls = self.nvls_support && (nvls_supports(call.op, call.datatype) || call.coll == Collective::AllGather);
        match a {
            Algorithm::CollNetDirect | Algorithm::CollNetChain if !collnet => {
                Some("CollNet does not support this call (reduction/datatype, or CollNet is off)")
            }
            Algorithm::CollNetDirect | Algorithm::CollNetChain if inp.local_ranks > t.max_direct_arity + 1 => {
                Some("CollNet supports at most 8 local ranks")
            }
            Algorithm::Nvls | Algorithm::NvlsTree if !nvls => {
                Some("NVLS does not support this reduction/datatype, or NVLS is unavailable")
            }
            Algorithm::Nvls | Algorithm::NvlsTree
                if call.coll != Collective::AllReduce && inp.local_ranks > t.max_nvls_arity =>
            {
                Some("NVLS supports at most 32 local ranks outside AllReduce")
            }
            Algorithm::Nvls if !collnet && inp.n_nodes > 1 => Some("NVLS across nodes needs CollNet"),
            Algorithm::Pat if call.coll == Collective::ReduceScatter && call.op == RedOp::Avg => {
                Some("PAT ReduceScatter does not support scaling (avg)")
            }
            _ => None,
        }
    }

    /// The cost of every cell for this call (`updateCollCostTable`).
    pub fn costs(&self, call: &CallInfo) -> Vec<Vec<Cost>> {
        let skip = Cost::Skipped(Skip::Disabled);
        let mut table = vec![vec![skip; 3]; 7];
        if self.input.n_ranks == 1 {
            let zero = AlgoTime { lat_us: 0.0, lat_count: 0, bw_gbps: 0.0, time_us: 0.0 };
            table[Algorithm::Ring.id()][Protocol::Simple.id()] = Cost::Time(zero);
            return table;
        }
        for &a in Algorithm::NCCL {
            if let Some(why) = self.call_skip(call, a) {
                table[a.id()] = vec![Cost::Skipped(Skip::ForCall(why)); 3];
                continue;
            }
            for &p in Protocol::ALL {
                if let Some(t) = self.algo_time(call.coll, a, p, call.bytes, call.num_pipe_ops.max(1)) {
                    table[a.id()][p.id()] = Cost::Time(t);
                }
            }
        }
        table
    }

    /// `topoGetAlgoInfo`: the fastest cell, then channels and threads for its size. Fails as NCCL does with
    /// `no algorithm/protocol available` when every cell is off.
    pub fn choose(&self, call: &CallInfo) -> Result<Choice, TuningError> {
        let costs = self.costs(call);
        let mut best: Option<(Algorithm, Protocol, AlgoTime)> = None;
        let mut min_time = 3_600_000_000.0f64;
        for &a in Algorithm::NCCL {
            for &p in Protocol::ALL {
                if let Cost::Time(t) = costs[a.id()][p.id()] {
                    if t.time_us >= 0.0 && t.time_us < min_time {
                        min_time = t.time_us;
                        best = Some((a, p, t));
                    }
                }
            }
        }
        let Some((algo, proto, time)) = best else {
            let mut msg = format!(
                "Error : no algorithm/protocol available for function {} with datatype {}.",
                call.coll,
                nccl_datatype_name(call.datatype)
            );
            if let Some(v) = &self.params.algo {
                msg.push_str(&format!(" NCCL_ALGO was set to {v}."));
            }
            if let Some(v) = &self.params.proto {
                msg.push_str(&format!(" NCCL_PROTO was set to {v}."));
            }
            collscope_debug::nccl_warn!("{msg}");
            return Err(TuningError::NoAlgorithm(msg));
        };
        let one_rank = self.input.n_ranks == 1;
        let (n_channels, n_threads) =
            if one_rank { (0, 0) } else { self.channels_and_threads(algo, proto, call.bytes) };
        Ok(Choice { coll: call.coll, bytes: call.bytes, algo, proto, n_channels, n_threads, time, costs, one_rank })
    }

    /// The channel and thread reduction of `topoGetAlgoInfo`.
    fn channels_and_threads(&self, algo: Algorithm, proto: Protocol, bytes: u64) -> (u32, u32) {
        let inp = &self.input;
        let t = self.constants.threads;
        let bytes = bytes as i64;
        let mut nc = inp.coll_channels as i64;
        let mut nt = self.max_threads[algo.id()][proto.id()] as i64;
        let mut threshold = self.thread_thresholds[algo.id()][proto.id()];
        match algo {
            Algorithm::CollNetDirect => {
                let heads = inp.collnet_heads as i64;
                let mut switch = 16i64;
                let mut more = true;
                while switch >= 1 && more {
                    loop {
                        more = bytes < nc * nt * heads * threshold;
                        if !(more && nc > switch) {
                            break;
                        }
                        if nc == switch + switch / 2 {
                            threshold /= 2;
                        }
                        nc -= 1;
                    }
                    switch /= 2;
                }
            }
            Algorithm::Nvls | Algorithm::NvlsTree => {
                nc = if inp.n_nodes > 1 && algo == Algorithm::Nvls {
                    inp.nvls_channels.min(inp.coll_channels) as i64
                } else {
                    inp.nvls_channels as i64
                };
            }
            _ => {
                while bytes < nc * nt * threshold && nc >= 2 {
                    nc -= 1;
                }
            }
        }
        if !matches!(algo, Algorithm::Nvls | Algorithm::NvlsTree | Algorithm::CollNetDirect) {
            while bytes < nc * nt * threshold && nt % 128 == 0 {
                nt /= 2;
            }
        }
        let warp = t.warp_size as i64;
        if proto == Protocol::Simple {
            if algo == Algorithm::Ring {
                nt += warp;
            }
            if algo == Algorithm::Tree {
                nt += 4 * warp;
            }
        }
        if nt / warp < 3 {
            nt = 3 * warp;
        }
        if matches!(algo, Algorithm::Tree | Algorithm::Pat) {
            nt = t.max_nthreads as i64;
        }
        (nc as u32, (nt / warp * warp) as u32)
    }
}

/// `ncclDatatypeToString` (2.28.9 has no case for uint8 and prints "Unknown").
fn nccl_datatype_name(dt: DataType) -> &'static str {
    match dt {
        DataType::I8 => "ncclInt8",
        DataType::U8 => "Unknown",
        DataType::I32 => "ncclInt32",
        DataType::U32 => "ncclUint32",
        DataType::I64 => "ncclInt64",
        DataType::U64 => "ncclUint64",
        DataType::F16 => "ncclFloat16",
        DataType::F32 => "ncclFloat32",
        DataType::F64 => "ncclFloat64",
        DataType::Bf16 => "ncclBfloat16",
    }
}
