//! `log explain` on prints that are partial, cut, renumbered or not NVIDIA's: it never panics, answers what it
//! can with notes, and says what the machine print shows (issue 51, items 1, 5 and 6). Logs are what
//! `topo explain --log` writes in NCCL's format, edited as real excerpts are.

use collscope_debug::env::Env;
use collscope_logreader::{Options, Reader};
use collscope_model::NodeType;
use collscope_nccl::replay::{self, Context, Facts};
use collscope_nccl::topo::TopoEnv;
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

/// `log explain --json` of `text`, which must exit 0.
fn explain(dir: &Path, name: &str, text: &str, extra: &[&str]) -> Value {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let mut args = vec!["log", "explain", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&args)).unwrap()
}

/// The NCCL INFO log of a modelled communicator, with the per-call lines of `sizes`.
fn model_log(preset: &str, nodes: u32, sizes: &str) -> String {
    let nodes = nodes.to_string();
    let log = ok(&["topo", "explain", "--preset", preset, "--nodes", &nodes, "--log", "--sizes", sizes]);
    assert!(log.contains("=== System") && log.contains("Pattern 4,"), "{log}");
    log
}

fn body(line: &str) -> &str {
    line.split_once("NCCL INFO ").map_or("", |(_, b)| b)
}

/// Every printed GPU's rank (`GPU/0-1b000 (3)` in the tree) moved by `by`.
fn shift_ranks(log: &str, by: i32) -> String {
    let mut out = String::new();
    for line in log.lines() {
        let b = body(line).trim_start();
        let shifted = b.starts_with("+ PCI[") && b.contains("- GPU/") && line.ends_with(')');
        match line.rsplit_once(" (").filter(|_| shifted) {
            Some((head, rank)) => {
                let r: i32 = rank.trim_end_matches(')').parse().unwrap();
                out += &format!("{head} ({})\n", r + by);
            }
            None => out += &format!("{line}\n"),
        }
    }
    out
}

fn mismatches(v: &Value) -> Vec<&Value> {
    v["comparisons"].as_array().unwrap().iter().filter(|c| c["match"] == false).collect()
}

fn notes(v: &Value) -> String {
    v["notes"].to_string()
}

/// A real H200 VM's print named its GPUs by global rank 8-15 (exit 101 in connect before): the machine is
/// renumbered 0-7, said, and the log's graphs compared in that numbering.
#[test]
fn a_print_of_global_ranks_is_renumbered_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let log = shift_ranks(&model_log("dgx-h100", 2, "64K,64M"), 8);
    assert!(log.contains("GPU/0-1b000 (8)"));
    let v = explain(dir.path(), "global.log", &log, &[]);
    assert!(notes(&v).contains("by rank 8 9 10 11 12 13 14 15"), "{}", notes(&v));
    assert!(mismatches(&v).is_empty(), "{:?}", mismatches(&v));
    assert_eq!(v["match_ratio"], 1.0);
    let ring = v["comparisons"].as_array().unwrap().iter().find(|c| c["field"] == "Ring channels").unwrap();
    assert!(ring["log"].as_str().unwrap().starts_with("0 7 6 5"), "{ring}");
}

/// Excerpts whose `=== System` print starts below its head ("no CPU near GPU/..." before): the parts under no
/// CPU hang from one, with a note, and the comparison goes on.
#[test]
fn a_print_that_starts_mid_tree_gives_a_comparison_with_notes() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log("dgx-h100", 2, "64K,64M");
    let lines: Vec<&str> = log.lines().collect();
    let version = lines[0];
    // Below the first CPU (its first GPU first), and below the second CPU's head (the fifth GPU's switch).
    let first_gpu = lines.iter().position(|l| body(l).contains("- GPU/")).unwrap();
    let cpu1 = lines.iter().position(|l| body(l).starts_with("CPU/0-1")).unwrap();
    for start in [first_gpu, cpu1 + 1] {
        let cut = std::iter::once(version).chain(lines[start..].iter().copied()).collect::<Vec<_>>().join("\n");
        let v = explain(dir.path(), "cut.log", &cut, &[]);
        let n = notes(&v);
        assert!(n.contains("partial print:") && n.contains("under no CPU"), "start {start}: {n}");
        assert!(v["model"]["graphs"].as_array().is_some_and(|g| !g.is_empty()), "start {start}: {n}");
        let compared = v["comparisons"].as_array().unwrap();
        assert!(compared.iter().any(|c| c["match"] == true), "start {start}: nothing matches");
    }
}

/// A print without its NICs of a log whose graphs leave the node ("has no NET device, so 2 nodes cannot be
/// connected" before): one node is modelled, and why is said.
#[test]
fn a_machine_without_nics_is_modelled_as_one_node_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log("dgx-a100", 2, "64K,64M");
    // The tree's NICs, the NETs' path lines and the NETs in the GPUs' path lines; the graphs still leave the node.
    let mut no_nics = String::new();
    for l in log.lines() {
        let b = body(l).trim_start();
        if b.contains("- NIC/") || b.contains("- NET/") || b.starts_with("NET/") {
            continue;
        }
        match l.split_once(" :GPU/").filter(|_| b.starts_with("GPU/")) {
            Some((head, paths)) => {
                let kept: Vec<&str> = paths.split(") ").filter(|p| !p.starts_with("NET/")).collect();
                no_nics += &format!("{head} :GPU/{}\n", kept.join(") "));
            }
            None => no_nics += &format!("{l}\n"),
        }
    }
    assert!(!no_nics.lines().any(|l| body(l).starts_with("GPU/") && l.contains("NET/")), "a GPU-NET path is left");
    let v = explain(dir.path(), "nonet.log", &no_nics, &[]);
    assert!(notes(&v).contains("no network device to connect them"), "{}", notes(&v));
    assert_eq!(v["machine"]["nodes"], 1);
    assert_eq!(v["machine"]["gdr"], Value::Null, "no GPUDirect RDMA claim without a NIC");
    let text = ok(&["log", "explain", dir.path().join("nonet.log").to_str().unwrap()]);
    assert!(text.contains("GPUDirect RDMA n/a: no network device"), "{text}");
}

/// 18 NVLinks of 20 GB/s is a Hopper at NCCL 2.19.4 (`SM90_NVLINK_BW` 20.0 in v2.19.4-1 `src/graph/topo.h`;
/// Ampere has 12 links): it was read as SM80.
#[test]
fn the_generation_comes_from_the_link_count_at_the_logs_release() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log("dgx-h100", 1, "64K,64M").replace("NVL[370.8]", "NVL[360.0]");
    let log = log.replace("NCCL version 2.28.9", "NCCL version 2.19.4");
    let v = explain(dir.path(), "h100-2.19.log", &log, &[]);
    assert_eq!(v["machine"]["sm"], 90, "{}", notes(&v));
    assert!(notes(&v).contains("SM90 from 18 NVLinks x 20 GB/s per GPU (NCCL 2.19.4"), "{}", notes(&v));
}

/// RCCL's search and tuning are AMD's: the log is named RCCL and nothing is compared (it was modelled as an
/// NVIDIA SM80 machine with a 100 % match).
#[test]
fn an_rccl_log_is_said_to_be_rccl_and_not_compared() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("logreader/tests/data/rccl_2.20.log");
    let v: Value = serde_json::from_str(&ok(&["log", "explain", log.to_str().unwrap(), "--json"])).unwrap();
    assert!(notes(&v).contains("the log is RCCL's"), "{}", notes(&v));
    assert_eq!(v["comparisons"].as_array().map(Vec::len), Some(0));
    assert_eq!((v["match_ratio"].clone(), v["machine"].clone()), (Value::Null, Value::Null));
    let text = ok(&["log", "explain", log.to_str().unwrap()]);
    assert!(text.contains("does not model") || text.contains("not RCCL's"), "{text}");
}

/// A VM that reports every PCI link as 2.5 GT/s x1 (NCCL prints `PCI[0.2]`), a NIC slower than its peers and
/// GPUs whose NIC is across the CPU are findings, in text and JSON; a DGX H100 (a NIC per GPU) raises none.
#[test]
fn the_machine_print_raises_findings() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log("dgx-h100", 2, "64K,64M");
    let v = explain(dir.path(), "plain.log", &log, &[]);
    assert_eq!(v["findings"].as_array().map(Vec::len), Some(0), "{}", v["findings"]);

    // The same machine with every PCI link read as 2.5 GT/s x1, printed by the model as NCCL prints it.
    let xml = dir.path().join("dgx-h100.xml");
    ok(&["topo", "dump", "--preset", "dgx-h100", "-o", xml.to_str().unwrap()]);
    let speeds = std::fs::read_to_string(&xml).unwrap();
    let vm_xml = speeds
        .replace(r#"link_speed="32.0 GT/s PCIe" link_width="16""#, r#"link_speed="2.5 GT/s PCIe" link_width="1""#);
    assert_ne!(vm_xml, speeds, "the edit found the PCI links");
    std::fs::write(&xml, vm_xml).unwrap();
    let vm = ok(&["topo", "explain", "--topo-file", xml.to_str().unwrap(), "--nodes", "2", "--log", "--sizes", "64K"]);
    assert!(vm.contains("+ PCI[0.2] - GPU/0-1b000"), "{vm}");
    let v = explain(dir.path(), "vm.log", &vm, &[]);
    assert!(!notes(&v).contains("partial print"), "a whole print: {}", notes(&v));
    let kinds: Vec<&str> = v["findings"].as_array().unwrap().iter().filter_map(|f| f["kind"].as_str()).collect();
    assert_eq!(kinds, ["hidden_pci_speed"], "{}", v["findings"]);
    assert!(!log.contains("PCI[0.2]"));
    assert!(v["findings"][0]["message"].as_str().unwrap().contains("every PCI link in the print reads PCI[0.2]"));
    let text = ok(&["log", "explain", dir.path().join("vm.log").to_str().unwrap()]);
    assert!(text.contains("Findings from the machine print") && text.contains("PCIe speeds hidden"), "{text}");

    // NET/0-3 at 25 Gb/s among 400 Gb/s peers.
    let slow = log.replace(
        "NET[50.0] - NET/0-3 (0/a088c20300f1e5d8/1/50.000000)",
        "NET[3.1] - NET/0-3 (0/a088c20300f1e5d8/1/3.125000)",
    );
    assert_ne!(slow, log, "the edit found its line");
    let v = explain(dir.path(), "slow.log", &slow, &[]);
    let f = v["findings"].as_array().unwrap();
    let nic = f.iter().find(|f| f["kind"] == "slow_nic").unwrap_or_else(|| panic!("{f:?}"));
    assert!(nic["message"].as_str().unwrap().contains("NET/0-3"), "{nic}");
    assert!(nic["message"].as_str().unwrap().contains("25 Gb/s"), "{nic}");

    // Four GPUs on NVLink bridges with one NIC on the CPU: every GPU's NIC is across the host bridge (PHB).
    let v = explain(dir.path(), "far.log", &model_log("nvlink-bridge-4", 2, "64M"), &[]);
    let f = v["findings"].as_array().unwrap();
    let near = f.iter().find(|f| f["kind"] == "no_near_nic").unwrap_or_else(|| panic!("{f:?}"));
    let message = near["message"].as_str().unwrap();
    assert!(message.contains("GPU/0-1000 rank 0 (PHB)") && message.contains("rank 3 (PHB)"), "{near}");
    assert!(message.contains("from the printed paths"), "{near}");
}

/// The log reader, the rebuild, the model (on one node, and on `nodes` where the machine has NICs) and the
/// comparison in this process, as `log explain` runs them. Errors are answers, panics fail the test; the
/// errors are returned to be counted.
fn replay_in_process(text: &str, nodes: u32) -> Vec<String> {
    let mut reader = Reader::new(Options { strict: false });
    reader.read_bytes("cut.log", text.as_bytes());
    let mut log = reader.finish();
    let printed = log.topology.iter().find(|t| t.nodes_of(NodeType::GPU).next().is_some()).cloned();
    let Some(p) = printed else {
        let ctx = Context { unmodelled: Some("no machine".into()), ..Context::default() };
        replay::compare(&log, None, &ctx);
        return Vec::new();
    };
    let r = match replay::rebuild(&p, Facts::default(), &TopoEnv::default()) {
        Ok(r) => r,
        Err(e) => return vec![format!("rebuild: {e}")],
    };
    replay::renumber_graphs(&mut log, p.host.as_deref(), &r.printed_ranks);
    let nets = r.topology.nodes_of(NodeType::NET).next().is_some();
    let mut errors = Vec::new();
    for n in if nets { 1..=nodes } else { 1..=1 } {
        match collscope_nccl::explain(&r.topology, n, &[1 << 16], &Env::default(), false) {
            Ok(ex) => {
                let ctx = Context { host: p.host.clone(), ..Context::default() };
                replay::compare(&log, Some(&ex), &ctx);
            }
            Err(e) => errors.push(format!("{n} node(s): {e}")),
        }
    }
    errors
}

/// Property: a log cut at every line of its machine print, paths and graphs (its head kept, or its tail), with
/// its ranks renumbered, and with every block of six lines dropped, never panics the replay, and a print with a
/// GPU is always modelled.
#[test]
fn cut_renumbered_and_partial_prints_never_panic() {
    for (preset, nodes) in [("dgx-h100", 2), ("hgx-pcie", 2)] {
        let log = model_log(preset, nodes, "64K");
        let lines: Vec<&str> = log.lines().collect();
        // The machine, its paths and graphs come first; past them the lines repeat per rank and channel.
        let dense = lines.iter().position(|l| body(l).starts_with("Channel ")).unwrap_or(lines.len());
        let mut errors = Vec::new();
        for i in (0..dense).chain((dense..lines.len()).step_by(37)) {
            errors.extend(replay_in_process(&lines[..i].join("\n"), 1));
            errors.extend(replay_in_process(&(lines[0].to_string() + "\n" + &lines[i..].join("\n")), 1));
        }
        for by in [8, 1, -3] {
            errors.extend(replay_in_process(&shift_ranks(&log, by), nodes));
        }
        for start in (0..dense).step_by(3) {
            let kept = lines[..start].iter().chain(&lines[(start + 6).min(lines.len())..]);
            errors.extend(replay_in_process(&kept.copied().collect::<Vec<_>>().join("\n"), nodes));
        }
        assert!(errors.is_empty(), "{preset}: {} errors, first {:?}", errors.len(), &errors[..errors.len().min(5)]);
    }
}

/// The same through the command: cut, renumbered and partial prints exit 0 or with an error, never 101.
#[test]
fn the_command_never_panics_on_cut_prints() {
    let dir = tempfile::tempdir().unwrap();
    let log = model_log("dgx-h100", 2, "64K,64M");
    let lines: Vec<&str> = log.lines().collect();
    let system = lines.iter().position(|l| body(l).starts_with("=== System")).unwrap();
    let path = dir.path().join("cut.log");
    for start in (system..system + 60).step_by(7) {
        let cut = std::iter::once(lines[0]).chain(lines[start..].iter().copied()).collect::<Vec<_>>().join("\n");
        std::fs::write(&path, shift_ranks(&cut, 8)).unwrap();
        let out = collscope(&["log", "explain", path.to_str().unwrap(), "--json"]);
        assert_ne!(out.status.code(), Some(101), "start {start}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Every real log in the shared fixtures: `log explain` ends without a panic.
#[test]
fn every_fixture_log_explains_without_a_panic() {
    let Some(dir) = collscope_testkit::fixtures("real logs for log explain") else { return };
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    assert!(!logs.is_empty());
    for log in &logs {
        let out = collscope(&["log", "explain", log.to_str().unwrap(), "--json"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{}: {err}", log.display());
        assert!(!err.contains("panicked"), "{}: {err}", log.display());
    }
}
