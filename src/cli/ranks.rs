//! Runs one body on every rank of a job: ranks as threads of this process, as processes of this program
//! started here (the local launcher), or as the one rank this process is when a launcher (collscope's,
//! torchrun, Open MPI, Slurm) started it.

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use collscope_core::debug::Subsys;
use collscope_core::env::Env;
use collscope_core::nccl_info;
use collscope_core::runtime::affinity;
use collscope_core::runtime::job::{self, JobComm};
use collscope_core::runtime::launch::{detect, LaunchInfo};
use collscope_core::runtime::tcp_bootstrap::UniqueId;
use collscope_core::runtime::{Comm, CommOptions};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
    /// Where rank processes started here write their output instead of this terminal (while a TUI owns it).
    pub rank_output: Option<PathBuf>,
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
            spawn_processes(job.nranks, &env, job.rank_output.as_deref())
        }
    }
}

fn opts(env: Env) -> CommOptions {
    CommOptions { env, net: None, name: None }
}

fn run_launched(info: &LaunchInfo, env: Env, body: impl Fn(Rank) -> Result<()>) -> Result<()> {
    let (id, env) = info.unique_id(&env)?;
    collscope_core::debug::set_thread_device(info.local_rank as i32);
    let started = Instant::now();
    let mut comm = JobComm::init_rank(&id, info.nranks, info.rank, opts(env))
        .with_context(|| format!("rank {} of {} ({} launch)", info.rank, info.nranks, info.launcher))?;
    let init = started.elapsed();
    let res = body(Rank { comm: &mut comm, local_rank: info.local_rank, threads_per_process: 1, init });
    if let Err(e) = res {
        // Name the dead peer when the watchdog found one, even if a wait noticed first.
        return Err(match comm.peer_failure() {
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
                    collscope_core::debug::set_thread_device(r as i32);
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

/// The local launcher: this program again, once per rank, meeting at a root this process hosts.
fn spawn_processes(n: u32, env: &Env, output: Option<&Path>) -> Result<()> {
    let id = UniqueId::create(env)?;
    let out = |r: u32| -> Result<(Stdio, Stdio)> {
        let Some(path) = output else { return Ok((Stdio::inherit(), Stdio::inherit())) };
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
    let mut children: Vec<(u32, Child)> = Vec::new();
    for r in 0..n {
        let (stdout, stderr) = out(r)?;
        let mut cmd = Command::new(&exe);
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
    wait_all(children)
}

/// Waits for every rank; once one fails the others get `GRACE` to end before they are killed.
fn wait_all(mut children: Vec<(u32, Child)>) -> Result<()> {
    let mut failed: Vec<String> = Vec::new();
    let mut first_failure: Option<Instant> = None;
    while !children.is_empty() {
        let mut still = Vec::new();
        for (r, mut c) in children {
            match c.try_wait() {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => {
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
