//! The diagnosis rules on logs read by the reader: each rule fires on the lines that show its problem.

use collscope_logreader::{Options, Reader};
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
    assert_eq!(collscope_diagnose::RULES.len(), 16);
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
    // The fix links to the what-if that prices the missing GPUDirect RDMA.
    let fix = &s.findings.iter().find(|f| f.code == "no_gdrdma_no_module").unwrap().fix;
    assert!(fix.contains("collscope log explain LOG --gdr on"), "{fix}");
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
    let s =
        read(&["a:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1", "b:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.2"]);
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
    let s = read(&[
        "[0] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.0.0.2<30478> failed : Connection reset by peer",
    ]);
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
    assert!(f.detail.contains("Ranks 0, 2 timed out") && f.detail.contains("output is missing): 1, 3"), "{}", f.detail);
}

#[test]
fn nccl_and_proxy_errors() {
    let s = read(&["a:1:1 [0] proxy.cc:1 NCCL WARN Proxy Call to rank 3 failed (Setup)"]);
    let f = s.findings.iter().find(|f| f.code == "nccl_error").expect("finding");
    assert!(f.detail.contains("another rank failed first"), "{}", f.detail);
}
