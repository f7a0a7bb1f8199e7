//! The connect phase for a communicator of `nnodes` identical nodes: NCCL 2.28.9 `src/graph/connect.cc`
//! (`ncclTopoPreset`, `ncclTopoPostset`, `connectRings`, `connectTrees`, `copyChannels`, channel limits),
//! `src/graph/rings.cc` (`ncclBuildRings`, `dumpLine`) and the lines `src/init.cc` prints after it.
//! Ranks are numbered node-major: global rank = node * ranks_per_node + the GPU's rank inside its node, which
//! is what a graph's `intra` holds.

use super::trees::{dtree, tree_depth};
use super::{GraphError, InfoLine};
use collscope_debug::env::Env;
use collscope_model::lines::{ring_line, ring_order_line, trees_line, TreeEntry};
use collscope_model::{ChannelCounts, Graph, Pattern, Ring, Tree};

/// NCCL's `MAXCHANNELS` in the release modelled (64 from 2.25.1, 32 before).
fn max_channels(env: &Env) -> Result<u32, GraphError> {
    Ok(crate::topo::TopoEnv::from_env(env)?.profile.max_channels)
}
/// `NCCL_MAX_TREE_ARITY`.
const MAX_TREE_ARITY: usize = 3;
/// `NVLS_NCHANNELS_SM90`, `NVLS_NCHANNELS_SM100`, `NVLS_NCHANNELS_SM100_NVL` (`transport/nvls.cc`).
const NVLS_NCHANNELS_SM90: u32 = 16;
const NVLS_NCHANNELS_SM100: u32 = 32;
const NVLS_NCHANNELS_SM100_NVL: u32 = 24;

/// What connect needs besides the graphs.
#[derive(Debug, Clone, PartialEq)]
pub struct CommShape {
    pub nnodes: u32,
    pub ranks_per_node: u32,
    /// Smallest compute capability in the communicator (80 for sm_80).
    pub min_comp_cap: u32,
    /// Smallest p2p channel need towards another GPU of the node (`ncclTopoGetNchannels`: 2 per NVLink's
    /// worth of bandwidth, else 2).
    pub p2p_local_peer_channels: u32,
    /// NICs one GPU needs to match its bandwidth to the CPU (`getLocalNetCountByBw`).
    pub net_count_by_bw: u32,
}

/// The graphs NCCL computes at init (`ringGraph`, `treeGraph`, `nvlsGraph`, `collNetDirectGraph`), already
/// aligned over all ranks (see [`align`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Graphs {
    pub ring: Graph,
    pub tree: Graph,
    pub nvls: Option<Graph>,
    pub collnet_direct: Option<Graph>,
    /// Present when CollNet is enabled for this communicator (graph found, enough nodes).
    pub collnet_chain: Option<Graph>,
}

/// One rank's tree links in one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TreeState {
    up: i32,
    down: [i32; MAX_TREE_ARITY],
}

impl TreeState {
    const EMPTY: TreeState = TreeState { up: -1, down: [-1; MAX_TREE_ARITY] };

    fn add_down(&mut self, rank: i32) -> Result<(), GraphError> {
        let [a, b, c] = self.down;
        let slot =
            self.down.iter_mut().find(|d| **d < 0).ok_or_else(|| {
                GraphError::Internal(format!("tree already has {MAX_TREE_ARITY} children ({a} {b} {c})"))
            })?;
        *slot = rank;
        Ok(())
    }
}

/// Everything the connect phase decides, and NCCL's lines for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Connected {
    pub counts: ChannelCounts,
    /// One per channel: the order from rank 0 and every rank's (prev, rank, next).
    pub rings: Vec<Ring>,
    /// One per channel per rank.
    pub trees: Vec<Tree>,
    pub tree_depth: i32,
    /// The INFO lines NCCL prints, in order; per-rank lines for every rank.
    pub lines: Vec<InfoLine>,
}

/// Aligns the graphs every rank found (`init.cc`, after AllGather3): fewest channels, lowest bandwidths,
/// worst path types, largest crossNic, and sameChannels only if all agree.
pub fn align(per_rank: &[Graph]) -> Option<Graph> {
    let mut out = per_rank.first()?.clone();
    for g in &per_rank[1..] {
        out.n_channels = out.n_channels.min(g.n_channels);
        out.same_channels &= g.same_channels;
        out.bw_intra = out.bw_intra.min(g.bw_intra);
        out.bw_inter = out.bw_inter.min(g.bw_inter);
        out.type_intra = out.type_intra.max(g.type_intra);
        out.type_inter = out.type_inter.max(g.type_inter);
        out.cross_nic = out.cross_nic.max(g.cross_nic);
    }
    out.channels.truncate(out.n_channels as usize);
    Some(out)
}

/// `ncclMinNchannels`/`ncclMaxNchannels`: `NCCL_MIN_NCHANNELS`/`NCCL_MAX_NCHANNELS` (and the legacy
/// `NCCL_MIN_NRINGS`/`NCCL_MAX_NRINGS`, overridden by the new names), clamped to 0..=MAXCHANNELS and 1..=MAXCHANNELS.
pub fn channel_limits(env: &Env, lines: &mut Vec<InfoLine>) -> Result<(u32, u32), GraphError> {
    let maxch = max_channels(env)?;
    let mut min = 0;
    let legacy_min = env.int("NCCL_MIN_NRINGS", -2)?;
    if legacy_min != -2 {
        min = legacy_min;
    }
    let new_min = env.int("NCCL_MIN_NCHANNELS", -2)?;
    if new_min != -2 {
        min = new_min;
    }
    if min > maxch as i64 {
        lines.push(InfoLine::graph_env(format!("User asked for a minimum of {min} channels, limiting to {maxch}")));
        min = maxch as i64;
    }
    let min = min.max(0) as u32;
    let mut max = maxch as i64;
    let legacy_max = env.int("NCCL_MAX_NRINGS", -2)?;
    if legacy_max != -2 {
        max = legacy_max;
    }
    let new_max = env.int("NCCL_MAX_NCHANNELS", -2)?;
    if new_max != -2 {
        max = new_max;
    }
    max = max.min(maxch as i64);
    if max < 1 {
        lines.push(InfoLine::graph_env(format!("User asked for a maximum of {max} channels, setting it to 1")));
        max = 1;
    }
    Ok((min, max as u32))
}

/// The communicator's CTA bounds (`config.minCTAs`/`maxCTAs`, default 1 and 64) as `NCCL_MIN_CTAS` and
/// `NCCL_MAX_CTAS` override them, capped as `envConfigOverride` (init.cc) does.
pub fn cta_limits(env: &Env, lines: &mut Vec<InfoLine>) -> Result<(u32, u32), GraphError> {
    let maxch = max_channels(env)?;
    let (mut min, mut max) = (1i64, maxch as i64);
    for (name, value) in [("NCCL_MIN_CTAS", &mut min), ("NCCL_MAX_CTAS", &mut max)] {
        let v = env.int(name, i64::MIN)?;
        if v == i64::MIN {
            continue;
        }
        if v <= 0 {
            lines.push(InfoLine::env(format!("{name} {v} is too low, leaving it set at {value}")));
        } else {
            *value = v;
        }
    }
    if min > maxch as i64 {
        lines.push(InfoLine::env(format!(
            "minCTAs {min} is larger than #channels upper limit {maxch}, cap it to {maxch}"
        )));
        min = maxch as i64;
    }
    if max > maxch as i64 {
        lines.push(InfoLine::env(format!(
            "maxCTAs {max} is larger than #channels upper limit {maxch}, cap it to {maxch}"
        )));
        max = maxch as i64;
    }
    if min > max {
        lines.push(InfoLine::env(format!("minCTAs {min} is larger than maxCTAs {max}, set both to {max}")));
        min = max;
    }
    Ok((min as u32, max as u32))
}

/// `ncclNvlsInit`'s channel count (`NVLS_NCHANNELS_*`, or `NCCL_NVLS_NCHANNELS` when positive), kept within
/// the CTA bounds.
pub fn nvls_channels(comp_cap: u32, multi_node: bool, ctas: (u32, u32), env: &Env) -> Result<u32, GraphError> {
    let maxch = max_channels(env)?;
    let default = if comp_cap >= 100 {
        if multi_node {
            NVLS_NCHANNELS_SM100
        } else {
            NVLS_NCHANNELS_SM100_NVL
        }
    } else {
        NVLS_NCHANNELS_SM90
    };
    let n = env.int("NCCL_NVLS_NCHANNELS", default as i64)?;
    let n = if n > 0 { n.min(maxch as i64) as u32 } else { default };
    Ok(n.min(ctas.1).max(ctas.0))
}

fn pow2_up(x: u32) -> u32 {
    x.max(1).next_power_of_two()
}

/// Runs preset and postset for `shape.nnodes` identical nodes and returns rings, trees and channel counts.
pub fn connect(graphs: &Graphs, shape: &CommShape, env: &Env) -> Result<Connected, GraphError> {
    let maxch = max_channels(env)?;
    let k = shape.ranks_per_node as usize;
    let nnodes = shape.nnodes as usize;
    let nranks = k * nnodes;
    if k == 0 || nnodes == 0 {
        return Err(GraphError::Input("a communicator needs at least one node and one rank per node".into()));
    }
    let mut lines = Vec::new();
    let n_channels = graphs.ring.n_channels.min(graphs.tree.n_channels) as usize;
    for g in [&graphs.ring, &graphs.tree] {
        if g.channels.len() < n_channels || g.channels.iter().any(|c| c.intra.len() != k) {
            return Err(GraphError::Input(format!(
                "pattern {} graph has {} channels of {:?} GPUs, expected {n_channels} channels of {k}",
                g.pattern.id(),
                g.channels.len(),
                g.channels.iter().map(|c| c.intra.len()).collect::<Vec<_>>()
            )));
        }
        // Ranks inside a node are 0..k (a print's global ranks are renumbered before the search).
        if let Some(r) =
            g.channels.iter().flat_map(|c| &c.intra).find(|&&r| usize::try_from(r).map_or(true, |r| r >= k))
        {
            return Err(GraphError::Input(format!(
                "pattern {} graph names rank {r}, outside the node's ranks 0-{}",
                g.pattern.id(),
                k - 1
            )));
        }
    }
    let global = |node: usize, local: i32| (node * k) as i32 + local;

    // Preset: each rank's view inside its node (the same on every node, shifted by node * k).
    let tree_pattern = graphs.tree.pattern;
    let child0 = if tree_pattern == Pattern::Tree { 0 } else { 1 }.min(k - 1);
    let child1 = if tree_pattern == Pattern::SplitTree { 1 } else { 0 }.min(k - 1);
    let mut ring_prev = vec![vec![-1i32; nranks]; n_channels];
    let mut ring_next = vec![vec![-1i32; nranks]; n_channels];
    let mut trees = vec![vec![TreeState::EMPTY; nranks]; 2 * n_channels];
    let mut ring_recv = vec![vec![0i32; nnodes]; n_channels];
    let mut ring_send = vec![vec![0i32; nnodes]; n_channels];
    let (mut to_parent, mut to_child0, mut to_child1) = (
        vec![vec![0i32; nnodes]; n_channels],
        vec![vec![0i32; nnodes]; n_channels],
        vec![vec![0i32; nnodes]; n_channels],
    );
    for c in 0..n_channels {
        let ring = &graphs.ring.channels[c].intra;
        let tree = &graphs.tree.channels[c].intra;
        // crossNic 2 rings alternate on odd nodes to avoid crossing rails (postset's exchange).
        for n in 0..nnodes {
            let swap = graphs.ring.cross_nic == 2 && n_channels & 1 == 0 && n & 1 == 1;
            let rc = if swap { c ^ 1 } else { c };
            let ring = if swap { &graphs.ring.channels[rc].intra } else { ring };
            ring_recv[c][n] = global(n, ring[0]);
            ring_send[c][n] = global(n, ring[k - 1]);
            for i in 0..k {
                let r = global(n, ring[i]) as usize;
                ring_prev[c][r] = if i == 0 { -1 } else { global(n, ring[i - 1]) };
                ring_next[c][r] = if i == k - 1 { -1 } else { global(n, ring[i + 1]) };
            }
            to_parent[c][n] = global(n, tree[0]);
            to_child0[c][n] = global(n, tree[child0]);
            to_child1[c][n] = global(n, tree[child1]);
            for i in 0..k {
                let r = global(n, tree[i]) as usize;
                let mut t = TreeState::EMPTY;
                t.up = if i == 0 { -1 } else { global(n, tree[i - 1]) };
                t.down[0] = if i == k - 1 { -1 } else { global(n, tree[i + 1]) };
                trees[c][r] = t;
                trees[c + n_channels][r] = t;
            }
        }
    }

    // connectRings: a node's last rank sends to the next node's first rank.
    for c in 0..n_channels {
        for n in 0..nnodes {
            let prev_send = ring_send[c][(n + nnodes - 1) % nnodes];
            ring_prev[c][ring_recv[c][n] as usize] = prev_send;
            let next_recv = ring_recv[c][(n + 1) % nnodes];
            ring_next[c][ring_send[c][n] as usize] = next_recv;
        }
    }

    // connectTrees: the double binary tree over nodes, entered through each node's chain head and children.
    let depth = tree_depth(nranks as i32, nnodes as i32);
    for n in 0..nnodes {
        let (t0, t1) = dtree(nnodes as i32, n as i32);
        for c in 0..n_channels {
            for (tl, ch) in [(t0, c), (t1, c + n_channels)] {
                if tl.up >= 0 {
                    let from = if tl.child_type == 0 { &to_child0[c] } else { &to_child1[c] };
                    trees[ch][to_parent[c][n] as usize].up = from[tl.up as usize];
                }
                if tl.down0 >= 0 {
                    trees[ch][to_child0[c][n] as usize].add_down(to_parent[c][tl.down0 as usize])?;
                }
                if tl.down1 >= 0 {
                    trees[ch][to_child1[c][n] as usize].add_down(to_parent[c][tl.down1 as usize])?;
                }
            }
        }
    }
    // `Tree %d : up -> rank -> d0/d1/d2` from the ranks that talk across nodes, both trees per channel.
    let mut tree_lines = Vec::new();
    for r in 0..nranks as i32 {
        let node = r as usize / k;
        for c in 0..n_channels {
            if [&to_parent, &to_child0, &to_child1].iter().any(|v| v[c][node] == r) {
                for ch in [c, c + n_channels] {
                    let t = trees[ch][r as usize];
                    let text = format!("Tree {ch} : {} -> {r} -> {}/{}/{}", t.up, t.down[0], t.down[1], t.down[2]);
                    tree_lines.push(InfoLine::graph(text));
                }
            }
        }
    }
    lines.extend(tree_lines);

    // Duplicate rings (trees were duplicated above), then the optional extra copies and the user limits.
    let mut prev: Vec<Vec<i32>> = ring_prev.iter().chain(ring_prev.iter()).cloned().collect();
    let mut next: Vec<Vec<i32>> = ring_next.iter().chain(ring_next.iter()).cloned().collect();
    let mut n = (2 * n_channels).min(maxch as usize);
    // copyChannels: channels start..end repeat channels 0.. in order.
    let copy = |prev: &mut Vec<Vec<i32>>,
                next: &mut Vec<Vec<i32>>,
                trees: &mut Vec<Vec<TreeState>>,
                start: usize,
                end: usize| {
        for c in start..end {
            prev.push(prev[c - start].clone());
            next.push(next[c - start].clone());
            trees.push(trees[c - start].clone());
        }
        end.max(start)
    };
    prev.truncate(n);
    next.truncate(n);
    trees.truncate(n);
    // CollNet: half as many channels again to saturate the node, except with one rank per node.
    if let Some(chain) = graphs.collnet_chain.as_ref().filter(|g| g.n_channels > 0) {
        if chain.bw_intra > chain.bw_inter && nranks > nnodes {
            n = copy(&mut prev, &mut next, &mut trees, n, (n + n / 2).min(maxch as usize));
        }
    }
    // Hopper and newer across nodes: 4 compute channels per search channel below 16.
    if shape.min_comp_cap >= 90 && nnodes > 1 && graphs.ring.bw_intra > 45.0 && n < 16 {
        n = copy(&mut prev, &mut next, &mut trees, n, 2 * n);
    }
    // NCCL_MAX_NCHANNELS and maxCTAs first (keeping the first channels), then NCCL_MIN_NCHANNELS and minCTAs
    // by copying them.
    let ctas = cta_limits(env, &mut lines)?;
    let (min_ch, max_ch) = channel_limits(env, &mut lines)?;
    n = n.min(max_ch as usize).min(ctas.1 as usize);
    prev.truncate(n);
    next.truncate(n);
    trees.truncate(n);
    n = copy(&mut prev, &mut next, &mut trees, n, min_ch.max(ctas.0) as usize);
    let coll = n as u32;

    let nvls = match &graphs.nvls {
        Some(g) if g.n_channels > 0 => nvls_channels(shape.min_comp_cap, nnodes > 1, ctas, env)?,
        _ => 0,
    };
    if let Some(g) = graphs.nvls.as_ref().filter(|_| nvls > 0 && nnodes > 1) {
        lines.extend(nvls_tree_lines(g, nnodes, k));
    }

    // ncclBuildRings: follow `next` from rank 0 and check the ring closes over every rank.
    let mut rings = Vec::with_capacity(n);
    for c in 0..n {
        let mut order = Vec::with_capacity(nranks);
        let mut cur = 0i32;
        for _ in 0..nranks {
            order.push(cur as u32);
            cur = next[c][cur as usize];
            if cur < 0 {
                return Err(GraphError::Internal(format!("ring {c} is broken after rank {}", order.len() - 1)));
            }
        }
        if cur != 0 {
            return Err(GraphError::Internal(format!("ring {c} does not loop back to start ({cur} != 0)")));
        }
        let mut seen = order.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != nranks {
            return Err(GraphError::Internal(format!("ring {c} does not contain every rank")));
        }
        lines.push(InfoLine::init(ring_order_line(c as u32, n as u32, &order)));
        let neighbours = (0..nranks).map(|r| (prev[c][r] as u32, r as u32, next[c][r] as u32)).collect();
        rings.push(Ring { channel: c as u32, order, truncated: false, neighbours });
    }
    // Per rank: `Ring %02d : prev -> rank -> next` for each channel, then the `Trees` summary.
    let mut out_trees = Vec::with_capacity(n * nranks);
    for r in 0..nranks {
        let mut entries = Vec::with_capacity(n);
        for c in 0..n {
            let t = trees[c][r];
            lines.push(InfoLine::graph(ring_line(c as u32, prev[c][r] as u32, r as u32, next[c][r] as u32)));
            out_trees.push(Tree { channel: c as u32, rank: r as u32, up: t.up, down: t.down.to_vec() });
            entries.push(TreeEntry { channel: c as u32, rank: r as u32, up: t.up, down: t.down });
        }
        lines.push(InfoLine::init(trees_line(&entries)));
    }

    let (p2p, per_peer) = p2p_channels(coll, nranks, nnodes, shape, env)?;
    let counts = ChannelCounts {
        coll: Some(coll),
        collnet: Some(coll),
        nvls: Some(nvls),
        p2p: Some(p2p),
        p2p_per_peer: Some(per_peer),
    };
    lines.push(InfoLine::init(collscope_model::lines::channel_counts_line(&counts)));
    Ok(Connected { counts, rings, trees: out_trees, tree_depth: depth, lines })
}

/// `connectNvls` across nodes: each head GPU (the first GPU of an NVLS channel, once each) joins the double
/// binary tree of its peers on the other nodes. Lines: `NVLS Head %2d:` with the head's rank on each node
/// (first 20 nodes), then every rank's `NVLS Trees : d0/d1/d2->rank->up d0/d1/d2->rank->up` for channels 0 and 1.
fn nvls_tree_lines(g: &Graph, nnodes: usize, k: usize) -> Vec<InfoLine> {
    let mut heads: Vec<i32> = Vec::new();
    for c in &g.channels {
        if let Some(&h) = c.intra.first() {
            if !heads.contains(&h) {
                heads.push(h);
            }
        }
    }
    let nranks = (nnodes * k) as i32;
    let global = |node: i32, local: i32| node * k as i32 + local;
    let mut lines = Vec::new();
    for (h, &head) in heads.iter().enumerate() {
        let mut line = format!("NVLS Head {h:2}:");
        for n in 0..nnodes.min(20) {
            line.push_str(&format!(" {:2}", global(n as i32, head)));
        }
        lines.push(InfoLine::init(line));
    }
    for r in 0..nranks {
        let (node, local) = (r / k as i32, r % k as i32);
        let head_rank = heads.iter().position(|&h| h == local).map_or(-1, |h| h as i32);
        let down = nranks + 1 + head_rank;
        let (t0, t1) = dtree(nnodes as i32, node);
        let map = |x: i32| if x == -1 || head_rank < 0 { -1 } else { global(x, local) };
        let mut text = String::from("NVLS Trees :");
        for t in [t0, t1] {
            let mut tree_down = [down, -1, -1];
            let mut ix = 1;
            for d in [map(t.down0), map(t.down1)] {
                if d != -1 {
                    tree_down[ix] = d;
                    ix += 1;
                }
            }
            text.push_str(&format!(" {}/{}/{}->{r}->{}", tree_down[0], tree_down[1], tree_down[2], map(t.up)));
        }
        lines.push(InfoLine::graph(text));
    }
    lines
}

/// `ncclTopoComputeP2pChannels`: p2p channels bounded by `NCCL_MIN/MAX_P2P_NCHANNELS`, channels per peer the
/// smallest need over local NVLink peers (2 per NVLink's worth of bandwidth) and remote peers (2 per NIC,
/// fewer at scale), both rounded up to powers of two.
fn p2p_channels(
    coll: u32,
    nranks: usize,
    nnodes: usize,
    shape: &CommShape,
    env: &Env,
) -> Result<(u32, u32), GraphError> {
    let maxch = max_channels(env)?;
    let max = env.int("NCCL_MAX_P2P_NCHANNELS", maxch as i64)?;
    let min = env.int("NCCL_MIN_P2P_NCHANNELS", 1)?;
    let p2p = (coll as i64).min(max).max(min).clamp(1, maxch as i64) as u32;
    let mut min_channels = p2p;
    if shape.ranks_per_node > 1 {
        min_channels = min_channels.min(shape.p2p_local_peer_channels);
    }
    if nnodes > 1 {
        let mut per_net_max = 2u32;
        while per_net_max as usize * nranks > p2p as usize * 4 && per_net_max > 1 {
            per_net_max /= 2;
        }
        min_channels = min_channels.min(shape.net_count_by_bw.max(per_net_max));
    }
    let p2p = pow2_up(p2p).min(maxch);
    Ok((p2p, pow2_up(min_channels).min(p2p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{GraphChannel, PathType};

    fn has(c: &Connected, text: &str) -> bool {
        c.lines.iter().any(|l| l.text == text)
    }

    fn graph(pattern: Pattern, n: u32, bw: f64, order: &[i32], cross_nic: u32) -> Graph {
        Graph {
            pattern,
            n_channels: n,
            bw_intra: bw,
            bw_inter: bw,
            type_intra: PathType::NVL,
            type_inter: PathType::PIX,
            same_channels: true,
            cross_nic,
            channels: (0..n).map(|_| GraphChannel { intra: order.to_vec(), inter: vec![0, 0] }).collect(),
            host: None,
        }
    }

    fn a100(nnodes: u32) -> (Graphs, CommShape) {
        let order = [0, 1, 2, 3, 4, 5, 6, 7];
        let g = Graphs {
            ring: graph(Pattern::Ring, 12, 20.0, &order, 0),
            tree: graph(Pattern::BalancedTree, 12, 20.0, &order, 0),
            nvls: None,
            collnet_direct: None,
            collnet_chain: None,
        };
        let shape =
            CommShape { nnodes, ranks_per_node: 8, min_comp_cap: 80, p2p_local_peer_channels: 24, net_count_by_bw: 0 };
        (g, shape)
    }

    #[test]
    fn a_graph_naming_a_rank_outside_the_node_is_an_error_not_a_panic() {
        // A print that names GPUs by global rank (8-15) gave graphs of ranks 8-15 to an 8-GPU node.
        let (mut g, shape) = a100(2);
        g.ring = graph(Pattern::Ring, 12, 20.0, &[8, 9, 10, 11, 12, 13, 14, 17], 0);
        let e = connect(&g, &shape, &Env::default()).unwrap_err().to_string();
        assert!(e.contains("names rank 8, outside the node's ranks 0-7"), "{e}");
        g.ring = graph(Pattern::Ring, 12, 20.0, &[0, 1, 2, 3, 4, 5, 6, -1], 0);
        assert!(connect(&g, &shape, &Env::default()).is_err());
    }

    #[test]
    fn two_a100_nodes_match_reference_text_rings_and_trees() {
        let (g, shape) = a100(2);
        let c = connect(&g, &shape, &Env::default()).unwrap();
        assert_eq!(c.counts.coll, Some(24));
        assert_eq!(c.rings.len(), 24);
        assert_eq!(c.rings[0].order, (0..16).collect::<Vec<u32>>());
        // Reference text 000 pads ranks to 4 columns; rings.cc's dumpLine pads to the width of nranks-1 (2 here).
        assert!(has(&c, "Channel 00/24 :  0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15"));
        assert!(has(&c, "Ring 00 : 15 -> 0 -> 1"));
        assert!(has(&c, "Tree 0 : -1 -> 0 -> 1/8/-1"));
        assert!(has(&c, "Tree 12 : 8 -> 0 -> 1/-1/-1"));
        let trees0 = &c.lines.iter().find(|l| l.text.starts_with("Trees [0] ")).unwrap().text;
        assert!(trees0.starts_with("Trees [0] 1/8/-1->0->-1 [1] 1/8/-1->0->-1"), "{trees0}");
        assert!(trees0.contains(" [12] 1/-1/-1->0->8"), "{trees0}");
        assert_eq!(c.tree_depth, 8);
        // Reference text 000 prints `32 p2p channels per peer`; NCCL 2.28.9's ncclTopoGetNchannels gives remote
        // peers 2 channels (paths.cc), so the source's answer is 2.
        assert_eq!(
            c.lines.last().unwrap().text,
            "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 2 p2p channels per peer"
        );
    }

    #[test]
    fn one_node_ring_closes_inside_the_node() {
        let (g, shape) = a100(1);
        let c = connect(&g, &shape, &Env::default()).unwrap();
        assert!(has(&c, "Ring 00 : 7 -> 0 -> 1"));
        assert!(has(&c, "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1 [2] 1/-1/-1->0->-1 [3] 1/-1/-1->0->-1 [4] 1/-1/-1->0->-1 [5] 1/-1/-1->0->-1 [6] 1/-1/-1->0->-1 [7] 1/-1/-1->0->-1 [8] 1/-1/-1->0->-1 [9] 1/-1/-1->0->-1 [10] 1/-1/-1->0->-1 [11] 1/-1/-1->0->-1 [12] 1/-1/-1->0->-1 [13] 1/-1/-1->0->-1 [14] 1/-1/-1->0->-1 [15] 1/-1/-1->0->-1 [16] 1/-1/-1->0->-1 [17] 1/-1/-1->0->-1 [18] 1/-1/-1->0->-1 [19] 1/-1/-1->0->-1 [20] 1/-1/-1->0->-1 [21] 1/-1/-1->0->-1 [22] 1/-1/-1->0->-1 [23] 1/-1/-1->0->-1"));
        assert_eq!(
            c.lines.last().unwrap().text,
            "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"
        );
    }

    #[test]
    fn user_channel_limits_cut_then_copy() {
        let (g, shape) = a100(2);
        let env = Env::from_pairs([("NCCL_MAX_NCHANNELS", "4"), ("NCCL_MIN_NCHANNELS", "10")]);
        let c = connect(&g, &shape, &env).unwrap();
        assert_eq!(c.counts.coll, Some(10));
        assert_eq!(c.rings[9].order, c.rings[1].order);
        let env = Env::from_pairs([("NCCL_MAX_CTAS", "3"), ("NCCL_MIN_CTAS", "0")]);
        let c = connect(&g, &shape, &env).unwrap();
        assert_eq!(c.counts.coll, Some(3));
        assert!(has(&c, "NCCL_MIN_CTAS 0 is too low, leaving it set at 1"));
        let mut lines = Vec::new();
        let env = Env::from_pairs([("NCCL_MIN_CTAS", "80"), ("NCCL_MAX_CTAS", "8")]);
        assert_eq!(cta_limits(&env, &mut lines).unwrap(), (8, 8));
        assert_eq!(lines[0].text, "minCTAs 80 is larger than #channels upper limit 64, cap it to 64");
        assert_eq!(lines[1].text, "minCTAs 64 is larger than maxCTAs 8, set both to 8");
        assert_eq!(nvls_channels(90, false, (8, 8), &Env::default()).unwrap(), 8);
        assert_eq!(nvls_channels(100, true, (1, 64), &Env::default()).unwrap(), 32);
        assert_eq!(nvls_channels(100, false, (1, 64), &Env::from_pairs([("NCCL_NVLS_NCHANNELS", "-1")])).unwrap(), 24);
        let env = Env::from_pairs([("NCCL_MAX_NCHANNELS", "0")]);
        lines.clear();
        assert_eq!(channel_limits(&env, &mut lines).unwrap(), (0, 1));
        assert_eq!(lines, [InfoLine::graph_env("User asked for a maximum of 0 channels, setting it to 1".into())]);
        let env = Env::from_pairs([("NCCL_MIN_NRINGS", "100"), ("NCCL_MAX_NCHANNELS", "x")]);
        let e = channel_limits(&env, &mut lines).unwrap_err().to_string();
        assert!(e.contains("NCCL_MAX_NCHANNELS='x'"), "{e}");
        assert_eq!(lines.last().unwrap().text, "User asked for a minimum of 100 channels, limiting to 64");
    }

    #[test]
    fn four_nodes_trees_span_every_node() {
        let (g, shape) = a100(4);
        let c = connect(&g, &shape, &Env::default()).unwrap();
        // dtree(4): first tree 0 -> 2 -> {1, 3}; node heads are ranks 0, 8, 16, 24.
        let t = |ch: u32, r: u32| c.trees.iter().find(|t| t.channel == ch && t.rank == r).unwrap().clone();
        assert_eq!(t(0, 0).down, vec![1, 16, -1]);
        assert_eq!(t(0, 16).up, 0);
        // Node 2's chain head 16 takes child 1 (node 3) and the second GPU 17 takes child 0 (node 1), as in
        // NCCL's balanced tree (child0Index 1, child1Index 0).
        assert_eq!(t(0, 16).down, vec![17, 24, -1]);
        assert_eq!(t(0, 17).down, vec![18, 8, -1]);
        assert_eq!(t(0, 8).up, 17);
        assert_eq!(c.rings[0].neighbours[8], (7, 8, 9));
        assert_eq!(c.rings[0].neighbours[31], (30, 31, 0));
    }

    #[test]
    fn collnet_adds_half_the_channels_again() {
        let (mut g, shape) = a100(2);
        let mut chain = graph(Pattern::Tree, 12, 20.0, &[0, 1, 2, 3, 4, 5, 6, 7], 0);
        chain.bw_inter = 10.0;
        g.collnet_chain = Some(chain);
        let c = connect(&g, &shape, &Env::default()).unwrap();
        assert_eq!(c.counts.coll, Some(36));
        assert_eq!(c.rings[30].order, c.rings[6].order);
    }

    #[test]
    fn cross_nic_two_alternates_rings_on_odd_nodes() {
        let (mut g, shape) = a100(2);
        g.ring.cross_nic = 2;
        g.ring.channels[1].intra = vec![7, 6, 5, 4, 3, 2, 1, 0];
        let c = connect(&g, &shape, &Env::default()).unwrap();
        // Channel 0: node 0 uses its channel 0 (0..7), node 1 its channel 1 (15..8).
        assert_eq!(c.rings[0].order, vec![0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8]);
    }

    #[test]
    fn align_takes_the_worst_over_ranks() {
        let a = graph(Pattern::Ring, 12, 20.0, &[0, 1], 0);
        let mut b = graph(Pattern::Ring, 8, 24.0, &[0, 1], 1);
        b.type_inter = PathType::PXB;
        b.same_channels = false;
        let m = align(&[a, b]).unwrap();
        assert_eq!(
            (m.n_channels, m.bw_intra, m.type_inter, m.cross_nic, m.same_channels),
            (8, 20.0, PathType::PXB, 1, false)
        );
        assert_eq!(m.channels.len(), 8);
    }
}
