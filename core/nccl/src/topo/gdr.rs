//! Whether a NIC can read and write GPU memory (NCCL 2.28.9 `net_ib.cc` `ncclIbGdrSupport` and
//! `ncclIbDmaBufSupport`, `init.cc` `dmaBufSupported`, `graph/topo.cc` per-HCA line). A NIC supports GPU Direct
//! RDMA through a peer-memory kernel module (its files under /sys), or through DMA-BUF when both the GPU
//! (`NCCL_DMABUF_ENABLE`, driver attribute) and the RDMA stack (`ibv_reg_dmabuf_mr` not answering
//! EOPNOTSUPP/EPROTONOSUPPORT) support it. Whether a given GPU/NIC pair then uses it is the topology's distance
//! rule with `NCCL_NET_GDR_LEVEL`, [`super::check_gdr`]. Pure functions of a sysfs root and of what the runtime
//! probed, so the model and the runtime's NET/IB take the same decision.

use collscope_debug::env::{Env, EnvError};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use std::path::Path;

/// Files whose presence means a peer-memory module is loaded, relative to the filesystem root.
pub const PEER_MEM_FILES: [&str; 3] = [
    "sys/kernel/mm/memory_peers/nv_mem/version",
    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "sys/module/nvidia_peermem/version",
];

/// Whether nv_peer_mem or nvidia_peermem is loaded on the host whose filesystem is at `root`.
pub fn peer_mem_loaded(root: &Path) -> bool {
    PEER_MEM_FILES.iter().any(|f| root.join(f).exists())
}

/// The answer of the DMA-BUF registration probe (`ibv_reg_dmabuf_mr` with fd -1): unsupported when the call
/// fails with EOPNOTSUPP (95) or EPROTONOSUPPORT (93); any other outcome (EBADF) means the stack supports it.
pub fn dmabuf_probe_supported(errno: i32) -> bool {
    !matches!(errno, 93 | 95)
}

/// How a NIC can reach GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicGdr {
    /// A peer-memory module is loaded (NCCL_PTR_CUDA).
    pub peer_mem: bool,
    /// The RDMA stack registers DMA-BUF file descriptors (NCCL_PTR_DMABUF).
    pub dmabuf_nic: bool,
    /// The GPU driver exports DMA-BUF and `NCCL_DMABUF_ENABLE` allows it (the communicator's dmaBufSupport).
    pub dmabuf_gpu: bool,
}

impl NicGdr {
    /// The `gdr` attribute of the NIC's topology node.
    pub fn supported(&self) -> bool {
        self.peer_mem || (self.dmabuf_gpu && self.dmabuf_nic)
    }

    /// How GPU buffers get registered: DMA-BUF first, as NCCL's proxy tries it before peer memory.
    pub fn registration(&self) -> Option<GpuRegistration> {
        if self.dmabuf_gpu && self.dmabuf_nic {
            Some(GpuRegistration::DmaBuf)
        } else if self.peer_mem {
            Some(GpuRegistration::PeerMem)
        } else {
            None
        }
    }

    /// Logs and returns NCCL's per-HCA line, `NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'`.
    pub fn log_line(&self, net: &str, dev: usize, name: &str) -> String {
        let state = if self.supported() { "Enabled" } else { "Disabled" };
        let line = format!("NET/{net} : GPU Direct RDMA {state} for HCA {dev} '{name}'");
        nccl_info!(Subsys::NET, "{line}");
        line
    }
}

/// The way GPU memory is registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuRegistration {
    DmaBuf,
    PeerMem,
}

/// The GPU side of DMA-BUF: `NCCL_DMABUF_ENABLE` (default 1) and the driver's DMA_BUF_SUPPORTED attribute;
/// logs `DMA-BUF is available on GPU device N` when both allow it.
pub fn dmabuf_gpu(env: &Env, cuda_dev: i32, driver_attr: Option<bool>) -> Result<bool, EnvError> {
    if env.int("NCCL_DMABUF_ENABLE", 1)? == 0 || driver_attr != Some(true) {
        return Ok(false);
    }
    nccl_info!(Subsys::INIT, "DMA-BUF is available on GPU device {cuda_dev}");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "1.0\n").unwrap();
    }

    #[test]
    fn peer_memory_modules_on_fake_sys_trees() {
        let bare = tempfile::tempdir().unwrap();
        assert!(!peer_mem_loaded(bare.path()));
        // The legacy module name under /sys/module is not one NCCL 2.28.9 checks.
        touch(bare.path(), "sys/module/nv_peer_mem/version");
        assert!(!peer_mem_loaded(bare.path()));
        for f in PEER_MEM_FILES {
            let t = tempfile::tempdir().unwrap();
            touch(t.path(), f);
            assert!(peer_mem_loaded(t.path()), "{f}");
        }
    }

    #[test]
    fn support_combines_peer_memory_and_dmabuf() {
        let none = NicGdr::default();
        assert!(!none.supported());
        assert_eq!(none.registration(), None);
        assert_eq!(none.log_line("IB", 1, "mlx5_1"), "NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'");
        let nic_only = NicGdr { dmabuf_nic: true, ..none };
        assert!(!nic_only.supported(), "DMA-BUF needs the GPU side too");
        let both = NicGdr { dmabuf_nic: true, dmabuf_gpu: true, ..none };
        assert_eq!(both.registration(), Some(GpuRegistration::DmaBuf));
        let pm = NicGdr { peer_mem: true, ..none };
        assert_eq!(pm.registration(), Some(GpuRegistration::PeerMem));
        assert_eq!(pm.log_line("IB", 0, "mlx5_0"), "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'");
        assert!(dmabuf_probe_supported(9));
        assert!(!dmabuf_probe_supported(95) && !dmabuf_probe_supported(93));
    }

    #[test]
    fn dmabuf_gpu_side() {
        let env = Env::default();
        assert!(dmabuf_gpu(&env, 0, Some(true)).unwrap());
        assert!(!dmabuf_gpu(&env, 0, Some(false)).unwrap());
        assert!(!dmabuf_gpu(&env, 0, None).unwrap());
        assert!(!dmabuf_gpu(&Env::from_pairs([("NCCL_DMABUF_ENABLE", "0")]), 0, Some(true)).unwrap());
        assert!(dmabuf_gpu(&Env::from_pairs([("NCCL_DMABUF_ENABLE", "x")]), 0, Some(true)).is_err());
    }
}
