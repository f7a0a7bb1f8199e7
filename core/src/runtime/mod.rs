//! The collectives runtime.

pub mod bootstrap;
pub mod net;
pub mod socket;
