//! Each kind of input of issue 17 on its fixture log (tests/data, written in the grammar of the NCCL or RCCL
//! release its name gives): what the reader must get out of it.

use collscope_logreader::{Options, Reader};
use collscope_model::Transport;
use serde_json::Value;
use std::path::Path;

/// The model read from `tests/data/NAME.log`, as JSON.
fn read(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(format!("{name}.log"));
    let mut r = Reader::new(Options { strict: true });
    r.read_bytes(name, &std::fs::read(&path).unwrap());
    serde_json::to_value(r.finish()).unwrap()
}

fn inferred<'a>(s: &'a Value, fact: &str) -> Option<&'a str> {
    s["log"]["inferred"].as_array()?.iter().find(|i| i["fact"] == fact)?["reason"].as_str()
}

#[test]
fn item1_tuning_tables_cut_old_and_in_blocks() {
    let s = read("tuning_2.28_cut");
    let why = inferred(&s, "tuning.columns").expect("the columns are said to be inferred");
    assert!(why.contains("fixed order"), "{why}");
    // NVLS has no bandwidth on this machine; its latency is kept.
    let nvls = &s["tuning"]["AllReduce"]["NVLS"]["LL"];
    assert_eq!((nvls["lat_us"].as_f64(), nvls["bw_gbps"].as_f64()), (Some(25.0), Some(0.0)), "{nvls}");
    let s = read("tuning_2.12_old");
    assert_eq!(s["log"]["max_threads"]["Tree"]["LL128"], 640);
    assert!(s["tuning"]["AllReduce"]["Ring"]["Simple"]["bw_gbps"].as_f64().is_some());
    let s = read("tuning_2.19_blocks");
    assert!(s["tuning"]["AllReduce"]["NVLSTree"].is_object(), "the second block's columns");
    assert!(s["tuning"]["AllReduce"]["Tree"].is_object());
}

#[test]
fn item2_topology_prints_per_node() {
    let s = read("init_2x2_2.28");
    let topo = s["topology"].as_array().unwrap();
    assert_eq!(topo.len(), 2, "one topology per node");
    for t in topo {
        assert!(t["nodes"].as_array().unwrap().len() >= 5, "{t}");
        assert!(!t["links"].as_array().unwrap().is_empty() && !t["paths"].as_array().unwrap().is_empty());
    }
    assert_eq!(s["network"], "IB");
    let t = &read("topology_2.12")["topology"][0];
    assert!(!t["links"].as_array().unwrap().is_empty() && !t["paths"].as_array().unwrap().is_empty());
}

#[test]
fn item3_graphs_of_different_nodes_kept_apart() {
    let s = read("init_2x2_2.28");
    let graphs = s["graphs"].as_array().unwrap();
    let hosts: std::collections::BTreeSet<&str> = graphs.iter().filter_map(|g| g["host"].as_str()).collect();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    assert_eq!(graphs.len(), 6, "ring, balanced tree and tree of each node");
}

#[test]
fn item4_job_size_only_from_what_the_log_says() {
    let s = read("excerpt_one_rank_2.21");
    assert!(s["nranks"].is_null() && s["nnodes"].is_null(), "one rank's lines say nothing of the job's size");
    let s = read("comms_split_2.23");
    let sizes: std::collections::BTreeSet<u64> =
        s["communicators"].as_array().unwrap().iter().filter_map(|c| c["nranks"].as_u64()).collect();
    assert_eq!(sizes, [2, 4].into(), "the world and its split are separate communicators");
    assert_eq!(s["nranks"], 4);
    // Two ranks' proxy threads on one host: no line says how large the job is, nor that no other node ran.
    let s = read("proxy_2.28");
    assert!(s["nranks"].is_null() && s["nnodes"].is_null(), "nranks {} nnodes {}", s["nranks"], s["nnodes"]);
    // `nranks 2` printed, and ranks 0 and 1 print on one host: one node, said to be concluded and why.
    let s = read("ops_srun_2.28");
    assert_eq!((&s["nranks"], &s["nnodes"]), (&2.into(), &1.into()));
    let why = inferred(&s, "nnodes").expect("one node is concluded, not printed");
    assert!(why.contains("2 ranks and 2 devices of one host print"), "{why}");
}

#[test]
fn item5_ops_behind_launcher_prefixes_and_numeric_decisions() {
    let s = read("ops_srun_2.28");
    assert_eq!(s["ops"].as_array().unwrap().len(), 128, "a bounded history");
    assert_eq!(s["log"]["stats"]["dropped_ops"], 72, "with a count of what it dropped");
    let s = read("ops_pdsh_ts_2.28");
    assert_eq!(s["ops"].as_array().unwrap().len(), 12);
    assert_eq!(s["hosts"], serde_json::json!(["sx-03", "sx-04"]), "pdsh's `host: ` and timestamps are not hosts");
    let s = read("tuning_2.21_numeric");
    let d = &s["log"]["unnamed_decisions"][0];
    assert_eq!((d["bytes"].as_u64(), d["algo"].as_str(), d["proto"].as_str()), (Some(8), Some("Ring"), Some("LL")));
}

#[test]
fn item6_spliced_lines_give_both_records() {
    let s = read("interleaved_2.18");
    assert_eq!(s["connections"].as_array().unwrap().len(), 4);
    assert_eq!(s["hosts"], serde_json::json!(["hx"]), "a progress bar glued to the host is not part of it");
    assert!(s["log"]["stats"]["garbled_lines"].as_u64().unwrap() > 0);
}

#[test]
fn item7_rccl_dialect() {
    let s = read("rccl_2.20");
    assert_eq!(s["log"]["rccl"], true);
    assert_eq!(s["nranks"], 16);
    assert!(!s["connections"].as_array().unwrap().is_empty());
    assert_eq!(s["channels"]["coll"], 2);
}

#[test]
fn item8_plugins_by_kind_with_versions() {
    let s = read("plugins_sharp_2.19");
    let plugins = s["log"]["plugins"].as_array().unwrap();
    let has = |kind: &str, name: &str, version: Option<u64>| {
        plugins.iter().any(|p| p["kind"] == kind && p["name"] == name && p["version"].as_u64() == version)
    };
    assert!(has("net", "IBext", Some(6)) && has("collnet", "SHARP", Some(6)) && has("tuner", "nvidia-tuner", None));
    assert_eq!(read("plugins_ofi_2.23")["log"]["nvls_used"], true);
}

#[test]
fn item9_no_gdrdma_quotes_the_reason_the_log_gives() {
    let s = read("plugins_ofi_2.23");
    let f = s["findings"].as_array().unwrap().iter().find(|f| f["code"] == "no_gdrdma_reported").expect("finding");
    assert!(f["detail"].as_str().unwrap().contains("disabling GDR"), "{f}");
    assert!(f["evidence"].as_array().unwrap().iter().any(|l| l["text"].as_str().unwrap().ends_with("disabling GDR")));
}

/// Issue 49: ring edges no connection line covers get a connection inferred from the hosts, marked so.
#[test]
fn ring_edges_without_connection_lines_are_inferred() {
    let mut log = String::from("gpu-a:100:100 [0] NCCL INFO Using network IB\n");
    for (rank, host, dev) in [(0, "gpu-a", 0), (1, "gpu-a", 1), (2, "gpu-b", 0), (3, "gpu-b", 1)] {
        let (pid, comm) = (100 + rank, 0x10 + rank);
        log += &format!(
            "{host}:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRankConfig comm 0x{comm:x} rank {rank} nranks 4 \
             cudaDev {dev} nvmlDev {dev} busId 1b000 commId 0x6b1f - Init START\n"
        );
    }
    log += "gpu-a:100:100 [0] NCCL INFO Channel 00/03 :    0   1   2   3\n\
            gpu-a:100:100 [0] NCCL INFO Channel 01/03 :    0   1   2   3\n\
            gpu-a:100:100 [0] NCCL INFO Channel 02/03 :    1   0   3   2\n\
            gpu-a:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
            gpu-b:102:102 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/CUMEM/read\n";
    let mut r = Reader::new(Options { strict: true });
    r.read_bytes("two_hosts", log.as_bytes());
    // What is read so far, for a follower, holds the printed lines only (its connections only grow).
    assert_eq!(r.snapshot().connections.iter().map(|c| c.inferred).collect::<Vec<_>>(), [false, false]);
    let s = r.finish();
    let edge = |ch: u32, src: u32, dst: u32| {
        let c: Vec<_> = s.connections.iter().filter(|c| (c.channel, c.src, c.dst) == (ch, src, dst)).collect();
        assert!(c.len() <= 1, "one connection per edge: {c:?}");
        c.first().map(|c| (c.transport, c.mode.clone(), c.inferred))
    };
    let p2p = |inferred| Some((Transport::P2p, Some("CUMEM/read".to_string()), inferred));
    let net = Some((Transport::Net, Some("IB".to_string()), true));
    for ch in [0, 1] {
        assert_eq!(edge(ch, 1, 2), net, "channel {ch}: between hosts is NET, inferred");
        assert_eq!(edge(ch, 3, 0), net, "channel {ch}");
    }
    // Printed lines stay as printed; the same pair on another channel takes their kind, inferred.
    assert_eq!((edge(0, 0, 1), edge(0, 2, 3)), (p2p(false), p2p(false)));
    assert_eq!((edge(1, 0, 1), edge(1, 2, 3)), (p2p(true), p2p(true)));
    // Within a host with nothing said of the pair: unknown (P2P or SHM cannot be told).
    assert_eq!((edge(2, 1, 0), edge(2, 3, 2)), (None, None));
    assert_eq!((edge(2, 0, 3), edge(2, 2, 1)), (net.clone(), net));
    let why = s.log.as_ref().and_then(|l| l.inferred.iter().find(|i| i.fact == "connections"));
    assert!(why.is_some_and(|i| i.value == "8" && i.reason.contains("over IB")), "{why:?}");
}
/// Issue 49 on a real NCCL 2.5 log without hosts (one rank's print of 16 ranks on 2 nodes): P2P, SHM and the NET
/// receive from 15 put ranks 0..7 on one whole node, so 7 -> 8 leaves it and is NET, inferred; 8 -> 9 stays unknown.
#[test]
fn a_ring_edge_leaving_a_whole_node_is_inferred_net() {
    let Some(dir) = collscope_testkit::fixtures("issue 49's real log") else { return };
    let s = collscope_logreader::read_paths(&[dir.join("007_nccl-392.log")], Options { strict: false }).unwrap();
    let edge = |ch: u32, src: u32, dst: u32| s.connections.iter().find(|c| (c.channel, c.src, c.dst) == (ch, src, dst));
    for ch in [0, 1] {
        let c = edge(ch, 7, 8).expect("7 -> 8 inferred");
        assert_eq!((c.transport, c.net.as_deref(), c.inferred), (Transport::Net, Some("IB"), true), "{c:?}");
        assert!(edge(ch, 8, 9).is_none());
        assert!(edge(ch, 15, 0).is_some_and(|c| !c.inferred), "the printed line stays");
    }
}
