//! The collectives runtime on CPUs (and GPUs through CUDA): bootstrap, transports, protocols, primitives,
//! algorithms and the communicator that ties them together, laid out as NCCL's `src/` is:
//!
//! | module | what | NCCL 2.28.9 |
//! |---|---|---|
//! | [`comm`] | the communicator: init, collectives, groups, jobs across processes, launchers, liveness, channel workers, the per-call choice | `init.cc`, `group.cc`, `enqueue.cc`, `proxy.cc` (liveness) |
//! | [`bootstrap`] | ranks finding each other: in-process, and over TCP with a root and a unique id | `bootstrap.cc` |
//! | [`transport`] | connection memory and one file per transport: P2P, SHM, NET (`net/`: the network API, the proxy, NET/Socket, NET/IB) | `transport/`, `proxy.cc` |
//! | [`device`] | the work on the data: primitives, protocols, ring and tree algorithms, the reference reduction | `device/` |
//! | [`sync`] | waiting: spin-then-sleep waits on connection memory, the proxy's doorbell | `device/` waits, `proxy.cc` |
//! | [`socket`] | sockets and interfaces shared by bootstrap and NET/Socket | `misc/socket.cc` |
//! | [`observe`] | what telemetry reads: the event queue, each communicator's records and running totals | `profiler` |
//! | [`cuda`] | CUDA through cudarc, kernels, GPU AllReduce | `device/`, `misc/cudawrap.cc` |
//! | [`profiler`] | an NCCL profiler plugin (`NCCL_PROFILER_PLUGIN`) loaded and called with NCCL's events | `plugin/profiler.cc`, `transport/net.cc` |
//! | [`tuning`] | the host tuning model (measured constants for host-memory links) | `graph/tuning.cc` (its tables) |
//!
//! Depends on collscope-model (the records it fills), collscope-debug (logging, parameters), collscope-nccl (the
//! topology, trees and `NCCL_ALGO`/`NCCL_PROTO` grammar it follows), collscope-kernels and collscope-profiler-abi; nothing depends on it
//! but the `collscope` binary (and, for their tests and benches, telemetry).
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
//! - Across processes and hosts: [`comm::job::JobComm::init_rank`] joins with a [`bootstrap::tcp::UniqueId`] over
//!   the TCP bootstrap, adds the NET/Socket transport ([`transport::net`], driven by a proxy thread per rank) and
//!   a [`comm::liveness`] watchdog that aborts every rank's waits naming a dead peer; [`comm::launch`] reads which
//!   rank this process is from collscope's launcher, torchrun, Open MPI or Slurm.

pub mod bootstrap;
pub mod comm;
pub mod cuda;
pub mod device;
pub(crate) mod error;
pub mod observe;
pub mod profiler;
pub mod socket;
pub mod sync;
pub mod transport;
pub mod tuning;

pub use bootstrap::{Bootstrap, ThreadBootstrap};
pub use comm::group::Group;
pub use comm::select::{select, Choice, SelectConfig};
pub use comm::{Comm, CommOptions, Registration};
pub use error::{Result, RuntimeError};
pub use sync::wait::AbortHandle;
pub use transport::conn::{BufSizes, ConnMem, NCCL_STEPS};
pub use transport::window::SharedBuf;
pub use transport::{Established, PeerInfo, Pending, Transport};
