//! NCCL's graph XML (`NCCL_GRAPH_FILE` in, `NCCL_GRAPH_DUMP_FILE` out; NCCL 2.28.9 `src/graph/search.cc`
//! `ncclTopoGetGraphFromXml`/`ncclTopoGetXmlFromGraphs`, `src/graph/xml.cc` for the layout):
//! `<graphs version="1"><graph id=.. pattern=.. crossnic=.. nchannels=.. speedintra=.. speedinter=..
//! latencyinter=.. typeintra=.. typeinter=.. samechannels=..><channel><net dev=../><gpu dev=../>..</channel>`.

use super::search::SearchGraph;
use super::system::System;
use super::{Found, GraphError, MAX_CHANNELS};
use collscope_model::{PathType, Pattern};
use quick_xml::events::Event;
use quick_xml::Reader;
use std::collections::BTreeMap;

/// `NCCL_GRAPH_XML_VERSION`.
const GRAPH_XML_VERSION: i64 = 1;
/// A graph file holds a few graphs of at most 64 channels each, well under a MiB; a larger file is not one.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// The path types the graph XML may name (`kvDictLinkType`).
const XML_TYPES: [PathType; 9] = [
    PathType::LOC,
    PathType::NVL,
    PathType::NVB,
    PathType::PIX,
    PathType::PXB,
    PathType::P2C,
    PathType::PXN,
    PathType::PHB,
    PathType::SYS,
];

#[derive(Debug, Default)]
struct XmlNode {
    name: String,
    attrs: BTreeMap<String, String>,
    subs: Vec<XmlNode>,
}

fn parse(text: &str, file: &str) -> Result<XmlNode, GraphError> {
    let bad = |what: String| GraphError::Input(format!("graph file {file}: {what}"));
    let mut reader = Reader::from_str(text);
    let mut stack: Vec<XmlNode> = vec![XmlNode::default()];
    loop {
        let ev = reader.read_event().map_err(|e| bad(format!("not valid XML ({e})")))?;
        match ev {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let mut node = XmlNode { name: e.name().as_ref().to_string(), ..Default::default() };
                for a in e.attributes() {
                    let a = a.map_err(|e| bad(format!("bad attribute ({e})")))?;
                    let v = a
                        .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                        .map_err(|e| bad(format!("bad attribute value ({e})")))?;
                    node.attrs.insert(a.key.as_ref().to_string(), v.into_owned());
                }
                if matches!(ev, Event::Start(_)) {
                    stack.push(node);
                } else if let Some(top) = stack.last_mut() {
                    top.subs.push(node);
                }
            }
            Event::End(_) => {
                let done = stack.pop().filter(|_| !stack.is_empty()).ok_or_else(|| bad("unbalanced tags".into()))?;
                if let Some(top) = stack.last_mut() {
                    top.subs.push(done);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if stack.len() != 1 {
        return Err(bad("unclosed tags".into()));
    }
    let root = stack.pop().unwrap_or_default();
    root.subs.into_iter().find(|n| n.name == "graphs").ok_or_else(|| bad("no <graphs> element".into()))
}

fn attr<'a>(n: &'a XmlNode, key: &str, file: &str) -> Result<&'a str, GraphError> {
    n.attrs
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| GraphError::Input(format!("graph file {file}: <{}> has no attribute '{key}'", n.name)))
}

fn int_attr(n: &XmlNode, key: &str, file: &str) -> Result<i64, GraphError> {
    let v = attr(n, key, file)?;
    collscope_debug::env::parse_c_int(v)
        .ok_or_else(|| GraphError::Input(format!("graph file {file}: {key}='{v}' is not an integer")))
}

fn float_attr(n: &XmlNode, key: &str, file: &str) -> Result<f64, GraphError> {
    let v = attr(n, key, file)?;
    v.trim().parse::<f64>().map_err(|_| GraphError::Input(format!("graph file {file}: {key}='{v}' is not a number")))
}

fn type_attr(n: &XmlNode, key: &str, file: &str) -> Result<PathType, GraphError> {
    let v = attr(n, key, file)?;
    XML_TYPES.iter().copied().find(|t| t.as_str() == v).ok_or_else(|| {
        let names: Vec<&str> = XML_TYPES.iter().map(|t| t.as_str()).collect();
        GraphError::Input(format!("graph file {file}: {key}='{v}' is not one of {}", names.join(", ")))
    })
}

/// Loads the graph with `graph.id` from `file` into `graph`; returns the number of channels it listed.
pub fn load_graph(
    file: &str,
    sys: &System,
    graph: &mut SearchGraph,
    cross_nic_param: i64,
) -> Result<usize, GraphError> {
    let text = collscope_debug::file::read_small_string(std::path::Path::new(file), MAX_FILE_BYTES)
        .map_err(|e| GraphError::Input(format!("NCCL_GRAPH_FILE {file} cannot be read: {e}")))?;
    let root = parse(&text, file)?;
    let version = int_attr(&root, "version", file)?;
    if version != GRAPH_XML_VERSION {
        return Err(GraphError::Input(format!(
            "graph file {file}: version {version} is not supported, expected {GRAPH_XML_VERSION}"
        )));
    }
    let ngpus = sys.ngpus();
    let mut loaded = 0;
    for x in root.subs.iter().filter(|n| n.name == "graph") {
        if int_attr(x, "id", file)? != graph.id as i64 {
            continue;
        }
        let cross_nic = int_attr(x, "crossnic", file)?;
        if cross_nic_param == 0 && cross_nic == 1 {
            continue;
        }
        graph.cross_nic = cross_nic as u32;
        let pattern = int_attr(x, "pattern", file)?;
        graph.pattern = u8::try_from(pattern)
            .ok()
            .and_then(Pattern::from_id)
            .ok_or_else(|| GraphError::Input(format!("graph file {file}: pattern='{pattern}' is not one of 1..6")))?;
        graph.n_channels = usize::try_from(int_attr(x, "nchannels", file)?)
            .ok()
            .filter(|&n| n <= MAX_CHANNELS)
            .ok_or_else(|| GraphError::Input(format!("graph file {file}: nchannels must be 0..64")))?;
        graph.bw_intra = float_attr(x, "speedintra", file)?;
        graph.bw_inter = float_attr(x, "speedinter", file)?;
        graph.latency_inter =
            if x.attrs.contains_key("latencyinter") { float_attr(x, "latencyinter", file)? } else { 0.0 };
        graph.type_intra = type_attr(x, "typeintra", file)?;
        graph.type_inter = type_attr(x, "typeinter", file)?;
        graph.same_channels = int_attr(x, "samechannels", file)? != 0;
        let channels: Vec<&XmlNode> = x.subs.iter().collect();
        if channels.len() > MAX_CHANNELS {
            return Err(GraphError::Input(format!("graph file {file}: more than 64 channels")));
        }
        for (c, ch) in channels.iter().enumerate() {
            let (mut n, mut g) = (0, 0);
            for sub in &ch.subs {
                let dev = attr(sub, "dev", file)?;
                let dev = i64::from_str_radix(dev.trim_start_matches("0x").trim_start_matches("0X"), 16)
                    .map_err(|_| GraphError::Input(format!("graph file {file}: dev='{dev}' is not hexadecimal")))?;
                match sub.name.as_str() {
                    "net" if n < 2 => {
                        graph.inter[c * 2 + n] = dev as u64;
                        n += 1;
                    }
                    "gpu" if g < ngpus => {
                        let i = (0..ngpus)
                            .find(|&i| ((sys.gpu_ids[i].0 << 56) as i64 + sys.devs[i] as i64) == dev)
                            .ok_or_else(|| GraphError::Input(format!("XML Import Channel : dev {dev} not found.")))?;
                        graph.intra[c * ngpus + g] = sys.ranks[i];
                        g += 1;
                    }
                    _ => {}
                }
            }
        }
        loaded = channels.len();
    }
    Ok(loaded)
}

/// `%g`: six significant digits, trailing zeros dropped.
fn fmt_g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `%#lx`.
fn fmt_lx(v: i64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{:#x}", v as u64)
    }
}

/// The XML NCCL writes for the five init graphs (ring, tree, collnet direct, collnet chain, NVLS), in
/// `ncclTopoDumpXmlRec`'s layout.
pub fn graphs_xml(sys: &System, graphs: &[&Found]) -> String {
    let mut out = format!("<graphs version=\"{GRAPH_XML_VERSION}\">\n");
    let ngpus = sys.ngpus();
    for f in graphs {
        let g = &f.graph;
        out.push_str(&format!(
            "  <graph id=\"{}\" pattern=\"{}\" crossnic=\"{}\" nchannels=\"{}\" speedintra=\"{}\" speedinter=\"{}\" latencyinter=\"{}\" typeintra=\"{}\" typeinter=\"{}\" samechannels=\"{}\"",
            f.id,
            g.pattern.id(),
            g.cross_nic,
            g.n_channels,
            fmt_g(g.bw_intra),
            fmt_g(g.bw_inter),
            fmt_g(f.latency_inter),
            g.type_intra,
            g.type_inter,
            u8::from(g.same_channels)
        ));
        if g.channels.is_empty() {
            out.push_str("/>\n");
            continue;
        }
        out.push_str(">\n");
        for ch in &g.channels {
            out.push_str("    <channel>\n");
            if sys.inter {
                out.push_str(&format!("      <net dev=\"{}\"/>\n", fmt_lx(ch.inter.first().copied().unwrap_or(0))));
            }
            for &rank in ch.intra.iter().take(if f.id == 3 { 1 } else { ngpus }) {
                if let Some(i) = sys.ranks.iter().position(|&r| r == rank) {
                    let dev = ((sys.gpu_ids[i].0 << 56) as i64) + sys.devs[i] as i64;
                    out.push_str(&format!("      <gpu dev=\"{}\"/>\n", fmt_lx(dev)));
                }
            }
            if sys.inter {
                out.push_str(&format!("      <net dev=\"{}\"/>\n", fmt_lx(ch.inter.get(1).copied().unwrap_or(0))));
            }
            out.push_str("    </channel>\n");
        }
        out.push_str("  </graph>\n");
    }
    out.push_str("</graphs>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_g_and_lx() {
        assert_eq!(fmt_g(20.0), "20");
        assert_eq!(fmt_g(0.1), "0.1");
        assert_eq!(fmt_g(2.4), "2.4");
        assert_eq!(fmt_g(6.666666), "6.66667");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_lx(0), "0");
        assert_eq!(fmt_lx(0x47), "0x47");
    }
}
