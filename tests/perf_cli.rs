//! End-to-end: `collscope perf` as nccl-tests would be run, on threads and on processes, over each transport.

use crate::common;

fn collscope(args: &[&str]) -> (bool, String, String) {
    common::run(args, &[])
}

/// The data rows of an nccl-tests table: (bytes, #wrong out-of-place, #wrong in-place).
fn rows(out: &str) -> Vec<(u64, String, String)> {
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 13, "row has nccl-tests' 13 columns: {l}");
            (f[0].parse().expect("size"), f[8].to_string(), f[12].to_string())
        })
        .collect()
}

fn assert_clean_table(out: &str, err: &str, sizes: usize) {
    let r = rows(out);
    assert_eq!(r.len(), sizes, "{out}\n{err}");
    assert!(r.iter().all(|(_, a, b)| a == "0" && b == "0"), "{out}");
    assert!(out.contains("\n# Out of bounds values : 0 OK\n"), "{out}");
    let avg = out.lines().find_map(|l| l.strip_prefix("# Avg bus bandwidth    : ")).expect("average line");
    assert!(avg.ends_with(' ') && avg.trim().parse::<f64>().is_ok(), "{avg:?}");
}

#[test]
fn all_reduce_on_threads_over_each_transport() {
    for t in ["p2p", "shm", "socket"] {
        let (ok, out, err) = collscope(&[
            "perf",
            "all_reduce",
            "--nranks",
            "4",
            "--transport",
            t,
            "-b",
            "8",
            "-e",
            "4M",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
        ]);
        assert!(ok, "{t}: {err}");
        assert_clean_table(&out, &err, 7);
        assert!(out.starts_with("# nccl-tests version collscope-"), "{out}");
        assert!(out.contains("# nThread 4 nGpus 1 minBytes 8 maxBytes 4194304 step: 8(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0\n"));
        assert!(out.contains("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"), "{out}");
        assert!(out.contains("\n           8             2     float     sum      -1 "), "{out}");
    }
}

#[test]
fn all_reduce_on_processes_with_json() {
    let dir = std::env::temp_dir().join(format!("collscope-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for t in ["shm", "socket"] {
        let json = dir.join(format!("{t}.json"));
        let j = json.to_string_lossy().into_owned();
        let (ok, out, err) = collscope(&[
            "perf",
            "all_reduce",
            "--nranks",
            "3",
            "--launch",
            "processes",
            "--transport",
            t,
            "-b",
            "1K",
            "-e",
            "1M",
            "-f",
            "32",
            "-n",
            "2",
            "-w",
            "1",
            "-J",
            &j,
        ]);
        assert!(ok, "{t}: {err}");
        assert_clean_table(&out, &err, 3);
        // One process per rank, each with its own pid.
        let pids: std::collections::HashSet<&str> =
            out.lines().filter(|l| l.starts_with("#  Rank")).map(|l| l.split_whitespace().nth(6).unwrap()).collect();
        assert_eq!(pids.len(), 3, "{out}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["version"], 2);
        assert_eq!(v["results"].as_array().unwrap().len(), 3);
        assert_eq!(v["results"][0]["out_of_place"]["nwrong"], 0.0);
        assert_eq!(v["results"][2]["size"], 1 << 20);
        assert_eq!(v["out_of_bounds"]["okay"], "true");
        assert_eq!(v["config"]["devices"].as_array().unwrap().len(), 3);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_benchmark_with_other_types_and_ops() {
    let cases: [&[&str]; 6] = [
        &["all_gather", "-d", "half"],
        &["reduce_scatter", "-d", "int32", "-o", "max"],
        &["broadcast", "-r", "2", "-d", "bfloat16"],
        &["reduce", "-r", "1", "-o", "prod", "-d", "double"],
        &["alltoall", "-d", "uint8"],
        &["sendrecv", "-d", "int64"],
    ];
    for case in cases {
        let mut args = vec!["perf"];
        args.extend_from_slice(case);
        args.extend_from_slice(&["--nranks", "3", "-b", "96", "-e", "96K", "-f", "32", "-n", "2", "-w", "1"]);
        let (ok, out, err) = collscope(&args);
        assert!(ok, "{case:?}: {err}");
        assert_clean_table(&out, &err, 3);
        assert!(out.contains(&format!("# Collective test starting: {}_perf", case[0])), "{out}");
    }
}

#[test]
fn every_benchmark_on_processes_in_registered_windows() {
    for bench in ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"] {
        let args = ["perf", bench, "--nranks", "3", "--launch", "processes", "-R", "2"];
        let (ok, out, err) =
            collscope(&[&args[..], &["-b", "96", "-e", "3M", "-f", "32", "-n", "2", "-w", "1"]].concat());
        assert!(ok, "{bench}: {err}");
        // 96 B to 3 MiB by 32: steps of several slots, through the windows.
        assert_clean_table(&out, &err, 4);
    }
    let (ok, _, err) = collscope(&["perf", "all_reduce", "-R", "1"]);
    assert!(!ok && err.contains("'1' (local registration) is not available for host memory"), "{err}");
}

#[test]
fn bad_arguments_are_named() {
    let (ok, _, err) = collscope(&["perf", "all_reduce", "-b", "8X"]);
    assert!(!ok && err.contains("'8X'"), "{err}");
    let (ok, _, err) = collscope(&["perf", "broadcast", "--nranks", "2", "-r", "5", "-b", "8", "-e", "8"]);
    assert!(!ok && err.contains("-r 5"), "{err}");
    let (ok, _, err) =
        collscope(&["perf", "all_reduce", "--launch", "processes", "--transport", "p2p", "--nranks", "2"]);
    assert!(!ok && err.contains("--launch threads"), "{err}");
}

#[test]
fn demo_runs_a_checked_training_loop() {
    let (ok, out, err) = collscope(&["demo", "--nranks", "2", "--steps", "2", "--grad-mib", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("step    1"), "{out}");
    assert!(out.contains("done: 2 steps"), "{out}");
}

/// The logs `collscope perf` on 2 processes writes with `NCCL_DEBUG=INFO` and `subsys` (None: NCCL's default),
/// all processes' files joined, with the table it printed.
fn perf_log(subsys: Option<&str>) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("collscope-perf-log-{}-{}", std::process::id(), subsys.unwrap_or("")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nccl.%p.log").to_string_lossy().into_owned();
    let mut env = vec![("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_FILE", file.as_str())];
    if let Some(s) = subsys {
        env.push(("NCCL_DEBUG_SUBSYS", s));
    }
    // `common::run` clears NCCL_DEBUG; this run sets it.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["perf", "all_reduce", "--nranks", "2", "--launch", "processes", "--transport", "socket"])
        .args(["-b", "8", "-e", "1K", "-f", "8", "-n", "1", "-w", "0"])
        .env_remove("NCCL_DEBUG_SUBSYS")
        .envs(env)
        .env("COLLSCOPE_TIMEOUT_S", "60");
    let o = collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let mut log = String::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        log.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    let _ = std::fs::remove_dir_all(&dir);
    (log, out)
}

#[test]
fn the_tuning_table_is_logged_at_rank_0_and_read_back() {
    let (log, out) = perf_log(Some("INIT,TUNING"));
    assert_clean_table(&out, "", 3);
    // NCCL 2.28.9's layout (src/graph/tuning.cc), once: rank 0 only, three blocks of three algorithms.
    let rows = |head: &str| log.lines().filter(|l| l.contains(&format!("NCCL INFO {head}"))).count();
    assert_eq!(rows("  Algorithm   |"), 3, "{log}");
    assert_eq!(rows(" Max NThreads |"), 3, "{log}");
    assert_eq!(rows("    AllReduce |"), 3, "{log}");
    // BOOTSTRAP is not in the mask: NCCL prints `Bootstrap: Using` under that subsystem only.
    assert!(!log.contains("Bootstrap: Using"), "{log}");

    // `log analyze` reads the table back into the runtime's own cells: Ring is priced for AllReduce and
    // AllGather, and the algorithms it does not run stay at 0.
    let p = std::env::temp_dir().join(format!("collscope-perf-tuning-{}.log", std::process::id()));
    std::fs::write(&p, &log).unwrap();
    let (ok, json, err) = common::run(&["log", "analyze", p.to_str().unwrap(), "--json", "--no-fail"], &[]);
    let _ = std::fs::remove_file(&p);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["unparsed_nccl_lines"], serde_json::json!([]), "{}", v["unparsed_nccl_lines"]);
    let cell = |coll: &str, algo: &str| v["tuning"][coll][algo]["Simple"].clone();
    assert!(cell("AllReduce", "Ring")["bw_gbps"].as_f64().unwrap() > 0.0, "{}", v["tuning"]);
    assert!(cell("AllGather", "Ring")["bw_gbps"].as_f64().unwrap() > 0.0, "{}", v["tuning"]);
    assert!(cell("AllReduce", "NVLS").is_null() || cell("AllReduce", "NVLS")["bw_gbps"] == 0.0, "{}", v["tuning"]);
}

#[test]
fn bootstrap_interface_is_logged_under_nccls_default_subsystems() {
    let (log, _) = perf_log(None);
    assert!(log.contains("NCCL INFO Bootstrap: Using "), "{log}");
    // TUNING is not a default subsystem.
    assert!(!log.contains("Max NThreads"), "{log}");
}

/// The NCCL log reader that reference text 000 builds (`nccl_log_reader.py`, its regular expressions taken from
/// NCCL's own format strings) reads a collscope runtime log as it reads NCCL's: the bootstrap interface and the
/// tuning table come out. The reader is taken from the text at run time (never copied into this repository);
/// `cost_model` is the text's earlier article, stood in for by its one formula.
#[test]
fn the_reference_texts_nccl_log_reader_gets_bootstrap_and_the_tuning_table() {
    let Some(texts) = collscope_testkit::shared("reference/texts", "reference text 000's NCCL log reader") else {
        return;
    };
    let article = std::fs::read_dir(&texts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("000_")))
        .expect("reference text 000");
    let text = std::fs::read_to_string(&article).unwrap();
    let start = text.find("#!/usr/bin/env python3").expect("the reader's first line");
    let end = start + text[start..].find("    else: report(").expect("the reader's last line");
    let end = end + text[end..].find('\n').unwrap_or(text.len() - end);
    let python = std::process::Command::new("python3").arg("--version").output();
    if !python.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: reference text 000's NCCL log reader (needs python3)");
        return;
    }

    let (log, _) = perf_log(Some("INIT,BOOTSTRAP,GRAPH,TUNING"));
    let dir = std::env::temp_dir().join(format!("collscope-reference-reader-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("nccl_log_reader.py"), &text[start..end]).unwrap();
    // The article's alpha-beta ring: T = 2(n-1)a + 2(n-1)/n * S/b, in us with S in bytes and b in GB/s.
    std::fs::write(
        dir.join("cost_model.py"),
        "def ring_allreduce_time(n, s, a, b):\n    return 2*(n-1)*a + 2*(n-1)/n * s/(b*1e3)\n",
    )
    .unwrap();
    std::fs::write(dir.join("job.log"), &log).unwrap();
    let mut cmd = std::process::Command::new("python3");
    cmd.current_dir(&dir).args(["nccl_log_reader.py", "job.log", "--json"]);
    let o = collscope_testkit::output(&mut cmd, collscope_testkit::DEADLINE);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let boot = v["boot"][0][0].as_str().unwrap_or_default();
    assert!(boot.contains(':') && boot.ends_with("<0>"), "bootstrap interface: {}", v["boot"]);
    // Every Ring/Simple cell of AllReduce read with a positive bandwidth, as `log analyze` reads it.
    let ring = &v["tuning"]["AllReduce"]["Ring+Simple"];
    assert!(ring[1].as_f64().is_some_and(|bw| bw > 0.0), "tuning: {}", v["tuning"]);
    assert!(v["rings"].as_array().is_some_and(|r| !r.is_empty()), "rings: {}", v["rings"]);
}
