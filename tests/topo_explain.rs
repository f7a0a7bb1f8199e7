//! `collscope topo explain` end to end on the shipped presets: the worked numbers of issue 3, checked against
//! NCCL 2.28.9's formulas (see `core/nccl/src/tuning/tests.rs` for where reference text 000 slips).

use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

fn explain(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["topo", "explain"]).args(args).env_remove("NCCL_ALGO").env_remove("NCCL_PROTO").env_remove("NCCL_DEBUG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    collscope_testkit::output(&mut cmd, Duration::from_secs(60))
}

fn json(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = explain(&a, env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn cell(v: &Value, coll: &str, algo: &str, proto: &str) -> (String, String) {
    let c = &v["tuning"][coll][algo][proto];
    (format!("{:.1}", c["lat_us"].as_f64().unwrap()), format!("{:.1}", c["bw_gbps"].as_f64().unwrap()))
}

/// (algo, proto) chosen for `coll` at `bytes`.
fn pick(v: &Value, coll: &str, bytes: u64) -> (String, String) {
    let d = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["coll"] == coll && d["bytes"] == bytes)
        .unwrap_or_else(|| panic!("no decision for {coll} {bytes}"));
    (d["algo"].as_str().unwrap().to_string(), d["proto"].as_str().unwrap().to_string())
}

#[test]
fn dgx_a100_one_node() {
    let v = json(&["--preset", "dgx-a100", "--sizes", "8,1G"], &[]);
    let ring = &v["graphs"][0];
    assert_eq!(ring["pattern"], "ring");
    assert_eq!((ring["n_channels"].as_u64(), ring["bw_intra"].as_f64()), (Some(12), Some(20.0)));
    assert_eq!((ring["type_intra"].as_str(), ring["type_inter"].as_str()), (Some("NVL"), Some("PIX")));
    assert_eq!(v["channels"]["coll"], 24);
    for (algo, proto, lat, bw) in [
        ("Tree", "LL", "15.2", "29.1"),
        ("Tree", "LL128", "31.5", "85.9"),
        ("Tree", "Simple", "64.4", "110.4"),
        ("Ring", "LL", "15.0", "50.1"),
        ("Ring", "LL128", "40.6", "126.2"),
        ("Ring", "Simple", "56.0", "137.1"),
    ] {
        assert_eq!(cell(&v, "AllReduce", algo, proto), (lat.into(), bw.into()), "{algo}/{proto}");
    }
    assert_eq!(pick(&v, "AllReduce", 8), ("Ring".into(), "LL".into()));
    assert_eq!(pick(&v, "AllReduce", 1 << 30), ("Ring".into(), "Simple".into()));
    let d = &v["decisions"][0];
    for key in ["coll", "bytes", "algo", "proto", "n_channels", "time_us", "runner_up", "reason"] {
        assert!(d.get(key).is_some(), "decision lacks {key}");
    }
    assert_eq!(v["decisions"].as_array().unwrap().len(), 10, "5 collectives x 2 sizes");
    assert_eq!(v["rings"].as_array().unwrap().len(), 24);
}

#[test]
fn dgx_a100_two_nodes_amd() {
    let v = json(&["--preset", "dgx-a100", "--nodes", "2", "--sizes", "1M"], &[]);
    assert_eq!(cell(&v, "AllReduce", "Ring", "Simple").0, "204.4");
    assert_eq!(cell(&v, "AllReduce", "Ring", "LL").0, "68.0");
    assert_eq!(cell(&v, "AllReduce", "Tree", "Simple").0, "92.4");
    // Rings cross nodes: every channel visits all 16 ranks.
    let order = v["rings"][0]["order"].as_array().unwrap();
    assert_eq!(order.len(), 16);
}

#[test]
fn dgx_h100_one_node_nvls_for_large_ll_for_small() {
    let v = json(&["--preset", "dgx-h100", "--sizes", "8,64K,256K,16M,1G"], &[]);
    for bytes in [8, 64 << 10, 256 << 10] {
        assert_eq!(pick(&v, "AllReduce", bytes).1, "LL", "{bytes} B");
    }
    for bytes in [16 << 20, 1 << 30] {
        assert_eq!(pick(&v, "AllReduce", bytes), ("NVLS".into(), "Simple".into()), "{bytes} B");
    }
}

#[test]
fn dgx_h100_32_nodes_trees_up_to_hundreds_of_mb() {
    let v = json(&["--preset", "dgx-h100", "--nodes", "32", "--sizes", "8:512M"], &[]);
    // Tree (LL/LL128) for small messages, then NVLSTree (NVLS inside the node, a tree across nodes), which
    // NCCL 2.28.9 enables across nodes without CollNet: never the 510-step ring below 1 GB.
    for d in v["decisions"].as_array().unwrap().iter().filter(|d| d["coll"] == "AllReduce") {
        let algo = d["algo"].as_str().unwrap();
        assert!(algo == "Tree" || algo == "NVLSTree", "{} B -> {algo}", d["bytes"]);
    }
    assert_eq!(pick(&v, "AllReduce", 1 << 20).0, "Tree");
}

#[test]
fn hgx_pcie_shows_why_ll128_is_off() {
    let out = explain(&["--preset", "hgx-pcie", "--sizes", "1M"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let line = text.lines().find(|l| l.trim_start().starts_with("Ring") && l.contains("LL128")).expect("LL128 line");
    assert!(line.contains("LL128 disabled: intra-node path type") && line.contains("beyond NVB"), "{line}");
    let v = json(&["--preset", "hgx-pcie", "--sizes", "1M"], &[]);
    assert!(v["tuning"]["AllReduce"]["Ring"].get("LL128").is_none());
    assert!(v["disabled"]["AllReduce"]["Ring"]["LL128"][0].as_str().unwrap().contains("LL128 disabled"));
}

/// Each decision shows busbw beside algbw, by nccl-tests' factors for the 8 ranks: AllReduce 2(n-1)/n = 1.75,
/// AllGather and ReduceScatter (n-1)/n = 0.875, Broadcast and Reduce 1.
#[test]
fn decisions_show_busbw_beside_algbw() {
    let out = explain(&["--preset", "dgx-a100", "--sizes", "1G"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let header = text.lines().find(|l| l.contains("algo/proto")).expect("the decisions' header");
    assert!(header.contains("algbw GB/s  busbw GB/s"), "{header}");
    let mut seen = 0;
    for (coll, factor) in
        [("AllReduce", 1.75), ("AllGather", 0.875), ("ReduceScatter", 0.875), ("Broadcast", 1.0), ("Reduce", 1.0)]
    {
        let at = text.lines().position(|l| l.trim() == coll).unwrap_or_else(|| panic!("{coll} in {text}"));
        let row = text.lines().nth(at + 2).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        // size (2 words), algo/proto, ch, time, algbw, busbw
        let (algbw, busbw): (f64, f64) = (cols[5].parse().unwrap(), cols[6].parse().unwrap());
        assert!(algbw > 1.0 && (busbw - algbw * factor).abs() < 0.01, "{coll}: {row}");
        seen += 1;
    }
    assert_eq!(seen, 5);
}

#[test]
fn forcing_ring_on_nvswitch_costs_bandwidth() {
    let v = json(&["--preset", "dgx-h100", "--sizes", "64K,1G"], &[("NCCL_ALGO", "ring")]);
    let f = v["forcing"].as_array().unwrap();
    let big = f.iter().find(|f| f["coll"] == "AllReduce" && f["bytes"] == 1u64 << 30).unwrap();
    assert_eq!(big["default"]["algo"], "NVLS");
    assert_eq!(big["forced"]["algo"], "Ring");
    assert!(big["slowdown"].as_f64().unwrap() > 1.2, "{big}");
    let small = f.iter().find(|f| f["coll"] == "AllReduce" && f["bytes"] == 64 << 10).unwrap();
    assert_eq!(small["slowdown"].as_f64(), Some(1.0), "small calls were Ring anyway");
    let text =
        String::from_utf8_lossy(&explain(&["--preset", "dgx-h100", "--sizes", "1G"], &[("NCCL_ALGO", "ring")]).stdout)
            .to_string();
    assert!(text.contains("What NCCL_ALGO=ring costs against NCCL's default"), "{text}");
}

#[test]
fn log_mode_prints_nccl_lines() {
    let out = explain(&["--preset", "dgx-a100", "--sizes", "1M", "--log"], &[("NCCL_PROTO", "^LL128")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for want in [
        "NCCL INFO NCCL version 2.28.9",
        "NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1",
        "NCCL INFO   Algorithm   |",
        "NCCL INFO     AllReduce |    15.2/  29.1 |    31.5/   0.0 |    64.4/ 110.4 |",
        "NCCL INFO Enabled NCCL Func/Proto/Algo Matrix:",
        "NCCL INFO threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
        "NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL channel{Lo..Hi}=",
        "NCCL INFO 24 coll channels",
    ] {
        assert!(text.contains(want), "missing {want:?}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, env, want) in [
        (vec!["--preset", "dgx-a100"], vec![("NCCL_ALGO", "rnig")], "Unrecognized element token \"rnig\""),
        (vec!["--preset", "dgx-a100"], vec![("NCCL_PROTO", "allreduce:LL;broadcst:LL")], "\"broadcst\""),
        (vec!["--preset", "dgx-a100", "--sizes", "4Q"], vec![], "'4Q'"),
        (vec!["--preset", "dgx-a200"], vec![], "dgx-a200"),
        (vec!["--preset", "cpu-host"], vec![], "no GPU"),
        (vec!["--preset", "dgx-a100", "--nranks-per-node", "9"], vec![], "--nranks-per-node 9"),
        // Refused before any per-node work (it took 22 GB and 120 s when it was not).
        (vec!["--preset", "dgx-h100", "--nodes", "1000000"], vec![], "--nodes 1000000: expected 1 to 2048"),
        (vec!["--preset", "dgx-h100", "--nodes", "0"], vec![], "--nodes 0: expected 1 to 2048"),
    ] {
        let out = explain(&args, &env);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?} {env:?}: {err}");
    }
    let out = explain(&["--preset", "dgx-a100", "--sizes", "1M"], &[("NCCL_ALGO", "NVLS")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no algorithm/protocol available for function AllReduce"), "{text}");
}

/// The rings and trees part of the text report: from its "Rings" heading to the tuning table.
fn rings_and_trees(text: &str) -> Vec<&str> {
    text.lines().skip_while(|l| !l.starts_with("Rings")).take_while(|l| !l.starts_with("Tuning table")).collect()
}

#[test]
fn big_jobs_get_rings_and_trees_per_node_and_every_rank_with_full() {
    let args = ["--preset", "dgx-h100", "--nodes", "32", "--sizes", "1M"];
    let v = json(&args, &[]);
    let out = explain(&args, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let part = rings_and_trees(&text);
    // 16 channels of 256 ranks: 31 lines of at most 110 characters (the full rings were 920 characters wide).
    assert!(part.len() < 60 && part.iter().all(|l| l.len() <= 110), "{}", part.join("\n"));
    // Tree channels 0-7 share one tree between nodes: each node's parent node, as the JSON's trees have it.
    let trees = v["trees"].as_array().unwrap();
    let parents: Vec<String> = (0..32u64)
        .map(|n| {
            let up = trees
                .iter()
                .filter(|t| t["channel"] == 0 && t["rank"].as_u64().unwrap() / 8 == n)
                .map(|t| t["up"].as_i64().unwrap())
                .find(|&up| up < 0 || up as u64 / 8 != n)
                .unwrap();
            if up < 0 {
                "-".to_string()
            } else {
                (up / 8).to_string()
            }
        })
        .collect();
    let line = format!("    channels 0-7 : {}", parents.join(" "));
    assert!(part.contains(&line.as_str()), "want {line:?} in\n{}", part.join("\n"));
    // Ring 0 passes nodes 0 to 31 in order; each node's ranks are listed as local ranks.
    assert!(part.iter().any(|l| l.starts_with("  channels 0 8 : nodes 0-31 (in ring order)")), "{}", part.join("\n"));

    let mut full_args = args.to_vec();
    full_args.push("--full");
    let out = explain(&full_args, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let part = rings_and_trees(&text);
    // Every rank of every ring, nodes separated by `|`; every rank's place in every tree, under its node.
    for r in v["rings"].as_array().unwrap() {
        let order: Vec<String> = r["order"].as_array().unwrap().iter().map(|k| k.to_string()).collect();
        let ch = r["channel"].as_u64().unwrap();
        let line = part.iter().find(|l| l.starts_with(&format!("  {ch:02} : "))).unwrap();
        let ranks: Vec<&str> = line.split(" : ").nth(1).unwrap().split(' ').filter(|w| *w != "|").collect();
        assert_eq!(ranks, order, "ring {ch}");
        let ranks: Vec<u64> = r["order"].as_array().unwrap().iter().map(|k| k.as_u64().unwrap()).collect();
        let changes = ranks.windows(2).filter(|w| w[0] / 8 != w[1] / 8).count();
        assert_eq!(line.matches('|').count(), changes, "{line}");
    }
    assert_eq!(part.iter().filter(|l| l.starts_with("  Tree ")).count(), trees.len());
    assert!(part.contains(&"  -- node 31 (ranks 248-255)"));
}

#[test]
fn nccl_version_selects_the_release_constants() {
    // A100: 12 NVLinks at 22 GB/s each before NCCL 2.18.1, 20 from it; MAXCHANNELS 32 before 2.25.1.
    let old = json(&["--preset", "dgx-a100", "--sizes", "1M", "--nccl-version", "2.17.1"], &[]);
    let new = json(&["--preset", "dgx-a100", "--sizes", "1M", "--nccl-version", "2.18.1"], &[]);
    let default = json(&["--preset", "dgx-a100", "--sizes", "1M"], &[]);
    let nvl = |v: &Value| {
        let links = v["topology"][0]["links"].as_array().unwrap();
        links.iter().find(|l| l["kind"] == "NVL").unwrap()["bw"].as_f64().unwrap()
    };
    assert_eq!((nvl(&old), nvl(&new), nvl(&default)), (264.0, 240.0, 240.0));
    // The search's speeds inside a node: 44/30/22 up to 2.17 (v2.17.1-1 src/graph/search.cc), 40/30/20 from
    // 2.18.1: 12 rings at 22 GB/s, then 12 at 20.
    let ring =
        |v: &Value| (v["graphs"][0]["n_channels"].as_u64().unwrap(), v["graphs"][0]["bw_intra"].as_f64().unwrap());
    assert_eq!((ring(&old), ring(&new)), ((12, 22.0), (12, 20.0)));
    assert_eq!(cell(&new, "Broadcast", "Ring", "Simple").1, "240.0");
    assert_eq!((old["nccl_version"].as_str(), default["nccl_version"].as_str()), (Some("2.17.1"), Some("2.28.9")));

    let out = explain(&["--preset", "dgx-a100", "--sizes", "1M", "--nccl-version", "2.17.1"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NCCL 2.17.1's constants (NVLink 22 GB/s per link for SM70/SM80"), "{text}");
    let text = String::from_utf8_lossy(&explain(&["--preset", "dgx-a100", "--sizes", "1M"], &[]).stdout).to_string();
    assert!(!text.contains("'s constants ("), "the default prints no version line: {text}");

    let out = explain(&["--preset", "dgx-a100", "--nccl-version", "2.8.4"], &[]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NCCL 2.8.4 is outside the releases modelled (2.12 to 2.29)"), "{err}");
    for bad in ["2.x", "latest", "2"] {
        let out = explain(&["--preset", "dgx-a100", "--nccl-version", bad], &[]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("'{bad}' is not an NCCL version: expected a version like 2.18.3")), "{err}");
    }
}
