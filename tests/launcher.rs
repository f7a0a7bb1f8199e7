//! The local launcher (`--launch processes`): rank processes' errors reach the stderr they share as whole
//! lines, and the launcher when a rank process stops: held at its exit after the others
//! exited, or held between fork and exec. Processes are held by ptrace (`collscope_testkit::hold`, run in a
//! helper: this test binary run again as `hold_helper`), the one way to stop a process at those points every
//! time; the helper runs under a `Proc` deadline, and the launcher and its ranks share the helper's process
//! group, which the `Proc` kills at the end.

use crate::procs;

use collscope_testkit::hold::{self, At};
use collscope_testkit::{Proc, DEADLINE};
use nix::sys::signal::Signal;
use procs::{processes, LAUNCH_VARS};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// `COLLSCOPE_TIMEOUT_S` of every job here.
const TIMEOUT_S: u64 = 5;
/// What the launcher may take to end once a rank stopped: the timeout and 5 s.
const BOUND: Duration = Duration::from_secs(TIMEOUT_S + 5);
/// How long processes may take to go once the launcher has ended.
const LINGER: Duration = Duration::from_secs(5);
/// The variable that makes `hold_helper` the tracer: `exec N` or `exit N`, N the launcher's fork to hold.
const HOLD: &str = "COLLSCOPE_TEST_HOLD";
/// The launcher's arguments, for the helper, separated by this.
const ARGS: &str = "COLLSCOPE_TEST_HOLD_ARGS";

/// `cmd` with the environment of every job here: the timeout, no debug log, no launcher's variables.
fn job_env(cmd: &mut Command) -> &mut Command {
    cmd.env("COLLSCOPE_TIMEOUT_S", TIMEOUT_S.to_string()).env_remove("NCCL_DEBUG");
    for v in LAUNCH_VARS {
        cmd.env_remove(v);
    }
    cmd
}

/// Not a test of its own: the tracer, when a test runs this binary again with `HOLD` set.
#[test]
fn hold_helper() {
    let Ok(spec) = std::env::var(HOLD) else { return };
    let (at, nth) = spec.split_once(' ').expect("HOLD is 'exec N' or 'exit N'");
    let at = if at == "exec" { At::Exec } else { At::Exit };
    let args = std::env::var(ARGS).expect("the launcher's arguments");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args.split('\x1f')).env_remove(HOLD).env_remove(ARGS).stdin(Stdio::null()).stdout(Stdio::null());
    std::process::exit(hold::run(&mut cmd, nth.parse().expect("N"), at, LINGER));
}

/// A launcher of 3 rank processes under the tracer, its `nth` fork held at `at`.
struct Held {
    proc: Proc,
    /// The launcher's pid.
    root: u32,
    lines: Receiver<(Instant, String)>,
    err: std::thread::JoinHandle<String>,
}

impl Held {
    /// `None`, after a line saying so, where ptrace is not permitted.
    fn start(at: &str, nth: usize) -> Option<Held> {
        let args = ["perf", "all_reduce", "--nranks", "3", "--launch", "processes", "-b", "8", "-e", "8", "-n", "5"];
        let mut cmd = collscope_testkit::own::rerun(&collscope_testkit::own::test_path(module_path!(), "hold_helper"));
        cmd.env(HOLD, format!("{at} {nth}"))
            .env(ARGS, args.join("\x1f"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut proc = Proc::spawn(job_env(&mut cmd), DEADLINE);
        let (out, mut err) = (proc.take_stdout(), proc.take_stderr());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest's "test hold_helper ... " may lead the first line.
                if let Some((_, l)) = line.split_once("hold: ") {
                    let _ = tx.send((Instant::now(), l.to_string()));
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let first = lines.recv_timeout(DEADLINE).map(|l| l.1).unwrap_or_default();
        let Some(root) = first.strip_prefix("root ").and_then(|p| p.parse().ok()) else {
            eprintln!("skipped: the launcher cannot be traced here ({first})");
            return None;
        };
        Some(Held { proc, root, lines, err })
    }

    /// The next line of the tracer within `limit`, if any.
    fn next(&self, limit: Duration) -> Option<(Instant, String)> {
        self.lines.recv_timeout(limit).ok()
    }

    /// Waits for the tracer's "held PID".
    fn held(&self) -> (Instant, u32) {
        let (t, l) = self.next(DEADLINE).expect("the tracer holds a process");
        (t, l.strip_prefix("held ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("not held: {l}")))
    }

    /// How the launcher ended, within `limit` of `since`; panics saying what `waiting` was.
    fn root_ended(&self, since: Instant, waiting: &str) -> String {
        let left = BOUND.saturating_sub(since.elapsed());
        match self.next(left) {
            Some((t, l)) if l.starts_with("root ended ") => {
                eprintln!("the launcher ended by {} {:?} after {waiting}", &l[11..], t - since);
                l["root ended ".len()..].to_string()
            }
            Some((_, l)) => panic!("the tracer said '{l}' while {waiting}"),
            None => panic!("the launcher still ran {:?} after {waiting}", since.elapsed()),
        }
    }

    /// Whether the held process went with the launcher (the tracer waits `LINGER` for it), and the launcher's
    /// stderr.
    fn finish(mut self) -> (bool, String) {
        let gone = self.next(DEADLINE).map(|l| l.1);
        self.proc.wait();
        let err = self.err.join().unwrap_or_default();
        (gone.as_deref() == Some("held gone"), err)
    }
}

/// Processes left in the helper's group (the launcher's and its ranks') besides the helper.
fn left_in_group(helper: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.2 == helper && p.0 != helper).map(|p| p.0).collect()
}

fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

#[test]
fn a_rank_stopped_at_its_exit_after_the_others_exited_is_killed_and_named() {
    // The launcher's 3rd fork is rank 2: held at its exit, it never becomes a zombie the launcher could reap.
    let Some(h) = Held::start("exit", 3) else { return };
    let (stopped, _) = h.held();
    let how = h.root_ended(stopped, "rank 2 stopped at its exit");
    let (gone, err) = h.finish();
    assert_eq!(how, "exit 1", "the launcher fails\n{err}");
    assert!(gone, "rank 2 outlived its launcher\n{err}");
    assert!(
        err.contains("rank 2 (pid ") && err.contains(&format!(") did not exit within {} s of rank ", TIMEOUT_S + 2)),
        "{err}"
    );
    assert!(err.contains("'s exit; killed"), "{err}");
}

#[test]
fn a_child_stopped_before_exec_does_not_block_the_launcher() {
    // The 2nd fork is rank 1, held at its execve: the launcher's spawn of it never returns.
    let Some(h) = Held::start("exec", 2) else { return };
    let (stopped, pid) = h.held();
    let how = h.root_ended(stopped, "rank 1 stopped before exec");
    let helper = h.proc.id();
    let (gone, err) = h.finish();
    assert_eq!(how, "exit 1", "the launcher fails\n{err}");
    assert!(gone, "rank 1's process {pid} outlived its launcher\n{err}");
    assert!(err.contains(&format!("rank 1 (pid {pid}, ")), "{err}");
    assert!(err.contains(&format!(") did not start within {TIMEOUT_S} s (it stopped before exec); killed")), "{err}");
    assert_eq!(left_in_group(helper), Vec::<u32>::new());
}

#[test]
fn sigterm_or_sigint_while_a_child_is_stopped_before_exec_ends_the_job() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let Some(h) = Held::start("exec", 2) else { return };
        let (_, pid) = h.held();
        let sent = Instant::now();
        signal(h.root, sig);
        let how = h.root_ended(sent, &format!("{sig} to the launcher"));
        assert!(sent.elapsed() < LINGER, "{sig}: the launcher took {:?} to end", sent.elapsed());
        let (gone, err) = h.finish();
        assert_eq!(how, format!("signal {}", sig as i32), "the launcher ends by the signal\n{err}");
        assert!(gone, "{sig}: rank 1's process {pid} outlived its launcher\n{err}");
    }
}

#[test]
fn sigkill_of_the_launcher_while_a_child_is_stopped_before_exec_leaves_no_process() {
    let Some(h) = Held::start("exec", 2) else { return };
    let (_, pid) = h.held();
    signal(h.root, Signal::SIGKILL);
    let how = h.root_ended(Instant::now(), "SIGKILL to the launcher");
    let helper = h.proc.id();
    let (gone, err) = h.finish();
    assert_eq!(how, "signal 9");
    // The tracer waited LINGER for it: a process stopped before exec ends only by SIGKILL.
    assert!(gone, "rank 1's process {pid}, stopped before exec, outlived its launcher\n{err}");
    let t = Instant::now();
    while !left_in_group(helper).is_empty() && t.elapsed() < LINGER {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(left_in_group(helper), Vec::<u32>::new(), "rank processes outlived their launcher\n{err}");
}

#[test]
fn a_rank_stopped_mid_job_ends_the_job_within_the_timeout_and_5_s() {
    let args =
        ["perf", "all_reduce", "--nranks", "3", "--launch", "processes", "-b", "1M", "-e", "1M", "-n", "1000000"];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut launcher = Proc::spawn(job_env(&mut cmd), DEADLINE);
    let mut err = launcher.take_stderr();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let rank1 = collscope_testkit::poll("rank 1's process", DEADLINE, || {
        procs::rank_process(launcher.id(), 1).ok_or("not started")
    });
    // Let the ranks join and run calls before one stops.
    std::thread::sleep(Duration::from_secs(2));
    signal(rank1, Signal::SIGSTOP);
    let stopped = Instant::now();
    while launcher.try_wait().is_none() && stopped.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = stopped.elapsed();
    signal(rank1, Signal::SIGKILL);
    let status = launcher.wait();
    let err = err.join().unwrap_or_default();
    assert!(took < BOUND, "the launcher still ran {took:?} after rank 1 stopped\n{err}");
    assert!(!status.success(), "{err}");
    assert!(err.contains(&format!("rank 1 (pid {rank1}, stopped) was stopped when rank ")), "{err}");
}

/// Jobs run by the whole-lines test, and their ranks: on 2 cores about half the runs of 16 ranks cut a line
/// when errors are written piece by piece, so 10 runs all whole would be chance once in a thousand.
const WHOLE_RUNS: usize = 10;
const WHOLE_RANKS: usize = 16;

/// A line of the errors `collscope` prints, not cut by another process's write.
fn whole(line: &str) -> bool {
    line.is_empty()
        || line == "Caused by:"
        || line.starts_with("    ")
        || line.strip_prefix("Error: ").is_some_and(|rest| !rest.contains("Error: "))
}

#[test]
fn errors_of_ranks_failing_at_once_reach_their_shared_stderr_as_whole_lines() {
    let ranks = WHOLE_RANKS.to_string();
    // No host has 16 x 256 GiB for a 64 GiB all_reduce: every rank fails at once, each with its error.
    let args = ["perf", "all_reduce", "--nranks", &ranks, "--launch", "processes", "-b", "64G", "-e", "64G"];
    for run in 0..WHOLE_RUNS {
        let out =
            collscope_testkit::output(job_env(Command::new(env!("CARGO_BIN_EXE_collscope")).args(args)), DEADLINE);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "run {run}: the job cannot succeed\n{err}");
        let cut: Vec<&str> = err.lines().filter(|l| !whole(l)).collect();
        assert!(cut.is_empty(), "run {run}: lines cut by another rank's: {cut:?}\n{err}");
        // A rank still joining when a peer has failed names that peer, with the peer's error as its cause.
        let errors = err.lines().filter(|l| l.contains("all_reduce_perf at 64 GiB")).count();
        assert_eq!(errors, WHOLE_RANKS, "run {run}: every rank's error, each on a line of its own\n{err}");
    }
}
