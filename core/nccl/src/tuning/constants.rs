//! The tuning model's constants as data, named by the NCCL release they come from. NCCL 2.28.9 keeps them in
//! `src/graph/tuning.cc` (`ncclTunerConstantsDefaults`, `nvlsEfficiency`, `treeCorrectionFactor`) and
//! `src/include/{device,comm}.h` (thread counts and thresholds). Where a later release (as reference text 001,
//! ch. 21, quotes it from `src/tuning/cost_model.cc`) differs in a way visible there, that release is a second
//! table here, not a second copy of the formulas.

use collscope_model::{Algorithm, Protocol};

/// `NCCL_HW_*`: which per-hop latency row applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hw {
    Nvlink = 0,
    Pci = 1,
    Net = 2,
}

/// `NCCL_*_COMPCAP_IDX`: the GPU generation column of the per-generation tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CompCapIdx {
    Volta = 0,
    Ampere = 1,
    Hopper = 2,
    Blackwell = 3,
}

impl CompCapIdx {
    /// NCCL 2.28.9 `ncclTopoTuneModel`: >= 100 Blackwell, >= 90 Hopper, >= 80 Ampere, else Volta.
    pub fn of(comp_cap: u32) -> Self {
        match comp_cap {
            100.. => CompCapIdx::Blackwell,
            90..=99 => CompCapIdx::Hopper,
            80..=89 => CompCapIdx::Ampere,
            _ => CompCapIdx::Volta,
        }
    }
}

/// Per (algorithm, protocol) values, indexed `[Algorithm::id()][Protocol::id()]`.
pub type AlgoProto<T> = [[T; 3]; 7];
/// Per generation and node-count column (1 node, 2 nodes, more), indexed `[CompCapIdx][column]`.
pub type PerGeneration = [[f64; 3]; 4];

/// Which pairs of compute capabilities may run LL128 by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ll128MixedCompCap {
    /// NCCL 2.28.9: only when every GPU has the same compute capability.
    Never,
    /// Later releases: mixed generations are allowed when the oldest is at least this.
    From(u32),
}

/// The compute capabilities LL128 is enabled on by default (`ncclTopoTuneModel`'s LL128 rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ll128CompCaps {
    /// Exactly these (a `switch (minCompCap)` up to 2.26).
    Listed(&'static [u32]),
    /// Every compute capability from 7.0 (2.27.3 on: `minCompCap < 70` is the only rule).
    From70,
}

impl std::fmt::Display for Ll128CompCaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ll128CompCaps::Listed(caps) => {
                let caps: Vec<String> = caps.iter().map(|c| format!("SM{c}")).collect();
                write!(f, "{}", caps.join(", "))
            }
            Ll128CompCaps::From70 => write!(f, "SM70 and newer"),
        }
    }
}

impl Ll128CompCaps {
    pub fn allows(self, comp_cap: u32) -> bool {
        match self {
            Ll128CompCaps::Listed(caps) => caps.contains(&comp_cap),
            Ll128CompCaps::From70 => comp_cap >= 70,
        }
    }
}

/// Every number the tuning model uses.
#[derive(Debug, Clone, PartialEq)]
pub struct TunerConstants {
    /// The NCCL release these numbers were read from.
    pub version: &'static str,
    /// Where they were read.
    pub source: &'static str,
    /// `baseLatencies[algo][proto]`, us.
    pub base_latencies: AlgoProto<f64>,
    /// `hwLatencies[hw][algo][proto]`, us per hop.
    pub hw_latencies: [AlgoProto<f64>; 3],
    /// `llMaxBws[index1][index2]`: index1 is the GPU generation on one node, the CPU vendor row (0 Intel, 1 AMD)
    /// across nodes; index2 the node-count column. GB/s.
    pub ll_max_bws: PerGeneration,
    pub per_ch_max_ring_ll128_bws: PerGeneration,
    pub per_ch_max_tree_ll128_bws: PerGeneration,
    pub per_ch_max_tree_bws: PerGeneration,
    pub per_ch_max_nvls_tree_bws: PerGeneration,
    /// `nvlsEfficiency[compCapIdx]`.
    pub nvls_efficiency: [f64; 4],
    /// `treeCorrectionFactor[proto][log2(bytes/64)]`, 64 B to 256 MB.
    pub tree_correction_factor: [[f64; 23]; 3],
    /// Ring/Simple multi-node AllReduce latency multiplier once each rank's share of a channel is >= 64 B:
    /// (before sm80, sm80 and newer).
    pub ring_plateau_factor: (f64, f64),
    /// Bytes per rank per channel from which the ring plateau factor applies.
    pub ring_plateau_min_bytes: u64,
    /// Per network step overhead in us by CPU (`getNetOverhead`): Intel x86, AMD x86, anything else.
    pub net_overhead_intel: f64,
    pub net_overhead_amd: f64,
    pub net_overhead_other: f64,
    /// Net overhead multiplier for Simple (three posts per step).
    pub net_overhead_simple_factor: f64,
    /// Bus bandwidth efficiencies the formulas apply.
    pub ring_ll_efficiency: f64,
    pub ring_ll128_efficiency: f64,
    pub tree_efficiency: f64,
    pub tree_ll_divisor: f64,
    pub tree_ll128_efficiency_1node: f64,
    pub tree_ll128_efficiency: f64,
    pub tree_pattern_penalty: f64,
    pub pat_efficiency: f64,
    pub collnet_direct_net_efficiency: f64,
    pub collnet_direct_sm90_efficiency: f64,
    /// CollNetDirect arity serialisation latency per local peer, us.
    pub collnet_direct_arity_latency: f64,
    /// PAT: network latency divisor and linear per-rank term, us.
    pub pat_net_latency_divisor: f64,
    pub pat_rank_latency: f64,
    pub ll128_mixed_comp_cap: Ll128MixedCompCap,
    /// The GPU generations LL128 runs on by default.
    pub ll128_comp_caps: Ll128CompCaps,
    /// The newest generation column the release knows: a newer GPU takes this one's values.
    pub newest_comp_cap_idx: CompCapIdx,
    /// Algorithms this release does not have, each with the release that brought it.
    pub absent: &'static [(Algorithm, &'static str)],
    pub threads: ThreadConstants,
    /// The latency and bandwidth rules of `ncclTopoTuneModel` that changed between releases.
    pub rules: TuneRules,
}

/// The rules of the latency and bandwidth formulas that changed between NCCL 2.12 and 2.23
/// (`src/graph/tuning.cc`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuneRules {
    /// Ring/LL128 efficiency below two ranks per node (`ppn < 2 ? 0.7 : 0.92`): up to 2.22, gone in 2.23.4.
    pub ring_ll128_low_ppn_efficiency: Option<f64>,
    /// `if (nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= 1.8`: up to 2.17, gone in 2.18.1.
    pub ll_multi_node_intra_factor: Option<f64>,
    /// How the network device's `latencyInter` enters `interLat`.
    pub inter_latency: InterLatency,
    /// Rings across nodes pay at least the CPU's net overhead per step (`getNetOverhead`): from 2.18.1.
    pub ring_net_overhead: bool,
    /// Ring AllReduce's inter-node steps: `2*nNodes` up to 2.22, `2*(nNodes-1)` from 2.23.4.
    pub ring_allreduce_inter_steps_2n: bool,
    /// With one rank per node the NET latency is Tree's ("latencies are fully exposed"): from 2.23.4.
    pub ppn1_tree_net_latency: bool,
    /// The share of the bus bandwidth Ring/LL gets.
    pub ring_ll: RingLl,
    /// How NVLS and NVLSTree turn the graph's bandwidth into a bus bandwidth and an algorithm bandwidth.
    pub nvls_bw: NvlsBw,
    /// AllGather/ReduceScatter cells of algorithms other than Ring keep their bus bandwidth (no bus to
    /// algorithm conversion): from 2.23.4; before, NVLS AllGather/ReduceScatter took NVLS's ratio.
    pub ag_rs_keep_bus_bw: bool,
}

/// Ring/LL's bus bandwidth, before the `llMaxBw` cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingLl {
    /// Up to 2.20: a quarter across nodes and for AllReduce and Reduce, a third otherwise.
    QuarterOrThird,
    /// From 2.21.5: half.
    Half,
}

/// The NVLS/NVLSTree bandwidth rule of `ncclTopoTuneModel`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NvlsBw {
    /// 2.17 and 2.18: the graph's bandwidth as for other algorithms (`bwIntra` up to 2 nodes, `bwInter`
    /// beyond), times `nvls_ratio` for NVLS and `0.70 * nNodes / (2 * (nNodes - 1))` for NVLSTree.
    Plain { nvls_ratio: f64 },
    /// 2.19 to 2.26: `min(bwIntra, bwInter)` (NVLSTree: half `bwInter` beyond 2 nodes), times 5/6.
    Min,
    /// 2.27: as `Min`, but NVLS AllGather/ReduceScatter take `min(bwIntra * (ppn-1)/ppn, 0.9 * bwInter)`.
    MinAgRs,
    /// From 2.28.3: `bwIntra * nvlsEfficiency * (nCh-1)/nCh` (doubled for AllReduce, else times
    /// (ppn-1)/ppn), capped by `bwInter` (doubled for NVLSTree up to 2 nodes) and NVLSTree's per-channel
    /// maximum; at least 2 channels; the ring's `nRanks/nsteps` ratio.
    Efficiency,
}

/// `interLat` from the NET latency and the graph's `latencyInter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterLatency {
    /// Up to 2.17: `latencyInter ? latencyInter : hwLat[NET]`.
    Replaces,
    /// From 2.18.1: `hwLat[NET] + latencyInter`, plus `latencyInter` again for Simple (the flush).
    AddedWithFlush,
}

const RULES_2_23: TuneRules = TuneRules {
    ring_ll128_low_ppn_efficiency: None,
    ll_multi_node_intra_factor: None,
    inter_latency: InterLatency::AddedWithFlush,
    ring_net_overhead: true,
    ring_allreduce_inter_steps_2n: false,
    ppn1_tree_net_latency: true,
    ring_ll: RingLl::Half,
    nvls_bw: NvlsBw::Efficiency,
    ag_rs_keep_bus_bw: true,
};

/// Thread counts and per-thread work thresholds (`src/include/device.h`, `comm.h`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadConstants {
    pub warp_size: u32,
    pub max_nthreads: u32,
    pub simple_max_nthreads: u32,
    pub ll_max_nthreads: u32,
    pub ll128_max_nthreads: u32,
    /// Ring/Simple falls back to this many threads when the ring graph's total bandwidth is at most `pci_bw`.
    pub simple_pci_nthreads: u32,
    /// `PCI_BW`, GB/s (`src/graph/topo.h`).
    pub pci_bw: f64,
    pub ll_thread_threshold: i64,
    pub ll128_thread_threshold: i64,
    pub simple_thread_threshold: i64,
    pub collnet_thread_threshold: i64,
    /// `NCCL_MAX_DEV_WORK_BATCH_COLLS`: 1024-byte batches of 96-byte `ncclDevWorkColl`.
    pub max_dev_work_batch_colls: u32,
    /// `NCCL_MAX_DIRECT_ARITY` and `NCCL_MAX_NVLS_ARITY`.
    pub max_direct_arity: u32,
    pub max_nvls_arity: u32,
}

const THREADS_2_28: ThreadConstants = ThreadConstants {
    warp_size: 32,
    max_nthreads: 640,
    simple_max_nthreads: 512,
    ll_max_nthreads: 512,
    ll128_max_nthreads: 640,
    simple_pci_nthreads: 256,
    pci_bw: 12.0,
    ll_thread_threshold: 8,
    ll128_thread_threshold: 8,
    simple_thread_threshold: 64,
    collnet_thread_threshold: 512,
    max_dev_work_batch_colls: 10,
    max_direct_arity: 7,
    max_nvls_arity: 32,
};

/// NCCL 2.28.9, `src/graph/tuning.cc`.
pub const NCCL_2_28_9: TunerConstants = TunerConstants {
    version: "2.28.9",
    source: "NVIDIA/nccl v2.28.9 src/graph/tuning.cc",
    base_latencies: [
        [6.8, 14.0, 8.4], // Tree
        [6.6, 14.0, 8.4], // Ring
        [0.0, 0.0, 0.0],  // CollNetDirect
        [0.0, 0.0, 0.0],  // CollNetChain
        [0.0, 0.0, 0.0],  // NVLS
        [0.0, 0.0, 0.0],  // NVLSTree
        [8.0, 8.0, 8.0],  // PAT
    ],
    hw_latencies: [
        // NVLINK
        [
            [0.6, 1.25, 4.0],
            [0.6, 1.9, 3.4],
            [0.0, 0.0, 3.7],
            [0.0, 0.0, 2.8],
            [0.0, 0.0, 25.0],
            [0.0, 0.0, 25.0],
            [0.0, 0.0, 4.0],
        ],
        // PCI
        [
            [1.0, 1.9, 4.0],
            [1.0, 2.5, 5.7],
            [0.0, 0.0, 3.7],
            [0.0, 0.0, 2.8],
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 4.0],
        ],
        // NET
        [
            [5.0, 8.5, 14.0],
            [2.7, 4.0, 14.0],
            [0.0, 0.0, 31.0],
            [0.0, 0.0, 30.0],
            [0.0, 0.0, 18.0],
            [0.0, 0.0, 20.9],
            [0.0, 0.0, 14.0],
        ],
    ],
    ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [2.0 * 141.0, 2.0 * 45.0, 2.0 * 35.0]],
    per_ch_max_ring_ll128_bws: [
        [20.0, 20.0, 20.0],
        [20.0, 20.0, 20.0],
        [36.7, 36.7, 36.7],
        [2.0 * 36.7, 34.6, 2.0 * 36.7],
    ],
    per_ch_max_tree_ll128_bws: [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]],
    per_ch_max_tree_bws: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]],
    per_ch_max_nvls_tree_bws: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 43.8]],
    nvls_efficiency: [0.0, 0.0, 0.85, 0.74],
    tree_correction_factor: [
        [
            1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0,
            1.0, 1.0,
        ],
        [
            1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9,
            1.0, 1.0,
        ],
        [
            0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8,
            0.9, 0.9,
        ],
    ],
    ring_plateau_factor: (1.9, 1.4),
    ring_plateau_min_bytes: 64,
    net_overhead_intel: 1.0,
    net_overhead_amd: 2.0,
    net_overhead_other: 1.0,
    net_overhead_simple_factor: 3.0,
    ring_ll_efficiency: 0.5,
    ring_ll128_efficiency: 0.92,
    tree_efficiency: 0.92,
    tree_ll_divisor: 3.8,
    tree_ll128_efficiency_1node: 7.0 / 9.0,
    tree_ll128_efficiency: 120.0 / 128.0,
    tree_pattern_penalty: 0.85,
    pat_efficiency: 0.75,
    collnet_direct_net_efficiency: 0.9,
    collnet_direct_sm90_efficiency: 0.85,
    collnet_direct_arity_latency: 0.4,
    pat_net_latency_divisor: 3.5,
    pat_rank_latency: 2.8,
    ll128_mixed_comp_cap: Ll128MixedCompCap::Never,
    ll128_comp_caps: Ll128CompCaps::From70,
    newest_comp_cap_idx: CompCapIdx::Blackwell,
    absent: &[],
    threads: THREADS_2_28,
    rules: RULES_2_23,
};

/// 2.28.9's constants with the Tree and Ring rows of `baseLat` and `hwLat` (`[NVLINK, PCI, NET][Tree, Ring]`)
/// and the latency and bandwidth rules of an older release; the callers then set what else the release
/// changed. The CollNet and PAT rows and the thread counts stay 2.28.9's.
const fn older(
    version: &'static str,
    source: &'static str,
    base: [[f64; 3]; 2],
    hw: [[[f64; 3]; 2]; 3],
    rules: TuneRules,
) -> TunerConstants {
    let mut c = NCCL_2_28_9;
    c.version = version;
    c.source = source;
    c.base_latencies[Algorithm::Tree as usize] = base[0];
    c.base_latencies[Algorithm::Ring as usize] = base[1];
    let mut h = 0;
    while h < 3 {
        c.hw_latencies[h][Algorithm::Tree as usize] = hw[h][0];
        c.hw_latencies[h][Algorithm::Ring as usize] = hw[h][1];
        h += 1;
    }
    c.rules = rules;
    c
}

/// `c` with the NVLS and NVLSTree Simple latencies over NVLink and NET (`hwLat[NVLINK|NET][NVLS|NVLSTree]`).
const fn nvls_latencies(mut c: TunerConstants, nvlink: [f64; 2], net: [f64; 2]) -> TunerConstants {
    let (nvls, tree, simple) = (Algorithm::Nvls as usize, Algorithm::NvlsTree as usize, Protocol::Simple as usize);
    c.hw_latencies[Hw::Nvlink as usize][nvls][simple] = nvlink[0];
    c.hw_latencies[Hw::Nvlink as usize][tree][simple] = nvlink[1];
    c.hw_latencies[Hw::Net as usize][nvls][simple] = net[0];
    c.hw_latencies[Hw::Net as usize][tree][simple] = net[1];
    c
}

/// `llMaxBws` up to 2.20.5: Hopper on one node had Ampere's 87.7 GB/s (141 from 2.21.5).
const LL_MAX_BWS_2_20: PerGeneration = [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [87.7, 22.5, 19.0], [87.7, 22.5, 19.0]];

/// 2.25 to 2.27's Blackwell rows: twice Hopper's (v2.27.7-1 src/graph/tuning.cc); 2.28.3 retuned them.
const fn blackwell_2_25(mut c: TunerConstants) -> TunerConstants {
    let b = CompCapIdx::Blackwell as usize;
    c.per_ch_max_ring_ll128_bws[b] = [2.0 * 36.7, 2.0 * 36.7, 2.0 * 36.7];
    c.per_ch_max_tree_ll128_bws[b] = [2.0 * 36.7, 2.0 * 36.7, 2.0 * 29.0];
    c.per_ch_max_tree_bws[b] = [2.0 * 38.7, 2.0 * 41.4, 2.0 * 36.0];
    c
}

const RULES_2_17: TuneRules = TuneRules {
    ring_ll128_low_ppn_efficiency: Some(0.7),
    ll_multi_node_intra_factor: Some(1.8),
    inter_latency: InterLatency::Replaces,
    ring_net_overhead: false,
    ring_allreduce_inter_steps_2n: true,
    ppn1_tree_net_latency: false,
    ring_ll: RingLl::QuarterOrThird,
    nvls_bw: NvlsBw::Plain { nvls_ratio: 0.75 },
    ag_rs_keep_bus_bw: false,
};

const RULES_2_18: TuneRules = TuneRules {
    ring_ll128_low_ppn_efficiency: Some(0.7),
    ll_multi_node_intra_factor: None,
    inter_latency: InterLatency::AddedWithFlush,
    ring_net_overhead: true,
    ring_allreduce_inter_steps_2n: true,
    ppn1_tree_net_latency: false,
    ring_ll: RingLl::QuarterOrThird,
    nvls_bw: NvlsBw::Plain { nvls_ratio: 0.75 },
    ag_rs_keep_bus_bw: false,
};

const NO_NVLS: &[(Algorithm, &str)] =
    &[(Algorithm::Nvls, "2.17.1"), (Algorithm::NvlsTree, "2.18.1"), (Algorithm::Pat, "2.23.4")];
const NO_NVLS_TREE: &[(Algorithm, &str)] = &[(Algorithm::NvlsTree, "2.18.1"), (Algorithm::Pat, "2.23.4")];
const NO_PAT: &[(Algorithm, &str)] = &[(Algorithm::Pat, "2.23.4")];
/// LL128's default generations, `switch (minCompCap)` (v2.14.3-1, v2.15.1-1, v2.25.1-1 src/graph/tuning.cc).
const LL128_2_12: Ll128CompCaps = Ll128CompCaps::Listed(&[70, 80]);
const LL128_2_15: Ll128CompCaps = Ll128CompCaps::Listed(&[70, 80, 90]);
const LL128_2_25: Ll128CompCaps = Ll128CompCaps::Listed(&[70, 80, 90, 100]);

const BASE_2_12: TunerConstants = older(
    "2.12-2.13",
    "NVIDIA/nccl v2.12.12-1 src/graph/tuning.cc",
    [[4.4, 4.4, 0.0], [3.6, 10.0, 8.4]],
    [[[0.52, 1.25, 28.0], [0.47, 1.9, 3.4]], [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7]], [[5.0, 8.5, 28.0], [2.7, 4.0, 28.0]]],
    RULES_2_17,
);

/// NCCL 2.12 and 2.13 (v2.12.7-1 to v2.13.4-1): Ring over NET Simple 28 us; no NVLS, NVLSTree or PAT;
/// LL128 on SM70 and SM80 only.
pub const NCCL_2_12: TunerConstants = TunerConstants {
    ll_max_bws: LL_MAX_BWS_2_20,
    ll128_comp_caps: LL128_2_12,
    newest_comp_cap_idx: CompCapIdx::Hopper,
    absent: NO_NVLS,
    ..BASE_2_12
};

const BASE_2_14: TunerConstants = older(
    "2.14",
    "NVIDIA/nccl v2.14.3-1 src/graph/tuning.cc",
    [[4.4, 4.4, 0.0], [3.6, 10.0, 8.4]],
    [[[0.52, 1.25, 28.0], [0.47, 1.9, 3.4]], [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7]], [[5.0, 8.5, 28.0], [2.7, 4.0, 9.6]]],
    RULES_2_17,
);

/// NCCL 2.14 (v2.14.3-1): Ring over NET Simple 9.6 us; LL128 still SM70/SM80 only.
pub const NCCL_2_14: TunerConstants = TunerConstants {
    ll_max_bws: LL_MAX_BWS_2_20,
    ll128_comp_caps: LL128_2_12,
    newest_comp_cap_idx: CompCapIdx::Hopper,
    absent: NO_NVLS,
    ..BASE_2_14
};

/// NCCL 2.15 and 2.16 (v2.15.1-1 to v2.16.5-1): 2.14's latencies; LL128 on SM90 too.
pub const NCCL_2_15: TunerConstants = TunerConstants {
    version: "2.15-2.16",
    source: "NVIDIA/nccl v2.16.5-1 src/graph/tuning.cc",
    ll128_comp_caps: LL128_2_15,
    ..NCCL_2_14
};

/// NCCL 2.17 (v2.17.1-1): NVLS arrives, with no latency (`hwLat` NVLS rows 0) and ratio 0.75.
pub const NCCL_2_17: TunerConstants = TunerConstants {
    version: "2.17",
    source: "NVIDIA/nccl v2.17.1-1 src/graph/tuning.cc",
    absent: NO_NVLS_TREE,
    ..nvls_latencies(NCCL_2_15, [0.0, 0.0], [0.0, 0.0])
};

const BASE_2_18: TunerConstants = older(
    "2.18.1",
    "NVIDIA/nccl v2.18.1-1 src/graph/tuning.cc",
    [[6.8, 14.0, 0.0], [6.6, 14.0, 8.4]],
    [[[0.6, 1.25, 28.0], [0.6, 1.9, 3.4]], [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7]], [[5.0, 8.5, 28.0], [2.7, 4.0, 14.0]]],
    RULES_2_18,
);

/// NCCL 2.18.1 (v2.18.1-1): new base latencies, NVLink LL 0.6, Ring over NET Simple 14 us, `latencyInter`
/// added (twice for Simple), the net overhead floor on rings; Tree Simple still 28 us. NVLSTree arrives
/// (NET 19 us, NVLS 18 us, nothing over NVLink).
pub const NCCL_2_18: TunerConstants = TunerConstants {
    ll_max_bws: LL_MAX_BWS_2_20,
    ll128_comp_caps: LL128_2_15,
    newest_comp_cap_idx: CompCapIdx::Hopper,
    absent: NO_PAT,
    ..nvls_latencies(BASE_2_18, [0.0, 0.0], [18.0, 19.0])
};

/// NCCL 2.18.3 to 2.18.6 (v2.18.3-1, v2.18.6-1): NVLS's ratio 5/6.
pub const NCCL_2_18_3: TunerConstants = TunerConstants {
    version: "2.18.3-2.18.6",
    source: "NVIDIA/nccl v2.18.6-1 src/graph/tuning.cc",
    rules: TuneRules { nvls_bw: NvlsBw::Plain { nvls_ratio: 5.0 / 6.0 }, ..RULES_2_18 },
    ..NCCL_2_18
};

/// NCCL 2.19 and 2.20 (v2.19.1-1 to v2.20.5-1): NVLS/NVLSTree take `min(bwIntra, bwInter)`, 23 us over
/// NVLink, NVLSTree 14 us over NET; Ring/LL still a quarter or a third of the bus bandwidth, and Hopper
/// still Ampere's LL cap.
pub const NCCL_2_19: TunerConstants = TunerConstants {
    version: "2.19-2.20",
    source: "NVIDIA/nccl v2.19.4-1 src/graph/tuning.cc",
    rules: TuneRules { nvls_bw: NvlsBw::Min, ..RULES_2_18 },
    ..nvls_latencies(NCCL_2_18, [23.0, 23.0], [18.0, 14.0])
};

/// NCCL 2.21 and 2.22 (v2.21.5-1, v2.22.3-1): Ring/LL half the bus bandwidth, Hopper's LL cap 141 GB/s,
/// NVLS 25 us over NVLink.
pub const NCCL_2_21: TunerConstants = TunerConstants {
    version: "2.21-2.22",
    source: "NVIDIA/nccl v2.22.3-1 src/graph/tuning.cc",
    ll_max_bws: NCCL_2_28_9.ll_max_bws,
    rules: TuneRules { ring_ll: RingLl::Half, nvls_bw: NvlsBw::Min, ..RULES_2_18 },
    ..nvls_latencies(NCCL_2_18, [25.0, 25.0], [18.0, 14.0])
};

/// NCCL 2.23 and 2.24 (v2.23.4-1, v2.24.3-1): 2.28.9's Tree/Ring latencies and rules and PAT, with the
/// NVLS rule of 2.19, NVLSTree 14 us over NET, LL128 on SM70/80/90, no Blackwell column.
pub const NCCL_2_23: TunerConstants = TunerConstants {
    version: "2.23-2.24",
    source: "NVIDIA/nccl v2.24.3-1 src/graph/tuning.cc",
    ll128_comp_caps: LL128_2_15,
    newest_comp_cap_idx: CompCapIdx::Hopper,
    rules: TuneRules { nvls_bw: NvlsBw::Min, ..RULES_2_23 },
    ..nvls_latencies(NCCL_2_28_9, [25.0, 25.0], [18.0, 14.0])
};

/// NCCL 2.25 and 2.26 (v2.25.1-1 to v2.26.6-1): Blackwell's column (twice Hopper's) and LL128 on SM100.
pub const NCCL_2_25: TunerConstants = TunerConstants {
    version: "2.25-2.26",
    source: "NVIDIA/nccl v2.26.6-1 src/graph/tuning.cc",
    ll128_comp_caps: LL128_2_25,
    newest_comp_cap_idx: CompCapIdx::Blackwell,
    ..blackwell_2_25(NCCL_2_23)
};

/// NCCL 2.27 (v2.27.3-1 to v2.27.7-1): LL128 on every generation from SM70; NVLS AllGather/ReduceScatter
/// bounded by `bwIntra * (ppn-1)/ppn` and 0.9 `bwInter`.
pub const NCCL_2_27: TunerConstants = TunerConstants {
    version: "2.27",
    source: "NVIDIA/nccl v2.27.7-1 src/graph/tuning.cc",
    ll128_comp_caps: Ll128CompCaps::From70,
    rules: TuneRules { nvls_bw: NvlsBw::MinAgRs, ..RULES_2_23 },
    ..NCCL_2_25
};

/// NCCL 2.28.3 and 2.28.7 (v2.28.3-1, v2.28.7-1): 2.28.9's tables and NVLS rule, but NVLSTree over NET
/// 14 us (20.9 in 2.28.9) and Blackwell's NVLSTree cap across 3+ nodes 43.1 (43.8).
pub const NCCL_2_28_3: TunerConstants = TunerConstants {
    version: "2.28.3-2.28.7",
    source: "NVIDIA/nccl v2.28.7-1 src/graph/tuning.cc",
    per_ch_max_nvls_tree_bws: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 43.1]],
    ..nvls_latencies(NCCL_2_28_9, [25.0, 25.0], [18.0, 14.0])
};

/// The later release reference text 001 (ch. 21) quotes from `src/tuning/cost_model.cc` (2.30 series): the
/// Blackwell single-node LL bandwidth reads `2 * 141.2`, and LL128 is allowed across mixed generations when
/// the oldest is sm90 or newer. Everything the text does not show is taken as unchanged from 2.28.9.
pub const NCCL_2_30_TEXT001: TunerConstants = TunerConstants {
    version: "2.30",
    source: "reference text 001 ch. 21 (src/tuning/cost_model.cc as quoted)",
    ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [2.0 * 141.2, 2.0 * 45.0, 2.0 * 35.0]],
    ll128_mixed_comp_cap: Ll128MixedCompCap::From(90),
    ..NCCL_2_28_9
};

/// Every table collscope knows, newest last.
pub const KNOWN: [&TunerConstants; 14] = [
    &NCCL_2_12,
    &NCCL_2_14,
    &NCCL_2_15,
    &NCCL_2_17,
    &NCCL_2_18,
    &NCCL_2_18_3,
    &NCCL_2_19,
    &NCCL_2_21,
    &NCCL_2_23,
    &NCCL_2_25,
    &NCCL_2_27,
    &NCCL_2_28_3,
    &NCCL_2_28_9,
    &NCCL_2_30_TEXT001,
];

/// The table for a release name ("2.28.9", "2.30").
pub fn for_version(version: &str) -> Option<&'static TunerConstants> {
    KNOWN.into_iter().find(|c| c.version == version)
}

impl TunerConstants {
    pub fn base_latency(&self, a: Algorithm, p: Protocol) -> f64 {
        self.base_latencies[a.id()][p.id()]
    }

    pub fn hw_latency(&self, hw: Hw, a: Algorithm, p: Protocol) -> f64 {
        self.hw_latencies[hw as usize][a.id()][p.id()]
    }

    /// The tree correction for a message of `bytes`, or None outside the table (below 64 B, from 512 MB).
    pub fn tree_correction(&self, p: Protocol, bytes: u64) -> Option<f64> {
        let log_size = log2i(bytes >> 6);
        (0..23).contains(&log_size).then(|| self.tree_correction_factor[p.id()][log_size as usize])
    }
}

/// NCCL's `log2i`: floor(log2(n)), -1 for 0.
pub fn log2i(n: u64) -> i32 {
    if n == 0 {
        -1
    } else {
        63 - n.leading_zeros() as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_nccl_2_28_9() {
        let c = &NCCL_2_28_9;
        assert_eq!(c.base_latency(Algorithm::Ring, Protocol::Ll), 6.6);
        assert_eq!(c.base_latency(Algorithm::Tree, Protocol::Ll128), 14.0);
        assert_eq!(c.base_latency(Algorithm::Pat, Protocol::Simple), 8.0);
        assert_eq!(c.hw_latency(Hw::Nvlink, Algorithm::Ring, Protocol::Simple), 3.4);
        assert_eq!(c.hw_latency(Hw::Nvlink, Algorithm::Tree, Protocol::Ll128), 1.25);
        assert_eq!(c.hw_latency(Hw::Pci, Algorithm::Ring, Protocol::Simple), 5.7);
        assert_eq!(c.hw_latency(Hw::Pci, Algorithm::Nvls, Protocol::Simple), 0.0);
        assert_eq!(c.hw_latency(Hw::Net, Algorithm::Ring, Protocol::Ll), 2.7);
        assert_eq!(c.hw_latency(Hw::Net, Algorithm::NvlsTree, Protocol::Simple), 20.9);
        assert_eq!(c.hw_latency(Hw::Net, Algorithm::CollNetDirect, Protocol::Simple), 31.0);
        assert_eq!(c.ll_max_bws[CompCapIdx::Ampere as usize], [87.7, 22.5, 19.0]);
        assert_eq!(c.ll_max_bws[CompCapIdx::Blackwell as usize][0], 282.0);
        assert_eq!(c.per_ch_max_ring_ll128_bws[CompCapIdx::Blackwell as usize][1], 34.6);
        assert_eq!(c.per_ch_max_tree_bws[CompCapIdx::Hopper as usize], [38.7, 41.4, 36.0]);
        assert_eq!(c.per_ch_max_nvls_tree_bws[CompCapIdx::Hopper as usize][1], 57.7);
        assert_eq!(c.nvls_efficiency, [0.0, 0.0, 0.85, 0.74]);
        assert_eq!(c.ring_plateau_factor, (1.9, 1.4));
        assert_eq!((c.net_overhead_intel, c.net_overhead_amd), (1.0, 2.0));
        assert_eq!(c.threads.max_dev_work_batch_colls, 10);
        assert_eq!(c.threads.ll128_max_nthreads, 640);
    }

    #[test]
    fn tree_correction_indexes_by_log2_of_64_byte_units() {
        let c = &NCCL_2_28_9;
        assert_eq!(c.tree_correction(Protocol::Simple, 63), None);
        assert_eq!(c.tree_correction(Protocol::Simple, 64), Some(0.9));
        assert_eq!(c.tree_correction(Protocol::Ll, 64 << 12), Some(0.4));
        assert_eq!(c.tree_correction(Protocol::Ll128, 256 << 20), Some(1.0));
        assert_eq!(c.tree_correction(Protocol::Ll128, 512 << 20), None);
        assert_eq!(log2i(0), -1);
        assert_eq!(log2i(32), 5);
    }

    #[test]
    fn later_release_differences_are_data() {
        let later = for_version("2.30").unwrap();
        assert_eq!(later.ll_max_bws[3][0], 282.4);
        assert_eq!(later.ll128_mixed_comp_cap, Ll128MixedCompCap::From(90));
        assert_eq!(later.base_latencies, NCCL_2_28_9.base_latencies);
        assert_eq!(for_version("2.28.9").unwrap().ll128_mixed_comp_cap, Ll128MixedCompCap::Never);
        assert!(for_version("2.1").is_none());
    }
}
