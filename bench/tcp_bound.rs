//! The busbw a ring AllReduce over TCP loopback could reach on this host if reducing cost nothing: N ranks in a
//! ring, each sending 2(N-1)/N x SIZE bytes to the next while receiving as much from the previous, in 512 KiB
//! pieces cycling through a 4 MiB buffer on each side (a connection's 8 Simple steps of NCCL_BUFFSIZE, as the
//! NET proxy sends and receives them). Every byte crosses a real loopback socket. Prints an anchor-style table
//! (size count type op time_us algbw busbw wrong) that bench/compare.py reads as it reads Gloo's.
//!
//! With `reduce`, each receiver also adds the pieces of a round's first half (the reduce-scatter's steps) into a
//! SIZE-byte float buffer with collscope's kernel: the bound a ring AllReduce can reach where the sockets' copies
//! and the reduction share the same cores.
//!
//! With `ring`, a round is the ring's 2(N-1) steps of SIZE/N bytes and a rank sends each piece of a step only
//! once the same piece of the step before has arrived from its predecessor, as a ring AllReduce must (a step
//! forwards what the last one brought): what the hops' dependence costs, beside the streaming bound.
//!
//!     cargo run --release --example tcp_bound -- NRANKS MINBYTES MAXBYTES [ITERS [reduce] [ring]]

mod sweep;

use collscope_kernels::{reduce_in_place, Op};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};
use sweep::{page_aligned, Sweep};

const PIECE: usize = 512 << 10;
const BUFFER: usize = 8 * PIECE;

/// How long a sender under `ring` waits for its receiver's bytes before it gives up.
const STALL: Duration = Duration::from_secs(60);

/// When one thread's share of every round began and ended, rounds in order (warm-up included).
type Spans = Vec<(Instant, Instant)>;

/// The bytes one rank's receiver has taken in so far (all rounds), which its sender waits on under `ring`.
#[derive(Default)]
struct Arrived {
    bytes: Mutex<usize>,
    more: Condvar,
}

impl Arrived {
    fn add(&self, n: usize) {
        *self.bytes.lock().unwrap_or_else(|p| p.into_inner()) += n;
        self.more.notify_one();
    }

    /// Waits until `n` bytes arrived; fails after [`STALL`] without them (the receiver failed or stalled).
    fn wait_for(&self, n: usize) -> std::io::Result<()> {
        let got = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let (got, _) = self.more.wait_timeout_while(got, STALL, |b| *b < n).unwrap_or_else(|p| p.into_inner());
        if *got < n {
            let msg = format!("tcp_bound: {} of {n} bytes arrived from the predecessor within {STALL:?}", *got);
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, msg));
        }
        Ok(())
    }
}

/// Moves each round's bytes through `io` in pieces from a buffer it cycles through, timing every round; a piece
/// never spans two of a round's `steps` (the last takes any remainder). `io` gets a piece, its offset in the
/// round and the round's total.
fn run_rounds(
    rounds: &[usize],
    barrier: &Barrier,
    steps: usize,
    mut io: impl FnMut(&mut [f32], usize, usize) -> std::io::Result<()>,
) -> std::io::Result<Spans> {
    let mut store = Vec::new();
    let buf = page_aligned(&mut store, BUFFER / 4, 1.0);
    let mut spans = Vec::with_capacity(rounds.len());
    let mut at = 0;
    for &total in rounds {
        barrier.wait();
        let t0 = Instant::now();
        let mut off = 0;
        let step = step_bytes(total, steps);
        while off < total {
            let to_step_end = if off / step + 1 >= steps { total - off } else { step - off % step };
            let k = to_step_end.min(PIECE);
            io(&mut buf[at / 4..(at + k) / 4], off, total)?;
            at = (at + PIECE) % BUFFER;
            off += k;
        }
        spans.push((t0, Instant::now()));
    }
    Ok(spans)
}

/// Bytes of each of a round's `steps` (whole floats).
fn step_bytes(total: usize, steps: usize) -> usize {
    (total / steps / 4 * 4).max(4)
}

/// A piece's bytes (pieces are whole floats: sizes are multiples of 4).
fn bytes(piece: &mut [f32]) -> &mut [u8] {
    // SAFETY: any bytes are a valid f32 and u8 has no alignment; same memory, same length in bytes.
    unsafe { std::slice::from_raw_parts_mut(piece.as_mut_ptr().cast(), std::mem::size_of_val(piece)) }
}

/// The sweep and the flags `reduce` and `ring`.
fn parse(args: &[String]) -> Result<(Sweep, bool, bool), String> {
    let usage = "usage: tcp_bound NRANKS MINBYTES MAXBYTES [ITERS [reduce] [ring]]";
    let flags = args.get(4..).unwrap_or_default();
    let (reduce, ring) = (flags.iter().any(|f| f == "reduce"), flags.iter().any(|f| f == "ring"));
    if flags.len() != reduce as usize + ring as usize {
        return Err(usage.into());
    }
    Ok((Sweep::parse("tcp_bound", usage, &args[..args.len().min(4)], None)?, reduce, ring))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (sweep, reduce, ring) = parse(&args)?;
    let (n, iters, sizes) = (sweep.nranks, sweep.iters, &sweep.sizes);
    let steps = if ring { 2 * (n - 1) } else { 1 };
    // One warm-up round per size (a fresh connection's buffers grow as traffic flows), then the timed ones.
    let rounds: Arc<Vec<usize>> =
        Arc::new(sizes.iter().flat_map(|&s| std::iter::repeat_n(s * 2 * (n - 1) / n / 4 * 4, iters + 1)).collect());
    let listeners = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    let mut senders = Vec::new();
    for l in &listeners {
        let s = TcpStream::connect(l.local_addr()?)?;
        s.set_nodelay(true)?;
        senders.push(s);
    }
    // Rank r sends to rank r+1: the stream connected to listener r+1.
    senders.rotate_left(1);
    let barrier = Arc::new(Barrier::new(2 * n));
    let mut threads = Vec::new();
    for (l, s) in listeners.iter().zip(senders) {
        let r = l.accept()?.0;
        let arrived = Arc::new(Arrived::default());
        let (rs, bs, mut s, sa) = (rounds.clone(), barrier.clone(), s, arrived.clone());
        // The bytes of the rounds before the current one, which `arrived` counts too.
        let (mut before, mut last) = (0, 0);
        threads.push(std::thread::spawn(move || {
            run_rounds(&rs, &bs, steps, |b, off, total| {
                if off == 0 {
                    (before, last) = (before + last, total);
                }
                let step = step_bytes(total, steps);
                if ring && off >= step {
                    // The same piece of the step before, which ends where this step starts (the last step's
                    // remainder of a few bytes depends on nothing more).
                    let start = (off / step).min(steps - 1) * step;
                    sa.wait_for(before + (off + b.len() * 4 - step).min(start))?;
                }
                s.write_all(bytes(b))
            })
        }));
        let (rr, br, mut r) = (rounds.clone(), barrier.clone(), r);
        // The rank's own data, which the reduce-scatter's steps add the received pieces to.
        let mut own = if reduce { vec![1f32; sizes.last().map_or(0, |s| s / 4)] } else { Vec::new() };
        threads.push(std::thread::spawn(move || {
            run_rounds(&rr, &br, steps, |b, off, total| {
                r.read_exact(bytes(b))?;
                if reduce && off < total / 2 {
                    let k = (total / 2 - off).min(b.len() * 4) / 4;
                    reduce_in_place(Op::Sum, &mut own[off / 4..off / 4 + k], &b[..k]);
                }
                // Reduced before it is passed on, as a ring's step must be.
                arrived.add(b.len() * 4);
                Ok(())
            })
        }));
    }
    let spans: Vec<Spans> = threads
        .into_iter()
        .map(|t| t.join().map_err(|_| "tcp_bound: a transfer thread panicked".to_string())?.map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let with = if reduce { ", the reduce-scatter's additions included" } else { "" };
    let order = if ring { ", each step sent once the last arrived" } else { "" };
    let seconds = |round: usize| {
        let start = spans.iter().map(|s| s[round].0).min().unwrap_or_else(Instant::now);
        let end = spans.iter().map(|s| s[round].1).max().unwrap_or(start);
        (end - start).as_secs_f64()
    };
    // Bytes are moved, not checked: nothing can be wrong.
    sweep.print(&format!("TCP loopback ring bound, {n} ranks{with}{order}"), seconds, |_| 0);
    Ok(())
}
