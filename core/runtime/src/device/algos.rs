//! The collective algorithms, per channel, over the primitives (NCCL 2.28.9 `src/device/all_reduce.h`,
//! `all_gather.h`, `reduce_scatter.h`, `broadcast.h`, `reduce.h`). Each function runs one channel's share:
//! elements `[off, off + len)` of the operation (of each rank's block for AllGather/ReduceScatter).

use super::prims::{Prims, Ptr};
use crate::error::Result;

/// Geometry of one channel's share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part {
    /// First element of this channel's share and its length, in elements.
    pub off: usize,
    pub len: usize,
    /// Elements per chunk (the algorithm's unit).
    pub chunk: usize,
    pub esize: usize,
    /// Elements per rank block (AllGather/ReduceScatter), or the whole count.
    pub count: usize,
}

fn div_up(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

/// Chunks of `part`, as (offset, length) in elements.
fn chunks(part: Part) -> impl Iterator<Item = (usize, usize)> {
    (0..div_up(part.len, part.chunk)).map(move |i| {
        let o = i * part.chunk;
        (part.off + o, part.chunk.min(part.len - o))
    })
}

/// Ring AllReduce: reduce-scatter around the ring, the last reducer divides (Avg), then all-gather.
///
/// Every rank keeps each chunk at the same offset of its buffers, so the rank that completes a chunk writes it
/// straight into its successor's destination when that is a thread of this process or a process whose window
/// holds it (NCCL 2.28.9 `directRecvReduceCopyDirectSend`), and the successor copies nothing before passing it
/// on.
pub(crate) fn ring_all_reduce(p: &mut Prims, rank: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let n = p.nranks as usize;
    let (prev, next) = (p.ch.ring_prev, p.ch.ring_next);
    p.expose_dst(dst, (part.off + part.len) * part.esize);
    let es = part.esize;
    // Chunks aligned to 16 bytes, as NCCL aligns them.
    let align = (16 / es).max(1);
    let mut grid = 0;
    while grid < part.len {
        let rem = part.len - grid;
        let real = div_up(part.chunk.min(div_up(rem, n)), align) * align;
        let at = |c: usize| -> (usize, usize) {
            let o = grid + c * real;
            let len = if o >= part.len { 0 } else { real.min(part.len - o) };
            ((part.off + o) * es, len * es)
        };
        let r = rank as usize;
        let chunk_of = |j: usize| (r + n - j) % n;
        // SAFETY: `src` and `dst` are the call's buffers of `part.count` elements ([`Ptr`]), aligned for the
        // datatype, and `at` keeps every (offset, length) within `[part.off, part.off + part.len)` of them. The
        // planned regions are the AllGather half's destinations, which nothing touches before their receives but
        // the in-place sends their steps depend on, as `want_ahead` asks.
        unsafe {
            // The AllGather half's receives land in the destination even while this rank still reduces. None
            // can have arrived: each depends on what this rank sends below. In place, the first overwrites the
            // chunk sent first, straight from the buffer, each step once the ring reduced the step sent there.
            let reduced = (2..n).map(|j| at(chunk_of(j)).1).chain([at(r).1]);
            let gather = (1..n - 1).map(|j| at(chunk_of(j))).chain([at((r + 1) % n)]);
            p.want_ahead(prev, reduced, gather.map(|(o, l)| (dst.at(o), l)));
            let (o, l) = at(chunk_of(1));
            p.send(next, src.at(o), l)?;
            for j in 2..n {
                let (o, l) = at(chunk_of(j));
                p.recv_reduce_send(prev, next, src.at(o), l)?;
            }
            let (o, l) = at(r);
            p.recv_reduce_copy_send(prev, next, src.at(o), dst.at(o), Some(o), l)?;
            for j in 1..n - 1 {
                let (o, l) = at(chunk_of(j));
                p.recv_copy_send(prev, &[next], dst.at(o), l)?;
            }
            let (o, l) = at((r + 1) % n);
            p.recv(prev, dst.at(o), l)?;
        }
        grid += n * real;
    }
    Ok(())
}

/// collscope's OneShot AllReduce, an extension NCCL lacks, for small calls: every rank posts its chunk to
/// every other rank, then receives theirs into one row per rank, and reduces the rows in rank order, so every
/// rank computes the same bits. No step waits on another (a ring AllReduce chains 2(n-1), a ring AllGather of
/// the chunks n-1), so where ranks outnumber cores each rank needs about two turns on its core a call. Measured
/// on 2 cores, 4 rank processes, 8 B-4 KiB, medians of 5-6 interleaved runs in two sets: 0.58-1.05x the time of
/// the chunks travelling the ring, most 0.7-0.95x (5.7-8.1 us a call against 8.1-10.7 at 8 B-1 KiB); 8 rank
/// processes 0.76-1.15x. Large calls keep the ring. At 1-16 MiB, 8 rank processes on 2 cores, medians of 6
/// interleaved pairs, busbw against the ring's:
/// - a two-shot form (each rank reduces its n-th of a chunk from every peer's copy, then posts it to every peer:
///   two rounds of waits a chunk, none chained) read 0.43-0.57x;
/// - a hierarchical one (rings of four consecutive ranks, their reduced quarters swapped with the partner in the
///   other four, then gathered round the four) read 0.55-0.87x, with 80 context switches a 1 MiB call to 110-129.
pub(crate) fn one_shot_all_reduce(p: &mut Prims, rank: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let n = p.nranks as usize;
    let (es, r) = (part.esize, rank as usize);
    let row = part.chunk.min(part.len) * es;
    let rows = Ptr(p.rows(n * row));
    let at = |k: usize| rows.at(k * row);
    let in_place = src.0 == dst.0;
    for (o, l) in chunks(part) {
        let (o, l) = (o * es, l * es);
        // SAFETY: each chunk lies within `part` of `src` and `dst`, the call's buffers ([`Ptr`]); each of the
        // `n` rows is `row >= l` bytes of the `n * row` that `rows` sized, aligned for the datatype (the rows are
        // u64s and `row` a whole number of elements).
        unsafe {
            for j in 1..n {
                p.send(((r + j) % n) as u32, src.at(o), l)?;
            }
            // Rank r-j posts to this rank j-th: the earliest posts are received first.
            for j in 1..n {
                let q = (r + n - j) % n;
                p.recv(q as u32, at(q), l)?;
            }
            if p.count_only {
                continue;
            }
            // Peers may read the chunk where it lies (P2P read): in this rank's source, which the reduction
            // overwrites in place, and in the rows, which the next chunk refills.
            p.wait_sent()?;
            // In place, the first write to the destination would overwrite this rank's chunk before its turn
            // (unless it is the first input): it is read from its row instead.
            let own = if in_place && r != 0 {
                collscope_kernels::bytes::copy(at(r), src.at(o), l);
                at(r)
            } else {
                src.at(o)
            };
            p.reduce_local(n, |k| if k == r { own } else { at(k) }, dst.at(o), l);
        }
    }
    Ok(())
}

/// Tree AllReduce: reduce up the channel's tree, then broadcast down.
pub(crate) fn tree_all_reduce(p: &mut Prims, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let tree = p.ch.tree;
    let kids: Vec<u32> = tree.children().collect();
    let es = part.esize;
    if tree.up >= 0 {
        // The broadcast down lands in the destination: planned before the first send up, as the ring's AllGather
        // half, since each of its steps depends on what this rank sends up (in place, on the bytes sent from
        // there). Planned only once it started, 8-53 % of them went into the slots, a parent being ahead (4 rank
        // processes over NET/Socket, 32 MB).
        let down = chunks(part).map(|(o, l)| (dst.at(o * es), l * es));
        // SAFETY: the regions are `part`'s chunks of `dst`, the call's destination ([`Ptr`]); nothing touches
        // them before their receives down but the sends up their steps depend on.
        unsafe { p.want_ahead(tree.up as u32, [], down) };
    }
    for (o, l) in chunks(part) {
        let (o, l) = (o * es, l * es);
        // SAFETY: each chunk lies within `part` of `src` and `dst`, the call's aligned buffers ([`Ptr`]).
        unsafe {
            if tree.up < 0 {
                p.recv_reduce_copy(&kids, src.at(o), dst.at(o), l, true)?;
            } else if kids.is_empty() {
                p.send(tree.up as u32, src.at(o), l)?;
            } else {
                p.run(&kids, &[tree.up as u32], Some(src.at(o)), None, l, false)?;
            }
        }
    }
    for (o, l) in chunks(part) {
        let (o, l) = (o * es, l * es);
        // SAFETY: as the reduction up: each chunk lies within `part` of `dst`.
        unsafe {
            if tree.up < 0 {
                p.copy_send(&kids, dst.at(o), dst.at(o), l)?;
            } else {
                p.recv_copy_send(tree.up as u32, &kids, dst.at(o), l)?;
            }
        }
    }
    Ok(())
}

/// Ring Broadcast from `root`: a chain starting at the root.
pub(crate) fn ring_broadcast(p: &mut Prims, rank: u32, root: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let (prev, next) = (p.ch.ring_prev, p.ch.ring_next);
    let es = part.esize;
    if rank != root {
        // Every receive of the call, planned at once as AllGather's: the chain does not wait for this rank.
        // SAFETY: the regions are `part`'s chunks of `dst`, the call's destination ([`Ptr`]), which nothing but
        // their receives touches on a rank other than the root.
        unsafe { p.want_ahead(prev, [], chunks(part).map(|(o, l)| (dst.at(o * es), l * es))) };
    }
    for (o, l) in chunks(part) {
        let (o, l) = (o * es, l * es);
        // SAFETY: each chunk lies within `part` of `src` and `dst`, the call's aligned buffers ([`Ptr`]).
        unsafe {
            if rank == root {
                p.copy_send(&[next], src.at(o), dst.at(o), l)?;
            } else if next == root {
                p.recv(prev, dst.at(o), l)?;
            } else {
                p.recv_copy_send(prev, &[next], dst.at(o), l)?;
            }
        }
    }
    Ok(())
}

/// Ring Reduce to `root`: a chain that starts after the root and ends at it.
pub(crate) fn ring_reduce(p: &mut Prims, rank: u32, root: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let (prev, next) = (p.ch.ring_prev, p.ch.ring_next);
    let es = part.esize;
    for (o, l) in chunks(part) {
        let (o, l) = (o * es, l * es);
        // SAFETY: each chunk lies within `part` of `src` and `dst`, the call's aligned buffers ([`Ptr`]).
        unsafe {
            if prev == root {
                p.send(next, src.at(o), l)?;
            } else if rank == root {
                p.recv_reduce_copy(&[prev], src.at(o), dst.at(o), l, true)?;
            } else {
                p.recv_reduce_send(prev, next, src.at(o), l)?;
            }
        }
    }
    Ok(())
}

/// Ring AllGather: `src` is this rank's block, `dst` holds every rank's block at `rank * count`.
pub(crate) fn ring_all_gather(p: &mut Prims, rank: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let n = p.nranks as usize;
    let (prev, next) = (p.ch.ring_prev, p.ch.ring_next);
    let es = part.esize;
    let block = |b: usize, o: usize| (b * part.count + o) * es;
    let r = rank as usize;
    // Every receive of the call lands in the destination, planned at once: the predecessor sends without
    // waiting for this rank, so a chunk's first steps may arrive before its receives begin.
    let gather = chunks(part).flat_map(|(o, l)| (1..n).map(move |j| (dst.at(block((r + n - j) % n, o)), l * es)));
    // SAFETY: `dst` holds `nranks` blocks of `part.count` elements ([`Ptr`]) and the regions are `part`'s chunks
    // of the other ranks' blocks, which nothing but their receives touches.
    unsafe { p.want_ahead(prev, [], gather) };
    for (o, l) in chunks(part) {
        let l = l * es;
        // SAFETY: `src` is this rank's block and `dst` every rank's, each chunk within `part` of a block.
        unsafe {
            p.copy_send(&[next], src.at(o * es), dst.at(block(r, o)), l)?;
            for j in 1..n - 1 {
                p.recv_copy_send(prev, &[next], dst.at(block((r + n - j) % n, o)), l)?;
            }
            p.recv(prev, dst.at(block((r + 1) % n, o)), l)?;
        }
    }
    Ok(())
}

/// Ring ReduceScatter: `src` holds every rank's block, `dst` receives this rank's reduced block.
pub(crate) fn ring_reduce_scatter(p: &mut Prims, rank: u32, src: Ptr, dst: Ptr, part: Part) -> Result<()> {
    let n = p.nranks as usize;
    let (prev, next) = (p.ch.ring_prev, p.ch.ring_next);
    let es = part.esize;
    let block = |b: usize, o: usize| (b * part.count + o) * es;
    for (o, l) in chunks(part) {
        let l = l * es;
        let r = rank as usize;
        // SAFETY: `src` holds `nranks` blocks of `part.count` elements and `dst` one ([`Ptr`]); each chunk lies
        // within `part` of a block.
        unsafe {
            p.send(next, src.at(block((r + n - 1) % n, o)), l)?;
            for j in 2..n {
                p.recv_reduce_send(prev, next, src.at(block((r + n - j) % n, o)), l)?;
            }
            p.recv_reduce_copy(&[prev], src.at(block(r, o)), dst.at(o * es), l, true)?;
        }
    }
    Ok(())
}
