//! Networks between hosts: the NET/Socket plugin, and the proxy that drives NET connections.

pub mod socket;
