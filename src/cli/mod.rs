//! Subcommands of the `collscope` command line, one module each.

pub mod demo;
pub mod job;
pub mod log;
pub mod log_explain;
pub mod perf;
pub mod ranks;
pub mod serve;
pub mod sizes;
pub mod telemetry;
pub mod topo;
mod trim;
pub mod tui;
pub mod tune;
pub mod whatif;
