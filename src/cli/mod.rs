//! Subcommands of the `collscope` command line, one module each.

pub mod topo;
