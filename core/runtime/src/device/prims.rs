//! The primitives collectives are written in (NCCL 2.28.9 `src/device/primitives.h`): each moves `nbytes`
//! through a channel's connections, one step-sized piece at a time, receiving from some peers, reducing with a
//! local source, writing a local destination and sending to other peers. The named operations (`send`,
//! `recv_reduce_send`, ...) are the combinations NCCL's algorithms use.

use super::proto::{read_lines, read_simple, wait_credit, write_step, Unpack};
use super::tree::TreeNode;
use crate::error::{Result, RuntimeError};
use crate::sync::wait::Waiter;
use crate::transport::conn::{Direct, RecvEnd, SendEnd, NCCL_STEPS};
use collscope_kernels::{bytes as kern, Dtype, Op};
use collscope_model::Protocol;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Connections by peer rank. Looked up several times per step: FxHash costs a multiply where SipHash would
/// cost more than a small step.
pub(crate) type PeerMap<T> = FxHashMap<u32, T>;

/// One channel of a communicator: its ring and tree neighbours and its connections by peer.
pub(crate) struct Channel {
    pub id: u32,
    pub ring_prev: u32,
    pub ring_next: u32,
    pub tree: TreeNode,
    pub send: PeerMap<SendEnd>,
    pub recv: PeerMap<RecvEnd>,
    pub scratch: Scratch,
}

/// What a channel moved to (`sent`) or from one peer in its latest call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub peer: u32,
    pub sent: bool,
    /// Bytes, or steps where the call only counted them ([`Prims::count_only`]).
    pub bytes: u64,
    /// Of `bytes`, those taken where they lay, without a slot: read in the sender's buffer or written into the
    /// receiver's.
    pub in_place: u64,
}

impl Channel {
    /// What the channel's latest call moved, per (peer, sent).
    pub(crate) fn moved(&self) -> &[Moved] {
        &self.scratch.moved
    }

    /// The address of the memory of the connection to (`send`) or from `peer`: what names it to the proxy.
    pub(crate) fn conn_mem(&self, peer: u32, send: bool) -> Option<usize> {
        let mem = if send { self.send.get(&peer).map(|e| &e.mem) } else { self.recv.get(&peer).map(|e| &e.mem) };
        mem.map(|m| Arc::as_ptr(m) as usize)
    }
}

/// Buffers the primitives keep from call to call, so a step allocates nothing.
#[derive(Default)]
pub(crate) struct Scratch {
    /// LL/LL128 steps unpacked, one per input peer.
    unpacked: Vec<Vec<u64>>,
    /// A reduction with no destination in memory that peers see.
    out: Vec<u64>,
    /// OneShot's rows: every rank's chunk, reduced locally once all arrived.
    rows: Vec<u64>,
    /// What the current call moved per (peer, sent), for telemetry's per-channel traffic.
    moved: Vec<Moved>,
    /// Calls that exposed their destination ([`Prims::expose_dst`]): names the current one to the ring peers.
    calls: u64,
    /// Receives planned ahead ([`Prims::want_ahead`]).
    ahead: Ahead,
}

/// Plain receives planned from one peer ([`Prims::want_ahead`]): their destinations (addresses, so a channel
/// stays `Send`) and lengths, in order. Region `at` is the first not wholly asked for yet, its first step the
/// peer's step `first`; steps before `next` were asked for. Done once `at` passed the last region.
#[derive(Default)]
struct Ahead {
    peer: u32,
    regions: Vec<(usize, usize)>,
    at: usize,
    first: u64,
    next: u64,
}

impl Ahead {
    /// No plan: every region dropped and the cursor back at the start, together.
    fn clear(&mut self) {
        self.regions.clear();
        self.at = 0;
    }
}

/// Inputs of one step: the local source and up to two tree children (NCCL's CPU trees are binary).
const MAX_INPUTS: usize = 3;
/// Outputs of one step: the local destination and up to two tree children.
const MAX_OUTPUTS: usize = 3;
/// Bytes combined at a time: the inputs and the first output of a block stay in L1 while the block is copied
/// to the other outputs, so each output costs a write, not another pass over memory.
const BLOCK_BYTES: usize = 16 << 10;

/// A pointer into a user buffer that channel threads share; each channel touches its own range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ptr(pub *mut u8);
// SAFETY: the algorithms give every channel disjoint ranges of the buffers.
unsafe impl Send for Ptr {}
// SAFETY: as for `Send`: channels read and write disjoint ranges, and a pointer shared is only an address.
unsafe impl Sync for Ptr {}

impl Ptr {
    /// The address `bytes` further on (only dereferenced by the unsafe primitives, within the buffer).
    pub(crate) fn at(self, bytes: usize) -> *mut u8 {
        self.0.wrapping_add(bytes)
    }
}

/// Everything a primitive needs besides its arguments.
pub(crate) struct Prims<'a> {
    pub ch: &'a mut Channel,
    pub proto: Protocol,
    pub dt: Dtype,
    pub op: Op,
    pub nranks: u32,
    pub w: &'a Waiter,
    /// Largest piece (bytes, whole elements) one step carries.
    pub piece: usize,
    /// Count the steps each peer would see (in `moved`) instead of moving data: the profiler's proxy
    /// operations are posted with their step counts before the channel runs.
    pub count_only: bool,
    /// Write the destination with streaming stores where no peer reads it in place (`comm::stream`).
    pub stream_dst: bool,
}

impl<'a> Prims<'a> {
    pub(crate) fn new(
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
        ch.scratch.moved.clear();
        ch.scratch.ahead.clear();
        Prims { ch, proto, dt, op, nranks, w, piece, count_only: false, stream_dst: false }
    }

    /// What this channel sent to or received from each peer so far.
    pub(crate) fn moved(&self) -> &[Moved] {
        self.ch.moved()
    }

    fn count_moved(&mut self, peer: u32, sent: bool, n: usize, in_place: bool) {
        let (n, in_place) = (n as u64, if in_place { n as u64 } else { 0 });
        match self.ch.scratch.moved.iter_mut().find(|m| m.peer == peer && m.sent == sent) {
            Some(m) => {
                m.bytes += n;
                m.in_place += in_place;
            }
            None => self.ch.scratch.moved.push(Moved { peer, sent, bytes: n, in_place }),
        }
    }

    /// Plans the plain receives from `from` that follow the next primitives' receives from it (`before`, their
    /// lengths), Simple over a network that takes any memory: `regions` in order, each one primitive's
    /// destination and length. Each of their steps is asked for before the connection's credit lets the proxy
    /// take it, whatever primitive runs meanwhile, so all land in place. A receive not planned plans its own steps
    /// only once it starts, and a peer that is ahead has by then sent the first into the slots: a third of what 4
    /// ranks received in a ring AllReduce's second half (its first AllGather chunk) was copied out of them.
    ///
    /// A step that arrived before the plan stays in its slot, where its receive reads it as before: planned
    /// before anything the steps depend on is sent, none does.
    ///
    /// # Safety
    /// Each region valid for its length, and nothing reads or writes it until its receive, but for sends from it
    /// whose bytes the peer's steps into it depend on (so the network took them before those steps arrive).
    pub(crate) unsafe fn want_ahead(
        &mut self,
        from: u32,
        before: impl IntoIterator<Item = usize>,
        regions: impl IntoIterator<Item = (*mut u8, usize)>,
    ) {
        let ch = &mut *self.ch;
        let (a, end) = (&mut ch.scratch.ahead, &ch.recv[&from]);
        a.clear();
        if self.count_only || self.proto != Protocol::Simple || end.mem.direct() != Direct::NetAnyMemory {
            return;
        }
        a.peer = from;
        a.first = end.step + before.into_iter().map(|len| len.div_ceil(self.piece) as u64).sum::<u64>();
        a.next = a.first;
        a.regions.extend(regions.into_iter().map(|(at, len)| (at as usize, len)));
        self.want_planned(from, false);
    }

    /// Asks for the planned steps from `from` ([`Prims::want_ahead`]) that the connection's NCCL_STEPS reach
    /// from its current step, and, when the rank is `releasing` that step, the one its release makes room for.
    fn want_planned(&mut self, from: u32, releasing: bool) {
        let (ch, piece) = (&mut *self.ch, self.piece);
        let a = &mut ch.scratch.ahead;
        if a.at == a.regions.len() || a.peer != from {
            return;
        }
        let end = &ch.recv[&from];
        // Steps the rank already consumed are past asking for (the plan keeps ahead of them).
        a.next = a.next.max(end.step);
        let room = end.step + NCCL_STEPS + u64::from(releasing);
        while let Some(&(at, len)) = a.regions.get(a.at) {
            let last = a.first + len.div_ceil(piece) as u64;
            while a.next < last && a.next < room {
                let off = (a.next - a.first) as usize * piece;
                end.want(a.next - end.step, (at + off) as *mut u8, piece.min(len - off));
                a.next += 1;
            }
            if a.next < last {
                return;
            }
            a.at += 1;
            a.first = last;
        }
    }

    /// The general primitive: inputs are `src` (if any) and one step from each of `from`; their reduction (or
    /// the single input) goes to `dst` (if any) and to each of `to`. `post` divides by the rank count (Avg).
    ///
    /// # Safety
    /// `src`/`dst` must be valid for `nbytes` and aligned for the datatype; `dst` may equal `src`.
    pub(crate) unsafe fn run(
        &mut self,
        from: &[u32],
        to: &[u32],
        src: Option<*const u8>,
        dst: Option<*mut u8>,
        nbytes: usize,
        post: bool,
    ) -> Result<()> {
        // SAFETY: this function's contract is `run_into`'s with no exposed destination.
        unsafe { self.run_into(from, to, src, dst, None, nbytes, post) }
    }

    /// [`Prims::run`], where `into` (if any) is the offset of these `nbytes` in the destination the single peer of
    /// `to` exposed for this call ([`Prims::expose_dst`]): once it did, Simple steps to it are written there
    /// instead of into a slot, and it finds them in place. It is looked for after each step's inputs arrived, as
    /// the exposure precedes the peer's first step and so is seen by then when those inputs depend on that step
    /// (a ring's reduction has passed through every rank); looked for before, it was missed in a third to a half
    /// of 2-rank calls, whose final chunk the peer then had to copy. LL and LL128 steps, which always go through
    /// the slots, are run by [`Prims::run_lines`] instead.
    ///
    /// # Safety
    /// As [`Prims::run`]; the exposed destination valid for `into + nbytes` bytes and not read or written by the
    /// peer there until it gets the steps.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_into(
        &mut self,
        from: &[u32],
        to: &[u32],
        src: Option<*const u8>,
        dst: Option<*mut u8>,
        into: Option<usize>,
        nbytes: usize,
        post: bool,
    ) -> Result<()> {
        if self.count_only {
            let steps = nbytes.div_ceil(self.piece);
            from.iter().for_each(|p| self.count_moved(*p, false, steps, false));
            to.iter().for_each(|p| self.count_moved(*p, true, steps, false));
            return Ok(());
        }
        if self.proto != Protocol::Simple {
            // SAFETY: this function's contract is `run_lines`'.
            return unsafe { self.run_lines(from, to, src, dst, nbytes, post) };
        }
        let channel = self.ch.id;
        let ninputs = from.len() + src.is_some() as usize;
        assert!(ninputs <= MAX_INPUTS, "a step reduces at most {MAX_INPUTS} inputs");
        // A plain receive into `dst` over a network that takes any memory lands there (no copy after): its steps
        // are planned ([`Prims::want_ahead`]) unless an earlier plan from the peer covers them already.
        if let (&[p], None, Some(d), false) = (from, src, dst, post) {
            let a = &self.ch.scratch.ahead;
            if a.peer != p || a.at == a.regions.len() {
                // SAFETY: `d` is valid for `nbytes` (this function's contract), and a plain receive's destination
                // is touched by nothing but its steps.
                unsafe { self.want_ahead(p, [], [(d, nbytes)]) };
            }
        }
        let mut off = 0;
        // Where `into` lies once the peer exposed its destination.
        let mut exposed = None;
        while off < nbytes {
            let len = self.piece.min(nbytes - off);
            // SAFETY: `off < nbytes`, for which `src` is valid.
            let (mut inputs, mut k) = unsafe { self.step_start(to, src, off) }?;
            for p in from {
                let end = self.ch.recv.get(p).expect("primitive on an unconnected peer");
                inputs[k] = read_simple(end, len, self.w, channel)?;
                k += 1;
            }
            if let (Some(o), None, &[peer]) = (into, exposed, to) {
                exposed = self.exposed_dst(peer).map(|d| d.at(o));
            }
            // The step is already where it belongs (the proxy received it there, or the sender wrote it there):
            // nothing to copy into the destination.
            let landed = match (from, src, dst) {
                (&[_], None, Some(d)) if !post && inputs[0] == d.wrapping_add(off).cast_const() => {
                    Some(d.wrapping_add(off))
                }
                _ => None,
            };
            let inputs = &inputs[..ninputs];
            // Which peers of `to` take the step without a slot.
            let mut sent_in_place = [false; MAX_OUTPUTS];
            // The step's bytes where they already lie in the user's buffers: in the destination once written
            // (a result is final there for the rest of the call), else in the source sent unchanged. A peer
            // thread (P2P read), a peer process through its mapping (SHM windows) or the proxy (NET) takes them
            // there instead of in a copy in its slot.
            let user = match dst {
                Some(d) => Some(d.wrapping_add(off).cast_const()),
                None if from.is_empty() && !post => src.map(|s| s.wrapping_add(off)),
                None => None,
            };
            // Whether each peer of `to` takes the step where it lies: decided once a step, as for SHM windows it
            // is a lookup.
            let mut direct = [false; MAX_OUTPUTS];
            for (d, p) in direct.iter_mut().zip(to) {
                *d = user.is_some_and(|u| self.send_end(*p).can_post_at(u, len));
            }
            // Outputs are the destination and each other peer's slot, written straight from the inputs.
            let mut outs = [std::ptr::null_mut::<u8>(); MAX_OUTPUTS];
            let mut n = 0;
            // The destination is written here unless the step already landed there.
            let dst_out = dst.filter(|_| landed.is_none()).map(|d| d.wrapping_add(off));
            if let Some(d) = dst_out {
                outs[0] = d;
                n = 1;
            }
            let into = exposed.map(|i| i.wrapping_add(off));
            for (k, p) in to.iter().enumerate() {
                let e = self.send_end(*p);
                let out = match into {
                    Some(i) => i,
                    None if direct[k] => continue,
                    None => e.mem.slot(Protocol::Simple, e.step),
                };
                assert!(n < MAX_OUTPUTS, "a step writes at most {MAX_OUTPUTS} outputs");
                outs[n] = out;
                n += 1;
            }
            // The destination (outs[0]) streams when no peer reads it in place, it is not an input (in place,
            // its lines were just read), and the value is a plain copy or has a slot of this rank's to be
            // computed in (not a peer's exposed destination, which may be an input too).
            let stream = self.stream_dst
                && dst_out.is_some()
                && into.is_none()
                && !direct.contains(&true)
                && outs[0].cast_const() != inputs[0]
                && (n > 1 || (ninputs == 1 && !post));
            // SAFETY: the inputs are `len` bytes of `src` and of the peers' steps; the outputs `len` bytes of
            // `dst`, of slots this rank has credit for, or of the exposed destination (this function's contract).
            unsafe { self.combine(inputs, &outs[..n], len, post, stream) };
            for (k, p) in to.iter().enumerate() {
                let e = self.ch.send.get_mut(p).expect("primitive on an unconnected peer");
                sent_in_place[k] = into.is_some() || direct[k];
                match (into, user.filter(|_| direct[k])) {
                    (Some(i), _) => e.post_written(i, len),
                    (None, Some(u)) => e.post_at(u, len),
                    // Computed in its slot above: posting it is all that is left.
                    (None, None) => e.post(Protocol::Simple, len),
                }
            }
            for p in from {
                self.want_planned(*p, true);
                let end = self.ch.recv.get_mut(p).expect("primitive on an unconnected peer");
                let in_place = end.in_place();
                end.release();
                self.count_moved(*p, false, len, in_place);
            }
            for (p, in_place) in to.iter().zip(sent_in_place) {
                self.count_moved(*p, true, len, in_place);
            }
            off += len;
        }
        Ok(())
    }

    /// The start of a step at `off`: credit from every peer of `to`, and the step's inputs so far, the local
    /// source's piece (if any) first, with their count.
    unsafe fn step_start(
        &self,
        to: &[u32],
        src: Option<*const u8>,
        off: usize,
    ) -> Result<([*const u8; MAX_INPUTS], usize)> {
        // SAFETY: `off` is within `src`, which is valid for the primitive's bytes (the caller's contract).
        unsafe {
            for p in to {
                wait_credit(self.send_end(*p), self.w, self.ch.id)?;
            }
            let mut inputs = [std::ptr::null::<u8>(); MAX_INPUTS];
            let k = match src {
                Some(s) => {
                    inputs[0] = s.add(off);
                    1
                }
                None => 0,
            };
            Ok((inputs, k))
        }
    }

    /// [`Prims::run`] for LL and LL128 (NCCL 2.28.9 `prims_ll.h`, `prims_ll128.h`): every step goes through the
    /// peers' slots, its lines formatted from one contiguous result, so none of Simple's in-place cases applies.
    unsafe fn run_lines(
        &mut self,
        from: &[u32],
        to: &[u32],
        src: Option<*const u8>,
        dst: Option<*mut u8>,
        nbytes: usize,
        post: bool,
    ) -> Result<()> {
        let (channel, proto) = (self.ch.id, self.proto);
        let ninputs = from.len() + src.is_some() as usize;
        assert!(ninputs <= MAX_INPUTS, "a step reduces at most {MAX_INPUTS} inputs");
        if self.ch.scratch.unpacked.len() < from.len() {
            self.ch.scratch.unpacked.resize_with(from.len(), Vec::new);
        }
        let mut off = 0;
        while off < nbytes {
            let len = self.piece.min(nbytes - off);
            // SAFETY: `off < nbytes`, for which `src` is valid.
            let (mut inputs, mut k) = unsafe { self.step_start(to, src, off) }?;
            // A step that is the destination's only input is unpacked there, not copied there after.
            let landed = match (from, src, dst) {
                (&[_], None, Some(d)) if !post => Some(d.wrapping_add(off)),
                _ => None,
            };
            for (i, p) in from.iter().enumerate() {
                let end = self.ch.recv.get(p).expect("primitive on an unconnected peer");
                let out = landed.map_or_else(|| Unpack::Scratch(&mut self.ch.scratch.unpacked[i]), Unpack::Into);
                // SAFETY: an `Unpack::Into` is `len` bytes of `dst` from `off`, which this function may write.
                inputs[k] = unsafe { read_lines(end, proto, len, out, self.w, channel) }?;
                k += 1;
            }
            let inputs = &inputs[..ninputs];
            let out: *const u8 = match (landed, dst) {
                (Some(d), _) => d,
                (None, None) if inputs.len() == 1 => inputs[0],
                (None, Some(d)) => {
                    // SAFETY: the inputs are `len` bytes of `src` and of the steps read; `dst` is valid from `off`.
                    unsafe { self.combine(inputs, &[d.wrapping_add(off)], len, post, false) };
                    d.wrapping_add(off)
                }
                (None, None) => {
                    let out = &mut self.ch.scratch.out;
                    out.resize(len.div_ceil(8), 0);
                    let target = out.as_mut_ptr() as *mut u8;
                    // SAFETY: as above, into the scratch just sized to `len`.
                    unsafe { self.combine(inputs, &[target], len, post, false) };
                    target
                }
            };
            for p in to {
                let end = self.ch.send.get_mut(p).expect("primitive on an unconnected peer");
                // SAFETY: `out` holds the step's `len` bytes, and `step_start` waited for credit.
                unsafe { write_step(end, proto, out, len) };
            }
            for p in from {
                self.ch.recv.get_mut(p).expect("primitive on an unconnected peer").release();
                self.count_moved(*p, false, len, false);
            }
            for p in to {
                self.count_moved(*p, true, len, false);
            }
            off += len;
        }
        Ok(())
    }

    /// Reduces `inputs` (or copies the single one) into `outs[0]`, dividing for Avg when `post`, and copies the
    /// result to the other outputs, a block at a time. With `stream`, `outs[0]` is instead written last, with
    /// streaming stores, from the result computed in `outs[1]` (or from the single input when it is a plain copy
    /// and there is no other output), and fenced before the step is posted.
    ///
    /// # Safety
    /// Inputs valid for `len` bytes, outputs writable for `len`; without `stream`, `outs[0]` may equal `inputs[0]`
    /// and another output may equal another input (each block of it is written once the block was read); nothing
    /// else overlaps.
    unsafe fn combine(&self, inputs: &[*const u8], outs: &[*mut u8], len: usize, post: bool, stream: bool) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        unsafe {
            let (target, copies, streamed) = match outs {
                [] => return,
                [d, rest @ ..] if stream => (rest.first().copied(), rest.get(1..).unwrap_or_default(), Some(*d)),
                [first, rest @ ..] => (Some(*first), rest, None),
            };
            let block = BLOCK_BYTES / self.dt.size() * self.dt.size();
            let last = inputs.len() - 1;
            let mut b = 0;
            while b < len {
                let n = block.min(len - b);
                let value = match target {
                    Some(t) => {
                        let target = t.add(b);
                        if last == 0 {
                            kern::copy(target, inputs[0].add(b), n);
                            if post {
                                kern::divide(self.dt, self.op, target, n, self.nranks);
                            }
                        }
                        for k in 1..=last {
                            let a = if k == 1 { inputs[0].add(b) } else { target as *const u8 };
                            let div = (post && k == last).then_some(self.nranks);
                            kern::reduce(self.dt, self.op, target, a, inputs[k].add(b), n, div);
                        }
                        target.cast_const()
                    }
                    None => {
                        debug_assert!(last == 0 && !post, "a streamed reduction needs an output to compute in");
                        inputs[0].add(b)
                    }
                };
                for o in copies {
                    kern::copy(o.add(b), value, n);
                }
                if let Some(d) = streamed {
                    kern::copy_streaming(d.add(b), value, n);
                }
                b += n;
            }
            if streamed.is_some() {
                kern::stream_fence();
            }
        }
    }

    /// OneShot's rows, `bytes` long, kept for the next call: a raw pointer, as the primitives that fill them
    /// borrow `self` mutably.
    pub(crate) fn rows(&mut self, bytes: usize) -> *mut u8 {
        let rows = &mut self.ch.scratch.rows;
        rows.resize(rows.len().max(bytes.div_ceil(8)), 0);
        rows.as_mut_ptr() as *mut u8
    }

    /// `dst = input(0) op input(1) op ... op input(n - 1)`, in that order (Avg divides once, at the last), with
    /// no peer involved: OneShot's local reduction.
    ///
    /// # Safety
    /// Every input valid for `len` bytes and aligned for the datatype; `dst` writable for `len` and, if it is one
    /// of the inputs, `input(0)`; `n >= 2`.
    pub(crate) unsafe fn reduce_local(&self, n: usize, input: impl Fn(usize) -> *const u8, dst: *mut u8, len: usize) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        unsafe {
            for k in 1..n {
                let a = if k == 1 { input(0) } else { dst.cast_const() };
                kern::reduce(self.dt, self.op, dst, a, input(k), len, (k == n - 1).then_some(self.nranks));
            }
        }
    }

    /// Ends the channel's share of a call, `r` its outcome: returns once nothing reads or writes the user's
    /// buffers any more (peer threads released the steps they read there, the network's sends from them
    /// completed, its receives into them arrived), so the caller may reuse them. After a failure the
    /// communicator is aborted and its proxy closes the connections still moving them; that is waited for too,
    /// within the timeout. A peer thread (or process, through windows) has no proxy to let go: its reads end with
    /// its own call, and the memory stays mapped for it (a window holds its segment).
    pub(crate) fn finish(&mut self, r: Result<()>) -> Result<()> {
        let (ch, w) = (&*self.ch, self.w);
        let r = r.and_then(|()| {
            self.wait_sent()?;
            for e in ch.recv.values() {
                let what = || format!("the network to finish receiving from rank {} on channel {}", e.peer, ch.id);
                w.wait_on(e.mem.tail_bell(), || e.unwant(), what)?;
            }
            Ok(())
        });
        if let Err(e) = &r {
            // A wait that ended on the abort adds no cause of its own.
            if !matches!(e, RuntimeError::Aborted { .. }) {
                w.abort.abort(format!("channel {} failed: {e}", ch.id));
            }
            let peer_reads = |e: &SendEnd| matches!(e.mem.direct(), Direct::P2pRead | Direct::ShmWindows);
            let idle = || ch.send.values().all(|e| peer_reads(e) || e.sent()) && ch.recv.values().all(RecvEnd::unwant);
            let start = std::time::Instant::now();
            while !idle() && start.elapsed() < w.timeout {
                ch.send.values().map(|e| &e.mem).chain(ch.recv.values().map(|e| &e.mem)).for_each(|m| m.wake_proxy());
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        r
    }

    /// Waits until peers have read every step this channel posted from the sender's own memory (P2P read, NET
    /// from the user's buffer), so that memory may change.
    pub(crate) fn wait_sent(&self) -> Result<()> {
        for e in self.ch.send.values() {
            let what =
                || format!("steps to rank {} to be read in this rank's buffer on channel {}", e.peer, self.ch.id);
            self.w.wait_on(e.mem.head_bell(), || e.sent(), what)?;
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
    pub(crate) unsafe fn send(&mut self, to: u32, src: *const u8, n: usize) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(&[], &[to], Some(src), None, n, false) }
    }

    /// Receives into `dst`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub(crate) unsafe fn recv(&mut self, from: u32, dst: *mut u8, n: usize) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(&[from], &[], None, Some(dst), n, false) }
    }

    /// Receives, reduces with `src`, sends on.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub(crate) unsafe fn recv_reduce_send(&mut self, from: u32, to: u32, src: *const u8, n: usize) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(&[from], &[to], Some(src), None, n, false) }
    }

    /// Receives from `from`, reduces with `src` into `dst` (dividing for Avg when `post`).
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub(crate) unsafe fn recv_reduce_copy(
        &mut self,
        from: &[u32],
        src: *const u8,
        dst: *mut u8,
        n: usize,
        post: bool,
    ) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(from, &[], Some(src), Some(dst), n, post) }
    }

    /// Receives, reduces with `src` into `dst` (the final reduction: Avg divides) and sends on: into the bytes at
    /// `into` of `to`'s destination, where it exposed that ([`Prims::expose_dst`]).
    ///
    /// # Safety
    /// As [`Prims::run_into`].
    pub(crate) unsafe fn recv_reduce_copy_send(
        &mut self,
        from: u32,
        to: u32,
        src: *const u8,
        dst: *mut u8,
        into: Option<usize>,
        n: usize,
    ) -> Result<()> {
        // SAFETY: this function's contract is `run_into`'s.
        unsafe { self.run_into(&[from], &[to], Some(src), Some(dst), into, n, true) }
    }

    /// Starts a call whose final bytes the ring predecessor may write straight into this rank's `dst` (`bytes`
    /// long) when it is a thread of this process (P2P), or a process that maps it (SHM windows): tells it where
    /// `dst` is for this call. Every rank of the ring calls it at the start of the same calls, so their counts
    /// name the call.
    pub(crate) fn expose_dst(&mut self, dst: Ptr, bytes: usize) {
        if self.count_only {
            return;
        }
        self.ch.scratch.calls += 1;
        if let Some(e) = self.ch.recv.get(&self.ch.ring_prev) {
            e.publish_dst(self.ch.scratch.calls, dst.0, bytes);
        }
    }

    /// The destination `peer` (the ring successor) exposed for this call ([`Prims::expose_dst`]), as this process
    /// reaches it, if the peer is a thread of this process or maps its windows and exposed it already.
    fn exposed_dst(&self, peer: u32) -> Option<Ptr> {
        self.send_end(peer).peer_dst(self.ch.scratch.calls).map(Ptr)
    }

    /// Receives into `dst` and forwards to `to`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub(crate) unsafe fn recv_copy_send(&mut self, from: u32, to: &[u32], dst: *mut u8, n: usize) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(&[from], to, None, Some(dst), n, false) }
    }

    /// Copies `src` to `dst` and sends it to `to`.
    ///
    /// # Safety
    /// As [`Prims::run`].
    pub(crate) unsafe fn copy_send(&mut self, to: &[u32], src: *const u8, dst: *mut u8, n: usize) -> Result<()> {
        // SAFETY: this function's contract is `run`'s.
        unsafe { self.run(&[], to, Some(src), Some(dst), n, false) }
    }
}
