//! NET/IB behind the proxy's network interface (NCCL 2.28.9 `net_ib.cc` `ncclIbListen`, `ncclIbConnect`,
//! `ncclIbAccept`, `ncclIbIsend`, `ncclIbIrecv`, `ncclIbTest`). Setup runs over an out-of-band TCP socket whose
//! address is the handle: the sender sends its queue pair and FIFO metadata, the receiver answers with its own,
//! both move their queue pair to RTS, and the sender says it is ready. Data: the receiver posts a receive and
//! RDMA-writes a clear-to-send entry into the sender's FIFO; the sender, once that entry is there, RDMA-writes
//! the bytes with the count as immediate; `test` polls the completion queue.

use super::fifo::{CtsEntry, RecvFifo, SendFifo, ENTRY_BYTES, MAX_RECVS, MAX_REQUESTS};
use super::meta::{ConnMeta, DevInfo, IbHandle, META_BYTES};
use super::params::IbParams;
use super::qp;
use super::rdma::{Cq, Device, Mr, Qp};
use super::reqs::{Kind, Requests};
use super::status::CompletionError;
use super::verbs::{discover, oob_interface, IbDevice};
use super::{wr, IbError};
use crate::socket::{addr_string, random_u64, Listener, Socket, SocketType};
use crate::transport::net::api::{self, NetError, SetupCtl};
use collscope_debug::env::Env;
use std::net::IpAddr;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The process's NET/IB: the ports found, the parameters, and the address the out-of-band sockets use.
pub(crate) struct IbNet {
    devices: Vec<IbDevice>,
    params: IbParams,
    oob: IpAddr,
    opened: Mutex<Vec<Option<Arc<Device>>>>,
}

static IB_NET: OnceLock<Option<IbNet>> = OnceLock::new();

fn ib(e: impl Into<IbError>) -> NetError {
    let e: IbError = e.into();
    NetError::from(e)
}

impl IbNet {
    /// Searches for RDMA ports once per process (printing NCCL's `NET/IB : Using ...` or `No device found.`);
    /// `None` when there is none, so NET falls back to sockets.
    pub(crate) fn init(env: &Env) -> Result<Option<&'static IbNet>, crate::error::RuntimeError> {
        if let Some(n) = IB_NET.get() {
            return Ok(n.as_ref());
        }
        let devices = discover(env)?;
        let params = IbParams::from_env(env)?;
        let oob = oob_interface().map(|i| i.addr.ip());
        let net = match (devices.is_empty(), oob) {
            (true, _) => None,
            (false, None) => {
                collscope_debug::nccl_warn!("NET/IB : No IP interface found.");
                None
            }
            (false, Some(oob)) => {
                let n = devices.len();
                Some(IbNet { devices, params, oob, opened: Mutex::new((0..n).map(|_| None).collect()) })
            }
        };
        Ok(IB_NET.get_or_init(|| net).as_ref())
    }

    /// Device `dev`, opened on first use and shared by its connections (NCCL shares the PD the same way).
    fn device(&self, dev: usize) -> Result<Arc<Device>, NetError> {
        let d = self.devices.get(dev).ok_or_else(|| {
            ib(IbError::Setup(format!("device {dev} does not exist ({} devices)", self.devices.len())))
        })?;
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(open)) = opened.get(dev) {
            return Ok(open.clone());
        }
        let port = u8::try_from(d.port.port).map_err(|_| ib(IbError::Setup(format!("port {}", d.port.port))))?;
        let open = Device::open(&d.port.name, port, &self.params).map_err(ib)?;
        opened[dev] = Some(open.clone());
        Ok(open)
    }
}

/// The receiver's listener: a thread accepts the sender and builds the receive side, so the ranks' setup order
/// cannot deadlock (as NET/Socket's acceptor).
pub(crate) struct IbListener {
    accept: std::thread::JoinHandle<Result<IbComm, NetError>>,
}

/// A queue pair, its completion queue and the state of one direction.
pub(crate) struct IbComm {
    // Dropped in this order: queue pair, then what it uses.
    qp: Qp,
    cq: Cq,
    side: Side,
    reqs: Requests,
    dev: Arc<Device>,
    /// The out-of-band socket stays open for the connection's life (NCCL keeps it for error reports).
    _oob: Socket,
    peer: String,
    completions: Vec<super::reqs::Completion>,
}

enum Side {
    /// The sender's CTS FIFO, written by the peer: 8-byte words so the entries are read with atomic loads. (Each
    /// registration is listed before its memory, so it goes first.)
    Send { _fifo_mr: Mr, fifo: Box<[AtomicU64]>, seq: SendFifo },
    /// The receiver's staged CTS entries and where the sender's FIFO is.
    Recv { staged_mr: Mr, staged: Box<[[u8; ENTRY_BYTES]]>, seq: RecvFifo, fifo_addr: u64, fifo_rkey: u32 },
}

const FIFO_WORDS: usize = MAX_REQUESTS * MAX_RECVS * ENTRY_BYTES / 8;

/// An outstanding NET/IB transfer: its index in the comm's request table.
pub(crate) struct IbRequest(u8);

/// What this side tells the peer: its queue pair and port, the sender's FIFO (`fifo`: address and rkey), and the
/// traffic class and service level of the connection.
fn local_meta(dev: &Device, qpn: u32, fifo: Option<(u64, u32)>, (tc, sl): (u8, u8)) -> ConnMeta {
    ConnMeta {
        qpn,
        dev: DevInfo {
            lid: dev.lid,
            ib_port: dev.port.port,
            mtu: dev.port.active_mtu,
            link_layer: dev.link_layer,
            gid: dev.port.gid,
            fifo_rkey: fifo.map_or(0, |f| f.1),
        },
        fifo_addr: fifo.map_or(0, |f| f.0),
        tc,
        sl,
        dev_name: dev.name.clone(),
    }
}

fn send_meta(s: &mut Socket, m: &ConnMeta, ctl: &SetupCtl) -> Result<(), NetError> {
    s.send_timeout(&m.encode(), ctl.timeout, Some(&ctl.abort)).map_err(ib)
}

fn recv_meta(s: &mut Socket, ctl: &SetupCtl) -> Result<ConnMeta, NetError> {
    let mut b = [0u8; META_BYTES];
    s.recv_timeout(&mut b, ctl.timeout, Some(&ctl.abort)).map_err(ib)?;
    ConnMeta::decode(&b).map_err(ib)
}

/// Both sides must use one link layer (NCCL: "Attempted to connect incompatible devices").
fn check_link(dev: &Device, remote: &ConnMeta) -> Result<(), NetError> {
    if remote.dev.link_layer != dev.link_layer {
        return Err(ib(IbError::Setup(format!(
            "remote device {} is incompatible with the local {}:{}; select NICs of one link type with NCCL_IB_HCA",
            remote.dev_name, dev.name, dev.port.port
        ))));
    }
    Ok(())
}

impl api::Net for IbNet {
    type Listener = IbListener;
    type Comm = IbComm;

    fn name(&self) -> &'static str {
        "IB"
    }

    fn listen(&self, dev: usize, ctl: &SetupCtl) -> Result<(IbListener, Vec<u8>), NetError> {
        let device = self.device(dev)?;
        let magic = random_u64().unwrap_or(0x1b1b_2c2c_3d3d_4e4e);
        let listener = Listener::bind_ip(self.oob, magic, SocketType::NetIb).map_err(ib)?;
        let handle = IbHandle { addr: listener.addr(), magic };
        let (params, ctl) = (self.params, ctl.clone());
        let accept = std::thread::Builder::new()
            .name("collscope IbAccept".into())
            .spawn(move || accept(&listener, &device, &params, &ctl))
            .map_err(|e| ib(IbError::Setup(format!("cannot start the accepting thread: {e}"))))?;
        Ok((IbListener { accept }, handle.to_bytes().to_vec()))
    }

    fn connect(&self, dev: usize, handle: &[u8], ctl: &SetupCtl) -> Result<IbComm, NetError> {
        let handle = IbHandle::from_bytes(handle).map_err(ib)?;
        let device = self.device(dev)?;
        let mut oob = Socket::connect(handle.addr, handle.magic, SocketType::NetIb, ctl.timeout).map_err(ib)?;
        let cq = Cq::new(&device, 2 * MAX_REQUESTS as u32).map_err(ib)?;
        let qp = Qp::new(&device, &cq, &qp::init_attrs(&self.params, device.port.port, true)).map_err(ib)?;
        let fifo: Box<[AtomicU64]> = (0..FIFO_WORDS).map(|_| AtomicU64::new(0)).collect();
        // The NIC writes this memory; it is read only through the atomics.
        let fifo_mr = Mr::new(&device, fifo.as_ptr() as *mut u8, FIFO_WORDS * 8).map_err(ib)?;
        let fifo_at = Some((fifo.as_ptr() as u64, fifo_mr.rkey()));
        let local = local_meta(&device, qp.qpn(), fifo_at, qp::tc_sl(&self.params));
        send_meta(&mut oob, &local, ctl)?;
        let remote = recv_meta(&mut oob, ctl)?;
        check_link(&device, &remote)?;
        qp.rtr(&qp::rtr_attrs(&device.port, &remote, local.tc, local.sl, None)).map_err(ib)?;
        qp.rts(&qp::rts_attrs(&self.params)).map_err(ib)?;
        oob.send_timeout(&1u32.to_le_bytes(), ctl.timeout, Some(&ctl.abort)).map_err(ib)?;
        let peer = addr_string(&oob.peer());
        Ok(IbComm {
            qp,
            cq,
            side: Side::Send { fifo, _fifo_mr: fifo_mr, seq: SendFifo::default() },
            reqs: Requests::default(),
            dev: device,
            _oob: oob,
            peer,
            completions: Vec::new(),
        })
    }
}

/// The receive side of setup, on the listener's thread.
fn accept(listener: &Listener, device: &Arc<Device>, params: &IbParams, ctl: &SetupCtl) -> Result<IbComm, NetError> {
    let mut oob = listener.accept(ctl.timeout, Some(&ctl.abort)).map_err(ib)?;
    let remote = recv_meta(&mut oob, ctl)?;
    check_link(device, &remote)?;
    let cq = Cq::new(device, 2 * MAX_REQUESTS as u32).map_err(ib)?;
    let qp = Qp::new(device, &cq, &qp::init_attrs(params, device.port.port, false)).map_err(ib)?;
    qp.rtr(&qp::rtr_attrs(&device.port, &remote, remote.tc, remote.sl, params.fifo_tc)).map_err(ib)?;
    qp.rts(&qp::rts_attrs(params)).map_err(ib)?;
    let mut staged: Box<[[u8; ENTRY_BYTES]]> = vec![[0u8; ENTRY_BYTES]; MAX_REQUESTS].into_boxed_slice();
    let staged_mr = Mr::new(device, staged.as_mut_ptr().cast(), MAX_REQUESTS * ENTRY_BYTES).map_err(ib)?;
    send_meta(&mut oob, &local_meta(device, qp.qpn(), None, (remote.tc, remote.sl)), ctl)?;
    let mut ready = [0u8; 4];
    oob.recv_timeout(&mut ready, ctl.timeout, Some(&ctl.abort)).map_err(ib)?;
    let peer = addr_string(&oob.peer());
    Ok(IbComm {
        qp,
        cq,
        side: Side::Recv {
            staged,
            staged_mr,
            seq: RecvFifo::default(),
            fifo_addr: remote.fifo_addr,
            fifo_rkey: remote.dev.fifo_rkey,
        },
        reqs: Requests::default(),
        dev: device.clone(),
        _oob: oob,
        peer,
        completions: Vec::new(),
    })
}

impl api::Listen for IbListener {
    type Comm = IbComm;

    fn accept(self) -> Result<IbComm, NetError> {
        self.accept.join().map_err(|_| ib(IbError::Setup("the accepting thread panicked".into())))?
    }
}

impl IbComm {
    fn wrong_side(&self, what: &str) -> NetError {
        ib(IbError::Setup(format!("{what} on the other side's connection with {}", self.peer)))
    }
}

impl api::Comm for IbComm {
    type Request = IbRequest;
    type Mr = Mr;

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn reg_mr(&mut self, data: *mut u8, size: usize) -> Result<Mr, NetError> {
        // A zero-length registration is refused by some providers; register one byte instead.
        Mr::new(&self.dev, data, size.max(1)).map_err(ib)
    }

    fn dereg_mr(&mut self, mr: Mr) -> Result<(), NetError> {
        mr.dereg().map_err(ib)
    }

    fn isend(&mut self, data: *const u8, size: usize, tag: u32, mr: &Mr) -> Result<Option<IbRequest>, NetError> {
        let Side::Send { fifo, seq, .. } = &mut self.side else { return Err(self.wrong_side("isend")) };
        let base = seq.slot() * MAX_RECVS * ENTRY_BYTES / 8;
        let words = &fifo[base..base + ENTRY_BYTES / 8];
        // The index is read first; the entry's other words only after it matched (NCCL's barrier).
        if !seq.ready(words[5].load(Ordering::Acquire)) {
            return Ok(None);
        }
        fence(Ordering::Acquire);
        let mut bytes = [0u8; ENTRY_BYTES];
        for (i, w) in words.iter().enumerate() {
            bytes[8 * i..8 * i + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let entry = seq.take(&CtsEntry::decode(&bytes).map_err(ib)?, tag).map_err(ib)?;
        for w in words {
            w.store(0, Ordering::Relaxed);
        }
        let cap = usize::try_from(entry.size).unwrap_or(usize::MAX);
        let id = self.reqs.alloc(Kind::Send, size.min(cap), 1).map_err(ib)?;
        let w = wr::data_write(&entry, data as u64, size, mr.lkey(), u64::from(id)).map_err(ib)?;
        self.qp.post_write(&w).map_err(ib)?;
        Ok(Some(IbRequest(id)))
    }

    fn irecv(&mut self, data: *mut u8, size: usize, tag: u32, mr: &Mr) -> Result<Option<IbRequest>, NetError> {
        let Side::Recv { staged, staged_mr, seq, fifo_addr, fifo_rkey } = &mut self.side else {
            return Err(self.wrong_side("irecv"));
        };
        let id = self.reqs.alloc(Kind::Recv, 0, 1).map_err(ib)?;
        self.qp.post_recv(u64::from(id)).map_err(ib)?;
        let posted = seq.post(data as u64, size as u64, mr.rkey(), tag);
        staged[posted.slot] = posted.entry.encode();
        let local = staged[posted.slot].as_ptr() as u64;
        let w = wr::cts_write(&posted, local, staged_mr.lkey(), *fifo_addr, *fifo_rkey, u64::from(id));
        if w.signaled {
            self.reqs.add_event(id);
        }
        self.qp.post_write(&w).map_err(ib)?;
        Ok(Some(IbRequest(id)))
    }

    fn test(&mut self, req: &mut IbRequest) -> Result<Option<usize>, NetError> {
        loop {
            if let Some(n) = self.reqs.done(req.0) {
                return Ok(Some(n));
            }
            self.completions.clear();
            self.cq.poll(&mut self.completions).map_err(ib)?;
            if self.completions.is_empty() {
                return Ok(None);
            }
            for c in &self.completions {
                if c.status != 0 {
                    return Err(ib(CompletionError {
                        peer: self.peer.clone(),
                        status: c.status,
                        opcode: c.opcode.code(),
                        size: c.byte_len,
                        vendor_err: c.vendor_err,
                        hca: self.dev.name.clone(),
                    }));
                }
                self.reqs.complete(c).map_err(ib)?;
            }
        }
    }

    /// Completions are only known by polling, which `test` does; the proxy may back off meanwhile.
    fn in_progress(&self, _req: &IbRequest) -> bool {
        false
    }

    /// Completions are polled, not signalled on a channel.
    fn wake(&self, _req: &IbRequest) -> api::Wake {
        api::Wake::Poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::net::select_net;

    /// Real device discovery: on a host without an RDMA device NET/IB declines (after NCCL's
    /// `NET/IB : No device found.`) and NET is carried by sockets.
    #[test]
    fn without_rdma_devices_net_falls_back_to_sockets() {
        let has_hca = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
        let env = Env::default();
        let chosen = select_net(&env, |n| (n.found)(&env)).unwrap();
        if !has_hca {
            assert!(IbNet::init(&env).unwrap().is_none());
            assert_eq!(chosen.name, "Socket");
        }
    }
}
