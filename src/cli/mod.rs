//! Subcommands of the `collscope` command line, one module each.

pub mod explain;
mod explain_text;
pub mod log;
pub mod sizes;
pub mod topo;
mod trim;
