//! `ncclTopoCompute` (NCCL 2.28.9 `src/graph/search.cc`): picks a starting speed, runs the search, relaxes
//! the constraints one at a time in NCCL's order until a graph is found, then duplicates channels and tries
//! one speed step up. Also `ncclTopoPrintGraph`'s lines.

use super::search::{SearchGraph, Searcher};
use super::system::System;
use super::xml;
use super::{Found, GraphError, InfoLine, MAX_CHANNELS};
use collscope_debug::env::Env;
use collscope_model::{Graph, GraphChannel, PathType, Pattern, Topology};

/// `NCCL_SEARCH_GLOBAL_TIMEOUT`, `NCCL_SEARCH_TIMEOUT`, `_TREE`, `_SAMECHANNELS`: search step budgets.
const GLOBAL_TIMEOUT: i64 = 1 << 19;
const TIMEOUT: i64 = 1 << 14;
const TIMEOUT_TREE: i64 = 1 << 14;
const TIMEOUT_SAMECHANNELS: i64 = 1 << 8;
/// `NCCL_MAX_NVLS_ARITY`, `NCCL_MAX_DIRECT_ARITY`.
const MAX_NVLS_ARITY: usize = 32;
const MAX_DIRECT_ARITY: usize = 7;

/// Which of init.cc's graphs to compute, and its channel bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// NCCL's graph id: 0 ring, 1 tree, 2 collnet chain, 3 NVLS, 4 collnet direct.
    pub id: u32,
    pub pattern: Pattern,
    pub min_channels: usize,
    pub max_channels: usize,
    pub coll_net: bool,
}

impl Request {
    pub fn ring() -> Self {
        Request { id: 0, pattern: Pattern::Ring, min_channels: 1, max_channels: MAX_CHANNELS / 2, coll_net: false }
    }
    /// The tree graph is pinned to the ring's channel count.
    pub fn tree(ring_channels: usize) -> Self {
        Request {
            id: 1,
            pattern: Pattern::BalancedTree,
            min_channels: ring_channels,
            max_channels: ring_channels,
            coll_net: false,
        }
    }
    /// The CollNet chain graph: a plain tree over CollNet-capable NICs, pinned to the ring's channel count.
    pub fn collnet_chain(ring_channels: usize) -> Self {
        Request {
            id: 2,
            pattern: Pattern::Tree,
            min_channels: ring_channels,
            max_channels: ring_channels,
            coll_net: true,
        }
    }
    pub fn nvls() -> Self {
        Request { id: 3, pattern: Pattern::Nvls, min_channels: 1, max_channels: MAX_CHANNELS, coll_net: false }
    }
    pub fn collnet_direct() -> Self {
        Request { id: 4, pattern: Pattern::CollnetDirect, min_channels: 1, max_channels: MAX_CHANNELS, coll_net: true }
    }
}

fn path_type_range(sys: &System, to_nets: bool) -> (PathType, PathType) {
    let (mut min, mut max) = (PathType::SYS, PathType::LOC);
    for (i, &g) in sys.gpus.iter().enumerate() {
        let targets = if to_nets { &sys.nets } else { &sys.gpus };
        for (j, &t) in targets.iter().enumerate() {
            if !to_nets && i == j {
                continue;
            }
            if let Some(p) = sys.paths.get(&(g, t)) {
                min = min.min(p.kind);
                max = max.max(p.kind);
            }
        }
    }
    (min, max)
}

/// `ncclTopoSplitNvLink`: exactly two NVLink domains of more than one GPU.
fn split_nvlink(sys: &System) -> bool {
    let n = sys.ngpus();
    let mut domain: Vec<usize> = (0..n).collect();
    for g in 0..n {
        for p in g + 1..n {
            if sys.paths.get(&(sys.gpus[g], sys.gpus[p])).is_some_and(|x| x.kind == PathType::NVL) {
                domain[p] = domain[g];
            }
        }
    }
    let mut count = vec![0; n];
    for d in domain {
        count[d] += 1;
    }
    count.iter().filter(|&&c| c > 1).count() == 2
}

/// `ncclTopoDupChannels`: fast graphs get every channel twice at half the bandwidth.
fn dup_channels(g: &mut SearchGraph, cc_min: u32, ngpus: usize) {
    if g.n_channels == 0 || g.pattern == Pattern::Nvls || g.bw_intra < 25.0 {
        return;
    }
    if cc_min > 80 && g.bw_intra < 50.0 && g.n_channels > 4 {
        return;
    }
    let dup = (g.n_channels * 2).min(g.max_channels);
    let n = g.n_channels;
    for c in n..dup {
        let (src, dst) = ((c - n) * ngpus, c * ngpus);
        for i in 0..ngpus {
            g.intra[dst + i] = g.intra[src + i];
        }
        g.inter[c * 2] = g.inter[(c - n) * 2];
        g.inter[c * 2 + 1] = g.inter[(c - n) * 2 + 1];
    }
    let factor = dup.div_ceil(n) as f64;
    g.bw_intra /= factor;
    g.bw_inter /= factor;
    g.n_channels = dup;
}

/// Runs `ncclTopoCompute` for one graph of one node of an `nnodes`-node communicator. `NCCL_GRAPH_FILE`, when
/// set, supplies the graph instead if it has one for this id.
pub fn compute(topo: &Topology, req: &Request, nnodes: u32, env: &Env) -> Result<Found, GraphError> {
    let sys = System::new(topo, nnodes, &crate::topo::TopoEnv::from_env(env)?)?;
    compute_on(sys, req, env)
}

pub(crate) fn compute_on(mut sys: System, req: &Request, env: &Env) -> Result<Found, GraphError> {
    let ngpus = sys.ngpus();
    let mut lines = Vec::new();
    let mut graph = SearchGraph::new(req.id, req.pattern, ngpus);
    graph.min_channels = req.min_channels;
    // The ring searches up to MAXCHANNELS/2 (init.cc), and MAXCHANNELS is per release (32 before 2.25.1).
    let release_max = sys.profile.max_channels as usize;
    let release_max = if req.pattern == Pattern::Ring { release_max / 2 } else { release_max };
    graph.max_channels = req.max_channels.min(release_max);
    graph.coll_net = req.coll_net;
    let cross_nic_param = env.int("NCCL_CROSS_NIC", 2)?;
    let cross_nic =
        if sys.nets.len() > 1 && matches!(req.pattern, Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree) {
            cross_nic_param
        } else {
            0
        };
    graph.cross_nic = u32::from(cross_nic == 1);
    let (mut min_intra, mut max_intra) = (PathType::LOC, PathType::SYS);
    let (mut min_inter, mut max_inter) = (PathType::PIX, PathType::SYS);
    if ngpus > 1 {
        (min_intra, max_intra) = path_type_range(&sys, false);
    }
    if sys.inter {
        (min_inter, max_inter) = path_type_range(&sys, true);
        max_intra = max_inter;
    }
    graph.type_intra = min_intra;
    graph.type_inter = min_inter;
    let try_same = req.pattern != Pattern::Nvls;
    graph.same_channels = try_same;

    if let Some(file) = env.str("NCCL_GRAPH_FILE") {
        let loaded = xml::load_graph(file, &sys, &mut graph, cross_nic_param)?;
        lines.push(InfoLine::graph(format!("Search {} : {loaded} channels loaded from XML graph", req.id)));
        if graph.n_channels > 0 {
            return Ok(finish(&sys, graph, lines));
        }
    }

    let cc_min = sys.min_comp_cap();
    if req.pattern == Pattern::Nvls && (sys.nvs.is_empty() || cc_min < 90) {
        return Ok(finish(&sys, graph, lines));
    }
    if req.pattern == Pattern::Nvls {
        graph.max_channels = MAX_NVLS_ARITY.min(ngpus);
    }
    if req.pattern == Pattern::CollnetDirect {
        graph.max_channels = (MAX_DIRECT_ARITY + 1).min(ngpus);
    }
    if ngpus == 1 && graph.pattern != Pattern::Ring {
        graph.pattern = Pattern::Tree;
    }
    if !sys.inter && graph.pattern == Pattern::Nvls {
        // Inside one node NVLS pulls evenly from every GPU.
        graph.min_channels = graph.max_channels;
    }
    if graph.pattern == Pattern::Ring && split_nvlink(&sys) && graph.max_channels >= 2 && graph.min_channels == 1 {
        // Two NVLink islands over a slow link: trees need 2 channels and rings must match them.
        graph.min_channels = 2;
    }

    let mut tmp = graph.clone();
    let speeds = sys.profile.speed_array(cc_min, sys.inter);
    let mut pass = 1;
    let mut speed_index = 0;
    let max_bw = sys.max_bw;
    let mut total_bw = sys.total_bw;
    if ngpus > 1 && graph.pattern != Pattern::Ring {
        total_bw *= ngpus as f64 / (ngpus as f64 - 1.0);
    }
    while (speeds[speed_index] > max_bw || speeds[speed_index] * graph.min_channels as f64 > total_bw)
        && speed_index < speeds.len() - 1
    {
        speed_index += 1;
    }
    tmp.bw_intra = speeds[speed_index];
    tmp.bw_inter = speeds[speed_index];
    let mut global_timeout = GLOBAL_TIMEOUT;
    let cpu_amd = sys.cpu_amd;

    loop {
        // search:
        let budget = if tmp.same_channels {
            TIMEOUT_SAMECHANNELS
        } else if tmp.pattern == Pattern::Tree {
            TIMEOUT_TREE
        } else {
            TIMEOUT
        };
        tmp.n_channels = 0;
        global_timeout -= budget;
        let mut searcher = Searcher { sys: &mut sys, time: budget };
        searcher.rec(&mut tmp, &mut graph)?;
        let mut time = searcher.time;

        let solved = time == -1 || graph.n_channels as f64 * graph.bw_inter >= sys.total_bw;
        if !solved && pass == 1 {
            if tmp.same_channels && !(cpu_amd && tmp.type_intra == PathType::SYS) {
                tmp.same_channels = false;
                continue;
            }
            tmp.same_channels = try_same;
            if time != -1 {
                global_timeout += time;
            } else {
                global_timeout = GLOBAL_TIMEOUT;
            }
            let out_of_time = global_timeout < 0 && graph.n_channels > 0;
            if !out_of_time {
                if let Some(()) = relax(
                    &mut tmp,
                    &graph,
                    &sys,
                    cc_min,
                    (min_intra, max_intra),
                    (min_inter, max_inter),
                    cross_nic,
                    speeds,
                    &mut speed_index,
                    max_bw,
                ) {
                    continue;
                }
            }
        }
        // done:
        if pass == 1 {
            time = -1;
            dup_channels(&mut graph, cc_min, ngpus);
            tmp = graph.clone();
            speed_index = 0;
            while speeds[speed_index] > graph.bw_inter && speed_index < speeds.len() - 1 {
                speed_index += 1;
            }
            tmp.bw_intra = speeds[speed_index];
            tmp.bw_inter = speeds[speed_index];
            tmp.min_channels = graph.n_channels;
            pass = 2;
        }
        if time != 0 && speed_index > 0 {
            if graph.pattern == Pattern::Ring {
                speed_index -= 1;
                tmp.bw_intra = speeds[speed_index];
                tmp.bw_inter = speeds[speed_index];
                continue;
            } else if graph.pattern == Pattern::Nvls
                && tmp.bw_inter == graph.bw_inter
                && tmp.bw_inter < tmp.bw_intra * 2.0
            {
                tmp.min_channels = graph.n_channels;
                tmp.max_channels = graph.n_channels;
                speed_index -= 1;
                tmp.bw_inter = speeds[speed_index];
                continue;
            } else if tmp.bw_intra == graph.bw_intra && tmp.bw_intra < tmp.bw_inter * 2.0 {
                speed_index -= 1;
                tmp.bw_intra = speeds[speed_index];
                continue;
            }
        }
        break;
    }

    if graph.n_channels == 0 && !graph.coll_net && graph.pattern != Pattern::Nvls {
        lines.push(InfoLine::graph(format!(
            "Could not find a path for pattern {}, falling back to simple order",
            graph.pattern.id()
        )));
        for i in 0..ngpus {
            graph.intra[i] = sys.ranks[i];
        }
        graph.inter[0] = 0;
        graph.inter[1] = 0;
        graph.bw_intra = 0.1;
        graph.bw_inter = 0.1;
        graph.type_intra = PathType::SYS;
        graph.type_inter = PathType::SYS;
        graph.n_channels = 1;
    }
    Ok(finish(&sys, graph, lines))
}

/// The pass-1 relaxations after sameChannels, in NCCL's order: a simpler tree (sm90+), a worse intra path
/// type, a worse inter path type, crossNic, then one speed step down. `Some(())` means search again.
#[allow(clippy::too_many_arguments)]
fn relax(
    tmp: &mut SearchGraph,
    graph: &SearchGraph,
    sys: &System,
    cc_min: u32,
    (min_intra, max_intra): (PathType, PathType),
    (min_inter, max_inter): (PathType, PathType),
    cross_nic: i64,
    speeds: &[f64],
    speed_index: &mut usize,
    max_bw: f64,
) -> Option<()> {
    if cc_min >= 90 && tmp.pattern == Pattern::BalancedTree {
        tmp.pattern = Pattern::Tree;
        return Some(());
    }
    tmp.pattern = graph.pattern;
    let max_i = if sys.inter { tmp.type_inter } else { max_intra };
    if tmp.type_intra < max_i && (graph.n_channels == 0 || tmp.type_intra < graph.type_intra) {
        if let Some(t) = PathType::from_id(tmp.type_intra.id() + 1) {
            tmp.type_intra = t;
            if t < PathType::DIS {
                return Some(());
            }
        }
    }
    tmp.type_intra = min_intra;
    if sys.inter
        && tmp.type_inter < max_inter
        && (graph.n_channels == 0 || tmp.type_inter < graph.type_inter || tmp.type_inter < PathType::PXN)
    {
        if let Some(t) = PathType::from_id(tmp.type_inter.id() + 1) {
            tmp.type_inter = t;
            if t < PathType::DIS {
                return Some(());
            }
        }
    }
    tmp.type_inter = min_inter;
    if cross_nic == 2 && tmp.cross_nic == 0 && matches!(graph.pattern, Pattern::Ring | Pattern::BalancedTree) {
        tmp.cross_nic = 2;
        return Some(());
    }
    tmp.cross_nic = u32::from(cross_nic == 1);
    if *speed_index < speeds.len() - 1 && (graph.n_channels == 0 || speeds[*speed_index + 1] / graph.bw_inter > 0.49) {
        *speed_index += 1;
        tmp.bw_inter = speeds[*speed_index];
        tmp.bw_intra = speeds[*speed_index];
        return Some(());
    }
    *speed_index = 0;
    while speeds[*speed_index] > max_bw && *speed_index < speeds.len() - 1 {
        *speed_index += 1;
    }
    tmp.bw_intra = speeds[*speed_index];
    tmp.bw_inter = speeds[*speed_index];
    None
}

/// Converts the search graph to the model and prints it as `ncclTopoPrintGraph` does.
fn finish(sys: &System, g: SearchGraph, mut lines: Vec<InfoLine>) -> Found {
    let ngpus = sys.ngpus();
    let channels: Vec<GraphChannel> = (0..g.n_channels)
        .map(|c| GraphChannel {
            intra: g.intra[c * ngpus..(c + 1) * ngpus].to_vec(),
            inter: if sys.inter { vec![g.inter[c * 2] as i64, g.inter[c * 2 + 1] as i64] } else { Vec::new() },
        })
        .collect();
    let graph = Graph {
        pattern: g.pattern,
        n_channels: g.n_channels as u32,
        bw_intra: g.bw_intra,
        bw_inter: g.bw_inter,
        type_intra: g.type_intra,
        type_inter: g.type_inter,
        same_channels: g.same_channels,
        cross_nic: g.cross_nic,
        channels,
        host: None,
    };
    lines.extend(print_lines(sys, g.id, &graph).into_iter().map(InfoLine::graph));
    Found { id: g.id, graph, latency_inter: g.latency_inter, lines }
}

/// The first line `ncclTopoPrintGraph` prints for a graph (the contract's formatter).
pub use collscope_model::lines::graph_line as pattern_line;

/// `ncclTopoPrintGraph`.
fn print_lines(sys: &System, id: u32, g: &Graph) -> Vec<String> {
    let mut out = vec![pattern_line(g)];
    let net = |id: i64| format!(" NET/{:x}-{:x}", (id as u64) >> 56, (id as u64) & 0x00ff_ffff_ffff_ffff);
    for (c, ch) in g.channels.iter().enumerate() {
        let mut line = format!("{c:2} :");
        if sys.inter {
            line.push_str(&net(ch.inter[0]));
        }
        for &rank in &ch.intra {
            if let Some(i) = sys.ranks.iter().position(|&r| r == rank) {
                let (s, l) = sys.gpu_ids[i];
                line.push_str(&format!(" GPU/{s:x}-{l:x}"));
            }
            if id == 3 {
                break;
            }
        }
        if sys.inter {
            line.push_str(&net(ch.inter[1]));
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::{from_xml, preset};

    fn pattern_line(topo: &Topology, req: &Request, nnodes: u32) -> String {
        let f = compute(topo, req, nnodes, &Env::default()).unwrap();
        f.lines.iter().find(|l| l.text.starts_with("Pattern")).unwrap().text.clone()
    }

    #[test]
    fn dgx_a100_one_node_ring_is_12_channels_at_20() {
        // 12 NVLinks x 20 GB/s into the NVSwitches: 6 channels at 40 fill the 240 GB/s, then pass 2 duplicates
        // them (bwIntra >= 25) into 12 at 20, and 30 GB/s cannot hold 12.
        let topo = preset("dgx-a100");
        let f = compute(&topo, &Request::ring(), 1, &Env::default()).unwrap();
        assert_eq!(
            f.lines[0].text,
            "Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"
        );
        assert_eq!(f.graph.channels[0].intra, (0..8).collect::<Vec<i32>>(), "PCI order first");
        assert_eq!(f.graph.channels[6], f.graph.channels[0], "channels 6..11 duplicate 0..5");
        assert_eq!(
            f.lines[1].text,
            " 0 : GPU/0-7000 GPU/0-f000 GPU/0-47000 GPU/0-4e000 GPU/0-87000 GPU/0-90000 GPU/0-b7000 GPU/0-bd000"
        );
        assert_eq!(
            pattern_line(&topo, &Request::tree(12), 1),
            "Pattern 1, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"
        );
        // No NVLS before sm_90, no CollNet without a CollNet network.
        assert_eq!(compute(&topo, &Request::nvls(), 1, &Env::default()).unwrap().graph.n_channels, 0);
    }

    #[test]
    fn dgx_a100_two_nodes_use_each_nic_once() {
        // Reference text 000 shows 12 channels at 20/20 with type NVL/PIX for two DGX A100s. On this preset the
        // GPU reaches its NIC through two PCI switches (PXB) at 24 GB/s and speedArrayInter has 24, so NCCL's
        // search (search.cc) finds one channel per NIC: 8 at 24. The source wins over the text.
        let topo = preset("dgx-a100");
        let f = compute(&topo, &Request::ring(), 2, &Env::default()).unwrap();
        assert_eq!(
            f.lines[0].text,
            "Pattern 4, crossNic 0, nChannels 8, bw 24.000000/24.000000, type NVL/PXB, sameChannels 0"
        );
        let nets: std::collections::BTreeSet<i64> = f.graph.channels.iter().map(|c| c.inter[0]).collect();
        assert_eq!(nets.len(), 8);
        assert!(f.graph.channels.iter().all(|c| c.inter[0] == c.inter[1]), "crossNic 0: leave by the entry NIC");
        // NVSwitch: after the NIC's own GPU the ring tries the previous GPU first (search.cc's neighbour rule).
        assert_eq!(f.graph.channels[0].intra, vec![0, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(
            f.lines[1].text,
            " 0 : NET/0-0 GPU/0-7000 GPU/0-bd000 GPU/0-b7000 GPU/0-90000 GPU/0-87000 GPU/0-4e000 GPU/0-47000 GPU/0-f000 NET/0-0"
        );
        assert_eq!(
            pattern_line(&topo, &Request::tree(8), 2),
            "Pattern 1, crossNic 0, nChannels 8, bw 30.000000/24.000000, type NVL/PXB, sameChannels 0"
        );
    }

    #[test]
    fn dgx_h100_rings_trees_and_nvls() {
        let topo = preset("dgx-h100");
        // 18 NVLinks x 20.6: 6 channels at 60, duplicated (60 >= 50 on sm_90) into 12 at 30.
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 1),
            "Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1"
        );
        let nvls = compute(&topo, &Request::nvls(), 1, &Env::default()).unwrap();
        assert_eq!(nvls.graph.n_channels, 8, "one NVLS head per GPU inside a node");
        assert_eq!(nvls.lines[1].text, " 0 : GPU/0-1b000", "NVLS lines show the head only");
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 2),
            "Pattern 4, crossNic 2, nChannels 8, bw 48.000000/48.000000, type NVL/PIX, sameChannels 0"
        );
        // sm_90 relaxes the balanced tree to a plain tree (pattern 3).
        assert_eq!(
            pattern_line(&topo, &Request::tree(8), 2),
            "Pattern 3, crossNic 0, nChannels 8, bw 48.000000/48.000000, type NVL/PIX, sameChannels 0"
        );
        let nvls = compute(&topo, &Request::nvls(), 2, &Env::default()).unwrap();
        assert_eq!(nvls.graph.n_channels, 8);
        assert_eq!(nvls.lines[1].text, " 0 : NET/0-0 GPU/0-1b000 NET/0-0");
    }

    #[test]
    fn pcie_and_bridge_presets() {
        let topo = preset("hgx-pcie");
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 1),
            "Pattern 4, crossNic 0, nChannels 1, bw 10.000000/10.000000, type SYS/PIX, sameChannels 1"
        );
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 2),
            "Pattern 4, crossNic 0, nChannels 1, bw 10.000000/10.000000, type SYS/SYS, sameChannels 1"
        );
        let topo = preset("nvlink-bridge-4");
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 1),
            "Pattern 4, crossNic 0, nChannels 4, bw 12.000000/12.000000, type PHB/PIX, sameChannels 0"
        );
        assert_eq!(
            pattern_line(&topo, &Request::ring(), 2),
            "Pattern 4, crossNic 0, nChannels 2, bw 6.000000/6.000000, type PHB/PHB, sameChannels 1"
        );
        let e = compute(&preset("cpu-host"), &Request::ring(), 1, &Env::default()).unwrap_err();
        assert!(e.to_string().contains("no GPU"), "{e}");
    }

    #[test]
    fn no_path_falls_back_to_simple_order() {
        // Two GPUs on Gen1 x1 links: far below the slowest intra-node speed (3 GB/s).
        let topo = from_xml(
            r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x030000" link_speed="2.5 GT/s PCIe" link_width="1"><gpu dev="0" sm="80" rank="0" gdr="1"/></pci>
    <pci busid="0000:02:00.0" class="0x030000" link_speed="2.5 GT/s PCIe" link_width="1"><gpu dev="1" sm="80" rank="1" gdr="1"/></pci>
  </cpu>
</system>"#,
        );
        let f = compute(&topo, &Request::ring(), 1, &Env::default()).unwrap();
        assert_eq!(f.lines[0].text, "Could not find a path for pattern 4, falling back to simple order");
        assert_eq!(
            f.lines[1].text,
            "Pattern 4, crossNic 0, nChannels 1, bw 0.100000/0.100000, type SYS/SYS, sameChannels 1"
        );
        assert_eq!(f.graph.channels[0].intra, vec![0, 1]);
    }

    #[test]
    fn one_gpu_trees_become_plain_trees() {
        let topo = from_xml(
            r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">
    <pci busid="0000:01:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="80" rank="0" gdr="1"/></pci>
  </cpu>
</system>"#,
        );
        let f = compute(&topo, &Request::tree(1), 1, &Env::default()).unwrap();
        assert_eq!(f.graph.pattern, Pattern::Tree);
        assert_eq!(f.graph.n_channels, 1);
    }
}
