//! What NCCL 2.28.9's `initTransportsRank` (`src/init.cc`) decides between the topology and the transports:
//! the ring, tree, CollNet and NVLS graphs in that order, the optional `NCCL_GRAPH_DUMP_FILE`, the
//! alignment over ranks, and the connect phase, for a communicator of identical nodes.

use super::compute::{compute_on, Request};
use super::connect::{align, connect, CommShape, Connected, Graphs};
use super::system::System;
use super::{xml, Found, GraphError, InfoLine};
use collscope_debug::env::Env;
use collscope_model::{NodeType, Pattern, Topology};

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
    /// The communicator: nodes, ranks per node, smallest compute capability, p2p inputs.
    pub shape: CommShape,
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

    /// Records graphs, channel counts, rings and trees in a snapshot.
    pub fn fill(&self, snap: &mut collscope_model::Snapshot) {
        snap.graphs = self.graphs().into_iter().map(|f| f.graph.clone()).collect();
        snap.channels = self.connected.counts.clone();
        snap.rings = self.connected.rings.clone();
        snap.trees = self.connected.trees.clone();
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

/// The most nodes the model builds a communicator of. NCCL takes any `int`, but the largest NCCL job published
/// with its shape is 16,384 H100s on 2,048 nodes of 8 (Llama 3, "The Llama 3 Herd of Models", 2024); the
/// model's rings, trees and listings grow with nodes (some steps quadratically), and this bound keeps a
/// `topo explain` or `log explain` within seconds and a few hundred MB.
pub const MAX_MODEL_NODES: u32 = 2048;
/// The most ranks (nodes x GPUs per node) the model builds a communicator of: [`MAX_MODEL_NODES`] nodes of 16
/// GPUs, twice the largest published job, for the same reason.
pub const MAX_MODEL_RANKS: u64 = 32_768;

/// Computes graphs and channels for `nnodes` nodes shaped like `topo`, one rank per GPU.
pub fn plan(topo: &Topology, nnodes: u32, env: &Env) -> Result<Plan, GraphError> {
    if nnodes == 0 {
        return Err(GraphError::Input("the node count must be at least 1".into()));
    }
    if nnodes > MAX_MODEL_NODES {
        return Err(GraphError::Input(format!(
            "{nnodes} nodes: the model builds at most {MAX_MODEL_NODES} (collscope's bound, the largest NCCL job \
             published; NCCL itself takes any int)"
        )));
    }
    let sys = System::new(topo, nnodes, &crate::topo::TopoEnv::from_env(env)?)?;
    let ngpus = sys.ngpus();
    let nranks = u64::from(nnodes) * ngpus as u64;
    if nranks > MAX_MODEL_RANKS {
        return Err(GraphError::Input(format!(
            "{nnodes} nodes x {ngpus} GPUs = {nranks} ranks: the model builds at most {MAX_MODEL_RANKS} ranks \
             (collscope's bound: 2,048 nodes of 16 GPUs, twice the largest NCCL job published)"
        )));
    }
    let mut lines = Vec::new();
    let run = |req: &Request, lines: &mut Vec<InfoLine>| -> Result<Found, GraphError> {
        let f = compute_on(sys.clone(), req, env)?;
        lines.extend(f.lines.iter().cloned());
        Ok(f)
    };
    let ring = run(&Request::ring(), &mut lines)?;
    let tree = run(&Request::tree(ring.graph.n_channels as usize), &mut lines)?;

    // CollNet needs a network that supports it (the plugin's collective support), whether or not the NETs
    // take part in this communicator's search.
    let collnet_net = topo.nodes_of(NodeType::NET).any(|(_, n)| n.net.as_ref().is_some_and(|a| a.coll));
    let collnet = env.int("NCCL_COLLNET_ENABLE", 0)? == 1 && collnet_net;
    let (collnet_chain, collnet_direct) = if collnet {
        let chain = run(&Request::collnet_chain(ring.graph.n_channels as usize), &mut lines)?;
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
        let cd = collnet_direct.clone().unwrap_or_else(|| Found::none(4, Pattern::CollnetDirect));
        let cc = collnet_chain.clone().unwrap_or_else(|| Found::none(2, Pattern::Tree));
        let nv = nvls.clone().unwrap_or_else(|| Found::none(3, Pattern::Nvls));
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
    // CollNet stays on only if its chain graph was found and the communicator spans enough nodes.
    let collnet_threshold = env.int("NCCL_COLLNET_NODE_THRESHOLD", 2)?;
    let chain = collnet_chain.as_ref().filter(|f| f.graph.n_channels > 0);
    if chain.is_some() && (nnodes as i64) < collnet_threshold {
        lines.push(InfoLine::init(format!(
            "Communicator has {nnodes} nodes which is less than CollNet node threshold {collnet_threshold}, disabling CollNet"
        )));
    }
    let graphs = Graphs {
        ring: ring_g,
        tree: tree_g,
        nvls: nvls.as_ref().map(|f| f.graph.clone()),
        collnet_direct: collnet_direct.as_ref().map(|f| f.graph.clone()),
        collnet_chain: chain.filter(|_| nnodes as i64 >= collnet_threshold).map(|f| f.graph.clone()),
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
    // From here on (tuning, transports) NCCL works with the aligned graphs; the lines stay as printed.
    let (mut ring, mut tree) = (ring, tree);
    ring.graph = graphs.ring;
    tree.graph = graphs.tree;
    Ok(Plan { ring, tree, collnet_chain, collnet_direct, nvls, shape, connected, lines })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;

    fn has(p: &Plan, text: &str) -> bool {
        p.lines.iter().any(|l| l.text == text)
    }

    #[test]
    fn a_communicator_past_the_models_bounds_is_refused_before_any_work() {
        let e = plan(&preset("dgx-h100"), MAX_MODEL_NODES + 1, &Env::default()).unwrap_err().to_string();
        assert!(e.contains("2049 nodes") && e.contains("at most 2048"), "{e}");
        // 2,048 nodes of 32 GPUs pass the node bound but not the rank bound.
        let mut wide = preset("dgx-h100");
        let gpus: Vec<_> = wide.nodes.iter().filter(|n| n.gpu.is_some()).cloned().collect();
        for (i, mut g) in gpus.into_iter().cycle().take(24).enumerate() {
            g.id.local += 0x100_0000 * (i as u64 + 1);
            wide.nodes.push(g);
        }
        let e = plan(&wide, MAX_MODEL_NODES, &Env::default()).unwrap_err().to_string();
        assert!(e.contains("= 65536 ranks") && e.contains("at most 32768 ranks"), "{e}");
    }

    #[test]
    fn dgx_a100_one_node() {
        let p = plan(&preset("dgx-a100"), 1, &Env::default()).unwrap();
        assert!(has(&p, "Channel 00/24 : 0 1 2 3 4 5 6 7"));
        assert!(has(&p, "Ring 00 : 7 -> 0 -> 1"));
        assert!(has(
            &p,
            "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"
        ));
        assert!(p.nvls.is_none() && p.collnet_direct.is_none());
        let mut snap = collscope_model::Snapshot::new(collscope_model::Source::Model { topology: "dgx-a100".into() });
        p.fill(&mut snap);
        assert_eq!(snap.graphs.len(), 2);
        assert_eq!(snap.channels.coll, Some(24));
        assert_eq!(snap.rings.len(), 24);
        assert_eq!(snap.trees.len(), 24 * 8);
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["graphs"][0]["n_channels"], 12);
        assert_eq!(json["graphs"][0]["type_intra"], "NVL");
    }

    #[test]
    fn dgx_a100_two_nodes_rings_and_trees_cross_nodes() {
        let p = plan(&preset("dgx-a100"), 2, &Env::default()).unwrap();
        // Reference text 000 prints `Channel 00/24 :    0   1 ...` and `Ring 00 : 15 -> 0 -> 1`; NCCL 2.28.9's search
        // gives 8 ring channels here (see compute.rs) ordered by the NVSwitch neighbour rule, and rings.cc pads to
        // the width of the largest rank. Rings still leave node 0 from its last GPU into node 1's first.
        assert!(has(&p, "Channel 00/16 :  0  7  6  5  4  3  2  1  8 15 14 13 12 11 10  9"));
        assert!(has(&p, "Ring 00 : 9 -> 0 -> 7"));
        assert!(has(&p, "Ring 00 : 1 -> 8 -> 15"));
        // As in the text: rank 0 roots tree 0 with node 1's head as its second child; tree 8 (the mirror) is rooted
        // on node 1.
        assert!(has(&p, "Tree 0 : -1 -> 0 -> 1/8/-1"));
        assert!(has(&p, "Tree 8 : 8 -> 0 -> 1/-1/-1"));
        assert!(has(&p, "Tree 8 : -1 -> 8 -> 9/0/-1"));
        assert!(has(
            &p,
            "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer"
        ));
        assert_eq!(p.connected.tree_depth, 8);
    }

    #[test]
    fn dgx_h100_nvls_and_crossnic_rings() {
        let p = plan(&preset("dgx-h100"), 1, &Env::default()).unwrap();
        assert_eq!(p.connected.counts.nvls, Some(16));
        assert!(has(
            &p,
            "24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer"
        ));
        let p = plan(&preset("dgx-h100"), 2, &Env::default()).unwrap();
        // crossNic 2: odd nodes swap channel pairs, so node 1 walks channel 1's order.
        assert!(has(&p, "Channel 00/16 :  0  7  6  5  4  3  2  1  9 10 11 12 13 14 15  8"));
        // Every GPU heads an NVLS channel; heads pair up across the two nodes' tree (nRanks+1+head below).
        assert!(has(&p, "NVLS Head  0:  0  8"));
        assert!(has(&p, "NVLS Head  7:  7 15"));
        assert!(has(&p, "NVLS Trees : 17/8/-1->0->-1 17/-1/-1->0->8"));
        assert!(has(&p, "NVLS Trees : 17/-1/-1->8->0 17/0/-1->8->-1"));
        let p = plan(&preset("dgx-h100"), 1, &Env::from_pairs([("NCCL_NVLS_ENABLE", "0")])).unwrap();
        assert!(p.nvls.is_none());
    }

    #[test]
    fn channel_limits_apply_after_duplication() {
        let env = Env::from_pairs([("NCCL_MAX_NCHANNELS", "6")]);
        let p = plan(&preset("dgx-a100"), 1, &env).unwrap();
        assert_eq!(p.connected.counts.coll, Some(6));
        assert!(has(
            &p,
            "6 coll channels, 6 collnet channels, 0 nvls channels, 8 p2p channels, 8 p2p channels per peer"
        ));
    }

    #[test]
    fn dump_file_round_trips_through_graph_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("graphs.xml");
        let file_s = file.to_str().unwrap();
        let topo = preset("dgx-a100");
        let p = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_DUMP_FILE", file_s)])).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with(
                "<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"8\" speedintra=\"24\" speedinter=\"24\" latencyinter=\"0\" typeintra=\"NVL\" typeinter=\"PXB\" samechannels=\"0\">\n    <channel>\n      <net dev=\"0\"/>\n      <gpu dev=\"0\"/>\n      <gpu dev=\"0x7\"/>"
            ),
            "{text}"
        );
        assert_eq!(text.matches("<graph ").count(), 5, "ring, tree, collnet direct, collnet chain, NVLS");
        let q = plan(&topo, 2, &Env::from_pairs([("NCCL_GRAPH_FILE", file_s)])).unwrap();
        assert!(has(&q, "Search 0 : 8 channels loaded from XML graph"));
        assert_eq!(q.ring.graph, p.ring.graph);
        assert_eq!(q.tree.graph, p.tree.graph);
        assert_eq!(q.connected, p.connected);
    }

    #[test]
    fn bad_graph_files_and_env_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.xml");
        let file_s = file.to_str().unwrap();
        let topo = preset("dgx-a100");
        let cases = [
            ("<graphs version=\"1\"><graph id=\"0\" pattern=\"4\"/></graphs>", "no attribute 'crossnic'"),
            ("<graphs version=\"1\"><graph id=\"0\" crossnic=\"0\" pattern=\"9\"/></graphs>", "pattern='9'"),
            ("<graphs version=\"2\"></graphs>", "version 2"),
            ("<graphs version=\"1\"><graph id=\"0\"", "not valid XML"),
            ("<topology/>", "no <graphs>"),
        ];
        for (text, want) in cases {
            std::fs::write(&file, text).unwrap();
            let e = plan(&topo, 1, &Env::from_pairs([("NCCL_GRAPH_FILE", file_s)])).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(file_s), "{text}: {e}");
        }
        assert!(plan(&topo, 0, &Env::default()).is_err());
        let e = plan(&topo, 2, &Env::from_pairs([("NCCL_CROSS_NIC", "two")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_CROSS_NIC='two'"), "{e}");
        let e = plan(&topo, 1, &Env::from_pairs([("NCCL_GRAPH_FILE", "/nonexistent/g.xml")])).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/g.xml"), "{e}");
        let e = plan(&preset("cpu-host"), 2, &Env::default()).unwrap_err().to_string();
        assert!(e.contains("no GPU"), "{e}");
    }

    #[test]
    fn geforce_gpus_ring_through_the_cpu() {
        // NVML refuses P2P between GeForce GPUs, so NCCL's graph goes through the CPU.
        let t = crate::graph::testing::from_xml(&crate::topo::tests::geforce_box());
        let plan = plan(&t, 1, &Env::default()).unwrap();
        assert_eq!(plan.ring.graph.type_intra, collscope_model::PathType::PHB, "{:?}", plan.ring.graph);
    }
}

#[cfg(test)]
mod collnet_tests {
    use super::*;
    use crate::graph::testing::from_xml;

    #[test]
    fn collnet_graphs_with_a_collnet_network() {
        let text = crate::topo::presets::text("dgx-a100").unwrap().replace("<net ", "<net coll=\"1\" ");
        let topo = from_xml(&text);
        let env = Env::from_pairs([("NCCL_COLLNET_ENABLE", "1")]);
        let p = plan(&topo, 2, &env).unwrap();
        let chain = &p.collnet_chain.as_ref().unwrap().graph;
        // The chain enters and leaves each node through the same GPU, whose NIC is on its own PCI switch (PIX).
        assert_eq!(
            (chain.pattern, chain.n_channels, chain.type_inter),
            (Pattern::Tree, 8, collscope_model::PathType::PIX)
        );
        let direct = &p.collnet_direct.as_ref().unwrap().graph;
        // CollNet Direct: at most NCCL_MAX_DIRECT_ARITY+1 = 8 heads, each GPU heading one channel.
        assert_eq!(direct.n_channels, 8);
        let heads: std::collections::BTreeSet<i32> = direct.channels.iter().map(|c| c.intra[0]).collect();
        assert_eq!(heads.len(), 8);
        assert!(p.lines.iter().any(|l| l.text.starts_with("Pattern 6, crossNic 0, nChannels 8, ")));
        // The chain is faster inside the node than across it: 8 x 2 duplicated + 8 = 24 coll channels.
        assert_eq!(p.connected.counts.coll, Some(24));
        let one = plan(&topo, 1, &env).unwrap();
        assert!(one.lines.iter().any(
            |l| l.text == "Communicator has 1 nodes which is less than CollNet node threshold 2, disabling CollNet"
        ));
        // Without NCCL_COLLNET_ENABLE=1 neither graph is computed.
        assert!(plan(&topo, 2, &Env::default()).unwrap().collnet_direct.is_none());
    }
}

#[cfg(test)]
mod one_gpu_tests {
    use super::*;
    use crate::graph::testing::from_xml;

    const ONE_GPU: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="80" rank="0" gdr="1"/></pci>
    <pci busid="0000:02:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16"><nic><net name="mlx5_0" dev="0" speed="100000" port="1" guid="0x1" gdr="1"/></nic></pci>
  </cpu>
</system>"#;

    #[test]
    fn single_gpu_communicator() {
        let topo = from_xml(ONE_GPU);
        let p = plan(&topo, 1, &Env::default()).unwrap();
        // A lone GPU's path to itself is LOC at 5000 GB/s: the search reaches maxChannels (32) at the first
        // speed, postset doubles it to 64.
        assert_eq!(
            p.lines[0].text,
            "Pattern 4, crossNic 0, nChannels 32, bw 40.000000/40.000000, type LOC/PIX, sameChannels 1"
        );
        assert!(p.lines.iter().any(|l| l.text == "Channel 63/64 : 0"));
        assert_eq!(
            p.lines.last().unwrap().text,
            "64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, 64 p2p channels per peer"
        );
    }

    #[test]
    fn one_gpu_per_node_trees_are_the_node_trees() {
        let topo = from_xml(ONE_GPU);
        let p = plan(&topo, 5, &Env::default()).unwrap();
        assert_eq!(p.tree.graph.pattern, Pattern::Tree, "one GPU: trees are plain trees");
        let n = p.ring.graph.n_channels;
        let t = |ch: u32, r: u32| p.connected.trees.iter().find(|t| t.channel == ch && t.rank == r).unwrap().clone();
        // First tree over 5 nodes: 0 -> 4 -> 2 -> {1, 3}; second tree shifted by one: 1 -> 0 -> 3 -> {2, 4}.
        assert_eq!((t(0, 0).up, t(0, 0).down.clone()), (-1, vec![4, -1, -1]));
        assert_eq!((t(0, 2).up, t(0, 2).down.clone()), (4, vec![1, 3, -1]));
        assert_eq!((t(n, 1).up, t(n, 1).down.clone()), (-1, vec![0, -1, -1]));
        assert_eq!((t(n, 3).up, t(n, 3).down.clone()), (0, vec![2, 4, -1]));
        assert_eq!(p.connected.rings[0].order, vec![0, 1, 2, 3, 4]);
        assert_eq!(p.connected.tree_depth, 2);
    }
}
