//! Lines printed by collscope's own logger (`collscope_debug::format_line`, NCCL's exact formats) read back
//! into the model: what the runtime and `topo explain --log` print.

use collscope_debug::{format_line, version_string, Level, Origin};
use collscope_logreader::{Options, Reader};
use collscope_model::{Algorithm, Collective, Direction, Pattern, Protocol, Transport};

fn line(level: Level, rank: u32, msg: &str) -> String {
    let origin = Origin { host: format!("node{}", rank / 2), pid: 1000 + rank };
    let ts = (level == Level::Warn).then_some("[2026-12-01 10:00:00] ");
    format_line(level, &origin, 2000 + rank, (rank % 2) as i32, ("transport.rs", 88), ts, 12.5, msg)
}

#[test]
fn runtime_and_explain_lines_read_back() {
    let mut log = vec![line(Level::Version, 0, &version_string())];
    for msg in [
        "=== System : maxBw 24.0 totalBw 24.0 ===",
        "CPU/0-0 (1/1/1)",
        "+ PCI[24.0] - GPU/0-1b000 (0)",
        "GPU/0-1b000 :GPU/0-1b000 (0/5000.0/LOC) CPU/0-0 (1/24.0/PHB) ",
    ] {
        log.push(line(Level::Info, 0, msg));
    }
    for r in 0..4u32 {
        let (next, prev, dev) = ((r + 1) % 4, (r + 3) % 4, r % 2);
        log.push(line(Level::Info, r, "Bootstrap: Using eth0:10.0.0.1<0>"));
        log.push(line(Level::Info, r, "NET/Socket : Using [0]eth0:10.0.0.1<0>"));
        log.push(line(Level::Info, r, "Using network Socket"));
        log.push(line(Level::Info, r, &format!("ncclCommInitRank comm 0x{r}a rank {r} nranks 4 cudaDev {dev} nvmlDev {dev} busId 0 commId 0x77 - Init START")));
        log.push(line(
            Level::Info,
            r,
            &format!("comm 0x{r}a rank {r} nRanks 4 nNodes 2 localRanks 2 localRank {dev} MNNVL 0"),
        ));
        log.push(line(
            Level::Info,
            r,
            "Pattern 4, crossNic 0, nChannels 2, bw 10.000000/10.000000, type LOC/NET, sameChannels 1",
        ));
        log.push(line(Level::Info, r, "Channel 00/02 :    0   1   2   3"));
        log.push(line(Level::Info, r, &format!("Ring 00 : {prev} -> {r} -> {next}")));
        log.push(line(Level::Info, r, &format!("Trees [0] {next}/-1/-1->{r}->{prev}")));
        if r % 2 == 0 {
            log.push(line(Level::Info, r, &format!("Channel 00/0 : {r}[{dev}] -> {next}[1] via SHM/direct/direct")));
        } else {
            log.push(line(Level::Info, r, &format!("Channel 00/0 : {r}[{dev}] -> {next}[0] [send] via NET/Socket/0")));
            log.push(line(
                Level::Info,
                r,
                &format!("Channel 00/0 : {prev}[0] -> {r}[{dev}] [receive] via NET/Socket/0"),
            ));
        }
        log.push(line(
            Level::Info,
            r,
            "2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 1 p2p channels per peer",
        ));
        log.push(line(Level::Info, r, "Connected all rings, use ring PXN 0 GDR 0"));
        log.push(line(Level::Info, r, &format!("ncclCommInitRank comm 0x{r}a rank {r} nranks 4 cudaDev {dev} nvmlDev {dev} busId 0 commId 0x77 - Init COMPLETE")));
        log.push(line(Level::Info, r, &format!("Init timings - ncclCommInitRank: rank {r} nranks 4 total 0.50 (kernels 0.10, alloc 0.00, bootstrap 0.20, allgathers 0.00, topo 0.10, graphs 0.00, connections 0.10, rest 0.00)")));
    }
    // The tuning block `topo explain --log` and rank 0 print: the newer table layout, matrix and thresholds.
    log.push(line(Level::Info, 0, "Enabled NCCL Func/Proto/Algo Matrix:\n     Function |       LL     LL128    Simple   |          Tree           Ring  CollNetDirect   CollNetChain           NVLS       NVLSTree            PAT  \n    AllReduce |        1         0         1   |             1              1              0              0              0              0              0  "));
    log.push(line(
        Level::Info,
        0,
        &format!(
            "  Algorithm   |{}",
            format!(" {:>14}   {:>14}   {:>14} |", "", "Tree", "")
                + &format!(" {:>14}   {:>14}   {:>14} |", "", "Ring", "")
        ),
    ));
    log.push(line(Level::Info, 0, "  Protocol    |             LL |          LL128 |         Simple |             LL |          LL128 |         Simple |"));
    log.push(line(Level::Info, 0, " Max NThreads |            512 |            640 |            512 |            512 |            640 |            512 |"));
    log.push(line(
        Level::Info,
        0,
        &format!(
            "{:>13} |{:8.1}/{:6.1} |{:8.1}/{:6.1} |{:8.1}/{:6.1} |{:8.1}/{:6.1} |{:8.1}/{:6.1} |{:8.1}/{:6.1} |",
            "AllReduce", 10.0, 2.5, 0.0, 0.0, 30.0, 5.0, 8.0, 2.0, 0.0, 0.0, 25.0, 6.0
        ),
    ));
    log.push(line(Level::Info, 0, "threadThresholds 8/8/64 | 16/8/64 | 512 | 512"));
    log.push(line(Level::Info, 0, "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}"));
    log.push(line(Level::Info, 0, "AllReduce: opCount 3 sendbuff 0x1 recvbuff 0x2 count 262144 datatype 7 op 0 root 0 comm 0x0a [nranks=4] stream 0x3"));
    log.push(line(Level::Trace, 0, "1048576 Bytes -> Algo 1 proto 2 time 180.500000"));
    log.push(line(Level::Warn, 3, "Net : Call to recv from 10.0.0.2<4242> failed : Connection refused"));
    let text = log.join("\n");

    let mut reader = Reader::new(Options { strict: true });
    reader.read_bytes("own.log", text.as_bytes());
    let s = reader.finish();
    let unparsed: Vec<&str> = s.unparsed_nccl_lines.iter().map(|l| l.text.as_str()).collect();
    assert!(unparsed.is_empty(), "{unparsed:#?}");
    assert_eq!(s.nccl_version.as_deref(), Some(version_string().trim_start_matches("NCCL version ")));
    assert_eq!((s.nranks, s.nnodes, s.network.as_deref()), (Some(4), Some(2), Some("Socket")));
    assert_eq!(s.hosts, vec!["node0", "node1"]);
    assert_eq!(s.communicators.len(), 4);
    assert!(s.communicators.iter().all(|c| c.state == collscope_model::CommState::Ready && c.init.total == Some(0.5)));
    let topo = &s.topology[0];
    assert_eq!((topo.host.as_deref(), topo.max_bw, topo.nodes.len()), (Some("node0"), 24.0, 2));
    assert_eq!(topo.nodes[1].name(), "GPU/0-1b000");
    assert_eq!(topo.paths.len(), 2);
    assert_eq!(topo.path(1, 0).map(|p| (p.kind, p.bw, p.hops)), Some((collscope_model::PathType::PHB, 24.0, 1)));
    // Each node searches its own graphs: the same graph from two hosts is two graphs.
    let hosts: Vec<_> = s.graphs.iter().map(|g| (g.pattern, g.host.as_deref())).collect();
    assert_eq!(hosts, vec![(Pattern::Ring, Some("node0")), (Pattern::Ring, Some("node1"))]);
    assert_eq!(s.rings[0].order, vec![0, 1, 2, 3]);
    assert_eq!(s.rings[0].neighbours.len(), 4);
    assert_eq!(s.trees.len(), 4);
    assert_eq!(s.connections.iter().filter(|c| c.transport == Transport::Shm).count(), 2);
    let sends: Vec<_> = s.connections.iter().filter(|c| c.direction == Direction::Send).collect();
    assert_eq!(sends.len(), 2);
    assert!(sends.iter().all(|c| c.net.as_deref() == Some("Socket") && c.gdrdma == Some(false) && c.comm.is_some()));
    assert_eq!(s.channels.coll, Some(2));
    let ar = &s.tuning[&Collective::AllReduce];
    assert_eq!(ar[&Algorithm::Ring][&Protocol::Simple].bw_gbps, 6.0);
    assert!(!ar[&Algorithm::Tree].contains_key(&Protocol::Ll128), "0/0 cells are left out");
    let log = s.log.as_ref().unwrap();
    assert_eq!(
        log.disabled,
        vec![
            "AllReduce/LL128",
            "AllReduce/CollNetDirect",
            "AllReduce/CollNetChain",
            "AllReduce/NVLS",
            "AllReduce/NVLSTree",
            "AllReduce/PAT"
        ]
    );
    assert_eq!(log.thread_thresholds, vec!["8/8/64 | 16/8/64 | 512 | 512"]);
    assert_eq!(s.decisions.len(), 1, "{:?}", s.decisions);
    assert_eq!(
        (s.decisions[0].algo, s.decisions[0].proto, s.decisions[0].n_channels),
        (Algorithm::Ring, Protocol::Simple, 2)
    );
    assert_eq!(s.decisions[0].time_us, Some(180.5), "the TRACE line (collective from the COLL line) adds its time");
    assert_eq!(s.ops.len(), 1);
    assert_eq!((s.ops[0].seq, s.ops[0].bytes), (3, 1048576));
    assert_eq!(s.warnings.len(), 1);
    assert_eq!((s.warnings[0].class.as_str(), s.warnings[0].source.as_deref()), ("socket", Some("transport.rs:88")));
    assert!(s.findings.iter().any(|f| f.code == "socket_error"));
}
