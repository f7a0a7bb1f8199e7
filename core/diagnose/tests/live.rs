//! The rules on a model no log filled: a snapshot built the way the runtime and telemetry fill it, with the
//! runtime's decisions as evidence.

use collscope_model::{
    BootstrapInterface, Cite, Connection, Direction, EnvSetting, Evidence, Severity, Snapshot, Source,
};

/// Rank 0 of a two-node job whose NET connections stage through host memory.
fn live_job() -> Snapshot {
    let mut s = Snapshot::new(Source::Runtime);
    s.nranks = Some(16);
    s.nnodes = Some(2);
    s.network = Some("IB".into());
    s.hosts = vec!["node-a".into(), "node-b".into()];
    s.bootstrap.push(BootstrapInterface {
        name: "docker0".into(),
        address: "172.17.0.2".into(),
        host: Some("node-a".into()),
        rank: Some(0),
    });
    for channel in 0..2 {
        s.connections.push(Connection {
            mode: None,
            gdrdma: Some(false),
            ..Connection::net(channel, 8, 0, Direction::Recv, "IB", 0)
        });
    }
    s
}

#[test]
fn a_live_job_gets_the_findings_a_log_would() {
    let mut s = live_job();
    let mut ev = Evidence::default();
    ev.add_live(Cite::NetNoGdr, "channel 0: 8 -> 0 [receive] via NET/IB/0 (no GDRDMA)");
    let findings = collscope_diagnose::diagnose(&s, &ev);

    let gdr = findings.iter().find(|f| f.code == "no_gdrdma").expect("no_gdrdma finding");
    assert!(gdr.detail.starts_with("2 of 2 NET connections stage through host memory"), "{}", gdr.detail);
    assert_eq!(gdr.evidence.len(), 1);
    assert_eq!(gdr.evidence[0].file, collscope_model::evidence::LIVE);
    // No log to run the what-if on: no command with a placeholder for one.
    assert!(!gdr.fix.contains("log explain"), "{}", gdr.fix);

    // Two nodes: bootstrapping over docker0 breaks the job, and errors come first.
    assert_eq!(findings[0].code, "bootstrap_interface");
    assert_eq!(findings[0].severity, Severity::Error);

    // The environment the runtime recorded explains the missing GDR instead of "the log does not say why".
    s.env.push(EnvSetting { name: "NCCL_NET_GDR_LEVEL".into(), value: "LOC".into(), rank: Some(0) });
    let findings = collscope_diagnose::diagnose(&s, &ev);
    assert!(findings.iter().any(|f| f.code == "no_gdrdma_env"), "{findings:?}");

    // A reason the runtime recorded is quoted, as a log's reason line is.
    let why = "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)";
    ev.add_live(Cite::GdrOff, why);
    s.env.clear();
    let findings = collscope_diagnose::diagnose(&s, &ev);
    let gdr = findings.iter().find(|f| f.code == "no_gdrdma_reported").expect("no_gdrdma_reported finding");
    assert!(gdr.detail.contains(why), "{}", gdr.detail);
    assert!(gdr.evidence.iter().any(|l| l.text == why));
}

#[test]
fn a_quiet_model_has_no_findings() {
    let mut s = Snapshot::new(Source::Model { topology: "dgx-h100".into() });
    s.nranks = Some(8);
    s.nnodes = Some(1);
    assert!(collscope_diagnose::diagnose(&s, &Evidence::default()).is_empty());
}

#[test]
fn a_live_ranks_receiving_ends_do_not_count_twice_as_shm_connections() {
    let mut s = Snapshot::new(Source::Runtime);
    s.nranks = Some(2);
    s.env.push(EnvSetting { name: "NCCL_P2P_DISABLE".into(), value: "1".into(), rank: Some(0) });
    // Rank 0 of two processes: its sending end to rank 1 and its receiving end from rank 1, on each of 2 channels.
    for channel in 0..2 {
        for (src, dst, direction) in [(0, 1, Direction::Both), (1, 0, Direction::Recv)] {
            s.connections.push(Connection::new(channel, src, dst, direction, collscope_model::Transport::Shm));
        }
    }
    let findings = collscope_diagnose::diagnose(&s, &Evidence::default());
    let shm = findings.iter().find(|f| f.code == "p2p_refused_shm").expect("p2p_refused_shm finding");
    assert!(shm.detail.starts_with("2 connections use SHM instead of P2P: NCCL_P2P_DISABLE is set"), "{}", shm.detail);
}
