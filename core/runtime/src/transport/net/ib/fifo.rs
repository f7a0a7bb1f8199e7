//! The clear-to-send FIFO (NCCL 2.28.9 `net_ib.cc`, `struct ncclIbSendFifo`): the receiver RDMA-writes one
//! 64-byte entry per posted buffer into the sender's FIFO; the sender waits for `idx` to reach its next
//! sequence number, then RDMA-WRITEs the data with immediate to `addr` with `rkeys`. Entries are 64 bytes,
//! a multiple of 32, so relaxed ordering never splits one; `idx` is written last and read first.

/// Devices one merged NIC may span (`NCCL_IB_MAX_DEVS_PER_NIC`).
pub(crate) const MAX_DEVS_PER_NIC: usize = 4;
/// Receives one FIFO slot can carry (`NCCL_NET_IB_MAX_RECVS`).
pub(crate) const MAX_RECVS: usize = 8;
/// In-flight requests per communicator (`NCCL_NET_MAX_REQUESTS`), the FIFO depth.
pub(crate) const MAX_REQUESTS: usize = 32;
/// Bytes of one entry as it travels.
pub(crate) const ENTRY_BYTES: usize = 64;

/// One clear-to-send entry: where the receiver's buffer is and how large.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CtsEntry {
    pub addr: u64,
    pub size: u64,
    pub rkeys: [u32; MAX_DEVS_PER_NIC],
    pub nreqs: u32,
    pub tag: u32,
    /// The FIFO sequence number plus one; 0 marks an empty slot.
    pub idx: u64,
}

/// An entry that cannot be the receiver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FifoError {
    #[error("CTS FIFO entry has {0} receives; at most {MAX_RECVS} fit a slot")]
    TooManyRecvs(u32),
    #[error("CTS FIFO entry is {0} bytes; entries are {ENTRY_BYTES}")]
    Length(usize),
    #[error("NET/IB : a send of {0} bytes does not fit the 32-bit immediate that carries its size")]
    TooLarge(usize),
    #[error("NET/IB : CTS FIFO entry groups {0} receives; collscope posts one receive per slot")]
    Grouped(u32),
    #[error("NET/IB : the peer posted a receive with tag {got} where tag {expected} was sent: both sides' steps are out of order")]
    TagMismatch { expected: u32, got: u32 },
    #[error("NET/IB : the peer posted incorrect receive info: size {size} addr {addr:#x} rkey {rkey:#x}")]
    BadEntry { size: u64, addr: u64, rkey: u32 },
}

impl CtsEntry {
    /// The little-endian wire form, field by field as the C struct lays it out (16 bytes of padding last).
    pub(crate) fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        for (i, k) in self.rkeys.iter().enumerate() {
            b[16 + 4 * i..20 + 4 * i].copy_from_slice(&k.to_le_bytes());
        }
        b[32..36].copy_from_slice(&self.nreqs.to_le_bytes());
        b[36..40].copy_from_slice(&self.tag.to_le_bytes());
        b[40..48].copy_from_slice(&self.idx.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<CtsEntry, FifoError> {
        if b.len() != ENTRY_BYTES {
            return Err(FifoError::Length(b.len()));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let e = CtsEntry {
            addr: u64_at(0),
            size: u64_at(8),
            rkeys: [u32_at(16), u32_at(20), u32_at(24), u32_at(28)],
            nreqs: u32_at(32),
            tag: u32_at(36),
            idx: u64_at(40),
        };
        if e.nreqs as usize > MAX_RECVS {
            return Err(FifoError::TooManyRecvs(e.nreqs));
        }
        Ok(e)
    }

    /// Whether this slot holds the entry the sender expects next (`fifo_head` requests consumed so far).
    #[cfg(test)]
    pub(crate) fn is_ready(&self, fifo_head: u64) -> bool {
        self.idx == fifo_head + 1
    }
}

/// The sender's side of the FIFO: which slot carries the next clear-to-send.
#[derive(Debug, Default)]
pub(crate) struct SendFifo {
    /// Entries consumed so far (`fifoHead`).
    head: u64,
}

impl SendFifo {
    /// The slot the next entry lands in.
    pub(crate) fn slot(&self) -> usize {
        slot_offset(self.head).0
    }

    /// Whether a slot whose `idx` field reads `idx` holds the next entry.
    pub(crate) fn ready(&self, idx: u64) -> bool {
        idx == self.head + 1
    }

    /// Takes the ready entry for a send with `tag`: checks it is one receive of that tag with a usable buffer,
    /// then moves to the next slot. collscope posts one receive per slot, so a different tag can never match.
    pub(crate) fn take(&mut self, e: &CtsEntry, tag: u32) -> Result<CtsEntry, FifoError> {
        if e.nreqs != 1 {
            return Err(FifoError::Grouped(e.nreqs));
        }
        if e.tag != tag {
            return Err(FifoError::TagMismatch { expected: tag, got: e.tag });
        }
        if e.addr == 0 || e.rkeys[0] == 0 {
            return Err(FifoError::BadEntry { size: e.size, addr: e.addr, rkey: e.rkeys[0] });
        }
        self.head += 1;
        Ok(*e)
    }
}

/// The receiver's side: the entries it writes into the sender's FIFO (`remFifo.fifoTail`).
#[derive(Debug, Default)]
pub(crate) struct RecvFifo {
    tail: u64,
}

/// One clear-to-send to write: the entry, where it goes in the sender's FIFO, and whether the write asks for a
/// completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posted {
    pub entry: CtsEntry,
    pub slot: usize,
    pub remote_offset: usize,
    /// CTS writes are unsignaled except one per FIFO round (slot 0: NCCL's `slot == devIndex` with one
    /// device), so the send queue drains without a completion per write.
    pub signaled: bool,
}

impl RecvFifo {
    /// The entry announcing a buffer of `size` bytes at `addr` (registered with `rkey`) for a send with `tag`.
    pub(crate) fn post(&mut self, addr: u64, size: u64, rkey: u32, tag: u32) -> Posted {
        let (slot, remote_offset) = slot_offset(self.tail);
        self.tail += 1;
        let entry = CtsEntry { addr, size, rkeys: [rkey, 0, 0, 0], nreqs: 1, tag, idx: self.tail };
        Posted { entry, slot, remote_offset, signaled: slot == 0 }
    }
}

/// The slot of request `seq` in the FIFO and the byte offset of its first entry in the remote FIFO memory.
pub(crate) fn slot_offset(seq: u64) -> (usize, usize) {
    let slot = (seq % MAX_REQUESTS as u64) as usize;
    (slot, slot * MAX_RECVS * ENTRY_BYTES)
}

/// The immediate carried by the data write: the byte count when one receive is posted, as NCCL does
/// (several receives send their sizes through a separate FIFO, which collscope does not use).
pub(crate) fn imm_for(bytes: usize) -> Option<u32> {
    u32::try_from(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let e = CtsEntry { addr: 0x7f00_1234_5000, size: 1 << 20, rkeys: [7, 8, 0, 0], nreqs: 1, tag: 3, idx: 42 };
        let b = e.encode();
        assert_eq!(&b[0..8], &0x7f00_1234_5000u64.to_le_bytes());
        assert_eq!(&b[40..48], &42u64.to_le_bytes());
        assert!(b[48..].iter().all(|&x| x == 0));
        assert_eq!(CtsEntry::decode(&b).unwrap(), e);
        assert!(e.is_ready(41));
        assert!(!e.is_ready(42));
        assert!(!CtsEntry::default().is_ready(0));
    }

    #[test]
    fn bad_entries() {
        assert_eq!(CtsEntry::decode(&[0u8; 63]), Err(FifoError::Length(63)));
        let e = CtsEntry { nreqs: 9, ..Default::default() };
        assert_eq!(CtsEntry::decode(&e.encode()), Err(FifoError::TooManyRecvs(9)));
    }

    #[test]
    fn sender_and_receiver_agree_across_wraps() {
        let (mut tx, mut rx) = (SendFifo::default(), RecvFifo::default());
        for seq in 0..(3 * MAX_REQUESTS as u64 + 5) {
            let tag = (seq % 2) as u32;
            let p = rx.post(0x1000 + seq, 64, 0x55, tag);
            assert_eq!((p.slot, p.remote_offset), slot_offset(seq));
            assert_eq!(p.signaled, seq % MAX_REQUESTS as u64 == 0);
            assert_eq!(tx.slot(), p.slot);
            // The entry crosses the wire; the sender sees it only once its idx is the next one.
            let seen = CtsEntry::decode(&p.entry.encode()).unwrap();
            assert!(tx.ready(seen.idx));
            assert!(!tx.ready(seen.idx + MAX_REQUESTS as u64), "a stale entry from the previous round");
            assert_eq!(tx.take(&seen, tag).unwrap().addr, 0x1000 + seq);
            assert!(!tx.ready(seen.idx), "consumed");
        }
    }

    #[test]
    fn sender_refuses_entries_it_cannot_use() {
        let mut rx = RecvFifo::default();
        let p = rx.post(0x1000, 16, 7, 0);
        let mut tx = SendFifo::default();
        assert_eq!(tx.take(&p.entry, 1), Err(FifoError::TagMismatch { expected: 1, got: 0 }));
        let no_key = CtsEntry { rkeys: [0; 4], ..p.entry };
        assert!(matches!(tx.take(&no_key, 0), Err(FifoError::BadEntry { rkey: 0, .. })));
        let multi = CtsEntry { nreqs: 2, ..p.entry };
        assert_eq!(tx.take(&multi, 0), Err(FifoError::Grouped(2)));
        assert_eq!(tx.slot(), 0, "a refused entry is not consumed");
        assert!(tx.take(&p.entry, 0).is_ok());
        assert_eq!(tx.slot(), 1);
    }

    #[test]
    fn slots_wrap() {
        assert_eq!(slot_offset(0), (0, 0));
        assert_eq!(slot_offset(1), (1, 512));
        assert_eq!(slot_offset(MAX_REQUESTS as u64 + 2), (2, 1024));
        assert_eq!(imm_for(4096), Some(4096));
        assert_eq!(imm_for(usize::MAX), None);
    }
}
