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

pub mod algos;
pub mod bootstrap;
pub mod comm;
pub mod conn;
pub mod error;
pub mod group;
pub mod prims;
pub mod proto;
pub mod record;
pub mod select;
pub mod transport;
pub mod tree;
pub mod wait;

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
