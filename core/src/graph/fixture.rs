//! Test machines for the search: small hand-described topologies with paths from a plain fewest-hops walk
//! (the real path computation lives in the topology module; these only need to be right for the shapes here).

use crate::model::topology::{CpuAttrs, GpuAttrs, NetAttrs};
use crate::model::{Link, LinkType, Node, NodeId, NodeType, Path, PathType, Topology};
use std::collections::VecDeque;

pub struct Builder {
    pub topo: Topology,
}

impl Builder {
    pub fn new(name: &str) -> Self {
        Builder { topo: Topology { source: format!("fixture:{name}"), ..Default::default() } }
    }

    fn add(&mut self, kind: NodeType, local: u64) -> usize {
        self.topo.nodes.push(Node {
            kind,
            id: NodeId { system: 0, local },
            cpu: None,
            pci: None,
            gpu: None,
            net: None,
        });
        self.topo.nodes.len() - 1
    }

    pub fn cpu(&mut self, id: u64, vendor: &str) -> usize {
        let i = self.add(NodeType::CPU, id);
        self.topo.nodes[i].cpu = Some(CpuAttrs { arch: "x86_64".into(), vendor: vendor.into(), ..Default::default() });
        i
    }

    pub fn gpu(&mut self, dev: i32, busid: u64, sm: u32) -> usize {
        let i = self.add(NodeType::GPU, busid);
        self.topo.nodes[i].gpu = Some(GpuAttrs { dev, rank: Some(dev), sm, gdr: true });
        i
    }

    pub fn node(&mut self, kind: NodeType, id: u64) -> usize {
        self.add(kind, id)
    }

    pub fn net(&mut self, dev: i32, id: u64, bw: f64) -> usize {
        let i = self.add(NodeType::NET, id);
        self.topo.nodes[i].net = Some(NetAttrs {
            dev,
            name: format!("mlx5_{dev}"),
            bw,
            latency: 0.0,
            port: 1,
            guid: Some(format!("{id:x}")),
            max_conn: None,
            gdr: true,
            coll: false,
        });
        i
    }

    pub fn link(&mut self, a: usize, b: usize, kind: LinkType, bw: f64) {
        self.topo.links.push(Link { from: a, to: b, kind, bw });
        self.topo.links.push(Link { from: b, to: a, kind, bw });
    }

    /// Fewest-hop paths to every GPU and NET, widest among equals; GPUs and NETs are never relayed through.
    pub fn finish(mut self) -> Topology {
        let n = self.topo.nodes.len();
        let targets: Vec<usize> =
            (0..n).filter(|&i| matches!(self.topo.nodes[i].kind, NodeType::GPU | NodeType::NET)).collect();
        for &t in &targets {
            for s in 0..n {
                if s == t {
                    self.topo.paths.push(Path {
                        from: s,
                        to: t,
                        kind: PathType::LOC,
                        bw: 5000.0,
                        hops: 0,
                        links: Vec::new(),
                    });
                    continue;
                }
                if let Some(p) = self.walk(s, t) {
                    self.topo.paths.push(p);
                }
            }
        }
        self.topo
    }

    fn walk(&self, s: usize, t: usize) -> Option<Path> {
        // (node, hops, bw, visited link kinds/nodes) by BFS over simple paths, keeping the widest shortest.
        let mut best: Option<(u32, f64, Vec<usize>)> = None;
        let mut q = VecDeque::from([(s, 0u32, f64::MAX, vec![s])]);
        while let Some((at, hops, bw, seen)) = q.pop_front() {
            if best.as_ref().is_some_and(|b| hops >= b.0) {
                continue;
            }
            for l in self.topo.links.iter().filter(|l| l.from == at) {
                if seen.contains(&l.to) {
                    continue;
                }
                let nbw = bw.min(l.bw);
                let mut nseen = seen.clone();
                nseen.push(l.to);
                if l.to == t {
                    if best.as_ref().is_none_or(|b| hops + 1 < b.0 || nbw > b.1) {
                        best = Some((hops + 1, nbw, nseen));
                    }
                } else if !matches!(self.topo.nodes[l.to].kind, NodeType::GPU | NodeType::NET) {
                    q.push_back((l.to, hops + 1, nbw, nseen));
                }
            }
        }
        let (hops, bw, nodes) = best?;
        let kinds: Vec<NodeType> = nodes[1..nodes.len() - 1].iter().map(|&i| self.topo.nodes[i].kind).collect();
        let cpus = kinds.iter().filter(|k| **k == NodeType::CPU).count();
        let pcis = kinds.iter().filter(|k| **k == NodeType::PCI).count();
        let kind = if cpus > 1 {
            PathType::SYS
        } else if cpus == 1 {
            PathType::PHB
        } else if kinds.iter().all(|k| *k == NodeType::NVS) && !kinds.is_empty() || kinds.is_empty() && self.nvl(s, t) {
            PathType::NVL
        } else if pcis <= 1 {
            PathType::PIX
        } else {
            PathType::PXB
        };
        Some(Path { from: s, to: t, kind, bw, hops, links: Vec::new() })
    }

    fn nvl(&self, a: usize, b: usize) -> bool {
        self.topo.links.iter().any(|l| l.from == a && l.to == b && l.kind == LinkType::NVL)
    }
}

/// An 8-GPU NVSwitch node shaped like a DGX A100: 12 NVLinks (240 GB/s) per GPU into the switch, two GPUs
/// and two NICs (25 GB/s) per PCI switch, four switches per CPU.
pub fn nvswitch_node(sm: u32, nvl_bw: f64, cpu_vendor: &str) -> Topology {
    let mut b = Builder::new("nvswitch");
    let cpus = [b.cpu(0, cpu_vendor), b.cpu(1, cpu_vendor)];
    b.link(cpus[0], cpus[1], LinkType::SYS, 16.0);
    let nvs = b.node(NodeType::NVS, 0);
    for sw in 0..4u64 {
        let pci = b.node(NodeType::PCI, 0x1000 + sw);
        b.link(pci, cpus[sw as usize / 2], LinkType::PCI, 24.0);
        for j in 0..2u64 {
            let dev = (sw * 2 + j) as i32;
            let g = b.gpu(dev, 0x07000 + 0x10000 * dev as u64, sm);
            b.link(g, pci, LinkType::PCI, 24.0);
            b.link(g, nvs, LinkType::NVL, nvl_bw);
            let nic = b.node(NodeType::NIC, 0x0c000 + 0x10000 * dev as u64);
            b.link(nic, pci, LinkType::PCI, 24.0);
            let net = b.net(dev, dev as u64, 25.0);
            b.link(net, nic, LinkType::NET, 25.0);
        }
    }
    b.finish()
}

/// Four GPUs on one PCI switch, no NVLink.
pub fn pcie_node() -> Topology {
    let mut b = Builder::new("pcie");
    let cpu = b.cpu(0, "GenuineIntel");
    let pci = b.node(NodeType::PCI, 0x1000);
    b.link(pci, cpu, LinkType::PCI, 24.0);
    for dev in 0..4 {
        let g = b.gpu(dev, 0x1000 * (dev as u64 + 1), 80);
        b.link(g, pci, LinkType::PCI, 24.0);
    }
    let nic = b.node(NodeType::NIC, 0x9000);
    b.link(nic, pci, LinkType::PCI, 24.0);
    let net = b.net(0, 0, 12.5);
    b.link(net, nic, LinkType::NET, 12.5);
    b.finish()
}
