//! `collscope log explain LOG...`: rebuild the machine from a log (its `=== System` print, or `--topo-file` /
//! `--preset` for the many logs without one), run NCCL's search on it, and connect and tuning on the graphs the
//! log printed, and compare field by field what NCCL printed with what the model predicts; a difference gets a
//! cause only where the model re-run with that version or fact gives the log's value. With
//! `--set`/`--nics`/`--nic-speed`/`--gdr`/`--p2p`, what would change.

use crate::cli::sizes;
use crate::cli::whatif::{self, WhatIfArgs};
use anyhow::{bail, Context as _, Result};
use clap::Args;
use collscope_debug::env::Env;
use collscope_logreader::Options;
use collscope_model::{Collective, NodeType, Snapshot, Topology, Transport};
use collscope_nccl::graph::plan::MAX_MODEL_NODES;
use collscope_nccl::replay::printed::given_graphs;
use collscope_nccl::replay::verify::{alike, verify, Variant};
use collscope_nccl::replay::{self, Comparison, Context, Facts, Kind, MachineFinding, PathCheck, ReplayError};
use collscope_nccl::topo::settings::VERSION_VAR;
use collscope_nccl::topo::{self, TopoEnv, TopoSource};
use collscope_nccl::tuning::CallInfo;
use collscope_nccl::upgrade::{self, Side, Upgrade};
use collscope_nccl::whatif::WhatIf;
use collscope_nccl::{Explained, NcclVersion, VersionProfile};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The version collscope models (`collscope_nccl::tuning::constants::NCCL_2_28_9`).
const MODEL_VERSION: &str = "2.28.9";

#[derive(Args, Debug)]
pub(crate) struct ExplainArgs {
    /// Log files or directories (as `log analyze` reads them).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The machine of every node as an NCCL topology file, instead of the log's `=== System` print.
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    pub topo_file: Option<PathBuf>,
    /// The machine of every node as a reference machine (dgx-a100, dgx-h100, hgx-pcie, ...), for a log that
    /// prints no `=== System`.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Nodes in the communicator, when the log does not print them (default: printed, else inferred from the
    /// tuning table, the ranks or the graphs, and said so).
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// The GPUs' compute capability (80 for A100), when the log's NVLink bandwidth does not name it.
    #[arg(long, value_name = "SM")]
    pub sm: Option<u32>,
    /// Sizes for the model's decisions and the what-if (NCCL's nBytes, float32), as `topo explain --sizes`
    /// (default: the calls the log printed, else 64K,1M,16M,64M,1G).
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,
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
    /// GPUDirect RDMA; None where the machine has no network device to use it with.
    gdr: Option<bool>,
}

#[derive(Serialize)]
struct Report<'a> {
    log_version: Option<&'a str>,
    model_version: &'static str,
    comparisons: Vec<Comparison>,
    /// Matching fields over compared fields (None when nothing was compared).
    match_ratio: Option<f64>,
    /// Fields that match or whose difference has a verified cause, over compared fields.
    explained_ratio: Option<f64>,
    /// What the log printed that was not compared, and why.
    not_compared: Vec<String>,
    notes: Vec<String>,
    /// What the machine print shows that NCCL's choices depend on.
    findings: Vec<MachineFinding>,
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

/// A node count the model can build, or the error naming the bound.
fn check_nodes(n: u32, what: &str) -> Result<u32> {
    if n > MAX_MODEL_NODES {
        bail!(
            "{what} {n}: the model builds at most {MAX_MODEL_NODES} nodes (its bound: the largest NCCL job \
             published runs on 2,048 nodes; see the README's log explain section)"
        );
    }
    Ok(n.max(1))
}

/// Nodes of the communicator when neither the log nor `--nodes` says: from ranks over GPUs, else 2 when a
/// graph leaves the node, else 1.
fn guess_nodes(s: &Snapshot, gpus: usize) -> u32 {
    let leaves = s.graphs.iter().any(|g| g.channels.iter().any(|c| !c.inter.is_empty()));
    match s.nranks {
        Some(r) if gpus > 0 && (r as usize).is_multiple_of(gpus) && r as usize >= gpus => r / gpus as u32,
        _ if leaves => 2,
        _ => 1,
    }
}

/// The sizes of the calls the log printed, as NCCL's nBytes for `n_ranks` ranks (AllGather and ReduceScatter
/// gather over the ranks), with the collectives seen at each.
fn seen_calls(s: &Snapshot, n_ranks: u32) -> Vec<(Collective, u64)> {
    let mut v: Vec<(Collective, u64)> = s
        .decisions
        .iter()
        .map(|d| {
            let dt = d.datatype.unwrap_or(collscope_model::DataType::F32);
            (d.coll, CallInfo::bytes_for(d.coll, d.bytes / dt.size() as u64, dt, n_ranks))
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The model of `n` nodes of `t`: the search's, and connect and tuning re-run on the graphs the log printed
/// (compared in place of the search's where the log printed any).
struct Modelled {
    searched: Explained,
    given: Option<Explained>,
    notes: Vec<String>,
}

impl Modelled {
    fn compared(&self) -> &Explained {
        self.given.as_ref().unwrap_or(&self.searched)
    }
}

fn model_of(log: &Snapshot, t: &Topology, n: u32, sizes: &[u64], env: &Env, host: Option<&str>) -> Result<Modelled> {
    let searched = collscope_nccl::explain(t, n, sizes, env, false)
        .with_context(|| format!("the model of {n} node(s) of the log's machine"))?;
    let given = given_graphs(&searched, log, host, t, env).context("the model on the log's printed graphs")?;
    let (given, notes) = given.map_or((None, Vec::new()), |g| (Some(g.explained), g.notes));
    Ok(Modelled { searched, given, notes })
}

/// `t` with every GPU's compute capability `sm`.
fn with_sm(t: &Topology, sm: u32) -> Topology {
    let mut t = t.clone();
    for g in t.nodes.iter_mut().filter_map(|n| n.gpu.as_mut()) {
        g.sm = sm;
    }
    t
}

/// Compute capabilities a print that does not name one may have been (NCCL's tuning tables per generation).
const SMS: [u32; 7] = [60, 70, 80, 86, 89, 90, 100];

/// Node counts tried when the log prints none.
const NODE_GUESSES: [u32; 4] = [1, 2, 4, 8];

pub(crate) fn run(args: ExplainArgs) -> Result<()> {
    let asked_sizes = args.sizes.as_deref().map(sizes::parse).transpose()?;
    let edits = args.what_if.edits()?;
    let mut log =
        collscope_logreader::read_paths(&args.paths, Options { strict: false }).context("reading the logs")?;
    collscope_logreader::expect_nccl_lines(&log, &args.paths)?;
    if log.log.as_ref().is_some_and(|f| f.rccl) {
        return print_report(&args, rccl(&log));
    }
    let mut env = Env::from_pairs(log.env.iter().map(|e| (e.name.clone(), e.value.clone())));
    let log_version = version_of(&log).map(str::to_string);
    let log_version = log_version.as_deref();
    let mut notes = Vec::new();
    let mut ctx = Context::default();
    // The release whose constants the model runs: --nccl-version, else the log's own.
    let log_release = log_version.and_then(|v| v.parse::<NcclVersion>().ok());
    let release = args.nccl_version.or(log_release);
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

    // The machine: a topology file or preset, else the log's print.
    let mut machine = None;
    let mut paths = None;
    let mut findings = Vec::new();
    let given_source = match (&args.topo_file, &args.preset) {
        (Some(f), _) => Some(TopoSource::File(f.clone())),
        (None, Some(p)) => Some(TopoSource::Preset(p.clone())),
        (None, None) => None,
    };
    let topology = match (given_source, printed(&log)) {
        (Some(source), printed) => {
            let (xml, overlay) = topo::load_noting(&source)?;
            notes.extend(overlay);
            let t = topo::build(&xml, &topo_env)?;
            let t = args.sm.map_or(t.clone(), |sm| with_sm(&t, sm));
            if printed.is_none() {
                notes.push(format!(
                    "machine: the log prints no `=== System`; the model runs {} as every node",
                    t.source
                ));
            }
            Some((t, None))
        }
        (None, Some(p)) => 'rebuilt: {
            // Support shows in any NET connection using it; one without may only be too far from its NIC
            // (`ncclTopoCheckGdr`'s distance), as on a PCIe machine whose rings cross to another NIC.
            let mut net = log.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred).peekable();
            let gdr = net.peek().is_some().then(|| net.any(|c| c.gdrdma == Some(true)));
            let facts = Facts { sm: args.sm, gdr };
            let r = match replay::rebuild(p, facts, &topo_env) {
                Ok(r) => r,
                Err(e @ ReplayError::Topo(topo::TopoError::TooLarge { .. })) => return Err(e.into()),
                Err(e) => {
                    let why = format!(
                        "the log's `=== System` print could not be rebuilt into a machine ({e}); pass --topo-file \
                         or --preset with the machine"
                    );
                    notes.push(why.clone());
                    ctx.unmodelled = Some(why);
                    break 'rebuilt None;
                }
            };
            ctx.host = p.host.clone();
            replay::renumber_graphs(&mut log, ctx.host.as_deref(), &r.printed_ranks);
            findings = r.findings.clone();
            notes.extend(r.notes.iter().cloned());
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
            let why = "the log prints no machine (NCCL's `=== System` lines need NCCL_DEBUG=INFO with \
                       NCCL_DEBUG_SUBSYS including GRAPH); pass --preset or --topo-file (and --nodes)";
            notes.push(format!("missing fact: {why}"));
            ctx.unmodelled = Some(why.into());
            None
        }
    };

    let mut model = None;
    let mut what_if = None;
    let mut fields = Vec::new();
    let not_compared: Vec<String>;
    let mut upgrade = None;
    if let Some((t, facts)) = topology {
        let gpus = t.nodes_of(NodeType::GPU).count();
        let host = ctx.host.clone();
        // Without a network device the machine cannot be more than one node, whatever the log implies.
        let one_host = t.nodes_of(NodeType::NET).next().is_none();
        let on_one_host = |n: u32, notes: &mut Vec<String>| -> u32 {
            if one_host && n > 1 {
                notes.push(format!(
                    "nodes: the log implies {n} but its machine has no network device to connect them (the print \
                     omits the NICs, or the job ran on one host); the model runs one node (--topo-file with the \
                     NICs models {n})"
                ));
                return 1;
            }
            n
        };
        // The log reader's node count when it concluded rather than read it: a guess, as ours is.
        let reader_guess = log.log.as_ref().and_then(|f| f.inferred.iter().find(|i| i.fact == "nnodes"));
        // Counts past the model's bound are refused before any work grows with them (not degraded to a note).
        let printed_nodes =
            log.nnodes.filter(|_| reader_guess.is_none()).map(|n| check_nodes(n, "the log's nNodes")).transpose()?;
        let asked_nodes = args.nodes.map(|n| check_nodes(n, "--nodes")).transpose()?;
        let guess = match (log.nnodes, reader_guess) {
            (Some(n), Some(_)) => check_nodes(n, "the log's inferred nNodes")?,
            _ => guess_nodes(&log, gpus),
        };
        let guess = on_one_host(guess, &mut notes);
        let guessed_from = reader_guess
            .map_or("the log's ranks and graphs".to_string(), |i| format!("the log reader's inference ({})", i.reason));
        // Sizes: asked, else those the log's calls had (with the node count guessed; the what-if keeps only
        // the calls the log printed), else the default sweep.
        let sizes_for = |n: u32| -> Vec<u64> {
            asked_sizes.clone().unwrap_or_else(|| {
                let seen: Vec<u64> = seen_calls(&log, n * gpus as u32).into_iter().map(|(_, b)| b).collect();
                if seen.is_empty() {
                    vec![64 << 10, 1 << 20, 16 << 20, 64 << 20, 1 << 30]
                } else {
                    seen
                }
            })
        };
        let mut choose = || -> Result<(u32, Modelled, bool)> {
            Ok(match (asked_nodes, printed_nodes) {
                (Some(n), _) => (n, model_of(&log, &t, n, &sizes_for(n), &env, host.as_deref())?, false),
                (None, Some(n)) => {
                    let n = on_one_host(n, &mut notes);
                    (n, model_of(&log, &t, n, &sizes_for(n), &env, host.as_deref())?, false)
                }
                (None, None) => {
                    let first = model_of(&log, &t, guess, &sizes_for(guess), &env, host.as_deref())?;
                    if log.tuning.is_empty() {
                        notes.push(format!("nodes: not printed; {guess} from {guessed_from} (--nodes sets it)"));
                        (guess, first, true)
                    } else {
                        // The tuning table's latencies and bandwidths depend on the node count: the count whose
                        // table is most like the printed one.
                        let cells = |m: &Modelled| alike(&log, m.compared(), &ctx, Kind::Tuning);
                        let mut best = (cells(&first), guess, first);
                        let mut tried = vec![format!("{} with {guess}", best.0)];
                        for n in NODE_GUESSES.into_iter().filter(|&n| n != guess && (n == 1 || !one_host)) {
                            let Ok(m) = model_of(&log, &t, n, &sizes_for(n), &env, host.as_deref()) else { continue };
                            let c = cells(&m);
                            tried.push(format!("{c} with {n}"));
                            if c > best.0 {
                                best = (c, n, m);
                            }
                        }
                        let total = log.tuning.values().flat_map(|a| a.values()).map(|p| p.len()).sum::<usize>();
                        notes.push(format!(
                            "nodes: not printed; {} from the tuning table (cells alike of {total}: {}; {guess} from \
                             {guessed_from}; --nodes sets it)",
                            best.1,
                            tried.join(", ")
                        ));
                        (best.1, best.2, true)
                    }
                }
            })
        };
        match choose() {
            Ok((n, mut m, guessed)) => {
                notes.append(&mut m.notes);
                if let Some(r) = log.nranks.filter(|&r| r as usize != gpus * n as usize) {
                    notes.push(format!(
                        "shape: the log's communicator has {r} ranks; the model runs {n} node(s) x {gpus} GPU(s), one rank each"
                    ));
                }
                let sm = t.nodes_of(NodeType::GPU).find_map(|(_, g)| g.gpu.as_ref().map(|g| g.sm)).unwrap_or(0);
                let (sm, gdr) = facts
                    .unwrap_or((sm, t.nodes_of(NodeType::NET).any(|(_, n)| n.net.as_ref().is_some_and(|x| x.gdr))));
                // Without a network device there is no GPUDirect RDMA to speak of.
                let gdr = (!one_host).then_some(gdr);
                machine = Some(Machine {
                    source: t.source.clone(),
                    host: t.host.clone(),
                    nodes: n,
                    gpus_per_node: gpus,
                    sm,
                    gdr,
                });
                let sizes = sizes_for(n);

                let compared = replay::compare(&log, Some(m.compared()), &ctx);
                fields = compared.fields;
                not_compared = compared.not_compared;
                // Causes: the model re-run with each version or fact the log leaves open; a difference a re-run
                // removes has that cause.
                if fields.iter().any(|f| !f.matched) {
                    let mut variants = Vec::new();
                    let mut rerun = |t: &Topology, n: u32, env: &Env, cause: String| {
                        if let Ok(m) = model_of(&log, t, n, &sizes, env, host.as_deref()) {
                            variants.push(Variant { cause, explained: m.given.unwrap_or(m.searched) });
                        }
                    };
                    if let (Some(v), Some(asked)) = (log_release, args.nccl_version.filter(|a| Some(*a) != log_release))
                    {
                        let at = env.with(VERSION_VAR, &v.to_string());
                        let cause = format!(
                            "version: the model re-run with NCCL {v}'s rules (not {asked}'s) gives the log's value"
                        );
                        rerun(&t, n, &at, cause);
                    }
                    if let Some(assumed) = ctx.assumed_sm {
                        for sm in SMS.into_iter().filter(|&s| s != assumed) {
                            let cause = format!(
                                "missing fact: the log does not name the GPUs' compute capability (SM{assumed} assumed); \
                                 with SM{sm} (--sm {sm}) the model gives the log's value"
                            );
                            rerun(&with_sm(&t, sm), n, &env, cause);
                        }
                    }
                    if guessed {
                        for other in NODE_GUESSES.into_iter().filter(|&o| o != n) {
                            let cause = format!(
                                "missing fact: the log does not print nNodes ({n} inferred); with {other} nodes (--nodes \
                                 {other}) the model gives the log's value"
                            );
                            rerun(&t, other, &env, cause);
                        }
                    }
                    verify(&mut fields, &log, &variants, &ctx);
                }

                if !edits.is_empty() {
                    let mut w = collscope_nccl::whatif::what_if(&t, n, &sizes, &env, &edits)?;
                    if asked_sizes.is_none() && !log.decisions.is_empty() {
                        let seen = seen_calls(&log, n * gpus as u32);
                        // explain rounds a size down to whole float32 elements per rank.
                        let per = u64::from(n) * gpus as u64 * collscope_nccl::explain::ELEM;
                        w.rows.retain(|r| seen.iter().any(|&(c, b)| c == r.coll && b >= r.bytes && b - r.bytes < per));
                        w.sizes_from_log = true;
                    }
                    what_if = Some(w);
                }
                if let Some(vs) = args.vs {
                    let vs_env = env.with(VERSION_VAR, &vs.to_string());
                    let vs_topo_env = TopoEnv::from_env(&vs_env)?;
                    notes.extend(vs_topo_env.profile.note.clone());
                    let vs_t =
                        upgrade::with_release_nvlinks(&t, &topo_env.profile, &vs_topo_env.profile, &vs_topo_env)?;
                    let (before, after) = (Side { topology: &t, env: &env }, Side { topology: &vs_t, env: &vs_env });
                    upgrade = Some(upgrade::upgrade(before, after, n, &sizes)?);
                }
                model = Some(m.searched);
            }
            Err(e) => {
                let why = format!(
                    "the model could not run on the log's machine ({e:#}); pass --topo-file or --preset with the \
                     machine"
                );
                notes.push(why.clone());
                ctx.unmodelled = Some(why);
                not_compared = replay::compare(&log, None, &ctx).not_compared;
            }
        }
    } else {
        not_compared = replay::compare(&log, None, &ctx).not_compared;
        if !edits.is_empty() || args.vs.is_some() {
            notes.push(
                "what-if and --vs: need the machine (--preset or --topo-file), which the log does not print".into(),
            );
        }
    }

    let total = fields.len();
    let ratio = |n: usize| (total > 0).then(|| n as f64 / total as f64);
    let matched = fields.iter().filter(|c| c.matched).count();
    let explained = fields.iter().filter(|c| c.matched || c.cause.is_some()).count();
    if total == 0 && not_compared.is_empty() {
        notes.push(
            "nothing to compare: the log prints no graph, channel count, tuning table or per-call decision".into(),
        );
    }
    let report = Report {
        log_version,
        model_version: MODEL_VERSION,
        match_ratio: ratio(matched),
        explained_ratio: ratio(explained),
        comparisons: fields,
        not_compared,
        notes,
        findings,
        machine,
        paths,
        what_if,
        upgrade,
        model: model.as_ref(),
    };
    print_report(&args, report)
}

/// An RCCL log: its search and tuning are AMD's, which the replay does not model, so nothing is compared.
fn rccl(log: &Snapshot) -> Report<'_> {
    Report {
        log_version: version_of(log),
        model_version: MODEL_VERSION,
        comparisons: Vec::new(),
        match_ratio: None,
        explained_ratio: None,
        not_compared: Vec::new(),
        notes: vec![
            "RCCL: the log is RCCL's (AMD's fork of NCCL, for ROCm GPUs); the replay models NVIDIA NCCL's search, \
             connect and tuning, not RCCL's, so nothing is compared (log analyze reads the log)"
                .into(),
        ],
        findings: Vec::new(),
        machine: None,
        paths: None,
        what_if: None,
        upgrade: None,
        model: None,
    }
}

fn print_report(args: &ExplainArgs, report: Report) -> Result<()> {
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
            match m.gdr {
                Some(true) => "on",
                Some(false) => "off",
                None => "n/a: no network device",
            }
        );
    }
    if !r.findings.is_empty() {
        let _ = writeln!(o, "\nFindings from the machine print");
        for f in &r.findings {
            let _ = writeln!(o, "  - {}", f.message);
        }
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
            let _ = writeln!(o, "      cause (verified by a re-run): {cause}");
        } else if let Some(hint) = &c.hint {
            let _ = writeln!(o, "      not verified: {hint}");
        }
    }
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1} %", v * 100.0));
    let kinds: Vec<String> = [Kind::Graph, Kind::Channels, Kind::Tuning, Kind::Decision]
        .iter()
        .filter_map(|&k| {
            let n = r.comparisons.iter().filter(|c| c.kind == k).count();
            (n > 0).then(|| format!("{n} {}", format!("{k:?}").to_lowercase()))
        })
        .collect();
    if r.comparisons.is_empty() {
        let _ = writeln!(o, "\nNothing compared");
    } else {
        let _ = writeln!(
            o,
            "\n{} fields compared ({}): {} match, {} match or have a verified cause",
            r.comparisons.len(),
            kinds.join(", "),
            pct(r.match_ratio),
            pct(r.explained_ratio)
        );
    }
    for n in &r.not_compared {
        let _ = writeln!(o, "  not compared: {n}");
    }
    if let Some(w) = &r.what_if {
        o.push_str(&whatif::render(w));
    }
    if let Some(u) = &r.upgrade {
        o.push_str(&crate::cli::topo::upgrade::render(u));
    }
    o
}
