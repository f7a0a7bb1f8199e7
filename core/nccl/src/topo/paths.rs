//! Paths between nodes, as NCCL 2.28.9 computes them (`src/graph/paths.cc`, `ncclTopoComputePaths`):
//! a breadth-first search from every CPU, GPU, NET and NVSwitch node, then the rewrites that route GPU
//! traffic through a CPU where P2P is refused, through the NIC's own GPU (PXN) where that is better, and
//! through the CPU where GPUDirect RDMA is refused. Also the P2P and GDR decisions themselves.

use super::bandwidth::{CpuKind, LOC_BW};
use super::error::TopoError;
use super::settings::{NetDevsPolicy, TopoEnv};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model::{LinkType, Node, NodeType, Path, PathType, Topology};

/// Node types that paths lead to (NCCL keeps paths to these four).
const TARGET_TYPES: [NodeType; 4] = [NodeType::CPU, NodeType::GPU, NodeType::NET, NodeType::NVS];

/// `MAXCHANNELS`: how many channels `ncclTopoGetLocalGpu` tries.
const MAX_CHANNELS: usize = 64;

/// Each node's outgoing links, as indices into `topo.links`, in NCCL's order.
pub fn adjacency(topo: &Topology) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); topo.nodes.len()];
    for (i, l) in topo.links.iter().enumerate() {
        if let Some(list) = adj.get_mut(l.from) {
            list.push(i);
        }
    }
    adj
}

/// The path `from -> to`. `compute` leaves paths sorted by (from, to); other producers may not, hence the
/// fallback scan.
pub fn path(topo: &Topology, from: usize, to: usize) -> Option<&Path> {
    match topo.paths.binary_search_by_key(&(from, to), |p| (p.from, p.to)) {
        Ok(i) => topo.paths.get(i),
        Err(_) => topo.path(from, to),
    }
}

fn path_mut(topo: &mut Topology, from: usize, to: usize) -> Option<&mut Path> {
    let i = topo.paths.binary_search_by_key(&(from, to), |p| (p.from, p.to)).ok()?;
    topo.paths.get_mut(i)
}

fn kind_of(topo: &Topology, from: usize, to: usize) -> PathType {
    path(topo, from, to).map_or(PathType::DIS, |p| p.kind)
}

fn internal(msg: String) -> TopoError {
    TopoError::Inconsistent(msg)
}

/// One breadth-first search from `base`, setting every node's path towards it (`ncclTopoSetPaths`).
fn set_paths(
    topo: &Topology,
    adj: &[Vec<usize>],
    env: &TopoEnv,
    base: usize,
    table: &mut [Path],
) -> Result<(), TopoError> {
    let n = topo.nodes.len();
    // `table[node]` is node's path to `base`.
    debug_assert_eq!(table.len(), n);
    table[base] = Path { from: base, to: base, kind: PathType::LOC, bw: LOC_BW, hops: 0, links: Vec::new() };
    let mut frontier = vec![base];
    while !frontier.is_empty() {
        let mut next: Vec<usize> = Vec::new();
        for &node in &frontier {
            let cur = table[node].clone();
            let node_kind = topo.nodes[node].kind;
            for &li in &adj[node] {
                let link = &topo.links[li];
                let rem = link.to;
                let rem_kind = topo.nodes[rem].kind;
                let bw = cur.bw.min(link.bw);
                // A GPU relays only as the first hop, and only NVLink to NVLink (NVB).
                if node != base
                    && node_kind == NodeType::GPU
                    && (env.nvb_disable
                        || link.kind != LinkType::NVL
                        || rem_kind != NodeType::GPU
                        || cur.links.len() > 1)
                {
                    continue;
                }
                let rp = &table[rem];
                if !((rp.bw == 0.0 || rp.links.len() > cur.links.len()) && rp.bw < bw) {
                    continue;
                }
                let rev = adj[rem]
                    .iter()
                    .copied()
                    .find(|&rl| topo.links[rl].to == node && topo.links[rl].kind == link.kind)
                    .ok_or_else(|| {
                        internal(format!(
                            "no reverse link from {} to {}",
                            topo.nodes[rem].name(),
                            topo.nodes[node].name()
                        ))
                    })?;
                let mut links = Vec::with_capacity(cur.links.len() + 1);
                links.push(rev);
                links.extend_from_slice(&cur.links);
                // Path types start from the link type; NET links only matter as the NIC->GPU direction.
                let mut t = if link.kind == LinkType::NET {
                    PathType::LOC
                } else {
                    PathType::from_id(link.kind.id()).unwrap_or(PathType::DIS)
                };
                if node_kind == NodeType::PCI && rem_kind == NodeType::PCI {
                    t = PathType::PXB;
                }
                if link.kind == LinkType::PCI && (node_kind == NodeType::CPU || rem_kind == NodeType::CPU) {
                    t = PathType::PHB;
                }
                if node_kind == NodeType::GPU && cur.kind == PathType::NVL && t == PathType::NVL && links.len() > 1 {
                    t = PathType::NVB;
                }
                table[rem] = Path { from: rem, to: base, kind: cur.kind.max(t), bw, hops: links.len() as u32, links };
                if !next.contains(&rem) {
                    next.push(rem);
                }
            }
        }
        frontier = next;
    }
    Ok(())
}

/// `mergePathType`: the worse of two types, except PHB after C2C, which is P2C.
fn merge_path_type(a: PathType, b: PathType) -> PathType {
    let (max, min) = (a.max(b), a.min(b));
    if max == PathType::PHB && min == PathType::C2C {
        PathType::P2C
    } else {
        max
    }
}

/// Replaces the path `src -> dst` by `src -> via -> dst` (`addInterStep`).
fn add_inter_step(topo: &mut Topology, via: usize, src: usize, dst: usize) -> Result<(), TopoError> {
    let missing = || internal(format!("no path to route {src} -> {via} -> {dst}"));
    let first = path(topo, src, via).ok_or_else(missing)?.clone();
    let second = path(topo, via, dst).ok_or_else(missing)?.clone();
    let mut kind = merge_path_type(first.kind, second.kind);
    if topo.nodes[via].kind == NodeType::GPU {
        kind = PathType::PXN;
    }
    let p = path_mut(topo, src, dst).ok_or_else(missing)?;
    p.links = first.links.iter().chain(second.links.iter()).copied().collect();
    p.hops = p.links.len() as u32;
    p.kind = kind;
    p.bw = first.bw.min(second.bw);
    Ok(())
}

/// The CPU closest to a node: the one with the fewest hops (`ncclGetLocalCpu`).
pub fn local_cpu(topo: &Topology, node: usize) -> Option<usize> {
    let mut best: Option<(usize, u32)> = None;
    for (c, _) in topo.nodes_of(NodeType::CPU) {
        let hops = path(topo, node, c).map_or(0, |p| p.hops);
        if hops > 0 && best.is_none_or(|(_, h)| hops < h) {
            best = Some((c, hops));
        }
    }
    best.map(|(c, _)| c)
}

/// The nodes of `kind` nearest to `from`: highest bandwidth, then best path type (`ncclTopoGetLocal`).
pub fn nearest(topo: &Topology, from: usize, kind: NodeType) -> Vec<usize> {
    let mut best_bw = 0.0;
    let mut best_type = PathType::DIS;
    let mut out = Vec::new();
    for (i, _) in topo.nodes_of(kind) {
        let Some(p) = path(topo, from, i) else { continue };
        if p.bw > best_bw || (p.bw == best_bw && p.kind < best_type) {
            best_bw = p.bw;
            best_type = p.kind;
            out.clear();
        }
        if p.bw == best_bw && p.kind == best_type {
            out.push(i);
        }
    }
    out
}

fn mirror_bits(val: usize, pow2: usize) -> usize {
    let mut mirror = 0;
    let (mut b, mut mb) = (1, pow2 >> 1);
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

/// The NET a GPU uses on a channel (`ncclTopoGetLocalNet`): one of its nearest NICs, spread by device
/// number and channel.
pub fn local_net(topo: &Topology, env: &TopoEnv, gpu: usize, channel: usize) -> Option<usize> {
    let nets = nearest(topo, gpu, NodeType::NET);
    let count = nets.len();
    if count == 0 {
        return None;
    }
    let per_gpu = match env.netdevs {
        NetDevsPolicy::Auto => {
            let gpus = nearest(topo, nets[0], NodeType::GPU).len().max(1);
            count.div_ceil(gpus)
        }
        NetDevsPolicy::All => count,
        NetDevsPolicy::Max(n) => (n as usize).min(count),
    };
    let dev = topo.nodes[gpu].gpu.as_ref().map_or(0, |g| g.dev.max(0) as usize);
    let mut net = if count.is_power_of_two() { mirror_bits(dev, count) } else { dev };
    net += channel % per_gpu.max(1);
    Some(nets[net % count])
}

/// The GPU a NET belongs to: among the GPUs nearest to it, the first that picks it on some channel
/// (`ncclTopoGetLocalGpu`).
pub fn local_gpu(topo: &Topology, env: &TopoEnv, net: usize) -> Option<usize> {
    let gpus = nearest(topo, net, NodeType::GPU);
    (0..MAX_CHANNELS).find_map(|c| gpus.iter().copied().find(|&g| local_net(topo, env, g, c) == Some(net)))
}

/// The GPU a path leaves through first when it is a PXN path, else the GPU itself
/// (`ncclTopoGetIntermediateRank`, by node index).
pub fn pxn_proxy(topo: &Topology, gpu: usize, net: usize) -> Result<usize, TopoError> {
    let Some(p) = path(topo, gpu, net).filter(|p| p.kind == PathType::PXN) else { return Ok(gpu) };
    p.links
        .iter()
        .map(|&l| topo.links[l].to)
        .find(|&n| topo.nodes[n].kind != NodeType::NVS)
        .filter(|&n| topo.nodes[n].kind == NodeType::GPU)
        .ok_or_else(|| {
            internal(format!("no intermediate GPU between {} and {}", topo.nodes[gpu].name(), topo.nodes[net].name()))
        })
}

/// What `ncclTopoCheckP2p` decides for two GPUs. NVML's answer (`nvmlDeviceGetP2PStatus`) is inferred
/// from the GPUs' PCI device ids ([`nvml_refuses_p2p`]).
#[derive(Debug, Clone, PartialEq)]
pub struct P2pDecision {
    pub p2p: bool,
    /// NVML (as inferred) refuses P2P between them over PCIe, whatever the level: host memory it is.
    pub nvml_refused: bool,
    /// P2P read (NVLink between two sm_80 GPUs).
    pub read: bool,
    /// The GPU (node index) an NVB path goes through.
    pub intermediate: Option<usize>,
    pub path: PathType,
    pub level: PathType,
}

/// The default P2P level and NCCL's exception for AMD CPUs with at most 2 GPUs, then the user's override.
pub fn p2p_level(topo: &Topology, env: &TopoEnv) -> PathType {
    let amd = topo
        .nodes_of(NodeType::CPU)
        .next()
        .and_then(|(_, n)| n.cpu.as_ref())
        .is_some_and(|c| CpuKind::of(c).is_x86_amd());
    let default = if amd && topo.nodes_of(NodeType::GPU).count() <= 2 { PathType::SYS } else { PathType::PXB };
    env.p2p_level.unwrap_or(default)
}

/// PCI device ids of GeForce GPUs (Ampere RTX 30, Ada RTX 40, Blackwell RTX 50), for which NVML answers
/// `NVML_P2P_STATUS_NOT_SUPPORTED` over PCIe: the driver offers peer access to data-center and workstation
/// GPUs only (an NVLink bridge still gives P2P over NVLink).
const GEFORCE_DEVICE_IDS: &[u16] = &[
    0x2203, 0x2204, 0x2206, 0x2208, 0x220a, 0x2216, 0x2482, 0x2484, 0x2486, 0x2487, 0x2489, 0x2503, 0x2504, 0x2684,
    0x2685, 0x2702, 0x2704, 0x2705, 0x2782, 0x2783, 0x2786, 0x2803, 0x2805, 0x2882, 0x2b85, 0x2b87, 0x2c02, 0x2c05,
    0x2f04,
];

/// Whether NVML would refuse P2P over PCIe for this GPU: an NVIDIA GeForce by its PCI device id.
pub fn nvml_refuses_p2p(gpu: &Node) -> bool {
    let Some(pci) = gpu.pci.as_ref() else { return false };
    let hex = |s: &Option<String>| s.as_deref().and_then(|v| u16::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    hex(&pci.vendor) == Some(0x10de) && hex(&pci.device).is_some_and(|d| GEFORCE_DEVICE_IDS.contains(&d))
}

pub fn check_p2p(topo: &Topology, env: &TopoEnv, gpu1: usize, gpu2: usize) -> P2pDecision {
    let p = path(topo, gpu1, gpu2);
    let kind = p.map_or(PathType::DIS, |p| p.kind);
    let intermediate = p
        .filter(|p| p.links.len() == 2)
        .map(|p| topo.links[p.links[0]].to)
        .filter(|&n| topo.nodes[n].kind == NodeType::GPU);
    let level = p2p_level(topo, env);
    let sm = |g: usize| topo.nodes[g].gpu.as_ref().map_or(0, |x| x.sm);
    let allowed = kind <= level;
    // NCCL 2.28.9 `ncclTopoCheckP2p` asks NVML for each hop of the path once the level allows P2P; a refusal
    // over PCIe turns P2P off ("P2P is disabled between connected GPUs"), over NVLink it is an error.
    let nvml_refused = !env.assume_p2p
        && kind > PathType::NVB
        && [Some(gpu1), intermediate, Some(gpu2)].into_iter().flatten().any(|g| nvml_refuses_p2p(&topo.nodes[g]));
    P2pDecision {
        p2p: allowed && !nvml_refused,
        nvml_refused,
        read: kind == PathType::NVL && sm(gpu1) == sm(gpu2) && sm(gpu1) == 80,
        intermediate,
        path: kind,
        level,
    }
}

/// How GPUDirect RDMA maps GPU memory (`ncclTopoGdrModeStr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GdrMode {
    Disabled,
    Default,
    Pci,
}

impl GdrMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GdrMode::Disabled => "Disabled",
            GdrMode::Default => "Default",
            GdrMode::Pci => "PCI",
        }
    }
}

/// What `ncclTopoCheckGdr` decides for a GPU and a NET, with the line NCCL logs about it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct GdrDecision {
    pub mode: GdrMode,
    /// The path type compared with the level (the proxy GPU's for PXN paths); `None` when NIC or GPU lack
    /// GDR support or reads are off, which NCCL decides without a line.
    pub distance: Option<PathType>,
    pub level: PathType,
    pub lines: Vec<String>,
}

impl GdrDecision {
    pub fn enabled(&self) -> bool {
        self.mode != GdrMode::Disabled
    }
}

/// NCCL's 64-bit node id, as `%lx` prints it in GDR lines.
fn nccl_id(topo: &Topology, node: usize) -> u64 {
    let id = topo.nodes[node].id;
    (id.system << 56) | id.local
}

pub fn check_gdr(topo: &Topology, env: &TopoEnv, gpu: usize, net: usize, read: bool) -> Result<GdrDecision, TopoError> {
    let level = env.gdr_level.unwrap_or(PathType::PXB);
    let mut d = GdrDecision { mode: GdrMode::Disabled, distance: None, level, lines: Vec::new() };
    let g = topo.nodes[gpu].gpu.as_ref();
    let net_gdr = topo.nodes[net].net.as_ref().is_some_and(|n| n.gdr);
    if !net_gdr || !g.is_some_and(|g| g.gdr) {
        return Ok(d);
    }
    let rank = g.and_then(|g| g.rank).unwrap_or(-1);
    if read {
        if env.gdr_read == 0 {
            return Ok(d);
        }
        // Before Ampere, GDR reads compete with other PCI traffic unless NVLink carries the GPU traffic.
        if env.gdr_read < 0 && g.map_or(0, |g| g.sm) < 80 {
            let gpus: Vec<usize> = topo.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
            let nvlink = gpus.len() == 1 || gpus.iter().any(|&o| o != gpu && kind_of(topo, gpu, o) == PathType::NVL);
            if !nvlink {
                return Ok(d);
            }
        }
    }
    let mut via = gpu;
    let mut distance = kind_of(topo, gpu, net);
    if distance == PathType::PXN {
        via = pxn_proxy(topo, gpu, net)?;
        distance = kind_of(topo, via, net);
    }
    let net_id = nccl_id(topo, net);
    if env.gdr_c2c && distance == PathType::P2C {
        let line = format!("GPU {rank} / HCA {net_id:x} connected via C2C link");
        nccl_info!(Subsys::GRAPH | Subsys::NET, "{line}");
        d.lines.push(line);
        distance = PathType::C2C;
    }
    d.distance = Some(distance);
    if distance > level {
        let line = format!(
            "GPU Direct RDMA Disabled for GPU {rank} / HCA {net_id:x} (distance {} > {})",
            distance.id(),
            level.id()
        );
        nccl_info!(Subsys::GRAPH | Subsys::NET, "{line}");
        d.lines.push(line);
        return Ok(d);
    }
    let cpu_c2c = local_cpu(topo, via).is_some_and(|c| kind_of(topo, via, c) == PathType::C2C);
    d.mode = if cpu_c2c && distance != PathType::C2C { GdrMode::Pci } else { GdrMode::Default };
    let line = format!(
        "GPU Direct RDMA Enabled for GPU {rank} / HCA {net_id:x} (distance {} <= {}), read {} mode {}",
        distance.id(),
        level.id(),
        u8::from(read),
        d.mode.as_str()
    );
    nccl_info!(Subsys::GRAPH | Subsys::NET, "{line}");
    d.lines.push(line);
    Ok(d)
}

/// Whether two GPUs of one node would do better through the network than through P2P/SHM
/// (`ncclTopoCheckNet`): both reach a NIC at PXB or better faster than they reach each other.
pub fn check_net(topo: &Topology, env: &TopoEnv, gpu1: usize, gpu2: usize) -> bool {
    if env.net_disable_intra {
        return false;
    }
    let speed = path(topo, gpu1, gpu2).map_or(0.0, |p| p.bw);
    let net_speed = |g: usize| {
        topo.nodes_of(NodeType::NET)
            .filter_map(|(n, _)| path(topo, g, n))
            .filter(|p| p.kind <= PathType::PXB)
            .fold(0.0f64, |m, p| m.max(p.bw))
    };
    net_speed(gpu1) > speed && net_speed(gpu2) > speed
}

/// Whether GDR receives need a flush (`ncclTopoNeedFlush`): always before Hopper, and on C2C systems when the
/// NIC sits on the GPU's PCI switch. `nic_forces_flush` is the network plugin's `forceFlush` property.
pub fn need_flush(topo: &Topology, env: &TopoEnv, gpu: usize, net: usize, nic_forces_flush: bool) -> bool {
    if nic_forces_flush || env.net_force_flush {
        return true;
    }
    let mut flush = topo.nodes[gpu].gpu.as_ref().map_or(0, |g| g.sm) < 90;
    if let Some(c) = local_cpu(topo, gpu) {
        if kind_of(topo, gpu, net) <= PathType::PXB && kind_of(topo, gpu, c) == PathType::C2C {
            flush = true;
        }
    }
    flush
}

/// `system->maxBw` and `totalBw` as `ncclTopoSearchInit` sets them: the best path bandwidth from a GPU to
/// another GPU (to a NET when `inter`), and the larger of a GPU's summed NVLink and its PCI bandwidth.
pub fn search_init_bw(topo: &Topology, inter: bool) -> (f64, f64) {
    let gpus: Vec<usize> = topo.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    if !inter && gpus.len() == 1 {
        return (LOC_BW, LOC_BW);
    }
    let target = if inter { NodeType::NET } else { NodeType::GPU };
    let (mut max_bw, mut total_bw) = (0.0f64, 0.0f64);
    for &g in &gpus {
        for (t, _) in topo.nodes_of(target) {
            if let Some(p) = path(topo, g, t).filter(|p| p.hops > 0) {
                max_bw = max_bw.max(p.bw);
            }
        }
        let (mut nvl, mut pci) = (0.0, 0.0);
        for l in topo.links.iter().filter(|l| l.from == g) {
            match l.kind {
                LinkType::NVL => nvl += l.bw,
                LinkType::PCI => pci = l.bw,
                _ => {}
            }
        }
        total_bw = total_bw.max(f64::max(pci, nvl));
    }
    (max_bw, total_bw)
}

/// Computes every path to CPU, GPU, NET and NVS nodes into `topo.paths` (sorted by from, to), applies NCCL's
/// P2P, PXN and GDR rewrites, and sets `max_bw`/`total_bw` for a single-node communicator.
pub fn compute(topo: &mut Topology, env: &TopoEnv) -> Result<(), TopoError> {
    let n = topo.nodes.len();
    let adj = adjacency(topo);
    let targets: Vec<usize> = (0..n).filter(|&i| TARGET_TYPES.contains(&topo.nodes[i].kind)).collect();
    // BFS in NCCL's order (CPUs, GPUs, NETs, NVSwitches); each target's column of the table.
    let mut columns: Vec<(usize, Vec<Path>)> = Vec::with_capacity(targets.len());
    for kind in TARGET_TYPES {
        for (base, _) in topo.nodes_of(kind) {
            let mut col: Vec<Path> = (0..n)
                .map(|from| Path { from, to: base, kind: PathType::DIS, bw: 0.0, hops: 0, links: Vec::new() })
                .collect();
            set_paths(topo, &adj, env, base, &mut col)?;
            columns.push((base, col));
        }
    }
    columns.sort_by_key(|(base, _)| *base);
    let mut paths = Vec::with_capacity(n * columns.len());
    for from in 0..n {
        for (_, col) in &columns {
            paths.push(col[from].clone());
        }
    }
    topo.paths = paths;

    let gpus: Vec<usize> = topo.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let nets: Vec<usize> = topo.nodes_of(NodeType::NET).map(|(i, _)| i).collect();
    // Where P2P is refused, GPU traffic goes through the destination GPU's CPU.
    for &g in &gpus {
        for &p in &gpus {
            if !check_p2p(topo, env, p, g).p2p {
                let cpu =
                    local_cpu(topo, g).ok_or_else(|| internal(format!("no CPU near {}", topo.nodes[g].name())))?;
                add_inter_step(topo, cpu, p, g)?;
            }
        }
    }
    // GPUs that reach the CPU over C2C and the NIC over PCI from that CPU: P2C.
    for &nt in &nets {
        for &g in &gpus {
            let Some(c) = local_cpu(topo, g) else { continue };
            if merge_path_type(kind_of(topo, g, c), kind_of(topo, nt, c)) == PathType::P2C {
                for (a, b) in [(g, nt), (nt, g)] {
                    if let Some(p) = path_mut(topo, a, b) {
                        p.kind = p.kind.min(PathType::P2C);
                    }
                }
            }
        }
    }
    for &nt in &nets {
        for &g in &gpus {
            if !env.pxn_disable {
                if let Some(peer) = local_gpu(topo, env, nt).filter(|&lg| lg != g) {
                    let pxn_type = if env.pxn_c2c { PathType::P2C } else { PathType::PXB };
                    let (peer_net, own_net) = (path(topo, peer, nt).cloned(), path(topo, g, nt).cloned());
                    if let (Some(pn), Some(on)) = (peer_net, own_net) {
                        if pn.kind <= pxn_type
                            && kind_of(topo, peer, g) <= PathType::NVL
                            && topo.nodes[peer].id.system == topo.nodes[g].id.system
                            && (pn.bw > on.bw || on.kind > PathType::PXN)
                        {
                            add_inter_step(topo, peer, g, nt)?;
                        }
                    }
                }
            }
            if kind_of(topo, g, nt) < PathType::PHB && !check_gdr(topo, env, g, nt, false)?.enabled() {
                let cpu =
                    local_cpu(topo, g).ok_or_else(|| internal(format!("no CPU near {}", topo.nodes[g].name())))?;
                add_inter_step(topo, cpu, nt, g)?;
                add_inter_step(topo, cpu, g, nt)?;
            }
        }
    }
    let (max_bw, total_bw) = search_init_bw(topo, false);
    topo.max_bw = max_bw;
    topo.total_bw = total_bw;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_mirror() {
        assert_eq!(merge_path_type(PathType::C2C, PathType::PHB), PathType::P2C);
        assert_eq!(merge_path_type(PathType::PIX, PathType::SYS), PathType::SYS);
        assert_eq!(mirror_bits(1, 8), 4);
        assert_eq!(mirror_bits(3, 8), 6);
        assert_eq!(mirror_bits(5, 4), 2);
        assert_eq!(mirror_bits(0, 1), 0);
    }
}
