//! Whatever the bytes, the reader keeps going: garbage, invalid UTF-8, glued, wrapped, duplicated and overlong
//! lines are counted, never fatal; files, directories and gzip merge into one job.

use collscope_logreader::{read_paths, Options, Reader};
use collscope_model::{Snapshot, Transport};

fn read(bytes: &[u8], strict: bool) -> Snapshot {
    let mut r = Reader::new(Options { strict });
    r.read_bytes("t.log", bytes);
    r.finish()
}

fn stats(s: &Snapshot) -> collscope_model::LogStats {
    s.log.as_ref().unwrap().stats.clone()
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let seeds = [
        "node0:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/IB/0(1)/GDRDMA(PCI)/Shared\n",
        "[1,0]<stdout>:n:1:2 [3] misc/x.cc:1 NCCL WARN Call to ibv_reg_mr failed\n",
        "n:1:2 [0] NCCL INFO Trees [0] 1/2/-1->0->-1|-1->0->1/2/-1 [1\n",
        "n:1:2 [0] NCCL INFO    AllReduce |    1.0/   2.0 |\nNCCL version 2.\n",
    ];
    for round in 0..400 {
        let mut data: Vec<u8> = seeds[round % seeds.len()].as_bytes().to_vec();
        for _ in 0..(round % 13) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pos = (x as usize) % (data.len() + 1);
            match x % 4 {
                0 => data.insert(pos, (x >> 8) as u8),
                1 if pos < data.len() => {
                    data.remove(pos);
                }
                2 => data.truncate(pos),
                _ => data.extend_from_slice(seeds[(x as usize >> 3) % seeds.len()].as_bytes()),
            }
        }
        let s = read(&data, true);
        serde_json::to_string(&s).unwrap();
    }
}

#[test]
fn invalid_utf8_and_control_bytes_are_counted() {
    let s = read(b"n:1:2 [0] NCCL INFO Ring 00 : 7 -> 0 -> 1 \xff\xfe\nplain\x07bell\n", false);
    let st = stats(&s);
    assert_eq!((st.invalid_utf8_lines, st.garbled_lines, st.lines), (1, 1, 2));
}

#[test]
fn two_lines_written_into_one_are_split() {
    let s = read(b"node0:1:2 [0] NCCL INFO Channnode1:5:6 [1] NCCL INFO Ring 00 : 7 -> 0 -> 1\n", false);
    assert_eq!(stats(&s).garbled_lines, 1);
    assert_eq!(s.rings[0].neighbours, vec![(7, 0, 1)]);
}

#[test]
fn wrapped_lines_are_joined() {
    let s = read(b"h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via\nP2P/IPC/read\n", true);
    assert_eq!(stats(&s).wrapped_lines, 1);
    assert_eq!(s.connections.len(), 1);
    assert_eq!(s.connections[0].mode.as_deref(), Some("IPC/read"));
    assert!(s.unparsed_nccl_lines.is_empty());
}

#[test]
fn duplicates_and_overlong_lines_are_counted() {
    let line = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n";
    let mut data = line.repeat(3).into_bytes();
    data.extend(vec![b'z'; 200_000]);
    data.extend_from_slice(b"\nh:1:1 [0] NCCL INFO Connected all rings\n");
    let s = read(&data, false);
    let st = stats(&s);
    assert_eq!((st.duplicate_lines, st.truncated_lines, st.lines), (2, 1, 5));
    assert_eq!(s.connections.len(), 1);
}

#[test]
fn strict_lists_what_it_did_not_understand() {
    let data = b"h:1:1 [0] NCCL INFO Frobnicating the widgets\nh:1:1 [0] NCCL INFO Connected all trees\n";
    let s = read(data, true);
    assert_eq!(s.unparsed_nccl_lines.len(), 1);
    assert_eq!(
        (s.unparsed_nccl_lines[0].line, s.unparsed_nccl_lines[0].text.as_str()),
        (1, "h:1:1 [0] NCCL INFO Frobnicating the widgets")
    );
    let s = read(data, false);
    assert!(s.unparsed_nccl_lines.is_empty());
    assert_eq!(stats(&s).unparsed_nccl_lines, 1);
}

#[test]
fn one_file_per_rank_directories_and_gzip_merge_into_one_job() {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("collscope-lr-merge-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    // Host prefixes stripped: each file is one rank.
    std::fs::write(dir.join("rank0.log"), " [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n").unwrap();
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b" [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/IB/0/GDRDMA\n").unwrap();
    std::fs::write(dir.join("sub/rank1.log.gz"), gz.finish().unwrap()).unwrap();
    let s = read_paths(std::slice::from_ref(&dir), Options::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(s.connections.len(), 2);
    assert!(s.connections.iter().any(|c| c.transport == Transport::Net && c.gdrdma == Some(true)));
    // Ranks 0 to 2 appear, but nothing says how many the job has: a lower bound is not its size.
    assert_eq!(s.nranks, None);
    let err = read_paths(&[dir.join("missing.log")], Options::default()).unwrap_err().to_string();
    assert!(err.contains("missing.log"), "{err}");
}

#[test]
fn huge_numbers_cost_neither_memory_nor_overflow() {
    // Found by the fuzzer: a garbled rank made nranks ~4e9 and the watchdog rule listed every missing rank.
    let data = b"n:1:2 [0] NCCL INFO Ring 4294967295 : 4294967294 -> 4294967295 -> 0\n\
n:1:2 [0] NCCL INFO Trees [4294967295] 1/2/-1->4294967295->-1\n\
n:1:2 [2147483647] NCCL INFO AllReduce: 18446744073709551615 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..4294967295}\n\
n:1:2 [0] NCCL INFO comm 0x1 rank 4294967295 nRanks 4294967295 nNodes 1 localRanks 4294967295 localRank 0 MNNVL 0\n\
n:1:2 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 4294967295 cudaDev 0 nvmlDev 0 busId 0 commId 0x5 - Init START\n\
[rank0]: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)\n";
    let s = read(data, true);
    let f = s.findings.iter().find(|f| f.code == "watchdog_timeout").expect("finding");
    assert!(f.detail.len() < 1000, "{}", f.detail);
    assert!(s.findings.iter().any(|f| f.code == "init_hang"));
}

#[test]
fn communicators_past_the_cap_are_counted_and_said_in_both_modes() {
    use collscope_logreader::MAX_COMMUNICATORS;
    let extra = 1000;
    let mut log = String::new();
    for c in 0..MAX_COMMUNICATORS + extra {
        log += &format!(
            "node0:1:1 [0] NCCL INFO comm 0x{:x} rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n",
            0x1000 + c
        );
    }
    let said = format!("more than {MAX_COMMUNICATORS} communicator rows (collscope's cap");
    let check = |s: &Snapshot| {
        assert_eq!(s.communicators.len(), MAX_COMMUNICATORS);
        let w = s.warnings.iter().find(|w| w.text.contains(&said)).expect("the cap is said");
        assert!(w.text.contains(&format!("{extra} more communicator lines were not kept")), "{}", w.text);
        assert_eq!((s.nranks, s.nnodes), (Some(8), Some(1)), "lines past the cap still count");
    };
    check(&read(log.as_bytes(), false));
    // Followed: fed in pieces, each snapshot on the way says it too.
    let mut r = Reader::new(Options::default());
    let mut input = r.incoming("t.log");
    for piece in log.as_bytes().chunks(1 << 20) {
        r.feed(&mut input, piece);
    }
    check(&r.snapshot());
    r.end(input);
    check(&r.finish());
}

#[test]
fn a_host_token_glued_after_junk_is_found_by_its_end_and_overlong_ones_name_no_host() {
    let long = "h".repeat(300);
    let log = format!(
        "node7:1:1 [0] NCCL INFO NCCL version 2.28.9\n\
         ####node7:1:2 [0] NCCL INFO NCCL version 2.28.9\n\
         {long}:1:3 [0] NCCL INFO NCCL version 2.28.9\n"
    );
    let s = read(log.as_bytes(), false);
    assert_eq!(s.hosts, ["node7"], "the junk before a known host is not a host; a 300-byte token is none");
}

#[test]
fn a_system_print_past_what_is_kept_is_counted_and_said() {
    // 140,000 GPUs behind their own PCI switches: 280,002 nodes, past the 262,144 kept of all prints.
    let p = "node0:1:1 [0] NCCL INFO ";
    let mut log = format!("{p}=== System : maxBw 24.0 totalBw 24.0 ===\n{p}CPU/0-0 (1/1/3)\n");
    for g in 0..140_000u64 {
        let bus = 0x10000 + g * 0x100;
        log += &format!("{p}+ PCI[24.0] - PCI/0-{bus:x} (1000c03000000000)\n");
        log += &format!("{p}              + PCI[24.0] - GPU/0-{:x} ({g})\n", bus + 0x10);
    }
    let s = read(log.as_bytes(), false);
    let nodes: usize = s.topology.iter().map(|t| t.nodes.len()).sum();
    assert_eq!(nodes, 1 << 18);
    let w = s.warnings.iter().find(|w| w.text.contains("the `=== System` prints hold more than collscope keeps"));
    let w = w.expect("the cap is said");
    assert!(w.text.contains("262144 nodes") && w.text.contains("17857 more were not kept"), "{}", w.text);
}

#[test]
fn ring_rows_are_looked_up_not_scanned_and_capped_and_said() {
    // A million ranks' neighbour lines on one channel (each was compared with every one kept before: quadratic),
    // then ring lines on more channels than are kept.
    let rows = (1u32 << 20) + 10;
    let mut log = String::with_capacity(rows as usize * 48);
    for r in 1..=rows {
        log += &format!("node0:1:1 [0] NCCL INFO Ring 00 : {} -> {r} -> {}\n", r - 1, r + 1);
    }
    for ch in 0..1100 {
        log += &format!("node0:1:1 [0] NCCL INFO Ring {ch:02} : 0 -> 1 -> 2\n");
    }
    let s = read(log.as_bytes(), false);
    assert_eq!(s.rings.len(), 1024);
    assert_eq!(s.rings[0].neighbours.len(), 1 << 20);
    let w = s.warnings.iter().find(|w| w.text.contains("more than collscope keeps of the rings")).expect("said");
    // 10 neighbour lines past the cap on channel 0, and those of channels 1 to 1023 (the cap was reached); the
    // 76 channels past 1024 are dropped as rings.
    assert!(w.text.contains("76 ring rows") && w.text.contains("1033 ring neighbour rows"), "{}", w.text);
}

#[test]
fn prints_open_at_the_end_close_in_the_order_their_threads_first_printed() {
    // Twelve hosts each start a graph, their lines interleaved, and none closes before the end of the input.
    let hosts: Vec<String> = (0..12).map(|i| format!("gpu-{:02}", (i * 7) % 12)).collect();
    let mut log = String::new();
    for h in &hosts {
        log += &format!(
            "{h}:100:101 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 1, bw 10.000000/10.000000, type LOC/NET, sameChannels 1\n"
        );
    }
    for h in &hosts {
        log += &format!("{h}:100:101 [0] NCCL INFO  0 : NET/0 GPU/0 NET/0\n");
    }
    let s = read(log.as_bytes(), false);
    let order: Vec<&str> = s.graphs.iter().filter_map(|g| g.host.as_deref()).collect();
    assert_eq!(order, hosts);
}
