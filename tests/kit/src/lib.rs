//! What collscope's tests share, and nothing else uses.
//!
//! - [`Proc`]: every child process a test starts runs in its own process group under a deadline. A watchdog
//!   thread kills the whole group (launcher and the ranks it started) when the deadline passes, so a test can
//!   block on a pipe or a wait and still never hang; dropping a `Proc` kills the group too.
//! - [`fixtures`]: the real NCCL logs in `../shared/fixtures/nccl-logs` (and [`shared`]: anything else there),
//!   which exist beside a developer's checkout but not beside a fresh clone. A test that needs them asks here and
//!   skips with one line otherwise.
//! - [`hold`]: a process of a job held stopped at its exec or its exit (ptrace), for the launcher's tests.
//! - [`own`]: a test that needs a process of its own ([`own_process!`]) in a crate's one test binary.
//! - [`fleet`]: many synthetic rank endpoints and a real Prometheus scraping them (the job view at scale).

pub mod fleet;
pub mod hold;
pub mod own;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one program a test starts may run before its group is killed and the test fails: generous on a
/// loaded 2-core machine, but no test can hang.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A child process (and its process group) with a deadline.
pub struct Proc {
    child: Arc<Mutex<Child>>,
    pid: u32,
    timed_out: Arc<AtomicBool>,
    /// Dropping it tells the watchdog the child was reaped.
    _done: mpsc::Sender<()>,
    what: String,
    limit: Duration,
}

impl Proc {
    /// Starts `cmd` in a new process group; the group is killed with SIGKILL once `limit` has passed.
    pub fn spawn(cmd: &mut Command, limit: Duration) -> Proc {
        let what = format!("{cmd:?}");
        let child = cmd.process_group(0).spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        let timed_out = Arc::new(AtomicBool::new(false));
        let (done, stop) = mpsc::channel::<()>();
        let (watched, flag) = (Arc::clone(&child), Arc::clone(&timed_out));
        std::thread::spawn(move || {
            if stop.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
                // Under the lock: the child is either still unreaped (its pid cannot be reused) or reaped by
                // `try_wait`, in which case std knows and nothing is signalled.
                let mut child = lock(&watched);
                if matches!(child.try_wait(), Ok(None)) {
                    flag.store(true, Ordering::SeqCst);
                    kill_group(pid);
                    let _ = child.wait();
                }
            }
        });
        Proc { child, pid, timed_out, _done: done, what, limit }
    }

    pub fn id(&self) -> u32 {
        self.pid
    }

    pub fn take_stdin(&mut self) -> ChildStdin {
        lock(&self.child).stdin.take().expect("stdin was piped and not taken before")
    }

    pub fn take_stdout(&mut self) -> ChildStdout {
        lock(&self.child).stdout.take().expect("stdout was piped and not taken before")
    }

    pub fn take_stderr(&mut self) -> ChildStderr {
        lock(&self.child).stderr.take().expect("stderr was piped and not taken before")
    }

    /// Whether the deadline killed it.
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }

    /// Sends `signal` to the child alone (not its group), if it has not been reaped.
    pub fn signal(&self, signal: i32) {
        let mut child = lock(&self.child);
        if matches!(child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) with the pid of our own unreaped child.
            unsafe { libc::kill(self.pid as i32, signal) };
        }
    }

    /// The exit status if it has ended, without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        lock(&self.child).try_wait().expect("try_wait on a child")
    }

    /// Waits for the child to end; the deadline bounds the wait. Anything it left in its process group is
    /// killed then, so no stray process outlives the test.
    pub fn wait(&mut self) -> ExitStatus {
        let status = loop {
            if let Some(status) = self.try_wait() {
                break status;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        kill_group(self.pid);
        status
    }

    /// Like [`Proc::wait`], and collects whatever of stdout and stderr was piped and not taken.
    pub fn wait_with_output(mut self) -> Output {
        let (out, err) = {
            let mut child = lock(&self.child);
            (child.stdout.take().map(drain), child.stderr.take().map(drain))
        };
        let status = self.wait();
        let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap_or_default());
        Output { status, stdout: join(out).unwrap_or_default(), stderr: join(err).unwrap_or_default() }
    }

    /// Like [`Proc::wait_with_output`], and panics naming the command when the deadline killed it.
    pub fn finish(self) -> Output {
        let (what, limit) = (self.what.clone(), self.limit);
        let timed_out = Arc::clone(&self.timed_out);
        let out = self.wait_with_output();
        if timed_out.load(Ordering::SeqCst) {
            panic!(
                "{what} was killed at its {limit:?} deadline\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let mut child = lock(&self.child);
        if matches!(child.try_wait(), Ok(None)) {
            kill_group(self.pid);
            let _ = child.wait();
        }
        kill_group(self.pid);
    }
}

/// Runs `cmd` to completion with stdout and stderr captured; panics naming it if `limit` passes first.
pub fn output(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    Proc::spawn(cmd, limit).finish()
}

fn lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn kill_group(pgid: u32) {
    // SAFETY: kill(2) on a process group we created; ESRCH once it is empty is fine.
    unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// `../shared/PATH` beside the checkout, or `None` after printing one line that names the test's purpose (`what`)
/// as skipped.
pub fn shared(path: &str, what: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared").join(path);
    if dir.exists() {
        Some(dir)
    } else {
        eprintln!("skipped: {what} (reads ../shared/{path}, absent beside this checkout)");
        None
    }
}

/// The real NCCL logs beside the checkout (`../shared/fixtures/nccl-logs`); see [`shared`].
pub fn fixtures(what: &str) -> Option<PathBuf> {
    shared("fixtures/nccl-logs", what)
}

/// A loopback base port whose next `n` ports are free now (ranks serve on base + local rank).
pub fn free_ports(n: u16) -> u16 {
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let base = first.local_addr().unwrap().port();
        let rest: Vec<_> = (1..n)
            .map_while(|i| base.checked_add(i))
            .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if rest.len() == usize::from(n - 1) {
            return base;
        }
    }
}

/// Polls `f` every 100 ms until it gives something, at most `limit`; the panic names `what` and `f`'s last answer.
pub fn poll<T, L: std::fmt::Debug>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, L>) -> T {
    let until = std::time::Instant::now() + limit;
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if std::time::Instant::now() >= until => panic!("waited {limit:?} for {what}; last: {last:?}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_child_past_its_deadline_is_killed_with_its_group() {
        let started = Instant::now();
        let mut p = Proc::spawn(Command::new("sh").args(["-c", "sleep 30 & sleep 30"]), Duration::from_millis(300));
        let status = p.wait();
        assert!(p.timed_out() && !status.success());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn output_of_a_quick_child() {
        let out = output(Command::new("sh").args(["-c", "echo hi; echo err >&2"]), Duration::from_secs(10));
        assert!(out.status.success());
        assert_eq!(out.stdout, b"hi\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    #[should_panic(expected = "deadline")]
    fn finish_names_a_timeout() {
        output(Command::new("sleep").arg("30"), Duration::from_millis(200));
    }

    #[test]
    fn a_blocked_reader_is_freed_by_the_deadline() {
        let mut p = Proc::spawn(Command::new("sleep").arg("30").stdout(Stdio::piped()), Duration::from_millis(200));
        let mut out = String::new();
        p.take_stdout().read_to_string(&mut out).unwrap();
        assert!(p.wait().code().is_none() && p.timed_out());
    }
}
