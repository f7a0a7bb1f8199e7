//! What one NCCL message says, as a typed event. Dispatch looks at the message's first word, so each family's
//! hand-written parser runs only on its candidates. Formats follow NCCL 2.28.9 and the older forms seen in real
//! logs (2.4 to 2.27), RCCL's additions, and the network plugins' lines that name themselves.

pub mod bench;
pub mod failure;
pub mod setup;
pub mod topo;
pub mod tuning;

/// The lines collscope writes too (connections, rings, trees, init lines, the tuning table, decisions): the
/// model's grammar, each parser beside the formatter the runtime and the NCCL model write with.
pub use collscope_model::lines as conn;
/// The cursor every hand-written parser reads NCCL's printf formats with.
pub use collscope_model::scan;
use collscope_model::{ChannelCounts, Graph, NetDevice, PluginNote};

pub use conn::{CommInfo, CommInit, DecisionLine, RingOrder, TableLine, TreeEntry};
pub use setup::{Alloc, CommEnd, GdrLine, NvlsComm};
pub use topo::{GraphToken, NodeAttrs, NodeRef, PathLine, TopoLine};
pub use tuning::CollLine;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Version(String),
    /// RCCL's `RCCL version : 2.20.5-HEAD:...` (the NCCL API version it follows).
    RcclVersion(String),
    /// Another line only RCCL prints (`HIP version  : ...`, `ROCr version 1.14`, `[node_id = ...]`).
    RcclLine,
    /// RCCL appends `comm 0x... nRanks NN [busId ...]` to NCCL's lines: the communicator's size, and the line.
    Rccl {
        comm: String,
        nranks: u32,
        inner: Box<Event>,
    },
    Bootstrap {
        name: String,
        address: String,
    },
    /// `NET/IB : Using [0]mlx5_0:1/IB ...; OOB ib0:10.0.0.1<0>` and `NET/Socket : Using [0]eth0:10.0.0.1<0>`.
    NetUsing {
        net: String,
        devices: Vec<NetDevice>,
    },
    /// `NET/IB : No device found.`
    NetNoDevice(String),
    /// `Using network IB`, `Assigned NET plugin IB to comm`.
    UsingNetwork(String),
    /// A line from a network plugin that names itself (`NET/OFI Selected provider is efa`).
    NetPluginActive(String),
    Plugin(PluginNote),
    Gdr(GdrLine),
    Graph(Graph),
    GraphChannel(Vec<GraphToken>),
    /// `Could not find a path for pattern 4, falling back to simple order`.
    SearchFallback(u32),
    Conn(collscope_model::Connection),
    RingOrder(RingOrder),
    /// (channel, prev, rank, next).
    RingNeighbours(u32, u32, u32, u32),
    Trees(Vec<TreeEntry>),
    ChannelCounts(ChannelCounts),
    ThreadThresholds(String),
    ConnectedRings {
        pxn: Option<bool>,
        gdr: Option<bool>,
    },
    /// NVLS set up or used (`Connected NVLS tree`); `false` for "not available".
    Nvls(bool),
    /// `NVLS comm 0x.. headRank 0 nHeads 8 [nvlsRanks 8] ...`.
    NvlsComm(NvlsComm),
    CommInit(CommInit),
    CommInfo(CommInfo),
    /// `comm 0x.. rank 5 nranks 8 cudaDev 1 busId a7000 - Abort COMPLETE` (or `Destroy`).
    CommEnd(CommEnd),
    /// `ProxyCall UDS comm 0x.. rank R ...`: the rank printing, and its communicator.
    ProxyCall {
        comm: String,
        rank: u32,
    },
    /// A memory trace (`Cuda Alloc Size N pointer P`, ...).
    Alloc(Alloc),
    /// A topology detection note (`Topology detection : could not read ...`, `Loading topology file ...`).
    TopologyNote(String),
    /// A plugin's `comm with 16 ranks and 2 nodes`.
    CommSize {
        nranks: u32,
        nnodes: u32,
    },
    InitTimings {
        rank: u32,
        nranks: u32,
        total: f64,
        phases: Vec<(String, f64)>,
    },
    Table(TableLine),
    MatrixStart,
    Decision(DecisionLine),
    Coll(CollLine),
    Env {
        name: String,
        value: String,
    },
    TopoSystem {
        max_bw: f64,
        total_bw: f64,
    },
    /// A line of the system tree: `CPU/0-0 (1/1/143)`, `+ PCI[24.0] - GPU/0-1b000 (0)`.
    TopoLine(TopoLine),
    /// `==========` closing the tree.
    TopoEnd,
    Path(PathLine),
    /// `P2P is disabled between connected GPUs 0 and 1`.
    P2pDisabled,
    /// `Disabling LL128 over all PxN connections (PXB and C2C)`.
    Ll128Disabled,
    /// `User asked for a minimum of 64 channels, limiting to 32`.
    ChannelsLimited,
    /// `init.cc:1089 -> 2`: an error code passed up the stack.
    ErrorTrace,
    /// `[Service thread] Connection closed by localRank 1`: that local rank's process went away.
    PeerClosed(u32),
    /// Understood, nothing to keep.
    Known,
}

/// Parses one NCCL INFO/TRACE message. `None` means not understood.
pub fn parse(msg: &str) -> Option<Event> {
    let body = msg.trim_start_matches(' ');
    let indent = msg.len() - body.len();
    let first = *body.as_bytes().first()?;
    if first == b'+' {
        return topo::tree_line(indent, body);
    }
    if first.is_ascii_digit() {
        return digits(body);
    }
    let word = first_word(body);
    match word {
        "Channel" | "CollNet" | "Ring" | "Trees" | "Connected" if has_rccl_tail(body) => rccl(body),
        "Channel" | "CollNet" | "Ring" => channel_line(body),
        "Trees" => conn::trees(body).map(Event::Trees),
        "Tree" => conn::tree(body).map(|t| Event::Trees(vec![t])),
        "Connected" => Some(setup::connected(body)),
        "NCCL" if body.starts_with("NCCL version ") => Some(Event::Version(setup::version(body)?)),
        _ if word.starts_with("NCCL_") || word.starts_with("RCCL_") => setup::env(body),
        "Pattern" => conn::graph(body).map(Event::Graph),
        "tunedColl" | "collnetColl" | "CBDColl" => tuning::rccl_enqueue(body).map(Event::Decision),
        _ if word.starts_with("===") => topo::system(body),
        "Latency/AlgBw" | "Algorithm" | "Protocol" | "Max" => conn::table_line(body).map(Event::Table),
        _ if word != "threadThresholds" && memchr::memchr(b'|', body.as_bytes()).is_some() => {
            conn::table_line(body).map(Event::Table)
        }
        _ if is_node(word) => topo::node_line(indent, body),
        _ => named(word, body).or_else(|| setup::misc(word, body)),
    }
}

/// Parses a message printed without NCCL's prefix (pasted bare, or a prefix stripped). Outside a run of such
/// messages only those whose first bytes and grammar are NCCL's alone count: lines the dispatch knows only as
/// words (`Setting affinity ...`, `Loading ...`, `Tuner ...`), a `=====` rule or an error trace
/// could be any program's. `in_run`: the line right before was a bare NCCL message, so these are read too.
pub fn parse_bare(msg: &str, in_run: bool) -> Option<Event> {
    let ev = parse(msg)?;
    if in_run {
        return Some(ev);
    }
    let own = match &ev {
        Event::Known => own_word(first_word(msg.trim_start())),
        Event::ErrorTrace | Event::TopoEnd | Event::ChannelsLimited => false,
        Event::Plugin(_) => first_word(msg.trim_start()) != "Tuner",
        // `HIP version` alone could be any HIP program's; RCCL's banner pads it (`HIP version  : `).
        Event::RcclLine => !msg.starts_with("HIP version") || msg.starts_with("HIP version  : "),
        _ => true,
    };
    own.then_some(ev)
}

/// First words of messages read as [`Event::Known`] that no other program prints: NCCL's proxy handshake
/// (2.28.9 `src/proxy.cc`), its network and NVLS lines, RCCL's own.
fn own_word(word: &str) -> bool {
    matches!(
        word,
        "[Proxy"
            | "ProxyCall"
            | "sendConnect"
            | "recvConnect"
            | "cudaDriverVersion"
            | "MNNVL"
            | "NVLS"
            | "Librccl"
            | "MSCCL"
            | "GDRCOPY"
            | "TOPO/NET"
            | "minCTAs"
            | "latencyinter"
            | "Dmabuf"
            | "DMA-BUF"
            | "DMA_BUF"
    ) || ["ncclProxy", "ncclPoll", "proxyUDS", "NET/", "ncclComm"].iter().any(|p| word.starts_with(p))
}

/// The first word: up to a space, or up to a `:` that a space follows (`AllReduce: ...`).
fn first_word(s: &str) -> &str {
    let b = s.as_bytes();
    let mut i = 0;
    // Eight bytes at a time to the next space or colon: this runs on every message.
    while let Some(w) = scan::word_at(b, i) {
        let at = match (scan::byte_in_word(w, b' '), scan::byte_in_word(w, b':')) {
            (None, None) => {
                i += 8;
                continue;
            }
            (Some(s), Some(c)) => i + s.min(c),
            (Some(x), None) | (None, Some(x)) => i + x,
        };
        if b[at] == b' ' || b.get(at + 1) == Some(&b' ') {
            return &s[..at];
        }
        // A colon inside the word (`NET/IB:0`): on past it.
        i = at + 1;
    }
    while i < b.len() && b[i] != b' ' && !(b[i] == b':' && b.get(i + 1) == Some(&b' ')) {
        i += 1;
    }
    &s[..i]
}

/// `GPU/...`, `NET/0-0`, `CPU/1`: a topology node name (a NET followed by a digit, not `NET/IB`).
fn is_node(word: &str) -> bool {
    // Every kind is three letters: the slash is the fourth byte (a test of one byte on the many words that are not).
    let b = word.as_bytes();
    let (Some(kind), Some(&id)) = (b.get(..3), b.get(4)) else { return false };
    b[3] == b'/'
        && matches!(kind, b"GPU" | b"PCI" | b"NVS" | b"CPU" | b"NIC" | b"NET")
        && id.is_ascii_hexdigit()
        && (kind != b"NET" || id.is_ascii_digit())
}

/// Messages that start with a number: channel counts, decisions, graph channels.
fn digits(body: &str) -> Option<Event> {
    // Decisions and error traces hold an arrow, channel counts ` coll channels`, graph channels ` : `: a line with
    // none of `>`, `c` and `:` (a benchmark's table row) is none of them, found with one byte search.
    memchr::memchr3(b'>', b'c', b':', body.as_bytes())?;
    if const { scan::Needle::new(" Bytes -> Algo ") }.find(body).is_some() {
        return conn::decision(body).map(Event::Decision);
    }
    if const { scan::Needle::new(" coll channels") }.find(body).is_some() {
        return conn::channel_counts(body).map(Event::ChannelCounts);
    }
    if let Some(tokens) = topo::graph_channel(body) {
        return Some(Event::GraphChannel(tokens));
    }
    setup::error_trace(body)
}

/// `AllReduce: opCount ...` and `AllReduce: 65536 Bytes -> Algo ...`: messages named by a collective.
fn named(word: &str, body: &str) -> Option<Event> {
    // `word` is `body`'s first word: what follows it is all there is to compare.
    let rest = body.get(word.len()..)?.strip_prefix(": ")?;
    if rest.starts_with("opCount ") {
        return tuning::coll(body).map(Event::Coll);
    }
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        return conn::decision(body).map(Event::Decision);
    }
    None
}

/// Whether the line ends with RCCL's `nRanks NN [busId X]` (looked for in its last bytes only).
fn has_rccl_tail(body: &str) -> bool {
    let tail = &body.as_bytes()[body.len().saturating_sub(32)..];
    // By its `R`, which these lines rarely hold: four word-wide tests rule most lines out, then one byte search
    // instead of a comparison at every offset.
    if tail.len() == 32
        && (0..32).step_by(8).all(|i| scan::word_at(tail, i).is_some_and(|w| scan::byte_in_word(w, b'R').is_none()))
    {
        return false;
    }
    memchr::memchr_iter(b'R', tail).any(|i| i >= 1 && tail[i - 1..].starts_with(b"nRanks "))
}

/// RCCL's `... comm 0x55d3 nRanks 16 [busId 29000]` after a line NCCL also prints (RCCL 2.20 `src/init.cc`,
/// `src/transport/*.cc`).
fn rccl(body: &str) -> Option<Event> {
    let at = scan::rfind(body, " comm 0x")?;
    let mut s = scan::Scan::new(&body[at + 6..]);
    let comm = s.word()?;
    s.lit(" nRanks ")?;
    let nranks = s.num()?;
    if !s.is_empty() {
        s.lit(" busId ")?;
        s.hex()?;
        if !s.is_empty() {
            return None;
        }
    }
    let inner = parse(&body[..at])?;
    Some(Event::Rccl { comm: comm.to_string(), nranks, inner: Box::new(inner) })
}

/// `Channel ...`, `Ring ...` and `CollNet ...`: a connection when it says ` via `, else a ring order or a
/// rank's ring neighbours.
pub fn channel_line(msg: &str) -> Option<Event> {
    if let Some(via) = const { scan::Needle::new(" via ") }.find(msg) {
        return conn::connection_at(msg, via).map(Event::Conn);
    }
    if msg.starts_with("Ring ") {
        return conn::ring_neighbours(msg).map(|(c, p, r, n)| Event::RingNeighbours(c, p, r, n));
    }
    conn::ring_order(msg).map(Event::RingOrder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_reaches_each_family() {
        assert!(matches!(parse("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"), Some(Event::Conn(_))));
        assert!(matches!(parse("Channel 00/02 :    0   1"), Some(Event::RingOrder(_))));
        assert!(matches!(parse("Ring 00 : 7 -> 0 -> 1"), Some(Event::RingNeighbours(0, 7, 0, 1))));
        assert!(matches!(parse("Trees [0] 1/8/-1->0->-1"), Some(Event::Trees(_))));
        assert!(matches!(parse("NCCL version 2.28.9+cuda12.9"), Some(Event::Version(v)) if v == "2.28.9+cuda12.9"));
        assert!(matches!(parse("NCCL_IB_DISABLE set by environment to 0."), Some(Event::Env { .. })));
        assert!(matches!(parse("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 1 datatype 7 op 0 root 0 comm 0x3 [nranks=2] stream 0x4"), Some(Event::Coll(_))));
        assert!(matches!(
            parse("Broadcast: 8 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..0}"),
            Some(Event::Decision(_))
        ));
        assert!(matches!(parse("    AllReduce |    6.3/  14.5 |"), Some(Event::Table(_))));
        assert!(matches!(parse("Connected all trees"), Some(Event::Known)));
        assert!(matches!(parse(" 0 : GPU/0 GPU/1"), Some(Event::GraphChannel(_))));
        assert!(matches!(parse("CPU/0-0 (1/1/143)"), Some(Event::TopoLine(_))));
        assert!(matches!(parse("NET/0-0 :GPU/0-1b000 (3/24.0/PXB) "), Some(Event::Path(_))));
        assert!(matches!(parse("NET/IB : No device found."), Some(Event::NetNoDevice(_))));
        match parse("Ring 0 : 15 -> 0 -> 1 comm 0x5b2b1e0 nRanks 16 busId 29000") {
            Some(Event::Rccl { nranks: 16, inner, .. }) => assert_eq!(*inner, Event::RingNeighbours(0, 15, 0, 1)),
            e => panic!("{e:?}"),
        }
        assert_eq!(parse("Frobnicating the widgets"), None);
        // Without a prefix: NCCL's own grammar alone, unless a bare NCCL message came just before.
        assert!(matches!(parse_bare("Ring 00 : 6 -> 2 [receive] via NET/IB/0", false), Some(Event::Conn(_))));
        for other in
            ["Setting affinity for GPU 0 to ffff", "==========", "Tuner ready", "main.c:12 -> 3", "Connected to db"]
        {
            assert_eq!(parse_bare(other, false), None, "{other}");
            assert!(parse_bare(other, true).is_some(), "{other}");
        }
        assert_eq!(parse_bare("| a | b |", true), None);
        assert_eq!(parse(""), None);
    }
}
