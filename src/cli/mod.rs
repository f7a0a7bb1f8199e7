//! Subcommands of the `collscope` command line, one module each.

pub mod demo;
pub mod gpu;
pub mod perf;
pub mod ranks;
pub mod topo;
