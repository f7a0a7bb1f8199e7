//! End-to-end failures of real rank processes: every wait ends within `COLLSCOPE_TIMEOUT_S` + 5 s with an error
//! naming the rank or the input at fault, ranks die with their launcher, and what cannot work is an error, not
//! an abort. Every process runs under a deadline (`collscope_testkit::Proc`); each test checks the exit status,
//! the error, the time taken, that no process of the job is left and that none left anything in /dev/shm.

use crate::procs;

use collscope_testkit::{Proc, DEADLINE};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use procs::{children_of, processes, rank_process, LAUNCH_VARS};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `COLLSCOPE_TIMEOUT_S` of every job here.
const TIMEOUT_S: u64 = 5;
/// What each failure may take: the timeout and 5 s.
const BOUND: Duration = Duration::from_secs(TIMEOUT_S + 5);
/// How long ranks may take to go once their launcher has ended.
const LINGER: Duration = Duration::from_secs(5);

fn collscope(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_collscope"));
    c.args(args)
        .env("COLLSCOPE_TIMEOUT_S", TIMEOUT_S.to_string())
        .env_remove("NCCL_DEBUG")
        .env_remove("NCCL_TOPO_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in LAUNCH_VARS {
        c.env_remove(v);
    }
    c
}

/// A torchrun-style rank: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`/`MASTER_PORT`.
fn torchrun_rank(rank: u32, world: u32, port: u16) -> Command {
    let mut c = collscope(&["perf", "all_reduce", "-b", "8", "-e", "8"]);
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string());
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn group_members(pgid: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.2 == pgid).map(|p| p.0).collect()
}

/// Segments in /dev/shm created by any of `pids`.
fn segments_of(pids: &BTreeSet<u32>) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pids.iter().any(|p| n.starts_with(&format!("collscope-{p}-"))))
                .collect()
        })
        .unwrap_or_default()
}

fn signal_group(pgid: u32) {
    let _ = nix::sys::signal::killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
}

fn drain(pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(pipe).read_to_string(&mut s);
        s
    })
}

/// A collscope process (a launcher and the ranks it starts, or one rank) in its own process group.
struct Job {
    proc: Proc,
    pgid: u32,
    start: Instant,
    stdout: Option<BufReader<ChildStdout>>,
    out: Option<JoinHandle<String>>,
    err: JoinHandle<String>,
    /// Every process seen in its group.
    seen: BTreeSet<u32>,
}

struct Ended {
    status: ExitStatus,
    took: Duration,
    err: String,
}

impl Job {
    fn start(cmd: &mut Command) -> Job {
        let start = Instant::now();
        let mut proc = Proc::spawn(cmd, DEADLINE);
        let (stdout, err) = (BufReader::new(proc.take_stdout()), drain(proc.take_stderr()));
        let pgid = proc.id();
        Job { proc, pgid, start, stdout: Some(stdout), out: None, err, seen: BTreeSet::from([pgid]) }
    }

    /// Reads stdout until a line for which `found` holds; the rest is collected as the job runs.
    fn wait_for_line(&mut self, found: impl Fn(&str) -> bool) -> String {
        let mut reader = self.stdout.take().expect("stdout still being read");
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).unwrap_or(0);
            assert!(n > 0, "stdout ended before the awaited line");
            if found(&line) {
                self.out = Some(drain(reader));
                return line;
            }
        }
    }

    /// The processes of its group now.
    fn members(&mut self) -> Vec<u32> {
        let m = group_members(self.pgid);
        self.seen.extend(&m);
        m
    }

    /// Waits for the process to end, then checks that nothing of its group is left (killing and failing if
    /// so) and that none of its processes left a segment in /dev/shm.
    fn end(mut self) -> Ended {
        let status = loop {
            self.members();
            if let Some(s) = self.proc.try_wait() {
                break s;
            }
            assert!(self.start.elapsed() < DEADLINE, "still running after {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = self.start.elapsed();
        let ended = Instant::now();
        while !self.members().is_empty() && ended.elapsed() < LINGER {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = self.members();
        if !left.is_empty() {
            signal_group(self.pgid);
            panic!("processes {left:?} outlived their launcher by {LINGER:?}");
        }
        // What is left of stdout is read (so the job never blocks on it) and not needed.
        match (self.out.take(), self.stdout.take()) {
            (Some(h), _) => drop(h.join()),
            (None, Some(r)) => drop(drain(r).join()),
            (None, None) => {}
        }
        let err = self.err.join().unwrap_or_default();
        assert_eq!(segments_of(&self.seen), Vec::<String>::new(), "segments left in /dev/shm\n{err}");
        Ended { status, took, err }
    }
}

fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), sig);
}

/// A failure within the bound, non-zero, by exit (not by a signal: no abort).
fn assert_failed_in_time(e: &Ended, what: &str) {
    assert!(!e.status.success() && e.status.code().is_some(), "{what}: {:?}\n{}", e.status, e.err);
    assert!(e.took < BOUND, "{what} took {:?}, more than {BOUND:?}\n{}", e.took, e.err);
}

#[test]
fn too_few_ranks_for_world_size_end_naming_the_rank_that_never_came() {
    let port = free_port();
    let jobs: Vec<Job> = (0..2).map(|r| Job::start(&mut torchrun_rank(r, 3, port))).collect();
    for (r, job) in jobs.into_iter().enumerate() {
        let e = job.end();
        assert_failed_in_time(&e, &format!("rank {r}"));
        assert!(e.err.contains(&format!("rank {r} of 3, while")), "rank {r} says where it waited:\n{}", e.err);
        assert!(e.err.contains("rank 2 never checked in") && e.err.contains("2 of 3 did: 0, 1"), "{}", e.err);
    }
}

#[test]
fn ranks_that_disagree_on_world_size_are_told_at_once() {
    let port = free_port();
    let jobs = [Job::start(&mut torchrun_rank(0, 2, port)), Job::start(&mut torchrun_rank(1, 3, port))];
    for (r, job) in jobs.into_iter().enumerate() {
        let e = job.end();
        assert_failed_in_time(&e, &format!("rank {r}"));
        assert!(e.err.contains("disagree on the number of ranks (WORLD_SIZE)"), "{}", e.err);
        assert!(e.err.contains("rank 0 said 2") && e.err.contains("rank 1 said 3"), "{}", e.err);
    }
}

#[test]
fn a_root_that_never_comes_is_reported_within_the_timeout() {
    let e = Job::start(&mut torchrun_rank(1, 2, free_port())).end();
    assert_failed_in_time(&e, "rank 1");
    assert!(e.took >= Duration::from_secs(TIMEOUT_S - 1), "gave up before the timeout: {:?}", e.took);
    assert!(e.err.contains("rank 1 of 2, while connecting to the bootstrap root at 127.0.0.1"), "{}", e.err);
    assert!(e.err.contains(&format!("no root answered within {TIMEOUT_S} s")), "{}", e.err);
}

#[test]
fn a_rank_killed_after_checking_in_is_named_before_any_timeout() {
    let port = free_port();
    // Rank 0 hosts the root and traces the check-ins; rank 2 never comes.
    let mut rank0 = Job::start(
        torchrun_rank(0, 3, port)
            .env("COLLSCOPE_TIMEOUT_S", "60")
            .env("NCCL_DEBUG", "TRACE")
            .env("NCCL_DEBUG_SUBSYS", "BOOTSTRAP"),
    );
    let rank1 = Job::start(torchrun_rank(1, 3, port).env("COLLSCOPE_TIMEOUT_S", "60"));
    rank0.wait_for_line(|l| l.contains("Received connect from rank 1"));
    let killed = Instant::now();
    rank1.proc.signal(Signal::SIGKILL as i32);
    let e1 = rank1.end();
    assert_eq!(e1.status.code(), None, "rank 1 was killed");
    let e0 = rank0.end();
    assert!(!e0.status.success() && killed.elapsed() < Duration::from_secs(10), "{:?}\n{}", e0.status, e0.err);
    assert!(e0.err.contains("rank 1 closed its connection to the root"), "{}", e0.err);
}

/// `perf all_reduce` of `bytes`, `iters` times, on 3 rank processes started by collscope's launcher.
fn three_rank_processes(bytes: &str, iters: &str) -> Command {
    collscope(&["perf", "all_reduce", "--nranks", "3", "--launch", "processes", "-b", bytes, "-e", bytes, "-n", iters])
}

/// A launcher of 3 rank processes running a long job, once rank 0 has printed its device lines.
fn running_launcher() -> (Job, Vec<u32>) {
    let mut job = Job::start(&mut three_rank_processes("64K", "20000000"));
    job.wait_for_line(|l| l.starts_with("#  Rank  2"));
    let ranks = children_of(job.proc.id());
    assert_eq!(ranks.len(), 3, "{ranks:?}");
    job.members();
    (job, ranks)
}

#[test]
fn killing_the_launcher_ends_its_ranks_whatever_the_signal() {
    for sig in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
        let (job, ranks) = running_launcher();
        let sent = Instant::now();
        signal(job.proc.id(), sig);
        // `end` fails if a rank outlives the launcher by more than LINGER, and checks /dev/shm.
        let e = job.end();
        assert_eq!(e.status.code(), None, "{sig}: the launcher ends by the signal: {:?}", e.status);
        let alive: Vec<u32> = processes().into_iter().map(|p| p.0).filter(|p| ranks.contains(p)).collect();
        assert!(alive.is_empty(), "{sig}: ranks {alive:?} still run");
        assert!(sent.elapsed() < LINGER, "{sig}: the ranks took {:?} to go", sent.elapsed());
    }
}

#[test]
fn a_rank_killed_right_after_it_started_is_named_by_the_others() {
    let mut job = Job::start(&mut three_rank_processes("8", "2000000"));
    let victim = loop {
        if let Some(pid) = rank_process(job.proc.id(), 1) {
            break pid;
        }
        assert!(job.start.elapsed() < BOUND, "rank 1 did not start");
        std::thread::sleep(Duration::from_millis(1));
    };
    job.members();
    signal(victim, Signal::SIGKILL);
    let e = job.end();
    assert_failed_in_time(&e, "the launcher");
    assert!(e.err.contains("rank 1 exited with signal: 9"), "{}", e.err);
    assert!(!e.err.contains("did not exit within"), "the others waited for the launcher to kill them:\n{}", e.err);
    for r in [0, 2] {
        assert!(e.err.contains(&format!("rank {r} exited with exit status: 1")), "rank {r}:\n{}", e.err);
    }
    // Besides the launcher's summary, the ranks' own errors name rank 1.
    let own = e.err.lines().filter(|l| !l.contains("exited with")).collect::<Vec<_>>().join("\n");
    assert!(own.contains("rank 1"), "{}", e.err);
}

/// A rank whose chosen telemetry port another program holds serves on a free one and says so (issue 55: a
/// taken port never kills a rank); the job runs to its end without waiting on it.
#[test]
fn a_rank_whose_metrics_port_is_taken_serves_on_another_and_the_job_runs() {
    // Four free consecutive ports; the third (rank 2's) stays taken.
    let (base, _taken) = loop {
        let base = free_port();
        let held: Vec<_> =
            (0..4).filter_map(|i| std::net::TcpListener::bind(("127.0.0.1", base.checked_add(i)?)).ok()).collect();
        if held.len() == 4 {
            let mut held = held;
            break (base, held.swap_remove(2));
        }
    };
    let addr = format!("127.0.0.1:{base}");
    let e = Job::start(&mut collscope(&["demo", "--no-tui", "--steps", "5", "--nranks", "4", "--metrics-addr", &addr]))
        .end();
    assert!(e.status.success(), "a taken port killed the job:\n{}", e.err);
    let said =
        format!("telemetry port {} is taken by another program (chosen with --metrics-addr); serving rank 2", base + 2);
    assert!(e.err.contains(&said), "{}", e.err);
    assert!(e.took < Duration::from_secs(TIMEOUT_S), "no rank waited for another: {:?}", e.took);
}

#[test]
fn a_buffer_that_cannot_be_allocated_is_an_error_naming_size_and_rank() {
    for launch in ["threads", "processes"] {
        let e = Job::start(&mut collscope(&[
            "perf",
            "all_reduce",
            "--nranks",
            "2",
            "--launch",
            launch,
            "-b",
            "64G",
            "-e",
            "64G",
        ]))
        .end();
        assert_failed_in_time(&e, launch);
        assert!(e.err.contains("rank 0: all_reduce_perf at 64 GiB") && e.err.contains("available"), "{}", e.err);
    }
}

/// `args` with `var=value` ends at once, non-zero, with an error holding each of `wanted`.
fn bad_setting(cmd: &mut Command, var: &str, value: &str, wanted: &[&str]) {
    let e = Job::start(cmd.env(var, value).env("COLLSCOPE_TELEMETRY", "0")).end();
    assert_failed_in_time(&e, var);
    assert!(e.took < Duration::from_secs(TIMEOUT_S), "{var}: an input error is immediate: {:?}", e.took);
    for w in wanted {
        assert!(e.err.contains(w), "{var}={value}: no '{w}' in\n{}", e.err);
    }
}

#[test]
fn bad_settings_are_errors_naming_them() {
    let perf = ["perf", "all_reduce", "--nranks", "2", "-b", "8", "-e", "8"];
    let too_long = ["COLLSCOPE_TIMEOUT_S='99999999999999999999'", "out of range", "from 1 to 2147483647"];
    bad_setting(&mut collscope(&perf), "COLLSCOPE_TIMEOUT_S", "99999999999999999999", &too_long);

    // One rank of one, meeting where NCCL_COMM_ID says.
    let mut one = collscope(&["perf", "all_reduce", "-b", "8", "-e", "8"]);
    one.env("RANK", "0").env("WORLD_SIZE", "1");
    let unresolved = ["NCCL_COMM_ID", "the host 'no-such-host.invalid'", "could not be resolved"];
    bad_setting(&mut one, "NCCL_COMM_ID", "no-such-host.invalid:29500", &unresolved);

    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("broken-topo.xml");
    std::fs::write(&topo, "<system version=\"1\"><cpu").unwrap();
    let demo = ["demo", "--no-tui", "--steps", "1", "--nranks", "2"];
    for args in [&perf[..], &demo[..]] {
        let named = ["NCCL_TOPO_FILE", "broken-topo.xml:1: malformed XML"];
        bad_setting(&mut collscope(args), "NCCL_TOPO_FILE", topo.to_str().unwrap(), &named);
    }
}

#[test]
fn killing_one_of_four_processes_ends_the_others_with_a_named_error() {
    let port = free_port();
    let mut ranks: Vec<Job> = (0..4)
        .map(|r| {
            Job::start(
                collscope(&["demo", "--duration", "120", "--grad-mib", "1"])
                    .env("COLLSCOPE_RANK", r.to_string())
                    .env("COLLSCOPE_NRANKS", "4")
                    .env("COLLSCOPE_LOCAL_RANK", r.to_string())
                    .env("COLLSCOPE_TELEMETRY", "0")
                    .env("NCCL_COMM_ID", format!("127.0.0.1:{port}")),
            )
        })
        .collect();
    // Wait until the job is running (rank 0 printed a few steps).
    ranks[0].wait_for_line(|l| l.starts_with("step    2"));
    let victim = ranks.remove(2);
    victim.proc.signal(Signal::SIGKILL as i32);
    let killed = Instant::now();
    assert_eq!(victim.end().status.code(), None);
    for (r, job) in [0, 1, 3].into_iter().zip(ranks) {
        let e = job.end();
        assert!(!e.status.success(), "rank {r} exited successfully");
        assert!(e.err.contains("rank 2"), "rank {r} does not name rank 2: {}", e.err);
        let names_op = ["AllReduce #", "AllGather #", "ReduceScatter #"].iter().any(|op| e.err.contains(op));
        assert!(names_op, "rank {r} does not name the operation and its sequence number: {}", e.err);
    }
    // The keep-alive notices the closed connections at once: 2 s on an idle machine, more under load.
    assert!(killed.elapsed() < Duration::from_secs(5), "{:?}", killed.elapsed());
}
