//! Everything NCCL 2.28.9 would decide at init for a communicator of N identical nodes, as the model
//! (`Snapshot` with `Source::Model`): graphs, channels, rings, trees, each ring and tree edge's transport
//! (`connections`), the tuning table and, per collective and
//! size, the algorithm, protocol and channels it would pick with the runner-up; plus what only an explanation
//! carries ([`Extras`]): why table cells are off, calls NCCL would refuse, and what `NCCL_ALGO`/`NCCL_PROTO`
//! forcing costs against the default. `topo explain` prints it; the TUI and any other consumer can show it.

use crate::graph::transports::NET_NAME;
use crate::graph::{self, GraphError};
use crate::topo::TopoEnv;
use crate::tuning::from_plan::input_from_plan;
use crate::tuning::plan::channel_range;
use crate::tuning::{CallInfo, Choice, TuningError, TuningModel, TuningParams};
use collscope_debug::env::Env;
use collscope_debug::{nccl_info, Subsys};
use collscope_model::{
    Algorithm, Collective, Communicator, DataType, NetDevice, NodeType, Protocol, Snapshot, Source, Topology, Transport,
};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Tuning(#[from] TuningError),
}

/// What forcing `NCCL_ALGO`/`NCCL_PROTO` costs for one call.
#[derive(Debug, Clone, Serialize)]
pub struct Forcing {
    pub coll: Collective,
    pub bytes: u64,
    pub forced: Option<Pick>,
    pub default: Pick,
    /// forced time / default time (None when nothing is left to run).
    pub slowdown: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Pick {
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
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    pub coll: Collective,
    pub bytes: u64,
    pub error: String,
}

/// `{Collective: {Algo: {Proto: [why it is off]}}}` for every cell the table leaves at 0.
pub type Disabled = BTreeMap<Collective, BTreeMap<Algorithm, BTreeMap<Protocol, Vec<String>>>>;

/// What only an explanation carries, beside the model.
#[derive(Debug, Clone, Serialize)]
pub struct Extras {
    pub disabled: Disabled,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// With NCCL_ALGO/NCCL_PROTO set: per call, the forced choice against NCCL's default.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forcing: Vec<Forcing>,
    /// The forcing variables as set (`NCCL_ALGO`, then `NCCL_PROTO`).
    #[serde(skip)]
    pub forced_by: Vec<(String, String)>,
}

/// The model and the extras; serialized flat (the snapshot's keys, then `disabled`, `refused`, `forcing`).
/// The tuning model and the per-call choices stay for reports that print more than the model keeps.
#[derive(Debug, Serialize)]
pub struct Explained {
    #[serde(flatten)]
    pub snapshot: Snapshot,
    #[serde(flatten)]
    pub extras: Extras,
    #[serde(skip)]
    pub model: TuningModel,
    /// The decisions' choices, in the snapshot's order.
    #[serde(skip)]
    pub choices: Vec<Choice>,
}

/// Element size of the float32 calls explained.
pub const ELEM: u64 = 4;

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

fn disabled(model: &TuningModel) -> Disabled {
    let mut out: BTreeMap<_, BTreeMap<_, BTreeMap<_, _>>> = BTreeMap::new();
    for coll in Collective::TUNED {
        for &a in Algorithm::NCCL {
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

/// Explains a communicator of `nnodes` copies of `topology` (one rank per GPU) for float32 calls of every
/// tuned collective at `sizes` (NCCL's nBytes). With `log`, prints NCCL's INFO lines on the way (graphs,
/// connect, each ring and tree edge's transport, the tuning table, one TUNING line per call), as an NCCL_DEBUG=INFO log of this communicator would.
pub fn explain(
    topology: &Topology,
    nnodes: u32,
    sizes: &[u64],
    env: &Env,
    log: bool,
) -> Result<Explained, ExplainError> {
    let profile = TopoEnv::from_env(env).map_err(GraphError::from)?.profile;
    let plan = graph::plan(topology, nnodes, env)?;
    let input = input_from_plan(&plan, topology, nnodes);
    let params = TuningParams::from_env(env)?;
    let model = TuningModel::new(input.clone(), params.clone(), profile.tuner_constants())?;
    let default_model = if params.forced() {
        Some(TuningModel::new(input, params.unforced(), profile.tuner_constants())?)
    } else {
        None
    };
    if log {
        // NCCL prints the system and its paths (`ncclTopoPrint`) before the search.
        crate::topo::print::log_system(topology);
        plan.emit();
    }
    // Then each rank's transport setup (which logs its GPUDirect RDMA decisions) prints its edges, before the
    // tuning model runs.
    let edges = plan.connections(topology, env)?;
    if log && model.input.n_ranks > 1 {
        for e in &edges.rings {
            nccl_info!(e.subsys, "{}", e.line());
        }
        nccl_info!(Subsys::INIT, "{}", edges.rings_line());
        for e in &edges.trees {
            nccl_info!(e.subsys, "{}", e.line());
        }
        nccl_info!(Subsys::INIT, "Connected all trees");
    }
    if log {
        model.log();
    }

    let n_ranks = model.input.n_ranks;
    let mut refused = Vec::new();
    let mut forcing = Vec::new();
    let mut choices = Vec::new();
    for coll in Collective::TUNED {
        let mut seen = Vec::new();
        for &size in sizes {
            let (bytes, count) = call_size(coll, size, n_ranks);
            if seen.contains(&bytes) {
                continue;
            }
            seen.push(bytes);
            let call = CallInfo::new(coll, bytes);
            let choice = model.choose(&call);
            match &choice {
                Ok(c) => {
                    choices.push(c.clone());
                    // A one-rank call never reaches the tuner's TUNING line (`ncclLaunchOneRank`).
                    if log && !c.one_rank {
                        let kind = kind_channels(&model, c);
                        let range = channel_range(c, count, ELEM, n_ranks, kind, profile.min_traffic_per_channel);
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

    let mut snapshot = Snapshot::new(Source::Model { topology: topology.source.clone() });
    // The topology, search and tuning follow the release (`VersionProfile::describe` says what does not).
    snapshot.nccl_version = Some(profile.version.to_string());
    snapshot.collscope_version = Some(env!("CARGO_PKG_VERSION").to_string());
    snapshot.nranks = Some(n_ranks);
    snapshot.nnodes = Some(nnodes);
    snapshot.topology = vec![topology.clone()];
    plan.fill(&mut snapshot);
    snapshot.connections = edges.all().map(|e| e.conn.clone()).collect();
    if snapshot.connections.iter().any(|c| c.transport == Transport::Net) {
        // Every node is a copy of `topology`: its NICs, as NCCL's IB plugin lists them (`NET/IB : Using`).
        snapshot.network = Some(NET_NAME.to_string());
        snapshot.net_devices = topology
            .nodes_of(NodeType::NET)
            .filter_map(|(_, n)| n.net.as_ref())
            .map(|a| NetDevice {
                index: a.dev.max(0) as u32,
                name: a.name.clone(),
                port: Some(a.port),
                link: Some(NET_NAME.to_string()),
                host: None,
            })
            .collect();
    }
    // Ranks fill nodes in order, one per GPU (the graph's `rank / ranks_per_node`): each node named by its index.
    let per_node = n_ranks / nnodes.max(1);
    snapshot.hosts = (0..nnodes).map(node_name).collect();
    snapshot.communicators = (0..n_ranks)
        .map(|rank| Communicator {
            rank: Some(rank),
            nranks: Some(n_ranks),
            nnodes: Some(nnodes),
            local_ranks: Some(per_node),
            local_rank: Some(rank % per_node.max(1)),
            host: Some(node_name(rank / per_node.max(1))),
            ..Communicator::default()
        })
        .collect();
    snapshot.tuning = model.table();
    snapshot.decisions = choices.iter().map(Choice::decision).collect();
    snapshot.env = env.settings();
    let extras = Extras {
        disabled: disabled(&model),
        refused,
        forcing,
        forced_by: [("NCCL_ALGO", &params.algo), ("NCCL_PROTO", &params.proto)]
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .collect(),
    };
    Ok(Explained { snapshot, extras, model, choices })
}

/// A modelled node's name, by its index.
fn node_name(node: u32) -> String {
    format!("node{node}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testing::preset;

    #[test]
    fn dgx_h100_two_nodes_is_a_model_snapshot() {
        let ex = explain(&preset("dgx-h100"), 2, &[8, 1 << 30], &Env::default(), false).unwrap();
        let s = &ex.snapshot;
        assert_eq!(s.source, Source::Model { topology: "preset:dgx-h100".into() });
        assert_eq!((s.nranks, s.nnodes, s.nccl_version.as_deref()), (Some(16), Some(2), Some("2.28.9")));
        assert_eq!(s.topology.len(), 1);
        assert_eq!(s.graphs.len(), 3, "ring, tree, NVLS");
        assert_eq!(s.channels.nvls, Some(16));
        assert_eq!(s.rings.len() as u32, s.channels.coll.unwrap());
        assert_eq!(s.rings[0].order.len(), 16, "rings cross both nodes");
        assert!(!s.trees.is_empty());
        // Every ring edge has its modelled transport: P2P inside a node, NET with GPUDirect RDMA between.
        for r in &s.rings {
            for (i, &src) in r.order.iter().enumerate() {
                let dst = r.order[(i + 1) % r.order.len()];
                let c = s.connections.iter().find(|c| (c.channel, c.src, c.dst) == (r.channel, src, dst)).unwrap();
                let net = src / 8 != dst / 8;
                assert_eq!(c.transport, if net { Transport::Net } else { Transport::P2p }, "{c:?}");
                assert_eq!(c.gdrdma, net.then_some(true), "{c:?}");
                // A NET edge names its NIC as the topology does (the IB HCAs are mlx5_*).
                assert_eq!(c.nic.as_deref().is_some_and(|n| n.starts_with("mlx5_")), net, "{c:?}");
            }
        }
        // The network and its NICs, and each rank's node, for the views (Overview's Network, rings by host).
        assert_eq!((s.network.as_deref(), s.net_devices.len()), (Some("IB"), 8));
        assert_eq!(s.hosts, ["node0", "node1"]);
        let host = |r: u32| s.communicators.iter().find(|c| c.rank == Some(r)).and_then(|c| c.host.clone());
        assert_eq!((host(7).as_deref(), host(8).as_deref(), s.communicators.len()), (Some("node0"), Some("node1"), 16));
        assert!(s.tuning[&Collective::AllReduce][&Algorithm::Ring].contains_key(&Protocol::Simple));
        // Five collectives x two sizes, each with the choice it came from.
        assert_eq!(s.decisions.len(), 10);
        assert_eq!(ex.choices.len(), 10);
        let big = s.decisions.iter().find(|d| d.coll == Collective::AllReduce && d.bytes == 1 << 30).unwrap();
        assert!(big.runner_up.is_some() && big.reason.is_some());
        assert!(s.env.is_empty() && ex.extras.refused.is_empty() && ex.extras.forcing.is_empty());
        // CollNet is off without a network that supports it; the extras say why.
        let why = &ex.extras.disabled[&Collective::AllReduce][&Algorithm::CollNetDirect][&Protocol::Simple];
        assert!(!why.is_empty());
    }

    #[test]
    fn forcing_and_refused_calls_are_extras() {
        let env = Env::from_pairs([("NCCL_ALGO", "NVLS")]);
        let ex = explain(&preset("dgx-a100"), 1, &[1 << 20], &env, false).unwrap();
        // No NVSwitch with NVLS on an A100: every call is refused, and forcing has nothing to run.
        assert_eq!(ex.extras.refused.len(), Collective::TUNED.len());
        assert!(ex.extras.refused[0].error.contains("no algorithm/protocol available"), "{:?}", ex.extras.refused);
        assert!(ex.snapshot.decisions.is_empty());
        assert!(ex.extras.forcing.iter().all(|f| f.forced.is_none() && f.slowdown.is_none()));
        assert_eq!(ex.extras.forced_by, vec![("NCCL_ALGO".to_string(), "NVLS".to_string())]);
        assert_eq!(ex.snapshot.env[0].name, "NCCL_ALGO");

        let env = Env::from_pairs([("NCCL_ALGO", "ring")]);
        let ex = explain(&preset("dgx-h100"), 1, &[1 << 30], &env, false).unwrap();
        let f = ex.extras.forcing.iter().find(|f| f.coll == Collective::AllReduce).unwrap();
        assert_eq!((f.default.algo, f.forced.as_ref().unwrap().algo), (Algorithm::Nvls, Algorithm::Ring));
        assert!(f.slowdown.unwrap() > 1.2, "{f:?}");
    }

    #[test]
    fn serializes_flat_with_the_extras_beside_the_model() {
        let ex = explain(&preset("hgx-pcie"), 1, &[1 << 20], &Env::default(), false).unwrap();
        let v = serde_json::to_value(&ex).unwrap();
        assert_eq!(v["schema_version"], collscope_model::SCHEMA_VERSION);
        assert_eq!(v["source"]["kind"], "model");
        for key in ["graphs", "channels", "rings", "trees", "tuning", "decisions", "disabled"] {
            assert!(v.get(key).is_some(), "no {key}");
        }
        assert!(v["disabled"]["AllReduce"]["Ring"]["LL128"][0].as_str().unwrap().contains("LL128 disabled"));
        assert!(v.get("refused").is_none() && v.get("forcing").is_none() && v.get("forced_by").is_none());
        // The model part reads back as a snapshot.
        let back: Snapshot = serde_json::from_value(v).unwrap();
        assert_eq!((back.source, back.rings), (ex.snapshot.source.clone(), ex.snapshot.rings.clone()));
    }

    /// dgx-a100 built and explained with the constants of NCCL `version`.
    fn a100_at(version: &str) -> Explained {
        let env = Env::from_pairs([(crate::topo::settings::VERSION_VAR, version)]);
        let xml = crate::topo::load(&crate::topo::TopoSource::Preset("dgx-a100".into())).unwrap();
        let t = crate::topo::build(&xml, &TopoEnv::from_env(&env).unwrap()).unwrap();
        explain(&t, 1, &[1 << 20], &env, false).unwrap()
    }

    #[test]
    fn the_release_sets_link_bandwidths_and_channels() {
        let (old, new) = (a100_at("2.17.1"), a100_at("2.18.1"));
        assert_eq!(old.snapshot.nccl_version.as_deref(), Some("2.17.1"));
        let nvl = |e: &Explained| {
            let t = &e.snapshot.topology[0];
            t.links.iter().find(|l| l.kind == collscope_model::LinkType::NVL).unwrap().bw
        };
        // 12 NVLinks per A100: 22 GB/s each before 2.18.1, 20 from it.
        assert_eq!((nvl(&old), nvl(&new)), (264.0, 240.0));
        let ring = |e: &Explained| e.snapshot.graphs[0].clone();
        let (r_old, r_new) = (ring(&old), ring(&new));
        // 2.17's search starts inside a node at 44/30/22 GB/s (v2.17.1-1 src/graph/search.cc): 264 GB/s per
        // GPU fits 12 rings at 22; 2.18's at 40/30/20: 240 GB/s fits 12 at 20.
        assert_eq!((r_old.n_channels, r_old.bw_intra), (12, 22.0));
        assert_eq!((r_new.n_channels, r_new.bw_intra), (12, 20.0));
        assert_ne!(old.snapshot.tuning, new.snapshot.tuning);
        // The default is 2.28.9 and the same as asking for it (but for the variable that asks).
        let json = |e: &Explained| {
            let mut v = serde_json::to_value(e).unwrap();
            v["env"] = serde_json::Value::Null;
            v
        };
        let d = explain(&preset("dgx-a100"), 1, &[1 << 20], &Env::default(), false).unwrap();
        assert_eq!(json(&d), json(&a100_at("2.28.9")));
    }

    #[test]
    fn one_rank_copies() {
        // NCCL 2.28.9 src/enqueue.cc: with nRanks == 1 a call goes to ncclLaunchOneRank, no algorithm or channel.
        let xml = r#"<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
          <pci busid="0000:01:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" link_width="16">
            <gpu dev="0" sm="80" rank="0" gdr="1"/></pci></cpu></system>"#;
        let ex = explain(&crate::graph::testing::from_xml(xml), 1, &[8, 1 << 30], &Env::default(), false).unwrap();
        assert!(!ex.choices.is_empty());
        for c in &ex.choices {
            assert!(c.one_rank && c.n_channels == 0 && c.n_threads == 0, "{c:?}");
            assert!(c.reason().contains("copies the buffer"), "{}", c.reason());
        }
        assert!(ex.snapshot.decisions.iter().all(|d| d.n_channels == 0));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(explain(&preset("dgx-a100"), 0, &[8], &Env::default(), false).is_err());
        let e = explain(&preset("dgx-a100"), 1, &[8], &Env::from_pairs([("NCCL_PROTO", "LL129")]), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("LL129"), "{e}");
        let e = explain(&preset("cpu-host"), 1, &[8], &Env::default(), false).unwrap_err().to_string();
        assert!(e.contains("no GPU"), "{e}");
        let env = Env::from_pairs([(crate::topo::settings::VERSION_VAR, "2.x")]);
        let e = explain(&preset("dgx-a100"), 1, &[8], &env, false).unwrap_err().to_string();
        assert!(e.contains("2.x") && e.contains("expected a version like 2.18.3"), "{e}");
    }
}
