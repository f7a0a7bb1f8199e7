//! NCCL 2.28.9 `ncclTopoTuneModel` (`src/graph/tuning.cc`): from the graphs and the communicator's shape, the
//! latency (us) and bandwidth (GB/s, algorithm bandwidth) of every collective x algorithm x protocol, which of
//! them are enabled and why not, the threads per block and the per-thread work thresholds. NCCL keeps the
//! tables as `float`; so does this, so printed values round as NCCL's do.

use super::constants::{log2i, CompCapIdx, Hw, Ll128MixedCompCap, TunerConstants};
use super::grammar::{parse_algo, parse_proto, EnableMatrix};
use super::input::{CpuArch, CpuVendor, TuningInput};
use super::params::{TuningError, TuningParams};
use crate::model::{Algorithm, Collective, PathType, Pattern, Protocol, TuningCell, TuningTable};
use std::fmt;

/// `[collective][algorithm][protocol]` in NCCL's orders (`Collective::TUNED`, `Algorithm::ALL`, `Protocol::ALL`).
pub type CellTable<T> = [[[T; 3]; 7]; 5];

/// Why a cell of the table is 0 (never chosen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    /// The algorithm does not implement this collective.
    NotServed,
    /// The algorithm runs only with Simple.
    SimpleOnly,
    /// PAT is off: the reason.
    Pat(&'static str),
    /// NVLS needs at least two NVLS channels; the search found this many.
    NvlsChannels(u32),
    /// The graph for this algorithm has no channels (the search did not run or found nothing).
    NoGraph(Pattern),
    /// AllGather/ReduceScatter over NVLS or CollNetDirect across nodes: the reason.
    CollnetAgRs(&'static str),
    /// LL128 is not enabled by default here: the rule that failed.
    Ll128(String),
    /// Excluded by `NCCL_ALGO`/`NCCL_PROTO`.
    Env {
        var: &'static str,
        value: String,
    },
    NvlsTreeOneNode,
    CollnetDisabled,
    NvlsNeedsCollnet,
    NoNvSwitch,
    SingleRank,
}

impl fmt::Display for Off {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Off::NotServed => write!(f, "the algorithm does not implement this collective"),
            Off::SimpleOnly => write!(f, "the algorithm runs only with the Simple protocol"),
            Off::Pat(why) => write!(f, "PAT disabled: {why}"),
            Off::NvlsChannels(n) => write!(f, "NVLS needs at least 2 NVLS channels, the search found {n}"),
            Off::NoGraph(p) => write!(f, "no channels for pattern {} ({p:?})", p.id()),
            Off::CollnetAgRs(why) => write!(f, "{why}"),
            Off::Ll128(why) => write!(f, "LL128 disabled: {why}"),
            Off::Env { var, value } => write!(f, "excluded by {var}={value}"),
            Off::NvlsTreeOneNode => write!(f, "NVLSTree is disabled on a single node"),
            Off::CollnetDisabled => write!(f, "CollNet is not enabled (no CollNet plugin or NCCL_COLLNET_ENABLE=0)"),
            Off::NvlsNeedsCollnet => write!(f, "NVLS across nodes needs CollNet"),
            Off::NoNvSwitch => write!(f, "CollNetDirect needs an NVSwitch"),
            Off::SingleRank => write!(f, "a single rank has nothing to communicate"),
        }
    }
}

/// The tuning model of one communicator.
#[derive(Debug, Clone)]
pub struct TuningModel {
    pub input: TuningInput,
    pub params: TuningParams,
    pub constants: &'static TunerConstants,
    pub latencies: CellTable<f32>,
    pub bandwidths: CellTable<f32>,
    /// Why each zero-bandwidth cell is zero (empty for cells that are on).
    pub off: Vec<Vec<Vec<Vec<Off>>>>,
    /// `maxThreads[algo][proto]`.
    pub max_threads: [[u32; 3]; 7],
    /// `threadThresholds[algo][proto]`, bytes per thread.
    pub thread_thresholds: [[i64; 3]; 7],
    /// The matrices as the user's `NCCL_PROTO`/`NCCL_ALGO` left them (NCCL prints these).
    pub proto_enable: EnableMatrix<3>,
    pub algo_enable: EnableMatrix<7>,
    /// `nvlsSupport` / `collnetEnable` after NCCL's graph checks.
    pub nvls_support: bool,
    pub collnet_enable: bool,
    /// INFO messages NCCL prints while tuning (invalid thread counts, the LL128 C2C note).
    pub notes: Vec<String>,
}

fn getn_threads(name: &str, env: i64, min: u32, max: u32, def: u32, warp: u32, notes: &mut Vec<String>) -> u32 {
    if env <= 0 {
        return def;
    }
    let nt = env;
    if nt % warp as i64 != 0 {
        notes.push(format!("Invalid {name} {nt} (must be a multiple of {warp})"));
        max
    } else if nt > max as i64 {
        notes.push(format!("Invalid {name} {nt} (maximum {max})."));
        max
    } else if nt < min as i64 {
        notes.push(format!("Invalid {name} {nt} (minimum {min})."));
        min
    } else {
        nt as u32
    }
}

impl TuningModel {
    pub fn new(
        input: TuningInput,
        params: TuningParams,
        constants: &'static TunerConstants,
    ) -> Result<TuningModel, TuningError> {
        if input.n_nodes == 0 || input.n_ranks < input.n_nodes {
            return Err(TuningError::Input(format!(
                "{} ranks on {} nodes: need at least one node and one rank per node",
                input.n_ranks, input.n_nodes
            )));
        }
        let t = constants.threads;
        let mut notes = Vec::new();
        let mut max_threads = [[0u32; 3]; 7];
        let (tree, ring) = (Algorithm::Tree.id(), Algorithm::Ring.id());
        let (ll, ll128, simple) = (Protocol::Ll.id(), Protocol::Ll128.id(), Protocol::Simple.id());
        let ring_total = input.graphs.ring.bw_intra as f32 * input.graphs.ring.n_channels as f32;
        let simple_default = if ring_total <= t.pci_bw as f32 { t.simple_pci_nthreads } else { t.simple_max_nthreads };
        let nthreads = |notes: &mut Vec<String>, max, def| {
            getn_threads("NCCL_NTHREADS", params.nthreads, 2 * t.warp_size, max, def, t.warp_size, notes)
        };
        max_threads[ring][simple] = nthreads(&mut notes, t.simple_max_nthreads, simple_default);
        max_threads[tree][simple] = nthreads(&mut notes, t.simple_max_nthreads, t.simple_max_nthreads);
        for a in [Algorithm::CollNetDirect, Algorithm::CollNetChain, Algorithm::Nvls, Algorithm::NvlsTree] {
            max_threads[a.id()][simple] = t.max_nthreads;
        }
        let ll_threads = nthreads(&mut notes, t.ll_max_nthreads, t.ll_max_nthreads);
        max_threads[ring][ll] = ll_threads;
        max_threads[tree][ll] = ll_threads;
        let ll128_threads = getn_threads(
            "NCCL_LL128_NTHREADS",
            params.ll128_nthreads,
            t.ll128_max_nthreads / 4,
            t.ll128_max_nthreads,
            t.ll128_max_nthreads,
            t.warp_size,
            &mut notes,
        );
        max_threads[ring][ll128] = ll128_threads;
        max_threads[tree][ll128] = ll128_threads;

        let nvls_support = input.nvls_support && input.graphs.nvls.n_channels > 0;
        let collnet_enable = input.collnet_enable && input.graphs.collnet_chain.n_channels > 0;
        let mut m = TuningModel {
            input,
            params,
            constants,
            latencies: [[[0.0; 3]; 7]; 5],
            bandwidths: [[[0.0; 3]; 7]; 5],
            off: vec![vec![vec![Vec::new(); 3]; 7]; 5],
            max_threads,
            thread_thresholds: [[0; 3]; 7],
            proto_enable: [[1, 2, 1]; 5],
            algo_enable: [[1; 7]; 5],
            nvls_support,
            collnet_enable,
            notes,
        };
        if m.input.n_ranks <= 1 {
            for cell in m.off.iter_mut().flatten().flatten() {
                cell.push(Off::SingleRank);
            }
            return Ok(m);
        }
        m.compute_table();
        m.apply_enables()?;
        m.set_thread_thresholds()?;
        Ok(m)
    }

    pub fn comp_cap_idx(&self) -> CompCapIdx {
        CompCapIdx::of(self.input.min_comp_cap)
    }

    /// Node-count column of the per-generation tables: 1 node, 2 nodes, more.
    fn index2(&self) -> usize {
        if self.input.n_nodes <= 2 {
            self.input.n_nodes as usize - 1
        } else {
            2
        }
    }

    /// `llMaxBws` row: the GPU generation on one node, the CPU vendor (Intel row 0, AMD row 1) across nodes.
    fn index1(&self) -> usize {
        if self.input.n_nodes == 1 {
            self.comp_cap_idx() as usize
        } else if matches!(self.input.cpu_vendor, CpuVendor::Amd | CpuVendor::Mixed) {
            1
        } else {
            0
        }
    }

    /// `ncclPatEnable`: 0 with the reason, or 1.
    fn pat_off(&self) -> Option<&'static str> {
        if self.input.min_comp_cap < 60 {
            return Some("needs compute capability 6.0 or newer");
        }
        if self.params.pat_enable != 2 {
            return (self.params.pat_enable == 0).then_some("NCCL_PAT_ENABLE=0");
        }
        if self.input.n_nodes != self.input.n_ranks {
            return Some("PAT supports only one rank per node");
        }
        if !self.input.net_device_host {
            return Some("PAT does not support network device offload");
        }
        None
    }

    /// `getNetOverhead`, us.
    fn net_overhead(&self) -> f64 {
        let c = self.constants;
        if self.params.net_overhead_ns != -2 {
            return self.params.net_overhead_ns as f64 * 0.001;
        }
        match (self.input.cpu_arch, self.input.cpu_vendor) {
            (CpuArch::X86, CpuVendor::Intel) => c.net_overhead_intel,
            (CpuArch::X86, CpuVendor::Amd) => c.net_overhead_amd,
            _ => c.net_overhead_other,
        }
    }

    /// Per-hop latency, with NCCL's Power adjustment (Tree/Simple over PCI costs as much as Ring/Simple).
    fn hw_lat(&self, hw: Hw, a: Algorithm, p: Protocol) -> f32 {
        let c = self.constants;
        if self.input.cpu_arch == CpuArch::Power && hw == Hw::Pci && a == Algorithm::Tree && p == Protocol::Simple {
            return c.hw_latency(Hw::Pci, Algorithm::Ring, Protocol::Simple) as f32;
        }
        c.hw_latency(hw, a, p) as f32
    }

    /// The skip rules at the top of NCCL's loops: these cells are never computed.
    fn skipped(&self, coll: Collective, a: Algorithm, p: Protocol) -> Option<Off> {
        use Algorithm::*;
        use Collective::*;
        let served = match coll {
            Broadcast | Reduce => a == Ring,
            AllGather | ReduceScatter => matches!(a, Pat | Ring | Nvls | CollNetDirect),
            _ => a != Pat,
        };
        if !served {
            return Some(Off::NotServed);
        }
        if matches!(a, Nvls | NvlsTree) && p != Protocol::Simple {
            return Some(Off::SimpleOnly);
        }
        if matches!(coll, AllGather | ReduceScatter) && a == Pat {
            if p != Protocol::Simple {
                return Some(Off::SimpleOnly);
            }
            if let Some(why) = self.pat_off() {
                return Some(Off::Pat(why));
            }
        }
        None
    }

    fn compute_table(&mut self) {
        let c = self.constants;
        let inp = &self.input;
        let (n_nodes, n_ranks) = (inp.n_nodes, inp.n_ranks);
        let cc = self.comp_cap_idx() as usize;
        let (i1, i2) = (self.index1(), self.index2());
        let ll_max_bw = c.ll_max_bws[i1][i2];
        let per_ch_tree = c.per_ch_max_tree_bws[cc][i2];
        let per_ch_ring_ll128 = c.per_ch_max_ring_ll128_bws[cc][i2];
        let per_ch_tree_ll128 = c.per_ch_max_tree_ll128_bws[cc][i2];
        let per_ch_nvls_tree = c.per_ch_max_nvls_tree_bws[cc][i2];
        let ppn = n_ranks as f32 / n_nodes as f32;
        let net_overhead = self.net_overhead();
        for (ci, &coll) in Collective::TUNED.iter().enumerate() {
            let nsteps: u32 = match coll {
                Collective::AllReduce => 2 * (n_ranks - 1),
                Collective::ReduceScatter | Collective::AllGather => n_ranks - 1,
                _ => n_ranks,
            };
            let ag_rs = matches!(coll, Collective::AllGather | Collective::ReduceScatter);
            for &a in Algorithm::ALL {
                let g = *self.input.graphs.for_algo(a);
                let nch = g.n_channels;
                // NCCL compares typeIntra with LINK_NVL (= PATH_NVL): NVB paths use the PCI latencies.
                let intra_hw = if g.type_intra == PathType::NVL { Hw::Nvlink } else { Hw::Pci };
                let hw = if n_nodes == 1 { intra_hw } else { Hw::Net };
                for &p in Protocol::ALL {
                    let skipped = self.skipped(coll, a, p);
                    let off = &mut self.off[ci][a.id()][p.id()];
                    if let Some(why) = skipped {
                        off.push(why);
                        continue;
                    }
                    let collnet = matches!(a, Algorithm::CollNetDirect | Algorithm::CollNetChain);
                    let mut bw: f32 = if n_nodes <= 2 || collnet { g.bw_intra as f32 } else { g.bw_inter as f32 };
                    if matches!(a, Algorithm::Nvls | Algorithm::NvlsTree) {
                        if nch < 2 {
                            off.push(Off::NvlsChannels(nch));
                            continue;
                        }
                        let mut intra_bw =
                            g.bw_intra as f32 * c.nvls_efficiency[cc] as f32 * (nch - 1) as f32 / nch as f32;
                        if coll == Collective::AllReduce {
                            intra_bw *= 2.0;
                        } else {
                            intra_bw *= (ppn - 1.0) / ppn;
                        }
                        let inter_bw =
                            g.bw_inter as f32 * if n_nodes <= 2 && a == Algorithm::NvlsTree { 2.0 } else { 1.0 };
                        let cap = if a == Algorithm::NvlsTree { per_ch_nvls_tree as f32 } else { f32::MAX };
                        bw = intra_bw.min(inter_bw).min(cap);
                    }
                    let mut bus_bw: f32 = nch as f32 * bw;
                    let nchf = nch as f64;
                    match (a, p) {
                        (Algorithm::Ring, Protocol::Ll) => {
                            bus_bw = ll_max_bw.min(bus_bw as f64 * c.ring_ll_efficiency) as f32;
                        }
                        (Algorithm::Ring, Protocol::Ll128) => {
                            bus_bw = (bus_bw as f64 * c.ring_ll128_efficiency).min(nchf * per_ch_ring_ll128) as f32;
                        }
                        _ => {}
                    }
                    if a == Algorithm::Tree {
                        if coll == Collective::AllReduce {
                            bus_bw = (bus_bw as f64 * c.tree_efficiency).min(nchf * per_ch_tree) as f32;
                        }
                        if p == Protocol::Ll {
                            bus_bw = (bus_bw as f64 * 1.0 / c.tree_ll_divisor).min(ll_max_bw) as f32;
                        }
                        if p == Protocol::Ll128 {
                            let eff =
                                if n_nodes == 1 { c.tree_ll128_efficiency_1node } else { c.tree_ll128_efficiency };
                            bus_bw = (bus_bw as f64 * eff).min(nchf * per_ch_tree_ll128) as f32;
                        }
                        if self.input.graphs.tree.pattern == Pattern::Tree {
                            bus_bw = (bus_bw as f64 * c.tree_pattern_penalty) as f32;
                        }
                    }
                    if a == Algorithm::Pat {
                        bus_bw = (bus_bw as f64 * c.pat_efficiency) as f32;
                    }
                    if collnet && p != Protocol::Simple {
                        bus_bw = 0.0;
                        off.push(Off::SimpleOnly);
                    }
                    if a == Algorithm::CollNetDirect && p == Protocol::Simple {
                        if ag_rs {
                            let net = g.bw_inter as f32 * c.collnet_direct_net_efficiency as f32;
                            bus_bw = ppn * (g.bw_intra as f32).min(net);
                        } else if nch == 0 {
                            // NCCL divides by zero here (NaN); the cell is disabled later either way.
                            bus_bw = 0.0;
                        } else {
                            let mut factor = ppn as f64 / (1.0 * nchf);
                            factor -= (factor - 1.0) / 2.0;
                            bus_bw = (bus_bw as f64 / factor) as f32;
                            if self.input.min_comp_cap >= 90 {
                                bus_bw = (bus_bw as f64 * c.collnet_direct_sm90_efficiency) as f32;
                            }
                        }
                    }
                    if matches!(a, Algorithm::Nvls | Algorithm::CollNetDirect)
                        && p == Protocol::Simple
                        && ag_rs
                        && n_nodes > 1
                    {
                        let inp = &self.input;
                        let why = if coll == Collective::AllGather && !inp.collnet_allgather {
                            Some(
                                "AllGather across nodes over NVLS/CollNetDirect needs a CollNet plugin with iallgather",
                            )
                        } else if coll == Collective::ReduceScatter && !inp.collnet_reducescatter {
                            Some("ReduceScatter across nodes over NVLS/CollNetDirect needs a CollNet plugin with ireducescatter")
                        } else if !self.collnet_enable {
                            Some("AllGather/ReduceScatter across nodes over NVLS/CollNetDirect needs CollNet enabled")
                        } else if inp.local_ranks > inp.collnet_heads {
                            Some(
                                "AllGather/ReduceScatter over NVLS/CollNetDirect needs one CollNet head per local rank",
                            )
                        } else {
                            None
                        };
                        if let Some(why) = why {
                            bus_bw = 0.0;
                            off.push(Off::CollnetAgRs(why));
                        }
                    }
                    // Bus bandwidth to algorithm bandwidth.
                    if !(a != Algorithm::Ring && ag_rs) {
                        let ratio: f32 = if matches!(a, Algorithm::Ring | Algorithm::Nvls | Algorithm::NvlsTree) {
                            (n_ranks as f64 / nsteps as f64) as f32
                        } else {
                            0.5
                        };
                        bus_bw *= ratio;
                    }
                    if bus_bw == 0.0 && off.is_empty() {
                        off.push(Off::NoGraph(g.pattern));
                    }
                    self.bandwidths[ci][a.id()][p.id()] = bus_bw;

                    let mut lat: f32 = c.base_latency(a, p) as f32;
                    let mut intra_lat = self.hw_lat(intra_hw, a, p);
                    let mut inter_lat =
                        if ppn == 1.0 { self.hw_lat(Hw::Net, Algorithm::Tree, p) } else { self.hw_lat(Hw::Net, a, p) };
                    inter_lat += g.latency_inter as f32;
                    if p == Protocol::Simple {
                        inter_lat += g.latency_inter as f32;
                    }
                    let local = (n_ranks / n_nodes) as f32 - 1.0;
                    let log_nodes = log2i(n_nodes as u64) as f32;
                    match a {
                        Algorithm::Ring => {
                            let mut step = self.hw_lat(hw, a, p);
                            if matches!(coll, Collective::Reduce | Collective::Broadcast) {
                                if g.same_channels {
                                    lat += step;
                                } else {
                                    if p == Protocol::Simple {
                                        step = self.hw_lat(hw, Algorithm::Tree, p);
                                    }
                                    lat += nsteps as f32 * step;
                                }
                            } else {
                                let mut overhead = 0.0f32;
                                if n_nodes > 1 {
                                    overhead = net_overhead as f32;
                                    if p == Protocol::Simple {
                                        overhead *= c.net_overhead_simple_factor as f32;
                                    }
                                }
                                intra_lat = intra_lat.max(overhead);
                                let inter_steps = match (n_nodes, coll) {
                                    (1, _) => 0,
                                    (_, Collective::AllReduce) => 2 * (n_nodes - 1),
                                    _ => n_nodes - 1,
                                };
                                lat += (nsteps - inter_steps) as f32 * intra_lat + inter_steps as f32 * inter_lat;
                            }
                        }
                        Algorithm::Tree => {
                            if coll == Collective::AllReduce {
                                lat += 2.0 * (local * intra_lat + log_nodes * inter_lat);
                            }
                        }
                        Algorithm::CollNetDirect => {
                            let arity = c.collnet_direct_arity_latency as f32;
                            lat += 2.0 * (local.min(1.0) * intra_lat + local * arity) + inter_lat;
                        }
                        Algorithm::CollNetChain => lat += 2.0 * local * intra_lat + inter_lat,
                        Algorithm::Nvls => {
                            lat = intra_lat;
                            if n_nodes > 1 {
                                lat += inter_lat;
                            }
                        }
                        Algorithm::NvlsTree => lat += intra_lat + 2.0 * log_nodes * inter_lat,
                        Algorithm::Pat => {
                            if ag_rs {
                                lat += log_nodes * (inter_lat / c.pat_net_latency_divisor as f32)
                                    + n_ranks as f32 * c.pat_rank_latency as f32;
                            }
                        }
                    }
                    self.latencies[ci][a.id()][p.id()] = lat;
                }
            }
        }
    }

    /// The LL128 default rules; `None` when LL128 may run.
    fn ll128_off(&self, coll: Collective, a: Algorithm) -> Option<String> {
        let inp = &self.input;
        let g = inp.graphs.for_algo(a);
        let (min_cc, max_cc) = (inp.min_comp_cap, inp.max_comp_cap);
        let inter_limit = if self.params.ll128_c2c && min_cc >= 90 { PathType::PXN } else { PathType::PXB };
        if g.type_inter > inter_limit {
            return Some(format!("inter-node path type {} is beyond {inter_limit}", g.type_inter));
        }
        if g.type_intra > PathType::NVB {
            return Some(format!("intra-node path type {} is beyond NVB (needs NVLink between GPUs)", g.type_intra));
        }
        let mixed_ok = match self.constants.ll128_mixed_comp_cap {
            Ll128MixedCompCap::Never => min_cc == max_cc,
            Ll128MixedCompCap::From(cc) => min_cc == max_cc || min_cc >= cc,
        };
        if !mixed_ok {
            return Some(format!("mixed compute capabilities {min_cc} and {max_cc}"));
        }
        if min_cc < 70 {
            return Some(format!("compute capability {min_cc} is below 70"));
        }
        if min_cc == 90
            && inp.cudart_version == 11080
            && coll == Collective::AllReduce
            && a == Algorithm::Ring
            && inp.n_ranks == 2
        {
            return Some("sm90 with CUDA 11.8 on a 2-rank ring AllReduce".into());
        }
        None
    }

    fn apply_enables(&mut self) -> Result<(), TuningError> {
        self.proto_enable = parse_proto(self.params.proto.as_deref())?;
        self.algo_enable = parse_algo(self.params.algo.as_deref())?;
        if !self.params.ll128_c2c && self.input.min_comp_cap >= 90 {
            self.notes.push(
                "Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no C2C link will be used by LL128."
                    .into(),
            );
        }
        let inp = &self.input;
        for (ci, &coll) in Collective::TUNED.iter().enumerate() {
            for &a in Algorithm::ALL {
                let hw_off = if inp.n_nodes == 1 && a == Algorithm::NvlsTree {
                    Some(Off::NvlsTreeOneNode)
                } else if !self.collnet_enable
                    && (matches!(a, Algorithm::CollNetDirect | Algorithm::CollNetChain)
                        || (a == Algorithm::Nvls && inp.n_nodes > 1))
                {
                    Some(if a == Algorithm::Nvls { Off::NvlsNeedsCollnet } else { Off::CollnetDisabled })
                } else if inp.nvs_count == 0 && a == Algorithm::CollNetDirect {
                    Some(Off::NoNvSwitch)
                } else {
                    None
                };
                for &p in Protocol::ALL {
                    let mut reasons = Vec::new();
                    let mut p_enable = self.proto_enable[ci][p.id()];
                    if p_enable == 2 && p == Protocol::Ll128 {
                        p_enable = 1;
                        if let Some(why) = self.ll128_off(coll, a) {
                            p_enable = 0;
                            reasons.push(Off::Ll128(why));
                        }
                    }
                    if p_enable == 0 && reasons.is_empty() {
                        reasons
                            .push(Off::Env { var: "NCCL_PROTO", value: self.params.proto.clone().unwrap_or_default() });
                    }
                    if self.algo_enable[ci][a.id()] == 0 {
                        reasons
                            .push(Off::Env { var: "NCCL_ALGO", value: self.params.algo.clone().unwrap_or_default() });
                    }
                    if let Some(o) = &hw_off {
                        reasons.push(o.clone());
                    }
                    if !reasons.is_empty() {
                        self.bandwidths[ci][a.id()][p.id()] = 0.0;
                        let cell = &mut self.off[ci][a.id()][p.id()];
                        // Cells that never exist for this collective/protocol keep only that reason.
                        if cell.iter().any(|o| matches!(o, Off::NotServed | Off::SimpleOnly)) {
                            continue;
                        }
                        for r in reasons {
                            if !cell.contains(&r) {
                                cell.push(r);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn set_thread_thresholds(&mut self) -> Result<(), TuningError> {
        let t = self.constants.threads;
        for a in 0..7 {
            self.thread_thresholds[a] = [t.ll_thread_threshold, t.ll128_thread_threshold, t.simple_thread_threshold];
        }
        let ring = Algorithm::Ring.id();
        self.thread_thresholds[ring][Protocol::Ll.id()] *= self.input.n_ranks as i64;
        for a in [Algorithm::CollNetDirect, Algorithm::CollNetChain] {
            self.thread_thresholds[a.id()][Protocol::Simple.id()] = t.collnet_thread_threshold;
        }
        let user = self.params.parsed_thread_thresholds()?;
        for (a, row) in [Algorithm::Tree, Algorithm::Ring].into_iter().zip(user) {
            for (p, v) in row.into_iter().enumerate() {
                if v >= 0 {
                    self.thread_thresholds[a.id()][p] = v;
                }
            }
        }
        Ok(())
    }

    pub fn latency(&self, coll: Collective, a: Algorithm, p: Protocol) -> f32 {
        Collective::TUNED.iter().position(|c| *c == coll).map_or(0.0, |ci| self.latencies[ci][a.id()][p.id()])
    }

    pub fn bandwidth(&self, coll: Collective, a: Algorithm, p: Protocol) -> f32 {
        Collective::TUNED.iter().position(|c| *c == coll).map_or(0.0, |ci| self.bandwidths[ci][a.id()][p.id()])
    }

    /// Why a cell is off (empty when it is on).
    pub fn off_reasons(&self, coll: Collective, a: Algorithm, p: Protocol) -> &[Off] {
        match Collective::TUNED.iter().position(|c| *c == coll) {
            Some(ci) => &self.off[ci][a.id()][p.id()],
            None => &[],
        }
    }

    /// The enabled cells (bandwidth > 0) in the shared model's layout.
    pub fn table(&self) -> TuningTable {
        let mut t = TuningTable::new();
        for (ci, &coll) in Collective::TUNED.iter().enumerate() {
            for &a in Algorithm::ALL {
                for &p in Protocol::ALL {
                    let bw = self.bandwidths[ci][a.id()][p.id()];
                    if bw > 0.0 {
                        let lat = self.latencies[ci][a.id()][p.id()];
                        t.entry(coll)
                            .or_default()
                            .entry(a)
                            .or_default()
                            .insert(p, TuningCell { lat_us: tidy(lat as f64), bw_gbps: tidy(bw as f64) });
                    }
                }
            }
        }
        t
    }
}

/// f32 values widened for JSON without float noise (137.14285 not 137.14285278320312).
pub(crate) fn tidy(v: f64) -> f64 {
    (v * 1e5).round() / 1e5
}
