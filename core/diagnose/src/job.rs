//! The job-level rules (the table is `JOB_RULES` in the crate root): what PyTorch's Flight Recorder analysis
//! concludes after a hang, live, from every rank's summary in a [`JobView`]: which ranks have not arrived at
//! the call the others wait in (and whether each is stopped, dead or alive and slow), which rank arrives last at
//! most calls, which rank does not answer, and which calls stalled and recovered.

use collscope_model::job::STALL_AFTER_S;
use collscope_model::{
    CallSig, Collective, CommProgress, Finding, FindingComm, JobView, LineRef, ProcState, RankState, RankSummary,
    Severity, Stall,
};
use std::collections::{BTreeMap, BTreeSet};

/// How long ranks wait in one call before the ranks that have not reached it are named, unless the job view
/// says otherwise ([`JobView::not_arrived_after_s`], `COLLSCOPE_NOT_ARRIVED_S`): a stall's threshold.
pub const NOT_ARRIVED_AFTER_S: f64 = STALL_AFTER_S;
/// Calls started by every rank needed before one rank is called a straggler: its lag must hold over time.
pub const STRAGGLER_MIN_CALLS: usize = 16;
/// The share of those calls a straggler starts late.
pub const STRAGGLER_SHARE: f64 = 0.75;
/// How far behind the median of the other ranks a straggler starts a call, at least, in microseconds (less is
/// the jitter of a healthy job's starts)...
pub const STRAGGLER_MIN_LAG_US: f64 = 50.0;
/// ... and at least this share of the time since the call before started (a rank slowed by about 1.1 or more at
/// every call: healthy ranks on a loaded host each are that late at a third of the calls or fewer).
pub const STRAGGLER_GAP_SHARE: f64 = 0.1;

fn comms(job: &JobView) -> BTreeSet<Option<&str>> {
    job.ranks.iter().flat_map(|r| r.comms.iter().map(|c| c.comm.as_deref())).collect()
}

fn progress<'a>(r: &'a RankSummary, comm: Option<&str>) -> Option<&'a CommProgress> {
    r.comms.iter().find(|c| c.comm.as_deref() == comm)
}

fn list(ranks: &[u32]) -> String {
    ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The communicator `comm` as a finding names it: its id and the name any rank's summary gives it.
fn finding_comm(job: &JobView, comm: Option<&str>) -> Option<FindingComm> {
    let id = comm?;
    let name = job.ranks.iter().find_map(|r| progress(r, Some(id))?.name.clone());
    Some(FindingComm { id: id.to_string(), name })
}

fn comm_name(comm: Option<&str>) -> String {
    comm.map(|c| format!(" of communicator {c}")).unwrap_or_default()
}

/// Whether a rank is stopped, dead, alive but not answering, or answering: what its process's state on this
/// host and its telemetry (a keep-alive apart from its calls) say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Stopped,
    Dead,
    /// Its process runs but its telemetry did not answer.
    Mute,
    /// Its telemetry did not answer and its process cannot be seen from here (another host, no pid).
    Unknown,
    /// Its telemetry answers: the process runs, its calls are what lag.
    Answers,
}

fn liveness(r: &RankSummary) -> Liveness {
    if r.state != RankState::Unreachable {
        return Liveness::Answers;
    }
    match r.process.as_ref().map(|p| p.state) {
        Some(ProcState::Stopped) => Liveness::Stopped,
        Some(ProcState::Dead) => Liveness::Dead,
        Some(ProcState::Alive) => Liveness::Mute,
        None => Liveness::Unknown,
    }
}

/// The process, as `pid N on HOST`.
fn process_name(r: &RankSummary) -> String {
    let pid = r.pid.map_or_else(|| "an unknown pid".to_string(), |p| format!("pid {p}"));
    format!("{pid} on {}", r.host.as_deref().unwrap_or("an unknown host"))
}

/// What a rank's liveness says, for a finding's detail, and the process state read as evidence.
fn liveness_said(r: &RankSummary) -> (String, Vec<LineRef>) {
    let evidence = r.process.iter().map(|p| LineRef { file: p.file.clone(), line: 1, text: p.text.clone() }).collect();
    let no_answer = r.error.as_deref().unwrap_or("no answer");
    let said = match liveness(r) {
        Liveness::Stopped => format!(
            "is stopped: its process ({}) is in state T (SIGSTOP, or a debugger holds it) and its telemetry does not \
             answer ({no_answer})",
            process_name(r)
        ),
        Liveness::Dead => format!("is dead: its process ({}) has exited ({no_answer})", process_name(r)),
        Liveness::Mute => format!(
            "runs (its process, {}, is neither stopped nor gone) but its telemetry does not answer ({no_answer}): \
             stuck in the kernel, or its telemetry thread is starved",
            process_name(r)
        ),
        Liveness::Unknown => {
            format!("does not answer ({no_answer}); whether it is stopped or dead cannot be read from this host")
        }
        Liveness::Answers => "is alive and slow: its telemetry answers, so the process runs, but its calls have not \
                              moved"
            .to_string(),
    };
    (said, evidence)
}

/// What to do about a rank that has not arrived, by what it is.
fn liveness_fix(r: &RankSummary) -> String {
    let rank = r.rank;
    match liveness(r) {
        Liveness::Stopped => format!(
            "Resume rank {rank} (kill -CONT {}, or detach the debugger); the others wait until COLLSCOPE_TIMEOUT_S",
            r.pid.map_or_else(|| "PID".to_string(), |p| p.to_string())
        ),
        Liveness::Dead => format!(
            "Read rank {rank}'s own output and exit status (killed by a signal, out of memory, a crash); the job cannot \
             finish without it: restart it from a checkpoint"
        ),
        Liveness::Mute | Liveness::Unknown => format!(
            "Check rank {rank}'s process on its host (ps -o stat, py-spy dump, gdb): stopped, gone, or stuck; and that \
             this host reaches its telemetry port"
        ),
        Liveness::Answers => format!(
            "Find what rank {rank} does instead of the call: a long step before it, a different call order on that \
             rank (py-spy dump / gdb on it); COLLSCOPE_TIMEOUT_S bounds how long the others wait"
        ),
    }
}

/// Ranks that have not reached the call other ranks have waited in for [`NOT_ARRIVED_AFTER_S`]: those that
/// answer with an older call done or in flight, and those whose telemetry does not answer.
pub fn not_arrived(job: &JobView) -> Vec<Finding> {
    let after_s = job.not_arrived_after_s.unwrap_or(NOT_ARRIVED_AFTER_S);
    let mut out = Vec::new();
    for comm in comms(job) {
        let waiting = job
            .ranks
            .iter()
            .filter_map(|r| Some((r.rank, progress(r, comm)?.in_flight.as_ref()?)))
            .filter(|(_, f)| f.age_s >= after_s);
        // Only a call whose sequence number is known can be matched across ranks.
        let Some(seq) = waiting.filter_map(|(_, f)| f.seq).max() else { continue };
        let waiters: Vec<(u32, f64)> = job
            .ranks
            .iter()
            .filter_map(|r| Some((r.rank, progress(r, comm)?.in_flight.as_ref().filter(|f| f.seq == Some(seq))?.age_s)))
            .collect();
        let Some(call) = job
            .ranks
            .iter()
            .find_map(|r| progress(r, comm)?.in_flight.as_ref().filter(|f| f.seq == Some(seq)).cloned())
        else {
            continue;
        };
        let longest = waiters.iter().map(|(_, a)| *a).fold(0.0, f64::max);
        let who: Vec<u32> = waiters.iter().map(|(r, _)| *r).collect();
        for r in &job.ranks {
            if who.contains(&r.rank) {
                continue;
            }
            let status = match (r.state, progress(r, comm)) {
                (RankState::Unreachable, _) => String::new(),
                (_, Some(p)) if p.last_completed.is_some_and(|d| d >= seq) => continue,
                (_, Some(CommProgress { in_flight: Some(f), .. })) => format!("is still in {}", f.call()),
                (_, Some(p)) => match p.last_completed {
                    Some(d) => format!("finished #{d} and has not begun #{seq}"),
                    None => format!("has not begun #{seq}"),
                },
                (_, None) => format!("has not begun #{seq}"),
            };
            let (alive, evidence) = liveness_said(r);
            let status = if status.is_empty() { alive } else { format!("{status}; it {alive}") };
            let what = match liveness(r) {
                Liveness::Stopped => " (stopped)",
                Liveness::Dead => " (dead)",
                Liveness::Answers => " (alive, slow)",
                Liveness::Mute | Liveness::Unknown => " (not answering)",
            };
            out.push(Finding {
                code: "rank_not_arrived".into(),
                severity: Severity::Error,
                rank: Some(r.rank),
                comm: finding_comm(job, comm),
                title: format!("rank {} has not arrived at {}{what}", r.rank, call.call()),
                detail: format!(
                    "ranks {} have waited up to {longest:.1} s in {} ({} bytes){}; rank {} {status}",
                    list(&who),
                    call.call(),
                    call.bytes.map_or_else(|| "?".to_string(), |b| b.to_string()),
                    comm_name(comm),
                    r.rank
                ),
                evidence,
                fix: liveness_fix(r),
            });
        }
    }
    out
}

/// What differs between two calls at one sequence number, as `field A vs B` (empty: they agree). The op and the
/// root are compared only where both ranks' records have them (a call still in flight may not carry them yet).
fn differences(a: &CallSig, b: &CallSig) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, x: Option<String>, y: Option<String>| {
        if let (Some(x), Some(y)) = (x, y) {
            if x != y {
                out.push(format!("{name} {x} vs {y}"));
            }
        }
    };
    field("collective", Some(a.coll.to_string()), Some(b.coll.to_string()));
    field("count", Some(a.count.to_string()), Some(b.count.to_string()));
    field("datatype", Some(a.datatype.to_string()), Some(b.datatype.to_string()));
    field("op", a.op.map(|o| o.to_string()), b.op.map(|o| o.to_string()));
    field("root", a.root.map(|r| r.to_string()), b.root.map(|r| r.to_string()));
    out
}

/// Ranks that called different things at the same sequence number of one communicator (PyTorch's "rank 7 ran
/// BROADCAST where rank 3 ran ALLREDUCE at SeqNum 80078"): the first such number per communicator, since every
/// later call follows from it. The call most ranks agree with is the reference (ties: the lowest rank's);
/// point-to-point calls differ by design.
pub fn mismatch(job: &JobView) -> Vec<Finding> {
    let mut out = Vec::new();
    for comm in comms(job) {
        let mut by_seq: BTreeMap<u64, Vec<(u32, &CallSig)>> = BTreeMap::new();
        for r in &job.ranks {
            for c in progress(r, comm).map_or(&[][..], |p| &p.recent_calls[..]) {
                if !matches!(c.coll, Collective::Send | Collective::Recv | Collective::SendRecv) {
                    by_seq.entry(c.seq).or_default().push((r.rank, c));
                }
            }
        }
        let agree = |a: &CallSig, b: &CallSig| differences(a, b).is_empty();
        let Some((seq, calls)) = by_seq.into_iter().find(|(_, calls)| calls.iter().any(|(_, c)| !agree(c, calls[0].1)))
        else {
            continue;
        };
        let reference = calls
            .iter()
            .enumerate()
            .max_by_key(|&(i, (_, c))| (calls.iter().filter(|(_, d)| agree(c, d)).count(), std::cmp::Reverse(i)))
            .map_or(calls[0].1, |(_, (_, c))| *c);
        let alike: Vec<u32> = calls.iter().filter(|(_, c)| agree(c, reference)).map(|(r, _)| *r).collect();
        for (rank, call) in calls.iter().filter(|(_, c)| !agree(c, reference)) {
            out.push(Finding {
                code: "collective_mismatch".into(),
                severity: Severity::Error,
                rank: Some(*rank),
                comm: finding_comm(job, comm),
                title: format!(
                    "rank {rank} called {} where rank {} called {} at #{seq}",
                    call.coll,
                    list(&alike),
                    reference.coll
                ),
                detail: format!(
                    "at sequence number {seq}{}, rank {rank} and rank {} differ: {}; a collective needs the same call \
                     on every rank, so they wait for each other until the timeout or read the wrong data",
                    comm_name(comm),
                    list(&alike),
                    differences(call, reference).join(", ")
                ),
                evidence: Vec::new(),
                fix: format!(
                    "Make every rank issue the same collectives in the same order with the same sizes: look for a \
                     branch that depends on the rank (or on data only rank {rank} sees) before sequence number {seq}"
                ),
            });
        }
    }
    out
}

/// The median of `values` (the mean of the middle two for an even count); `None` for none.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// A rank that arrives late at a communicator's calls persistently: over the recent calls every rank of it
/// started (at least [`STRAGGLER_MIN_CALLS`]), its lag at each (its start less the median of the other ranks'
/// starts) is at least [`STRAGGLER_MIN_LAG_US`] and [`STRAGGLER_GAP_SHARE`] of the time since the call before at
/// [`STRAGGLER_SHARE`] of them, and its median lag is at least [`STRAGGLER_MIN_LAG_US`]. One descheduled call, or
/// the jitter of a loaded host (each rank late at some calls), is no straggler. Starts are each rank's own clock:
/// ranks on different hosts compare through their clocks' offset, which the finding says.
pub fn straggler(job: &JobView) -> Vec<Finding> {
    let mut out = Vec::new();
    for comm in comms(job) {
        let ranks: Vec<&RankSummary> = job.ranks.iter().filter(|r| progress(r, comm).is_some()).collect();
        if ranks.len() < 2 {
            continue;
        }
        let starts_of = |r: &RankSummary| -> BTreeMap<u64, u64> {
            progress(r, comm).map(|p| p.recent_starts.iter().copied().collect()).unwrap_or_default()
        };
        let starts: Vec<BTreeMap<u64, u64>> = ranks.iter().map(|r| starts_of(r)).collect();
        // Each rank's start of the calls every rank started, oldest first.
        let common: Vec<Vec<f64>> = starts[0]
            .keys()
            .filter_map(|s| starts.iter().map(|m| m.get(s).map(|t| *t as f64)).collect::<Option<Vec<_>>>())
            .collect();
        if common.len() < STRAGGLER_MIN_CALLS + 1 {
            continue;
        }
        let middle: Vec<f64> = common.iter().filter_map(|at| median(&mut at.clone())).collect();
        // Each call but the first, with the time since the call before started (the median starts').
        let calls: Vec<(&Vec<f64>, f64)> = common.iter().skip(1).zip(middle.windows(2).map(|w| w[1] - w[0])).collect();
        let (Some(first), Some(last)) = (middle.first(), middle.last()) else { continue };
        let window_s = (last - first) / 1e6;
        let every_ms = (last - first) / 1e3 / calls.len() as f64;
        let hosts: BTreeSet<Option<&str>> = ranks.iter().map(|r| r.host.as_deref()).collect();
        for (k, r) in ranks.iter().enumerate() {
            let lags: Vec<(f64, f64)> = calls
                .iter()
                .filter_map(|(at, gap)| {
                    let mut others: Vec<f64> =
                        at.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, t)| *t).collect();
                    Some((at[k] - median(&mut others)?, *gap))
                })
                .collect();
            let late = lags.iter().filter(|(l, gap)| *l >= STRAGGLER_MIN_LAG_US.max(STRAGGLER_GAP_SHARE * gap)).count();
            let mut lag: Vec<f64> = lags.iter().map(|(l, _)| *l).collect();
            let mean = lag.iter().sum::<f64>() / lag.len() as f64;
            let Some(typical) = median(&mut lag) else { continue };
            if (late as f64) < STRAGGLER_SHARE * calls.len() as f64 || typical < STRAGGLER_MIN_LAG_US {
                continue;
            }
            let rank = r.rank;
            let clocks = if hosts.len() > 1 {
                " (starts compared by each host's clock: an offset between them shows as a lag)"
            } else {
                ""
            };
            out.push(Finding {
                code: "straggler".into(),
                severity: Severity::Warning,
                rank: Some(rank),
                comm: finding_comm(job, comm),
                title: format!("rank {rank} arrives late at most calls (a straggler)"),
                detail: format!(
                    "rank {rank} started {late} of the {} latest calls every rank made{} late (after the median of \
                     the other ranks, by {:.0} % or more of the time since the call before), on average {:.2} ms \
                     (median {:.2} ms) after, over {window_s:.1} s (a call every {every_ms:.2} ms){clocks}: the \
                     others wait that long in each",
                    calls.len(),
                    comm_name(comm),
                    STRAGGLER_GAP_SHARE * 100.0,
                    mean / 1e3,
                    typical / 1e3,
                ),
                evidence: Vec::new(),
                fix: format!(
                    "Look at what rank {rank} does between calls: more work or data than the others, its CPU binding \
                     (NCCL_IGNORE_CPU_AFFINITY, numactl), a slower device or a busier host"
                ),
            });
        }
    }
    out
}

/// A rank whose telemetry does not answer: its process is gone, stopped, or cut off from this one (which, when
/// its process's state can be read on this host).
pub fn unreachable(job: &JobView) -> Vec<Finding> {
    job.ranks
        .iter()
        .filter(|r| r.state == RankState::Unreachable)
        .map(|r| {
            let (said, evidence) = liveness_said(r);
            let title = match liveness(r) {
                Liveness::Stopped => format!("rank {} is stopped", r.rank),
                Liveness::Dead => format!("rank {} is dead", r.rank),
                _ => format!("rank {} does not answer", r.rank),
            };
            Finding {
                code: "rank_unreachable".into(),
                severity: Severity::Warning,
                rank: Some(r.rank),
                comm: None,
                title,
                // Without a URL the view was not asked live (a dump folder): its error says what is missing.
                detail: match (&r.url, &r.error) {
                    (Some(url), Some(e)) => format!("rank {}'s telemetry at {url} did not answer ({e})", r.rank),
                    (Some(url), None) => format!("rank {}'s telemetry at {url} did not answer", r.rank),
                    (None, Some(e)) => format!("rank {}: {e}", r.rank),
                    (None, None) => format!("rank {} was not heard from", r.rank),
                } + &format!("; rank {} {said}", r.rank),
                evidence,
                fix: liveness_fix(r),
            }
        })
        .collect()
}

/// Calls that stalled and recovered (each rank keeps its own, [`Stall`]): one finding per call, with the ranks
/// that waited, how long, and the ranks that did not wait (they arrived last: the cause). Newest first.
pub fn stalls(job: &JobView) -> Vec<Finding> {
    // A rank's summary carries only its own stalls.
    let mut by_call: BTreeMap<(Option<&str>, u64), Vec<&Stall>> = BTreeMap::new();
    for s in job.ranks.iter().flat_map(|r| &r.stalls) {
        by_call.entry((s.comm.as_deref(), s.seq)).or_default().push(s);
    }
    let mut calls: Vec<_> = by_call.into_iter().collect();
    calls.sort_by_key(|(_, w)| std::cmp::Reverse(w.iter().filter_map(|s| s.completed_us).max()));
    let mut out = Vec::new();
    for ((comm, seq), waited) in calls {
        let who: Vec<u32> = waited.iter().map(|s| s.rank).collect();
        let longest = waited.iter().map(|s| s.secs).fold(0.0, f64::max);
        let call = waited[0];
        // The ranks of the communicator that answer and did not wait arrived last.
        let late: Vec<u32> = job
            .ranks
            .iter()
            .filter(|r| !who.contains(&r.rank) && progress(r, comm).is_some())
            .map(|r| r.rank)
            .collect();
        let (rank, cause) = match late[..] {
            [] => (None, "every rank that answers waited in it: the one that arrived last is not known".to_string()),
            [one] => (Some(one), format!("rank {one} did not wait: it arrived last")),
            _ => (None, format!("ranks {} did not wait: they arrived last", list(&late))),
        };
        let ended = call.completed_us.map(|us| format!(", ended at {:.3} (UNIX seconds)", us as f64 / 1e6));
        out.push(Finding {
            code: "collective_stall".into(),
            severity: Severity::Warning,
            rank,
            comm: finding_comm(job, comm),
            title: format!("{} #{seq} stalled {longest:.1} s and recovered", call.coll),
            detail: format!(
                "ranks {} waited up to {longest:.1} s in {} #{seq} ({} bytes){}{}; {cause}",
                list(&who),
                call.coll,
                call.bytes,
                comm_name(comm),
                ended.unwrap_or_default()
            ),
            evidence: Vec::new(),
            fix: format!(
                "Find what held {} before #{seq} (a paused process, a long step, garbage collection, a checkpoint \
                 write); collscope_collective_stalls_total and collscope_collective_stall_seconds count stalls",
                if late.is_empty() { "the last rank".to_string() } else { format!("rank {}", list(&late)) }
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Collective, InFlight, ProcessSeen, RankEndpoint};

    fn rank(rank: u32, last: Option<u64>, in_flight: Option<(u64, f64)>, starts: Vec<(u64, u64)>) -> RankSummary {
        RankSummary {
            rank,
            host: Some("h".into()),
            url: None,
            state: if in_flight.is_some() { RankState::Running } else { RankState::Idle },
            comms: vec![CommProgress {
                comm: None,
                name: None,
                last_completed: last,
                last_completed_us: None,
                in_flight: in_flight.map(|(seq, age_s)| InFlight {
                    seq: Some(seq),
                    coll: Some(Collective::AllReduce),
                    bytes: Some(4096),
                    age_s,
                }),
                recent_starts: starts,
                recent_calls: Vec::new(),
            }],
            busbw_gbps: None,
            p50_us: None,
            p99_us: None,
            error: None,
            edges: Default::default(),
            pid: None,
            process: None,
            stalls: Vec::new(),
        }
    }

    fn sig(seq: u64, coll: Collective, count: u64) -> CallSig {
        let reduces = matches!(coll, Collective::AllReduce);
        CallSig {
            seq,
            coll,
            count,
            datatype: collscope_model::DataType::F32,
            op: reduces.then_some(collscope_model::RedOp::Sum),
            root: matches!(coll, Collective::Broadcast).then_some(0),
        }
    }

    #[test]
    fn the_first_call_ranks_disagree_on_is_a_mismatch_naming_both_sides_and_the_fields() {
        let mut job = JobView::default();
        for r in 0..4 {
            let mut summary = rank(r, Some(5), None, Vec::new());
            let calls = &mut summary.comms[0].recent_calls;
            calls.extend((1..=5).map(|seq| sig(seq, Collective::AllReduce, 256)));
            // Rank 2 broadcasts where the others reduce, and everything after differs too.
            calls.push(if r == 2 { sig(6, Collective::Broadcast, 2) } else { sig(6, Collective::AllReduce, 2) });
            calls.push(sig(7, Collective::AllGather, u64::from(r) + 1));
            // Point-to-point calls name different peers and sizes by design.
            calls.push(sig(8, if r % 2 == 0 { Collective::Send } else { Collective::Recv }, u64::from(r)));
            job.ranks.push(summary);
        }
        let found = mismatch(&job);
        assert_eq!(found.len(), 1, "{found:#?}");
        let f = &found[0];
        assert_eq!((f.code.as_str(), f.rank), ("collective_mismatch", Some(2)));
        assert_eq!(f.title, "rank 2 called Broadcast where rank 0,1,3 called AllReduce at #6");
        assert!(f.detail.contains("differ: collective Broadcast vs AllReduce;"), "{}", f.detail);

        // A call still in flight carries no op yet: it agrees with the same call done.
        job.ranks[3].comms[0].recent_calls[4].op = None;
        assert_eq!(mismatch(&job).len(), 1);
        // Calls that agree raise nothing.
        for r in &mut job.ranks {
            r.comms[0].recent_calls.truncate(5);
        }
        assert!(mismatch(&job).is_empty());
    }

    #[test]
    fn between_two_ranks_the_lowest_ranks_call_is_the_reference() {
        let mut job = JobView::default();
        for (r, count) in [(0, 1024), (1, 2048)] {
            let mut summary = rank(r, None, Some((1, 4.0)), Vec::new());
            summary.comms[0].recent_calls.push(sig(1, Collective::AllReduce, count));
            job.ranks.push(summary);
        }
        let found = mismatch(&job);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rank, Some(1));
        assert!(found[0].detail.contains("count 2048 vs 1024"), "{}", found[0].detail);
    }

    #[test]
    fn ranks_behind_the_waiting_call_are_named_with_the_call_and_how_long() {
        let gone =
            RankEndpoint { rank: 3, host: "h".into(), url: "http://127.0.0.1:9".into(), pid: None, started: None };
        let job = JobView {
            ranks: vec![
                rank(0, Some(6), Some((7, 4.5)), vec![]),
                rank(1, Some(6), Some((7, 4.0)), vec![]),
                rank(2, Some(6), None, vec![]),
                RankSummary::unreachable(&gone, "timed out".into()),
            ],
            findings: vec![],
            ..Default::default()
        };
        let f = not_arrived(&job);
        assert_eq!(f.iter().map(|f| f.rank).collect::<Vec<_>>(), [Some(2), Some(3)]);
        assert_eq!(f[0].title, "rank 2 has not arrived at AllReduce #7 (alive, slow)");
        assert!(f[0].detail.contains("ranks 0,1 have waited up to 4.5 s") && f[0].detail.contains("finished #6"));
        assert!(f[0].detail.contains("its telemetry answers"), "{}", f[0].detail);
        assert!(f[1].detail.contains("does not answer (timed out)"), "{}", f[1].detail);
        assert!(f[1].title.ends_with("(not answering)"), "{}", f[1].title);
        assert_eq!(unreachable(&job)[0].rank, Some(3));
        // Waiting less than the threshold is a call in progress, not a hang.
        let mut young = job.clone();
        young.ranks[0].comms[0].in_flight.as_mut().unwrap().age_s = 1.0;
        young.ranks[1].comms[0].in_flight.as_mut().unwrap().age_s = 1.0;
        assert!(not_arrived(&young).is_empty());
        // ... unless the job view names ranks sooner.
        young.not_arrived_after_s = Some(0.5);
        assert_eq!(not_arrived(&young).len(), 2);
    }

    #[test]
    fn a_rank_that_does_not_answer_is_called_stopped_or_dead_by_its_process_state_with_the_line_read() {
        let gone = RankEndpoint {
            rank: 1,
            host: "h".into(),
            url: "http://127.0.0.1:9".into(),
            pid: Some(4242),
            started: None,
        };
        let mut job = JobView {
            ranks: vec![rank(0, Some(6), Some((7, 5.0)), vec![]), RankSummary::unreachable(&gone, "timed out".into())],
            ..Default::default()
        };
        let seen = |state, text: &str| Some(ProcessSeen { state, file: "/proc/4242/stat".into(), text: text.into() });
        job.ranks[1].process = seen(ProcState::Stopped, "4242 (collscope) T 1 ...");
        let f = &not_arrived(&job)[0];
        assert_eq!(f.title, "rank 1 has not arrived at AllReduce #7 (stopped)");
        assert!(f.detail.contains("rank 1 is stopped: its process (pid 4242 on h) is in state T"), "{}", f.detail);
        assert_eq!(f.evidence[0].file, "/proc/4242/stat");
        assert_eq!(f.evidence[0].text, "4242 (collscope) T 1 ...");
        assert!(f.fix.contains("kill -CONT 4242"), "{}", f.fix);
        assert_eq!(unreachable(&job)[0].title, "rank 1 is stopped");

        job.ranks[1].process = seen(ProcState::Dead, "no such process");
        let f = &not_arrived(&job)[0];
        assert_eq!(f.title, "rank 1 has not arrived at AllReduce #7 (dead)");
        assert!(f.detail.contains("rank 1 is dead: its process (pid 4242 on h) has exited"), "{}", f.detail);
        assert!(f.fix.contains("restart it from a checkpoint"), "{}", f.fix);
        assert_eq!(unreachable(&job)[0].title, "rank 1 is dead");

        job.ranks[1].process = seen(ProcState::Alive, "4242 (collscope) S 1 ...");
        assert!(not_arrived(&job)[0].detail.contains("runs (its process, pid 4242 on h, is neither"));
        job.ranks[1].process = None;
        assert!(not_arrived(&job)[0].detail.contains("cannot be read from this host"));
    }

    #[test]
    fn a_recovered_stall_is_one_finding_naming_the_ranks_that_waited_how_long_and_the_rank_that_did_not() {
        let stall = |rank, secs| Stall {
            comm: None,
            rank,
            seq: 7,
            coll: Collective::AllReduce,
            bytes: 4096,
            completed_us: Some(1_700_000_000_000_000),
            secs,
        };
        let mut job =
            JobView { ranks: (0..4).map(|r| rank(r, Some(20), None, vec![])).collect(), ..Default::default() };
        assert!(stalls(&job).is_empty());
        for (r, secs) in [(0, 7.2), (1, 7.1), (3, 6.9)] {
            job.ranks[r].stalls.push(stall(r as u32, secs));
        }
        let f = stalls(&job);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].code.as_str(), f[0].rank), ("collective_stall", Some(2)));
        assert_eq!(f[0].title, "AllReduce #7 stalled 7.2 s and recovered");
        assert!(
            f[0].detail.starts_with("ranks 0,1,3 waited up to 7.2 s in AllReduce #7 (4096 bytes)"),
            "{}",
            f[0].detail
        );
        assert!(f[0].detail.ends_with("rank 2 did not wait: it arrived last"), "{}", f[0].detail);
        // Every rank waited: none is blamed.
        job.ranks[2].stalls.push(stall(2, 0.5 + STALL_AFTER_S));
        let f = stalls(&job);
        assert_eq!(f[0].rank, None);
        assert!(f[0].detail.contains("is not known"), "{}", f[0].detail);
    }

    /// Four ranks' starts of calls 1..=n, a call every 10 ms; `late(rank, seq)` is how late (us) a rank starts one.
    fn paced(n: u64, late: impl Fn(u32, u64) -> u64) -> JobView {
        let ranks =
            (0..4).map(|r| rank(r, Some(n), None, (1..=n).map(|s| (s, s * 10_000 + late(r, s))).collect())).collect();
        JobView { ranks, ..Default::default() }
    }

    #[test]
    fn a_rank_late_at_most_calls_over_time_is_the_straggler_with_its_lag_calls_and_window() {
        // Rank 1 slowed by 2 at every call: 5 ms late in a 10 ms period, give or take.
        let job = paced(32, |r, s| if r == 1 { 5_000 + (s % 3) * 100 } else { (s + u64::from(r)) % 4 * 50 });
        let f = straggler(&job);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].code.as_str(), f[0].rank), ("straggler", Some(1)));
        assert_eq!(f[0].title, "rank 1 arrives late at most calls (a straggler)");
        assert!(f[0].detail.starts_with("rank 1 started 31 of the 31 latest calls every rank made late (after"));
        assert!(f[0].detail.contains("(median 5.00 ms)") && f[0].detail.contains("over 0.3 s"), "{}", f[0].detail);
        assert!(f[0].detail.contains("(a call every 10.00 ms)"), "{}", f[0].detail);
        assert!(!f[0].detail.contains("clock"), "one host: {}", f[0].detail);

        // Too few calls to say it holds over time.
        assert!(straggler(&paced(STRAGGLER_MIN_CALLS as u64, |r, _| if r == 1 { 5_000 } else { 0 })).is_empty());
    }

    #[test]
    fn a_descheduled_call_or_a_loaded_hosts_noise_is_no_straggler() {
        // One call of rank 2 is 50 ms late (descheduled); the rest are in step.
        let once = paced(32, |r, s| if (r, s) == (2, 7) { 50_000 } else { 0 });
        assert!(straggler(&once).is_empty(), "{:#?}", straggler(&once));
        // Every rank late by up to 4 ms at random-looking calls: whoever is last changes.
        let noise = paced(32, |r, s| (s * 7 + u64::from(r) * 13) % 5 * 1_000);
        assert!(straggler(&noise).is_empty(), "{:#?}", straggler(&noise));
        // Rank 3 late at every call, but by 0.5 ms of a 10 ms period (a loaded host's unfairness): no straggler.
        let slight = paced(32, |r, _| if r == 3 { 500 } else { 0 });
        assert!(straggler(&slight).is_empty(), "{:#?}", straggler(&slight));
        // Late at half the calls only.
        let half = paced(32, |r, s| if r == 0 && s % 2 == 0 { 5_000 } else { 0 });
        assert!(straggler(&half).is_empty(), "{:#?}", straggler(&half));
    }

    #[test]
    fn a_straggler_across_hosts_says_the_clocks_are_compared() {
        let mut job = paced(20, |r, _| if r == 0 { 6_000 } else { 0 });
        job.ranks[2].host = Some("other".into());
        let f = straggler(&job);
        assert_eq!(f[0].rank, Some(0));
        assert!(f[0].detail.contains("compared by each host's clock"), "{}", f[0].detail);
    }

    #[test]
    fn a_rule_about_one_communicator_names_its_id_and_name_and_a_rank_rule_names_none() {
        let named = |mut r: RankSummary| {
            r.comms[0].comm = Some("0x7f01".into());
            r.comms[0].name = Some("tp0".into());
            r
        };
        let gone =
            RankEndpoint { rank: 2, host: "h".into(), url: "http://127.0.0.1:9".into(), pid: None, started: None };
        let starts = |lag: u64| (1..=32u64).map(|s| (s, s * 10_000 + lag)).collect::<Vec<_>>();
        let mut job = JobView {
            ranks: vec![
                named(rank(0, Some(6), Some((7, 5.0)), starts(0))),
                named(rank(1, Some(6), None, starts(5_000))),
                RankSummary::unreachable(&gone, "timed out".into()),
            ],
            ..Default::default()
        };
        job.ranks[0].comms[0].recent_calls.push(sig(3, Collective::AllReduce, 8));
        job.ranks[1].comms[0].recent_calls.push(sig(3, Collective::Broadcast, 8));
        job.ranks[1].stalls.push(Stall {
            comm: Some("0x7f01".into()),
            rank: 1,
            seq: 4,
            coll: Collective::AllReduce,
            bytes: 8,
            completed_us: None,
            secs: 6.0,
        });
        let tp0 = Some(FindingComm { id: "0x7f01".into(), name: Some("tp0".into()) });
        for (rule, found) in [
            ("not_arrived", not_arrived(&job)),
            ("mismatch", mismatch(&job)),
            ("straggler", straggler(&job)),
            ("stalls", stalls(&job)),
        ] {
            assert!(!found.is_empty(), "{rule} found nothing");
            for f in &found {
                assert_eq!(f.comm, tp0, "{rule}: {f:#?}");
            }
        }
        assert_eq!(tp0.as_ref().map(ToString::to_string).as_deref(), Some("tp0 (0x7f01)"));
        assert_eq!(unreachable(&job)[0].comm, None);
        // Calls with no communicator make findings with none.
        job.ranks.truncate(2);
        for r in &mut job.ranks {
            r.comms[0].comm = None;
        }
        assert_eq!(not_arrived(&job)[0].comm, None);
    }

    #[test]
    fn calls_in_flight_without_a_sequence_number_name_no_rank_as_not_arrived() {
        // A job view read from Prometheus' gauges: every call's age, no call's sequence number.
        let mut job = JobView {
            ranks: vec![rank(0, None, Some((7, 9.0)), vec![]), rank(1, None, None, vec![])],
            ..Default::default()
        };
        assert_eq!(not_arrived(&job).len(), 1, "with the sequence number, rank 1 is named");
        let f = job.ranks[0].comms[0].in_flight.as_mut().unwrap();
        (f.seq, f.coll, f.bytes) = (None, None, None);
        assert!(not_arrived(&job).is_empty(), "{:#?}", not_arrived(&job));
    }
}
