//! Which launcher started this process, and where its ranks meet: collscope's own launcher
//! (`COLLSCOPE_RANK`, `COLLSCOPE_NRANKS`, `COLLSCOPE_LOCAL_RANK`, `COLLSCOPE_UNIQUE_ID`), Open MPI
//! (`OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK`), Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`) or torchrun
//! (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`). The meeting point is the unique id collscope's launcher passes, else
//! `NCCL_COMM_ID`, else `MASTER_ADDR:MASTER_PORT` (rank 0 hosts the bootstrap root there; under torchrun, whose
//! agent already listens on `MASTER_PORT`, on the port after it; on loopback when the launcher says every rank
//! runs on this host, so the bootstrap listens on no outside interface).

use crate::bootstrap::tcp::{UniqueId, UniqueIdError};
use collscope_debug::env::Env;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Collscope,
    OpenMpi,
    Slurm,
    Torchrun,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Collscope => "collscope",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Slurm => "Slurm",
            Launcher::Torchrun => "torchrun",
        })
    }
}

/// Where the ranks meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendezvous {
    /// A unique id created by someone else (collscope's launcher).
    Id(UniqueId),
    /// `host:port` where rank 0 hosts the root (`NCCL_COMM_ID` semantics).
    Root(String),
}

/// This process's place in a launched job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    pub launcher: Launcher,
    pub rank: u32,
    pub nranks: u32,
    pub local_rank: u32,
    pub rendezvous: Rendezvous,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("{name}='{value}' is not valid: expected {expected}")]
    Bad { name: String, value: String, expected: String },
    #[error("{launcher} started this rank but gave no meeting point: set NCCL_COMM_ID=<host>:<port> (or MASTER_ADDR and MASTER_PORT) to an address rank 0 can listen on")]
    NoRendezvous { launcher: Launcher },
    #[error(transparent)]
    UniqueId(#[from] UniqueIdError),
}

/// Reads the launcher's variables through `get`; `None` when no launcher started this process.
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchInfo>, LaunchError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let num = |k: &str| -> Result<Option<u32>, LaunchError> {
        get(k)
            .map(|v| {
                v.trim().parse::<u32>().map_err(|_| LaunchError::Bad {
                    name: k.into(),
                    value: v.clone(),
                    expected: "a non-negative integer".into(),
                })
            })
            .transpose()
    };
    // The variables are declared once, in the order of `params::LAUNCHERS`; telemetry reads the same ones.
    let launchers = [Launcher::Collscope, Launcher::OpenMpi, Launcher::Slurm, Launcher::Torchrun];
    for (launcher, vars) in launchers.into_iter().zip(collscope_debug::params::LAUNCHERS) {
        let (rank_var, size_var, local_var) = (vars.rank, vars.size, vars.local_rank);
        let (Some(rank), Some(nranks)) = (num(rank_var)?, num(size_var)?) else { continue };
        if rank >= nranks {
            return Err(LaunchError::Bad {
                name: rank_var.into(),
                value: rank.to_string(),
                expected: format!("a rank below {size_var}={nranks}"),
            });
        }
        let local_rank = num(local_var)?.unwrap_or(0);
        let rendezvous = if let Some(id) = get("COLLSCOPE_UNIQUE_ID") {
            Rendezvous::Id(id.parse()?)
        } else if let Some(addr) = get("NCCL_COMM_ID") {
            Rendezvous::Root(addr)
        } else if let (Some(host), Some(port)) = (get("MASTER_ADDR"), get("MASTER_PORT")) {
            let p: u16 = port.trim().parse().map_err(|_| LaunchError::Bad {
                name: "MASTER_PORT".into(),
                value: port.clone(),
                expected: "a TCP port".into(),
            })?;
            let agent_holds_port = launcher == Launcher::Torchrun && get("TORCHELASTIC_RUN_ID").is_some();
            let p = if agent_holds_port { p.checked_add(1).unwrap_or(p) } else { p };
            let host = if all_local(launcher, &get, nranks) {
                "127.0.0.1".to_string()
            } else if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host
            };
            Rendezvous::Root(format!("{host}:{p}"))
        } else {
            return Err(LaunchError::NoRendezvous { launcher });
        };
        return Ok(Some(LaunchInfo { launcher, rank, nranks, local_rank, rendezvous }));
    }
    Ok(None)
}

/// Whether the launcher says every rank runs on this host: torchrun's `LOCAL_WORLD_SIZE`, Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE` equal to the rank count, or a Slurm step on one node.
fn all_local(launcher: Launcher, get: &impl Fn(&str) -> Option<String>, nranks: u32) -> bool {
    let is = |k: &str, want: u32| get(k).and_then(|v| v.trim().parse::<u32>().ok()) == Some(want);
    match launcher {
        Launcher::Torchrun => is("LOCAL_WORLD_SIZE", nranks),
        Launcher::OpenMpi => is("OMPI_COMM_WORLD_LOCAL_SIZE", nranks),
        Launcher::Slurm => {
            is("SLURM_STEP_NUM_NODES", 1) || (get("SLURM_STEP_NUM_NODES").is_none() && is("SLURM_NNODES", 1))
        }
        Launcher::Collscope => false,
    }
}

impl LaunchInfo {
    /// The unique id to join with, and the environment the bootstrap should see (with `NCCL_COMM_ID` set when
    /// rank 0 hosts the root at a fixed address).
    pub fn unique_id(&self, env: &Env) -> Result<(UniqueId, Env), crate::bootstrap::tcp::BootstrapError> {
        match &self.rendezvous {
            Rendezvous::Id(id) => Ok((*id, env.clone())),
            Rendezvous::Root(addr) => {
                let env = env.with("NCCL_COMM_ID", addr);
                Ok((UniqueId::create(&env)?, env))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_is_recognised() {
        let id = UniqueId { magic: 9, addr: "10.0.0.1:5".parse().unwrap() };
        let ours = detect(vars(&[
            ("COLLSCOPE_RANK", "2"),
            ("COLLSCOPE_NRANKS", "4"),
            ("COLLSCOPE_LOCAL_RANK", "2"),
            ("COLLSCOPE_UNIQUE_ID", &id.to_string()),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((ours.launcher, ours.rank, ours.nranks, ours.local_rank), (Launcher::Collscope, 2, 4, 2));
        assert_eq!(ours.rendezvous, Rendezvous::Id(id));

        let mpi = detect(vars(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("NCCL_COMM_ID", "127.0.0.1:4000"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (mpi.launcher, mpi.rank, mpi.rendezvous),
            (Launcher::OpenMpi, 1, Rendezvous::Root("127.0.0.1:4000".into()))
        );

        let slurm = detect(vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "node1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((slurm.launcher, slurm.local_rank), (Launcher::Slurm, 1));
        assert_eq!(slurm.rendezvous, Rendezvous::Root("node1:29500".into()));

        let torch = detect(vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(torch.launcher, Launcher::Torchrun);
        assert_eq!(torch.rendezvous, Rendezvous::Root("[::1]:29501".into()));
        // Every rank on this host: the root (and so every listener) on loopback, whatever MASTER_ADDR says.
        let local = [("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "node1"), ("MASTER_PORT", "29500")];
        let torch = detect(vars(&[&[("RANK", "1"), ("WORLD_SIZE", "2")], &local[..]].concat())).unwrap().unwrap();
        assert_eq!(torch.rendezvous, Rendezvous::Root("127.0.0.1:29500".into()));
        let two_hosts = detect(vars(&[&[("RANK", "1"), ("WORLD_SIZE", "4")], &local[..]].concat())).unwrap().unwrap();
        assert_eq!(two_hosts.rendezvous, Rendezvous::Root("node1:29500".into()));
        let slurm = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2"), ("SLURM_STEP_NUM_NODES", "1")];
        let slurm = detect(vars(&[&slurm[..], &local[1..]].concat())).unwrap().unwrap();
        assert_eq!(slurm.rendezvous, Rendezvous::Root("127.0.0.1:29500".into()));
        assert_eq!(detect(vars(&[("RANK", "0")])).unwrap(), None);
    }

    #[test]
    fn bad_values_and_missing_rendezvous_are_named() {
        let e = detect(vars(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(e.contains("RANK='x'"), "{e}");
        let e = detect(vars(&[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")])).unwrap_err().to_string();
        assert!(e.contains("SLURM_PROCID='4'") && e.contains("below SLURM_NTASKS=4"), "{e}");
        let e = detect(vars(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(e.contains("Open MPI") && e.contains("NCCL_COMM_ID"), "{e}");
        let e = detect(vars(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "http")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("MASTER_PORT='http'"), "{e}");
    }
}
