//! Channel lines: connections (`Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`), ring orders
//! (`Channel 00/02 :    0   1 ...`), ring neighbours (`Ring 00 : 7 -> 0 -> 1`) and trees, in the forms NCCL 2.4
//! to 2.28.9 print (`src/transport/{p2p,shm,net,coll_net}.cc`, `src/init.cc`, `src/graph/connect.cc`).
//! Hand-parsed rather than by regex: these are most of a log's lines.

use collscope_model::{Connection, Direction, Transport};

/// `Channel 00/02 :    0   1   2 ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct RingOrder {
    pub channel: u32,
    pub n_channels: Option<u32>,
    pub order: Vec<u32>,
    pub truncated: bool,
}

/// One tree entry: (channel, rank, up, down).
pub type TreeEntry = (u32, u32, i32, Vec<i32>);

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.trim().parse().ok()
}

/// `3` or `3[1b000]`: the rank, ignoring the device or bus id NCCL prints beside it.
fn rank_of(s: &str) -> Option<u32> {
    let s = s.trim();
    num(s.split_once('[').map_or(s, |(r, _)| r))
}

/// `NN` or `NN/M` before ` : `.
fn channel_head(s: &str) -> Option<(u32, Option<u32>)> {
    match s.split_once('/') {
        Some((c, n)) => Some((num(c)?, num(n))),
        None => Some((num(s)?, None)),
    }
}

/// Parses `Channel ...`, `Ring ...` and `CollNet ...` bodies that carry ` via `.
pub fn connection(msg: &str) -> Option<Connection> {
    let (kind, body) = if let Some(b) = msg.strip_prefix("Channel ") {
        ("channel", b)
    } else if let Some(b) = msg.strip_prefix("Ring ") {
        ("ring", b)
    } else if let Some(b) = msg.strip_prefix("CollNet ") {
        ("collnet", b)
    } else {
        return None;
    };
    let (head, rest) = body.split_once(" : ")?;
    let (channel, _) = channel_head(head)?;
    let (ends, spec) = rest.split_once(" via ")?;
    let (ends, direction) = if let Some(e) = ends.strip_suffix(" [send]") {
        (e, Direction::Send)
    } else if let Some(e) = ends.strip_suffix(" [receive]") {
        (e, Direction::Recv)
    } else {
        (ends, Direction::Both)
    };
    let (src, dst) = match ends.split_once(" -> ") {
        Some((a, b)) => (rank_of(a)?, rank_of(b)?),
        None if kind == "collnet" => {
            let r = rank_of(ends)?;
            (r, r)
        }
        None => return None,
    };
    let mut c = Connection {
        channel,
        src,
        dst,
        direction,
        transport: Transport::P2p,
        mode: None,
        net: None,
        device: None,
        gdrdma: None,
        proxy_rank: None,
        shared: false,
        // Set when the line is attributed to a communicator.
        comm: None,
    };
    let spec = spec.trim_end();
    if let Some(m) = spec.strip_prefix("P2P/") {
        c.mode = Some(m.to_string());
    } else if let Some(m) = spec.strip_prefix("SHM/") {
        c.transport = Transport::Shm;
        c.mode = Some(m.to_string());
    } else if spec == "direct shared memory" || spec == "shared memory" {
        c.transport = Transport::Shm;
        c.mode = Some(spec.to_string());
    } else if let Some(m) = spec.strip_prefix("NET/") {
        c.transport = Transport::Net;
        net_spec(m, &mut c)?;
    } else if let Some(m) = spec.strip_prefix("COLLNET/") {
        c.transport = Transport::CollNet;
        net_spec(m, &mut c)?;
    } else if let Some(m) = spec.strip_prefix("NVLS") {
        c.transport = Transport::Nvls;
        c.mode = Some(m.trim_start_matches('/').to_string()).filter(|m| !m.is_empty());
    } else {
        return None;
    }
    Some(c)
}

/// `IB/0`, `IB/0/GDRDMA`, `IB/0(1)/GDRDMA(PCI)/Shared`, `Socket/3`, `AWS Libfabric/2`.
fn net_spec(spec: &str, c: &mut Connection) -> Option<()> {
    let mut s = spec;
    if let Some(r) = s.strip_suffix("/Shared") {
        c.shared = true;
        s = r;
    }
    s = s.strip_suffix("(PCI)").unwrap_or(s);
    let gdr = s.ends_with("/GDRDMA");
    s = s.strip_suffix("/GDRDMA").unwrap_or(s);
    if let Some(open) = s.strip_suffix(')').and_then(|r| r.rfind('(').map(|i| (r, i))) {
        let (r, i) = open;
        c.proxy_rank = Some(num(&r[i + 1..])?);
        s = &r[..i];
    }
    let (name, dev) = s.rsplit_once('/')?;
    c.device = Some(num(dev)?);
    c.net = Some(name.to_string());
    c.gdrdma = Some(gdr);
    c.mode = Some(spec.to_string());
    Some(())
}

/// `Channel 00/02 :    0   1   2   3` (possibly cut short with `...`).
pub fn ring_order(msg: &str) -> Option<RingOrder> {
    let body = msg.strip_prefix("Channel ")?;
    let (head, rest) = body.split_once(" :")?;
    if rest.contains(" via ") || rest.contains("->") {
        return None;
    }
    let (channel, n_channels) = channel_head(head)?;
    let mut order = Vec::new();
    let mut truncated = false;
    for tok in rest.split_ascii_whitespace() {
        if tok.starts_with("..") || tok.ends_with("..") {
            truncated = true;
            break;
        }
        order.push(num(tok)?);
    }
    Some(RingOrder { channel, n_channels, order, truncated })
}

/// `Ring 00 : 7 -> 0 -> 1`: (channel, prev, rank, next).
pub fn ring_neighbours(msg: &str) -> Option<(u32, u32, u32, u32)> {
    let (head, rest) = msg.strip_prefix("Ring ")?.split_once(" : ")?;
    let mut parts = rest.split(" -> ");
    let prev = num(parts.next()?)?;
    let me = num(parts.next()?)?;
    let next = num(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some((num(head)?, prev, me, next))
}

fn children(s: &str) -> Option<Vec<i32>> {
    s.split('/').map(num).collect()
}

/// `Trees [0] 1/8/-1->0->-1 [1] ...` (2.8+: down->rank->up), `Trees [0] 1/-1/-1->0->7|7->0->1/-1/-1` (2.5-2.7:
/// the up tree, then the down tree) and `Trees [0] 26->25->-1/-1/-1` (2.4: up->rank->down).
pub fn trees(msg: &str) -> Option<Vec<TreeEntry>> {
    let body = msg.strip_prefix("Trees")?;
    let mut out = Vec::new();
    for entry in body.split('[').skip(1) {
        let (ch, spec) = entry.split_once(']')?;
        let channel = num(ch)?;
        let spec = spec.trim();
        let first = spec.split('|').next()?;
        let parts: Vec<&str> = first.split("->").collect();
        if parts.len() != 3 {
            return None;
        }
        let rank = num(parts[1])?;
        if parts[0].contains('/') || !parts[2].contains('/') {
            out.push((channel, rank, num(parts[2])?, children(parts[0])?));
        } else {
            out.push((channel, rank, num(parts[0])?, children(parts[2])?));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `Tree 0 : -1 -> 0 -> 1/8/-1` (up -> rank -> down).
pub fn tree(msg: &str) -> Option<TreeEntry> {
    let (head, rest) = msg.strip_prefix("Tree ")?.split_once(" : ")?;
    let mut parts = rest.split(" -> ");
    let up = num(parts.next()?)?;
    let rank = num(parts.next()?)?;
    let down = children(parts.next()?)?;
    Some((num(head)?, rank, up, down))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2p_and_shm_forms() {
        let c = connection("Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read").unwrap();
        assert_eq!((c.channel, c.src, c.dst, c.transport), (1, 8, 15, Transport::P2p));
        assert_eq!(c.mode.as_deref(), Some("IPC/read"));
        let c = connection("Channel 00/0 : 3[3] -> 2[2] via P2P/direct pointer").unwrap();
        assert_eq!(c.mode.as_deref(), Some("direct pointer"));
        let c = connection("Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]/read").unwrap();
        assert_eq!(c.mode.as_deref(), Some("indirect/1[1]/read"));
        let c = connection("Channel 02 : 1[1] -> 2[2] via SHM/direct/direct").unwrap();
        assert_eq!((c.transport, c.mode.as_deref()), (Transport::Shm, Some("direct/direct")));
        let c = connection("Ring 00 : 0[1b000] -> 7[41000] via direct shared memory").unwrap();
        assert_eq!((c.transport, c.src, c.dst), (Transport::Shm, 0, 7));
        let c = connection("Channel 00/0 : 3[1] -> 2[0] via P2P/CUMEM/read").unwrap();
        assert_eq!(c.mode.as_deref(), Some("CUMEM/read"));
    }

    #[test]
    fn net_forms() {
        let c = connection("Ring 00 : 6 -> 2 [receive] via NET/IB/0").unwrap();
        assert_eq!((c.src, c.dst, c.direction, c.gdrdma), (6, 2, Direction::Recv, Some(false)));
        assert_eq!((c.net.as_deref(), c.device), (Some("IB"), Some(0)));
        let c = connection("Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA").unwrap();
        assert_eq!((c.device, c.gdrdma), (Some(3), Some(true)));
        let c = connection("Channel 02/1 : 1[1] -> 9[1] [send] via NET/IB/0(0)/GDRDMA(PCI)/Shared").unwrap();
        assert_eq!((c.proxy_rank, c.gdrdma, c.shared, c.direction), (Some(0), Some(true), true, Direction::Send));
        let c = connection("Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3").unwrap();
        assert_eq!((c.net.as_deref(), c.device), (Some("Socket"), Some(3)));
        let c = connection("Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/1/GDRDMA").unwrap();
        assert_eq!(c.net.as_deref(), Some("AWS Libfabric"));
        let c = connection("CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA").unwrap();
        assert_eq!((c.transport, c.src), (Transport::CollNet, 3));
        assert!(connection("Channel 00/0 : 0[0] -> 1[1] via CARRIER/PIGEON").is_none());
        assert!(connection("Channel 00 : garbage").is_none());
    }

    #[test]
    fn ring_orders_and_neighbours() {
        let r = ring_order("Channel 00/02 :    0   1   2   3").unwrap();
        assert_eq!((r.channel, r.n_channels, r.order.len(), r.truncated), (0, Some(2), 4, false));
        let r = ring_order("Channel 01/24 :    0   1   2 ...").unwrap();
        assert!(r.truncated && r.order == vec![0, 1, 2]);
        assert_eq!(ring_neighbours("Ring 02 : 1 -> 0 -> 7"), Some((2, 1, 0, 7)));
        assert_eq!(ring_neighbours("Ring 00 : 3[3] -> 1[1] via P2P/IPC"), None);
    }

    #[test]
    fn tree_forms() {
        let t = trees("Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8").unwrap();
        assert_eq!(t[0], (0, 0, -1, vec![1, 8, -1]));
        assert_eq!(t[1], (1, 0, 8, vec![1, -1, -1]));
        let t = trees("Trees [0] 1/-1/-1->0->7|7->0->1/-1/-1").unwrap();
        assert_eq!(t[0], (0, 0, 7, vec![1, -1, -1]));
        let t = trees("Trees [0] 26->25->-1/-1/-1").unwrap();
        assert_eq!(t[0], (0, 25, 26, vec![-1, -1, -1]));
        assert_eq!(tree("Tree 2 : -1 -> 1 -> 0/-1/-1"), Some((2, 1, -1, vec![0, -1, -1])));
        assert!(trees("Trees [0] x").is_none());
    }
}
