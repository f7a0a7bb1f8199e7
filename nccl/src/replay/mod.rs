//! A log's machine back as NCCL's model: the system NCCL printed at init (`ncclTopoPrint` in NCCL 2.28.9
//! `src/graph/topo.cc`: the tree of nodes and links, then the paths) made into a computed topology the search
//! and tuning can run on ([`rebuild`]), and what NCCL printed set field by field against what the model
//! predicts ([`compare()`]).
//!
//! The print leaves out what the search still needs; each is inferred and said in a note: the GPUs' compute
//! capability (from the NVLink bandwidth per link), GPUDirect RDMA support (from the printed GPU-NIC paths,
//! which NCCL routes through the CPU without it), and the links NCCL keeps both ways but prints once.

pub mod compare;
pub mod printed;
pub mod verify;

pub use compare::{compare, Comparison, Context, Kind};

use crate::topo::{bandwidth, paths, TopoEnv, TopoError};
use collscope_model::topology::GpuAttrs;
use collscope_model::{Link, Node, NodeType, Path, PathType, Topology};
use serde::Serialize;
use std::collections::HashSet;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the topology printed by {0} has no GPU; pass --topo-file with the machine")]
    NoGpu(String),
    #[error(transparent)]
    Topo(#[from] TopoError),
}

/// Facts the print does not carry, when the caller knows them; `None`: inferred.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts {
    /// Compute capability of every GPU (`sm="80"`).
    pub sm: Option<u32>,
    /// Whether GPUs and NICs support GPUDirect RDMA.
    pub gdr: Option<bool>,
}

/// The printed paths against those recomputed from the printed links (NCCL's `ncclTopoComputePaths`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PathCheck {
    pub compared: usize,
    pub matched: usize,
    /// The first differences, `from -> to: log (hops/bw/type), model (...)`.
    pub differences: Vec<String>,
}

/// A topology rebuilt from a print, computed as `topo::build` computes one read from XML.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub topology: Topology,
    pub sm: u32,
    /// Whether the compute capability was inferred rather than given.
    pub sm_inferred: bool,
    pub gdr: bool,
    /// P2P over PCIe refused (inferred from the paths): the model needs `NCCL_P2P_LEVEL=NVB` to keep it.
    pub p2p_refused: bool,
    pub paths: PathCheck,
    pub notes: Vec<String>,
}

/// NVLink bandwidth per link and generation (`ncclTopoNVLinkBw`, NCCL 2.28.9 `src/graph/topo.h`), and at most
/// how many links a GPU of it has: a printed NVLink bandwidth that is a whole number of links names the
/// generation. Volta printed 22 per link before NCCL 2.18 (`SM70_NVLINK_BW`, 20 from 2.18 on).
const NVLINK_GENERATIONS: [(u32, f64, u32); 6] = [
    (100, bandwidth::SM100_NVLINK_BW, 18),
    (90, bandwidth::SM90_NVLINK_BW, 18),
    (80, bandwidth::SM80_NVLINK_BW, 12),
    (70, 22.0, 6),
    (60, bandwidth::SM60_NVLINK_BW, 4),
    (86, bandwidth::SM86_NVLINK_BW, 4),
];

/// Compute capability assumed when nothing in the print names one.
const DEFAULT_SM: u32 = 80;

/// The compute capability a GPU's NVLink bandwidth names, if any.
fn sm_of_nvlink(bw: f64) -> Option<u32> {
    NVLINK_GENERATIONS.iter().find_map(|&(sm, per_link, max)| {
        let links = (bw / per_link).round();
        // Printed with one decimal: a whole number of links to within that.
        (links >= 1.0 && links <= max as f64 && (links * per_link - bw).abs() < 0.05).then_some(sm)
    })
}

fn infer_sm(topo: &Topology) -> (u32, String) {
    let nvl = topo
        .links
        .iter()
        .filter(|l| l.kind == collscope_model::LinkType::NVL && topo.nodes[l.from].kind == NodeType::GPU);
    let mut seen: Vec<u32> = nvl.filter_map(|l| sm_of_nvlink(l.bw)).collect();
    seen.sort_unstable();
    seen.dedup();
    match seen.as_slice() {
        [sm] if *sm == 80 => (
            80,
            "compute capability: SM80 from the NVLink bandwidth per link (20 GB/s; Volta has the same figure \
             since NCCL 2.18: --sm 70 for V100)"
                .into(),
        ),
        [sm] => (*sm, format!("compute capability: SM{sm} from the NVLink bandwidth per link")),
        _ => (
            DEFAULT_SM,
            format!(
                "compute capability: not in the log (no NVLink bandwidth that names a generation); assumed \
                 SM{DEFAULT_SM} (--sm to set it)"
            ),
        ),
    }
}

/// Nodes in NCCL's per-type order: GPUs by rank where printed, everything else by id (the order detection
/// adds them in), so GPU and NET indices are NCCL's.
fn order(printed: &Topology) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..printed.nodes.len()).collect();
    idx.sort_by_key(|&i| {
        let n = &printed.nodes[i];
        let rank = n.gpu.as_ref().and_then(|g| g.rank).unwrap_or(i32::MAX);
        (n.kind, rank, n.id.system, n.id.local)
    });
    idx
}

/// Rebuilds a computed topology from a printed one (a log's `=== System` tree and paths).
pub fn rebuild(printed: &Topology, facts: Facts, env: &TopoEnv) -> Result<Rebuilt, ReplayError> {
    let name = printed.host.clone().unwrap_or_else(|| printed.source.clone());
    if printed.nodes_of(NodeType::GPU).next().is_none() {
        return Err(ReplayError::NoGpu(name));
    }
    crate::topo::check_size(printed, &format!("the `=== System` print of {name}"))?;
    let order = order(printed);
    let mut new_of = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new;
    }
    let mut base = Topology {
        host: printed.host.clone(),
        source: format!("log:{name}"),
        nodes: order.iter().map(|&i| printed.nodes[i].clone()).collect::<Vec<Node>>(),
        ..Topology::default()
    };
    let mut have = HashSet::new();
    for l in &printed.links {
        let (from, to) = (new_of[l.from], new_of[l.to]);
        if have.insert((from, to, l.kind)) {
            base.links.push(Link { from, to, ..l.clone() });
        }
    }
    // NCCL connects nodes both ways (`ncclTopoConnectNodes` twice) but prints a link from NVSwitches, NETs
    // and the CPU side of C2C only where the tree reaches them.
    for l in base.links.clone() {
        if have.insert((l.to, l.from, l.kind)) {
            base.links.push(Link { from: l.to, to: l.from, ..l });
        }
    }
    let mut notes = Vec::new();
    let (sm, sm_inferred) = match facts.sm {
        Some(sm) => (sm, false),
        None => {
            let (sm, note) = infer_sm(&base);
            notes.push(note);
            (sm, true)
        }
    };
    for (dev, n) in (0..).zip(base.nodes.iter_mut().filter(|n| n.kind == NodeType::GPU)) {
        let rank = n.gpu.as_ref().and_then(|g| g.rank).unwrap_or(dev);
        n.gpu = Some(GpuAttrs { dev, rank: Some(rank), sm, gdr: true });
    }
    for n in base.nodes.iter_mut().filter(|n| n.kind == NodeType::NET) {
        let net = n.net.get_or_insert_with(Default::default);
        net.guid.get_or_insert_with(|| format!("{:x}", n.id.local));
    }

    let build = |gdr: bool, env: &TopoEnv| -> Result<(Topology, PathCheck), TopoError> {
        let mut t = base.clone();
        for n in t.nodes.iter_mut() {
            if let Some(g) = n.gpu.as_mut() {
                g.gdr = gdr;
            }
            if let Some(net) = n.net.as_mut() {
                net.gdr = gdr;
            }
        }
        paths::compute(&mut t, env)?;
        let check = check_paths(printed, &new_of, &t);
        Ok((t, check))
    };
    // NVML's P2P refusal (consumer GPUs, VMs without peer access) shows as GPU-GPU paths through the CPU
    // where the PCIe tree allows P2P; NCCL_P2P_LEVEL=NVB refuses the same paths.
    let refused = TopoEnv { p2p_level: Some(PathType::NVB), ..env.clone() };
    let mut p2p_refused = false;
    let env = if env.p2p_level.is_none() && !env.assume_p2p {
        let matched = |e: &TopoEnv| build(facts.gdr.unwrap_or(true), e).map(|(_, c)| c.matched);
        if matched(&refused)? > matched(env)? {
            p2p_refused = true;
            notes.push(
                "P2P: refused over PCIe, from the printed GPU-GPU paths (through the CPU): NVML refuses it on \
                 consumer GPUs and in VMs without peer access (--p2p on asks what if it worked)"
                    .into(),
            );
            &refused
        } else {
            env
        }
    } else {
        env
    };
    let (gdr, (topology, check)) = match facts.gdr {
        Some(g) => (g, build(g, env)?),
        None => {
            let (on, off) = (build(true, env)?, build(false, env)?);
            if off.1.matched > on.1.matched {
                notes.push("GPUDirect RDMA: off, from the printed GPU-NIC paths (routed through the CPU)".into());
                (false, off)
            } else {
                if on.1.matched > off.1.matched {
                    notes.push("GPUDirect RDMA: on, from the printed GPU-NIC paths".into());
                }
                (true, on)
            }
        }
    };
    if check.compared == 0 {
        notes.push("the log prints no paths: the model's paths are computed from the printed links only".into());
    }
    Ok(Rebuilt { topology, sm, sm_inferred, gdr, p2p_refused, paths: check, notes })
}

fn check_paths(printed: &Topology, new_of: &[usize], model: &Topology) -> PathCheck {
    let mut c = PathCheck::default();
    let show = |p: &Path| format!("{}/{:.1}/{}", p.hops, p.bw, p.kind);
    for p in &printed.paths {
        let (from, to) = (new_of[p.from], new_of[p.to]);
        c.compared += 1;
        let m = paths::path(model, from, to);
        if m.is_some_and(|m| m.kind == p.kind && m.hops == p.hops && (m.bw - p.bw).abs() < 0.05) {
            c.matched += 1;
        } else if c.differences.len() < 8 {
            c.differences.push(format!(
                "{} -> {}: log {}, model {}",
                printed.nodes[p.from].name(),
                printed.nodes[p.to].name(),
                show(p),
                m.map_or("none".into(), show)
            ));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;

    /// What the log reader keeps of a print: nodes, the links the tree shows, paths without their links.
    fn as_printed(t: &Topology) -> Topology {
        let mut p = t.clone();
        p.links.retain(|l| {
            let from = p.nodes[l.from].kind;
            !(from == NodeType::NVS || from == NodeType::NET)
        });
        for path in &mut p.paths {
            path.links.clear();
        }
        // The printed order is the tree's, not NCCL's.
        p.nodes.reverse();
        let n = p.nodes.len();
        for l in &mut p.links {
            (l.from, l.to) = (n - 1 - l.from, n - 1 - l.to);
        }
        for path in &mut p.paths {
            (path.from, path.to) = (n - 1 - path.from, n - 1 - path.to);
        }
        for node in &mut p.nodes {
            if let Some(g) = node.gpu.as_mut() {
                g.sm = 0;
                // The tree prints a GPU's rank, not its PCI ids.
                node.pci = None;
            }
        }
        p
    }

    #[test]
    fn a_printed_preset_rebuilds_to_the_same_machine() {
        for name in ["dgx-a100", "dgx-h100", "hgx-pcie"] {
            let t = preset(name);
            let r = rebuild(&as_printed(&t), Facts::default(), &TopoEnv::default()).unwrap();
            assert_eq!(r.paths.compared, t.paths.len(), "{name}");
            assert_eq!(r.paths.matched, r.paths.compared, "{name}: {:?}", r.paths.differences);
            let sm = t.nodes_of(NodeType::GPU).next().unwrap().1.gpu.as_ref().unwrap().sm;
            if name != "hgx-pcie" {
                assert_eq!(r.sm, sm, "{name}: {:?}", r.notes);
            }
            assert_eq!((r.topology.max_bw, r.topology.total_bw), (t.max_bw, t.total_bw), "{name}");
            let gpus = |t: &Topology| t.nodes_of(NodeType::GPU).map(|(_, n)| n.id).collect::<Vec<_>>();
            assert_eq!(gpus(&r.topology), gpus(&t), "{name}: NCCL's GPU order");
        }
    }

    #[test]
    fn sm_comes_from_nvlink_bandwidth_or_is_assumed_with_a_note() {
        assert_eq!(sm_of_nvlink(240.0), Some(80));
        assert_eq!(sm_of_nvlink(370.8), Some(90));
        assert_eq!(sm_of_nvlink(721.8), Some(100));
        assert_eq!(sm_of_nvlink(132.0), Some(70), "six Volta links before NCCL 2.18");
        assert_eq!(sm_of_nvlink(25.0), None);
        assert_eq!(sm_of_nvlink(40.0), Some(80), "two Ampere links, not one Blackwell link (40.1)");
        let r = rebuild(&as_printed(&preset("hgx-pcie")), Facts::default(), &TopoEnv::default()).unwrap();
        assert!(r.sm_inferred && r.notes.iter().any(|n| n.contains("assumed SM80")), "{:?}", r.notes);
        let r =
            rebuild(&as_printed(&preset("hgx-pcie")), Facts { sm: Some(70), gdr: None }, &TopoEnv::default()).unwrap();
        assert!(!r.sm_inferred && r.sm == 70);
    }

    #[test]
    fn gdr_is_read_from_the_printed_paths() {
        let t = preset("hgx-pcie");
        let mut off = t.clone();
        for n in off.nodes.iter_mut() {
            if let Some(net) = n.net.as_mut() {
                net.gdr = false;
            }
        }
        paths::compute(&mut off, &TopoEnv::default()).unwrap();
        let r = rebuild(&as_printed(&off), Facts::default(), &TopoEnv::default()).unwrap();
        assert!(!r.gdr && r.paths.matched == r.paths.compared, "{:?} {:?}", r.notes, r.paths.differences);
        let r = rebuild(&as_printed(&t), Facts::default(), &TopoEnv::default()).unwrap();
        assert!(r.gdr && r.paths.matched == r.paths.compared, "{:?}", r.paths.differences);
    }

    #[test]
    fn p2p_refused_by_nvml_is_read_from_the_printed_paths() {
        let env = TopoEnv::default();
        let t = preset("hgx-pcie");
        let r = rebuild(&as_printed(&t), Facts::default(), &env).unwrap();
        assert!(!r.p2p_refused, "{:?}", r.notes);
        // The same machine with GeForce GPUs, as NCCL computes it.
        let mut consumer = t.clone();
        for n in consumer.nodes.iter_mut().filter(|n| n.kind == NodeType::GPU) {
            n.pci.as_mut().unwrap().device = Some("0x2204".into());
        }
        paths::compute(&mut consumer, &env).unwrap();
        let r = rebuild(&as_printed(&consumer), Facts::default(), &env).unwrap();
        assert!(r.p2p_refused && r.notes.iter().any(|n| n.contains("NVML")), "{:?}", r.notes);
        assert_eq!(r.paths.matched, r.paths.compared, "{:?}", r.paths.differences);
    }

    #[test]
    fn a_print_past_nccls_node_limit_is_refused_naming_it() {
        let mut t = as_printed(&preset("dgx-h100"));
        t.host = Some("node7".into());
        let gpu = t.nodes.iter().find(|n| n.kind == NodeType::GPU).unwrap().clone();
        let have = t.nodes_of(NodeType::GPU).count();
        for i in have..crate::topo::MAX_NODES_PER_TYPE + 1 {
            let mut g = gpu.clone();
            g.id.local = 0x1000_0000 + i as u64;
            t.nodes.push(g);
        }
        let e = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap_err().to_string();
        assert!(e.contains("node7") && e.contains("577 GPU nodes"), "{e}");
        assert!(e.contains("limit of 576 (NCCL_TOPO_MAX_NODES"), "{e}");
    }

    #[test]
    fn a_node_with_more_links_than_nccls_limit_is_refused() {
        let mut t = as_printed(&preset("dgx-h100"));
        let l = t.links[0].clone();
        t.links.extend(std::iter::repeat_n(l, crate::topo::MAX_LINKS_PER_NODE + 1));
        let e = crate::topo::check_size(&t, "print").unwrap_err().to_string();
        assert!(e.contains("NCCL_TOPO_MAX_LINKS") && e.contains("limit of 576"), "{e}");
    }

    #[test]
    fn a_print_without_gpus_is_an_error_naming_it() {
        let mut t = preset("cpu-host");
        t.host = Some("node7".into());
        let e = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap_err().to_string();
        assert!(e.contains("node7") && e.contains("no GPU"), "{e}");
    }
}
