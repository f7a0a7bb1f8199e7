//! Diagnosis: one table of named rules, each a function from the assembled job to findings. To add a rule,
//! write its function and add a row to [`RULES`] (and a test below).

use crate::job::{Ev, Job};
use collscope_model::{Collective, Finding, GdrCheck, LineRef, Severity, Transport, Warning};
use std::collections::{BTreeMap, BTreeSet};

pub struct Rule {
    /// The finding code (or code prefix) the rule produces.
    pub code: &'static str,
    pub check: fn(&Job) -> Vec<Finding>,
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
    Rule { code: "watchdog_timeout", check: watchdog_timeout },
    Rule { code: "nccl_error", check: nccl_errors },
];

/// Runs every rule; findings come out most severe first.
pub fn diagnose(job: &Job) -> Vec<Finding> {
    let mut out: Vec<Finding> = RULES.iter().flat_map(|r| (r.check)(job)).collect();
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
    Finding { code: code.into(), severity, title: title.into(), detail, evidence, fix: fix.into() }
}

fn cite(job: &Job, evs: &[Ev]) -> Vec<LineRef> {
    evs.iter().flat_map(|e| job.evidence(e).iter().cloned()).collect()
}

fn env<'a>(job: &'a Job, name: &str) -> Option<&'a str> {
    job.env_values.get(name).map(String::as_str)
}

/// More than one node: printed or concluded, or seen (two hosts printing are two nodes).
fn multi_node(job: &Job) -> bool {
    job.snap.nnodes.is_some_and(|n| n > 1) || job.snap.hosts.len() > 1 || job.size.multi_node
}

fn warnings<'a>(job: &'a Job, class: &'a str) -> impl Iterator<Item = &'a Warning> + 'a {
    job.snap.warnings.iter().filter(move |w| w.class == class)
}

fn warning_refs<'a>(ws: impl Iterator<Item = &'a Warning>) -> Vec<LineRef> {
    ws.filter_map(|w| w.line.clone()).take(5).collect()
}

fn no_gdrdma(job: &Job) -> Vec<Finding> {
    let net: Vec<_> = job
        .snap
        .connections
        .iter()
        .filter(|c| c.transport == Transport::Net && c.net.as_deref() != Some("Socket"))
        .collect();
    let without = net.iter().filter(|c| c.gdrdma == Some(false)).count();
    if without == 0 {
        return Vec::new();
    }
    let share = format!("{without} of {} NET connections stage through host memory (no /GDRDMA)", net.len());
    let mut ev = cite(job, &[Ev::NetNoGdr]);
    let level = env(job, "NCCL_NET_GDR_LEVEL");
    // The lines that said why, as the log recorded them.
    let off: Vec<&GdrCheck> = job.facts.gdr_checks.iter().filter(|g| !g.enabled).collect();
    let quote = |g: &GdrCheck| g.line.as_ref().map_or(String::new(), |l| format!(": `{}`", l.text.trim()));
    let distance = off.iter().find(|g| g.distance.is_some());
    let module = off.iter().find(|g| g.hca_name.is_some() || g.reason.as_deref().is_some_and(|r| r.contains("module")));
    let other = off.iter().find(|g| g.line.is_some());
    let (code, why, fix, gdr) = if let Some(g) = distance {
        ev.extend(cite(job, &[Ev::Env("NCCL_NET_GDR_LEVEL".into())]));
        let (dist, lvl) = (g.distance.unwrap_or(0), g.level.unwrap_or(0));
        (
            "no_gdrdma_distance",
            format!(
                "NCCL judged the GPU too far from the NIC: distance {dist} is above the GDR level {lvl}{}",
                level.map_or(String::new(), |l| format!(" (NCCL_NET_GDR_LEVEL={l})"))
            ),
            "Put each rank on a GPU behind the same PCIe switch as its NIC, or raise NCCL_NET_GDR_LEVEL (e.g. PHB or \
             SYS) if the platform's PCIe peer-to-peer path is known to perform.",
            Some(g),
        )
    } else if let Some(g) = module {
        (
            "no_gdrdma_no_module",
            format!(
                "the NIC cannot read GPU memory: no peer-memory module (nvidia-peermem / nv_peer_mem) and no DMA-BUF \
                 support{}",
                quote(g)
            ),
            "Load nvidia-peermem (`modprobe nvidia-peermem`) or use a kernel and driver with DMA-BUF (Linux 5.12+, \
             open GPU kernel modules), then check for `GPU Direct RDMA Enabled` in the log.",
            Some(g),
        )
    } else if let Some(g) = other {
        (
            "no_gdrdma_reported",
            format!("the log says why{}", quote(g)),
            "Follow what that line reports: the network plugin's or driver's requirements for GPUDirect RDMA (its \
             documentation names the module, library or setting it needs).",
            Some(g),
        )
    } else if level.is_some() || env(job, "NCCL_NET_GDR_READ").is_some() || env(job, "NCCL_GDR_DISABLE").is_some() {
        ev.extend(cite(job, &[Ev::Env("NCCL_NET_GDR_LEVEL".into()), Ev::Env("NCCL_NET_GDR_READ".into())]));
        (
            "no_gdrdma_env",
            "GPUDirect RDMA is restricted by the environment".to_string(),
            "Unset the NCCL_NET_GDR_* variables.",
            None,
        )
    } else {
        ev.extend(cite(job, &[Ev::RingNoGdr]));
        (
            "no_gdrdma",
            "the log does not say why (run with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH to see the GPU Direct RDMA lines)"
                .to_string(),
            "Check that nvidia-peermem is loaded or DMA-BUF is available, and that GPU and NIC share a PCIe switch.",
            None,
        )
    };
    ev.extend(gdr.and_then(|g| g.line.clone()));
    vec![finding(code, Severity::Warning, "No GPUDirect RDMA on NET connections", format!("{share}: {why}."), ev, fix)]
}

fn socket_not_ib(job: &Job) -> Vec<Finding> {
    let socket_conns = job.snap.connections.iter().any(|c| c.net.as_deref() == Some("Socket"));
    let socket_net = job.snap.network.as_deref() == Some("Socket");
    if !socket_conns && !socket_net {
        return Vec::new();
    }
    let mut why = Vec::new();
    if !job.net_no_device.is_empty() {
        why.push("NET/IB found no device".to_string());
    }
    if env(job, "NCCL_IB_DISABLE").is_some_and(|v| v != "0") {
        why.push("NCCL_IB_DISABLE is set".to_string());
    }
    if !job.evidence(&Ev::PluginMissing).is_empty() {
        why.push("no network plugin was found".to_string());
    }
    if why.is_empty() {
        why.push("the log does not say why IB was not used".to_string());
    }
    let multi = multi_node(job) || socket_conns;
    let severity = if multi { Severity::Warning } else { Severity::Info };
    let ev = cite(job, &[Ev::NetSocket, Ev::NetNoDevice, Ev::Env("NCCL_IB_DISABLE".into()), Ev::PluginMissing]);
    vec![finding(
        "socket_not_ib",
        severity,
        "TCP sockets carry inter-node traffic",
        format!(
            "The job uses NET/Socket{}: {}.",
            if multi { " between nodes" } else { " (single node: only matters across nodes)" },
            why.join("; ")
        ),
        ev,
        "If the nodes have InfiniBand/RoCE: check `ibv_devinfo`, pass /dev/infiniband into containers, unset \
         NCCL_IB_DISABLE, set NCCL_IB_HCA to the right HCAs; on clouds install the provider's plugin (aws-ofi-nccl, \
         gIB).",
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

fn bootstrap_interface(job: &Job) -> Vec<Finding> {
    let bad: BTreeSet<String> = job
        .snap
        .bootstrap
        .iter()
        .filter(|b| suspicious_interface(&b.name) || b.address.starts_with("127."))
        .map(|b| format!("{}:{}", b.name, b.address))
        .collect();
    if bad.is_empty() {
        return Vec::new();
    }
    let multi = multi_node(job);
    vec![finding(
        "bootstrap_interface",
        if multi { Severity::Error } else { Severity::Info },
        "Bootstrap on a loopback or virtual interface",
        format!(
            "NCCL bootstraps over {}, an interface other hosts usually cannot reach{}.",
            bad.into_iter().collect::<Vec<_>>().join(", "),
            if multi { "" } else { " (harmless on a single node)" }
        ),
        cite(job, &[Ev::Bootstrap]),
        "Set NCCL_SOCKET_IFNAME to the interface that routes between the nodes (e.g. NCCL_SOCKET_IFNAME=eth0 or \
         =^docker,lo to exclude).",
    )]
}

fn p2p_refused_shm(job: &Job) -> Vec<Finding> {
    let shm = job.snap.connections.iter().filter(|c| c.transport == Transport::Shm).count();
    if shm == 0 && job.evidence(&Ev::P2pDisabled).is_empty() {
        return Vec::new();
    }
    let cause = if env(job, "NCCL_P2P_DISABLE").is_some_and(|v| v != "0") {
        "NCCL_P2P_DISABLE is set"
    } else if env(job, "NCCL_P2P_LEVEL").is_some() {
        "NCCL_P2P_LEVEL excludes these GPU pairs"
    } else if !job.evidence(&Ev::P2pDisabled).is_empty() {
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
        cite(job, &[Ev::Shm, Ev::P2pDisabled, Ev::Env("NCCL_P2P_DISABLE".into()), Ev::Env("NCCL_P2P_LEVEL".into())]),
        "Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL; disable PCIe ACS on bare metal; in containers run all ranks of a \
         node in one container or share the IPC namespace (--ipc=host).",
    )]
}

fn ll128_disabled(job: &Job) -> Vec<Finding> {
    let explicit = !job.evidence(&Ev::Ll128Disabled).is_empty();
    let table_has_others = job.snap.tuning.values().flat_map(|a| a.values()).any(|p| !p.is_empty());
    let table_has_ll128 =
        job.snap.tuning.values().flat_map(|a| a.values()).any(|p| p.contains_key(&collscope_model::Protocol::Ll128));
    let by_env = env(job, "NCCL_PROTO").is_some();
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
        cite(job, &[Ev::Ll128Disabled, Ev::Table]),
        "Nothing to fix unless mid-size performance matters; NCCL_PROTO=LL128 forces it only where safe hardware is \
         known (do not force it on unsupported platforms: data corruption).",
    )]
}

fn channels_env(job: &Job) -> Vec<Finding> {
    const VARS: &[&str] =
        &["NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NCHANNELS_PER_NET_PEER"];
    let set: Vec<String> = VARS.iter().filter_map(|v| env(job, v).map(|x| format!("{v}={x}"))).collect();
    if set.is_empty() && job.evidence(&Ev::ChannelsLimited).is_empty() {
        return Vec::new();
    }
    let capped_low =
        ["NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"].iter().any(|v| env(job, v).is_some_and(|x| x.trim() == "1"));
    let mut ev: Vec<LineRef> = VARS.iter().flat_map(|v| job.evidence(&Ev::Env((*v).into())).iter().cloned()).collect();
    ev.extend(cite(job, &[Ev::ChannelsLimited]));
    vec![finding(
        "channels_env",
        if capped_low { Severity::Warning } else { Severity::Info },
        "Channel count set by the environment",
        format!(
            "The environment overrides NCCL's channel choice ({}){}; the job has {} collective channels.",
            set.join(", "),
            if capped_low { ", so one SM moves all the data and bandwidth is capped" } else { "" },
            job.snap.channels.coll.map_or("an unknown number of".to_string(), |c| c.to_string())
        ),
        ev,
        "Remove the channel variables unless a measurement shows they help; NCCL sizes channels to the topology.",
    )]
}

/// NCCL's cost model: latency plus bytes over bandwidth (GB/s is bytes per ns, so 1e3 bytes per us).
fn model_time(lat_us: f64, bw_gbps: f64, bytes: u64) -> f64 {
    lat_us + bytes as f64 / (bw_gbps * 1e3)
}

fn decision_not_table_min(job: &Job) -> Vec<Finding> {
    let forced: Vec<&str> = ["NCCL_ALGO", "NCCL_PROTO"].into_iter().filter(|v| env(job, v).is_some()).collect();
    let tuner = job.facts.plugins.iter().any(|p| p.kind == "tuner" && p.loaded);
    // The table holds base costs; NCCL adds pipelining and a Tree correction, so without an override in sight
    // only a large gap counts.
    let margin = if forced.is_empty() && !tuner { 0.5 } else { 0.8 };
    let mut odd = Vec::new();
    for d in &job.snap.decisions {
        let Some(table) = job.snap.tuning.get(&d.coll) else { continue };
        let Some(chosen) = table.get(&d.algo).and_then(|p| p.get(&d.proto)) else { continue };
        // The line prints one rank's bytes; NCCL costs AllGather and ReduceScatter on the total (NCCL 2.28.9
        // `src/enqueue.cc`, nBytes times nRanks).
        let bytes = match d.coll {
            Collective::AllGather | Collective::ReduceScatter => match job.snap.nranks {
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
        cite(job, &[Ev::Env("NCCL_ALGO".into()), Ev::Env("NCCL_PROTO".into()), Ev::Table]),
        "If this was not intended, unset NCCL_ALGO/NCCL_PROTO or the tuner plugin and compare bandwidth.",
    )]
}

fn search_fallback(job: &Job) -> Vec<Finding> {
    let ev = cite(job, &[Ev::SearchFallback]);
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

fn version_mismatch(job: &Job) -> Vec<Finding> {
    // Frameworks quote NCCL's version without the `+cudaX.Y` suffix: compare the release only.
    let releases: BTreeSet<&str> = job.facts.versions.iter().map(|(v, _)| v.split('+').next().unwrap_or(v)).collect();
    if releases.len() < 2 {
        return Vec::new();
    }
    let list: Vec<String> = job
        .facts
        .versions
        .iter()
        .map(|(v, who)| if who.is_empty() { v.clone() } else { format!("{v} ({})", who.join(", ")) })
        .collect();
    let ev =
        job.facts.versions.iter().flat_map(|(v, _)| job.evidence(&Ev::Version(v.clone())).iter().cloned()).collect();
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

fn init_hang(job: &Job) -> Vec<Finding> {
    use collscope_model::CommState;
    let comms = &job.snap.communicators;
    let stuck: Vec<usize> = (0..comms.len()).filter(|&i| comms[i].state == CommState::Initializing).collect();
    if stuck.is_empty() {
        return Vec::new();
    }
    let completed = comms.iter().any(|c| c.state == CommState::Ready);
    let started: BTreeSet<u32> = stuck.iter().filter_map(|&i| comms[i].rank).collect();
    let ranks: Vec<String> = started.iter().map(u32::to_string).collect();
    // Ranks of the same communicator that printed neither START nor COMPLETE never arrived (or were not logged).
    let nranks = stuck.iter().filter_map(|&i| comms[i].nranks).max().unwrap_or(0);
    let ids: BTreeSet<&str> = stuck.iter().filter_map(|&i| comms[i].comm_id.as_deref()).collect();
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
    let ev = stuck.iter().flat_map(|&i| job.evidence(&Ev::InitStart(i)).iter().cloned()).take(5).collect();
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
                " (either init hangs, or the log ends before it finishes)"
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
    ("ibv_modify_qp", "Bringing an IB queue pair up failed", "The peers cannot address each other: wrong GID index on RoCE (NCCL_IB_GID_INDEX), port down, mismatched MTU or subnet; check `ibv_devinfo` and `show_gids`."),
    ("ibv_reg_mr", "Registering memory with the NIC failed", "Locked memory limit (`ulimit -l`), or GPU memory registration without nvidia-peermem/DMA-BUF: fix the limit or the peer-memory module."),
    ("completion with error", "IB completions with error", "Status 12 (retry exceeded) or 13 (RNR) means packets were lost: link flaps, bad cables, congestion or a peer that died; check the fabric counters, NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT, and the other ranks' logs."),
];

fn ib_errors(job: &Job) -> Vec<Finding> {
    let ib: Vec<&Warning> = warnings(job, "ib_verbs").collect();
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
            &format!("ib_error_{}", marker.replace(' ', "_")),
            Severity::Error,
            title,
            format!("{} WARN lines, e.g. `{}`.", hits.len(), hits[0].text),
            warning_refs(hits.into_iter()),
            fix,
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

fn shm_exhausted(job: &Job) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(job, "shm").collect();
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

fn socket_errors(job: &Job) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(job, "socket").collect();
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

fn cuda_oom(job: &Job) -> Vec<Finding> {
    let ws: Vec<&Warning> = job.snap.warnings.iter().filter(|w| w.text.contains("out of memory")).collect();
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

/// `[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, ...)`.
fn watchdog_work(text: &str) -> Option<(u32, u64, String)> {
    let rank = text.split("Rank ").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let seq = text.split("SeqNum=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let op = text.split("OpType=").nth(1)?.split([',', ')']).next()?.to_string();
    Some((rank, seq, op))
}

fn watchdog_timeout(job: &Job) -> Vec<Finding> {
    let ws: Vec<&Warning> = warnings(job, "watchdog").collect();
    if ws.is_empty() {
        return Vec::new();
    }
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
    if let Some(n) = job.snap.nranks {
        let missing = ranks_missing(n, &waited);
        if !missing.is_empty() && waited.iter().any(|&r| r < n) {
            detail.push_str(&format!(
                " Ranks without a timeout line (did not arrive, or their output is missing): {}.",
                missing.join(", ")
            ));
        }
    }
    vec![finding(
        "watchdog_timeout",
        Severity::Error,
        "Collective timed out (watchdog)",
        detail,
        warning_refs(ws.into_iter()),
        "Find the rank that did not arrive (its stack: py-spy dump, or TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the flight \
         recorder); check that all ranks issue the same collectives in the same order, and look for an earlier WARN.",
    )]
}

fn nccl_errors(job: &Job) -> Vec<Finding> {
    let ws: Vec<&Warning> = job
        .snap
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

#[cfg(test)]
mod tests {
    use crate::{Options, Reader};
    use collscope_model::{Severity, Snapshot};

    fn read(lines: &[&str]) -> Snapshot {
        let mut r = Reader::new(Options::default());
        r.read_bytes("t.log", lines.join("\n").as_bytes());
        r.finish()
    }

    fn codes(s: &Snapshot) -> Vec<&str> {
        s.findings.iter().map(|f| f.code.as_str()).collect()
    }

    fn has(s: &Snapshot, code: &str) -> bool {
        s.findings.iter().any(|f| f.code == code && !f.evidence.is_empty() && !f.fix.is_empty())
    }

    #[test]
    fn every_rule_has_a_code_and_quiet_logs_have_no_findings() {
        assert_eq!(super::RULES.len(), 16);
        let s = read(&[
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
            "h:1:1 [0] NCCL INFO Connected all rings",
        ]);
        assert!(s.findings.is_empty(), "{:?}", codes(&s));
    }

    #[test]
    fn no_gdrdma_by_distance_module_and_unknown() {
        let net = "a:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0";
        let s = read(&["a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 5 > 4)", net]);
        assert!(has(&s, "no_gdrdma_distance"), "{:?}", codes(&s));
        let s = read(&["a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)", net]);
        assert!(has(&s, "no_gdrdma_no_module"), "{:?}", codes(&s));
        assert!(has(&read(&[net]), "no_gdrdma"));
        let gdr = "a:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA";
        assert!(!codes(&read(&[gdr])).iter().any(|c| c.starts_with("no_gdrdma")));
    }

    #[test]
    fn socket_where_ib_expected() {
        let s = read(&[
            "a:1:1 [0] NCCL INFO NET/IB : No device found.",
            "a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
        ]);
        let f = s.findings.iter().find(|f| f.code == "socket_not_ib").expect("finding");
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.detail.contains("no device"), "{}", f.detail);
    }

    #[test]
    fn suspicious_bootstrap_interface() {
        let s = read(&[
            "a:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>",
            "b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        ]);
        let f = s.findings.iter().find(|f| f.code == "bootstrap_interface").expect("finding");
        assert_eq!(f.severity, Severity::Error, "two hosts: docker0 breaks the job");
        assert!(!has(&read(&["a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"]), "bootstrap_interface"));
    }

    #[test]
    fn p2p_refused_so_shm() {
        let s = read(&[
            "a:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
            "a:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        ]);
        let f = s.findings.iter().find(|f| f.code == "p2p_refused_shm").expect("finding");
        assert!(f.detail.contains("NCCL_P2P_DISABLE"), "{}", f.detail);
    }

    #[test]
    fn ll128_disabled_by_path_type() {
        let s = read(&["a:1:1 [0] NCCL INFO Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no C2C link will be used by LL128."]);
        assert!(has(&s, "ll128_disabled"));
    }

    #[test]
    fn channels_forced_by_env() {
        let s = read(&["a:1:1 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 1."]);
        let f = s.findings.iter().find(|f| f.code == "channels_env").expect("finding");
        assert_eq!(f.severity, Severity::Warning);
        let s = read(&["a:1:1 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 4."]);
        assert_eq!(s.findings.iter().find(|f| f.code == "channels_env").map(|f| f.severity), Some(Severity::Info));
    }

    #[test]
    fn decision_that_is_not_the_table_minimum() {
        let table = [
            "a:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree",
            "a:1:1 [0] NCCL INFO Latency/AlgBw |    Tree/    LL |    Ring/    LL |",
            "a:1:1 [0] NCCL INFO     AllReduce |   50.0/   1.0 |    5.0/  10.0 |",
        ];
        let mut lines = table.to_vec();
        lines.push("a:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}");
        let s = read(&lines);
        let f = s.findings.iter().find(|f| f.code == "decision_not_table_min").expect("finding");
        assert!(f.detail.contains("NCCL_ALGO"), "{}", f.detail);
        lines.pop();
        lines.push("a:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..1}");
        assert!(!has(&read(&lines), "decision_not_table_min"));
    }

    #[test]
    fn search_fallback() {
        let s = read(&["a:1:1 [0] NCCL INFO Could not find a path for pattern 4, falling back to simple order"]);
        assert!(has(&s, "search_fallback"));
    }

    #[test]
    fn versions_differ_across_ranks() {
        let s = read(&[
            "a:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
            "b:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.2",
        ]);
        assert!(has(&s, "version_mismatch"));
        let same = read(&[
            "a:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error, NCCL version 2.18.1",
        ]);
        assert!(!has(&same, "version_mismatch"), "{:?}", codes(&same));
    }

    #[test]
    fn init_start_without_complete() {
        let start = |r: u32| {
            format!("a:{r}:1 [{r}] NCCL INFO ncclCommInitRank comm 0x{r}0 rank {r} nranks 3 cudaDev {r} nvmlDev {r} busId 1000 commId 0x99 - Init START")
        };
        let done = "a:0:1 [0] NCCL INFO ncclCommInitRank comm 0x00 rank 0 nranks 3 cudaDev 0 nvmlDev 0 busId 1000 commId 0x99 - Init COMPLETE";
        let (s0, s1) = (start(0), start(1));
        let s = read(&[&s0, &s1, done]);
        let f = s.findings.iter().find(|f| f.code == "init_hang").expect("finding");
        assert_eq!(f.severity, Severity::Error);
        assert!(f.detail.contains("Ranks 1 printed") && f.detail.contains("Ranks 2 of that"), "{}", f.detail);
    }

    #[test]
    fn ib_error_classes() {
        let s = read(&[
            "a:1:1 [0] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1",
            "a:1:1 [0] transport/net_ib.cc:1684 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<42> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1",
        ]);
        assert!(has(&s, "ib_error_ibv_modify_qp"), "{:?}", codes(&s));
        assert!(has(&s, "ib_error"), "{:?}", codes(&s));
    }

    #[test]
    fn shm_exhaustion_in_containers() {
        let s = read(&["a:1:1 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 5967872)"]);
        let f = s.findings.iter().find(|f| f.code == "shm_exhausted").expect("finding");
        assert!(f.fix.contains("--shm-size"));
    }

    #[test]
    fn socket_errors_say_which_kind() {
        let s = read(&["[0] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.0.0.2<30478> failed : Connection reset by peer"]);
        let f = s.findings.iter().find(|f| f.code == "socket_error").expect("finding");
        assert!(f.detail.contains("reset by peer"), "{}", f.detail);
    }

    #[test]
    fn cuda_out_of_memory() {
        let s = read(&["a:1:1 [0] enqueue.cc:1 NCCL WARN Cuda failure 'out of memory'"]);
        assert!(has(&s, "cuda_oom"));
        assert!(!has(&s, "nccl_error"), "OOM is reported once, as OOM");
    }

    #[test]
    fn watchdog_names_waiting_and_missing_ranks() {
        let s = read(&[
            "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
            "[rank0]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
            "[rank2]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
        ]);
        let f = s.findings.iter().find(|f| f.code == "watchdog_timeout").expect("finding");
        assert!(
            f.detail.contains("Ranks 0, 2 timed out") && f.detail.contains("output is missing): 1, 3"),
            "{}",
            f.detail
        );
    }

    #[test]
    fn nccl_and_proxy_errors() {
        let s = read(&["a:1:1 [0] proxy.cc:1 NCCL WARN Proxy Call to rank 3 failed (Setup)"]);
        let f = s.findings.iter().find(|f| f.code == "nccl_error").expect("finding");
        assert!(f.detail.contains("another rank failed first"), "{}", f.detail);
    }
}
