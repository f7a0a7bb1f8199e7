//! A training-like workload for demos, telemetry and the TUI: each step does what data-parallel training
//! does to the network: a bucketed AllReduce of gradients (DDP), an AllGather of parameter shards and a
//! ReduceScatter of their gradients (FSDP), and small AllReduces (loss, gradient norm, the stop decision).
//! Every result is checked, so the loop doubles as a soak test.

use super::fault::{Fault, Pace};
use collscope_model::RedOp;
use collscope_runtime::{Comm, Registration, SharedBuf};
use collscope_runtime::{Result, RuntimeError};
use std::time::{Duration, Instant};

/// Shape and length of the run.
#[derive(Debug, Clone)]
pub(super) struct TrainingConfig {
    /// Gradient elements (f32) reduced per step by the DDP part.
    pub grad_elems: usize,
    /// DDP bucket size in elements (PyTorch's default bucket is 25 MB).
    pub bucket_elems: usize,
    /// Parameter elements per rank for the FSDP part (gathered to `fsdp_shard * nranks`).
    pub fsdp_shard: usize,
    /// Stop after this many steps...
    pub max_steps: Option<u64>,
    /// ...or once this much time passed (rank 0's clock decides, for everyone).
    pub max_duration: Option<Duration>,
    /// A failure to cause (`demo --fault`).
    pub fault: Option<Fault>,
}

impl Default for TrainingConfig {
    fn default() -> Self {
        TrainingConfig {
            grad_elems: 2 << 20,
            bucket_elems: 256 << 10,
            fsdp_shard: 256 << 10,
            max_steps: None,
            max_duration: Some(Duration::from_secs(15)),
            fault: None,
        }
    }
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StepReport {
    pub step: u64,
    pub secs: f64,
    /// Mean "loss" over ranks (an AllReduce of a scalar).
    pub loss: f32,
    pub collectives: u32,
    /// Bytes this rank handed to collectives (send buffers).
    pub bytes: u64,
}

fn mismatch(what: &str, step: u64, detail: String) -> RuntimeError {
    RuntimeError::Mismatch { what: "training step", detail: format!("step {step}: {what}: {detail}") }
}

/// Runs steps until the configured bound; `on_step` sees each step's report (every rank gets the same
/// number of steps). Returns the reports.
pub(super) fn run_training(
    comm: &mut Comm,
    cfg: &TrainingConfig,
    mut on_step: impl FnMut(&StepReport),
) -> Result<Vec<StepReport>> {
    let n = comm.nranks();
    if cfg.bucket_elems == 0 {
        return Err(mismatch("config", 0, "bucket size must be at least 1 element".into()));
    }
    // The buffers are registered windows, as a PyTorch job hands NCCL memory from its registered pool: rank
    // processes of one host then read and write them in place instead of staging steps ([`Comm::register`]).
    let mut regs = Vec::new();
    let mut grads = registered(comm, cfg.grad_elems, &mut regs)?;
    let mut shard = registered(comm, cfg.fsdp_shard, &mut regs)?;
    let mut full = registered(comm, cfg.fsdp_shard * n as usize, &mut regs)?;
    let mut shard_grad = registered(comm, cfg.fsdp_shard, &mut regs)?;
    let bufs = Bufs {
        grads: grads.as_mut_slice(),
        shard: shard.as_mut_slice(),
        full: full.as_mut_slice(),
        shard_grad: shard_grad.as_mut_slice(),
    };
    let reports = train(comm, cfg, bufs, &mut on_step)?;
    regs.into_iter().try_for_each(|r| comm.deregister(r))?;
    Ok(reports)
}

/// A step's buffers: the gradients (DDP), this rank's parameter shard, the gathered parameters and the shard's
/// reduced gradients (FSDP).
struct Bufs<'a> {
    grads: &'a mut [f32],
    shard: &'a mut [f32],
    full: &'a mut [f32],
    shard_grad: &'a mut [f32],
}

/// A zeroed window of `elems` floats, registered with `comm` (every rank registers the same buffers in turn).
fn registered(comm: &mut Comm, elems: usize, regs: &mut Vec<Registration>) -> Result<SharedBuf> {
    let buf = SharedBuf::new(elems * size_of::<f32>())?;
    regs.push(comm.register(&buf)?);
    Ok(buf)
}

/// The steps of [`run_training`], over its buffers.
fn train(
    comm: &mut Comm,
    cfg: &TrainingConfig,
    Bufs { grads, shard, full, shard_grad }: Bufs,
    on_step: &mut impl FnMut(&StepReport),
) -> Result<Vec<StepReport>> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let start = Instant::now();
    let mut reports = Vec::new();
    let nf = n as f32;
    // Sum over ranks of (r + 1): what a reduced value built from "rank + 1" must be.
    let ranks_sum = (n * (n + 1) / 2) as f32;
    let mut pace = Pace::new(cfg.fault.as_ref(), rank);
    for step in 0.. {
        if let Some(f) = &cfg.fault {
            f.before_step(rank, step);
        }
        let t = Instant::now();
        let (mut colls, mut bytes) = (0u32, 0u64);
        let base = (step % 5) as f32;

        // "Backward": gradients, then the DDP bucketed AllReduce (average).
        for (i, g) in grads.iter_mut().enumerate() {
            *g = base + (rank + 1) as f32 + (i % 3) as f32;
        }
        for bucket in grads.chunks_mut(cfg.bucket_elems) {
            pace.call(|| comm.all_reduce_in_place(bucket, RedOp::Sum))?;
            colls += 1;
            bytes += (bucket.len() * 4) as u64;
        }
        for (i, g) in grads.iter().enumerate().step_by(4093) {
            let want = nf * (base + (i % 3) as f32) + ranks_sum;
            if *g != want {
                return Err(mismatch("gradient AllReduce", step, format!("element {i} is {g}, expected {want}")));
            }
        }

        // FSDP: gather the parameters, then reduce-scatter their gradients.
        shard.iter_mut().for_each(|p| *p = (rank + 1) as f32 + base);
        pace.call(|| comm.all_gather(shard, full))?;
        for (q, block) in full.chunks(cfg.fsdp_shard.max(1)).enumerate() {
            let want = (q + 1) as f32 + base;
            if block.iter().any(|&v| v != want) {
                return Err(mismatch("parameter AllGather", step, format!("block of rank {q} is not {want}")));
            }
        }
        full.iter_mut().for_each(|g| *g = 1.0);
        pace.call(|| comm.reduce_scatter(full, shard_grad, RedOp::Sum))?;
        if shard_grad.iter().any(|&v| v != nf) {
            return Err(mismatch("gradient ReduceScatter", step, format!("expected every element to be {nf}")));
        }
        colls += 2;
        bytes += ((shard.len() + full.len()) * 4) as u64;

        // Small AllReduces: loss and gradient norm, and whether to go on (rank 0's clock decides).
        let done_here = rank == 0
            && (cfg.max_steps.is_some_and(|m| step + 1 >= m) || cfg.max_duration.is_some_and(|d| start.elapsed() >= d));
        let mut small = [(rank + 1) as f32 * 0.5 / (1.0 + step as f32), if done_here { 1.0 } else { 0.0 }];
        if cfg.fault.is_some_and(|f| f.mismatches(rank, step)) {
            pace.call(|| comm.broadcast_in_place(&mut small, 0))?;
        } else {
            pace.call(|| comm.all_reduce_in_place(&mut small, RedOp::Sum))?;
        }
        let mut norm = [grads[0] * grads[0]];
        pace.call(|| comm.all_reduce_in_place(&mut norm, RedOp::Max))?;
        colls += 2;
        bytes += 12;

        let report =
            StepReport { step, secs: t.elapsed().as_secs_f64(), loss: small[0] / nf, collectives: colls, bytes };
        on_step(&report);
        reports.push(report);
        if small[1] > 0.0 {
            break;
        }
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_debug::env::Env;
    use collscope_runtime::CommOptions;

    #[test]
    fn every_rank_runs_the_same_checked_steps() {
        let opts = CommOptions { env: Env::default(), net: None, name: None };
        let comms = Comm::init_threads(3, opts).unwrap();
        let cfg = TrainingConfig {
            grad_elems: 10_000,
            bucket_elems: 3_000,
            fsdp_shard: 1_000,
            max_steps: Some(3),
            max_duration: None,
            fault: None,
        };
        let steps: Vec<Vec<StepReport>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .into_iter()
                .map(|mut c| {
                    let cfg = &cfg;
                    s.spawn(move || run_training(&mut c, cfg, |_| {}).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &steps {
            assert_eq!(r.len(), 3);
            assert_eq!(r[0].collectives, 4 + 2 + 2);
            assert!((r[0].loss - 1.0).abs() < 1e-6, "{}", r[0].loss);
        }
    }
}
