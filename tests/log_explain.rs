//! End-to-end tests of `collscope log explain` (and the what-if of `topo explain`), running the built binary
//! on logs that `topo explain --log` writes in NCCL's format, edited where a test needs a difference.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn collscope(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args).env_remove("NCCL_TOPO_FILE").env_remove("NCCL_DEBUG").env_remove("NCCL_DEBUG_SUBSYS");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NCCL_")) {
        cmd.env_remove(k);
    }
    collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE)
}

fn ok(args: &[&str]) -> String {
    let out = collscope(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).unwrap()
}

/// The NCCL INFO log of a modelled communicator (system, graphs, channels, tuning table, per-call lines).
fn model_log(dir: &Path, preset: &str, nodes: u32) -> std::path::PathBuf {
    let nodes = nodes.to_string();
    let log = ok(&["topo", "explain", "--preset", preset, "--nodes", &nodes, "--log", "--sizes", "64K,64M"]);
    assert!(log.contains("=== System") && log.contains("Pattern 4,"), "{log}");
    let path = dir.join(format!("{preset}-{nodes}.log"));
    std::fs::write(&path, log).unwrap();
    path
}

fn mismatches(v: &Value) -> Vec<&Value> {
    v["comparisons"].as_array().unwrap().iter().filter(|c| c["match"] == false).collect()
}

#[test]
fn a_log_of_the_model_is_reproduced_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, nodes, sm) in [("dgx-a100", 2, 80), ("dgx-h100", 1, 90), ("hgx-pcie", 2, 80)] {
        let log = model_log(dir.path(), preset, nodes);
        let v = json(&["log", "explain", log.to_str().unwrap(), "--json"]);
        assert!(mismatches(&v).is_empty(), "{preset}: {:?}", mismatches(&v));
        assert_eq!(v["match_ratio"], 1.0, "{preset}");
        assert_eq!((v["machine"]["nodes"].as_u64(), v["machine"]["sm"].as_u64()), (Some(nodes.into()), Some(sm)));
        let kinds: Vec<&str> = v["comparisons"].as_array().unwrap().iter().filter_map(|c| c["kind"].as_str()).collect();
        for kind in ["graph", "channels", "tuning", "decision"] {
            assert!(kinds.contains(&kind), "{preset}: no {kind} compared");
        }
        assert_eq!(v["paths"]["matched"], v["paths"]["compared"], "{preset}: {}", v["paths"]);
        assert!(v["model"]["graphs"].as_array().is_some_and(|g| !g.is_empty()));
    }
}

#[test]
fn differences_carry_their_cause() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::read_to_string(model_log(dir.path(), "dgx-a100", 2)).unwrap();
    // An older NCCL that found 6 ring channels.
    let old = log
        .replace("NCCL version 2.28.9", "NCCL version 2.18.3")
        .replace("Pattern 4, crossNic 0, nChannels 8,", "Pattern 4, crossNic 0, nChannels 6,");
    let path = dir.path().join("old.log");
    std::fs::write(&path, old).unwrap();
    let v = json(&["log", "explain", path.to_str().unwrap(), "--json"]);
    let bad = mismatches(&v);
    let ring = bad.iter().find(|c| c["field"] == "Ring nChannels").expect("the ring's channel count differs");
    assert_eq!((ring["log"].as_str(), ring["model"].as_str()), (Some("6"), Some("8")));
    // The model ran 2.18.3's constants and still differs: the version is a hint, not a verified cause.
    assert!(ring.get("cause").is_none() && ring["hint"].as_str().unwrap().contains("NCCL 2.18.3"), "{ring}");
    assert!(v["match_ratio"].as_f64().unwrap() < 1.0);
    assert!(v["explained_ratio"].as_f64().unwrap() < 1.0);
    // The model ran the log's release: 2.18.3's constants, said in the notes.
    let notes = v["notes"].to_string();
    assert!(notes.contains("the model ran NCCL 2.18.3's constants (SM90 NVLink 20 GB/s"), "{notes}");
    assert!(notes.contains("MAXCHANNELS 32"), "{notes}");
    let v = json(&["log", "explain", path.to_str().unwrap(), "--nccl-version", "2.28.9", "--json"]);
    assert!(!v["notes"].to_string().contains("the model ran"), "{}", v["notes"]);
    let out = collscope(&["log", "explain", path.to_str().unwrap(), "--nccl-version", "2.18.x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected a version like 2.18.3"));

    // The same version with a channel count the model does not predict: a difference without a cause.
    let same = log.replace("Pattern 4, crossNic 0, nChannels 8,", "Pattern 4, crossNic 0, nChannels 6,");
    std::fs::write(&path, same).unwrap();
    let v = json(&["log", "explain", path.to_str().unwrap(), "--json"]);
    let ring = mismatches(&v).into_iter().find(|c| c["field"] == "Ring nChannels").unwrap().clone();
    assert!(ring.get("cause").is_none(), "{ring}");
    assert!(v["explained_ratio"].as_f64().unwrap() < 1.0);

    // Without the system print there is no machine, unless --topo-file gives it.
    let printed_system = |l: &&str| {
        let body = l.split_once("NCCL INFO ").map_or("", |(_, b)| b);
        ["=== System", "=====", "CPU/", "GPU/", "NET/"].iter().any(|p| body.starts_with(p))
            || body.trim_start().starts_with('+')
    };
    let graphs_only = log.lines().filter(|l| !printed_system(l)).collect::<Vec<_>>().join("\n");
    std::fs::write(&path, &graphs_only).unwrap();
    let v = json(&["log", "explain", path.to_str().unwrap(), "--json"]);
    assert!(v["match_ratio"].is_null() && v["explained_ratio"].is_null(), "{}", v["notes"]);
    assert!(v["notes"].to_string().contains("prints no machine"), "{}", v["notes"]);
    let xml = dir.path().join("dgx-a100.xml");
    ok(&["topo", "dump", "--preset", "dgx-a100", "-o", xml.to_str().unwrap()]);
    let v = json(&["log", "explain", path.to_str().unwrap(), "--topo-file", xml.to_str().unwrap(), "--json"]);
    // NCCL 2.28 names a channel's GPUs by PCI id; without the print their ranks are unknown: the orders are
    // not compared, and said so.
    assert!(mismatches(&v).is_empty(), "{:?}", mismatches(&v));
    assert!(v["not_compared"].to_string().contains("without their ranks"), "{}", v["not_compared"]);
    assert_eq!(v["explained_ratio"], 1.0);
}

#[test]
fn what_if_from_a_log_and_from_topo_explain() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log(dir.path(), "dgx-a100", 2);
    let v = json(&["log", "explain", log.to_str().unwrap(), "--nics", "2", "--sizes", "64M", "--json"]);
    let rows = v["what_if"]["rows"].as_array().unwrap();
    let ar = rows.iter().find(|r| r["coll"] == "AllReduce").unwrap();
    assert!(ar["speedup"].as_f64().unwrap() < 1.0, "fewer NICs, slower: {ar}");
    let text = ok(&["log", "explain", log.to_str().unwrap(), "--set", "NCCL_ALGO=tree"]);
    assert!(text.contains("What if: NCCL_ALGO=tree"), "{text}");
    assert!(text.contains("your 64 MB AllReduce would be predicted at"), "{text}");

    let text = ok(&["topo", "explain", "--preset", "hgx-pcie", "--nodes", "2", "--gdr", "off", "--sizes", "1G"]);
    assert!(text.contains("What if: GPUDirect RDMA off"), "{text}");
    let v = json(&["topo", "explain", "--preset", "dgx-h100", "--p2p", "off", "--sizes", "1G", "--json"]);
    assert!(v["graphs"].is_array() && v["what_if"]["edits"][0]["p2p"] == false, "{}", v["what_if"]);
}

#[test]
fn bad_what_if_flags_are_named() {
    for (args, want) in [
        (&["topo", "explain", "--preset", "dgx-a100", "--set", "ALGO"][..], "expected VAR=VALUE"),
        (&["topo", "explain", "--preset", "dgx-a100", "--set", "PATH=/"][..], "not an NCCL variable"),
        (&["topo", "explain", "--preset", "dgx-a100", "--gdr", "maybe"][..], "expected on or off"),
    ] {
        let out = collscope(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
}

/// Real NCCL logs that print graphs: fields are compared, and a cause is counted only where one verified.
#[test]
fn real_logs_with_graphs() {
    let Some(dir) = collscope_testkit::fixtures("real logs for log explain") else { return };
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") || !std::fs::read_to_string(&path).unwrap().contains("Pattern ")
        {
            continue;
        }
        seen += 1;
        let v = json(&["log", "explain", path.to_str().unwrap(), "--json"]);
        if v["comparisons"].as_array().is_some_and(|c| c.is_empty()) {
            // No machine printed: nothing compared, said, and no ratio claimed.
            assert!(v["not_compared"].as_array().is_some_and(|n| !n.is_empty()), "{}", path.display());
            assert!(v["match_ratio"].is_null() && v["explained_ratio"].is_null(), "{}", path.display());
            continue;
        }
        let (m, e) = (v["match_ratio"].as_f64().unwrap(), v["explained_ratio"].as_f64().unwrap());
        assert!(m <= e && e <= 1.0, "{}: {m} {e}", path.display());
        let caused = v["comparisons"].as_array().unwrap().iter().filter(|c| c.get("cause").is_some()).count();
        let total = v["comparisons"].as_array().unwrap().len() as f64;
        assert!((e - m - caused as f64 / total).abs() < 1e-9, "{}", path.display());
    }
    assert!(seen > 0, "no fixture prints a graph");
}

/// The log reader's 2x2 fixture prints GPU-NIC paths as PXB through one PCIe switch, where NCCL computes PIX
/// from the links it prints: the graphs then differ, and hint why (no re-run can verify a fact the print lacks).
#[test]
fn printed_paths_unlike_the_links_are_the_named_hint() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("logreader/tests/data/init_2x2_2.28.log");
    let v = json(&["log", "explain", log.to_str().unwrap(), "--json"]);
    assert_eq!((v["machine"]["nodes"].as_u64(), v["machine"]["sm"].as_u64()), (Some(2), Some(80)));
    assert!(v["paths"]["matched"].as_u64() < v["paths"]["compared"].as_u64(), "{}", v["paths"]);
    let bad = mismatches(&v);
    let ring = bad.iter().find(|c| c["field"] == "Ring type inter").expect("PXB against PIX");
    assert!(ring["hint"].as_str().unwrap().contains("printed paths differ"), "{ring}");
    let collnet = bad.iter().find(|c| c["field"] == "Tree graph").expect("the CollNet chain graph");
    assert!(collnet["hint"].as_str().unwrap().contains("CollNet"), "{collnet}");
    assert!(v["explained_ratio"].as_f64().unwrap() < 1.0);
}

/// `log` with the line NCCL prints for each rank's communicator (`nNodes` included) after its version line.
fn with_comm_line(log: &Path, nnodes: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let comm = format!(
        "vm:20100:20100 [0] NCCL INFO comm 0x6426550 rank 0 nRanks 8 nNodes {nnodes} localRanks 8 localRank 0 MNNVL 0"
    );
    lines.insert(1, &comm);
    lines.join("\n") + "\n"
}

#[test]
fn a_node_count_past_the_models_bound_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = model_log(dir.path(), "dgx-h100", 1);
    // 4294967295 aborted on a 343 GB allocation; 3000000 took 24 GB before it was killed.
    for n in ["4294967295", "3000000", "2049"] {
        let log = dir.path().join(format!("n{n}.log"));
        std::fs::write(&log, with_comm_line(&base, n)).unwrap();
        let out = collscope(&["log", "explain", log.to_str().unwrap()]);
        assert!(!out.status.success(), "nNodes {n} was modelled");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("the log's nNodes {n}")) && err.contains("at most 2048 nodes"), "{err}");
    }
    let log = dir.path().join("n2.log");
    std::fs::write(&log, with_comm_line(&base, "2")).unwrap();
    assert_eq!(json(&["log", "explain", log.to_str().unwrap(), "--json"])["machine"]["nodes"], 2);
}

/// A `=== System` print of one CPU with `gpus` GPUs behind their own PCI switches, on one NVSwitch.
fn system_print(gpus: usize) -> String {
    let p = "vm:20100:20100 [0] NCCL INFO ";
    let mut s =
        format!("{p}NCCL version 2.28.9+cuda12.2\n{p}=== System : maxBw 370.8 totalBw 370.8 ===\n{p}CPU/0-0 (1/1/3)\n");
    for g in 0..gpus {
        let bus = 0x10000 + g * 0x100;
        s += &format!("{p}+ PCI[48.0] - PCI/0-{bus:x} (1000c03000000000)\n");
        s += &format!("{p}              + PCI[48.0] - GPU/0-{:x} ({g})\n", bus + 0x10);
        s += &format!("{p}                            + NVL[370.8] - NVS/0-0\n");
    }
    s + &format!("{p}==========================================\n")
}

#[test]
fn a_system_print_past_nccls_node_limit_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // 2,500 GPUs took 118 s and 1.63 GB before this limit.
    let log = dir.path().join("big.log");
    std::fs::write(&log, system_print(2500)).unwrap();
    let out = collscope(&["log", "explain", log.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2500 GPU nodes") && err.contains("limit of 576 (NCCL_TOPO_MAX_NODES"), "{err}");
    let log = dir.path().join("small.log");
    std::fs::write(&log, system_print(16)).unwrap();
    assert_eq!(json(&["log", "explain", log.to_str().unwrap(), "--json"])["machine"]["gpus_per_node"], 16);
}
