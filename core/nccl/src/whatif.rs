//! "What if": the same communicator explained twice, as it is and with the environment or the machine
//! changed (`NCCL_*` variables, NICs and their speed, GPUDirect RDMA, P2P), and per collective and size the
//! choice and predicted time before and after; with what the edit did to the machine (which NICs it kept),
//! the graphs that changed, the sizes where each choice switches and the term that moved it, and for an edit
//! NCCL's model does not price, that it does not.

use crate::explain::{explain, ExplainError, Explained, Pick};
use crate::graph::system::System;
use crate::replay::compare::orders;
use crate::topo::{paths, TopoEnv, TopoError};
use crate::tuning::{CallInfo, TuningModel};
use collscope_debug::env::Env;
use collscope_model::topology::NetAttrs;
use collscope_model::{
    Algorithm, Collective, Link, LinkType, Node, NodeId, NodeType, PathType, Pattern, Protocol, Topology,
};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Explain(#[from] ExplainError),
    #[error(transparent)]
    Topo(#[from] TopoError),
    #[error(transparent)]
    Env(#[from] collscope_debug::env::EnvError),
    #[error("--nics {0}: the machine has no GPU on a PCIe switch to put a NIC beside")]
    Nics(u32),
    #[error("--nic-speed {0}: expected a speed in Gb/s above 0 (e.g. 200 for HDR InfiniBand)")]
    NicSpeed(f64),
    #[error("--nic-speed: the machine has no NIC (--nics N adds some)")]
    NoNic,
    #[error(
        "--nics {0}: expected at most {max} (NCCL's NCCL_TOPO_MAX_NODES, NET nodes in one system, NCCL 2.28.9 \
         src/include/graph.h)",
        max = crate::topo::MAX_NODES_PER_TYPE
    )]
    TooManyNics(u32),
}

/// One change to the environment or the machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Edit {
    /// `--set VAR=VALUE`.
    Set { name: String, value: String },
    /// `--nics N`: keep the first N NICs in NCCL's order, or add NICs beside the GPUs that have none (as the
    /// first NIC).
    Nics(u32),
    /// `--nic-speed GBPS`: every NIC at this speed, Gb/s (NCCL keeps GB/s: speed / 8).
    NicSpeed(f64),
    /// `--gdr on|off`: whether GPUs and NICs support GPUDirect RDMA.
    Gdr(bool),
    /// `--p2p on|off`: P2P between every pair of GPUs (`NCCL_P2P_LEVEL=SYS`, and NVML assumed to allow it:
    /// `COLLSCOPE_ASSUME_P2P=1`), or none (`NCCL_P2P_DISABLE=1`).
    P2p(bool),
}

impl std::fmt::Display for Edit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        match self {
            Edit::Set { name, value } => write!(f, "{name}={value}"),
            Edit::Nics(n) => write!(f, "{n} NICs per node"),
            Edit::NicSpeed(g) => write!(f, "NICs at {g} Gb/s"),
            Edit::Gdr(b) => write!(f, "GPUDirect RDMA {}", on(*b)),
            Edit::P2p(b) => write!(f, "P2P {}", on(*b)),
        }
    }
}

/// One call, before and after.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub coll: Collective,
    pub bytes: u64,
    pub before: Option<Pick>,
    pub after: Option<Pick>,
    /// before time / after time: above 1, the change makes the call faster.
    pub speedup: Option<f64>,
}

/// One field of one graph that the edits changed (`before`/`after` "not searched" for a graph only one side
/// has).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphChange {
    pub pattern: Pattern,
    pub field: &'static str,
    pub before: String,
    pub after: String,
}

/// Where a collective's choice switches from one algorithm/protocol to the next as the size grows, before and
/// after the edits, and the cells' terms that moved it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Switch {
    pub coll: Collective,
    pub from: String,
    pub to: String,
    /// The smallest size (NCCL's nBytes) that picks `to`, within the sizes looked at; None: no such switch.
    pub before: Option<u64>,
    pub after: Option<u64>,
    /// The latency and bandwidth terms of the two cells that differ, `Ring/LL128 bw 40.0 -> 20.0 GB/s`.
    pub moved: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub edits: Vec<Edit>,
    pub rows: Vec<Row>,
    /// What the edits did to the machine, and the prices NCCL's model leaves out.
    pub notes: Vec<String>,
    pub graphs: Vec<GraphChange>,
    pub switches: Vec<Switch>,
    /// The rows are the calls a log printed (set by `log explain`), not a sweep.
    pub sizes_from_log: bool,
}

/// `topology` with `edits` applied to the machine and `env` with them applied to the environment, and what
/// each machine edit did.
pub fn apply(topology: &Topology, env: &Env, edits: &[Edit]) -> Result<(Topology, Env, Vec<String>), WhatIfError> {
    let mut env = env.clone();
    let mut t = topology.clone();
    let mut notes = Vec::new();
    for e in edits {
        match e {
            Edit::Set { name, value } => env = env.with(name, value),
            Edit::P2p(true) => env = env.with("NCCL_P2P_LEVEL", "SYS").with("COLLSCOPE_ASSUME_P2P", "1"),
            Edit::P2p(false) => env = env.with("NCCL_P2P_DISABLE", "1"),
            Edit::Gdr(on) => {
                for n in t.nodes.iter_mut() {
                    if let Some(g) = n.gpu.as_mut() {
                        g.gdr = *on;
                    }
                    if let Some(net) = n.net.as_mut() {
                        net.gdr = *on;
                    }
                }
            }
            Edit::Nics(n) => notes.extend(set_nics(&mut t, *n, &TopoEnv::from_env(&env)?)?),
            Edit::NicSpeed(gbps) => notes.push(set_nic_speed(&mut t, *gbps)?),
        }
    }
    // Paths depend on the machine and on the P2P/GDR variables: recompute them as init does.
    paths::compute(&mut t, &TopoEnv::from_env(&env)?)?;
    Ok((t, env, notes))
}

/// A NET as a person knows it: `NET/1 mlx5_1 (200 Gb/s)`.
fn net_name(t: &Topology, i: usize) -> String {
    let n = &t.nodes[i];
    let net = n.net.as_ref();
    let name = net.map(|a| a.name.as_str()).filter(|s| !s.is_empty()).map_or(String::new(), |s| format!(" {s}"));
    let dev = net.map_or(String::new(), |a| format!("NET/{}", a.dev));
    format!("{dev}{name} ({} Gb/s)", net.map_or(0.0, |a| a.bw * 8.0))
}

/// The NETs in the order NCCL's search takes them (topology indices): each GPU's nearest, fastest NETs
/// channel after channel, then any other by path type (`ncclTopoSelectNets`, NCCL 2.28.9
/// `src/graph/search.cc`), then those no GPU reaches.
fn nccl_net_order(t: &Topology, env: &TopoEnv) -> Result<Vec<usize>, WhatIfError> {
    if t.nodes_of(NodeType::NET).next().is_none() {
        return Ok(Vec::new());
    }
    let mut t = t.clone();
    paths::compute(&mut t, env)?;
    // Two nodes: a single node drops its NETs (`ncclTopoTrimSystem`).
    let sys = System::new(&t, 2, env).map_err(ExplainError::from)?;
    let mut order: Vec<usize> = sys.select_nets(PathType::SYS, None).iter().map(|&n| sys.nets[n]).collect();
    for (i, _) in t.nodes_of(NodeType::NET) {
        if !order.contains(&i) {
            order.push(i);
        }
    }
    Ok(order)
}

/// Every NET at `gbps` Gb/s, and the links to it.
fn set_nic_speed(t: &mut Topology, gbps: f64) -> Result<String, WhatIfError> {
    if !(gbps.is_finite() && gbps > 0.0) {
        return Err(WhatIfError::NicSpeed(gbps));
    }
    let nets: Vec<usize> = t.nodes_of(NodeType::NET).map(|(i, _)| i).collect();
    if nets.is_empty() {
        return Err(WhatIfError::NoNic);
    }
    let was: Vec<String> = nets.iter().map(|&i| net_name(t, i)).collect();
    for &i in &nets {
        if let Some(a) = t.nodes[i].net.as_mut() {
            a.bw = gbps / 8.0;
        }
    }
    for l in t.links.iter_mut().filter(|l| l.kind == LinkType::NET && (nets.contains(&l.from) || nets.contains(&l.to)))
    {
        l.bw = gbps / 8.0;
    }
    Ok(format!("NIC speed: {} set to {gbps} Gb/s ({} GB/s as NCCL keeps it)", was.join(", "), gbps / 8.0))
}

/// Keeps the first `n` NETs in NCCL's order (with their NICs), or adds NIC+NET pairs like the first one, each
/// on the PCI switch of the next GPU without a NIC on its switch. Says which were kept, removed or added.
fn set_nics(t: &mut Topology, n: u32, env: &TopoEnv) -> Result<Vec<String>, WhatIfError> {
    if n as usize > crate::topo::MAX_NODES_PER_TYPE {
        return Err(WhatIfError::TooManyNics(n));
    }
    let nets = nccl_net_order(t, env)?;
    let n = n as usize;
    if n < nets.len() {
        let names = |idx: &[usize]| idx.iter().map(|&i| net_name(t, i)).collect::<Vec<_>>().join(", ");
        let note = format!(
            "NICs: {} of {} per node removed; kept {} and removed {}: kept in the order NCCL's search takes them \
             (ncclTopoSelectNets, NCCL 2.28.9 src/graph/search.cc: each GPU's nearest, fastest NICs first)",
            nets.len() - n,
            nets.len(),
            if n == 0 { "none".to_string() } else { names(&nets[..n]) },
            names(&nets[n..])
        );
        let drop: Vec<usize> = nets[n..]
            .iter()
            .flat_map(|&net| {
                // The NIC above a NET port, when no kept port shares it.
                let nic = t.links.iter().find(|l| l.from == net && t.nodes[l.to].kind == NodeType::NIC).map(|l| l.to);
                let shared = nic
                    .is_some_and(|nic| nets[..n].iter().any(|&k| t.links.iter().any(|l| l.from == k && l.to == nic)));
                std::iter::once(net).chain(nic.filter(|_| !shared))
            })
            .collect();
        remove_nodes(t, &drop);
        return Ok(vec![note]);
    }
    let template = nets.first().map(|&i| t.nodes[i].net.clone().unwrap_or_default());
    let gpus: Vec<usize> = t.nodes_of(NodeType::GPU).map(|(i, _)| i).collect();
    let parent_of = |t: &Topology, node: usize| {
        t.links.iter().find(|l| l.from == node && l.kind == LinkType::PCI).map(|l| (l.to, l.bw))
    };
    let mut candidates = gpus.iter().filter_map(|&g| parent_of(t, g)).collect::<Vec<_>>();
    candidates.dedup_by_key(|(p, _)| *p);
    if candidates.is_empty() && n > nets.len() {
        return Err(WhatIfError::Nics(n as u32));
    }
    // Switches that already have a NIC come last.
    candidates.sort_by_key(|&(p, _)| t.links.iter().any(|l| l.from == p && t.nodes[l.to].kind == NodeType::NIC));
    let next_local = t.nodes.iter().map(|x| x.id.local).max().unwrap_or(0) + 0x1000;
    let mut added_names = Vec::new();
    for (added, i) in (0u64..).zip(nets.len()..n) {
        let (parent, pci_bw) = candidates[(i - nets.len()) % candidates.len()];
        let mut net = template.clone().unwrap_or(NetAttrs { bw: 25.0, ..NetAttrs::default() });
        net.dev = i as i32;
        net.name = format!("added{i}");
        net.guid = Some(format!("{:x}", next_local + added));
        let system = t.nodes[parent].id.system;
        let nic = push_node(t, NodeType::NIC, NodeId { system, local: next_local + (added << 12) }, None);
        let port = push_node(t, NodeType::NET, NodeId { system, local: i as u64 }, Some(net.clone()));
        for (a, b, kind, bw) in [(parent, nic, LinkType::PCI, pci_bw), (nic, port, LinkType::NET, net.bw)] {
            t.links.push(Link { from: a, to: b, kind, bw });
            t.links.push(Link { from: b, to: a, kind, bw });
        }
        added_names.push(net_name(t, port));
    }
    Ok(if added_names.is_empty() {
        Vec::new()
    } else {
        vec![format!("NICs: {} added beside GPUs without a NIC on their PCIe switch", added_names.join(", "))]
    })
}

fn push_node(t: &mut Topology, kind: NodeType, id: NodeId, net: Option<NetAttrs>) -> usize {
    t.nodes.push(Node { kind, id, cpu: None, pci: None, gpu: None, net });
    t.nodes.len() - 1
}

fn remove_nodes(t: &mut Topology, drop: &[usize]) {
    let mut new_of = Vec::with_capacity(t.nodes.len());
    let mut next = 0;
    for i in 0..t.nodes.len() {
        new_of.push((!drop.contains(&i)).then(|| {
            next += 1;
            next - 1
        }));
    }
    let mut i = 0;
    t.nodes.retain(|_| {
        i += 1;
        !drop.contains(&(i - 1))
    });
    t.links =
        t.links.iter().filter_map(|l| Some(Link { from: new_of[l.from]?, to: new_of[l.to]?, ..l.clone() })).collect();
}

/// The fields of each graph that differ between `before` and `after`.
fn graph_changes(before: &Explained, after: &Explained) -> Vec<GraphChange> {
    let (b, a) = (&before.snapshot.graphs, &after.snapshot.graphs);
    let mut out = Vec::new();
    let mut patterns: Vec<Pattern> = b.iter().chain(a).map(|g| g.pattern).collect();
    patterns.sort_by_key(|p| p.id());
    patterns.dedup();
    for p in patterns {
        let (gb, ga) = (b.iter().find(|g| g.pattern == p), a.iter().find(|g| g.pattern == p));
        let (Some(gb), Some(ga)) = (gb, ga) else {
            let say = |g: Option<&collscope_model::Graph>| g.map_or("not searched", |_| "searched").to_string();
            out.push(GraphChange { pattern: p, field: "graph", before: say(gb), after: say(ga) });
            continue;
        };
        let fields: [(&'static str, String, String); 7] = [
            ("nChannels", gb.n_channels.to_string(), ga.n_channels.to_string()),
            ("bw intra", format!("{:.2}", gb.bw_intra), format!("{:.2}", ga.bw_intra)),
            ("bw inter", format!("{:.2}", gb.bw_inter), format!("{:.2}", ga.bw_inter)),
            ("type intra", gb.type_intra.to_string(), ga.type_intra.to_string()),
            ("type inter", gb.type_inter.to_string(), ga.type_inter.to_string()),
            ("crossNic", gb.cross_nic.to_string(), ga.cross_nic.to_string()),
            ("channels", orders(gb), orders(ga)),
        ];
        for (field, before, after) in fields {
            if before != after {
                out.push(GraphChange { pattern: p, field, before, after });
            }
        }
    }
    out
}

/// An algorithm and protocol, one cell of NCCL's table.
type Cell = (Algorithm, Protocol);

/// `Algo/Proto` of the choice at `bytes`, if any.
fn pick_at(m: &TuningModel, coll: Collective, bytes: u64) -> Option<Cell> {
    m.choose(&CallInfo::new(coll, bytes)).ok().map(|c| (c.algo, c.proto))
}

/// Each switch of `m`'s choice for `coll` over `sizes` (ascending): the pair and the smallest size (to the byte,
/// by bisection between the sizes) that picks the larger-size side.
fn switches_of(m: &TuningModel, coll: Collective, sizes: &[u64]) -> Vec<(Cell, Cell, u64)> {
    let mut out = Vec::new();
    for w in sizes.windows(2) {
        let (Some(a), Some(b)) = (pick_at(m, coll, w[0]), pick_at(m, coll, w[1])) else { continue };
        if a == b {
            continue;
        }
        let (mut lo, mut hi) = (w[0], w[1]);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if pick_at(m, coll, mid) == Some(a) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // The first size past `a`: a third choice between them is named by what is picked there.
        let to = pick_at(m, coll, hi).unwrap_or(b);
        out.push((a, to, hi));
    }
    out
}

/// The cells' terms (latency, bandwidth) that differ between the two models, for the cells of a switch.
fn moved_terms(before: &TuningModel, after: &TuningModel, coll: Collective, cells: [Cell; 2]) -> Vec<String> {
    let mut out = Vec::new();
    for (a, p) in cells {
        let (lb, la) = (before.latency(coll, a, p), after.latency(coll, a, p));
        if (lb - la).abs() > 1e-3 {
            out.push(format!("{a}/{p} latency {lb:.1} -> {la:.1} us"));
        }
        let (bb, ba) = (before.bandwidth(coll, a, p), after.bandwidth(coll, a, p));
        if (bb - ba).abs() > 1e-3 {
            out.push(format!("{a}/{p} bw {bb:.1} -> {ba:.1} GB/s"));
        }
    }
    out
}

/// Where each collective's choice switches, before and after, over the sizes looked at; a switch listed when
/// it moved, appeared or went.
fn switches(before: &Explained, after: &Explained, sizes: &[u64]) -> Vec<Switch> {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let name = |(a, p): Cell| format!("{a}/{p}");
    let mut out = Vec::new();
    for coll in Collective::TUNED {
        let (sb, sa) = (switches_of(&before.model, coll, &sizes), switches_of(&after.model, coll, &sizes));
        let pairs: Vec<_> = sb.iter().chain(&sa).map(|&(f, t, _)| (f, t)).collect();
        let mut seen = Vec::new();
        for (from, to) in pairs {
            if seen.contains(&(from, to)) {
                continue;
            }
            seen.push((from, to));
            let at = |v: &[_]| v.iter().find(|&&(f, t, _)| (f, t) == (from, to)).map(|&(_, _, s)| s);
            let (b, a) = (at(&sb), at(&sa));
            if b == a {
                continue;
            }
            let moved = moved_terms(&before.model, &after.model, coll, [from, to]);
            out.push(Switch { coll, from: name(from), to: name(to), before: b, after: a, moved });
        }
    }
    out
}

/// What an edit changes that NCCL's model has no price for, said where it shows as no change.
fn unpriced(e: &Edit, graphs_same: bool, rows_same: bool) -> Option<String> {
    match e {
        // tuning.cc (2.28.9) prices a NET hop by the graph's bwInter and latencies only.
        Edit::Gdr(on) => Some(format!(
            "GPUDirect RDMA: NCCL's tuning model (src/graph/tuning.cc, 2.28.9) has no GPUDirect RDMA term; \
             turning it {} reaches the prediction only through the GPU-NIC paths the search sees{}",
            if *on { "on" } else { "off" },
            if graphs_same {
                ", and here the search found the same graphs either way: no change (the copies through host \
                 memory it saves at run time are not priced)"
            } else {
                " (the changed graphs are listed)"
            }
        )),
        _ if graphs_same && rows_same => Some(format!(
            "{e}: no change: the search found the same graphs and the tuning gives the same choices and times"
        )),
        _ => None,
    }
}

/// Explains `nnodes` copies of `topology` under `env`, then again with `edits`, for float32 calls at `sizes`.
pub fn what_if(
    topology: &Topology,
    nnodes: u32,
    sizes: &[u64],
    env: &Env,
    edits: &[Edit],
) -> Result<WhatIf, WhatIfError> {
    let before = explain(topology, nnodes, sizes, env, false)?;
    let (t, e, mut notes) = apply(topology, env, edits)?;
    let after = explain(&t, nnodes, sizes, &e, false)?;
    let rows = rows(&before, &after);
    let graphs = graph_changes(&before, &after);
    let (b, a) = (&before.snapshot.channels, &after.snapshot.channels);
    if b != a {
        notes.push(format!(
            "channels: {} coll, {} nvls before; {} coll, {} nvls after",
            b.coll.unwrap_or(0),
            b.nvls.unwrap_or(0),
            a.coll.unwrap_or(0),
            a.nvls.unwrap_or(0)
        ));
    }
    let rows_same = rows.iter().all(|r| r.speedup.is_some_and(|s| (s - 1.0).abs() < 1e-9));
    notes.extend(edits.iter().filter_map(|e| unpriced(e, graphs.is_empty() && b == a, rows_same)));
    let switches = switches(&before, &after, sizes);
    Ok(WhatIf { edits: edits.to_vec(), rows, notes, graphs, switches, sizes_from_log: false })
}

/// Per call either model chose for, the choice before and after.
pub fn rows(before: &crate::Explained, after: &crate::Explained) -> Vec<Row> {
    let pick = |ex: &crate::Explained, coll, bytes| {
        ex.choices.iter().find(|c| c.coll == coll && c.bytes == bytes).map(Pick::from)
    };
    let mut rows: Vec<Row> = Vec::new();
    for c in before.choices.iter().chain(&after.choices) {
        if rows.iter().any(|r| r.coll == c.coll && r.bytes == c.bytes) {
            continue;
        }
        let (b, a) = (pick(before, c.coll, c.bytes), pick(after, c.coll, c.bytes));
        let speedup = b.as_ref().zip(a.as_ref()).map(|(b, a)| b.time_us / a.time_us.max(f64::MIN_POSITIVE));
        rows.push(Row { coll: c.coll, bytes: c.bytes, before: b, after: a, speedup });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;

    /// hgx-pcie with PCIe Gen3 x16 (12 GB/s) between the switches and the CPUs: traffic that goes through
    /// the CPU (no GDR, no P2P) gets half the bandwidth it has inside a switch.
    fn narrow_uplinks() -> Topology {
        let mut t = preset("hgx-pcie");
        let cpus: Vec<usize> = t.nodes_of(NodeType::CPU).map(|(i, _)| i).collect();
        for l in t.links.iter_mut().filter(|l| l.kind == LinkType::PCI) {
            if cpus.contains(&l.from) || cpus.contains(&l.to) {
                l.bw = 12.0;
            }
        }
        paths::compute(&mut t, &TopoEnv::default()).unwrap();
        t
    }

    fn row(w: &WhatIf, coll: Collective, bytes: u64) -> &Row {
        w.rows.iter().find(|r| r.coll == coll && r.bytes == bytes).unwrap()
    }

    #[test]
    fn gpudirect_rdma_makes_large_inter_node_calls_faster() {
        let env = Env::default();
        // The machine without GPUDirect RDMA, as a log without GDRDMA shows it.
        let t = apply(&narrow_uplinks(), &env, &[Edit::Gdr(false)]).unwrap().0;
        let w = what_if(&t, 2, &[64 << 20], &env, &[Edit::Gdr(true)]).unwrap();
        let r = row(&w, Collective::AllReduce, 64 << 20);
        assert!(r.speedup.unwrap() > 1.1, "{r:?}");
        // Nothing changed: the same figures.
        let w = what_if(&t, 2, &[64 << 20], &env, &[]).unwrap();
        assert!(w.rows.iter().all(|r| r.speedup == Some(1.0)), "{:?}", w.rows);
    }

    #[test]
    fn set_forces_an_algorithm_and_nics_change_the_network() {
        let t = preset("dgx-a100");
        let env = Env::default();
        let set = Edit::Set { name: "NCCL_ALGO".into(), value: "tree".into() };
        let w = what_if(&t, 4, &[1 << 30], &env, std::slice::from_ref(&set)).unwrap();
        let r = row(&w, Collective::AllReduce, 1 << 30);
        assert_eq!(r.after.as_ref().unwrap().algo, collscope_model::Algorithm::Tree);
        assert_eq!(set.to_string(), "NCCL_ALGO=tree");

        let (fewer, _, _) = apply(&t, &env, &[Edit::Nics(2)]).unwrap();
        assert_eq!(fewer.nodes_of(NodeType::NET).count(), 2);
        assert_eq!(fewer.nodes_of(NodeType::NIC).count(), 2);
        let w = what_if(&t, 4, &[1 << 30], &env, &[Edit::Nics(2)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 30).speedup.unwrap() < 0.5, "{:?}", w.rows);

        let pcie = preset("hgx-pcie");
        let nets = pcie.nodes_of(NodeType::NET).count() as u32;
        let e = apply(&pcie, &env, &[Edit::Nics(4_000_000_000)]).unwrap_err().to_string();
        assert!(e.contains("--nics 4000000000: expected at most 576 (NCCL's NCCL_TOPO_MAX_NODES"), "{e}");
        let (more, _, _) = apply(&pcie, &env, &[Edit::Nics(nets + 2)]).unwrap();
        assert_eq!(more.nodes_of(NodeType::NET).count() as u32, nets + 2);
        let w = what_if(&pcie, 2, &[1 << 30], &env, &[Edit::Nics(nets + 2)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 30).speedup.unwrap() >= 1.0, "{:?}", w.rows);
    }

    #[test]
    fn p2p_off_routes_through_the_cpu() {
        let t = narrow_uplinks();
        let (_, env, _) = apply(&t, &Env::default(), &[Edit::P2p(false)]).unwrap();
        assert_eq!(env.str("NCCL_P2P_DISABLE"), Some("1"));
        let w = what_if(&t, 1, &[1 << 28], &Env::default(), &[Edit::P2p(false)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 28).speedup.unwrap() < 1.0, "{:?}", w.rows);
    }
}
