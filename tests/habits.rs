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

/// Another program on one of the demo's telemetry ports (rank 1's), collscope's default or one the user chose,
/// kills no rank: the rank serves on a free port, says so in its telemetry line and a warning, and the demo runs
/// to its end.
#[test]
fn a_demo_with_one_of_its_ports_taken_runs_to_the_end() {
    let default = collscope_telemetry::config::DEFAULT_PORT + 1;
    // Held here, or already by another program: either way taken while the demo runs.
    let _held = std::net::TcpListener::bind(("127.0.0.1", default));
    let base = collscope_testkit::free_ports(2);
    let _chosen = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let addr = format!("127.0.0.1:{base}");
    let cases: [(u16, &[&str], &str); 2] =
        [(default, &[], "collscope's default"), (base + 1, &["--metrics-addr", &addr], "chosen with --metrics-addr")];
    for (taken, extra, whose) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
        cmd.args(["demo", "--launch", "processes", "--nranks", "2", "--steps", "3", "--grad-mib", "1", "--no-tui"])
            .args(extra)
            .env_remove("COLLSCOPE_METRICS_ADDR")
            .env_remove("COLLSCOPE_TELEMETRY")
            .env("COLLSCOPE_TIMEOUT_S", "60");
        let out = collscope_testkit::output(&mut cmd, DEADLINE);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the demo died on a taken port ({whose}):\n{text}");
        assert!(
            text.contains(&format!("WARNING: telemetry port {taken} is taken by another program ({whose})")),
            "{text}"
        );
        let line = text.lines().find(|l| l.starts_with("collscope: telemetry for rank 1 at ")).unwrap_or_default();
        assert!(line.ends_with(&format!("(not port {taken}: taken)")), "rank 1's line:\n{text}");
        assert!(text.contains("done: 3 steps"), "{text}");
    }
}

/// The text of a screen without its white space, so a line the pane wrapped still holds what was printed.
fn unwrapped(screen: &str) -> String {
    screen.split_whitespace().collect()
}

/// `collscope demo ARGS` in a pane, with its temporary files in `tmp`.
fn demo_in(name: &str, tmp: &std::path::Path, args: &str) -> Tmux {
    let bin = env!("CARGO_BIN_EXE_collscope");
    let cmd = format!(
        "TMPDIR='{}' COLLSCOPE_TIMEOUT_S=5 timeout --foreground -s KILL 240 '{bin}' demo {args}; echo EXIT=$?; sleep 60",
        tmp.display()
    );
    Tmux::start_shell(name, (80, 24), &cmd)
}

/// The ranks' output files a demo left in `tmp`.
fn outputs_left(tmp: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("collscope-demo-")))
        .collect()
}

/// In the TUI the demo trains until `q` (no 15 s end) and records what the TUI shows with `--record`; a clean end
/// removes the ranks' output file and says nothing of it.
#[test]
fn the_demo_tui_runs_until_q_and_records() {
    let dir = temp_dir("demo");
    let rec = dir.join("demo.jsonl");
    let addr = format!("127.0.0.1:{}", collscope_testkit::free_ports(2));
    let args = format!("--nranks 2 --grad-mib 1 --metrics-addr {addr} --record '{}'", rec.display());
    let t = demo_in("habits-demo", &dir, &args);
    t.wait_for(&["live", "SHM"]);
    assert_eq!(outputs_left(&dir).len(), 1, "the ranks write their output to a file while the TUI shows");
    // Past the old 15 s end: the ranks are still training and the link still live.
    std::thread::sleep(std::time::Duration::from_secs(18));
    let screen = t.wait_for(&["live"]);
    assert!(!screen.contains("ended"), "{screen}");
    t.keys(&["q"]);
    let screen = t.wait_for(&["EXIT=0"]);
    assert!(!screen.contains("the ranks' output"), "{screen}");
    assert_eq!(outputs_left(&dir), Vec::<PathBuf>::new(), "a clean end removes the ranks' output");
    let recorded = std::fs::metadata(&rec).map(|m| m.len()).unwrap_or(0);
    assert!(recorded > 0, "--record wrote nothing to {}", rec.display());
    let replay = Tmux::start("habits-demo-replay", &["tui", "--replay", rec.to_str().unwrap()]);
    replay.wait_for(&["1Overview", "SHM"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A demo whose rank failed keeps the ranks' output and names the file after the TUI closes, so the user can
/// read why.
#[test]
fn a_failed_demo_keeps_the_ranks_output_and_names_it() {
    let dir = temp_dir("demo-fail");
    let addr = format!("127.0.0.1:{}", collscope_testkit::free_ports(2));
    let t = demo_in(
        "habits-demo-fail",
        &dir,
        &format!("--nranks 2 --grad-mib 1 --metrics-addr {addr} --fault kill:rank=1,step=1"),
    );
    t.wait_for(&["live"]);
    let [file] = &outputs_left(&dir)[..] else { panic!("one output file: {:?}", outputs_left(&dir)) };
    collscope_testkit::poll("rank 1 killed", std::time::Duration::from_secs(60), || {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains("killed (SIGKILL)") {
            Ok(())
        } else {
            Err(text)
        }
    });
    // The launcher reaps it within its next look (every 20 ms).
    std::thread::sleep(std::time::Duration::from_secs(1));
    t.keys(&["q"]);
    let screen = t.wait_for(&["EXIT=1"]);
    let named = format!("the ranks' output is kept in {}", file.display());
    assert!(unwrapped(&screen).contains(&unwrapped(&named)), "{screen}");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains("killed (SIGKILL) at step 1"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A port the user chose that another program holds (rank 1's): the ranks move to free ports side by side, the
/// launcher says where the TUI connects, and the TUI shows them.
#[test]
fn the_demo_tui_follows_its_ranks_off_a_taken_chosen_port() {
    let dir = temp_dir("demo-port");
    let base = collscope_testkit::free_ports(2);
    let _held = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let t = demo_in("habits-demo-port", &dir, &format!("--nranks 2 --grad-mib 1 --metrics-addr 127.0.0.1:{base}"));
    t.wait_for(&["live", "SHM"]);
    t.keys(&["q"]);
    let screen = unwrapped(&t.wait_for(&["EXIT=0"]));
    let said =
        format!("telemetry port {} is taken by another program (rank 1's, chosen with --metrics-addr)", base + 1);
    assert!(screen.contains(&unwrapped(&said)), "{screen}");
    assert!(screen.contains(&unwrapped("instead, and the TUI connects to http://127.0.0.1:")), "{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A collective that fails (a mismatch: rank 1 broadcasts where rank 0 all-reduces, both time out) is said with
/// one `Error:` per line, and its cause is not said twice (the call's message already ends with it).
#[test]
fn a_failing_collective_is_said_with_one_error_prefix() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["demo", "--launch", "processes", "--nranks", "2", "--steps", "6", "--grad-mib", "1", "--no-tui"])
        .args(["--fault", "mismatch:rank=1,step=1"])
        .env("COLLSCOPE_TELEMETRY", "0")
        .env("COLLSCOPE_TIMEOUT_S", "3");
    let out = collscope_testkit::output(&mut cmd, DEADLINE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the mismatch cannot succeed:\n{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("Error:")).collect();
    assert!(errors.iter().any(|l| l.contains("failed: rank ")), "no failed collective in:\n{err}");
    for l in &errors {
        assert!(l.starts_with("Error: ") && l.matches("Error:").count() == 1, "{l}\n{err}");
    }
    // Each "Caused by" line adds something its error's line does not already say.
    for block in err.split("Error: ").skip(1) {
        let mut lines = block.lines();
        let head = lines.next().unwrap_or_default();
        for cause in lines.filter_map(|l| l.strip_prefix("    ")) {
            assert!(!head.contains(cause.trim()), "'{cause}' repeats its error's line:\n{err}");
        }
    }
}

/// A demo that reaches its end in the TUI says so: the rank strip shows every rank finished (not `running ...
/// 0.0s`), `>` keeps the Overview and its last numbers, and `q` prints the summary of rank 0's calls.
#[test]
fn the_end_of_a_demo_in_the_tui_is_shown_and_summarised() {
    let dir = temp_dir("demo-end");
    let addr = format!("127.0.0.1:{}", collscope_testkit::free_ports(2));
    let t = demo_in("habits-demo-end", &dir, &format!("--nranks 2 --grad-mib 1 --duration 8 --metrics-addr {addr}"));
    t.wait_for(&["live", "SHM", "r1 "]);
    let screen = t.wait_for(&["job finished", "Job finished: 2 ranks' last states"]);
    let strip: Vec<&str> = screen.lines().filter(|l| l.starts_with(" r") || l.starts_with(">r")).collect();
    assert_eq!(strip.len(), 2, "{screen}");
    // A rank that exited just before rank 0's last job view no longer answered it.
    let last = |l: &&str| (l.contains(" finished ") || l.contains(" exited ")) && !l.contains("0.0s");
    assert!(strip.iter().all(last) && strip.iter().any(|l| l.contains(" finished ")), "{screen}");
    t.keys(&[">"]);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = t.wait_for(&["job finished", "SHM"]);
    let traffic = |s: &str| s.lines().find(|l| l.starts_with("Transports")).map(str::to_string);
    assert_eq!(traffic(&after), traffic(&screen), "`>` after the end keeps the Overview:\n{after}");
    t.keys(&["q"]);
    let screen = unwrapped(&t.wait_for(&["EXIT=0"]));
    assert!(screen.contains(&unwrapped("summary of rank 0's calls #")), "{screen}");
    for coll in ["AllReduce", "AllGather", "ReduceScatter"] {
        assert!(screen.contains(coll), "{coll}: {screen}");
    }
    assert!(screen.contains("busbwmean") && screen.contains("findings:"), "{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Without the TUI rank 0 prints the same summary after its last step: each collective's calls, bytes and
/// busbw (mean and best) over the calls it kept, and its findings.
#[test]
fn the_demo_prints_a_summary_without_the_tui() {
    let (ok, out, err) = common::run(
        &["demo", "--launch", "threads", "--nranks", "2", "--steps", "3", "--grad-mib", "1", "--no-tui"],
        &[("COLLSCOPE_METRICS_ADDR", "127.0.0.1:0")],
    );
    assert!(ok, "{err}");
    let head =
        out.lines().position(|l| l == "collscope demo: summary of rank 0's calls #1 to #15 (15 kept in its snapshot):");
    let Some(head) = head else { panic!("no summary of rank 0's 15 calls (3 steps of 5):\n{out}") };
    let rows: Vec<&str> = out.lines().skip(head + 1).take(4).collect();
    for (row, (coll, calls)) in rows.iter().zip([("AllGather", 3), ("ReduceScatter", 3), ("AllReduce", 9)]) {
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((f[0], f[1].parse::<u32>().ok()), (coll, Some(calls)), "{row}\n{out}");
        assert!(row.contains("busbw mean ") && row.contains(", best "), "{row}");
    }
    assert!(rows[3].starts_with("  findings: "), "{out}");
}
