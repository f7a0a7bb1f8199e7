//! A constructed job for view tests: 8 ranks on 2 hosts, 2 ring channels with P2P, SHM and NET edges (with and
//! without GDRDMA), trees, a tuning table, decisions, operations, proxy progress and findings.

use crate::traffic::EdgeKey;
use collscope_model::*;

pub(crate) fn op(seq: u64, coll: Collective, bytes: u64, algo: Algorithm, proto: Protocol, state: OpState) -> OpRecord {
    let done = state == OpState::Completed;
    OpRecord {
        comm: Some("0x1".into()),
        rank: 0,
        seq,
        coll,
        count: bytes / 4,
        datatype: DataType::F32,
        op: Some(RedOp::Sum),
        root: None,
        peer: None,
        bytes,
        algo: Some(algo),
        proto: Some(proto),
        n_channels: Some(2),
        state,
        enqueued_us: Some(1_000_000 + seq * 1000),
        started_us: Some(1_000_010 + seq * 1000),
        completed_us: done.then_some(1_000_500 + seq * 1000),
        duration_us: done.then_some(490.0),
        algbw_gbps: done.then_some(bytes as f64 / 490e3),
        busbw_gbps: done.then_some(bytes as f64 / 490e3 * 1.75),
    }
}

fn conn(channel: u32, src: u32, dst: u32, transport: Transport, mode: &str, gdr: Option<bool>) -> Connection {
    let net = (transport == Transport::Net).then(|| "IB".to_string());
    Connection {
        channel,
        src,
        dst,
        direction: if transport == Transport::Net { Direction::Send } else { Direction::Both },
        transport,
        mode: Some(mode.into()),
        net,
        device: (transport == Transport::Net).then_some(mode.trim_start_matches("IB/").parse().unwrap_or(0)),
        nic: None,
        gdrdma: gdr,
        proxy_rank: None,
        shared: false,
        comm: Some("0x1".into()),
        inferred: false,
    }
}

fn tree(channel: u32, rank: u32, up: i32, down: &[i32]) -> Tree {
    Tree { channel, rank, up, down: down.to_vec() }
}

pub(crate) fn snapshot() -> Snapshot {
    let mut s = Snapshot::new(Source::Log { files: vec!["job.log".into()] });
    s.nccl_version = Some("2.28.9+cuda12.9".into());
    s.nranks = Some(8);
    s.nnodes = Some(2);
    s.network = Some("IB".into());
    s.hosts = vec!["node-a".into(), "node-b".into()];
    s.net_devices = vec![
        NetDevice { index: 0, name: "mlx5_0".into(), port: Some(1), link: Some("IB".into()), host: None },
        NetDevice { index: 1, name: "mlx5_1".into(), port: Some(1), link: Some("RoCE".into()), host: None },
    ];
    s.bootstrap =
        vec![BootstrapInterface { name: "eth0".into(), address: "10.0.0.1<0>".into(), host: None, rank: None }];
    for rank in 0..8u32 {
        s.communicators.push(Communicator {
            comm: Some("0x1".into()),
            rank: Some(rank),
            nranks: Some(8),
            nnodes: Some(2),
            host: Some(if rank < 4 { "node-a" } else { "node-b" }.into()),
            cuda_dev: Some((rank % 4) as i32),
            state: CommState::Ready,
            init: InitTimings {
                total: Some(1.25 + rank as f64 * 0.01),
                phases: vec![("bootstrap".into(), 0.4), ("topo".into(), 0.3), ("connections".into(), 0.5)],
            },
            ..Communicator::default()
        });
    }
    s.channels = ChannelCounts { coll: Some(2), p2p: Some(8), p2p_per_peer: Some(2), ..ChannelCounts::default() };
    s.graphs.push(Graph {
        pattern: Pattern::Ring,
        n_channels: 2,
        bw_intra: 20.0,
        bw_inter: 20.0,
        type_intra: PathType::NVL,
        type_inter: PathType::PIX,
        same_channels: true,
        cross_nic: 0,
        channels: Vec::new(),
        host: None,
    });
    s.rings = vec![
        Ring { channel: 0, order: (0..8).collect(), truncated: false, neighbours: Vec::new() },
        Ring { channel: 1, order: (0..8).rev().collect(), truncated: false, neighbours: Vec::new() },
    ];
    use Transport::{Net, P2p, Shm};
    s.connections = vec![
        conn(0, 0, 1, P2p, "IPC/read", None),
        conn(0, 1, 2, P2p, "IPC/read", None),
        conn(0, 2, 3, Shm, "direct/direct", None),
        conn(0, 3, 4, Net, "IB/0", Some(true)),
        conn(0, 4, 5, P2p, "IPC/read", None),
        conn(0, 5, 6, P2p, "IPC/read", None),
        conn(0, 6, 7, P2p, "IPC/read", None),
        conn(0, 7, 0, Net, "IB/1", Some(false)),
        conn(1, 7, 6, P2p, "CUMEM", None),
        conn(1, 4, 3, Net, "IB/1", Some(false)),
        conn(1, 0, 7, Net, "IB/0", Some(true)),
    ];
    s.trees = vec![
        tree(0, 0, -1, &[1, 4]),
        tree(0, 1, 0, &[2]),
        tree(0, 2, 1, &[3]),
        tree(0, 3, 2, &[]),
        tree(0, 4, 0, &[5]),
        tree(0, 5, 4, &[6]),
        tree(0, 6, 5, &[7]),
        tree(0, 7, 6, &[]),
        tree(1, 4, -1, &[5, 0]),
        tree(1, 5, 4, &[6]),
        tree(1, 0, 4, &[1]),
        tree(1, 1, 0, &[]),
    ];
    let cell = |lat_us, bw_gbps| TuningCell { lat_us, bw_gbps };
    for (coll, scale) in [(Collective::AllReduce, 1.0), (Collective::AllGather, 2.0)] {
        let algos = s.tuning.entry(coll).or_default();
        let ring = algos.entry(Algorithm::Ring).or_default();
        ring.insert(Protocol::Ll, cell(16.0, 9.0 * scale));
        ring.insert(Protocol::Ll128, cell(26.0, 36.0 * scale));
        ring.insert(Protocol::Simple, cell(56.0, 80.0 * scale));
        let tree = algos.entry(Algorithm::Tree).or_default();
        tree.insert(Protocol::Ll, cell(12.0, 4.0 * scale));
        tree.insert(Protocol::Ll128, cell(20.0, 30.0 * scale));
        tree.insert(Protocol::Simple, cell(50.0, 60.0 * scale));
    }
    s.decisions = vec![
        Decision {
            coll: Collective::AllReduce,
            bytes: 4096,
            algo: Algorithm::Tree,
            proto: Protocol::Ll,
            n_channels: 2,
            time_us: Some(13.0),
            runner_up: None,
            reason: None,
            datatype: Some(DataType::F32),
            rank: Some(0),
        },
        Decision {
            coll: Collective::AllReduce,
            bytes: 64 << 20,
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            n_channels: 2,
            time_us: Some(900.0),
            runner_up: None,
            reason: None,
            datatype: Some(DataType::F32),
            rank: Some(0),
        },
    ];
    s.ops = vec![
        op(1, Collective::AllReduce, 4096, Algorithm::Tree, Protocol::Ll, OpState::Completed),
        op(2, Collective::AllGather, 1 << 20, Algorithm::Ring, Protocol::Ll128, OpState::Completed),
        op(3, Collective::AllReduce, 64 << 20, Algorithm::Ring, Protocol::Simple, OpState::Started),
    ]
    .into();
    s.proxy = vec![
        ProxyOp {
            rank: 3,
            seq: 3,
            channel: 0,
            peer: 4,
            send: true,
            n_steps: 64,
            posted: 48,
            transmitted: 40,
            done: 32,
            waits: vec![(ProxyWait::WaitingForPeer, 0.30), (ProxyWait::WaitingForSendCompletion, 0.10)],
            started_us: Some(3_000_000),
            updated_us: Some(3_400_000),
        },
        ProxyOp {
            rank: 4,
            seq: 3,
            channel: 0,
            peer: 3,
            send: false,
            n_steps: 64,
            posted: 64,
            transmitted: 36,
            done: 30,
            waits: vec![(ProxyWait::WaitingForRecv, 0.35), (ProxyWait::WaitingForFlush, 0.05)],
            started_us: Some(3_010_000),
            updated_us: Some(3_450_000),
        },
    ];
    let evidence = |line: u64, text: &str| LineRef { file: "job.log".into(), line, text: text.into() };
    s.findings = vec![
        Finding {
            code: "no_gdrdma".into(),
            severity: Severity::Warning,
            rank: None,
            comm: None,
            title: "NET without GPUDirect RDMA on ring channel 0".into(),
            detail: "The NIC stages through host memory.".into(),
            evidence: vec![evidence(42, "Channel 00/0 : 7[3] -> 0[0] [send] via NET/IB/1")],
            fix: "Load nvidia-peermem and check NCCL_NET_GDR_LEVEL.".into(),
        },
        Finding {
            code: "shm_intra".into(),
            severity: Severity::Info,
            rank: None,
            comm: None,
            title: "SHM used between GPUs 2 and 3".into(),
            detail: "P2P is not possible between these GPUs.".into(),
            evidence: vec![evidence(40, "Channel 00/0 : 2[2] -> 3[3] via SHM/direct/direct")],
            fix: "Check ACS and IOMMU settings.".into(),
        },
    ];
    s
}

/// Live traffic: edge 3->4 on channel 0 moves 1 GB/s, 0->1 moves 10 GB/s.
pub(crate) fn live() -> crate::Live {
    let mut live = crate::Live::with_snapshot("fixture", snapshot());
    let e34 = EdgeKey { channel: 0, src: 3, dst: 4 };
    let e01 = EdgeKey { channel: 0, src: 0, dst: 1 };
    live.traffic.set_total(e34, 0, None);
    live.traffic.set_total(e01, 0, None);
    live.traffic.sample(0.0);
    live.traffic.set_total(e34, 1_000_000_000, None);
    live.traffic.set_total(e01, 10_000_000_000, None);
    live.traffic.sample(1.0);
    live.link = crate::LinkState::Live { following: true };
    live
}
