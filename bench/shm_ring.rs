//! The busbw a plain ring AllReduce over shared memory reaches on this host: N rank processes (forked), each with
//! its data in its own memory and a receive buffer of NCCL_STEPS (8) slots in one shared mapping. A round is
//! NCCL's ring: loops of N chunks, each loop the ring's 2(N-1) steps in slot-sized pieces written straight into
//! the successor's slot. The first step copies the rank's chunk out, the next N-2 add the received piece to the
//! rank's own and write the sum on, the last reduce-scatter step keeps the sum and passes it on, and the
//! AllGather's steps keep and pass on what arrives. The rest is set up as collscope sets up rank processes on
//! one host: the same cores (one each, two neighbours a core, or left to the scheduler past that), slot size
//! (NCCL_BUFFSIZE / 8: 128 KiB where ranks outnumber the cores) and waits (spin, yield, then sleep on a futex
//! the peer rings). No channels, proxy, plan or observation: what the ring's copies, additions and hand-offs
//! cost on these cores, to read collscope's SHM figures against, above all with more ranks than cores. Prints
//! an anchor-style table (size count type op time_us algbw busbw wrong) that bench/compare.py reads as it reads
//! Open MPI's.
//!
//!     cargo run --release --example shm_ring -- NRANKS MINBYTES MAXBYTES [ITERS]

mod sweep;

use collscope_debug::env::Env;
use collscope_kernels::{copy, reduce, reduce_in_place, Op};
use collscope_runtime::comm::affinity;
use collscope_runtime::profiler::now_ns;
use collscope_runtime::sync::wait::{patience_for, ranks_per_core, AbortHandle, Bell, Waiter};
use collscope_runtime::transport::conn::{crowded_buffsize, BufSizes, DEFAULT_BUFFSIZE, NCCL_STEPS};
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use sweep::{page_aligned, Sweep};

/// Slots a chunk spans (NCCL's `ALLREDUCE_CHUNKSTEPS`, `NCCL_STEPS / 2`).
const CHUNK_SLOTS: usize = NCCL_STEPS as usize / 2;
/// How long a rank waits for a peer before it gives up (the peer failed or stalled).
const STALL: Duration = Duration::from_secs(60);

/// A counter peers wait on, with the count of those asleep on it (collscope's [`Bell`]).
#[repr(C, align(64))]
#[derive(Default)]
struct Word {
    value: AtomicU64,
    sleepers: AtomicU32,
}

impl Word {
    fn bell(&self) -> Bell<'_> {
        Bell { word: &self.value, sleepers: &self.sleepers }
    }

    fn set(&self, v: u64) {
        self.value.store(v, Ordering::Release);
        self.bell().ring();
    }

    /// Waits as collscope's ranks do until `ok(value)`; an error after [`STALL`] without it.
    fn wait(&self, waiter: &Waiter, what: &str, ok: impl Fn(u64) -> bool) -> Result<(), String> {
        let ready = || ok(self.value.load(Ordering::Acquire));
        waiter.wait_on(self.bell(), ready, || what.to_string()).map_err(|e| format!("shm_ring: {e}"))
    }
}

/// One rank's words: the pieces written into its slots so far and the pieces it has taken out of them.
#[repr(C)]
#[derive(Default)]
struct Ctl {
    posted: Word,
    freed: Word,
}

/// What the ranks share: their words, a barrier, every round's start and end per rank, the wrong elements each
/// rank found, and the slots.
struct Shared {
    base: NonNull<u8>,
    len: usize,
    /// Bytes of a slot.
    slot: usize,
    n: usize,
    sizes: usize,
    rounds: usize,
}

impl Shared {
    const CTL: usize = std::mem::size_of::<Ctl>();

    /// For `n` ranks with slots of `slot` bytes, timing `rounds` rounds over `sizes` sizes.
    fn new(n: usize, slot: usize, sizes: usize, rounds: usize) -> Result<Shared, String> {
        let len = Self::slots_at(n, sizes, rounds) + n * NCCL_STEPS as usize * slot;
        let len_nz = NonZeroUsize::new(len).ok_or("shm_ring: nothing to map")?;
        use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
        let base =
            // SAFETY: a fresh anonymous mapping, shared with the ranks forked after it; zeroed, as every word starts.
            unsafe { mmap_anonymous(None, len_nz, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED) }
                .map_err(|e| format!("shm_ring: mmap of {len} bytes: {e}"))?;
        Ok(Shared { base: base.cast(), len, slot, n, sizes, rounds })
    }

    /// After the ranks' and the barrier's words, n x rounds (start, end) u64 pairs and n x sizes wrong counts;
    /// page aligned.
    fn slots_at(n: usize, sizes: usize, rounds: usize) -> usize {
        ((n + 1) * Self::CTL + n * rounds * 16 + n * sizes * 8).next_multiple_of(4096)
    }

    fn ctl(&self, r: usize) -> &Ctl {
        // SAFETY: inside the mapping, aligned (64-byte words from a page-aligned base), zero-initialised.
        unsafe { &*self.base.as_ptr().add(r * Self::CTL).cast::<Ctl>() }
    }

    fn barrier(&self) -> &Ctl {
        self.ctl(self.n)
    }

    fn clock(&self, r: usize, round: usize) -> &[AtomicU64; 2] {
        let at = (self.n + 1) * Self::CTL + (r * self.rounds + round) * 16;
        // SAFETY: inside the mapping, 8-byte aligned.
        unsafe { &*self.base.as_ptr().add(at).cast::<[AtomicU64; 2]>() }
    }

    /// The wrong elements rank `r` found at the `i`-th size.
    fn wrong(&self, r: usize, i: usize) -> &AtomicU64 {
        let at = (self.n + 1) * Self::CTL + self.n * self.rounds * 16 + (r * self.sizes + i) * 8;
        // SAFETY: inside the mapping, 8-byte aligned.
        unsafe { &*self.base.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// The floats a slot holds.
    fn slot_floats(&self) -> usize {
        self.slot / 4
    }

    /// Slot `i` (a piece's number, modulo the slots) of rank `r`'s receive buffer, `len` floats of it.
    #[allow(clippy::mut_from_ref)]
    fn slot(&self, r: usize, i: u64, len: usize) -> &mut [f32] {
        let i = (i % NCCL_STEPS) as usize;
        let at = Self::slots_at(self.n, self.sizes, self.rounds) + (r * NCCL_STEPS as usize + i) * self.slot;
        let len = len.min(self.slot_floats());
        // SAFETY: inside the mapping, page aligned; the ring's posted/freed words give one rank the slot at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(at).cast::<f32>(), len) }
    }

    /// A central barrier: the last rank to arrive resets the count (`posted`) and opens the next generation
    /// (`freed`), which the others wait for.
    fn wait_all(&self, waiter: &Waiter) -> Result<(), String> {
        let b = self.barrier();
        let generation = b.freed.value.load(Ordering::Acquire);
        if b.posted.value.fetch_add(1, Ordering::AcqRel) + 1 == self.n as u64 {
            b.posted.value.store(0, Ordering::Relaxed);
            b.freed.set(generation + 1);
            return Ok(());
        }
        b.freed.wait(waiter, "the other ranks at the barrier", |g| g != generation)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unused after this.
        let _ = unsafe { nix::sys::mman::munmap(self.base.cast(), self.len) };
    }
}

/// One rank's end of the ring: pieces it sent to its successor and took from its own slots.
struct Rank<'a> {
    sh: &'a Shared,
    waiter: Waiter,
    r: usize,
    next: usize,
    sent: u64,
    taken: u64,
}

impl Rank<'_> {
    /// The successor's next slot, once it has taken out what was there.
    #[allow(clippy::mut_from_ref)]
    fn out(&self, len: usize) -> Result<&mut [f32], String> {
        let sent = self.sent;
        self.sh.ctl(self.next).freed.wait(&self.waiter, "a free slot", |f| sent - f < NCCL_STEPS)?;
        Ok(self.sh.slot(self.next, sent, len))
    }

    fn post(&mut self) {
        self.sent += 1;
        self.sh.ctl(self.next).posted.set(self.sent);
    }

    /// The rank's next slot, once the predecessor has written it.
    fn inbox(&self, len: usize) -> Result<&[f32], String> {
        let taken = self.taken;
        self.sh.ctl(self.r).posted.wait(&self.waiter, "a piece from the predecessor", |p| p > taken)?;
        Ok(self.sh.slot(self.r, taken, len))
    }

    fn free(&mut self) {
        self.taken += 1;
        self.sh.ctl(self.r).freed.set(self.taken);
    }

    /// One ring AllReduce of `data` (sums), as NCCL's ring kernel moves it (2.28.9 `all_reduce.h` `runRing`): loop
    /// after loop over N chunks of up to [`CHUNK_SLOTS`] slots each, every loop the ring's 2(N-1) steps, so that a
    /// step never sends more than the successor's slots hold.
    fn all_reduce(&mut self, data: &mut [f32]) -> Result<(), String> {
        let (n, slot) = (self.sh.n, self.sh.slot_floats());
        let count = data.len();
        let mut base = 0;
        while base < count {
            let per = (CHUNK_SLOTS * slot).min((count - base).div_ceil(n));
            for s in 0..2 * n - 1 {
                // The chunk this rank sends at step s: its predecessor sent it one step before.
                let c = (self.r + 2 * n - s % n) % n;
                let (lo, hi) = ((base + c * per).min(count), (base + (c + 1) * per).min(count));
                for at in (lo..hi).step_by(slot) {
                    self.piece(s, &mut data[at..hi.min(at + slot)])?;
                }
            }
            base += n * per;
        }
        Ok(())
    }

    /// Step `s`'s work on one piece of the rank's data: copy it on, add the received piece to it and send the
    /// sum on, keep the last sum and send it on, or keep and forward the AllGather's pieces.
    fn piece(&mut self, s: usize, mine: &mut [f32]) -> Result<(), String> {
        let (n, len) = (self.sh.n, mine.len());
        match s {
            0 => copy(self.out(len)?, mine),
            _ if s < n - 1 => reduce(Op::Sum, self.out(len)?, self.inbox(len)?, mine),
            _ if s == n - 1 => {
                reduce_in_place(Op::Sum, mine, self.inbox(len)?);
                copy(self.out(len)?, mine);
            }
            _ if s < 2 * n - 2 => {
                copy(mine, self.inbox(len)?);
                copy(self.out(len)?, mine);
            }
            _ => copy(mine, self.inbox(len)?),
        }
        if s > 0 {
            self.free();
        }
        if s < 2 * n - 2 {
            self.post();
        }
        Ok(())
    }
}

/// Rank `r`'s rounds: a checked warm-up round at each size, then `iters` timed ones.
fn rank_main(sh: &Shared, waiter: Waiter, r: usize, sizes: &[usize], iters: usize) -> Result<(), String> {
    let n = sh.n;
    let mut rank = Rank { sh, waiter, r, next: (r + 1) % n, sent: 0, taken: 0 };
    let mut store = Vec::new();
    let data = page_aligned(&mut store, sizes.iter().max().copied().unwrap_or(0) / 4, 0.0);
    let mut round = 0;
    for (which, &size) in sizes.iter().enumerate() {
        let data = &mut data[..size / 4];
        for (i, v) in data.iter_mut().enumerate() {
            *v = (r + 1 + i % 7) as f32;
        }
        for k in 0..=iters {
            sh.wait_all(&rank.waiter)?;
            let t0 = now_ns();
            rank.all_reduce(data)?;
            let clock = sh.clock(r, round);
            clock[0].store(t0, Ordering::Relaxed);
            clock[1].store(now_ns(), Ordering::Relaxed);
            round += 1;
            if k == 0 {
                // Every rank's value summed: n(n+1)/2 + n (i mod 7), exact in f32 for any NRANKS allowed.
                let want = |i: usize| (n * (n + 1) / 2 + n * (i % 7)) as f32;
                let bad = data.iter().enumerate().filter(|&(i, &v)| v != want(i)).count();
                sh.wrong(r, which).store(bad as u64, Ordering::Relaxed);
                // Zeros stay zeros, so the timed rounds' sums neither grow nor overflow.
                data.fill(0.0);
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: shm_ring NRANKS MINBYTES MAXBYTES [ITERS]";
    let sweep = Sweep::parse("shm_ring", usage, &args, Some(1024))?;
    let (n, iters, sizes) = (sweep.nranks, sweep.iters, &sweep.sizes);
    // As collscope sets its rank processes up on one host, so that only the runtime differs: the same cores
    // (COLLSCOPE_BIND honoured), slots (NCCL_BUFFSIZE honoured, else collscope's default for this many ranks a
    // core) and waits.
    let env = Env::from_process();
    let cores = affinity::plan(&env, n as u32).map_err(|e| format!("shm_ring: {e}"))?;
    let sets: Option<Vec<_>> = cores.map(|c| c.into_iter().map(affinity::cpu_set).collect());
    // The cores each rank may run on, before it is pinned (only their union and the ranks' count matter).
    let allowed: Vec<u32> = affinity::allowed_cpus().into_iter().map(|c| c as u32).collect();
    let local = vec![&allowed[..]; n];
    let buffsize = match env.str("NCCL_BUFFSIZE") {
        Some(_) => BufSizes::from_env(&env).map_err(|e| format!("shm_ring: {e}"))?.simple,
        None => crowded_buffsize(ranks_per_core(&local)).unwrap_or(DEFAULT_BUFFSIZE),
    };
    let patience = patience_for(&local);
    let slot = buffsize / NCCL_STEPS as usize;
    let sh = Shared::new(n, slot, sizes.len(), sizes.len() * (iters + 1))?;
    let mut children = Vec::new();
    for r in 0..n {
        let set = sets.as_ref().map(|s| s[r]);
        // SAFETY: this process has one thread; the child runs its rank and exits.
        match unsafe { nix::unistd::fork() }.map_err(|e| format!("shm_ring: fork: {e}"))? {
            nix::unistd::ForkResult::Child => {
                // A rank outlives no parent that was killed (a deadline): the kernel kills it too.
                let dies = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
                let pinned = set.as_ref().map_or(Ok(()), affinity::pin_to);
                let ready = dies.map_err(std::io::Error::from).and(pinned).map_err(|e| format!("setting up: {e}"));
                let waiter = Waiter { rank: r as u32, timeout: STALL, abort: AbortHandle::default(), patience };
                let code = match ready.and_then(|()| rank_main(&sh, waiter, r, sizes, iters)) {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("rank {r}: {e}");
                        1
                    }
                };
                // Nothing was buffered to flush twice: the parent prints only once every rank has ended.
                std::process::exit(code);
            }
            nix::unistd::ForkResult::Parent { child } => children.push(child),
        }
    }
    let mut failed = 0;
    for c in children {
        // A rank that fails makes its peers' waits fail within STALL, so every child ends.
        match nix::sys::wait::waitpid(c, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => {}
            _ => failed += 1,
        }
    }
    if failed > 0 {
        return Err(format!("shm_ring: {failed} of {n} ranks failed"));
    }
    let seconds = |round: usize| {
        let start = (0..n).map(|r| sh.clock(r, round)[0].load(Ordering::Relaxed)).min().unwrap_or(0);
        let end = (0..n).map(|r| sh.clock(r, round)[1].load(Ordering::Relaxed)).max().unwrap_or(start);
        (end - start) as f64 / 1e9
    };
    let wrong = |i: usize| (0..n).map(|r| sh.wrong(r, i).load(Ordering::Relaxed)).sum();
    let title = format!("plain ring over shared memory, {n} rank processes, {NCCL_STEPS} slots of {} KiB", slot >> 10);
    sweep.print(&title, seconds, wrong);
    Ok(())
}
