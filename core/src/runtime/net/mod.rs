//! Networks between hosts: the NET/Socket plugin, the proxy thread that drives NET connections, and NET as a
//! runtime transport.

pub mod ib;
pub mod proxy;
pub mod socket;
pub mod transport;

pub use transport::NetTransport;
