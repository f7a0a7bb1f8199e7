//! "What if": the same communicator explained twice, as it is and with the environment or the machine
//! changed (`NCCL_*` variables, NICs, GPUDirect RDMA, P2P), and per collective and size the choice and
//! predicted time before and after.

use crate::explain::{explain, ExplainError, Pick};
use crate::topo::{paths, TopoEnv, TopoError};
use collscope_debug::env::Env;
use collscope_model::topology::NetAttrs;
use collscope_model::{Collective, Link, LinkType, Node, NodeId, NodeType, Topology};
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
    /// `--nics N`: keep the first N NICs, or add NICs beside the GPUs that have none (as the first NIC).
    Nics(u32),
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

#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub edits: Vec<Edit>,
    pub rows: Vec<Row>,
}

/// `topology` with `edits` applied to the machine and `env` with them applied to the environment.
pub fn apply(topology: &Topology, env: &Env, edits: &[Edit]) -> Result<(Topology, Env), WhatIfError> {
    let mut env = env.clone();
    let mut t = topology.clone();
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
            Edit::Nics(n) => {
                set_nics(&mut t, *n)?;
            }
        }
    }
    // Paths depend on the machine and on the P2P/GDR variables: recompute them as init does.
    paths::compute(&mut t, &TopoEnv::from_env(&env)?)?;
    Ok((t, env))
}

/// Keeps the first `n` NETs (with their NICs), or adds NIC+NET pairs like the first one, each on the PCI
/// switch of the next GPU without a NIC on its switch.
fn set_nics(t: &mut Topology, n: u32) -> Result<(), WhatIfError> {
    if n as usize > crate::topo::MAX_NODES_PER_TYPE {
        return Err(WhatIfError::TooManyNics(n));
    }
    let nets: Vec<usize> = t.nodes_of(NodeType::NET).map(|(i, _)| i).collect();
    let n = n as usize;
    if n < nets.len() {
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
        return Ok(());
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
    }
    Ok(())
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

/// Explains `nnodes` copies of `topology` under `env`, then again with `edits`, for float32 calls at `sizes`.
pub fn what_if(
    topology: &Topology,
    nnodes: u32,
    sizes: &[u64],
    env: &Env,
    edits: &[Edit],
) -> Result<WhatIf, WhatIfError> {
    let before = explain(topology, nnodes, sizes, env, false)?;
    let (t, e) = apply(topology, env, edits)?;
    let after = explain(&t, nnodes, sizes, &e, false)?;
    Ok(WhatIf { edits: edits.to_vec(), rows: rows(&before, &after) })
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

        let (fewer, _) = apply(&t, &env, &[Edit::Nics(2)]).unwrap();
        assert_eq!(fewer.nodes_of(NodeType::NET).count(), 2);
        assert_eq!(fewer.nodes_of(NodeType::NIC).count(), 2);
        let w = what_if(&t, 4, &[1 << 30], &env, &[Edit::Nics(2)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 30).speedup.unwrap() < 0.5, "{:?}", w.rows);

        let pcie = preset("hgx-pcie");
        let nets = pcie.nodes_of(NodeType::NET).count() as u32;
        let e = apply(&pcie, &env, &[Edit::Nics(4_000_000_000)]).unwrap_err().to_string();
        assert!(e.contains("--nics 4000000000: expected at most 576 (NCCL's NCCL_TOPO_MAX_NODES"), "{e}");
        let (more, _) = apply(&pcie, &env, &[Edit::Nics(nets + 2)]).unwrap();
        assert_eq!(more.nodes_of(NodeType::NET).count() as u32, nets + 2);
        let w = what_if(&pcie, 2, &[1 << 30], &env, &[Edit::Nics(nets + 2)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 30).speedup.unwrap() >= 1.0, "{:?}", w.rows);
    }

    #[test]
    fn p2p_off_routes_through_the_cpu() {
        let t = narrow_uplinks();
        let (_, env) = apply(&t, &Env::default(), &[Edit::P2p(false)]).unwrap();
        assert_eq!(env.str("NCCL_P2P_DISABLE"), Some("1"));
        let w = what_if(&t, 1, &[1 << 28], &Env::default(), &[Edit::P2p(false)]).unwrap();
        assert!(row(&w, Collective::AllReduce, 1 << 28).speedup.unwrap() < 1.0, "{:?}", w.rows);
    }
}
