//! The search's own copy of one node's topology (NCCL 2.28.9 `ncclTopoSystem` as `search.cc` uses it):
//! nodes grouped by type, links whose bandwidth the search deducts and gives back, and for each path the
//! list of links it crosses. The caller's `model::Topology` is never modified.

use super::{GraphError, MAX_CHANNELS};
use crate::topo::paths as topo_paths;
use crate::topo::settings::NetDevsPolicy;
use crate::topo::TopoEnv;
use crate::version::VersionProfile;
use collscope_model::{LinkType, NodeType, PathType, Topology};
use std::rc::Rc;

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
}

#[derive(Debug, Clone)]
pub struct NetInfo {
    pub id: u64,
    pub bw: f64,
    pub latency: f64,
    /// NCCL's `asic` (the port GUID) and `port`: NICs sharing both share bandwidth.
    pub asic: String,
    pub port: u32,
    pub coll: bool,
    /// The GPU (index) this NIC is closest to (`net.localGpu`), -1 for none.
    pub local_gpu: i32,
    /// The GPUs (indices) with the best path to this NIC (`ncclTopoGetLocal(NET -> GPU)`).
    pub local_gpus: Vec<usize>,
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
    /// Per GPU, the NETs (indices) with the best path from it (`ncclTopoGetLocal(GPU -> NET)`).
    pub local_nets: Vec<Vec<usize>>,
    /// The NCCL release whose constants apply.
    pub profile: VersionProfile,
    /// `ncclTopoSelectNets` for every inter-node path type limit (by id) and GPU (index, or ngpus for all).
    select_nets: Vec<Vec<Vec<usize>>>,
}

impl System {
    /// Builds the search system for one node of a communicator spanning `nnodes` nodes. NETs are dropped on
    /// a single node, as `ncclTopoTrimSystem` does. NIC choices (`ncclTopoGetLocalNet`, `ncclTopoGetLocalGpu`)
    /// come from the topology module under `topo_env`'s `NCCL_NETDEVS_POLICY`.
    pub fn new(topo: &Topology, nnodes: u32, topo_env: &TopoEnv) -> Result<System, GraphError> {
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
        let mut paths = PathTable::new(topo.nodes.len());
        for p in &topo.paths {
            if p.links.iter().any(|&l| l >= links.len()) {
                return Err(GraphError::Input(format!("path {} -> {} names a missing link", p.from, p.to)));
            }
            if p.hops > 0 && p.links.is_empty() {
                return Err(GraphError::Input(format!(
                    "topology '{}' has paths without their links; the search needs a computed topology",
                    topo.source
                )));
            }
            paths.insert((p.from, p.to), SysPath { kind: p.kind, bw: p.bw, links: p.links.clone().into() });
        }
        let mut gpu_index = vec![None; topo.nodes.len()];
        for (i, &g) in gpus.iter().enumerate() {
            gpu_index[g] = Some(i);
        }
        let cpu = |n: &collscope_model::Node| n.cpu.clone().unwrap_or_default();
        let net_pos = |node: usize| nets.iter().position(|&n| n == node);
        let gpu_pos = |node: usize| gpus.iter().position(|&g| g == node);
        let mut net_info = Vec::with_capacity(nets.len());
        for &n in &nets {
            let a = topo.nodes[n].net.clone().unwrap_or_default();
            net_info.push(NetInfo {
                id: (topo.nodes[n].id.system << 56) | topo.nodes[n].id.local,
                bw: a.bw,
                latency: a.latency,
                asic: a.guid.clone().unwrap_or_else(|| a.name.clone()),
                port: a.port,
                coll: a.coll,
                local_gpu: topo_paths::local_gpu(topo, topo_env, n).and_then(gpu_pos).map_or(-1, |g| g as i32),
                local_gpus: topo_paths::nearest(topo, n, NodeType::GPU).into_iter().filter_map(gpu_pos).collect(),
            });
        }
        // Per GPU, the NETs its channels use in turn until they repeat (`ncclTopoPrefNetsChannelFirst`).
        let preferred_nets = if inter {
            gpus.iter()
                .map(|&g| {
                    let mut seq: Vec<usize> = Vec::new();
                    for c in 0..MAX_CHANNELS {
                        let Some(n) = topo_paths::local_net(topo, topo_env, g, c).and_then(net_pos) else { break };
                        if c > 0 && seq.first() == Some(&n) {
                            break;
                        }
                        seq.push(n);
                    }
                    seq
                })
                .collect()
        } else {
            vec![Vec::new(); gpus.len()]
        };
        let local_nets = gpus
            .iter()
            .map(|&g| topo_paths::nearest(topo, g, NodeType::NET).into_iter().filter_map(net_pos).collect())
            .collect();
        let (max_bw, total_bw) = topo_paths::search_init_bw(topo, inter);
        let netdevs_max = match topo_env.netdevs {
            NetDevsPolicy::Max(n) => Some(n as usize),
            _ => None,
        };
        let mut sys = System {
            kinds: topo.nodes.iter().map(|n| n.kind).collect(),
            cpu_x86_intel: topo
                .nodes
                .iter()
                .map(|n| n.kind == NodeType::CPU && cpu(n).arch == "x86_64" && cpu(n).vendor == "GenuineIntel")
                .collect(),
            cpu_power: topo.nodes.iter().map(|n| n.kind == NodeType::CPU && cpu(n).arch.starts_with("ppc")).collect(),
            cpu_amd: topo
                .nodes_of(NodeType::CPU)
                .next()
                .is_some_and(|(_, n)| cpu(n).arch == "x86_64" && cpu(n).vendor == "AuthenticAMD"),
            gpu_ids: gpus.iter().map(|&g| (topo.nodes[g].id.system, topo.nodes[g].id.local)).collect(),
            used: vec![0; gpus.len()],
            nvs: idx(NodeType::NVS),
            gpus,
            nets,
            ranks,
            devs,
            comp_caps,
            net_info,
            links,
            adj,
            gpu_index,
            paths,
            inter,
            max_bw,
            total_bw,
            preferred_nets,
            local_nets,
            profile: topo_env.profile.clone(),
            select_nets: Vec::new(),
        };
        sys.select_nets = PathType::ALL
            .iter()
            .map(|&t| (0..=sys.gpus.len()).map(|g| sys.compute_select_nets(t, g, netdevs_max)).collect())
            .collect();
        Ok(sys)
    }

    /// The NETs to try, best first (`ncclTopoSelectNets`), for one GPU or (`None`) all of them.
    pub fn select_nets(&self, type_inter: PathType, gpu: Option<usize>) -> &[usize] {
        &self.select_nets[type_inter.id() as usize][gpu.unwrap_or(self.gpus.len())]
    }

    /// Preferred NETs channel by channel first, then any NET within `type_inter`, best type first;
    /// `NCCL_NETDEVS_POLICY=MAX:n` stops at n per GPU. `gpu == ngpus` means every GPU.
    fn compute_select_nets(&self, type_inter: PathType, gpu: usize, netdevs_max: Option<usize>) -> Vec<usize> {
        let all = gpu == self.gpus.len();
        let gpus: Vec<usize> = if all { (0..self.gpus.len()).collect() } else { vec![gpu] };
        let mut nets: Vec<usize> = Vec::new();
        for &g in &gpus {
            for &n in &self.preferred_nets[g] {
                if !nets.contains(&n) {
                    nets.push(n);
                }
            }
        }
        let max = netdevs_max.map_or(usize::MAX, |m| if all { m * self.gpus.len() } else { m });
        if nets.len() >= max {
            return nets;
        }
        for t in PathType::ALL.iter().copied().filter(|t| *t <= type_inter) {
            for &g in &gpus {
                for n in 0..self.nets.len().min(MAX_CHANNELS) {
                    if nets.contains(&n) || self.paths.get(&(self.gpus[g], self.nets[n])).is_none_or(|p| p.kind != t) {
                        continue;
                    }
                    nets.push(n);
                    if nets.len() >= max {
                        return nets;
                    }
                }
            }
        }
        nets
    }

    pub fn ngpus(&self) -> usize {
        self.gpus.len()
    }

    pub fn min_comp_cap(&self) -> u32 {
        self.comp_caps.iter().copied().min().unwrap_or(0)
    }

    /// A usable path (NCCL's `count > 0`).
    pub fn path(&self, from: usize, to: usize) -> Option<&SysPath> {
        self.paths.get(&(from, to)).filter(|p| !p.links.is_empty())
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
                        2 * ((path.bw / self.profile.nvlink_bw(self.comp_caps[g])) as u32).max(1)
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
            let nets = &self.local_nets[g];
            let (mut total, mut count) = (0.0, 0);
            for &n in nets {
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
