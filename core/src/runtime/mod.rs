//! The collectives runtime on CPUs: bootstrap, transports, protocols, primitives, algorithms and the
//! communicator that ties them together (see `Comm`).

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
pub mod select;
pub mod socket;
pub mod tcp_bootstrap;
pub mod training;
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
