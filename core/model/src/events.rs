//! Live events: what the runtime (or a followed log) reports as it happens. Telemetry turns them into metrics,
//! spans and the server-sent event stream the TUI reads; each event is one JSON object
//! `{"kind": "op_completed", "data": {...}}`.

use super::comm::Communicator;
use super::connection::{ChannelTraffic, Connection};
use super::diag::{Finding, Warning};
use super::graph::{ChannelCounts, Graph, Ring, Tree};
use super::job::RankEndpoint;
use super::ops::{KernelChannel, OpRecord, ProxyOp, ProxyTally};
use super::topology::Topology;
use super::tuning::{Decision, TuningTable};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum Event {
    /// A call entered the queue (state `Enqueued`, no completion fields yet).
    OpEnqueued(OpRecord),
    /// A call finished (state `Completed` or `Failed`, with timings and bandwidths).
    OpCompleted(OpRecord),
    /// A proxy sub-operation finished on one channel and peer (reported once, with its step counts and waits).
    Proxy(ProxyOp),
    /// Several finished proxy sub-operations of one connection, summed (see [`ProxyTally`]).
    ProxyTally(ProxyTally),
    /// Bytes a rank moved to or from one peer on one channel.
    Traffic(ChannelTraffic),
    /// A channel connection was set up.
    Connection(Connection),
    /// A communicator changed state (created, ready with its init timings, destroyed).
    Communicator(Communicator),
    /// The tuner chose an algorithm and protocol for a call.
    Decision(Decision),
    /// What a rank decided at a communicator's init (topology, graphs, channels, rings, trees, tuning table).
    InitFacts(Box<InitFacts>),
    Warning(Warning),
    Finding(Finding),
    /// Where every rank of the job serves its telemetry, learned at bootstrap (the runtime) or through a
    /// rendezvous folder (the profiler plugin).
    Endpoints(Vec<RankEndpoint>),
    /// One channel's GPU time so far (totals since its communicator began).
    KernelChannel(KernelChannel),
    /// The NCCL profiler plugin's own counters so far.
    Profiler(ProfilerCounters),
    /// The facts that are not events (topology, graphs, tuning table, versions) changed: re-read the snapshot.
    Snapshot,
}

impl Event {
    /// Every [`Event::kind`], for readers of a stream that must tell a kind they do not know (from a newer
    /// collscope) from a known one that does not parse.
    pub const KINDS: [&'static str; 15] = [
        "op_enqueued",
        "op_completed",
        "proxy",
        "proxy_tally",
        "traffic",
        "connection",
        "communicator",
        "decision",
        "init_facts",
        "warning",
        "finding",
        "endpoints",
        "kernel_channel",
        "profiler",
        "snapshot",
    ];

    /// The `kind` tag this event carries in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::OpEnqueued(_) => "op_enqueued",
            Event::OpCompleted(_) => "op_completed",
            Event::Proxy(_) => "proxy",
            Event::ProxyTally(_) => "proxy_tally",
            Event::Traffic(_) => "traffic",
            Event::Connection(_) => "connection",
            Event::Communicator(_) => "communicator",
            Event::Decision(_) => "decision",
            Event::InitFacts(_) => "init_facts",
            Event::Warning(_) => "warning",
            Event::Finding(_) => "finding",
            Event::Endpoints(_) => "endpoints",
            Event::KernelChannel(_) => "kernel_channel",
            Event::Profiler(_) => "profiler",
            Event::Snapshot => "snapshot",
        }
    }
}

/// What one rank decided when it initialised one communicator: the facts an NCCL log prints at init (INIT and
/// GRAPH lines), so a live job, a log and a profiler plugin fill the same parts of the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InitFacts {
    pub comm: Option<String>,
    pub rank: u32,
    /// The version of the program that decided (collscope's own, for the runtime).
    pub collscope_version: Option<String>,
    /// The network its NET transport would use (`Socket`, `IB`), if any.
    pub network: Option<String>,
    /// The rank's host as the topology search saw it.
    pub topology: Option<Topology>,
    pub graphs: Vec<Graph>,
    pub channels: ChannelCounts,
    /// Every channel's ring: the order and this rank's neighbours.
    pub rings: Vec<Ring>,
    /// This rank's place in each channel's tree.
    pub trees: Vec<Tree>,
    /// Latency and bandwidth per collective, algorithm and protocol, as this rank's tuning model prices them.
    pub tuning: TuningTable,
}

/// What the NCCL profiler plugin counts of itself and of the proxy thread's control events, totals since the
/// process loaded it (the plugin's `collscope_profiler_counters`, as model data).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfilerCounters {
    /// Events NCCL got no handle for: no free event object.
    pub dropped_events: u64,
    /// Records lost because a communicator's ring was full.
    pub dropped_records: u64,
    /// Child events whose call had no handle or had already completed.
    pub orphan_events: u64,
    /// Calls the model cannot name (Gather, Scatter, PutSignal, ...).
    pub unsupported_calls: u64,
    /// Handles stopped twice or used after their event ended.
    pub misused_handles: u64,
    /// A panic disabled the plugin: NCCL carries on without it.
    pub disabled: bool,
    /// Seconds NCCL's proxy thread slept, polled idle, progressed operations and appended new ones (ProxyCtrl).
    pub proxy_sleep_seconds: f64,
    pub proxy_idle_seconds: f64,
    pub proxy_active_seconds: f64,
    pub proxy_append_seconds: f64,
    pub proxy_appended_ops: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, Transport};

    #[test]
    fn events_are_tagged_with_snake_case_kinds() {
        let ev = Event::Traffic(ChannelTraffic {
            rank: 1,
            channel: 2,
            peer: 0,
            direction: Direction::Send,
            transport: Some(Transport::Shm),
            bytes: 4096,
            in_place_bytes: None,
            seconds: 0.5,
        });
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["kind"], ev.kind());
        assert_eq!(json["data"]["transport"], "SHM");
        assert_eq!(json["data"]["direction"], "send");
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), ev);
        assert_eq!(serde_json::to_value(Event::Snapshot).unwrap(), serde_json::json!({"kind": "snapshot"}));
    }

    #[test]
    fn the_kinds_list_is_every_tag_serde_knows() {
        // serde names every variant it accepts when it meets a tag it does not know.
        let e = serde_json::from_value::<Event>(serde_json::json!({"kind": "no_such_kind"})).unwrap_err().to_string();
        let expected = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("{e}"));
        let tags: Vec<&str> = expected.split(", ").map(|t| t.trim_matches('`')).collect();
        assert_eq!(tags, Event::KINDS, "{e}");
    }
}
