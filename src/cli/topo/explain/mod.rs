//! `collscope topo explain`: everything NCCL would decide at init for a communicator of N identical nodes
//! (graphs, channels, rings, trees, the tuning table) and, per collective and size, the algorithm, protocol
//! and channels it would pick, the predicted time, the runner-up and why; with `NCCL_ALGO`/`NCCL_PROTO` set,
//! what forcing costs against the default. `--json` for machines, `--log` for NCCL INFO lines.

mod text;

use super::SourceArgs;
use crate::cli::sizes;

use anyhow::{bail, Context, Result};
use clap::Args;
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::{self as debug, DebugConfig, Level, Logger, Origin, Subsys};
use collscope_model::{
    Algorithm, ChannelCounts, Collective, DataType, Decision, Graph, Protocol, Ring, Topology, Tree,
};
use collscope_nccl::graph::{self, Plan};
use collscope_nccl::topo::{self, TopoEnv};
use collscope_nccl::tuning::constants::NCCL_2_28_9;
use collscope_nccl::tuning::from_plan::input_from_plan;
use collscope_nccl::tuning::plan::channel_range;
use collscope_nccl::tuning::{CallInfo, Choice, TuningModel, TuningParams};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Args)]
pub struct ExplainArgs {
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
}

/// What forcing `NCCL_ALGO`/`NCCL_PROTO` costs for one call.
#[derive(Debug, Serialize)]
pub(crate) struct Forcing {
    pub coll: Collective,
    pub bytes: u64,
    pub forced: Option<Pick>,
    pub default: Pick,
    /// forced time / default time (None when nothing is left to run).
    pub slowdown: Option<f64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Pick {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub n_channels: u32,
    pub time_us: f64,
}

impl From<&Choice> for Pick {
    fn from(c: &Choice) -> Self {
        Pick { algo: c.algo, proto: c.proto, n_channels: c.n_channels, time_us: c.time.time_us }
    }
}

/// A call NCCL would refuse (`no algorithm/protocol available`).
#[derive(Debug, Serialize)]
pub(crate) struct Refused {
    pub coll: Collective,
    pub bytes: u64,
    pub error: String,
}

pub(crate) type Disabled = BTreeMap<Collective, BTreeMap<Algorithm, BTreeMap<Protocol, Vec<String>>>>;

#[derive(Debug, Serialize)]
pub(crate) struct Explanation {
    pub nccl_version: &'static str,
    pub topology: String,
    pub nnodes: u32,
    pub nranks: u32,
    pub graphs: Vec<Graph>,
    pub channels: ChannelCounts,
    pub rings: Vec<Ring>,
    pub trees: Vec<Tree>,
    pub tuning: collscope_model::TuningTable,
    /// `{Collective: {Algo: {Proto: [why it is off]}}}` for every cell the table leaves at 0.
    pub disabled: Disabled,
    pub decisions: Vec<Decision>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// With NCCL_ALGO/NCCL_PROTO set: per call, the forced choice against NCCL's default.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forcing: Vec<Forcing>,
    #[serde(skip)]
    pub forced_by: Vec<(String, String)>,
}

/// Installs the process logger before anything logs: with `--log`, INFO on stdout (every subsystem unless
/// NCCL_DEBUG_SUBSYS narrows it); otherwise the environment's settings on stderr, so stdout stays clean.
fn install_logger(log: bool) -> Result<()> {
    let origin = Origin::current();
    let mut cfg = DebugConfig::from_lookup(|k| std::env::var(k).ok(), &origin.host, origin.pid)?;
    let sink: Box<dyn std::io::Write + Send> = if log {
        if cfg.level < Level::Info {
            cfg.level = Level::Info;
        }
        if std::env::var("NCCL_DEBUG_SUBSYS").map_or(true, |v| v.is_empty()) {
            cfg.mask = Subsys::ALL;
        }
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::stderr())
    };
    debug::install(Logger::new(cfg, origin, sink));
    Ok(())
}

fn load_topology(args: &ExplainArgs, env: &Env) -> Result<Topology> {
    let source = args.source.source(env);
    let mut xml = topo::load(&source).with_context(|| format!("cannot load the topology ({source:?})"))?;
    if let Some(k) = args.nranks_per_node {
        crate::cli::trim::keep_gpus(&mut xml, k)?;
    }
    let topo_env = TopoEnv::from_env(env)?;
    Ok(topo::build(&xml, &topo_env)?)
}

fn disabled(model: &TuningModel) -> Disabled {
    let mut out: BTreeMap<_, BTreeMap<_, BTreeMap<_, _>>> = BTreeMap::new();
    for coll in Collective::TUNED {
        for &a in Algorithm::ALL {
            for &p in Protocol::ALL {
                let why = model.off_reasons(coll, a, p);
                if !why.is_empty() {
                    let why = why.iter().map(ToString::to_string).collect();
                    out.entry(coll).or_default().entry(a).or_default().insert(p, why);
                }
            }
        }
    }
    out
}

/// Channels a call of this kind may spread over (`scheduleCollTasksToPlan`'s per-kind maximum).
fn kind_channels(model: &TuningModel, c: &Choice) -> u32 {
    let i = &model.input;
    match c.algo {
        Algorithm::Nvls | Algorithm::NvlsTree if i.n_nodes > 1 && c.algo == Algorithm::Nvls => {
            i.coll_channels.min(i.nvls_channels)
        }
        Algorithm::Nvls | Algorithm::NvlsTree => i.nvls_channels,
        _ => i.coll_channels,
    }
}

/// The calls explained are float32: `size` rounds down to whole elements per rank (at least one).
/// Returns (NCCL's nBytes for tuning, the per-rank count NCCL's per-call line multiplies by 4).
fn call_size(coll: Collective, size: u64, n_ranks: u32) -> (u64, u64) {
    let per = match coll {
        Collective::AllGather | Collective::ReduceScatter => n_ranks as u64,
        _ => 1,
    };
    let count = (size / (ELEM * per)).max(1);
    (CallInfo::bytes_for(coll, count, DataType::F32, n_ranks), count)
}

/// Element size of the float32 calls explained.
const ELEM: u64 = 4;

pub fn run(args: ExplainArgs) -> Result<()> {
    install_logger(args.log)?;
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let sizes = sizes::parse(&args.sizes)?;
    if args.log {
        debug::show_version();
    }
    let env = Env::from_process();
    let topology = load_topology(&args, &env)?;
    let plan: Plan = graph::plan(&topology, args.nodes, &env)?;
    let input = input_from_plan(&plan, &topology, args.nodes);
    let params = TuningParams::from_env(&env)?;
    let forced = params.forced();
    let model = TuningModel::new(input.clone(), params.clone(), &NCCL_2_28_9)?;
    let default_model = if forced { Some(TuningModel::new(input, params.unforced(), &NCCL_2_28_9)?) } else { None };
    if args.log {
        plan.emit();
        model.log();
    }

    let n_ranks = model.input.n_ranks;
    let mut decisions = Vec::new();
    let mut refused = Vec::new();
    let mut forcing = Vec::new();
    let mut choices = Vec::new();
    for coll in Collective::TUNED {
        let mut seen = Vec::new();
        for &size in &sizes {
            let (bytes, count) = call_size(coll, size, n_ranks);
            if seen.contains(&bytes) {
                continue;
            }
            seen.push(bytes);
            let call = CallInfo::new(coll, bytes);
            let choice = model.choose(&call);
            match &choice {
                Ok(c) => {
                    decisions.push(c.decision());
                    choices.push(c.clone());
                    if args.log {
                        let range = channel_range(c, count, ELEM, n_ranks, kind_channels(&model, c));
                        nccl_info!(Subsys::TUNING, "{}", c.tuning_line(count * ELEM, range));
                    }
                }
                Err(e) => refused.push(Refused { coll, bytes, error: e.to_string() }),
            }
            if let Some(dm) = &default_model {
                let d = dm.choose(&call)?;
                let f = choice.as_ref().ok();
                forcing.push(Forcing {
                    coll,
                    bytes,
                    forced: f.map(Pick::from),
                    default: Pick::from(&d),
                    slowdown: f.map(|f| f.time.time_us / d.time.time_us.max(f64::MIN_POSITIVE)),
                });
            }
        }
    }

    let ex = Explanation {
        nccl_version: NCCL_2_28_9.version,
        topology: topology.source.clone(),
        nnodes: args.nodes,
        nranks: n_ranks,
        graphs: plan.graphs().iter().map(|f| f.graph.clone()).collect(),
        channels: plan.connected.counts.clone(),
        rings: plan.connected.rings.clone(),
        trees: plan.connected.trees.clone(),
        tuning: model.table(),
        disabled: disabled(&model),
        decisions,
        refused,
        forcing,
        forced_by: [("NCCL_ALGO", &params.algo), ("NCCL_PROTO", &params.proto)]
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&ex)?);
    } else if !args.log {
        print!("{}", text::render(&ex, &model, &choices));
    }
    Ok(())
}
