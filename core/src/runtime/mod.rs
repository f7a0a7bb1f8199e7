//! The collectives runtime on CPUs: bootstrap, transports, protocols, primitives, algorithms and the
//! communicator that ties them together.
//!
//! - [`Comm::init_rank`] takes any [`Bootstrap`] (ranks as threads: [`ThreadBootstrap`]; a TCP one plugs in
//!   the same way) and [`CommOptions`] (the `Env`, and a NET [`Transport`] tried after P2P and SHM).
//!   [`Comm::init_threads`] builds `n` communicators for ranks that are threads.
//! - A connection direction is a [`ConnMem`]: `NCCL_STEPS` slots per protocol, `head`/`tail` on their own
//!   cache lines. P2P shares one region between threads, SHM maps one segment in both processes; NET gives each
//!   side a local region and moves steps between them with [`ConnMem::posted`] (sender side: wait for it, send
//!   the bytes, then `head().store(step + 1)`) and [`ConnMem::deposit`] (receiver side, once
//!   `head() + NCCL_STEPS > step`).
//! - Every call goes through [`select()`] (algorithm, protocol, channels), which honours `NCCL_ALGO`/`NCCL_PROTO`.
//! - Every wait ends on success, `COLLSCOPE_TIMEOUT_S`, or [`AbortHandle::abort`]; errors name the operation
//!   and its sequence number.
//! - Across processes and hosts: [`job::JobComm::init_rank`] joins with a [`tcp_bootstrap::UniqueId`] over the
//!   TCP bootstrap, adds the NET/Socket transport ([`net`], driven by a proxy thread per rank) and a
//!   [`liveness`] watchdog that aborts every rank's waits naming a dead peer; [`launch`] reads which rank this
//!   process is from collscope's launcher, torchrun, Open MPI or Slurm; [`training`] is the demo's workload.

pub mod affinity;
pub mod algos;
pub mod bootstrap;
pub mod comm;
pub mod conn;
pub mod error;
pub mod group;
pub mod job;
pub mod launch;
pub mod liveness;
pub mod net;
pub mod prims;
pub mod proto;
pub mod record;
pub mod reference;
pub mod select;
pub mod socket;
pub mod stats;
pub mod tcp_bootstrap;
pub mod training;
pub mod transport;
pub mod tree;
pub mod wait;
pub mod workers;

pub use bootstrap::{Bootstrap, ThreadBootstrap};
pub use comm::{Comm, CommOptions};
pub use conn::{BufSizes, ConnMem, NCCL_STEPS};
pub use error::{Result, RuntimeError};
pub use group::Group;
pub use select::{select, Choice, SelectConfig};
pub use transport::{Established, PeerInfo, Pending, Transport};
pub use wait::AbortHandle;

#[cfg(test)]
mod matrix;
#[cfg(test)]
mod proc_test;
