//! The verbs calls of NET/IB (feature `ib`, libibverbs through `ibverbs-sys`, the FFI half of the `ibverbs`
//! crate, because the safe crate exposes neither port queries nor DMA-BUF registration): device discovery
//! filtered by `NCCL_IB_HCA` with NCCL's `Using` line, and the DMA-BUF registration probe.

use super::hca::HcaList;
use super::params::IbParams;
use super::status::VerbsError;
use super::{using_line, IbPort};
use collscope_debug::env::Env;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_nccl::topo::gdr;
use ibverbs_sys as ffi;
use std::ffi::CStr;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A port NET/IB may use, with whether the stack registers DMA-BUF on its device.
#[derive(Debug, Clone)]
pub(crate) struct IbDevice {
    pub(crate) port: IbPort,
    // Probed as NCCL's ncclIbInit does; nothing reads it while NET/IB registers host memory only.
    #[allow(dead_code)]
    pub(crate) dmabuf: bool,
}

/// Finds the active ports `NCCL_IB_HCA` selects, logs NCCL's `Using` or `No device found.` line, and returns
/// them (empty: the caller falls back to sockets). `NCCL_IB_DISABLE=1` skips the search, as in NCCL. Like
/// NCCL's `ncclIbInit` the search runs once per process; later calls get the same ports.
pub(crate) fn discover(env: &Env) -> Result<Vec<IbDevice>, crate::error::RuntimeError> {
    static FOUND: std::sync::OnceLock<Vec<IbDevice>> = std::sync::OnceLock::new();
    let params = IbParams::from_env(env)?;
    if params.disable {
        return Ok(Vec::new());
    }
    if let Some(found) = FOUND.get() {
        return Ok(found.clone());
    }
    let hca_env = env.str("NCCL_IB_HCA");
    if let Some(v) = hca_env {
        nccl_info!(Subsys::NET | Subsys::ENV, "NCCL_IB_HCA set to {v}");
    }
    let hca = HcaList::parse(hca_env)
        .map_err(|e| crate::error::RuntimeError::Transport { transport: "NET/IB", msg: e.to_string() })?;
    let found = ports(&hca).unwrap_or_else(|e| {
        collscope_debug::nccl_warn!("{e}");
        Vec::new()
    });
    let (oob_if, oob_addr) =
        oob_interface().map_or((String::new(), String::new()), |i| (i.name, format!("{}<0>", i.addr.ip())));
    let ports: Vec<IbPort> = found.iter().map(|d| d.port.clone()).collect();
    nccl_info!(Subsys::INIT | Subsys::NET, "{}", using_line(&ports, false, &oob_if, &oob_addr));
    Ok(FOUND.get_or_init(|| found).clone())
}

/// The interface NET/IB's out-of-band setup sockets use (NCCL's `ncclIbIfAddr`).
pub(crate) fn oob_interface() -> Option<crate::socket::NetIf> {
    crate::socket::find_interfaces(None, None, None, 1).into_iter().next()
}

fn ports(hca: &HcaList) -> Result<Vec<IbDevice>, VerbsError> {
    let mut n = 0i32;
    // SAFETY: libibverbs returns a NULL-terminated array (or NULL) that is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return match errno() {
            // ENOSYS: no RDMA support in the kernel (ib_uverbs not loaded), the usual machine without HCAs.
            38 => Ok(Vec::new()),
            e => Err(VerbsError { call: "ibv_get_device_list", errno: e }),
        };
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: i < n entries of the list.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the list has a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }.to_string_lossy().into_owned();
        // SAFETY: dev is valid until the list is freed.
        let ctx = unsafe { ffi::ibv_open_device(dev) };
        if ctx.is_null() {
            collscope_debug::nccl_warn!("NET/IB : Unable to open device {name}");
            continue;
        }
        let mut attr = ffi::ibv_device_attr::default();
        // SAFETY: ctx is open; attr is a live out-parameter.
        if unsafe { ffi::ibv_query_device(ctx, &mut attr) } != 0 {
            collscope_debug::nccl_warn!("{}", VerbsError { call: "ibv_query_device", errno: errno() });
        } else {
            let dmabuf = dmabuf_probe(ctx);
            for port in 1..=u32::from(attr.phys_port_cnt) {
                let mut pa = ffi::ibv_port_attr::default();
                // SAFETY: ctx is open; port is in 1..=phys_port_cnt; pa is a live out-parameter.
                if unsafe { ffi::ibv_query_port(ctx, port as u8, &mut pa as *mut ffi::ibv_port_attr as *mut _) } != 0 {
                    collscope_debug::nccl_warn!("{}", VerbsError { call: "ibv_query_port", errno: errno() });
                    continue;
                }
                if pa.state != ffi::ibv_port_state::IBV_PORT_ACTIVE || !hca.selects(&name, port) {
                    continue;
                }
                let link = if u32::from(pa.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET { "RoCE" } else { "IB" };
                out.push(IbDevice { port: IbPort { name: name.clone(), port, link }, dmabuf });
            }
        }
        // SAFETY: ctx was opened above and is not used afterwards.
        unsafe { ffi::ibv_close_device(ctx) };
    }
    // SAFETY: list came from ibv_get_device_list.
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(out)
}

/// NCCL's DMA-BUF check: registering fd -1 fails with EOPNOTSUPP/EPROTONOSUPPORT when unsupported.
fn dmabuf_probe(ctx: *mut ffi::ibv_context) -> bool {
    // SAFETY: ctx is an open device context.
    let pd = unsafe { ffi::ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return false;
    }
    // SAFETY: a deliberately invalid fd; the call only reports whether the kernel path exists.
    let mr = unsafe { ffi::ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) };
    let supported = gdr::dmabuf_probe_supported(errno());
    if !mr.is_null() {
        // SAFETY: registered just above.
        unsafe { ffi::ibv_dereg_mr(mr) };
    }
    // SAFETY: pd was allocated above and has no registrations left.
    unsafe { ffi::ibv_dealloc_pd(pd) };
    supported
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real verbs calls on this host: without an RDMA device the search finds nothing and NET falls back.
    #[test]
    fn discovery_on_this_host() {
        let found = discover(&Env::default()).unwrap();
        let has_hca = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
        if !has_hca {
            assert!(found.is_empty(), "{found:?}");
        }
        assert!(discover(&Env::from_pairs([("NCCL_IB_DISABLE", "1")])).unwrap().is_empty());
    }
}
