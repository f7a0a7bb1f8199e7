//! The line kinds of issue 50 item 2, each on a fixture in NCCL's grammar (tests/data, or a few lines here):
//! communicators' ends, the proxy's lines, memory traces, topology detection, RCCL's own lines, and the rule for
//! repeated lines.

use collscope_logreader::{Options, Reader};
use collscope_model::{CommState, Snapshot};
use std::path::Path;

fn read_text(name: &str, text: &str) -> Snapshot {
    let mut r = Reader::new(Options { strict: true });
    r.read_bytes(name, text.as_bytes());
    r.finish()
}

fn fixture(name: &str) -> Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(format!("{name}.log"));
    read_text(name, &std::fs::read_to_string(path).unwrap())
}

#[test]
fn teardown_allocations_topology_notes_and_proxy_lines_are_understood() {
    let s = fixture("teardown_2.28");
    assert!(s.unparsed_nccl_lines.is_empty(), "{:?}", s.unparsed_nccl_lines);
    let states: Vec<(Option<u32>, CommState)> = s.communicators.iter().map(|c| (c.rank, c.state)).collect();
    assert_eq!(states, [(Some(0), CommState::Destroyed), (Some(1), CommState::Destroyed)]);
    let log = s.log.unwrap();
    let a = log.allocations;
    assert_eq!((a.device_calls, a.device_bytes), (2, 2 * 17408));
    assert_eq!((a.host_calls, a.host_bytes), (5, 4 + 65536 + 2097152 + 1024 + 4194656));
    assert_eq!(log.topology_notes.len(), 2, "{:?}", log.topology_notes);
    assert!(log.topology_notes[1].ends_with("Attaching to first CPU"));
}

#[test]
fn an_abort_line_alone_gives_the_communicator_and_its_size() {
    let s = read_text(
        "abort.log",
        "lsp-ws1:7655:7655 [0] NCCL INFO comm 0x4d2d12d0 rank 5 nranks 16 cudaDev 5 busId 92000 - Abort COMPLETE\n",
    );
    assert_eq!(s.nranks, Some(16));
    let c = &s.communicators[0];
    assert_eq!((c.rank, c.nranks, c.cuda_dev, c.bus_id.as_deref()), (Some(5), Some(16), Some(5), Some("92000")));
    assert_eq!(c.state, CommState::Destroyed);
    let why = &s.log.unwrap().inferred;
    assert!(why.iter().any(|i| i.fact == "nranks" && i.reason.contains("Abort/Destroy")), "{why:?}");
}

#[test]
fn service_thread_lines_are_understood() {
    let s = read_text(
        "closed.log",
        "node0:4744:4765 [0] NCCL INFO [Service thread] Connection closed by localRank 0\n\
         [Service thread] Connection closed by localRank 1\n",
    );
    assert!(s.unparsed_nccl_lines.is_empty(), "{:?}", s.unparsed_nccl_lines);
    let stats = s.log.unwrap().stats;
    assert_eq!((stats.nccl_lines, stats.bare_lines), (2, 1));
}

/// The rule (`Job::who`): a line its thread printed just before is an echo, dropped, unless it is a per-call line
/// (a decision) or its thread is unknown; every other repeat is data. Both counts are kept.
#[test]
fn repeats_are_data_unless_one_thread_printed_the_line_twice_in_a_row() {
    let s = fixture("percall_2.22");
    let log = s.log.unwrap();
    // 14 calls of 32768 bytes and 2 of 1 MiB on rank 0: 13 + 1 repeats kept; `Connected all trees` twice from
    // one thread is an echo.
    assert_eq!((log.stats.repeated_lines, log.stats.duplicate_lines), (14, 1), "{:?}", log.stats);
    assert_eq!(log.unnamed_decisions.len(), 2);
    // Four identical bare WARN lines: nothing says they are one rank's echo.
    let warn = "misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<51234>\n";
    let s = read_text("warn.log", &warn.repeat(4));
    assert_eq!(s.warnings.len(), 4);
    let stats = s.log.unwrap().stats;
    assert_eq!((stats.repeated_lines, stats.duplicate_lines), (3, 0));
    // A line repeated without end is listed 64 times, so later errors still find room.
    let s = read_text("warn3.log", &(warn.repeat(100) + "NCCL WARN Cuda failure 'out of memory'\n"));
    assert_eq!(s.warnings.len(), 65);
    assert_eq!(s.warnings[64].class, "cuda");
    // One thread: twice in a row is an echo; again after another line is the error again.
    let w = "h:1:2 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer\n";
    let s = read_text("warn2.log", &format!("{w}{w}h:1:2 [0] NCCL INFO Connected all trees\n{w}"));
    assert_eq!(s.warnings.len(), 2);
    assert_eq!(s.log.unwrap().stats.duplicate_lines, 1);
}

#[test]
fn rccl_is_recognised_by_its_own_lines() {
    for (text, version) in [
        ("z292:58192:58192 [3] NCCL INFO ROCr version 1.14\n", None),
        ("HIP version  : 6.3.42134-a9a80e791\nROCm version : 6.3.3.0-74-cbc70b5\n", None),
        ("h:1:1 [0] NCCL INFO RCCL version 2.6.4+hip3.5\n", Some("2.6.4+hip3.5")),
        ("RCCL version : 2.21.5-HEAD:9a0e6a1\n", Some("2.21.5")),
    ] {
        let s = read_text("rccl.log", text);
        assert!(s.log.as_ref().unwrap().rccl, "{text}");
        assert_eq!(s.nccl_version.as_deref(), version, "{text}");
        assert!(s.unparsed_nccl_lines.is_empty(), "{text}: {:?}", s.unparsed_nccl_lines);
    }
    // A HIP program's own banner is not RCCL's.
    assert!(!read_text("hip.log", "HIP version: 6.2\n").log.unwrap().rccl);
}
