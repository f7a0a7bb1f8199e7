//! The CUDA driver and its GPUs: loaded on first use, checked with `is_culib_present` first because cudarc
//! panics when libcuda is missing, and the facts the topology needs (NCCL 2.28.9 `graph/topo.cc` GPU nodes:
//! bus id, SM version, and P2P reachability between GPUs, here from `cuDeviceCanAccessPeer` and the
//! P2P performance rank, since cudarc has no NVML).

use super::CudaError;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use cudarc::driver::{sys, CudaContext};
use std::sync::{Arc, OnceLock};

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub dev: usize,
    pub name: String,
    /// NCCL's form, `0000:19:00.0`.
    pub bus_id: String,
    /// Compute capability as NCCL's `sm` attribute (major*10+minor).
    pub sm: u32,
    pub sm_count: u32,
    pub total_mem: usize,
    /// Devices this one reads and writes directly, with the driver's P2P performance rank.
    pub p2p: Vec<(usize, i32)>,
}

pub(crate) fn drv(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::DriverFailed { call, source: Box::new(e) }
}

/// NCCL's bus id text from the PCI domain, bus and device numbers.
pub fn bus_id(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:04x}:{bus:02x}:{device:02x}.0")
}

/// Whether libcuda can be loaded; the first negative answer logs NCCL-style that collscope runs on host memory.
pub fn driver() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: only tries to dlopen libcuda; calls nothing in it.
        let present = unsafe { sys::is_culib_present() };
        if !present {
            nccl_info!(Subsys::INIT, "No CUDA driver found (libcuda.so not loadable): using host memory");
        }
        present
    })
}

/// A context on GPU `dev`, after checking the driver.
pub fn context(dev: usize) -> Result<Arc<CudaContext>, CudaError> {
    if !driver() {
        return Err(CudaError::NoDriver);
    }
    CudaContext::new(dev).map_err(drv("cuCtxCreate"))
}

/// Every GPU the driver sees, with its facts; empty without a driver.
pub fn gpus() -> Result<Vec<GpuInfo>, CudaError> {
    if !driver() {
        return Ok(Vec::new());
    }
    let n = CudaContext::device_count().map_err(drv("cuDeviceGetCount"))? as usize;
    let mut out = Vec::with_capacity(n);
    for dev in 0..n {
        let ctx = CudaContext::new(dev).map_err(drv("cuCtxCreate"))?;
        let attr = |a| ctx.attribute(a).map_err(drv("cuDeviceGetAttribute"));
        use sys::CUdevice_attribute as A;
        let (major, minor) = ctx.compute_capability().map_err(drv("cuDeviceGetAttribute"))?;
        let mut p2p = Vec::new();
        for peer in (0..n).filter(|&p| p != dev) {
            let other = CudaContext::new(peer).map_err(drv("cuCtxCreate"))?;
            let mut can = 0i32;
            let mut rank = 0i32;
            // SAFETY: both handles come from the driver for existing ordinals; out-pointers are live locals.
            unsafe {
                sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), other.cu_device())
                    .result()
                    .map_err(drv("cuDeviceCanAccessPeer"))?;
                if can != 0 {
                    sys::cuDeviceGetP2PAttribute(
                        &mut rank,
                        sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
                        ctx.cu_device(),
                        other.cu_device(),
                    )
                    .result()
                    .map_err(drv("cuDeviceGetP2PAttribute"))?;
                    p2p.push((peer, rank));
                }
            }
        }
        out.push(GpuInfo {
            dev,
            name: ctx.name().map_err(drv("cuDeviceGetName"))?,
            bus_id: bus_id(
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
            ),
            sm: (major * 10 + minor) as u32,
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            total_mem: ctx.total_mem().map_err(drv("cuDeviceTotalMem"))?,
            p2p,
        });
    }
    Ok(out)
}

/// Whether the driver supports DMA-BUF export on `dev` (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
pub fn dmabuf_supported(ctx: &CudaContext) -> bool {
    ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).is_ok_and(|v| v != 0)
}

/// `COLLSCOPE_ALLOW_SHARED_GPU=1` lets several ranks of one process use one GPU (for one-GPU test machines);
/// otherwise a second rank on a GPU is an error naming the setting.
pub fn check_shared(env: &collscope_debug::env::Env, rank_devs: &[usize]) -> Result<(), CudaError> {
    let allow = env.int("COLLSCOPE_ALLOW_SHARED_GPU", 0)? != 0;
    let mut seen = std::collections::HashSet::new();
    for (rank, dev) in rank_devs.iter().enumerate() {
        if !seen.insert(*dev) && !allow {
            return Err(CudaError::Usage(format!(
                "rank {rank} would share GPU {dev} with another rank; set COLLSCOPE_ALLOW_SHARED_GPU=1 to allow it"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_like_nccl() {
        assert_eq!(bus_id(0, 0x19, 0), "0000:19:00.0");
        assert_eq!(bus_id(1, 0xdb, 0x1f), "0001:db:1f.0");
    }

    #[test]
    fn shared_gpu_needs_the_setting() {
        let env = collscope_debug::env::Env::default();
        assert!(check_shared(&env, &[0, 1]).is_ok());
        let e = check_shared(&env, &[0, 0]).unwrap_err();
        assert!(e.to_string().contains("COLLSCOPE_ALLOW_SHARED_GPU=1"), "{e}");
        let env = collscope_debug::env::Env::from_pairs([("COLLSCOPE_ALLOW_SHARED_GPU", "1")]);
        assert!(check_shared(&env, &[0, 0, 0]).is_ok());
    }

    /// Without a driver the list is empty and nothing panics; with one, every GPU has sane facts.
    #[test]
    fn detection_never_panics() {
        let gpus = gpus().unwrap();
        assert_eq!(gpus.is_empty(), !driver());
        for g in gpus {
            assert!(g.sm >= 30 && g.sm_count > 0 && g.total_mem > 0, "{g:?}");
        }
    }
}
