//! Tuning lines: the table in its older (`Latency/AlgBw | Tree/LL | ...`) and newer (`Algorithm |` / `Protocol |`)
//! layouts, the enabled matrix, per-call decisions and COLL lines (NCCL 2.28.9 `src/graph/tuning.cc`,
//! `src/enqueue.cc`).

use collscope_model::{Algorithm, Collective, Protocol};

/// A decision line: `AllReduce: 65536 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}`,
/// `AllReduce: 65536 Bytes -> Algo 1 proto 2 nchannels 4 nthreads 256` or the TRACE form
/// `65536 Bytes -> Algo 1 proto 2 time 34.690000`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionLine {
    pub coll: Option<Collective>,
    pub bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub n_channels: Option<u32>,
    pub time_us: Option<f64>,
}

/// `AllReduce: opCount 1a sendbuff ... count 64 datatype 7 op 0 root 0 comm 0x... [nranks=2] stream 0x...`.
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
}

/// A line of the tuning table.
#[derive(Debug, Clone, PartialEq)]
pub enum TableLine {
    /// Older layout: one header naming every `Algo/Proto` column.
    Columns(Vec<(Algorithm, Protocol)>),
    /// Newer layout: the algorithms of this block (each spans the three protocols).
    Algorithms(Vec<Algorithm>),
    /// `Protocol |` and `Max NThreads |` rows carry nothing the model keeps.
    Ignored,
    /// `AllReduce |    6.3/  14.5 |  ...`: (latency us, bandwidth GB/s) per column.
    Row(Collective, Vec<(f64, f64)>),
}

fn algorithm(name: &str) -> Option<Algorithm> {
    let name = name.trim();
    // NCCL 2.6-2.8 had one CollNet algorithm, the one later called CollNetDirect.
    if name.eq_ignore_ascii_case("CollNet") {
        return Some(Algorithm::CollNetDirect);
    }
    // Decision lines use ncclAlgoToString's spelling (`COLLNET_DIRECT`, `NVLS_TREE`), the table ncclAlgoStr's.
    name.replace('_', "").parse().ok().or_else(|| name.parse::<usize>().ok().and_then(Algorithm::from_id))
}

fn protocol(name: &str) -> Option<Protocol> {
    let name = name.trim();
    name.parse().ok().or_else(|| name.parse::<usize>().ok().and_then(Protocol::from_id))
}

pub fn table_line(msg: &str) -> Option<TableLine> {
    let (head, rest) = msg.split_once('|')?;
    let head = head.trim();
    match head {
        "Latency/AlgBw" => {
            let cols = rest
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| {
                    let (a, p) = c.split_once('/')?;
                    Some((algorithm(a)?, protocol(p)?))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(TableLine::Columns(cols))
        }
        "Algorithm" => {
            let algos =
                rest.split('|').map(str::trim).filter(|c| !c.is_empty()).map(algorithm).collect::<Option<Vec<_>>>()?;
            Some(TableLine::Algorithms(algos))
        }
        "Protocol" | "Max NThreads" => Some(TableLine::Ignored),
        _ => {
            let coll: Collective = head.parse().ok()?;
            let cells = rest
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
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
    let (bytes, rest) = rest.split_once(" Bytes -> Algo ")?;
    let bytes = bytes.trim().parse().ok()?;
    let mut toks = rest.split_ascii_whitespace();
    let algo = algorithm(toks.next()?)?;
    if toks.next()? != "proto" {
        return None;
    }
    let proto = protocol(toks.next()?)?;
    let mut d = DecisionLine { coll, bytes, algo, proto, n_channels: None, time_us: None };
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

pub fn coll(msg: &str) -> Option<CollLine> {
    let (name, rest) = super::split_colon(msg)?;
    let rest = rest.strip_prefix("opCount ")?;
    let coll = name.parse().ok()?;
    let mut toks = rest.split_ascii_whitespace();
    let op_count = u64::from_str_radix(toks.next()?, 16).ok()?;
    let mut c = CollLine { coll, op_count, count: 0, datatype: None, op: None, root: None, comm: None, nranks: None };
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
            _ => {}
        }
    }
    Some(c)
}

/// One row of the enabled matrix printed after `Enabled NCCL Func/Proto/Algo Matrix:` (lines without prefix):
/// `    AllReduce |        1         1         1   |             1              1 ...`. Returns the collective
/// and the 0/1 flags, protocols first; `None` for the header and for anything else.
pub fn matrix_row(line: &str) -> Option<(Collective, Vec<bool>)> {
    let mut parts = line.split('|');
    let coll: Collective = parts.next()?.trim().parse().ok()?;
    let flags = parts
        .flat_map(str::split_ascii_whitespace)
        .map(|t| match t {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((coll, flags))
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
        assert_eq!(table_line("  Protocol    |             LL |          LL128 |"), Some(TableLine::Ignored));
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
        assert!(matrix_row("     Function |       LL     LL128    Simple   |").is_none());
    }
}
