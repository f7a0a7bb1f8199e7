//! Init-time lines: version, bootstrap, network and plugins, GPUDirect RDMA, communicator init and timings,
//! channel counts, NVLS, env settings (NCCL 2.28.9 `src/init.cc`, `src/bootstrap.cc`, `src/net.cc`,
//! `src/plugin/*.cc`, `src/graph/{topo,paths,search,connect,tuning}.cc`, `src/transport/nvls.cc`,
//! `src/misc/param.cc`, the older wordings of 2.4 to 2.27, RCCL's and the network plugins' own lines). The init
//! lines collscope writes too (communicator info, Init START/COMPLETE, Init timings, channel counts, `Connected
//! all rings`) are parsed beside their formatters in `collscope_model::lines::init`.

use super::conn::{self as lines, ConnectedRings, InitTimingsLine};
use super::scan::{field, find, Needle, Scan};
use super::Event;
use collscope_model::{GdrGpu, NetDevice, PluginNote};

/// `comm 0x55d3 rank 5 nranks 8 cudaDev 1 busId a7000 - Abort COMPLETE` (or `- Destroy COMPLETE`): a communicator
/// ended (NCCL 2.28.9 `src/init.cc`, `ncclCommAbort` and `ncclCommDestroy`).
#[derive(Debug, Clone, PartialEq)]
pub struct CommEnd {
    pub comm: String,
    pub rank: u32,
    pub nranks: u32,
    pub cuda_dev: i32,
    pub bus_id: Option<String>,
    /// `Abort` (after an error, or a framework's shutdown) rather than `Destroy`.
    pub abort: bool,
}

/// What a memory trace (`NCCL_DEBUG_SUBSYS=ALLOC`) allocated: bytes, on the GPU or in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alloc {
    pub device: bool,
    pub bytes: u64,
}

/// `NVLS comm 0x.. headRank 0 nHeads 8 [nvlsRanks 8] buffSize ...` (`src/transport/nvls.cc`; `nvlsRanks`, the
/// node's ranks, since 2.27).
#[derive(Debug, Clone, PartialEq)]
pub struct NvlsComm {
    pub comm: String,
    pub head_rank: i32,
    pub n_heads: u32,
    pub nvls_ranks: Option<u32>,
}

/// A line that says whether GPUDirect RDMA is on, and often why.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GdrLine {
    pub net: Option<String>,
    pub enabled: bool,
    /// Per GPU/HCA lines: the GPU as printed, the rank where that is what it names, and the NIC.
    pub gpu: Option<GdrGpu>,
    pub rank: Option<u32>,
    pub hca: Option<String>,
    pub hca_name: Option<String>,
    pub distance: Option<u32>,
    pub level: Option<u32>,
    /// `no module`, `nvidia-peermem`, `DMABUF`, `distance`, or the words of a line that says why.
    pub reason: Option<String>,
}

pub fn version(msg: &str) -> Option<String> {
    msg.strip_prefix("NCCL version ")?.split_ascii_whitespace().next().map(str::to_string)
}

/// `RCCL version : 2.20.5-HEAD:7a83a05` (RCCL `src/init.cc`): the NCCL API release it follows.
pub fn rccl_version(text: &str) -> Option<String> {
    let v = text.strip_prefix("RCCL version : ")?.trim();
    let v = v.split(['-', ' ']).next()?;
    v.starts_with(|c: char| c.is_ascii_digit()).then(|| v.to_string())
}

/// `NCCL_IB_HCA set to mlx5_0`, `NCCL_P2P_LEVEL set by environment to NVL.`
pub fn env(msg: &str) -> Option<Event> {
    let mut s = Scan::new(msg);
    let name = s.word()?;
    s.lit(" set ")?;
    s.eat("by environment ");
    s.lit("to ")?;
    let value = s.rest().trim_end().trim_end_matches('.');
    Some(Event::Env { name: name.to_string(), value: value.to_string() })
}

pub fn connected(msg: &str) -> Event {
    if let Some(ConnectedRings { pxn, gdr }) = lines::connected_rings(msg) {
        return Event::ConnectedRings { pxn, gdr };
    }
    if msg.starts_with("Connected NVLS") {
        return Event::Nvls(true);
    }
    Event::Known
}

/// `[0]mlx5_0:1/IB [1]mlx5_2:1/RoCE [RO]; OOB ib0:...` or, for sockets, `[0]eth0:10.0.0.1<0>`.
fn net_devices(net: &str, list: &str) -> Vec<NetDevice> {
    let list = list.split(';').next().unwrap_or("");
    let mut out = Vec::new();
    for tok in list.split_ascii_whitespace() {
        let mut s = Scan::new(tok);
        let Some(index) = s.lit("[").and_then(|_| s.num()) else { continue };
        if s.lit("]").is_none() {
            continue;
        }
        let Some(name) = s.until(":") else { continue };
        s.lit(":");
        let dev = if net == "Socket" {
            s.until("<").map(|addr| NetDevice {
                index,
                name: name.into(),
                port: None,
                link: Some(addr.into()),
                host: None,
            })
        } else {
            s.num().and_then(|port| {
                s.lit("/")?;
                let link = s.take_while(|b| b.is_ascii_alphanumeric())?;
                Some(NetDevice { index, name: name.into(), port: Some(port), link: Some(link.into()), host: None })
            })
        };
        out.extend(dev);
    }
    out
}

fn plugin_note(kind: &str, name: Option<&str>, loaded: bool, version: Option<u32>, text: &str) -> Event {
    let (name, text) = (name.map(|n| n.trim().to_string()), text.trim().to_string());
    Event::Plugin(PluginNote { kind: kind.to_string(), name, loaded, text, version })
}

/// `NAME (v8)` at the end of a plugin line: the name and the API version.
fn name_version(s: &str) -> (&str, Option<u32>) {
    let s = s.trim_end().trim_end_matches('.');
    if let Some(open) = s.rfind(" (v") {
        if let Some(v) = s[open + 3..].strip_suffix(')').and_then(|v| v.parse().ok()) {
            return (&s[..open], Some(v));
        }
    }
    (s, None)
}

/// `NET/Plugin: ...`, `TUNER/Plugin: ...` and the like (`src/plugin/*.cc`; 2.5 to 2.28 wordings).
fn plugin(kind: &str, text: &str) -> Event {
    let text = text.trim_start_matches([' ', ':']).trim();
    for (lead, k) in [
        ("Loaded net plugin ", "net"),
        ("Loaded coll plugin ", "collnet"),
        ("Loaded collnet plugin ", "collnet"),
        ("Loaded gin plugin ", "gin"),
        ("Loaded ", kind),
        ("loaded ", kind),
        ("Using tuner plugin ", kind),
    ] {
        if let Some(rest) = text.strip_prefix(lead) {
            let (name, version) = name_version(rest);
            return plugin_note(k, Some(name), true, version, text);
        }
    }
    if let Some(rest) = text.strip_prefix("Using ").filter(|r| !r.starts_with("internal")) {
        let (name, version) = name_version(rest);
        return plugin_note(kind, Some(name), version.is_some(), version, text);
    }
    let kind = if text.contains("CollNet") { "collnet" } else { kind };
    plugin_note(kind, None, false, None, text)
}

/// Words in a network plugin's line that say GPUDirect RDMA is off: aws-ofi-nccl's `..., disabling GDR` or `GDR
/// disabled on ...`, a device line's `GDR 0`.
pub(crate) fn says_gdr_off(text: &str) -> bool {
    let b = text.as_bytes();
    // Every marker holds `GDR` or `gdr`: one pass over the line rules out the others (this runs on every warning).
    if !memchr::memchr2_iter(b'G', b'g', b).any(|i| matches!(b.get(i..i + 3), Some(b"GDR" | b"gdr"))) {
        return false;
    }
    ["disabling GDR", "GDR disabled", "GDR 0", "GDR: 0", "gdr 0", "gdr=0", "GDR=0"]
        .iter()
        .any(|m| find(text, m).is_some_and(|i| b.get(i + m.len()).is_none_or(|c| !c.is_ascii_digit())))
}

/// `NET/IB : ...`, `NET/Socket : ...`, `NET/Plugin: ...`, `NET/OFI ...`.
fn net_line(word: &str, msg: &str) -> Option<Event> {
    let name = word.strip_prefix("NET/")?.trim_end_matches(':');
    let rest = msg[word.len()..].trim_start_matches([' ', ':']);
    if name == "Plugin" {
        return Some(plugin("net", rest));
    }
    if let Some(list) = rest.strip_prefix("Using").filter(|l| l.trim_start().starts_with('[')) {
        return Some(Event::NetUsing { net: name.to_string(), devices: net_devices(name, list) });
    }
    if rest.starts_with("No device found") {
        return Some(Event::NetNoDevice(name.to_string()));
    }
    if const { Needle::new("GPU Direct RDMA") }.find(rest).is_some() {
        return gdr(msg);
    }
    if let Some(size) = comm_size(rest) {
        return Some(size);
    }
    if matches!(name, "IB" | "Socket") {
        return Some(Event::Known);
    }
    if says_gdr_off(rest) {
        let reason = Some(rest.trim().to_string());
        return Some(Event::Gdr(GdrLine { net: Some(name.to_string()), enabled: false, reason, ..GdrLine::default() }));
    }
    Some(Event::NetPluginActive(name.to_string()))
}

/// A plugin's `comm with 16 ranks and 2 nodes` (aws-ofi-nccl's tuner).
fn comm_size(text: &str) -> Option<Event> {
    let i = const { Needle::new("comm with ") }.find(text)?;
    let mut s = Scan::new(&text[i + 10..]);
    let nranks = s.num()?;
    s.lit(" ranks and ")?;
    let nnodes = s.num()?;
    s.lit(" nodes")?;
    Some(Event::CommSize { nranks, nnodes })
}

/// Every form NCCL printed: per GPU and NIC, `NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx4_0 (not
/// supported by GPU)` and `... (distance 4 >= 3)` (2.3: CUDA device, HCA name, `src/transport/net_ib.cu`),
/// `NET/IB : ... for GPU 2[2] / HCA 0 (distance 3 >= 2)` and `... for GPU 2[2] / HCA 0 'mlx5_0' (no module or not
/// supported by GPU)` (2.4: cudaDev[nvmlDev], `src/transport/net.cc`, `net_ib.cc`), `NET/IB : ... for GPU 1b000 /
/// HCA 0 (distance 4 >= 3)` (2.5: bus id), `GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)`
/// (2.6-2.23: bus id, `src/graph/paths.cc`), `... for GPU 3 / HCA 1b000 (distance 4 <= 5), read 1 mode Default`
/// (2.24 to 2.28.9: rank, NIC id); and per NIC, `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)`
/// (2.5-2.17 `net_ib.cc`) and `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'` (2.18 to 2.28.9
/// `src/graph/topo.cc`: the network offers neither peer memory nor DMA-BUF).
fn gdr(msg: &str) -> Option<Event> {
    let net = msg.strip_prefix("NET/").and_then(|r| r.split([' ', ':']).next()).map(str::to_string);
    let at = const { Needle::new("GPU Direct RDMA ") }.find(msg)?;
    let mut s = Scan::new(&msg[at + 16..]);
    let mut reason = None;
    if s.eat("(") {
        reason = Some(s.until(")")?.to_string());
        s.lit(") ")?;
    }
    let enabled = match s.word()? {
        "Enabled" | "enabled" => true,
        "Disabled" | "disabled" => false,
        _ => return None,
    };
    s.lit(" for ")?;
    let mut line = GdrLine { net, enabled, reason, ..GdrLine::default() };
    let hca = if s.eat("GPU ") {
        let gpu = s.word()?;
        s.lit(" / HCA ")?;
        let hca = s.word()?;
        line.gpu = Some(gdr_gpu(gpu, hca, line.net.is_some())?);
        line.rank = match line.gpu {
            Some(GdrGpu::Rank(r)) => Some(r),
            _ => None,
        };
        hca
    } else {
        s.lit("HCA ")?;
        s.word()?
    };
    // 2.3 names the HCA (`mlx4_0`); later releases number it and may add the name in quotes.
    if hca.bytes().all(|b| b.is_ascii_hexdigit()) {
        line.hca = Some(hca.to_string());
    } else {
        line.hca_name = Some(hca.to_string());
    }
    if s.eat(" '") {
        line.hca_name = Some(s.until("'")?.to_string());
        s.lit("'")?;
    }
    if s.eat(" (") {
        let inside = s.until(")")?;
        let mut d = Scan::new(inside);
        if d.eat("distance ") {
            line.distance = Some(d.num()?);
            d.ws().word()?;
            line.level = Some(d.ws().num()?);
            line.reason = Some(inside.to_string());
        } else {
            line.reason = line.reason.or_else(|| Some(inside.to_string()));
        }
    }
    Some(Event::Gdr(line))
}

/// The GPU of a per-GPU line: `2[2]` is 2.4's cudaDev[nvmlDev]; with a `NET/..` lead a plain number is 2.3's CUDA
/// device when the HCA is a name, else 2.5's bus id; without it, 2.24's rank is a small decimal and 2.6-2.23 print
/// the bus id (`1b000`).
fn gdr_gpu(gpu: &str, hca: &str, net_lead: bool) -> Option<GdrGpu> {
    if let Some((dev, _)) = gpu.split_once('[') {
        return dev.parse().ok().map(GdrGpu::Device);
    }
    let named_hca = !hca.bytes().all(|b| b.is_ascii_hexdigit());
    let small = gpu.len() < 4 && gpu.bytes().all(|b| b.is_ascii_digit());
    Some(match (net_lead, named_hca, small) {
        (true, true, true) => GdrGpu::Device(gpu.parse().ok()?),
        (false, _, true) => GdrGpu::Rank(gpu.parse().ok()?),
        _ => GdrGpu::BusId(gpu.to_string()),
    })
}

/// `... - Abort COMPLETE` / `- Destroy COMPLETE`, else the `Init START|COMPLETE` line `lines::comm_init` reads.
fn comm_init(body: &str) -> Option<Event> {
    let tail = body.trim_end();
    for (end, abort) in [(" - Abort COMPLETE", true), (" - Destroy COMPLETE", false)] {
        if tail.ends_with(end) {
            let mut s = Scan::new(body);
            s.lit("comm ")?;
            let (comm, rank, nranks, cuda_dev) = lines::comm_member(&mut s)?;
            let bus_id = field(body, "busId").map(str::to_string);
            return Some(Event::CommEnd(CommEnd { comm: comm.to_string(), rank, nranks, cuda_dev, bus_id, abort }));
        }
    }
    lines::comm_init(body).map(Event::CommInit)
}

/// `Init timings - ...` as `lines::init_timings` reads it.
fn timings(body: &str) -> Option<Event> {
    let InitTimingsLine { rank, nranks, total, phases } = lines::init_timings(body)?;
    Some(Event::InitTimings { rank, nranks, total, phases })
}

/// `init.cc:1089 -> 2`, `group.cc:65 -> 2 [Async thread]`.
pub fn error_trace(body: &str) -> Option<Event> {
    let mut s = Scan::new(body);
    let loc = s.until(" -> ")?;
    let (file, line) = loc.rsplit_once(':')?;
    if !file.contains('.') || line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.lit(" -> ")?;
    s.num::<i32>()?;
    Some(Event::ErrorTrace)
}

fn nvls(body: &str) -> Option<Event> {
    if let Some(rest) = body.strip_prefix("NVLS comm ") {
        let mut s = Scan::new(rest);
        let comm = s.word()?.to_string();
        s.lit(" headRank ")?;
        let head_rank = s.num()?;
        s.lit(" nHeads ")?;
        let n_heads = s.num()?;
        let nvls_ranks = field(rest, "nvlsRanks").and_then(|v| v.parse().ok());
        return Some(Event::NvlsComm(NvlsComm { comm, head_rank, n_heads, nvls_ranks }));
    }
    if body.starts_with("NVLS multicast support is not available") {
        return Some(Event::Nvls(false));
    }
    Some(Event::Known)
}

/// Lines about plugins that do not start with `X/Plugin`.
fn using(body: &str) -> Option<Event> {
    if let Some(n) = body.strip_prefix("Using network ") {
        return Some(Event::UsingNetwork(n.trim().to_string()));
    }
    if let Some(n) = body.strip_prefix("Using tuner plugin: ") {
        return Some(plugin_note("tuner", Some(n.trim_matches(['\'', ' '])), true, None, body));
    }
    Some(Event::Known)
}

/// Everything the first word did not settle, by that word. `Known` lines carry nothing the model keeps; they
/// are listed so that `--strict` does not report them.
pub fn misc(word: &str, body: &str) -> Option<Event> {
    Some(match word {
        "comm" => lines::comm_info(body).map(Event::CommInfo).or_else(|| comm_init(body)).unwrap_or(Event::Known),
        w if w.starts_with("ncclComm") => comm_init(body).unwrap_or(Event::Known),
        "Init" => timings(body).unwrap_or(Event::Known),
        "Bootstrap" => bootstrap(body).unwrap_or(Event::Known),
        "Using" => using(body)?,
        "GPU" => gdr(body)?,
        "[Service" => super::failure::service_thread(body)?,
        "GDRDMA" => Event::Gdr(GdrLine {
            enabled: false,
            reason: Some("no peer-memory module (memory_peers)".into()),
            ..GdrLine::default()
        }),
        "RCCL" => rccl_version(body).map(Event::RcclVersion).or_else(|| rccl_line(body))?,
        "HIP" | "ROCm" | "ROCr" | "Librccl" | "[node_id" | "[rocprofiler-sdk-rccl][" => rccl_line(body)?,
        "ProxyCall" => proxy_call(body).unwrap_or(Event::Known),
        "Topology" => topology_note(body)?,
        "Loading" => topology_note(body).unwrap_or(Event::Known),
        "CUMEM" | "Mem" => alloc(body)?,
        "Allocated" => alloc(body).unwrap_or(Event::Known),
        "TUNER/Plugin" => plugin("tuner", &body[word.len()..]),
        "PROFILER/Plugin" => plugin("profiler", &body[word.len()..]),
        "ENV/Plugin" => plugin("env", &body[word.len()..]),
        "GIN/Plugin" => plugin("gin", &body[word.len()..]),
        "Tuner" => plugin("tuner", &body[word.len()..]),
        "Assigned" => match body.strip_prefix("Assigned NET plugin ").and_then(|r| r.strip_suffix(" to comm")) {
            Some(n) => Event::UsingNetwork(n.to_string()),
            None => Event::Known,
        },
        "Successfully" => match body.split_once("loaded external ") {
            Some((_, rest)) => {
                let (kind, name) = rest.split_once(" plugin ")?;
                let kind = if kind == "network" { "net" } else { kind };
                plugin_note(kind, Some(name), true, None, body)
            }
            None => Event::Known,
        },
        "NVLS" => nvls(body)?,
        "threadThresholds" => Event::ThreadThresholds(body[word.len()..].trim().to_string()),
        "Could" if body.starts_with("Could not find a path for pattern ") => {
            let mut s = Scan::new(&body[34..]);
            Event::SearchFallback(s.num()?)
        }
        "P2P" if body.starts_with("P2P is disabled between") => Event::P2pDisabled,
        "Disabling" if body.starts_with("Disabling LL128") => Event::Ll128Disabled,
        "User" if body.starts_with("User asked for a ") => Event::ChannelsLimited,
        "Enabled" if body.starts_with("Enabled NCCL Func/Proto/Algo Matrix") => Event::MatrixStart,
        w if w.starts_with("NET/") => net_line(w, body)?,
        "Setting" | "Launch" | "cudaDriverVersion" | "Threads" | "Comm" | "CC" | "MNNVL" | "RAS" | "DMA-BUF"
        | "Dmabuf" | "DMA_BUF" | "Check" | "Communicator" | "rank" | "Freeing" | "Search" | "latencyinter"
        | "Paths" | "PXN" | "Dump" | "Proxy" | "[Proxy" | "sendConnect" | "recvConnect" | "Received" | "New"
        | "UDS" | "Invalid" | "minCTAs" | "Found" | "Plugin" | "Hostname" | "External" | "Unloading" | "Failed"
        | "GDRCOPY" | "TOPO/NET" | "##" | "Skipping" | "P2P" | "Disabling" | "Could" | "Initialized" | "Memory"
        | "MSCCL" | "Enabled" => Event::Known,
        // After the words above: their lines need no substring search.
        // `.c`/`.h` by a pass over the word's byte pairs: `str::contains` builds a substring searcher per call.
        w if w.as_bytes().windows(2).any(|p| p[0] == b'.' && matches!(p[1], b'c' | b'h')) => {
            error_trace(body).or_else(|| alloc(&body[w.len()..]))?
        }
        w if w.starts_with("ncclProxy") || w.starts_with("ncclPoll") || w.starts_with("proxy") => Event::Known,
        // One byte search for the rare bytes the two needles search by (`C`, `,`) before either: most lines that
        // get here are no NCCL message's and hold neither.
        _ if memchr::memchr2(b'C', b',', body.as_bytes()).is_some()
            && (const { Needle::new(" connected via C2C link") }.find(body).is_some()
                || const { Needle::new(" is too low, leaving it set at ") }.find(body).is_some()) =>
        {
            Event::Known
        }
        _ => return None,
    })
}

/// NCCL 2.28.9's memory traces (`src/include/alloc.h`, `src/misc/utils.cc`, `src/misc/shmutils.cc`):
/// `FILE:LINE Cuda Alloc Size N pointer P`, `FILE:LINE Cuda Host Alloc Size N ...`, `FILE:LINE Ib Alloc Size N ...`,
/// `FILE:LINE memory stack [non-]hunk malloc(N)`, `CUMEM Host Alloc Size N ...`, `Mem Realloc old size A, new size
/// B ...` (B counted) and `Allocated N bytes of shared memory in PATH`. `body` starts at what follows `FILE:LINE`.
pub fn alloc(body: &str) -> Option<Event> {
    let body = body.trim_start();
    let size = |lead: &str, device: bool| {
        let mut s = Scan::new(body.strip_prefix(lead)?);
        Some(Event::Alloc(Alloc { device, bytes: s.num()? }))
    };
    size("Cuda Alloc Size ", true)
        .or_else(|| size("Cuda Host Alloc Size ", false))
        .or_else(|| size("Ib Alloc Size ", false))
        .or_else(|| size("CUMEM Host Alloc Size ", false))
        .or_else(|| size("memory stack hunk malloc(", false))
        .or_else(|| size("memory stack non-hunk malloc(", false))
        .or_else(|| size("Allocated ", false).filter(|_| body.contains(" bytes of shared memory in ")))
        .or_else(|| {
            let i = const { Needle::new(", new size ") }.find(body)?;
            body.starts_with("Mem Realloc old size ").then_some(())?;
            let mut s = Scan::new(&body[i + 11..]);
            Some(Event::Alloc(Alloc { device: false, bytes: s.num()? }))
        })
}

/// `ProxyCall UDS comm 0x55e100 rank 0 tpRank 1(1) reqSize 8 ...` (2.28.9 `src/proxy.cc`): the rank calling its
/// proxy, and its communicator.
fn proxy_call(body: &str) -> Option<Event> {
    let mut s = Scan::new(body.strip_prefix("ProxyCall UDS comm ")?);
    let comm = s.word()?.to_string();
    s.lit(" rank ")?;
    Some(Event::ProxyCall { comm, rank: s.num()? })
}

/// Topology detection's notes (2.28.9 `src/graph/xml.cc`): `Topology detection : could not read PATH, ignoring`,
/// `Topology detection: network path (name = N) PATH is not a PCI device (SUBSYSTEM). Attaching to first CPU`, and
/// `Loading topology file PATH` (`NCCL_TOPO_FILE`).
fn topology_note(body: &str) -> Option<Event> {
    (body.starts_with("Topology detection") || body.starts_with("Loading topology file "))
        .then(|| Event::TopologyNote(body.trim_end().to_string()))
}

/// RCCL's own lines (RCCL `src/init.cc` `showVersion`, `src/graph/topo.cc`): `RCCL version 2.6.4+hip3.5` (before
/// RCCL 2.18), `HIP version  : 6.2.41133-dd7f95766`, `ROCm version : 6.2.0.0-...`, `Librccl path : ...`,
/// `ROCr version 1.14`, `[node_id = 4; gpu_id = 9962; ...]`.
fn rccl_line(body: &str) -> Option<Event> {
    if let Some(v) = body.strip_prefix("RCCL version ").filter(|v| v.starts_with(|c: char| c.is_ascii_digit())) {
        return Some(Event::RcclVersion(v.split_ascii_whitespace().next()?.to_string()));
    }
    let rccl =
        ["HIP version", "ROCm version", "ROCr version", "Librccl path", "[node_id = ", "[rocprofiler-sdk-rccl]["]
            .iter()
            .any(|p| body.starts_with(p));
    rccl.then_some(Event::RcclLine)
}

/// `Bootstrap : Using [0]br0:10.10.0.1<0>`, `Bootstrap: Using eth0:10.0.0.1<0>`.
fn bootstrap(body: &str) -> Option<Event> {
    let rest = body.strip_prefix("Bootstrap")?.trim_start_matches([' ', ':']);
    let mut s = Scan::new(rest.strip_prefix("Using")?);
    s.ws();
    if s.eat("[") {
        s.num::<u32>()?;
        s.lit("]")?;
    }
    let name = s.until(":")?.to_string();
    s.lit(":")?;
    let address = s.take_while(|b| !matches!(b, b'<' | b' '))?.to_string();
    Some(Event::Bootstrap { name, address })
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
        assert_eq!(parse("Assigned NET plugin IB to comm"), Some(Event::UsingNetwork("IB".into())));
        assert_eq!(
            parse("NET/OFI Selected provider is efa, fabric is efa (found 4 nics)"),
            Some(Event::NetPluginActive("OFI".into()))
        );
        assert_eq!(
            parse("NET/OFI Tuner init: comm with 16 ranks and 2 nodes."),
            Some(Event::CommSize { nranks: 16, nnodes: 2 })
        );
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
    fn plugins_with_kinds_names_and_versions() {
        let note = |m| match parse(m) {
            Some(Event::Plugin(p)) => (p.kind, p.name, p.loaded, p.version),
            e => panic!("{m}: {e:?}"),
        };
        assert_eq!(
            note("NET/Plugin: Loaded net plugin IBext (v6)"),
            ("net".into(), Some("IBext".into()), true, Some(6))
        );
        assert_eq!(note("NET/Plugin: Loaded net plugin AWS Libfabric (v9)").1.as_deref(), Some("AWS Libfabric"));
        assert_eq!(
            note("NET/Plugin: Loaded coll plugin SHARP (v6)"),
            ("collnet".into(), Some("SHARP".into()), true, Some(6))
        );
        assert_eq!(note("NET/Plugin: Loaded collnet plugin SHARP (v10)").0, "collnet");
        assert_eq!(
            note("TUNER/Plugin: Using nccl_ofi_tuner (v3)"),
            ("tuner".into(), Some("nccl_ofi_tuner".into()), true, Some(3))
        );
        assert!(note("TUNER/Plugin: Using tuner plugin nccl_ofi_tuner").2);
        assert!(!note("TUNER/Plugin: Using internal tuner plugin.").2);
        assert_eq!(note("Using tuner plugin: 'nvidia-tuner'").1.as_deref(), Some("nvidia-tuner"));
        assert_eq!(
            note("PROFILER/Plugin: Loaded inspector (v4)"),
            ("profiler".into(), Some("inspector".into()), true, Some(4))
        );
        let (k, _, loaded, _) = note("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation");
        assert!(!loaded && k == "net");
        assert_eq!(note("NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.").0, "collnet");
        assert_eq!(
            note("Successfully loaded external network plugin /opt/x/libnccl-net.so").1.as_deref(),
            Some("/opt/x/libnccl-net.so")
        );
    }

    #[test]
    fn gdr_lines_and_the_reasons_they_give() {
        let gdr = |m| match parse(m) {
            Some(Event::Gdr(g)) => g,
            e => panic!("{m}: {e:?}"),
        };
        // 2.4: cudaDev[nvmlDev], a device and not a rank.
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)");
        assert_eq!((g.enabled, g.rank, g.distance, g.level), (false, None, Some(3), Some(2)));
        assert_eq!(g.gpu, Some(GdrGpu::Device(2)));
        let g = gdr("GPU Direct RDMA Enabled for GPU 1 / HCA 3 (distance 4 <= 5), read 1 mode Default");
        assert!(g.enabled && g.hca.as_deref() == Some("3") && g.rank == Some(1));
        assert_eq!(g.gpu, Some(GdrGpu::Rank(1)));
        let g = gdr("GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)");
        assert_eq!((g.rank, g.distance, g.gpu), (None, Some(5), Some(GdrGpu::BusId("1b000".into()))));
        // 2.3: the CUDA device and the HCA's name, with the reason in words or the distance.
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx4_0 (not supported by GPU)");
        assert_eq!((g.gpu, g.rank), (Some(GdrGpu::Device(0)), None));
        assert_eq!((g.hca_name.as_deref(), g.reason.as_deref()), (Some("mlx4_0"), Some("not supported by GPU")));
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for GPU 1 / HCA mlx5_0 (distance 6 >= 4)");
        assert_eq!((g.distance, g.level, g.hca_name.as_deref()), (Some(6), Some(4), Some("mlx5_0")));
        // 2.4's per-HCA check names the device and the HCA.
        let g =
            gdr("NET/IB : GPU Direct RDMA Disabled for GPU 3[3] / HCA 1 'mlx5_1' (no module or not supported by GPU)");
        assert_eq!(
            (g.gpu, g.hca.as_deref(), g.hca_name.as_deref()),
            (Some(GdrGpu::Device(3)), Some("1"), Some("mlx5_1"))
        );
        assert_eq!(g.reason.as_deref(), Some("no module or not supported by GPU"));
        // 2.5: the bus id behind the network's name.
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 4 >= 3)");
        assert_eq!(g.gpu, Some(GdrGpu::BusId("1b000".into())));
        // 2.18 and later: per HCA, no reason printed.
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'");
        assert_eq!((g.enabled, g.hca.as_deref(), g.reason, g.gpu), (false, Some("1"), None, None));
        let g = gdr("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)");
        assert_eq!((g.enabled, g.reason.as_deref(), g.hca_name.as_deref()), (false, Some("no module"), Some("mlx5_0")));
        let g = gdr("NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0'");
        assert_eq!((g.enabled, g.reason.as_deref()), (true, Some("nvidia-peermem")));
        let g = gdr("NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR");
        assert_eq!((g.enabled, g.net.as_deref()), (false, Some("OFI")));
        assert!(g.reason.unwrap().ends_with("disabling GDR"));
        assert!(!gdr("NET/gIB : Dev 0 mlx5_0 speed 400000 GDR 0").enabled);
        assert_eq!(parse("NET/gIB : Dev 0 mlx5_0 speed 400000 GDR 01"), Some(Event::NetPluginActive("gIB".into())));
        let g = gdr("GDRDMA not enabled. Could not find memory_peers directory or peer_memory symbol");
        assert!(!g.enabled && g.reason.unwrap().contains("peer-memory"));
    }

    #[test]
    fn comm_lines_counts_and_timings() {
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
        let Some(Event::CommInit(c)) = parse("ncclCommSplit comm 0x28 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0x10 color 0 key 0- Init START") else {
            panic!()
        };
        assert_eq!((c.parent.as_deref(), c.comm_id), (Some("0x10"), None));
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
        let Some(Event::NvlsComm(n)) = parse(
            "NVLS comm 0x6a7b0000 headRank 2 nHeads 8 nvlsRanks 8 buffSize 1048576 nvlsPerRankSize 4 nvlsTotalSize 32",
        ) else {
            panic!()
        };
        assert_eq!((n.head_rank, n.n_heads, n.nvls_ranks), (2, 8, Some(8)));
    }

    #[test]
    fn env_traces_and_known_lines() {
        assert_eq!(
            parse("NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1"),
            Some(Event::Env { name: "NCCL_IB_HCA".into(), value: "mlx5_2:1,mlx5_0:1".into() })
        );
        assert_eq!(
            parse("NCCL_MAX_NCHANNELS set by environment to 1."),
            Some(Event::Env { name: "NCCL_MAX_NCHANNELS".into(), value: "1".into() })
        );
        assert_eq!(parse("include/shm.h:41 -> 2"), Some(Event::ErrorTrace));
        assert_eq!(parse("group.cc:65 -> 2 [Async thread]"), Some(Event::ErrorTrace));
        assert_eq!(
            parse("Could not find a path for pattern 4, falling back to simple order"),
            Some(Event::SearchFallback(4))
        );
        assert_eq!(
            parse("Connected all rings, use ring PXN 0 GDR 1"),
            Some(Event::ConnectedRings { pxn: Some(false), gdr: Some(true) })
        );
        assert_eq!(parse("RCCL version : 2.20.5-HEAD:7a83a05"), Some(Event::RcclVersion("2.20.5".into())));
        assert_eq!(
            parse("ProxyCall UDS comm 0x1 rank 3 tpRank 1(1) reqSize 8"),
            Some(Event::ProxyCall { comm: "0x1".into(), rank: 3 })
        );
        // Known by a phrase wherever they are, whatever their first word; a line with neither is not understood.
        for (line, want) in [
            ("HCA 1b000 connected via C2C link", Some(Event::Known)),
            ("maxCTAs 0 is too low, leaving it set at 16", Some(Event::Known)),
            ("# nThread 1 nGpus 1 minBytes 8", None),
            ("Compiled with CUDA, linked", None),
        ] {
            assert_eq!(parse(line), want, "{line}");
        }
        for known in [
            "[Proxy Service] Device 0 CPU core 12",
            "P2P Chunksize set to 131072",
            "Setting affinity for GPU 0 to ffff",
        ] {
            assert_eq!(parse(known), Some(Event::Known), "{known}");
        }
    }
}
