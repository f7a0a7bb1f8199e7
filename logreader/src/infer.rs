//! Facts a partial log does not print but implies: job size, node count, network, channel count. Each
//! inference is recorded with its sources, so a reader can tell printed facts from concluded ones; where nothing
//! says, the fact stays unknown (a single excerpt of one rank is not a job of one rank).

use crate::job::{Job, Place};
use collscope_model::{Connection, Direction, Inference, NodeType, Transport};
use std::collections::{BTreeMap, BTreeSet};

fn note(job: &mut Job, fact: &str, value: impl ToString, reason: String) {
    job.facts.inferred.push(Inference { fact: fact.into(), value: value.to_string(), reason });
}

/// Fills `nccl_version`, `nranks`, `nnodes`, `network` and channel counts.
pub(crate) fn infer(job: &mut Job) {
    version(job);
    network(job);
    job.facts.nvls_used = job.nvls == Some(true);
    let local = Local::of(job);
    let nranks = nranks(job, &local);
    job.snap.nranks = nranks;
    job.snap.nnodes = nnodes(job, nranks, &local);
    if job.snap.channels.coll.is_none() {
        let n = job.ring_nchannels.or_else(|| job.snap.rings.iter().map(|r| r.channel.saturating_add(1)).max());
        if let Some(n) = n {
            job.snap.channels.coll = Some(n);
            note(job, "channels.coll", n, "not printed; from the ring channel prints".into());
        }
    }
}

/// Connections for the ring edges no connection line covers, each marked inferred: between two nodes (two hosts,
/// or one rank outside a whole node's ranks) NET, NCCL's only transport off a node, over the job's network where
/// the log names one; within a node the kind the log prints for the same pair on another channel, else none (P2P
/// or SHM cannot be told apart).
/// Returned rather than added, so that the diagnosis rules, which count printed connections, do not see them.
pub(crate) fn ring_edges(job: &mut Job) -> Vec<Connection> {
    let s = &job.snap;
    let covered: BTreeSet<(u32, u32, u32)> = s.connections.iter().map(|c| (c.channel, c.src, c.dst)).collect();
    let mut by_pair: BTreeMap<(u32, u32), &Connection> = BTreeMap::new();
    for c in s.connections.iter().filter(|c| c.transport != Transport::Net) {
        by_pair.entry((c.src, c.dst)).or_insert(c);
    }
    let host = |r: u32| match job.rank_host.get(&r) {
        Some(Place::Host(h)) => Some(h.as_str()),
        _ => None,
    };
    // Ranks known to share a node; a group as large as a node's exact rank count is the whole node, so a rank
    // outside it is on another (a log without hosts: one rank's print of a 2-node ring).
    let groups = same_node_groups(job);
    let group = |r: u32| groups.iter().find(|g| g.contains(&r));
    // Ranks per node: printed or counted, else the job's ranks over its nodes (as `nnodes` concluded them).
    let even = match (s.nranks, s.nnodes) {
        (Some(r), Some(n)) if n > 0 && r.is_multiple_of(n) => Some(r / n),
        _ => None,
    };
    let per_node = Local::of(job).exact.map(|(l, _)| l).or(even).map(|l| l as usize);
    let outside_whole_node = |a: u32, b: u32| group(a).is_some_and(|g| Some(g.len()) == per_node && !g.contains(&b));
    let other_node = |a: u32, b: u32| {
        matches!((host(a), host(b)), (Some(x), Some(y)) if x != y)
            || outside_whole_node(a, b)
            || outside_whole_node(b, a)
    };
    let same_node = |a: u32, b: u32| group(a).is_some_and(|g| g.contains(&b));
    let mut out: Vec<Connection> = Vec::new();
    let mut seen = BTreeSet::new();
    let (mut net, mut local) = (0usize, 0usize);
    for ring in &s.rings {
        let n = ring.order.len();
        let edges = if ring.truncated {
            n.saturating_sub(1)
        } else if n >= 2 {
            n
        } else {
            0
        };
        for i in 0..edges {
            let (src, dst) = (ring.order[i], ring.order[(i + 1) % n]);
            let key = (ring.channel, src, dst);
            if src == dst || covered.contains(&key) || !seen.insert(key) {
                continue;
            }
            let conn = match (other_node(src, dst), same_node(src, dst)) {
                (true, _) => {
                    net += 1;
                    let mut c = Connection::new(ring.channel, src, dst, Direction::Send, Transport::Net);
                    c.mode.clone_from(&s.network);
                    c.net.clone_from(&s.network);
                    c
                }
                (false, true) => match by_pair.get(&(src, dst)) {
                    Some(&printed) => {
                        local += 1;
                        Connection { channel: ring.channel, device: None, ..printed.clone() }
                    }
                    None => continue,
                },
                (false, false) => continue,
            };
            out.push(Connection { inferred: true, ..conn });
        }
    }
    if !out.is_empty() {
        let reason = format!(
            "no connection line for {} ring edge(s): {net} between two nodes taken as NET{}, {local} within a node \
             given the kind the log prints for the same pair on another channel",
            out.len(),
            job.snap.network.as_deref().map_or(String::new(), |n| format!(" over {n}")),
        );
        note(job, "connections", out.len(), reason);
    }
    out
}

/// What the log says about ranks per node: exactly (printed, or every GPU of a node seen), or at least.
struct Local {
    exact: Option<(u32, String)>,
    /// A lower bound: the most ranks known to share a node, or a CUDA device index plus one.
    at_least: u32,
}

impl Local {
    fn of(job: &Job) -> Local {
        if let Some(l) = job.snap.communicators.iter().filter_map(|c| c.local_ranks).max() {
            return Local { exact: Some((l, "localRanks printed".into())), at_least: l };
        }
        if let Some((l, source)) = job.size.local {
            return Local { exact: Some((l, format!("{source} printed"))), at_least: l };
        }
        let topo_gpus = job
            .snap
            .topology
            .iter()
            .map(|t| t.nodes.iter().filter(|n| n.kind == NodeType::GPU && n.gpu.is_some()).count() as u32)
            .max()
            .unwrap_or(0);
        if topo_gpus > 0 {
            return Local {
                exact: Some((topo_gpus, "the GPUs of a host's topology print".into())),
                at_least: topo_gpus,
            };
        }
        let by_dev = job.size.devs.values().filter_map(|d| d.last()).map(|&d| d as u32 + 1).max().unwrap_or(0);
        let by_group = same_node_groups(job).into_iter().map(|g| g.len() as u32).max().unwrap_or(0);
        let at_least = by_dev.max(by_group);
        // Every device 0..n-1 of a host printing, n a power of two (GPU servers carry 1, 2, 4, 8 or 16 GPUs);
        // one GPU per node only when two or more hosts show it.
        let full = |d: &BTreeSet<i32>| {
            let n = d.len() as u32;
            n.is_power_of_two() && d.last().is_some_and(|&m| m as u32 + 1 == n)
        };
        let full_hosts: Vec<u32> = job.size.devs.values().filter(|d| full(d)).map(|d| d.len() as u32).collect();
        let exact = match full_hosts.iter().max() {
            Some(&n) if n == at_least && (n > 1 || full_hosts.len() > 1) => {
                Some((n, format!("devices 0..{} all print on a host", n - 1)))
            }
            _ => None,
        };
        Local { exact, at_least }
    }

    /// A power of two at least `at_least`: the ranks per node a GPU server would have.
    fn rounded(&self) -> u32 {
        self.at_least.checked_next_power_of_two().unwrap_or(self.at_least)
    }
}

fn nranks(job: &mut Job, local: &Local) -> Option<u32> {
    if let Some((n, source)) = job.size.nranks {
        if source != "nranks (Init line)" && source != "nRanks" {
            note(job, "nranks", n, format!("printed only in {source}"));
        }
        return Some(n);
    }
    if let Some(n) = job.size.ring {
        note(job, "nranks", n, "not printed; the length of a whole ring order (`Channel 00/02 :  0 1 ...`)".into());
        return Some(n);
    }
    if job.size.ring_pair {
        note(job, "nranks", 2, "not printed; a rank's ring neighbours are one rank (`Ring 00 : 0 -> 1 -> 0`)".into());
        return Some(2);
    }
    let seen = job.max_rank.map_or(0, |r| r.saturating_add(1));
    let hosts = job.snap.hosts.len() as u32;
    let min_nodes = hosts.max(if job.size.multi_node { 2 } else { 1 });
    if seen > 0 {
        // The highest rank seen, when it fills whole nodes, as many as the log shows at least.
        let per_node = local.exact.as_ref().map_or(local.rounded(), |(l, _)| *l);
        let nodes = if per_node > 0 && seen.is_multiple_of(per_node) { seen / per_node } else { 0 };
        let one = if nodes == 1 { one_node_shown(job) } else { None };
        let whole = nodes >= min_nodes && (nodes >= 2 || one.is_some());
        if whole && (local.exact.is_some() || local.at_least >= 2) {
            let reason = format!(
                "not printed; ranks up to {} seen, whole nodes of {per_node} ranks ({}){}",
                seen - 1,
                local.exact.as_ref().map_or("rounded up from the devices seen".to_string(), |(_, s)| s.clone()),
                one.map_or(String::new(), |why| format!("; one node: {why}"))
            );
            note(job, "nranks", seen, reason);
            return Some(seen);
        }
        // Every host of a multi-host excerpt printing: hosts x ranks per node, when no rank lies beyond.
        let all = hosts.saturating_mul(local.rounded());
        if hosts >= 2 && local.at_least >= 2 && seen <= all {
            let reason = format!("not printed; {hosts} hosts print, {} ranks per node (devices seen)", local.rounded());
            note(job, "nranks", all, reason);
            return Some(all);
        }
        return None;
    }
    // No rank printed at all: one host whose every GPU prints, and no sign of another node.
    match &local.exact {
        Some((l, source)) if hosts == 1 && job.size.devs.len() == 1 => {
            let why = one_node_shown(job)?;
            let (l, reason) = (*l, format!("not printed; one host, {source}, and one node: {why}"));
            note(job, "nranks", l, reason);
            Some(l)
        }
        _ => None,
    }
}

/// What shows that a job stays on one node, beyond not seeing another: its connections, rings, trees or graphs
/// printed with none leaving the node, or a bootstrap over loopback. Without it one node's lines say nothing of
/// other nodes, and one node is never concluded (issue 17: never assert an inferred 1).
fn one_node_shown(job: &Job) -> Option<&'static str> {
    if job.size.multi_node {
        return None;
    }
    let s = &job.snap;
    if !s.connections.is_empty() || !s.rings.is_empty() || !s.trees.is_empty() {
        Some("connections printed, none leaving the node")
    } else if !s.graphs.is_empty() || job.nvls == Some(true) {
        Some("graphs printed, none leaving the node")
    } else if !s.bootstrap.is_empty() && s.bootstrap.iter().all(|b| b.address.starts_with("127.")) {
        Some("bootstrap over loopback")
    } else {
        None
    }
}

/// Every rank on one host: `n` ranks and `n` CUDA devices of the only host printing (a rank drives one device).
fn all_ranks_on_one_host(job: &Job, n: u32) -> bool {
    let mut devs = job.size.devs.values();
    job.snap.hosts.len() <= 1 && devs.len() == 1 && devs.next().is_some_and(|d| d.len() as u32 == n)
}

fn nnodes(job: &mut Job, nranks: Option<u32>, local: &Local) -> Option<u32> {
    if let Some((n, source)) = job.size.nnodes {
        if source != "nNodes" {
            note(job, "nnodes", n, format!("printed only in {source}"));
        }
        return Some(n);
    }
    let n = nranks?;
    if all_ranks_on_one_host(job, n) {
        note(
            job,
            "nnodes",
            1,
            format!("not printed; {n} ranks and {n} devices of one host print: every rank is on it"),
        );
        return Some(1);
    }
    // One node otherwise only when the log shows it, or more than half the ranks print on one host (a second
    // node would hold fewer ranks than this one).
    let one_node = one_node_shown(job).map(str::to_string).or_else(|| {
        (local.at_least.saturating_mul(2) > n).then(|| format!("{} of {n} ranks on one host", local.at_least))
    });
    let one_node_why = one_node.as_ref().map_or(String::new(), |why| format!("; one node: {why}"));
    let hosts = job.snap.hosts.len() as u32;
    let at_least = hosts.max(if job.size.multi_node { 2 } else { 1 });
    if let Some((l, source)) = &local.exact {
        if *l > 0 && n.is_multiple_of(*l) && (n / l >= 2 || one_node.is_some()) {
            let (m, reason) = (n / l, format!("not printed; {n} ranks at {l} per node ({source}){one_node_why}"));
            note(job, "nnodes", m, reason);
            return Some(m);
        }
    }
    if local.at_least == 0 {
        return None;
    }
    // Eight or more GPUs a node (a device index of 7 or more, a power of two: what GPU servers carry), or at most
    // as many nodes as the fewest ranks per node allow.
    let exact_pow2 = local.at_least.is_power_of_two() && local.at_least >= 8 && n.is_multiple_of(local.at_least);
    let most = n / local.at_least;
    let m = if exact_pow2 {
        n / local.at_least
    } else if most == at_least {
        most
    } else {
        return None;
    };
    if m < at_least || (m == 1 && one_node.is_none()) {
        return None;
    }
    let reason = format!(
        "not printed; {n} ranks, at least {} per node (devices and ranks seen together), {hosts} hosts print{}",
        local.at_least,
        if m == 1 { one_node_why.as_str() } else { "" }
    );
    note(job, "nnodes", m, reason);
    Some(m)
}

fn version(job: &mut Job) {
    let versions: Vec<(String, Vec<String>)> = job
        .versions
        .iter()
        .map(|(v, who)| (v.clone(), who.iter().filter(|w| !w.is_empty()).cloned().collect()))
        .collect();
    job.snap.nccl_version = job.versions.iter().max_by_key(|(_, who)| who.len()).map(|(v, _)| v.clone());
    for c in &mut job.snap.communicators {
        if versions.len() == 1 {
            c.version = job.snap.nccl_version.clone();
        }
    }
    job.facts.versions = versions;
}

fn network(job: &mut Job) {
    let mut by_conn: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &job.snap.connections {
        if let (Transport::Net, Some(n)) = (c.transport, c.net.as_deref()) {
            *by_conn.entry(n).or_default() += 1;
        }
    }
    let from_conn = by_conn.into_iter().max_by_key(|(_, n)| *n).map(|(k, _)| k.to_string());
    job.snap.network = job
        .using_network
        .clone()
        .or(from_conn)
        .or_else(|| job.plugin_nets.iter().next().cloned())
        .or_else(|| ["IB", "Socket"].into_iter().find(|n| job.net_using.contains(*n)).map(str::to_string))
        .or_else(|| job.net_using.iter().next().cloned());
}

struct UnionFind(BTreeMap<u32, u32>);

impl UnionFind {
    /// Iterative, with path compression: recursion went as deep as a chain of ranks and a million ranks' ring
    /// lines overflowed the stack (an abort).
    fn find(&mut self, x: u32) -> u32 {
        let mut root = x;
        loop {
            let p = *self.0.entry(root).or_insert(root);
            if p == root {
                break;
            }
            root = p;
        }
        let mut y = x;
        while y != root {
            y = self.0.insert(y, root).unwrap_or(root);
        }
        root
    }
    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0.insert(ra, rb);
        }
    }
}

/// Ranks known to share a node: same host, joined by P2P or SHM, and the ranks between two such ranks on a ring
/// (NCCL's rings visit each node's GPUs in one stretch) when the other way round crosses a NET hop.
fn same_node_groups(job: &Job) -> Vec<BTreeSet<u32>> {
    let mut uf = UnionFind(BTreeMap::new());
    let mut by_place: BTreeMap<&Place, u32> = BTreeMap::new();
    for (&r, p) in &job.rank_host {
        match by_place.get(p) {
            Some(&first) => uf.union(first, r),
            None => {
                by_place.insert(p, r);
                uf.find(r);
            }
        }
    }
    let mut local_pairs = Vec::new();
    let mut net_pairs = BTreeSet::new();
    for c in &job.snap.connections {
        match c.transport {
            Transport::P2p | Transport::Shm => local_pairs.push((c.src, c.dst)),
            Transport::Net if c.direction != Direction::Both => {
                net_pairs.insert((c.src.min(c.dst), c.src.max(c.dst)));
            }
            _ => {}
        }
    }
    for &(a, b) in &local_pairs {
        uf.union(a, b);
    }
    for ring in job.snap.rings.iter().filter(|r| !r.truncated && r.order.len() > 2) {
        let pos: BTreeMap<u32, usize> = ring.order.iter().enumerate().map(|(i, &r)| (r, i)).collect();
        let n = ring.order.len();
        let crosses_net = |from: usize, len: usize| {
            (0..len).any(|k| {
                let (x, y) = (ring.order[(from + k) % n], ring.order[(from + k + 1) % n]);
                net_pairs.contains(&(x.min(y), x.max(y)))
            })
        };
        for &(a, b) in &local_pairs {
            let (Some(&pa), Some(&pb)) = (pos.get(&a), pos.get(&b)) else { continue };
            let (lo, hi) = (pa.min(pb), pa.max(pb));
            let (inner, outer) = (crosses_net(lo, hi - lo), crosses_net(hi, n - (hi - lo)));
            let arc: Vec<usize> = match (inner, outer) {
                (false, true) => (lo..=hi).collect(),
                (true, false) => (hi..=lo + n).map(|i| i % n).collect(),
                _ => continue,
            };
            for w in arc.windows(2) {
                uf.union(ring.order[w[0]], ring.order[w[1]]);
            }
        }
    }
    let keys: Vec<u32> = uf.0.keys().copied().collect();
    let mut groups: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for k in keys {
        let root = uf.find(k);
        groups.entry(root).or_default().insert(k);
    }
    groups.into_values().collect()
}
