//! What NCCL 2.28.9's `initTransportsRank` (`src/init.cc`) decides between the topology and the transports:
//! the ring, tree, CollNet and NVLS graphs in that order, the optional `NCCL_GRAPH_DUMP_FILE`, the
//! alignment over ranks, and the connect phase, for a communicator of identical nodes.

use super::compute::{compute_on, Found, Request};
use super::connect::{align, connect, CommShape, Connected, Graphs};
use super::system::System;
use super::{xml, GraphError, InfoLine};
use crate::env::Env;
use crate::model::{NodeType, Pattern, Topology};

/// All graphs and the connected channels of one communicator.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub ring: Found,
    pub tree: Found,
    /// Computed only with `NCCL_COLLNET_ENABLE=1` and a NET that supports CollNet.
    pub collnet_chain: Option<Found>,
    pub collnet_direct: Option<Found>,
    /// Computed only where NVLS is supported (NVSwitch, sm_90 or newer, two or more GPUs, `NCCL_NVLS_ENABLE`).
    pub nvls: Option<Found>,
    pub connected: Connected,
    /// Every INFO line in the order NCCL prints them.
    pub lines: Vec<InfoLine>,
}

impl Plan {
    /// Prints every line through collscope's NCCL-format logger.
    pub fn emit(&self) {
        for l in &self.lines {
            l.emit();
        }
    }

    /// The graphs in init.cc's order, skipping those not computed.
    pub fn graphs(&self) -> Vec<&Found> {
        let mut v = vec![&self.ring, &self.tree];
        v.extend(self.collnet_chain.iter());
        v.extend(self.collnet_direct.iter());
        v.extend(self.nvls.iter());
        v
    }
}

/// Computes graphs and channels for `nnodes` nodes shaped like `topo`, one rank per GPU.
pub fn plan(topo: &Topology, nnodes: u32, env: &Env) -> Result<Plan, GraphError> {
    if nnodes == 0 {
        return Err(GraphError::Input("the node count must be at least 1".into()));
    }
    let sys = System::new(topo, nnodes)?;
    let ngpus = sys.ngpus();
    let mut lines = Vec::new();
    let run = |req: &Request, lines: &mut Vec<InfoLine>| -> Result<Found, GraphError> {
        let f = compute_on(sys.clone(), req, env)?;
        lines.extend(f.lines.iter().cloned());
        Ok(f)
    };
    let ring = run(&Request::ring(), &mut lines)?;
    let tree = run(&Request::tree(ring.graph.n_channels as usize), &mut lines)?;

    let collnet = env.int("NCCL_COLLNET_ENABLE", 0)? == 1 && sys.net_info.iter().any(|n| n.coll);
    let (collnet_chain, collnet_direct) = if collnet {
        let n = ring.graph.n_channels as usize;
        let chain = Request { id: 2, pattern: Pattern::Tree, min_channels: n, max_channels: n, coll_net: true };
        let chain = run(&chain, &mut lines)?;
        let direct = run(&Request::collnet_direct(), &mut lines)?;
        (Some(chain), Some(direct))
    } else {
        (None, None)
    };

    let nvls_enable = env.int("NCCL_NVLS_ENABLE", 2)?;
    let has_nvs = topo.nodes_of(NodeType::NVS).next().is_some();
    let nvls_support = nvls_enable != 0 && ngpus >= 2 && has_nvs && sys.min_comp_cap() >= 90;
    let nvls = if nvls_support { Some(run(&Request::nvls(), &mut lines)?) } else { None };

    if let Some(file) = env.str("NCCL_GRAPH_DUMP_FILE") {
        // Five graphs in NCCL's dump order; those not computed are written empty.
        let empty = |id: u32, pattern: Pattern| Found {
            id,
            graph: crate::model::Graph {
                pattern,
                n_channels: 0,
                bw_intra: 0.0,
                bw_inter: 0.0,
                type_intra: crate::model::PathType::LOC,
                type_inter: crate::model::PathType::LOC,
                same_channels: false,
                cross_nic: 0,
                channels: Vec::new(),
            },
            latency_inter: 0.0,
            lines: Vec::new(),
        };
        let cd = collnet_direct.clone().unwrap_or_else(|| empty(4, Pattern::CollnetDirect));
        let cc = collnet_chain.clone().unwrap_or_else(|| empty(2, Pattern::Tree));
        let nv = nvls.clone().unwrap_or_else(|| empty(3, Pattern::Nvls));
        let text = xml::graphs_xml(&sys, &[&ring, &tree, &cd, &cc, &nv]);
        std::fs::write(file, text)
            .map_err(|e| GraphError::Input(format!("NCCL_GRAPH_DUMP_FILE {file} cannot be written: {e}")))?;
    }

    // Every node found the same graphs; aligning still applies NCCL's rule (ring and tree share a count).
    let mut ring_g = align(&vec![ring.graph.clone(); nnodes as usize]).unwrap_or_else(|| ring.graph.clone());
    let mut tree_g = align(&vec![tree.graph.clone(); nnodes as usize]).unwrap_or_else(|| tree.graph.clone());
    let n = ring_g.n_channels.min(tree_g.n_channels);
    for g in [&mut ring_g, &mut tree_g] {
        g.n_channels = n;
        g.channels.truncate(n as usize);
    }
    let graphs = Graphs {
        ring: ring_g,
        tree: tree_g,
        nvls: nvls.as_ref().map(|f| f.graph.clone()),
        collnet_direct: collnet_direct.as_ref().map(|f| f.graph.clone()),
    };
    let shape = CommShape {
        nnodes,
        ranks_per_node: ngpus as u32,
        min_comp_cap: sys.min_comp_cap(),
        p2p_local_peer_channels: sys.p2p_local_peer_channels(),
        net_count_by_bw: sys.net_count_by_bw(),
    };
    let connected = connect(&graphs, &shape, env)?;
    lines.extend(connected.lines.iter().cloned());
    Ok(Plan { ring, tree, collnet_chain, collnet_direct, nvls, connected, lines })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::fixture;

    fn has(p: &Plan, text: &str) -> bool {
        p.lines.iter().any(|l| l.text == text)
    }

    #[test]
    fn nvswitch_a100_one_node_gives_12_ring_channels_and_24_coll_channels() {
        let topo = fixture::nvswitch_node(80, 240.0, "AuthenticAMD");
        let p = plan(&topo, 1, &Env::default()).unwrap();
        assert!(has(&p, "Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"));
        assert!(has(&p, "Pattern 1, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"));
        assert!(has(&p, "Channel 00/24 : 0 1 2 3 4 5 6 7"));
        assert!(has(&p, "Ring 00 : 7 -> 0 -> 1"));
        assert!(has(
            &p,
            "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"
        ));
        assert!(p.nvls.is_none() && p.collnet_direct.is_none());
    }

    #[test]
    fn nvswitch_a100_two_nodes_cross_nodes_through_one_nic_per_channel() {
        let topo = fixture::nvswitch_node(80, 240.0, "AuthenticAMD");
        let p = plan(&topo, 2, &Env::default()).unwrap();
        // Eight 24 GB/s NIC paths: 8 channels, each entering and leaving through the same NIC (crossNic 0),
        // GPUs in reverse order after the first (sortNet -1 with equal intra scores).
        let ring = &p.ring.graph;
        assert_eq!((ring.n_channels, ring.bw_inter, ring.cross_nic), (8, 24.0, 0));
        for ch in &ring.channels {
            assert_eq!(ch.inter[0], ch.inter[1]);
        }
        assert!(has(&p, "Channel 00/16 :  0  7  6  5  4  3  2  1  8 15 14 13 12 11 10  9"));
        let nets: std::collections::BTreeSet<i64> = ring.channels.iter().map(|c| c.inter[0]).collect();
        assert_eq!(nets.len(), 8, "every NIC carries one channel");
        // The tree graph is pinned to the ring's 8 channels and its intra bandwidth is raised in pass 2.
        assert_eq!((p.tree.graph.n_channels, p.tree.graph.bw_inter), (8, 24.0));
        assert!(p.tree.graph.bw_intra > 24.0);
        assert!(has(&p, "Tree 0 : -1 -> 0 -> 1/8/-1"));
        assert!(has(&p, "Tree 8 : 8 -> 0 -> 1/-1/-1"));
        assert_eq!(p.connected.counts.coll, Some(16));
        assert!(has(
            &p,
            "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer"
        ));
    }

    #[test]
    fn pcie_node_shares_one_switch() {
        let topo = fixture::pcie_node();
        let p = plan(&topo, 1, &Env::default()).unwrap();
        assert!(has(&p, "Pattern 4, crossNic 0, nChannels 2, bw 12.000000/12.000000, type PIX/PIX, sameChannels 1"));
        assert_eq!(p.connected.counts.coll, Some(4));
        let p = plan(&topo, 2, &Env::default()).unwrap();
        // One 12.5 GB/s NIC: one channel at 12.
        assert!(has(&p, "Pattern 4, crossNic 0, nChannels 1, bw 12.000000/12.000000, type PIX/PIX, sameChannels 1"));
        assert!(has(&p, " 0 : NET/0-0 GPU/0-1000 GPU/0-2000 GPU/0-3000 GPU/0-4000 NET/0-0"));
    }

    #[test]
    fn hopper_nvswitch_adds_nvls_and_doubles_channels_across_nodes() {
        let topo = fixture::nvswitch_node(90, 18.0 * 20.6, "GenuineIntel");
        let p = plan(&topo, 1, &Env::default()).unwrap();
        let nvls = p.nvls.as_ref().unwrap();
        // Inside one node NVLS must pull from every GPU: one head per GPU.
        assert_eq!(nvls.graph.n_channels, 8);
        assert!(has(&p, " 0 : GPU/0-7000"), "NVLS channel lines show only the head");
        assert_eq!(p.connected.counts.nvls, Some(16));
        let p = plan(&topo, 1, &Env::from_pairs([("NCCL_NVLS_ENABLE", "0")])).unwrap();
        assert!(p.nvls.is_none());
    }

    #[test]
    fn dump_file_round_trips_through_graph_file() {
        let dir = std::env::temp_dir().join(format!("collscope-graph-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("graphs.xml");
        let file_s = file.to_str().unwrap();
        let topo = fixture::nvswitch_node(80, 240.0, "AuthenticAMD");
        let p = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_DUMP_FILE", file_s)])).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"8\" speedintra=\"24\" speedinter=\"24\""), "{text}");
        assert!(text.contains("<graph id=\"3\" pattern=\"5\""), "all five graphs are written");
        let q = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_FILE", file_s)])).unwrap();
        assert!(q.lines.iter().any(|l| l.text == "Search 0 : 8 channels loaded from XML graph"));
        assert_eq!(q.ring.graph, p.ring.graph);
        assert_eq!(q.tree.graph, p.tree.graph);
        std::fs::write(&file, "<graphs version=\"1\"><graph id=\"0\" pattern=\"9\"/></graphs>").unwrap();
        let e = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_FILE", file_s)])).unwrap_err().to_string();
        assert!(e.contains("crossnic"), "{e}");
        std::fs::write(&file, "<graphs version=\"1\"><graph id=\"0\" crossnic=\"0\" pattern=\"9\"/></graphs>").unwrap();
        let e = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_FILE", file_s)])).unwrap_err().to_string();
        assert!(e.contains("pattern='9'"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_path_falls_back_to_simple_order() {
        // Two GPUs joined only by 1 GB/s PCI links: below the slowest intra-node speed (3 GB/s).
        let mut b = fixture::Builder::new("thin");
        let cpu = b.cpu(0, "GenuineIntel");
        let g0 = b.gpu(0, 0x1000, 80);
        let g1 = b.gpu(1, 0x2000, 80);
        b.link(g0, cpu, crate::model::LinkType::PCI, 1.0);
        b.link(g1, cpu, crate::model::LinkType::PCI, 1.0);
        let p = plan(&b.finish(), 1, &Env::default()).unwrap();
        assert!(has(&p, "Could not find a path for pattern 4, falling back to simple order"));
        assert!(has(&p, "Pattern 4, crossNic 0, nChannels 1, bw 0.100000/0.100000, type SYS/SYS, sameChannels 1"));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let topo = fixture::pcie_node();
        assert!(plan(&topo, 0, &Env::default()).is_err());
        let e = plan(&topo, 2, &Env::from_pairs([("NCCL_CROSS_NIC", "two")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_CROSS_NIC='two'"), "{e}");
        let e = plan(&topo, 1, &Env::from_pairs([("NCCL_GRAPH_FILE", "/nonexistent/g.xml")])).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/g.xml"), "{e}");
    }
}
