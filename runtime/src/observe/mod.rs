//! What telemetry reads from the runtime, without the data path ever waiting for it: [`recorder`], the process's
//! bounded queue of rare events and its list of every communicator's records; [`records`], one communicator's
//! connections, recent operations and proxy steps; [`stats`], its running totals of calls and channel traffic.

pub mod recorder;
pub mod records;
pub mod stats;
