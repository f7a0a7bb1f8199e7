//! Holds one process of a job stopped where a test wants it, by ptrace(2): the one way to stop a process
//! reproducibly at a given point of its life (between fork and exec, or at its exit) without a hook in the
//! program under test.
//!
//! [`run`] is the body of a helper process (a test binary run again, see `tests/launcher.rs`): it starts a
//! command traced, follows its threads and forks, detaches every process that command forks except the `nth`,
//! and holds that one at [`At`]. It says what happens on stdout, one `hold: ...` line each:
//! `hold: root PID`, `hold: held PID` (the process is at its hold point), `hold: root ended HOW`, then
//! `hold: held gone` or `hold: held alive` (still there `linger` after the root ended). The helper's own
//! `Proc` bounds it; `PTRACE_O_EXITKILL` kills every process it still traces if it dies.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the held process stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// At its `execve` call: forked, its pre-exec steps done, not yet the new program.
    Exec,
    /// At its `exit_group` call: done, not yet a zombie its parent could reap.
    Exit,
}

/// The exit status of a helper that could not trace (ptrace not permitted here): the test skips.
pub const NO_PTRACE: i32 = 77;

#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Traced on: a thread of a traced process, or the held process.
    Follow,
    /// Let go: any other process forked.
    Detach,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "hold: {line}");
    let _ = out.flush();
}

fn ptrace(req: libc::c_uint, pid: i32, data: usize) -> i64 {
    // SAFETY: requests on our own tracees with an integer `data` (a signal, options) or, for
    // PTRACE_GETEVENTMSG, a pointer to a live c_ulong the caller passes.
    unsafe { libc::ptrace(req, pid, 0usize, data) }
}

fn tgid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// The system call `pid` is stopped in, from /proc (the number is the architecture's).
fn syscall_nr(pid: i32) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?.split_whitespace().next()?.parse().ok()
}

/// Runs `cmd` traced; holds the `nth` (from 1) process the command's own process forks at `at`. Returns the
/// helper's exit status: 0, or [`NO_PTRACE`].
pub fn run(cmd: &mut Command, nth: usize, at: At, linger: Duration) -> i32 {
    // SAFETY: PTRACE_TRACEME is one system call, safe between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let root = match cmd.spawn() {
        Ok(c) => c.id() as i32,
        Err(e) => {
            say(&format!("cannot trace: {e}"));
            return NO_PTRACE;
        }
    };
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid status pointer.
    unsafe { libc::waitpid(root, &mut status, libc::__WALL) };
    let opts = libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACESYSGOOD
        | libc::PTRACE_O_EXITKILL;
    ptrace(libc::PTRACE_SETOPTIONS, root, opts as usize);
    ptrace(libc::PTRACE_CONT, root, 0);
    say(&format!("root {root}"));

    let mut forks = 0;
    // What each new tracee is, from its parent's fork or clone event.
    let mut roles: HashMap<i32, Role> = HashMap::new();
    // Tracees past their first stop (the SIGSTOP a new tracee starts with); a later SIGSTOP is a signal.
    let mut started: HashSet<i32> = HashSet::from([root]);
    // Tracees whose first stop came before their parent's event said what they are.
    let mut early: HashSet<i32> = HashSet::new();
    let mut held: Option<i32> = None;
    let mut held_gone = false;
    let mut root_ended: Option<Instant> = None;
    let target = match at {
        At::Exec => libc::SYS_execve,
        At::Exit => libc::SYS_exit_group,
    };
    // The held process's first thread runs from system call to system call until it reaches `target`.
    let resume = |pid: i32, held: Option<i32>, sig: i32| {
        let req = if Some(pid) == held { libc::PTRACE_SYSCALL } else { libc::PTRACE_CONT };
        ptrace(req, pid, sig as usize)
    };
    let start = |pid: i32, role: Role, held: Option<i32>| match role {
        Role::Detach => ptrace(libc::PTRACE_DETACH, pid, 0),
        _ => resume(pid, held, 0),
    };
    loop {
        if let Some(t) = root_ended {
            if held.is_none() || held_gone {
                break;
            }
            if t.elapsed() > linger {
                say("held alive");
                return 0;
            }
        }
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
        if pid < 0 && root_ended.is_some() {
            break; // nothing left to wait for
        }
        if pid <= 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if pid == root {
                let how = if libc::WIFEXITED(status) {
                    format!("exit {}", libc::WEXITSTATUS(status))
                } else {
                    format!("signal {}", libc::WTERMSIG(status))
                };
                say(&format!("root ended {how}"));
                root_ended = Some(Instant::now());
            }
            held_gone |= Some(pid) == held;
            continue;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let (sig, event) = (libc::WSTOPSIG(status), status >> 16);
        match event {
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                let mut new: libc::c_ulong = 0;
                ptrace(libc::PTRACE_GETEVENTMSG, pid, &mut new as *mut libc::c_ulong as usize);
                let new = new as i32;
                let role = if event == libc::PTRACE_EVENT_CLONE {
                    Role::Follow
                } else if tgid(pid) == Some(root) {
                    forks += 1;
                    if forks == nth {
                        held = Some(new);
                        Role::Follow
                    } else {
                        Role::Detach
                    }
                } else {
                    Role::Detach
                };
                roles.insert(new, role);
                if early.remove(&new) {
                    start(new, role, held);
                }
                resume(pid, held, 0);
            }
            // Held: left stopped there.
            0 if sig == libc::SIGTRAP | 0x80 && syscall_nr(pid) == Some(target) => say(&format!("held {pid}")),
            0 if sig == libc::SIGTRAP | 0x80 => {
                resume(pid, held, 0);
            }
            0 if sig == libc::SIGSTOP && started.insert(pid) => match roles.get(&pid) {
                Some(&role) => {
                    start(pid, role, held);
                }
                None => {
                    early.insert(pid);
                }
            },
            // A signal for the tracee: passed on.
            0 => {
                resume(pid, held, sig);
            }
            _ => {
                resume(pid, held, 0);
            }
        }
    }
    if held.is_some() {
        say("held gone");
    }
    0
}
