//! What each nccl-tests benchmark does (`src/<coll>.cu`): element counts from a byte size, the call, the
//! expected result, and the bus bandwidth factor (`doc/PERFORMANCE.md`).

use anyhow::{anyhow, Context, Result};
use clap::ValueEnum;
use collscope_kernels::Element;
use collscope_model::RedOp;
use collscope_runtime::device::reference::reference_reduce;
use collscope_runtime::{Comm, Registration, SharedBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum Bench {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    Alltoall,
    Sendrecv,
}

/// Element counts of one size (nccl-tests' `getCollByteCount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub send: usize,
    pub recv: usize,
    /// The count the collective is called with (the table's `count` column).
    pub param: usize,
}

impl Counts {
    /// Elements of the receive buffer of benchmark `b`: in-place ReduceScatter receives in a buffer as large as
    /// its input.
    pub(crate) fn recv_len(self, b: Bench, in_place: bool) -> usize {
        if in_place && b == Bench::ReduceScatter {
            self.send
        } else {
            self.recv
        }
    }
}

impl Bench {
    /// The nccl-tests program name (`all_reduce_perf`).
    pub(crate) fn program(self) -> String {
        format!("{}_perf", self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default())
    }

    pub(crate) fn uses_op(self) -> bool {
        matches!(self, Bench::AllReduce | Bench::ReduceScatter | Bench::Reduce)
    }

    pub(crate) fn uses_root(self) -> bool {
        matches!(self, Bench::Broadcast | Bench::Reduce)
    }

    pub(crate) fn counts(self, count: usize, n: usize) -> Counts {
        match self {
            Bench::AllReduce | Bench::Broadcast | Bench::Reduce | Bench::Sendrecv => {
                Counts { send: count, recv: count, param: count }
            }
            Bench::AllGather => Counts { send: count / n, recv: count / n * n, param: count / n },
            Bench::ReduceScatter => Counts { send: count / n * n, recv: count / n, param: count / n },
            Bench::Alltoall => Counts { send: count / n * n, recv: count / n * n, param: count / n },
        }
    }

    /// Bytes one rank holds at once for one size: its send and receive buffers, its input staged before it is
    /// copied in, the expected result when checking, and the copy of the input in-place AllToAll and SendRecv
    /// make.
    pub(crate) fn peak_bytes(self, c: Counts, elem: usize, check: bool) -> u128 {
        let scratch = matches!(self, Bench::Alltoall | Bench::Sendrecv);
        let elems = 2 * c.send as u128 + c.recv as u128 * (1 + u128::from(check) + u128::from(scratch));
        elems * elem as u128
    }

    /// (algbw, busbw) in GB/s for `param` elements of `size` bytes taking `secs` (nccl-tests' `getBw`).
    pub(crate) fn bandwidth(self, param: usize, size: usize, secs: f64, n: usize) -> (f64, f64) {
        let nf = n as f64;
        let (base_elems, factor) = match self {
            Bench::AllReduce => (param, 2.0 * (nf - 1.0) / nf),
            Bench::AllGather | Bench::ReduceScatter | Bench::Alltoall => (param * n, (nf - 1.0) / nf),
            Bench::Broadcast | Bench::Reduce | Bench::Sendrecv => (param, 1.0),
        };
        let algbw = if secs > 0.0 { (base_elems * size) as f64 / 1e9 / secs } else { 0.0 };
        (algbw, algbw * factor)
    }
}

/// Rank `rank`'s input at index `i`: small values exact in every type (1 or 2 for products, so they
/// cannot overflow differently in different orders).
pub(super) fn input<T: Element>(rank: usize, i: usize, op: RedOp) -> T {
    if op == RedOp::Prod {
        T::from_index(1 + (i + rank) % 2)
    } else {
        T::from_index(i * 3 + rank)
    }
}

/// What rank `rank`'s receive buffer must hold afterwards; `None` where the collective leaves it undefined.
pub(super) fn expected<T: Element>(
    b: Bench,
    c: Counts,
    rank: usize,
    n: usize,
    root: usize,
    op: RedOp,
) -> Option<Vec<T>> {
    let inp = |q: usize, i: usize| input::<T>(q, i, op);
    Some(match b {
        Bench::AllReduce => (0..c.recv).map(|i| reference_reduce(op, n, |q| inp(q, i))).collect(),
        Bench::Reduce if rank != root => return None,
        Bench::Reduce => (0..c.recv).map(|i| reference_reduce(op, n, |q| inp(q, i))).collect(),
        Bench::ReduceScatter => (0..c.recv).map(|i| reference_reduce(op, n, |q| inp(q, rank * c.param + i))).collect(),
        Bench::Broadcast => (0..c.recv).map(|i| inp(root, i)).collect(),
        Bench::AllGather => (0..c.recv).map(|i| inp(i / c.param.max(1), i % c.param.max(1))).collect(),
        Bench::Alltoall => (0..c.recv).map(|i| inp(i / c.param.max(1), rank * c.param + i % c.param.max(1))).collect(),
        Bench::Sendrecv => (0..c.recv).map(|i| inp((rank + n - 1) % n, i)).collect(),
    })
}

/// `64 GiB`, `1.5 MiB`, `512 B`.
pub(super) fn human_bytes(b: u128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", units[u])
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Elements of `got` that differ from `want`: exactly for integers, within reduction-order rounding for floats.
pub(super) fn count_wrong<T: Element>(got: &[T], want: &[T], n: usize) -> u64 {
    let tol = match T::DTYPE {
        collscope_kernels::Dtype::F16 => 1e-2,
        collscope_kernels::Dtype::Bf16 => 5e-2,
        collscope_kernels::Dtype::F32 => 1e-5,
        collscope_kernels::Dtype::F64 => 1e-12,
        _ => 0.0,
    } * n as f64;
    got.iter()
        .zip(want)
        .filter(|(g, w)| {
            let (g, w) = (g.to_f64(), w.to_f64());
            !(g == w || (g - w).abs() <= tol * w.abs().max(1.0))
        })
        .count() as u64
}

/// A send or receive buffer: allocated for one size, or the front of a registered window (`-R 2`).
pub(super) enum Region<'a, T> {
    Heap(Vec<T>),
    Window(&'a mut [T]),
}

impl<T> std::ops::Deref for Region<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Region::Heap(v) => v,
            Region::Window(w) => w,
        }
    }
}

impl<T> std::ops::DerefMut for Region<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Region::Heap(v) => v,
            Region::Window(w) => w,
        }
    }
}

/// The send and receive windows of `-R 2` (nccl-tests' symmetric registration: `ncclMemAlloc`'d buffers of the
/// largest size registered with `ncclCommWindowRegister` once, each size using their front).
pub(super) struct Windows {
    send: SharedBuf,
    recv: SharedBuf,
    regs: [Registration; 2],
}

impl Windows {
    /// Allocates `send_bytes` and `recv_bytes` of shared memory and registers both (every rank at once).
    pub(super) fn register(comm: &mut Comm, send_bytes: usize, recv_bytes: usize) -> Result<Self> {
        let alloc = |n: usize, which: &str| {
            SharedBuf::new(n)
                .with_context(|| format!("cannot allocate the {which} window of {}", human_bytes(n as u128)))
        };
        let (send, recv) = (alloc(send_bytes, "send")?, alloc(recv_bytes, "receive")?);
        let regs = [comm.register(&send)?, comm.register(&recv)?];
        Ok(Windows { send, recv, regs })
    }

    /// Ends both registrations (every rank at once).
    pub(super) fn deregister(self, comm: &mut Comm) -> Result<()> {
        self.regs.into_iter().try_for_each(|r| comm.deregister(r))?;
        Ok(())
    }
}

/// The buffers of one rank for one size.
pub(super) struct Buffers<'a, T> {
    pub send: Region<'a, T>,
    pub recv: Region<'a, T>,
    /// Scratch for the benchmarks whose in-place form needs a copy of the input (AllToAll, SendRecv).
    scratch: Vec<T>,
}

impl<'a, T: Element> Buffers<'a, T> {
    /// Zeroed buffers for benchmark `b` at counts `c` (in-place ReduceScatter receives in a buffer as large as
    /// its input): allocated, or the front of `windows`. An error names the buffer and its size when the
    /// allocator refuses it.
    pub(super) fn new(b: Bench, c: Counts, in_place: bool, windows: Option<&'a mut Windows>) -> Result<Self> {
        let recv = c.recv_len(b, in_place);
        let zeroed = |n: usize, which: &str| -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|e| {
                anyhow!(
                    "cannot allocate the {which} buffer of {}: {e}",
                    human_bytes(n as u128 * size_of::<T>() as u128)
                )
            })?;
            v.resize(n, T::from_index(0));
            Ok(v)
        };
        let window = |buf: &'a mut SharedBuf, n: usize, which: &str| -> Result<Region<'a, T>> {
            let all = buf.as_mut_slice::<T>();
            let len = all.len();
            let front = all.get_mut(..n).ok_or_else(|| anyhow!("the {which} window holds {len} elements, not {n}"))?;
            front.fill(T::from_index(0));
            Ok(Region::Window(front))
        };
        let (send, recv) = match windows {
            Some(w) => (window(&mut w.send, c.send, "send")?, window(&mut w.recv, recv, "receive")?),
            None => (Region::Heap(zeroed(c.send, "send")?), Region::Heap(zeroed(recv, "receive")?)),
        };
        Ok(Buffers { send, recv, scratch: Vec::new() })
    }

    /// Writes this rank's input where the call will read it (the send buffer, or its block of the receive
    /// buffer for in-place runs).
    pub(super) fn fill(&mut self, b: Bench, c: Counts, rank: usize, op: RedOp, in_place: bool) {
        let send: Vec<T> = (0..c.send).map(|i| input(rank, i, op)).collect();
        match (in_place, b) {
            (false, _) => self.send.copy_from_slice(&send),
            (true, Bench::AllGather) => self.recv[rank * c.param..(rank + 1) * c.param].copy_from_slice(&send),
            (true, _) => self.recv[..send.len()].copy_from_slice(&send),
        }
    }

    /// The result: the receive buffer, or for in-place ReduceScatter this rank's block of it.
    pub(super) fn result(&self, b: Bench, c: Counts, rank: usize, in_place: bool) -> &[T] {
        if in_place && b == Bench::ReduceScatter {
            &self.recv[rank * c.param..(rank + 1) * c.param]
        } else {
            &self.recv
        }
    }

    /// One call of the collective.
    pub(super) fn run(&mut self, comm: &mut Comm, b: Bench, op: RedOp, root: u32, in_place: bool) -> Result<()> {
        let n = comm.nranks();
        let rank = comm.rank();
        match (b, in_place) {
            (Bench::AllReduce, false) => comm.all_reduce(&self.send, &mut self.recv, op)?,
            (Bench::AllReduce, true) => comm.all_reduce_in_place(&mut self.recv, op)?,
            (Bench::AllGather, false) => comm.all_gather(&self.send, &mut self.recv)?,
            (Bench::AllGather, true) => comm.all_gather_in_place(&mut self.recv)?,
            (Bench::ReduceScatter, false) => comm.reduce_scatter(&self.send, &mut self.recv, op)?,
            (Bench::ReduceScatter, true) => comm.reduce_scatter_in_place(&mut self.recv, op)?,
            (Bench::Broadcast, false) => comm.broadcast(&self.send, &mut self.recv, root)?,
            (Bench::Broadcast, true) => comm.broadcast_in_place(&mut self.recv, root)?,
            (Bench::Reduce, false) => comm.reduce(&self.send, &mut self.recv, op, root)?,
            (Bench::Reduce, true) => comm.reduce_in_place(&mut self.recv, op, root)?,
            (Bench::Alltoall, false) => comm.all_to_all(&self.send, &mut self.recv)?,
            (Bench::Sendrecv, false) => sendrecv(comm, &self.send, &mut self.recv, rank, n)?,
            // In place, the input must be copied aside first (the copy is part of the measured time).
            (Bench::Alltoall, true) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(&self.recv);
                comm.all_to_all(&self.scratch, &mut self.recv)?
            }
            (Bench::Sendrecv, true) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(&self.recv);
                sendrecv(comm, &self.scratch, &mut self.recv, rank, n)?
            }
        }
        Ok(())
    }
}

/// nccl-tests' sendrecv: send to the next rank, receive from the previous, in one group.
fn sendrecv<T: Element>(comm: &mut Comm, send: &[T], recv: &mut [T], rank: u32, n: u32) -> Result<()> {
    let mut g = comm.group();
    g.send(send, (rank + 1) % n)?;
    g.recv(recv, (rank + n - 1) % n)?;
    g.end()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_memory_and_refused_allocations_are_sized() {
        let c = Bench::AllReduce.counts(1 << 20, 2);
        assert_eq!(Bench::AllReduce.peak_bytes(c, 4, true), 16 << 20);
        assert_eq!(Bench::AllReduce.peak_bytes(c, 4, false), 12 << 20);
        assert_eq!(Bench::Alltoall.peak_bytes(Bench::Alltoall.counts(1 << 20, 2), 4, false), 16 << 20);
        assert_eq!(human_bytes(64 << 30), "64 GiB");
        assert_eq!(human_bytes(1536 << 10), "1.5 MiB");
        assert_eq!(human_bytes(8), "8 B");
        // More than any allocator can give: an error with the size, not an abort.
        let e = Buffers::<f32>::new(Bench::AllReduce, Counts { send: usize::MAX / 8, recv: 1, param: 1 }, false, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("send buffer") && e.contains("PiB"), "{e}");
    }

    #[test]
    fn counts_and_bus_bandwidth_follow_nccl_tests() {
        assert_eq!(Bench::AllGather.counts(1000, 4), Counts { send: 250, recv: 1000, param: 250 });
        assert_eq!(Bench::ReduceScatter.counts(1001, 4), Counts { send: 1000, recv: 250, param: 250 });
        assert_eq!(Bench::Alltoall.counts(10, 4), Counts { send: 8, recv: 8, param: 2 });
        let (alg, bus) = Bench::AllReduce.bandwidth(250_000, 4, 1e-3, 4);
        assert!((alg - 1.0).abs() < 1e-12 && (bus - 1.5).abs() < 1e-12);
        let (alg, bus) = Bench::AllGather.bandwidth(250_000, 4, 1e-3, 4);
        assert!((alg - 4.0).abs() < 1e-12 && (bus - 3.0).abs() < 1e-12);
        assert_eq!(Bench::Sendrecv.bandwidth(10, 4, 1.0, 8).1, 40e-9);
        assert_eq!(Bench::AllReduce.program(), "all_reduce_perf");
        assert_eq!(Bench::Alltoall.program(), "alltoall_perf");
    }

    #[test]
    fn expected_values_and_wrong_counts() {
        let c = Bench::AllGather.counts(8, 2);
        let e: Vec<i32> = expected(Bench::AllGather, c, 0, 2, 0, RedOp::Sum).unwrap();
        assert_eq!(e, vec![0, 3, 6, 2, 1, 4, 0, 3]);
        let s: Vec<f32> = expected(Bench::AllReduce, Bench::AllReduce.counts(3, 2), 0, 2, 0, RedOp::Sum).unwrap();
        assert_eq!(s, vec![1.0, 7.0, 6.0]);
        assert!(expected::<f32>(Bench::Reduce, c, 1, 2, 0, RedOp::Sum).is_none());
        assert_eq!(count_wrong(&[1.0f32, 2.0, 3.0], &[1.0, 2.5, 3.0 + 1e-7], 2), 1);
        assert_eq!(count_wrong(&[1i32, 2], &[1, 3], 2), 1);
    }
}
