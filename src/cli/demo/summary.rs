//! What the demo did, printed when it ends (after the TUI closes, or after the last step without it): one rank's
//! calls per collective with their bytes and bus bandwidth, and the findings. The numbers are the model's (each
//! call's `OpRecord`), over the calls the rank's snapshot keeps (a bounded history), and the text says which
//! rank and which calls.

use collscope_model::{Collective, Finding, OpState, Snapshot};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One collective's completed calls.
#[derive(Debug, Default, PartialEq)]
struct Calls {
    calls: u64,
    bytes: u64,
    /// The bus bandwidths (GB/s) the model gave the calls that have one.
    busbw: Vec<f64>,
}

/// The summary of `rank`'s calls in `snap`, with `findings` (the rank's own, and the job's when known);
/// `None` when the snapshot holds no completed call of that rank.
pub(super) fn summary(snap: &Snapshot, rank: u32, findings: &[Finding]) -> Option<String> {
    let mine = || snap.ops.iter().filter(|o| o.rank == rank);
    let mut by_coll: BTreeMap<Collective, Calls> = BTreeMap::new();
    for op in mine().filter(|o| o.state == OpState::Completed) {
        let c = by_coll.entry(op.coll).or_default();
        c.calls += 1;
        c.bytes += op.bytes;
        c.busbw.extend(op.busbw_gbps);
    }
    if by_coll.is_empty() {
        return None;
    }
    let first = mine().map(|o| o.seq).min()?;
    let last = mine().map(|o| o.seq).max()?;
    // A snapshot keeps a bounded history of calls: the window is the calls it holds.
    let mut out = format!(
        "collscope demo: summary of rank {rank}'s calls #{first} to #{last} ({} kept in its snapshot):\n",
        mine().count()
    );
    for (coll, c) in &by_coll {
        let bw = if c.busbw.is_empty() {
            "busbw unknown".to_string()
        } else {
            let mean = c.busbw.iter().sum::<f64>() / c.busbw.len() as f64;
            let best = c.busbw.iter().copied().fold(f64::MIN, f64::max);
            format!("busbw mean {mean:.2} GB/s, best {best:.2} GB/s")
        };
        let _ = writeln!(out, "  {coll:<14}{:>8} calls {:>10.3} GB  {bw}", c.calls, c.bytes as f64 / 1e9);
    }
    if findings.is_empty() {
        out.push_str("  findings: none\n");
    } else {
        let _ = writeln!(out, "  findings: {}", findings.len());
        for f in findings {
            let _ = writeln!(out, "    [{}] {}", f.severity, f.title);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{DataType, OpRecord, Severity, Source};

    fn done(rank: u32, seq: u64, coll: Collective, bytes: u64, busbw: Option<f64>) -> OpRecord {
        let mut op = OpRecord::started(rank, seq, coll, DataType::F32, bytes / 4, 0);
        op.bytes = bytes;
        op.state = OpState::Completed;
        op.busbw_gbps = busbw;
        op
    }

    #[test]
    fn the_summary_counts_one_ranks_completed_calls_with_the_models_busbw() {
        let mut snap = Snapshot::new(Source::Runtime);
        snap.ops.extend([
            done(0, 7, Collective::AllReduce, 1_000_000, Some(2.0)),
            done(0, 8, Collective::AllReduce, 1_000_000, Some(4.0)),
            done(0, 9, Collective::AllGather, 600_000, None),
            // Another rank's call and a call still running are not rank 0's completed calls.
            done(1, 9, Collective::AllReduce, 9_000_000, Some(99.0)),
            OpRecord::started(0, 10, Collective::AllReduce, DataType::F32, 10, 0),
        ]);
        let finding = Finding {
            code: "straggler".into(),
            severity: Severity::Warning,
            rank: Some(1),
            title: "rank 1 is slow".into(),
            detail: String::new(),
            evidence: vec![],
            fix: String::new(),
            comm: None,
        };
        let text = summary(&snap, 0, std::slice::from_ref(&finding)).unwrap();
        let head = "collscope demo: summary of rank 0's calls #7 to #10 (4 kept in its snapshot):";
        assert!(text.starts_with(head), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        // In NCCL's order of collectives.
        assert_eq!(lines[1], "  AllGather            1 calls      0.001 GB  busbw unknown");
        assert_eq!(lines[2], "  AllReduce            2 calls      0.002 GB  busbw mean 3.00 GB/s, best 4.00 GB/s");
        assert_eq!(lines[3..], ["  findings: 1", "    [warning] rank 1 is slow"]);
        assert!(summary(&snap, 0, &[]).unwrap().ends_with("  findings: none\n"));
        assert_eq!(summary(&snap, 2, &[]), None, "rank 2 made no call");
    }
}
