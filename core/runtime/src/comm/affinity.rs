//! Which core each rank of a local launch runs on. When the host has a core for every local rank, each rank
//! is pinned to its own (as `mpirun` binds its ranks by default): two ranks that hand each other small
//! messages lose microseconds on every hand-off the scheduler makes on one core, and on a machine with as
//! many ranks as cores it does so often. With up to two ranks a core, ring neighbours share one (ranks 0 and
//! 1 on the first core, 2 and 3 on the next): left to itself the scheduler wakes a rank on its waker's core
//! while the other core idles (4 rank processes, 256 KiB calls: 1.33 of 2 cores busy and 112 migrations;
//! pinned, 1.68 and 8). Measured on 2 cores, 4 rank processes, AllReduce busbw, pinned against left to the
//! scheduler, medians of interleaved pairs in two sets of 8-10: SHM 1.12-1.60x at 64-512 KiB and 0.91-1.09x
//! from 1 MiB, NET/Socket 0.89-1.32x (most above 1), 8 B-4 KiB calls 0.77-1.03x the time; 4 threads over P2P
//! 0.88-1.23x. A NET proxy thread inherits its rank's core: left free to run on either, 4 ranks read
//! 0.77-0.97x. With more, nothing is pinned: 8 rank processes pinned four a core read 0.82-1.11x, and
//! alternately 0.70-1.31x, so the scheduler spreads them. `COLLSCOPE_BIND=none` turns it off; the default is
//! `core`.

use collscope_debug::env::{Env, EnvError};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;

/// The most ranks a core is pinned (see the module's comment).
const MAX_PER_CORE: usize = 2;

/// The cores each local rank gets (rank `r` on `cpus[r]`), or `None` when ranks are not pinned.
pub fn plan(env: &Env, local_ranks: u32) -> Result<Option<Vec<usize>>, EnvError> {
    match env.str("COLLSCOPE_BIND") {
        None | Some("core") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(EnvError {
                name: "COLLSCOPE_BIND".into(),
                value: other.into(),
                expected: "core (a core per local rank, or one per two, when there are enough) or none".into(),
            })
        }
    }
    Ok(placement(&allowed_cpus(), local_ranks as usize))
}

/// Where `n` ranks go on `cpus`: rank `r` on the `r`-th when there are enough, else consecutive ranks share a
/// core (every core used, at most [`MAX_PER_CORE`] a core); `None` past that.
fn placement(cpus: &[usize], n: usize) -> Option<Vec<usize>> {
    let c = cpus.len();
    let at = |r: usize| if n <= c { r } else { r * c / n };
    (c > 0 && n <= MAX_PER_CORE * c).then(|| (0..n).map(|r| cpus[at(r)]).collect())
}

/// The cores the calling thread may run on, lowest first (all of them when the kernel will not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a `cpu_set_t` of the size given, which the kernel writes at most.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0;
    if !ok {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    // SAFETY: `c < CPU_SETSIZE`, inside the set.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// A set holding only `cpu`, ready for [`pin_to`] (built outside a forked child, where allocating is unsafe).
pub fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: as in `allowed_cpus`; CPU_SET only writes inside the set for `cpu < CPU_SETSIZE`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu < libc::CPU_SETSIZE as usize {
        // SAFETY: `cpu < CPU_SETSIZE`, checked just above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// Pins the calling thread (and the threads it starts later) to `set`. Only a syscall, so a forked child may
/// call it before exec.
pub fn pin_to(set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Pins the calling thread to `cpu` and says so, for local rank `local_rank` (threads launch).
pub fn pin_rank(local_rank: u32, cpu: usize) {
    match pin_to(&cpu_set(cpu)) {
        Ok(()) => nccl_info!(Subsys::INIT, "Setting affinity for local rank {local_rank} to CPU {cpu}"),
        Err(e) => nccl_info!(Subsys::INIT, "Could not set affinity for local rank {local_rank} to CPU {cpu}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current_cpu() -> Option<usize> {
        // SAFETY: no arguments; returns -1 on failure.
        usize::try_from(unsafe { libc::sched_getcpu() }).ok()
    }

    #[test]
    fn ranks_get_their_own_core_or_share_one_with_a_ring_neighbour_and_no_more() {
        let cpus = allowed_cpus();
        let n = cpus.len() as u32;
        let plan_for = |pairs: &[(&str, &str)], ranks| plan(&Env::from_pairs(pairs.iter().copied()), ranks);
        assert_eq!(plan_for(&[], n).unwrap(), Some(cpus.clone()));
        let pairs: Vec<usize> = cpus.iter().flat_map(|&c| [c, c]).collect();
        assert_eq!(plan_for(&[], 2 * n).unwrap(), Some(pairs.clone()), "ring neighbours share a core");
        assert_eq!(plan_for(&[], 2 * n - 1).unwrap().as_deref(), Some(&pairs[..pairs.len() - 1]));
        assert_eq!(plan_for(&[], 2 * n + 1).unwrap(), None, "more than two a core: the scheduler spreads them");
        assert_eq!(plan_for(&[("COLLSCOPE_BIND", "none")], 1).unwrap(), None);
        // Every core takes a rank, ring neighbours together, whatever the counts.
        assert_eq!(placement(&[4, 5, 6], 4), Some(vec![4, 4, 5, 6]));
        assert_eq!(placement(&[4, 5, 6], 2), Some(vec![4, 5]));
        assert_eq!(placement(&[4, 5, 6], 7), None);
        assert_eq!(placement(&[], 1), None);
        let e = plan_for(&[("COLLSCOPE_BIND", "socket")], 1).unwrap_err().to_string();
        assert!(e.contains("COLLSCOPE_BIND") && e.contains("socket") && e.contains("none"), "{e}");
    }

    #[test]
    fn a_pinned_thread_runs_on_its_core_and_its_children_inherit_it() {
        let last = *allowed_cpus().last().expect("at least one core");
        std::thread::spawn(move || {
            pin_rank(0, last);
            assert_eq!(allowed_cpus(), [last]);
            assert_eq!(current_cpu(), Some(last));
            let child = std::thread::spawn(allowed_cpus).join().unwrap();
            assert_eq!(child, [last], "threads a rank starts stay on its core");
        })
        .join()
        .unwrap();
    }
}
