//! The primitives collectives are written in (NCCL 2.28.9 `src/device/primitives.h`): each moves `nbytes`
//! through a channel's connections, one step-sized piece at a time, receiving from some peers, reducing with a
//! local source, writing a local destination and sending to other peers. The named operations (`send`,
//! `recv_reduce_send`, ...) are the combinations NCCL's algorithms use.

use super::conn::{RecvEnd, SendEnd};
use super::error::Result;
use super::proto::{read_step, wait_credit, write_step};
use super::tree::TreeNode;
use super::wait::Waiter;
use crate::model::Protocol;
use collscope_kernels::{bytes as kern, Dtype, Op};
use std::collections::HashMap;

/// One channel of a communicator: its ring and tree neighbours and its connections by peer.
pub struct Channel {
    pub id: u32,
    pub ring_prev: u32,
    pub ring_next: u32,
    pub tree: TreeNode,
    pub send: HashMap<u32, SendEnd>,
    pub recv: HashMap<u32, RecvEnd>,
}

/// A pointer into a user buffer that channel threads share; each channel touches its own range.
#[derive(Debug, Clone, Copy)]
pub struct Ptr(pub *mut u8);
// SAFETY: the algorithms give every channel disjoint ranges of the buffers.
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

impl Ptr {
    /// The address `bytes` further on (only dereferenced by the unsafe primitives, within the buffer).
    pub fn at(self, bytes: usize) -> *mut u8 {
        self.0.wrapping_add(bytes)
    }
}

/// Everything a primitive needs besides its arguments.
pub struct Prims<'a> {
    pub ch: &'a mut Channel,
    pub proto: Protocol,
    pub dt: Dtype,
    pub op: Op,
    pub nranks: u32,
    pub w: &'a Waiter,
    /// Largest piece (bytes, whole elements) one step carries.
    pub piece: usize,
    scratch: Vec<Vec<u64>>,
    out: Vec<u64>,
}

impl<'a> Prims<'a> {
    pub fn new(
        ch: &'a mut Channel,
        proto: Protocol,
        dt: Dtype,
        op: Op,
        nranks: u32,
        w: &'a Waiter,
        step_payload: usize,
    ) -> Self {
        let esize = dt.size();
        let piece = (step_payload / esize * esize).max(esize);
        Prims { ch, proto, dt, op, nranks, w, piece, scratch: Vec::new(), out: Vec::new() }
    }

    /// The general primitive: inputs are `src` (if any) and one step from each of `from`; their reduction (or
    /// the single input) goes to `dst` (if any) and to each of `to`. `post` divides by the rank count (Avg).
    ///
    /// # Safety
    /// `src`/`dst` must be valid for `nbytes` and aligned for the datatype; `dst` may equal `src`.
    pub unsafe fn run(
        &mut self,
        from: &[u32],
        to: &[u32],
        src: Option<*const u8>,
        dst: Option<*mut u8>,
        nbytes: usize,
        post: bool,
    ) -> Result<()> {
        let channel = self.ch.id;
        if self.scratch.len() < from.len() {
            self.scratch.resize_with(from.len(), Vec::new);
        }
        let mut off = 0;
        while off < nbytes {
            let len = self.piece.min(nbytes - off);
            for p in to {
                wait_credit(self.send_end(*p), self.w, channel)?;
            }
            let mut inputs: Vec<*const u8> = Vec::with_capacity(from.len() + 1);
            if let Some(s) = src {
                inputs.push(s.add(off));
            }
            for (i, p) in from.iter().enumerate() {
                let end = self.ch.recv.get(p).expect("primitive on an unconnected peer");
                inputs.push(read_step(end, self.proto, len, &mut self.scratch[i], self.w, channel)?);
            }
            let out: *const u8 = if inputs.len() == 1 {
                match dst {
                    Some(d) => {
                        kern::copy(d.add(off), inputs[0], len);
                        if post {
                            kern::divide(self.dt, self.op, d.add(off), len, self.nranks);
                        }
                        d.add(off)
                    }
                    None => inputs[0],
                }
            } else {
                let target: *mut u8 = match (dst, to.first()) {
                    (Some(d), _) => d.add(off),
                    (None, Some(p)) if self.proto == Protocol::Simple => {
                        let e = self.send_end(*p);
                        e.mem.slot(Protocol::Simple, e.step)
                    }
                    _ => {
                        self.out.resize(len.div_ceil(8), 0);
                        self.out.as_mut_ptr() as *mut u8
                    }
                };
                let last = inputs.len() - 1;
                for k in 1..=last {
                    let a = if k == 1 { inputs[0] } else { target as *const u8 };
                    kern::reduce(
                        self.dt,
                        self.op,
                        target,
                        a,
                        inputs[k],
                        len,
                        (post && k == last).then_some(self.nranks),
                    );
                }
                target
            };
            for p in to {
                let proto = self.proto;
                write_step(self.ch.send.get_mut(p).expect("primitive on an unconnected peer"), proto, out, len);
            }
            for p in from {
                self.ch.recv.get_mut(p).expect("primitive on an unconnected peer").release();
            }
            off += len;
        }
        Ok(())
    }

    fn send_end(&self, peer: u32) -> &SendEnd {
        self.ch.send.get(&peer).expect("primitive on an unconnected peer")
    }

    /// Sends `src`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn send(&mut self, to: u32, src: *const u8, n: usize) -> Result<()> {
        self.run(&[], &[to], Some(src), None, n, false)
    }

    /// Receives into `dst`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn recv(&mut self, from: u32, dst: *mut u8, n: usize) -> Result<()> {
        self.run(&[from], &[], None, Some(dst), n, false)
    }

    /// Receives, reduces with `src`, sends on.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn recv_reduce_send(&mut self, from: u32, to: u32, src: *const u8, n: usize) -> Result<()> {
        self.run(&[from], &[to], Some(src), None, n, false)
    }

    /// Receives from `from`, reduces with `src` into `dst` (dividing for Avg when `post`).
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn recv_reduce_copy(
        &mut self,
        from: &[u32],
        src: *const u8,
        dst: *mut u8,
        n: usize,
        post: bool,
    ) -> Result<()> {
        self.run(from, &[], Some(src), Some(dst), n, post)
    }

    /// Receives, reduces with `src` into `dst` (the final reduction: Avg divides) and sends on.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn recv_reduce_copy_send(
        &mut self,
        from: u32,
        to: u32,
        src: *const u8,
        dst: *mut u8,
        n: usize,
    ) -> Result<()> {
        self.run(&[from], &[to], Some(src), Some(dst), n, true)
    }

    /// Receives into `dst` and forwards to `to`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn recv_copy_send(&mut self, from: u32, to: &[u32], dst: *mut u8, n: usize) -> Result<()> {
        self.run(&[from], to, None, Some(dst), n, false)
    }

    /// Copies `src` to `dst` and sends it to `to`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub unsafe fn copy_send(&mut self, to: &[u32], src: *const u8, dst: *mut u8, n: usize) -> Result<()> {
        self.run(&[], to, Some(src), Some(dst), n, false)
    }
}
