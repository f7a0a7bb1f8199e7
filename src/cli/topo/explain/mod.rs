//! `collscope topo explain`: prints what `collscope_nccl::explain` computes for a communicator of N identical
//! nodes (the model of the machine plus the explain-only extras): text for people, `--json` (the snapshot's
//! keys and `disabled`, `refused`, `forcing`) for machines, `--log` for NCCL INFO lines.

mod text;

use super::SourceArgs;
use crate::cli::sizes;
use crate::cli::whatif::{self, WhatIfArgs};

use anyhow::{bail, Context, Result};
use clap::Args;
use collscope_debug::env::Env;
use collscope_debug::{self as debug, DebugConfig, Level, Logger, Origin, Subsys};
use collscope_model::Topology;
use collscope_nccl::graph::plan::MAX_MODEL_NODES;
use collscope_nccl::topo::settings::VERSION_VAR;
use collscope_nccl::topo::{self, TopoEnv};
use collscope_nccl::upgrade::{Side, Upgrade};
use collscope_nccl::whatif::WhatIf;
use collscope_nccl::{Explained, NcclVersion, VersionProfile};

#[derive(Args)]
pub(crate) struct ExplainArgs {
    /// The machine of every node; neither flag: NCCL_TOPO_FILE, else this host.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Identical nodes in the communicator.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub nodes: u32,
    /// Ranks per node: the first K GPUs of the topology (default: all of them, one rank per GPU).
    #[arg(long, value_name = "K")]
    pub nranks_per_node: Option<u32>,
    /// Message sizes (NCCL's nBytes: the whole buffer, gathered for AllGather/ReduceScatter; float32
    /// elements, at least one per rank): a comma list of sizes and from:to ranges doubling, binary units
    /// (8,64K,1M or 8:4G).
    #[arg(long, value_name = "LIST", default_value = sizes::DEFAULT)]
    pub sizes: String,
    /// Print JSON (keys graphs, channels, rings, trees, tuning, decisions, ...).
    #[arg(long, conflicts_with = "log")]
    pub json: bool,
    /// Print NCCL INFO lines, as an NCCL_DEBUG=INFO log of this communicator would show them.
    #[arg(long)]
    pub log: bool,
    /// Print every rank of every ring and tree (by default, across nodes, each ring and tree per node).
    #[arg(long)]
    pub full: bool,
    /// The NCCL release whose constants (link bandwidths, MAXCHANNELS) the model uses, 2.12 to 2.29
    /// (default 2.28.9).
    #[arg(long, value_name = "X.Y[.Z]")]
    pub nccl_version: Option<NcclVersion>,
    /// Compare with another NCCL release: what moving to it changes (graphs, channels, the cells offered,
    /// each call's choice and predicted time).
    #[arg(long, value_name = "X.Y[.Z]")]
    pub vs: Option<NcclVersion>,
    #[command(flatten)]
    pub what_if: WhatIfArgs,
}

/// `--json` with a what-if or `--vs`: the model's keys, `what_if` and `upgrade`.
#[derive(serde::Serialize)]
struct WithWhatIf<'a> {
    #[serde(flatten)]
    model: &'a Explained,
    #[serde(skip_serializing_if = "Option::is_none")]
    what_if: Option<&'a WhatIf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upgrade: Option<&'a Upgrade>,
}

/// Installs the process logger before anything logs: with `--log`, INFO on stdout (every subsystem unless
/// NCCL_DEBUG_SUBSYS narrows it); otherwise the environment's settings on stderr, so stdout stays clean.
fn install_logger(log: bool) -> Result<()> {
    let origin = Origin::current();
    let mut cfg = DebugConfig::from_lookup(collscope_debug::params::process_var, &origin.host, origin.pid)?;
    let sink: Box<dyn std::io::Write + Send> = if log {
        if cfg.level < Level::Info {
            cfg.level = Level::Info;
        }
        if collscope_debug::params::process_var("NCCL_DEBUG_SUBSYS").is_none_or(|v| v.is_empty()) {
            cfg.mask = Subsys::ALL;
        }
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::stderr())
    };
    debug::install(Logger::new(cfg, origin, sink));
    Ok(())
}

/// `env` asking for NCCL release `version`'s constants, with a note when it is outside those modelled.
pub(crate) fn with_version(env: Env, version: Option<NcclVersion>) -> Env {
    let Some(version) = version else { return env };
    if let Some(note) = VersionProfile::of(version).note {
        eprintln!("collscope: note: {note}");
    }
    env.with(VERSION_VAR, &version.to_string())
}

fn load_topology(source: &SourceArgs, nranks_per_node: Option<u32>, env: &Env) -> Result<Topology> {
    let source = source.source(env);
    let (mut xml, notes) =
        topo::load_noting(&source).with_context(|| format!("cannot load the topology ({source:?})"))?;
    for n in notes {
        eprintln!("collscope: note: {n}");
    }
    if let Some(k) = nranks_per_node {
        topo::trim::keep_gpus(&mut xml, k).with_context(|| format!("--nranks-per-node {k}"))?;
    }
    let topo_env = TopoEnv::from_env(env)?;
    Ok(topo::build(&xml, &topo_env)?)
}

/// The model of `nodes` copies of the source's machine, each cut to its first `nranks_per_node` GPUs, with
/// float32 calls of `sizes` explained (`topo explain`, and `tui --preset`/`--topo-file`).
pub(crate) fn model(
    source: &SourceArgs,
    nodes: u32,
    nranks_per_node: Option<u32>,
    sizes: &[u64],
    log: bool,
) -> Result<Explained> {
    check_nodes(nodes)?;
    let env = Env::from_process();
    let topology = load_topology(source, nranks_per_node, &env)?;
    collscope_nccl::explain(&topology, nodes, sizes, &env, log).with_context(|| format!("--nodes {nodes}"))
}

/// `--nodes` within the model's bound, refused before any work grows with it.
fn check_nodes(nodes: u32) -> Result<()> {
    if !(1..=MAX_MODEL_NODES).contains(&nodes) {
        bail!(
            "--nodes {nodes}: expected 1 to {MAX_MODEL_NODES} (the model's bound: the largest NCCL job published \
             runs on 2,048 nodes; see the README's topo explain section)"
        );
    }
    Ok(())
}

pub(crate) fn run(args: ExplainArgs) -> Result<()> {
    install_logger(args.log)?;
    check_nodes(args.nodes)?;
    let sizes = sizes::parse(&args.sizes)?;
    if args.log {
        debug::show_version();
    }
    let edits = args.what_if.edits()?;
    let env = with_version(Env::from_process(), args.nccl_version);
    let topology = load_topology(&args.source, args.nranks_per_node, &env)?;
    let ex = collscope_nccl::explain(&topology, args.nodes, &sizes, &env, args.log)
        .with_context(|| format!("--nodes {}", args.nodes))?;
    let what_if = if edits.is_empty() {
        None
    } else {
        Some(collscope_nccl::whatif::what_if(&topology, args.nodes, &sizes, &env, &edits)?)
    };
    let upgrade = match args.vs {
        Some(vs) => {
            // The other release builds the machine too: its link bandwidths are its own.
            let vs_env = with_version(env.clone(), Some(vs));
            let vs_topology = load_topology(&args.source, args.nranks_per_node, &vs_env)?;
            let (before, after) =
                (Side { topology: &topology, env: &env }, Side { topology: &vs_topology, env: &vs_env });
            Some(collscope_nccl::upgrade::upgrade(before, after, args.nodes, &sizes)?)
        }
        None => None,
    };
    if args.json {
        if what_if.is_none() && upgrade.is_none() {
            println!("{}", serde_json::to_string_pretty(&ex)?);
        } else {
            let all = WithWhatIf { model: &ex, what_if: what_if.as_ref(), upgrade: upgrade.as_ref() };
            println!("{}", serde_json::to_string_pretty(&all)?);
        }
    } else if !args.log {
        print!("{}", text::render(&ex, args.full));
        if let Some(w) = &what_if {
            print!("{}", whatif::render(w));
        }
        if let Some(u) = &upgrade {
            print!("{}", super::upgrade::render(u));
        }
    }
    Ok(())
}
