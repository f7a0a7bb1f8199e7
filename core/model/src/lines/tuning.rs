//! The tuning lines collscope writes (the runtime and the NCCL model's `nccl tune`) and the log reader reads,
//! each formatter beside its parser: the TUNING table ([`tuning_table_lines`] / [`table_line`]) and the choice
//! printed per call ([`decision_line`] / [`decision`]). The formatters write NCCL 2.28.9's forms
//! (`src/graph/tuning.cc`, `src/enqueue.cc`); the parsers also read the older table layout and decision forms.

use crate::names::{Algorithm, Collective, Protocol};
use crate::scan::Scan;

/// `ncclAlgoToString` (NCCL 2.28.9 `src/enqueue.cc`).
fn algo_upper(a: Algorithm) -> &'static str {
    match a {
        Algorithm::Tree => "TREE",
        Algorithm::Ring => "RING",
        Algorithm::CollNetDirect => "COLLNET_DIRECT",
        Algorithm::CollNetChain => "COLLNET_CHAIN",
        Algorithm::Nvls => "NVLS",
        Algorithm::NvlsTree => "NVLS_TREE",
        Algorithm::Pat => "PAT",
        // collscope's extension, in the same style (NCCL never prints it).
        Algorithm::OneShot => "ONESHOT",
    }
}

/// `ncclProtoToString` (NCCL 2.28.9 `src/enqueue.cc`).
fn proto_upper(p: Protocol) -> &'static str {
    match p {
        Protocol::Ll => "LL",
        Protocol::Ll128 => "LL128",
        Protocol::Simple => "SIMPLE",
    }
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

/// A protocol by name (`LL128`, `SIMPLE`, `Simple`) or number (`proto 2`).
pub fn protocol(name: &str) -> Option<Protocol> {
    let name = name.trim();
    match name.parse::<usize>() {
        Ok(id) => Protocol::from_id(id),
        Err(_) => name.parse().ok(),
    }
}

/// `name: rest` at the first `": "` (a byte search: this runs on every COLL and TUNING line).
pub fn split_colon(msg: &str) -> Option<(&str, &str)> {
    let b = msg.as_bytes();
    memchr::memchr_iter(b':', b).find(|&i| b.get(i + 1) == Some(&b' ')).map(|i| (&msg[..i], &msg[i + 2..]))
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

/// The TUNING table rank 0 prints at init (INFO, TUNING; NCCL 2.28.9 `src/graph/tuning.cc`,
/// `ncclTopoTuneModel`), one string per line: NCCL's algorithms three to a block, each block an `Algorithm |`
/// header, a `Protocol |` header (three algorithms' worth even in a short last block, as NCCL prints it), the
/// `Max NThreads |` row and one row of `latency/bandwidth` cells per tuned collective. `max_threads` and `cell`
/// give a cell's threads and its (latency in us, bandwidth in GB/s); `cell` takes the collective's row in
/// [`Collective::TUNED`].
pub fn tuning_table_lines(
    max_threads: impl Fn(Algorithm, Protocol) -> u32,
    cell: impl Fn(usize, Algorithm, Protocol) -> (f64, f64),
) -> Vec<String> {
    let mut out = Vec::new();
    for algos in Algorithm::NCCL.chunks(3) {
        let mut line = String::from("  Algorithm   |");
        for a in algos {
            line.push_str(&format!(" {:>14}   {:>14}   {:>14} |", "", a.as_str(), ""));
        }
        out.push(line);
        let mut line = String::from("  Protocol    |");
        for _ in 0..3 {
            for p in Protocol::ALL {
                line.push_str(&format!(" {:>14} |", p.as_str()));
            }
        }
        out.push(line);
        let mut line = String::from(" Max NThreads |");
        for &a in algos {
            for &p in Protocol::ALL {
                line.push_str(&format!(" {:>14} |", max_threads(a, p)));
            }
        }
        out.push(line);
        for (ci, coll) in Collective::TUNED.iter().enumerate() {
            let mut line = format!("{:>13} |", coll.as_str());
            for &a in algos {
                for &p in Protocol::ALL {
                    let (lat, bw) = cell(ci, a, p);
                    line.push_str(&format!("{lat:8.1}/{bw:6.1} |"));
                }
            }
            out.push(line);
        }
    }
    out
}

/// The cells of a table line after its head: `|`-separated, empty ones skipped.
fn cells(rest: &str) -> impl Iterator<Item = &str> {
    rest.split('|').map(str::trim).filter(|c| !c.is_empty())
}

/// A line of [`tuning_table_lines`]'s table, or of older releases' one-header layout (`Latency/AlgBw |    Tree/
/// LL | ...`).
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

/// The choice NCCL prints per call (INFO, TUNING; NCCL 2.28.9 `src/enqueue.cc`, `scheduleCollTasksToPlan`):
/// `AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}`.
pub fn decision_line(coll: Collective, bytes: u64, algo: Algorithm, proto: Protocol, channels: (u32, u32)) -> String {
    format!(
        "{coll}: {bytes} Bytes -> Algo {} proto {} channel{{Lo..Hi}}={{{}..{}}}",
        algo_upper(algo),
        proto_upper(proto),
        channels.0,
        channels.1
    )
}

/// [`decision_line`]'s line and the older forms [`DecisionLine`] lists but RCCL's.
pub fn decision(msg: &str) -> Option<DecisionLine> {
    let (coll, rest) = match split_colon(msg) {
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
    fn the_tuning_table_reads_back_line_by_line() {
        // Every cell distinct: (lat, bw) from its place.
        let cell = |ci: usize, a: Algorithm, p: Protocol| {
            let lat = (ci * 100 + a.id() * 10 + p.id()) as f64 + 0.5;
            (lat, lat + 1.0)
        };
        let threads = |a: Algorithm, _| 64 * (a.id() as u32 + 1);
        let lines = tuning_table_lines(threads, cell);
        let blocks: Vec<&[Algorithm]> = Algorithm::NCCL.chunks(3).collect();
        assert_eq!(lines.len(), blocks.len() * (3 + Collective::TUNED.len()));
        for (block, text) in blocks.iter().zip(lines.chunks(3 + Collective::TUNED.len())) {
            assert_eq!(table_line(&text[0]), Some(TableLine::Algorithms(block.to_vec())), "{}", text[0]);
            assert_eq!(table_line(&text[1]), Some(TableLine::Protocols), "{}", text[1]);
            let want: Vec<u32> =
                block.iter().flat_map(|&a| Protocol::ALL.iter().map(move |&p| threads(a, p))).collect();
            assert_eq!(table_line(&text[2]), Some(TableLine::MaxThreads(want)), "{}", text[2]);
            for (ci, (coll, row)) in Collective::TUNED.iter().zip(&text[3..]).enumerate() {
                let want = block.iter().flat_map(|&a| Protocol::ALL.iter().map(move |&p| cell(ci, a, p))).collect();
                assert_eq!(table_line(row), Some(TableLine::Row(*coll, want)), "{row}");
            }
        }
    }

    #[test]
    fn decisions_read_back_for_every_algorithm_and_protocol() {
        for algo in Algorithm::ALL {
            for proto in Protocol::ALL {
                let line = decision_line(Collective::AllGather, 65536, *algo, *proto, (2, 5));
                let want = DecisionLine {
                    coll: Some(Collective::AllGather),
                    bytes: 65536,
                    algo: *algo,
                    proto: *proto,
                    n_channels: Some(4),
                    time_us: None,
                };
                assert_eq!(decision(&line), Some(want), "{line}");
            }
        }
        assert_eq!(
            decision_line(Collective::AllReduce, 1048576, Algorithm::Ring, Protocol::Simple, (0, 1)),
            "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}"
        );
    }

    #[test]
    fn decisions_in_older_forms() {
        let d = decision("AllReduce: 65536 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}").unwrap();
        assert_eq!(
            (d.coll, d.bytes, d.algo, d.proto, d.n_channels),
            (Some(Collective::AllReduce), 65536, Algorithm::Tree, Protocol::Ll, Some(2))
        );
        let d = decision("65536 Bytes -> Algo 1 proto 2 time 34.690000").unwrap();
        assert_eq!((d.coll, d.algo, d.proto, d.time_us), (None, Algorithm::Ring, Protocol::Simple, Some(34.69)));
        let d = decision("AllGather: 1024 Bytes -> Algo 1 proto 0 nchannels 4 nthreads 256").unwrap();
        assert_eq!(d.n_channels, Some(4));
        assert!(decision("AllReduce: many Bytes -> Algo Tree proto LL").is_none());
    }
}
