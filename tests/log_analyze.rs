//! `collscope log analyze` end to end: the report, `--json` with the keys other tools rely on, `--strict`, stdin,
//! and clear errors for bad paths.

use collscope_testkit::Proc;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LOG: &str = "\
node00:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>
node00:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2
node00:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
node00:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
node01:2:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0
node01:2:2 [0] NCCL INFO Wibbling the frobnicator
node01:2:2 [0] transport/shm.cc:1 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 1)
";

fn collscope(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = Proc::spawn(&mut cmd, Duration::from_secs(60));
    let (mut pipe, input) = (child.take_stdin(), stdin.unwrap_or("").to_string());
    // Written beside the reads of stdout and stderr, so neither side waits on a full pipe. A child that exits
    // without reading it all is judged by its output, not by the broken pipe.
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.finish();
    let _ = writer.join();
    out
}

fn temp_log() -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("collscope-cli-log-{}.log", std::process::id()));
    std::fs::write(&p, LOG).unwrap();
    p
}

#[test]
fn report_has_every_section_and_the_findings() {
    let p = temp_log();
    let out = collscope(&["log", "analyze", p.to_str().unwrap(), "--strict"], None);
    assert_eq!(out.status.code(), Some(2), "an error finding: {}", String::from_utf8_lossy(&out.stderr));
    let quiet = collscope(&["log", "analyze", p.to_str().unwrap(), "--no-fail"], None);
    std::fs::remove_file(&p).unwrap();
    assert!(quiet.status.success(), "{}", String::from_utf8_lossy(&quiet.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for section in [
        "== Job",
        "== Network",
        "== Transports",
        "== GPUDirect RDMA",
        "== Rings and trees",
        "== Channels",
        "== Tuning",
        "== Findings",
        "== NCCL lines not understood (1)",
    ] {
        assert!(text.contains(section), "missing {section} in\n{text}");
    }
    assert!(text.contains("2.18.3+cuda12.2") && text.contains("used on 0 of 2 NET connections"), "{text}");
    for code in ["no_gdrdma_no_module", "bootstrap_interface", "shm_exhausted"] {
        assert!(text.contains(code), "missing finding {code} in\n{text}");
    }
    let errors = text.find("[error]").unwrap();
    let warnings = text.find("[warning]").unwrap();
    assert!(errors < warnings, "findings are ordered by severity");
    assert!(text.contains("Wibbling the frobnicator"));
    assert!(text.contains("3 findings (2 error, 1 warning, 0 info); 1 WARN/error lines in the log"), "{text}");
}

/// For scripts: 0 without an error finding, 2 with one, 1 when nothing read is an NCCL log; a directory gives
/// its logs, and says which files it skipped.
#[test]
fn exit_status_and_directories_for_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let clean = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n";
    std::fs::write(dir.path().join("rank0.log"), clean).unwrap();
    std::fs::write(dir.path().join("rank0.json"), "{\"nranks\": 2}").unwrap();
    std::fs::write(dir.path().join("a.out"), [0x7f, b'E', b'L', b'F', 0, 1]).unwrap();
    let d = dir.path().to_str().unwrap();
    let out = collscope(&["log", "analyze", d, "--json"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("skipped 2 file(s) that are not logs") && err.contains("rank0.json"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"]["files"].as_array().unwrap().len(), 1, "only the log is read");
    assert_eq!(collscope(&["log", "analyze", "-"], Some(LOG)).status.code(), Some(2));
    let none = collscope(&["log", "analyze", "-"], Some("epoch 1 loss 0.5\n"));
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no NCCL line in '-'"));
}

#[test]
fn json_from_stdin_has_the_shared_keys() {
    let out = collscope(&["log", "analyze", "-", "--json", "--no-fail"], Some(LOG));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    for key in [
        "schema_version",
        "nccl_version",
        "nranks",
        "nnodes",
        "network",
        "connections",
        "rings",
        "trees",
        "graphs",
        "tuning",
        "decisions",
        "env",
        "warnings",
        "findings",
        "unparsed_nccl_lines",
    ] {
        assert!(v.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(v["nccl_version"], "2.18.3+cuda12.2");
    assert_eq!(v["network"], "IB");
    let c = &v["connections"][0];
    for key in ["channel", "src", "dst", "direction", "transport", "mode", "net", "device", "gdrdma", "proxy_rank"] {
        assert!(c.get(key).is_some(), "missing connection key {key}");
    }
    assert_eq!((c["transport"].as_str(), c["gdrdma"].as_bool()), (Some("NET"), Some(false)));
    let w = &v["warnings"][0];
    assert_eq!(w["class"], "shm");
    assert_eq!(w["host"], "node01");
    let f = &v["findings"][0];
    for key in ["code", "severity", "title", "detail", "evidence", "fix"] {
        assert!(f.get(key).is_some(), "missing finding key {key}");
    }
    assert_eq!(v["unparsed_nccl_lines"], serde_json::json!([]), "listed only with --strict");
}

/// Issue 50: a pasted excerpt without prefixes is a log (not "no NCCL line"), and the report says how it was read;
/// an RCCL log says RCCL in the report and the JSON.
#[test]
fn bare_excerpts_and_rccl_logs_say_what_they_are() {
    let bare = "NCCL version 2.24.3+cuda12.2\nRing 00 : 6 -> 2 [receive] via NET/IB/0\n";
    let out = collscope(&["log", "analyze", "-", "--no-fail"], Some(bare));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("NCCL version   2.24.3+cuda12.2"), "{text}");
    assert!(text.contains("without prefix 2 NCCL lines") && text.contains("1 stretch(es)"), "{text}");
    let rccl = "RCCL version : 2.20.5-HEAD:7a83a05\n\
                mi300-a:1201:1201 [0] NCCL INFO Bootstrap : Using ens51np0:10.20.0.1<0>\n";
    let out = collscope(&["log", "analyze", "-", "--no-fail"], Some(rccl));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("RCCL version   2.20.5 (RCCL"), "{text}");
    let out = collscope(&["log", "analyze", "-", "--json", "--no-fail"], Some(rccl));
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!((&v["log"]["rccl"], &v["nccl_version"]), (&json!(true), &json!("2.20.5")));
}

#[test]
fn bad_paths_and_missing_arguments_are_clear_errors() {
    let out = collscope(&["log", "analyze", "/nonexistent/nccl.log"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/nccl.log") && err.contains("cannot open"), "{err}");
    let out = collscope(&["log", "analyze"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PATHS"));
}

#[test]
fn topo_explain_log_reads_back() {
    let explain =
        collscope(&["topo", "explain", "--preset", "dgx-h100", "--nodes", "2", "--sizes", "1M", "--log"], None);
    assert!(explain.status.success(), "{}", String::from_utf8_lossy(&explain.stderr));
    let log = String::from_utf8(explain.stdout).unwrap();
    let out = collscope(&["log", "analyze", "-", "--json", "--strict"], Some(&log));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["unparsed_nccl_lines"], serde_json::json!([]), "every line of topo explain --log is understood");
    assert!(v["nccl_version"].as_str().unwrap().starts_with("2.28.9"));
    assert!(!v["graphs"].as_array().unwrap().is_empty());
    assert!(!v["rings"].as_array().unwrap().is_empty());
    assert!(!v["tuning"]["AllReduce"].as_object().unwrap().is_empty());
    assert!(v["decisions"].as_array().unwrap().iter().any(|d| d["coll"] == "AllReduce" && d["bytes"] == 1048576));

    // Every ring edge of the model reaches the log's connections with its transport: P2P (CUMEM: H100s, one
    // process per GPU) inside a node, NET/IB/k with GPUDirect RDMA on both ends between nodes.
    let conns = v["connections"].as_array().unwrap();
    let find = |ch: &Value, src: u64, dst: u64, dir: &str| {
        conns.iter().find(|c| &c["channel"] == ch && c["src"] == src && c["dst"] == dst && c["direction"] == dir)
    };
    let mut edges = 0;
    for ring in v["rings"].as_array().unwrap() {
        let order: Vec<u64> = ring["order"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
        assert_eq!(order.len(), 16);
        for (i, &src) in order.iter().enumerate() {
            let dst = order[(i + 1) % order.len()];
            edges += 1;
            if src / 8 == dst / 8 {
                let c = find(&ring["channel"], src, dst, "both").unwrap_or_else(|| panic!("{src} -> {dst}: {ring}"));
                assert_eq!((&c["transport"], &c["mode"]), (&json!("P2P"), &json!("CUMEM")), "{c}");
            } else {
                for dir in ["send", "recv"] {
                    let c = find(&ring["channel"], src, dst, dir).unwrap_or_else(|| panic!("{src} -> {dst} {dir}"));
                    assert_eq!((&c["transport"], &c["net"], &c["gdrdma"]), (&json!("NET"), &json!("IB"), &json!(true)));
                }
            }
        }
    }
    assert!(edges >= 16 * 16, "{edges} ring edges");
    assert!(log.contains("NCCL INFO Connected all rings, use ring PXN 0 GDR 1"));
    // Tree edges too: each rank and its parent, both ways.
    for t in v["trees"].as_array().unwrap().iter().filter(|t| t["up"].as_i64().unwrap() >= 0) {
        let (rank, up) = (t["rank"].as_u64().unwrap(), t["up"].as_u64().unwrap());
        let dir = if rank / 8 == up / 8 { "both" } else { "send" };
        assert!(find(&t["channel"], rank, up, dir).is_some() && find(&t["channel"], up, rank, dir).is_some(), "{t}");
    }
}

#[test]
fn distinct_hosts_are_read_in_linear_time_and_their_caps_said() {
    // 300,000 hosts, one thread each: a scan of the known hosts for every new one (80,000 hosts took 56 s in a
    // debug build) would run past the deadline; looked up by hash it takes seconds.
    let hosts = 300_000;
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut w = std::io::BufWriter::new(log.as_file());
    for h in 0..hosts {
        writeln!(w, "host{h}:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda12.2").unwrap();
    }
    drop(w);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["log", "analyze", "--json", "--no-fail"]).arg(log.path());
    let out = collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hosts"].as_array().unwrap().len(), collscope_logreader::MAX_HOSTS);
    let warnings: Vec<&str> = v["warnings"].as_array().unwrap().iter().filter_map(|w| w["text"].as_str()).collect();
    let more = hosts - collscope_logreader::MAX_HOSTS;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("more than 65536 hosts (collscope's cap on the host list): {more} more"))),
        "{warnings:?}"
    );
    let past = hosts - collscope_logreader::MAX_THREADS;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("more than 65536 printing threads (collscope's cap): {past} lines"))),
        "{warnings:?}"
    );
    assert_eq!(v["log"]["stats"]["nccl_lines"], hosts as u64, "every line is read");
}

/// `collscope log analyze ARGS` with stdin from `stdin` and `env` set.
fn analyze_from(args: &[&str], stdin: Stdio, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["log", "analyze"]).args(args).stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
    Proc::spawn(cmd.envs(env.iter().copied()), collscope_testkit::DEADLINE).finish()
}

#[test]
fn endless_and_line_less_inputs_end_with_an_error_naming_the_cap() {
    // `/dev/zero` on stdin and procfs's pagemap (size 0, gigabytes of binary) were read until killed.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    for (args, stdin) in [(vec!["-"], Stdio::from(zero)), (vec!["/proc/self/pagemap"], Stdio::null())] {
        let out = analyze_from(&args, stdin, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("16777216 bytes without a line end") && err.contains("not a text log"), "{args:?}: {err}");
    }
    // Text that goes on past COLLSCOPE_LOG_MAX_BYTES (a stream that never ends) stops there, naming it.
    let log = temp_log();
    let out =
        analyze_from(&["-"], Stdio::from(std::fs::File::open(&log).unwrap()), &[("COLLSCOPE_LOG_MAX_BYTES", "200")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more than 200 bytes, the most read of one input (COLLSCOPE_LOG_MAX_BYTES"), "{err}");
    let out =
        analyze_from(&["-"], Stdio::from(std::fs::File::open(&log).unwrap()), &[("COLLSCOPE_LOG_MAX_BYTES", "0")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("COLLSCOPE_LOG_MAX_BYTES"));
    let _ = std::fs::remove_file(log);
}
