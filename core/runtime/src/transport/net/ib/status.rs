//! Verbs failures in words: work-completion statuses by NCCL's names (NCCL 2.28.9 `net_ib.cc`
//! `ibvWcStatusStr`) with what usually causes them, and failed verbs calls with their errno.

/// `enum ibv_wc_status` values, in libibverbs' numbering.
const NAMES: [&str; 22] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
];

/// NCCL's name of a completion status; `UNKNOWN_STATUS` past the ones NCCL names.
pub(crate) fn wc_status_name(status: u32) -> &'static str {
    match status {
        0..=21 => NAMES[status as usize],
        _ => "UNKNOWN_STATUS",
    }
}

/// What usually makes a completion fail with `status`, for the error a user reads.
pub(crate) fn wc_status_cause(status: u32) -> &'static str {
    match status {
        0 => "no error",
        1 => "the message is longer than the posted receive buffer",
        2 | 3 => "a work request the queue pair cannot carry out (bad opcode or too many scatter entries)",
        4 => "the local buffer is not inside a registered memory region or its lkey is wrong",
        5 => "the queue pair went to the error state after an earlier failure; look at the first error",
        8 => "local memory registered without the access rights the operation needs",
        9 => "the remote side rejected the request (message too long or operation not enabled)",
        10 => "the remote buffer address or rkey is wrong, or the remote region lacks write access",
        11 => "the remote side could not complete the operation (its queue pair failed)",
        12 => {
            "no acknowledgement after NCCL_IB_RETRY_CNT retries: the peer died, the link is down, or \
               NCCL_IB_TIMEOUT is too short for this fabric; on RoCE check NCCL_IB_GID_INDEX and the switch config"
        }
        13 => "the receiver had no receive posted after all RNR retries",
        19 => "the adapter hit a fatal error; check dmesg and the port state",
        20 => "the response to a request timed out",
        _ => "an adapter or transport error; check the port state and dmesg",
    }
}

/// A verbs call that failed, with the errno it set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NET/IB : {call} failed: {} (errno {errno}); {}", std::io::Error::from_raw_os_error(*errno), call_cause(call, *errno))]
pub(crate) struct VerbsError {
    pub call: &'static str,
    pub errno: i32,
}

/// A completion that did not succeed, as NCCL's WARN words it plus the usual cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NET/IB: Got completion from peer {peer} with status={}({status}) opcode={opcode} reqSize={size} vendor_err={vendor_err} hca {hca}: {}", wc_status_name(*status), wc_status_cause(*status))]
pub(crate) struct CompletionError {
    pub peer: String,
    pub status: u32,
    pub opcode: u32,
    pub size: u32,
    pub vendor_err: u32,
    pub hca: String,
}

/// What usually makes `call` fail with `errno`.
pub(crate) fn call_cause(call: &str, errno: i32) -> &'static str {
    match (call, errno) {
        ("ibv_reg_mr" | "ibv_reg_dmabuf_mr", libc_errno::ENOMEM) => {
            "cannot pin the memory: raise the locked-memory limit (ulimit -l unlimited)"
        }
        ("ibv_reg_dmabuf_mr", libc_errno::EOPNOTSUPP | libc_errno::EPROTONOSUPPORT) => {
            "the kernel or driver lacks DMA-BUF support for RDMA"
        }
        ("ibv_reg_mr", libc_errno::EFAULT) => {
            "the address is not host memory the kernel can pin (GPU memory needs nvidia-peermem or DMA-BUF)"
        }
        ("ibv_modify_qp", libc_errno::EINVAL) => {
            "a queue pair attribute the port refuses: wrong NCCL_IB_GID_INDEX, MTU, or traffic class"
        }
        ("ibv_modify_qp", libc_errno::ETIMEDOUT) => "the peer's port is unreachable",
        ("ibv_create_qp" | "ibv_create_cq", libc_errno::ENOMEM) => "the adapter is out of queue resources",
        ("ibv_post_send" | "ibv_post_recv", libc_errno::ENOMEM) => "the send or receive queue is full",
        ("ibv_open_device" | "ibv_get_device_list", libc_errno::EPERM | libc_errno::EACCES) => {
            "no permission on /dev/infiniband: check the device node permissions"
        }
        ("ibv_open_device", libc_errno::ENODEV) => "no RDMA device of that name: check NCCL_IB_HCA and ibv_devinfo",
        (_, libc_errno::ENODEV) => "the device went away (driver reset or hot unplug)",
        _ => "see the verbs man page for this call",
    }
}

/// The errno values the causes name (Linux numbering, so the table builds without libc).
mod libc_errno {
    pub(super) const EPERM: i32 = 1;
    pub(super) const ENOMEM: i32 = 12;
    pub(super) const EACCES: i32 = 13;
    pub(super) const EFAULT: i32 = 14;
    pub(super) const ENODEV: i32 = 19;
    pub(super) const EINVAL: i32 = 22;
    pub(super) const EPROTONOSUPPORT: i32 = 93;
    pub(super) const EOPNOTSUPP: i32 = 95;
    pub(super) const ETIMEDOUT: i32 = 110;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_libibverbs_numbering() {
        assert_eq!(wc_status_name(0), "IBV_WC_SUCCESS");
        assert_eq!(wc_status_name(5), "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(wc_status_name(12), "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(wc_status_name(21), "IBV_WC_GENERAL_ERR");
        assert_eq!(wc_status_name(22), "UNKNOWN_STATUS");
        assert!(wc_status_cause(12).contains("NCCL_IB_TIMEOUT"));
    }

    #[test]
    fn errors_name_call_status_and_cause() {
        let e = VerbsError { call: "ibv_reg_mr", errno: 12 };
        let s = e.to_string();
        assert!(s.starts_with("NET/IB : ibv_reg_mr failed: "), "{s}");
        assert!(s.contains("errno 12") && s.contains("ulimit -l"), "{s}");
        let c = CompletionError {
            peer: "10.0.0.2<40312>".into(),
            status: 10,
            opcode: 1,
            size: 4096,
            vendor_err: 136,
            hca: "mlx5_0".into(),
        };
        let s = c.to_string();
        assert!(s.contains("status=IBV_WC_REM_ACCESS_ERR(10)") && s.contains("rkey"), "{s}");
    }
}
