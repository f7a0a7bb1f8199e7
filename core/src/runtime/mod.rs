//! The collectives runtime.

pub mod bootstrap;
pub mod socket;
