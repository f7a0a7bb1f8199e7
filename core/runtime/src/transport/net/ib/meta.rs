//! What the two sides of a NET/IB connection exchange (NCCL 2.28.9 `net_ib.cc` `ncclIbHandle` and
//! `ncclIbConnectionMetadata`). The receiver's handle, carried by the bootstrap, names its out-of-band TCP
//! listener; over that socket each side sends its queue pair number, port (LID, GID, MTU, link layer) and, from
//! the sender, where its clear-to-send FIFO is and the traffic class and service level both sides use. collscope
//! uses one device and one queue pair per connection (NCCL's defaults for a single NIC), and its own
//! little-endian layout, checked field by field on arrival.

use crate::socket::{addr_from_bytes, addr_to_bytes, ADDR_BYTES};
use std::net::SocketAddr;

/// A handle or metadata message that cannot be the peer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MetaError {
    #[error("NET/IB : connection handle is malformed: {0}")]
    Handle(String),
    #[error("NET/IB : connection metadata from the peer is malformed: {0}")]
    Meta(String),
}

/// The receiver's out-of-band listener (`ncclIbHandle`: `connectAddr` and `magic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IbHandle {
    pub addr: SocketAddr,
    pub magic: u64,
}

pub(crate) const HANDLE_BYTES: usize = ADDR_BYTES + 8;

impl IbHandle {
    pub(crate) fn to_bytes(self) -> [u8; HANDLE_BYTES] {
        let mut b = [0u8; HANDLE_BYTES];
        b[..ADDR_BYTES].copy_from_slice(&addr_to_bytes(&self.addr));
        b[ADDR_BYTES..].copy_from_slice(&self.magic.to_le_bytes());
        b
    }

    pub(crate) fn from_bytes(b: &[u8]) -> Result<IbHandle, MetaError> {
        if b.len() != HANDLE_BYTES {
            return Err(MetaError::Handle(format!("{} bytes, expected {HANDLE_BYTES}", b.len())));
        }
        let mut a = [0u8; ADDR_BYTES];
        a.copy_from_slice(&b[..ADDR_BYTES]);
        let addr = addr_from_bytes(&a).map_err(|f| MetaError::Handle(format!("address family {f}")))?;
        let magic = u64::from_le_bytes(b[ADDR_BYTES..].try_into().unwrap_or_default());
        Ok(IbHandle { addr, magic })
    }
}

/// `enum ibv_mtu` values: 1 (256 bytes) to 5 (4096 bytes).
pub(crate) const MTU_MIN: u8 = 1;
pub(crate) const MTU_MAX: u8 = 5;
/// `IBV_LINK_LAYER_INFINIBAND` and `IBV_LINK_LAYER_ETHERNET`.
pub(crate) const LINK_LAYER_IB: u8 = 1;
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;

/// One side's port (`ncclIbDevInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DevInfo {
    pub lid: u16,
    pub ib_port: u8,
    /// The port's active MTU (`enum ibv_mtu`).
    pub mtu: u8,
    pub link_layer: u8,
    pub gid: [u8; 16],
    /// The rkey of the FIFO the peer RDMA-writes into (the sender's CTS FIFO); 0 from the receiver.
    pub fifo_rkey: u32,
}

/// Everything one side tells the other (`ncclIbConnectionMetadata` for one device and one queue pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnMeta {
    pub qpn: u32,
    pub dev: DevInfo,
    /// Address of the sender's CTS FIFO; 0 from the receiver.
    pub fifo_addr: u64,
    pub tc: u8,
    pub sl: u8,
    /// The HCA name (`mlx5_0`), for messages.
    pub dev_name: String,
}

/// Tags the message so bytes from anything else are refused ("CSIB", version 1).
const META_MAGIC: u32 = 0x4249_5343;
const META_VERSION: u16 = 1;
/// Longest HCA name carried (`IBV_SYSFS_NAME_MAX`).
pub(crate) const MAX_NAME: usize = 64;
/// Fixed part of the message: magic, version, qpn, lid, port, mtu, link layer, gid, fifo rkey, fifo addr, tc,
/// sl, name length.
const FIXED: usize = 4 + 2 + 4 + 2 + 1 + 1 + 1 + 16 + 4 + 8 + 1 + 1 + 1;
/// Every message has the same size, so the reader knows how much to read before parsing.
pub(crate) const META_BYTES: usize = FIXED + MAX_NAME;

impl ConnMeta {
    pub(crate) fn encode(&self) -> [u8; META_BYTES] {
        let mut b = [0u8; META_BYTES];
        let mut w = Writer { b: &mut b, off: 0 };
        w.put(&META_MAGIC.to_le_bytes());
        w.put(&META_VERSION.to_le_bytes());
        w.put(&self.qpn.to_le_bytes());
        w.put(&self.dev.lid.to_le_bytes());
        w.put(&[self.dev.ib_port, self.dev.mtu, self.dev.link_layer]);
        w.put(&self.dev.gid);
        w.put(&self.dev.fifo_rkey.to_le_bytes());
        w.put(&self.fifo_addr.to_le_bytes());
        let name = &self.dev_name.as_bytes()[..self.dev_name.len().min(MAX_NAME)];
        w.put(&[self.tc, self.sl, name.len() as u8]);
        w.put(name);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<ConnMeta, MetaError> {
        let bad = |m: String| MetaError::Meta(m);
        if b.len() != META_BYTES {
            return Err(bad(format!("{} bytes, expected {META_BYTES}", b.len())));
        }
        let mut r = Reader { b, off: 0 };
        let magic = u32::from_le_bytes(r.take());
        if magic != META_MAGIC {
            return Err(bad(format!("magic {magic:#x} (not a collscope NET/IB peer)")));
        }
        let version = u16::from_le_bytes(r.take());
        if version != META_VERSION {
            return Err(bad(format!("version {version}, this build speaks {META_VERSION}")));
        }
        let qpn = u32::from_le_bytes(r.take());
        if qpn >= 1 << 24 {
            return Err(bad(format!("queue pair number {qpn:#x} has more than 24 bits")));
        }
        let lid = u16::from_le_bytes(r.take());
        let [ib_port, mtu, link_layer] = r.take();
        if ib_port == 0 {
            return Err(bad("port 0 (ports count from 1)".into()));
        }
        if !(MTU_MIN..=MTU_MAX).contains(&mtu) {
            return Err(bad(format!("MTU code {mtu}, expected {MTU_MIN}..={MTU_MAX}")));
        }
        if link_layer != LINK_LAYER_IB && link_layer != LINK_LAYER_ETHERNET {
            return Err(bad(format!(
                "link layer {link_layer}, expected IB ({LINK_LAYER_IB}) or Ethernet ({LINK_LAYER_ETHERNET})"
            )));
        }
        let gid: [u8; 16] = r.take();
        let fifo_rkey = u32::from_le_bytes(r.take());
        let fifo_addr = u64::from_le_bytes(r.take());
        let [tc, sl, name_len] = r.take();
        if sl > 15 {
            return Err(bad(format!("service level {sl}, expected 0..=15")));
        }
        if name_len as usize > MAX_NAME {
            return Err(bad(format!("device name of {name_len} bytes, at most {MAX_NAME}")));
        }
        let name: [u8; MAX_NAME] = r.take();
        let dev_name = std::str::from_utf8(&name[..name_len as usize])
            .map_err(|_| bad("device name is not UTF-8".into()))?
            .to_string();
        Ok(ConnMeta {
            qpn,
            dev: DevInfo { lid, ib_port, mtu, link_layer, gid, fifo_rkey },
            fifo_addr,
            tc,
            sl,
            dev_name,
        })
    }
}

struct Writer<'a> {
    b: &'a mut [u8],
    off: usize,
}

impl Writer<'_> {
    fn put(&mut self, v: &[u8]) {
        self.b[self.off..self.off + v.len()].copy_from_slice(v);
        self.off += v.len();
    }
}

/// Reads fixed-size fields from a buffer whose length was checked against the layout.
struct Reader<'a> {
    b: &'a [u8],
    off: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut v = [0u8; N];
        v.copy_from_slice(&self.b[self.off..self.off + N]);
        self.off += N;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConnMeta {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, 7]);
        ConnMeta {
            qpn: 0x1a2b,
            dev: DevInfo { lid: 0, ib_port: 1, mtu: 5, link_layer: LINK_LAYER_ETHERNET, gid, fifo_rkey: 0xdead },
            fifo_addr: 0x7f12_3456_7000,
            tc: 106,
            sl: 3,
            dev_name: "mlx5_0".into(),
        }
    }

    #[test]
    fn handle_round_trip_and_bad_lengths() {
        let h = IbHandle { addr: "10.1.2.3:45678".parse().unwrap(), magic: 0x0102_0304_0506_0708 };
        assert_eq!(IbHandle::from_bytes(&h.to_bytes()).unwrap(), h);
        let h6 = IbHandle { addr: "[fe80::1]:9".parse().unwrap(), magic: 1 };
        assert_eq!(IbHandle::from_bytes(&h6.to_bytes()).unwrap(), h6);
        let e = IbHandle::from_bytes(&h.to_bytes()[..HANDLE_BYTES - 1]).unwrap_err();
        assert!(e.to_string().contains("expected 32"), "{e}");
        // A socket handle (address, magic, threads) is longer and refused, not misread.
        assert!(IbHandle::from_bytes(&[0u8; HANDLE_BYTES + 8]).is_err());
    }

    #[test]
    fn metadata_round_trip() {
        let m = sample();
        let b = m.encode();
        assert_eq!(&b[..4], b"CSIB");
        assert_eq!(ConnMeta::decode(&b).unwrap(), m);
        let long = ConnMeta { dev_name: "x".repeat(80), ..sample() };
        assert_eq!(ConnMeta::decode(&long.encode()).unwrap().dev_name, "x".repeat(MAX_NAME));
    }

    #[test]
    fn malformed_metadata_is_refused_with_the_field() {
        let good = sample().encode();
        let corrupt = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            ConnMeta::decode(&b).unwrap_err().to_string()
        };
        assert!(corrupt(0, 0).contains("magic"));
        assert!(corrupt(4, 9).contains("version 9"));
        assert!(corrupt(9, 1).contains("24 bits"));
        assert!(corrupt(12, 0).contains("port 0"));
        assert!(corrupt(13, 6).contains("MTU code 6"));
        assert!(corrupt(14, 3).contains("link layer 3"));
        assert!(corrupt(44, 16).contains("service level 16"));
        assert!(corrupt(45, 65).contains("at most 64"));
        assert!(corrupt(46, 0xff).contains("UTF-8"));
        assert!(ConnMeta::decode(&good[1..]).unwrap_err().to_string().contains("expected 110"));
    }
}
