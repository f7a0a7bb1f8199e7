//! `collscope job status --prometheus URL`: every rank of a job as the Prometheus that scrapes it holds it, read
//! with a few PromQL queries however many ranks (`collscope_telemetry::promjob`).
//! `collscope job analyze DIR`: the ranks' dumps (`COLLSCOPE_DUMP_DIR`) aligned after the fact, as PyTorch's
//! `fr_trace` aligns Flight Recorder dumps: each rank summarised as the live job view does, the same job rules
//! (`collscope_diagnose::JOB_RULES`) naming the rank that never arrived or called something else, and each rank's
//! last call side by side.

use anyhow::Context;
use clap::{Args, Subcommand};
use collscope_model::dump::{DUMP_VERSION, MAX_DUMP_BYTES, MAX_DUMP_FILES};
use collscope_model::job::MAX_JOB_RANKS;
use collscope_model::{
    DumpReason, JobView, OpRecord, OpState, ProcState, ProcessSeen, RankDump, RankEndpoint, RankSummary, Severity,
};
use collscope_telemetry::promjob::PromJob;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// Each rank's state, oldest call in flight, bus bandwidth and the findings raised, from Prometheus.
    Status(StatusArgs),
    /// The ranks' dumps (a COLLSCOPE_DUMP_DIR folder): which rank never arrived or called something else, and
    /// each rank's last call.
    Analyze(AnalyzeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The Prometheus server that scrapes the ranks, e.g. http://127.0.0.1:9090.
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// Only this Prometheus job's ranks (its `job` label); else every job's collscope ranks.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Print the view as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AnalyzeArgs {
    /// The folder the ranks wrote their dumps to (their COLLSCOPE_DUMP_DIR).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Print the analysis as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(cmd: JobCommand) -> anyhow::Result<()> {
    match cmd {
        JobCommand::Status(a) => {
            let view = PromJob::new(&a.prometheus, a.job.as_deref())?.view().context("reading the job view")?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print!("{}", view.text());
            }
            Ok(())
        }
        JobCommand::Analyze(a) => {
            let analysis = analyze(&a.dir)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&analysis)?);
            } else {
                print!("{}", analysis.text());
            }
            Ok(())
        }
    }
}

/// A file of the folder that is not a rank's dump, and why; it is skipped.
#[derive(Debug, Serialize)]
pub(crate) struct BadFile {
    pub path: PathBuf,
    pub why: String,
}

/// A rank's last call in one communicator, as its dump held it.
#[derive(Debug, Serialize)]
pub(crate) struct LastCall {
    pub comm: Option<String>,
    #[serde(flatten)]
    pub op: OpRecord,
    /// Seconds from its start to the dump (in flight, or failed: how long the rank had been in it).
    pub age_s: Option<f64>,
}

/// What one rank's dump says.
#[derive(Debug, Serialize)]
pub(crate) struct RankSeen {
    pub rank: u32,
    pub reason: DumpReason,
    pub written_us: u64,
    pub last_calls: Vec<LastCall>,
}

/// The whole folder: the job view built from the dumps and its findings, each rank's last calls, the ranks
/// without a dump and the files that are not dumps.
#[derive(Debug, Serialize)]
pub(crate) struct Analysis {
    pub dir: PathBuf,
    pub view: JobView,
    pub ranks: Vec<RankSeen>,
    /// Ranks of the job (its communicators' size) with no dump.
    pub missing: Vec<u32>,
    pub bad_files: Vec<BadFile>,
    /// Dump files past the [`MAX_DUMP_FILES`] read.
    pub left_out: usize,
    /// The dumps read, by rank (for the TUI).
    #[serde(skip)]
    pub dumps: Vec<RankDump>,
}

/// Reads one dump: a regular file of at most [`MAX_DUMP_BYTES`], JSON of [`DUMP_VERSION`], of the rank its name
/// says; else what was expected.
fn read_dump(path: &Path) -> Result<RankDump, String> {
    let bytes = collscope_debug::file::read_small(path, MAX_DUMP_BYTES).map_err(|e| e.to_string())?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("expected a collscope rank dump (JSON): {e}"))?;
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(DUMP_VERSION) => {}
        Some(v) => return Err(format!("expected dump version {DUMP_VERSION}, found {v}")),
        None => return Err(format!("expected a collscope rank dump: no \"version\" (expected {DUMP_VERSION})")),
    }
    let dump: RankDump = serde_json::from_value(value)
        .map_err(|e| format!("expected a collscope rank dump (version {DUMP_VERSION}): {e}"))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name != RankDump::file_name(dump.rank) {
        return Err(format!("expected the dump of the rank its name says, found rank {}'s", dump.rank));
    }
    Ok(dump)
}

/// Every `rank-*.json` of `dir` (sorted, at most [`MAX_DUMP_FILES`]), read; what is not a dump is listed with why.
fn read_dumps(dir: &Path) -> anyhow::Result<(Vec<RankDump>, Vec<BadFile>, usize)> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read the dump folder {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("rank-") && n.ends_with(".json"))
        })
        .collect();
    paths.sort();
    let left_out = paths.len().saturating_sub(MAX_DUMP_FILES);
    paths.truncate(MAX_DUMP_FILES);
    let (mut dumps, mut bad) = (Vec::new(), Vec::new());
    for path in paths {
        match read_dump(&path) {
            Ok(d) => dumps.push(d),
            Err(why) => bad.push(BadFile { path, why }),
        }
    }
    Ok((dumps, bad, left_out))
}

/// A rank of the job that left no dump: listed as the job view lists a rank that does not answer, and taken as
/// dead (inferred: a rank that lived through the failure, or got SIGTERM, writes one).
fn without_dump(dir: &Path, rank: u32, dumps: &[RankDump]) -> RankSummary {
    let known = dumps.iter().flat_map(|d| &d.endpoints).find(|e| e.rank == rank).cloned();
    let endpoint =
        known.unwrap_or(RankEndpoint { rank, host: String::new(), url: String::new(), pid: None, started: None });
    let file = dir.join(RankDump::file_name(rank)).display().to_string();
    let mut s = RankSummary::unreachable(&endpoint, format!("no dump: {file} is missing"));
    s.host = s.host.filter(|h| !h.is_empty());
    // Nothing was asked live: the finding then says the dump is missing, not that telemetry did not answer.
    s.url = None;
    s.process = Some(ProcessSeen {
        state: ProcState::Dead,
        file,
        text: "no dump (inferred dead: a rank that outlives the failure writes one)".into(),
    });
    s
}

/// The calls a rank was last in, one per communicator: its latest by sequence number.
fn last_calls(d: &RankDump) -> Vec<LastCall> {
    let mut last: Vec<&OpRecord> = Vec::new();
    for o in &d.ops {
        match last.iter_mut().find(|l| l.comm == o.comm) {
            Some(l) if o.seq > l.seq => *l = o,
            Some(_) => {}
            None => last.push(o),
        }
    }
    last.into_iter()
        .map(|o| LastCall {
            comm: o.comm.as_deref().map(str::to_string),
            op: o.clone(),
            age_s: (o.state != OpState::Completed)
                .then(|| o.started_us.or(o.enqueued_us).map(|t| d.written_us.saturating_sub(t) as f64 / 1e6))
                .flatten(),
        })
        .collect()
}

/// The analysis of the dumps in `dir`.
pub(crate) fn analyze(dir: &Path) -> anyhow::Result<Analysis> {
    let (mut dumps, bad_files, left_out) = read_dumps(dir)?;
    dumps.sort_by_key(|d| d.rank);
    let mut ranks: Vec<RankSummary> = dumps.iter().map(RankDump::summary).collect();
    let nranks = dumps.iter().filter_map(|d| d.nranks).max().unwrap_or(0).min(MAX_JOB_RANKS as u32);
    let missing: Vec<u32> = (0..nranks).filter(|r| !dumps.iter().any(|d| d.rank == *r)).collect();
    ranks.extend(missing.iter().map(|&r| without_dump(dir, r, &dumps)));
    ranks.sort_by_key(|r| r.rank);
    ranks.dedup_by_key(|r| r.rank);
    // Where a rank failed (a timeout, a dead peer: its dump's reason, or a finding of it in a later dump), every
    // rank's last call is where it stopped, however short it waited (a dead peer is seen at once). Dumps of a
    // job that had not failed are judged as the live view judges, after the default wait.
    let failed = dumps.iter().any(|d| {
        matches!(d.reason, DumpReason::Timeout | DumpReason::PeerFailure)
            || d.findings.iter().any(|f| DumpReason::of_finding(f).is_some())
    });
    let after = if failed { 0.0 } else { collscope_diagnose::job::NOT_ARRIVED_AFTER_S };
    let mut view = JobView { ranks, findings: Vec::new(), not_arrived_after_s: Some(after), via: None };
    view.findings = collscope_diagnose::diagnose_job(&view);
    let seen = dumps
        .iter()
        .map(|d| RankSeen { rank: d.rank, reason: d.reason, written_us: d.written_us, last_calls: last_calls(d) })
        .collect();
    Ok(Analysis { dir: dir.to_path_buf(), view, ranks: seen, missing, bad_files, left_out, dumps })
}

impl Analysis {
    /// The analysis as text: each rank's last call side by side, the findings, what was skipped.
    pub(crate) fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{}: {} rank dumps{}{}",
            self.dir.display(),
            self.ranks.len(),
            if self.missing.is_empty() {
                String::new()
            } else {
                format!(", ranks without a dump: {}", list(&self.missing))
            },
            if self.left_out > 0 { format!(" ({} more files not read)", self.left_out) } else { String::new() }
        );
        let _ = writeln!(o, "\n== Last call of each rank");
        let _ = writeln!(
            o,
            "{:>6}  {:<16} {:>7}  {:<14} {:>12} {:<6} {:>5}  {:<16} {:<10} {:>8}  dumped on",
            "rank", "communicator", "seq", "collective", "count", "type", "root", "algo/proto", "state", "age"
        );
        for r in self.view.ranks.iter().map(|r| r.rank) {
            let Some(seen) = self.ranks.iter().find(|s| s.rank == r) else {
                let _ = writeln!(o, "{r:>6}  (no dump)");
                continue;
            };
            if seen.last_calls.is_empty() {
                let _ = writeln!(o, "{r:>6}  (no call recorded)  {}", seen.reason);
            }
            for c in &seen.last_calls {
                let op = &c.op;
                let choice = match (op.algo, op.proto) {
                    (Some(a), Some(p)) => format!("{a}/{p}"),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    o,
                    "{r:>6}  {:<16.16} {:>7}  {:<14} {:>12} {:<6} {:>5}  {:<16} {:<10} {:>8}  {}",
                    c.comm.as_deref().unwrap_or("-"),
                    op.seq,
                    op.coll.to_string(),
                    op.count,
                    op.datatype.to_string(),
                    op.root.map_or("-".to_string(), |r| r.to_string()),
                    choice,
                    state_name(op.state),
                    c.age_s.map_or("-".to_string(), |a| format!("{a:.1}s")),
                    seen.reason
                );
            }
        }
        let _ = writeln!(o, "\n== Findings");
        if self.view.findings.is_empty() {
            let _ = writeln!(o, "  none: every rank's last call agrees");
        }
        for sev in [Severity::Error, Severity::Warning, Severity::Info] {
            for f in self.view.findings.iter().filter(|f| f.severity == sev) {
                let _ = writeln!(o, "  [{}] {} ({})", f.severity, f.title, f.code);
                let _ = writeln!(o, "      {}", f.detail);
                for e in f.evidence.iter().take(3) {
                    let _ = writeln!(o, "      at {}: {}", e.file, e.text.trim());
                }
                let _ = writeln!(o, "      fix: {}", f.fix);
            }
        }
        if !self.bad_files.is_empty() {
            let _ = writeln!(o, "\n== Files skipped");
            for b in &self.bad_files {
                let _ = writeln!(o, "  {}: {}", b.path.display(), b.why);
            }
        }
        o
    }
}

fn state_name(s: OpState) -> &'static str {
    match s {
        OpState::Enqueued => "enqueued",
        OpState::Started => "in flight",
        OpState::Completed => "completed",
        OpState::Failed => "failed",
    }
}

fn list(ranks: &[u32]) -> String {
    ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Collective, Communicator, DataType, Snapshot, Source};

    fn dump(rank: u32, seq: u64, failed: bool) -> RankDump {
        let mut s = Snapshot::new(Source::Runtime);
        s.communicators.push(Communicator { rank: Some(rank), nranks: Some(3), ..Default::default() });
        for q in 1..=seq {
            let mut o = OpRecord::started(rank, q, Collective::AllReduce, DataType::F32, 256, q * 1_000_000);
            o.comm = Some("world".into());
            o.state = if q < seq || !failed { OpState::Completed } else { OpState::Failed };
            o.completed_us = Some(q * 1_000_000 + 10);
            s.ops.push_back(o);
        }
        RankDump::of(&s, DumpReason::PeerFailure, 20_000_000).remove(0)
    }

    #[test]
    fn bad_files_are_named_with_what_was_expected_and_the_rest_analysed() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &[u8]| std::fs::write(dir.path().join(name), body).unwrap();
        write("rank-00000.json", &serde_json::to_vec(&dump(0, 5, true)).unwrap());
        write("rank-00001.json", b"{not json");
        let mut old = serde_json::to_value(dump(1, 5, true)).unwrap();
        old["version"] = 99.into();
        write("rank-00003.json", old.to_string().as_bytes());
        // Rank 2's dump under rank 4's name.
        write("rank-00004.json", &serde_json::to_vec(&dump(2, 5, true)).unwrap());
        write("notes.txt", b"ignored");
        let a = analyze(dir.path()).unwrap();
        let why: Vec<(String, &str)> = a
            .bad_files
            .iter()
            .map(|b| (b.path.file_name().unwrap().to_string_lossy().into_owned(), b.why.as_str()))
            .collect();
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(why[0].0 == "rank-00001.json" && why[0].1.contains("expected a collscope rank dump (JSON)"), "{why:?}");
        assert!(why[1].0 == "rank-00003.json" && why[1].1.contains("expected dump version 1, found 99"), "{why:?}");
        assert!(why[2].0 == "rank-00004.json" && why[2].1.contains("found rank 2's"), "{why:?}");
        // Rank 0 read; ranks 1 and 2 of its 3 have no (good) dump, and are named as not arrived, dead.
        assert_eq!((a.ranks.len(), a.missing.clone()), (1, vec![1, 2]));
        let named: Vec<Option<u32>> =
            a.view.findings.iter().filter(|f| f.code == "rank_not_arrived").map(|f| f.rank).collect();
        assert_eq!(named, vec![Some(1), Some(2)], "{:?}", a.view.findings);
        assert!(a.text().contains("rank-00001.json: expected"), "{}", a.text());
    }

    #[test]
    fn a_rank_whose_last_call_is_behind_is_named_and_each_last_call_shown() {
        let dir = tempfile::tempdir().unwrap();
        for (rank, seq, failed) in [(0, 7, true), (1, 6, false), (2, 7, true)] {
            let path = dir.path().join(RankDump::file_name(rank));
            std::fs::write(path, serde_json::to_vec(&dump(rank, seq, failed)).unwrap()).unwrap();
        }
        let a = analyze(dir.path()).unwrap();
        assert!(a.missing.is_empty() && a.bad_files.is_empty());
        let f = a.view.findings.iter().find(|f| f.code == "rank_not_arrived").expect("a not-arrived finding");
        assert_eq!(f.rank, Some(1));
        assert!(f.title.contains("AllReduce #7"), "{}", f.title);
        let last: Vec<(u32, u64)> = a.ranks.iter().map(|r| (r.rank, r.last_calls[0].op.seq)).collect();
        assert_eq!(last, vec![(0, 7), (1, 6), (2, 7)]);
    }
}
