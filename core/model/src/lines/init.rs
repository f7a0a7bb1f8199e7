//! The init lines collscope writes (the runtime at init, the NCCL model's `nccl init`) and the log reader reads,
//! each formatter beside its parser: a communicator's place ([`comm_info_line`] / [`comm_info`]), its init's
//! end ([`init_complete_line`] / [`comm_init`]) and timings ([`init_timings_line`] / [`init_timings`]), the
//! graphs ([`graph_line`] / [`graph`]), the channel counts ([`channel_counts_line`] / [`channel_counts`]) and the
//! ring connection's summary ([`connected_rings_line`] / [`connected_rings`]). The formatters write NCCL
//! 2.28.9's forms; the parsers also read the older ones seen in real logs (2.4 to 2.27).

use crate::comm::InitTimings;
use crate::graph::{ChannelCounts, Graph, Pattern};
use crate::scan::{field, fields, find, Scan};

/// `comm 0x55d3 rank 13 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommInfo {
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub local_ranks: u32,
    pub local_rank: u32,
}

/// A communicator's place in the job (NCCL 2.28.9 `src/init.cc`, `initTransportsRank`):
/// `comm 0x7f00 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0`.
pub fn comm_info_line(comm: &str, rank: u32, nranks: u32, nnodes: u32, local_ranks: u32, local_rank: u32) -> String {
    format!(
        "comm {comm} rank {rank} nRanks {nranks} nNodes {nnodes} localRanks {local_ranks} localRank {local_rank} MNNVL 0"
    )
}

/// [`comm_info_line`]'s line, and older releases' without ` MNNVL 0`.
pub fn comm_info(msg: &str) -> Option<CommInfo> {
    let mut s = Scan::new(msg);
    s.lit("comm ")?;
    // Owned once the line is known to be this one: `comm ...` also starts the Init and Abort lines.
    let comm = s.word()?;
    s.lit(" rank ")?;
    let rank = s.num()?;
    s.lit(" nRanks ")?;
    let nranks = s.num()?;
    s.lit(" nNodes ")?;
    let nnodes = s.num()?;
    s.lit(" localRanks ")?;
    let local_ranks = s.num()?;
    s.lit(" localRank ")?;
    let local_rank = s.num()?;
    Some(CommInfo { comm: comm.to_string(), rank, nranks, nnodes, local_ranks, local_rank })
}

/// `[ncclCommInitRank ]comm 0x55d3 rank 3 nranks 8 cudaDev 3 [nvmlDev 3] [busId 1b000] [commId 0x9f] [parent 0x..]
/// ... - Init START|COMPLETE`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommInit {
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub cuda_dev: i32,
    pub bus_id: Option<String>,
    pub comm_id: Option<String>,
    /// The communicator split from (`ncclCommSplit ... parent 0x..`).
    pub parent: Option<String>,
    pub complete: bool,
}

/// The end of a communicator's init (NCCL 2.28.9 `src/init.cc`, `ncclCommInitRankFunc`):
/// `ncclCommInitRank comm 0x7f00 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 0 commId 0x1c2b - Init COMPLETE`.
pub fn init_complete_line(comm: &str, rank: u32, nranks: u32, cuda_dev: i32, bus_id: u64, comm_id: u64) -> String {
    format!(
        "ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} nvmlDev {cuda_dev} busId {bus_id:x} \
         commId {comm_id:#x} - Init COMPLETE"
    )
}

/// [`init_complete_line`]'s line, its `Init START` twin, `ncclCommSplit`'s (with `parent`) and the older forms
/// that lack the function's name, `nvmlDev`, `busId` or `commId`.
pub fn comm_init(msg: &str) -> Option<CommInit> {
    let tail = msg.trim_end();
    let complete = if tail.ends_with("Init COMPLETE") {
        true
    } else if tail.ends_with("Init START") {
        false
    } else {
        return None;
    };
    comm_init_in_order(msg, complete).or_else(|| comm_init_by_fields(msg, complete))
}

/// [`comm_init`] by each field's name, wherever it is: one pass for all seven.
fn comm_init_by_fields(msg: &str, complete: bool) -> Option<CommInit> {
    let [comm, rank, nranks, cuda_dev, bus_id, comm_id, parent] =
        fields(msg, ["comm", "rank", "nranks", "cudaDev", "busId", "commId", "parent"]);
    let text = |v: Option<&str>| v.map(str::to_string);
    Some(CommInit {
        comm: comm?.to_string(),
        rank: rank?.parse().ok()?,
        nranks: nranks?.parse().ok()?,
        cuda_dev: cuda_dev?.parse().ok()?,
        bus_id: text(bus_id),
        comm_id: text(comm_id),
        parent: text(parent),
        complete,
    })
}

/// `0x55d3 rank 5 nranks 8 cudaDev 1`, after the `comm ` of the lines that begin and end a communicator (NCCL
/// 2.28.9 `src/init.cc`: Init START/COMPLETE, Abort/Destroy COMPLETE): the pointer, rank, size and CUDA device.
pub fn comm_member<'a>(s: &mut Scan<'a>) -> Option<(&'a str, u32, u32, i32)> {
    let comm = s.word()?;
    s.lit(" rank ")?;
    let rank = s.num()?;
    s.lit(" nranks ")?;
    let nranks = s.num()?;
    s.lit(" cudaDev ")?;
    Some((comm, rank, nranks, s.num()?))
}

/// [`comm_init`] for the line as NCCL prints it (2.28.9 `src/init.cc`, and the older releases that leave fields
/// out), read left to right: it is printed twice by every rank of every communicator. `None` for any other form
/// (`ncclCommSplit`'s `parent`, a field moved), which [`fields`] then reads. Each value is checked to be no
/// field's name, so that what is read is what `fields`, taking each name's first occurrence, would find.
fn comm_init_in_order(msg: &str, complete: bool) -> Option<CommInit> {
    let mut s = Scan::new(msg);
    if !s.eat("comm ") {
        s.word().filter(|w| w.starts_with("nccl"))?;
        s.lit(" comm ")?;
    }
    let (comm, rank, nranks, cuda_dev) = comm_member(&mut s)?;
    comm.starts_with("0x").then_some(())?;
    if s.eat(" nvmlDev ") {
        s.num::<i64>()?;
    }
    let mut bus_id = None;
    if s.eat(" busId ") {
        bus_id = Some(s.word().filter(|b| b.bytes().all(|c| c.is_ascii_hexdigit()))?);
    }
    let mut comm_id = None;
    if s.eat(" commId ") {
        comm_id = Some(s.word().filter(|c| c.starts_with("0x"))?);
    }
    s.lit(" - Init ")?;
    matches!(s.rest().trim_end(), "START" | "COMPLETE").then_some(())?;
    Some(CommInit {
        comm: comm.to_string(),
        rank,
        nranks,
        cuda_dev,
        bus_id: bus_id.map(str::to_string),
        comm_id: comm_id.map(str::to_string),
        parent: None,
        complete,
    })
}

/// NCCL's init phases in the order its `Init timings` line prints them (NCCL 2.28.9 `src/init.cc`).
pub const INIT_PHASES: [&str; 7] = ["kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections"];

/// An `Init timings` line as printed: the rank, the communicator's size, the total and each phase in order
/// (NCCL's `rest` included).
#[derive(Debug, Clone, PartialEq)]
pub struct InitTimingsLine {
    pub rank: u32,
    pub nranks: u32,
    pub total: f64,
    pub phases: Vec<(String, f64)>,
}

/// `Init timings - ncclCommInitRank: rank 0 nranks 2 total 0.01 (kernels 0.00, alloc 0.00, bootstrap 0.00,
/// allgathers 0.00, topo 0.01, graphs 0.00, connections 0.00, rest 0.00)` (NCCL 2.28.9 `src/init.cc`): each of
/// [`INIT_PHASES`] from `t` (0 when it has none), `rest` the total less their sum.
pub fn init_timings_line(rank: u32, nranks: u32, t: &InitTimings) -> String {
    let total = t.total.unwrap_or(0.0);
    let phase = |name: &str| t.phases.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v);
    let mut parts: Vec<String> = INIT_PHASES.iter().map(|p| format!("{p} {:.2}", phase(p))).collect();
    let sum: f64 = INIT_PHASES.iter().map(|p| phase(p)).sum();
    parts.push(format!("rest {:.2}", total - sum));
    format!("Init timings - ncclCommInitRank: rank {rank} nranks {nranks} total {total:.2} ({})", parts.join(", "))
}

/// [`init_timings_line`]'s line, whatever function it names and whichever phases it lists.
pub fn init_timings(msg: &str) -> Option<InitTimingsLine> {
    let mut s = Scan::new(msg);
    s.lit("Init timings")?;
    s.until(": rank ")?;
    s.lit(": rank ")?;
    let rank = s.num()?;
    s.lit(" nranks ")?;
    let nranks = s.num()?;
    s.lit(" total ")?;
    let total = s.float()?;
    s.lit(" (")?;
    let phases = s
        .until(")")?
        .split(", ")
        .filter_map(|p| {
            let (name, v) = p.trim().rsplit_once(' ')?;
            Some((name.to_string(), v.parse().ok()?))
        })
        .collect();
    Some(InitTimingsLine { rank, nranks, total, phases })
}

/// The first line `ncclTopoPrintGraph` prints for a graph (NCCL 2.28.9 `src/graph/search.cc`):
/// `Pattern 4, crossNic 0, nChannels 2, bw 10.000000/10.000000, type LOC/LOC, sameChannels 1`.
pub fn graph_line(g: &Graph) -> String {
    format!(
        "Pattern {}, crossNic {}, nChannels {}, bw {:.6}/{:.6}, type {}/{}, sameChannels {}",
        g.pattern.id(),
        g.cross_nic,
        g.n_channels,
        g.bw_intra,
        g.bw_inter,
        g.type_intra,
        g.type_inter,
        u8::from(g.same_channels)
    )
}

/// [`graph_line`]'s line, also with the `speed` that releases before 2.19 print for `bw`: a graph without its
/// channels, which the lines after it list.
pub fn graph(msg: &str) -> Option<Graph> {
    let mut s = Scan::new(msg);
    s.lit("Pattern ")?;
    let pattern = Pattern::from_id(s.num()?)?;
    s.lit(", crossNic ")?;
    let cross_nic = s.num()?;
    s.lit(", nChannels ")?;
    let n_channels = s.num()?;
    s.lit(", ")?;
    s.word()?;
    let bw_intra = s.ws().float()?;
    s.lit("/")?;
    let bw_inter = s.float()?;
    s.lit(", type ")?;
    let type_intra = s.until("/")?.parse().ok()?;
    s.lit("/")?;
    let type_inter = s.until(",")?.parse().ok()?;
    s.lit(", sameChannels ")?;
    let same: u32 = s.num()?;
    Some(Graph {
        pattern,
        n_channels,
        bw_intra,
        bw_inter,
        type_intra,
        type_inter,
        same_channels: same != 0,
        cross_nic,
        channels: Vec::new(),
        host: None,
    })
}

/// NCCL 2.28.9 `src/init.cc`: `2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p
/// channels per peer` (a count not known prints as 0).
pub fn channel_counts_line(c: &ChannelCounts) -> String {
    let n = |v: Option<u32>| v.unwrap_or(0);
    format!(
        "{} coll channels, {} collnet channels, {} nvls channels, {} p2p channels, {} p2p channels per peer",
        n(c.coll),
        n(c.collnet),
        n(c.nvls),
        n(c.p2p),
        n(c.p2p_per_peer)
    )
}

/// [`channel_counts_line`]'s line and the older forms without some of its counts (`2 coll channels, 2 p2p
/// channels, 2 p2p channels per peer`): those not printed stay unknown.
pub fn channel_counts(msg: &str) -> Option<ChannelCounts> {
    let mut cc = ChannelCounts::default();
    let mut rest = Some(msg);
    // Cut at each `, ` with a byte search for its comma, not `str::split`'s substring searcher, built per call.
    while let Some(text) = rest {
        let (part, next) = match find(text, ", ") {
            Some(i) => (&text[..i], Some(&text[i + 2..])),
            None => (text, None),
        };
        rest = next;
        let (n, what) = part.trim().split_once(' ')?;
        let n = n.parse().ok()?;
        match what {
            "coll channels" => cc.coll = Some(n),
            "collnet channels" => cc.collnet = Some(n),
            "nvls channels" => cc.nvls = Some(n),
            "p2p channels" => cc.p2p = Some(n),
            "p2p channels per peer" => cc.p2p_per_peer = Some(n),
            _ => return None,
        }
    }
    Some(cc)
}

/// What `Connected all rings` says: whether the ring uses PXN and GPUDirect RDMA, unknown where the line (older
/// releases') does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectedRings {
    pub pxn: Option<bool>,
    pub gdr: Option<bool>,
}

/// `Connected all rings, use ring PXN 0 GDR 1` (INFO, INIT; NCCL 2.28.9 `src/transport/generic.cc`,
/// `ncclTransportRingConnect`).
pub fn connected_rings_line(pxn: bool, gdr: bool) -> String {
    format!("Connected all rings, use ring PXN {} GDR {}", u8::from(pxn), u8::from(gdr))
}

/// [`connected_rings_line`]'s line, and the bare `Connected all rings` of older releases.
pub fn connected_rings(msg: &str) -> Option<ConnectedRings> {
    let rest = msg.strip_prefix("Connected all rings")?;
    let flag = |key| field(rest, key).map(|v| v.trim_matches(',') != "0");
    Some(ConnectedRings { pxn: flag("PXN"), gdr: flag("GDR") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::PathType;

    #[test]
    fn comm_info_reads_back() {
        let line = comm_info_line("0x7f3a", 3, 8, 2, 4, 1);
        assert_eq!(line, "comm 0x7f3a rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 1 MNNVL 0");
        let want = CommInfo { comm: "0x7f3a".into(), rank: 3, nranks: 8, nnodes: 2, local_ranks: 4, local_rank: 1 };
        assert_eq!(comm_info(&line), Some(want));
        assert_eq!(comm_info("comm 0x7f3a rank 3 nranks 8 cudaDev 0 - Init START"), None);
    }

    #[test]
    fn init_complete_reads_back() {
        let line = init_complete_line("0x7f3a", 1, 2, 0, 0x1b000, 0xabc);
        assert_eq!(
            line,
            "ncclCommInitRank comm 0x7f3a rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init COMPLETE"
        );
        let want = CommInit {
            comm: "0x7f3a".into(),
            rank: 1,
            nranks: 2,
            cuda_dev: 0,
            bus_id: Some("1b000".into()),
            comm_id: Some("0xabc".into()),
            parent: None,
            complete: true,
        };
        assert_eq!(comm_init(&line), Some(want));
        let c = comm_init("ncclCommSplit comm 0x28 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x10 color 0 key 0- Init START").unwrap();
        assert_eq!((c.parent.as_deref(), c.comm_id, c.complete), (Some("0x10"), None, false));
        assert_eq!(comm_init("comm 0x55d3 rank 5 nranks 8 cudaDev 1 busId a7000 - Abort COMPLETE"), None);
    }

    #[test]
    fn comm_init_in_order_reads_what_the_fields_say() {
        // NCCL's forms: read left to right, the same as by the fields' names.
        for line in [
            "ncclCommInitRank comm 0xa624cf0 rank 6 nranks 8 cudaDev 6 nvmlDev 6 busId 90000 commId 0xa0 - Init START",
            "comm 0x55d3 rank 17 nranks 64 cudaDev -1 nvmlDev 0 - Init COMPLETE",
            "comm 0x55d3 rank 1 nranks 2 cudaDev 1 busId 1b000 - Init COMPLETE  ",
            "ncclCommInitAll comm 0x55d3 rank 1 nranks 2 cudaDev 1 commId 0x9f - Init START",
        ] {
            let complete = line.trim_end().ends_with("COMPLETE");
            let fast = comm_init_in_order(line, complete);
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, comm_init_by_fields(line, complete), "{line}");
        }
        // Anything else is left to the fields: a split's parent, a field moved, a value that is a field's name.
        for line in [
            "ncclCommSplit comm 0x28 rank 0 nranks 2 cudaDev 0 busId 1b000 parent 0x10 color 0 key 0- Init START",
            "comm 0x1 nranks 2 rank 0 cudaDev 0 - Init START",
            "rank comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START",
            "comm 0x1 rank 0 nranks 2 cudaDev 0 busId commId commId 0x2 - Init START",
            "comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START parent 0x3",
        ] {
            assert_eq!(comm_init_in_order(line, false), None, "{line}");
        }
        assert_eq!(comm_init("rank comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START"), None);
        let moved = comm_init("comm 0x1 nranks 2 rank 0 cudaDev 0 - Init START").unwrap();
        assert_eq!((moved.rank, moved.nranks), (0, 2));
    }

    #[test]
    fn init_timings_read_back() {
        let t = InitTimings { total: Some(0.5), phases: vec![("topo".into(), 0.25), ("allgathers".into(), 0.125)] };
        let line = init_timings_line(1, 2, &t);
        assert_eq!(
            line,
            "Init timings - ncclCommInitRank: rank 1 nranks 2 total 0.50 (kernels 0.00, alloc 0.00, bootstrap 0.00, \
             allgathers 0.12, topo 0.25, graphs 0.00, connections 0.00, rest 0.12)"
        );
        let back = init_timings(&line).unwrap();
        assert_eq!((back.rank, back.nranks, back.total), (1, 2, 0.5));
        let names: Vec<&str> = back.phases.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [&INIT_PHASES[..], &["rest"]].concat());
        assert_eq!(back.phases[4], ("topo".to_string(), 0.25));
        assert_eq!(init_timings("Init timings missing"), None);
    }

    #[test]
    fn graph_and_channel_counts_read_back() {
        let g = Graph {
            pattern: Pattern::BalancedTree,
            n_channels: 2,
            bw_intra: 6.5,
            bw_inter: 1.25,
            type_intra: PathType::LOC,
            type_inter: PathType::NET,
            same_channels: true,
            cross_nic: 0,
            channels: vec![],
            host: None,
        };
        let line = graph_line(&g);
        assert_eq!(line, "Pattern 1, crossNic 0, nChannels 2, bw 6.500000/1.250000, type LOC/NET, sameChannels 1");
        assert_eq!(graph(&line), Some(g));
        let old = graph("Pattern 4, crossNic 0, nChannels 1, speed 24.000000/24.000000, type NVL/PIX, sameChannels 1");
        assert_eq!(old.map(|g| (g.pattern, g.bw_intra)), Some((Pattern::Ring, 24.0)));

        let counts =
            ChannelCounts { coll: Some(2), collnet: Some(0), nvls: Some(0), p2p: Some(1), p2p_per_peer: Some(1) };
        let line = channel_counts_line(&counts);
        assert_eq!(
            line,
            "2 coll channels, 0 collnet channels, 0 nvls channels, 1 p2p channels, 1 p2p channels per peer"
        );
        assert_eq!(channel_counts(&line), Some(counts));
        let old = channel_counts("2 coll channels, 2 p2p channels, 2 p2p channels per peer").unwrap();
        assert_eq!((old.coll, old.p2p_per_peer, old.nvls), (Some(2), Some(2), None));
        assert_eq!(channel_counts("2 coll channels, 3 pigeons"), None);
    }

    #[test]
    fn connected_rings_reads_back() {
        for (pxn, gdr) in [(false, false), (false, true), (true, true)] {
            let line = connected_rings_line(pxn, gdr);
            assert_eq!(connected_rings(&line), Some(ConnectedRings { pxn: Some(pxn), gdr: Some(gdr) }), "{line}");
        }
        assert_eq!(connected_rings_line(true, false), "Connected all rings, use ring PXN 1 GDR 0");
        assert_eq!(connected_rings("Connected all rings"), Some(ConnectedRings { pxn: None, gdr: None }));
        assert_eq!(connected_rings("Connected all trees"), None);
    }
}
