//! Communicators whose ranks may live in different processes and hosts: a rank joins with the unique id over
//! the TCP bootstrap (NCCL's `ncclCommInitRank(comm, nranks, id, rank)`), gets its own NET/Socket transport and
//! proxy, and a liveness watchdog that turns a dead peer into an error on every rank.

use super::liveness::{peer_timeout, Liveness, PeerFailure};
use crate::bootstrap::tcp::{BootstrapError, TcpBootstrap, UniqueId};
use crate::bootstrap::{Bootstrap, ThreadBootstrap};
use crate::comm::{Comm, CommOptions};
use crate::error::{Result, RuntimeError};
use crate::observe::recorder;
use crate::sync::wait::timeout_from_env;
use crate::transport::net::net_transport;
use collscope_model::{Event, RankEndpoint};
use std::sync::Arc;

/// Builds one rank's communicator over `boot` with its own NET transport (tried after P2P and SHM).
pub fn init_comm(boot: Arc<dyn Bootstrap>, opts: CommOptions) -> Result<Comm> {
    let timeout = timeout_from_env(&opts.env)?;
    let (net, proxy) = net_transport(&opts.env, boot.rank(), timeout)?;
    let comm = Comm::init_rank(boot, CommOptions { net: Some(net), ..opts })?;
    proxy.attach(comm.records(), comm.abort_handle());
    Ok(comm)
}

/// `n` ranks as threads of this process, each with its own NET transport: one communicator per rank.
pub fn init_threads(n: u32, opts: CommOptions) -> Result<Vec<Comm>> {
    let boots = ThreadBootstrap::group(n, timeout_from_env(&opts.env)?);
    std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .into_iter()
            .map(|b| {
                let opts = opts.clone();
                s.spawn(move || init_comm(Arc::new(b), opts))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(RuntimeError::Bootstrap("an init thread panicked".into()))))
            .collect()
    })
}

/// How long a failed init waits for the watchdog to name a dead peer behind the failure (it notices a closed
/// connection within milliseconds, but the failed wait may have seen it first).
pub const NOTICE: std::time::Duration = std::time::Duration::from_millis(500);

fn boot_err(e: BootstrapError) -> RuntimeError {
    match e {
        BootstrapError::Env(e) => RuntimeError::Env(e),
        other => RuntimeError::BootstrapFailed { source: Box::new(other) },
    }
}

/// Tells every rank where each serves its telemetry (an AllGather of `HOST URL PID START` over the bootstrap
/// ring, START the process's start time or `-`; empty for a rank without telemetry) and reports the list, so any
/// rank's snapshot reaches the whole job and a job view on a rank's host can read its process's state.
fn share_endpoints(boot: &TcpBootstrap) -> std::result::Result<(), BootstrapError> {
    let mine = recorder::global()
        .endpoint()
        .map(|url| {
            let pid = std::process::id();
            let started = collscope_debug::sys::process_started(pid).map_or_else(|| "-".to_string(), |t| t.to_string());
            format!("{} {url} {pid} {started}", collscope_debug::sys::hostname())
        })
        .unwrap_or_default();
    let all = boot.all_gather(mine.as_bytes())?;
    let endpoints: Vec<RankEndpoint> = all
        .iter()
        .zip(0u32..)
        .filter_map(|(bytes, rank)| {
            let mut fields = std::str::from_utf8(bytes).ok()?.split(' ');
            let (host, url) = (fields.next()?, fields.next()?);
            let pid = fields.next().and_then(|p| p.parse().ok());
            let started = fields.next().and_then(|t| t.parse().ok());
            Some(RankEndpoint { rank, host: host.to_string(), url: url.to_string(), pid, started })
        })
        .collect();
    if !endpoints.is_empty() {
        recorder::record(|| Event::Endpoints(endpoints));
    }
    Ok(())
}

/// A rank of a communicator joined over TCP. Derefs to its [`Comm`].
pub struct JobComm {
    comm: Comm,
    liveness: Option<Liveness>,
    boot: Arc<TcpBootstrap>,
}

impl JobComm {
    /// Joins the communicator `id` names as `rank` of `nranks`; every rank must call this.
    pub fn init_rank(id: &UniqueId, nranks: u32, rank: u32, opts: CommOptions) -> Result<JobComm> {
        let peer_timeout = peer_timeout(&opts.env)?;
        let boot = Arc::new(TcpBootstrap::init(id, rank, nranks, &opts.env).map_err(boot_err)?);
        // Watched from before the communicator is built, so a peer that dies meanwhile is named.
        let liveness = Liveness::start(&boot, peer_timeout).map_err(boot_err)?;
        let comm = init_comm(boot.clone(), opts).map_err(|e| match liveness.await_failure(NOTICE) {
            Some(f) => {
                RuntimeError::Aborted { rank, what: "its communicator to be built".into(), reason: f.to_string() }
            }
            None => e,
        })?;
        liveness.attach(comm.abort_handle());
        liveness.watch_calls(comm.records());
        share_endpoints(&boot).map_err(boot_err)?;
        Ok(JobComm { comm, liveness: Some(liveness), boot })
    }

    /// The first peer found dead, waiting up to `max` for the watchdog to find one.
    pub fn await_peer_failure(&self, max: std::time::Duration) -> Option<PeerFailure> {
        self.liveness.as_ref().and_then(|l| l.await_failure(max))
    }

    pub fn bootstrap(&self) -> &Arc<TcpBootstrap> {
        &self.boot
    }

    /// Leaves cleanly: waits until every rank got here (so nobody still needs our buffers), then tells the
    /// peers' watchdogs this rank is leaving on purpose.
    pub fn finish(mut self) -> Result<()> {
        let res = self.boot.barrier().map_err(boot_err);
        if let Some(l) = self.liveness.take() {
            l.close();
        }
        res
    }
}

impl std::ops::Deref for JobComm {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.comm
    }
}

impl std::ops::DerefMut for JobComm {
    fn deref_mut(&mut self) -> &mut Comm {
        &mut self.comm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_debug::env::Env;
    use collscope_model::{Protocol, RedOp};

    fn opts(pairs: &[(&str, &str)]) -> CommOptions {
        CommOptions { env: Env::from_pairs(pairs.iter().copied()), net: None, name: None }
    }

    fn check_all_reduce(comms: Vec<Comm>, n: usize) -> Vec<Comm> {
        let nranks = comms.len();
        std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        let send: Vec<i32> = (0..n).map(|i| (i % 1000) as i32 * (c.rank() as i32 + 1)).collect();
                        let mut recv = vec![0i32; n];
                        c.all_reduce(&send, &mut recv, RedOp::Sum).unwrap();
                        let tri = (nranks * (nranks + 1) / 2) as i32;
                        assert!(recv.iter().enumerate().all(|(i, &v)| v == (i % 1000) as i32 * tri));
                        c
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn threads_over_net_socket_for_every_protocol() {
        for proto in ["simple", "ll", "ll128"] {
            let o = opts(&[
                ("NCCL_P2P_DISABLE", "1"),
                ("NCCL_SHM_DISABLE", "1"),
                ("NCCL_PROTO", proto),
                ("NCCL_BUFFSIZE", "262144"),
                ("NCCL_SOCKET_NTHREADS", if proto == "simple" { "2" } else { "0" }),
                ("NCCL_NSOCKS_PERTHREAD", "2"),
            ]);
            let comms = init_threads(3, o).unwrap();
            let comms = check_all_reduce(comms, 300_001);
            let conns = comms[0].records().connections();
            assert!(!conns.is_empty() && conns.iter().all(|c| c.net.as_deref() == Some("Socket")), "{conns:?}");
            let proxy = comms[1].records().proxy_ops();
            assert!(proxy.iter().any(|p| p.send && p.done > 0), "{proxy:?}");
            assert!(proxy.iter().any(|p| !p.send && p.transmitted > 0));
            assert!(proxy.iter().all(|p| p.seq == 1 && p.done <= p.n_steps));
            let _ = Protocol::Simple;
        }
    }

    #[test]
    fn ranks_over_the_tcp_bootstrap_and_a_killed_peer() {
        let env = [("COLLSCOPE_TIMEOUT_S", "20"), ("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")];
        let id = UniqueId::create(&Env::from_pairs(env)).unwrap();
        let errs: Vec<Option<String>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    s.spawn(move || {
                        let mut c = JobComm::init_rank(&id, 3, r, opts(&env)).unwrap();
                        // Past OneShot's bound: the ring's steps to rank 2 are what find it gone on every rank.
                        let mut buf = vec![1.0f32; 100_000];
                        c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap();
                        assert!(buf.iter().all(|&v| v == 3.0));
                        if r == 2 {
                            // Rank 2 vanishes without finishing: its sockets close.
                            drop(c);
                            return None;
                        }
                        let e = c.all_reduce_in_place(&mut buf, RedOp::Sum).unwrap_err().to_string();
                        Some(e)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in errs.into_iter().flatten() {
            assert!(e.contains("AllReduce #2") && e.contains("rank 2"), "{e}");
        }
    }
}
