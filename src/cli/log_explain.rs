//! `collscope log explain LOG...`: rebuild the machine from a log (its `=== System` print, or `--topo-file`),
//! run NCCL's search, connect and tuning on it, and compare field by field what NCCL printed with what the
//! model predicts, each difference with its cause; with `--set`/`--nics`/`--gdr`/`--p2p`, what would change.

use crate::cli::sizes;
use crate::cli::whatif::{self, WhatIfArgs};
use anyhow::{bail, Context as _, Result};
use clap::Args;
use collscope_debug::env::Env;
use collscope_logreader::Options;
use collscope_model::{NodeType, Snapshot, Topology, Transport};
use collscope_nccl::graph::plan::MAX_MODEL_NODES;
use collscope_nccl::replay::{self, Comparison, Context, Facts, PathCheck};
use collscope_nccl::topo::settings::VERSION_VAR;
use collscope_nccl::topo::{self, TopoEnv, TopoSource};
use collscope_nccl::upgrade::{self, Side, Upgrade};
use collscope_nccl::whatif::WhatIf;
use collscope_nccl::{Explained, NcclVersion, VersionProfile};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The version collscope models (`collscope_nccl::tuning::constants::NCCL_2_28_9`).
const MODEL_VERSION: &str = "2.28.9";

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Log files or directories (as `log analyze` reads them).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The machine of every node as an NCCL topology file, instead of the log's `=== System` print.
    #[arg(long, value_name = "FILE")]
    pub topo_file: Option<PathBuf>,
    /// The GPUs' compute capability (80 for A100), when the log's NVLink bandwidth does not name it.
    #[arg(long, value_name = "SM")]
    pub sm: Option<u32>,
    /// Sizes for the model's decisions and the what-if (NCCL's nBytes, float32), as `topo explain --sizes`.
    #[arg(long, value_name = "LIST", default_value = "64K,1M,16M,64M,1G")]
    pub sizes: String,
    /// The NCCL release whose constants (link bandwidths, MAXCHANNELS) the model uses, 2.12 to 2.29
    /// (default: the version the log prints, else 2.28.9).
    #[arg(long, value_name = "X.Y[.Z]")]
    pub nccl_version: Option<NcclVersion>,
    /// Compare with another NCCL release: what moving from the log's release to it changes (graphs,
    /// channels, the cells offered, each call's choice and predicted time).
    #[arg(long, value_name = "X.Y[.Z]")]
    pub vs: Option<NcclVersion>,
    #[command(flatten)]
    pub what_if: WhatIfArgs,
    /// Print JSON: comparisons, match_ratio, notes, the machine, what_if and the model.
    #[arg(long)]
    pub json: bool,
}

/// The machine the model ran on.
#[derive(Debug, Serialize)]
struct Machine {
    source: String,
    host: Option<String>,
    nodes: u32,
    gpus_per_node: usize,
    sm: u32,
    gdr: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    log_version: Option<&'a str>,
    model_version: &'static str,
    comparisons: Vec<Comparison>,
    /// Matching fields over compared fields (None when nothing was compared).
    match_ratio: Option<f64>,
    /// Fields that match or whose difference has a cause, over compared fields.
    explained_ratio: Option<f64>,
    notes: Vec<String>,
    machine: Option<Machine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paths: Option<PathCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    what_if: Option<WhatIf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upgrade: Option<Upgrade>,
    model: Option<&'a Explained>,
}

/// `2.18.3+cuda12.2` -> `2.18.3`.
fn version_of(s: &Snapshot) -> Option<&str> {
    s.nccl_version.as_deref().map(|v| v.split(['+', ' ']).next().unwrap_or(v))
}

/// The first host's printed system that has a GPU.
fn printed(s: &Snapshot) -> Option<&Topology> {
    s.topology.iter().find(|t| t.nodes_of(NodeType::GPU).next().is_some())
}

/// Nodes of the communicator: printed, else from ranks over GPUs, else 2 when a graph leaves the node. A printed
/// count past the model's bound is refused before any work grows with it.
fn nodes(s: &Snapshot, gpus: usize, notes: &mut Vec<String>) -> Result<u32> {
    if let Some(n) = s.nnodes {
        if n > MAX_MODEL_NODES {
            bail!(
                "the log's nNodes {n}: the model builds at most {MAX_MODEL_NODES} nodes (its bound: the largest \
                 NCCL job published runs on 2,048 nodes; see the README's log explain section)"
            );
        }
        return Ok(n.max(1));
    }
    let leaves = s.graphs.iter().any(|g| g.channels.iter().any(|c| !c.inter.is_empty()));
    let n = match s.nranks {
        Some(r) if gpus > 0 && (r as usize).is_multiple_of(gpus) => r / gpus as u32,
        _ if leaves => 2,
        _ => 1,
    };
    notes.push(format!("nodes: not printed; {n} assumed (--topo-file and the log's ranks decide it)"));
    Ok(n)
}

pub fn run(args: ExplainArgs) -> Result<()> {
    let sizes = sizes::parse(&args.sizes)?;
    let edits = args.what_if.edits()?;
    let log = collscope_logreader::read_paths(&args.paths, Options { strict: false }).context("reading the logs")?;
    collscope_logreader::expect_nccl_lines(&log, &args.paths)?;
    let mut env = Env::from_pairs(log.env.iter().map(|e| (e.name.clone(), e.value.clone())));
    let log_version = version_of(&log);
    let mut notes = Vec::new();
    let mut ctx = Context::default();
    // The release whose constants the model runs: --nccl-version, else the log's own.
    let release = args.nccl_version.or_else(|| log_version.and_then(|v| v.parse().ok()));
    let profile = release.map(VersionProfile::of).filter(|p| p.version != collscope_nccl::version::DEFAULT);
    let model_is = match &profile {
        Some(p) => {
            notes.extend(p.note.clone());
            env = env.with(VERSION_VAR, &p.version.to_string());
            format!("the model ran {}", p.describe())
        }
        None => format!("the model is NCCL {MODEL_VERSION}"),
    };
    match log_version {
        Some(v) if v != MODEL_VERSION => {
            ctx.other_version = Some(v.to_string());
            notes.push(format!("version: the log is NCCL {v}; {model_is}"));
        }
        Some(_) if profile.is_some() => notes.push(format!("version: {model_is}")),
        Some(_) => {}
        None => notes.push(format!("version: not printed; {model_is}")),
    }
    let topo_env = TopoEnv::from_env(&env)?;
    if !log.env.is_empty() {
        let set: Vec<String> = log.env.iter().map(|e| format!("{}={}", e.name, e.value)).collect();
        notes.push(format!("environment from the log, applied to the model: {}", set.join(" ")));
    }

    // The machine: a topology file, else the log's print.
    let mut machine = None;
    let mut paths = None;
    let topology = match (&args.topo_file, printed(&log)) {
        (Some(f), _) => {
            let (xml, overlay) = topo::load_noting(&TopoSource::File(f.clone()))?;
            notes.extend(overlay);
            let mut t = topo::build(&xml, &topo_env)?;
            if let Some(sm) = args.sm {
                for g in t.nodes.iter_mut().filter_map(|n| n.gpu.as_mut()) {
                    g.sm = sm;
                }
            }
            Some((t, None))
        }
        (None, Some(p)) => {
            // Support shows in any NET connection using it; one without may only be too far from its NIC
            // (`ncclTopoCheckGdr`'s distance), as on a PCIe machine whose rings cross to another NIC.
            let mut net = log.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred).peekable();
            let gdr = net.peek().is_some().then(|| net.any(|c| c.gdrdma == Some(true)));
            let facts = Facts { sm: args.sm, gdr };
            let r = replay::rebuild(p, facts, &topo_env)?;
            notes.extend(r.notes.iter().cloned());
            ctx.host = p.host.clone();
            if r.sm_inferred {
                ctx.assumed_sm = Some(r.sm);
            }
            if r.paths.compared > 0 {
                notes.push(format!(
                    "paths: {} of {} printed paths recomputed alike from the printed links",
                    r.paths.matched, r.paths.compared
                ));
            }
            if r.paths.matched < r.paths.compared {
                let first = r.paths.differences.first().map_or(String::new(), |d| format!(" (first: {d})"));
                ctx.path_differences = Some(format!(
                    "{} of {} printed paths differ from those NCCL computes from the printed links{first}",
                    r.paths.compared - r.paths.matched,
                    r.paths.compared
                ));
            }
            paths = Some(r.paths.clone());
            if r.p2p_refused {
                env = env.with("NCCL_P2P_LEVEL", "NVB");
            }
            Some((r.topology, Some((r.sm, r.gdr))))
        }
        (None, None) => {
            let why = "missing fact: the log prints no topology (NCCL's `=== System` lines need NCCL_DEBUG=INFO \
                       with NCCL_DEBUG_SUBSYS including GRAPH); pass --topo-file";
            notes.push(why.into());
            ctx.unmodelled = Some(why.into());
            None
        }
    };

    let mut model = None;
    let mut what_if = None;
    let mut upgrade = None;
    if let Some((t, facts)) = topology {
        let gpus = t.nodes_of(NodeType::GPU).count();
        let n = nodes(&log, gpus, &mut notes)?;
        if let Some(r) = log.nranks.filter(|&r| r as usize != gpus * n as usize) {
            notes.push(format!(
                "shape: the log's communicator has {r} ranks; the model runs {n} node(s) x {gpus} GPU(s), one rank each"
            ));
        }
        let sm = t.nodes_of(NodeType::GPU).find_map(|(_, g)| g.gpu.as_ref().map(|g| g.sm)).unwrap_or(0);
        let (sm, gdr) =
            facts.unwrap_or((sm, t.nodes_of(NodeType::NET).any(|(_, n)| n.net.as_ref().is_some_and(|x| x.gdr))));
        machine =
            Some(Machine { source: t.source.clone(), host: t.host.clone(), nodes: n, gpus_per_node: gpus, sm, gdr });
        let ex = collscope_nccl::explain(&t, n, &sizes, &env, false)
            .with_context(|| format!("the model of {n} node(s) of the log's machine"))?;
        if !edits.is_empty() {
            what_if = Some(collscope_nccl::whatif::what_if(&t, n, &sizes, &env, &edits)?);
        }
        if let Some(vs) = args.vs {
            let vs_env = env.with(VERSION_VAR, &vs.to_string());
            let vs_topo_env = TopoEnv::from_env(&vs_env)?;
            notes.extend(vs_topo_env.profile.note.clone());
            let vs_t = upgrade::with_release_nvlinks(&t, &topo_env.profile, &vs_topo_env.profile, &vs_topo_env)?;
            let (before, after) = (Side { topology: &t, env: &env }, Side { topology: &vs_t, env: &vs_env });
            upgrade = Some(upgrade::upgrade(before, after, n, &sizes)?);
        }
        model = Some(ex);
    } else if !edits.is_empty() || args.vs.is_some() {
        notes.push("what-if and --vs: need the machine (--topo-file), which the log does not print".into());
    }

    let comparisons = replay::compare(&log, model.as_ref(), &ctx);
    let total = comparisons.len();
    let ratio = |n: usize| (total > 0).then(|| n as f64 / total as f64);
    let matched = comparisons.iter().filter(|c| c.matched).count();
    let explained = comparisons.iter().filter(|c| c.matched || c.cause.is_some()).count();
    if total == 0 {
        notes.push(
            "nothing to compare: the log prints no graph, channel count, tuning table or per-call decision".into(),
        );
    }
    let report = Report {
        log_version,
        model_version: MODEL_VERSION,
        match_ratio: ratio(matched),
        explained_ratio: ratio(explained),
        comparisons,
        notes,
        machine,
        paths,
        what_if,
        upgrade,
        model: model.as_ref(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "collscope log explain: NCCL {} log against the NCCL {} model",
        r.log_version.unwrap_or("(version not printed)"),
        r.model_version
    );
    if let Some(m) = &r.machine {
        let _ = writeln!(
            o,
            "  machine: {} ({} node(s) x {} GPU(s), SM{}, GPUDirect RDMA {})",
            m.source,
            m.nodes,
            m.gpus_per_node,
            m.sm,
            if m.gdr { "on" } else { "off" }
        );
    }
    let _ = writeln!(o, "\nNotes");
    for n in &r.notes {
        let _ = writeln!(o, "  - {n}");
    }
    if let Some(p) = &r.paths {
        for d in &p.differences {
            let _ = writeln!(o, "    path {d}");
        }
    }
    let _ = writeln!(o, "\nCompared (log | model)");
    for c in &r.comparisons {
        let mark = if c.matched { "=" } else { "≠" };
        let _ = writeln!(
            o,
            "  {mark} {:<8} {:<36} {} | {}",
            format!("{:?}", c.kind).to_lowercase(),
            c.field,
            c.log,
            c.model
        );
        if let Some(cause) = &c.cause {
            let _ = writeln!(o, "      cause: {cause}");
        }
    }
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1} %", v * 100.0));
    let _ = writeln!(
        o,
        "\n{} fields compared: {} match, {} match or have a cause",
        r.comparisons.len(),
        pct(r.match_ratio),
        pct(r.explained_ratio)
    );
    if let Some(w) = &r.what_if {
        o.push_str(&whatif::render(w));
    }
    if let Some(u) = &r.upgrade {
        o.push_str(&crate::cli::topo::upgrade::render(u));
    }
    o
}
