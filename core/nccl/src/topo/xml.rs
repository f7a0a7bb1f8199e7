//! NCCL's topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`), read and written in NCCL 2.28.9's schema
//! (`src/graph/xml.cc`): `<system version="1">` holding `<cpu>`, which holds `<pci>` and `<nic>`; `<pci>` holds
//! `<pci>`, `<gpu>`, `<nic>` and `<pcilink>`; `<gpu>` holds `<nvlink>` and `<c2c>`; `<nic>` holds `<net>`.
//! Like NCCL's loader, elements outside that schema are dropped (with NCCL's `Ignoring element` line) and an
//! attribute may lack a value. Unlike it, text between elements is tolerated, since XML allows it.

use super::error::TopoError;
use collscope_debug::nccl_info;
use collscope_debug::Subsys;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// The topology file version NCCL 2.28.9 reads and writes (`NCCL_TOPO_XML_VERSION`).
pub const TOPO_XML_VERSION: i64 = 1;
/// NCCL reads at most this many elements from a topology file (`NCCL_TOPO_XML_MAX_NODES`).
pub const MAX_ELEMENTS: usize = 256;
/// [`MAX_ELEMENTS`] at 16 KiB each, far more than any element takes: a larger file is not a topology.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Deeper nesting than any machine has; the limit keeps recursion over the tree bounded.
pub const MAX_DEPTH: usize = 64;

/// One element: name, attributes in file order, children, and the line it starts on (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlNode {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub subs: Vec<XmlNode>,
    pub line: usize,
}

impl XmlNode {
    pub fn new(name: &str) -> Self {
        XmlNode { name: name.to_string(), attrs: Vec::new(), subs: Vec::new(), line: 0 }
    }

    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets `key`, replacing an existing value in place so the attribute order stays stable.
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        let value = value.into();
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.attrs.push((key.to_string(), value)),
        }
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.set(key, value);
        self
    }

    pub fn subs_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a XmlNode> + 'a {
        self.subs.iter().filter(move |s| s.name == name)
    }

    pub fn sub(&self, name: &str) -> Option<&XmlNode> {
        self.subs.iter().find(|s| s.name == name)
    }
}

/// A parsed topology file: the `<system>` element and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoXml {
    /// "file:/path.xml", "preset:dgx-a100", "detected": used in error messages and `Topology::source`.
    pub origin: String,
    pub system: XmlNode,
}

/// Which children each element keeps (NCCL's `ncclTopoXmlLoad*` handler tables).
fn allowed_children(parent: &str) -> &'static [&'static str] {
    match parent {
        "system" => &["cpu"],
        "cpu" => &["pci", "nic"],
        "pci" => &["pci", "gpu", "nic", "pcilink"],
        "gpu" => &["nvlink", "c2c"],
        "nic" => &["net"],
        _ => &[],
    }
}

/// Byte offset -> 1-based line number.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        Lines(text.match_indices('\n').map(|(i, _)| i).collect())
    }
    fn line_of(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

fn open_element(e: &BytesStart<'_>, line: usize, origin: &str) -> Result<XmlNode, TopoError> {
    let syntax = |detail: String| TopoError::Syntax { origin: origin.to_string(), line, detail };
    let name = e.name().as_ref().to_string();
    let mut node = XmlNode { name, attrs: Vec::new(), subs: Vec::new(), line };
    // NCCL's parser accepts attributes without a value (`<cpu numaid="1" ...>`), as HTML attributes are.
    for a in e.html_attributes() {
        let a = a.map_err(|err| syntax(format!("bad attribute in <{}>: {err}", node.name)))?;
        let key = a.key.as_ref().to_string();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|err| syntax(format!("bad value of attribute '{key}' in <{}>: {err}", node.name)))?
            .into_owned();
        node.attrs.push((key, value));
    }
    Ok(node)
}

/// Parses a topology file's text. `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<TopoXml, TopoError> {
    let lines = Lines::new(text);
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    // The stack of open elements; the bottom is a synthetic document root.
    let mut stack: Vec<XmlNode> = vec![XmlNode::new("")];
    // Depth of elements being skipped because the schema does not hold them there.
    let mut skipping = 0usize;
    // The first top-level element, for the error when it is not <system>.
    let mut first_top: Option<String> = None;
    let mut elements = 0usize;
    // RCCL's links between AMD GPUs; NCCL drops the element, RCCL's format is named in the error below.
    let mut xgmi: Option<usize> = None;
    let limit = |line: usize, detail: String| TopoError::Syntax { origin: origin.to_string(), line, detail };
    loop {
        let before = reader.buffer_position() as usize;
        let event = reader.read_event().map_err(|err| TopoError::Syntax {
            origin: origin.to_string(),
            line: lines.line_of(reader.error_position() as usize),
            detail: err.to_string(),
        })?;
        let after = reader.buffer_position() as usize;
        let line = lines.line_of(before + text.get(before..after).and_then(|t| t.find('<')).unwrap_or(0));
        match event {
            Event::Start(_) if skipping > 0 => skipping += 1,
            Event::Start(_) | Event::Empty(_) if elements == MAX_ELEMENTS => {
                return Err(limit(
                    line,
                    format!("more than {MAX_ELEMENTS} elements (NCCL's limit for a topology file)"),
                ));
            }
            Event::Empty(_) if skipping > 0 => {}
            Event::Start(e) => {
                let node = open_element(&e, line, origin)?;
                if stack.len() > MAX_DEPTH {
                    return Err(limit(line, format!("elements nested deeper than {MAX_DEPTH} levels")));
                }
                if stack.len() == 1 {
                    first_top.get_or_insert_with(|| node.name.clone());
                }
                if accepts(&stack, &node.name) {
                    elements += 1;
                    stack.push(node);
                } else {
                    if node.name == "xgmi" {
                        xgmi.get_or_insert(line);
                    }
                    nccl_info!(Subsys::GRAPH, "Ignoring element {}", node.name);
                    skipping = 1;
                }
            }
            Event::Empty(e) => {
                let node = open_element(&e, line, origin)?;
                if stack.len() == 1 {
                    first_top.get_or_insert_with(|| node.name.clone());
                }
                if accepts(&stack, &node.name) {
                    elements += 1;
                    attach(&mut stack, node);
                } else {
                    if node.name == "xgmi" {
                        xgmi.get_or_insert(line);
                    }
                    nccl_info!(Subsys::GRAPH, "Ignoring element {}", node.name);
                }
            }
            Event::End(_) if skipping > 0 => skipping -= 1,
            Event::End(_) => {
                // quick-xml checked that the name matches the open element.
                if let Some(node) = stack.pop() {
                    attach(&mut stack, node);
                }
            }
            Event::Eof => break,
            // Declarations, comments, processing instructions and text carry nothing in this schema.
            _ => {}
        }
    }
    let root = stack.pop().unwrap_or_else(|| XmlNode::new(""));
    let found = || first_top.map_or("no element".to_string(), |n| format!("<{n}>"));
    let Some(system) = root.subs.iter().find(|n| n.name == "system").cloned() else {
        return Err(TopoError::NoSystem { origin: origin.to_string(), found: found() });
    };
    let version = system.attr("version").ok_or_else(|| TopoError::MissingAttr {
        origin: origin.to_string(),
        line: system.line,
        element: "system".into(),
        attr: "version",
    })?;
    // RCCL writes version 2 and links AMD GPUs with <xgmi> (ROCm/rccl `src/graph/xml.h`).
    let rccl = |line, why: String| TopoError::Rccl { origin: origin.to_string(), line, why };
    if collscope_debug::env::parse_c_int(version) == Some(2) {
        return Err(rccl(system.line, "<system version=\"2\">".into()));
    }
    if let Some(line) = xgmi {
        return Err(rccl(line, "<xgmi> links between AMD GPUs".into()));
    }
    if collscope_debug::env::parse_c_int(version) != Some(TOPO_XML_VERSION) {
        return Err(TopoError::BadAttr {
            origin: origin.to_string(),
            line: system.line,
            element: "system".into(),
            attr: "version",
            value: version.to_string(),
            expected: format!("{TOPO_XML_VERSION} (the topology XML version NCCL 2.28.9 reads)"),
        });
    }
    match system.attr("name") {
        Some(name) => nccl_info!(Subsys::GRAPH, "Loading topology {name}"),
        None => nccl_info!(Subsys::GRAPH, "Loading unnamed topology"),
    }
    Ok(TopoXml { origin: origin.to_string(), system })
}

fn accepts(stack: &[XmlNode], name: &str) -> bool {
    match stack.last() {
        Some(parent) if parent.name.is_empty() => name == "system",
        Some(parent) => allowed_children(&parent.name).contains(&name),
        None => false,
    }
}

fn attach(stack: &mut [XmlNode], node: XmlNode) {
    if let Some(parent) = stack.last_mut() {
        parent.subs.push(node);
    }
}

/// Reads a topology file (`NCCL_TOPO_FILE`, `--topo-file`).
pub fn read_file(path: &std::path::Path) -> Result<TopoXml, TopoError> {
    let text = collscope_debug::file::read_small_string(path, MAX_FILE_BYTES)
        .map_err(|source| TopoError::Read { path: path.display().to_string(), source })?;
    nccl_info!(Subsys::GRAPH, "Loading topology file {}", path.display());
    parse(&text, &path.display().to_string())
}

/// Writes the tree as NCCL's `ncclTopoDumpXmlRec` does: two spaces per level, `/>` for childless elements.
pub fn to_string(xml: &TopoXml) -> String {
    let mut out = String::new();
    write_rec(&xml.system, 0, &mut out);
    out
}

fn write_rec(node: &XmlNode, indent: usize, out: &mut String) {
    out.push_str(&" ".repeat(indent));
    out.push('<');
    out.push_str(&node.name);
    for (k, v) in &node.attrs {
        out.push_str(&format!(" {k}=\"{}\"", quick_xml::escape::escape(v.as_str())));
    }
    if node.subs.is_empty() {
        out.push_str("/>\n");
        return;
    }
    out.push_str(">\n");
    for s in &node.subs {
        write_rec(s, indent + 2, out);
    }
    out.push_str(&" ".repeat(indent));
    out.push_str(&format!("</{}>\n", node.name));
}

/// Writes a topology file (`NCCL_TOPO_DUMP_FILE`, `topo dump --output`).
pub fn write_file(xml: &TopoXml, path: &std::path::Path) -> Result<(), TopoError> {
    std::fs::write(path, to_string(xml)).map_err(|source| TopoError::Write { path: path.display().to_string(), source })
}
