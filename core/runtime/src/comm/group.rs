//! Point-to-point operations with group semantics (NCCL's `ncclGroupStart`/`ncclGroupEnd` around
//! `ncclSend`/`ncclRecv`): operations are collected, then progressed together, one step at a time on every
//! peer that can move, so the order in which ranks post them cannot deadlock.

use crate::comm::{model_dtype, Comm, WallClock, Want};
use crate::device::proto::{read_simple, write_step};
use crate::error::{Result, RuntimeError};
use crate::profiler::{ApiGroup, Handle, P2pStart};
use collscope_kernels::Element;
use collscope_model::{Collective, DataType, Protocol};
use std::marker::PhantomData;

#[derive(Debug, Clone, Copy)]
struct P2pOp {
    peer: u32,
    send: bool,
    ptr: *mut u8,
    bytes: usize,
    dt: DataType,
    done: usize,
    /// Its P2pApi profiler event.
    api: Handle,
}

/// Operations collected between `Comm::group` and `Group::end`; the buffers stay borrowed until then.
pub struct Group<'c, 'b> {
    comm: &'c mut Comm,
    ops: Vec<P2pOp>,
    kind: Collective,
    /// When the group opened: its operations count as enqueued from then (wall clock, us).
    opened_us: u64,
    /// Groups deep its calls are taken, as NCCL counts (1: a lone call's implicit group; 2: the application's).
    depth: i32,
    /// The profiler's API group, from the first call on.
    api: Option<ApiGroup>,
    _bufs: PhantomData<&'b mut [u8]>,
}

impl Comm {
    /// Starts a group (`ncclGroupStart`).
    pub fn group<'b>(&mut self) -> Group<'_, 'b> {
        self.open_group(2)
    }

    fn open_group<'b>(&mut self, depth: i32) -> Group<'_, 'b> {
        let opened_us = self.clock.us(WallClock::now());
        Group {
            comm: self,
            ops: Vec::new(),
            kind: Collective::SendRecv,
            opened_us,
            depth,
            api: None,
            _bufs: PhantomData,
        }
    }

    pub fn send<T: Element>(&mut self, buf: &[T], peer: u32) -> Result<()> {
        let mut g = self.open_group(1);
        g.send(buf, peer)?;
        g.end()
    }

    pub fn recv<T: Element>(&mut self, buf: &mut [T], peer: u32) -> Result<()> {
        let mut g = self.open_group(1);
        g.recv(buf, peer)?;
        g.end()
    }

    /// Block `p` of `send` goes to rank `p`; block `p` of `recv` comes from rank `p`.
    pub fn all_to_all<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.nranks as usize;
        let count = send.len() / n;
        if send.len() != count * n || recv.len() != send.len() {
            return Err(RuntimeError::SizeMismatch {
                coll: "AllToAll".into(),
                buffer: "receive",
                got: recv.len(),
                expected: count * n,
            });
        }
        let mut g = self.open_group(1);
        g.kind = Collective::AllToAll;
        for (p, (s, r)) in send.chunks(count.max(1)).zip(recv.chunks_mut(count.max(1))).enumerate().take(n) {
            g.send(s, p as u32)?;
            g.recv(r, p as u32)?;
        }
        g.end()
    }
}

impl<'b> Group<'_, 'b> {
    fn push(&mut self, peer: u32, send: bool, ptr: *mut u8, bytes: usize, dt: DataType) -> Result<()> {
        if peer >= self.comm.nranks {
            return Err(RuntimeError::BadRank { what: "peer", got: peer as usize, nranks: self.comm.nranks });
        }
        let api = match &self.comm.profiler {
            Some(p) => {
                let group = self.api.get_or_insert_with(|| p.api_group(self.depth));
                let coll = if send { Collective::Send } else { Collective::Recv };
                group.call(coll, bytes / dt.size(), dt, peer)
            }
            None => Handle::NULL,
        };
        self.ops.push(P2pOp { peer, send, ptr, bytes, dt, done: 0, api });
        Ok(())
    }

    pub fn send<T: Element>(&mut self, buf: &'b [T], peer: u32) -> Result<()> {
        self.push(peer, true, buf.as_ptr() as *mut u8, std::mem::size_of_val(buf), model_dtype(T::DTYPE))
    }

    pub fn recv<T: Element>(&mut self, buf: &'b mut [T], peer: u32) -> Result<()> {
        self.push(peer, false, buf.as_mut_ptr() as *mut u8, std::mem::size_of_val(buf), model_dtype(T::DTYPE))
    }

    /// Runs the group (`ncclGroupEnd`).
    pub fn end(self) -> Result<()> {
        let Group { comm, mut ops, kind, opened_us, api, .. } = self;
        let dt = ops.first().map(|o| o.dt).unwrap_or(DataType::U8);
        let total: usize = ops.iter().filter(|o| o.send).map(|o| o.bytes).sum();
        let coll = if kind == Collective::AllToAll {
            kind
        } else if ops.iter().all(|o| o.send) {
            Collective::Send
        } else if ops.iter().all(|o| !o.send) {
            Collective::Recv
        } else {
            Collective::SendRecv
        };
        let started = WallClock::now();
        let mut rec = comm.new_record(coll, dt, total / dt.size(), None, started);
        rec.enqueued_us = opened_us;
        rec.bytes = total as u64;
        if let [one] = ops.as_slice() {
            rec.peer = Some(one.peer as i32);
        }
        rec.proto = Some(Protocol::Simple);
        rec.n_channels = Some(1);
        let res = run(comm, &mut ops, api);
        comm.finish_record(rec, WallClock::since(started), res)
    }
}

/// The group's sends and receives as the profiler's P2p tasks.
fn p2p_tasks(ops: &[P2pOp]) -> Vec<P2pStart> {
    ops.iter()
        .map(|o| P2pStart {
            send: o.send,
            peer: o.peer,
            buff: o.ptr,
            count: o.bytes / o.dt.size(),
            dt: o.dt,
            api: o.api,
        })
        .collect()
}

fn run(comm: &mut Comm, ops: &mut [P2pOp], api: Option<ApiGroup>) -> Result<()> {
    let me = comm.rank;
    // Sends to self pair with receives from self, in order.
    let self_sends: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].peer == me && ops[i].send).collect();
    let self_recvs: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].peer == me && !ops[i].send).collect();
    if self_sends.len() != self_recvs.len() {
        return Err(RuntimeError::Mismatch {
            what: "send/recv to self",
            detail: format!("{} sends but {} receives in the group", self_sends.len(), self_recvs.len()),
        });
    }
    for (s, r) in self_sends.into_iter().zip(self_recvs) {
        if ops[s].bytes != ops[r].bytes {
            return Err(RuntimeError::Mismatch {
                what: "send/recv to self",
                detail: format!("send of {} bytes matched with receive of {} bytes", ops[s].bytes, ops[r].bytes),
            });
        }
        // SAFETY: both come from slices the group borrows until it ends (`send`/`recv`), of the same length, checked
        // above; a receive buffer is `&mut`, so it overlaps no send buffer.
        unsafe { collscope_kernels::bytes::copy(ops[r].ptr, ops[s].ptr, ops[s].bytes) };
        ops[s].done = ops[s].bytes;
        ops[r].done = ops[r].bytes;
    }
    // Connect what is missing (both sides ask for the mirror image).
    let mut wants: Vec<Want> = Vec::new();
    for o in ops.iter().filter(|o| o.peer != me && o.bytes > 0) {
        let have = if o.send { comm.p2p.send.contains_key(&o.peer) } else { comm.p2p.recv.contains_key(&o.peer) };
        let w = Want { channel: 0, peer: o.peer, send: o.send, conn_index: 1 };
        if !have && !wants.contains(&w) {
            wants.push(w);
        }
    }
    comm.connect(&wants)?;

    let piece = comm.sizes.step_payload(Protocol::Simple);
    let _events = comm
        .profiler
        .as_ref()
        .zip(api)
        .map(|(p, api)| p.p2p_start(api, &p2p_tasks(ops), piece, |r, s| comm.p2p.conn_mem(r, s)));
    let waiter = comm.waiter.clone();
    loop {
        let mut progressed = false;
        let mut pending = false;
        for i in 0..ops.len() {
            let o = ops[i];
            if o.done >= o.bytes {
                continue;
            }
            pending = true;
            // Only the first unfinished operation per peer and direction moves, keeping posting order.
            if ops[..i].iter().any(|p| p.peer == o.peer && p.send == o.send && p.done < p.bytes) {
                continue;
            }
            let len = piece.min(o.bytes - o.done);
            if o.send {
                let end = comm.p2p.send.get_mut(&o.peer).expect("connected above");
                if end.has_credit() {
                    // SAFETY: `done + len` <= `bytes` of the slice the group borrows, and `has_credit` made room for
                    // the step.
                    unsafe { write_step(end, Protocol::Simple, o.ptr.add(o.done), len) };
                    ops[i].done += len;
                    progressed = true;
                }
            } else {
                let end = comm.p2p.recv.get_mut(&o.peer).expect("connected above");
                if end.has_data() {
                    let p = read_simple(end, len, &waiter, 0)?;
                    // SAFETY: `done + len` <= `bytes` of the `&mut` slice the group borrows; `p` is the step's `len`
                    // bytes, valid until `release`.
                    unsafe { collscope_kernels::bytes::copy(o.ptr.add(o.done), p, len) };
                    end.release();
                    ops[i].done += len;
                    progressed = true;
                }
            }
        }
        if !pending {
            return Ok(());
        }
        if !progressed {
            let p2p = &comm.p2p;
            let ready = || {
                ops.iter().any(|o| {
                    o.done < o.bytes
                        && if o.send {
                            p2p.send.get(&o.peer).is_some_and(|e| e.has_credit())
                        } else {
                            p2p.recv.get(&o.peer).is_some_and(|e| e.has_data())
                        }
                })
            };
            let what = || {
                let peers: Vec<String> = ops
                    .iter()
                    .filter(|o| o.done < o.bytes)
                    .map(|o| format!("{} rank {}", if o.send { "send to" } else { "receive from" }, o.peer))
                    .collect();
                format!("point-to-point progress ({})", peers.join(", "))
            };
            waiter.wait(ready, what)?;
        }
    }
}
