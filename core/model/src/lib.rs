//! The contract every part of collscope speaks: the runtime fills it live, the log reader fills it from NCCL
//! logs, `topo explain` fills it from a model of a machine; telemetry and the TUI only read it.
//! JSON field names are snake_case; `schema_version` changes whenever a field changes meaning.
//!
//! This crate is the bottom of the workspace: it depends on no other collscope crate, only on serde and
//! thiserror, so every producer and reader of the model can use it without building the others.

pub mod comm;
pub mod connection;
pub mod diag;
pub mod dump;
pub mod events;
pub mod evidence;
pub mod fold;
pub mod graph;
pub mod job;
pub mod lines;
pub mod logfacts;
pub mod names;
pub mod observe;
pub mod ops;
pub mod routes;
pub mod scan;
pub mod topology;
pub mod tuning;

use std::collections::VecDeque;

pub use comm::{CommState, Communicator, InitTimings};
pub use connection::{ChannelTraffic, Connection, Direction, Edge, GdrState};
pub use diag::{EnvSetting, Finding, FindingComm, LineRef, Warning};
pub use dump::{DumpReason, RankDump};
pub use events::{Event, InitFacts, ProfilerCounters};
pub use evidence::{Cite, Evidence};
pub use fold::{Applied, Bounds};
pub use graph::{ChannelCounts, Graph, GraphChannel, Pattern, Ring, Tree};
pub use job::{
    CallSig, CommProgress, InFlight, JobVia, JobView, ProcState, ProcessSeen, RankEdges, RankEndpoint, RankState,
    RankSummary, Stall,
};
pub use logfacts::{
    Allocations, GdrCheck, GdrGpu, Inference, LogFacts, LogStats, PeerClosed, PluginNote, UnnamedDecision,
};
pub use names::{Algorithm, Collective, DataType, Protocol, RedOp, Severity, Transport, UnknownName};
pub use ops::{KernelChannel, OpRecord, OpState, ProxyOp, ProxyTally, ProxyWait};
pub use topology::{Link, LinkType, Node, NodeId, NodeType, Path, PathType, Topology};
pub use tuning::{Decision, RunnerUp, TuningCell, TuningTable};

use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

/// Where a snapshot's facts came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// collscope's own runtime, live.
    Runtime,
    /// Real NCCL logs read by the log reader.
    Log { files: Vec<String> },
    /// A model of a machine (`topo show`/`topo explain`).
    Model { topology: String },
    /// A real NCCL job, live, seen through collscope's NCCL profiler plugin.
    Profiler,
}

impl Source {
    /// The source in words, for a reader told what it does not carry: "the live job", "the log", "the model".
    pub fn describe(&self) -> &'static str {
        match self {
            Source::Runtime => "the live job",
            Source::Log { .. } => "the log",
            Source::Model { .. } => "the model",
            Source::Profiler => "the NCCL job",
        }
    }
}

/// A network device NCCL (or collscope) chose: `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetDevice {
    pub index: u32,
    pub name: String,
    pub port: Option<u32>,
    /// "IB", "RoCE", or the socket address for NET/Socket.
    pub link: Option<String>,
    pub host: Option<String>,
}

/// The bootstrap / OOB interface (`Bootstrap: Using eth0:10.0.0.1<0>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapInterface {
    pub name: String,
    pub address: String,
    pub host: Option<String>,
    pub rank: Option<u32>,
}

/// Everything collscope knows about one job at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub schema_version: u32,
    pub source: Source,
    /// The NCCL version whose behaviour this describes (printed by NCCL, or modelled by collscope).
    pub nccl_version: Option<String>,
    pub collscope_version: Option<String>,
    pub nranks: Option<u32>,
    pub nnodes: Option<u32>,
    /// "IB", "Socket", or a plugin's name.
    pub network: Option<String>,
    pub net_devices: Vec<NetDevice>,
    pub bootstrap: Vec<BootstrapInterface>,
    pub hosts: Vec<String>,
    /// Where every rank of the job serves its telemetry (a live job's ranks exchange them at bootstrap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<RankEndpoint>,
    pub communicators: Vec<Communicator>,
    pub topology: Vec<Topology>,
    pub graphs: Vec<Graph>,
    pub channels: ChannelCounts,
    pub rings: Vec<Ring>,
    pub trees: Vec<Tree>,
    pub connections: Vec<Connection>,
    /// Bytes each channel end moved so far: live traffic summed by (rank, channel, peer, direction), so a rank's
    /// snapshot carries its own edges' totals (readers take rates from their growth).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<ChannelTraffic>,
    pub tuning: TuningTable,
    pub decisions: Vec<Decision>,
    pub env: Vec<EnvSetting>,
    pub warnings: Vec<Warning>,
    pub findings: Vec<Finding>,
    /// Calls that stalled and recovered, kept after they left `ops` (at most `job::MAX_STALLS`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<Stall>,
    /// A deque: a live source folds a call at a time into a full list, which drops its oldest from the front.
    pub ops: VecDeque<OpRecord>,
    pub proxy: Vec<ProxyOp>,
    /// Each channel's GPU time so far, by (comm, rank, channel) (NCCL's profiler KernelCh events).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_channels: Vec<KernelChannel>,
    /// The NCCL profiler plugin's own counters, when the snapshot comes from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler: Option<ProfilerCounters>,
    /// NCCL lines the reader recognised as NCCL's but could not interpret.
    pub unparsed_nccl_lines: Vec<LineRef>,
    /// What only a log carries (the log reader fills it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogFacts>,
}

impl Snapshot {
    pub fn new(source: Source) -> Self {
        Snapshot {
            schema_version: SCHEMA_VERSION,
            source,
            nccl_version: None,
            collscope_version: None,
            nranks: None,
            nnodes: None,
            network: None,
            net_devices: Vec::new(),
            bootstrap: Vec::new(),
            hosts: Vec::new(),
            endpoints: Vec::new(),
            communicators: Vec::new(),
            topology: Vec::new(),
            graphs: Vec::new(),
            channels: ChannelCounts::default(),
            rings: Vec::new(),
            trees: Vec::new(),
            connections: Vec::new(),
            traffic: Vec::new(),
            tuning: TuningTable::new(),
            decisions: Vec::new(),
            env: Vec::new(),
            warnings: Vec::new(),
            findings: Vec::new(),
            stalls: Vec::new(),
            ops: VecDeque::new(),
            proxy: Vec::new(),
            kernel_channels: Vec::new(),
            profiler: None,
            unparsed_nccl_lines: Vec::new(),
            log: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_through_json_with_snake_case_keys() {
        let mut s = Snapshot::new(Source::Log { files: vec!["a.log".into()] });
        s.nranks = Some(8);
        s.connections.push(Connection { gdrdma: Some(true), ..Connection::net(0, 0, 1, Direction::Send, "IB", 0) });
        s.tuning
            .entry(Collective::AllReduce)
            .or_default()
            .entry(Algorithm::Ring)
            .or_default()
            .insert(Protocol::Simple, TuningCell { lat_us: 56.0, bw_gbps: 137.1 });
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["schema_version"], SCHEMA_VERSION);
        assert_eq!(json["connections"][0]["proxy_rank"], serde_json::Value::Null);
        assert_eq!(json["connections"][0]["transport"], "NET");
        assert_eq!(json["tuning"]["AllReduce"]["Ring"]["Simple"]["lat_us"], 56.0);
        assert_eq!(json["unparsed_nccl_lines"], serde_json::json!([]));
        let back: Snapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }
}
