//! End-to-end: the habits a new user brings (issue 55): nccl-tests' `-g`/`-t`, a log file as `tui`'s argument,
//! `HOST:PORT` without a scheme, `| head` on any command, help texts that say what is true.

use crate::common;
use crate::live;
use crate::tmux::Tmux;
use collscope_testkit::{Proc, DEADLINE};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collscope-habits-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The busbw of each data row of an nccl-tests table (out-of-place, in-place).
fn busbw(out: &str) -> Vec<(f64, f64)> {
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[7].parse().expect("busbw"), f[11].parse().expect("busbw"))
        })
        .collect()
}

/// `perf -g 2` runs 2 ranks as nccl-tests' 2 GPUs would (busbw is 0 with one rank), and `-t 2 -g 2` runs 4.
#[test]
fn perf_takes_nccl_tests_gpus_and_threads() {
    for (flags, ranks) in [(&["-g", "2"][..], 2), (&["-t", "2", "-g", "2"][..], 4)] {
        let mut args = vec!["perf", "all_reduce", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1"];
        args.extend_from_slice(flags);
        let (ok, out, err) = common::run(&args, &[("COLLSCOPE_TELEMETRY", "0")]);
        assert!(ok, "{flags:?}: {err}");
        assert!(out.contains(&format!("# nThread {ranks} nGpus 1 ")), "{flags:?}:\n{out}");
        let rows = busbw(&out);
        assert_eq!(rows.len(), 1, "{out}");
        assert!(rows.iter().all(|&(a, b)| a > 0.0 && b > 0.0), "{flags:?}: busbw is 0 with {ranks} ranks:\n{out}");
    }
    let (_, help, _) = common::run(&["perf", "--help"], &[]);
    assert!(help.contains("-g, --nranks") && help.contains("-t, --nthreads"), "{help}");
}

/// Output going to a reader that is already gone (`| head` once it has its lines) ends the command by SIGPIPE
/// or with success, never with a panic (exit 101).
#[test]
fn a_closed_pipe_ends_commands_quietly() {
    let dir = temp_dir("pipe");
    let log = dir.join("nccl.log");
    std::fs::write(&log, live::own_log(&["--nranks", "2"])).unwrap();
    let log = log.to_str().unwrap();
    let commands: [&[&str]; 4] = [
        &["log", "analyze", log],
        &["topo", "explain", "--preset", "dgx-h100", "--nodes", "32", "--full"],
        &["topo", "show", "--preset", "dgx-h100"],
        &["perf", "all_reduce", "-g", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "0"],
    ];
    for args in commands {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
        cmd.args(args).env("COLLSCOPE_TELEMETRY", "0").stdin(Stdio::null()).stdout(Stdio::piped());
        let mut p = Proc::spawn(cmd.stderr(Stdio::piped()), DEADLINE);
        // The first line, as `head -1` takes it, then the reader goes away.
        let mut first = String::new();
        BufReader::new(p.take_stdout()).read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        let out = p.finish();
        let err = String::from_utf8_lossy(&out.stderr);
        let quiet = out.status.success() || out.status.signal() == Some(nix::libc::SIGPIPE);
        assert!(quiet && !err.contains("panicked"), "{args:?}: {:?}\n{err}", out.status);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `collscope tui nccl.log` reads the log as `--log` does, and `tui --connect 127.0.0.1:PORT` (no `http://`,
/// as the server prints its address) follows a live server.
#[test]
fn tui_takes_a_log_as_its_argument_and_an_address_without_a_scheme() {
    let dir = temp_dir("tui");
    let log = dir.join("job.log");
    std::fs::write(&log, live::own_log(&["--nranks", "2"])).unwrap();
    let t = Tmux::start("habits-log", &["tui", log.to_str().unwrap()]);
    t.wait_for(&["1Overview", "ranks 2", "job.log"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);

    let (_server, url) = live::start(&["serve", "--log", log.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"]);
    let addr = url.strip_prefix("http://").expect("the server prints an http:// URL");
    let t = Tmux::start("habits-connect", &["tui", "--connect", addr]);
    t.wait_for(&["1Overview", "ranks 2", "live"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// The help says what is true: `topo` names `explain`, `tui` the default port 9470 and the positional log.
#[test]
fn help_texts_name_explain_and_the_real_default_port() {
    let (ok, topo, _) = common::run(&["topo", "--help"], &[]);
    assert!(ok && topo.lines().next().is_some_and(|l| l.contains("`topo explain`")), "{topo}");
    let (ok, tui, _) = common::run(&["tui", "--help"], &[]);
    assert!(ok && tui.contains("9470") && !tui.contains("9400"), "{tui}");
    assert!(tui.contains("[LOG]...") && tui.contains("collscope tui nccl.log"), "{tui}");
}

/// Another program on one of the demo's default telemetry ports (rank 1's) kills no rank: the rank serves on a
/// free port, says so, and the demo runs to its end.
#[test]
fn a_demo_with_one_of_its_ports_taken_runs_to_the_end() {
    let taken = collscope_telemetry::config::DEFAULT_PORT + 1;
    // Held here, or already by another program: either way taken while the demo runs.
    let _held = std::net::TcpListener::bind(("127.0.0.1", taken));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["demo", "--launch", "processes", "--nranks", "2", "--steps", "3", "--grad-mib", "1", "--no-tui"])
        .env_remove("COLLSCOPE_METRICS_ADDR")
        .env_remove("COLLSCOPE_TELEMETRY")
        .env("COLLSCOPE_TIMEOUT_S", "60");
    let out = collscope_testkit::output(&mut cmd, DEADLINE);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the demo died on a taken port:\n{text}");
    assert!(text.contains(&format!("telemetry port {taken} is taken")) && text.contains("instead"), "{text}");
    assert!(text.contains("done: 3 steps"), "{text}");
}

/// In the TUI the demo trains until `q` (no 15 s end), records what the TUI shows with `--record`, and says
/// where the ranks' output went.
#[test]
fn the_demo_tui_runs_until_q_and_records() {
    let dir = temp_dir("demo");
    let rec = dir.join("demo.jsonl");
    let addr = format!("127.0.0.1:{}", collscope_testkit::free_ports(2));
    let args = ["demo", "--nranks", "2", "--grad-mib", "1", "--metrics-addr", &addr, "--record", rec.to_str().unwrap()];
    let t = Tmux::start("habits-demo", &args);
    t.wait_for(&["live", "SHM"]);
    // Past the old 15 s end: the ranks are still training and the link still live.
    std::thread::sleep(std::time::Duration::from_secs(18));
    let screen = t.wait_for(&["live"]);
    assert!(!screen.contains("ended"), "{screen}");
    t.keys(&["q"]);
    let screen = t.wait_for(&["EXIT=0"]);
    assert!(screen.contains("the ranks' output is in"), "{screen}");
    let recorded = std::fs::metadata(&rec).map(|m| m.len()).unwrap_or(0);
    assert!(recorded > 0, "--record wrote nothing to {}", rec.display());
    let replay = Tmux::start("habits-demo-replay", &["tui", "--replay", rec.to_str().unwrap()]);
    replay.wait_for(&["1Overview", "SHM"]);
    std::fs::remove_dir_all(&dir).ok();
}
