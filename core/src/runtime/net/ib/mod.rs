//! NET/IB, NCCL's InfiniBand/RoCE network (NCCL 2.28.9 `src/transport/net_ib.cc`). Everything that does not
//! call verbs lives in plain modules that build and test everywhere: the `NCCL_IB_HCA` grammar ([`hca`]), the
//! clear-to-send FIFO entry ([`fifo`]), completion statuses and their usual causes ([`status`]), the
//! `NCCL_IB_*` parameters ([`params`]) and the GPU Direct RDMA support checks ([`gdr`]). The `ib` cargo feature
//! adds [`verbs`]: device discovery, RC queue pairs, memory registration and RDMA WRITE with immediate.

pub mod fifo;
pub mod gdr;
pub mod hca;
pub mod params;
pub mod status;
#[cfg(feature = "ib")]
pub mod verbs;

/// One port NET/IB uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPort {
    pub name: String,
    pub port: u32,
    /// `IB` or `RoCE` (NCCL's `NCCL_IB_LLSTR`).
    pub link: &'static str,
}

/// NCCL's summary line, `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>`, or
/// `NET/IB : No device found.` when no port was kept.
pub fn using_line(ports: &[IbPort], relaxed_ordering: bool, oob_if: &str, oob_addr: &str) -> String {
    if ports.is_empty() {
        return "NET/IB : No device found.".to_string();
    }
    let list: String =
        ports.iter().enumerate().map(|(i, p)| format!(" [{i}]{}:{}/{}", p.name, p.port, p.link)).collect();
    let ro = if relaxed_ordering { "[RO]" } else { "" };
    format!("NET/IB : Using{list} {ro}; OOB {oob_if}:{oob_addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_using_line() {
        let ports = [
            IbPort { name: "mlx5_0".into(), port: 1, link: "IB" },
            IbPort { name: "mlx5_1".into(), port: 1, link: "RoCE" },
        ];
        assert_eq!(
            using_line(&ports, true, "eth0", "10.0.0.1<0>"),
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"
        );
        assert_eq!(
            using_line(&ports[..1], false, "ib0", "10.1.0.1<0>"),
            "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>"
        );
        assert_eq!(using_line(&[], true, "eth0", "x"), "NET/IB : No device found.");
    }
}
