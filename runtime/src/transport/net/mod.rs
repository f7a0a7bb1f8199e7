//! NET as a runtime transport (NCCL 2.28.9 `src/transport/net.cc`): both sides keep their connection memory
//! local and the rank's proxy thread bridges them over the network (NET/IB when the `ib` feature is built and
//! an RDMA port is active, else NET/Socket; `NCCL_NET` picks one by name). The receiver listens and publishes
//! its handle; the sender connects with it. Lines as NCCL prints them:
//! `Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0` and `... [receive] via NET/IB/0`.
//!
//! The networks it carries NET over implement the network interface ([`api`], NCCL's net plugin API): NET/Socket
//! ([`socket`]) and NET/IB ([`ib`]); the rank's [`proxy`] thread drives them.

pub mod api;
pub mod ib;
pub mod proxy;
pub mod socket;

use crate::error::{Result, RuntimeError};
use crate::transport::conn::{BufSizes, ConnMem};
use crate::transport::{record, ConnSpec, Established, PeerInfo, Pending, Transport};
use api::{Listen, Net, NetError, SetupCtl};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use collscope_model as model;
use collscope_model::lines::ConnLine;
use proxy::{AddError, Proxy};
use socket::NetSocket;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The NET transport of one rank: device 0 of network `N` and the rank's proxy.
pub struct NetTransport<N: Net> {
    net: &'static N,
    dev: usize,
    proxy: Arc<Proxy>,
    /// Setup waits: the timeout, and a flag that stops them once the transport goes away.
    ctl: SetupCtl,
}

fn net_err(e: NetError) -> RuntimeError {
    match e {
        NetError::Env(e) => RuntimeError::Env(e),
        other => RuntimeError::Transport { transport: "NET", msg: other.to_string() },
    }
}

fn add_err(e: AddError) -> RuntimeError {
    RuntimeError::Transport { transport: "NET", msg: e.to_string() }
}

/// The networks collscope can carry NET traffic on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    Ib,
    Socket,
}

/// Picks the network as NCCL's `ncclNetInit` does: `NCCL_NET` names one (case-insensitive), otherwise NET/IB
/// when it finds a device, else NET/Socket. `ib_found` runs the NET/IB device search (printing its `Using` or
/// `No device found.` line); it is not called when `NCCL_NET=Socket`.
pub fn select_net(env: &Env, ib_found: impl FnOnce() -> Result<bool>) -> Result<NetKind> {
    let name = env.str("NCCL_NET");
    match name {
        Some(n) if n.eq_ignore_ascii_case("Socket") => Ok(NetKind::Socket),
        Some(n) if n.eq_ignore_ascii_case("IB") => {
            let unavailable =
                |why: &str| RuntimeError::Transport { transport: "NET", msg: format!("NCCL_NET={n}, but {why}") };
            if !cfg!(feature = "ib") {
                return Err(unavailable("NET/IB needs collscope built with the `ib` feature"));
            }
            if ib_found()? {
                return Ok(NetKind::Ib);
            }
            collscope_debug::nccl_warn!("Failed to initialize any NET plugin");
            Err(unavailable("NET/IB found no active RDMA port: check NCCL_IB_HCA, NCCL_IB_DISABLE and ibv_devinfo"))
        }
        Some(n) => Err(EnvError { name: "NCCL_NET".into(), value: n.into(), expected: "Socket or IB".into() }.into()),
        None => Ok(if ib_found()? { NetKind::Ib } else { NetKind::Socket }),
    }
}

/// The rank's NET transport over the network `NCCL_NET` and the host's devices select, and its proxy; attach
/// the proxy to the communicator (`Proxy::attach`) before its first connection.
pub fn net_transport(env: &Env, rank: u32, timeout: Duration) -> Result<(Arc<dyn Transport>, Arc<Proxy>)> {
    #[cfg(feature = "ib")]
    let found = || Ok(ib::net::IbNet::init(env)?.is_some());
    #[cfg(not(feature = "ib"))]
    let found = || Ok(false);
    match select_net(env, found)? {
        #[cfg(feature = "ib")]
        NetKind::Ib => {
            let net = ib::net::IbNet::init(env)?
                .ok_or_else(|| RuntimeError::Transport { transport: "NET/IB", msg: "no device found".into() })?;
            let t = NetTransport::new(net, rank, timeout)?;
            let proxy = t.proxy.clone();
            Ok((Arc::new(t), proxy))
        }
        #[cfg(not(feature = "ib"))]
        NetKind::Ib => Err(RuntimeError::Transport { transport: "NET/IB", msg: "not built (feature `ib`)".into() }),
        NetKind::Socket => {
            let net = NetSocket::init(env).map_err(|e| net_err(e.into()))?;
            let t = NetTransport::new(net, rank, timeout)?;
            let proxy = t.proxy.clone();
            Ok((Arc::new(t), proxy))
        }
    }
}

impl<N: Net> NetTransport<N> {
    /// The transport over `net` (already initialized), with `rank`'s proxy; prints `Using network <name>`.
    pub fn new(net: &'static N, rank: u32, timeout: Duration) -> Result<NetTransport<N>> {
        nccl_info!(Subsys::INIT, "Using network {}", net.name());
        let ctl = SetupCtl { timeout, abort: Arc::new(AtomicBool::new(false)) };
        let proxy = Proxy::new(rank).map_err(|e| RuntimeError::Transport {
            transport: "NET",
            msg: format!("cannot create the proxy's eventfd: {e}"),
        })?;
        Ok(NetTransport { net, dev: 0, proxy, ctl })
    }

    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }
}

impl<N: Net> Drop for NetTransport<N> {
    /// Ends acceptor threads still waiting for senders that will never come.
    fn drop(&mut self) {
        self.ctl.abort.store(true, std::sync::atomic::Ordering::Release);
    }
}

fn net_record(spec: &ConnSpec, src: u32, dst: u32, send: bool, name: &str, dev: usize) -> model::Connection {
    let mut r = record(spec, src, dst, model::Transport::Net, &format!("{name}/{dev}"));
    r.direction = if send { model::Direction::Send } else { model::Direction::Recv };
    r.net = Some(name.into());
    r.device = Some(dev as u32);
    r.gdrdma = Some(false);
    r
}

struct NetSendPending<N: Net> {
    net: &'static N,
    dev: usize,
    proxy: Arc<Proxy>,
    sizes: BufSizes,
    channel: u32,
    peer: u32,
    ctl: SetupCtl,
    record: model::Connection,
    line: String,
}

struct NetRecvPending<N: Net> {
    net: &'static N,
    listener: N::Listener,
    proxy: Arc<Proxy>,
    sizes: BufSizes,
    channel: u32,
    peer: u32,
    record: model::Connection,
    line: String,
}

impl<N: Net> Transport for NetTransport<N> {
    fn kind(&self) -> model::Transport {
        model::Transport::Net
    }

    /// NET reaches any rank; it comes last in the chain.
    fn can_connect(&self, _me: &PeerInfo, _peer: &PeerInfo) -> bool {
        true
    }

    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let record = net_record(spec, spec.me.rank, spec.peer.rank, true, self.net.name(), self.dev);
        let line = ConnLine { conn: &record, conn_index: Some(spec.conn_index), devs: (spec.me.dev, spec.peer.dev) };
        let line = line.to_string();
        let pending = NetSendPending {
            net: self.net,
            dev: self.dev,
            proxy: self.proxy.clone(),
            sizes: spec.sizes,
            channel: spec.channel,
            peer: spec.peer.rank,
            ctl: self.ctl.clone(),
            record,
            line,
        };
        Ok((Box::new(pending), Vec::new()))
    }

    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let (listener, handle) = self.net.listen(self.dev, &self.ctl).map_err(net_err)?;
        let record = net_record(spec, spec.peer.rank, spec.me.rank, false, self.net.name(), self.dev);
        let line = ConnLine { conn: &record, conn_index: Some(spec.conn_index), devs: (spec.peer.dev, spec.me.dev) };
        let line = line.to_string();
        let pending = NetRecvPending {
            net: self.net,
            listener,
            proxy: self.proxy.clone(),
            sizes: spec.sizes,
            channel: spec.channel,
            peer: spec.peer.rank,
            record,
            line,
        };
        Ok((Box::new(pending), handle))
    }
}

impl<N: Net> Pending for NetSendPending<N> {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established> {
        let comm = self.net.connect(self.dev, peer_handle, &self.ctl).map_err(net_err)?;
        let mem = Arc::new(ConnMem::anonymous(self.sizes)?);
        let guard =
            self.proxy.add_send(self.net.name(), comm, mem.clone(), self.channel, self.peer).map_err(add_err)?;
        Ok(Established { mem, record: self.record, line: Some(self.line), guard: Some(Box::new(guard)) })
    }
}

impl<N: Net> Pending for NetRecvPending<N> {
    fn connect(self: Box<Self>, _peer_handle: &[u8]) -> Result<Established> {
        let comm = self.listener.accept().map_err(net_err)?;
        let mem = Arc::new(ConnMem::anonymous(self.sizes)?);
        let guard =
            self.proxy.add_recv(self.net.name(), comm, mem.clone(), self.channel, self.peer).map_err(add_err)?;
        Ok(Established { mem, record: self.record, line: Some(self.line), guard: Some(Box::new(guard)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(pairs: &[(&str, &str)], ib: bool) -> Result<NetKind> {
        select_net(&Env::from_pairs(pairs.iter().copied()), || Ok(ib))
    }

    #[test]
    fn nccl_net_selects_by_name_then_by_devices() {
        assert_eq!(pick(&[], false).unwrap(), NetKind::Socket);
        assert_eq!(pick(&[("NCCL_NET", "socket")], true).unwrap(), NetKind::Socket);
        let searched = std::cell::Cell::new(false);
        let env = Env::from_pairs([("NCCL_NET", "Socket")]);
        select_net(&env, || {
            searched.set(true);
            Ok(true)
        })
        .unwrap();
        assert!(!searched.get(), "NCCL_NET=Socket must not search for IB devices");
        let e = pick(&[("NCCL_NET", "Verbs")], true).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET='Verbs'") && e.contains("Socket or IB"), "{e}");
        let e = pick(&[("NCCL_NET", "IB")], false).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET=IB, but"), "{e}");
        if cfg!(feature = "ib") {
            assert_eq!(pick(&[], true).unwrap(), NetKind::Ib);
            assert_eq!(pick(&[("NCCL_NET", "ib")], true).unwrap(), NetKind::Ib);
            assert!(e.contains("no active RDMA port"), "{e}");
        } else {
            assert!(e.contains("`ib` feature"), "{e}");
        }
    }

    #[test]
    fn bad_nccl_net_fails_transport_creation() {
        let env = Env::from_pairs([("NCCL_NET", "nope")]);
        let e = net_transport(&env, 0, Duration::from_secs(1)).err().unwrap();
        assert!(e.to_string().contains("NCCL_NET"), "{e}");
    }
}
