//! NET as a runtime transport (NCCL 2.28.9 `src/transport/net.cc`): both sides keep their connection memory
//! local and the rank's proxy thread bridges them over the network (NET/IB when the `ib` feature is built and
//! an RDMA port is active, else NET/Socket; `NCCL_NET` picks one by name). The receiver listens and publishes
//! its handle; the sender connects with it. Lines as NCCL prints them:
//! `Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0` and `... [receive] via NET/IB/0`.
//!
//! The networks it carries NET over implement the network interface ([`api`], NCCL's net plugin API): NET/Socket
//! ([`socket`]) and NET/IB ([`ib`]); the rank's [`proxy`] thread drives them. Each network describes itself as
//! a [`Network`] row in its own file; [`NETWORKS`] lists them in NCCL's order.

pub(crate) mod api;
// Without feature `ib` only IB's pure parts (NCCL's parameters, layouts, GID and HCA rules) are built, for
// their tests: nothing calls them.
#[cfg_attr(not(feature = "ib"), allow(dead_code))]
pub(crate) mod ib;
pub(crate) mod proxy;
pub(crate) mod socket;

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
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The NET transport of one rank: device 0 of network `N` and the rank's proxy.
pub(crate) struct NetTransport<N: Net> {
    net: &'static N,
    dev: usize,
    proxy: Arc<Proxy>,
    /// Setup waits: the timeout, and a flag that stops them once the transport goes away.
    ctl: SetupCtl,
}

fn net_err(e: NetError) -> RuntimeError {
    match e {
        NetError::Env(e) => RuntimeError::Env(e),
        other => RuntimeError::TransportFailed { transport: "NET", source: Box::new(other) },
    }
}

fn add_err(e: AddError) -> RuntimeError {
    RuntimeError::TransportFailed { transport: "NET", source: Box::new(e) }
}

/// The rank's NET transport over one network, and the rank's proxy.
pub(crate) type Opened = (Arc<dyn Transport>, Arc<Proxy>);

/// One network NET can be carried on: a row of [`NETWORKS`], defined in the network's own file.
pub(crate) struct Network {
    /// Its `NCCL_NET` name (matched case-insensitively), as NCCL's network names itself.
    pub name: &'static str,
    /// Why this build of collscope cannot use it, if it cannot.
    pub unbuilt: Option<&'static str>,
    /// Searches the host for its devices (printing NCCL's `Using` or `No device found.` line): whether any.
    pub found: fn(&Env) -> Result<bool>,
    /// What to check when `NCCL_NET` names it and it finds no device.
    pub missing: &'static str,
    /// The rank's NET transport over it (device 0) and the rank's proxy.
    pub open: fn(&Env, u32, Duration) -> Result<Opened>,
}

/// The networks, in NCCL's order of preference (`ncclNetInit` tries NET/IB before NET/Socket).
pub(crate) const NETWORKS: &[&Network] = &[&ib::NETWORK, &socket::NETWORK];

/// Picks the network as NCCL's `ncclNetInit` does: `NCCL_NET` names one (case-insensitive), otherwise the first
/// built one that `found` finds a device of. `found` runs a network's device search; no other network is
/// searched when `NCCL_NET` names one.
pub(crate) fn select_net(env: &Env, found: impl Fn(&Network) -> Result<bool>) -> Result<&'static Network> {
    let Some(name) = env.str("NCCL_NET") else {
        for &net in NETWORKS.iter().filter(|n| n.unbuilt.is_none()) {
            if found(net)? {
                return Ok(net);
            }
        }
        return Err(RuntimeError::Transport { transport: "NET", msg: "no network found a device".into() });
    };
    let Some(&net) = NETWORKS.iter().find(|n| n.name.eq_ignore_ascii_case(name)) else {
        let names: Vec<&str> = NETWORKS.iter().map(|n| n.name).collect();
        return Err(EnvError { name: "NCCL_NET".into(), value: name.into(), expected: names.join(" or ") }.into());
    };
    let unavailable =
        |why: &str| RuntimeError::Transport { transport: "NET", msg: format!("NCCL_NET={name}, but {why}") };
    if let Some(why) = net.unbuilt {
        return Err(unavailable(why));
    }
    if found(net)? {
        return Ok(net);
    }
    collscope_debug::nccl_warn!("Failed to initialize any NET plugin");
    Err(unavailable(net.missing))
}

/// The rank's NET transport over the network `NCCL_NET` and the host's devices select, and its proxy; attach
/// the proxy to the communicator (`Proxy::attach`) before its first connection.
pub(crate) fn net_transport(env: &Env, rank: u32, timeout: Duration) -> Result<Opened> {
    let net = select_net(env, |n| (n.found)(env))?;
    (net.open)(env, rank, timeout)
}

/// The transport over `net` (already initialized) and its proxy: what a network's `open` returns.
pub(crate) fn open<N: Net>(net: &'static N, rank: u32, timeout: Duration) -> Result<Opened> {
    let t = NetTransport::new(net, rank, timeout)?;
    let proxy = t.proxy.clone();
    Ok((Arc::new(t), proxy))
}

impl<N: Net> NetTransport<N> {
    /// The transport over `net` (already initialized), with `rank`'s proxy; prints `Using network <name>`.
    pub(crate) fn new(net: &'static N, rank: u32, timeout: Duration) -> Result<NetTransport<N>> {
        nccl_info!(Subsys::INIT, "Using network {}", net.name());
        let ctl = SetupCtl { timeout, abort: Arc::new(AtomicBool::new(false)) };
        let proxy = Proxy::new(rank).map_err(|source| RuntimeError::TransportIo {
            transport: "NET",
            what: "cannot create the proxy's eventfd",
            source,
        })?;
        Ok(NetTransport { net, dev: 0, proxy, ctl })
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

    fn network(&self) -> Option<&'static str> {
        Some(self.net.name())
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

    /// The network chosen when IB finds a device or not (Socket always does).
    fn pick(pairs: &[(&str, &str)], ib: bool) -> Result<&'static str> {
        select_net(&Env::from_pairs(pairs.iter().copied()), |n| Ok(n.name != "IB" || ib)).map(|n| n.name)
    }

    #[test]
    fn nccl_net_selects_by_name_then_by_devices() {
        assert_eq!(pick(&[], false).unwrap(), "Socket");
        assert_eq!(pick(&[("NCCL_NET", "socket")], true).unwrap(), "Socket");
        let searched = std::cell::RefCell::new(Vec::new());
        let env = Env::from_pairs([("NCCL_NET", "Socket")]);
        select_net(&env, |n| {
            searched.borrow_mut().push(n.name);
            Ok(true)
        })
        .unwrap();
        assert_eq!(*searched.borrow(), ["Socket"], "NCCL_NET=Socket must not search for IB devices");
        let e = pick(&[("NCCL_NET", "Verbs")], true).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET='Verbs'") && e.contains("IB or Socket"), "{e}");
        let e = pick(&[("NCCL_NET", "IB")], false).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET=IB, but"), "{e}");
        if cfg!(feature = "ib") {
            assert_eq!(pick(&[], true).unwrap(), "IB");
            assert_eq!(pick(&[("NCCL_NET", "ib")], true).unwrap(), "IB");
            assert!(e.contains("no active RDMA port"), "{e}");
        } else {
            assert_eq!(pick(&[], true).unwrap(), "Socket", "a network this build lacks is not chosen");
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
