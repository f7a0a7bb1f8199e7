//! `collscope log explain` on logs that print no machine (replayed from their graphs with `--preset`), causes
//! that hold only where a re-run shows them, and what-ifs that say what they changed and why.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn collscope(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args);
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

/// `topo explain --log` of `nodes` copies of the machine (`--preset NAME` or `--topo-file FILE`).
fn model_log(dir: &Path, source: &[&str], nodes: u32, name: &str) -> PathBuf {
    let nodes = nodes.to_string();
    let mut args = vec!["topo", "explain", "--nodes", &nodes, "--log", "--sizes", "64K,64M"];
    args.extend_from_slice(source);
    let log = ok(&args);
    let path = dir.join(name);
    std::fs::write(&path, log).unwrap();
    path
}

/// The log without its `=== System` print, as most real logs are.
fn without_system(log: &Path) -> PathBuf {
    let text = std::fs::read_to_string(log).unwrap();
    let printed_system = |l: &&str| {
        let body = l.split_once("NCCL INFO ").map_or("", |(_, b)| b);
        ["=== System", "=====", "CPU/", "GPU/", "NET/", "NVS/"].iter().any(|p| body.starts_with(p))
            || body.trim_start().starts_with('+')
    };
    let kept = text.lines().filter(|l| !printed_system(l)).collect::<Vec<_>>().join("\n");
    assert!(!kept.contains("=== System") && kept.contains("Pattern 4,"), "{kept}");
    let path = log.with_extension("graphs.log");
    std::fs::write(&path, kept + "\n").unwrap();
    path
}

fn fields<'a>(v: &'a Value, kind: &str) -> Vec<&'a Value> {
    v["comparisons"].as_array().unwrap().iter().filter(|c| c["kind"] == kind).collect()
}

#[test]
fn graphs_without_a_system_print_are_replayed_on_a_preset() {
    let dir = tempfile::tempdir().unwrap();
    let log = without_system(&model_log(dir.path(), &["--preset", "dgx-a100"], 2, "a100.log"));
    let log = log.to_str().unwrap();

    // No machine: nothing is compared, and the summary claims no match.
    let v = json(&["log", "explain", log, "--json"]);
    assert!(v["comparisons"].as_array().unwrap().is_empty());
    assert!(v["match_ratio"].is_null() && v["explained_ratio"].is_null(), "{v:#}");
    let not = v["not_compared"].to_string();
    assert!(not.contains("graphs") && not.contains("per-call decisions") && not.contains("--preset"), "{not}");
    let text = ok(&["log", "explain", log]);
    assert!(text.contains("Nothing compared") && !text.contains("match or have"), "{text}");

    // With the machine named: graphs, channels, the table and every call compared, all alike.
    let v = json(&["log", "explain", log, "--preset", "dgx-a100", "--nodes", "2", "--json"]);
    for kind in ["graph", "channels", "tuning", "decision"] {
        let f = fields(&v, kind);
        assert!(!f.is_empty() && f.iter().all(|c| c["match"] == true), "{kind}: {f:?}");
    }
    assert_eq!(v["match_ratio"], 1.0);
    assert_eq!((v["machine"]["nodes"].as_u64(), v["machine"]["source"].as_str()), (Some(2), Some("preset:dgx-a100")));
    let notes = v["notes"].to_string();
    assert!(notes.contains("prints no `=== System`") && notes.contains("log's own Ring"), "{notes}");
    // NCCL 2.28 names a channel's GPUs by PCI id: their order is not compared, and said so.
    assert!(v["not_compared"].to_string().contains("Ring channel orders"), "{}", v["not_compared"]);
}

#[test]
fn the_node_count_comes_from_the_tuning_table_where_the_log_does_not_print_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = without_system(&model_log(dir.path(), &["--preset", "dgx-a100"], 2, "a100.log"));
    // Keep the graphs and the table; drop what names the ranks (rings, trees, connections, calls).
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            ![
                "Channel ",
                "Ring ",
                "Tree ",
                " via ",
                "Connected",
                "AllReduce:",
                "AllGather:",
                "ReduceScatter:",
                "Broadcast:",
                "Reduce:",
            ]
            .iter()
            .any(|p| l.contains(p))
        })
        .collect();
    std::fs::write(&log, kept.join("\n") + "\n").unwrap();
    let v = json(&["log", "explain", log.to_str().unwrap(), "--preset", "dgx-a100", "--json"]);
    assert_eq!(v["machine"]["nodes"], 2, "{}", v["notes"]);
    assert!(v["notes"].to_string().contains("2 from the tuning table"), "{}", v["notes"]);
    assert!(fields(&v, "tuning").iter().all(|c| c["match"] == true));
}

#[test]
fn a_cause_is_given_only_where_a_re_run_removes_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    // PCIe GPUs print no NVLink bandwidth, so the print does not name their compute capability: SM90 GPUs
    // read as the SM80 assumed.
    let xml = dir.path().join("h100-pcie.xml");
    ok(&["topo", "dump", "--preset", "hgx-pcie", "-o", xml.to_str().unwrap()]);
    let text = std::fs::read_to_string(&xml).unwrap().replace("sm=\"80\"", "sm=\"90\"");
    std::fs::write(&xml, text).unwrap();
    let log = model_log(dir.path(), &["--topo-file", xml.to_str().unwrap()], 1, "h100.log");
    let v = json(&["log", "explain", log.to_str().unwrap(), "--json"]);
    let bad: Vec<&Value> = v["comparisons"].as_array().unwrap().iter().filter(|c| c["match"] == false).collect();
    assert!(!bad.is_empty() && v["match_ratio"].as_f64().unwrap() < 1.0);
    // Re-run with SM90, the model gives the log's values: a verified cause for each.
    assert!(bad.iter().all(|c| c["cause"].as_str().is_some_and(|c| c.contains("with SM90 (--sm 90)"))), "{bad:?}");
    assert_eq!(v["explained_ratio"], 1.0);

    // A 2.29.7 log with a table cell nothing in the model gives: the version is only a hint.
    let text = std::fs::read_to_string(model_log(dir.path(), &["--preset", "dgx-a100"], 1, "a100.log")).unwrap();
    // The table's first AllReduce cell (Tree/LL) as no generation, node count or version prints it.
    let row = text.lines().find(|l| l.contains(" AllReduce |")).expect("the table's AllReduce row");
    let (head, cells) = row.split_once(" AllReduce |").unwrap();
    let mut cells: Vec<String> = cells.split('|').map(String::from).collect();
    cells[0] = format!("{:8.1}/{:6.1} ", 99.9, 1.2);
    let edited = format!("{head} AllReduce |{}", cells.join("|"));
    let old = text.replace("NCCL version 2.28.9", "NCCL version 2.29.7").replace(row, &edited);
    let path = dir.path().join("old.log");
    std::fs::write(&path, old).unwrap();
    let v = json(&["log", "explain", path.to_str().unwrap(), "--json"]);
    let bad: Vec<&Value> = v["comparisons"].as_array().unwrap().iter().filter(|c| c["match"] == false).collect();
    assert!(!bad.is_empty(), "{}", v["comparisons"]);
    assert!(bad.iter().all(|c| c.get("cause").is_none() && c["hint"].as_str().unwrap().contains("2.29.7")), "{bad:?}");
    assert!(v["explained_ratio"].as_f64().unwrap() < 1.0);
    assert_eq!(v["explained_ratio"], v["match_ratio"]);
}

#[test]
fn nics_says_which_it_kept_and_why() {
    let dir = tempfile::tempdir().unwrap();
    // One 25 Gb/s NIC beside GPUs 0-1 and one 200 Gb/s NIC beside GPUs 2-3.
    let xml = dir.path().join("mixed.xml");
    ok(&["topo", "dump", "--preset", "hgx-pcie", "-o", xml.to_str().unwrap()]);
    let text = std::fs::read_to_string(&xml).unwrap();
    let slow = text.replacen("speed=\"200000\"", "speed=\"25000\"", 1);
    std::fs::write(&xml, slow).unwrap();
    let x = xml.to_str().unwrap();
    let out = ok(&["topo", "explain", "--topo-file", x, "--nodes", "2", "--nics", "1", "--sizes", "1G"]);
    let kept = out.lines().find(|l| l.contains("NICs: 1 of 2 per node removed")).unwrap_or_else(|| panic!("{out}"));
    assert!(kept.contains("ncclTopoSelectNets"), "{kept}");
    assert!(kept.contains("kept NET/1 mlx5_1 (200 Gb/s)") && kept.contains("removed NET/0 mlx5_0 (25 Gb/s)"), "{kept}");
    // Removing NICs says so, on a preset of 8.
    let out = ok(&["topo", "explain", "--preset", "dgx-a100", "--nodes", "2", "--nics", "4", "--sizes", "1G"]);
    assert!(out.contains("NICs: 4 of 8 per node removed"), "{out}");
    assert!(out.contains("graphs changed") && out.contains("a 1 GB AllReduce"), "{out}");
}

#[test]
fn gdr_says_nccls_model_has_no_gdr_term_and_nic_speed_changes_the_network() {
    let out = ok(&["topo", "explain", "--preset", "dgx-a100", "--nodes", "2", "--gdr", "off", "--sizes", "1G"]);
    assert!(out.contains("has no GPUDirect RDMA term"), "{out}");
    let v = json(&[
        "topo",
        "explain",
        "--preset",
        "dgx-a100",
        "--nodes",
        "2",
        "--nic-speed",
        "100",
        "--sizes",
        "1G",
        "--json",
    ]);
    let w = &v["what_if"];
    assert!(w["notes"].to_string().contains("set to 100 Gb/s (12.5 GB/s"), "{}", w["notes"]);
    let ar = w["rows"].as_array().unwrap().iter().find(|r| r["coll"] == "AllReduce").unwrap();
    assert!(ar["speedup"].as_f64().unwrap() < 1.0, "half the NIC speed, slower: {ar}");
    let out = collscope(&["topo", "explain", "--preset", "dgx-a100", "--nic-speed", "0"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--nic-speed 0"));
}

#[test]
fn a_what_if_on_a_log_keeps_to_the_calls_it_printed() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log(dir.path(), &["--preset", "dgx-a100"], 2, "a100.log");
    let log = log.to_str().unwrap();
    let v = json(&["log", "explain", log, "--nics", "2", "--json"]);
    let rows = v["what_if"]["rows"].as_array().unwrap();
    // The log's calls: 64K and 64M per collective (AllGather and ReduceScatter over 16 ranks).
    assert!(!rows.is_empty() && rows.iter().all(|r| r["bytes"] == 65536 || r["bytes"] == 64 << 20), "{rows:?}");
    let text = ok(&["log", "explain", log, "--nics", "2"]);
    assert!(text.contains("your 64 MB AllReduce"), "{text}");
    let text = ok(&["log", "explain", log, "--nics", "2", "--sizes", "1G"]);
    assert!(text.contains("a 1 GB AllReduce") && !text.contains("your"), "{text}");
}
