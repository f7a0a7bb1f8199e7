//! The collectives runtime.

pub mod bootstrap;
pub mod liveness;
pub mod net;
pub mod socket;
