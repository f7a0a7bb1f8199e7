//! The human-readable `topo explain` report.

use crate::cli::sizes::human;
use collscope_model::{Algorithm, Collective, Protocol, Snapshot, Tree};
use collscope_nccl::tuning::Choice;
use collscope_nccl::{Explained, Extras, VersionProfile};
use std::fmt::Write;

fn graphs(out: &mut String, ex: &Snapshot) {
    let _ = writeln!(out, "Graphs (what the search found per pattern)");
    for g in &ex.graphs {
        let _ = writeln!(out, "  {}", collscope_nccl::graph::compute::pattern_line(g));
    }
    let c = &ex.channels;
    let n = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let _ = writeln!(
        out,
        "\nChannels: {} coll, {} collnet, {} nvls, {} p2p, {} p2p per peer",
        n(c.coll),
        n(c.collnet),
        n(c.nvls),
        n(c.p2p),
        n(c.p2p_per_peer)
    );
}

/// `0-31`, `0,2..30`, `3 1 2`: a list of numbers, runs and even steps of three or more shortened.
fn compact(ns: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ns.len() {
        let step = ns.get(i + 1).map_or(0, |&b| i64::from(b) - i64::from(ns[i]));
        let mut j = i + 1;
        while step > 0 && j < ns.len() && i64::from(ns[j]) - i64::from(ns[j - 1]) == step {
            j += 1;
        }
        if j - i >= 3 {
            let sep = if step == 1 { "-".to_string() } else { format!(",{}..", ns[i + 1]) };
            parts.push(format!("{}{sep}{}", ns[i], ns[j - 1]));
            i = j;
        } else {
            parts.push(ns[i].to_string());
            i += 1;
        }
    }
    parts.join(" ")
}

/// Lines `label : text` for channels whose text is the same, channels shortened (`compact`), in channel order.
fn by_channel(out: &mut String, indent: &str, per_channel: Vec<(u32, Vec<String>)>) {
    let mut groups: Vec<(Vec<u32>, Vec<String>)> = Vec::new();
    for (ch, text) in per_channel {
        match groups.iter_mut().find(|(_, t)| *t == text) {
            Some((chs, _)) => chs.push(ch),
            None => groups.push((vec![ch], text)),
        }
    }
    for (chs, text) in groups {
        let plural = if chs.len() > 1 { "s" } else { "" };
        let head = format!("{indent}channel{plural} {} : ", compact(&chs));
        for (i, l) in text.iter().enumerate() {
            let lead = if i == 0 { head.clone() } else { " ".repeat(head.len()) };
            let _ = writeln!(out, "{lead}{l}");
        }
    }
}

/// Each distinct pattern with the nodes that follow it: `0 7 6 5 4 3 2 1  nodes 0,2..30`.
fn patterns(per_node: impl IntoIterator<Item = (u32, String)>) -> Vec<String> {
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for (node, p) in per_node {
        match groups.iter_mut().find(|(q, _)| *q == p) {
            Some((_, nodes)) => nodes.push(node),
            None => groups.push((p, vec![node])),
        }
    }
    let width = groups.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
    groups.into_iter().map(|(p, nodes)| format!("{p:<width$}  node {}", compact(&nodes))).collect()
}

/// A ring as the nodes it passes through, in order, each with its ranks in ring order (local ranks).
fn ring_summary(order: &[u32], rpn: u32) -> Vec<String> {
    // Read the ring from a node's first rank on, so no node is split between its start and its end.
    let start =
        (0..order.len()).find(|&i| order[i] / rpn != order[(i + order.len() - 1) % order.len()] / rpn).unwrap_or(0);
    let mut segments: Vec<(u32, Vec<u32>)> = Vec::new();
    for &r in order[start..].iter().chain(&order[..start]) {
        match segments.last_mut() {
            Some((node, locals)) if *node == r / rpn => locals.push(r % rpn),
            _ => segments.push((r / rpn, vec![r % rpn])),
        }
    }
    let nodes: Vec<u32> = segments.iter().map(|(n, _)| *n).collect();
    let mut lines = vec![format!("nodes {} (in ring order), local ranks in ring order:", compact(&nodes))];
    let each = segments.into_iter().map(|(n, l)| (n, l.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")));
    lines.extend(patterns(each).into_iter().map(|l| format!("  {l}")));
    lines
}

/// A channel's tree between nodes (each node's parent node, `-` for the root) and within each node (the chain
/// of local ranks from the one linked to the parent node, per node).
fn tree_summary(trees: &[&Tree], rpn: u32, nodes: u32) -> (String, Vec<String>) {
    let node = |r: i32| u32::try_from(r).ok().map(|r| r / rpn);
    let mut parent: Vec<Option<u32>> = vec![None; nodes as usize];
    let mut chains = Vec::new();
    for n in 0..nodes {
        let mine: Vec<&&Tree> = trees.iter().filter(|t| t.rank / rpn == n).collect();
        // The node's entry: its rank whose parent is elsewhere (or none: the root).
        let Some(entry) = mine.iter().find(|t| node(t.up) != Some(n)) else { continue };
        parent[n as usize] = node(entry.up);
        let mut chain = vec![entry.rank % rpn];
        let mut at = **entry;
        while let Some(next) =
            at.down.iter().find_map(|&d| mine.iter().find(|t| node(d) == Some(n) && t.rank as i32 == d))
        {
            chain.push(next.rank % rpn);
            at = **next;
        }
        let text = chain.iter().map(u32::to_string).collect::<Vec<_>>().join(" -> ");
        let text = if chain.len() == mine.len() { text } else { format!("{text} (not a chain: see --full)") };
        chains.push((n, text));
    }
    let parents: Vec<String> = parent.iter().map(|p| p.map_or("-".into(), |p| p.to_string())).collect();
    (parents.join(" "), patterns(chains))
}

fn rings_and_trees(out: &mut String, ex: &Snapshot, rpn: u32, nodes: u32, full: bool) {
    let rpn = rpn.max(1);
    if full || nodes == 1 {
        let _ = writeln!(out, "\nRings (rank order per channel; | between nodes)");
        for r in &ex.rings {
            let order: Vec<String> = r
                .order
                .iter()
                .enumerate()
                .map(|(i, k)| match i.checked_sub(1).map(|p| r.order[p] / rpn) {
                    Some(prev) if prev != k / rpn => format!("| {k}"),
                    _ => k.to_string(),
                })
                .collect();
            let _ = writeln!(out, "  {:02} : {}", r.channel, order.join(" "));
        }
        let _ = writeln!(out, "\nTrees (every rank: up -> rank -> down)");
        for n in 0..nodes {
            if nodes > 1 {
                let _ = writeln!(out, "  -- node {n} (ranks {}-{})", n * rpn, (n + 1) * rpn - 1);
            }
            for t in ex.trees.iter().filter(|t| t.rank / rpn == n) {
                let down: Vec<String> = t.down.iter().map(i32::to_string).collect();
                let _ = writeln!(out, "  Tree {} : {} -> {} -> {}", t.channel, t.up, t.rank, down.join("/"));
            }
        }
        return;
    }
    let _ = writeln!(
        out,
        "\nRings per node ({nodes} nodes x {rpn} ranks, node n has ranks {rpn}n..{rpn}n+{}; --full for every rank)",
        rpn - 1
    );
    by_channel(out, "  ", ex.rings.iter().map(|r| (r.channel, ring_summary(&r.order, rpn))).collect());
    let _ = writeln!(out, "\nTrees per node (--full for every rank)");
    let mut channels: Vec<u32> = ex.trees.iter().map(|t| t.channel).collect();
    channels.sort_unstable();
    channels.dedup();
    let (mut between, mut within) = (Vec::new(), Vec::new());
    for c in channels {
        let trees: Vec<&Tree> = ex.trees.iter().filter(|t| t.channel == c).collect();
        let (parents, chains) = tree_summary(&trees, rpn, nodes);
        between.push((c, vec![parents]));
        within.push((c, chains));
    }
    let _ = writeln!(out, "  between nodes: the parent node of nodes 0..{} (- for the root)", nodes - 1);
    by_channel(out, "    ", between);
    let _ = writeln!(out, "  within nodes: local ranks down from the one linked to the parent node");
    by_channel(out, "    ", within);
}

/// Reasons that only restate which algorithm serves which collective with which protocol.
const STRUCTURAL: [&str; 2] =
    ["the algorithm does not implement this collective", "the algorithm runs only with the Simple protocol"];

fn off(out: &mut String, ex: &Extras) {
    let _ = writeln!(out, "\nOff (why cells of the table are 0; protocols and collectives they apply to)");
    // (algorithm, reason) -> (protocols, collectives), in table order.
    type Group<'a> = ((Algorithm, &'a str), (Vec<Protocol>, Vec<Collective>));
    let mut groups: Vec<Group> = Vec::new();
    for (coll, algos) in &ex.disabled {
        for (algo, protos) in algos {
            for (proto, why) in protos {
                for w in why.iter().filter(|w| !STRUCTURAL.contains(&w.as_str())) {
                    let key = (*algo, w.as_str());
                    let at = match groups.iter().position(|(k, _)| *k == key) {
                        Some(i) => i,
                        None => {
                            groups.push((key, (Vec::new(), Vec::new())));
                            groups.len() - 1
                        }
                    };
                    let (ps, cs) = &mut groups[at].1;
                    if !ps.contains(proto) {
                        ps.push(*proto);
                    }
                    if !cs.contains(coll) {
                        cs.push(*coll);
                    }
                }
            }
        }
    }
    groups.sort_by_key(|((a, _), _)| *a);
    for ((algo, why), (mut ps, cs)) in groups {
        ps.sort();
        let ps: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
        let cs: Vec<&str> = cs.iter().map(|c| c.as_str()).collect();
        let _ = writeln!(out, "  {:<13} {:<16} {why} [{}]", algo.as_str(), ps.join(","), cs.join(", "));
    }
}

/// Each call's predicted time with its algorithm bandwidth and the bus bandwidth planners compare (nccl-tests'
/// busbw: algbw times the collective's factor for `nranks`, `doc/PERFORMANCE.md`).
fn decisions(out: &mut String, choices: &[Choice], nranks: u32) {
    let _ = writeln!(
        out,
        "\nDecisions (per call, alone in its launch; busbw = algbw x nccl-tests' factor for {nranks} ranks)"
    );
    if nranks == 1 {
        // NCCL 2.28.9 src/enqueue.cc: a one-rank communicator's calls go to ncclLaunchOneRank.
        let _ = writeln!(out, "  one rank: NCCL runs no algorithm; each call copies its buffer (ncclLaunchOneRank)");
        return;
    }
    let mut last: Option<Collective> = None;
    for c in choices {
        if last != Some(c.coll) {
            let _ = writeln!(
                out,
                "  {}\n  {:>9}  {:<16} {:>3} {:>11} {:>11} {:>11}  {:<24} why",
                c.coll, "size", "algo/proto", "ch", "time us", "algbw GB/s", "busbw GB/s", "runner-up"
            );
            last = Some(c.coll);
        }
        let algbw = c.bytes as f64 / (c.time.time_us * 1000.0).max(f64::MIN_POSITIVE);
        let busbw = algbw * c.coll.bus_bw_factor(nranks.max(1));
        let runner = c.runner_up().map_or("-".into(), |(a, p, t)| format!("{a}/{p} {:.1} us", t.time_us));
        let why = c.deciding_term();
        let _ = writeln!(
            out,
            "  {:>9}  {:<16} {:>3} {:>11.1} {:>11.2} {:>11.2}  {:<24} {why}",
            human(c.bytes),
            format!("{}/{}", c.algo, c.proto),
            c.n_channels,
            c.time.time_us,
            algbw,
            busbw,
            runner
        );
    }
}

fn forcing(out: &mut String, ex: &Extras) {
    if ex.forced_by.is_empty() {
        return;
    }
    let set: Vec<String> = ex.forced_by.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(out, "\nWhat {} costs against NCCL's default", set.join(" "));
    for f in &ex.forcing {
        let d = &f.default;
        let forced = f.forced.as_ref().map_or("no algorithm/protocol available".to_string(), |p| {
            format!("{}/{} {:.1} us", p.algo, p.proto, p.time_us)
        });
        let cost = f.slowdown.map_or(String::new(), |s| format!("x{s:.2}"));
        let _ = writeln!(
            out,
            "  {:>13} {:>9}  forced {:<28} default {}/{} {:.1} us  {cost}",
            f.coll.as_str(),
            human(f.bytes),
            forced,
            d.algo,
            d.proto,
            d.time_us
        );
    }
}

pub(super) fn render(ex: &Explained, full: bool) -> String {
    let (model, snap) = (&ex.model, &ex.snapshot);
    let rpn = model.input.n_ranks / model.input.n_nodes.max(1);
    let mut out = format!(
        "collscope topo explain: {}, {} node(s) x {rpn} rank(s) (NCCL {} model, constants {})\n\n",
        snap.topology.first().map_or("", |t| t.source.as_str()),
        model.input.n_nodes,
        model.constants.version,
        model.constants.source
    );
    if let Some(p) = snap.nccl_version.as_deref().filter(|v| *v != model.constants.version) {
        let p: VersionProfile = p.parse().unwrap_or_default();
        let _ = writeln!(out, "{}\n", p.describe());
    }
    graphs(&mut out, snap);
    rings_and_trees(&mut out, snap, rpn, model.input.n_nodes, full);
    let _ = writeln!(out, "\nTuning table (latency us / algorithm bandwidth GB/s)");
    for l in model.table_lines() {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out, "  {}", model.thresholds_line());
    off(&mut out, &ex.extras);
    decisions(&mut out, &ex.choices, model.input.n_ranks);
    for r in &ex.extras.refused {
        let _ = writeln!(out, "  {} {}: {}", r.coll, human(r.bytes), r.error);
    }
    forcing(&mut out, &ex.extras);
    out
}
