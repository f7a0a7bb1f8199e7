//! Subcommands of the `collscope` command line, one module each.

pub mod demo;
pub mod explain;
mod explain_text;
pub mod perf;
pub mod ranks;
pub mod sizes;
pub mod topo;
mod trim;
