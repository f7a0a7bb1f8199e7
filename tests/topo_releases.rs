//! `collscope topo explain` with `--nccl-version` and `--vs`: the per-release rules end to end, each test citing
//! the NVIDIA/nccl tag it follows.

use std::process::{Command, Output};
use std::time::Duration;

fn explain(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["topo", "explain"]).args(args).env_remove("NCCL_ALGO").env_remove("NCCL_PROTO").env_remove("NCCL_DEBUG");
    collscope_testkit::output(&mut cmd, Duration::from_secs(120))
}

fn stdout(args: &[&str]) -> String {
    let out = explain(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// (algo, proto) of the AllReduce decision in `--json` output (one size asked).
fn allreduce_pick(args: &[&str]) -> (String, String) {
    let mut a = args.to_vec();
    a.push("--json");
    let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let d = v["decisions"].as_array().unwrap().iter().find(|d| d["coll"] == "AllReduce").unwrap();
    (d["algo"].as_str().unwrap().into(), d["proto"].as_str().unwrap().into())
}

#[test]
fn dgx_a100_at_2_19_4_picks_ring_ll128_for_1536k() {
    // v2.19.4-1 src/graph/tuning.cc: Ring/LL gets a quarter of the bus bandwidth for AllReduce, so a 1.5 MB
    // AllReduce on a DGX A100 runs Ring/LL128; from v2.21.5-1 (half) Ring/LL.
    let args = ["--preset", "dgx-a100", "--sizes", "1536K"];
    let at = |v: &str| allreduce_pick(&[&args[..], &["--nccl-version", v]].concat());
    assert_eq!(at("2.19.4"), ("Ring".into(), "LL128".into()));
    assert_eq!(at("2.28.9"), ("Ring".into(), "LL".into()));
}

#[test]
fn vs_prints_what_an_upgrade_changes() {
    // From 2.28.9 to 2.18.1 on two DGX H100s: NVLSTree over NET 19 us (v2.18.1-1) against 20.9 (v2.28.9-1),
    // PAT absent (v2.23.4-1), NVLS's older ratio; each call's choice and time on both sides.
    let out = stdout(&["--preset", "dgx-h100", "--nodes", "2", "--sizes", "64K,1G", "--vs", "2.18.1"]);
    assert!(out.contains("From NCCL 2.28.9 to NCCL 2.18.1"), "{out}");
    assert!(out.contains("2.18.1: NCCL 2.18.1's constants ("), "{out}");
    assert!(out.contains("tuning tables and rules of NCCL 2.18.1"), "{out}");
    let rows = out.lines().filter(|l| l.trim_start().starts_with("AllReduce") && l.contains(" us ")).count();
    assert_eq!(rows, 2, "{out}");
    // The JSON carries the same report.
    let v: serde_json::Value = serde_json::from_str(&stdout(&[
        "--preset", "dgx-h100", "--nodes", "2", "--sizes", "64K,1G", "--vs", "2.18.1", "--json",
    ]))
    .unwrap();
    assert_eq!((v["upgrade"]["from"].as_str(), v["upgrade"]["to"].as_str()), (Some("2.28.9"), Some("2.18.1")));
    assert_eq!(v["upgrade"]["rows"].as_array().unwrap().len(), 10);
    assert!(v.get("what_if").is_none());
}

#[test]
fn one_rank_copies() {
    // NCCL 2.28.9 src/enqueue.cc: a one-rank communicator's calls go to ncclLaunchOneRank.
    let out = stdout(&["--preset", "dgx-a100", "--nranks-per-node", "1", "--sizes", "1M"]);
    assert!(out.contains("one rank: NCCL runs no algorithm; each call copies its buffer"), "{out}");
    assert!(!out.contains("Ring/Simple"), "{out}");
}
