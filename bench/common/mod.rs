//! What the overhead benches share: AllReduce timed on every rank of a set of communicators at once, and the
//! quantiles of their rounds.

use collscope_model::RedOp;
use collscope_runtime::comm::affinity;
use collscope_runtime::comm::Comm;
use std::time::Instant;

/// Seconds per call of `iters` AllReduces of `elems` f32 on every rank at once, each rank a thread pinned to
/// its core of `cpus` (as collscope's own launcher runs ranks when the cores suffice).
pub(crate) fn run(comms: &mut [Comm], cpus: &Option<Vec<usize>>, elems: usize, iters: usize) -> f64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (r, c) in comms.iter_mut().enumerate() {
            s.spawn(move || {
                if let Some(cpus) = cpus {
                    affinity::pin_rank(r as u32, cpus[r]);
                }
                let send = vec![1.0f32; elems];
                let mut recv = vec![0.0f32; elems];
                for _ in 0..iters {
                    c.all_reduce(&send, &mut recv, RedOp::Sum).expect("allreduce");
                }
            });
        }
    });
    t0.elapsed().as_secs_f64() / iters as f64
}

/// The value at fraction `q` of `v` (sorted in place; nearest rank).
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}
