//! What telemetry reads from the runtime, without the data path ever waiting for it: [`recorder`], the process's
//! bounded queue of rare events and its list of every communicator's records; [`records`], one communicator's
//! connections, recent operations and proxy steps; [`stats`], its running totals of calls and channel traffic.
//!
//! Telemetry sees them only through the contract's traits (`collscope_model::observe::Feed`, implemented by
//! [`recorder::Recorder`], and `CommRecords`, by [`records::Records`]) and the plain data they hand out
//! (`CallTotals`, `TrafficTotals`, `NewOps`), so it does not depend on this crate.

pub mod recorder;
pub mod records;
pub(crate) mod stats;
