//! Init-time lines: version, bootstrap, network and plugins, GPUDirect RDMA, topology and paths, graph search,
//! channel counts, communicator init and timings, env settings (NCCL 2.28.9 `src/init.cc`, `src/bootstrap.cc`,
//! `src/transport/net_*.cc`, `src/graph/{topo,paths,search,connect,tuning}.cc`, `src/misc/param.cc`, and the
//! older wordings of 2.4 to 2.27).

use super::Event;
use collscope_model::{ChannelCounts, Graph, GraphChannel, NetDevice, PathType, Pattern, PluginNote};
use regex::Regex;
use std::sync::OnceLock;

/// `... comm 0x55d3 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x9f - Init START|COMPLETE`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommInit {
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub cuda_dev: i32,
    pub bus_id: Option<String>,
    pub comm_id: Option<String>,
    pub complete: bool,
}

/// `comm 0x... rank 13 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommInfo {
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub local_ranks: u32,
    pub local_rank: u32,
}

/// Either GPUDirect RDMA line family.
#[derive(Debug, Clone, PartialEq)]
pub struct GdrLine {
    pub net: Option<String>,
    pub enabled: bool,
    /// Per GPU/HCA lines: the rank and the NIC.
    pub rank: Option<u32>,
    pub hca: Option<String>,
    pub hca_name: Option<String>,
    pub distance: Option<u32>,
    pub level: Option<u32>,
    /// `no module`, `nvidia-peermem`, `DMABUF`.
    pub reason: Option<String>,
}

/// `GPU/0-1b000 :GPU/0-1b000 (0/5000.0/LOC) GPU/0-1c000 (2/24.0/PHB) ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct PathLine {
    pub from: String,
    /// (to, hops, bw, type).
    pub to: Vec<(String, u32, f64, PathType)>,
}

struct Patterns {
    bootstrap: Regex,
    net_using: Regex,
    ib_dev: Regex,
    sock_dev: Regex,
    gdr_hca: Regex,
    gdr_gpu: Regex,
    graph: Regex,
    graph_channel: Regex,
    fallback: Regex,
    comm_init: Regex,
    comm_info: Regex,
    timings: Regex,
    topo_system: Regex,
    topo_node: Regex,
    path_head: Regex,
    path_item: Regex,
    env: Regex,
    error_trace: Regex,
    plugin_loaded: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let r = |s: &str| Regex::new(s).expect("built-in pattern compiles");
        Patterns {
            bootstrap: r(r"^Bootstrap ?: Using\s+(?:\[\d+\])?([^\s:<]+):([^\s<]+)"),
            net_using: r(r"^NET/(\S+?) ?: Using(.*)$"),
            ib_dev: r(r"\[(\d+)\]([^\s:\[]+):(\d+)/(\w+)"),
            sock_dev: r(r"\[(\d+)\]([^\s:\[]+):([^\s<]+)<\d+>"),
            gdr_hca: r(
                r"^(?:NET/(\S+?) ?: )?GPU Direct RDMA (?:\(([^)]*)\) )?([Ee]nabled|[Dd]isabled) for HCA (\d+) '([^']*)'(?: \(([^)]*)\))?",
            ),
            gdr_gpu: r(
                r"GPU Direct RDMA (Enabled|Disabled) for GPU (\d+)(\[\d+\])? / HCA ([0-9a-fA-Fx]+) \(distance (\d+) [<>]=? (\d+)\)",
            ),
            graph: r(
                r"^Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) ([\d.]+)/([\d.]+), type (\w+)/(\w+), sameChannels (\d+)",
            ),
            graph_channel: r(r"^\s*(\d+) :((?:\s+(?:GPU|NET)/\S+)+)\s*$"),
            fallback: r(r"^Could not find a path for pattern (\d+), falling back"),
            comm_init: r(
                r"^(?:\w+ )?comm (\S+) rank (\d+) nranks (\d+) cudaDev (-?\d+)(?: nvmlDev -?\d+)?(?: busId ([0-9a-fA-F]+))?(?: commId (0x[0-9a-fA-F]+))?.*- Init (START|COMPLETE)",
            ),
            comm_info: r(r"^comm (\S+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)"),
            timings: r(r"^Init timings(?: - \w+)?: rank (\d+) nranks (\d+) total ([\d.]+) \((.*)\)"),
            topo_system: r(r"^=== System : maxBw ([\d.]+) totalBw ([\d.]+) ==="),
            topo_node: r(r"^\s*(?:\+ \w+\[[\d.]+\] - )?((?:GPU|PCI|NVS|CPU|NIC|NET)/[0-9a-fA-F]+(?:-[0-9a-fA-F]+)?)"),
            path_head: r(r"^((?:GPU|PCI|NVS|CPU|NIC|NET)/[0-9a-fA-F-]+) :"),
            path_item: r(r"(\w+/[0-9a-fA-F-]+) \((\d+)/([\d.]+)/(\w+)\)"),
            env: r(r"^(NCCL_\w+) set (?:by environment )?to (.*?)\.?\s*$"),
            error_trace: r(r"^(\S+\.\w+):(\d+) -> (-?\d+)"),
            plugin_loaded: r(r"Loaded (\w+) plugin (\S+)"),
        }
    })
}

pub fn version(msg: &str) -> Option<String> {
    msg.strip_prefix("NCCL version ")?.split_ascii_whitespace().next().map(str::to_string)
}

pub fn env(msg: &str) -> Option<Event> {
    let c = patterns().env.captures(msg)?;
    Some(Event::Env { name: c[1].to_string(), value: c[2].to_string() })
}

pub fn connected(msg: &str) -> Option<Event> {
    if let Some(rest) = msg.strip_prefix("Connected all rings") {
        let flag = |key: &str| {
            rest.split_once(key)
                .and_then(|(_, v)| v.split_ascii_whitespace().next())
                .map(|v| v.trim_matches(',') != "0")
        };
        return Some(Event::ConnectedRings { pxn: flag("PXN "), gdr: flag("GDR ") });
    }
    if msg.starts_with("Connected all trees") {
        return Some(Event::ConnectedTrees);
    }
    if msg.starts_with("Connected NVLS") {
        return Some(Event::Nvls(true));
    }
    Some(Event::Known)
}

fn net_devices(net: &str, list: &str) -> Vec<NetDevice> {
    let list = list.split(';').next().unwrap_or("");
    let p = patterns();
    if net == "Socket" {
        p.sock_dev
            .captures_iter(list)
            .filter_map(|c| {
                Some(NetDevice {
                    index: c[1].parse().ok()?,
                    name: c[2].to_string(),
                    port: None,
                    link: Some(c[3].to_string()),
                    host: None,
                })
            })
            .collect()
    } else {
        p.ib_dev
            .captures_iter(list)
            .filter_map(|c| {
                Some(NetDevice {
                    index: c[1].parse().ok()?,
                    name: c[2].to_string(),
                    port: c[3].parse().ok(),
                    link: Some(c[4].to_string()),
                    host: None,
                })
            })
            .collect()
    }
}

fn plugin(kind: &str, text: &str) -> Event {
    let loaded_cap = patterns().plugin_loaded.captures(text);
    let loaded = loaded_cap.is_some() || text.starts_with("Using ") && !text.contains("internal");
    let name = loaded_cap.map(|c| c[2].to_string());
    Event::Plugin(PluginNote { kind: kind.to_string(), name, loaded, text: text.to_string() })
}

fn graph(c: &regex::Captures) -> Option<Event> {
    Some(Event::Graph(Graph {
        pattern: Pattern::from_id(c[1].parse().ok()?)?,
        cross_nic: c[2].parse().ok()?,
        n_channels: c[3].parse().ok()?,
        bw_intra: c[4].parse().ok()?,
        bw_inter: c[5].parse().ok()?,
        type_intra: c[6].parse().ok()?,
        type_inter: c[7].parse().ok()?,
        same_channels: &c[8] != "0",
        channels: Vec::new(),
    }))
}

/// `GPU/3` (a rank, older prints) or `GPU/0-1b000` (a node id, newer prints: kept only as NET ids).
fn graph_channel(list: &str) -> GraphChannel {
    let mut ch = GraphChannel::default();
    for tok in list.split_ascii_whitespace() {
        if let Some(g) = tok.strip_prefix("GPU/") {
            if let Ok(r) = g.parse() {
                ch.intra.push(r);
            }
        } else if let Some(n) = tok.strip_prefix("NET/") {
            let id = n.rsplit('-').next().unwrap_or(n);
            if let Ok(v) = i64::from_str_radix(id, 16) {
                ch.inter.push(v);
            }
        }
    }
    ch
}

fn gdr(msg: &str) -> Option<Event> {
    let p = patterns();
    if let Some(c) = p.gdr_gpu.captures(msg) {
        let enabled = &c[1] == "Enabled";
        return Some(Event::Gdr(GdrLine {
            net: msg.strip_prefix("NET/").and_then(|r| r.split([' ', ':']).next()).map(str::to_string),
            enabled,
            // Older NCCL printed `GPU dev[nvmlDev]`, newer `GPU rank`.
            rank: if c.get(3).is_some() { None } else { c[2].parse().ok() },
            hca: Some(c[4].to_string()),
            hca_name: None,
            distance: c[5].parse().ok(),
            level: c[6].parse().ok(),
            reason: Some("distance".into()),
        }));
    }
    let c = p.gdr_hca.captures(msg)?;
    Some(Event::Gdr(GdrLine {
        net: c.get(1).map(|m| m.as_str().to_string()),
        enabled: c[3].eq_ignore_ascii_case("enabled"),
        rank: None,
        hca: Some(c[4].to_string()),
        hca_name: Some(c[5].to_string()),
        distance: None,
        level: None,
        reason: c.get(2).or(c.get(6)).map(|m| m.as_str().to_string()),
    }))
}

fn comm_init(c: &regex::Captures) -> Option<Event> {
    Some(Event::CommInit(CommInit {
        comm: c[1].to_string(),
        rank: c[2].parse().ok()?,
        nranks: c[3].parse().ok()?,
        cuda_dev: c[4].parse().ok()?,
        bus_id: c.get(5).map(|m| m.as_str().to_string()),
        comm_id: c.get(6).map(|m| m.as_str().to_string()),
        complete: &c[7] == "COMPLETE",
    }))
}

fn timings(c: &regex::Captures) -> Option<Event> {
    let phases = c[4]
        .split(", ")
        .filter_map(|p| {
            let (name, v) = p.trim().rsplit_once(' ')?;
            Some((name.to_string(), v.parse().ok()?))
        })
        .collect();
    Some(Event::InitTimings { rank: c[1].parse().ok()?, nranks: c[2].parse().ok()?, total: c[3].parse().ok()?, phases })
}

fn channel_counts(msg: &str) -> Option<Event> {
    let mut cc = ChannelCounts::default();
    for part in msg.split(", ") {
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
    Some(Event::ChannelCounts(cc))
}

fn path_line(msg: &str) -> Option<Event> {
    let p = patterns();
    let head = p.path_head.captures(msg)?;
    let to = p
        .path_item
        .captures_iter(&msg[head.get(0)?.end()..])
        .filter_map(|c| Some((c[1].to_string(), c[2].parse().ok()?, c[3].parse().ok()?, c[4].parse().ok()?)))
        .collect();
    Some(Event::Path(PathLine { from: head[1].to_string(), to }))
}

/// Messages NCCL prints that carry nothing the model keeps; recognised so `--strict` does not list them.
const KNOWN_PREFIXES: &[&str] = &[
    "Setting affinity for GPU",
    "P2P Chunksize set to",
    "[Proxy ",
    "UDS: ",
    "Launch mode",
    "cudaDriverVersion",
    "Allocated ",
    "Threads per block",
    "Comm config",
    "CC Off",
    "CC On",
    "MNNVL",
    "Bootstrap timings",
    "Bootstrap: ",
    "ncclCommInitRankConfig",
    "ncclCommInitAll",
    "ncclCommSplit",
    "RAS ",
    "DMA-BUF is available",
    "Check P2P Type",
    "NVLS Trees",
    "NVLS Head",
    "NVLS Creating",
    "NVLS Created",
    "NVLS importing",
    "NVLS Unbind",
    "NVLS Unmap",
    "NVLS rank",
    "NVLS multicast support is available",
    "Communicator has ",
    "rank ",
    "Freeing",
    "Search ",
    "latencyinter",
    "Initialized NET plugin",
    "Assigned NET plugin",
    "Loading ",
    "Using ",
    "Paths from",
    "PXN Disabled",
    "Dump from",
    "ncclProxy",
    "Proxy ",
    "sendConnect",
    "recvConnect",
    "Connected Collnet",
    "CollNet",
    "NET/IB: Dev",
    "NET/IB : Dev",
    "NET/IB: [",
    "NET/IB : ",
    "NET/Socket : ",
    "Invalid NCCL_",
    "minCTAs ",
];

/// Known messages recognised by a fragment in the middle.
const KNOWN_FRAGMENTS: &[&str] = &[" connected via C2C link", " is too low, leaving it set at "];

/// Everything else: tried in order of how often it appears.
pub fn misc(msg: &str) -> Option<Event> {
    let p = patterns();
    if let Some(rest) = msg.strip_prefix("threadThresholds ") {
        return Some(Event::ThreadThresholds(rest.trim().to_string()));
    }
    if msg.as_bytes().first().is_some_and(u8::is_ascii_digit) && msg.contains(" coll channels") {
        return channel_counts(msg);
    }
    if let Some(c) = p.comm_init.captures(msg) {
        return comm_init(&c);
    }
    if let Some(c) = p.comm_info.captures(msg) {
        return Some(Event::CommInfo(CommInfo {
            comm: c[1].to_string(),
            rank: c[2].parse().ok()?,
            nranks: c[3].parse().ok()?,
            nnodes: c[4].parse().ok()?,
            local_ranks: c[5].parse().ok()?,
            local_rank: c[6].parse().ok()?,
        }));
    }
    if let Some(c) = p.timings.captures(msg) {
        return timings(&c);
    }
    if msg.starts_with("Bootstrap") {
        if let Some(c) = p.bootstrap.captures(msg) {
            return Some(Event::Bootstrap { name: c[1].to_string(), address: c[2].to_string() });
        }
    }
    if msg.contains("GPU Direct RDMA") {
        if let Some(e) = gdr(msg) {
            return Some(e);
        }
    }
    if let Some(rest) = msg.strip_prefix("Using network ") {
        return Some(Event::UsingNetwork(rest.trim().to_string()));
    }
    if let Some(rest) = msg.strip_prefix("NET/") {
        if let Some(c) = p.net_using.captures(msg) {
            let net = c[1].to_string();
            let devices = net_devices(&net, &c[2]);
            return Some(Event::NetUsing { net, devices });
        }
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if rest[name.len()..].trim_start().trim_start_matches(':').trim().starts_with("No device found") {
            return Some(Event::NetNoDevice(name));
        }
        if name == "Plugin" {
            return Some(plugin("net", rest[name.len()..].trim_start_matches([' ', ':'])));
        }
        if !matches!(name.as_str(), "IB" | "Socket" | "") {
            return Some(Event::NetPluginActive(name));
        }
    }
    for (prefix, kind) in [("TUNER/Plugin", "tuner"), ("PROFILER/Plugin", "profiler"), ("ENV/Plugin", "env")] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            return Some(plugin(kind, rest.trim_start_matches([' ', ':'])));
        }
    }
    if msg.starts_with("Using non-device net plugin") || msg.starts_with("Using network plugin") {
        return Some(plugin("net", msg));
    }
    if let Some(c) = p.graph.captures(msg) {
        return graph(&c);
    }
    if let Some(c) = p.graph_channel.captures(msg) {
        return Some(Event::GraphChannel(graph_channel(&c[2])));
    }
    if let Some(c) = p.fallback.captures(msg) {
        return Some(Event::SearchFallback(c[1].parse().ok()?));
    }
    if let Some(c) = p.topo_system.captures(msg) {
        return Some(Event::TopoSystem { max_bw: c[1].parse().ok()?, total_bw: c[2].parse().ok()? });
    }
    if msg.contains(" (") && msg.contains('/') {
        if let Some(e) = path_line(msg) {
            return Some(e);
        }
    }
    if let Some(c) = p.topo_node.captures(msg) {
        return Some(Event::TopoNode(c[1].to_string()));
    }
    if let Some(c) = p.error_trace.captures(msg) {
        return Some(Event::ErrorTrace { location: format!("{}:{}", &c[1], &c[2]), code: c[3].parse().ok()? });
    }
    if msg.starts_with("NVLS comm ") {
        return Some(Event::Nvls(true));
    }
    if msg.starts_with("NVLS multicast support is not available") {
        return Some(Event::Nvls(false));
    }
    if msg.starts_with("P2P is disabled between") {
        return Some(Event::P2pDisabled(msg.to_string()));
    }
    if msg.starts_with("Disabling LL128") {
        return Some(Event::Ll128Disabled(msg.to_string()));
    }
    if msg.starts_with("User asked for a ") {
        return Some(Event::ChannelsLimited(msg.to_string()));
    }
    if msg.starts_with("Enabled NCCL Func/Proto/Algo Matrix") {
        return Some(Event::MatrixStart);
    }
    if msg.starts_with("Connected") {
        return connected(msg);
    }
    (KNOWN_PREFIXES.iter().any(|k| msg.starts_with(k)) || KNOWN_FRAGMENTS.iter().any(|k| msg.contains(k)))
        .then_some(Event::Known)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn network_lines() {
        match parse("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/RoCE [RO]; OOB ibs85f0:10.10.0.1<0>") {
            Some(Event::NetUsing { net, devices }) => {
                assert_eq!(net, "IB");
                assert_eq!(devices.len(), 2);
                assert_eq!((devices[1].name.as_str(), devices[1].link.as_deref()), ("mlx5_2", Some("RoCE")));
            }
            e => panic!("{e:?}"),
        }
        match parse("NET/Socket : Using [0]lo:127.0.0.1<0> [1]eth0:10.0.0.2<0>") {
            Some(Event::NetUsing { net, devices }) => assert_eq!((net.as_str(), devices.len()), ("Socket", 2)),
            e => panic!("{e:?}"),
        }
        assert_eq!(parse("NET/IB : No device found."), Some(Event::NetNoDevice("IB".into())));
        assert_eq!(parse("Using network IB"), Some(Event::UsingNetwork("IB".into())));
        assert_eq!(parse("NET/OFI Selected Provider is efa"), Some(Event::NetPluginActive("OFI".into())));
        match parse("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation") {
            Some(Event::Plugin(p)) => assert!(!p.loaded && p.kind == "net"),
            e => panic!("{e:?}"),
        }
        match parse("NET/Plugin: Loaded net plugin IBext_v8 (v8)") {
            Some(Event::Plugin(p)) => assert!(p.loaded && p.name.as_deref() == Some("IBext_v8")),
            e => panic!("{e:?}"),
        }
        assert_eq!(
            parse("Bootstrap : Using [0]br0:10.10.0.1<0>"),
            Some(Event::Bootstrap { name: "br0".into(), address: "10.10.0.1".into() })
        );
        assert_eq!(
            parse("Bootstrap: Using eth0:10.0.0.1<0>"),
            Some(Event::Bootstrap { name: "eth0".into(), address: "10.0.0.1".into() })
        );
    }

    #[test]
    fn gdr_lines_in_both_families() {
        let Some(Event::Gdr(g)) = parse("NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)")
        else {
            panic!()
        };
        assert_eq!((g.enabled, g.rank, g.distance, g.level), (false, None, Some(3), Some(2)));
        let Some(Event::Gdr(g)) =
            parse("GPU Direct RDMA Enabled for GPU 1 / HCA 3 (distance 4 <= 5), read 1 mode Default")
        else {
            panic!()
        };
        assert!(g.enabled && g.hca.as_deref() == Some("3"));
        let Some(Event::Gdr(g)) = parse("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)") else {
            panic!()
        };
        assert_eq!((g.enabled, g.reason.as_deref(), g.hca_name.as_deref()), (false, Some("no module"), Some("mlx5_0")));
        let Some(Event::Gdr(g)) = parse("NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0'") else {
            panic!()
        };
        assert_eq!((g.enabled, g.reason.as_deref()), (true, Some("nvidia-peermem")));
    }

    #[test]
    fn graph_comm_and_counts() {
        let Some(Event::Graph(g)) =
            parse("Pattern 4, crossNic 0, nChannels 1, speed 21.000000/21.000000, type NVL/PIX, sameChannels 1")
        else {
            panic!()
        };
        assert_eq!((g.pattern, g.n_channels, g.type_intra), (Pattern::Ring, 1, PathType::NVL));
        assert!(matches!(parse(" 0 : GPU/0 GPU/1"), Some(Event::GraphChannel(c)) if c.intra == vec![0, 1]));
        let Some(Event::CommInit(c)) = parse(
            "ncclCommInitRank comm 0xa624cf0 rank 6 nranks 8 cudaDev 6 nvmlDev 6 busId 90000 commId 0xa0 - Init START",
        ) else {
            panic!()
        };
        assert_eq!((c.rank, c.nranks, c.complete, c.comm_id.as_deref()), (6, 8, false, Some("0xa0")));
        let Some(Event::CommInit(c)) = parse("comm 0xa0 rank 17 nranks 64 cudaDev 0 nvmlDev 0 - Init COMPLETE") else {
            panic!()
        };
        assert!(c.complete && c.nranks == 64);
        let Some(Event::CommInfo(c)) =
            parse("comm 0x6426550 rank 2 nRanks 8 nNodes 4 localRanks 2 localRank 0 MNNVL 0")
        else {
            panic!()
        };
        assert_eq!((c.nnodes, c.local_ranks), (4, 2));
        let Some(Event::ChannelCounts(c)) = parse("2 coll channels, 2 p2p channels, 2 p2p channels per peer") else {
            panic!()
        };
        assert_eq!((c.coll, c.p2p_per_peer, c.nvls), (Some(2), Some(2), None));
        let Some(Event::InitTimings { total, phases, .. }) = parse(
            "Init timings - ncclCommInitRank: rank 0 nranks 8 total 1.25 (kernels 0.10, alloc 0.02, bootstrap 0.30, allgathers 0.01, topo 0.20, graphs 0.05, connections 0.50, rest 0.07)",
        ) else {
            panic!()
        };
        assert_eq!((total, phases.len(), phases[0].0.as_str()), (1.25, 8, "kernels"));
    }

    #[test]
    fn env_topology_paths_and_traces() {
        assert_eq!(
            parse("NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1"),
            Some(Event::Env { name: "NCCL_IB_HCA".into(), value: "mlx5_2:1,mlx5_0:1".into() })
        );
        assert_eq!(
            parse("NCCL_MAX_NCHANNELS set by environment to 1."),
            Some(Event::Env { name: "NCCL_MAX_NCHANNELS".into(), value: "1".into() })
        );
        assert_eq!(
            parse("=== System : maxBw 24.0 totalBw 24.0 ==="),
            Some(Event::TopoSystem { max_bw: 24.0, total_bw: 24.0 })
        );
        assert_eq!(parse("+ PCI[24.0] - GPU/0-1b000 (0)"), Some(Event::TopoNode("GPU/0-1b000".into())));
        let Some(Event::Path(p)) = parse("GPU/0-1b000 :GPU/0-1b000 (0/5000.0/LOC) GPU/0-1c000 (2/24.0/PHB) ") else {
            panic!()
        };
        assert_eq!(p.to[1], ("GPU/0-1c000".into(), 2, 24.0, PathType::PHB));
        assert_eq!(
            parse("include/shm.h:41 -> 2"),
            Some(Event::ErrorTrace { location: "include/shm.h:41".into(), code: 2 })
        );
        assert_eq!(
            parse("Could not find a path for pattern 4, falling back to simple order"),
            Some(Event::SearchFallback(4))
        );
    }
}
