//! The round trip of a live job's model: `collscope demo`'s own `NCCL_DEBUG=INFO` log, read by
//! `collscope log analyze --json`, gives the same version, rank count, rings, trees, channel counts,
//! connections and per-call decisions as the live snapshot the same run serves.

#[allow(dead_code)]
use crate::live;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn get(url: &str) -> Option<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().ok()?;
    serde_json::from_str(&client.get(url).send().ok()?.text().ok()?).ok()
}

fn analyze(log: &Path) -> Value {
    let out = collscope_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_collscope")).args(["log", "analyze", "--json", "--no-fail"]).arg(log),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "log analyze {}: {}", log.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("log analyze --json prints JSON")
}

/// Each value of `v[key]` projected by `f`, as a set (the order two sources list them in may differ).
fn set(v: &Value, key: &str, f: impl Fn(&Value) -> Value) -> BTreeSet<String> {
    v[key].as_array().into_iter().flatten().map(|x| f(x).to_string()).collect()
}

/// What both the live snapshot and the log reader must agree on, each part named for the failure message.
fn facts(v: &Value, decisions_of_rank0: bool) -> Vec<(&'static str, String)> {
    let rings = set(v, "rings", |r| {
        let mut n: Vec<String> = r["neighbours"].as_array().unwrap().iter().map(Value::to_string).collect();
        n.sort();
        serde_json::json!([r["channel"], r["order"], n])
    });
    let trees = set(v, "trees", |t| serde_json::json!([t["channel"], t["rank"], t["up"], t["down"]]));
    let conns = set(v, "connections", |c| {
        serde_json::json!([c["channel"], c["src"], c["dst"], c["direction"], c["transport"], c["mode"]])
    });
    // NCCL prints each call's choice on rank 0 only (src/enqueue.cc); the live model has every rank's.
    let decisions: BTreeSet<String> = v["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| !decisions_of_rank0 || d["rank"] == 0)
        .map(|d| serde_json::json!([d["coll"], d["bytes"], d["algo"], d["proto"], d["n_channels"]]).to_string())
        .collect();
    vec![
        ("nccl_version", v["nccl_version"].to_string()),
        ("nranks", v["nranks"].to_string()),
        ("channels", v["channels"].to_string()),
        ("rings", format!("{rings:?}")),
        ("trees", format!("{trees:?}")),
        ("connections", format!("{conns:?}")),
        ("decisions", format!("{decisions:?}")),
    ]
}

#[test]
fn a_live_runs_own_log_reads_back_as_its_live_snapshot() {
    let dir = std::env::temp_dir().join(format!("collscope-live-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nccl.log");
    let args = ["demo", "--launch", "threads", "--nranks", "2", "--transport", "socket", "--grad-mib", "1"];
    let (_demo, url) = live::start_with(
        &[&args[..], &["--duration", "300", "--metrics-addr", "127.0.0.1:0"]].concat(),
        &[
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,TUNING,NET"),
            ("NCCL_DEBUG_FILE", log.to_str().unwrap()),
            ("COLLSCOPE_TIMEOUT_S", "60"),
        ],
    );
    // Both sides grow while the demo runs (connections at first use, a decision per new size): read them
    // until they agree, the log first so that it never holds what the snapshot has not seen yet.
    let until = Instant::now() + collscope_testkit::DEADLINE;
    let (mut live, mut read, mut snap) = (vec![], vec![], Value::Null);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
        let Ok(text) = std::fs::read_to_string(&log) else { continue };
        if !text.contains("AllGather: ") {
            continue;
        }
        read = facts(&analyze(&log), false);
        let Some(now) = get(&format!("{url}/api/v1/snapshot")) else { continue };
        live = facts(&now, true);
        snap = now;
        if live == read {
            break;
        }
    }
    for ((what, l), (_, r)) in live.iter().zip(&read) {
        assert_eq!(l, r, "{what}: the live snapshot (left) and its log read back (right) differ");
    }
    assert!(!live.is_empty(), "the demo's log never held a call");
    let empty = |what: &str| live.iter().any(|(w, v)| *w == what && (v == "{}" || v == "null"));
    for what in ["nccl_version", "rings", "trees", "connections", "decisions"] {
        assert!(!empty(what), "{what} is empty: {live:?}");
    }
    // What only the live side has: the host's tuning table, its topology and the graphs it prices.
    for what in ["tuning", "topology", "graphs"] {
        assert!(
            snap[what].as_object().is_some_and(|o| !o.is_empty())
                || snap[what].as_array().is_some_and(|a| !a.is_empty()),
            "{what}: {}",
            snap[what]
        );
    }
    assert_eq!(snap["network"], "Socket");
    let _ = std::fs::remove_dir_all(&dir);
}
