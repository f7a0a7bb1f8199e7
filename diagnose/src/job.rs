//! The job-level rules (the table is `JOB_RULES` in the crate root): what PyTorch's Flight Recorder analysis
//! concludes after a hang, live, from every rank's summary in a [`JobView`]: which ranks have not arrived at
//! the call the others wait in, which rank arrives last at most calls, which rank does not answer.

use collscope_model::{CommProgress, Finding, JobView, RankState, RankSummary, Severity};
use std::collections::BTreeSet;

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
                last_completed: last,
                in_flight: in_flight.map(|(seq, age_s)| InFlight {
                    seq,
                    coll: Collective::AllReduce,
                    bytes: 4096,
                    age_s,
                }),
                recent_starts: starts,
            }],
            busbw_gbps: None,
            p50_us: None,
            p99_us: None,
            error: None,
            edges: Default::default(),
        }
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
