//! The event state machine. Every event the plugin keeps is a preallocated object whose address is NCCL's handle;
//! objects go back to their pool when their event ends, so the hot path neither allocates nor locks.
//!
//! The hierarchy follows NCCL's (2.30.7 `src/plugin/profiler.cc`, `src/transport/net.cc`,
//! `src/transport/profiler.cc`): a call (Coll or P2p, a "task") is started and stopped on the thread that launches
//! it, and its stop only means NCCL has enqueued it. Its children, proxy operations (with their steps) and kernel
//! channels, run on the proxy progress thread and end later. A call holds one reference for its own stop and one
//! per running child; it completes when none is left and, when KernelCh events are on, when as many channels as
//! its descriptor's `nChannels` have run (NCCL starts one KernelCh per channel the call's work spans:
//! `src/enqueue.cc` "Update number of channels propagated to the profiler"). Without KernelCh events a call
//! completes when its stop and its running children are done, as NCCL's own example plugin does.
//!
//! A call's generation (how often its object was reused) rides in the low bits of its handle, so a child that
//! names a call whose object has since ended is told apart and counted, never attached to a newer call.

use crate::abi::{kind, state};
use crate::clock::{self, now_ns};
use crate::event::{ProxyOpStart, Start, TaskStart, Update};
use crate::pool::Pool;
use crate::record::{bump, Outbox, ProxyRec, Raw, TaskRec, RECV_GPU_WAIT, WAITS};
use collscope_model::{Algorithm, Collective, DataType, Protocol};
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};
use std::ptr::{addr_of, null_mut};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Arc;

/// NCCL's `MAXCHANNELS` (2.30.7 `src/include/device.h`).
pub(crate) const MAX_CHANNELS: usize = 64;
/// NCCL's `NCCL_STEPS`: NCCL keeps a proxy operation's step handles at `step % NCCL_STEPS`, so no more are live.
const NCCL_STEPS: usize = 8;

/// Event objects are 64-byte aligned, so a handle's low 6 bits are free for a call's generation.
const TAG: usize = 63;
/// A call's `word`: generation (bits 32..), kernel channels started (24..31, saturating), stopped (23),
/// references (0..22: the call's own stop, and each running child). One exchange changes all of them.
const REFS: u64 = (1 << 23) - 1;
const STOPPED: u64 = 1 << 23;
const KERNEL_ONE: u64 = 1 << 24;
const KERNELS_MAX: u64 = 0xff;
const NO_WAIT: u8 = u8::MAX;

const TASK: u8 = 1;
const PROXY: u8 = 2;
const STEP: u8 = 3;
const KERNEL: u8 = 4;
const CTRL: u8 = 5;

/// How many event objects and records one communicator keeps.
pub(crate) struct Sizes {
    pub tasks: usize,
    pub proxies: usize,
    pub kernels: usize,
    pub ctrls: usize,
    pub ring: usize,
}

/// Per communicator: 1024 calls and 2048 proxy operations in flight (64 channels x send/recv x a few calls),
/// one kernel object per channel of 16 calls, and 8192 records between drains (about 1 MiB).
pub(crate) const SIZES: Sizes = Sizes { tasks: 1024, proxies: 2048, kernels: 1024, ctrls: 16, ring: 8192 };
/// PXN operations this process's proxy runs for other processes.
pub(crate) const DETACHED: Sizes = Sizes { tasks: 0, proxies: 1024, kernels: 0, ctrls: 0, ring: 4096 };

/// What `init` said about the communicator.
pub(crate) struct CommInfo {
    /// The communicator's name (`commName`), else its hash in hex; shared by every call record.
    pub name: Arc<str>,
    /// Whether NCCL passed a name (`name` is not the hash).
    pub named: bool,
    pub comm_id: u64,
    pub rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub host: Option<String>,
    /// The NCCL release the process runs, when NCCL's library says (`ncclGetVersion`).
    pub version: Option<String>,
}

/// One communicator: the context `init` hands NCCL.
pub(crate) struct Context {
    pub comm: CommInfo,
    mask: u64,
    seq: AtomicU64,
    tasks: Pool<TaskSlot>,
    proxies: Pool<ProxySlot>,
    kernels: Pool<KernelSlot>,
    ctrls: Pool<CtrlSlot>,
    pub out: Outbox,
    channels: [ChannelTotal; MAX_CHANNELS],
    pub ctrl: CtrlTotals,
    finalized: AtomicBool,
    arrived: AtomicBool,
    departed: AtomicBool,
}

/// What is not any communicator's: the PXN operations of other processes.
pub(crate) struct Shared {
    proxies: Pool<ProxySlot>,
    pub out: Outbox,
}

#[derive(Default)]
struct ChannelTotal {
    calls: AtomicU64,
    gpu_ns: AtomicU64,
    /// `calls` when last drained.
    drained: AtomicU64,
}

/// The proxy thread's own time (ProxyCtrl events).
#[derive(Default)]
pub(crate) struct CtrlTotals {
    pub sleep_ns: AtomicU64,
    pub idle_ns: AtomicU64,
    pub active_ns: AtomicU64,
    pub append_ns: AtomicU64,
    pub appended: AtomicU64,
    mode: AtomicI32,
    mode_since: AtomicU64,
}

impl Context {
    pub(crate) fn new(comm: CommInfo, mask: u64, sizes: &Sizes) -> Arc<Context> {
        Arc::new_cyclic(|me| {
            let ctx: *const Context = me.as_ptr();
            // SAFETY: field addresses of the allocation being built; nothing is read through them before it is.
            let (proxies, out) = unsafe { (addr_of!((*ctx).proxies), addr_of!((*ctx).out)) };
            Context {
                comm,
                mask,
                seq: AtomicU64::new(0),
                tasks: Pool::new(sizes.tasks, |i| TaskSlot::new(i, ctx)),
                proxies: Pool::new(sizes.proxies, |i| ProxySlot::new(i, proxies, out)),
                kernels: Pool::new(sizes.kernels, |i| KernelSlot::new(i, ctx)),
                ctrls: Pool::new(sizes.ctrls, |i| CtrlSlot::new(i, ctx)),
                out: Outbox::new(sizes.ring),
                channels: std::array::from_fn(|_| ChannelTotal::default()),
                ctrl: CtrlTotals::default(),
                finalized: AtomicBool::new(false),
                arrived: AtomicBool::new(false),
                departed: AtomicBool::new(false),
            }
        })
    }

    /// NCCL is done with this communicator: no new events (events in flight still end).
    pub(crate) fn finalize(&self) {
        self.finalized.store(true, Release);
    }

    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Acquire)
    }

    /// Calls started and not yet complete.
    pub(crate) fn in_flight(&self) -> u64 {
        self.tasks.in_use() as u64
    }

    /// Calls started (each opened a call object; those not in flight have completed).
    pub(crate) fn started(&self) -> u64 {
        self.seq.load(Relaxed)
    }

    /// True once, for the first drain.
    pub(crate) fn take_arrival(&self) -> bool {
        !self.arrived.swap(true, AcqRel)
    }

    /// True once, after finalize, when the ring is empty.
    pub(crate) fn take_departure(&self) -> bool {
        self.finalized.load(Acquire) && self.out.is_empty() && !self.departed.swap(true, AcqRel)
    }

    pub(crate) fn departed(&self) -> bool {
        self.departed.load(Acquire)
    }

    /// A channel's totals (calls, GPU ns) if more calls ran on it since the last drain.
    pub(crate) fn channel_growth(&self, ch: usize) -> Option<(u64, u64)> {
        let t = &self.channels[ch];
        let calls = t.calls.load(Relaxed);
        (t.drained.swap(calls, Relaxed) != calls).then(|| (calls, t.gpu_ns.load(Relaxed)))
    }

    fn start_task(&self, t: TaskStart) -> *mut c_void {
        if self.finalized.load(Relaxed) {
            return null_mut();
        }
        let (Some(coll), Some(datatype)) = (t.coll, t.datatype) else {
            bump(&self.out.stats.unsupported);
            return null_mut();
        };
        let Some(slot) = self.tasks.take() else {
            bump(&self.out.stats.dropped_events);
            return null_mut();
        };
        let expect_kernels =
            if self.mask & kind::KERNEL_CH != 0 { u32::from(t.n_channels.unwrap_or(0)).max(1) } else { 0 };
        let info = TaskInfo {
            seq: self.seq.fetch_add(1, Relaxed) + 1,
            rank: t.rank,
            coll,
            datatype,
            count: t.count,
            root: t.root,
            peer: t.peer,
            algo: t.algo,
            proto: t.proto,
            n_channels: t.n_channels,
            expect_kernels,
            start_ns: now_ns(),
        };
        slot.open(info)
    }

    fn start_ctrl(&self) -> *mut c_void {
        if self.finalized.load(Relaxed) {
            return null_mut();
        }
        let Some(slot) = self.ctrls.take() else {
            bump(&self.out.stats.dropped_events);
            return null_mut();
        };
        slot.since.store(now_ns(), Relaxed);
        slot.live.store(true, Relaxed);
        handle(slot, 0)
    }
}

impl Shared {
    pub(crate) fn new(sizes: &Sizes) -> Arc<Shared> {
        Arc::new_cyclic(|me| {
            let shared: *const Shared = me.as_ptr();
            // SAFETY: as in Context::new.
            let (proxies, out) = unsafe { (addr_of!((*shared).proxies), addr_of!((*shared).out)) };
            Shared {
                proxies: Pool::new(sizes.proxies, |i| ProxySlot::new(i, proxies, out)),
                out: Outbox::new(sizes.ring),
            }
        })
    }
}

/// `startEvent`: the new event's handle, or NULL for an event the plugin does not keep or cannot hold.
///
/// # Safety
/// `context` is a context `init` returned, unless `d` is a proxy operation or step (whose `context` may belong to
/// another process under PXN and is not read); parents are handles this plugin returned, NULL, or (for a proxy
/// operation whose `pid` is not this process) never read.
pub(crate) unsafe fn start(shared: &Shared, context: *const Context, d: Start) -> *mut c_void {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        match d {
            Start::Task(t) => context.as_ref().map_or(null_mut(), |c| c.start_task(t)),
            Start::ProxyCtrl => context.as_ref().map_or(null_mut(), Context::start_ctrl),
            Start::ProxyOp(op) => start_proxy(shared, op),
            Start::ProxyStep { parent, step } => match slot_of::<ProxySlot>(parent, PROXY) {
                Some((op, _)) => op.start_step(step),
                None => null_mut(),
            },
            Start::KernelCh { parent, channel, p_timer } => start_kernel(parent, channel, p_timer),
            Start::Ignored => null_mut(),
        }
    }
}

/// `stopEvent`.
///
/// # Safety
/// `h` is NULL or a handle [`start`] returned whose context is alive.
pub(crate) unsafe fn stop(h: *mut c_void) {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    // `kind_of` names the object type a handle points to.
    unsafe {
        match kind_of(h) {
            Some(TASK) => obj::<TaskSlot>(h).stop(tag(h)),
            Some(PROXY) => obj::<ProxySlot>(h).stop(),
            Some(STEP) => obj::<StepSlot>(h).stop(),
            Some(KERNEL) => obj::<KernelSlot>(h).stop(),
            Some(CTRL) => obj::<CtrlSlot>(h).stop(),
            _ => {}
        }
    }
}

/// `recordEventState`. A proxy operation's InProgress state and the rest carry nothing the model keeps.
///
/// # Safety
/// As for [`stop`].
pub(crate) unsafe fn record(h: *mut c_void, st: i32, u: Update) {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    // `kind_of` names the object type a handle points to.
    unsafe {
        match kind_of(h) {
            Some(STEP) => obj::<StepSlot>(h).record(st, u),
            Some(KERNEL) if st == state::KERNEL_CH_STOP => obj::<KernelSlot>(h).p_stop.store(u.p_timer, Relaxed),
            Some(CTRL) => obj::<CtrlSlot>(h).record(st, u),
            _ => {}
        }
    }
}

fn handle<T>(slot: &T, tag: u64) -> *mut c_void {
    (slot as *const T as usize | (tag as usize & TAG)) as *mut c_void
}

fn tag(h: *mut c_void) -> u64 {
    (h as usize & TAG) as u64
}

/// The kind byte every event object starts with.
///
/// # Safety
/// `h` is NULL or a handle of this plugin.
unsafe fn kind_of(h: *mut c_void) -> Option<u8> {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. A
    // handle's object starts with its kind byte.
    unsafe {
        let addr = h as usize & !TAG;
        (addr != 0).then(|| *(addr as *const u8))
    }
}

/// The object behind `h`.
///
/// # Safety
/// `h` is a handle of this plugin to an object of type `T`.
unsafe fn obj<'a, T>(h: *mut c_void) -> &'a T {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe { &*((h as usize & !TAG) as *const T) }
}

/// The object of kind `k` behind `h`, and the tag in its low bits.
///
/// # Safety
/// As for [`kind_of`]; `T` is the object type of kind `k`.
unsafe fn slot_of<'a, T>(h: *mut c_void, k: u8) -> Option<(&'a T, u64)> {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. `obj`
    // is read only where the handle's kind is `k`.
    unsafe { (kind_of(h)? == k).then(|| (obj(h), tag(h))) }
}

/// What a call's descriptor says, fixed while the call is open.
#[derive(Clone, Copy)]
struct TaskInfo {
    seq: u64,
    rank: i32,
    coll: Collective,
    datatype: DataType,
    count: u64,
    root: Option<i32>,
    peer: Option<i32>,
    algo: Option<Algorithm>,
    proto: Option<Protocol>,
    n_channels: Option<u8>,
    /// KernelCh children to wait for (0: KernelCh events are off).
    expect_kernels: u32,
    start_ns: u64,
}

/// A call (Coll or P2p).
#[repr(C, align(64))]
struct TaskSlot {
    kind: u8,
    index: u32,
    ctx: *const Context,
    /// See [`REFS`].
    word: AtomicU64,
    /// Written by the starting thread before `word` is released; read after `word` is acquired, until the
    /// object is given back.
    info: UnsafeCell<Option<TaskInfo>>,
    first_child_ns: AtomicU64,
    gpu_start: AtomicU64,
    gpu_stop: AtomicU64,
}

/// A proxy operation: one channel, one peer, one direction.
#[repr(C, align(64))]
struct ProxySlot {
    kind: u8,
    index: u32,
    pool: *const Pool<ProxySlot>,
    out: *const Outbox,
    /// Between start and stop (a second stop must not give the object back twice).
    live: AtomicBool,
    /// The call's handle; 0 for a PXN operation of another process.
    parent: AtomicUsize,
    seq: AtomicU64,
    rank: AtomicI32,
    channel: AtomicU8,
    peer: AtomicI32,
    send: AtomicBool,
    n_steps: AtomicI32,
    posted: AtomicU32,
    transmitted: AtomicU32,
    done: AtomicU32,
    bytes: AtomicU64,
    waits: [AtomicU64; WAITS],
    first_step_ns: AtomicU64,
    last_step_ns: AtomicU64,
    steps: [StepSlot; NCCL_STEPS],
}

/// A proxy step: one network transfer of its operation, and the wait state it is in.
#[repr(C, align(64))]
struct StepSlot {
    kind: u8,
    /// Its place in its operation's `steps`.
    index: u8,
    busy: AtomicBool,
    wait: AtomicU8,
    since: AtomicU64,
}

/// A kernel channel: one channel's share of a call on the GPU.
#[repr(C, align(64))]
struct KernelSlot {
    kind: u8,
    index: u32,
    ctx: *const Context,
    parent: AtomicUsize,
    channel: AtomicU8,
    p_start: AtomicU64,
    p_stop: AtomicU64,
}

/// A proxy thread control event (sleep, append, idle/active).
#[repr(C, align(64))]
struct CtrlSlot {
    kind: u8,
    index: u32,
    ctx: *const Context,
    live: AtomicBool,
    since: AtomicU64,
}

const _: () = assert!(
    align_of::<TaskSlot>() > TAG
        && align_of::<ProxySlot>() > TAG
        && align_of::<StepSlot>() > TAG
        && align_of::<KernelSlot>() > TAG
        && align_of::<CtrlSlot>() > TAG
);

// SAFETY: the raw pointers point into the Arc that owns the object; the rest is atomics, and `info` follows the
// protocol on TaskSlot.
unsafe impl Send for TaskSlot {}
// SAFETY: as above.
unsafe impl Sync for TaskSlot {}
// SAFETY: as for TaskSlot: pointers into the owning Arc, and atomics.
unsafe impl Send for ProxySlot {}
// SAFETY: as for TaskSlot.
unsafe impl Sync for ProxySlot {}
// SAFETY: as for TaskSlot.
unsafe impl Send for KernelSlot {}
// SAFETY: as for TaskSlot.
unsafe impl Sync for KernelSlot {}
// SAFETY: as for TaskSlot.
unsafe impl Send for CtrlSlot {}
// SAFETY: as for TaskSlot.
unsafe impl Sync for CtrlSlot {}

impl TaskSlot {
    fn new(index: u32, ctx: *const Context) -> Self {
        TaskSlot {
            kind: TASK,
            index,
            ctx,
            word: AtomicU64::new(0),
            info: UnsafeCell::new(None),
            first_child_ns: AtomicU64::new(0),
            gpu_start: AtomicU64::new(0),
            gpu_stop: AtomicU64::new(0),
        }
    }

    fn ctx(&self) -> &Context {
        // SAFETY: the context owns this object.
        unsafe { &*self.ctx }
    }

    fn info(&self) -> TaskInfo {
        // SAFETY: read while the call is open (see `info`); `open` always sets it first.
        unsafe { (*self.info.get()).expect("an open call has its info") }
    }

    fn generation(w: u64) -> u64 {
        w >> 32
    }

    /// Opens a call on a free object; its handle.
    fn open(&self, info: TaskInfo) -> *mut c_void {
        let gen = Self::generation(self.word.load(Relaxed));
        // SAFETY: the object came from the pool, so no other thread uses it until `word` is released below.
        unsafe { *self.info.get() = Some(info) };
        self.first_child_ns.store(u64::MAX, Relaxed);
        self.gpu_start.store(u64::MAX, Relaxed);
        self.gpu_stop.store(0, Relaxed);
        self.word.store(gen << 32 | 1, Release);
        handle(self, gen)
    }

    /// A child takes a reference, unless the call behind its handle (`tag`) has ended: an ended call's
    /// generation has moved on. A stopped call awaiting its kernel channels (no reference left) still takes one.
    fn acquire(&self, tag: u64, kernel: bool) -> bool {
        let mut w = self.word.load(Acquire);
        loop {
            if Self::generation(w) & TAG as u64 != tag || w & REFS == REFS {
                return false;
            }
            let counted = if kernel && (w / KERNEL_ONE) & KERNELS_MAX < KERNELS_MAX { KERNEL_ONE } else { 0 };
            match self.word.compare_exchange_weak(w, w + 1 + counted, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Marks when the call began to run: its first child's start (the clock is read for that one only).
    fn child_started(&self) {
        if self.first_child_ns.load(Relaxed) == u64::MAX {
            self.first_child_ns.fetch_min(now_ns(), Relaxed);
        }
    }

    /// The call's stopEvent: NCCL has enqueued it. Its record is copied while its own reference still holds the
    /// call open; the ring keeps order, so the completion comes after it.
    fn stop(&self, tag: u64) {
        let w = self.word.load(Acquire);
        if Self::generation(w) & TAG as u64 != tag || w & STOPPED != 0 || w & REFS == 0 {
            bump(&self.ctx().out.stats.misuse);
            return;
        }
        self.ctx().out.emit(Raw::Enqueued(self.rec(0)));
        self.unref(STOPPED);
    }

    /// A child's end.
    fn release(&self) {
        self.unref(0);
    }

    /// Drops one reference, setting `flag` with it; the last one settles the call.
    fn unref(&self, flag: u64) {
        let mut w = self.word.load(Relaxed);
        loop {
            if w & REFS == 0 || w & flag != 0 {
                bump(&self.ctx().out.stats.misuse);
                return;
            }
            match self.word.compare_exchange_weak(w, (w | flag) - 1, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        let w = (w | flag) - 1;
        if w & REFS == 0 {
            self.settle(w);
        }
    }

    /// No reference is left: completes the call unless it still awaits kernel channels. Exactly one thread wins
    /// the exchange that ends the generation; a child that took a reference meanwhile settles it later.
    fn settle(&self, w: u64) {
        if (w / KERNEL_ONE) & KERNELS_MAX < u64::from(self.info().expect_kernels) {
            return;
        }
        if self.word.compare_exchange(w, (Self::generation(w) + 1) << 32, AcqRel, Relaxed).is_err() {
            return;
        }
        let ctx = self.ctx();
        ctx.out.emit(Raw::Completed(self.rec(now_ns())));
        ctx.tasks.give(self.index);
    }

    /// The call as a record; `completed_ns` 0 while it is only enqueued.
    fn rec(&self, completed_ns: u64) -> TaskRec {
        let i = self.info();
        let first = self.first_child_ns.load(Relaxed);
        let (g0, g1) = (self.gpu_start.load(Relaxed), self.gpu_stop.load(Relaxed));
        TaskRec {
            seq: i.seq,
            rank: i.rank,
            coll: i.coll,
            datatype: i.datatype,
            count: i.count,
            root: i.root,
            peer: i.peer,
            algo: i.algo,
            proto: i.proto,
            n_channels: i.n_channels,
            enqueued_ns: i.start_ns,
            started_ns: if first == u64::MAX { i.start_ns } else { first },
            completed_ns,
            gpu_ns: if g0 != u64::MAX && g0 > 0 && g1 > g0 { g1 - g0 } else { 0 },
        }
    }
}

/// The call behind a child's parent handle, with a reference taken; None (counted) when it cannot be had.
///
/// # Safety
/// `parent` is NULL or a handle of this process's plugin.
unsafe fn adopt<'a>(parent: *mut c_void, kernel: bool) -> Option<&'a TaskSlot> {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        let (task, tag) = slot_of::<TaskSlot>(parent, TASK)?;
        if task.acquire(tag, kernel) {
            Some(task)
        } else {
            bump(&task.ctx().out.stats.orphans);
            None
        }
    }
}

/// A proxy operation: this process's (its parent is a call here) or, by `pid`, another process's PXN operation,
/// whose parent and context pointers belong to that process and are never read.
///
/// # Safety
/// As for [`start`].
unsafe fn start_proxy(shared: &Shared, op: ProxyOpStart) -> *mut c_void {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        let (slot, parent, seq) = if op.pid != clock::pid() {
            let Some(slot) = shared.proxies.take() else {
                bump(&shared.out.stats.dropped_events);
                return null_mut();
            };
            (slot, None, 0)
        } else {
            let Some(task) = adopt(op.parent, false) else { return null_mut() };
            let Some(slot) = task.ctx().proxies.take() else {
                bump(&task.ctx().out.stats.dropped_events);
                task.release();
                return null_mut();
            };
            task.child_started();
            (slot, Some(task), task.info().seq)
        };
        slot.parent.store(parent.map_or(0, |t| handle(t, 0) as usize), Relaxed);
        slot.seq.store(seq, Relaxed);
        slot.rank.store(op.rank, Relaxed);
        slot.channel.store(op.channel, Relaxed);
        slot.peer.store(op.peer, Relaxed);
        slot.send.store(op.is_send, Relaxed);
        slot.n_steps.store(op.n_steps, Relaxed);
        for c in [&slot.posted, &slot.transmitted, &slot.done] {
            c.store(0, Relaxed);
        }
        slot.bytes.store(0, Relaxed);
        for w in &slot.waits {
            w.store(0, Relaxed);
        }
        slot.first_step_ns.store(0, Relaxed);
        slot.last_step_ns.store(0, Relaxed);
        for s in &slot.steps {
            s.busy.store(false, Relaxed);
        }
        slot.live.store(true, Relaxed);
        handle(slot, 0)
    }
}

impl ProxySlot {
    fn new(index: u32, pool: *const Pool<ProxySlot>, out: *const Outbox) -> Self {
        ProxySlot {
            kind: PROXY,
            index,
            pool,
            out,
            live: AtomicBool::new(false),
            parent: AtomicUsize::new(0),
            seq: AtomicU64::new(0),
            rank: AtomicI32::new(0),
            channel: AtomicU8::new(0),
            peer: AtomicI32::new(0),
            send: AtomicBool::new(false),
            n_steps: AtomicI32::new(0),
            posted: AtomicU32::new(0),
            transmitted: AtomicU32::new(0),
            done: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            waits: std::array::from_fn(|_| AtomicU64::new(0)),
            first_step_ns: AtomicU64::new(0),
            last_step_ns: AtomicU64::new(0),
            steps: std::array::from_fn(|i| StepSlot {
                kind: STEP,
                index: i as u8,
                busy: AtomicBool::new(false),
                wait: AtomicU8::new(NO_WAIT),
                since: AtomicU64::new(0),
            }),
        }
    }

    fn out(&self) -> &Outbox {
        // SAFETY: the outbox lives beside the pool that owns this object.
        unsafe { &*self.out }
    }

    fn start_step(&self, step: i32) -> *mut c_void {
        let s = &self.steps[step.rem_euclid(NCCL_STEPS as i32) as usize];
        if s.busy.load(Relaxed) {
            bump(&self.out().stats.dropped_events);
            return null_mut();
        }
        let now = now_ns();
        s.busy.store(true, Relaxed);
        s.wait.store(NO_WAIT, Relaxed);
        s.since.store(now, Relaxed);
        self.posted.store(self.posted.load(Relaxed) + 1, Relaxed);
        if self.first_step_ns.load(Relaxed) == 0 {
            self.first_step_ns.store(now, Relaxed);
        }
        handle(s, 0)
    }

    fn add_wait(&self, wait: u8, since: u64, now: u64) {
        if let Some(w) = self.waits.get(usize::from(wait)) {
            w.store(w.load(Relaxed) + now.saturating_sub(since), Relaxed);
        }
    }

    fn stop(&self) {
        let out = self.out();
        if !self.live.swap(false, Relaxed) {
            bump(&out.stats.misuse);
            return;
        }
        let w: [u64; WAITS] = std::array::from_fn(|i| self.waits[i].load(Relaxed));
        out.emit(Raw::Proxy(ProxyRec {
            seq: self.seq.load(Relaxed),
            rank: self.rank.load(Relaxed),
            channel: self.channel.load(Relaxed),
            peer: self.peer.load(Relaxed),
            send: self.send.load(Relaxed),
            n_steps: self.n_steps.load(Relaxed),
            posted: self.posted.load(Relaxed),
            transmitted: self.transmitted.load(Relaxed),
            done: self.done.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            waits_ns: w,
            first_step_ns: self.first_step_ns.load(Relaxed),
            last_step_ns: self.last_step_ns.load(Relaxed),
        }));
        bump(&out.stats.proxy_ops);
        out.stats.recv_gpu_wait_ns.fetch_add(w[RECV_GPU_WAIT], Relaxed);
        let parent = self.parent.swap(0, Relaxed);
        if parent != 0 {
            // SAFETY: the call's object; this operation holds a reference on it.
            unsafe { &*(parent as *const TaskSlot) }.release();
        }
        // SAFETY: the pool that owns this object.
        unsafe { &*self.pool }.give(self.index);
    }
}

impl StepSlot {
    fn op(&self) -> &ProxySlot {
        let first = self as *const StepSlot as usize - usize::from(self.index) * size_of::<StepSlot>();
        // SAFETY: steps live in their operation's `steps` array, at `index`.
        unsafe { &*((first - offset_of!(ProxySlot, steps)) as *const ProxySlot) }
    }

    /// NCCL's ProxyStep wait states in the order of a record's waits.
    fn wait_of(st: i32) -> Option<u8> {
        Some(match st {
            state::PROXY_STEP_SEND_GPU_WAIT => 0,
            state::PROXY_STEP_SEND_PEER_WAIT_V4 => 1,
            state::PROXY_STEP_SEND_WAIT => 2,
            state::PROXY_STEP_RECV_WAIT => 3,
            state::PROXY_STEP_RECV_FLUSH_WAIT => 4,
            state::PROXY_STEP_RECV_GPU_WAIT => RECV_GPU_WAIT as u8,
            _ => return None,
        })
    }

    fn record(&self, st: i32, u: Update) {
        let Some(wait) = Self::wait_of(st) else { return };
        let last = self.wait.load(Relaxed);
        // NCCL records SendPeerWait again each time the peer is not ready yet.
        if last == wait {
            return;
        }
        let op = self.op();
        let now = now_ns();
        op.add_wait(last, self.since.load(Relaxed), now);
        self.wait.store(wait, Relaxed);
        self.since.store(now, Relaxed);
        // The step's bytes are known once it is handed to the network (send) or has arrived (receive).
        if st == state::PROXY_STEP_SEND_WAIT || st == state::PROXY_STEP_RECV_FLUSH_WAIT {
            op.bytes.store(op.bytes.load(Relaxed) + u.trans_size, Relaxed);
            op.transmitted.store(op.transmitted.load(Relaxed) + 1, Relaxed);
        }
    }

    fn stop(&self) {
        if !self.busy.load(Relaxed) {
            bump(&self.op().out().stats.misuse);
            return;
        }
        let op = self.op();
        let now = now_ns();
        op.add_wait(self.wait.load(Relaxed), self.since.load(Relaxed), now);
        op.done.store(op.done.load(Relaxed) + 1, Relaxed);
        op.last_step_ns.store(now, Relaxed);
        self.busy.store(false, Relaxed);
    }
}

/// # Safety
/// `parent` is NULL or a handle of this plugin.
unsafe fn start_kernel(parent: *mut c_void, channel: u8, p_timer: u64) -> *mut c_void {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        // The channel counts towards its call's completion even when no object is left to time it.
        let Some(task) = adopt(parent, true) else { return null_mut() };
        let ctx = task.ctx();
        let Some(slot) = ctx.kernels.take() else {
            bump(&ctx.out.stats.dropped_events);
            task.release();
            return null_mut();
        };
        task.child_started();
        if p_timer > 0 && p_timer < task.gpu_start.load(Relaxed) {
            task.gpu_start.fetch_min(p_timer, Relaxed);
        }
        slot.parent.store(handle(task, 0) as usize, Relaxed);
        slot.channel.store(channel, Relaxed);
        slot.p_start.store(p_timer, Relaxed);
        slot.p_stop.store(0, Relaxed);
        handle(slot, 0)
    }
}

impl KernelSlot {
    fn new(index: u32, ctx: *const Context) -> Self {
        KernelSlot {
            kind: KERNEL,
            index,
            ctx,
            parent: AtomicUsize::new(0),
            channel: AtomicU8::new(0),
            p_start: AtomicU64::new(0),
            p_stop: AtomicU64::new(0),
        }
    }

    fn stop(&self) {
        // SAFETY: the context owns this object.
        let ctx = unsafe { &*self.ctx };
        let (p0, p1) = (self.p_start.load(Relaxed), self.p_stop.load(Relaxed));
        let parent = self.parent.swap(0, Relaxed);
        if parent == 0 {
            bump(&ctx.out.stats.misuse);
            return;
        }
        // SAFETY: the call's object; this channel holds a reference on it.
        let task = unsafe { &*(parent as *const TaskSlot) };
        if p0 > 0 && p1 > p0 {
            if let Some(t) = ctx.channels.get(usize::from(self.channel.load(Relaxed))) {
                t.gpu_ns.fetch_add(p1 - p0, Relaxed);
                t.calls.fetch_add(1, Relaxed);
            }
            if p1 > task.gpu_stop.load(Relaxed) {
                task.gpu_stop.fetch_max(p1, Relaxed);
            }
        }
        ctx.kernels.give(self.index);
        task.release();
    }
}

impl CtrlSlot {
    fn new(index: u32, ctx: *const Context) -> Self {
        CtrlSlot { kind: CTRL, index, ctx, live: AtomicBool::new(false), since: AtomicU64::new(0) }
    }

    fn record(&self, st: i32, u: Update) {
        // SAFETY: the context owns this object.
        let t = unsafe { &(*self.ctx).ctrl };
        let now = now_ns();
        let spent = now.saturating_sub(self.since.load(Relaxed));
        match st {
            state::PROXY_CTRL_SLEEP | state::PROXY_CTRL_APPEND => self.since.store(now, Relaxed),
            state::PROXY_CTRL_WAKEUP => {
                t.sleep_ns.fetch_add(spent, Relaxed);
            }
            state::PROXY_CTRL_APPEND_END => {
                t.append_ns.fetch_add(spent, Relaxed);
                t.appended.fetch_add(u64::try_from(u.appended).unwrap_or(0), Relaxed);
            }
            // NCCL records Idle when its progress loop goes idle and Active when work comes back.
            state::PROXY_CTRL_IDLE | state::PROXY_CTRL_ACTIVE => {
                let since = t.mode_since.swap(now, Relaxed);
                match t.mode.swap(st, Relaxed) {
                    state::PROXY_CTRL_IDLE => t.idle_ns.fetch_add(now.saturating_sub(since), Relaxed),
                    state::PROXY_CTRL_ACTIVE => t.active_ns.fetch_add(now.saturating_sub(since), Relaxed),
                    _ => 0,
                };
            }
            _ => {}
        }
    }

    fn stop(&self) {
        // SAFETY: the context owns this object.
        let ctx = unsafe { &*self.ctx };
        if self.live.swap(false, Relaxed) {
            ctx.ctrls.give(self.index);
        } else {
            bump(&ctx.out.stats.misuse);
        }
    }
}

#[cfg(test)]
mod tests;
