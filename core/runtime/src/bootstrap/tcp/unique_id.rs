//! The 128-byte unique id (NCCL's `ncclUniqueId` holding a `ncclBootstrapHandle`): the root's listening address
//! and a random magic. It travels out of band, as 256 hex digits.

use crate::socket::{addr_from_bytes, addr_to_bytes, parse_addr, SocketError, ADDR_BYTES};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// `NCCL_UNIQUE_ID_BYTES`.
pub const UNIQUE_ID_BYTES: usize = 128;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    pub magic: u64,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UniqueIdError {
    #[error("unique id '{input}' is not valid: expected {UNIQUE_ID_BYTES} bytes as {} hex digits", UNIQUE_ID_BYTES * 2)]
    Format { input: String },
    #[error("unique id holds an unknown address family {family}")]
    Family { family: u16 },
}

impl UniqueId {
    /// Layout: magic (LE u64), then the address as `socket::addr_to_bytes` writes it, then zeros.
    pub fn to_bytes(self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..8 + ADDR_BYTES].copy_from_slice(&addr_to_bytes(&self.addr));
        b
    }

    pub fn from_bytes(b: &[u8; UNIQUE_ID_BYTES]) -> Result<Self, UniqueIdError> {
        let magic = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let mut a = [0u8; ADDR_BYTES];
        a.copy_from_slice(&b[8..8 + ADDR_BYTES]);
        let addr = addr_from_bytes(&a).map_err(|family| UniqueIdError::Family { family })?;
        Ok(UniqueId { magic, addr })
    }

    /// The id `NCCL_COMM_ID=host:port` stands for: that address and NCCL's fixed magic.
    pub fn from_comm_id(s: &str) -> Result<Self, SocketError> {
        Ok(UniqueId { magic: crate::socket::NCCL_MAGIC, addr: parse_addr(s)? })
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.to_bytes() {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({:#018x} @ {})", self.magic, self.addr)
    }
}

impl FromStr for UniqueId {
    type Err = UniqueIdError;
    fn from_str(s: &str) -> Result<Self, UniqueIdError> {
        let t = s.trim();
        let err = || UniqueIdError::Format { input: s.chars().take(80).collect() };
        if t.len() != UNIQUE_ID_BYTES * 2 || !t.is_ascii() {
            return Err(err());
        }
        let mut b = [0u8; UNIQUE_ID_BYTES];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).map_err(|_| err())?;
        }
        Self::from_bytes(&b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_hex_for_both_families() {
        for addr in ["10.0.0.1:4242", "[fe80::1%3]:80"] {
            let id = UniqueId { magic: 0xdead_beef_0123_4567, addr: addr.parse().unwrap() };
            let hex = id.to_string();
            assert_eq!(hex.len(), 256);
            assert_eq!(hex.parse::<UniqueId>().unwrap(), id);
        }
    }

    #[test]
    fn bad_ids_are_named() {
        let e = "abc".parse::<UniqueId>().unwrap_err().to_string();
        assert!(e.contains("'abc'") && e.contains("256 hex digits"), "{e}");
        let e = "zz".repeat(128).parse::<UniqueId>().unwrap_err();
        assert!(matches!(e, UniqueIdError::Format { .. }));
        assert!(matches!("00".repeat(128).parse::<UniqueId>(), Err(UniqueIdError::Family { family: 0 })));
    }

    #[test]
    fn comm_id_uses_nccls_magic() {
        let id = UniqueId::from_comm_id("127.0.0.1:29500").unwrap();
        assert_eq!(id.magic, 0x0280028002800280);
        assert_eq!(id.addr.port(), 29500);
        assert!(UniqueId::from_comm_id("nonsense").is_err());
    }
}
