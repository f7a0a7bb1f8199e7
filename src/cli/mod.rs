//! Subcommands of the `collscope` command line, one module each.

pub(crate) mod demo;
pub(crate) mod env;
pub(crate) mod job;
pub(crate) mod log;
pub(crate) mod log_explain;
pub(crate) mod perf;
pub(crate) mod ranks;
pub(crate) mod serve;
pub(crate) mod sizes;
pub(crate) mod telemetry;
pub(crate) mod topo;
pub(crate) mod tui;
pub(crate) mod tune;
pub(crate) mod whatif;
