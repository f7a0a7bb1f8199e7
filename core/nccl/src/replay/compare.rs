//! What NCCL printed against what the model predicts, field by field: each graph's pattern, channel count,
//! bandwidths, path types and channel orders, the channel counts, the tuning table's cells and the per-call
//! decisions. A difference's `cause` is set only where re-running the model with the named version or fact
//! removes it ([`super::verify`]); what the context suggests but no re-run showed is a `hint`, never counted
//! as explained.

use crate::tuning::CallInfo;
use crate::Explained;
use collscope_model::{DataType, Graph, Pattern, Snapshot};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Graph,
    Channels,
    Tuning,
    Decision,
}

/// One compared field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub kind: Kind,
    pub field: String,
    pub log: String,
    pub model: String,
    #[serde(rename = "match")]
    pub matched: bool,
    /// Why they differ: a version or fact whose re-run gives the log's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// What may explain the difference, not verified by a re-run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The fields compared, and what the log printed that could not be.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Compared {
    pub fields: Vec<Comparison>,
    /// What was not compared, and why.
    pub not_compared: Vec<String>,
}

/// What the causes of differences are drawn from.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The version the log names, when it is not the model's.
    pub other_version: Option<String>,
    /// The compute capability the model assumed, when the log does not name it.
    pub assumed_sm: Option<u32>,
    /// The host whose graphs are compared (the one whose machine was rebuilt).
    pub host: Option<String>,
    /// Why there is no model to compare with (no topology in the log and none given).
    pub unmodelled: Option<String>,
    /// How the printed paths differ from those recomputed from the printed links, when they do: the print
    /// lacks a fact NCCL's search had.
    pub path_differences: Option<String>,
}

/// Cells and figures NCCL prints with 1 to 6 decimals: equal to the printed precision.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.05_f64.max(a.abs().max(b.abs()) * 5e-3)
}

struct Out<'a> {
    ctx: &'a Context,
    v: Vec<Comparison>,
    skipped: Vec<String>,
}

impl Out<'_> {
    fn push(&mut self, kind: Kind, field: String, log: String, model: String, matched: bool) {
        let hint = (!matched).then(|| hint(self.ctx, kind, &field)).flatten();
        self.v.push(Comparison { kind, field, log, model, matched, cause: None, hint });
    }

    /// A field compared as printed: equal values match.
    fn same<T: std::fmt::Display + PartialEq>(&mut self, kind: Kind, field: String, log: T, model: T) {
        let matched = log == model;
        self.push(kind, field, log.to_string(), model.to_string(), matched);
    }

    /// A difference the field itself suggests a reason for.
    fn differs(&mut self, kind: Kind, field: String, log: String, model: String, hint: &str) {
        self.v.push(Comparison { kind, field, log, model, matched: false, cause: None, hint: Some(hint.into()) });
    }
}

fn hint(ctx: &Context, kind: Kind, field: &str) -> Option<String> {
    if let Some(v) = &ctx.other_version {
        let what = match kind {
            Kind::Graph | Kind::Channels => "search and connect rules",
            Kind::Tuning | Kind::Decision => "tuning constants and formulas",
        };
        return Some(format!(
            "version: the log is NCCL {v}; where its {what} differ from those the model ran, they may explain it"
        ));
    }
    match (kind, ctx.assumed_sm) {
        (Kind::Tuning | Kind::Decision, Some(sm)) => Some(format!(
            "missing fact: the log does not name the GPUs' compute capability (SM{sm} assumed; --sm sets it), \
             and the latency and bandwidth tables are per generation"
        )),
        (Kind::Graph, Some(sm)) if field.starts_with("NVLS") => {
            Some(format!("missing fact: NVLS needs SM90 or newer; the model assumed SM{sm} (--sm sets it)"))
        }
        _ => ctx.path_differences.as_ref().map(|p| {
            format!("missing fact: {p}, so NCCL searched other paths than the model (--topo-file gives the machine)")
        }),
    }
}

pub(crate) fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::BalancedTree => "BalancedTree",
        Pattern::SplitTree => "SplitTree",
        Pattern::Tree => "Tree",
        Pattern::Ring => "Ring",
        Pattern::Nvls => "NVLS",
        Pattern::CollnetDirect => "CollNetDirect",
    }
}

const COLLNET: &str = "missing fact: NCCL searched a CollNet graph, so its network supports CollNet (a SHARP \
                       plugin) with NCCL_COLLNET_ENABLE=1; the model's NICs do not say so";

const UNKNOWN_RANKS: &str = "the log names the channels' GPUs by PCI id without their ranks (NCCL 2.28 prints \
                             ranks in the `=== System` tree only)";

pub(crate) fn orders(g: &Graph) -> String {
    let mut s = String::new();
    for (i, c) in g.channels.iter().enumerate() {
        if i > 0 {
            s.push_str("; ");
        }
        let gpus: Vec<String> = c.intra.iter().map(i32::to_string).collect();
        let _ = write!(s, "{}", gpus.join(" "));
        if !c.inter.is_empty() {
            let nets: Vec<String> = c.inter.iter().map(i64::to_string).collect();
            let _ = write!(s, " (NET {})", nets.join(","));
        }
    }
    s
}

fn graphs(o: &mut Out, log: &Snapshot, model: &Snapshot) {
    let host = o.ctx.host.as_deref();
    let mine = |g: &&Graph| host.is_none() || g.host.as_deref() == host;
    let mut seen = Vec::new();
    for g in log.graphs.iter().filter(mine) {
        if seen.contains(&g.pattern) {
            continue;
        }
        seen.push(g.pattern);
        let name = pattern_name(g.pattern);
        let Some(m) = model.graphs.iter().find(|m| m.pattern == g.pattern) else {
            let field = format!("{name} graph");
            let (log, model) = ("searched".to_string(), "not searched".to_string());
            match g.pattern {
                // init.cc (2.28.9) searches these only with CollNet on a network that supports it.
                Pattern::Tree | Pattern::CollnetDirect if o.ctx.other_version.is_none() => {
                    o.differs(Kind::Graph, field, log, model, COLLNET)
                }
                _ => o.push(Kind::Graph, field, log, model, false),
            }
            continue;
        };
        let f = |field: &str| format!("{name} {field}");
        o.same(Kind::Graph, f("nChannels"), g.n_channels, m.n_channels);
        for (field, a, b) in [("bw intra", g.bw_intra, m.bw_intra), ("bw inter", g.bw_inter, m.bw_inter)] {
            o.push(Kind::Graph, f(field), format!("{a:.2}"), format!("{b:.2}"), close(a, b));
        }
        for (field, a, b) in [("type intra", g.type_intra, m.type_intra), ("type inter", g.type_inter, m.type_inter)] {
            o.same(Kind::Graph, f(field), a, b);
        }
        o.same(Kind::Graph, f("sameChannels"), g.same_channels, m.same_channels);
        o.same(Kind::Graph, f("crossNic"), g.cross_nic, m.cross_nic);
        // NVLS prints the first GPU of each channel only; a log excerpt may hold part of the channels.
        if g.pattern != Pattern::Nvls && !g.channels.is_empty() {
            let (a, b) = (orders(g), orders(m));
            if g.channels.iter().any(|c| c.intra.contains(&-1)) {
                o.skipped.push(format!("{name} channel orders: {UNKNOWN_RANKS}"));
            } else {
                o.push(Kind::Graph, f("channels"), a.clone(), b.clone(), a == b);
            }
        }
    }
}

fn channels(o: &mut Out, log: &Snapshot, model: &Snapshot) {
    let (l, m) = (&log.channels, &model.channels);
    for (field, a, b) in [
        ("coll channels", l.coll, m.coll),
        ("collnet channels", l.collnet, m.collnet),
        ("nvls channels", l.nvls, m.nvls),
        ("p2p channels", l.p2p, m.p2p),
        ("p2p channels per peer", l.p2p_per_peer, m.p2p_per_peer),
    ] {
        if let Some(a) = a {
            o.same(Kind::Channels, field.into(), a, b.unwrap_or(0));
        }
    }
}

fn tuning(o: &mut Out, log: &Snapshot, model: &Snapshot) {
    for (coll, algos) in &log.tuning {
        for (algo, protos) in algos {
            for (proto, cell) in protos {
                let m = model.tuning.get(coll).and_then(|a| a.get(algo)).and_then(|p| p.get(proto));
                let m = m.filter(|m| m.bw_gbps > 0.0);
                // NCCL prints a latency in cells it turned off (bandwidth 0); the model keeps enabled cells.
                let show = |lat: f64, bw: f64| if bw > 0.0 { format!("{lat:.1}/{bw:.2}") } else { "off".into() };
                let (lat, bw) = m.map_or((0.0, 0.0), |m| (m.lat_us, m.bw_gbps));
                let same =
                    if cell.bw_gbps > 0.0 { close(cell.lat_us, lat) && close(cell.bw_gbps, bw) } else { bw == 0.0 };
                o.push(
                    Kind::Tuning,
                    format!("{coll} {algo}/{proto}"),
                    show(cell.lat_us, cell.bw_gbps),
                    show(lat, bw),
                    same,
                );
            }
        }
    }
}

/// Per-call decisions compared, at most: a log of a long run repeats the same few calls.
const MAX_DECISIONS: usize = 64;

fn decisions(o: &mut Out, log: &Snapshot, ex: &Explained) {
    let mut seen = Vec::new();
    for d in &log.decisions {
        if seen.contains(&(d.coll, d.bytes)) || seen.len() >= MAX_DECISIONS {
            continue;
        }
        seen.push((d.coll, d.bytes));
        // NCCL prints count x type size per rank (`enqueue.cc`); the tuner's nBytes gathers AllGather and
        // ReduceScatter over the ranks.
        let datatype = d.datatype.unwrap_or(DataType::F32);
        let nbytes = CallInfo::bytes_for(d.coll, d.bytes / datatype.size() as u64, datatype, ex.model.input.n_ranks);
        let call = CallInfo { datatype, ..CallInfo::new(d.coll, nbytes) };
        let field = format!("{} {} B", d.coll, d.bytes);
        let printed = format!("{}/{}", d.algo, d.proto);
        match ex.model.choose(&call) {
            Ok(c) => {
                let model = format!("{}/{}", c.algo, c.proto);
                let same = printed == model;
                o.push(Kind::Decision, format!("{field} algorithm"), printed, model, same);
                o.push(
                    Kind::Decision,
                    format!("{field} channels"),
                    d.n_channels.to_string(),
                    c.n_channels.to_string(),
                    d.n_channels == c.n_channels,
                );
            }
            Err(e) => o.push(Kind::Decision, format!("{field} algorithm"), printed, e.to_string(), false),
        }
    }
}

/// What the log printed, by kind, for what is left uncompared.
fn printed_kinds(log: &Snapshot) -> Vec<&'static str> {
    let c = &log.channels;
    let counts = [c.coll, c.collnet, c.nvls, c.p2p, c.p2p_per_peer].iter().any(Option::is_some);
    [
        (!log.graphs.is_empty(), "graphs"),
        (counts, "channel counts"),
        (!log.tuning.is_empty(), "tuning table"),
        (!log.decisions.is_empty(), "per-call decisions"),
    ]
    .into_iter()
    .filter_map(|(has, what)| has.then_some(what))
    .collect()
}

/// Every field the log printed that the model predicts, in the log's order of kinds. Without a model (`ex`
/// None) nothing is compared, and what the log printed is listed as not compared with `ctx.unmodelled`.
pub fn compare(log: &Snapshot, ex: Option<&Explained>, ctx: &Context) -> Compared {
    let mut o = Out { ctx, v: Vec::new(), skipped: Vec::new() };
    let Some(ex) = ex else {
        let why = ctx.unmodelled.as_deref().unwrap_or("no model");
        let kinds = printed_kinds(log);
        let not_compared = if kinds.is_empty() { Vec::new() } else { vec![format!("{}: {why}", kinds.join(", "))] };
        return Compared { fields: Vec::new(), not_compared };
    };
    let model = &ex.snapshot;
    graphs(&mut o, log, model);
    channels(&mut o, log, model);
    tuning(&mut o, log, model);
    decisions(&mut o, log, ex);
    Compared { fields: o.v, not_compared: o.skipped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;
    use collscope_debug::env::Env;
    use collscope_model::Collective;

    /// The model's snapshot as a log shows it: decisions print the bytes per rank.
    fn as_logged(ex: &Explained) -> Snapshot {
        let mut s = ex.snapshot.clone();
        for d in &mut s.decisions {
            if matches!(d.coll, Collective::AllGather | Collective::ReduceScatter) {
                d.bytes /= u64::from(ex.model.input.n_ranks);
            }
        }
        s
    }

    #[test]
    fn the_model_against_itself_matches_and_a_change_is_found_with_a_hint_only() {
        let ex = crate::explain(&preset("dgx-a100"), 2, &[1 << 10, 1 << 26], &Env::default(), false).unwrap();
        let v = compare(&as_logged(&ex), Some(&ex), &Context::default()).fields;
        assert!(v.iter().any(|c| c.kind == Kind::Graph && c.field == "Ring channels"));
        assert!(v.iter().any(|c| c.kind == Kind::Tuning) && v.iter().any(|c| c.kind == Kind::Decision));
        assert!(v.iter().all(|c| c.matched), "{:?}", v.iter().find(|c| !c.matched));

        let mut log = as_logged(&ex);
        log.graphs[0].n_channels += 1;
        log.channels.coll = Some(7);
        let ctx = Context { other_version: Some("2.18.3".into()), ..Context::default() };
        let v = compare(&log, Some(&ex), &ctx).fields;
        let bad: Vec<_> = v.iter().filter(|c| !c.matched).collect();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert_eq!((bad[0].field.as_str(), bad[0].log.as_str()), ("Ring nChannels", "9"));
        // The version is named, as a hint: no re-run showed it.
        assert!(bad.iter().all(|c| c.cause.is_none() && c.hint.as_deref().is_some_and(|c| c.contains("2.18.3"))));
        let json = serde_json::to_value(bad[0]).unwrap();
        assert_eq!((json["kind"].as_str(), json["match"].as_bool()), (Some("graph"), Some(false)));
        assert!(json.get("cause").is_none() && json["hint"].is_string(), "{json}");
        // Without a model nothing is compared; what the log printed is said not compared, with the reason.
        let ctx = Context { unmodelled: Some("no topology".into()), ..Context::default() };
        let c = compare(&log, None, &ctx);
        assert!(c.fields.is_empty());
        assert_eq!(c.not_compared, vec!["graphs, channel counts, tuning table, per-call decisions: no topology"]);
    }

    #[test]
    fn cells_off_in_both_are_equal() {
        let ex = crate::explain(&preset("hgx-pcie"), 1, &[1 << 20], &Env::default(), false).unwrap();
        let mut log = as_logged(&ex);
        // NCCL prints a latency in a cell it turned off; the model keeps no such cell.
        let off = collscope_model::TuningCell { lat_us: 7.5, bw_gbps: 0.0 };
        let ar = log.tuning.get_mut(&Collective::AllReduce).unwrap();
        ar.entry(collscope_model::Algorithm::CollNetDirect).or_default().insert(collscope_model::Protocol::Simple, off);
        let v = compare(&log, Some(&ex), &Context::default()).fields;
        let cell = v.iter().find(|c| c.field == "AllReduce CollNetDirect/Simple").unwrap();
        assert!(cell.matched && cell.log == "off" && cell.model == "off", "{cell:?}");
    }

    #[test]
    fn channel_orders_without_ranks_are_not_compared() {
        let ex = crate::explain(&preset("dgx-a100"), 1, &[1 << 20], &Env::default(), false).unwrap();
        let mut log = as_logged(&ex);
        log.graphs[0].channels[0].intra[0] = -1;
        let c = compare(&log, Some(&ex), &Context::default());
        assert!(c.fields.iter().all(|f| f.field != "Ring channels" && f.matched), "{:?}", c.fields);
        assert!(c.not_compared.iter().any(|n| n.starts_with("Ring channel orders") && n.contains("PCI id")));
    }

    #[test]
    fn paths_unlike_the_printed_ones_hint_at_what_the_search_found() {
        let ex = crate::explain(&preset("hgx-pcie"), 2, &[1 << 20], &Env::default(), false).unwrap();
        let mut log = as_logged(&ex);
        log.graphs[0].n_channels += 1;
        let ctx = Context { path_differences: Some("2 of 9 printed paths differ".into()), ..Context::default() };
        let v = compare(&log, Some(&ex), &ctx).fields;
        let bad: Vec<_> = v.iter().filter(|c| !c.matched).collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].hint.as_deref().unwrap().contains("2 of 9 printed paths differ"), "{bad:?}");
    }

    #[test]
    fn an_assumed_compute_capability_hints_at_tuning_differences_only() {
        let ex = crate::explain(&preset("hgx-pcie"), 1, &[1 << 20], &Env::default(), false).unwrap();
        let mut log = as_logged(&ex);
        log.decisions[0].n_channels += 1;
        log.graphs[0].bw_intra += 3.0;
        let v = compare(&log, Some(&ex), &Context { assumed_sm: Some(80), ..Context::default() }).fields;
        let bad: Vec<_> = v.iter().filter(|c| !c.matched).collect();
        assert_eq!(bad.len(), 2, "{bad:?}");
        let graph = bad.iter().find(|c| c.kind == Kind::Graph).unwrap();
        assert!(graph.hint.is_none(), "a graph does not depend on the tuning tables");
        let dec = bad.iter().find(|c| c.kind == Kind::Decision).unwrap();
        assert!(dec.hint.as_deref().unwrap().contains("SM80 assumed"));
    }
}
