//! AllReduce over GPUs of one process: the data path for ranks that live in one process, each on its GPU
//! (several on one GPU only with `COLLSCOPE_ALLOW_SHARED_GPU=1`). Rank buffers move by CUDA P2P copies where
//! the driver allows peer access, by device-to-device copies on a shared GPU, and otherwise through host memory.
//! The work is queued on rank 0's stream between two events, so a call returns before the GPU is done (like an
//! NCCL call) and its record gets GPU timestamps.
//!
//! The algorithm is reduce-to-root then broadcast: every peer buffer is copied next to rank 0's, reduced into
//! it by the NVRTC kernel, and the result copied back out.

use super::buffer::DeviceBuffer;
use super::device::{self, drv};
use super::kernels::{GpuKernels, Timed};
use super::CudaError;
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_kernels::Op;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::sync::Arc;

/// How data moves between two ranks' GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPath {
    /// Same GPU: device-to-device copy.
    Local,
    /// Different GPUs with peer access: CUDA P2P copy.
    P2p,
    /// Different GPUs without peer access: through host memory.
    Host,
}

impl GpuPath {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuPath::Local => "P2P/local",
            GpuPath::P2p => "P2P/CUDA",
            GpuPath::Host => "SHM/host",
        }
    }
}

/// The GPUs of an in-process group of ranks, with rank 0's stream and kernels.
pub struct GpuGroup {
    devs: Vec<usize>,
    ctxs: Vec<Arc<CudaContext>>,
    paths: Vec<GpuPath>,
    stream: Arc<CudaStream>,
    kernels: GpuKernels,
}

impl GpuGroup {
    /// Ranks `0..devs.len()` on the GPUs `devs`; enables peer access from rank 0's GPU where allowed and logs
    /// each rank's path as NCCL logs channels, `Channel 00 : 1[1] -> 0[0] via P2P/CUDA`.
    pub fn new(env: &Env, devs: &[usize]) -> Result<GpuGroup, CudaError> {
        if devs.is_empty() {
            return Err(CudaError::Usage("a GPU group needs at least one rank".into()));
        }
        device::check_shared(env, devs)?;
        let ctxs = devs.iter().map(|&d| device::context(d)).collect::<Result<Vec<_>, _>>()?;
        let root = &ctxs[0];
        let mut paths = Vec::with_capacity(devs.len());
        for (r, ctx) in ctxs.iter().enumerate() {
            let path = if devs[r] == devs[0] {
                GpuPath::Local
            } else if peer_access(root, ctx)? {
                GpuPath::P2p
            } else {
                GpuPath::Host
            };
            if r > 0 {
                nccl_info!(Subsys::P2P, "Channel 00 : {r}[{}] -> 0[{}] via {}", devs[r], devs[0], path.as_str());
            }
            paths.push(path);
        }
        let stream = root.new_stream().map_err(drv("cuStreamCreate"))?;
        let kernels = GpuKernels::load(root)?;
        Ok(GpuGroup { devs: devs.to_vec(), ctxs, paths, stream, kernels })
    }

    pub fn nranks(&self) -> usize {
        self.devs.len()
    }

    pub fn paths(&self) -> &[GpuPath] {
        &self.paths
    }

    /// A stream of rank `r`'s context, for allocating its buffers.
    pub fn rank_stream(&self, r: usize) -> Arc<CudaStream> {
        self.ctxs[r].default_stream()
    }

    /// Queues an AllReduce of `bufs` (one per rank, equal size and type) and returns its timing events.
    pub fn all_reduce(&self, bufs: &mut [DeviceBuffer], op: Op) -> Result<Timed, CudaError> {
        if bufs.len() != self.nranks() {
            return Err(CudaError::Usage(format!("{} buffers for {} ranks", bufs.len(), self.nranks())));
        }
        let (dtype, count) = (bufs[0].dtype(), bufs[0].count());
        if bufs.iter().any(|b| b.dtype() != dtype || b.count() != count) {
            return Err(CudaError::Usage("AllReduce buffers differ in type or length".into()));
        }
        let s = &self.stream;
        // Earlier work on the ranks' own streams comes first.
        for r in 0..self.nranks() {
            self.rank_stream(r).synchronize().map_err(drv("cuStreamSynchronize"))?;
        }
        let timed = Timed::start(&self.ctxs[0], s)?;
        let mut scratch = DeviceBuffer::zeros(s, dtype, count)?;
        let (root, peers) = bufs.split_at_mut(1);
        let root = &mut root[0];
        for (i, peer) in peers.iter().enumerate() {
            self.move_data(i + 1, &mut scratch, peer)?;
            let acc = DeviceBuffer::from_device(s, root)?;
            self.kernels.reduce(s, op, root, &acc, &scratch)?;
        }
        if op == Op::Avg && self.nranks() > 1 {
            self.kernels.divide(s, root, self.nranks() as u32)?;
        }
        for (i, peer) in peers.iter_mut().enumerate() {
            self.move_data(i + 1, peer, root)?;
        }
        timed.stop(s)
    }

    /// Copies `src` into `dst` across rank `r`'s path on the group stream.
    fn move_data(&self, r: usize, dst: &mut DeviceBuffer, src: &DeviceBuffer) -> Result<(), CudaError> {
        match self.paths[r] {
            GpuPath::Local | GpuPath::P2p => dst.copy_from(&self.stream, src),
            GpuPath::Host => {
                let host = src.to_host(&self.stream)?;
                dst.copy_from_host(&self.stream, &host)
            }
        }
    }
}

/// Whether `a`'s GPU can map `b`'s memory; enables it when so.
fn peer_access(a: &Arc<CudaContext>, b: &Arc<CudaContext>) -> Result<bool, CudaError> {
    let mut can = 0i32;
    // SAFETY: device handles from live contexts; `can` is a live out-parameter.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
        .result()
        .map_err(drv("cuDeviceCanAccessPeer"))?;
    if can == 0 {
        return Ok(false);
    }
    a.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    // SAFETY: `b` is a live context; enabling twice answers PEER_ACCESS_ALREADY_ENABLED, which is success here.
    let r = unsafe { sys::cuCtxEnablePeerAccess(b.cu_ctx(), 0) };
    if r != sys::CUresult::CUDA_SUCCESS && r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Err(CudaError::Driver { call: "cuCtxEnablePeerAccess", msg: format!("{r:?}") });
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::buffer::element_bytes;
    use super::*;

    /// Four ranks on GPU 0 (the explicit setting) reduce to the CPU kernels' answer; skipped without a driver.
    #[test]
    fn shared_gpu_all_reduce_matches_cpu() {
        if !device::driver() || device::gpus().map_or(true, |g| g.is_empty()) {
            eprintln!("skipped: no GPU");
            return;
        }
        assert!(GpuGroup::new(&Env::default(), &[0, 0]).is_err(), "sharing a GPU needs the setting");
        let env = Env::from_pairs([("COLLSCOPE_ALLOW_SHARED_GPU", "1")]);
        let g = GpuGroup::new(&env, &[0, 0, 0, 0]).unwrap();
        let n = 4099;
        let inputs: Vec<Vec<f32>> = (0..4).map(|r| (0..n).map(|i| ((i + r) % 13) as f32).collect()).collect();
        let mut bufs: Vec<DeviceBuffer> = inputs
            .iter()
            .enumerate()
            .map(|(r, v)| DeviceBuffer::from_elements(&g.rank_stream(r), v).unwrap())
            .collect();
        let t = g.all_reduce(&mut bufs, Op::Sum).unwrap();
        assert!(t.wait().unwrap().ms >= 0.0);
        let want: Vec<f32> = (0..n).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
        for b in &bufs {
            assert_eq!(b.to_host(&g.rank_stream(0)).unwrap(), element_bytes(&want));
        }
    }
}
