//! The latency and bandwidth formulas of NCCL 2.28.9 `ncclTopoTuneModel` (`src/graph/tuning.cc`): which cells
//! exist for which collective, bus bandwidth per algorithm and protocol with its caps and efficiencies, the
//! conversion to algorithm bandwidth, and the base + per-hop latencies. The latency and bandwidth rules that
//! changed since 2.12 are read from the constants' `rules`, not copied per release.

use super::constants::{log2i, Hw, InterLatency, NvlsBw, RingLl};
use super::input::{CpuArch, CpuVendor};
use super::model::{Off, TuningModel};
use collscope_model::{Algorithm, Collective, PathType, Pattern, Protocol};

impl TuningModel {
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
        if let Some(&(_, since)) = self.constants.absent.iter().find(|(absent, _)| *absent == a) {
            return Some(Off::NotInRelease { release: self.constants.version, since });
        }
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

    pub(super) fn compute_table(&mut self) {
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
            for &a in Algorithm::NCCL {
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
                        let (intra, inter) = (g.bw_intra as f32, g.bw_inter as f32);
                        // NVLSTree's share of bwInter beyond 2 nodes (v2.19.1-1 to v2.27.7-1).
                        let tree_inter = if n_nodes <= 2 { inter } else { inter / 2.0 };
                        match c.rules.nvls_bw {
                            NvlsBw::Plain { .. } => {}
                            NvlsBw::Min if a == Algorithm::Nvls => bw = intra.min(inter),
                            NvlsBw::MinAgRs if a == Algorithm::Nvls && coll == Collective::AllReduce => {
                                bw = intra.min(inter)
                            }
                            // v2.27.7-1: "allgather and reducescatter".
                            NvlsBw::MinAgRs if a == Algorithm::Nvls => {
                                bw = (intra * (ppn - 1.0) / ppn).min(inter * 0.9)
                            }
                            NvlsBw::Min | NvlsBw::MinAgRs => bw = intra.min(tree_inter),
                            NvlsBw::Efficiency => {
                                if nch < 2 {
                                    off.push(Off::NvlsChannels(nch));
                                    continue;
                                }
                                let mut intra_bw = intra * c.nvls_efficiency[cc] as f32 * (nch - 1) as f32 / nch as f32;
                                if coll == Collective::AllReduce {
                                    intra_bw *= 2.0;
                                } else {
                                    intra_bw *= (ppn - 1.0) / ppn;
                                }
                                let inter_bw = inter * if n_nodes <= 2 && a == Algorithm::NvlsTree { 2.0 } else { 1.0 };
                                let cap = if a == Algorithm::NvlsTree { per_ch_nvls_tree as f32 } else { f32::MAX };
                                bw = intra_bw.min(inter_bw).min(cap);
                            }
                        }
                    }
                    let mut bus_bw: f32 = nch as f32 * bw;
                    let nchf = nch as f64;
                    match (a, p) {
                        (Algorithm::Ring, Protocol::Ll) => {
                            let share = match c.rules.ring_ll {
                                RingLl::Half => c.ring_ll_efficiency,
                                // v2.20.5-1: a quarter across nodes, for AllReduce and Reduce; else a third.
                                RingLl::QuarterOrThird
                                    if n_nodes > 1 || matches!(coll, Collective::AllReduce | Collective::Reduce) =>
                                {
                                    1.0 / 4.0
                                }
                                RingLl::QuarterOrThird => 1.0 / 3.0,
                            };
                            bus_bw = ll_max_bw.min(bus_bw as f64 * share) as f32;
                        }
                        (Algorithm::Ring, Protocol::Ll128) => {
                            let eff = match c.rules.ring_ll128_low_ppn_efficiency {
                                Some(low) if ppn < 2.0 => low,
                                _ => c.ring_ll128_efficiency,
                            };
                            bus_bw = (bus_bw as f64 * eff).min(nchf * per_ch_ring_ll128) as f32;
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
                    // Bus bandwidth to algorithm bandwidth. Up to 2.22 only CollNetDirect's AllGather/ReduceScatter
                    // kept theirs (v2.22.3-1); from 2.23.4 every algorithm but Ring's does.
                    let keep = if c.rules.ag_rs_keep_bus_bw {
                        a != Algorithm::Ring && ag_rs
                    } else {
                        a == Algorithm::CollNetDirect && ag_rs
                    };
                    if !keep {
                        let ring_ratio = (n_ranks as f64 / nsteps as f64) as f32;
                        let ratio: f32 = match (a, c.rules.nvls_bw) {
                            (Algorithm::Ring, _) => ring_ratio,
                            (Algorithm::Nvls | Algorithm::NvlsTree, NvlsBw::Efficiency) => ring_ratio,
                            (Algorithm::Nvls | Algorithm::NvlsTree, NvlsBw::Min | NvlsBw::MinAgRs) => 5.0 / 6.0,
                            (Algorithm::Nvls, NvlsBw::Plain { nvls_ratio }) => nvls_ratio as f32,
                            // v2.18.6-1; NVLSTree is off on one node, where this divides by zero.
                            (Algorithm::NvlsTree, NvlsBw::Plain { .. }) if n_nodes > 1 => {
                                (0.70 * n_nodes as f64 / (2.0 * (n_nodes as f64 - 1.0))) as f32
                            }
                            (Algorithm::NvlsTree, NvlsBw::Plain { .. }) => 1.0,
                            _ => 0.5,
                        };
                        bus_bw *= ratio;
                    }
                    if bus_bw == 0.0 && off.is_empty() {
                        off.push(Off::NoGraph(g.pattern));
                    }
                    self.bandwidths[ci][a.id()][p.id()] = bus_bw;

                    let mut lat: f32 = c.base_latency(a, p) as f32;
                    let rules = c.rules;
                    let mut intra_lat = self.hw_lat(intra_hw, a, p);
                    if let Some(factor) = rules.ll_multi_node_intra_factor {
                        if n_nodes > 1 && p == Protocol::Ll {
                            intra_lat *= factor as f32;
                        }
                    }
                    let net_algo = if rules.ppn1_tree_net_latency && ppn == 1.0 { Algorithm::Tree } else { a };
                    let mut inter_lat = self.hw_lat(Hw::Net, net_algo, p);
                    let device_lat = g.latency_inter as f32;
                    match rules.inter_latency {
                        InterLatency::Replaces if device_lat != 0.0 => inter_lat = device_lat,
                        InterLatency::Replaces => {}
                        InterLatency::AddedWithFlush => {
                            inter_lat += device_lat;
                            if p == Protocol::Simple {
                                inter_lat += device_lat;
                            }
                        }
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
                                if n_nodes > 1 && rules.ring_net_overhead {
                                    overhead = net_overhead as f32;
                                    if p == Protocol::Simple {
                                        overhead *= c.net_overhead_simple_factor as f32;
                                    }
                                }
                                intra_lat = intra_lat.max(overhead);
                                let inter_steps = match (n_nodes, coll) {
                                    (1, _) => 0,
                                    (_, Collective::AllReduce) if rules.ring_allreduce_inter_steps_2n => 2 * n_nodes,
                                    (_, Collective::AllReduce) => 2 * (n_nodes - 1),
                                    _ => n_nodes - 1,
                                };
                                lat += (nsteps as i64 - inter_steps as i64) as f32 * intra_lat
                                    + inter_steps as f32 * inter_lat;
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
                        // Not an NCCL algorithm: the loop walks `Algorithm::NCCL` only.
                        Algorithm::OneShot => {}
                    }
                    self.latencies[ci][a.id()][p.id()] = lat;
                }
            }
        }
    }
}
