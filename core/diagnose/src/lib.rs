//! Diagnosis: one table of named rules, each a function from the model of a job (a [`Snapshot`]) and the
//! [`Evidence`] behind it to findings, so that the same rules run on a log, a live job or a modelled machine.
//! To add a rule, write its function and add a row to [`RULES`] (and a test). Rules over the whole job (every
//! rank's summary, [`JobView`]) are the rows of [`JOB_RULES`], written in [`job`].

pub mod job;

use collscope_model::{
    evidence, Cite, Collective, Evidence, Finding, GdrCheck, JobView, LineRef, LogFacts, Severity, Snapshot, Source,
    Transport, Warning,
};
use std::collections::{BTreeMap, BTreeSet};

pub struct Rule {
    /// The finding code (or code prefix) the rule produces.
    pub code: &'static str,
    pub check: fn(&Snapshot, &Evidence) -> Vec<Finding>,
}

pub const RULES: &[Rule] = &[
    Rule { code: "no_gdrdma", check: no_gdrdma },
    Rule { code: "socket_not_ib", check: socket_not_ib },
    Rule { code: "bootstrap_interface", check: bootstrap_interface },
    Rule { code: "p2p_refused_shm", check: p2p_refused_shm },
    Rule { code: "ll128_disabled", check: ll128_disabled },
    Rule { code: "channels_env", check: channels_env },
    Rule { code: "decision_not_table_min", check: decision_not_table_min },
    Rule { code: "search_fallback", check: search_fallback },
    Rule { code: "version_mismatch", check: version_mismatch },
    Rule { code: "init_hang", check: init_hang },
    Rule { code: "ib_error", check: ib_errors },
    Rule { code: "shm_exhausted", check: shm_exhausted },
    Rule { code: "socket_error", check: socket_errors },
    Rule { code: "cuda_oom", check: cuda_oom },
    Rule { code: "peer_died", check: peer_died },
    Rule { code: "watchdog_timeout", check: watchdog_timeout },
    Rule { code: "same_machine", check: same_machine },
    Rule { code: "net_in_one_process", check: net_in_one_process },
    Rule { code: "nccl_error", check: nccl_errors },
];

pub struct JobRule {
    pub code: &'static str,
    pub check: fn(&JobView) -> Vec<Finding>,
}

pub const JOB_RULES: &[JobRule] = &[
    JobRule { code: "rank_not_arrived", check: job::not_arrived },
    JobRule { code: "collective_mismatch", check: job::mismatch },
    JobRule { code: "straggler", check: job::straggler },
    JobRule { code: "rank_unreachable", check: job::unreachable },
    JobRule { code: "collective_stall", check: job::stalls },
];

/// Runs every job-level rule; findings come out most severe first.
pub fn diagnose_job(view: &JobView) -> Vec<Finding> {
    let mut out: Vec<Finding> = JOB_RULES.iter().flat_map(|r| (r.check)(view)).collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// Runs every rule; findings come out most severe first.
pub fn diagnose(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let mut out: Vec<Finding> = RULES.iter().flat_map(|r| (r.check)(snap, evidence)).collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// Ranks in `0..n` not in `known`, as text: at most 32 listed, and none for implausible job sizes (a garbled
/// nranks must not cost memory).
fn ranks_missing(n: u32, known: &BTreeSet<u32>) -> Vec<String> {
    const MAX_JOB: u32 = 1 << 20;
    if n > MAX_JOB {
        return Vec::new();
    }
    let missing: Vec<u32> = (0..n).filter(|r| !known.contains(r)).collect();
    let mut out: Vec<String> = missing.iter().take(32).map(u32::to_string).collect();
    if missing.len() > 32 {
        out.push(format!("(+{} more)", missing.len() - 32));
    }
    out
}

fn finding(code: &str, severity: Severity, title: &str, detail: String, evidence: Vec<LineRef>, fix: &str) -> Finding {
    Finding {
        code: code.into(),
        severity,
        rank: None,
        comm: None,
        title: title.into(),
        detail,
        evidence,
        fix: fix.into(),
    }
}

fn cite(evidence: &Evidence, cites: &[Cite]) -> Vec<LineRef> {
    cites.iter().flat_map(|c| evidence.get(c).iter().cloned()).collect()
}

fn env<'a>(snap: &'a Snapshot, name: &str) -> Option<&'a str> {
    snap.env.iter().rev().find(|e| e.name == name).map(|e| e.value.as_str())
}

/// What only a log carries; nothing for a live job or a modelled machine.
fn log(snap: &Snapshot) -> &[LogFacts] {
    snap.log.as_slice()
}

/// More than one node: printed or concluded, or seen (two hosts printing are two nodes).
fn multi_node(snap: &Snapshot, evidence: &Evidence) -> bool {
    snap.nnodes.is_some_and(|n| n > 1) || snap.hosts.len() > 1 || evidence.multi_node
}

fn warnings<'a>(snap: &'a Snapshot, class: &'a str) -> impl Iterator<Item = &'a Warning> + 'a {
    snap.warnings.iter().filter(move |w| w.class == class)
}

fn warning_refs<'a>(ws: impl Iterator<Item = &'a Warning>) -> Vec<LineRef> {
    ws.filter_map(|w| w.line.clone()).take(5).collect()
}

/// The files a log was read from, as a command line's arguments; `None` for a live job or a modelled machine.
fn log_args(snap: &Snapshot) -> Option<String> {
    let Source::Log { files } = &snap.source else { return None };
    let plain = |f: &str| !f.is_empty() && f.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./,:=+@%".contains(&b));
    let words: Vec<String> =
        files.iter().map(|f| if plain(f) { f.clone() } else { format!("'{}'", f.replace('\'', r"'\''")) }).collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// The checks that disabled GPUDirect RDMA, each (host, GPU, NIC) once. Without connection lines to show it
/// off (`connections_off`), a per-GPU check counts only if NCCL enabled no other NIC for that GPU: it checks
/// every NIC, and uses the near one.
fn gdr_off(snap: &Snapshot, connections_off: bool) -> Vec<&GdrCheck> {
    let checks: Vec<&GdrCheck> = log(snap).iter().flat_map(|l| &l.gdr_checks).collect();
    let on = |g: &GdrCheck| {
        !connections_off && checks.iter().any(|e| e.enabled && e.host == g.host && e.gpu == g.gpu && e.gpu.is_some())
    };
    let mut seen = BTreeSet::new();
    checks
        .iter()
        .copied()
        .filter(|g| !g.enabled && !on(g))
        .filter(|g| seen.insert((g.host.clone(), g.gpu.clone(), g.hca.clone(), g.hca_name.clone(), g.net.clone())))
        .collect()
}

const REPORTED_FIX: &str = "Follow what that line reports: the network plugin's or driver's requirements for \
     GPUDirect RDMA (its documentation names the module, library or setting it needs).";

/// Why one check disabled GPUDirect RDMA, with its line quoted: (code, why, fix).
fn gdr_reason(g: &GdrCheck, level: Option<&str>) -> (&'static str, String, &'static str) {
    let reason = g.reason.as_deref().unwrap_or("");
    let quote = g.line.as_ref().map_or(String::new(), |l| format!(": `{}`", l.text.trim()));
    if let (Some(d), Some(l)) = (g.distance, g.level) {
        return (
            "no_gdrdma_distance",
            format!(
                "NCCL judged the GPU too far from the NIC, distance {d} against the GDR level {l}{}{quote}",
                level.map_or(String::new(), |l| format!(" (NCCL_NET_GDR_LEVEL={l})"))
            ),
            "Put each rank on a GPU behind the same PCIe switch as its NIC, or raise NCCL_NET_GDR_LEVEL (e.g. PHB or \
             SYS) if the platform's PCIe peer-to-peer path is known to perform.",
        );
    }
    let module = reason.contains("module");
    if reason.contains("not supported by GPU") && !module {
        return (
            "no_gdrdma_gpu",
            format!("the GPU does not support GPUDirect RDMA{quote}"),
            "GPUDirect RDMA needs a data-centre or professional GPU (Tesla, Quadro/RTX A-series, A100, H100...; \
             GeForce cards do not offer it) and a driver that exposes it; with this GPU, NET traffic stages through \
             host memory.",
        );
    }
    // 2.4 could not tell the two apart; 2.18+ per-NIC lines without a reason mean NET/IB found neither.
    if module || (g.gpu.is_none() && g.net.as_deref() == Some("IB")) {
        let either = if reason.contains("not supported by GPU") { " (or a GPU that does not support it)" } else { "" };
        return (
            "no_gdrdma_no_module",
            format!(
                "the NIC cannot read GPU memory: no peer-memory module (nvidia-peermem / nv_peer_mem) and no DMA-BUF \
                 support{either}{quote}"
            ),
            "Load nvidia-peermem (`modprobe nvidia-peermem`; nv_peer_mem on old MLNX_OFED) or use a kernel and driver \
             with DMA-BUF (Linux 5.12+, open GPU kernel modules, NCCL 2.13+), then check for `GPU Direct RDMA \
             Enabled` in the log.",
        );
    }
    (
        "no_gdrdma_reported",
        format!("the {} says why{quote}", g.net.as_deref().map_or("log".to_string(), |n| format!("NET/{n} network"))),
        REPORTED_FIX,
    )
}

fn no_gdrdma(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let net: Vec<_> = snap
        .connections
        .iter()
        .filter(|c| c.transport == Transport::Net && c.net.as_deref() != Some("Socket"))
        .collect();
    let without = net.iter().filter(|c| c.gdrdma == Some(false)).count();
    let off = gdr_off(snap, without > 0);
    // Without connection lines, NCCL's own checks decide; on a job known to be one node they do not matter.
    let single = snap.nnodes == Some(1) && !multi_node(snap, evidence);
    if without == 0 && (!net.is_empty() || off.is_empty() || single) {
        return Vec::new();
    }
    let share = if net.is_empty() {
        "NCCL's checks leave GPUs without GPUDirect RDMA (the log has no NET connection lines to show which \
         connections it affects)"
            .to_string()
    } else {
        format!("{without} of {} NET connections stage through host memory (no /GDRDMA)", net.len())
    };
    let mut ev = cite(evidence, &[Cite::NetNoGdr]);
    let level = env(snap, "NCCL_NET_GDR_LEVEL");
    let read = env(snap, "NCCL_NET_GDR_READ");
    // Any line that said why, from a log or from a live job.
    let said = evidence.get(&Cite::GdrOff).first();
    // The most basic cause first: a GPU or NIC that cannot do it at all, then distance, then other words.
    let rank = |g: &&&GdrCheck| match gdr_reason(g, None).0 {
        "no_gdrdma_gpu" => 0,
        "no_gdrdma_no_module" => 1,
        "no_gdrdma_distance" => 2,
        _ => 3,
    };
    let (code, why, fix) = if let Some(g) = off.iter().min_by_key(rank) {
        ev.extend(off.iter().filter_map(|g| g.line.clone()).take(Evidence::MAX_PER_KIND));
        if g.distance.is_some() {
            ev.extend(cite(evidence, &[Cite::Env("NCCL_NET_GDR_LEVEL".into())]));
        }
        gdr_reason(g, level)
    } else if let Some(l) = said {
        ev.push(l.clone());
        ("no_gdrdma_reported", format!("the log says why: `{}`", l.text.trim()), REPORTED_FIX)
    } else if level.is_some() || read.is_some() || env(snap, "NCCL_GDR_DISABLE").is_some() {
        ev.extend(cite(evidence, &[Cite::Env("NCCL_NET_GDR_LEVEL".into()), Cite::Env("NCCL_NET_GDR_READ".into())]));
        let mut set: Vec<String> = level.map(|l| format!("NCCL_NET_GDR_LEVEL={l}")).into_iter().collect();
        if let Some(r) = read {
            // NCCL 2.28.9 `src/graph/paths.cc` (ncclTopoCheckGdr): 0 turns GPUDirect RDMA off for sends.
            set.push(format!("NCCL_NET_GDR_READ={r}{}", if r.trim() == "0" { " (no GDR for sends)" } else { "" }));
        }
        (
            "no_gdrdma_env",
            format!(
                "GPUDirect RDMA is restricted by the environment{}",
                if set.is_empty() { String::new() } else { format!(": {}", set.join(", ")) }
            ),
            "Unset the NCCL_NET_GDR_* variables.",
        )
    } else {
        ev.extend(cite(evidence, &[Cite::RingNoGdr]));
        let subsys = env(snap, "NCCL_DEBUG_SUBSYS").unwrap_or("");
        let shows = ["NET", "ALL", "GRAPH"].iter().any(|s| subsys.to_ascii_uppercase().contains(s));
        (
            "no_gdrdma",
            if shows {
                "NCCL printed no GPU Direct RDMA line that says why".to_string()
            } else {
                "the log does not say why (run with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH to see the GPU Direct RDMA lines)"
                    .to_string()
            },
            "Check that nvidia-peermem is loaded or DMA-BUF is available, and that GPU and NIC share a PCIe switch.",
        )
    };
    let mut detail = format!("{share}: {why}.");
    if !off.is_empty() {
        let places: Vec<String> = off
            .iter()
            .take(8)
            .map(|g| format!("{} ({})", g.place(), g.reason.as_deref().unwrap_or("disabled, no reason printed")))
            .collect();
        let more = off.len().saturating_sub(places.len());
        detail.push_str(&format!(
            " Without GPUDirect RDMA: {}{}.",
            places.join("; "),
            if more > 0 { format!(" (+{more} more)") } else { String::new() }
        ));
    }
    // What it costs, per call size: the what-if of `collscope log explain`.
    let what_if = match code {
        "no_gdrdma_distance" | "no_gdrdma_env" => "--set NCCL_NET_GDR_LEVEL=SYS",
        _ => "--gdr on",
    };
    let fix = match log_args(snap) {
        Some(files) => {
            format!("{fix} What it costs: `collscope log explain {files} {what_if}` predicts each call with it.")
        }
        None => fix.to_string(),
    };
    ev.dedup();
    vec![finding(code, Severity::Warning, "No GPUDirect RDMA on NET connections", detail, ev, &fix)]
}

/// A job known to run on one node: printed (`nNodes 1`), or every rank's communicator on one host with all
/// its ranks local.
fn single_node(snap: &Snapshot, evidence: &Evidence) -> bool {
    if multi_node(snap, evidence) {
        return false;
    }
    // A communicator of the whole job (not a node-local split) whose ranks are all local.
    snap.nnodes == Some(1)
        || snap
            .communicators
            .iter()
            .any(|c| c.local_ranks.is_some() && c.local_ranks == c.nranks && c.nranks == snap.nranks)
}

/// `Failed to open libibverbs.so[.1]`: a WARN before 2.12 (`src/misc/ibvwrap.cc`), INFO since; harmless where
/// the job does not use IB.
fn no_libibverbs(w: &Warning) -> bool {
    w.text.contains("Failed to open libibverbs")
}

fn socket_not_ib(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let socket_conns = snap.connections.iter().any(|c| c.net.as_deref() == Some("Socket"));
    let socket_net = snap.network.as_deref() == Some("Socket");
    // A single node that never connected through the network, or ranks that are one machine (`same_machine`
    // says what to do there): installing IB is not the answer.
    let used = socket_conns || (socket_net && !single_node(snap, evidence));
    if !used || one_machine(snap).is_some() {
        return Vec::new();
    }
    let mut why = Vec::new();
    if !evidence.get(&Cite::NetNoDevice).is_empty() {
        why.push("NET/IB found no device".to_string());
    }
    if env(snap, "NCCL_IB_DISABLE").is_some_and(|v| v != "0") {
        why.push("NCCL_IB_DISABLE is set".to_string());
    }
    if !evidence.get(&Cite::PluginMissing).is_empty() {
        why.push("no network plugin was found".to_string());
    }
    if snap.warnings.iter().any(no_libibverbs) {
        why.push("libibverbs.so could not be loaded (no RDMA user-space libraries here)".to_string());
    }
    if why.is_empty() {
        why.push("the log does not say why IB was not used".to_string());
    }
    let multi = multi_node(snap, evidence) || socket_conns;
    let severity = if multi { Severity::Warning } else { Severity::Info };
    let ev =
        cite(evidence, &[Cite::NetSocket, Cite::NetNoDevice, Cite::Env("NCCL_IB_DISABLE".into()), Cite::PluginMissing]);
    vec![finding(
        "socket_not_ib",
        severity,
        "TCP sockets carry inter-node traffic",
        format!(
            "The job uses NET/Socket{}: {}. Sockets stage every byte through host memory and the CPU: GPUDirect RDMA \
             (the NIC reading and writing GPU memory) needs an RDMA network, InfiniBand or RoCE, through NET/IB or a \
             network plugin.",
            if multi { " between nodes" } else { " (single node: only matters across nodes)" },
            why.join("; ")
        ),
        ev,
        "If the nodes have InfiniBand/RoCE: check `ibv_devinfo`, pass /dev/infiniband into containers, unset \
         NCCL_IB_DISABLE, set NCCL_IB_HCA to the right HCAs; on clouds install the provider's plugin (aws-ofi-nccl, \
         gIB).",
    )]
}

/// Ranks that are one machine split by containers: several hosts, every rank alone on its host (`localRanks
/// 1`), and an address two hosts share (host networking) or, inferred, distinct GPUs (one machine's GPUs dealt
/// out to pods; separate one-GPU nodes mostly use the same first GPU). The reason, in words.
fn one_machine(snap: &Snapshot) -> Option<String> {
    let comms: Vec<_> = snap.communicators.iter().filter(|c| c.host.is_some()).collect();
    let hosts: BTreeSet<&str> = comms.iter().filter_map(|c| c.host.as_deref()).collect();
    if hosts.len() < 2 || comms.iter().any(|c| c.local_ranks.is_none_or(|l| l != 1)) {
        return None;
    }
    // Loopback and a machine-local bridge (docker0 gives 172.17.0.2 to the first container of every machine)
    // repeat across machines; another shared address is one machine's (host networking).
    let mut by_address: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for b in snap.bootstrap.iter().filter(|b| !suspicious_interface(&b.name) && !b.address.starts_with("127.")) {
        if let Some(h) = b.host.as_deref() {
            by_address.entry(b.address.as_str()).or_default().insert(h);
        }
    }
    if let Some((addr, hs)) = by_address.iter().find(|(_, hs)| hs.len() > 1) {
        let hs: Vec<&str> = hs.iter().copied().collect();
        return Some(format!("hosts {} bootstrap from the same address {addr}", hs.join(", ")));
    }
    // Each host's GPU once (a host prints its comm line for every communicator).
    let gpus: BTreeMap<&str, &str> =
        comms.iter().filter_map(|c| Some((c.host.as_deref()?, c.bus_id.as_deref()?))).collect();
    let distinct: BTreeSet<&str> = gpus.values().copied().collect();
    if gpus.len() == hosts.len() && distinct.len() == gpus.len() {
        let list: Vec<String> = gpus.iter().map(|(h, b)| format!("{h}: busId {b}")).collect();
        return Some(format!(
            "each host uses a different GPU ({}), as pods given one GPU each of one machine do (inferred)",
            list.join(", ")
        ));
    }
    None
}

/// NCCL groups ranks into nodes by host hash: the host name and boot id, or NCCL_HOSTID (NCCL 2.28.9
/// `src/misc/utils.cc`, getHostHash); P2P and SHM also need the peers' processes and memory in sight.
fn same_machine(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let Some(why) = one_machine(snap) else { return Vec::new() };
    let n = snap.communicators.iter().filter_map(|c| c.host.as_deref()).collect::<BTreeSet<_>>().len();
    let net = snap.connections.iter().any(|c| c.transport == Transport::Net);
    vec![finding(
        "same_machine",
        Severity::Warning,
        "Ranks on one machine that NCCL takes for separate nodes",
        format!(
            "Each rank is alone on its host (localRanks 1 on {n} hosts) and {why}: these look like containers or \
             pods on one machine. NCCL tells machines apart by a hash of the host name (or NCCL_HOSTID), so it {} \
             the network instead of NVLink, P2P or shared memory.",
            if net { "connects them through" } else { "will connect them through" }
        ),
        cite(evidence, &[Cite::Bootstrap, Cite::NetSocket, Cite::NetNoGdr]),
        "Same machine: run the ranks in one container or pod, or share the host IPC namespace (docker --ipc=host, \
         Kubernetes hostIPC: true) and set NCCL_HOSTID to the same value in each, so NCCL sees one node and uses \
         P2P/SHM; installing InfiniBand does not help here.",
    )]
}

/// NET connections whose two ends are GPUs of one process (same host and pid): NCCL found no P2P or SHM path
/// between them.
fn net_in_one_process(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    // Each rank's process, where every communicator that names the rank agrees (communicators of different
    // sizes number ranks differently).
    let mut procs: BTreeMap<u32, BTreeSet<(&str, u32)>> = BTreeMap::new();
    for c in &snap.communicators {
        if let (Some(r), Some(h), Some(p)) = (c.rank, c.host.as_deref(), c.pid) {
            procs.entry(r).or_default().insert((h, p));
        }
    }
    let proc_of = |r: u32| procs.get(&r).filter(|s| s.len() == 1).and_then(|s| s.first().copied());
    let mut pairs = BTreeSet::new();
    for c in snap.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred && c.src != c.dst) {
        if let (Some(a), Some(b)) = (proc_of(c.src), proc_of(c.dst)) {
            if a == b {
                pairs.insert((c.src.min(c.dst), c.src.max(c.dst), a.0, a.1));
            }
        }
    }
    if pairs.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> =
        pairs.iter().take(8).map(|(a, b, h, p)| format!("ranks {a} and {b} (host {h}, pid {p})")).collect();
    vec![finding(
        "net_in_one_process",
        Severity::Warning,
        "GPUs of one process talk through the network",
        format!(
            "{} pairs of ranks in one process connect through NET: {}. NCCL found neither P2P nor shared memory \
             between GPUs it drives itself.",
            pairs.len(),
            list.join("; ")
        ),
        cite(evidence, &[Cite::NetNoGdr, Cite::NetSocket, Cite::P2pDisabled, Cite::Env("NCCL_P2P_DISABLE".into())]),
        "Check NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_P2P_LEVEL, that the GPUs can reach each other \
         (`nvidia-smi topo -m`, ACS/IOMMU off on bare metal), and that the process sees all its GPUs \
         (CUDA_VISIBLE_DEVICES).",
    )]
}

fn suspicious_interface(name: &str) -> bool {
    name == "lo"
        || name.starts_with("docker")
        || name.starts_with("virbr")
        || name.starts_with("veth")
        || name.starts_with("br-")
        || name.starts_with("cni")
}

fn bootstrap_interface(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let bad: BTreeSet<String> = snap
        .bootstrap
        .iter()
        .filter(|b| suspicious_interface(&b.name) || b.address.starts_with("127."))
        .map(|b| format!("{}:{}", b.name, b.address))
        .collect();
    if bad.is_empty() {
        return Vec::new();
    }
    let multi = multi_node(snap, evidence);
    vec![finding(
        "bootstrap_interface",
        if multi { Severity::Error } else { Severity::Info },
        "Bootstrap on a loopback or virtual interface",
        format!(
            "NCCL bootstraps over {}, an interface other hosts usually cannot reach{}.",
            bad.into_iter().collect::<Vec<_>>().join(", "),
            if multi { "" } else { " (harmless on a single node)" }
        ),
        cite(evidence, &[Cite::Bootstrap]),
        "Set NCCL_SOCKET_IFNAME to the interface that routes between the nodes (e.g. NCCL_SOCKET_IFNAME=eth0 or \
         =^docker,lo to exclude).",
    )]
}

fn p2p_refused_shm(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    // Each SHM connection once: a live rank also lists the receiving ends it holds (NCCL prints only the sender).
    let shm = snap
        .connections
        .iter()
        .filter(|c| c.transport == Transport::Shm && c.direction != collscope_model::Direction::Recv)
        .count();
    if shm == 0 && evidence.get(&Cite::P2pDisabled).is_empty() {
        return Vec::new();
    }
    let cause = if env(snap, "NCCL_P2P_DISABLE").is_some_and(|v| v != "0") {
        "NCCL_P2P_DISABLE is set"
    } else if env(snap, "NCCL_P2P_LEVEL").is_some() {
        "NCCL_P2P_LEVEL excludes these GPU pairs"
    } else if !evidence.get(&Cite::P2pDisabled).is_empty() {
        "the driver reports P2P disabled between these GPUs (IOMMU/ACS, or a virtual machine)"
    } else {
        "P2P is not possible or not allowed between these GPUs (across CPU sockets, ACS/IOMMU, or containers that \
         hide the peers)"
    };
    vec![finding(
        "p2p_refused_shm",
        Severity::Warning,
        "GPUs on one node talk through host shared memory",
        format!("{shm} connections use SHM instead of P2P: {cause}."),
        cite(
            evidence,
            &[Cite::Shm, Cite::P2pDisabled, Cite::Env("NCCL_P2P_DISABLE".into()), Cite::Env("NCCL_P2P_LEVEL".into())],
        ),
        "Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL; disable PCIe ACS on bare metal; in containers run all ranks of a \
         node in one container or share the IPC namespace (--ipc=host).",
    )]
}

fn ll128_disabled(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let explicit = !evidence.get(&Cite::Ll128Disabled).is_empty();
    let table_has_others = snap.tuning.values().flat_map(|a| a.values()).any(|p| !p.is_empty());
    let table_has_ll128 =
        snap.tuning.values().flat_map(|a| a.values()).any(|p| p.contains_key(&collscope_model::Protocol::Ll128));
    let by_env = env(snap, "NCCL_PROTO").is_some();
    let implied_by_table = table_has_others && !table_has_ll128 && !by_env;
    if !explicit && !implied_by_table {
        return Vec::new();
    }
    vec![finding(
        "ll128_disabled",
        Severity::Info,
        "LL128 is disabled",
        "NCCL turned LL128 off for this job: it only runs LL128 where every path is NVLink or a path type it \
         trusts (PxN over PXB/C2C and some PCIe platforms are excluded), so mid-size messages use LL or Simple."
            .into(),
        cite(evidence, &[Cite::Ll128Disabled, Cite::Table]),
        "Nothing to fix unless mid-size performance matters; NCCL_PROTO=LL128 forces it only where safe hardware is \
         known (do not force it on unsupported platforms: data corruption).",
    )]
}

fn channels_env(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    const VARS: &[&str] =
        &["NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NCHANNELS_PER_NET_PEER"];
    let set: Vec<String> = VARS.iter().filter_map(|v| env(snap, v).map(|x| format!("{v}={x}"))).collect();
    if set.is_empty() && evidence.get(&Cite::ChannelsLimited).is_empty() {
        return Vec::new();
    }
    let capped_low =
        ["NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"].iter().any(|v| env(snap, v).is_some_and(|x| x.trim() == "1"));
    let mut ev: Vec<LineRef> =
        VARS.iter().flat_map(|v| evidence.get(&Cite::Env((*v).into())).iter().cloned()).collect();
    ev.extend(cite(evidence, &[Cite::ChannelsLimited]));
    vec![finding(
        "channels_env",
        if capped_low { Severity::Warning } else { Severity::Info },
        "Channel count set by the environment",
        format!(
            "The environment overrides NCCL's channel choice ({}){}; the job has {} collective channels.",
            set.join(", "),
            if capped_low { ", so one SM moves all the data and bandwidth is capped" } else { "" },
            snap.channels.coll.map_or("an unknown number of".to_string(), |c| c.to_string())
        ),
        ev,
        "Remove the channel variables unless a measurement shows they help; NCCL sizes channels to the topology.",
    )]
}

/// NCCL's cost model: latency plus bytes over bandwidth (GB/s is bytes per ns, so 1e3 bytes per us).
fn model_time(lat_us: f64, bw_gbps: f64, bytes: u64) -> f64 {
    lat_us + bytes as f64 / (bw_gbps * 1e3)
}

fn decision_not_table_min(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let forced: Vec<&str> = ["NCCL_ALGO", "NCCL_PROTO"].into_iter().filter(|v| env(snap, v).is_some()).collect();
    let tuner = log(snap).iter().flat_map(|l| &l.plugins).any(|p| p.kind == "tuner" && p.loaded);
    // The table holds base costs; NCCL adds pipelining and a Tree correction, so without an override in sight
    // only a large gap counts.
    let margin = if forced.is_empty() && !tuner { 0.5 } else { 0.8 };
    let mut odd = Vec::new();
    for d in &snap.decisions {
        let Some(table) = snap.tuning.get(&d.coll) else { continue };
        let Some(chosen) = table.get(&d.algo).and_then(|p| p.get(&d.proto)) else { continue };
        // The line prints one rank's bytes; NCCL costs AllGather and ReduceScatter on the total (NCCL 2.28.9
        // `src/enqueue.cc`, nBytes times nRanks).
        let bytes = match d.coll {
            Collective::AllGather | Collective::ReduceScatter => match snap.nranks {
                Some(n) => d.bytes.saturating_mul(n as u64),
                None => continue,
            },
            _ => d.bytes,
        };
        let t_chosen = model_time(chosen.lat_us, chosen.bw_gbps, bytes);
        let best = table
            .iter()
            .flat_map(|(a, ps)| ps.iter().map(move |(p, c)| (*a, *p, model_time(c.lat_us, c.bw_gbps, bytes))))
            .min_by(|x, y| x.2.total_cmp(&y.2));
        if let Some((a, p, t)) = best {
            if t < t_chosen * margin {
                odd.push(format!(
                    "{} {} bytes: {}/{} ({t_chosen:.1} us by the table) where {a}/{p} ({t:.1} us) is cheaper",
                    d.coll, d.bytes, d.algo, d.proto
                ));
            }
        }
    }
    if odd.is_empty() {
        return Vec::new();
    }
    let why = match (forced.is_empty(), tuner) {
        (false, _) => format!("{} restricts the choice", forced.join(" and ")),
        (true, true) => "a tuner plugin overrides the table".to_string(),
        (true, false) => {
            "a tuner, NCCL_ALGO/NCCL_PROTO in another scope, or a per-call constraint overrode it".to_string()
        }
    };
    let n = odd.len();
    odd.truncate(5);
    vec![finding(
        "decision_not_table_min",
        Severity::Info,
        "Algorithm choices that are not the tuning table's minimum",
        format!("{n} decisions differ from the table's cheapest cell ({why}): {}.", odd.join("; ")),
        cite(evidence, &[Cite::Env("NCCL_ALGO".into()), Cite::Env("NCCL_PROTO".into()), Cite::Table]),
        "If this was not intended, unset NCCL_ALGO/NCCL_PROTO or the tuner plugin and compare bandwidth.",
    )]
}

fn search_fallback(_: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let ev = cite(evidence, &[Cite::SearchFallback]);
    if ev.is_empty() {
        return Vec::new();
    }
    vec![finding(
        "search_fallback",
        Severity::Warning,
        "Graph search fell back to a simple order",
        "NCCL's topology search found no path meeting its bandwidth targets and fell back to rank order, so \
         rings/trees may cross slow links."
            .into(),
        ev,
        "Check the topology NCCL detected (NCCL_TOPO_DUMP_FILE), the NIC/GPU PCIe placement, and any NCCL_TOPO_FILE.",
    )]
}

/// Each NCCL version the log printed and who printed it.
fn versions(snap: &Snapshot) -> impl Iterator<Item = &(String, Vec<String>)> {
    log(snap).iter().flat_map(|l| &l.versions)
}

fn version_mismatch(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    // Frameworks quote NCCL's version without the `+cudaX.Y` suffix: compare the release only.
    let releases: BTreeSet<&str> = versions(snap).map(|(v, _)| v.split('+').next().unwrap_or(v)).collect();
    if releases.len() < 2 {
        return Vec::new();
    }
    let list: Vec<String> = versions(snap)
        .map(|(v, who)| if who.is_empty() { v.clone() } else { format!("{v} ({})", who.join(", ")) })
        .collect();
    let ev = versions(snap).flat_map(|(v, _)| evidence.get(&Cite::Version(v.clone())).iter().cloned()).collect();
    vec![finding(
        "version_mismatch",
        Severity::Error,
        "Ranks run different NCCL versions",
        format!("The log shows {} NCCL versions: {}.", list.len(), list.join("; ")),
        ev,
        "Use one NCCL build on every node (same container image or the same libnccl, check LD_LIBRARY_PATH and the \
         framework's bundled NCCL).",
    )]
}

fn init_hang(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    use collscope_model::CommState;
    let comms = &snap.communicators;
    let stuck: Vec<usize> = (0..comms.len()).filter(|&i| comms[i].state == CommState::Initializing).collect();
    if stuck.is_empty() {
        return Vec::new();
    }
    let started: BTreeSet<u32> = stuck.iter().filter_map(|&i| comms[i].rank).collect();
    let nranks = stuck.iter().filter_map(|&i| comms[i].nranks).max().unwrap_or(0);
    let ids: BTreeSet<&str> = stuck.iter().filter_map(|&i| comms[i].comm_id.as_deref()).collect();
    // An excerpt may simply end after Init START: a hang needs other ranks of that communicator that completed
    // (by its commId, or without one the same size and another rank), or errors printed after the START.
    let completed = comms.iter().any(|c| {
        c.state == CommState::Ready
            && match c.comm_id.as_deref() {
                Some(id) if !ids.is_empty() => ids.contains(id),
                _ => c.nranks == Some(nranks) && c.rank.is_some_and(|r| !started.contains(&r)),
            }
    });
    let starts: Vec<&LineRef> = stuck.iter().flat_map(|&i| evidence.get(&Cite::InitStart(i))).collect();
    let later = snap
        .warnings
        .iter()
        .filter_map(|w| w.line.as_ref())
        .any(|w| w.file == evidence::LIVE || starts.iter().any(|s| s.file == w.file && s.line < w.line));
    if !completed && !later {
        return Vec::new();
    }
    let ranks: Vec<String> = started.iter().map(u32::to_string).collect();
    // Ranks of the same communicator that printed neither START nor COMPLETE never arrived (or were not logged).
    let present: BTreeSet<u32> = comms
        .iter()
        .filter(|c| c.comm_id.as_deref().is_some_and(|id| ids.contains(id)))
        .filter_map(|c| c.rank)
        .collect();
    let absent = ranks_missing(nranks, &present);
    let absent = if absent.is_empty() || ids.is_empty() {
        String::new()
    } else {
        format!(" Ranks {} of that communicator printed no init line at all.", absent.join(", "))
    };
    let ev = stuck.iter().flat_map(|&i| evidence.get(&Cite::InitStart(i)).iter().cloned()).take(5).collect();
    vec![finding(
        "init_hang",
        if completed { Severity::Error } else { Severity::Warning },
        "Communicator init started but did not complete",
        format!(
            "Ranks {} printed Init START and no Init COMPLETE{}.{absent}",
            ranks.join(", "),
            if completed {
                " while others completed: those ranks are stuck in bootstrap or connection setup"
            } else {
                " and errors followed: init failed or hangs"
            }
        ),
        ev,
        "Check that every rank reached ncclCommInitRank with the same unique id and nranks, that the bootstrap \
         interface is reachable (NCCL_SOCKET_IFNAME) and firewalls allow the ports; look for WARN lines on the stuck ranks.",
    )]
}

/// IB failure classes: (marker, title, likely causes and fix).
const IB_CLASSES: &[(&str, &str, &str)] = &[
    ("ibv_create_qp", "Creating an IB queue pair failed", "Too many QPs or locked memory exhausted: raise `ulimit -l` (memlock unlimited), reduce NCCL_IB_QPS_PER_CONNECTION, check the HCA's max_qp."),
    ("ibv_create_cq", "Creating an IB completion queue failed", "Almost always the locked-memory limit: set `ulimit -l unlimited` (memlock in /etc/security/limits.conf, `--ulimit memlock=-1` for docker, the container runtime's or Slurm's limits), then check the HCA with `ibv_devinfo`."),
    ("ibv_modify_qp", "Bringing an IB queue pair up failed", "The peers cannot address each other: wrong GID index on RoCE (NCCL_IB_GID_INDEX), port down, mismatched MTU or subnet; check `ibv_devinfo` and `show_gids`."),
    ("ibv_reg_mr", "Registering memory with the NIC failed", "Locked memory limit (`ulimit -l`), or GPU memory registration without nvidia-peermem/DMA-BUF: fix the limit or the peer-memory module."),
];

/// What an ibv_wc_status code means and what to check (`enum ibv_wc_status`, rdma-core `verbs.h`).
fn wc_status(code: u32) -> Option<(&'static str, &'static str)> {
    Some(match code {
        1 => ("IBV_WC_LOC_LEN_ERR, local length error", "a message larger than the posted buffer: ranks that disagree on sizes or on the collective"),
        2 => ("IBV_WC_LOC_QP_OP_ERR, local QP operation error", "an invalid work request: driver/firmware versions and NCCL_IB_* settings"),
        4 => ("IBV_WC_LOC_PROT_ERR, local protection error", "a buffer not (or no longer) registered: GPU memory registration (nvidia-peermem / DMA-BUF), memory freed during the call"),
        5 => ("IBV_WC_WR_FLUSH_ERR, work request flushed", "the queue pair had already failed: look for the first error, on this rank or its peer"),
        8 => ("IBV_WC_LOC_ACCESS_ERR, local access error", "local memory registration and permissions"),
        9 => ("IBV_WC_REM_INV_REQ_ERR, remote invalid request", "a request the peer rejected: MTU or settings that differ between the nodes"),
        10 => ("IBV_WC_REM_ACCESS_ERR, remote access error", "the peer's registered memory: GPUDirect RDMA on the peer (nvidia-peermem / DMA-BUF), a peer that freed or lost its buffers"),
        11 => ("IBV_WC_REM_OP_ERR, remote operation error", "the peer could not complete it: its own log, a peer that died or failed first"),
        12 => ("IBV_WC_RETRY_EXC_ERR, transport retry counter exceeded", "the peer stopped acknowledging: link or port down (`ibstat`, cables, switch), a peer that died or hung, NCCL_IB_TIMEOUT too low for the fabric (try 22), and on RoCE a wrong GID index (NCCL_IB_GID_INDEX, `show_gids`) or a lossy fabric without PFC/ECN"),
        13 => ("IBV_WC_RNR_RETRY_EXC_ERR, receiver not ready", "the peer posted no receive in time: a stuck or dead peer, or mismatched collectives"),
        19 => ("IBV_WC_FATAL_ERR, fatal error", "the HCA itself: `dmesg`, firmware, `ibv_devinfo`"),
        20 => ("IBV_WC_RESP_TIMEOUT_ERR, response timeout", "the peer did not answer: link, peer health, NCCL_IB_TIMEOUT"),
        21 => ("IBV_WC_GENERAL_ERR, general error", "the driver's log (`dmesg`) and the HCA's firmware"),
        _ => return None,
    })
}

/// The completion status of `NET/IB : Got completion from peer .. with error 12, ...` (2.12 to 2.27) and
/// `NET/IB: Got completion from peer .. with status=IBV_WC_RETRY_EXC_ERR(12) ...` (2.28.9
/// `src/transport/net_ib.cc`), `with status=12` (its GIN form).
fn completion_status(text: &str) -> Option<u32> {
    let digits = |s: &str| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok();
    if let Some((_, rest)) = text.split_once("with error ") {
        return digits(rest);
    }
    let rest = text.split_once("status=")?.1;
    match rest.split_once('(') {
        Some((name, code)) if name.starts_with("IBV_WC_") => digits(code),
        _ => digits(rest),
    }
}

fn ib_errors(snap: &Snapshot, _: &Evidence) -> Vec<Finding> {
    let ib: Vec<&Warning> = warnings(snap, "ib_verbs").filter(|w| !no_libibverbs(w)).collect();
    if ib.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut matched = BTreeSet::new();
    for (marker, title, fix) in IB_CLASSES {
        let hits: Vec<&Warning> = ib.iter().copied().filter(|w| w.text.contains(marker)).collect();
        if hits.is_empty() {
            continue;
        }
        matched.extend(hits.iter().map(|w| w.text.as_str()));
        out.push(finding(
            &format!("ib_error_{marker}"),
            Severity::Error,
            title,
            format!("{} WARN lines, e.g. `{}`.", hits.len(), hits[0].text),
            warning_refs(hits.into_iter()),
            fix,
        ));
    }
    let completions: Vec<(&Warning, Option<u32>)> = ib
        .iter()
        .copied()
        .filter(|w| w.text.contains("Got completion") || w.text.contains("completion with error"))
        .map(|w| (w, completion_status(&w.text)))
        .collect();
    if !completions.is_empty() {
        matched.extend(completions.iter().map(|(w, _)| w.text.as_str()));
        let codes: BTreeSet<u32> = completions.iter().filter_map(|(_, c)| *c).collect();
        let decoded: Vec<String> = codes
            .iter()
            .map(|&c| match wc_status(c) {
                Some((name, check)) => format!("status {c} ({name}): check {check}"),
                None => format!("status {c}: see `enum ibv_wc_status` in verbs.h"),
            })
            .collect();
        out.push(finding(
            "ib_error_completion",
            Severity::Error,
            "IB completions with error",
            format!(
                "{} WARN lines, e.g. `{}`. {}",
                completions.len(),
                completions[0].0.text,
                if decoded.is_empty() {
                    "The status was not printed.".to_string()
                } else {
                    format!("{}.", decoded.join("; "))
                }
            ),
            warning_refs(completions.into_iter().map(|(w, _)| w)),
            "Read the first completion error of the job (the other ranks' logs too: the peer named in the line), \
             check the fabric counters (`ibstat`, `perfquery`), and the checks named for each status.",
        ));
    }
    let rest: Vec<&Warning> = ib.into_iter().filter(|w| !matched.contains(w.text.as_str())).collect();
    if !rest.is_empty() {
        out.push(finding(
            "ib_error",
            Severity::Error,
            "InfiniBand errors",
            format!("{} IB WARN lines, e.g. `{}`.", rest.len(), rest[0].text),
            warning_refs(rest.into_iter()),
            "Check `ibv_devinfo` (ports Active), the fabric, and the peers' logs for the first failure.",
        ));
    }
    out
}

fn shm_exhausted(snap: &Snapshot, _: &Evidence) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(snap, "shm").collect();
    if ws.is_empty() {
        return Vec::new();
    }
    vec![finding(
        "shm_exhausted",
        Severity::Error,
        "Shared memory (/dev/shm) exhausted",
        format!(
            "{} WARN lines creating or growing /dev/shm segments failed (e.g. `{}`): containers get 64 MB of /dev/shm \
             by default, less than NCCL's SHM and proxy buffers need.",
            ws.len(),
            ws[0].text
        ),
        warning_refs(ws.into_iter()),
        "Give the container more shared memory: `docker run --shm-size=1g` (or --ipc=host), in Kubernetes mount an \
         emptyDir with medium: Memory at /dev/shm; or avoid SHM with NCCL_SHM_DISABLE=1.",
    )]
}

fn socket_errors(snap: &Snapshot, _: &Evidence) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(snap, "socket").collect();
    if ws.is_empty() {
        return Vec::new();
    }
    let kinds: [(&str, &str); 4] = [
        ("Connection refused", "refused (nothing listening: the peer died or a firewall rejects the port)"),
        ("No route to host", "no route (wrong interface or routing: set NCCL_SOCKET_IFNAME)"),
        ("timed out", "timeouts (a firewall drops the packets, or the peer is stuck)"),
        ("Connection reset", "reset by peer (the peer aborted first: its log has the original error)"),
    ];
    let seen: Vec<&str> =
        kinds.iter().filter(|(m, _)| ws.iter().any(|w| w.text.contains(m))).map(|(_, d)| *d).collect();
    vec![finding(
        "socket_error",
        Severity::Error,
        "Socket errors between ranks",
        format!(
            "{} socket WARN lines{}.",
            ws.len(),
            if seen.is_empty() { String::new() } else { format!(": {}", seen.join("; ")) }
        ),
        warning_refs(ws.into_iter()),
        "Make sure all ranks use an interface that routes between hosts (NCCL_SOCKET_IFNAME), open the ports between \
         nodes, and read the first error of the rank that failed first.",
    )]
}

fn cuda_oom(snap: &Snapshot, _: &Evidence) -> Vec<Finding> {
    let ws: Vec<&Warning> = snap.warnings.iter().filter(|w| w.text.contains("out of memory")).collect();
    if ws.is_empty() {
        return Vec::new();
    }
    vec![finding(
        "cuda_oom",
        Severity::Error,
        "CUDA out of memory",
        format!("{} lines report GPU memory exhausted (e.g. `{}`).", ws.len(), ws[0].text),
        warning_refs(ws.into_iter()),
        "Free GPU memory for NCCL's buffers: smaller batch, NCCL_BUFFSIZE or fewer channels (NCCL_MAX_NCHANNELS), \
         and check for other processes on the GPU (nvidia-smi).",
    )]
}

/// Words of WARN and error lines that say a peer process went away: NCCL's ncclRemoteError string (2.28.9
/// `src/init.cc`), `socketProgress: Connection closed by remote peer` (`src/misc/socket.cc`), a send to a
/// closed socket.
const PEER_GONE: &[&str] = &["remote process exited", "Connection closed by remote peer", "Broken pipe"];

/// Who went away, in words, and the lines that say so; `None` when nothing does.
fn peers_gone(snap: &Snapshot, evidence: &Evidence) -> Option<(Vec<String>, Vec<LineRef>)> {
    // The runtime's own `peer` warnings come with their `peer_exited` finding already.
    let ws: Vec<&Warning> =
        snap.warnings.iter().filter(|w| w.class != "peer" && PEER_GONE.iter().any(|m| w.text.contains(m))).collect();
    let closed: Vec<&collscope_model::PeerClosed> = log(snap).iter().flat_map(|l| &l.peers_closed).collect();
    // A closed proxy connection alone is also a process that exited without destroying its communicator, as
    // many jobs do at their end: it names the dead peer only beside a failure.
    let failed = snap.warnings.iter().any(|w| w.class != "input" && w.class != "peer");
    if ws.is_empty() && (closed.is_empty() || !failed) {
        return None;
    }
    let mut who: BTreeSet<String> = BTreeSet::new();
    for c in &closed {
        // The rank of that local rank on that host, where a comm line said it.
        let rank = snap
            .communicators
            .iter()
            .find(|m| m.host == c.host && m.local_rank == Some(c.local_rank))
            .and_then(|m| m.rank);
        who.insert(match (rank, &c.host) {
            (Some(r), Some(h)) => format!("rank {r} (local rank {} on {h})", c.local_rank),
            (None, Some(h)) => format!("local rank {} on {h}", c.local_rank),
            (_, None) => format!("local rank {}", c.local_rank),
        });
    }
    for w in &ws {
        // `... remote peer 10.0.0.2<41234>`, `... to 10.0.0.2<41234> failed : Broken pipe`: the host bootstrapping
        // from that address.
        let addr = w.text.split([' ', '<']).find(|t| t.parse::<std::net::IpAddr>().is_ok());
        if let Some(a) = addr {
            let host = snap.bootstrap.iter().find(|b| b.address == a).and_then(|b| b.host.as_deref());
            who.insert(host.map_or(format!("the peer at {a}"), |h| format!("the peer at {a} ({h})")));
        }
    }
    let mut ev = cite(evidence, &[Cite::PeerClosed]);
    ev.extend(warning_refs(ws.into_iter()));
    Some((who.into_iter().collect(), ev))
}

fn peer_died(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let Some((who, ev)) = peers_gone(snap, evidence) else { return Vec::new() };
    let named = if who.is_empty() { "a peer process".to_string() } else { who.join(", ") };
    vec![finding(
        "peer_died",
        Severity::Error,
        "A peer process died",
        format!(
            "The log says {named} went away (remote process exited, connection closed or broken pipe): the ranks \
             that waited on it fail or time out as a consequence, not as the cause."
        ),
        ev,
        "Read that process's own output for why it exited (an exception, CUDA error, out of memory, the OOM killer \
         in `dmesg`, a signal from the scheduler); timeouts on the other ranks follow from it.",
    )]
}

/// `[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, ...)`.
fn watchdog_work(text: &str) -> Option<(u32, u64, String)> {
    let rank = text.split("Rank ").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let seq = text.split("SeqNum=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let op = text.split("OpType=").nth(1)?.split([',', ')']).next()?.to_string();
    Some((rank, seq, op))
}

fn watchdog_timeout(snap: &Snapshot, evidence: &Evidence) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(snap, "watchdog").collect();
    if ws.is_empty() {
        return Vec::new();
    }
    // A peer that died leaves the others waiting: `peer_died` is the diagnosis, the timeout a consequence.
    let died = peers_gone(snap, evidence).is_some();
    let works: Vec<(u32, u64, String)> = ws.iter().filter_map(|w| watchdog_work(&w.text)).collect();
    let waited: BTreeSet<u32> = works.iter().map(|w| w.0).chain(ws.iter().filter_map(|w| w.rank)).collect();
    let mut detail = format!(
        "Ranks {} timed out waiting in a collective.",
        waited.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    );
    let mut by_seq: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for (_, seq, op) in &works {
        by_seq.entry(*seq).or_default().insert(op);
    }
    for (seq, ops) in &by_seq {
        if ops.len() > 1 {
            let who: Vec<String> =
                works.iter().filter(|w| w.1 == *seq).map(|w| format!("rank {} {}", w.0, w.2)).collect();
            detail.push_str(&format!(
                " At SeqNum {seq} the ranks disagree on the operation ({}): they took different code paths.",
                who.join(", ")
            ));
        }
    }
    if let Some(n) = snap.nranks {
        let missing = ranks_missing(n, &waited);
        if !missing.is_empty() && waited.iter().any(|&r| r < n) {
            detail.push_str(&format!(
                " Ranks without a timeout line (did not arrive, or their output is missing): {}.",
                missing.join(", ")
            ));
        }
    }
    if died {
        detail.push_str(" A peer process died first (see peer_died): these timeouts follow from it.");
    }
    vec![finding(
        "watchdog_timeout",
        if died { Severity::Warning } else { Severity::Error },
        "Collective timed out (watchdog)",
        detail,
        warning_refs(ws.into_iter()),
        "Find the rank that did not arrive (its stack: py-spy dump, or TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the flight \
         recorder); check that all ranks issue the same collectives in the same order, and look for an earlier WARN.",
    )]
}

fn nccl_errors(snap: &Snapshot, _: &Evidence) -> Vec<Finding> {
    let ws: Vec<&Warning> = snap
        .warnings
        .iter()
        .filter(|w| matches!(w.class.as_str(), "proxy" | "nccl_error" | "cuda" | "other"))
        .collect();
    let ws: Vec<&Warning> = ws.into_iter().filter(|w| !w.text.contains("out of memory")).collect();
    if ws.is_empty() {
        return Vec::new();
    }
    let remote = ws.iter().any(|w| w.class == "proxy" || w.text.contains("ncclRemoteError"));
    vec![finding(
        "nccl_error",
        Severity::Error,
        "NCCL reported errors",
        format!(
            "{} error lines (e.g. `{}`){}.",
            ws.len(),
            ws[0].text,
            if remote { "; a proxy or remote error means another rank failed first" } else { "" }
        ),
        warning_refs(ws.into_iter()),
        "Read the earliest WARN across all ranks: later errors are usually consequences of it.",
    )]
}
