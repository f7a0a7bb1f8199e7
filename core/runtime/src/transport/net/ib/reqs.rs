//! NET/IB's requests and the completions that finish them (NCCL 2.28.9 `net_ib.cc` `ncclIbGetRequest`,
//! `ncclIbTest`): a request waits for a count of completions (`events`), found by the request index carried in
//! the low byte of `wr_id`; a receive learns its size from the immediate of its RDMA WRITE WITH IMM.

use super::fifo::MAX_REQUESTS;

/// What a completion reports, as read from an `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    pub wr_id: u64,
    /// `enum ibv_wc_status`; see [`super::status`].
    pub status: u32,
    pub opcode: WcOpcode,
    pub imm: Option<u32>,
    pub vendor_err: u32,
    pub byte_len: u32,
}

/// The completion opcodes NET/IB sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcOpcode {
    /// `IBV_WC_RDMA_WRITE`: one of this side's writes finished.
    RdmaWrite,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: the peer's data write consumed a posted receive.
    RecvRdmaWithImm,
    Other(u32),
}

impl WcOpcode {
    /// The `enum ibv_wc_opcode` value.
    pub(crate) fn code(self) -> u32 {
        match self {
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RecvRdmaWithImm => 129,
            WcOpcode::Other(o) => o,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Recv,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReqError {
    #[error("NET/IB : unable to allocate requests ({MAX_REQUESTS} in flight)")]
    Full,
    #[error("NET/IB : completion for request {0}, which is not in flight")]
    Unknown(u64),
    #[error("NET/IB : a receive completion (opcode {0:?}) finished send request {1}")]
    Mismatch(WcOpcode, u8),
}

#[derive(Debug, Clone, Copy)]
struct Req {
    kind: Kind,
    events: u32,
    size: usize,
}

/// The requests of one comm.
#[derive(Debug)]
pub(crate) struct Requests {
    slots: Vec<Option<Req>>,
}

impl Default for Requests {
    fn default() -> Self {
        Requests { slots: vec![None; MAX_REQUESTS] }
    }
}

impl Requests {
    /// A request of `kind` for `size` bytes, done after `events` completions.
    pub(crate) fn alloc(&mut self, kind: Kind, size: usize, events: u32) -> Result<u8, ReqError> {
        let i = self.slots.iter().position(Option::is_none).ok_or(ReqError::Full)?;
        self.slots[i] = Some(Req { kind, events, size });
        Ok(i as u8)
    }

    /// One more completion to wait for (a signaled clear-to-send write of a receive).
    pub(crate) fn add_event(&mut self, id: u8) {
        if let Some(Some(r)) = self.slots.get_mut(id as usize) {
            r.events += 1;
        }
    }

    /// Counts a successful completion against its request.
    pub(crate) fn complete(&mut self, c: &Completion) -> Result<(), ReqError> {
        let id = (c.wr_id & 0xff) as u8;
        let r = self.slots.get_mut(id as usize).and_then(Option::as_mut).ok_or(ReqError::Unknown(c.wr_id))?;
        if r.events == 0 {
            return Err(ReqError::Unknown(c.wr_id));
        }
        if c.opcode == WcOpcode::RecvRdmaWithImm {
            if r.kind != Kind::Recv {
                return Err(ReqError::Mismatch(c.opcode, id));
            }
            r.size = c.imm.unwrap_or(0) as usize;
        }
        r.events -= 1;
        Ok(())
    }

    /// The request's byte count once all its completions arrived; the request is then free again.
    pub(crate) fn done(&mut self, id: u8) -> Option<usize> {
        let slot = self.slots.get_mut(id as usize)?;
        match slot {
            Some(r) if r.events == 0 => {
                let size = r.size;
                *slot = None;
                Some(size)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(wr_id: u64, opcode: WcOpcode, imm: Option<u32>) -> Completion {
        Completion { wr_id, status: 0, opcode, imm, vendor_err: 0, byte_len: 0 }
    }

    #[test]
    fn receive_takes_its_size_from_the_immediate() {
        let mut r = Requests::default();
        let id = r.alloc(Kind::Recv, 4096, 1).unwrap();
        r.add_event(id); // its CTS write was signaled
        assert_eq!(r.done(id), None);
        r.complete(&wc(id as u64, WcOpcode::RecvRdmaWithImm, Some(1000))).unwrap();
        assert_eq!(r.done(id), None, "the CTS write has not completed");
        r.complete(&wc(id as u64, WcOpcode::RdmaWrite, None)).unwrap();
        assert_eq!(r.done(id), Some(1000));
        assert_eq!(r.done(id), None, "freed");
    }

    #[test]
    fn sends_complete_with_their_own_size_and_slots_recycle() {
        let mut r = Requests::default();
        let ids: Vec<u8> = (0..MAX_REQUESTS).map(|i| r.alloc(Kind::Send, i, 1).unwrap()).collect();
        assert_eq!(r.alloc(Kind::Send, 1, 1), Err(ReqError::Full));
        r.complete(&wc(ids[7] as u64 | 0xab00, WcOpcode::RdmaWrite, None)).unwrap();
        assert_eq!(r.done(ids[7]), Some(7));
        assert_eq!(r.alloc(Kind::Send, 9, 1).unwrap(), ids[7]);
        assert_eq!(
            r.complete(&wc(ids[3] as u64, WcOpcode::RecvRdmaWithImm, Some(1))),
            Err(ReqError::Mismatch(WcOpcode::RecvRdmaWithImm, ids[3]))
        );
        let mut empty = Requests::default();
        assert_eq!(empty.complete(&wc(4, WcOpcode::RdmaWrite, None)), Err(ReqError::Unknown(4)));
    }
}
