//! Facts a partial log does not print but implies: job size, node count, network, channel count. Each
//! inference is recorded with its reason, so a reader can tell printed facts from concluded ones.

use crate::job::Job;
use collscope_model::{Direction, Inference, Transport};
use std::collections::{BTreeMap, BTreeSet};

fn note(job: &mut Job, fact: &str, value: impl ToString, reason: String) {
    job.facts.inferred.push(Inference { fact: fact.into(), value: value.to_string(), reason });
}

/// Fills `nccl_version`, `nranks`, `nnodes`, `network` and channel counts.
pub fn infer(job: &mut Job) {
    version(job);
    network(job);
    job.facts.nvls_used = job.nvls == Some(true);
    let local = ranks_per_node(job);
    let nranks = match job.nranks_printed {
        Some(n) => Some(n),
        None => {
            let by_rank = job.ranks_seen.last().map(|r| r.saturating_add(1)).unwrap_or(0);
            let by_hosts = local.map_or(0, |l| l.saturating_mul(job.snap.hosts.len() as u32));
            let by_procs = job.procs_seen as u32;
            let n = by_rank.max(by_hosts).max(by_procs);
            if n > 0 {
                let reason = format!(
                    "not printed; highest rank seen {}, {} printing processes, {} hosts x {} ranks per node",
                    by_rank.saturating_sub(1),
                    by_procs,
                    job.snap.hosts.len(),
                    local.unwrap_or(0)
                );
                note(job, "nranks", n, reason);
            }
            (n > 0).then_some(n)
        }
    };
    job.snap.nranks = nranks;
    job.snap.nnodes = match job.nnodes_printed {
        Some(n) => Some(n),
        None => {
            let hosts = job.snap.hosts.len() as u32;
            let by_size = match (nranks, local) {
                (Some(n), Some(l)) if l > 0 => n.div_ceil(l),
                _ => 0,
            };
            let n = hosts.max(by_size);
            if n > 0 {
                let reason = format!(
                    "not printed; {hosts} hosts seen, {} ranks at {} ranks per node",
                    nranks.unwrap_or(0),
                    local.unwrap_or(0)
                );
                note(job, "nnodes", n, reason);
            }
            (n > 0).then_some(n)
        }
    };
    if job.snap.channels.coll.is_none() {
        let n = job.ring_nchannels.or_else(|| job.snap.rings.iter().map(|r| r.channel.saturating_add(1)).max());
        if let Some(n) = n {
            job.snap.channels.coll = Some(n);
            note(job, "channels.coll", n, "not printed; from the ring channel prints".into());
        }
    }
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

/// Ranks per node: printed (`localRanks`), or the largest group of ranks known to share a node, rounded up to a
/// power of two (GPU servers carry 1, 2, 4, 8 or 16 GPUs).
fn ranks_per_node(job: &Job) -> Option<u32> {
    if let Some(l) = job.snap.communicators.iter().filter_map(|c| c.local_ranks).max() {
        return Some(l);
    }
    let by_dev = job.max_dev.map(|d| (d as u32).saturating_add(1)).unwrap_or(0);
    let by_group = same_node_groups(job).into_iter().map(|g| g.len() as u32).max().unwrap_or(0);
    let l = by_dev.max(by_group);
    (l > 0).then(|| l.checked_next_power_of_two().unwrap_or(l))
}

struct UnionFind(BTreeMap<u32, u32>);

impl UnionFind {
    fn find(&mut self, x: u32) -> u32 {
        let p = *self.0.entry(x).or_insert(x);
        if p == x {
            return x;
        }
        let r = self.find(p);
        self.0.insert(x, r);
        r
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
    let mut by_host: BTreeMap<&str, u32> = BTreeMap::new();
    for (&r, h) in &job.rank_host {
        match by_host.get(h.as_str()) {
            Some(&first) => uf.union(first, r),
            None => {
                by_host.insert(h, r);
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
