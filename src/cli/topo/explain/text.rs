//! The human-readable `topo explain` report.

use crate::cli::sizes::human;
use collscope_model::{Algorithm, Collective, Protocol, Snapshot};
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

fn rings_and_trees(out: &mut String, ex: &Snapshot, rpn: u32) {
    let _ = writeln!(out, "\nRings (rank order per channel)");
    for r in &ex.rings {
        let order: Vec<String> = r.order.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "  {:02} : {}", r.channel, order.join(" "));
    }
    let _ = writeln!(out, "\nTrees (first rank of each node: up -> rank -> down)");
    for t in ex.trees.iter().filter(|t| t.rank % rpn == 0) {
        let down: Vec<String> = t.down.iter().map(i32::to_string).collect();
        let _ = writeln!(out, "  Tree {} : {} -> {} -> {}", t.channel, t.up, t.rank, down.join("/"));
    }
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

fn decisions(out: &mut String, choices: &[Choice]) {
    let _ = writeln!(out, "\nDecisions (per call, alone in its launch)");
    let mut last: Option<Collective> = None;
    for c in choices {
        if last != Some(c.coll) {
            let _ = writeln!(
                out,
                "  {}\n  {:>9}  {:<16} {:>3} {:>11} {:>9}  {:<24} why",
                c.coll, "size", "algo/proto", "ch", "time us", "GB/s", "runner-up"
            );
            last = Some(c.coll);
        }
        let algbw = c.bytes as f64 / (c.time.time_us * 1000.0).max(f64::MIN_POSITIVE);
        let runner = c.runner_up().map_or("-".into(), |(a, p, t)| format!("{a}/{p} {:.1} us", t.time_us));
        let why = c.deciding_term();
        let _ = writeln!(
            out,
            "  {:>9}  {:<16} {:>3} {:>11.1} {:>9.2}  {:<24} {why}",
            human(c.bytes),
            format!("{}/{}", c.algo, c.proto),
            c.n_channels,
            c.time.time_us,
            algbw,
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

pub fn render(ex: &Explained) -> String {
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
    rings_and_trees(&mut out, snap, rpn);
    let _ = writeln!(out, "\nTuning table (latency us / algorithm bandwidth GB/s)");
    for l in model.table_lines() {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out, "  {}", model.thresholds_line());
    off(&mut out, &ex.extras);
    decisions(&mut out, &ex.choices);
    for r in &ex.extras.refused {
        let _ = writeln!(out, "  {} {}: {}", r.coll, human(r.bytes), r.error);
    }
    forcing(&mut out, &ex.extras);
    out
}
