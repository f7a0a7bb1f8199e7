//! The collectives runtime.

pub mod liveness;
pub mod net;
pub mod socket;
pub mod tcp_bootstrap;
