//! A log's machine back as NCCL's model: the system NCCL printed at init (`ncclTopoPrint` in NCCL 2.28.9
//! `src/graph/topo.cc`: the tree of nodes and links, then the paths) made into a computed topology the search
//! and tuning can run on ([`rebuild`]), and what NCCL printed set field by field against what the model
//! predicts ([`compare()`]).
//!
//! The print leaves out what the search still needs; each is inferred and said in a note: the GPUs' compute
//! capability (from how many NVLinks of the release's bandwidth a GPU has), GPUDirect RDMA support (from the
//! printed GPU-NIC paths, which NCCL routes through the CPU without it), and the links NCCL keeps both ways but
//! prints once. A partial print is completed as little as the model needs, each step in a note: global ranks
//! renumbered from 0, parts cut above their CPU hung from one. What the print shows that shapes NCCL's choices
//! (hidden PCIe speeds, slow NICs, GPUs far from any NIC) is a [`MachineFinding`].

pub mod compare;
pub mod printed;
pub mod verify;

pub use compare::{compare, Comparison, Context, Kind};

use crate::topo::{bandwidth, paths, TopoEnv, TopoError};
use crate::VersionProfile;
use collscope_model::topology::GpuAttrs;
use collscope_model::{Link, LinkType, Node, NodeType, Path, PathType, Snapshot, Topology};
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

/// What a finding from the machine print is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Every PCI link reads one implausibly slow figure: the platform (a VM) hides the link speeds.
    HiddenPciSpeed,
    /// A GPU's or NIC's PCI link reads slower than PCIe Gen3 x4, among faster ones.
    SlowPci,
    /// A NIC slower than the fastest NIC of the host.
    SlowNic,
    /// GPUs whose closest NIC is through the CPU.
    NoNearNic,
}

/// A fact of the printed machine that shapes what NCCL does with it, and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineFinding {
    pub kind: FindingKind,
    pub message: String,
}

/// A PCI link slower than PCIe Gen3 x4 (3 GB/s as NCCL computes it: width x 60 / 80): no GPU or NIC slot is
/// that narrow, so the figure is what the platform reports, not the link.
const SLOW_PCI_BW: f64 = 3.0;

/// Findings from the printed machine (`printed`, the log's nodes, links and paths) and, where it prints no
/// GPU-NET path, those the model computes on it (`model`, whose GPUs had the ranks in `printed_ranks`).
fn findings(printed: &Topology, model: &Topology, printed_ranks: &[Option<i32>]) -> Vec<MachineFinding> {
    let mut out = Vec::new();
    let pci: Vec<&Link> = printed.links.iter().filter(|l| l.kind == LinkType::PCI).collect();
    let endpoint = |l: &Link| {
        [l.from, l.to]
            .into_iter()
            .find(|&i| matches!(printed.nodes[i].kind, NodeType::GPU | NodeType::NIC | NodeType::NET))
    };
    let slow: Vec<&Link> = pci.iter().copied().filter(|l| l.bw < SLOW_PCI_BW).collect();
    if let Some(first) = slow.first().filter(|_| slow.len() == pci.len() && pci.len() > 1) {
        let same = pci.iter().all(|l| (l.bw - first.bw).abs() < 0.05);
        let what = if same { format!("PCI[{:.1}]", first.bw) } else { format!("under {SLOW_PCI_BW:.1} GB/s") };
        out.push(MachineFinding {
            kind: FindingKind::HiddenPciSpeed,
            message: format!(
                "PCIe speeds hidden: every PCI link in the print reads {what}, slower than any GPU or NIC slot \
                 (PCIe Gen3 x4 reads {SLOW_PCI_BW:.1}): the platform (typically a VM's emulated PCIe) reports no real \
                 link speed, and NCCL's search and tuning use these figures; give NCCL the real machine with \
                 NCCL_TOPO_FILE (collscope log explain --topo-file to model it)"
            ),
        });
    } else {
        let mut names: Vec<String> = slow
            .iter()
            .filter_map(|l| endpoint(l).map(|i| format!("{} PCI[{:.1}]", printed.nodes[i].name(), l.bw)))
            .collect();
        // The log reader keeps a PCI link both ways.
        names.sort();
        names.dedup();
        if !names.is_empty() {
            out.push(MachineFinding {
                kind: FindingKind::SlowPci,
                message: format!(
                    "slow PCIe: {} read slower than PCIe Gen3 x4 ({SLOW_PCI_BW:.1} GB/s) while other links are \
                     faster: a narrow or downtrained slot, or a link speed the platform misreports",
                    names.join(", ")
                ),
            });
        }
    }

    let nics: Vec<(String, f64)> = printed
        .nodes_of(NodeType::NET)
        .filter_map(|(_, n)| {
            let net = n.net.as_ref()?;
            let name = if net.name.is_empty() { n.name() } else { format!("{} ({})", n.name(), net.name) };
            Some((name, net.bw))
        })
        .collect();
    let fastest = nics.iter().map(|(_, bw)| *bw).fold(0.0, f64::max);
    let slower: Vec<String> = nics
        .iter()
        .filter(|(_, bw)| *bw > 0.0 && *bw < fastest * 0.99)
        .map(|(name, bw)| format!("{name} {bw:.1} GB/s ({:.0} Gb/s)", bw * 8.0))
        .collect();
    if !slower.is_empty() {
        out.push(MachineFinding {
            kind: FindingKind::SlowNic,
            message: format!(
                "NICs slower than their peers: {} against {fastest:.1} GB/s ({:.0} Gb/s); NCCL's search gives each \
                 channel the bandwidth of the NIC it crosses, so rings and trees through a slow NIC run at its speed \
                 (NCCL_IB_HCA or NCCL_NET_DEVICES to leave it out)",
                slower.join(", "),
                fastest * 8.0
            ),
        });
    }

    // What NCCL computed where the log prints it, else what the model computes from the printed links.
    let printed_far =
        far_gpus(printed, printed.nodes_of(NodeType::GPU).map(|(i, n)| (i, n.gpu.as_ref().and_then(|g| g.rank))));
    let (far, from) = match printed_far {
        Some(far) => (far, "the printed paths"),
        None => {
            let gpus = model.nodes_of(NodeType::GPU).map(|(i, _)| i).zip(printed_ranks.iter().copied());
            (far_gpus(model, gpus).unwrap_or_default(), "the paths the model computes from the printed links")
        }
    };
    if !far.is_empty() {
        out.push(MachineFinding {
            kind: FindingKind::NoNearNic,
            message: format!(
                "GPUs with no near NIC: {} reach their closest NIC only through the CPU or a peer GPU (PXN), from \
                 {from}: their network traffic crosses the host bridge, and GPUDirect RDMA needs PXB or closer by \
                 default (NCCL_NET_GDR_LEVEL)",
                far.join(", ")
            ),
        });
    }
    out
}

/// The GPUs of `t` (node index, rank) whose best path to a NET is farther than P2C, by `t`'s paths; `None`
/// when `t` holds no GPU-NET path to judge from.
fn far_gpus(t: &Topology, gpus: impl Iterator<Item = (usize, Option<i32>)>) -> Option<Vec<String>> {
    let nets: Vec<usize> = t.nodes_of(NodeType::NET).map(|(i, _)| i).collect();
    let mut judged = false;
    let mut far = Vec::new();
    for (g, rank) in gpus {
        // NCCL prints a GPU's paths to GPUs and NETs, and a NET's to GPUs: either way counts.
        let between = |p: &&Path| (p.from == g && nets.contains(&p.to)) || (p.to == g && nets.contains(&p.from));
        let best = t.paths.iter().filter(between).map(|p| p.kind).min();
        let Some(best) = best else { continue };
        judged = true;
        if best > PathType::P2C {
            let rank = rank.map_or(String::new(), |r| format!(" rank {r}"));
            far.push(format!("{}{rank} ({best})", t.nodes[g].name()));
        }
    }
    judged.then_some(far)
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
    /// The rank the print gave each of the model's GPUs (index: the model's rank), where it gave one.
    pub printed_ranks: Vec<Option<i32>>,
    /// What the print shows of the machine that NCCL's choices depend on.
    pub findings: Vec<MachineFinding>,
    pub notes: Vec<String>,
}

/// The generations a printed NVLink bandwidth can name, in the order preferred when several fit, each with
/// how many NVLinks one GPU of it has (P100 4, V100 6, A100 12, A40 4, H100 and B200 18). The bandwidth per
/// link is the release's (`ncclTopoNVLinkBw` over `SM*_NVLINK_BW`, `src/graph/topo.h`, per tag in
/// [`VersionProfile::nvlink_bw`]).
const NVLINK_GENERATIONS: [(u32, u32); 6] = [(80, 12), (90, 18), (100, 18), (70, 6), (60, 4), (86, 4)];

/// Compute capability assumed when nothing in the print names one.
const DEFAULT_SM: u32 = 80;

/// The generations whose per-link bandwidth in `profile` makes `bw` (one GPU's NVLink bandwidth, summed over
/// its printed links, each printed with one decimal) a whole number of links it can have, with that number;
/// a GPU using all its links first.
fn sms_of_nvlink(bw: f64, printed_links: usize, profile: &VersionProfile) -> Vec<(u32, u32)> {
    let mut fit: Vec<(u32, u32, u32)> = NVLINK_GENERATIONS
        .iter()
        .filter_map(|&(sm, max)| {
            let per_link = profile.nvlink_bw(sm);
            let links = (bw / per_link).round();
            let fits = links >= 1.0
                && links <= f64::from(max)
                && (links * per_link - bw).abs() < 0.05 * printed_links.max(1) as f64;
            fits.then_some((sm, links as u32, max))
        })
        .collect();
    // Stable: a generation whose every link is in use, then the preferred order.
    fit.sort_by_key(|&(_, links, max)| links != max);
    fit.into_iter().map(|(sm, links, _)| (sm, links)).collect()
}

fn infer_sm(topo: &Topology, profile: &VersionProfile) -> (u32, String) {
    let mut common: Option<Vec<(u32, u32)>> = None;
    for (g, _) in topo.nodes_of(NodeType::GPU) {
        let nvl: Vec<f64> =
            topo.links.iter().filter(|l| l.from == g && l.kind == LinkType::NVL).map(|l| l.bw).collect();
        if nvl.is_empty() {
            continue;
        }
        let fit = sms_of_nvlink(nvl.iter().sum(), nvl.len(), profile);
        common = Some(match common {
            None => fit,
            Some(c) => c.into_iter().filter(|(sm, _)| fit.iter().any(|f| f.0 == *sm)).collect(),
        });
    }
    let v = profile.version;
    match common.as_deref() {
        Some([(sm, links), rest @ ..]) => {
            let others: Vec<String> = rest.iter().map(|(sm, _)| format!("SM{sm}")).collect();
            let also = if others.is_empty() {
                String::new()
            } else {
                format!("; {} fit too (--sm sets it)", others.join(", "))
            };
            (
                *sm,
                format!(
                    "compute capability: SM{sm} from {links} NVLinks x {} GB/s per GPU (NCCL {v}'s per-link \
                     figure){also}",
                    profile.nvlink_bw(*sm)
                ),
            )
        }
        _ => (
            DEFAULT_SM,
            format!(
                "compute capability: not in the log (no NVLink bandwidth that is a whole number of one \
                 generation's links at NCCL {v}); assumed SM{DEFAULT_SM} (--sm to set it)"
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
    let mut notes = Vec::new();
    let whole = attach_orphans(printed, &mut notes);
    let order = order(&whole);
    let mut new_of = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new;
    }
    let mut base = Topology {
        host: printed.host.clone(),
        source: format!("log:{name}"),
        nodes: order.iter().map(|&i| whole.nodes[i].clone()).collect::<Vec<Node>>(),
        ..Topology::default()
    };
    let mut have = HashSet::new();
    for l in &whole.links {
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
    let (sm, sm_inferred) = match facts.sm {
        Some(sm) => (sm, false),
        None => {
            let (sm, note) = infer_sm(&base, &env.profile);
            notes.push(note);
            (sm, true)
        }
    };
    // The model's ranks are the node's, 0 up in the printed ranks' order (connect numbers ranks node-major).
    let mut printed_ranks = Vec::new();
    for (dev, n) in (0..).zip(base.nodes.iter_mut().filter(|n| n.kind == NodeType::GPU)) {
        printed_ranks.push(n.gpu.as_ref().and_then(|g| g.rank));
        n.gpu = Some(GpuAttrs { dev, rank: Some(dev), sm, gdr: true });
    }
    notes.extend(renumbered(&printed_ranks));
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
    let findings = findings(printed, &topology, &printed_ranks);
    Ok(Rebuilt { topology, sm, sm_inferred, gdr, p2p_refused, paths: check, printed_ranks, findings, notes })
}

/// Nodes joined by the printed tree's links (PCI, SYS, NET, C2C: not NVLinks, which NCCL's paths to a CPU do
/// not cross), as a union-find's roots.
fn parts(t: &Topology) -> Vec<usize> {
    fn root(up: &mut [usize], mut i: usize) -> usize {
        while up[i] != i {
            up[i] = up[up[i]];
            i = up[i];
        }
        i
    }
    let n = t.nodes.len();
    let mut up: Vec<usize> = (0..n).collect();
    for l in t.links.iter().filter(|l| l.from < n && l.to < n && l.kind != LinkType::NVL) {
        let (a, b) = (root(&mut up, l.from), root(&mut up, l.to));
        up[a.max(b)] = a.min(b);
    }
    (0..up.len()).map(|i| root(&mut up, i)).collect()
}

/// A print that starts mid-tree (an excerpt, or lines lost) leaves GPUs and NICs under no CPU, where NCCL's
/// paths lead (`ncclTopoComputePaths` routes refused P2P and GDR through the GPU's local CPU). Each such part
/// hangs, by its first printed node (the top of what was printed), from the first printed CPU (one is added
/// where none was printed) over a PCI link as fast as the fastest printed one; a note says so.
fn attach_orphans(printed: &Topology, notes: &mut Vec<String>) -> Topology {
    let mut t = printed.clone();
    let part = parts(&t);
    let has =
        |kinds: &[NodeType], p: usize| (0..t.nodes.len()).any(|i| part[i] == p && kinds.contains(&t.nodes[i].kind));
    // Roots are the smallest index of their part: the first printed node.
    let mut tops: Vec<usize> = (0..t.nodes.len()).filter(|&i| part[i] == i).collect();
    tops.retain(|&p| !has(&[NodeType::CPU], p) && has(&[NodeType::GPU, NodeType::NET], p));
    if tops.is_empty() {
        return t;
    }
    let first_cpu = t.nodes_of(NodeType::CPU).next().map(|(i, _)| i);
    let (cpu, added) = match first_cpu {
        Some(i) => (i, false),
        None => {
            t.nodes.push(Node {
                kind: NodeType::CPU,
                id: collscope_model::NodeId { system: 0, local: 0 },
                cpu: None,
                pci: None,
                gpu: None,
                net: None,
            });
            (t.nodes.len() - 1, true)
        }
    };
    let bw = t.links.iter().filter(|l| l.kind == LinkType::PCI).map(|l| l.bw).fold(0.0, f64::max);
    let bw = if bw > 0.0 { bw } else { bandwidth::PCI_BW };
    for &top in &tops {
        for (from, to) in [(cpu, top), (top, cpu)] {
            t.links.push(Link { from, to, kind: LinkType::PCI, bw });
        }
    }
    let mut names: Vec<String> = tops.iter().take(4).map(|&i| t.nodes[i].name()).collect();
    if tops.len() > names.len() {
        names.push(format!("{} more", tops.len() - names.len()));
    }
    let under = if added {
        format!("a CPU added ({}: the print names none)", t.nodes[cpu].name())
    } else {
        t.nodes[cpu].name()
    };
    notes.push(format!(
        "partial print: {} under no CPU (the print starts mid-tree or lost lines); the model hangs them from {under} \
         over PCI links of {bw:.1} GB/s, assumed (the log's whole `=== System` print, or --topo-file, gives the \
         machine)",
        names.join(", ")
    ));
    t
}

/// A note when the print's ranks are not the model's 0..n: global ranks (a host past the communicator's
/// first), gaps (a partial print) or none.
fn renumbered(printed: &[Option<i32>]) -> Option<String> {
    if printed.iter().enumerate().all(|(i, r)| *r == i32::try_from(i).ok()) {
        return None;
    }
    let shown: Vec<String> = printed.iter().map(|r| r.map_or("?".into(), |r| r.to_string())).collect();
    let n = printed.len();
    Some(format!(
        "ranks: the print names its {n} GPU(s) by rank {} (global ranks of a host past the communicator's \
         first, or a partial print); the model numbers them 0-{} in that order, and the log's graphs are \
         compared so",
        shown.join(" "),
        n - 1
    ))
}

/// The log's graphs of `host` in the model's numbering ([`Rebuilt::printed_ranks`]): a rank the print gave a
/// GPU becomes that GPU's model rank; one it lacks is unknown (-1).
pub fn renumber_graphs(log: &mut Snapshot, host: Option<&str>, printed_ranks: &[Option<i32>]) {
    if printed_ranks.iter().enumerate().all(|(i, r)| *r == i32::try_from(i).ok()) {
        return;
    }
    let model_rank =
        |r: i32| printed_ranks.iter().position(|p| *p == Some(r)).and_then(|m| i32::try_from(m).ok()).unwrap_or(-1);
    for g in log.graphs.iter_mut().filter(|g| host.is_none() || g.host.as_deref() == host) {
        for c in &mut g.channels {
            for r in c.intra.iter_mut().filter(|r| **r >= 0) {
                *r = model_rank(*r);
            }
        }
    }
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
    fn sm_comes_from_link_count_bandwidth_and_release_or_is_assumed_with_a_note() {
        let sms = |bw: f64, links: usize, v: &str| -> Vec<u32> {
            sms_of_nvlink(bw, links, &v.parse().unwrap()).into_iter().map(|(sm, _)| sm).collect()
        };
        // NCCL 2.28.9 `src/graph/topo.h`: SM80 20.0, SM90 20.6, SM100 40.1 per link.
        assert_eq!(sms(240.0, 1, "2.28.9"), [80]);
        assert_eq!(sms(370.8, 1, "2.28.9"), [90]);
        assert_eq!(sms(721.8, 1, "2.28.9"), [100]);
        // Six links of 20: every link of a V100, half of an A100's.
        assert_eq!(sms(120.0, 4, "2.28.9"), [70, 80]);
        assert_eq!(sms(25.0, 1, "2.28.9"), Vec::<u32>::new());
        assert_eq!(sms(40.0, 1, "2.28.9"), [80, 70], "two Ampere links, not one Blackwell link (40.1)");
        // v2.19.4-1: SM90_NVLINK_BW 20.0; 18 links of it are a Hopper's, never an Ampere's 12.
        assert_eq!(sms(360.0, 1, "2.19.4"), [90, 100]);
        // v2.17.1-1: 22.0 per link for Volta and Ampere, and Hopper (no SM90 figure yet).
        assert_eq!(sms(132.0, 6, "2.17.1"), [70, 80, 90, 100]);
        assert_eq!(sms(264.0, 1, "2.17.1"), [80, 90, 100]);

        let r = rebuild(&as_printed(&preset("hgx-pcie")), Facts::default(), &TopoEnv::default()).unwrap();
        assert!(r.sm_inferred && r.notes.iter().any(|n| n.contains("assumed SM80")), "{:?}", r.notes);
        let r =
            rebuild(&as_printed(&preset("hgx-pcie")), Facts { sm: Some(70), gdr: None }, &TopoEnv::default()).unwrap();
        assert!(!r.sm_inferred && r.sm == 70);
        let r = rebuild(&as_printed(&preset("dgx-a100")), Facts::default(), &TopoEnv::default()).unwrap();
        assert!(r.notes.iter().any(|n| n.contains("SM80 from 12 NVLinks x 20 GB/s per GPU")), "{:?}", r.notes);
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
    fn a_partial_print_of_global_ranks_is_completed_with_notes() {
        let mut t = as_printed(&preset("dgx-a100"));
        // Global ranks 8-15, and the tree cut below its CPUs: no link reaches a CPU.
        for g in t.nodes.iter_mut().filter_map(|n| n.gpu.as_mut()) {
            g.rank = g.rank.map(|r| r + 8);
        }
        let cpus: Vec<usize> = t.nodes_of(NodeType::CPU).map(|(i, _)| i).collect();
        t.links.retain(|l| !cpus.contains(&l.from) && !cpus.contains(&l.to));
        let r = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap();
        assert_eq!(r.printed_ranks, (8..16).map(Some).collect::<Vec<_>>());
        let ranks: Vec<Option<i32>> =
            r.topology.nodes_of(NodeType::GPU).map(|(_, n)| n.gpu.as_ref().unwrap().rank).collect();
        assert_eq!(ranks, (0..8).map(Some).collect::<Vec<_>>());
        let notes = r.notes.join("\n");
        assert!(notes.contains("by rank 8 9 10 11 12 13 14 15"), "{notes}");
        assert!(notes.contains("under no CPU") && notes.contains("hangs them from CPU/"), "{notes}");
        let ex = crate::explain(&r.topology, 2, &[1 << 20], &collscope_debug::env::Env::default(), false).unwrap();

        let mut log = ex.snapshot.clone();
        log.graphs[0].channels[0].intra = vec![8, 15, 3];
        renumber_graphs(&mut log, None, &r.printed_ranks);
        assert_eq!(log.graphs[0].channels[0].intra, [0, 7, -1], "a rank the print lacks is unknown");
    }

    #[test]
    fn machine_findings_name_hidden_pci_speeds_and_slow_nics() {
        let mut t = as_printed(&preset("dgx-a100"));
        let r = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap();
        assert!(r.findings.iter().all(|f| f.kind == FindingKind::NoNearNic), "{:?}", r.findings);
        for l in t.links.iter_mut().filter(|l| l.kind == LinkType::PCI) {
            l.bw = 0.1875;
        }
        let slow_nic = t.nodes.iter_mut().find_map(|n| n.net.as_mut()).unwrap();
        slow_nic.bw /= 8.0;
        let r = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap();
        let kinds: Vec<FindingKind> = r.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&FindingKind::HiddenPciSpeed) && kinds.contains(&FindingKind::SlowNic), "{kinds:?}");
        assert!(r.findings[0].message.contains("every PCI link in the print reads PCI[0.2]"), "{:?}", r.findings);
    }

    #[test]
    fn a_print_without_gpus_is_an_error_naming_it() {
        let mut t = preset("cpu-host");
        t.host = Some("node7".into());
        let e = rebuild(&t, Facts::default(), &TopoEnv::default()).unwrap_err().to_string();
        assert!(e.contains("node7") && e.contains("no GPU"), "{e}");
    }
}
