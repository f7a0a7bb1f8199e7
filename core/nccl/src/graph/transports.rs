//! The transport of every ring and tree edge, as NCCL 2.28.9 picks and prints it at setup for a communicator of
//! identical nodes, one process per GPU: `src/transport.cc` (`selectTransport`: the first of p2p, shm, net whose
//! `canConnect` says yes), `src/transport/p2p.cc` (`p2pCanConnect`, `p2pGetInfo`, the `P2P/CUMEM`, `P2P/IPC`,
//! `P2P/indirect` lines of `p2pSendSetup`), `src/transport/shm.cc` and `src/transport/net.cc` (`sendSetup`,
//! `recvSetup`: the graph's NIC for the channel, `ncclTopoCheckGdr`, the PXN proxy rank), with the NIC from
//! `ncclTopoGetNetDev` (`src/graph/search.cc`). Ranks in different processes never get `P2P/direct pointer`.

use super::{GraphError, Plan};
use crate::topo::paths::{self as topo_paths, GdrMode};
use crate::topo::TopoEnv;
use collscope_debug::env::Env;
use collscope_debug::Subsys;
use collscope_model::lines::{connected_rings_line, ConnLine};
use collscope_model::{Connection, Direction, Graph, NodeType, Topology, Transport};
use std::collections::{HashMap, HashSet};

/// The network NCCL's IB plugin calls itself; the modelled NICs are InfiniBand HCAs.
pub const NET_NAME: &str = "IB";

/// One connection line NCCL prints: the connection, and the device numbers beside its ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub conn: Connection,
    /// `nvmlDev` of the source and destination ranks.
    pub devs: (i32, i32),
    /// The subsystems NCCL prints it under.
    pub subsys: Subsys,
}

impl Edge {
    /// NCCL's line; every ring and tree connection is `connIndex` 0, and SHM's line has no index.
    pub fn line(&self) -> String {
        let conn_index = (self.conn.transport != Transport::Shm).then_some(0);
        ConnLine { conn: &self.conn, conn_index, devs: self.devs }.to_string()
    }
}

/// What the edges are decided from: the node's machine, its GPUs by local rank, and the settings.
struct Ctx<'a> {
    topo: &'a Topology,
    env: TopoEnv,
    /// GPU node index by rank inside the node.
    gpus: Vec<usize>,
    k: u32,
    /// More than one node: NCCL keeps its NICs (`ncclTopoTrimSystem` drops them on one node).
    inter: bool,
    cumem: bool,
    p2p_read: i64,
    shm_disable: bool,
    gdr: HashMap<(usize, usize, bool), GdrMode>,
}

impl Ctx<'_> {
    fn local(&self, rank: u32) -> (u32, usize) {
        (rank / self.k, self.gpus[(rank % self.k) as usize])
    }

    /// The rank of GPU node `gpu` on node `node`.
    fn rank_on(&self, node: u32, gpu: usize) -> Result<u32, GraphError> {
        let local = self
            .gpus
            .iter()
            .position(|&g| g == gpu)
            .ok_or_else(|| GraphError::Internal(format!("GPU {} has no rank", self.topo.nodes[gpu].name())))?;
        Ok(node * self.k + local as u32)
    }

    fn dev(&self, rank: u32) -> i32 {
        let (_, g) = self.local(rank);
        self.topo.nodes[g].gpu.as_ref().map_or(-1, |a| a.dev)
    }

    /// `ncclTopoCheckGdr`, once per GPU, NIC and direction (NCCL logs its decision at every setup).
    fn gdr(&mut self, gpu: usize, net: usize, read: bool) -> Result<GdrMode, GraphError> {
        if let Some(m) = self.gdr.get(&(gpu, net, read)) {
            return Ok(*m);
        }
        let d = topo_paths::check_gdr(self.topo, &self.env, gpu, net, read)
            .map_err(|e| GraphError::Internal(e.to_string()))?;
        self.gdr.insert((gpu, net, read), d.mode);
        Ok(d.mode)
    }

    /// The NIC (node index) a rank uses on a channel of `graph` (`ncclTopoGetNetDev` with a graph): the channel's
    /// first inter entry for the GPU the node's chain starts from, its second for the others.
    fn net(&self, graph: &Graph, channel: u32, rank: u32) -> Result<usize, GraphError> {
        let n = graph.n_channels.max(1);
        let ch = graph
            .channels
            .get((channel % n) as usize)
            .ok_or_else(|| GraphError::Internal(format!("graph has no channel {}", channel % n)))?;
        let index = usize::from(ch.intra.first() != Some(&((rank % self.k) as i32)));
        let id = *ch.inter.get(index).ok_or_else(|| GraphError::Internal(format!("channel {channel} has no NET")))?;
        self.topo
            .nodes_of(NodeType::NET)
            .find(|(_, node)| ((node.id.system << 56) | node.id.local) as i64 == id)
            .map(|(i, _)| i)
            .ok_or_else(|| GraphError::Internal(format!("NET {id:x} of channel {channel} is not in the topology")))
    }

    /// The lines of `src -> dst` on `channel` of `graph`: one for P2P and SHM (the sender's), a `[send]` and a
    /// `[receive]` for NET.
    fn edge(&mut self, graph: &Graph, channel: u32, src: u32, dst: u32) -> Result<Vec<Edge>, GraphError> {
        let ((node1, g1), (node2, g2)) = (self.local(src), self.local(dst));
        let devs = (self.dev(src), self.dev(dst));
        if node1 == node2 {
            let use_net = self.inter && topo_paths::check_net(self.topo, &self.env, g1, g2);
            let p = topo_paths::check_p2p(self.topo, &self.env, g1, g2);
            if p.p2p && (p.intermediate.is_some() || !use_net) {
                // `p2pGetInfo`: read from the topology unless NCCL_P2P_READ_ENABLE says.
                let read = if self.p2p_read != -2 { self.p2p_read != 0 } else { p.read };
                let read = if read { "/read" } else { "" };
                let mode = match p.intermediate {
                    Some(i) => {
                        let rank = self.rank_on(node1, i)?;
                        format!("indirect/{rank}[{}]{read}", self.dev(rank))
                    }
                    None if self.cumem => format!("CUMEM{read}"),
                    None => format!("IPC{read}"),
                };
                let conn = Connection {
                    mode: Some(mode),
                    ..Connection::new(channel, src, dst, Direction::Both, Transport::P2p)
                };
                return Ok(vec![Edge { conn, devs, subsys: Subsys::INIT | Subsys::P2P }]);
            }
            if !self.shm_disable && !use_net {
                let conn = Connection {
                    mode: Some("direct/direct".into()),
                    ..Connection::new(channel, src, dst, Direction::Both, Transport::Shm)
                };
                return Ok(vec![Edge { conn, devs, subsys: Subsys::INIT | Subsys::SHM }]);
            }
        }
        let mut out = Vec::with_capacity(2);
        for (direction, rank, gpu) in [(Direction::Send, src, g1), (Direction::Recv, dst, g2)] {
            let net = self.net(graph, channel, rank)?;
            let attrs = self.topo.nodes[net].net.as_ref();
            let dev = attrs.map_or(0, |a| a.dev.max(0) as u32);
            let gdr = self.gdr(gpu, net, direction == Direction::Send)?;
            // Only the sender goes through a proxy GPU (PXN); `ncclTopoGetIntermediateRank`.
            let proxy = if direction == Direction::Send {
                let via =
                    topo_paths::pxn_proxy(self.topo, gpu, net).map_err(|e| GraphError::Internal(e.to_string()))?;
                Some(self.rank_on(rank / self.k, via)?).filter(|&p| p != rank)
            } else {
                None
            };
            let mut spec = format!("{NET_NAME}/{dev}");
            if let Some(p) = proxy {
                spec.push_str(&format!("({p})"));
            }
            if gdr != GdrMode::Disabled {
                spec.push_str("/GDRDMA");
            }
            if gdr == GdrMode::Pci {
                spec.push_str("(PCI)");
            }
            let conn = Connection {
                mode: Some(spec),
                gdrdma: Some(gdr != GdrMode::Disabled),
                proxy_rank: proxy,
                nic: attrs.map(|a| a.name.clone()),
                ..Connection::net(channel, src, dst, direction, NET_NAME, dev)
            };
            out.push(Edge { conn, devs, subsys: Subsys::INIT | Subsys::NET });
        }
        Ok(out)
    }
}

/// The edges NCCL sets up at init, in the order of `src/transport/generic.cc`.
#[derive(Debug, Clone, PartialEq)]
pub struct Connections {
    /// Each rank to its next, channel by channel (`ncclTransportRingConnect`).
    pub rings: Vec<Edge>,
    /// Each rank to its parent and its parent back to it (`ncclTransportTreeConnect`).
    pub trees: Vec<Edge>,
}

impl Connections {
    /// `Connected all rings, use ring PXN %d GDR %d`: PXN if some rank's ring send goes through another GPU's NIC,
    /// GDR unless some rank's ring NET connection goes without it (every rank's, as buffer registration is on by
    /// default: `NCCL_LOCAL_REGISTER`).
    pub fn rings_line(&self) -> String {
        let net = || self.rings.iter().filter(|e| e.conn.transport == Transport::Net);
        let pxn = net().any(|e| e.conn.proxy_rank.is_some());
        let gdr = net().all(|e| e.conn.gdrdma == Some(true));
        connected_rings_line(pxn, gdr)
    }

    /// Every edge, rings first.
    pub fn all(&self) -> impl Iterator<Item = &Edge> {
        self.rings.iter().chain(&self.trees)
    }
}

impl Plan {
    /// Every ring and tree edge with the transport NCCL would set up for it on `topo`'s nodes.
    pub fn connections(&self, topo: &Topology, env: &Env) -> Result<Connections, GraphError> {
        let k = self.shape.ranks_per_node;
        let mut gpus: Vec<(i32, usize)> = topo
            .nodes_of(NodeType::GPU)
            .filter_map(|(i, n)| n.gpu.as_ref().map(|a| (a.rank.unwrap_or(a.dev), i)))
            .collect();
        gpus.sort_unstable();
        if gpus.len() != k as usize {
            return Err(GraphError::Input(format!("{} GPUs in the topology, {k} ranks per node", gpus.len())));
        }
        let mut ctx = Ctx {
            topo,
            env: TopoEnv::from_env(env)?,
            gpus: gpus.into_iter().map(|(_, i)| i).collect(),
            k,
            inter: self.shape.nnodes > 1,
            // NCCL_CUMEM_ENABLE: on by default where the driver supports it, which the model assumes.
            cumem: env.int("NCCL_CUMEM_ENABLE", -2)? != 0,
            p2p_read: env.int("NCCL_P2P_READ_ENABLE", -2)?,
            shm_disable: env.int("NCCL_SHM_DISABLE", 0)? == 1,
            gdr: HashMap::new(),
        };
        // NCCL connects a (channel, sender, receiver) once: trees reuse what the rings connected
        // (`ncclTransportP2pConnect` skips connected peers).
        let mut done = HashSet::new();
        let mut out = Connections { rings: Vec::new(), trees: Vec::new() };
        for ring in &self.connected.rings {
            let order = &ring.order;
            for (i, &src) in order.iter().enumerate() {
                let dst = order[(i + 1) % order.len()];
                if src != dst && done.insert((ring.channel, src, dst)) {
                    out.rings.extend(ctx.edge(&self.ring.graph, ring.channel, src, dst)?);
                }
            }
        }
        for t in &self.connected.trees {
            let Ok(up) = u32::try_from(t.up) else { continue };
            for (src, dst) in [(t.rank, up), (up, t.rank)] {
                if done.insert((t.channel, src, dst)) {
                    out.trees.extend(ctx.edge(&self.tree.graph, t.channel, src, dst)?);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::plan;
    use crate::graph::testing::preset;
    use collscope_model::lines::connection;

    fn lines(name: &str, nnodes: u32, env: &Env) -> Vec<String> {
        let topo = preset(name);
        let p = plan(&topo, nnodes, env).unwrap();
        p.connections(&topo, env).unwrap().all().map(Edge::line).collect()
    }

    #[test]
    fn dgx_h100_two_nodes_p2p_inside_net_gdr_between() {
        let topo = preset("dgx-h100");
        let p = plan(&topo, 2, &Env::default()).unwrap();
        let c = p.connections(&topo, &Env::default()).unwrap();
        assert_eq!(c.rings_line(), "Connected all rings, use ring PXN 0 GDR 1");
        // Every ring edge is there: 16 ranks per channel, NET ones twice ([send] and [receive]).
        let ring0: Vec<&Edge> = c.rings.iter().filter(|e| e.conn.channel == 0).collect();
        assert_eq!(ring0.len(), 18);
        assert_eq!(ring0.iter().filter(|e| e.conn.transport == Transport::P2p).count(), 14);
        // Tree edges go both ways, and cross nodes too; none is set up twice.
        assert!(c.trees.iter().any(|e| e.conn.transport == Transport::Net && e.conn.direction == Direction::Recv));
        let mut seen = HashSet::new();
        assert!(c.all().all(|e| seen.insert((e.conn.channel, e.conn.src, e.conn.dst, e.conn.direction))));
        let edges: Vec<&Edge> = c.all().collect();
        for e in &edges {
            let line = e.line();
            // Written lines read back as the connection, all but the NIC's name, which NCCL's line does not print.
            let printed = Connection { nic: None, ..e.conn.clone() };
            assert_eq!(connection(&line).as_ref(), Some(&printed), "{line}");
            let cross = e.conn.src / 8 != e.conn.dst / 8;
            if cross {
                // H100s and their NICs share a PCIe switch: GPUDirect RDMA, no PXN.
                assert!(line.contains(" via NET/IB/") && line.ends_with("/GDRDMA"), "{line}");
                assert!(e.conn.proxy_rank.is_none(), "{line}");
            } else {
                // NVLink through NVSwitch between H100s (sm_90): CUMEM, no read.
                assert!(line.ends_with("via P2P/CUMEM"), "{line}");
            }
        }
        let first = edges[0];
        assert_eq!(
            first.line(),
            format!(
                "Channel 00/0 : {}[{}] -> {}[{}] via P2P/CUMEM",
                first.conn.src, first.devs.0, first.conn.dst, first.devs.1
            )
        );
        // Both ends of a NET edge name the same NIC: the graph's for that channel.
        let send = edges.iter().find(|e| e.conn.direction == Direction::Send).unwrap();
        let recv = edges.iter().find(|e| e.conn.direction == Direction::Recv).unwrap();
        assert_eq!((send.conn.src, send.conn.dst), (recv.conn.src, recv.conn.dst));
        assert!(edges.iter().any(|e| e.conn.transport == Transport::Net && e.conn.channel >= p.ring.graph.n_channels));
    }

    #[test]
    fn a100_reads_and_settings_change_the_mode() {
        let l = lines("dgx-a100", 1, &Env::default());
        assert!(l.iter().all(|l| l.ends_with("via P2P/CUMEM/read")), "{l:?}");
        let l = lines("dgx-a100", 1, &Env::from_pairs([("NCCL_CUMEM_ENABLE", "0"), ("NCCL_P2P_READ_ENABLE", "0")]));
        assert!(l.iter().all(|l| l.ends_with("via P2P/IPC")), "{l:?}");
        // Without P2P between the GPUs, SHM carries the edge.
        let l = lines("dgx-a100", 1, &Env::from_pairs([("NCCL_P2P_DISABLE", "1")]));
        assert!(l.iter().all(|l| l.ends_with("via SHM/direct/direct") && !l.contains("/0 :")), "{l:?}");
    }

    #[test]
    fn gdr_off_drops_gdrdma_on_both_ends() {
        let l = lines("dgx-h100", 2, &Env::from_pairs([("NCCL_NET_GDR_LEVEL", "LOC")]));
        let net: Vec<&String> = l.iter().filter(|l| l.contains("NET/IB/")).collect();
        let topo = preset("dgx-h100");
        let env = Env::from_pairs([("NCCL_NET_GDR_LEVEL", "LOC")]);
        let c = plan(&topo, 2, &env).unwrap().connections(&topo, &env).unwrap();
        assert_eq!(c.rings_line(), "Connected all rings, use ring PXN 0 GDR 0");
        assert!(!net.is_empty() && net.iter().all(|l| !l.contains("GDRDMA")), "{net:?}");
        assert!(net.iter().any(|l| l.contains("[receive]")));
    }
}
