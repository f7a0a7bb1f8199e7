//! NCCL messages read without their `host:pid:tid [dev] NCCL INFO` prefix (issue 50 item 1): every fixture log
//! (tests/data, and the real logs in `../shared/fixtures/nccl-logs` when present) read again with the prefix
//! stripped from every line must give the facts that do not depend on the prefix; a bare excerpt is no "no NCCL
//! line"; ordinary program output is not taken for NCCL's.

use collscope_logreader::envelope::{self, Level, Line};
use collscope_logreader::{expect_nccl_lines, read_paths, Options, Reader};
use collscope_model::Snapshot;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn read(name: &str, text: &str) -> Snapshot {
    let mut r = Reader::new(Options::default());
    r.read_bytes(name, text.as_bytes());
    r.finish()
}

/// The line as a user pastes it: an INFO or TRACE message alone; a WARN keeps its `file:line NCCL WARN` (without
/// it nothing says the line is NCCL's warning); other lines as they are.
fn strip(line: &str) -> String {
    match envelope::split(line) {
        // Two records written into one line: their prefixes are what tell them apart.
        Line::Nccl(e) if envelope::has_marker(e.msg) => line.to_string(),
        Line::Nccl(e) if matches!(e.level, Level::Info | Level::Trace) => e.msg.to_string(),
        Line::Nccl(e) if e.level == Level::Warn => match e.location {
            Some(loc) => format!("{loc} NCCL WARN {}", e.msg),
            None => format!("NCCL WARN {}", e.msg),
        },
        _ => line.to_string(),
    }
}

fn set<T: Into<Value>>(items: impl IntoIterator<Item = T>) -> Value {
    let s: BTreeSet<String> = items.into_iter().map(|i| i.into().to_string()).collect();
    json!(s)
}

/// The facts a line says by itself, whoever printed it: what a stripped prefix cannot change.
fn facts(s: &Snapshot) -> BTreeMap<&'static str, Value> {
    let log = s.log.clone().unwrap_or_default();
    let inferred = |fact: &str| log.inferred.iter().any(|i| i.fact == fact);
    let mut f = BTreeMap::new();
    f.insert("version", json!(s.nccl_version));
    f.insert("versions", set(log.versions.iter().map(|(v, _)| json!(v))));
    f.insert("rccl", json!(log.rccl));
    f.insert("nranks printed", json!((!inferred("nranks")).then_some(s.nranks)));
    f.insert("nnodes printed", json!(s.communicators.iter().filter_map(|c| c.nnodes).max()));
    f.insert("network", json!(s.network));
    f.insert("rings", set(s.rings.iter().map(|r| json!((r.channel, &r.order, r.truncated)))));
    f.insert(
        "ring neighbours",
        set(s.rings.iter().flat_map(|r| r.neighbours.iter().map(move |n| json!((r.channel, n))))),
    );
    f.insert("trees", set(s.trees.iter().map(|t| json!((t.channel, t.rank, t.up, &t.down)))));
    f.insert(
        "connections",
        set(s.connections.iter().filter(|c| !c.inferred).map(|c| {
            json!((c.channel, c.src, c.dst, c.direction as u8, c.transport.to_string(), &c.mode, &c.net, c.gdrdma))
        })),
    );
    f.insert("decisions", set(s.decisions.iter().map(|d| json!((d.coll, d.bytes, d.algo, d.proto, d.n_channels)))));
    f.insert("unnamed decisions", set(log.unnamed_decisions.iter().map(|d| json!((d.bytes, d.algo, d.proto)))));
    f.insert("warnings", set(s.warnings.iter().map(|w| json!((&w.text, &w.class)))));
    f.insert("env", set(s.env.iter().map(|e| json!((&e.name, &e.value)))));
    f.insert("communicators", set(s.communicators.iter().map(|c| json!((&c.comm, c.rank, c.nranks)))));
    f.insert("net devices", set(s.net_devices.iter().map(|d| json!((&d.name, d.index, &d.link)))));
    f.insert("bootstrap", set(s.bootstrap.iter().map(|b| json!((&b.name, &b.address)))));
    f.insert("plugins", set(log.plugins.iter().map(|p| json!((&p.kind, &p.name, p.loaded)))));
    f.insert("gdr checks", set(log.gdr_checks.iter().map(|g| json!((g.enabled, &g.reason, g.distance, &g.hca)))));
    f.insert("channels", json!(s.channels));
    f.insert("thread thresholds", set(log.thread_thresholds.iter().map(|t| json!(t))));
    f.insert("connected rings", json!((log.ring_pxn, log.ring_gdr)));
    f.insert("tuning", json!(s.tuning));
    f.insert("graphs", json!(s.graphs.len()));
    f.insert("topology nodes", set(s.topology.iter().flat_map(|t| t.nodes.iter().map(|n| json!((n.kind, n.id))))));
    f
}

/// The facts of `path` read whole and read stripped: the differences.
fn differences(path: &Path) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let stripped: String = text.lines().map(|l| strip(l) + "\n").collect();
    let (whole, bare) = (read("whole", &text), read("bare", &stripped));
    let (a, b) = (facts(&whole), facts(&bare));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut out: Vec<String> =
        a.iter().filter(|(k, v)| b[*k] != **v).map(|(k, v)| format!("{name}: {k}: {v} != {}", b[k])).collect();
    let (w, s) = (whole.log.unwrap().stats, bare.log.unwrap().stats);
    if s.bare_lines == 0 && w.nccl_lines > w.bare_lines {
        out.push(format!("{name}: no bare line read of {} NCCL lines", w.nccl_lines));
    }
    out
}

fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn every_fixture_log_stripped_of_its_prefixes_gives_the_same_facts() {
    let mut logs = logs_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"));
    if let Some(dir) = collscope_testkit::fixtures("the real logs read without their prefixes") {
        logs.extend(logs_in(&dir));
    }
    assert!(logs.len() >= 16);
    let bad: Vec<String> = logs.iter().flat_map(|p| differences(p)).collect();
    assert!(bad.is_empty(), "{} differences:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn the_excerpts_users_paste_are_read() {
    let excerpts = [
        ("NCCL version 2.24.3+cuda12.2", "version"),
        ("NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v8)", "plugin"),
        ("Ring 00 : 6 -> 2 [receive] via NET/IB/0", "connection"),
        ("NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)", "gdr"),
        ("ncclCommInitRankConfig comm 0x55d3a0b0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x5e9f - Init START", "comm"),
        ("=== System : maxBw 24.0 totalBw 24.0 ===\nCPU/0-0 (1/1/143)\n+ PCI[24.0] - GPU/0-1b000 (0)\n==========", "topology"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (text, what) in excerpts {
        let path = dir.path().join(format!("{what}.txt"));
        std::fs::write(&path, format!("{text}\n")).unwrap();
        let paths = [path];
        let s = read_paths(&paths, Options { strict: true }).unwrap();
        expect_nccl_lines(&s, &paths).unwrap_or_else(|e| panic!("{what}: {e}"));
        let stats = &s.log.as_ref().unwrap().stats;
        assert_eq!(stats.bare_processes, 1, "{what}: one anonymous process");
        assert!(s.unparsed_nccl_lines.is_empty(), "{what}: {:?}", s.unparsed_nccl_lines);
        match what {
            "version" => assert_eq!(s.nccl_version.as_deref(), Some("2.24.3+cuda12.2")),
            "plugin" => assert!(s.log.as_ref().unwrap().plugins.iter().any(|p| p.loaded && p.kind == "net")),
            "connection" => {
                let c = &s.connections[0];
                assert_eq!((c.channel, c.src, c.dst, c.net.as_deref()), (0, 6, 2, Some("IB")));
            }
            "gdr" => assert!(s.log.as_ref().unwrap().gdr_checks.iter().any(|g| !g.enabled && g.distance == Some(3))),
            "comm" => assert_eq!((s.communicators[0].rank, s.communicators[0].nranks), (Some(0), Some(8))),
            "topology" => assert!(
                s.topology
                    .iter()
                    .any(|t| t.nodes.iter().any(|n| n.gpu.as_ref().is_some_and(|g| g.rank == Some(0)))
                        && t.links.len() == 2),
                "{:?}",
                s.topology
            ),
            _ => unreachable!(),
        }
    }
}

#[test]
fn program_output_is_not_taken_for_nccl_messages() {
    let text = "Setting affinity for GPU 0 to ffff\n\
                ==========\n\
                Loading checkpoint shards: 100%|##########| 4/4\n\
                #  size  count  type  redop  root  time  algbw  busbw\n\
                    8    2  float  sum  -1  10.2  0.00  0.00  0\n\
                Tuner ready\n\
                main.c:12 -> 3\n\
                | a | b |\n";
    let s = read("out.log", text);
    let stats = &s.log.as_ref().unwrap().stats;
    assert_eq!((stats.nccl_lines, stats.bare_lines), (0, 0), "{stats:?}");
}

#[test]
fn each_stretch_of_bare_lines_is_one_anonymous_process_tied_to_no_rank() {
    let text = "comm 0x1 rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 3 MNNVL 0\n\
                Setting affinity for GPU 3 to ffff\n\
                host1:10:11 [0] NCCL INFO comm 0x2 rank 4 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0\n\
                NCCL_IB_HCA set to mlx5_0\n\
                NCCL_SOCKET_IFNAME set to eth0\n";
    let s = read("mixed.log", text);
    let stats = &s.log.as_ref().unwrap().stats;
    // The weak `Setting affinity` line follows a bare message: read as one.
    assert_eq!((stats.bare_lines, stats.bare_processes, stats.nccl_lines), (4, 2, 5), "{stats:?}");
    // The bare env lines are not the prefixed rank 4's: nothing says who printed them.
    assert!(s.env.iter().all(|e| e.rank.is_none()), "{:?}", s.env);
    assert_eq!(s.hosts, ["host1"]);
}

#[test]
fn a_bare_line_between_every_two_prefixed_ones_keeps_the_thread_table_bounded() {
    let text = "h:1:2 [0] NCCL INFO Connected all trees\nNCCL version 2.5.6+cuda10.2\n".repeat(70_000);
    let s = read("many.log", &text);
    let log = s.log.unwrap();
    assert_eq!(log.stats.bare_processes, 70_000);
    // Past 65,536 printing threads a warning would say so: every stretch's thread went when it ended.
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}
