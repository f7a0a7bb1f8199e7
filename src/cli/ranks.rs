//! Runs one body on every rank of a job: ranks as threads of this process, as processes of this program
//! started here (the local launcher), or as the one rank this process is when a launcher (collscope's,
//! torchrun, Open MPI, Slurm) started it.
//!
//! Rank processes never outlive the launcher here: each gets `PR_SET_PDEATHSIG` (SIGTERM) before it runs, so
//! the kernel ends it however the launcher dies, SIGKILL included; a SIGTERM or SIGINT to the launcher ends
//! the ranks first. A rank process ended by SIGTERM, SIGINT or SIGHUP removes its named shared memory
//! segments on the way out (the kernel frees its ports).

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_runtime::bootstrap::tcp::{RootHandle, UniqueId};
use collscope_runtime::comm::affinity;
use collscope_runtime::comm::job::{self, JobComm};
use collscope_runtime::comm::launch::{detect, LaunchInfo};
use collscope_runtime::transport::segment::unlink_own_segments;
use collscope_runtime::{Comm, CommOptions};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LaunchMode {
    Threads,
    Processes,
}

/// Which transport connects ranks on this host (`auto` lets NCCL's order decide: P2P, SHM, NET).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportChoice {
    Auto,
    P2p,
    Shm,
    Socket,
}

/// How long the others may take to end once one rank failed before they are killed.
const GRACE: Duration = Duration::from_secs(15);
/// How long rank processes may take to end after the launcher passed them a SIGTERM before they are killed.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// Signals that end a job: the launcher passes them on as SIGTERM, ranks clean up and end by them.
const ENDING: [i32; 3] = [SIGTERM, SIGINT, SIGHUP];

/// What a rank's body gets.
pub struct Rank<'a> {
    pub comm: &'a mut Comm,
    pub local_rank: u32,
    /// The number of threads in this process that are ranks (nccl-tests' `nThread`).
    pub threads_per_process: u32,
    /// How long creating the communicator took (all of this process's ranks, for ranks as threads).
    pub init: Duration,
}

pub struct Job {
    pub nranks: u32,
    pub launch: LaunchMode,
    pub transport: TransportChoice,
    /// Set while a TUI owns this terminal and the ranks run behind it.
    pub background: Option<Background>,
}

/// Rank processes started here while a TUI owns the terminal.
pub struct Background {
    /// Where they write their output instead of the terminal.
    pub output: PathBuf,
    /// Set (by the TUI's `q`) to end them.
    pub stop: Arc<AtomicBool>,
}

/// The environment with `transport` applied (`NCCL_P2P_DISABLE` / `NCCL_SHM_DISABLE`).
pub fn transport_env(env: &Env, transport: TransportChoice) -> Env {
    match transport {
        TransportChoice::Auto => env.clone(),
        TransportChoice::P2p => env.with("NCCL_SHM_DISABLE", "1"),
        TransportChoice::Shm => env.with("NCCL_P2P_DISABLE", "1"),
        TransportChoice::Socket => env.with("NCCL_P2P_DISABLE", "1").with("NCCL_SHM_DISABLE", "1"),
    }
}

/// Whether a launcher started this process as one rank.
pub fn launched() -> Result<Option<LaunchInfo>> {
    Ok(detect(|k| std::env::var(k).ok())?)
}

/// Runs `body` on every rank and returns once all ended; the first rank error is returned.
pub fn run(job: &Job, body: impl Fn(Rank) -> Result<()> + Sync) -> Result<()> {
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

/// A rank process ended by SIGTERM (the launcher's death, or a scheduler), SIGINT or SIGHUP removes the shared
/// memory segments it created that are still named, then ends by that signal as it would have by default.
/// Installed over an inherited "ignore" too: a rank started in the background of a script ignores SIGINT.
fn clean_up_on_signals() -> Result<()> {
    let mut signals = Signals::new(ENDING).context("cannot install the rank's signal handlers")?;
    std::thread::Builder::new()
        .name("collscope signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                unlink_own_segments();
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        })
        .context("cannot start the rank's signal thread")?;
    Ok(())
}

/// In a rank process between fork and exec: ask the kernel for SIGTERM when the launcher's thread that forked
/// it ends (`PR_SET_PDEATHSIG`; that thread waits for the ranks), then check the launcher is still the parent,
/// since one that died before the request was made sends nothing.
fn die_with(launcher: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
    if nix::unistd::getppid() != launcher {
        return Err(std::io::Error::other("the launcher exited before this rank started"));
    }
    Ok(())
}

/// The local launcher: this program again, once per rank, meeting at a root this process hosts.
fn spawn_processes(n: u32, env: &Env, background: Option<&Background>) -> Result<()> {
    let (id, root) = UniqueId::host(env)?;
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
    // Before the first rank starts, so none can miss a signal the launcher gets.
    let mut signals = Signals::new(ENDING).context("cannot install the launcher's signal handlers")?;
    let launcher = nix::unistd::getpid();
    let mut children: Vec<(u32, Child)> = Vec::new();
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
        let child = cmd
            .args(&args)
            .stdout(stdout)
            .stderr(stderr)
            .env("COLLSCOPE_RANK", r.to_string())
            .env("COLLSCOPE_NRANKS", n.to_string())
            .env("COLLSCOPE_LOCAL_RANK", r.to_string())
            .env("COLLSCOPE_UNIQUE_ID", id.to_string())
            .spawn()
            .with_context(|| format!("cannot start rank {r}"))?;
        children.push((r, child));
    }
    wait_all(children, &root, &mut signals, background.map(|b| &*b.stop))
}

/// Waits for every rank, telling the root about each that failed (so ranks still joining learn at once that
/// it is gone; one that succeeded had joined); once one fails the others get `GRACE` to end before they are killed. A SIGTERM, SIGINT or
/// SIGHUP to the launcher ends the ranks, then the launcher by that signal; `stop` set ends the ranks, and
/// the job counts as done.
fn wait_all(
    mut children: Vec<(u32, Child)>,
    root: &RootHandle,
    signals: &mut Signals,
    stop: Option<&AtomicBool>,
) -> Result<()> {
    let mut failed: Vec<String> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    while !children.is_empty() {
        if let Some(sig) = signals.pending().next() {
            end_ranks(&mut children);
            signal_hook::low_level::emulate_default_handler(sig)?;
            bail!("stopped by signal {sig}");
        }
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            end_ranks(&mut children);
            return Ok(());
        }
        let mut still = Vec::new();
        for (r, mut c) in children {
            match c.try_wait() {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => {
                    root.rank_exited(r, status);
                    failed.push(format!("rank {r} exited with {status}"));
                    first_failure.get_or_insert_with(Instant::now);
                }
                Ok(None) if first_failure.is_some_and(|t| t.elapsed() > GRACE) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    failed.push(format!("rank {r} was killed after outliving a failed rank by {} s", GRACE.as_secs()));
                }
                Ok(None) => still.push((r, c)),
                Err(e) => failed.push(format!("rank {r}: cannot wait for it: {e}")),
            }
        }
        children = still;
        std::thread::sleep(Duration::from_millis(20));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
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
        let _ = c.kill();
        let _ = c.wait();
    }
}
