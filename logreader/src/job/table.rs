//! The tuning table (`src/graph/tuning.cc`) in every layout NCCL used, whole or pasted in part, and the enabled
//! matrix. When the header rows that name the columns are missing, the columns come from NCCL's fixed algorithm
//! order for the version, and the snapshot says so.

use super::*;
use crate::message::TableLine;
use collscope_model::{Algorithm, Inference, InitFacts, Protocol, TuningCell, TuningTable};

const PROTOCOLS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

/// The enabled matrix's columns: protocols, then algorithms.
pub(super) type MatrixColumns = (Vec<Protocol>, Vec<Algorithm>);

/// Rows of a table whose header rows are not in the log, held until the table ends: which block a row belongs to
/// is only known once the blocks that follow it are seen.
const MAX_HELD_ROWS: usize = 64;

#[derive(Debug, Clone)]
enum Held {
    Threads(usize, Vec<u32>),
    Row(usize, Collective, Vec<(f64, f64)>),
}

/// One thread's table in progress.
#[derive(Default, Clone)]
pub(super) struct Table {
    /// Columns a header row named, for the rows that follow it.
    cols: Vec<(Algorithm, Protocol)>,
    held: Vec<Held>,
    /// Block of the held rows (a new block starts where the functions start over).
    block: usize,
    last_fn: Option<Collective>,
}

impl Table {
    pub(super) fn is_open(&self) -> bool {
        !self.held.is_empty()
    }

    /// Holds a row of unnamed columns; says whether it fits a layout NCCL printed.
    fn hold(&mut self, coll: Option<Collective>, row: Held) -> bool {
        let width = match &row {
            Held::Threads(_, v) => v.len(),
            Held::Row(_, _, c) => c.len(),
        };
        if !matches!(width, 3 | 6 | 9 | 12 | 15) || self.held.len() >= MAX_HELD_ROWS {
            return false;
        }
        let starts_over = match coll {
            None => !self.held.is_empty(),
            Some(c) => self.last_fn.is_some_and(|l| c.id() <= l.id()),
        };
        if starts_over && !matches!(self.held.last(), Some(Held::Threads(b, _)) if *b == self.block) {
            self.block += 1;
        }
        self.last_fn = coll.or(self.last_fn);
        self.held.push(match row {
            Held::Threads(_, v) => Held::Threads(self.block, v),
            Held::Row(_, c, cells) => Held::Row(self.block, c, cells),
        });
        true
    }
}

/// NCCL's version as (minor), from `2.minor.patch`.
fn minor(version: Option<&str>) -> Option<u32> {
    version?.strip_prefix("2.")?.split('.').next()?.parse().ok()
}

/// The algorithms of each block of a table without its headers, by the widths of its blocks (in cells) and the
/// NCCL version: one block before 2.18 (`Tree, Ring` in 2.5, `+CollNet` 2.6-2.13, `CollNetDirect, CollNetChain`
/// 2.14-2.16, `+NVLS` 2.17), then blocks of three (2.18-2.22: two blocks; 2.23+: a third with PAT), as
/// `src/graph/tuning.cc` of those releases prints them. The blocks seen may be the last ones of the table (a
/// paste cut at the top): a block of three cells is PAT's.
fn layout(widths: &[usize], version: Option<&str>) -> Option<Vec<Vec<Algorithm>>> {
    use Algorithm::*;
    let blocks = [vec![Tree, Ring, CollNetDirect], vec![CollNetChain, Nvls, NvlsTree], vec![Pat]];
    let single = |w: usize| match w {
        6 => Some(vec![Tree, Ring]),
        9 => Some(vec![Tree, Ring, CollNetDirect]),
        12 => Some(vec![Tree, Ring, CollNetDirect, CollNetChain]),
        15 => Some(vec![Tree, Ring, CollNetDirect, CollNetChain, Nvls]),
        _ => None,
    };
    if let [w] = widths {
        if *w != 3 && (*w != 9 || minor(version).is_some_and(|m| m < 18)) {
            return Some(vec![single(*w)?]);
        }
    }
    if widths.len() > 3 || widths.iter().any(|&w| w != 9 && w != 3) {
        return None;
    }
    // Counted back from PAT's block when it is there, else from the first block.
    let first = if widths.last() == Some(&3) { 3 - widths.len() } else { 0 };
    let out: Vec<Vec<Algorithm>> =
        (first..first + widths.len()).map(|b| blocks.get(b).cloned()).collect::<Option<_>>()?;
    out.iter().zip(widths).all(|(a, &w)| a.len() * 3 == w).then_some(out)
}

impl Job {
    /// A table line; `false` when its columns cannot be known.
    pub(super) fn table(&mut self, at: &At, stream: StreamKey, t: TableLine) -> bool {
        let s = self.streams.entry(stream).or_default();
        match t {
            TableLine::Columns(cols) => {
                let was = s.is_open();
                self.close_table(stream);
                self.settle(stream, was);
                self.streams.entry(stream).or_default().table.cols = cols;
            }
            TableLine::Algorithms(algos) => {
                let was = s.is_open();
                self.close_table(stream);
                self.settle(stream, was);
                let cols = algos.iter().flat_map(|&a| PROTOCOLS.iter().map(move |&p| (a, p))).collect();
                self.streams.entry(stream).or_default().table.cols = cols;
            }
            TableLine::Protocols => {}
            TableLine::MaxThreads(v) => {
                if !s.table.cols.is_empty() && s.table.cols.len() >= v.len() && !s.table.is_open() {
                    let cols = s.table.cols.clone();
                    for (&(a, p), &n) in cols.iter().zip(&v) {
                        self.max_threads(a, p, n);
                    }
                } else {
                    s.table.cols.clear();
                    let was = s.is_open();
                    let held = s.table.hold(None, Held::Threads(0, v));
                    self.settle(stream, was);
                    return held;
                }
            }
            TableLine::Row(coll, cells) => {
                if s.table.cols.len() == cells.len() && !s.table.is_open() {
                    let cols = s.table.cols.clone();
                    for (&(algo, proto), &cell) in cols.iter().zip(&cells) {
                        self.cell(coll, algo, proto, cell);
                    }
                } else {
                    s.table.cols.clear();
                    let was = s.is_open();
                    let held = s.table.hold(Some(coll), Held::Row(0, coll, cells));
                    self.settle(stream, was);
                    if !held {
                        return false;
                    }
                }
                self.cite(Cite::Table, at);
            }
        }
        true
    }

    fn cell(&mut self, coll: Collective, algo: Algorithm, proto: Protocol, (lat_us, bw_gbps): (f64, f64)) {
        // `0.0/0.0` is a cell NCCL never computed; a disabled cell keeps its latency.
        if lat_us > 0.0 || bw_gbps > 0.0 {
            let mut tuning = TuningTable::new();
            tuning.entry(coll).or_default().entry(algo).or_default().insert(proto, TuningCell { lat_us, bw_gbps });
            self.fold_init(InitFacts { tuning, ..InitFacts::default() });
        }
    }

    fn max_threads(&mut self, algo: Algorithm, proto: Protocol, n: u32) {
        if n > 0 {
            self.facts.max_threads.entry(algo).or_default().insert(proto, n);
        }
    }

    /// Ends a table whose header rows were missing: places its held rows by NCCL's fixed order.
    pub(super) fn close_table(&mut self, stream: StreamKey) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if !s.table.is_open() {
            return;
        }
        let held = std::mem::take(&mut s.table.held);
        s.table.block = 0;
        s.table.last_fn = None;
        let mut widths: Vec<usize> = Vec::new();
        for h in &held {
            let (b, w) = match h {
                Held::Threads(b, v) => (*b, v.len()),
                Held::Row(b, _, c) => (*b, c.len()),
            };
            if widths.len() <= b {
                widths.resize(b + 1, 0);
            }
            // A `Max NThreads` row of the last block of 2.23+ lists PAT's three columns; rows decide the width.
            if matches!(h, Held::Row(..)) || widths[b] == 0 {
                widths[b] = w;
            }
        }
        let version = self.snap.nccl_version.clone().or_else(|| self.versions.keys().next().cloned());
        let Some(blocks) = layout(&widths, version.as_deref()) else { return };
        for h in held {
            match h {
                Held::Threads(b, v) => {
                    let cols: Vec<(Algorithm, Protocol)> =
                        blocks[b].iter().flat_map(|&a| PROTOCOLS.iter().map(move |&p| (a, p))).collect();
                    for (&(a, p), n) in cols.iter().zip(v) {
                        self.max_threads(a, p, n);
                    }
                }
                Held::Row(b, coll, cells) => {
                    let cols = blocks[b].iter().flat_map(|&a| PROTOCOLS.iter().map(move |&p| (a, p)));
                    for ((algo, proto), cell) in cols.zip(cells) {
                        self.cell(coll, algo, proto, cell);
                    }
                }
            }
        }
        let value: Vec<String> =
            blocks.iter().map(|b| b.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")).collect();
        let inference = Inference {
            fact: "tuning.columns".into(),
            value: value.join(" | "),
            reason: format!(
                "the table's Algorithm/Protocol header rows are not in the log: its columns follow NCCL{}'s fixed \
                 order of algorithms (src/graph/tuning.cc), each with LL, LL128, Simple",
                version.map_or(String::new(), |v| format!(" {v}"))
            ),
        };
        if !self.facts.inferred.contains(&inference) {
            self.facts.inferred.push(inference);
        }
    }

    /// A row of the enabled matrix: what it turns off.
    pub(super) fn matrix_row(&mut self, columns: Option<&MatrixColumns>, coll: Collective, flags: &[bool]) {
        let default = (PROTOCOLS.to_vec(), Algorithm::NCCL.to_vec());
        let (protos, algos) = columns.unwrap_or(&default);
        let names = protos.iter().map(|p| p.as_str()).chain(algos.iter().map(|a| a.as_str()));
        for (name, on) in names.zip(flags) {
            let entry = format!("{coll}/{name}");
            if !on && !self.facts.disabled.contains(&entry) {
                self.facts.disabled.push(entry);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;

    #[test]
    fn layouts_by_width_and_version() {
        assert_eq!(layout(&[6], None), Some(vec![vec![Tree, Ring]]));
        assert_eq!(layout(&[9], Some("2.12.12+cuda11.7")), Some(vec![vec![Tree, Ring, CollNetDirect]]));
        assert_eq!(layout(&[15], None).map(|b| b[0].len()), Some(5));
        assert_eq!(layout(&[9, 9, 3], None).map(|b| b[2].clone()), Some(vec![Pat]));
        // Cut at the top: the blocks seen are the last two.
        assert_eq!(layout(&[9, 3], None), Some(vec![vec![CollNetChain, Nvls, NvlsTree], vec![Pat]]));
        assert_eq!(layout(&[9, 9], Some("2.19.3")).map(|b| b[1].clone()), Some(vec![CollNetChain, Nvls, NvlsTree]));
        assert_eq!(layout(&[3, 9], None), None);
        assert_eq!(layout(&[7], None), None);
    }
}
