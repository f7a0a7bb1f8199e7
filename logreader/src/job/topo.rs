//! The system tree and paths into each host's [`Topology`], and the graphs each host's search printed.

use super::*;
use crate::message::{GraphToken, NodeAttrs, NodeRef, PathLine, TopoLine};
use collscope_model::topology::{CpuAttrs, GpuAttrs, NetAttrs, PciAttrs};
use collscope_model::{Graph, GraphChannel, InitFacts, Link, LinkType, Node, NodeId, NodeType, Path, Topology};

/// Where topologies, their nodes, links and paths are, for deduplication.
#[derive(Default, Clone)]
pub(super) struct TopoIndex {
    by_place: HashMap<Place, usize>,
    nodes: FastMap<(usize, NodeRef), usize>,
    links: FastSet<(usize, usize, usize, u8)>,
    paths: FastSet<(usize, usize, usize)>,
}

/// A graph being printed: its head line, then one line per channel.
#[derive(Clone)]
pub(super) struct GraphBuild {
    graph: Graph,
    file: usize,
    channels: Vec<Vec<GraphToken>>,
}

impl GraphBuild {
    pub(super) fn new(graph: Graph, host: Option<String>, file: usize) -> Self {
        GraphBuild { graph: Graph { host, ..graph }, file, channels: Vec::new() }
    }
}

/// NCCL's CPU numbering (`NCCL_TOPO_CPU_ARCH_*`, `NCCL_TOPO_CPU_VENDOR_*`, `NCCL_TOPO_CPU_MODEL_*` in
/// `src/graph/topo.h`). The model is NCCL's kind; it becomes the family and model `ncclTopoAddCpu` reads as
/// that kind (a number above NCCL's kinds, as older hand-made prints have, is taken as the model itself).
fn cpu_attrs(arch: i32, vendor: i32, model: i32) -> CpuAttrs {
    let (family_id, model_id) = match (vendor, model) {
        (1, 1) => (Some(6), Some(0x4f)),
        (1, 2) => (Some(6), Some(0x55)),
        (1, 3) => (Some(6), Some(0x8f)),
        (1, 4) => (Some(6), Some(0xcf)),
        (1, 5..) => (Some(6), u32::try_from(model).ok()),
        (3 | 4, 1) => (Some(7), Some(0x5b)),
        _ => (None, None),
    };
    let arch = match arch {
        1 => "x86_64",
        2 => "ppc64",
        3 => "arm64",
        _ => "",
    };
    let vendor = match vendor {
        1 => "GenuineIntel",
        2 => "AuthenticAMD",
        3 => "CentaurHauls",
        4 => "Shanghai",
        5 => "HygonGenuine",
        _ => "",
    };
    CpuAttrs { arch: arch.into(), vendor: vendor.into(), family_id, model_id, ..CpuAttrs::default() }
}

/// NCCL's numeric PCI id back as a bus id: `1b000` is `0000:1b:00.0`.
fn busid(local: u64) -> String {
    format!("{:04x}:{:02x}:{:02x}.{:x}", local >> 20, (local >> 12) & 0xff, (local >> 4) & 0xff, local & 0xf)
}

impl Job {
    /// The printed topology of `key`'s host; `None` (counted) once the printed topologies hold
    /// [`MAX_TOPO_NODES`] nodes.
    pub(super) fn topo_slot(&mut self, key: &ProcKey) -> Option<usize> {
        let place = key.place();
        if let Some(&i) = self.topo.by_place.get(&place) {
            return Some(i);
        }
        if self.topo.nodes.len() >= MAX_TOPO_NODES {
            self.dropped.topology += 1;
            return None;
        }
        self.snap.topology.push(Topology {
            host: key.host.map(str::to_string),
            source: "log".into(),
            ..Topology::default()
        });
        let i = self.snap.topology.len() - 1;
        self.topo.by_place.insert(place, i);
        Some(i)
    }

    /// A node of printed topology `topo`; `None` (counted) past [`MAX_TOPO_NODES`] in all of them.
    fn topo_node(&mut self, topo: usize, node: NodeRef) -> Option<usize> {
        if let Some(&i) = self.topo.nodes.get(&(topo, node)) {
            return Some(i);
        }
        if self.topo.nodes.len() >= MAX_TOPO_NODES {
            self.dropped.topology += 1;
            return None;
        }
        let t = &mut self.snap.topology[topo];
        t.nodes.push(Node { kind: node.kind, id: node.id, cpu: None, pci: None, gpu: None, net: None });
        let i = t.nodes.len() - 1;
        self.topo.nodes.insert((topo, node), i);
        Some(i)
    }

    fn link(&mut self, topo: usize, from: usize, to: usize, kind: LinkType, bw: f64) {
        let key = (topo, from, to, kind.id());
        if self.topo.links.len() >= MAX_TOPO_LINKS && !self.topo.links.contains(&key) {
            self.dropped.topology += 1;
        } else if self.topo.links.insert(key) {
            self.snap.topology[topo].links.push(Link { from, to, kind, bw });
        }
    }

    /// A line of the system tree: the node, what NCCL knows of it, and the link from the node above it (found by
    /// the column its `+` is printed in).
    pub(super) fn tree_line(&mut self, key: &ProcKey, stream: StreamKey, line: TopoLine) {
        let Some(t) = self.topo_slot(key) else { return };
        let Some(n) = self.topo_node(t, line.node) else { return };
        let node = &mut self.snap.topology[t].nodes[n];
        match line.attrs {
            NodeAttrs::None => {}
            NodeAttrs::Gpu { rank } => {
                node.gpu = Some(GpuAttrs { dev: -1, rank: Some(rank), sm: 0, gdr: false });
                if let Ok(r) = u32::try_from(rank) {
                    self.saw_rank(r);
                    self.rank_host.entry(r).or_insert_with(|| key.place());
                }
            }
            NodeAttrs::Cpu { arch, vendor, model } => node.cpu = Some(cpu_attrs(arch, vendor, model)),
            NodeAttrs::Pci { device } => {
                let busid = busid(line.node.id.local);
                node.pci = Some(PciAttrs { busid, device: Some(format!("{device:x}")), ..PciAttrs::default() });
            }
            NodeAttrs::Net { coll, asic, port, bw } => {
                let dev = i32::try_from(line.node.id.local).unwrap_or(-1);
                let name = self
                    .snap
                    .net_devices
                    .iter()
                    .find(|d| d.host.as_deref() == key.host && i64::from(d.index) == i64::from(dev))
                    .map_or(String::new(), |d| d.name.clone());
                self.snap.topology[t].nodes[n].net = Some(NetAttrs {
                    dev,
                    name,
                    bw,
                    port,
                    coll,
                    guid: Some(format!("{asic:x}")),
                    ..NetAttrs::default()
                });
            }
        }
        let tree = &mut self.streams.entry(stream).or_default().tree;
        while tree.last().is_some_and(|&(col, _)| col > line.indent) {
            tree.pop();
        }
        let parent = match line.link {
            Some(_) => tree.last().filter(|&&(col, _)| col == line.indent).map(|&(_, p)| p),
            None => {
                tree.clear();
                None
            }
        };
        if line.link.is_none() || line.link.is_some_and(|(k, _)| k == LinkType::PCI) {
            tree.push((line.col, n));
        }
        if let (Some(p), Some((kind, bw))) = (parent, line.link) {
            self.link(t, p, n, kind, bw);
            // NCCL keeps a PCI link both ways and prints the way down only.
            if kind == LinkType::PCI {
                self.link(t, n, p, kind, bw);
            }
        }
    }

    pub(super) fn path(&mut self, key: &ProcKey, p: PathLine) {
        let Some(t) = self.topo_slot(key) else { return };
        let Some(from) = self.topo_node(t, p.from) else { return };
        for (to, hops, bw, kind) in p.to {
            let Some(to) = self.topo_node(t, to) else { continue };
            if self.topo.paths.len() >= MAX_TOPO_PATHS && !self.topo.paths.contains(&(t, from, to)) {
                self.dropped.topology += 1;
            } else if self.topo.paths.insert((t, from, to)) {
                self.snap.topology[t].paths.push(Path { from, to, kind, bw, hops, links: vec![] });
            }
        }
    }

    /// A channel line of the graph its thread is printing. Without its head line (an excerpt that starts below
    /// it) it still names ranks, and whether the graph leaves the node.
    pub(super) fn graph_channel(&mut self, stream: StreamKey, tokens: Vec<GraphToken>) -> bool {
        match self.streams.get_mut(&stream).and_then(|s| s.graph.as_mut()) {
            Some(g) if g.channels.len() < 1024 => g.channels.push(tokens),
            Some(_) => {}
            None => {
                for t in tokens {
                    match t {
                        GraphToken::Rank(r) => {
                            if let Ok(r) = u32::try_from(r) {
                                self.saw_rank(r);
                            }
                        }
                        GraphToken::Net(_) => self.size.multi_node = true,
                        GraphToken::Gpu(_) => {}
                    }
                }
            }
        }
        true
    }

    /// Ends whatever multi-line print the thread had under way (a tuning table, a graph).
    pub(super) fn close_prints(&mut self, stream: StreamKey) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let was = s.is_open();
        let graph = s.graph.take();
        if s.table.is_open() {
            self.close_table(stream);
        }
        self.settle(stream, was);
        if let Some(g) = graph {
            self.commit_graph(g);
        }
    }

    /// The rank on a GPU a graph names by its topology id: from the host's topology print, or from the
    /// communicator on that bus.
    fn gpu_rank(&self, host: Option<&str>, file: usize, id: NodeId) -> i32 {
        let place = match host {
            Some(h) => Place::Host(h.to_string()),
            None => Place::File(file),
        };
        let gpu = NodeRef { kind: NodeType::GPU, id };
        let by_topo = self.topo.by_place.get(&place).and_then(|&t| {
            let n = *self.topo.nodes.get(&(t, gpu))?;
            self.snap.topology[t].nodes[n].gpu.as_ref()?.rank
        });
        let bus = format!("{:x}", id.local);
        let by_comm = || {
            self.snap
                .communicators
                .iter()
                .find(|c| c.host.as_deref() == host && c.bus_id.as_deref() == Some(bus.as_str()))
                .and_then(|c| c.rank)
                .and_then(|r| i32::try_from(r).ok())
        };
        by_topo.or_else(by_comm).unwrap_or(-1)
    }

    fn commit_graph(&mut self, b: GraphBuild) {
        let host = b.graph.host.clone();
        let mut graph = b.graph;
        for tokens in &b.channels {
            let mut ch = GraphChannel::default();
            for t in tokens {
                match *t {
                    GraphToken::Rank(r) => ch.intra.push(r),
                    GraphToken::Gpu(id) => ch.intra.push(self.gpu_rank(host.as_deref(), b.file, id)),
                    GraphToken::Net(n) => ch.inter.push(n),
                }
            }
            graph.channels.push(ch);
        }
        // NVLS graphs print only the first GPU of each channel (`ncclTopoPrintGraph`, 2.28).
        if graph.pattern != collscope_model::Pattern::Nvls {
            if let Some(gpus) = graph.channels.iter().map(|c| c.intra.len()).max().filter(|&n| n > 0) {
                self.local_ranks(gpus as u32, "the GPUs in a graph channel");
            }
        }
        if graph.channels.iter().any(|c| !c.inter.is_empty()) {
            self.size.multi_node = true;
        }
        self.fold_init(InitFacts { graphs: vec![graph], ..InitFacts::default() });
    }
}
