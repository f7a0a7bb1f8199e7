//! What a rank decides at a communicator's init, kept once as the model's [`InitFacts`] (the host's topology,
//! the ring and tree graphs, channel counts, every channel's ring and tree, the tuning table) and as its
//! [`Communicator`]; both go to telemetry and both are printed from, in NCCL 2.28.9's INIT and GRAPH lines, so
//! the snapshot and the log say the same.

use super::select::SelectConfig;
use crate::device::prims::Channel;
use crate::error::{Result, RuntimeError};
use crate::transport::{PeerInfo, Transport};
use collscope_debug::env::Env;
use collscope_debug::{nccl_info, Subsys};
use collscope_model::{
    self as model, lines, Algorithm, ChannelCounts, Collective, Communicator, Graph, InitFacts, PathType, Pattern,
    Protocol, Ring, Topology, Tree,
};
use collscope_nccl::topo::{self, TopoEnv, TopoSource};
use std::sync::{Arc, OnceLock};

/// The host's topology as NCCL's init reads it (`ncclTopoGetSystem`, NCCL 2.28.9 `src/graph/topo.cc`):
/// `NCCL_TOPO_FILE` when set (a file that cannot be read or parsed stops init with an error naming it; NCCL
/// only logs one it cannot open), else this host detected from `/sys` and `/proc`, once per process (a host
/// that cannot be detected has no topology: the runtime takes no decision from it).
pub(crate) fn host_topology(env: &Env) -> Result<Option<Topology>> {
    let topo_env = TopoEnv::from_env(env)?;
    if let Some(file) = env.str("NCCL_TOPO_FILE") {
        let xml = topo::load(&TopoSource::File(file.into())).map_err(RuntimeError::Topo)?;
        return Ok(Some(topo::build(&xml, &topo_env).map_err(RuntimeError::Topo)?));
    }
    static DETECTED: OnceLock<Option<Topology>> = OnceLock::new();
    let detected = DETECTED.get_or_init(|| {
        let xml = topo::load(&TopoSource::Detect { root: "/".into() }).ok()?;
        topo::build(&xml, &topo_env).ok()
    });
    Ok(detected.clone())
}

/// How the ranks of a graph reach each other: through one process's memory (P2P), a host's shared memory (SHM)
/// or the network.
fn path_type(link: model::Transport) -> PathType {
    match link {
        model::Transport::P2p => PathType::LOC,
        model::Transport::Shm => PathType::SYS,
        _ => PathType::NET,
    }
}

/// What [`init_facts`] needs from the communicator being built.
pub(crate) struct InitInput<'a> {
    pub rank: u32,
    pub peers: &'a [PeerInfo],
    pub channels: &'a [Channel],
    pub select: &'a SelectConfig,
    pub chain: &'a [Arc<dyn Transport>],
    pub topology: Option<Topology>,
    pub name: Option<String>,
}

/// The rank's decisions at init. Rings run in rank order on every channel; the first half of the channels
/// use the first of the two binary trees, the rest the second (see `Comm::init_rank`).
pub(crate) fn init_facts(i: InitInput) -> InitFacts {
    let nranks = i.peers.len() as u32;
    let nch = i.channels.len() as u32;
    let me = &i.peers[i.rank as usize];
    let link = i.select.link();
    let multi_node = i.peers.iter().any(|p| p.host_hash != me.host_hash);
    let bw =
        |algo| i.select.profile().link(link).and_then(|l| l.cell(algo, Protocol::Simple)).map_or(0.0, |c| c.bw_gbps);
    let graph = |pattern, algo| Graph {
        pattern,
        n_channels: nch,
        bw_intra: bw(algo),
        bw_inter: bw(algo),
        // Across nodes the ranks of a node reach each other over SHM at best (processes).
        type_intra: if multi_node { PathType::SYS } else { path_type(link) },
        type_inter: if multi_node { PathType::NET } else { PathType::LOC },
        same_channels: true,
        cross_nic: 0,
        // NCCL's per-channel graph lines name GPUs and NICs, which host ranks do not have.
        channels: vec![],
        host: Some(me.host.clone()),
    };
    let order: Vec<u32> = (0..nranks).collect();
    InitFacts {
        comm: i.name,
        rank: i.rank,
        collscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        network: i.chain.iter().find_map(|t| t.network()).map(str::to_string),
        topology: i.topology,
        graphs: vec![graph(Pattern::Ring, Algorithm::Ring), graph(Pattern::BalancedTree, Algorithm::Tree)],
        // One channel each way per peer for point-to-point (connIndex 1 on channel 0); no CollNet or NVLS.
        channels: ChannelCounts {
            coll: Some(nch),
            collnet: Some(0),
            nvls: Some(0),
            p2p: Some(1),
            p2p_per_peer: Some(1),
        },
        rings: i
            .channels
            .iter()
            .map(|c| Ring {
                channel: c.id,
                order: order.clone(),
                truncated: false,
                neighbours: vec![(c.ring_prev, i.rank, c.ring_next)],
            })
            .collect(),
        // A binary tree: NCCL's third child is always -1 here.
        trees: i
            .channels
            .iter()
            .map(|c| Tree {
                channel: c.id,
                rank: i.rank,
                up: c.tree.up,
                down: vec![c.tree.down[0], c.tree.down[1], -1],
            })
            .collect(),
        tuning: i.select.table(nranks),
    }
}

/// The handle a communicator prints as NCCL prints its `comm %p`: its name, else a number unique to the rank's
/// communicator.
pub(crate) fn comm_handle(name: &Option<String>, me: &PeerInfo) -> String {
    name.clone().unwrap_or_else(|| {
        let parts = [&me.pid_hash.to_le_bytes()[..], &me.rank.to_le_bytes(), &me.comm_nonce.to_le_bytes()];
        format!("{:#x}", super::fnv(&parts))
    })
}

/// Prints the facts as NCCL 2.28.9 prints them during init: the comm line (`src/init.cc`), the system tree and
/// paths (`src/graph/topo.cc`, GRAPH), each graph's pattern line (`src/graph/search.cc`, GRAPH), rank 0's
/// ring orders (`src/graph/rings.cc`), this rank's ring neighbours and trees and the channel counts
/// (`src/init.cc`).
pub(crate) fn log_facts(f: &InitFacts, c: &Communicator, handle: &str) {
    let n = |v: Option<u32>| v.unwrap_or(0);
    nccl_info!(
        Subsys::INIT,
        "{}",
        lines::comm_info_line(handle, f.rank, n(c.nranks), n(c.nnodes), n(c.local_ranks), n(c.local_rank))
    );
    if let Some(t) = &f.topology {
        topo::print::log_system(t);
    }
    for g in &f.graphs {
        nccl_info!(Subsys::GRAPH, "{}", lines::graph_line(g));
    }
    let nch = f.rings.len() as u32;
    for r in &f.rings {
        if f.rank == 0 {
            nccl_info!(Subsys::INIT, "{}", lines::ring_order_line(r.channel, nch, &r.order));
        }
        for &(prev, rank, next) in &r.neighbours {
            nccl_info!(Subsys::GRAPH, "{}", lines::ring_line(r.channel, prev, rank, next));
        }
    }
    let trees: Vec<lines::TreeEntry> = f
        .trees
        .iter()
        .map(|t| lines::TreeEntry {
            channel: t.channel,
            rank: t.rank,
            up: t.up,
            down: [0, 1, 2].map(|k| t.down.get(k).copied().unwrap_or(-1)),
        })
        .collect();
    nccl_info!(Subsys::INIT, "{}", lines::trees_line(&trees));
    // NCCL 2.28.9 `ncclTopoTuneModel` prints the table on rank 0 of a communicator of more than one rank. One
    // host thread runs each channel (`workers`); cells the runtime does not price print 0, as NCCL's do.
    if f.rank == 0 && n(c.nranks) > 1 {
        let cell = |ci: usize, a, p| {
            let cell = f.tuning.get(&Collective::TUNED[ci]).and_then(|t| t.get(&a)).and_then(|t| t.get(&p));
            cell.map_or((0.0, 0.0), |c| (c.lat_us, c.bw_gbps))
        };
        for line in lines::tuning_table_lines(|_, _| 1, cell) {
            nccl_info!(Subsys::TUNING, "{line}");
        }
    }
    nccl_info!(Subsys::INIT, "{}", lines::channel_counts_line(&f.channels));
}

/// Prints the end of init as NCCL 2.28.9 `src/init.cc` does: `ncclCommInitRank ... - Init COMPLETE` and the
/// `Init timings` line, from the communicator's record.
pub(crate) fn log_complete(c: &Communicator, handle: &str, comm_id: u64) {
    let (rank, nranks) = (c.rank.unwrap_or(0), c.nranks.unwrap_or(0));
    let dev = c.cuda_dev.unwrap_or(0);
    nccl_info!(Subsys::INIT, "{}", lines::init_complete_line(handle, rank, nranks, dev, 0, comm_id));
    nccl_info!(Subsys::INIT | Subsys::PROFILE, "{}", lines::init_timings_line(rank, nranks, &c.init));
}
