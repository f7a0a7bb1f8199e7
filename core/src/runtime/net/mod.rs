//! Networks between hosts: the network interface ([`api`]), the NET/Socket and NET/IB networks, the proxy thread
//! that drives NET connections over either, and NET as a runtime transport.

pub mod api;
pub mod doorbell;
pub mod ib;
pub mod proxy;
pub mod socket;
pub mod transport;

pub use transport::{net_transport, NetTransport};
