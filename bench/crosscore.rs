//! How fast bytes one core wrote reach another on this host right now: a thread pinned to the first allowed
//! core writes a 4 MiB buffer, a thread pinned to the second copies it out, round after round, handing the
//! buffer over through one atomic counter. Prints `crosscore_gbps RATE` (bytes copied over the rounds' time).
//!
//! A virtual machine's host may place its two vCPUs far apart (another CCD or socket) for seconds at a time;
//! there the rate falls several times, and with it every shared-memory collective: on the 2-core VM this was
//! written on, 13-26 GB/s, and 1.8-2.9 GB/s in such stretches (a cache line's round trip between the two cores
//! 53 ns, then 335), while one core alone copied as fast as ever and 2-rank AllReduce read 2.1-2.3 GB/s at every
//! size. bench/compare.sh runs it around each benchmark so that compare.py can tell which figures ran in one.
//!
//!     cargo run --release --example crosscore

use collscope_runtime::comm::affinity::{allowed_cpus, cpu_set, pin_to};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const BYTES: usize = 4 << 20;
const ROUNDS: u64 = 50;

/// The writer's buffer, read by the other thread only between the writer's hand-over and its own.
struct Shared(*mut u8);
// SAFETY: the two threads take turns on the buffer, ordered by `turn` (Release after each one's access,
// Acquire before the next).
unsafe impl Sync for Shared {}

impl Shared {
    /// The whole buffer (a method, so closures capture `Shared` and not its raw field).
    fn bytes(&self) -> *mut u8 {
        self.0
    }
}

fn spin_until(turn: &AtomicU64, want: u64) {
    while turn.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
    }
}

fn main() {
    let cpus = allowed_cpus();
    let [a, b, ..] = cpus[..] else {
        println!("crosscore_gbps n/a (one core)");
        return;
    };
    let mut buf = vec![0u8; BYTES];
    let shared = Shared(buf.as_mut_ptr());
    // Odd: the writer's turn for round (turn + 1) / 2; even: the reader's.
    let turn = AtomicU64::new(1);
    // Each thread runs every round whether or not it could be pinned, so neither waits for one that left.
    let (started, pinned) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let pinned = pin_to(&cpu_set(b));
            let mut mine = vec![0u8; BYTES];
            for round in 0..=ROUNDS {
                spin_until(&turn, 2 * round + 2);
                // SAFETY: the writer handed the buffer over and does not touch it until the next turn.
                mine.copy_from_slice(unsafe { std::slice::from_raw_parts(shared.bytes(), BYTES) });
                turn.store(2 * round + 3, Ordering::Release);
            }
            std::hint::black_box(&mine);
            pinned
        });
        let pinned = pin_to(&cpu_set(a));
        let mut started = Instant::now();
        // Round 0 warms both buffers up and is not timed.
        for round in 0..=ROUNDS {
            spin_until(&turn, 2 * round + 1);
            if round == 1 {
                started = Instant::now();
            }
            // SAFETY: the reader finished with the buffer before handing the turn back.
            unsafe { std::ptr::write_bytes(shared.bytes(), round as u8, BYTES) };
            turn.store(2 * round + 2, Ordering::Release);
        }
        spin_until(&turn, 2 * ROUNDS + 3);
        let theirs = reader.join().unwrap_or_else(|_| Err(std::io::Error::other("the reading thread panicked")));
        (started, pinned.and(theirs))
    });
    if let Err(e) = pinned {
        println!("crosscore_gbps n/a (cannot pin the threads to cores {a} and {b}: {e})");
        return;
    }
    let secs = started.elapsed().as_secs_f64();
    println!("crosscore_gbps {:.2}", (BYTES as u64 * ROUNDS) as f64 / secs / 1e9);
}
