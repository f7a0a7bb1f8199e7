//! The RDMA writes of NET/IB as plain values (NCCL 2.28.9 `net_ib.cc` `ncclIbMultiSend`, `ncclIbPostFifo`):
//! the data goes as one RDMA WRITE WITH IMMEDIATE into the buffer the receiver announced, the immediate
//! carrying the byte count; a clear-to-send entry goes as an RDMA WRITE into the sender's FIFO slot.
//! [`super::verbs`] turns them into `ibv_send_wr`s.

use super::fifo::{imm_for, CtsEntry, FifoError, Posted, ENTRY_BYTES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opcode {
    /// `IBV_WR_RDMA_WRITE`.
    Write,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: consumes a receive on the peer and completes it with the immediate.
    WriteWithImm,
}

/// One scatter/gather entry (`ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// One send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteWr {
    pub wr_id: u64,
    pub opcode: Opcode,
    /// `None` for a zero-byte write (NCCL posts no SGE then).
    pub sge: Option<Sge>,
    pub remote_addr: u64,
    pub rkey: u32,
    pub imm: u32,
    pub signaled: bool,
}

/// The data write of a send of `size` bytes at `data` (lkey `lkey`) into the buffer `cts` announced. Like NCCL,
/// a send larger than the posted buffer is cut to it; the receiver learns the count from the immediate.
pub(crate) fn data_write(cts: &CtsEntry, data: u64, size: usize, lkey: u32, wr_id: u64) -> Result<WriteWr, FifoError> {
    let size = size.min(usize::try_from(cts.size).unwrap_or(usize::MAX));
    let imm = imm_for(size).ok_or(FifoError::TooLarge(size))?;
    Ok(WriteWr {
        wr_id,
        opcode: Opcode::WriteWithImm,
        sge: (size > 0).then_some(Sge { addr: data, length: imm, lkey }),
        remote_addr: cts.addr,
        rkey: cts.rkeys[0],
        imm,
        signaled: true,
    })
}

/// The write of clear-to-send `p`, staged at local address `entry_addr` (lkey `lkey`), into the sender's FIFO at
/// `fifo_addr` (rkey `fifo_rkey`). Only signaled writes produce a completion, for request `wr_id`.
pub(crate) fn cts_write(p: &Posted, entry_addr: u64, lkey: u32, fifo_addr: u64, fifo_rkey: u32, wr_id: u64) -> WriteWr {
    WriteWr {
        wr_id,
        opcode: Opcode::Write,
        sge: Some(Sge { addr: entry_addr, length: ENTRY_BYTES as u32, lkey }),
        remote_addr: fifo_addr + p.remote_offset as u64,
        rkey: fifo_rkey,
        imm: 0,
        signaled: p.signaled,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::{RecvFifo, MAX_RECVS};
    use super::*;

    #[test]
    fn data_goes_as_write_with_immediate_size() {
        let cts = CtsEntry { addr: 0x9000, size: 4096, rkeys: [0x77, 0, 0, 0], nreqs: 1, tag: 1, idx: 1 };
        let wr = data_write(&cts, 0x1000, 1000, 0x11, 5).unwrap();
        assert_eq!(
            wr,
            WriteWr {
                wr_id: 5,
                opcode: Opcode::WriteWithImm,
                sge: Some(Sge { addr: 0x1000, length: 1000, lkey: 0x11 }),
                remote_addr: 0x9000,
                rkey: 0x77,
                imm: 1000,
                signaled: true,
            }
        );
        // Larger than the posted buffer: cut to it, as NCCL does.
        let wr = data_write(&cts, 0x1000, 10_000, 0x11, 5).unwrap();
        assert_eq!((wr.imm, wr.sge.unwrap().length), (4096, 4096));
        // Empty: no SGE, the immediate still completes the receive.
        let wr = data_write(&cts, 0x1000, 0, 0x11, 6).unwrap();
        assert_eq!((wr.sge, wr.imm), (None, 0));
        let huge = CtsEntry { size: u64::MAX, ..cts };
        assert_eq!(data_write(&huge, 0, 1 << 33, 1, 1), Err(FifoError::TooLarge(1 << 33)));
    }

    #[test]
    fn cts_lands_in_its_slot_signaled_once_per_round() {
        let mut rx = RecvFifo::default();
        let first = rx.post(0x5000, 16, 3, 0);
        let wr = cts_write(&first, 0x2000, 0x22, 0x8000, 0x33, 2);
        assert_eq!((wr.opcode, wr.remote_addr, wr.rkey, wr.signaled), (Opcode::Write, 0x8000, 0x33, true));
        assert_eq!(wr.sge, Some(Sge { addr: 0x2000, length: 64, lkey: 0x22 }));
        let second = rx.post(0x5000, 16, 3, 1);
        let wr = cts_write(&second, 0x2040, 0x22, 0x8000, 0x33, 3);
        assert_eq!((wr.remote_addr, wr.signaled), (0x8000 + (MAX_RECVS * 64) as u64, false));
    }
}
