//! The verbs objects of a NET/IB connection as owned Rust values (feature `ib`, libibverbs through
//! `ibverbs-sys`): an opened HCA with its protection domain, a completion queue, an RC queue pair taken through
//! INIT -> RTR -> RTS with the attributes of [`super::qp`], memory regions, and the posting of the RDMA writes
//! of [`super::wr`]. The safe `ibverbs` crate has no RDMA WRITE WITH IMMEDIATE, so this module calls the FFI
//! directly; it is the only place of NET/IB with `unsafe`. Every failure names the verbs call and its errno.

use super::meta::{LINK_LAYER_ETHERNET, LINK_LAYER_IB};
use super::params::IbParams;
use super::qp::{self, GidEntry, InitAttrs, LocalPort, Route, RtrAttrs, RtsAttrs};
use super::reqs::{Completion, WcOpcode};
use super::status::VerbsError;
use super::wr::{Opcode, WriteWr};
use ibverbs_sys as ffi;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(call: &'static str, rc: c_int) -> Result<(), VerbsError> {
    // Verbs calls return the errno itself (modify_qp, post_send) or -1 with errno set.
    match rc {
        0 => Ok(()),
        r if r < 0 => Err(VerbsError { call, errno: errno() }),
        r => Err(VerbsError { call, errno: r }),
    }
}

/// An opened HCA port: context, protection domain and what connections need of the port.
pub(crate) struct Device {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    pub(crate) name: String,
    pub(crate) port: LocalPort,
    pub(crate) lid: u16,
    pub(crate) link_layer: u8,
}

// SAFETY: libibverbs objects may be used from any thread; the context and PD are only freed on drop.
unsafe impl Send for Device {}
// SAFETY: as for `Send`: libibverbs objects may be used from any thread.
unsafe impl Sync for Device {}

impl Device {
    /// Opens port `port` of HCA `name` and picks its GID index (`NCCL_IB_GID_INDEX` or NCCL's scan).
    pub(crate) fn open(name: &str, port: u8, params: &IbParams) -> Result<Arc<Device>, VerbsError> {
        let mut n = 0;
        // SAFETY: returns a NULL-terminated array (or NULL) freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError { call: "ibv_get_device_list", errno: errno() });
        }
        let mut ctx = ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n entries; each device has a NUL-terminated name.
            let dev = unsafe { *list.add(i) };
            // SAFETY: `dev` is a device of the list; its name is NUL-terminated.
            let this = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if this.to_bytes() == name.as_bytes() {
                // SAFETY: dev is valid until the list is freed; the context outlives the list.
                ctx = unsafe { ffi::ibv_open_device(dev) };
                if ctx.is_null() {
                    let e = VerbsError { call: "ibv_open_device", errno: errno() };
                    // SAFETY: `list` came from ibv_get_device_list and is freed once, here before returning.
                    unsafe { ffi::ibv_free_device_list(list) };
                    return Err(e);
                }
                break;
            }
        }
        // SAFETY: list came from ibv_get_device_list.
        unsafe { ffi::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(VerbsError { call: "ibv_open_device", errno: 19 });
        }
        // SAFETY: ctx is open.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            let e = VerbsError { call: "ibv_alloc_pd", errno: errno() };
            // SAFETY: `ctx` was opened above and nothing else holds it.
            unsafe { ffi::ibv_close_device(ctx) };
            return Err(e);
        }
        let mut d = Device {
            ctx,
            pd,
            name: name.to_string(),
            port: LocalPort { port, active_mtu: 0, gid_index: 0, gid: [0; 16] },
            lid: 0,
            link_layer: LINK_LAYER_IB,
        };
        let mut pa = ffi::ibv_port_attr::default();
        // SAFETY: ctx is open; pa is a live out-parameter of the layout the compat symbol fills.
        check("ibv_query_port", unsafe {
            ffi::ibv_query_port(ctx, port, &mut pa as *mut ffi::ibv_port_attr as *mut _)
        })?;
        d.port.active_mtu = pa.active_mtu as u8;
        d.lid = pa.lid;
        d.link_layer =
            if u32::from(pa.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET { LINK_LAYER_ETHERNET } else { LINK_LAYER_IB };
        let table = (0..pa.gid_tbl_len.max(0) as usize)
            .map(|i| {
                Ok(GidEntry { gid: d.gid(i)?, roce_version: qp::roce_version(Path::new("/"), name, port.into(), i) })
            })
            .collect::<Result<Vec<_>, VerbsError>>()?;
        let index = qp::select_gid_index(params, d.link_layer == LINK_LAYER_ETHERNET, &table);
        d.port.gid_index = u8::try_from(index).map_err(|_| VerbsError { call: "ibv_query_gid", errno: 22 })?;
        d.port.gid = d.gid(index)?;
        Ok(Arc::new(d))
    }

    fn gid(&self, index: usize) -> Result<[u8; 16], VerbsError> {
        let mut g = ffi::ibv_gid::default();
        // SAFETY: ctx is open; g is a live out-parameter.
        check("ibv_query_gid", unsafe { ffi::ibv_query_gid(self.ctx, self.port.port, index as c_int, &mut g) })?;
        // SAFETY: every bit pattern is a valid raw GID.
        Ok(unsafe { g.raw })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: everything allocated from the PD belongs to objects holding an Arc of this device, gone now.
        unsafe {
            ffi::ibv_dealloc_pd(self.pd);
            ffi::ibv_close_device(self.ctx);
        }
    }
}

/// A completion queue.
pub(crate) struct Cq {
    cq: *mut ffi::ibv_cq,
    _dev: Arc<Device>,
}

// SAFETY: as for `Device`.
unsafe impl Send for Cq {}

impl Cq {
    pub(crate) fn new(dev: &Arc<Device>, entries: u32) -> Result<Cq, VerbsError> {
        // SAFETY: the context is open; no channel, vector 0.
        let cq = unsafe { ffi::ibv_create_cq(dev.ctx, entries as c_int, ptr::null_mut(), ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(VerbsError { call: "ibv_create_cq", errno: errno() });
        }
        Ok(Cq { cq, _dev: dev.clone() })
    }

    /// Up to 4 completions (as NCCL polls), without blocking.
    pub(crate) fn poll(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        let mut wcs = [ffi::ibv_wc::default(); 4];
        // SAFETY: the CQ is live; its context's ops table is filled by the provider.
        let n = unsafe {
            let ops = &mut (*(*self.cq).context).ops;
            match ops.poll_cq {
                Some(poll) => poll(self.cq, wcs.len() as c_int, wcs.as_mut_ptr()),
                None => return Err(VerbsError { call: "ibv_poll_cq", errno: 95 }),
            }
        };
        if n < 0 {
            return Err(VerbsError { call: "ibv_poll_cq", errno: errno() });
        }
        out.extend(wcs[..n as usize].iter().map(|wc| {
            let (status, vendor_err) = wc.error().unwrap_or((0, 0));
            Completion {
                wr_id: wc.wr_id(),
                status,
                opcode: match wc.opcode() {
                    ffi::ibv_wc_opcode::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
                    ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
                    o => WcOpcode::Other(o),
                },
                imm: wc.imm_data(),
                vendor_err,
                byte_len: wc.len() as u32,
            }
        }));
        Ok(())
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the queue pairs using this CQ are dropped first (field order of the comm).
        unsafe { ffi::ibv_destroy_cq(self.cq) };
    }
}

/// An RC queue pair on one CQ.
pub(crate) struct Qp {
    qp: *mut ffi::ibv_qp,
    _dev: Arc<Device>,
}

// SAFETY: as for `Device`; the proxy thread is the only user once the connection is set up.
unsafe impl Send for Qp {}

fn modify(qp: *mut ffi::ibv_qp, attr: &mut ffi::ibv_qp_attr, mask: &[ffi::ibv_qp_attr_mask]) -> Result<(), VerbsError> {
    let mask = mask.iter().fold(0, |m, f| m | f.0) as c_int;
    // SAFETY: qp is live; attr is a fully initialized attribute block.
    check("ibv_modify_qp", unsafe { ffi::ibv_modify_qp(qp, attr, mask) })
}

impl Qp {
    /// Creates the queue pair and moves it to INIT.
    pub(crate) fn new(dev: &Arc<Device>, cq: &Cq, init: &InitAttrs) -> Result<Qp, VerbsError> {
        let mut ia = ffi::ibv_qp_init_attr {
            send_cq: cq.cq,
            recv_cq: cq.cq,
            cap: ffi::ibv_qp_cap {
                max_send_wr: qp::MAX_SEND_WR,
                max_recv_wr: qp::MAX_RECV_WR,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            ..Default::default()
        };
        // SAFETY: the PD and CQ are live; ia is initialized.
        let raw = unsafe { ffi::ibv_create_qp(dev.pd, &mut ia) };
        if raw.is_null() {
            return Err(VerbsError { call: "ibv_create_qp", errno: errno() });
        }
        let q = Qp { qp: raw, _dev: dev.clone() };
        let mut access = ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        if init.access.remote_atomic {
            access |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        }
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: init.pkey_index,
            port_num: init.port,
            qp_access_flags: access,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as M;
        modify(raw, &mut a, &[M::IBV_QP_STATE, M::IBV_QP_PKEY_INDEX, M::IBV_QP_PORT, M::IBV_QP_ACCESS_FLAGS])?;
        Ok(q)
    }

    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: the QP is live.
        unsafe { (*self.qp).qp_num }
    }

    pub(crate) fn rtr(&self, r: &RtrAttrs) -> Result<(), VerbsError> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: r.path_mtu.into(),
            dest_qp_num: r.dest_qpn,
            rq_psn: r.rq_psn,
            max_dest_rd_atomic: r.max_dest_rd_atomic,
            min_rnr_timer: r.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr.sl = r.sl;
        a.ah_attr.port_num = r.port;
        match r.route {
            Route::Lid { dlid } => a.ah_attr.dlid = dlid,
            Route::Global { dlid, dgid, sgid_index, hop_limit, traffic_class } => {
                a.ah_attr.is_global = 1;
                a.ah_attr.dlid = dlid;
                a.ah_attr.grh.dgid.raw = dgid;
                a.ah_attr.grh.sgid_index = sgid_index;
                a.ah_attr.grh.hop_limit = hop_limit;
                a.ah_attr.grh.traffic_class = traffic_class;
            }
        }
        use ffi::ibv_qp_attr_mask as M;
        modify(
            self.qp,
            &mut a,
            &[
                M::IBV_QP_STATE,
                M::IBV_QP_AV,
                M::IBV_QP_PATH_MTU,
                M::IBV_QP_DEST_QPN,
                M::IBV_QP_RQ_PSN,
                M::IBV_QP_MAX_DEST_RD_ATOMIC,
                M::IBV_QP_MIN_RNR_TIMER,
            ],
        )
    }

    pub(crate) fn rts(&self, r: &RtsAttrs) -> Result<(), VerbsError> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
            sq_psn: r.sq_psn,
            max_rd_atomic: r.max_rd_atomic,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as M;
        modify(
            self.qp,
            &mut a,
            &[
                M::IBV_QP_STATE,
                M::IBV_QP_TIMEOUT,
                M::IBV_QP_RETRY_CNT,
                M::IBV_QP_RNR_RETRY,
                M::IBV_QP_SQ_PSN,
                M::IBV_QP_MAX_QP_RD_ATOMIC,
            ],
        )
    }

    /// Posts one RDMA write. The memory its SGE names must stay registered and unchanged until it completes.
    pub(crate) fn post_write(&self, w: &WriteWr) -> Result<(), VerbsError> {
        let mut sge = w.sge.map(|s| ffi::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey });
        let mut wr = ffi::ibv_send_wr {
            wr_id: w.wr_id,
            sg_list: sge.as_mut().map_or(ptr::null_mut(), |s| s as *mut _),
            num_sge: i32::from(sge.is_some()),
            opcode: match w.opcode {
                Opcode::Write => ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                Opcode::WriteWithImm => ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            },
            send_flags: if w.signaled { ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 },
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = w.imm;
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: w.remote_addr, rkey: w.rkey };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; wr and sge live across the call, which copies them into the send queue.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            match ops.post_send {
                Some(post) => post(self.qp, &mut wr, &mut bad),
                None => 95,
            }
        };
        check("ibv_post_send", rc)
    }

    /// Posts a receive without buffer: RDMA WRITE WITH IMM consumes it and completes it with the immediate.
    pub(crate) fn post_recv(&self, wr_id: u64) -> Result<(), VerbsError> {
        let mut wr = ffi::ibv_recv_wr { wr_id, ..Default::default() };
        let mut bad = ptr::null_mut();
        // SAFETY: as for `post_write`.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            match ops.post_recv {
                Some(post) => post(self.qp, &mut wr, &mut bad),
                None => 95,
            }
        };
        check("ibv_post_recv", rc)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the QP is live and not used afterwards.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
    }
}

/// A registered memory region (`ibv_reg_mr` of host memory, with remote read and write).
pub(crate) struct Mr {
    mr: *mut ffi::ibv_mr,
    _dev: Arc<Device>,
}

// SAFETY: as for `Device`.
unsafe impl Send for Mr {}

impl Mr {
    pub(crate) fn new(dev: &Arc<Device>, data: *mut u8, size: usize) -> Result<Mr, VerbsError> {
        use ffi::ibv_access_flags as A;
        let access = A::IBV_ACCESS_LOCAL_WRITE.0 | A::IBV_ACCESS_REMOTE_WRITE.0 | A::IBV_ACCESS_REMOTE_READ.0;
        // SAFETY: the caller keeps `size` bytes at `data` alive while the region exists.
        let mr = unsafe { ffi::ibv_reg_mr(dev.pd, data.cast(), size, access as c_int) };
        if mr.is_null() {
            return Err(VerbsError { call: "ibv_reg_mr", errno: errno() });
        }
        Ok(Mr { mr, _dev: dev.clone() })
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: registered until dropped.
        unsafe { (*self.mr).lkey }
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    /// Deregisters now, reporting a failure (dropping deregisters silently).
    pub(crate) fn dereg(mut self) -> Result<(), VerbsError> {
        let mr = std::mem::replace(&mut self.mr, ptr::null_mut());
        // SAFETY: mr was registered and is not used again.
        check("ibv_dereg_mr", unsafe { ffi::ibv_dereg_mr(mr) })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: as in `dereg`.
            unsafe { ffi::ibv_dereg_mr(self.mr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_debug::env::Env;

    #[test]
    fn return_codes_become_errors_naming_the_call() {
        assert!(check("ibv_modify_qp", 0).is_ok());
        // modify_qp and post_send return the errno itself.
        let e = check("ibv_modify_qp", 22).unwrap_err();
        assert_eq!(e, VerbsError { call: "ibv_modify_qp", errno: 22 });
        assert!(e.to_string().contains("NCCL_IB_GID_INDEX"), "{e}");
        let e = check("ibv_post_send", 12).unwrap_err().to_string();
        assert!(e.starts_with("NET/IB : ibv_post_send failed") && e.contains("queue is full"), "{e}");
    }

    /// Real verbs calls: opening a device this host does not have fails with the call that refused it.
    #[test]
    fn opening_a_missing_device_names_the_call() {
        let params = IbParams::from_env(&Env::default()).unwrap();
        let e = Device::open("collscope_no_such_hca", 1, &params).err().expect("no such device");
        assert!(["ibv_get_device_list", "ibv_open_device"].contains(&e.call), "{e}");
        if e.call == "ibv_open_device" {
            assert!(e.to_string().contains("NCCL_IB_HCA"), "{e}");
        }
    }
}
