//! One direction of one channel-peer connection: NCCL_STEPS slots per protocol buffer plus the `head`
//! (receiver -> sender: steps consumed) and `tail` (sender -> receiver: steps posted) counters, each on its own
//! cache line (NCCL 2.28.9 `src/include/device.h` `ncclConnInfo`, `ncclSendMem`/`ncclRecvMem`).
//!
//! A [`ConnMem`] is one contiguous region, so the same layout lives in anonymous memory (P2P: both ranks are
//! threads of one process and hold the same `Arc`), in a POSIX shared memory segment (SHM: each process maps
//! it), or in two local regions bridged by a proxy thread (NET: the sender's proxy drains the sender's region,
//! the receiver's proxy fills the receiver's, see [`ConnMem::posted`] and [`ConnMem::deposit`]).

use super::window::ConnWindows;
use crate::error::{Result, RuntimeError};
use crate::sync::doorbell::Doorbell;
use crate::sync::wait::Bell;
use collscope_debug::env::{Env, EnvError};
use collscope_model::Protocol;
use memmap2::MmapMut;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// Slots per connection (NCCL 2.28.9 `NCCL_STEPS`).
pub const NCCL_STEPS: u64 = 8;
/// NCCL's default `NCCL_BUFFSIZE` (4 MiB, `src/include/device.h` `DEFAULT_BUFFSIZE`).
pub const DEFAULT_BUFFSIZE: usize = 1 << 22;
/// collscope's default `NCCL_BUFFSIZE` where a host runs two ranks or more per core and they reach each other
/// through host memory (P2P, SHM): steps of 128 KiB for ranks that take turns on one core, whose slots and
/// buffers then share its caches. A step reads two pieces and writes two; at 128 KiB the four fit beside the
/// core's other rank in a 1 MiB L2. Measured on 2 cores (1 MiB L2 each, 32 MiB L3), busbw, medians of paired
/// runs gated on the cross-core probe, 1 MiB against the 2 MiB this default was for two and three ranks a core
/// before ranks were pinned two a core:
/// - 4 rank processes (two a core, pinned, 14-24 pairs): AllReduce in place 1.14-1.25x at 512 KiB-4 MiB, out of
///   place 1.26-1.87x; AllGather in place 1.43-1.53x at 1-4 MiB; ReduceScatter 1.16-1.35x at 1-2 MiB. At the
///   other sizes 0.95-1.11x (ReduceScatter in place at 4-16 MiB 0.81-0.92x in a set of 13 pairs, 0.98-1.05x in
///   one of 24). 4 threads (P2P) alike (0.90-1.16x).
/// - 6 rank processes (three a core, unpinned, 11 pairs): 1.00-1.50x at every size from 256 KiB.
/// - 8 rank processes (four a core): 1 MiB against 2 MiB 1.23-1.65x from 4 MiB; 512 KiB against 1 MiB
///   0.72-1.04x; 8 threads (P2P) 1.0-1.14x.
/// - 2 rank processes (one a core) keep NCCL's 4 MiB: 1 MiB against it read out of place 1.14-1.70x at 256 KiB-4
///   MiB but in place 0.91-1.25x, with 16 MiB at 0.80x and 0.92x in two sets.
const CROWDED_BUFFSIZE: usize = 1 << 20;

/// collscope's default `NCCL_BUFFSIZE` for a host of `ranks_per_core` ranks a core over host memory, if it has one.
pub fn crowded_buffsize(ranks_per_core: usize) -> Option<usize> {
    (ranks_per_core >= 2).then_some(CROWDED_BUFFSIZE)
}

/// LL line: two 4-byte data words each followed by a 4-byte flag.
pub const LL_LINE: usize = 16;
/// NCCL's default LL buffer: `NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS * NCCL_STEPS` lines.
pub const DEFAULT_LL_BUFFSIZE: usize = 8 * 512 * NCCL_STEPS as usize * LL_LINE;
/// LL128 line: 120 data bytes and an 8-byte flag.
pub const LL128_LINE: usize = 128;
pub const LL128_DATA: usize = 120;
/// NCCL's default LL128 buffer: `NCCL_LL128_ELEMS_PER_THREAD * NCCL_LL128_MAX_NTHREADS * NCCL_STEPS` u64s.
pub const DEFAULT_LL128_BUFFSIZE: usize = 120 * 640 * NCCL_STEPS as usize * 8;

const CACHE_LINE: usize = 128;
const OFF_TAIL: usize = 0;
const OFF_HEAD: usize = CACHE_LINE;
const OFF_INFO: usize = 2 * CACHE_LINE;
/// Per-slot address of a step that is not in its slot (0: it is): on the send side the sender's own buffer the
/// reader takes it from, or the receiver's the sender wrote it into (through SHM windows, as an address in the
/// buffer owner's process, [`RECEIVERS`] marking the receiver's); on a NET receive side the user's buffer the
/// proxy received it into.
const OFF_DIRECT: usize = 3 * CACHE_LINE;
/// P2P and SHM through windows: the call number, destination buffer and its length the receiver published for
/// its sender to write into ([`RecvEnd::publish_dst`]).
const OFF_EXCHANGE: usize = 4 * CACHE_LINE;
/// Sleepers on a counter sit beside it: the waker reads them right after storing the counter.
const SLEEPERS: usize = 8;
/// Bytes before the first buffer: the counters, the per-slot info fifo, padding to a page.
const CTRL_BYTES: usize = 4096;

/// Per-protocol buffer sizes of a connection (`NCCL_BUFFSIZE`, `NCCL_LL_BUFFSIZE`, `NCCL_LL128_BUFFSIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufSizes {
    pub simple: usize,
    pub ll: usize,
    pub ll128: usize,
}

impl Default for BufSizes {
    fn default() -> Self {
        BufSizes { simple: DEFAULT_BUFFSIZE, ll: DEFAULT_LL_BUFFSIZE, ll128: DEFAULT_LL128_BUFFSIZE }
    }
}

impl BufSizes {
    pub fn from_env(env: &Env) -> Result<Self, EnvError> {
        let get = |name: &str, default: usize, unit: usize| -> Result<usize, EnvError> {
            let v = env.int(name, default as i64)?;
            let granule = unit * NCCL_STEPS as usize;
            if v <= 0 || !(v as usize).is_multiple_of(granule) || v > (1 << 31) {
                return Err(EnvError {
                    name: name.into(),
                    value: v.to_string(),
                    expected: format!("a positive multiple of {granule} bytes up to 2 GiB"),
                });
            }
            Ok(v as usize)
        };
        Ok(BufSizes {
            simple: get("NCCL_BUFFSIZE", DEFAULT_BUFFSIZE, 64)?,
            ll: get("NCCL_LL_BUFFSIZE", DEFAULT_LL_BUFFSIZE, LL_LINE)?,
            ll128: get("NCCL_LL128_BUFFSIZE", DEFAULT_LL128_BUFFSIZE, LL128_LINE)?,
        })
    }

    /// Bytes of one protocol's buffer.
    pub fn of(&self, proto: Protocol) -> usize {
        match proto {
            Protocol::Simple => self.simple,
            Protocol::Ll => self.ll,
            Protocol::Ll128 => self.ll128,
        }
    }

    /// Payload bytes one step of `proto` carries.
    pub fn step_payload(&self, proto: Protocol) -> usize {
        let slot = self.of(proto) / NCCL_STEPS as usize;
        match proto {
            Protocol::Simple => slot,
            Protocol::Ll => slot / LL_LINE * 8,
            Protocol::Ll128 => slot / LL128_LINE * LL128_DATA,
        }
    }

    /// Size of the whole region a connection needs.
    pub fn region_bytes(&self) -> usize {
        CTRL_BYTES + self.simple + self.ll + self.ll128
    }

    fn offset(&self, proto: Protocol) -> usize {
        match proto {
            Protocol::Simple => CTRL_BYTES,
            Protocol::Ll => CTRL_BYTES + self.simple,
            Protocol::Ll128 => CTRL_BYTES + self.simple + self.ll,
        }
    }
}

/// The memory of one connection direction. Keeps its mapping (and whatever else owns it, such as a shared
/// memory segment's name) alive.
pub struct ConnMem {
    base: *mut u8,
    sizes: BufSizes,
    _map: MmapMut,
    _owner: Option<Box<dyn Send + Sync>>,
    /// NET: the proxy that bridges this region, rung whenever a counter moves.
    proxy_bell: OnceLock<Arc<Doorbell>>,
    /// Which steps may bypass the slots, and the state of those that do.
    direct: DirectSteps,
    /// SHM: the registered buffers of both processes ([`Direct::ShmWindows`]).
    windows: OnceLock<ConnWindows>,
}

/// Which Simple steps of a connection may bypass its slots, their bytes read or written where the user's buffers
/// hold them. Either way a step posted from the sender's buffer is one address word ([`SendEnd::post_at`]); who
/// reads it there differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// Every step goes through a slot (SHM across processes, a network that needs registered memory).
    Off,
    /// Both sides are threads of one process: the receiving thread reads a step in the sender's buffer (NCCL
    /// 2.28.9 `src/transport/p2p.cc`, P2P read).
    P2pRead,
    /// NET whose network takes any memory of the process (NET/Socket): the proxy sends from and receives into the
    /// user's buffers (NCCL 2.28.9's registered-buffer path, `src/transport/net.cc` `regSendProxy`/
    /// `regRecvProxy`). The proxy is a thread of the rank, so the rank's addresses mean the same to both.
    NetAnyMemory,
    /// SHM between processes whose buffers are registered windows ([`super::window`]): as P2P read (and direct
    /// write), for the steps whose bytes lie in a window; each side finds the other's addresses in its mapping.
    ShmWindows,
}

/// Marks a direct word posted as the receiver's own address (a step written into its window), not the sender's.
const RECEIVERS: u64 = 1 << 63;

#[derive(Default)]
struct DirectSteps {
    /// The [`Direct`] allowed, as its index; set before the first step (NET: when its proxy takes the region).
    kind: AtomicU8,
    /// Send side: steps up to here were posted from the user's buffer; the call returns once `head` reaches it.
    until: AtomicU64,
    /// Receive side, by slot: the steps the rank wants landed in its buffer, posted ahead so the proxy finds
    /// them when the step's header arrives.
    wants: [Want; NCCL_STEPS as usize],
    /// NET: the proxy let go of the region (its connection closed or failed): no transfer touches user memory
    /// any more.
    closed: AtomicBool,
}

#[derive(Default)]
struct Want {
    /// `step + 1` of the wanted step; [`TAKEN`] is set once the proxy receives it at `addr`.
    step: AtomicU64,
    addr: AtomicU64,
    /// Room at `addr`: a longer step (ranks that disagree on sizes) goes to the slot, where it is refused.
    len: AtomicU64,
}

/// Marks a wanted step the proxy took (its body is being received into the user's buffer).
const TAKEN: u64 = 1 << 63;

// SAFETY: the region is only accessed through atomics (counters, LL/LL128 flags) or through slots whose
// ownership the head/tail protocol hands from one side to the other.
unsafe impl Send for ConnMem {}
// SAFETY: as for `Send`: shared access goes through atomics or the slots the head/tail protocol hands over.
unsafe impl Sync for ConnMem {}

impl ConnMem {
    /// Zeroed private memory (pages are committed only when touched).
    pub fn anonymous(sizes: BufSizes) -> Result<Self> {
        let map = MmapMut::map_anon(sizes.region_bytes()).map_err(|source| RuntimeError::TransportIo {
            transport: "P2P",
            what: "mmap failed",
            source,
        })?;
        Ok(Self::from_map(map, sizes, None))
    }

    /// A region over an existing mapping of at least `sizes.region_bytes()` zeroed bytes.
    pub fn from_map(mut map: MmapMut, sizes: BufSizes, owner: Option<Box<dyn Send + Sync>>) -> Self {
        assert!(map.len() >= sizes.region_bytes(), "connection mapping smaller than its layout");
        ConnMem {
            base: map.as_mut_ptr(),
            sizes,
            _map: map,
            _owner: owner,
            proxy_bell: OnceLock::new(),
            direct: DirectSteps::default(),
            windows: OnceLock::new(),
        }
    }

    pub fn sizes(&self) -> BufSizes {
        self.sizes
    }

    fn counter(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is inside the control block and 8-byte aligned; the mapping is page aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Steps the sender has posted.
    pub fn tail(&self) -> &AtomicU64 {
        self.counter(OFF_TAIL)
    }

    /// Steps the receiver has consumed.
    pub fn head(&self) -> &AtomicU64 {
        self.counter(OFF_HEAD)
    }

    fn sleepers(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as `counter`; 4-byte aligned, after the 8-byte counter on the same line.
        unsafe { &*(self.base.add(off + SLEEPERS) as *const AtomicU32) }
    }

    /// What a receiver sleeps on while waiting for data: `tail`.
    pub fn tail_bell(&self) -> Bell<'_> {
        Bell { word: self.tail(), sleepers: self.sleepers(OFF_TAIL) }
    }

    /// What a sender sleeps on while waiting for credit: `head`.
    pub fn head_bell(&self) -> Bell<'_> {
        Bell { word: self.head(), sleepers: self.sleepers(OFF_HEAD) }
    }

    /// Publishes `tail = steps` and wakes a receiver (or the proxy) sleeping on it.
    pub fn publish_tail(&self, steps: u64) {
        self.tail().store(steps, Ordering::Release);
        self.tail_bell().ring();
        self.ring_proxy();
    }

    /// Publishes `head = steps` and wakes a sender (or the proxy) sleeping on it.
    pub fn publish_head(&self, steps: u64) {
        self.head().store(steps, Ordering::Release);
        self.head_bell().ring();
        self.ring_proxy();
    }

    /// Has every counter update also ring `bell` (a NET connection's proxy).
    pub fn ring_on_update(&self, bell: Arc<Doorbell>) {
        let _ = self.proxy_bell.set(bell);
    }

    fn ring_proxy(&self) {
        if let Some(b) = self.proxy_bell.get() {
            b.ring();
        }
    }

    /// Per-slot info the sender writes before bumping `tail`: protocol id in the top byte, bytes in the rest.
    fn info(&self, step: u64) -> &AtomicU64 {
        self.counter(OFF_INFO + 8 * (step % NCCL_STEPS) as usize)
    }

    /// Start of `proto`'s slot for `step`.
    pub fn slot(&self, proto: Protocol, step: u64) -> *mut u8 {
        let slot_bytes = self.sizes.of(proto) / NCCL_STEPS as usize;
        // SAFETY: in bounds by construction of the layout.
        unsafe { self.base.add(self.sizes.offset(proto) + slot_bytes * (step % NCCL_STEPS) as usize) }
    }

    fn direct_word(&self, step: u64) -> &AtomicU64 {
        self.counter(OFF_DIRECT + 8 * (step % NCCL_STEPS) as usize)
    }

    /// The receiver's published (call number, destination address, destination bytes).
    fn exchange(&self) -> (&AtomicU64, &AtomicU64, &AtomicU64) {
        (self.counter(OFF_EXCHANGE), self.counter(OFF_EXCHANGE + 8), self.counter(OFF_EXCHANGE + 16))
    }

    /// Records what slot `step` holds; the sender calls this before publishing `tail = step + 1`.
    pub fn set_info(&self, step: u64, proto: Protocol, bytes: usize) {
        self.info(step).store(((proto.id() as u64) << 56) | bytes as u64, Ordering::Relaxed);
    }

    /// What the sender recorded for `step` (protocol and slot bytes); meaningful once `tail > step`.
    pub fn step_info(&self, step: u64) -> (Option<Protocol>, usize) {
        let info = self.info(step).load(Ordering::Relaxed);
        (Protocol::from_id((info >> 56) as usize), (info & ((1 << 56) - 1)) as usize)
    }

    /// Lets Simple steps bypass the slots as `kind` says; before the first step.
    pub fn allow_direct(&self, kind: Direct) {
        self.direct.kind.store(kind as u8, Ordering::Release);
    }

    /// Which steps may bypass the slots.
    pub fn direct(&self) -> Direct {
        match self.direct.kind.load(Ordering::Acquire) {
            k if k == Direct::P2pRead as u8 => Direct::P2pRead,
            k if k == Direct::NetAnyMemory as u8 => Direct::NetAnyMemory,
            k if k == Direct::ShmWindows as u8 => Direct::ShmWindows,
            _ => Direct::Off,
        }
    }

    /// SHM: hands the connection the windows it translates through; they take effect once
    /// [`Direct::ShmWindows`] is allowed (both sides at once: when the ranks register their first buffers).
    pub fn attach_windows(&self, windows: ConnWindows) {
        let _ = self.windows.set(windows);
    }

    /// The windows attached ([`ConnMem::attach_windows`]), if any.
    pub fn windows(&self) -> Option<&ConnWindows> {
        self.windows.get()
    }

    /// The windows in effect: attached and allowed.
    fn in_windows(&self) -> Option<&ConnWindows> {
        self.windows.get().filter(|_| self.direct() == Direct::ShmWindows)
    }

    /// Whether the `len` bytes at `at`, in this process's buffers, lie in one of its windows in effect.
    fn in_own_window(&self, at: *const u8, len: usize) -> bool {
        self.in_windows().is_some_and(|w| w.own.owners(at, len as u64).is_some())
    }

    /// The proxy let go of the region: it will not read or write the user's buffers any more.
    pub fn close_direct(&self) {
        self.direct.closed.store(true, Ordering::Release);
        self.ring_proxy();
        self.head_bell().ring();
        self.tail_bell().ring();
    }

    /// Rings the proxy that bridges the region (a rank waiting for it to let go of the user's buffers).
    pub fn wake_proxy(&self) {
        self.ring_proxy();
    }

    fn closed(&self) -> bool {
        self.direct.closed.load(Ordering::Acquire)
    }

    /// For a NET sender's proxy: the protocol and raw bytes (lines included for LL/LL128) of `step` once the
    /// sender posted it (`tail > step`), `None` before: in the slot, or in the user's buffer for a direct step.
    pub fn posted(&self, step: u64) -> Option<(Protocol, &[u8])> {
        if self.tail().load(Ordering::Acquire) <= step {
            return None;
        }
        let (proto, len) = self.step_info(step);
        let proto = proto?;
        let at = match self.direct_word(step).load(Ordering::Relaxed) {
            0 => self.slot(proto, step),
            a => a as *mut u8,
        };
        // SAFETY: the sender will not touch the slot (or its buffer) until `head` passes `step`.
        Some((proto, unsafe { std::slice::from_raw_parts(at, len) }))
    }

    /// For a NET receiver's proxy: where the rank wants `step` (Simple, `bytes` long) landed, claimed for the
    /// proxy, or `None` (into the slot). The rank waits for the step before it touches that memory.
    pub fn take_want(&self, step: u64, bytes: usize) -> Option<*mut u8> {
        let w = &self.direct.wants[(step % NCCL_STEPS) as usize];
        if self.direct() != Direct::NetAnyMemory || w.step.load(Ordering::Acquire) != step + 1 {
            return None;
        }
        let at = w.addr.load(Ordering::Relaxed) as *mut u8;
        if bytes as u64 > w.len.load(Ordering::Relaxed) {
            return None;
        }
        w.step.compare_exchange(step + 1, TAKEN | (step + 1), Ordering::AcqRel, Ordering::Relaxed).ok()?;
        Some(at)
    }

    /// For a NET receiver's proxy: publishes a Simple step of `bytes` received at `at` (`None`: in the slot).
    pub fn landed(&self, step: u64, bytes: usize, at: Option<*mut u8>) {
        self.direct_word(step).store(at.map_or(0, |a| a as u64), Ordering::Relaxed);
        self.set_info(step, Protocol::Simple, bytes);
        self.publish_tail(step + 1);
    }

    /// For a NET receiver's proxy: writes slot bytes received from the network into `step` and publishes it.
    /// LL and LL128 flags are stored atomically after their data, so the receiving rank never sees a torn line.
    /// The caller must have waited for credit (`head + NCCL_STEPS > step`).
    pub fn deposit(&self, step: u64, proto: Protocol, bytes: &[u8]) {
        let dst = self.slot(proto, step);
        match proto {
            // SAFETY: `bytes` is one step for this slot and no longer than it (the NET proxy's staging area is one
            // slot), and the credit the caller waited for keeps the receiver off it until `publish_tail`.
            Protocol::Simple => unsafe { collscope_kernels::bytes::copy(dst, bytes.as_ptr(), bytes.len()) },
            Protocol::Ll => {
                for (i, w) in bytes.chunks_exact(8).enumerate() {
                    let v = u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]));
                    // SAFETY: 8-byte aligned words inside the slot.
                    unsafe { (*(dst.add(8 * i) as *const AtomicU64)).store(v, Ordering::Release) };
                }
            }
            Protocol::Ll128 => {
                for (i, line) in bytes.chunks_exact(LL128_LINE).enumerate() {
                    // SAFETY: each line of `bytes` is one LL128 line of the slot, 8-byte aligned for its flag; the
                    // credit the caller waited for keeps the receiver off it.
                    unsafe {
                        let l = dst.add(i * LL128_LINE);
                        std::ptr::copy_nonoverlapping(line.as_ptr(), l, LL128_DATA);
                        let flag = u64::from_ne_bytes(line[LL128_DATA..].try_into().unwrap_or([0; 8]));
                        (*(l.add(LL128_DATA) as *const AtomicU64)).store(flag, Ordering::Release);
                    }
                }
            }
        }
        self.set_info(step, proto, bytes.len());
        self.publish_tail(step + 1);
    }
}

/// The sending side of a connection as a rank's primitives use it.
pub struct SendEnd {
    pub mem: Arc<ConnMem>,
    pub peer: u32,
    /// Next step to post; persists across operations, like NCCL's `conn->step`.
    pub step: u64,
    /// Steps below this have credit, as of the last read of `head` (NCCL 2.28.9 `src/device/prims_ll.h`,
    /// `sendConnHeadCache`): `head` is read again only when this runs out, not at every step, as the receiver
    /// writes it at every step and each read would wait for that line to come over from the receiver's core.
    /// Atomic only to keep the end shareable; one thread uses it.
    credit: AtomicU64,
}

/// The receiving side of a connection.
pub struct RecvEnd {
    pub mem: Arc<ConnMem>,
    pub peer: u32,
    /// Next step to consume.
    pub step: u64,
}

impl SendEnd {
    pub fn new(mem: Arc<ConnMem>, peer: u32) -> Self {
        SendEnd { mem, peer, step: 0, credit: AtomicU64::new(0) }
    }

    /// Whether the slot of the current step is free (the receiver consumed the step `NCCL_STEPS` earlier).
    pub fn has_credit(&self) -> bool {
        if self.step < self.credit.load(Ordering::Relaxed) {
            return true;
        }
        let credit = self.mem.head().load(Ordering::Acquire) + NCCL_STEPS;
        self.credit.store(credit, Ordering::Relaxed);
        self.step < credit
    }

    /// Publishes the current step and moves to the next.
    pub fn post(&mut self, proto: Protocol, slot_bytes: usize) {
        if self.mem.direct() != Direct::Off {
            self.mem.direct_word(self.step).store(0, Ordering::Relaxed);
        }
        self.advance(proto, slot_bytes);
    }

    /// Whether the `len` bytes at `src`, in this rank's buffers, may be posted where they lie
    /// ([`SendEnd::post_at`]): any memory for P2P and NET/Socket, a registered window's for SHM.
    pub fn can_post_at(&self, src: *const u8, len: usize) -> bool {
        match self.mem.direct() {
            Direct::Off => false,
            Direct::P2pRead | Direct::NetAnyMemory => true,
            Direct::ShmWindows => self.mem.in_own_window(src, len),
        }
    }

    /// Posts the current step (Simple) as the `len` bytes at `src`, in the sender's own buffer, and moves to the
    /// next: the reader takes them there (the peer thread for [`Direct::P2pRead`] and [`Direct::ShmWindows`],
    /// the proxy for [`Direct::NetAnyMemory`]). Only where [`SendEnd::can_post_at`]; credit must be held; the
    /// caller keeps them unchanged until [`SendEnd::sent`].
    pub fn post_at(&mut self, src: *const u8, len: usize) {
        debug_assert!(self.can_post_at(src, len), "a step from memory the reader cannot see");
        self.mem.direct.until.store(self.step + 1, Ordering::Relaxed);
        self.post_outside(src as u64, len);
    }

    /// Posts the current step (Simple) as the `len` bytes this sender wrote at `at`, in the receiver's buffer where
    /// [`SendEnd::peer_dst`] said, and moves to the next: the receiver finds them in place and copies nothing.
    pub fn post_written(&mut self, at: *const u8, len: usize) {
        let word = match self.mem.in_windows() {
            // The receiver's own address of the bytes, so it needs no window of its own to find them.
            Some(w) => w.peer.owners(at, len as u64).map(|a| a | RECEIVERS),
            None => (self.mem.direct() == Direct::P2pRead).then_some(at as u64),
        };
        debug_assert!(word.is_some(), "a write into the peer's buffer on a connection without");
        self.post_outside(word.unwrap_or(at as u64), len);
    }

    /// Posts the current step as `len` bytes at the address `word` names, outside its slot.
    fn post_outside(&mut self, word: u64, len: usize) {
        self.mem.direct_word(self.step).store(word, Ordering::Relaxed);
        self.advance(Protocol::Simple, len);
    }

    /// Records what the current step holds, publishes it and moves to the next.
    fn advance(&mut self, proto: Protocol, bytes: usize) {
        self.mem.set_info(self.step, proto, bytes);
        self.mem.publish_tail(self.step + 1);
        self.step += 1;
    }

    /// The destination buffer the receiver published for its call number `call` ([`RecvEnd::publish_dst`]), if it
    /// did already, as this process reaches it: a P2P sender (or an SHM one through windows) may write the
    /// receiver's final bytes straight there.
    pub fn peer_dst(&self, call: u64) -> Option<*mut u8> {
        let (seq, addr, len) = self.mem.exchange();
        let direct = self.mem.direct();
        if !matches!(direct, Direct::P2pRead | Direct::ShmWindows) || seq.load(Ordering::Acquire) != call {
            return None;
        }
        let (addr, len) = (addr.load(Ordering::Relaxed), len.load(Ordering::Relaxed));
        match self.mem.in_windows() {
            Some(w) => w.peer.here(addr, len),
            None => Some(addr as *mut u8),
        }
    }

    /// Whether every step posted from the user's buffer was read there (the receiver released it, `head`
    /// passed it), or the proxy let go of them.
    pub fn sent(&self) -> bool {
        self.mem.direct() == Direct::Off
            || self.mem.head().load(Ordering::Acquire) >= self.mem.direct.until.load(Ordering::Relaxed)
            || self.mem.closed()
    }
}

impl RecvEnd {
    /// Whether the sender posted the current step (Simple; LL/LL128 readers look at the flags instead).
    pub fn has_data(&self) -> bool {
        self.mem.tail().load(Ordering::Acquire) > self.step
    }

    /// Where the current step's `len` payload bytes are: the sender's buffer for a P2P read (through this
    /// process's mapping of it for SHM windows), the user's buffer a NET proxy received it into or the sender
    /// wrote it into, else its slot. Meaningful once the step is posted; `None` when the sender posted an
    /// address no window of its holds (ranks that registered different buffers).
    pub fn payload(&self, proto: Protocol, len: usize) -> Option<*const u8> {
        match (self.word(), self.mem.in_windows()) {
            (0, _) => Some(self.mem.slot(proto, self.step).cast_const()),
            (w, Some(_)) if w & RECEIVERS != 0 => Some((w & !RECEIVERS) as *const u8),
            (w, Some(windows)) => windows.peer.here(w, len as u64).map(<*mut u8>::cast_const),
            (w, None) => Some(w as *const u8),
        }
    }

    /// Whether the current step (once posted) lies outside its slot: where the sender had it, or where this rank
    /// wanted it (the sender wrote it there, or the proxy received it there).
    pub fn in_place(&self) -> bool {
        self.word() != 0
    }

    /// The current step's direct word: 0 while it lies in its slot.
    fn word(&self) -> u64 {
        match self.mem.direct() {
            Direct::Off => 0,
            _ => self.mem.direct_word(self.step).load(Ordering::Relaxed),
        }
    }

    /// Asks the proxy to land the step `ahead` steps after the current one (Simple, at most `len` bytes) at
    /// `dst` instead of the slot (the connection must allow [`Direct::NetAnyMemory`], `ahead < NCCL_STEPS`, or
    /// equal to it just before the current step is released); [`RecvEnd::payload`] tells whether it did.
    pub fn want(&self, ahead: u64, dst: *mut u8, len: usize) {
        let step = self.step + ahead;
        let w = &self.mem.direct.wants[(step % NCCL_STEPS) as usize];
        // Asked already (`Prims::want_ahead`), and perhaps taken: the proxy may be receiving it there now.
        if w.step.load(Ordering::Acquire) & !TAKEN == step + 1 {
            debug_assert_eq!(w.addr.load(Ordering::Relaxed), dst as u64, "step {step} wanted at two places");
            return;
        }
        w.addr.store(dst as u64, Ordering::Relaxed);
        w.len.store(len as u64, Ordering::Relaxed);
        w.step.store(step + 1, Ordering::Release);
    }

    /// Withdraws every [`RecvEnd::want`]: true once the proxy is sure not to write the user's buffers any more
    /// (it never took a want, the steps it took arrived, or the proxy let go of the connection).
    pub fn unwant(&self) -> bool {
        self.mem.direct() != Direct::NetAnyMemory
            || self.mem.direct.wants.iter().all(|want| {
                let mut w = want.step.load(Ordering::Acquire);
                while w & TAKEN == 0 {
                    match want.step.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return true,
                        Err(now) => w = now,
                    }
                }
                // Taken: the body of step `(w & !TAKEN) - 1` lands in the buffer; done once that step arrived.
                self.mem.tail().load(Ordering::Acquire) >= w & !TAKEN || self.mem.closed()
            })
    }

    /// Tells a P2P sender (or an SHM one, when `len` bytes at `dst` lie in a registered window) where this rank's
    /// destination buffer lies for its call number `call`, so the sender may write the call's final bytes there
    /// (NCCL 2.28.9 `src/device/prims_simple.h`, the receiver's buffer pointer passed through `ptrExchange` for
    /// direct writes). Before this rank's first step of the call: the sender learns of it through that step, and
    /// a sender that looks earlier finds the previous call's number.
    pub fn publish_dst(&self, call: u64, dst: *mut u8, len: usize) {
        let shared = match self.mem.direct() {
            Direct::P2pRead => true,
            Direct::ShmWindows => self.mem.in_own_window(dst, len),
            Direct::Off | Direct::NetAnyMemory => false,
        };
        if shared {
            let (seq, addr, bytes) = self.mem.exchange();
            addr.store(dst as u64, Ordering::Relaxed);
            bytes.store(len as u64, Ordering::Relaxed);
            seq.store(call, Ordering::Release);
        }
    }

    /// Hands the current slot back to the sender and moves to the next step.
    pub fn release(&mut self) {
        self.mem.publish_head(self.step + 1);
        self.step += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_counters_apart_and_sizes_from_env_are_checked() {
        let s = BufSizes::default();
        assert_eq!(s.step_payload(Protocol::Simple), 512 << 10);
        assert_eq!(s.step_payload(Protocol::Ll), 4096 * 8);
        assert_eq!(s.step_payload(Protocol::Ll128), 4800 * 120);
        let m = ConnMem::anonymous(BufSizes { simple: 4096, ll: 1024, ll128: 2048 }).unwrap();
        let (t, h) = (m.tail() as *const _ as usize, m.head() as *const _ as usize);
        assert!(h - t >= 64);
        let e = BufSizes::from_env(&Env::from_pairs([("NCCL_BUFFSIZE", "1000")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_BUFFSIZE='1000'") && e.contains("multiple of 512"), "{e}");
        assert_eq!(BufSizes::from_env(&Env::from_pairs([("NCCL_BUFFSIZE", "65536")])).unwrap().simple, 65536);
    }

    #[test]
    fn counter_updates_ring_the_proxy_that_bridges_the_region() {
        let m = ConnMem::anonymous(BufSizes { simple: 4096, ll: 1024, ll128: 2048 }).unwrap();
        let bell = Arc::new(Doorbell::new().unwrap());
        m.ring_on_update(bell.clone());
        for publish in [ConnMem::publish_tail, ConnMem::publish_head] {
            bell.arm();
            publish(&m, 1);
            let start = std::time::Instant::now();
            bell.sleep(&[], std::time::Duration::from_secs(20));
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "the update did not wake the proxy");
        }
    }

    #[test]
    fn a_p2p_sender_sees_the_receivers_destination_for_the_same_call_only() {
        let sizes = BufSizes { simple: 4096, ll: 1024, ll128: 2048 };
        let m = Arc::new(ConnMem::anonymous(sizes).unwrap());
        let (tx, rx) = (SendEnd::new(m.clone(), 1), RecvEnd { mem: m.clone(), peer: 0, step: 0 });
        let mut buf = [0u8; 64];
        // Not a P2P connection: nothing is published.
        rx.publish_dst(1, buf.as_mut_ptr(), 64);
        assert_eq!(tx.peer_dst(1), None);
        m.allow_direct(Direct::P2pRead);
        assert_eq!(tx.peer_dst(1), None, "before the receiver started the call");
        rx.publish_dst(1, buf.as_mut_ptr(), 64);
        assert_eq!(tx.peer_dst(1), Some(buf.as_mut_ptr()));
        assert_eq!(tx.peer_dst(2), None, "the receiver is still in the previous call");
    }

    #[test]
    fn posted_and_deposit_move_a_step_between_regions() {
        let sizes = BufSizes { simple: 4096, ll: 1024, ll128: 2048 };
        let (a, b) = (ConnMem::anonymous(sizes).unwrap(), ConnMem::anonymous(sizes).unwrap());
        assert!(a.posted(0).is_none());
        // SAFETY: slot 0 of `a`'s Simple buffer is 1024 bytes of its own mapping.
        unsafe { std::ptr::copy_nonoverlapping([1u8, 2, 3].as_ptr(), a.slot(Protocol::Simple, 0), 3) };
        a.set_info(0, Protocol::Simple, 3);
        a.tail().store(1, Ordering::Release);
        let (p, bytes) = a.posted(0).unwrap();
        assert_eq!((p, bytes), (Protocol::Simple, &[1u8, 2, 3][..]));
        b.deposit(0, p, bytes);
        assert_eq!(b.posted(0).unwrap().1, &[1, 2, 3]);
    }
}
