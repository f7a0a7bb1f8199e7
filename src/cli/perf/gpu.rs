//! `collscope perf <bench> --memory gpu`: the benchmark on device buffers, ranks of this process on the GPUs
//! (`COLLSCOPE_GPUS=0,1,...`, default one GPU per rank; several ranks on one GPU need
//! `COLLSCOPE_ALLOW_SHARED_GPU=1`). Prints nccl-tests' columns with the GPU time from CUDA events.

use super::PerfArgs;
use anyhow::{bail, Result};
use clap::ValueEnum;

/// Where perf's buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Memory {
    Host,
    Gpu,
}

#[cfg(not(feature = "cuda"))]
pub fn perf(_args: &PerfArgs, _sizes: &[usize]) -> Result<()> {
    bail!("--memory gpu needs collscope built with the `cuda` feature")
}

#[cfg(feature = "cuda")]
pub(super) fn perf(args: &PerfArgs, sizes: &[usize]) -> Result<()> {
    use collscope_debug::env::Env;
    use collscope_model::DataType;
    use collscope_runtime::comm::kernel_op;
    use collscope_runtime::cuda::{collective::GpuGroup, device};

    if !device::driver() {
        bail!("--memory gpu needs the CUDA driver (libcuda.so), which this machine does not have");
    }
    let env = Env::from_process();
    let gpus = device::gpus()?;
    if gpus.is_empty() {
        bail!("--memory gpu: the CUDA driver reports no GPU");
    }
    let devs = gpu_list(&env, args.ranks()? as usize, gpus.len())?;
    for g in &gpus {
        println!(
            "#  GPU {} {} busId {} sm {} SMs {} mem {} MiB p2p {:?}",
            g.dev,
            g.name,
            g.bus_id,
            g.sm,
            g.sm_count,
            g.total_mem >> 20,
            g.p2p
        );
    }
    let group = GpuGroup::new(&env, &devs)?;
    let op = kernel_op(args.op);
    println!("#  Rank devices {devs:?}, paths {:?}", group.paths().iter().map(|p| p.as_str()).collect::<Vec<_>>());
    println!(
        "#  {:>10} {:>12} {:>8} {:>6} {:>12} {:>12} {:>8} {:>8} {:>8}  GPU time per iteration (ms, CUDA events)",
        "size", "count", "type", "redop", "time(us)", "wall(us)", "algbw", "busbw", "#wrong"
    );
    macro_rules! by_type {
        ($($dt:ident => $t:ty),+) => {
            match args.datatype { $(DataType::$dt => sizes.iter().try_for_each(|&s| size_typed::<$t>(args, &group, s, op)),)+ }
        };
    }
    by_type!(I8 => i8, U8 => u8, I32 => i32, U32 => u32, I64 => i64, U64 => u64, F16 => half::f16,
        F32 => f32, F64 => f64, Bf16 => half::bf16)?;
    Ok(())
}

/// `COLLSCOPE_GPUS` or rank r on GPU r.
#[cfg(feature = "cuda")]
fn gpu_list(env: &collscope_debug::env::Env, nranks: usize, ngpus: usize) -> Result<Vec<usize>> {
    let devs: Vec<usize> = match env.str("COLLSCOPE_GPUS") {
        Some(list) => list
            .split(',')
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .map_err(|_| anyhow::anyhow!("COLLSCOPE_GPUS='{list}': expected GPU numbers like 0,0,1"))
            })
            .collect::<Result<_>>()?,
        None => (0..nranks).collect(),
    };
    if let Some(bad) = devs.iter().find(|&&d| d >= ngpus) {
        bail!("GPU {bad} does not exist: the driver reports {ngpus} GPU(s); set COLLSCOPE_GPUS, e.g. COLLSCOPE_GPUS=0,0 with COLLSCOPE_ALLOW_SHARED_GPU=1");
    }
    Ok(devs)
}

#[cfg(feature = "cuda")]
fn size_typed<T: collscope_kernels::Element>(
    args: &PerfArgs,
    group: &collscope_runtime::cuda::collective::GpuGroup,
    bytes: usize,
    op: collscope_kernels::Op,
) -> Result<()> {
    use collscope_runtime::cuda::buffer::{element_bytes, DeviceBuffer};
    let n = group.nranks();
    let count = bytes / std::mem::size_of::<T>();
    let inputs: Vec<Vec<T>> = (0..n).map(|r| (0..count).map(|i| T::from_index(i + r)).collect()).collect();
    let fresh = |r: usize| DeviceBuffer::from_elements(&group.rank_stream(r), &inputs[r]);
    let mut bufs = (0..n).map(fresh).collect::<Result<Vec<_>, _>>()?;
    for _ in 0..args.warmup {
        group.all_reduce(&mut bufs, op)?.wait()?;
    }
    let mut gpu_ms = Vec::with_capacity(args.iters);
    let wall = std::time::Instant::now();
    // Queue every iteration first (asynchronous like NCCL calls), then read the events.
    let timed = (0..args.iters).map(|_| group.all_reduce(&mut bufs, op)).collect::<Result<Vec<_>, _>>()?;
    for t in &timed {
        gpu_ms.push(t.wait()?.ms);
    }
    let wall_us = wall.elapsed().as_secs_f64() * 1e6 / args.iters as f64;
    let gpu_us = gpu_ms.iter().map(|&m| f64::from(m)).sum::<f64>() * 1e3 / args.iters.max(1) as f64;
    let algbw = bytes as f64 / gpu_us / 1e3;
    let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
    // One checked AllReduce on fresh inputs.
    let mut check = (0..n).map(fresh).collect::<Result<Vec<_>, _>>()?;
    group.all_reduce(&mut check, op)?.wait()?;
    let mut want = inputs[0].clone();
    for other in &inputs[1..] {
        let acc = want.clone();
        collscope_kernels::reduce(op, &mut want, &acc, other);
    }
    collscope_kernels::divide(op, &mut want, n as u32);
    let wrong =
        check.iter().filter(|b| b.to_host(&group.rank_stream(0)).map_or(true, |h| h != element_bytes(&want))).count();
    let stamps: Vec<String> = gpu_ms.iter().take(8).map(|m| format!("{m:.3}")).collect();
    println!(
        "   {:>10} {:>12} {:>8} {:>6} {:>12.1} {:>12.1} {:>8.2} {:>8.2} {:>8}  [{}]",
        bytes,
        count,
        format!("{:?}", T::DTYPE).to_lowercase(),
        format!("{op:?}").to_lowercase(),
        gpu_us,
        wall_us,
        algbw,
        busbw,
        wrong,
        stamps.join(" ")
    );
    Ok(())
}
