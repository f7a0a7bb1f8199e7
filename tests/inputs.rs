//! Inputs that never end, are far larger than their kind, or are not what their name says: each run ends at once
//! with an error naming the input, or runs in bounded memory and ends on SIGINT/SIGTERM. Peak memory is read
//! from the child's `/proc/PID/status` (VmHWM) while it runs.

use collscope_testkit::{output, Proc, DEADLINE};
use nix::libc::{SIGINT, SIGTERM};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What "at once" means for an input refused without reading it, on a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(15);
/// The most memory any of these runs may reach.
const MAX_PEAK_KIB: u64 = 100 << 10;

/// The binary, with settings from the environment that would change what is read cleared.
fn collscope(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_collscope"));
    c.env_remove("NCCL_DEBUG")
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCL_GRAPH_FILE")
        .env_remove("COLLSCOPE_METRICS_ADDR")
        .env_remove("COLLSCOPE_TUNING_FILE")
        // The default tuning profile is looked for here: none unless a test puts one.
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("COLLSCOPE_TIMEOUT_S", "30");
    c
}

/// Runs to the end: (success, stderr, how long it took).
fn run(cmd: &mut Command) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = output(cmd, DEADLINE);
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned(), started.elapsed())
}

/// The peak resident memory of a running process, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process is still running");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("a VmHWM line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmHWM in kB")
}

/// A real collscope NCCL_DEBUG=INFO log: two ranks running AllReduce, every subsystem.
fn own_log(dir: &Path) -> PathBuf {
    let log = dir.join("own.log");
    let (ok, err, _) = run(collscope(dir)
        .args(["perf", "all_reduce", "--nranks", "2", "--launch", "threads", "-b", "8", "-e", "1M"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "ALL")
        .env("NCCL_DEBUG_FILE", &log));
    assert!(ok, "perf: {err}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().filter(|l| l.contains(" NCCL INFO ")).count() >= 10, "a log with NCCL lines:\n{text}");
    log
}

#[test]
fn small_files_that_are_devices_fifos_or_too_large_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("topo.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let big = dir.path().join("big.xml");
    std::fs::write(&big, format!("<system version=\"1\">{}</system>", " ".repeat(5 << 20))).unwrap();
    // The default tuning cache, a link to /dev/zero.
    let cache = dir.path().join("cache/collscope");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink("/dev/zero", cache.join("tuning.json")).unwrap();
    let refused = |args: &[&str], env: &[(&str, &str)], expected: &[&str]| {
        let (ok, err, took) = run(collscope(dir.path()).args(args).envs(env.iter().copied()));
        assert!(!ok, "{args:?} {env:?} should fail");
        assert!(took < AT_ONCE, "{args:?} {env:?} took {took:?}");
        for e in expected {
            assert!(err.contains(e), "{args:?} {env:?}: expected '{e}' in:\n{err}");
        }
    };
    let perf = ["perf", "all_reduce", "--nranks", "2", "-b", "8", "-e", "8"];
    let not_regular = "is a character device, not a regular file";
    refused(&perf, &[("COLLSCOPE_TUNING_FILE", "/dev/zero")], &["COLLSCOPE_TUNING_FILE='/dev/zero'", not_regular]);
    refused(&perf, &[], &[&cache.join("tuning.json").display().to_string(), not_regular]);
    refused(&["topo", "show", "--topo-file", "/dev/zero"], &[], &["topology file '/dev/zero'", not_regular]);
    refused(&["topo", "show", "--topo-file", fifo.to_str().unwrap()], &[], &["topo.fifo", "is a FIFO"]);
    refused(&["topo", "show", "--topo-file", big.to_str().unwrap()], &[], &["big.xml", "larger than 4194304 bytes"]);
    refused(
        &["topo", "explain", "--preset", "dgx-a100", "--sizes", "1M"],
        &[("NCCL_GRAPH_FILE", "/dev/zero")],
        &["NCCL_GRAPH_FILE /dev/zero", not_regular],
    );
}

#[test]
fn log_analyze_and_serve_refuse_a_device_and_say_when_no_nccl_line_was_found() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("core.bin");
    std::fs::write(&bin, (0..=255u8).cycle().take(1 << 20).collect::<Vec<u8>>()).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (bin, empty) = (bin.to_str().unwrap(), empty.to_str().unwrap());
    fn serve(log: &str) -> Vec<&str> {
        vec!["serve", "--log", log, "--metrics-addr", "127.0.0.1:0"]
    }
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["log", "analyze", "/dev/zero"], "'/dev/zero' is a character device: expected a log file".into()),
        (serve("/dev/zero"), "'/dev/zero' is a character device: expected a log file".into()),
        (
            vec!["serve", "--log", "/dev/zero", "--follow", "--metrics-addr", "127.0.0.1:0"],
            "--follow reads files: '/dev/zero' is a character device".into(),
        ),
        (vec!["log", "analyze", bin], format!("no NCCL line in '{bin}' (1 file(s), ")),
        (vec!["log", "analyze", bin, "--json"], format!("no NCCL line in '{bin}' (1 file(s), ")),
        (serve(bin), format!("no NCCL line in '{bin}' (1 file(s), ")),
        (vec!["log", "analyze", empty], format!("no log files in '{empty}'")),
    ];
    for (args, expected) in cases {
        let (ok, err, took) = run(collscope(dir.path()).args(&args));
        assert!(!ok, "{args:?} should fail");
        assert!(took < AT_ONCE, "{args:?} took {took:?}");
        assert!(err.contains(&expected), "{args:?}: expected '{expected}' in:\n{err}");
    }
}

#[test]
fn a_truncated_gzip_is_read_up_to_the_damage_with_a_warning() {
    use flate2::write::GzEncoder;
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(own_log(dir.path())).unwrap().repeat(50);
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("rank0.log.gz");
    std::fs::write(&cut, &gz[..gz.len() * 2 / 3]).unwrap();
    let out = output(collscope(dir.path()).args(["log", "analyze", "--json"]).arg(&cut), DEADLINE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let expected = format!("collscope: warning: {}: gzip data damaged at byte {}", cut.display(), gz.len() * 2 / 3);
    assert!(err.contains(&expected), "expected '{expected}' in:\n{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines = v["log"]["stats"]["lines"].as_u64().unwrap();
    assert!(lines > 0 && lines < text.lines().count() as u64, "{lines} of {} lines read", text.lines().count());
    assert!(v["warnings"].as_array().unwrap().iter().any(|w| w["class"] == "input"), "the damage is a warning");
}

#[test]
fn never_ending_input_runs_in_bounded_memory_and_ends_on_sigint_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let serve = ["serve", "--log", "-", "--metrics-addr", "127.0.0.1:0"];
    for (args, signal) in [
        (&["log", "analyze", "-"][..], SIGTERM),
        (&["log", "analyze", "-"][..], SIGINT),
        (&serve[..], SIGTERM),
        (&serve[..], SIGINT),
    ] {
        // Text that never ends (`/dev/zero` has no line end, and is refused at once: tests/log_analyze.rs).
        let mut yes = Command::new("yes");
        yes.arg("node0:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda12.2").stdout(Stdio::piped());
        let mut endless = Proc::spawn(&mut yes, DEADLINE);
        let mut cmd = collscope(dir.path());
        cmd.args(args).stdin(endless.take_stdout()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut p = Proc::spawn(&mut cmd, DEADLINE);
        std::thread::sleep(Duration::from_secs(2));
        assert!(p.try_wait().is_none(), "{args:?} reads endless text until stopped");
        let peak = peak_kib(p.id());
        assert!(peak < MAX_PEAK_KIB, "{args:?}: {peak} KiB after 2 s of endless text");
        p.signal(signal);
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = p.try_wait() {
                break s;
            }
            assert!(Instant::now() < until, "{args:?} still runs 10 s after signal {signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.signal(), Some(signal), "{args:?} ends by signal {signal}: {status}");
    }
}

/// `serve --log FILE --follow`, and its base URL once it printed it.
fn serve_follow(dir: &Path, log: &Path) -> (Proc, String) {
    let mut cmd = collscope(dir);
    cmd.args(["serve", "--follow", "--poll-ms", "50", "--metrics-addr", "127.0.0.1:0", "--log"])
        .arg(log)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut p = Proc::spawn(&mut cmd, DEADLINE * 3);
    let mut line = String::new();
    BufReader::new(p.take_stdout()).read_line(&mut line).unwrap();
    let at = line.find("http://").unwrap_or_else(|| panic!("serve printed no URL: {line}"));
    let url = line[at..].split_whitespace().next().unwrap().trim_end_matches("/metrics").to_string();
    (p, url)
}

fn snapshot(url: &str) -> Value {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let text = client.get(format!("{url}/api/v1/snapshot")).send().unwrap().text().unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Waits until the snapshot's log stats satisfy `ok`.
fn wait_for_stats(url: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + DEADLINE;
    loop {
        let stats = snapshot(url)["log"]["stats"].clone();
        if ok(&stats) {
            return stats;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}: {stats}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn append(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

#[test]
fn serve_follow_keeps_memory_bounded_whatever_the_log_size_or_line_length() {
    let dir = tempfile::tempdir().unwrap();
    let own = std::fs::read_to_string(own_log(dir.path())).unwrap();
    let per_copy = own.lines().count() as u64;
    let log = dir.path().join("followed.log");
    std::fs::write(&log, &own).unwrap();
    let (p, url) = serve_follow(dir.path(), &log);
    wait_for_stats(&url, "the first copy", |s| s["lines"].as_u64() == Some(per_copy));
    let start = peak_kib(p.id());

    // About 64 MiB of real log lines, appended in steps while it follows.
    let copies = (64 << 20) / own.len() as u64;
    let step = own.repeat(copies as usize / 10);
    for _ in 0..10 {
        append(&log, step.as_bytes());
    }
    let total = per_copy * (1 + copies / 10 * 10);
    wait_for_stats(&url, "every appended line", |s| s["lines"].as_u64() == Some(total));
    let grown = peak_kib(p.id());
    assert!(grown < MAX_PEAK_KIB && grown < start + (20 << 10), "{start} KiB -> {grown} KiB after 64 MiB of lines");

    // A 256 MiB line without a newline, then the rest of the line and one more.
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..256 {
        append(&log, &chunk);
    }
    append(&log, b" end\nafter the long line\n");
    // Once the line after it is counted, the long one was read to its end.
    let stats = wait_for_stats(&url, "the lines after it", |s| s["lines"].as_u64() == Some(total + 2));
    assert_eq!(stats["truncated_lines"], 1, "{stats}");
    let peak = peak_kib(p.id());
    assert!(peak < MAX_PEAK_KIB, "{peak} KiB after a 256 MiB line");
    let snap = snapshot(&url);
    let warned = snap["warnings"].as_array().unwrap().iter().any(|w| {
        w["class"] == "input" && w["text"].as_str().is_some_and(|t| t.contains("a line longer than 65536 bytes"))
    });
    assert!(warned, "the cut line is a warning: {}", snap["warnings"]);
    drop(p);
}

#[test]
fn serve_follow_keeps_following_when_its_log_is_replaced_by_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let own = std::fs::read_to_string(own_log(dir.path())).unwrap();
    let per_copy = own.lines().count() as u64;
    let log = dir.path().join("followed.log");
    std::fs::write(&log, &own).unwrap();
    let (mut p, url) = serve_follow(dir.path(), &log);
    wait_for_stats(&url, "the first copy", |s| s["lines"].as_u64() == Some(per_copy));
    // The path now names a character device (it ended the server before).
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink("/dev/null", &log).unwrap();
    let until = Instant::now() + DEADLINE;
    let said = loop {
        assert!(p.try_wait().is_none(), "serve exited when its log became a device");
        let snap = snapshot(&url);
        let said = snap["warnings"].as_array().unwrap().iter().find_map(|w| {
            w["text"]
                .as_str()
                .filter(|t| t.contains("it names a character device now, not a log file"))
                .map(str::to_string)
        });
        if let Some(said) = said {
            break said;
        }
        assert!(Instant::now() < until, "no warning: {}", snap["warnings"]);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(said.contains("followed.log"), "{said}");
    // A file again: it is read from its start, as after a rotation.
    std::fs::remove_file(&log).unwrap();
    std::fs::write(&log, &own).unwrap();
    wait_for_stats(&url, "the new file", |s| s["lines"].as_u64() == Some(2 * per_copy));
    assert!(p.try_wait().is_none(), "serve still runs");
}
