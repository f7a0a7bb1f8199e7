//! NET/IB, NCCL's InfiniBand/RoCE network (NCCL 2.28.9 `src/transport/net_ib.cc`). Everything that does not
//! call verbs lives in plain modules that build and test everywhere: the `NCCL_IB_HCA` grammar ([`hca`]), the
//! clear-to-send FIFO and its sender/receiver sequence ([`fifo`]), completion statuses and their usual causes
//! ([`status`]), the `NCCL_IB_*` parameters ([`params`]), the GPU Direct RDMA support checks (`collscope_nccl::topo::gdr`, pure functions of a sysfs root), queue pair
//! attributes and GID choice ([`qp`]), the handle and connection metadata ([`meta`]), the RDMA writes as values
//! ([`wr`]) and the request/completion bookkeeping ([`reqs`]). The `ib` cargo feature adds [`verbs`] (the one
//! module that finds devices), [`rdma`] (the verbs objects of a connection) and [`net`], NET/IB behind the proxy's network interface.

pub(crate) mod fifo;
pub(crate) mod hca;
pub(crate) mod meta;
#[cfg(feature = "ib")]
pub(crate) mod net;
pub(crate) mod params;
pub(crate) mod qp;
#[cfg(feature = "ib")]
pub(crate) mod rdma;
pub(crate) mod reqs;
pub(crate) mod status;
#[cfg(feature = "ib")]
pub(crate) mod verbs;
pub(crate) mod wr;

/// A NET/IB failure: a verbs call, a failed completion, or a peer that does not follow the protocol.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IbError {
    #[error(transparent)]
    Verbs(#[from] status::VerbsError),
    #[error(transparent)]
    Completion(#[from] status::CompletionError),
    #[error(transparent)]
    Fifo(#[from] fifo::FifoError),
    #[error(transparent)]
    Meta(#[from] meta::MetaError),
    #[error(transparent)]
    Request(#[from] reqs::ReqError),
    #[error("NET/IB : out-of-band connection: {0}")]
    Oob(#[from] crate::socket::SocketError),
    #[error("NET/IB : {0}")]
    Setup(String),
}

impl From<IbError> for crate::transport::net::api::NetError {
    fn from(e: IbError) -> Self {
        crate::transport::net::api::NetError::Failed(Box::new(e))
    }
}

/// One port NET/IB uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IbPort {
    pub name: String,
    pub port: u32,
    /// `IB` or `RoCE` (NCCL's `NCCL_IB_LLSTR`).
    pub link: &'static str,
}

/// NCCL's summary line, `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>`, or
/// `NET/IB : No device found.` when no port was kept.
pub(crate) fn using_line(ports: &[IbPort], relaxed_ordering: bool, oob_if: &str, oob_addr: &str) -> String {
    if ports.is_empty() {
        return "NET/IB : No device found.".to_string();
    }
    let list: String =
        ports.iter().enumerate().map(|(i, p)| format!(" [{i}]{}:{}/{}", p.name, p.port, p.link)).collect();
    let ro = if relaxed_ordering { "[RO]" } else { "" };
    format!("NET/IB : Using{list} {ro}; OOB {oob_if}:{oob_addr}")
}

/// NET/IB's row in [`super::NETWORKS`]: built with the `ib` feature; it finds the active RDMA ports.
pub(crate) const NETWORK: super::Network = super::Network {
    name: "IB",
    unbuilt: if cfg!(feature = "ib") { None } else { Some("NET/IB needs collscope built with the `ib` feature") },
    found: found_device,
    missing: "NET/IB found no active RDMA port: check NCCL_IB_HCA, NCCL_IB_DISABLE and ibv_devinfo",
    open: open_net,
};

#[cfg(feature = "ib")]
fn found_device(env: &collscope_debug::env::Env) -> crate::error::Result<bool> {
    Ok(net::IbNet::init(env)?.is_some())
}

#[cfg(not(feature = "ib"))]
fn found_device(_env: &collscope_debug::env::Env) -> crate::error::Result<bool> {
    Ok(false)
}

#[cfg(feature = "ib")]
fn open_net(
    env: &collscope_debug::env::Env,
    rank: u32,
    timeout: std::time::Duration,
) -> crate::error::Result<super::Opened> {
    let net = net::IbNet::init(env)?
        .ok_or_else(|| crate::error::RuntimeError::Transport { transport: "NET/IB", msg: "no device found".into() })?;
    super::open(net, rank, timeout)
}

#[cfg(not(feature = "ib"))]
fn open_net(
    _env: &collscope_debug::env::Env,
    _rank: u32,
    _timeout: std::time::Duration,
) -> crate::error::Result<super::Opened> {
    Err(crate::error::RuntimeError::Transport { transport: "NET/IB", msg: "not built (feature `ib`)".into() })
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
