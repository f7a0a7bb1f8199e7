//! The job-level rules (the table is `JOB_RULES` in the crate root): what PyTorch's Flight Recorder analysis
//! concludes after a hang, live, from every rank's summary in a [`JobView`]: which ranks have not arrived at
//! the call the others wait in, which rank arrives last at most calls, which rank does not answer.

use collscope_model::{CallSig, Collective, CommProgress, Finding, JobView, RankState, RankSummary, Severity};
use std::collections::{BTreeMap, BTreeSet};

/// How long ranks wait in one call before the ranks that have not reached it are named.
pub const NOT_ARRIVED_AFTER_S: f64 = 3.0;
/// Calls seen by every rank needed before one rank is called a straggler.
pub const STRAGGLER_MIN_CALLS: usize = 8;
/// The share of those calls a straggler starts last.
pub const STRAGGLER_SHARE: f64 = 0.75;
/// How far behind the next latest rank a straggler starts, on average, in microseconds (less is noise).
pub const STRAGGLER_MIN_LAG_US: f64 = 1000.0;

fn comms(job: &JobView) -> BTreeSet<Option<&str>> {
    job.ranks.iter().flat_map(|r| r.comms.iter().map(|c| c.comm.as_deref())).collect()
}

fn progress<'a>(r: &'a RankSummary, comm: Option<&str>) -> Option<&'a CommProgress> {
    r.comms.iter().find(|c| c.comm.as_deref() == comm)
}

fn list(ranks: &[u32]) -> String {
    ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn comm_name(comm: Option<&str>) -> String {
    comm.map(|c| format!(" of communicator {c}")).unwrap_or_default()
}

/// Ranks that have not reached the call other ranks have waited in for [`NOT_ARRIVED_AFTER_S`]: those that
/// answer with an older call done or in flight, and those whose telemetry does not answer.
pub fn not_arrived(job: &JobView) -> Vec<Finding> {
    let mut out = Vec::new();
    for comm in comms(job) {
        let waiting = job
            .ranks
            .iter()
            .filter_map(|r| Some((r.rank, progress(r, comm)?.in_flight.as_ref()?)))
            .filter(|(_, f)| f.age_s >= NOT_ARRIVED_AFTER_S);
        let Some(seq) = waiting.map(|(_, f)| f.seq).max() else { continue };
        let waiters: Vec<(u32, f64)> = job
            .ranks
            .iter()
            .filter_map(|r| Some((r.rank, progress(r, comm)?.in_flight.as_ref().filter(|f| f.seq == seq)?.age_s)))
            .collect();
        let Some(call) =
            job.ranks.iter().find_map(|r| progress(r, comm)?.in_flight.as_ref().filter(|f| f.seq == seq).cloned())
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
                (RankState::Unreachable, _) => {
                    format!("does not answer ({})", r.error.as_deref().unwrap_or("no answer"))
                }
                (_, Some(p)) if p.last_completed.is_some_and(|d| d >= seq) => continue,
                (_, Some(CommProgress { in_flight: Some(f), .. })) => format!("is still in {} #{}", f.coll, f.seq),
                (_, Some(p)) => match p.last_completed {
                    Some(d) => format!("finished #{d} and has not begun #{seq}"),
                    None => format!("has not begun #{seq}"),
                },
                (_, None) => format!("has not begun #{seq}"),
            };
            out.push(Finding {
                code: "rank_not_arrived".into(),
                severity: Severity::Error,
                rank: Some(r.rank),
                title: format!("rank {} has not arrived at {} #{seq}", r.rank, call.coll),
                detail: format!(
                    "ranks {} have waited up to {longest:.1} s in {} #{seq} ({} bytes){}; rank {} {status}",
                    list(&who),
                    call.coll,
                    call.bytes,
                    comm_name(comm),
                    r.rank
                ),
                evidence: Vec::new(),
                fix: format!(
                    "Find what rank {} does instead: a process stopped (SIGSTOP, a debugger), a different call order \
                     on that rank, or a long step before the call (py-spy dump / gdb on it); COLLSCOPE_TIMEOUT_S \
                     bounds how long the others wait",
                    r.rank
                ),
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

/// A rank that starts most of the recent calls seen by every rank last, well behind the others.
pub fn straggler(job: &JobView) -> Vec<Finding> {
    let mut out = Vec::new();
    for comm in comms(job) {
        let ranks: Vec<(u32, &CommProgress)> =
            job.ranks.iter().filter_map(|r| Some((r.rank, progress(r, comm)?))).collect();
        if ranks.len() < 2 {
            continue;
        }
        let seqs: BTreeSet<u64> = ranks[0].1.recent_starts.iter().map(|(s, _)| *s).collect();
        let common: Vec<u64> = seqs
            .into_iter()
            .filter(|s| ranks.iter().all(|(_, p)| p.recent_starts.iter().any(|(q, _)| q == s)))
            .collect();
        if common.len() < STRAGGLER_MIN_CALLS {
            continue;
        }
        // For each call: the rank that started it last and how far behind the next latest.
        let mut last: Vec<(u32, f64)> = Vec::new();
        for s in &common {
            let mut starts: Vec<(u64, u32)> = ranks
                .iter()
                .filter_map(|(r, p)| p.recent_starts.iter().find(|(q, _)| q == s).map(|(_, t)| (*t, *r)))
                .collect();
            starts.sort_unstable();
            let [.., (second, _), (latest, rank)] = starts[..] else { continue };
            last.push((rank, (latest - second) as f64));
        }
        let Some(rank) = last.iter().map(|(r, _)| *r).max_by_key(|r| last.iter().filter(|(q, _)| q == r).count())
        else {
            continue;
        };
        let lags: Vec<f64> = last.iter().filter(|(r, _)| *r == rank).map(|(_, l)| *l).collect();
        let mean_lag = lags.iter().sum::<f64>() / lags.len() as f64;
        if (lags.len() as f64) < STRAGGLER_SHARE * common.len() as f64 || mean_lag < STRAGGLER_MIN_LAG_US {
            continue;
        }
        out.push(Finding {
            code: "straggler".into(),
            severity: Severity::Warning,
            rank: Some(rank),
            title: format!("rank {rank} arrives last at most calls"),
            detail: format!(
                "rank {rank} started {} of the {} latest calls every rank made{} last, on average {:.1} ms after \
                 the next latest rank: the others wait that long in each",
                lags.len(),
                common.len(),
                comm_name(comm),
                mean_lag / 1e3
            ),
            evidence: Vec::new(),
            fix: format!(
                "Look at what rank {rank} does between calls: more work or data than the others, its CPU binding \
                 (NCCL_IGNORE_CPU_AFFINITY, numactl), a slower device or a busier host"
            ),
        });
    }
    out
}

/// A rank whose telemetry does not answer: its process is gone, stopped, or cut off from this one.
pub fn unreachable(job: &JobView) -> Vec<Finding> {
    job.ranks
        .iter()
        .filter(|r| r.state == RankState::Unreachable)
        .map(|r| Finding {
            code: "rank_unreachable".into(),
            severity: Severity::Warning,
            rank: Some(r.rank),
            title: format!("rank {} does not answer", r.rank),
            detail: format!(
                "rank {}'s telemetry at {} did not answer: {}",
                r.rank,
                r.url.as_deref().unwrap_or("an unknown address"),
                r.error.as_deref().unwrap_or("no answer")
            ),
            evidence: Vec::new(),
            fix: "Check whether the rank's process still runs (and is not stopped), and that this host reaches its \
                  telemetry port"
                .into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Collective, InFlight, RankEndpoint};

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
                    seq,
                    coll: Collective::AllReduce,
                    bytes: 4096,
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
        let gone = RankEndpoint { rank: 3, host: "h".into(), url: "http://127.0.0.1:9".into() };
        let job = JobView {
            ranks: vec![
                rank(0, Some(6), Some((7, 4.5)), vec![]),
                rank(1, Some(6), Some((7, 4.0)), vec![]),
                rank(2, Some(6), None, vec![]),
                RankSummary::unreachable(&gone, "timed out".into()),
            ],
            findings: vec![],
        };
        let f = not_arrived(&job);
        assert_eq!(f.iter().map(|f| f.rank).collect::<Vec<_>>(), [Some(2), Some(3)]);
        assert_eq!(f[0].title, "rank 2 has not arrived at AllReduce #7");
        assert!(f[0].detail.contains("ranks 0,1 have waited up to 4.5 s") && f[0].detail.contains("finished #6"));
        assert!(f[1].detail.contains("does not answer (timed out)"), "{}", f[1].detail);
        assert_eq!(unreachable(&job)[0].rank, Some(3));
        // Waiting less than the threshold is a call in progress, not a hang.
        let mut young = job.clone();
        young.ranks[0].comms[0].in_flight.as_mut().unwrap().age_s = 1.0;
        young.ranks[1].comms[0].in_flight.as_mut().unwrap().age_s = 1.0;
        assert!(not_arrived(&young).is_empty());
    }

    #[test]
    fn the_rank_that_starts_most_calls_last_is_the_straggler() {
        let starts = |lag: u64| (1..=10u64).map(|s| (s, s * 100_000 + lag)).collect::<Vec<_>>();
        let mut job = JobView {
            ranks: vec![rank(0, Some(10), None, starts(0)), rank(1, Some(10), None, starts(5_000))],
            findings: vec![],
        };
        let f = straggler(&job);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].rank, Some(1));
        assert!(f[0].detail.contains("10 of the 10") && f[0].detail.contains("5.0 ms"), "{}", f[0].detail);
        job.ranks[1].comms[0].recent_starts = starts(100);
        assert!(straggler(&job).is_empty(), "a lag within noise is no straggler");
    }
}
