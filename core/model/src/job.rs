//! The job as a whole, not one rank: where each rank serves its telemetry (learned at bootstrap, so any rank
//! can reach the others), and a bounded summary of one rank's progress ([`RankSummary`]) that `/api/v1/job`
//! merges from every rank into a [`JobView`] with the job-level findings.

use super::connection::{ChannelTraffic, Connection};
use super::diag::Finding;
use super::graph::Tree;
use super::names::{Collective, DataType, RedOp};
use super::ops::{OpRecord, OpState};
use super::Snapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Ranks a job view holds (a bigger job is cut to its first ranks, so the answer stays bounded).
pub const MAX_JOB_RANKS: usize = 1024;
/// Communicators summarised per rank.
pub const MAX_COMMS: usize = 16;
/// Recent calls' signatures kept per communicator, to tell which rank called something else.
pub const MAX_RECENT: usize = 32;
/// Recent call starts kept per communicator, to tell a rank that arrives late over time (the straggler rule
/// wants many calls): 128 pairs are about 4 KiB of a summary.
pub const MAX_RECENT_STARTS: usize = 128;
/// Job-level findings kept.
pub const MAX_JOB_FINDINGS: usize = 64;
/// Connections, tree places and channel ends' totals a rank's summary carries, each: a ring's send and receive
/// and a tree's three peers both ways on 16 channels, so a summary stays well under 100 KiB.
pub const MAX_RANK_EDGES: usize = 128;
/// How long a recovered stall is kept after it ended, at least (microseconds): ten minutes, so whoever looks
/// after a hang that resolved itself still finds it.
pub const STALL_KEEP_US: u64 = 600_000_000;
/// Stalls a snapshot keeps, and a rank's summary carries, whatever their age: a stall lasts
/// [`STALL_AFTER_S`] or more, so one communicator's back-to-back stalls of [`STALL_KEEP_US`] (200) fit.
pub const MAX_STALLS: usize = 256;
/// A call that completed after this long was a stall: the job view's default for naming ranks not arrived
/// (`COLLSCOPE_NOT_ARRIVED_S`), so what was named while it hung is what is remembered once it recovered.
pub const STALL_AFTER_S: f64 = 3.0;

/// Where one rank serves its telemetry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankEndpoint {
    pub rank: u32,
    pub host: String,
    /// `http://HOST:PORT`, the base of its endpoints.
    pub url: String,
    /// Its process, so a job view on the same host can tell a stopped rank from a dead one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When that process started (field 22 of `/proc/PID/stat`, clock ticks after boot): a pid another process
    /// took since the rank's exited has another start, so it is not taken for the rank's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
}

/// What the host says of a rank's process (`/proc/PID/stat`), for a rank whose telemetry does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcState {
    /// It runs or sleeps: alive, but its telemetry did not answer.
    Alive,
    /// Stopped (`T`: SIGSTOP, SIGTSTP) or held by a debugger (`t`).
    Stopped,
    /// A zombie (`Z`, `X`) or no such process: it exited.
    Dead,
}

impl ProcState {
    /// The state letter of `/proc/PID/stat` (the field after the parenthesised name); `None` (no such
    /// process) is dead.
    pub fn of_letter(letter: Option<char>) -> ProcState {
        match letter {
            Some('T' | 't') => ProcState::Stopped,
            Some('Z' | 'X' | 'x') | None => ProcState::Dead,
            Some(_) => ProcState::Alive,
        }
    }
}

/// The fields of a `/proc/PID/stat` line a job view reads: the state letter (field 3, after the parenthesised
/// name, which may itself hold parentheses, so the last `)` ends it) and the start time (field 22, clock ticks
/// after boot).
pub fn proc_stat(text: &str) -> (Option<char>, Option<u64>) {
    let mut fields = text.rfind(')').map(|i| &text[i + 1..]).into_iter().flat_map(str::split_whitespace);
    let letter = fields.next().and_then(|f| f.chars().next());
    // Fields 4 to 21 lie between.
    let started = fields.nth(18).and_then(|f| f.parse().ok());
    (letter, started)
}

/// A rank's process as its host showed it: the state and the line read (the evidence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSeen {
    pub state: ProcState,
    /// The file read (`/proc/PID/stat`) and what it held (or why nothing).
    pub file: String,
    pub text: String,
}

/// A call that completed after [`STALL_AFTER_S`] or more: a hang that recovered, kept after the call left the
/// history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub comm: Option<String>,
    pub rank: u32,
    pub seq: u64,
    pub coll: Collective,
    pub bytes: u64,
    /// When it completed (microseconds since the UNIX epoch).
    pub completed_us: Option<u64>,
    /// How long it took.
    pub secs: f64,
}

impl Stall {
    /// `op` as a stall, if it completed after [`STALL_AFTER_S`] or more (from its start, or its enqueueing).
    pub fn of(op: &OpRecord) -> Option<Stall> {
        if op.state != OpState::Completed {
            return None;
        }
        let began = op.started_us.or(op.enqueued_us);
        let secs = match (began, op.completed_us) {
            (Some(b), Some(c)) => c.saturating_sub(b) as f64 / 1e6,
            _ => op.duration_us? / 1e6,
        };
        (secs >= STALL_AFTER_S).then(|| Stall {
            comm: op.comm.as_deref().map(str::to_string),
            rank: op.rank,
            seq: op.seq,
            coll: op.coll,
            bytes: op.bytes,
            completed_us: op.completed_us,
            secs,
        })
    }

    /// The same call of the same rank.
    pub fn same_call(&self, other: &Stall) -> bool {
        (self.rank, self.seq, &self.comm) == (other.rank, other.seq, &other.comm)
    }
}

/// What a rank is doing, as the job view sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankState {
    /// In a call.
    Running,
    /// Between calls (or not started one yet).
    Idle,
    /// Its last call failed.
    Failed,
    /// Its telemetry did not answer (the process is gone, stopped or unreachable).
    Unreachable,
}

/// The call a rank has begun and not finished. A rank's own summary knows all of it; a job view read from
/// Prometheus' gauges knows only its age (`None`: the source does not say, never a made-up value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    pub seq: Option<u64>,
    pub coll: Option<Collective>,
    pub bytes: Option<u64>,
    /// Seconds since the rank began it.
    pub age_s: f64,
}

impl InFlight {
    /// `COLL #SEQ`, with `?` for what is not known.
    pub fn call(&self) -> String {
        let coll = self.coll.map_or_else(|| "?".to_string(), |c| c.to_string());
        format!("{coll} #{}", self.seq.map_or_else(|| "?".to_string(), |s| s.to_string()))
    }
}

/// One rank's progress in one communicator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommProgress {
    pub comm: Option<String>,
    /// The communicator's given name ([`crate::Communicator::name`]), when the rank's snapshot has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub last_completed: Option<u64>,
    /// When the latest call completed (microseconds since the UNIX epoch): what a "no progress" alert reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed_us: Option<u64>,
    pub in_flight: Option<InFlight>,
    /// (seq, started_us) of the latest calls, oldest first, at most [`MAX_RECENT_STARTS`]: which rank starts
    /// calls late.
    pub recent_starts: Vec<(u64, u64)>,
    /// What each of the latest calls was, oldest first: ranks that called different things at one sequence
    /// number (PyTorch Flight Recorder's mismatch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_calls: Vec<CallSig>,
}

/// What a rank called at one sequence number: the fields every rank of a collective must agree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSig {
    pub seq: u64,
    pub coll: Collective,
    pub count: u64,
    pub datatype: DataType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<RedOp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<i32>,
}

/// One rank's summary: what `/api/v1/summary` serves and `/api/v1/job` merges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: u32,
    pub host: Option<String>,
    pub url: Option<String>,
    pub state: RankState,
    pub comms: Vec<CommProgress>,
    /// Median bus bandwidth of the calls kept.
    pub busbw_gbps: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// Why the rank could not be summarised (unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The rank's own part of the job's edge map, so a job view draws every rank's edges.
    #[serde(default)]
    pub edges: RankEdges,
    /// Its process id, when known (its communicator's, or its endpoint's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its process as the job view's host saw it: only for an unreachable rank on the same host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSeen>,
    /// Its calls that stalled and recovered, oldest first: those of the last [`STALL_KEEP_US`] at least, at most
    /// [`MAX_STALLS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<Stall>,
}

/// What one rank knows of its edges: the connections it set up, its place in each channel's tree and what each
/// of its channel ends moved so far (totals), each at most [`MAX_RANK_EDGES`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankEdges {
    pub connections: Vec<Connection>,
    pub trees: Vec<Tree>,
    pub traffic: Vec<ChannelTraffic>,
}

impl RankEdges {
    /// `rank`'s edges in `snap`: connections it is an end of, its tree places, its channel ends.
    pub fn of(snap: &Snapshot, rank: u32) -> Self {
        RankEdges {
            connections: snap
                .connections
                .iter()
                .filter(|c| c.src == rank || c.dst == rank)
                .take(MAX_RANK_EDGES)
                .cloned()
                .collect(),
            trees: snap.trees.iter().filter(|t| t.rank == rank).take(MAX_RANK_EDGES).cloned().collect(),
            traffic: snap.traffic.iter().filter(|t| t.rank == rank).take(MAX_RANK_EDGES).cloned().collect(),
        }
    }
}

/// The whole job at one moment: every rank's summary and what the job-level rules conclude.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub ranks: Vec<RankSummary>,
    pub findings: Vec<Finding>,
    /// How long ranks waited in a call before the ranks not there were named (`COLLSCOPE_NOT_ARRIVED_S`;
    /// `None`: the default, [`STALL_AFTER_S`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_arrived_after_s: Option<f64>,
    /// Where the view was read when not from the ranks themselves: Prometheus, and how old its oldest latest
    /// scrape of the ranks' endpoints was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<JobVia>,
}

/// A job view read from a Prometheus server rather than from every rank's `/api/v1/summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobVia {
    /// The Prometheus server's URL.
    pub prometheus: String,
    /// Seconds since the oldest of the latest scrapes of the job's endpoints, by Prometheus' clock (`None`: it
    /// holds no scrape of them).
    pub scrape_age_s: Option<f64>,
}

impl RankSummary {
    /// A rank known only by its endpoint, whose telemetry did not answer.
    pub fn unreachable(endpoint: &RankEndpoint, error: String) -> Self {
        RankSummary {
            rank: endpoint.rank,
            host: Some(endpoint.host.clone()),
            url: Some(endpoint.url.clone()),
            state: RankState::Unreachable,
            comms: Vec::new(),
            busbw_gbps: None,
            p50_us: None,
            p99_us: None,
            error: Some(error),
            edges: RankEdges::default(),
            pid: endpoint.pid,
            process: None,
            stalls: Vec::new(),
        }
    }

    /// The summary of every rank whose calls `snap` holds (one for a rank process, several for ranks as
    /// threads), at `now_us` (microseconds since the UNIX epoch).
    pub fn of(snap: &Snapshot, now_us: u64) -> Vec<RankSummary> {
        let mut ranks: Vec<u32> = snap.ops.iter().map(|o| o.rank).collect();
        ranks.extend(snap.communicators.iter().filter_map(|c| c.rank));
        ranks.sort_unstable();
        ranks.dedup();
        ranks.truncate(MAX_JOB_RANKS);
        ranks.into_iter().map(|r| Self::of_rank(snap, r, now_us)).collect()
    }

    /// The summary of `rank`'s calls in `snap`, at `now_us`.
    pub fn of_rank(snap: &Snapshot, rank: u32, now_us: u64) -> RankSummary {
        let ops: Vec<_> = snap.ops.iter().filter(|o| o.rank == rank).collect();
        let mut by_comm: BTreeMap<Option<&str>, CommProgress> = BTreeMap::new();
        for o in &ops {
            let p = by_comm.entry(o.comm.as_deref()).or_insert_with(|| CommProgress {
                comm: o.comm.as_deref().map(str::to_string),
                name: o.comm.as_deref().and_then(|c| comm_name(snap, rank, c)),
                last_completed: None,
                last_completed_us: None,
                in_flight: None,
                recent_starts: Vec::new(),
                recent_calls: Vec::new(),
            });
            if o.state == OpState::Completed {
                p.last_completed = p.last_completed.max(Some(o.seq));
                p.last_completed_us = p.last_completed_us.max(o.completed_us);
            }
            let began = o.started_us.or(o.enqueued_us);
            if o.state.in_flight() && p.in_flight.as_ref().is_none_or(|f| f.seq.is_none_or(|s| o.seq < s)) {
                let age_s = began.map_or(0.0, |t| now_us.saturating_sub(t) as f64 / 1e6);
                p.in_flight = Some(InFlight { seq: Some(o.seq), coll: Some(o.coll), bytes: Some(o.bytes), age_s });
            }
            if let Some(t) = began {
                p.recent_starts.push((o.seq, t));
            }
            let sig =
                CallSig { seq: o.seq, coll: o.coll, count: o.count, datatype: o.datatype, op: o.op, root: o.root };
            p.recent_calls.push(sig);
        }
        let mut comms: Vec<CommProgress> = by_comm.into_values().take(MAX_COMMS).collect();
        for c in &mut comms {
            c.recent_starts.sort_unstable();
            let cut = c.recent_starts.len().saturating_sub(MAX_RECENT_STARTS);
            c.recent_starts.drain(..cut);
            c.recent_calls.sort_unstable_by_key(|c| c.seq);
            let cut = c.recent_calls.len().saturating_sub(MAX_RECENT);
            c.recent_calls.drain(..cut);
        }
        let mut durations: Vec<f64> = ops.iter().filter_map(|o| o.duration_us).collect();
        durations.sort_by(f64::total_cmp);
        let mut busbw: Vec<f64> = ops.iter().filter_map(|o| o.busbw_gbps).collect();
        busbw.sort_by(f64::total_cmp);
        let state = match ops.last().map(|o| o.state) {
            _ if comms.iter().any(|c| c.in_flight.is_some()) => RankState::Running,
            Some(OpState::Failed) => RankState::Failed,
            _ => RankState::Idle,
        };
        let endpoint = snap.endpoints.iter().find(|e| e.rank == rank);
        RankSummary {
            rank,
            host: endpoint
                .map(|e| e.host.clone())
                .or_else(|| snap.communicators.iter().find(|c| c.rank == Some(rank)).and_then(|c| c.host.clone())),
            url: endpoint.map(|e| e.url.clone()),
            state,
            comms,
            busbw_gbps: quantile(&busbw, 0.5),
            p50_us: quantile(&durations, 0.5),
            p99_us: quantile(&durations, 0.99),
            error: None,
            edges: RankEdges::of(snap, rank),
            pid: snap
                .communicators
                .iter()
                .find(|c| c.rank == Some(rank))
                .and_then(|c| c.pid)
                .or_else(|| endpoint.and_then(|e| e.pid)),
            process: None,
            stalls: snap.stalls.iter().filter(|s| s.rank == rank).cloned().collect(),
        }
    }
}

/// The `q` quantile of sorted values (nearest rank).
/// The given name of `rank`'s communicator that its calls call `comm`: the one whose handle or id is `comm` (a
/// live source names its calls by the communicator's name, else by its id in hex).
fn comm_name(snap: &Snapshot, rank: u32, comm: &str) -> Option<String> {
    snap.communicators
        .iter()
        .filter(|c| c.rank == Some(rank))
        .find(|c| {
            c.name.as_deref() == Some(comm) || c.comm.as_deref() == Some(comm) || c.comm_id.as_deref() == Some(comm)
        })
        .and_then(|c| c.name.clone())
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get(((last as f64) * q).round() as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, Transport};

    #[test]
    fn a_ranks_edges_are_its_own_ends_and_bounded() {
        let mut s = Snapshot::new(crate::Source::Runtime);
        let conn = |ch, src, dst| Connection::new(ch, src, dst, Direction::Both, Transport::Shm);
        s.connections = vec![conn(0, 0, 1), conn(0, 1, 2), conn(0, 2, 3)];
        s.trees =
            vec![Tree { channel: 0, rank: 1, up: 0, down: vec![2] }, Tree { channel: 0, rank: 2, up: 1, down: vec![] }];
        let end = |rank, peer| ChannelTraffic {
            rank,
            channel: 0,
            peer,
            direction: Direction::Send,
            transport: None,
            bytes: 1,
            in_place_bytes: None,
            seconds: 0.0,
        };
        s.traffic = vec![end(1, 2), end(2, 3)];
        let e = RankEdges::of(&s, 1);
        assert_eq!(
            (e.connections, e.trees, e.traffic),
            (vec![conn(0, 0, 1), conn(0, 1, 2)], vec![s.trees[0].clone()], vec![end(1, 2)])
        );
        s.connections = (0..2 * MAX_RANK_EDGES as u32).map(|ch| conn(ch, 1, 2)).collect();
        assert_eq!(RankEdges::of(&s, 1).connections.len(), MAX_RANK_EDGES);
        // An older summary, without edges, still reads.
        let old = serde_json::json!({"rank": 1, "host": null, "url": null, "state": "idle", "comms": [],
            "busbw_gbps": null, "p50_us": null, "p99_us": null});
        assert_eq!(serde_json::from_value::<RankSummary>(old).unwrap().edges, RankEdges::default());
    }
    use crate::names::DataType;
    use crate::{Event, Source};

    #[test]
    fn a_rank_is_summarised_by_communicator_with_its_oldest_call_in_flight() {
        let mut s = Snapshot::new(Source::Runtime);
        s.endpoints.push(RankEndpoint {
            rank: 1,
            host: "h1".into(),
            url: "http://127.0.0.1:1".into(),
            pid: Some(7),
            started: None,
        });
        let calls = MAX_RECENT_STARTS as u64 + 40;
        for seq in 1..=calls {
            let mut o = OpRecord::started(1, seq, Collective::AllReduce, DataType::F32, 256, seq * 1000);
            if seq < 39 {
                o.state = OpState::Completed;
                o.completed_us = Some(seq * 1000 + 500);
                o.duration_us = Some(seq as f64);
                o.busbw_gbps = Some(2.0);
            }
            s.ops.push_back(o);
        }
        let sums = RankSummary::of(&s, 41_000);
        assert_eq!(sums.len(), 1);
        let r = &sums[0];
        assert_eq!((r.rank, r.state, r.host.as_deref()), (1, RankState::Running, Some("h1")));
        let c = &r.comms[0];
        assert_eq!((c.last_completed, c.last_completed_us), (Some(38), Some(38_500)));
        let f = c.in_flight.as_ref().unwrap();
        assert_eq!((f.seq, f.bytes, f.age_s), (Some(39), Some(1024), 0.002));
        assert_eq!(f.call(), "AllReduce #39");
        assert_eq!(InFlight { seq: None, coll: None, bytes: None, age_s: 1.0 }.call(), "? #?");
        assert_eq!(c.recent_starts.len(), MAX_RECENT_STARTS);
        assert_eq!(c.recent_starts.last(), Some(&(calls, calls * 1000)));
        assert_eq!(c.recent_calls.len(), MAX_RECENT);
        let last = c.recent_calls.last().unwrap();
        assert_eq!(
            (last.seq, last.coll, last.count, last.datatype),
            (calls, Collective::AllReduce, 256, DataType::F32)
        );
        assert_eq!((r.p50_us, r.p99_us, r.busbw_gbps), (Some(20.0), Some(38.0), Some(2.0)));
        assert_eq!(r.edges, RankEdges::default(), "no connections, trees or traffic yet");
        let json = serde_json::to_value(&sums[0]).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(serde_json::from_value::<RankSummary>(json).unwrap(), sums[0]);
    }

    #[test]
    fn a_call_that_took_3_s_or_more_is_kept_as_a_stall_once_after_it_left_the_calls() {
        let mut s = Snapshot::new(Source::Runtime);
        let call = |seq: u64, took_us: u64| {
            let mut o = OpRecord::started(2, seq, Collective::AllReduce, DataType::F32, 256, 1_000_000);
            o.state = OpState::Completed;
            o.completed_us = Some(1_000_000 + took_us);
            o
        };
        let bounds = crate::Bounds::histories(1);
        assert_eq!(s.apply_within(&Event::OpCompleted(call(1, 2_999_999)), &bounds).stall, None);
        let out = s.apply_within(&Event::OpCompleted(call(2, 7_250_000)), &bounds);
        let stall = out.stall.expect("a 7.25 s call is a stall");
        assert_eq!(
            (stall.rank, stall.seq, stall.coll, stall.bytes, stall.secs),
            (2, 2, Collective::AllReduce, 1024, 7.25)
        );
        // Folded again (a re-read), it is not a second stall.
        assert_eq!(s.apply_within(&Event::OpCompleted(call(2, 7_250_000)), &bounds).stall, None);
        s.apply_within(&Event::OpCompleted(call(3, 10)), &bounds);
        assert!(s.ops.iter().all(|o| o.seq == 3), "the stalled call left the history");
        assert_eq!(RankSummary::of(&s, 9_000_000)[0].stalls, vec![stall]);
        // A call in flight, or one that failed after a long wait, is no recovered stall.
        let mut failed = call(4, 9_000_000);
        failed.state = OpState::Failed;
        assert_eq!(Stall::of(&failed), None);
    }

    /// A stall of rank 0's call `seq` that ended at `ended_s` (seconds on the calls' clock) after 4 s.
    fn stalled(seq: u64, ended_s: u64) -> Event {
        let mut o = OpRecord::started(0, seq, Collective::AllReduce, DataType::F32, 256, (ended_s - 4) * 1_000_000);
        o.state = OpState::Completed;
        o.completed_us = Some(ended_s * 1_000_000);
        Event::OpCompleted(o)
    }

    #[test]
    fn a_stall_is_kept_ten_minutes_after_it_ended_then_let_go_by_age_and_the_list_stays_bounded() {
        let mut s = Snapshot::new(Source::Runtime);
        let bounds = crate::Bounds::histories(1);
        s.apply_within(&stalled(1, 1_000), &bounds);
        // 64 more stalls (the old bound, by count) over the next 9 min 59 s: the first is still there.
        for seq in 2..=65 {
            s.apply_within(&stalled(seq, 1_000 + (seq - 1) * 9), &bounds);
        }
        assert_eq!(s.stalls.first().map(|x| x.seq), Some(1));
        s.apply_within(&stalled(66, 1_000 + 599), &bounds);
        assert_eq!(s.stalls.len(), 66, "every stall of the last 10 minutes is kept");
        // 10 minutes after the first ended, the next stall lets it go, and those as old.
        s.apply_within(&stalled(67, 1_000 + 600), &bounds);
        assert_eq!(s.stalls.first().map(|x| x.seq), Some(2));
        // A flood of stalls within a minute: bounded, the oldest let go first.
        for seq in 100..100 + 2 * MAX_STALLS as u64 {
            s.apply_within(&stalled(seq, 1_700), &bounds);
        }
        assert!(s.stalls.len() <= MAX_STALLS && s.stalls.iter().all(|x| x.seq >= 100), "{}", s.stalls.len());
        assert_eq!(s.stalls.last().map(|x| x.seq), Some(99 + 2 * MAX_STALLS as u64));
    }

    #[test]
    fn a_stat_line_gives_the_state_and_the_start_whatever_the_name_holds() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 123 456";
        assert_eq!(proc_stat(line), (Some('S'), Some(987654)));
        assert_eq!(proc_stat("4242 (x) T 1"), (Some('T'), None), "cut short: no start");
        assert_eq!(proc_stat("garbage"), (None, None));
    }

    #[test]
    fn a_process_state_letter_says_stopped_dead_or_alive() {
        assert_eq!(ProcState::of_letter(Some('T')), ProcState::Stopped);
        assert_eq!(ProcState::of_letter(Some('t')), ProcState::Stopped);
        assert_eq!(ProcState::of_letter(Some('Z')), ProcState::Dead);
        assert_eq!(ProcState::of_letter(None), ProcState::Dead);
        for alive in ['R', 'S', 'D', 'I'] {
            assert_eq!(ProcState::of_letter(Some(alive)), ProcState::Alive);
        }
    }
}
