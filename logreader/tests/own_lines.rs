//! The init and call lines `collscope_model::lines` writes (for the runtime and the NCCL model) read back
//! through the log reader's dispatch (`message::parse`, a `Reader` for the table) into the values they were
//! written from: the parsers are the model's, beside the formatters; these check the reader reaches them.

use collscope_logreader::message::{parse, CommInfo, CommInit, DecisionLine, Event};
use collscope_model::lines::{
    channel_counts_line, comm_info_line, connected_rings_line, decision_line, graph_line, init_complete_line,
    init_timings_line, tuning_table_lines, INIT_PHASES,
};
use collscope_model::{Algorithm, ChannelCounts, Collective, Graph, InitTimings, PathType, Pattern, Protocol};

#[test]
fn comm_info_reads_back() {
    let line = comm_info_line("0x7f3a", 3, 8, 2, 4, 1);
    assert_eq!(line, "comm 0x7f3a rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 1 MNNVL 0");
    let Some(Event::CommInfo(c)) = parse(&line) else { panic!("{line}") };
    let want = CommInfo { comm: "0x7f3a".into(), rank: 3, nranks: 8, nnodes: 2, local_ranks: 4, local_rank: 1 };
    assert_eq!(c, want);
}

#[test]
fn graph_and_channel_counts_read_back() {
    let g = Graph {
        pattern: Pattern::BalancedTree,
        n_channels: 2,
        bw_intra: 6.5,
        bw_inter: 1.25,
        type_intra: PathType::LOC,
        type_inter: PathType::NET,
        same_channels: true,
        cross_nic: 0,
        channels: vec![],
        host: None,
    };
    let line = graph_line(&g);
    assert_eq!(line, "Pattern 1, crossNic 0, nChannels 2, bw 6.500000/1.250000, type LOC/NET, sameChannels 1");
    assert!(matches!(parse(&line), Some(Event::Graph(back)) if back == g), "{line}");

    let counts = ChannelCounts { coll: Some(2), collnet: Some(0), nvls: Some(0), p2p: Some(1), p2p_per_peer: Some(1) };
    let line = channel_counts_line(&counts);
    assert_eq!(line, "2 coll channels, 0 collnet channels, 0 nvls channels, 1 p2p channels, 1 p2p channels per peer");
    assert!(matches!(parse(&line), Some(Event::ChannelCounts(back)) if back == counts), "{line}");
}

#[test]
fn init_complete_and_timings_read_back() {
    let line = init_complete_line("0x7f3a", 1, 2, 0, 0x1b000, 0xabc);
    assert_eq!(
        line,
        "ncclCommInitRank comm 0x7f3a rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init COMPLETE"
    );
    let Some(Event::CommInit(c)) = parse(&line) else { panic!("{line}") };
    let want = CommInit {
        comm: "0x7f3a".into(),
        rank: 1,
        nranks: 2,
        cuda_dev: 0,
        bus_id: Some("1b000".into()),
        comm_id: Some("0xabc".into()),
        parent: None,
        complete: true,
    };
    assert_eq!(c, want);

    let t = InitTimings { total: Some(0.5), phases: vec![("topo".into(), 0.25), ("allgathers".into(), 0.125)] };
    let line = init_timings_line(1, 2, &t);
    assert_eq!(
        line,
        "Init timings - ncclCommInitRank: rank 1 nranks 2 total 0.50 (kernels 0.00, alloc 0.00, bootstrap 0.00, \
         allgathers 0.12, topo 0.25, graphs 0.00, connections 0.00, rest 0.12)"
    );
    let Some(Event::InitTimings { rank, nranks, total, phases }) = parse(&line) else { panic!("{line}") };
    assert_eq!((rank, nranks, total), (1, 2, 0.5));
    let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [&INIT_PHASES[..], &["rest"]].concat());
    assert_eq!(phases[4], ("topo".to_string(), 0.25));
}

#[test]
fn decisions_read_back_for_every_algorithm_and_protocol() {
    for algo in Algorithm::ALL {
        for proto in Protocol::ALL {
            let line = decision_line(Collective::AllGather, 65536, *algo, *proto, (2, 5));
            let Some(Event::Decision(d)) = parse(&line) else { panic!("{line}") };
            let want = DecisionLine {
                coll: Some(Collective::AllGather),
                bytes: 65536,
                algo: *algo,
                proto: *proto,
                n_channels: Some(4),
                time_us: None,
            };
            assert_eq!(d, want, "{line}");
        }
    }
    assert_eq!(
        decision_line(Collective::AllReduce, 1048576, Algorithm::Ring, Protocol::Simple, (0, 1)),
        "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}"
    );
}

#[test]
fn connected_rings_reads_back() {
    for (pxn, gdr) in [(false, false), (false, true), (true, true)] {
        let line = connected_rings_line(pxn, gdr);
        let Some(Event::ConnectedRings { pxn: p, gdr: g }) = parse(&line) else { panic!("{line}") };
        assert_eq!((p, g), (Some(pxn), Some(gdr)), "{line}");
    }
    assert_eq!(connected_rings_line(true, false), "Connected all rings, use ring PXN 1 GDR 0");
}

#[test]
fn the_tuning_table_reads_back_cell_by_cell() {
    // Every cell distinct: (lat, bw) from its place; bandwidth 0 (a cell that is off) for NVLS.
    let cell = |ci: usize, a: Algorithm, p: Protocol| {
        let lat = (ci * 100 + a.id() * 10 + p.id()) as f64 + 0.5;
        (lat, if a == Algorithm::Nvls { 0.0 } else { lat + 1.0 })
    };
    let origin = collscope_debug::Origin { host: "node0".into(), pid: 7 };
    let text: Vec<String> = tuning_table_lines(|a, _| 64 * (a.id() as u32 + 1), cell)
        .iter()
        .map(|l| collscope_debug::format_line(collscope_debug::Level::Info, &origin, 7, 0, ("t.rs", 1), None, 0.0, l))
        .collect();
    assert_eq!(text.len(), 3 * (3 + Collective::TUNED.len()), "three blocks of headers, threads and rows");
    let mut reader = collscope_logreader::Reader::new(collscope_logreader::Options { strict: true });
    reader.read_bytes("table.log", text.join("\n").as_bytes());
    let s = reader.finish();
    assert!(s.unparsed_nccl_lines.is_empty(), "{:?}", s.unparsed_nccl_lines);
    for (ci, coll) in Collective::TUNED.iter().enumerate() {
        for &a in Algorithm::NCCL {
            for &p in Protocol::ALL {
                let (lat, bw) = cell(ci, a, p);
                let got = s.tuning.get(coll).and_then(|t| t.get(&a)).and_then(|t| t.get(&p));
                if bw > 0.0 {
                    let got = got.unwrap_or_else(|| panic!("{coll:?} {a:?} {p:?} missing"));
                    assert_eq!((got.lat_us, got.bw_gbps), (lat, bw), "{coll:?} {a:?} {p:?}");
                } else {
                    assert!(got.is_none_or(|c| c.bw_gbps == 0.0), "{coll:?} {a:?} {p:?}: {got:?}");
                }
            }
        }
    }
}

#[test]
fn channel_counts_from_two_ranks_fold_as_a_live_jobs_do() {
    // Rank 0 prints NCCL 2.28.9's five counts, rank 1 an older line with three, larger where both print one.
    let r0 = ChannelCounts { coll: Some(2), collnet: Some(2), nvls: Some(0), p2p: Some(2), p2p_per_peer: Some(2) };
    let r1 = ChannelCounts { coll: Some(4), p2p: Some(1), p2p_per_peer: Some(1), ..ChannelCounts::default() };
    let line = |pid, dev, c: &ChannelCounts| {
        let origin = collscope_debug::Origin { host: "node0".into(), pid };
        let msg = if c.nvls.is_some() {
            channel_counts_line(c)
        } else {
            format!("{} coll channels, {} p2p channels, {} p2p channels per peer", c.coll.unwrap(), c.p2p.unwrap(), 1)
        };
        collscope_debug::format_line(collscope_debug::Level::Info, &origin, pid, dev, ("init.cc", 1), None, 0.0, &msg)
    };
    let text = [line(7, 0, &r0), line(8, 1, &r1)].join("\n");
    let mut reader = collscope_logreader::Reader::new(collscope_logreader::Options { strict: true });
    reader.read_bytes("counts.log", text.as_bytes());
    let s = reader.finish();

    let mut live = collscope_model::Snapshot::new(collscope_model::Source::Runtime);
    for channels in [r0, r1] {
        let facts = collscope_model::InitFacts { channels, ..Default::default() };
        live.apply(&collscope_model::Event::InitFacts(Box::new(facts)));
    }
    assert_eq!(s.channels, live.channels);
    assert_eq!(s.channels.coll, Some(4), "the largest of the two ranks'");
    assert_eq!(s.channels.collnet, Some(2), "printed by rank 0 alone");
}
