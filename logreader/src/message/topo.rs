//! The topology and graph prints: the system tree (`ncclTopoPrint` in NCCL 2.28.9 `src/graph/topo.cc`), the
//! paths from every GPU and NET (`printNodePaths` in `src/graph/paths.cc`), and the graphs the search found
//! (`ncclTopoPrintGraph` in `src/graph/search.cc`), in their current and older (2.5 to 2.22) forms. A graph's
//! first line, which collscope writes too, is parsed beside its formatter (`collscope_model::lines::graph`).

use super::scan::Scan;
use super::Event;
use collscope_model::{LinkType, NodeId, NodeType, PathType};

/// A node as NCCL names it: `GPU/0-1b000` (2.23+: system id, local id) or `GPU/1B000` (older: the id alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeRef {
    pub kind: NodeType,
    pub id: NodeId,
}

/// What NCCL prints in parentheses after a node of the tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodeAttrs {
    None,
    /// `GPU/0-1b000 (3)`: the rank on it.
    Gpu {
        rank: i32,
    },
    /// `CPU/0-0 (1/1/143)`: NCCL's arch, vendor and model numbers.
    Cpu {
        arch: i32,
        vendor: i32,
        model: i32,
    },
    /// `PCI/0-10000 (1000c01010000000)`: NCCL's packed device code.
    Pci {
        device: u64,
    },
    /// `NET/0-0 (0/0/1/25.000000)`: CollNet support (2.23+), ASIC, port, bandwidth in GB/s.
    Net {
        coll: bool,
        /// The NIC's GUID: ports with the same ASIC and port share bandwidth.
        asic: u64,
        port: u32,
        bw: f64,
    },
}

/// One line of the system tree. `col` is where the node's name starts: the node's own links are printed with
/// their `+` in that column.
#[derive(Debug, Clone, PartialEq)]
pub struct TopoLine {
    /// Column of the `+` of a link line (the parent's name column).
    pub indent: usize,
    pub col: usize,
    /// The link from the parent (`+ PCI[24.0] - `), absent on a root line.
    pub link: Option<(LinkType, f64)>,
    pub node: NodeRef,
    pub attrs: NodeAttrs,
}

/// `GPU/0-1b000 :GPU/0-1b000 (0/5000.0/LOC) GPU/0-1c000 (2/24.0/PHB) ...`: (to, hops, bw, type).
#[derive(Debug, Clone, PartialEq)]
pub struct PathLine {
    pub from: NodeRef,
    pub to: Vec<(NodeRef, u32, f64, PathType)>,
}

/// A token of a graph channel line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GraphToken {
    /// `GPU/3`: a rank (NCCL before 2.28).
    Rank(i32),
    /// `GPU/0-1b000`: a topology id (NCCL 2.28, RCCL).
    Gpu(NodeId),
    /// `NET/0-0`, `NET/0`.
    Net(i64),
}

/// `GPU/0-1b000`, `GPU/1B000`, `NET/0`.
pub fn node_ref(word: &str) -> Option<NodeRef> {
    let (kind, id) = word.split_once('/')?;
    let kind: NodeType = kind.parse().ok()?;
    let (system, local) = match id.split_once('-') {
        Some((s, l)) => (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(l, 16).ok()?),
        None => (0, u64::from_str_radix(id, 16).ok()?),
    };
    Some(NodeRef { kind, id: NodeId { system, local } })
}

fn attrs(kind: NodeType, s: &mut Scan) -> Option<NodeAttrs> {
    if !s.eat(" (") {
        return Some(NodeAttrs::None);
    }
    let inner = s.until(")")?;
    let mut p = Scan::new(inner);
    let a = match kind {
        NodeType::GPU => NodeAttrs::Gpu { rank: p.num()? },
        NodeType::CPU => {
            let arch = p.num()?;
            p.lit("/")?;
            let vendor = p.num()?;
            p.lit("/")?;
            NodeAttrs::Cpu { arch, vendor, model: p.num()? }
        }
        NodeType::PCI => NodeAttrs::Pci { device: p.hex()? },
        NodeType::NET => {
            let fields: Vec<&str> = inner.split('/').collect();
            let (coll, asic, port, bw) = match fields.as_slice() {
                [coll, asic, port, bw] => (*coll != "0", asic, port, bw),
                [asic, port, bw] => (false, asic, port, bw),
                _ => return None,
            };
            let asic = u64::from_str_radix(asic, 16).ok()?;
            NodeAttrs::Net { coll, asic, port: port.parse().ok()?, bw: bw.parse().ok()? }
        }
        _ => return None,
    };
    s.lit(")")?;
    Some(a)
}

/// A tree line that starts with a node (`CPU/0-0 (1/1/143)`), or a path line (`GPU/0-1b000 :GPU/...`).
pub fn node_line(indent: usize, body: &str) -> Option<Event> {
    let mut s = Scan::new(body);
    let word = s.word()?;
    let node = node_ref(word)?;
    if s.eat(" :") {
        return path(node, s.rest()).map(Event::Path);
    }
    let attrs = attrs(node.kind, &mut s)?;
    s.ws().is_empty().then_some(Event::TopoLine(TopoLine { indent, col: indent, link: None, node, attrs }))
}

/// `+ PCI[24.0] - GPU/0-1b000 (0)`: a link from the node whose name starts in column `indent`.
pub fn tree_line(indent: usize, body: &str) -> Option<Event> {
    let mut s = Scan::new(body);
    s.lit("+ ")?;
    let kind: LinkType = s.until("[")?.parse().ok()?;
    s.lit("[")?;
    let bw = s.float()?;
    s.lit("] - ")?;
    let col = indent + (body.len() - s.rest().len());
    let node = node_ref(s.word()?)?;
    let attrs = attrs(node.kind, &mut s)?;
    s.ws().is_empty().then_some(Event::TopoLine(TopoLine { indent, col, link: Some((kind, bw)), node, attrs }))
}

/// `=== System : maxBw 24.0 totalBw 24.0 ===` (2.19+), `maxWidth 12.0 totalWidth 12.0` (2.12), `maxWidth 12.0`
/// (2.7), `maxWidth 12 maxSpeed 12` (2.5); the closing `=====`.
pub fn system(body: &str) -> Option<Event> {
    if body.bytes().all(|b| b == b'=') {
        return Some(Event::TopoEnd);
    }
    let mut s = Scan::new(body.strip_prefix("=== System : ")?);
    s.word()?;
    let max_bw = s.ws().float()?;
    let total_bw = match s.ws().word()? {
        "totalBw" | "totalWidth" => s.ws().float()?,
        "maxSpeed" => {
            s.ws().float()?;
            0.0
        }
        _ => 0.0,
    };
    Some(Event::TopoSystem { max_bw, total_bw })
}

/// The targets of a path line: `GPU/0-1c000 (2/24.0/PHB) ...`.
fn path(from: NodeRef, rest: &str) -> Option<PathLine> {
    let mut s = Scan::new(rest);
    let mut to = Vec::new();
    while !s.ws().is_empty() {
        let node = node_ref(s.word()?)?;
        s.lit(" (")?;
        let hops = s.num()?;
        s.lit("/")?;
        let bw = s.float()?;
        s.lit("/")?;
        let kind: PathType = s.until(")")?.parse().ok()?;
        s.lit(")")?;
        to.push((node, hops, bw, kind));
    }
    Some(PathLine { from, to })
}

/// ` 0 : NET/0-0 GPU/0-1b000 GPU/0-1c000 NET/0-0` (the leading channel number already at the start).
pub fn graph_channel(body: &str) -> Option<Vec<GraphToken>> {
    let mut s = Scan::new(body);
    s.num::<u32>()?;
    s.lit(" :")?;
    let mut out = Vec::new();
    for tok in s.rest().split_ascii_whitespace() {
        let node = tok.strip_prefix("GPU/").map(|g| (true, g)).or_else(|| tok.strip_prefix("NET/").map(|n| (false, n)));
        let (gpu, id) = node?;
        out.push(match (gpu, id.split_once('-')) {
            (true, None) => GraphToken::Rank(id.parse().ok()?),
            (true, Some(_)) => GraphToken::Gpu(node_ref(tok)?.id),
            (false, Some((_, local))) => GraphToken::Net(i64::from_str_radix(local, 16).ok()?),
            (false, None) => GraphToken::Net(i64::from_str_radix(id, 16).ok()?),
        });
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn id(system: u64, local: u64) -> NodeId {
        NodeId { system, local }
    }

    #[test]
    fn tree_lines_in_both_id_forms() {
        let Some(Event::TopoLine(t)) = parse("              + PCI[24.0] - GPU/0-1b000 (3)") else { panic!() };
        assert_eq!((t.indent, t.col, t.link), (14, 28, Some((LinkType::PCI, 24.0))));
        assert_eq!((t.node.kind, t.node.id, t.attrs), (NodeType::GPU, id(0, 0x1b000), NodeAttrs::Gpu { rank: 3 }));
        let Some(Event::TopoLine(t)) = parse("CPU/0-1 (1/1/143)") else { panic!() };
        assert_eq!((t.col, t.link, t.attrs), (0, None, NodeAttrs::Cpu { arch: 1, vendor: 1, model: 143 }));
        let Some(Event::TopoLine(t)) = parse("                            + NET[25.0] - NET/0-0 (0/0/1/25.000000)")
        else {
            panic!()
        };
        assert_eq!(t.attrs, NodeAttrs::Net { coll: false, asic: 0, port: 1, bw: 25.0 });
        let Some(Event::TopoLine(t)) = parse("  + NET[12.5] - NET/0 (4a5b/1/12.500000)") else { panic!() };
        assert_eq!((t.node.id, t.attrs), (id(0, 0), NodeAttrs::Net { coll: false, asic: 0x4a5b, port: 1, bw: 12.5 }));
        let Some(Event::TopoLine(t)) = parse("+ PCI[24.0] - GPU/1B000 (0)") else { panic!() };
        assert_eq!(t.node.id, id(0, 0x1b000));
        let Some(Event::TopoLine(t)) = parse("  + NVL[40.0] - NVS/0") else { panic!() };
        assert_eq!((t.node.kind, t.attrs), (NodeType::NVS, NodeAttrs::None));
        assert!(parse("+ PCI[24.0] - GPU/0-1b000 (x)").is_none());
        assert!(parse("+ WARP[1.0] - GPU/0").is_none());
    }

    #[test]
    fn system_lines_of_every_version() {
        assert_eq!(
            parse("=== System : maxBw 24.0 totalBw 40.0 ==="),
            Some(Event::TopoSystem { max_bw: 24.0, total_bw: 40.0 })
        );
        assert_eq!(
            parse("=== System : maxWidth 12.0 totalWidth 12.0 ==="),
            Some(Event::TopoSystem { max_bw: 12.0, total_bw: 12.0 })
        );
        assert_eq!(parse("=== System : maxWidth 12.0 ==="), Some(Event::TopoSystem { max_bw: 12.0, total_bw: 0.0 }));
        assert_eq!(
            parse("=== System : maxWidth 12 maxSpeed 12 ==="),
            Some(Event::TopoSystem { max_bw: 12.0, total_bw: 0.0 })
        );
        assert_eq!(parse("=========================================="), Some(Event::TopoEnd));
    }

    #[test]
    fn paths_from_gpus_and_nets() {
        let Some(Event::Path(p)) = parse("NET/0-0 :GPU/0-1b000 (3/24.0/PXB) NET/0-0 (0/5000.0/LOC) ") else { panic!() };
        assert_eq!(p.from.kind, NodeType::NET);
        assert_eq!(p.to[0], (NodeRef { kind: NodeType::GPU, id: id(0, 0x1b000) }, 3, 24.0, PathType::PXB));
        let Some(Event::Path(p)) = parse("GPU/1B000 :GPU/1C000 (2/24.000000/PIX) CPU/0 (2/24.000000/PHB) ") else {
            panic!()
        };
        assert_eq!((p.to.len(), p.to[1].3), (2, PathType::PHB));
        assert!(parse("GPU/0-1b000 :GPU/0-1c000 (2/24.0/NOPE) ").is_none());
    }

    #[test]
    fn graphs_and_their_channels() {
        let Some(Event::Graph(g)) =
            parse("Pattern 4, crossNic 0, nChannels 1, speed 21.000000/21.000000, type NVL/PIX, sameChannels 1")
        else {
            panic!()
        };
        assert_eq!((g.pattern, g.n_channels, g.type_intra), (collscope_model::Pattern::Ring, 1, PathType::NVL));
        assert_eq!(
            parse(" 0 : GPU/0 GPU/1"),
            Some(Event::GraphChannel(vec![GraphToken::Rank(0), GraphToken::Rank(1)]))
        );
        assert_eq!(
            parse(" 1 : NET/0-0 GPU/0-1b000 NET/0-1"),
            Some(Event::GraphChannel(vec![GraphToken::Net(0), GraphToken::Gpu(id(0, 0x1b000)), GraphToken::Net(1)]))
        );
        assert_eq!(
            parse(" 1 : NET/0 GPU/2 NET/a"),
            Some(Event::GraphChannel(vec![GraphToken::Net(0), GraphToken::Rank(2), GraphToken::Net(10)]))
        );
        assert!(graph_channel("1 : GPU/0 CPU/1").is_none());
    }
}
