//! Runs one body on every rank of a job: ranks as threads of this process, as processes of this program
//! started here (the local launcher), or as the one rank this process is when a launcher (collscope's,
//! torchrun, Open MPI, Slurm) started it.
//!
//! Rank processes never outlive the launcher here: each gets `PR_SET_PDEATHSIG` between fork and exec (SIGKILL,
//! which ends even a process stopped there; SIGTERM once the rank runs), so the kernel ends it however the
//! launcher dies, SIGKILL included; a SIGTERM or SIGINT to the launcher ends the ranks first, even while one
//! is being started. A rank process ended by SIGTERM, SIGINT or SIGHUP removes its named shared memory
//! segments on the way out (the kernel frees its ports). Once one rank exits the others have
//! `COLLSCOPE_TIMEOUT_S` and 2 s to end before they are killed and named, so a stopped rank never holds the
//! launcher.

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_runtime::bootstrap::tcp::{RootHandle, UniqueId};
use collscope_runtime::comm::affinity;
use collscope_runtime::comm::job::{self, JobComm};
use collscope_runtime::comm::launch::{detect, LaunchInfo};
use collscope_runtime::sync::wait::timeout_from_env;
use collscope_runtime::transport::segment::unlink_own_segments;
use collscope_runtime::{Comm, CommOptions};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LaunchMode {
    Threads,
    Processes,
}

/// Which transport connects ranks on this host (`auto` lets NCCL's order decide: P2P, SHM, NET).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportChoice {
    Auto,
    P2p,
    Shm,
    Socket,
}

/// How long the others may take to end once one rank failed before they are killed.
const GRACE: Duration = Duration::from_secs(15);
/// Beyond `COLLSCOPE_TIMEOUT_S`, how long the others may take to end once one rank exited: a rank whose peers
/// are gone fails its wait within the timeout, and 2 s covers its exit (unlinking segments, flushing output) on
/// a loaded host while a stopped rank is still ended within the timeout and 5 s.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long a killed process may take to be reaped: SIGKILL ends even a stopped one at once; one asleep in
/// the kernel (a hung file system) is left to init rather than hang the launcher.
const REAP: Duration = Duration::from_secs(2);
/// The longest /proc file read here (a thread's children, a process's status: a few hundred bytes).
const PROC_FILE_MAX: u64 = 64 * 1024;
/// How long rank processes may take to end after the launcher passed them a SIGTERM before they are killed.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// Signals that end a job: the launcher passes them on as SIGTERM, ranks clean up and end by them.
const ENDING: [i32; 3] = [SIGTERM, SIGINT, SIGHUP];

/// What a rank's body gets.
pub(crate) struct Rank<'a> {
    pub comm: &'a mut Comm,
    pub local_rank: u32,
    /// The number of threads in this process that are ranks (nccl-tests' `nThread`).
    pub threads_per_process: u32,
    /// How long creating the communicator took (all of this process's ranks, for ranks as threads).
    pub init: Duration,
}

pub(crate) struct Job {
    pub nranks: u32,
    pub launch: LaunchMode,
    pub transport: TransportChoice,
    /// Set while a TUI owns this terminal and the ranks run behind it.
    pub background: Option<Background>,
}

/// Rank processes started here while a TUI owns the terminal.
pub(crate) struct Background {
    /// Where they write their output instead of the terminal.
    pub output: PathBuf,
    /// Set (by the TUI's `q`) to end them.
    pub stop: Arc<AtomicBool>,
    /// Added to the ranks' command line (this process's own arguments).
    pub rank_args: Vec<String>,
}

/// The environment with `transport` applied (`NCCL_P2P_DISABLE` / `NCCL_SHM_DISABLE`).
pub(crate) fn transport_env(env: &Env, transport: TransportChoice) -> Env {
    match transport {
        TransportChoice::Auto => env.clone(),
        TransportChoice::P2p => env.with("NCCL_SHM_DISABLE", "1"),
        TransportChoice::Shm => env.with("NCCL_P2P_DISABLE", "1"),
        TransportChoice::Socket => env.with("NCCL_P2P_DISABLE", "1").with("NCCL_SHM_DISABLE", "1"),
    }
}

/// Whether a launcher started this process as one rank.
pub(crate) fn launched() -> Result<Option<LaunchInfo>> {
    Ok(detect(collscope_debug::params::process_var)?)
}

/// Runs `body` on every rank and returns once all ended; the first rank error is returned.
pub(crate) fn run(job: &Job, body: impl Fn(Rank) -> Result<()> + Sync) -> Result<()> {
    let env = transport_env(&Env::from_process(), job.transport);
    if let Some(info) = launched()? {
        return run_launched(&info, env, body);
    }
    if job.nranks == 0 {
        bail!("--nranks must be at least 1");
    }
    match job.launch {
        LaunchMode::Threads => run_threads(job.nranks, env, body),
        LaunchMode::Processes => {
            if job.transport == TransportChoice::P2p {
                bail!("--transport p2p connects ranks of one process: use it with --launch threads");
            }
            spawn_processes(job.nranks, &env, job.background.as_ref())
        }
    }
}

fn opts(env: Env) -> CommOptions {
    CommOptions { env, net: None, name: None }
}

fn run_launched(info: &LaunchInfo, env: Env, body: impl Fn(Rank) -> Result<()>) -> Result<()> {
    clean_up_on_signals()?;
    // Collscope's launcher armed SIGKILL for the time before exec (`die_with`); from here the rank has segments
    // to remove, so its launcher's death becomes a SIGTERM, which the handler just installed cleans up on.
    if nix::sys::prctl::get_pdeathsig().context("cannot read the rank's parent-death signal")?.is_some() {
        nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).context("cannot set the rank's parent-death signal")?;
    }
    let (id, env) = info.unique_id(&env)?;
    collscope_debug::set_thread_device(info.local_rank as i32);
    let started = Instant::now();
    let mut comm = JobComm::init_rank(&id, info.nranks, info.rank, opts(env))
        .with_context(|| format!("rank {} of {} ({} launch)", info.rank, info.nranks, info.launcher))?;
    let init = started.elapsed();
    let res = body(Rank { comm: &mut comm, local_rank: info.local_rank, threads_per_process: 1, init });
    if let Err(e) = res {
        // Name the dead peer when the watchdog found one, even if a wait noticed first.
        return Err(match comm.await_peer_failure(job::NOTICE) {
            Some(f) if !format!("{e:#}").contains(&format!("rank {}", f.rank)) => e.context(f.to_string()),
            _ => e,
        });
    }
    comm.finish()?;
    Ok(())
}

fn run_threads(n: u32, env: Env, body: impl Fn(Rank) -> Result<()> + Sync) -> Result<()> {
    let started = Instant::now();
    let cpus = affinity::plan(&env, n)?;
    let comms = job::init_threads(n, opts(env))?;
    let init = started.elapsed();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                let (body, cpus) = (&body, &cpus);
                s.spawn(move || {
                    let r = c.rank();
                    collscope_debug::set_thread_device(r as i32);
                    if let Some(cpus) = cpus {
                        affinity::pin_rank(r, cpus[r as usize]);
                    }
                    body(Rank { comm: &mut c, local_rank: r, threads_per_process: n, init })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a rank thread panicked")))).collect()
    });
    results.into_iter().collect()
}

/// What a rank process does on SIGTERM before it ends (its telemetry's dumps), in its signal thread.
static BEFORE_SIGTERM: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Sets what this rank process does on SIGTERM before it ends (once: a later call changes nothing).
pub(crate) fn before_sigterm(f: impl Fn() + Send + Sync + 'static) {
    let _ = BEFORE_SIGTERM.set(Box::new(f));
}

/// A rank process ended by SIGTERM (the launcher's death, or a scheduler), SIGINT or SIGHUP removes the shared
/// memory segments it created that are still named, then ends by that signal as it would have by default; after
/// SIGTERM its ranks first write their dumps (`COLLSCOPE_DUMP_DIR`).
/// Installed over an inherited "ignore" too: a rank started in the background of a script ignores SIGINT.
fn clean_up_on_signals() -> Result<()> {
    let mut signals = Signals::new(ENDING).context("cannot install the rank's signal handlers")?;
    std::thread::Builder::new()
        .name("collscope signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                if let (SIGTERM, Some(before)) = (sig, BEFORE_SIGTERM.get()) {
                    before();
                }
                unlink_own_segments();
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        })
        .context("cannot start the rank's signal thread")?;
    Ok(())
}

/// In a rank process between fork and exec: ask the kernel for SIGKILL when the launcher's thread that forked
/// it ends (`PR_SET_PDEATHSIG`; that thread lives until every rank is reaped), then check the launcher is still
/// the parent, since one that died before the request was made sends nothing. SIGKILL, as nothing needs
/// cleaning up yet and a process stopped here (a debugger, a SIGSTOP) ends by no other signal; the rank asks
/// for SIGTERM once it runs ([`run_launched`]).
fn die_with(launcher: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid() != launcher {
        return Err(std::io::Error::other("the launcher exited before this rank started"));
    }
    Ok(())
}

/// The local launcher: this program again, once per rank, meeting at a root this process hosts.
fn spawn_processes(n: u32, env: &Env, background: Option<&Background>) -> Result<()> {
    // Every rank runs on this host: the root on loopback (so every rank's listeners are too) unless the user chose
    // an interface; nothing of the job then listens on an outside one.
    let (id, root) = UniqueId::host(env, env.str("NCCL_SOCKET_IFNAME").is_none())?;
    let timeout = timeout_from_env(env)?;
    let out = |r: u32| -> Result<(Stdio, Stdio)> {
        let Some(path) = background.map(|b| &b.output) else { return Ok((Stdio::inherit(), Stdio::inherit())) };
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {} for the output of rank {r}", path.display()))?;
        Ok((Stdio::from(f.try_clone()?), Stdio::from(f)))
    };
    let exe = std::env::current_exe().context("cannot find this program to start the ranks")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cpus = affinity::plan(env, n)?;
    let launcher = nix::unistd::getpid();
    let mut cmds = Vec::new();
    for r in 0..n {
        let (stdout, stderr) = out(r)?;
        let mut cmd = Command::new(&exe);
        // SAFETY: the closure makes only the prctl and getppid system calls (no allocation, no locks) in the
        // forked child before exec.
        unsafe { cmd.pre_exec(move || die_with(launcher)) };
        if let Some(cpus) = &cpus {
            let (set, cpu) = (affinity::cpu_set(cpus[r as usize]), cpus[r as usize]);
            // SAFETY: the closure only makes the sched_setaffinity syscall (no allocation, no locks) in the
            // forked child before exec; the rank and its threads then stay on its core.
            unsafe { cmd.pre_exec(move || affinity::pin_to(&set)) };
            nccl_info!(Subsys::INIT, "Setting affinity for local rank {r} to CPU {cpu}");
        }
        cmd.args(&args)
            .args(background.map_or(&[][..], |b| &b.rank_args[..]))
            .stdout(stdout)
            .stderr(stderr)
            .env("COLLSCOPE_RANK", r.to_string())
            .env("COLLSCOPE_NRANKS", n.to_string())
            .env("COLLSCOPE_LOCAL_RANK", r.to_string())
            .env("COLLSCOPE_UNIQUE_ID", id.to_string());
        cmds.push(cmd);
    }
    // Before the first rank starts, so none can miss a signal the launcher gets.
    let mut signals = Signals::new(ENDING).context("cannot install the launcher's signal handlers")?;
    let (tx, events) = mpsc::channel();
    let (keep, kept) = mpsc::channel::<()>();
    let quit = Arc::new(AtomicBool::new(false));
    start_ranks(cmds, tx, Arc::clone(&quit), kept).context("cannot start the launcher's thread for the ranks")?;
    let mut watch = Watch::new(&root, timeout, events, quit);
    let res = watch.run(&mut signals, background.map(|b| &*b.stop));
    // Every rank is reaped or killed: the thread that forked them may end.
    drop(keep);
    res
}

/// What the thread that starts the ranks tells the launcher.
enum Spawn {
    /// Its thread id: its children are the rank processes, started or being started.
    Thread(u32),
    /// It is starting rank `r` (fork, the pre-exec steps, exec).
    Starting(u32),
    Started(u32, Child),
    Failed(u32, std::io::Error),
}

/// Starts the rank processes from a thread of their own, so that one stopped between fork and exec (where
/// `spawn` waits for its exec) never blocks the launcher, which goes on watching signals and deadlines. The
/// thread then waits until `keep` closes: each rank's `PR_SET_PDEATHSIG` fires when the thread that forked it
/// ends.
fn start_ranks(
    cmds: Vec<Command>,
    events: Sender<Spawn>,
    quit: Arc<AtomicBool>,
    keep: Receiver<()>,
) -> std::io::Result<()> {
    let thread = std::thread::Builder::new().name("collscope ranks".into()).spawn(move || {
        let _ = events.send(Spawn::Thread(collscope_debug::sys::gettid()));
        for (r, mut cmd) in (0..).zip(cmds) {
            if quit.load(Ordering::SeqCst) || events.send(Spawn::Starting(r)).is_err() {
                break;
            }
            let (event, failed) = match cmd.spawn() {
                Ok(c) => (Spawn::Started(r, c), false),
                Err(e) => (Spawn::Failed(r, e), true),
            };
            if events.send(event).is_err() || failed {
                break;
            }
        }
        drop(events);
        let _ = keep.recv();
    });
    thread.map(drop)
}

/// The launcher's watch over its ranks: their exits, the deadlines, the signals it gets.
struct Watch<'a> {
    root: &'a RootHandle,
    timeout: Duration,
    events: Receiver<Spawn>,
    /// Set to stop starting ranks.
    quit: Arc<AtomicBool>,
    /// The thread that starts the ranks (its id), and whether it has started all it will.
    spawner: Option<u32>,
    spawned: bool,
    /// The rank being started and since when; whether one could not be started.
    starting: Option<(u32, Instant)>,
    unstarted: bool,
    running: Vec<(u32, Child)>,
    failed: Vec<String>,
    /// The first rank to exit, and the first to fail, with when.
    first_exit: Option<(u32, Instant)>,
    first_failure: Option<(u32, Instant)>,
}

impl<'a> Watch<'a> {
    fn new(root: &'a RootHandle, timeout: Duration, events: Receiver<Spawn>, quit: Arc<AtomicBool>) -> Self {
        Watch {
            root,
            timeout,
            events,
            quit,
            spawner: None,
            spawned: false,
            starting: None,
            unstarted: false,
            running: Vec::new(),
            failed: Vec::new(),
            first_exit: None,
            first_failure: None,
        }
    }

    /// Waits for every rank, telling the root about each that failed (so ranks still joining learn at once that
    /// it is gone; one that succeeded had joined). Once one exits the others get `COLLSCOPE_TIMEOUT_S` and
    /// `EXIT_GRACE` to end, once one fails at most `GRACE`, then they are killed and named; a rank not started
    /// (exec'd) within the timeout is killed and ends the job. A SIGTERM, SIGINT or SIGHUP to the launcher ends
    /// the ranks, then the launcher by that signal; `stop` set ends the ranks, and the job counts as done unless
    /// a rank had failed before.
    fn run(&mut self, signals: &mut Signals, stop: Option<&AtomicBool>) -> Result<()> {
        loop {
            if let Some(sig) = signals.pending().next() {
                self.end();
                signal_hook::low_level::emulate_default_handler(sig)?;
                bail!("stopped by signal {sig}");
            }
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                // Those ended now were stopped, not failed; one that failed before stays a failure.
                self.end();
                break;
            }
            self.spawn_events();
            if let Some((r, _)) = self.starting.filter(|(_, t)| t.elapsed() > self.timeout) {
                let pids: Vec<String> = self.strays().into_iter().map(|p| format!(" (pid {p}{})", state(p))).collect();
                self.failed.push(format!(
                    "rank {r}{} did not start within {} s (it stopped before exec); killed",
                    pids.concat(),
                    self.timeout.as_secs()
                ));
                self.unstarted = true;
            }
            // A rank that could not start fails the job at once: the others could only wait for it.
            if self.unstarted {
                self.end();
                bail!("{}", self.failed.join("; "));
            }
            self.reap_exited();
            self.kill_late();
            if self.running.is_empty() && self.spawned {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.failed.is_empty() {
            Ok(())
        } else {
            bail!("{}", self.failed.join("; "))
        }
    }

    fn spawn_events(&mut self) {
        loop {
            match self.events.try_recv() {
                Ok(Spawn::Thread(tid)) => self.spawner = Some(tid),
                Ok(Spawn::Starting(r)) => self.starting = Some((r, Instant::now())),
                Ok(Spawn::Started(r, c)) => {
                    self.starting = None;
                    self.running.push((r, c));
                }
                Ok(Spawn::Failed(r, e)) => {
                    self.starting = None;
                    self.failed.push(format!("cannot start rank {r}: {e}"));
                    self.unstarted = true;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.spawned = true;
                    return;
                }
            }
        }
    }

    /// Reaps the ranks that ended; records the first exit and the first failure.
    fn reap_exited(&mut self) {
        let mut still = Vec::new();
        for (r, mut c) in std::mem::take(&mut self.running) {
            match c.try_wait() {
                Ok(Some(status)) => {
                    self.first_exit.get_or_insert((r, Instant::now()));
                    if !status.success() {
                        self.root.rank_exited(r, status);
                        self.failed.push(format!("rank {r} exited with {status}"));
                        self.first_failure.get_or_insert((r, Instant::now()));
                    }
                }
                Ok(None) => still.push((r, c)),
                Err(e) => self.failed.push(format!("rank {r}: cannot wait for it: {e}")),
            }
        }
        self.running = still;
    }

    /// Kills the ranks still running past the deadline that the first exit (or failure) set, naming each; once
    /// a rank failed, a stopped one (SIGSTOP, a debugger) at once: it cannot end by itself, and the job has failed.
    fn kill_late(&mut self) {
        if let Some((failed, _)) = self.first_failure {
            let (stopped, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
                .into_iter()
                .partition(|(_, c)| proc_state(c.id()).is_some_and(|(letter, _)| matches!(letter, 'T' | 't')));
            self.running = still;
            for (r, mut c) in stopped {
                let what = state(c.id());
                kill_and_reap(&mut c);
                self.failed
                    .push(format!("rank {r} (pid {}{what}) was stopped when rank {failed} failed; killed", c.id()));
            }
        }
        let exit = self.first_exit.map(|(r, t)| (r, t, self.timeout + EXIT_GRACE));
        let fail = self.first_failure.map(|(r, t)| (r, t, GRACE));
        let Some((first, at, span)) = exit.into_iter().chain(fail).min_by_key(|&(_, t, span)| t + span) else {
            return;
        };
        if at.elapsed() < span {
            return;
        }
        for (r, mut c) in std::mem::take(&mut self.running) {
            let what = state(c.id());
            kill_and_reap(&mut c);
            self.failed.push(format!(
                "rank {r} (pid {}{what}) did not exit within {} s of rank {first}'s exit; killed",
                c.id(),
                span.as_secs()
            ));
        }
    }

    /// The process of the rank being started (forked, not yet known to have exec'd), if any: a child of the
    /// ranks' thread that is not a started rank. Events come in order, so while rank `r` is starting every
    /// earlier rank is known; one that has just exec'd has nothing to clean up yet either.
    fn strays(&self) -> Vec<u32> {
        let (Some(tid), Some(_)) = (self.spawner, self.starting) else { return Vec::new() };
        let path = format!("/proc/self/task/{tid}/children");
        let list = collscope_debug::file::read_small_string(Path::new(&path), PROC_FILE_MAX).unwrap_or_default();
        let known: Vec<u32> = self.running.iter().map(|(_, c)| c.id()).collect();
        list.split_whitespace().filter_map(|p| p.parse().ok()).filter(|p| !known.contains(p)).collect()
    }

    /// Stops starting ranks and ends every rank process: SIGKILL to one between fork and exec (nothing to
    /// clean up, and a stopped one ends by no other signal), SIGTERM then SIGKILL to the started ones
    /// ([`end_ranks`]), and the same to any the ranks' thread still hands over.
    fn end(&mut self) {
        self.quit.store(true, Ordering::SeqCst);
        self.spawn_events();
        for p in self.strays() {
            let _ = nix::sys::signal::kill(Pid::from_raw(p as i32), Signal::SIGKILL);
        }
        end_ranks(&mut self.running);
        let (until, mut late) = (Instant::now() + REAP, Vec::new());
        while let Ok(event) = self.events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            if let Spawn::Started(r, c) = event {
                late.push((r, c));
            }
        }
        end_ranks(&mut late);
    }
}

/// Process `pid`'s state as /proc says: its letter (`T` stopped, `t` tracing stop, `S` sleeping, ...) and name.
fn proc_state(pid: u32) -> Option<(char, String)> {
    let path = format!("/proc/{pid}/status");
    let status = collscope_debug::file::read_small_string(Path::new(&path), PROC_FILE_MAX).ok()?;
    let (letter, name) = status.lines().find_map(|l| l.strip_prefix("State:"))?.trim().split_once(' ')?;
    Some((letter.chars().next()?, name.strip_prefix('(')?.strip_suffix(')')?.to_string()))
}

/// `, state` of process `pid` (`stopped`, `tracing stop`, `sleeping`, ...), or nothing.
fn state(pid: u32) -> String {
    proc_state(pid).map_or(String::new(), |(_, name)| format!(", {name}"))
}

/// SIGKILL, then reaps it for at most `REAP`.
fn kill_and_reap(c: &mut Child) {
    let _ = c.kill();
    let until = Instant::now() + REAP;
    while matches!(c.try_wait(), Ok(None)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGTERM to every rank process still running, then SIGKILL to those still there after `TERM_GRACE`.
fn end_ranks(children: &mut [(u32, Child)]) {
    for (_, c) in children.iter() {
        let _ = nix::sys::signal::kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
    }
    let t = Instant::now();
    for (_, c) in children.iter_mut() {
        while matches!(c.try_wait(), Ok(None)) && t.elapsed() < TERM_GRACE {
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_and_reap(c);
    }
}
