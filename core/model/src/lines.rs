//! NCCL's grammar of the lines both written by collscope (the runtime, the NCCL model) and read by the log
//! reader, each kind's formatter beside its parser and a round-trip test: connections (`Channel 00/0 : 0[0] ->
//! 1[1] via P2P/IPC/read`, [`ConnLine`] / [`connection`]), ring orders (`Channel 00/02 :    0   1 ...`,
//! [`ring_order_line`] / [`ring_order`]), ring neighbours (`Ring 00 : 7 -> 0 -> 1`, [`ring_line`] /
//! [`ring_neighbours`]) and trees ([`trees_line`] / [`trees`], [`tree`]) here; the init lines in [`init`]
//! (communicator info, Init COMPLETE, Init timings, graphs, channel counts, `Connected all rings`) and the
//! tuning table and per-call decisions in [`tuning`]. The formatters write NCCL 2.28.9's forms; the parsers
//! read those of NCCL 2.4 to 2.28.9 (`src/transport/{p2p,shm,net,coll_net}.cc`, `src/init.cc`,
//! `src/graph/connect.cc`, `src/graph/rings.cc`). Hand-parsed rather than by regex: these are most of a log's
//! lines.

pub mod init;
pub mod tuning;

pub use init::*;
pub use tuning::*;

use crate::connection::{Connection, Direction};
use crate::names::Transport;
use crate::scan::{self, Scan};
use std::fmt;

/// A connection as NCCL's transports print it at setup (NCCL 2.28.9 `src/transport/p2p.cc`, `shm.cc`,
/// `net.cc`): `Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer`, `Channel 00 : 0[0] -> 1[0] via
/// SHM/direct/direct`, `Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0`. What follows `via` is the
/// transport and the connection's `mode` (for NET the whole `IB/0(1)/GDRDMA/Shared`); `[send]`/`[receive]`
/// come from its direction.
#[derive(Debug, Clone, Copy)]
pub struct ConnLine<'a> {
    pub conn: &'a Connection,
    /// NCCL's `connIndex` after the channel (`00/0`); SHM's line has none.
    pub conn_index: Option<u32>,
    /// The device indices printed beside the source and destination ranks (`0[0]`).
    pub devs: (i32, i32),
}

impl fmt::Display for ConnLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.conn;
        write!(f, "Channel {:02}", c.channel)?;
        if let Some(i) = self.conn_index {
            write!(f, "/{i}")?;
        }
        write!(f, " : {}[{}] -> {}[{}]", c.src, self.devs.0, c.dst, self.devs.1)?;
        match c.direction {
            Direction::Send => f.write_str(" [send]")?,
            Direction::Recv => f.write_str(" [receive]")?,
            Direction::Both => {}
        }
        let mode = c.mode.as_deref().unwrap_or("");
        match c.transport {
            // Before NCCL 2.12 SHM said `via direct shared memory` or `via shared memory`, without the prefix.
            Transport::Shm if mode.ends_with("shared memory") => write!(f, " via {mode}"),
            Transport::Nvls if mode.is_empty() => f.write_str(" via NVLS"),
            t => write!(f, " via {t}/{mode}"),
        }
    }
}

/// `Channel 00/02 :    0   1   2 ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct RingOrder {
    pub channel: u32,
    pub n_channels: Option<u32>,
    pub order: Vec<u32>,
    pub truncated: bool,
}

/// One rank's place in one channel's tree: its parent (`up`, -1 for the root) and children (-1 for none; NCCL's
/// trees have at most three, `NCCL_MAX_TREE_ARITY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeEntry {
    pub channel: u32,
    pub rank: u32,
    pub up: i32,
    pub down: [i32; 3],
}

/// `3` or `3[1b000]`: the rank, ignoring the device or bus id NCCL prints beside it.
fn rank_of(s: &str) -> Option<u32> {
    // Digits read in place: this runs twice on every connection line.
    let b = s.trim().as_bytes();
    let (rank, len) = scan::num_prefix(b)?;
    matches!(b.get(len), None | Some(b'[')).then_some(rank)
}

/// `NN` or `NN/M` (the connection index, or the ring count), then ` :`.
fn channel_head(s: &mut Scan) -> Option<(u32, Option<u32>)> {
    let channel = s.num()?;
    let second = if s.eat("/") { Some(s.num()?) } else { None };
    s.lit(" :")?;
    Some((channel, second))
}

/// Parses `Channel ...`, `Ring ...` and `CollNet ...` bodies that carry ` via `.
pub fn connection(msg: &str) -> Option<Connection> {
    connection_at(msg, const { scan::Needle::new(" via ") }.find(msg)?)
}

/// [`connection`] with the position of ` via ` in `msg` known.
pub fn connection_at(msg: &str, via: usize) -> Option<Connection> {
    let (collnet, body) = if let Some(b) = msg.strip_prefix("Channel ") {
        (false, b)
    } else if let Some(b) = msg.strip_prefix("Ring ") {
        (false, b)
    } else {
        (true, msg.strip_prefix("CollNet ")?)
    };
    let mut s = Scan::new(body);
    let (channel, _) = channel_head(&mut s)?;
    let rest = s.rest().strip_prefix(' ')?;
    let via = via.checked_sub(msg.len() - rest.len())?;
    let (ends, spec) = (&rest[..via], &rest[via + 5..]);
    let (ends, direction) = if let Some(e) = ends.strip_suffix(" [send]") {
        (e, Direction::Send)
    } else if let Some(e) = ends.strip_suffix(" [receive]") {
        (e, Direction::Recv)
    } else {
        (ends, Direction::Both)
    };
    let (src, dst) = match ends_in_order(ends) {
        Some(ranks) => ranks,
        None => ends_by_arrow(ends, collnet)?,
    };
    // The transport is P2P unless the spec says otherwise; `comm` is set when the line is attributed to one.
    let mut c = Connection::new(channel, src, dst, direction, Transport::P2p);
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

/// The ranks of `S[x] -> D[y]` (or `S -> D`), read left to right without a search: `None` for any other form
/// (spaces around a rank, a bracket holding a space), which [`ends_by_arrow`] reads. Where this reads them, the
/// arrow it reads is the first, so both say the same.
fn ends_in_order(ends: &str) -> Option<(u32, u32)> {
    let b = ends.as_bytes();
    let (src, mut i) = scan::num_prefix(b)?;
    if b.get(i) == Some(&b'[') {
        i += b[i..].iter().position(|&c| c == b']' || c == b' ').filter(|&j| b[i + j] == b']')? + 1;
    }
    let right = b.get(i..)?.strip_prefix(b" -> ")?;
    let (dst, n) = scan::num_prefix(right)?;
    matches!(right.get(n), None | Some(b'[')).then_some((src, dst))
}

/// The ranks on each side of the first ` -> `; CollNet's lines may name one rank only.
fn ends_by_arrow(ends: &str, collnet: bool) -> Option<(u32, u32)> {
    match const { scan::Needle::new(" -> ") }.find(ends) {
        Some(i) => Some((rank_of(&ends[..i])?, rank_of(&ends[i + 4..])?)),
        None if collnet => {
            let r = rank_of(ends)?;
            Some((r, r))
        }
        None => None,
    }
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
    if let Some(r) = s.strip_suffix(')') {
        let i = r.rfind('(')?;
        c.proxy_rank = Some(r[i + 1..].parse().ok()?);
        s = &r[..i];
    }
    let (name, dev) = s.rsplit_once('/')?;
    c.device = Some(dev.parse().ok()?);
    c.net = Some(name.to_string());
    c.gdrdma = Some(gdr);
    c.mode = Some(spec.to_string());
    Some(())
}

/// NCCL's `dumpLine` (NCCL 2.28.9 `src/graph/rings.cc`): `prefix` then the values padded to the width of the
/// largest index, cut at NCCL's 128-byte line with `...`.
fn dump_line(values: &[u32], prefix: &str) -> String {
    const LINE_LENGTH: usize = 128;
    let width = values.len().saturating_sub(1).to_string().len();
    let mut line = prefix.to_string();
    for v in values {
        if line.len() >= LINE_LENGTH - 1 {
            break;
        }
        line.push_str(&format!(" {v:>width$}"));
    }
    if line.len() >= LINE_LENGTH {
        line.truncate(LINE_LENGTH - 4);
        line.push_str("...");
    }
    line
}

/// The ring order rank 0 prints per channel (NCCL 2.28.9 `src/graph/rings.cc`): `Channel 00/02 :  0  1  2  3`.
pub fn ring_order_line(channel: u32, n_channels: u32, order: &[u32]) -> String {
    dump_line(order, &format!("Channel {channel:02}/{n_channels:02} :"))
}

/// `Channel 00/02 :    0   1   2   3` (possibly cut short with `...`).
pub fn ring_order(msg: &str) -> Option<RingOrder> {
    let mut s = Scan::new(msg.strip_prefix("Channel ")?);
    let (channel, n_channels) = channel_head(&mut s)?;
    let mut order = Vec::new();
    let mut truncated = false;
    for tok in s.rest().split_ascii_whitespace() {
        if tok.starts_with("..") || tok.ends_with("..") {
            truncated = true;
            break;
        }
        order.push(tok.parse().ok()?);
    }
    Some(RingOrder { channel, n_channels, order, truncated })
}

/// Each rank's ring neighbours per channel (NCCL 2.28.9 `src/init.cc`): `Ring 00 : 7 -> 0 -> 1`.
pub fn ring_line(channel: u32, prev: u32, rank: u32, next: u32) -> String {
    format!("Ring {channel:02} : {prev} -> {rank} -> {next}")
}

/// `Ring 00 : 7 -> 0 -> 1`: (channel, prev, rank, next).
pub fn ring_neighbours(msg: &str) -> Option<(u32, u32, u32, u32)> {
    let mut s = Scan::new(msg.strip_prefix("Ring ")?);
    let channel = s.num()?;
    s.lit(" : ")?;
    let prev = s.num()?;
    s.lit(" -> ")?;
    let me = s.num()?;
    s.lit(" -> ")?;
    let next = s.num()?;
    s.is_empty().then_some((channel, prev, me, next))
}

/// `a/b/c` from `b[i..]`: one number, or several split by `/` (the children, -1 for none; past the third
/// ignored). The first three, how many there were, and where they end.
fn slashed(b: &[u8], mut i: usize) -> Option<([i32; 3], usize, usize)> {
    let mut out = [-1; 3];
    let mut n = 0;
    loop {
        let (v, len) = scan::num_prefix(b.get(i..)?)?;
        if let Some(slot) = out.get_mut(n) {
            *slot = v;
        }
        n += 1;
        i += len;
        if b.get(i) != Some(&b'/') {
            return Some((out, n, i));
        }
        i += 1;
    }
}

/// `a/b/c` children, all of the text.
fn children(s: &str) -> Option<[i32; 3]> {
    let (out, _, end) = slashed(s.as_bytes(), 0)?;
    (end == s.len()).then_some(out)
}

/// One channel's `down->rank->up` (2.8+, the children first) or `up->rank->down` (2.4) from `b[i..]`, told
/// apart by where the slashes are: the side with several numbers is the children. (rank, up, down) and where
/// it ends.
fn tree_spec(b: &[u8], i: usize) -> Option<(u32, i32, [i32; 3], usize)> {
    let arrow = |i: usize| (b.get(i..i + 2) == Some(b"->")).then_some(i + 2);
    let (a, a_n, i) = slashed(b, i)?;
    let i = arrow(i)?;
    let (rank, len) = scan::num_prefix(&b[i..])?;
    let i = arrow(i + len)?;
    let (c, c_n, i) = slashed(b, i)?;
    match (a_n, c_n) {
        (_, 1) => Some((rank, c[0], a, i)),
        (1, _) => Some((rank, a[0], c, i)),
        _ => None,
    }
}

/// One rank's trees over all channels (NCCL 2.28.9 `src/init.cc`): `Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8`,
/// down -> rank -> up per channel, cut at NCCL's 1024-byte line buffer.
pub fn trees_line(entries: &[TreeEntry]) -> String {
    let mut summary = String::new();
    for TreeEntry { channel, rank, up, down } in entries {
        let down: Vec<String> = down.iter().map(i32::to_string).collect();
        summary.push_str(&format!(" [{channel}] {}->{rank}->{up}", down.join("/")));
    }
    summary.truncate(1022);
    format!("Trees{summary}")
}

/// `Trees [0] 1/8/-1->0->-1 [1] ...` (2.8+: down->rank->up), `Trees [0] 1/-1/-1->0->7|7->0->1/-1/-1` (2.5-2.7:
/// the up tree, then the down tree) and `Trees [0] 26->25->-1/-1/-1` (2.4: up->rank->down).
pub fn trees(msg: &str) -> Option<Vec<TreeEntry>> {
    // Walked by index over the bytes: a Trees line holds a spec for each of up to 64 channels.
    let b = msg.strip_prefix("Trees")?.as_bytes();
    let ws = |mut i: usize| {
        while matches!(b.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        i
    };
    // Sized once, not grown: each channel's ` [N] a/b/c->r->u` takes 16 bytes or more (NCCL prints three children).
    let mut out = Vec::with_capacity(b.len() / 16 + 1);
    let mut i = ws(0);
    while i < b.len() {
        if b[i] != b'[' {
            return None;
        }
        let (channel, len) = scan::num_prefix(&b[i + 1..])?;
        i += 1 + len;
        if b.get(i) != Some(&b']') {
            return None;
        }
        let (rank, up, down, end) = tree_spec(b, ws(i + 1))?;
        out.push(TreeEntry { channel, rank, up, down });
        i = end;
        // 2.5-2.7 print the up tree, `|`, then the down tree: the first is read, the second skipped.
        if b.get(i) == Some(&b'|') {
            while !matches!(b.get(i), None | Some(b' ' | b'\t')) {
                i += 1;
            }
        }
        // A spec ends at a space or the end.
        if !matches!(b.get(i), None | Some(b' ' | b'\t')) {
            return None;
        }
        i = ws(i);
    }
    (!out.is_empty()).then_some(out)
}

/// `Tree 0 : -1 -> 0 -> 1/8/-1` (up -> rank -> down).
pub fn tree(msg: &str) -> Option<TreeEntry> {
    let mut s = Scan::new(msg.strip_prefix("Tree ")?);
    let channel = s.num()?;
    s.lit(" : ")?;
    let up = s.num()?;
    s.lit(" -> ")?;
    let rank = s.num()?;
    s.lit(" -> ")?;
    let down = children(s.rest().trim_end())?;
    Some(TreeEntry { channel, rank, up, down })
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
        assert!(connection("Channel 00/0 : 0[0] -> 1[1] via NET/IB/x").is_none());
    }

    #[test]
    fn ends_read_in_order_as_by_the_arrow() {
        for ends in ["0[0] -> 1[1]", "12 -> 3", "3[1b000] -> 7[41000]", "0[0] -> 1[1] x", "0[0] -> 1"] {
            assert_eq!(ends_in_order(ends), ends_by_arrow(ends, false), "{ends}");
            assert!(ends_in_order(ends).is_some(), "{ends}");
        }
        // Other forms are left to the search; what it says of them stands.
        for ends in [" 0 -> 1", "0 -> 1 ", "0[a -> b] -> 1", "0[0 -> 1", "0 ->1", "3", "x -> 1", "0 -> -1"] {
            assert_eq!(ends_in_order(ends), None, "{ends}");
        }
        assert_eq!(ends_by_arrow(" 0 -> 1 ", false), Some((0, 1)));
        assert_eq!(ends_by_arrow("0[a -> b] -> 1", false), None);
        assert_eq!(ends_by_arrow("3", true), Some((3, 3)));
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

    fn record(channel: u32, src: u32, dst: u32, direction: Direction, transport: Transport, mode: &str) -> Connection {
        Connection { mode: Some(mode.into()), ..Connection::new(channel, src, dst, direction, transport) }
    }

    #[test]
    fn connections_the_runtime_writes_read_back_as_the_same_value() {
        let p2p = record(1, 0, 1, Direction::Both, Transport::P2p, "direct pointer");
        let shm = record(2, 1, 0, Direction::Both, Transport::Shm, "direct/direct");
        let net = |direction, name: &str, dev| Connection {
            gdrdma: Some(false),
            ..Connection::net(0, 3, 2, direction, name, dev)
        };
        for (c, index, want) in [
            (&p2p, Some(0), "Channel 01/0 : 0[0] -> 1[1] via P2P/direct pointer"),
            (&shm, None, "Channel 02 : 1[0] -> 0[1] via SHM/direct/direct"),
            (&net(Direction::Send, "Socket", 0), Some(0), "Channel 00/0 : 3[0] -> 2[1] [send] via NET/Socket/0"),
            (&net(Direction::Recv, "IB", 1), Some(1), "Channel 00/1 : 3[0] -> 2[1] [receive] via NET/IB/1"),
        ] {
            let line = ConnLine { conn: c, conn_index: index, devs: (0, 1) }.to_string();
            assert_eq!(line, want);
            assert_eq!(connection(&line).as_ref(), Some(c), "{line}");
        }
    }

    #[test]
    fn nccl_connection_lines_are_written_back_as_read() {
        for line in [
            "Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read",
            "Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]/read",
            "Channel 02 : 1[1] -> 2[2] via SHM/direct/direct",
            "Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA",
            "Channel 02/1 : 1[1] -> 9[1] [send] via NET/IB/0(0)/GDRDMA(PCI)/Shared",
            "Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/1/GDRDMA",
            "Channel 00 : 0[0] -> 7[0] via direct shared memory",
        ] {
            let c = connection(line).unwrap();
            let (head, rest) = line.split_once(" : ").unwrap();
            let index = head.split_once('/').map(|(_, i)| i.parse().unwrap());
            let dev = |end: &str| end.trim().split_once('[').unwrap().1.split_once(']').unwrap().0.parse().unwrap();
            let (a, b) = rest.split_once(" -> ").unwrap();
            let written = ConnLine { conn: &c, conn_index: index, devs: (dev(a), dev(b)) }.to_string();
            assert_eq!(written, line);
        }
    }

    #[test]
    fn ring_and_tree_lines_read_back_as_written() {
        let order = [0, 3, 1, 2];
        let line = ring_order_line(1, 2, &order);
        assert_eq!(line, "Channel 01/02 : 0 3 1 2");
        assert_eq!(
            ring_order(&line),
            Some(RingOrder { channel: 1, n_channels: Some(2), order: order.to_vec(), truncated: false })
        );
        let long: Vec<u32> = (0..64).collect();
        let line = ring_order_line(0, 2, &long);
        assert_eq!(line.len(), 127);
        assert!(line.ends_with("..."), "{line}");
        let r = ring_order(&line).unwrap();
        assert!(r.truncated && long.starts_with(&r.order), "{line}");

        assert_eq!(ring_line(2, 1, 0, 7), "Ring 02 : 1 -> 0 -> 7");
        assert_eq!(ring_neighbours(&ring_line(2, 1, 0, 7)), Some((2, 1, 0, 7)));

        let entries = vec![
            TreeEntry { channel: 0, rank: 0, up: -1, down: [1, 8, -1] },
            TreeEntry { channel: 1, rank: 0, up: 8, down: [1, -1, -1] },
        ];
        let line = trees_line(&entries);
        assert_eq!(line, "Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8");
        assert_eq!(trees(&line), Some(entries));
        let many: Vec<TreeEntry> =
            (0..64).map(|channel| TreeEntry { channel, rank: 5, up: 4, down: [6, 7, -1] }).collect();
        assert!(trees_line(&many).len() <= "Trees".len() + 1022);
    }

    #[test]
    fn tree_forms() {
        let e = |channel, rank, up, down| TreeEntry { channel, rank, up, down };
        let t = trees("Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8").unwrap();
        assert_eq!(t[0], e(0, 0, -1, [1, 8, -1]));
        assert_eq!(t[1], e(1, 0, 8, [1, -1, -1]));
        let t = trees("Trees [0] 1/-1/-1->0->7|7->0->1/-1/-1").unwrap();
        assert_eq!(t[0], e(0, 0, 7, [1, -1, -1]));
        let t = trees("Trees [0] 26->25->-1/-1/-1").unwrap();
        assert_eq!(t[0], e(0, 25, 26, [-1, -1, -1]));
        assert_eq!(tree("Tree 2 : -1 -> 1 -> 0/-1/-1"), Some(e(2, 1, -1, [0, -1, -1])));
        assert!(trees("Trees [0] x").is_none());
        // Both sides listing children, a third arrow, a stray byte, a missing spec: not a tree.
        for bad in
            ["Trees [0] 1/8->0->2/3", "Trees [0] 1->0->2->3", "Trees [0] 1->0->2x", "Trees [0]", "Trees", "Trees 0"]
        {
            assert_eq!(trees(bad), None, "{bad}");
        }
        let t = trees("Trees\t[0] 1->0->2|2->0->1 [1] 3/4->0->-1").unwrap();
        assert_eq!(t, vec![e(0, 0, 2, [1, -1, -1]), e(1, 0, -1, [3, 4, -1])]);
    }
}
