//! Tuning lines: the table in its older (`Latency/AlgBw | Tree/LL | ...`) and newer (`Algorithm |` / `Protocol |`)
//! layouts, the enabled matrix, per-call decisions and COLL lines (NCCL 2.28.9 `src/graph/tuning.cc`,
//! `src/enqueue.cc`).

use super::scan::{field, Scan};
use collscope_model::{Algorithm, Collective, Protocol};

/// A decision line: `AllReduce: 65536 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}`,
/// `AllReduce: 65536 Bytes -> Algo 1 proto 2 nchannels 4 nthreads 256`, the TRACE form
/// `65536 Bytes -> Algo 1 proto 2 time 34.690000`, and RCCL's `tunedColl enqueue coll AllReduce(...)`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionLine {
    pub coll: Option<Collective>,
    pub bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub n_channels: Option<u32>,
    pub time_us: Option<f64>,
}

/// `AllReduce: opCount 1a sendbuff ... count 64 datatype 7 op 0 root 0 comm 0x... [nranks=2] stream 0x...`
/// (RCCL adds `task 0 globalrank 3`).
#[derive(Debug, Clone, PartialEq)]
pub struct CollLine {
    pub coll: Collective,
    pub op_count: u64,
    pub count: u64,
    pub datatype: Option<usize>,
    pub op: Option<usize>,
    pub root: Option<i32>,
    pub comm: Option<String>,
    pub nranks: Option<u32>,
    pub global_rank: Option<u32>,
}

/// A line of the tuning table.
#[derive(Debug, Clone, PartialEq)]
pub enum TableLine {
    /// Older layout: one header naming every `Algo/Proto` column.
    Columns(Vec<(Algorithm, Protocol)>),
    /// Newer layout: the algorithms of this block (each spans the three protocols).
    Algorithms(Vec<Algorithm>),
    /// `Protocol |`: the protocols of each algorithm of the block.
    Protocols,
    /// `Max NThreads |`: threads per channel, per column.
    MaxThreads(Vec<u32>),
    /// `AllReduce |    6.3/  14.5 |  ...`: (latency us, bandwidth GB/s) per column.
    Row(Collective, Vec<(f64, f64)>),
}

/// An algorithm as the table (`ncclAlgoStr`: `CollNetDirect`, `NVLSTree`), decision lines (`ncclAlgoToString`:
/// `COLLNET_DIRECT`, `NVLS_TREE`) or numbers (`Algo 1`) name it. NCCL 2.6-2.13 had one `CollNet`, the one later
/// called CollNetDirect.
pub fn algorithm(name: &str) -> Option<Algorithm> {
    let name = name.trim();
    if let Ok(id) = name.parse::<usize>() {
        return Algorithm::from_id(id);
    }
    match name {
        "CollNet" | "COLLNET" | "COLLNET_DIRECT" => Some(Algorithm::CollNetDirect),
        "COLLNET_CHAIN" => Some(Algorithm::CollNetChain),
        "NVLS_TREE" => Some(Algorithm::NvlsTree),
        _ => name.parse().ok(),
    }
}

pub fn protocol(name: &str) -> Option<Protocol> {
    let name = name.trim();
    match name.parse::<usize>() {
        Ok(id) => Protocol::from_id(id),
        Err(_) => name.parse().ok(),
    }
}

/// The cells of a table line after its head: `|`-separated, empty ones skipped.
fn cells(rest: &str) -> impl Iterator<Item = &str> {
    rest.split('|').map(str::trim).filter(|c| !c.is_empty())
}

pub fn table_line(msg: &str) -> Option<TableLine> {
    let (head, rest) = msg.split_once('|')?;
    match head.trim() {
        "Latency/AlgBw" => {
            let cols = cells(rest)
                .map(|c| {
                    let (a, p) = c.split_once('/')?;
                    Some((algorithm(a)?, protocol(p)?))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(TableLine::Columns(cols))
        }
        "Algorithm" => Some(TableLine::Algorithms(cells(rest).map(algorithm).collect::<Option<Vec<_>>>()?)),
        "Protocol" => Some(TableLine::Protocols),
        "Max NThreads" => Some(TableLine::MaxThreads(cells(rest).map(|c| c.parse().ok()).collect::<Option<Vec<_>>>()?)),
        head => {
            let coll: Collective = head.parse().ok()?;
            let cells = cells(rest)
                .map(|c| {
                    let (l, b) = c.split_once('/')?;
                    Some((l.trim().parse().ok()?, b.trim().parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()?;
            (!cells.is_empty()).then_some(TableLine::Row(coll, cells))
        }
    }
}

pub fn decision(msg: &str) -> Option<DecisionLine> {
    let (coll, rest) = match super::split_colon(msg) {
        Some((c, r)) if !c.contains(' ') => (Some(c.parse().ok()?), r),
        _ => (None, msg),
    };
    let mut s = Scan::new(rest);
    let bytes = s.num()?;
    s.lit(" Bytes -> Algo ")?;
    let algo = algorithm(s.word()?)?;
    s.lit(" proto ")?;
    let proto = protocol(s.word()?)?;
    let mut d = DecisionLine { coll, bytes, algo, proto, n_channels: None, time_us: None };
    let mut toks = s.rest().split_ascii_whitespace();
    while let Some(key) = toks.next() {
        if let Some(range) = key.strip_prefix("channel{Lo..Hi}={").and_then(|r| r.strip_suffix('}')) {
            let (lo, hi) = range.split_once("..")?;
            let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
            d.n_channels = Some(hi.saturating_sub(lo).saturating_add(1));
            continue;
        }
        let value = toks.next();
        match key {
            "nchannels" | "nc" => d.n_channels = value.and_then(|v| v.parse().ok()),
            "time" => d.time_us = value.and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
    Some(d)
}

/// RCCL's choice after its own adjustments: `tunedColl enqueue coll AllReduce(ncclSum, ncclFloat32, RING, SIMPLE),
/// nChannels 2, count 262144 (nbytes 1048576), ...` (also `collnetColl`, `CBDColl`; RCCL `src/enqueue.cc`).
pub fn rccl_enqueue(msg: &str) -> Option<DecisionLine> {
    let mut s = Scan::new(msg);
    s.word()?;
    s.lit(" enqueue coll ")?;
    let coll = s.until("(")?.parse().ok()?;
    s.lit("(")?;
    let args: Vec<&str> = s.until(")")?.split(", ").collect();
    let [_, _, algo, proto] = args.as_slice() else { return None };
    let (algo, proto) = (algorithm(algo)?, protocol(proto)?);
    let n_channels = field(msg, "nChannels").and_then(|v| v.trim_end_matches(',').parse().ok());
    let bytes = msg.split_once("(nbytes ")?.1.split(')').next()?.parse().ok()?;
    Some(DecisionLine { coll: Some(coll), bytes, algo, proto, n_channels, time_us: None })
}

pub fn coll(msg: &str) -> Option<CollLine> {
    let (name, rest) = super::split_colon(msg)?;
    let rest = rest.strip_prefix("opCount ")?;
    let coll = name.parse().ok()?;
    let mut toks = rest.split_ascii_whitespace();
    let op_count = u64::from_str_radix(toks.next()?, 16).ok()?;
    let mut c = CollLine {
        coll,
        op_count,
        count: 0,
        datatype: None,
        op: None,
        root: None,
        comm: None,
        nranks: None,
        global_rank: None,
    };
    while let Some(key) = toks.next() {
        if let Some(n) = key.strip_prefix("[nranks=").and_then(|r| r.strip_suffix(']')) {
            c.nranks = n.parse().ok();
            continue;
        }
        let Some(value) = toks.next() else { break };
        match key {
            "count" => c.count = value.parse().ok()?,
            "datatype" => c.datatype = value.parse().ok(),
            "op" => c.op = value.parse().ok(),
            "root" => c.root = value.parse().ok(),
            "comm" => c.comm = Some(value.to_string()),
            "globalrank" => c.global_rank = value.parse().ok(),
            _ => {}
        }
    }
    Some(c)
}

/// One value of the enabled matrix: NCCL prints each protocol's and algorithm's enable as a number, 0 for off,
/// 1 for on and 2 (LL128's default) for "on where supported".
fn enable(t: &str) -> Option<bool> {
    Some(t.parse::<u32>().ok()? != 0)
}

/// One row of the enabled matrix printed after `Enabled NCCL Func/Proto/Algo Matrix:` (lines without prefix):
/// `    AllReduce |        1         2         1   |             1              1 ...`. Returns the collective
/// and the flags, protocols first; `None` for the header and for anything else.
pub fn matrix_row(line: &str) -> Option<(Collective, Vec<bool>)> {
    let mut parts = line.split('|');
    let coll: Collective = parts.next()?.trim().parse().ok()?;
    let flags = parts.flat_map(str::split_ascii_whitespace).map(enable).collect::<Option<Vec<_>>>()?;
    Some((coll, flags))
}

/// The matrix header: `     Function |       LL     LL128    Simple   |          Tree           Ring ...`, the
/// protocols and algorithms of the columns.
pub fn matrix_header(line: &str) -> Option<(Vec<Protocol>, Vec<Algorithm>)> {
    let mut parts = line.split('|');
    if parts.next()?.trim() != "Function" {
        return None;
    }
    let protos = parts.next()?.split_ascii_whitespace().map(protocol).collect::<Option<Vec<_>>>()?;
    let algos = parts.next()?.split_ascii_whitespace().map(algorithm).collect::<Option<Vec<_>>>()?;
    Some((protos, algos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_and_new_table_layouts() {
        let h = table_line("Latency/AlgBw |    Tree/    LL |    Tree/ LL128 | CollNet/Simple |").unwrap();
        assert_eq!(
            h,
            TableLine::Columns(vec![
                (Algorithm::Tree, Protocol::Ll),
                (Algorithm::Tree, Protocol::Ll128),
                (Algorithm::CollNetDirect, Protocol::Simple)
            ])
        );
        let a = table_line(
            "  Algorithm   |                   Tree                  |                   Ring              |",
        );
        assert_eq!(a, Some(TableLine::Algorithms(vec![Algorithm::Tree, Algorithm::Ring])));
        assert_eq!(table_line("  Protocol    |             LL |          LL128 |"), Some(TableLine::Protocols));
        assert_eq!(
            table_line(" Max NThreads |            512 |            640 |"),
            Some(TableLine::MaxThreads(vec![512, 640]))
        );
        let r = table_line("    AllReduce |    6.3/  14.5 |   10.1/  40.0 |").unwrap();
        assert_eq!(r, TableLine::Row(Collective::AllReduce, vec![(6.3, 14.5), (10.1, 40.0)]));
        assert!(table_line("    AllReduce | x/y |").is_none());
    }

    #[test]
    fn decisions_in_three_forms() {
        let d = decision("AllReduce: 65536 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}").unwrap();
        assert_eq!(
            (d.coll, d.bytes, d.algo, d.proto, d.n_channels),
            (Some(Collective::AllReduce), 65536, Algorithm::Tree, Protocol::Ll, Some(2))
        );
        let d = decision("AllReduce: 8 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..3}").unwrap();
        assert_eq!((d.algo, d.proto, d.n_channels), (Algorithm::NvlsTree, Protocol::Simple, Some(4)));
        let d = decision("65536 Bytes -> Algo 1 proto 2 time 34.690000").unwrap();
        assert_eq!((d.coll, d.algo, d.proto, d.time_us), (None, Algorithm::Ring, Protocol::Simple, Some(34.69)));
        let d = decision("AllGather: 1024 Bytes -> Algo 1 proto 0 nchannels 4 nthreads 256").unwrap();
        assert_eq!(d.n_channels, Some(4));
        assert!(decision("AllReduce: many Bytes -> Algo Tree proto LL").is_none());
    }

    #[test]
    fn coll_lines_and_matrix_rows() {
        let c = coll("AllReduce: opCount 1a sendbuff 0x1 recvbuff 0x2 count 64 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x3").unwrap();
        assert_eq!((c.op_count, c.count, c.datatype, c.nranks), (0x1a, 64, Some(7), Some(2)));
        assert_eq!(c.comm.as_deref(), Some("0xa"));
        let (c, f) =
            matrix_row("    AllReduce |        1         0         1   |             1              1  ").unwrap();
        assert_eq!((c, f), (Collective::AllReduce, vec![true, false, true, true, true]));
        let (c, f) =
            matrix_row("    Broadcast |        1         2         0   |             1              0").unwrap();
        assert_eq!((c, f), (Collective::Broadcast, vec![true, true, false, true, false]));
        assert!(matrix_row("     Function |       LL     LL128    Simple   |").is_none());
        let (p, a) = matrix_header(
            "     Function |       LL     LL128    Simple   |          Tree           Ring            PAT  ",
        )
        .unwrap();
        assert_eq!((p.len(), a), (3, vec![Algorithm::Tree, Algorithm::Ring, Algorithm::Pat]));
        let d = rccl_enqueue("tunedColl enqueue coll AllReduce(ncclSum, ncclFloat32, RING, SIMPLE), nChannels 2, count 262144 (nbytes 1048576), usableChannel 2, chunkCount 65536").unwrap();
        assert_eq!(
            (d.coll, d.bytes, d.algo, d.proto, d.n_channels),
            (Some(Collective::AllReduce), 1048576, Algorithm::Ring, Protocol::Simple, Some(2))
        );
        let c = coll("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0xa [nranks=16] stream 0x3 task 0 globalrank 5").unwrap();
        assert_eq!((c.global_rank, c.nranks), (Some(5), Some(16)));
    }
}
