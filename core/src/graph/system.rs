//! The search's own copy of one node's topology (NCCL 2.28.9 `ncclTopoSystem` as `search.cc` uses it):
//! nodes grouped by type, links whose bandwidth the search deducts and gives back, and for each path the
//! list of links it crosses. The caller's `model::Topology` is never modified.

use super::GraphError;
use crate::model::{LinkType, NodeType, PathType, Topology};
use std::collections::HashMap;
use std::rc::Rc;

/// `LOC_BW`: a lone GPU's bandwidth to itself.
pub const LOC_BW: f64 = 5000.0;

#[derive(Debug, Clone)]
pub struct SysLink {
    pub to: usize,
    pub kind: LinkType,
    pub bw: f64,
}

#[derive(Debug, Clone)]
pub struct SysPath {
    pub kind: PathType,
    pub bw: f64,
    /// Indices into `System::links`; empty when there is no path (NCCL's `count == 0`).
    pub links: Rc<[usize]>,
}

/// Paths by (from, to) topology node index, dense because the search looks them up at every step.
#[derive(Debug, Clone)]
pub struct PathTable {
    n: usize,
    v: Vec<Option<SysPath>>,
}

impl PathTable {
    fn new(n: usize) -> Self {
        PathTable { n, v: vec![None; n * n] }
    }

    pub fn get(&self, &(a, b): &(usize, usize)) -> Option<&SysPath> {
        self.v.get(a * self.n + b)?.as_ref()
    }

    fn insert(&mut self, (a, b): (usize, usize), p: SysPath) {
        if a < self.n && b < self.n {
            self.v[a * self.n + b] = Some(p);
        }
    }

    fn insert_missing(&mut self, key: (usize, usize), p: SysPath) {
        if self.get(&key).is_none() {
            self.insert(key, p);
        }
    }
}

#[derive(Debug, Clone)]
pub struct NetInfo {
    pub id: u64,
    pub dev: i32,
    pub bw: f64,
    pub latency: f64,
    /// NCCL's `asic` (the port GUID) and `port`: NICs sharing both share bandwidth.
    pub asic: String,
    pub port: u32,
    pub coll: bool,
    /// The GPU (index) this NIC is closest to (`net.localGpu`), -1 for none.
    pub local_gpu: i32,
}

#[derive(Debug, Clone)]
pub struct System {
    /// Topology node index of each GPU, NET, NVS, CPU in NCCL's per-type order.
    pub gpus: Vec<usize>,
    pub nets: Vec<usize>,
    pub nvs: Vec<usize>,
    pub ranks: Vec<i32>,
    pub devs: Vec<i32>,
    pub comp_caps: Vec<u32>,
    pub gpu_ids: Vec<(u64, u64)>,
    pub net_info: Vec<NetInfo>,
    pub links: Vec<SysLink>,
    /// Outgoing links of each topology node.
    pub adj: Vec<Vec<usize>>,
    pub kinds: Vec<NodeType>,
    /// GPU index of each topology node, for GPUs.
    pub gpu_index: Vec<Option<usize>>,
    pub cpu_x86_intel: Vec<bool>,
    pub cpu_power: Vec<bool>,
    /// x86 AMD CPU (the sameChannels relaxation is skipped through AMD CPUs on SYS paths).
    pub cpu_amd: bool,
    pub paths: PathTable,
    /// More than one node: searches start and end at NETs.
    pub inter: bool,
    pub max_bw: f64,
    pub total_bw: f64,
    /// Per-GPU bitmask of the channels that already use it (`used`).
    pub used: Vec<u64>,
    /// Per GPU, the NETs `local_net` gives channel after channel until it repeats (computed once).
    pub preferred_nets: Vec<Vec<usize>>,
}

impl System {
    /// Builds the search system for one node of a communicator spanning `nnodes` nodes. NETs are dropped on
    /// a single node, as `ncclTopoTrimSystem` does.
    pub fn new(topo: &Topology, nnodes: u32) -> Result<System, GraphError> {
        let inter = nnodes > 1;
        let idx = |k: NodeType| topo.nodes_of(k).map(|(i, _)| i).collect::<Vec<_>>();
        let gpus = idx(NodeType::GPU);
        let nets = if inter { idx(NodeType::NET) } else { Vec::new() };
        if gpus.is_empty() {
            return Err(GraphError::Input(format!("topology '{}' has no GPU", topo.source)));
        }
        if inter && nets.is_empty() {
            return Err(GraphError::Input(format!(
                "topology '{}' has no NET device, so {nnodes} nodes cannot be connected",
                topo.source
            )));
        }
        let mut ranks = Vec::new();
        let mut devs = Vec::new();
        let mut comp_caps = Vec::new();
        for &g in &gpus {
            let a = topo.nodes[g]
                .gpu
                .as_ref()
                .ok_or_else(|| GraphError::Input(format!("GPU node {} has no GPU attributes", topo.nodes[g].name())))?;
            devs.push(a.dev);
            ranks.push(a.rank.unwrap_or(a.dev));
            comp_caps.push(a.sm);
        }
        let mut links = Vec::with_capacity(topo.links.len());
        let mut adj = vec![Vec::new(); topo.nodes.len()];
        for l in &topo.links {
            if l.from >= topo.nodes.len() || l.to >= topo.nodes.len() {
                return Err(GraphError::Input(format!("link {} -> {} names a missing node", l.from, l.to)));
            }
            adj[l.from].push(links.len());
            links.push(SysLink { to: l.to, kind: l.kind, bw: l.bw });
        }
        let kinds = topo.nodes.iter().map(|n| n.kind).collect();
        let mut gpu_index = vec![None; topo.nodes.len()];
        for (i, &g) in gpus.iter().enumerate() {
            gpu_index[g] = Some(i);
        }
        let cpu = |n: &crate::model::Node| n.cpu.clone().unwrap_or_default();
        let cpu_x86_intel =
            topo.nodes.iter().map(|n| n.kind == NodeType::CPU && cpu(n).vendor == "GenuineIntel").collect();
        let cpu_power = topo.nodes.iter().map(|n| n.kind == NodeType::CPU && cpu(n).arch.starts_with("ppc")).collect();
        let cpu_amd = topo
            .nodes_of(NodeType::CPU)
            .next()
            .map(|(_, n)| cpu(n).arch == "x86_64" && cpu(n).vendor == "AuthenticAMD")
            .unwrap_or(false);
        let mut sys = System {
            gpu_ids: gpus.iter().map(|&g| (topo.nodes[g].id.system, topo.nodes[g].id.local)).collect(),
            used: vec![0; gpus.len()],
            preferred_nets: Vec::new(),
            gpus,
            nets,
            nvs: idx(NodeType::NVS),
            ranks,
            devs,
            comp_caps,
            net_info: Vec::new(),
            links,
            adj,
            kinds,
            gpu_index,
            cpu_x86_intel,
            cpu_power,
            cpu_amd,
            paths: PathTable::new(topo.nodes.len()),
            inter,
            max_bw: 0.0,
            total_bw: 0.0,
        };
        let hops: HashMap<(usize, usize), u32> = topo.paths.iter().map(|p| ((p.from, p.to), p.hops)).collect();
        for p in &topo.paths {
            let links = if p.from == p.to { Vec::new() } else { sys.route(&hops, p.from, p.to, p.hops, p.bw, p.kind) };
            sys.paths.insert((p.from, p.to), SysPath { kind: p.kind, bw: p.bw, links: links.into() });
        }
        // NVLS goes GPU <-> NVSwitch; add the one-link paths when the topology only listed GPU and NET targets.
        for &g in &sys.gpus.clone() {
            for &l in &sys.adj[g].clone() {
                let (to, kind, bw) = (sys.links[l].to, sys.links[l].kind, sys.links[l].bw);
                if sys.kinds[to] != NodeType::NVS || kind != LinkType::NVL {
                    continue;
                }
                sys.paths.insert_missing((g, to), SysPath { kind: PathType::NVL, bw, links: Rc::from([l]) });
                if let Some(&back) = sys.adj[to].iter().find(|&&b| sys.links[b].to == g) {
                    let bw = sys.links[back].bw;
                    sys.paths.insert_missing((to, g), SysPath { kind: PathType::NVL, bw, links: Rc::from([back]) });
                }
            }
        }
        for &n in &sys.nets.clone() {
            let a = topo.nodes[n].net.clone().unwrap_or_default();
            sys.net_info.push(NetInfo {
                id: topo.nodes[n].id.local | (topo.nodes[n].id.system << 56),
                dev: a.dev,
                bw: a.bw,
                latency: a.latency,
                asic: a.guid.clone().unwrap_or_else(|| a.name.clone()),
                port: a.port,
                coll: a.coll,
                local_gpu: -1,
            });
        }
        for n in 0..sys.nets.len() {
            sys.net_info[n].local_gpu = sys.local_gpu_of_net(n);
        }
        sys.preferred_nets = (0..sys.gpus.len())
            .map(|g| {
                let mut local: Vec<usize> = Vec::new();
                for c in 0..super::connect::MAXCHANNELS as usize {
                    let Some(n) = sys.local_net(g, c) else { break };
                    if c > 0 && local.first() == Some(&n) {
                        break;
                    }
                    local.push(n);
                }
                local
            })
            .collect();
        sys.search_init();
        Ok(sys)
    }

    /// Finds the links of a path the topology computed: `hops` links from `from` to `to`, each at least as
    /// wide as the path, preferring hops whose own path to `to` is one shorter (the BFS the paths came from).
    fn route(
        &self,
        hops_of: &HashMap<(usize, usize), u32>,
        from: usize,
        to: usize,
        hops: u32,
        bw: f64,
        kind: PathType,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        if self.route_rec(hops_of, from, to, hops, bw, kind, &mut out) {
            out
        } else {
            Vec::new()
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn route_rec(
        &self,
        hops_of: &HashMap<(usize, usize), u32>,
        at: usize,
        to: usize,
        left: u32,
        bw: f64,
        kind: PathType,
        out: &mut Vec<usize>,
    ) -> bool {
        if left == 0 {
            return at == to;
        }
        for &l in &self.adj[at] {
            let link = &self.links[l];
            if link.bw + 1e-6 < bw {
                continue;
            }
            let next = link.to;
            if next != to {
                // Only NVB paths relay through a GPU; no path relays through a NET.
                let relay_ok = match self.kinds[next] {
                    NodeType::GPU => kind == PathType::NVB || kind == PathType::PXN,
                    NodeType::NET => false,
                    _ => true,
                };
                if !relay_ok {
                    continue;
                }
                if hops_of.get(&(next, to)).is_some_and(|&h| h != left - 1) {
                    continue;
                }
            }
            out.push(l);
            if self.route_rec(hops_of, next, to, left - 1, bw, kind, out) {
                return true;
            }
            out.pop();
        }
        false
    }

    pub fn ngpus(&self) -> usize {
        self.gpus.len()
    }

    pub fn min_comp_cap(&self) -> u32 {
        self.comp_caps.iter().copied().min().unwrap_or(0)
    }

    pub fn path(&self, from: usize, to: usize) -> Option<&SysPath> {
        self.paths.get(&(from, to)).filter(|p| !p.links.is_empty())
    }

    /// `ncclTopoSearchInit`: the best single path bandwidth (to NETs across nodes, else to GPUs) and the
    /// widest GPU attachment (NVLink sum or PCI).
    fn search_init(&mut self) {
        if !self.inter && self.gpus.len() == 1 {
            self.max_bw = LOC_BW;
            self.total_bw = LOC_BW;
            return;
        }
        let targets = if self.inter { self.nets.clone() } else { self.gpus.clone() };
        for &g in &self.gpus {
            for &t in &targets {
                if let Some(p) = self.path(g, t) {
                    self.max_bw = self.max_bw.max(p.bw);
                }
            }
            let (mut nvl, mut pci) = (0.0, 0.0);
            for &l in &self.adj[g] {
                match self.links[l].kind {
                    LinkType::NVL => nvl += self.links[l].bw,
                    LinkType::PCI => pci = self.links[l].bw,
                    _ => {}
                }
            }
            self.total_bw = self.total_bw.max(nvl.max(pci));
        }
    }

    /// `ncclTopoGetLocal`: the targets (GPU or NET indices) with the widest, then best-typed, path.
    pub fn local(&self, from: usize, targets: &[usize]) -> (Vec<usize>, PathType) {
        let (mut best_bw, mut best_type) = (0.0, PathType::DIS);
        let mut out = Vec::new();
        for (i, &t) in targets.iter().enumerate() {
            let Some(p) = self.paths.get(&(from, t)) else { continue };
            if p.bw > best_bw || (p.bw == best_bw && p.kind < best_type) {
                best_bw = p.bw;
                best_type = p.kind;
                out.clear();
            }
            if p.bw == best_bw && p.kind == best_type {
                out.push(i);
            }
        }
        (out, best_type)
    }

    /// `ncclTopoGetLocalNet` with the AUTO policy: the NET (index) a GPU uses for a channel.
    pub fn local_net(&self, gpu: usize, channel: usize) -> Option<usize> {
        let (nets, _) = self.local(self.gpus[gpu], &self.nets);
        let first = *nets.first()?;
        let (gpus_of_first, _) = self.local(self.nets[first], &self.gpus);
        let nets_per_gpu = nets.len().div_ceil(gpus_of_first.len().max(1)).max(1);
        let mut net = self.devs[gpu].max(0) as usize;
        if nets.len().is_power_of_two() {
            net = mirror_bits(net, nets.len());
        }
        net += channel % nets_per_gpu;
        Some(nets[net % nets.len()])
    }

    /// `ncclTopoGetLocalGpu`: the first close GPU whose channels use this NET.
    fn local_gpu_of_net(&self, net: usize) -> i32 {
        let (gpus, _) = self.local(self.nets[net], &self.gpus);
        for c in 0..super::connect::MAXCHANNELS as usize {
            for &g in &gpus {
                if self.local_net(g, c) == Some(net) {
                    return g as i32;
                }
            }
        }
        -1
    }
}

/// `mirrorBits`: reverses the low log2(pow2) bits, spreading GPUs over NICs.
fn mirror_bits(val: usize, pow2: usize) -> usize {
    let (mut mirror, mut b, mut mb) = (0, 1, pow2 >> 1);
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

/// `ncclTopoNVLinkBw`: one NVLink's bandwidth by compute capability (`src/graph/topo.h`).
pub fn nvlink_bw(comp_cap: u32) -> f64 {
    match comp_cap {
        c if c >= 100 => 40.1,
        c if c >= 90 => 20.6,
        86 => 12.0,
        c if c >= 80 => 20.0,
        c if c >= 70 => 20.0,
        c if c >= 60 => 18.0,
        _ => 20.0,
    }
}

impl System {
    /// The smallest p2p channel need between two GPUs of this node (`ncclTopoGetNchannels`, local peers):
    /// two per NVLink's worth of bandwidth on NVLink paths, else two.
    pub fn p2p_local_peer_channels(&self) -> u32 {
        let mut min = u32::MAX;
        for g in 0..self.ngpus() {
            for p in (0..self.ngpus()).filter(|&p| p != g) {
                let n = match self.paths.get(&(self.gpus[p], self.gpus[g])) {
                    Some(path) if path.kind == PathType::NVL => {
                        2 * ((path.bw / nvlink_bw(self.comp_caps[g])) as u32).max(1)
                    }
                    _ => 2,
                };
                min = min.min(n);
            }
        }
        min
    }

    /// `getLocalNetCountByBw`, smallest over the GPUs: NICs needed to match a GPU's direct link to its CPU
    /// (0 for GPUs behind a PCI switch, as in NCCL).
    pub fn net_count_by_bw(&self) -> u32 {
        let mut min = u32::MAX;
        for g in 0..self.ngpus() {
            let node = self.gpus[g];
            let gpu_bw = self.adj[node]
                .iter()
                .filter(|&&l| self.kinds[self.links[l].to] == NodeType::CPU)
                .map(|&l| self.links[l].bw)
                .next_back()
                .unwrap_or(0.0);
            let (nets, _) = self.local(node, &self.nets);
            let (mut total, mut count) = (0.0, 0);
            for n in nets {
                if total >= gpu_bw {
                    break;
                }
                total += self.paths.get(&(node, self.nets[n])).map(|p| p.bw).unwrap_or(0.0);
                count += 1;
            }
            min = min.min(count);
        }
        if min == u32::MAX {
            0
        } else {
            min
        }
    }
}
