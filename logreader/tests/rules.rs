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
    assert_eq!(collscope_diagnose::RULES.len(), 19);
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
    assert!(fix.contains("collscope log explain t.log --gdr on"), "{fix}");
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
    assert!(has(&s, "ib_error_completion"), "{:?}", codes(&s));
    let s = read(&["a:1:1 [0] misc/ibvwrap.cc:1 NCCL WARN NET/IB : ibv_poll_cq returned 5"]);
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

fn finding<'a>(s: &'a Snapshot, code: &str) -> &'a collscope_model::Finding {
    s.findings.iter().find(|f| f.code == code).unwrap_or_else(|| panic!("no {code} in {:?}", codes(s)))
}

/// The no-GDRDMA finding quotes the reason NCCL printed, in each release's wording (2.3 `net_ib.cu`, 2.4
/// `net.cc`/`net_ib.cc`, 2.28.9 `src/graph/paths.cc` and `src/graph/topo.cc`), and names the file in its fix.
#[test]
fn no_gdrdma_quotes_the_reason_the_log_printed() {
    let net = "a:1:1 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/0";
    // 2.3: the GPU cannot do it; the user ran with NET lines, so no "run with NCCL_DEBUG_SUBSYS".
    let gpu = "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx4_0 (not supported by GPU)";
    let s = read(&["a:1:1 [0] NCCL INFO NCCL_DEBUG_SUBSYS set by environment to INIT,NET.", gpu, net]);
    let f = finding(&s, "no_gdrdma_gpu");
    assert!(f.detail.contains("(not supported by GPU)`") && f.detail.contains("a GPU 0 / HCA mlx4_0"), "{}", f.detail);
    assert!(!f.detail.contains("NCCL_DEBUG_SUBSYS"), "{}", f.detail);
    assert!(f.evidence.iter().any(|l| l.text.ends_with("(not supported by GPU)")));
    assert!(f.fix.contains("`collscope log explain t.log --gdr on`") && !f.fix.contains("LOG "), "{}", f.fix);
    // 2.28.9: too far, and no connection lines at all.
    let far = "a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 6 > 4)";
    let level = "a:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX";
    let f = finding(&read(&[level, far]), "no_gdrdma_distance").clone();
    assert!(f.detail.contains("(NCCL_NET_GDR_LEVEL=PIX)") && f.evidence.iter().any(|l| l.text == level), "{f:?}");
    assert!(f.detail.contains("no NET connection lines") && f.detail.contains("(distance 6 > 4)`"), "{}", f.detail);
    assert!(f.detail.contains("a GPU of rank 0 / HCA 0 (distance 6 > 4)"), "{}", f.detail);
    // ... but not when NCCL enabled it for that GPU with another NIC, nor on a job known to be one node.
    let near = "a:1:1 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 0 / HCA 1 (distance 3 <= 4), read 1 mode Default";
    assert!(!codes(&read(&[far, near])).iter().any(|c| c.starts_with("no_gdrdma")));
    let one = "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0";
    assert!(!codes(&read(&[one, far])).iter().any(|c| c.starts_with("no_gdrdma")));
    // 2.18 and later print no reason on the per-NIC line: NET/IB found neither peer memory nor DMA-BUF.
    let s = read(&["a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", net]);
    assert!(finding(&s, "no_gdrdma_no_module").detail.contains("nvidia-peermem"));
    // A network plugin that says so, in its words.
    let s = read(&[
        "a:1:1 [0] NCCL INFO NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/AWS Libfabric/0",
    ]);
    let f = finding(&s, "no_gdrdma_reported");
    assert!(f.detail.contains("NET/OFI network says why") && f.detail.contains("disabling GDR`"), "{}", f.detail);
    // NCCL_NET_GDR_READ=0 turns it off for sends.
    let s = read(&["a:1:1 [0] NCCL INFO NCCL_NET_GDR_READ set by environment to 0.", net]);
    assert!(finding(&s, "no_gdrdma_env").detail.contains("NCCL_NET_GDR_READ=0 (no GDR for sends)"));
}

/// 2.4's `GPU 2[2]` is cudaDev[nvmlDev]: GPU 2 of two nodes is two places, named by host and GPU, never "rank 2".
#[test]
fn no_gdrdma_names_host_and_gpu_not_a_rank() {
    let s = read(&[
        "node00:20074:30022 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)",
        "node00:20074:30022 [2] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0",
        "node01:20259:30077 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)",
        "node01:20259:30077 [2] NCCL INFO Ring 00 : 6 -> 2 [send] via NET/IB/0",
        "node01:20259:30077 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)",
    ]);
    let f = finding(&s, "no_gdrdma_distance");
    assert!(
        f.detail.contains("node00 GPU 2 / HCA 0 (distance 3 >= 2); node01 GPU 2 / HCA 0 (distance 3 >= 2)."),
        "{}",
        f.detail
    );
    assert!(!f.detail.contains("rank 2"), "{}", f.detail);
    let gdr = &s.log.as_ref().unwrap().gdr_checks;
    assert_eq!(gdr.len(), 2, "each host's check once");
    assert!(gdr.iter().all(|g| g.gpu == Some(collscope_model::GdrGpu::Device(2)) && g.rank.is_none()));
}

#[test]
fn the_socket_finding_says_what_gdr_needs_and_single_nodes_are_left_alone() {
    let s = read(&[
        "a:1:1 [0] NCCL INFO NET/IB : No device found.",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
    ]);
    assert!(finding(&s, "socket_not_ib").detail.contains("GPUDirect RDMA"), "{:?}", s.findings);
    assert!(finding(&s, "socket_not_ib").detail.contains("InfiniBand or RoCE"));
    // One node whose ranks never connect through the network: NCCL set NET/Socket up, nothing used it.
    let s = read(&[
        "a:1:1 [0] NCCL INFO NET/IB : No device found.",
        "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "a:1:1 [0] NCCL INFO Using network Socket",
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    ]);
    assert!(!has(&s, "socket_not_ib"), "{:?}", codes(&s));
}

/// Two pods of one machine: different host names (so different host hashes), `localRanks 1` each, one address.
#[test]
fn two_pods_on_one_machine_are_told_so_not_to_install_ib() {
    let s = read(&[
        "pod-a:7:7 [0] NCCL INFO Bootstrap : Using eth0:10.131.0.5<0>",
        "pod-b:8:8 [0] NCCL INFO Bootstrap : Using eth0:10.131.0.5<0>",
        "pod-a:7:7 [0] NCCL INFO NET/IB : No device found.",
        "pod-a:7:9 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 8000 commId 0x9e - Init START",
        "pod-b:8:9 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 2 busId a2000 commId 0x9e - Init START",
        "pod-a:7:9 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "pod-b:8:9 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "pod-a:7:9 [0] NCCL INFO Check P2P Type intraNodeP2pSupport 0 directMode 0",
        "pod-a:7:9 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
    ]);
    let f = finding(&s, "same_machine");
    assert!(f.detail.contains("same address 10.131.0.5") && f.fix.contains("NCCL_HOSTID"), "{}", f.detail);
    assert!(!has(&s, "socket_not_ib"), "{:?}", codes(&s));
    // docker0's first address repeats on every machine: no sign of one machine.
    let s = read(&[
        "n1:7:7 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>",
        "n2:8:8 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>",
        "n1:7:9 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "n2:8:9 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    ]);
    assert!(!has(&s, "same_machine"), "{:?}", codes(&s));
    // Distinct GPUs without a shared address: inferred, and said so.
    let s = read(&[
        "pod-a:7:9 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "pod-b:8:9 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "pod-a:7:9 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 busId 8000 - Init COMPLETE",
        "pod-b:8:9 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 0 busId a2000 - Init COMPLETE",
    ]);
    assert!(finding(&s, "same_machine").detail.contains("(inferred)"));
    // Real nodes with one GPU each, the same one: nothing.
    let s = read(&[
        "n1:7:9 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "n2:8:9 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "n1:7:9 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 busId 8000 - Init COMPLETE",
        "n2:8:9 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 0 busId 8000 - Init COMPLETE",
    ]);
    assert!(!has(&s, "same_machine"), "{:?}", codes(&s));
}

/// NCCL 2.4 printed this as a WARN (`src/misc/ibvwrap.cc`); without IB in use it is harmless.
#[test]
fn missing_libibverbs_is_no_ib_error() {
    let s = read(&[
        "a:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
        "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
    ]);
    assert!(!codes(&s).iter().any(|c| c.starts_with("ib_error")), "{:?}", codes(&s));
    assert!(finding(&s, "socket_not_ib").detail.contains("libibverbs.so could not be loaded"));
}

#[test]
fn an_excerpt_that_ends_at_init_start_is_no_hang() {
    let start =
        "a:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x99 - Init START";
    assert!(!has(&read(&[start]), "init_hang"));
    // Another communicator that completed before, or an error before the START, shows nothing about this one.
    let other = "a:1:1 [0] NCCL INFO ncclCommInitRank comm 0x20 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x77 - Init COMPLETE";
    let warn = "a:1:1 [0] bootstrap.cc:1 NCCL WARN Bootstrap : no socket interface found";
    let s = read(&[other, warn, start]);
    assert!(!has(&s, "init_hang"), "{:?}", codes(&s));
    // An error after it: time passed and init did not finish.
    let s = read(&[start, warn]);
    assert!(has(&s, "init_hang"), "{:?}", codes(&s));
}

#[test]
fn ib_completion_errors_are_decoded() {
    // NCCL 2.28.9 `src/transport/net_ib.cc`.
    let s = read(&[
        "b:2:2 [1] transport/net_ib.cc:2543 NCCL WARN NET/IB: Got completion from peer 10.0.0.1<43044> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=1048576 vendor_err=129 req_type=Send hca mlx5_1",
    ]);
    let f = finding(&s, "ib_error_completion");
    for want in ["status 12", "retry counter exceeded", "NCCL_IB_TIMEOUT", "GID", "PFC", "link"] {
        assert!(f.detail.contains(want), "{want}: {}", f.detail);
    }
    assert!(!has(&s, "ib_error"), "every line is decoded: {:?}", codes(&s));
    // 2.12 to 2.27: `with error 10`.
    let s = read(&[
        "a:1:1 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<42> with error 10, opcode 0, len 0, vendor err 136 (Recv)",
    ]);
    assert!(finding(&s, "ib_error_completion").detail.contains("remote access error"));
}

#[test]
fn a_failed_completion_queue_points_at_memlock() {
    let s = read(&[
        "a:1:1 [0] misc/ibvwrap.cc:230 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
    ]);
    assert!(finding(&s, "ib_error_ibv_create_cq").fix.contains("ulimit -l"));
}

/// A peer that died is said to have died, and the others' timeouts follow from it.
#[test]
fn a_dead_peer_is_not_a_watchdog_timeout() {
    let s = read(&[
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0",
        "a:1:5 [0] NCCL INFO [Service thread] Connection closed by localRank 1",
        "[rank0]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
    ]);
    let f = finding(&s, "peer_died");
    assert!(f.detail.contains("rank 1 (local rank 1 on a)"), "{}", f.detail);
    assert!(!f.detail.contains("  ") && !f.fix.contains("  "), "{f:?}");
    assert_eq!(f.severity, Severity::Error);
    let w = finding(&s, "watchdog_timeout");
    assert_eq!(w.severity, Severity::Warning, "a consequence");
    assert!(w.detail.contains("peer_died"), "{}", w.detail);
    assert_eq!(s.findings[0].code, "peer_died", "the cause comes first: {:?}", codes(&s));
    // At the end of a job that did not destroy its communicators the same line is no failure.
    let s = read(&[
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "a:1:5 [0] NCCL INFO [Service thread] Connection closed by localRank 1",
    ]);
    assert!(s.findings.is_empty(), "{:?}", codes(&s));
    // A broken pipe to a known address names that host; NCCL's remote error string says a process exited.
    let s = read(&[
        "b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "a:1:1 [0] misc/socket.cc:540 NCCL WARN Net : Call to send to 10.0.0.2<51234> failed : Broken pipe",
    ]);
    assert!(finding(&s, "peer_died").detail.contains("10.0.0.2 (b)"), "{:?}", s.findings);
    let s = read(&["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, remote process exited or there was a network error, NCCL version 2.18.1"]);
    assert!(has(&s, "peer_died"), "{:?}", codes(&s));
    // A timeout with no dead peer stays an error.
    let s = read(&["[rank0]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out."]);
    assert_eq!(finding(&s, "watchdog_timeout").severity, Severity::Error);
}

/// Two GPUs of one process (single-process multi-GPU) whose ring goes through NET/IB.
#[test]
fn gpus_of_one_process_over_the_network_are_flagged() {
    let s = read(&[
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "a:1:1 [1] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
        "a:1:1 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/0/GDRDMA",
    ]);
    let f = finding(&s, "net_in_one_process");
    assert!(f.detail.contains("ranks 0 and 1 (host a, pid 1)"), "{}", f.detail);
    // Two processes on two hosts: the network is expected.
    let s = read(&[
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "b:2:2 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    ]);
    assert!(!has(&s, "net_in_one_process"), "{:?}", codes(&s));
}

/// nccl-tests and rccl-tests list every rank with its host before the results.
#[test]
fn job_size_from_a_benchmarks_rank_list() {
    let s = read(&[
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "# Using devices",
        "#  Rank  0 Group  0 Pid 1789224 on H20-GPU-05 device  0 [0000:18:00] NVIDIA H20-3e",
        "#  Rank  1 Group  0 Pid 1789225 on H20-GPU-05 device  1 [0000:38:00] NVIDIA H20-3e",
        "#  Rank  2 Group  0 Pid 4015539 on H20-GPU-06 device  0 [0000:18:00] NVIDIA H20-3e",
        "#  Rank  3 Group  0 Pid 4015540 on H20-GPU-06 device  1 [0000:38:00] NVIDIA H20-3e",
        "H20-GPU-05:1789224:1789224 [0] NCCL INFO Bootstrap : Using ibs1130f0:10.6.128.137<0>",
    ]);
    assert_eq!((s.nranks, s.nnodes), (Some(4), Some(2)));
    // All on one host: one node.
    let s = read(&[
        "#   Rank  0 Pid   3801 on host-1 device  0 [0x00] Tesla V100-SXM2-32GB",
        "#   Rank  1 Pid   3802 on host-1 device  1 [0x00] Tesla V100-SXM2-32GB",
        "host-1:3801:3801 [0] NCCL INFO NCCL version 2.4.8+cuda10.0",
    ]);
    assert_eq!((s.nranks, s.nnodes), (Some(2), Some(1)));
}
