//! A rank's record that survives the job (`COLLSCOPE_DUMP_DIR`, one file per rank): its recent and in-flight
//! calls, stalls, findings and communicators as its snapshot held them when a timeout, a peer failure, SIGTERM
//! or a request made it write. `collscope job analyze DIR` and `collscope tui DIR` read every rank's file back
//! into summaries ([`RankDump::summary`]) and run the job rules over them, as PyTorch's `fr_trace` aligns its
//! Flight Recorder dumps. The format is collscope's own (versioned by [`DUMP_VERSION`]), not Flight Recorder's.

use super::comm::Communicator;
use super::diag::Finding;
use super::job::{RankEndpoint, RankSummary, Stall};
use super::ops::{OpRecord, OpState};
use super::{Snapshot, Source};
use serde::{Deserialize, Serialize};

/// The version of [`RankDump`]'s format (its `version` field); a reader refuses another.
pub const DUMP_VERSION: u32 = 1;
/// The most bytes one rank's dump may take, written or read: its calls are the snapshot's bounded history
/// (thousands of records of under 1 KiB), so 16 MiB leaves room and bounds what a reader takes in.
pub const MAX_DUMP_BYTES: u64 = 16 << 20;
/// The most dump files a folder is read for: a job's ranks ([`crate::job::MAX_JOB_RANKS`]).
pub const MAX_DUMP_FILES: usize = crate::job::MAX_JOB_RANKS;

/// Why a rank wrote its dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DumpReason {
    /// One of its calls timed out (`COLLSCOPE_TIMEOUT_S`).
    Timeout,
    /// A peer exited or went silent (`COLLSCOPE_PEER_TIMEOUT`) and the communicator was aborted.
    PeerFailure,
    /// The process was sent SIGTERM.
    Sigterm,
    /// Someone asked (`POST /api/v1/dump`, the TUI's key).
    Request,
}

impl DumpReason {
    /// The reason a finding the runtime raises is (the codes of `collscope-runtime`'s `RuntimeError::finding`
    /// and its liveness watch), if it is one that dumps.
    pub fn of_finding(f: &Finding) -> Option<DumpReason> {
        match f.code.as_str() {
            "call_timeout" => Some(DumpReason::Timeout),
            "peer_exited" | "peer_unresponsive" => Some(DumpReason::PeerFailure),
            _ => None,
        }
    }
}

impl std::fmt::Display for DumpReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DumpReason::Timeout => "a call timed out",
            DumpReason::PeerFailure => "a peer failed",
            DumpReason::Sigterm => "SIGTERM",
            DumpReason::Request => "on request",
        })
    }
}

/// One rank's dump: the parts of its process's snapshot that say what it last did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankDump {
    /// [`DUMP_VERSION`].
    pub version: u32,
    pub rank: u32,
    /// The job's size, from its communicators (a rank whose file is missing is one of them).
    pub nranks: Option<u32>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub reason: DumpReason,
    /// When it was written (microseconds since the UNIX epoch): the calls' ages are taken at this moment.
    pub written_us: u64,
    /// This rank's communicators (names, sizes, states).
    pub communicators: Vec<Communicator>,
    /// Its recent calls, completed, failed and in flight, oldest first (the snapshot's bounded history).
    pub ops: Vec<OpRecord>,
    pub stalls: Vec<Stall>,
    /// What its process had found (a peer's failure is about the peer).
    pub findings: Vec<Finding>,
    /// Where every rank served its telemetry, as this one learned it.
    pub endpoints: Vec<RankEndpoint>,
}

impl RankDump {
    /// Each rank's dump from `snap` (a process may run several ranks), written at `now_us` for `reason`.
    pub fn of(snap: &Snapshot, reason: DumpReason, now_us: u64) -> Vec<RankDump> {
        let mut ranks: Vec<u32> = snap.ops.iter().map(|o| o.rank).collect();
        ranks.extend(snap.communicators.iter().filter_map(|c| c.rank));
        ranks.sort_unstable();
        ranks.dedup();
        ranks.truncate(crate::job::MAX_JOB_RANKS);
        ranks
            .into_iter()
            .map(|rank| {
                let communicators: Vec<Communicator> =
                    snap.communicators.iter().filter(|c| c.rank == Some(rank)).cloned().collect();
                RankDump {
                    version: DUMP_VERSION,
                    rank,
                    nranks: communicators.iter().filter_map(|c| c.nranks).max().or(snap.nranks),
                    host: communicators.iter().find_map(|c| c.host.clone()),
                    pid: communicators.iter().find_map(|c| c.pid),
                    reason,
                    written_us: now_us,
                    communicators,
                    ops: snap.ops.iter().filter(|o| o.rank == rank).cloned().collect(),
                    stalls: snap.stalls.iter().filter(|s| s.rank == rank).cloned().collect(),
                    findings: snap.findings.clone(),
                    endpoints: snap.endpoints.clone(),
                }
            })
            .collect()
    }

    /// The file a rank's dump is kept in: `rank-00003.json`.
    pub fn file_name(rank: u32) -> String {
        format!("rank-{rank:05}.json")
    }

    /// The rank as the live job view summarises it, at the moment it wrote the dump. A call that failed is shown
    /// as in flight until then: it is the call the rank was in when it gave up (a timeout, an aborted
    /// communicator), which is what aligning the ranks needs.
    pub fn summary(&self) -> RankSummary {
        let mut snap = self.snapshot();
        // A rank known by its host and pid even where it had no communicator or call yet.
        snap.communicators.push(Communicator {
            rank: Some(self.rank),
            host: self.host.clone(),
            pid: self.pid,
            ..Communicator::default()
        });
        for o in snap.ops.iter_mut().filter(|o| o.state == OpState::Failed) {
            o.state = OpState::Started;
            o.completed_us = None;
        }
        RankSummary::of_rank(&snap, self.rank, self.written_us)
    }

    /// The rank's snapshot as far as the dump holds it (its calls, communicators, stalls, findings, endpoints).
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::new(Source::Runtime);
        snap.nranks = self.nranks;
        snap.communicators = self.communicators.clone();
        snap.endpoints = self.endpoints.clone();
        snap.stalls = self.stalls.clone();
        snap.findings = self.findings.clone();
        snap.ops = self.ops.iter().cloned().collect();
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Collective, DataType, Event, RankState};

    fn snap_of_rank(rank: u32) -> Snapshot {
        let mut s = Snapshot::new(Source::Runtime);
        s.communicators.push(Communicator {
            rank: Some(rank),
            nranks: Some(4),
            host: Some("h".into()),
            pid: Some(42),
            name: Some("world".into()),
            ..Communicator::default()
        });
        for seq in 1..=3u64 {
            let mut o = OpRecord::started(rank, seq, Collective::AllReduce, DataType::F32, 256, seq * 1_000_000);
            o.comm = Some("world".into());
            if seq < 3 {
                o.set_end(seq * 1_000_000 + 10, 1e-5, Some(4));
                o.state = OpState::Completed;
            } else {
                o.state = OpState::Failed;
                o.completed_us = Some(9_000_000);
            }
            s.apply(&Event::OpCompleted(o));
        }
        s
    }

    #[test]
    fn a_dump_reads_back_as_written() {
        let dumps = RankDump::of(&snap_of_rank(1), DumpReason::PeerFailure, 10_000_000);
        assert_eq!(dumps.len(), 1);
        let d = &dumps[0];
        assert_eq!((d.rank, d.nranks, d.host.as_deref(), d.pid, d.ops.len()), (1, Some(4), Some("h"), Some(42), 3));
        let json = serde_json::to_value(d).unwrap();
        assert_eq!((json["version"].as_u64(), json["reason"].as_str()), (Some(1), Some("peer_failure")));
        assert_eq!(&serde_json::from_value::<RankDump>(json).unwrap(), d);
        assert_eq!(RankDump::file_name(3), "rank-00003.json");
    }

    #[test]
    fn a_dumps_summary_holds_the_failed_call_as_the_one_the_rank_was_in() {
        let d = RankDump::of(&snap_of_rank(2), DumpReason::Timeout, 10_000_000).remove(0);
        let s = d.summary();
        assert_eq!((s.rank, s.state), (2, RankState::Running));
        let c = &s.comms[0];
        assert_eq!(c.last_completed, Some(2));
        let f = c.in_flight.as_ref().expect("the failed call is the one it was in");
        assert_eq!((f.seq, f.coll, f.age_s), (Some(3), Some(Collective::AllReduce), 7.0));
    }
}
