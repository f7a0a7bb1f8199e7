//! NET as a runtime transport (NCCL 2.28.9 `src/transport/net.cc`): both sides keep their connection memory
//! local and the rank's proxy thread bridges them over NET/Socket. The receiver listens and publishes its
//! handle; the sender connects with it. Lines as NCCL prints them:
//! `Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0` and `... [receive] via NET/Socket/0`.

use super::proxy::Proxy;
use super::socket::{Handle, NetError, NetListener, NetSocket};
use crate::debug::Subsys;
use crate::env::{Env, EnvError};
use crate::model;
use crate::nccl_info;
use crate::runtime::conn::{BufSizes, ConnMem};
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::transport::{record, ConnSpec, Established, PeerInfo, Pending, Transport};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The NET transport of one rank: NET/Socket device 0 and the rank's proxy.
pub struct NetTransport {
    net: &'static NetSocket,
    dev: usize,
    proxy: Arc<Proxy>,
    timeout: Duration,
    /// Stops the socket waits of connection setup once the transport goes away.
    stop: Arc<AtomicBool>,
}

fn net_err(e: NetError) -> RuntimeError {
    match e {
        NetError::Env(e) => RuntimeError::Env(e),
        other => RuntimeError::Transport { transport: "NET", msg: other.to_string() },
    }
}

fn proxy_err(e: std::io::Error) -> RuntimeError {
    RuntimeError::Transport { transport: "NET", msg: format!("cannot start the proxy thread: {e}") }
}

/// `NCCL_NET`: only the built-in Socket network exists here (NET/IB comes with the `ib` feature).
pub fn check_net_name(env: &Env) -> Result<(), EnvError> {
    match env.str("NCCL_NET") {
        Some(n) if !n.eq_ignore_ascii_case("Socket") => Err(EnvError {
            name: "NCCL_NET".into(),
            value: n.into(),
            expected: "Socket (the only network built in; NET/IB needs the `ib` feature)".into(),
        }),
        _ => Ok(()),
    }
}

impl NetTransport {
    /// Finds the NET/Socket devices (printing `NET/Socket : Using ...`) and starts `rank`'s proxy thread; attach
    /// the proxy to the communicator (`proxy().attach`) before its first connection.
    pub fn new(env: &Env, rank: u32, timeout: Duration) -> Result<NetTransport> {
        check_net_name(env)?;
        // NET/IB is tried first, as NCCL does; collscope's data path over verbs is not built yet, so found
        // ports are reported and sockets carry the data.
        #[cfg(feature = "ib")]
        if !super::ib::verbs::discover(env)?.is_empty() {
            crate::nccl_warn!("NET/IB : RDMA data path not available in collscope yet; using NET/Socket");
        }
        let net = NetSocket::init(env).map_err(net_err)?;
        nccl_info!(Subsys::INIT, "Using network Socket");
        Ok(NetTransport { net, dev: 0, proxy: Proxy::new(rank), timeout, stop: Arc::new(AtomicBool::new(false)) })
    }

    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }
}

impl Drop for NetTransport {
    /// Ends acceptor threads still waiting for senders that will never come.
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}

fn net_record(spec: &ConnSpec, src: u32, dst: u32, send: bool, dev: usize) -> model::Connection {
    let mut r = record(spec, src, dst, model::Transport::Net, &format!("Socket/{dev}"));
    r.direction = if send { model::Direction::Send } else { model::Direction::Recv };
    r.net = Some("Socket".into());
    r.device = Some(dev as u32);
    r.gdrdma = Some(false);
    r
}

struct NetSendPending {
    net: &'static NetSocket,
    proxy: Arc<Proxy>,
    sizes: BufSizes,
    channel: u32,
    peer: u32,
    timeout: Duration,
    stop: Arc<AtomicBool>,
    record: model::Connection,
    line: String,
}

struct NetRecvPending {
    listener: NetListener,
    proxy: Arc<Proxy>,
    sizes: BufSizes,
    channel: u32,
    peer: u32,
    record: model::Connection,
    line: String,
}

impl Transport for NetTransport {
    fn kind(&self) -> model::Transport {
        model::Transport::Net
    }

    /// NET reaches any rank; it comes last in the chain.
    fn can_connect(&self, _me: &PeerInfo, _peer: &PeerInfo) -> bool {
        true
    }

    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let line = format!(
            "Channel {:02}/{} : {}[{}] -> {}[{}] [send] via NET/Socket/{}",
            spec.channel, spec.conn_index, spec.me.rank, spec.me.dev, spec.peer.rank, spec.peer.dev, self.dev
        );
        let pending = NetSendPending {
            net: self.net,
            proxy: self.proxy.clone(),
            sizes: spec.sizes,
            channel: spec.channel,
            peer: spec.peer.rank,
            timeout: self.timeout,
            stop: self.stop.clone(),
            record: net_record(spec, spec.me.rank, spec.peer.rank, true, self.dev),
            line,
        };
        Ok((Box::new(pending), Vec::new()))
    }

    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let (listener, handle) = self.net.listen(self.dev, self.timeout, self.stop.clone()).map_err(net_err)?;
        let line = format!(
            "Channel {:02}/{} : {}[{}] -> {}[{}] [receive] via NET/Socket/{}",
            spec.channel, spec.conn_index, spec.peer.rank, spec.peer.dev, spec.me.rank, spec.me.dev, self.dev
        );
        let pending = NetRecvPending {
            listener,
            proxy: self.proxy.clone(),
            sizes: spec.sizes,
            channel: spec.channel,
            peer: spec.peer.rank,
            record: net_record(spec, spec.peer.rank, spec.me.rank, false, self.dev),
            line,
        };
        Ok((Box::new(pending), handle.to_bytes().to_vec()))
    }
}

impl Pending for NetSendPending {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established> {
        let handle = Handle::from_bytes(peer_handle).map_err(net_err)?;
        let comm = self.net.connect(&handle, self.timeout, self.stop.clone()).map_err(net_err)?;
        let mem = Arc::new(ConnMem::anonymous(self.sizes)?);
        let guard = self.proxy.add_send(comm, mem.clone(), self.channel, self.peer).map_err(proxy_err)?;
        Ok(Established { mem, record: self.record, line: Some(self.line), guard: Some(Box::new(guard)) })
    }
}

impl Pending for NetRecvPending {
    fn connect(self: Box<Self>, _peer_handle: &[u8]) -> Result<Established> {
        let comm = self.listener.accept().map_err(net_err)?;
        let mem = Arc::new(ConnMem::anonymous(self.sizes)?);
        let guard = self.proxy.add_recv(comm, mem.clone(), self.channel, self.peer).map_err(proxy_err)?;
        Ok(Established { mem, record: self.record, line: Some(self.line), guard: Some(Box::new(guard)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_net_accepts_socket_only() {
        assert!(check_net_name(&Env::from_pairs([("NCCL_NET", "socket")])).is_ok());
        assert!(check_net_name(&Env::default()).is_ok());
        let e = check_net_name(&Env::from_pairs([("NCCL_NET", "IB")])).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET='IB'") && e.contains("Socket"), "{e}");
        let e = NetTransport::new(&Env::from_pairs([("NCCL_NET", "IB")]), 0, Duration::from_secs(1)).err().unwrap();
        assert!(e.to_string().contains("NCCL_NET"), "{e}");
    }
}
