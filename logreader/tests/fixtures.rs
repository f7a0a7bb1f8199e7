//! The 30 real NCCL logs in `../shared/fixtures/nccl-logs` (beside the workspace) must yield the facts recorded
//! in the `.json` beside each: version (when printed), nranks, nnodes, transports, GPUDirect RDMA and the WARN
//! lines.

use collscope_logreader::{gdrdma, transports_seen, Options, Reader};
use collscope_model::Snapshot;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn read(path: &Path) -> Snapshot {
    let mut r = Reader::new(Options { strict: true });
    r.read_bytes(&path.display().to_string(), &std::fs::read(path).unwrap());
    r.finish()
}

/// Checks one log against its facts; returns the mismatches.
fn check(log: &Path, facts: &Value) -> Vec<String> {
    let s = read(log);
    let mut bad = Vec::new();
    if let Some(v) = facts["nccl_version"].as_str().filter(|v| !v.contains("not printed")) {
        if s.nccl_version.as_deref() != Some(v) {
            bad.push(format!("version {:?} != {v}", s.nccl_version));
        }
    }
    for (key, got) in [("nranks", s.nranks), ("nnodes", s.nnodes)] {
        if let Some(want) = facts[key].as_u64() {
            if got != Some(want as u32) {
                bad.push(format!("{key} {got:?} != {want}"));
            }
        }
    }
    let seen = transports_seen(&s);
    let expected: Vec<&str> = facts["transports_seen"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let mut plain = std::collections::BTreeSet::new();
    for t in &expected {
        match t.split_once(" (") {
            // "NET/IB (selected at init; ...)", "SHM (implied by shm segment error)": no connection lines.
            Some((base, _)) => {
                let by_network = base.strip_prefix("NET/").is_some_and(|n| s.network.as_deref() == Some(n));
                let by_warning = base == "SHM" && s.warnings.iter().any(|w| w.class == "shm");
                if !(seen.contains(base) || by_network || by_warning) {
                    bad.push(format!("transport {base} not seen (network {:?}, seen {seen:?})", s.network));
                }
            }
            None => {
                plain.insert(t.to_string());
            }
        }
    }
    if expected.iter().all(|t| !t.contains(" (")) && plain != seen {
        bad.push(format!("transports {seen:?} != {plain:?}"));
    }
    if let Some(want) = facts["gdrdma"].as_bool() {
        if gdrdma(&s) != Some(want) {
            bad.push(format!("gdrdma {:?} != {want}", gdrdma(&s)));
        }
    }
    let errors: Vec<&str> = facts["errors"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let warned: Vec<&str> = s.warnings.iter().filter_map(|w| w.line.as_ref()).map(|l| l.text.as_str()).collect();
    if warned != errors {
        bad.push(format!("warnings {warned:#?} != {errors:#?}"));
    }
    bad
}

/// The `.log` files of `dir`, in name order.
fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn real_logs_yield_their_recorded_facts() {
    let Some(dir) = collscope_testkit::fixtures("the facts recorded for each real NCCL log") else { return };
    let logs = logs_in(&dir);
    assert_eq!(logs.len(), 30, "expected 30 fixture logs in {}", dir.display());
    let mut failures = Vec::new();
    for log in &logs {
        let facts: Value = serde_json::from_str(&std::fs::read_to_string(log.with_extension("json")).unwrap()).unwrap();
        for b in check(log, &facts) {
            failures.push(format!("{}: {b}", log.file_name().unwrap().to_string_lossy()));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

/// The logs collscope's developers wrote in NCCL's grammar, one per kind of input (tests/data): their facts,
/// where a null size means the log does not say and the reader must not claim one, and no line left unexplained.
#[test]
fn own_fixture_logs_yield_their_facts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let logs = logs_in(&dir);
    assert!(logs.len() >= 16, "fixture logs in {}", dir.display());
    let mut failures = Vec::new();
    for log in &logs {
        let facts: Value = serde_json::from_str(&std::fs::read_to_string(log.with_extension("json")).unwrap()).unwrap();
        let mut bad = check(log, &facts);
        let s = read(log);
        for (key, got) in [("nranks", s.nranks), ("nnodes", s.nnodes)] {
            if facts[key].is_null() && got.is_some() {
                bad.push(format!("{key} {got:?} where the log does not say"));
            }
        }
        bad.extend(s.unparsed_nccl_lines.iter().map(|l| format!("not understood: {}", l.text)));
        failures.extend(bad.into_iter().map(|b| format!("{}: {b}", log.file_name().unwrap().to_string_lossy())));
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn real_logs_leave_no_nccl_line_unparsed() {
    let Some(dir) = collscope_testkit::fixtures("every NCCL line of the real logs is understood") else { return };
    let mut unparsed = Vec::new();
    for p in logs_in(&dir) {
        unparsed.extend(read(&p).unparsed_nccl_lines.into_iter().map(|l| format!("{}:{} {}", l.file, l.line, l.text)));
    }
    assert!(unparsed.is_empty(), "unparsed NCCL lines:\n{}", unparsed.join("\n"));
}
