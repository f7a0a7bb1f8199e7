//! `collscope tui` end to end: the real binary in a real terminal (tmux), driven by keys, read back with
//! `tmux capture-pane`. Each test uses its own tmux server (`-L`), killed when the test ends however it ends; the
//! program in the pane has a deadline too, so no server outlives a test that was itself killed. The log views
//! are drawn from collscope's own NCCL logs, and also from a real NCCL log where `../shared` has them.

use crate::live;
use crate::procs;
use crate::tmux;

use collscope_model::*;
use collscope_testkit::{free_ports, output, Proc};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tmux::{Tmux, TMUX_DEADLINE};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collscope-tui-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn op(seq: u64) -> OpRecord {
    OpRecord {
        comm: None,
        rank: 0,
        seq,
        coll: Collective::AllReduce,
        count: 1 << 20,
        datatype: DataType::F32,
        op: Some(RedOp::Sum),
        root: None,
        peer: None,
        bytes: 4 << 20,
        algo: Some(Algorithm::Ring),
        proto: Some(Protocol::Simple),
        n_channels: Some(2),
        state: OpState::Completed,
        enqueued_us: None,
        started_us: None,
        completed_us: None,
        duration_us: Some(250.0),
        algbw_gbps: Some(16.8),
        busbw_gbps: Some(29.4),
    }
}

/// A recording of two snapshots `apart` seconds apart: the second has more operations.
fn write_recording_apart(path: &Path, apart: f64) {
    let mut s = Snapshot::new(Source::Runtime);
    s.nranks = Some(4);
    s.rings.push(Ring { channel: 0, order: vec![0, 1, 2, 3], truncated: false, neighbours: vec![] });
    s.ops = (1..=3).map(op).collect();
    let first = serde_json::json!({"t": 0.0, "event": "fetched_snapshot", "data": s});
    s.ops = (1..=7).map(op).collect();
    let second = serde_json::json!({"t": apart, "event": "fetched_snapshot", "data": s});
    std::fs::write(path, format!("{first}\n{second}\n")).expect("write recording");
}

fn write_recording(path: &Path) {
    write_recording_apart(path, 1.5);
}

/// A replay says it is one, and P pauses it, `.` seeks forward (the later picture at once) and `,` back (the
/// picture starts over).
#[test]
fn a_replay_is_labelled_and_pauses_and_seeks() {
    let dir = temp_dir("seek");
    let rec = dir.join("rec.jsonl");
    write_recording_apart(&rec, 30.0);
    let t = Tmux::start("seek", &["tui", "--replay", rec.to_str().unwrap()]);
    t.wait_for(&["replay playing", "/30.0 s"]);
    t.keys(&["7", "P"]);
    t.wait_for(&["3 operations", "replay paused"]);
    t.keys(&[".", ".", "."]);
    t.wait_for(&["7 operations", "replay paused 30.0/30.0 s"]);
    t.keys(&[",", ",", ","]);
    t.wait_for(&["3 operations", "replay paused 0.0/30.0 s"]);
    t.keys(&["P"]);
    t.wait_for(&["replay playing"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn replay_updates_the_ops_log_and_q_restores_the_terminal() {
    let dir = temp_dir("replay");
    let rec = dir.join("rec.jsonl");
    write_recording(&rec);
    let t = Tmux::start("replay", &["tui", "--replay", rec.to_str().unwrap()]);
    t.wait_for(&["1Overview", "ranks 4"]);
    t.keys(&["7"]);
    t.wait_for(&["operations", "AllReduce"]);
    let screen = t.wait_for(&["7 operations", "ended"]);
    assert!(screen.contains("     7 AllReduce       4.0 MiB Ring/Simple"), "{screen}");
    t.keys(&["2"]);
    t.wait_for(&["0 ─?▶ 1 ─?▶ 2 ─?▶ 3 ─?▶ ↺ 0"]);
    t.keys(&["q"]);
    let screen = t.wait_for(&["EXIT=0"]);
    assert!(!screen.contains("1Overview"), "the alternate screen is gone after q:\n{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A modelled machine (the NCCL model of 4 DGX H100 nodes, computed by the binary): the title bar says it is
/// a model, and Rings, Trees, Channels (each edge's modelled transport) and Tuning show what NCCL would decide
/// for it.
#[test]
fn a_modelled_machine_shows_its_rings_trees_channels_and_tuning() {
    let t = Tmux::start_sized("model", (120, 50), &["tui", "--preset", "dgx-h100", "--nodes", "4"]);
    // The source's name shows at once; the model's facts once the binary has computed it and the TUI has it.
    let screen = t.wait_for(&["1Overview", "model preset:dgx-h100", "ranks 32"]);
    assert!(screen.lines().next().unwrap_or("").trim_end().ends_with("model"), "{screen}");
    // The network and GPUDirect RDMA from the model's NET edges, each NIC of a node named.
    let screen = t.wait_for(&["Network     IB  [0]mlx5_0:1/IB", "GDRDMA on "]);
    assert!(!screen.contains("no NET connections"), "{screen}");
    t.keys(&["2"]);
    // 4 nodes x 8 GPUs: every ring visits 32 ranks, leaving node 0 from GPU 1 into node 1 (crossNic 2), each
    // node's ranks on a row of their own; every edge labelled, NET edges with their NIC and GPUDirect RDMA.
    let screen = t.wait_for(&[">ch 00", "Channel 00: 32 ranks", "node0 ", "node3 ", "/GDRDMA mlx5_"]);
    let rows = ring_rows(&screen);
    assert_eq!(rows.len(), 32, "{screen}");
    assert!(rows.iter().all(|r| r.2 != "?") && !screen.contains("─?▶"), "{screen}");
    assert!(rows.iter().filter(|r| r.0 / 8 != r.1 / 8).all(|r| r.2.starts_with("NET/IB/")), "{screen}");
    t.keys(&["3"]);
    let screen = t.wait_for(&["Channel 00 tree: parent -> children", "NET/IB/"]);
    assert!(!screen.contains("?▶") && !screen.contains("(parent"), "{screen}");
    t.keys(&["4"]);
    // NVLink inside a node, the graph's NIC with GPUDirect RDMA between nodes; nothing moved in a model.
    let screen = t.wait_for(&["00  0 -> 7         P2P/CUMEM ", "00  1 -> 9    send NET/IB/1/GDRDMA mlx5_"]);
    let net = screen.lines().find(|l| l.starts_with("00  1 -> 9    send NET/IB/1/GDRDMA mlx5_"));
    assert!(net.is_some_and(|l| l.contains(" yes ")), "{screen}");
    t.keys(&["6"]);
    t.wait_for(&["AllReduce: latency us/bandwidth GB/s per cell", "NVLSTree", "Best cell by size"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
    // A bad machine is an error before the screen opens.
    let t2 = Tmux::start("model2", &["tui", "--preset", "dgx-a200"]);
    let screen = t2.wait_for(&["EXIT=1"]);
    assert!(screen.contains("dgx-a200"), "{screen}");
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_collscope")).args(["tui", "--log", "x.log", "--nodes", "2"]),
        TMUX_DEADLINE,
    );
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--nodes"));
}

#[test]
fn bad_arguments_are_reported_without_opening_the_screen() {
    let dir = temp_dir("args");
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"t\": 0, \"event\": \"fetched_snapshot\", \"data\": {}}\n").unwrap();
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_collscope")).args(["tui", "--replay", bad.to_str().unwrap()]),
        TMUX_DEADLINE,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdout is not one"), "{err}");
    let t = Tmux::start("args", &["tui", "--replay", bad.to_str().unwrap()]);
    let screen = t.wait_for(&["EXIT=1"]);
    assert!(screen.contains("event 'fetched_snapshot' from the source is not valid"), "{screen}");
    let t2 = Tmux::start("args2", &["tui", "--connect", "https://localhost:1"]);
    let screen = t2.wait_for(&["EXIT=1"]);
    assert!(screen.contains("'https://localhost:1' is not a collscope URL: expected HOST:PORT"), "{screen}");
    let out = output(Command::new(env!("CARGO_BIN_EXE_collscope")).args(["tui", "--follow"]), TMUX_DEADLINE);
    assert!(!out.status.success());
    std::fs::remove_dir_all(&dir).ok();
}

/// collscope's own log: `collscope perf` on 4 rank processes, connected over SHM.
fn own_log() -> String {
    live::own_log(&["--nranks", "4", "--launch", "processes"])
}

/// A job's log cut in two for the live tests, and what the TUI shows of each part.
struct Job {
    name: &'static str,
    /// Everything up to the connections: the ring order is known, its transports not yet.
    head: String,
    /// The rest: the connection lines.
    rest: String,
    /// The Overview and the Rings view after the head.
    head_overview: Vec<String>,
    head_ring: Vec<String>,
    /// The Overview, the Rings view and a Channels row once the rest has arrived.
    whole_overview: Vec<String>,
    whole_ring: Vec<String>,
    channel_row: String,
}

fn strings(needles: &[&str]) -> Vec<String> {
    needles.iter().map(|n| n.to_string()).collect()
}

/// Channel 0's ring as the Rings view draws it, each edge labelled `edge`: `0 ─SHM▶ 1 ─SHM▶ ↺ 0`.
fn ring(order: &[&str], edge: &str) -> String {
    order.iter().map(|r| format!("{r} ─{edge}▶ ")).collect::<String>() + "↺ " + order[0]
}

/// collscope's own log, its connection lines moved to the end: runs of concurrent ranks interleave their lines,
/// and the ring order may come after some connections.
fn own_job() -> Job {
    let text = own_log();
    let (rest, head): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.contains(" NCCL INFO Channel ") && l.contains(" via "));
    // `Channel 00/02 : 0 1 2 3`: channel 0's ring order, printed by rank 0.
    let order: Vec<&str> = head
        .iter()
        .find_map(|l| l.split_once(" NCCL INFO Channel 00/")?.1.split_once(" : ").map(|(_, o)| o))
        .expect("the ring order of channel 0")
        .split_whitespace()
        .collect();
    let first = order.iter().position(|r| *r == "0").expect("rank 0 in the ring");
    let order = [&order[first..], &order[..first]].concat();
    Job {
        name: "own",
        head: head.join("\n") + "\n",
        rest: rest.join("\n") + "\n",
        head_overview: strings(&["Transports  -", "live"]),
        head_ring: vec![ring(&order, "?")],
        whole_overview: strings(&["Transports  SHM x"]),
        whole_ring: vec![ring(&order, "SHM")],
        channel_row: format!("00  {} -> {}         SHM/direct/direct", order[0], order[1]),
    }
}

/// A real NCCL 2.5 log (16 ranks on 2 nodes, P2P, SHM and NET/IB without GDRDMA), cut before its first ring.
fn real_job(what: &str) -> Option<Job> {
    let text = std::fs::read_to_string(collscope_testkit::fixtures(what)?.join("007_nccl-392.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().take_while(|l| !l.contains("Ring 00 :")).count();
    Some(Job {
        name: "real",
        head: lines[..head].join("\n") + "\n",
        rest: lines[head..].join("\n") + "\n",
        head_overview: strings(&["ranks 16", "Transports  -", "live"]),
        head_ring: strings(&["0 ─?▶ 1"]),
        whole_overview: strings(&["NET x2  P2P x2  SHM x1", "GDRDMA on 0 of 2 NET connections"]),
        whole_ring: strings(&["0 ─P2P▶ 1", "15 ─NET▶ ↺ 0"]),
        channel_row: "00  15 -> 0   recv NET/IB/0".to_string(),
    })
}

/// [`own_job`], and [`real_job`] where the real logs exist.
fn jobs(what: &str) -> Vec<Job> {
    std::iter::once(own_job()).chain(real_job(what)).collect()
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(path).and_then(|mut f| f.write_all(text.as_bytes())).unwrap();
}

/// Opens the finding whose code is `code` in the Findings view (rows in the order on screen) and returns the
/// detail screen.
fn open_finding(t: &Tmux, code: &str) -> String {
    t.keys(&["8"]);
    let screen = t.wait_for(&[" findings (Enter: evidence and fix)", code]);
    let rows: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.contains(" findings (Enter"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let row = rows.iter().position(|l| l.contains(code)).unwrap_or_else(|| panic!("{code} in\n{screen}"));
    t.keys(&vec!["Down"; row]);
    t.keys(&["Enter"]);
    t.wait_for(&["Evidence", "Fix: "])
}

/// collscope's own log of 4 SHM ranks: the ring as a cycle of SHM edges, each channel, the connections, the
/// finding about SHM with its evidence lines, help, quit.
#[test]
fn log_views_show_rings_transports_and_findings() {
    let dir = temp_dir("log");
    let log = dir.join("job.log");
    let job = own_job();
    let two_channels = job.head.contains(" NCCL INFO Channel 01/");
    std::fs::write(&log, job.head + &job.rest).unwrap();
    let t = Tmux::start("log", &["tui", "--log", log.to_str().unwrap()]);
    t.wait_for(&[&["1Overview".to_string()], &job.whole_overview[..]].concat());
    t.keys(&["2"]);
    t.wait_for(&[&strings(&[">ch 00", "Channel 00: 4 ranks", "SHM/direct/direct"]), &job.whole_ring[..]].concat());
    if two_channels {
        t.keys(&["]"]);
        t.wait_for(&[">ch 01", "Channel 01: 4 ranks"]);
    }
    t.keys(&["4"]);
    t.wait_for(&["ch  peer      dir  transport", job.channel_row.as_str()]);
    let screen = open_finding(&t, "p2p_refused_shm");
    assert!(screen.contains("job.log:") && screen.contains(" NCCL INFO Channel 0"), "{screen}");
    t.keys(&["?"]);
    t.wait_for(&["Keys", "Any key closes this help."]);
    t.keys(&["Escape", "q"]);
    let screen = t.wait_for(&["EXIT=0"]);
    assert!(!screen.contains("1Overview"), "{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A real NCCL 2.5 log (16 ranks on 2 nodes, P2P, SHM and NET/IB without GDRDMA): ring rows, edge transports,
/// channels, findings with evidence.
#[test]
fn log_views_of_a_real_nccl_log() {
    let Some(fixtures) = collscope_testkit::fixtures("the TUI's views of a real NCCL 2.5 log") else { return };
    let log = fixtures.join("007_nccl-392.log");
    let t = Tmux::start("real", &["tui", "--log", log.to_str().unwrap()]);
    t.wait_for(&["1Overview", "2.5.7+cuda10.0   ranks 16   nodes 2", "NET x2  P2P x2  SHM x1"]);
    t.keys(&["2"]);
    let screen = t.wait_for(&[">ch 00", "Channel 00: 16 ranks"]);
    assert!(screen.contains(" 0 ─P2P▶ 1 ─?▶ 2"), "{screen}");
    assert!(screen.contains("15 ─NET▶ ↺ 0"), "{screen}");
    assert!(screen.contains("0 -> 1     P2P/IPC"), "{screen}");
    assert!(screen.contains("15 -> 0    NET/IB/0"), "{screen}");
    t.keys(&["]"]);
    t.wait_for(&[">ch 01", "Channel 01: 16 ranks"]);
    t.keys(&["4"]);
    let screen = t.wait_for(&["ch  peer      dir  transport"]);
    assert!(screen.contains("00  15 -> 0   recv NET/IB/0             no"), "{screen}");
    assert!(screen.contains("00  0 -> 7         SHM/direct shared m…"), "{screen}");
    t.keys(&["8"]);
    t.wait_for(&[
        "2 findings",
        "No GPUDirect RDMA on NET connections",
        "GPUs on one node talk through host shared memory",
    ]);
    let screen = open_finding(&t, "p2p_refused_shm");
    assert!(screen.contains("007_nccl-392.log:17"), "{screen}");
    t.keys(&["Escape", "q"]);
    t.wait_for(&["EXIT=0"]);
}

/// `--follow`: lines appended to the log show up without restarting.
#[test]
fn follow_picks_up_appended_lines() {
    for job in jobs("tui --follow on a real NCCL log") {
        let dir = temp_dir(&format!("follow-{}", job.name));
        let path = dir.join("job.log");
        std::fs::write(&path, &job.head).unwrap();
        let t = Tmux::start(&format!("follow-{}", job.name), &["tui", "--log", path.to_str().unwrap(), "--follow"]);
        t.wait_for(&job.head_overview);
        t.keys(&["2"]);
        t.wait_for(&job.head_ring);
        append(&path, &job.rest);
        t.wait_for(&job.whole_ring);
        t.keys(&["q"]);
        t.wait_for(&["EXIT=0"]);
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `collscope serve --log FILE --follow` on `addr`; returns the server and its URL.
fn serve(log: &Path, addr: &str) -> (Proc, String) {
    live::start(&["serve", "--log", log.to_str().unwrap(), "--follow", "--poll-ms", "100", "--metrics-addr", addr])
}

/// Against a live `collscope serve`: lines appended to the served log arrive as events and the counts move;
/// when the server goes away the TUI says "disconnected" and keeps the picture, and reconnects when it is back;
/// the recording it wrote replays the same picture.
#[test]
fn connect_follows_a_live_server_survives_its_loss_and_records() {
    for job in jobs("tui --connect to serve of a real NCCL log") {
        let dir = temp_dir(&format!("connect-{}", job.name));
        let log = dir.join("job.log");
        std::fs::write(&log, &job.head).unwrap();
        let rec = dir.join("rec.jsonl");
        let (server, url) = serve(&log, "127.0.0.1:0");
        let t = Tmux::start(
            &format!("connect-{}", job.name),
            &["tui", "--connect", &url, "--record", rec.to_str().unwrap()],
        );
        t.wait_for(&job.head_overview);
        append(&log, &job.rest);
        t.wait_for(&job.whole_overview);
        t.keys(&["4"]);
        t.wait_for(&[&job.channel_row]);
        drop(server);
        let screen = t.wait_for(&["disconnected, retry"]);
        assert!(screen.contains(&job.channel_row), "the last picture stays:\n{screen}");
        let addr = url.trim_start_matches("http://").to_string();
        let (server, _) = serve(&log, &addr);
        t.wait_for(&["live", job.channel_row.as_str()]);
        t.keys(&["q"]);
        t.wait_for(&["EXIT=0"]);
        drop(server);

        let replay = Tmux::start(&format!("replay-{}", job.name), &["tui", "--replay", rec.to_str().unwrap()]);
        replay.wait_for(&[&job.whole_overview[..], &strings(&["ended"])].concat());
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The number before " operations" in the Ops view.
fn ops_count(screen: &str) -> u64 {
    screen
        .lines()
        .find_map(|l| l.trim().strip_suffix(" operations").and_then(|n| n.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no operation count on screen:\n{screen}"))
}

/// The sequence numbers of the operation rows on screen.
fn seq_rows(screen: &str) -> Vec<u64> {
    screen.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect()
}

/// `collscope demo` on a terminal opens the TUI on rank 0's live telemetry: operations arrive and their count
/// moves while the ranks train; `q` ends the ranks and the launcher exits cleanly.
#[test]
fn demo_opens_the_tui_and_its_counters_move() {
    let base = free_ports(4);
    let addr = format!("127.0.0.1:{base}");
    // Longer than the test: `q` must end the ranks, not wait for them.
    let t = Tmux::start("demo", &["demo", "--nranks", "2", "--duration", "200", "--metrics-addr", &addr]);
    t.wait_for(&["live", "SHM"]);
    t.keys(&["7"]);
    let screen = t.wait_for(&[" operations"]);
    let (first, first_rows) = (ops_count(&screen), seq_rows(&screen));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let screen = t.screen();
        // The count grows until the TUI keeps its most it will; after that the oldest rows give way to new ones.
        if ops_count(&screen) > first || seq_rows(&screen) != first_rows {
            break;
        }
        assert!(Instant::now() < deadline, "the operations stayed at {first}:\n{screen}");
        std::thread::sleep(Duration::from_millis(200));
    }
    t.wait_for(&["AllReduce"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
}

/// At 80x24 on collscope's own log: the help fits inside its frame, wrapped; an open finding scrolls down to
/// the end of its fix, which the view cannot show at once.
#[test]
fn help_fits_and_an_open_finding_scrolls_at_80x24() {
    let dir = temp_dir("fit");
    let log = dir.join("job.log");
    std::fs::write(&log, own_log()).unwrap();
    let t = Tmux::start("fit", &["tui", "--log", log.to_str().unwrap()]);
    t.wait_for(&["1Overview"]);
    t.keys(&["?"]);
    let screen = t.wait_for(&["Any key closes this help.", "(Ops)"]);
    let framed: Vec<&str> = screen.lines().filter(|l| l.starts_with('│')).collect();
    assert!(framed.len() > 10 && framed.iter().all(|l| l.trim_end().ends_with('│')), "{screen}");
    assert!(screen.lines().any(|l| l.starts_with('└')), "the frame closes on screen:\n{screen}");
    t.keys(&["Escape"]);
    let screen = open_finding(&t, "p2p_refused_shm");
    assert!(screen.contains("(j/k scroll)") && !screen.contains("(--ipc=host)."), "{screen}");
    t.keys(&vec!["j"; 30]);
    t.wait_for(&["(--ipc=host)."]);
    std::fs::remove_dir_all(&dir).ok();
}

/// Ops on a replay: space pauses at the newest call (the next snapshot's calls wait, counted), space resumes,
/// `s` sorts slowest first, and Esc clears a filter being typed.
#[test]
fn ops_pause_sort_and_esc_clear_the_filter() {
    let dir = temp_dir("ops");
    let rec = dir.join("rec.jsonl");
    let mut s = Snapshot::new(Source::Runtime);
    s.ops = (1..=3).map(op).collect();
    let first = serde_json::json!({"t": 0.0, "event": "fetched_snapshot", "data": s});
    s.ops = (1..=7).map(op).collect();
    s.ops[4].duration_us = Some(900.0);
    let second = serde_json::json!({"t": 4.0, "event": "fetched_snapshot", "data": s});
    std::fs::write(&rec, format!("{first}\n{second}\n")).unwrap();
    let t = Tmux::start("ops", &["tui", "--replay", rec.to_str().unwrap()]);
    t.wait_for(&["1Overview"]);
    t.keys(&["7"]);
    t.wait_for(&["3 operations", "rank    seq collective"]);
    t.keys(&["Space"]);
    t.wait_for(&["3 operations, PAUSED at #3: 4 newer not shown"]);
    t.keys(&["Space"]);
    t.wait_for(&["7 operations"]);
    t.keys(&["s"]);
    let screen = t.wait_for(&["7 operations, slowest first"]);
    let first_row = screen.lines().skip_while(|l| !l.starts_with("rank")).nth(1).unwrap_or("");
    assert!(first_row.starts_with("   0      5 AllReduce"), "{screen}");
    t.keys(&["/", "x", "y", "z"]);
    t.wait_for(&["0 of 7 operations match 'xyz'"]);
    t.keys(&["Escape"]);
    let screen = t.wait_for(&["7 operations, slowest first"]);
    assert!(!screen.contains("match"), "{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A log cut short after two ranks printed their ring neighbours: the Rings view draws what was seen, open,
/// and never closes the ring with an edge no line printed.
#[test]
fn a_ring_seen_in_part_is_drawn_partial() {
    let dir = temp_dir("partial");
    let log = dir.join("cut.log");
    let text: String = [(0, 3, 1), (1, 0, 2)]
        .iter()
        .map(|&(r, prev, next)| format!("host:1:1 [{r}] NCCL INFO {}\n", lines::ring_line(0, prev, r, next)))
        .collect();
    std::fs::write(&log, text).unwrap();
    let t = Tmux::start("partial", &["tui", "--log", log.to_str().unwrap()]);
    t.wait_for(&["1Overview"]);
    t.keys(&["2"]);
    let screen = t.wait_for(&["Channel 00: 3 ranks, partial", "0 ─?▶ 1 ─?▶ 2"]);
    assert!(!screen.contains("↺"), "{screen}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `collscope demo --no-tui` of four rank processes serving telemetry from a free base port. Dropping it resumes
/// any rank it stopped, then its `Proc` kills the whole job.
struct Demo {
    proc: Proc,
    base: u16,
    stopped: Vec<u32>,
}

/// How long a demo of a live-job test may run.
const DEMO_LIFE: Duration = Duration::from_secs(300);
/// How long a wait on a demo may take: four ranks start slowly on a loaded machine.
const DEMO_WAIT: Duration = Duration::from_secs(90);

impl Demo {
    fn start(env: &[(&str, &str)]) -> Demo {
        Demo::start_with(env, &[])
    }

    /// [`Demo::start`] with more `demo` arguments.
    fn start_with(env: &[(&str, &str)], args: &[&str]) -> Demo {
        let demo = Demo::launch(env, args);
        demo.poll("rank 0's job view of 4 ranks", |d| {
            let job = d.job()?;
            (job.ranks.len() == 4 && job.ranks.iter().all(|r| r.state != RankState::Unreachable)).then_some(())
        });
        demo
    }

    /// The demo, started and not waited for (a fault may stop or kill a rank before every rank has answered).
    fn launch(env: &[(&str, &str)], args: &[&str]) -> Demo {
        let base = free_ports(4);
        let addr = format!("127.0.0.1:{base}");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
        cmd.args([
            "demo",
            "--no-tui",
            "--nranks",
            "4",
            "--duration",
            "240",
            "--grad-mib",
            "1",
            "--metrics-addr",
            &addr,
        ])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        Demo { proc: Proc::spawn(&mut cmd, DEMO_LIFE), base, stopped: Vec::new() }
    }

    fn url(&self, rank: u16) -> String {
        format!("http://127.0.0.1:{}", self.base + rank)
    }

    fn get(&self, path: &str) -> Option<String> {
        self.get_from(0, path)
    }

    fn get_from(&self, rank: u16, path: &str) -> Option<String> {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().ok()?;
        client.get(format!("{}{path}", self.url(rank))).send().ok()?.text().ok()
    }

    fn job(&self) -> Option<JobView> {
        self.job_of(0)
    }

    fn job_of(&self, rank: u16) -> Option<JobView> {
        serde_json::from_str(&self.get_from(rank, "/api/v1/job")?).ok()
    }

    /// Polls `f` every 100 ms until it gives something (within [`DEMO_WAIT`]).
    fn poll<T>(&self, what: &str, mut f: impl FnMut(&Demo) -> Option<T>) -> T {
        collscope_testkit::poll(what, DEMO_WAIT, || f(self).ok_or(()))
    }

    /// Sends `signal` to rank `rank`'s process.
    fn signal(&mut self, rank: u32, signal: nix::sys::signal::Signal) {
        let pid = self.poll("the rank's process", |d| procs::rank_process(d.proc.id(), rank));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("signal the rank");
        if signal == nix::sys::signal::Signal::SIGSTOP {
            self.stopped.push(pid);
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        for pid in &self.stopped {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGCONT);
        }
    }
}

/// `tui --connect` to one rank shows every rank of the job in the strip, and `>` shows the next rank's own
/// snapshot.
#[test]
fn connect_shows_every_rank_in_the_strip_and_switches_rank() {
    let demo = Demo::start(&[]);
    let t = Tmux::start("strip", &["tui", "--connect", &demo.url(1)]);
    // The strip (the job view) and the connected rank's snapshot (it lists the ranks' endpoints) are both in.
    t.wait_for(&["Job: 4 ranks, showing the connected rank", " r0 ", " r1 ", " r2 ", " r3 ", "ranks 4"]);
    // The live job's rings, every channel of them, closed over the 4 ranks, and its tuning table and choices.
    let snap: Snapshot = serde_json::from_str(&demo.get("/api/v1/snapshot").expect("rank 0's snapshot")).unwrap();
    assert!(!snap.rings.is_empty() && !snap.trees.is_empty() && !snap.tuning.is_empty(), "{snap:?}");
    t.keys(&["2"]);
    for ring in &snap.rings {
        t.wait_for(&[format!("Channel {:02}: 4 ranks, data flows left to right and wraps", ring.channel)]);
        t.keys(&["]"]);
    }
    t.keys(&["6"]);
    t.wait_for(&["AllReduce: latency us/bandwidth GB/s per cell", "Ring ", "Tree ", "Recent calls", "predicted"]);
    t.keys(&[">", ">", ">", "7"]);
    // Rank 2's own calls, once its snapshot came in (the view says "0 operations" until then).
    t.wait_for(&["showing rank 2", ">r2 ", " operations", "AllReduce"]);
    t.keys(&[">", ">"]);
    t.wait_for(&["showing the connected rank"]);
}

/// The demo keeps its buffers in registered windows: on a terminal wide enough, Channels shows the share of each
/// SHM connection's bytes that moved in place, live, and it is not nothing.
#[test]
fn channels_show_the_share_of_bytes_the_demos_registered_buffers_moved_in_place() {
    let demo = Demo::start(&[]);
    let t = Tmux::start_sized("inplace", (120, 30), &["tui", "--connect", &demo.url(0)]);
    t.wait_for(&["live", "SHM"]);
    t.keys(&["4"]);
    t.wait_for(&["ch  peer      dir  transport", "in place"]);
    let deadline = Instant::now() + DEMO_WAIT;
    loop {
        let screen = t.screen();
        // A share column value: digits then %, on a row of an SHM connection.
        let shares: Vec<u32> = screen
            .lines()
            .filter(|l| l.contains("SHM"))
            .flat_map(|l| l.split_whitespace().filter_map(|w| w.strip_suffix('%')?.parse().ok()))
            .collect();
        if shares.iter().any(|s| *s > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "no SHM connection moved bytes in place:\n{screen}");
        std::thread::sleep(Duration::from_millis(200));
    }
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
}

/// A Channels row's cells after its transport label and GDR column: sent, received, rate, each `-` (unknown) or a
/// number with its unit.
fn cells_after(row: &str, label: &str) -> Vec<Option<String>> {
    let words: Vec<&str> = row.split_whitespace().collect();
    let at = words.iter().position(|w| w.starts_with(label)).unwrap_or_else(|| panic!("no {label} in {row}"));
    let mut out = Vec::new();
    let mut rest = words[at + 2..].iter();
    while let Some(w) = rest.next() {
        out.push((*w != "-").then(|| format!("{w} {}", rest.next().copied().unwrap_or(""))));
    }
    out
}

/// Polls the TUI's screen until `f` finds what it wants on it (within [`DEMO_WAIT`]).
fn poll_screen<T>(t: &Tmux, what: &str, mut f: impl FnMut(&str) -> Option<T>) -> T {
    let deadline = Instant::now() + DEMO_WAIT;
    loop {
        let screen = t.screen();
        if let Some(v) = f(&screen) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}:\n{screen}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The Rings view's edge rows on `screen`, right of the channel list: (src, dst, transport, rate) with the rate
/// in its unit's numbers, `None` for `-`.
fn ring_rows(screen: &str) -> Vec<(u32, u32, String, Option<f64>)> {
    screen
        .lines()
        .map(|l| l.rsplit('│').next().unwrap_or(l).split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 5 && w[1] == "->" && w[0].parse::<u32>().is_ok())
        .filter_map(|w| Some((w[0].parse().ok()?, w[2].parse().ok()?, w[3].to_string(), w[4].parse().ok())))
        .collect()
}

/// The edge map of a live 4-rank demo on one host whose ranks connect over `transport` (`env` forces it), whole
/// on any rank: rank 2's `/metrics` counts what it received over it (no `transport="unknown"`); a TUI connected
/// to rank 0 draws channel 0's ring on one row, under the ranks' one host, every edge tagged `tag` (no `?`), and
/// every edge row has its transport and a rate (the sender's count: rank 0's own, the others' from the job
/// view); Trees has every rank's place (no parent left out); `>` `>` `>` (rank 2): its own edge to the next rank
/// shows a rate and Channels lists what rank 2 sent on it and received from the rank before it.
fn live_edge_map(name: &str, env: &[(&str, &str)], transport: &str, tag: &str) {
    let demo = Demo::start(env);
    let metrics = demo.poll("rank 2's received bytes", |d| {
        let m = d.get_from(2, "/metrics")?;
        m.lines()
            .any(|l| l.starts_with("collscope_channel_bytes_total{") && l.contains("direction=\"recv\""))
            .then_some(m)
    });
    let bytes: Vec<&str> = metrics.lines().filter(|l| l.starts_with("collscope_channel_bytes_total{")).collect();
    assert!(bytes.iter().all(|l| !l.contains("transport=\"unknown\"")), "{metrics}");
    let recv = format!("transport=\"{transport}\"");
    assert!(bytes.iter().any(|l| l.contains("direction=\"recv\"") && l.contains(&recv)), "{metrics}");
    let snap: Snapshot = serde_json::from_str(&demo.get_from(2, "/api/v1/snapshot").unwrap()).unwrap();
    let printed = snap.rings.iter().find(|r| r.channel == 0).expect("rank 2's ring on channel 0");
    let n = printed.order.len();
    let at = |rank| printed.order.iter().position(|&r| r == rank).unwrap();
    let (prev, next) = (printed.order[(at(2) + n - 1) % n], printed.order[(at(2) + 1) % n]);
    // The view draws the ring in its printed order, after the host's name (cut to 16 characters).
    let order: Vec<String> = printed.order.iter().map(u32::to_string).collect();
    let host: String =
        snap.endpoints.iter().find(|e| e.rank == 0).expect("rank 0's host").host.chars().take(16).collect();

    let t = Tmux::start_sized(name, (120, 30), &["tui", "--connect", &demo.url(0)]);
    t.wait_for(&["Job: 4 ranks, showing the connected rank"]);
    t.keys(&["2"]);
    let cycle = ring(&order.iter().map(String::as_str).collect::<Vec<_>>(), tag);
    let every_edge = |screen: &str| {
        let rows = ring_rows(screen);
        let whole = screen.lines().any(|l| l.contains(&cycle) && l.contains(&host)) && !screen.contains("─?▶");
        let moving = rows.len() == 4 && rows.iter().all(|r| r.2.starts_with(transport) && r.3.is_some_and(|v| v > 0.0));
        (whole && moving).then_some(())
    };
    poll_screen(&t, "channel 0's ring under one host, every edge's transport and rate", every_edge);
    t.keys(&["3"]);
    poll_screen(&t, "every rank's place in channel 0's tree", |screen| {
        (screen.contains("Channel 00 tree") && !screen.contains("(parent") && !screen.contains("no tree line"))
            .then_some(())
    });
    t.keys(&["2", ">", ">", ">"]);
    t.wait_for(&["showing rank 2"]);
    poll_screen(&t, "rank 2's own edge and every other edge with a rate", |screen| {
        let rows = ring_rows(screen);
        let own = rows.iter().any(|r| (r.0, r.1) == (2, next) && r.3.is_some_and(|v| v > 0.0));
        (own && rows.len() == 4 && rows.iter().all(|r| r.3.is_some())).then_some(())
    });
    t.keys(&["4"]);
    t.wait_for(&["ch  peer      dir  transport"]);
    // A P2P or SHM line names both ends; NET has the sender's `send` and the receiver's `recv` line.
    let (send, receive) = if transport == "NET" { ("send", "recv") } else { ("", "") };
    let sent_row = format!("{:<3} {:<9} {:<4} {transport}", "00", format!("2 -> {next}"), send);
    let recv_row = format!("{:<3} {:<9} {:<4} {transport}", "00", format!("{prev} -> 2"), receive);
    poll_screen(&t, "rank 2's sent and received bytes on channel 0", |screen| {
        let sent = screen.lines().find(|l| l.starts_with(&sent_row)).map(|l| cells_after(l, transport))?;
        let recv = screen.lines().find(|l| l.starts_with(&recv_row)).map(|l| cells_after(l, transport))?;
        // sent, received, rate: rank 2 counts what it sent to `next` and what it received from `prev`.
        (sent[0].is_some() && recv[1].is_some()).then_some(())
    });
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
}

#[test]
fn the_edge_map_of_a_live_shm_job_is_whole_on_any_rank() {
    live_edge_map("edges-shm", &[], "SHM", "SHM");
}

#[test]
fn the_edge_map_of_a_live_net_socket_job_is_whole_on_any_rank() {
    let env = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NET", "Socket")];
    live_edge_map("edges-net", &env, "NET", "NET");
}

/// kill -9 of one rank: within 10 s a surviving rank's snapshot, its `/metrics` and the TUI's Findings view
/// name the dead rank.
#[test]
fn a_killed_rank_is_a_finding_in_a_survivors_snapshot_metrics_and_tui_within_10_s() {
    let mut demo = Demo::start(&[]);
    let t = Tmux::start("killed", &["tui", "--connect", &demo.url(0)]);
    t.wait_for(&["Job: 4 ranks"]);
    t.keys(&["8"]);
    demo.signal(2, nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let finding = demo.poll("a finding about rank 2 in rank 0's snapshot", |d| {
        let snap: Snapshot = serde_json::from_str(&d.get("/api/v1/snapshot")?).ok()?;
        snap.findings.into_iter().find(|f| f.rank == Some(2) && f.severity == Severity::Error)
    });
    let in_snapshot = killed.elapsed();
    assert_eq!(finding.code, "peer_exited");
    assert!(finding.title.contains("rank 2 closed its connection"), "{finding:?}");
    let metrics = demo.get("/metrics").expect("rank 0's metrics");
    assert!(metrics.contains("collscope_findings{code=\"peer_exited\",severity=\"error\"} 1"), "{metrics}");
    assert!(metrics.contains("collscope_errors_total{class=\"peer\",rank=\"2\"} 1"), "{metrics}");
    t.wait_for(&["rank 2 closed its connection"]);
    let on_screen = killed.elapsed();
    eprintln!("kill -9 of rank 2: finding in rank 0's snapshot after {in_snapshot:?}, on the TUI after {on_screen:?}");
    assert!(on_screen < Duration::from_secs(10), "{on_screen:?}");
}

/// A SIGSTOPped rank: rank 0's job view names it as not arrived at the call the others wait in (collective
/// and seq), well within the runtime's timeout.
#[test]
fn a_stopped_rank_is_named_as_not_arrived_at_the_call_the_others_wait_in() {
    const TIMEOUT_S: u64 = 60;
    let timeout = TIMEOUT_S.to_string();
    let mut demo = Demo::start(&[("COLLSCOPE_TIMEOUT_S", &timeout), ("COLLSCOPE_PEER_TIMEOUT", &timeout)]);
    demo.signal(2, nix::sys::signal::Signal::SIGSTOP);
    let stopped = Instant::now();
    let (finding, waiting) = demo.poll("rank 0's job view to name rank 2", |d| {
        let job = d.job()?;
        let f = job.findings.into_iter().find(|f| f.code == "rank_not_arrived" && f.rank == Some(2))?;
        let calls: Vec<InFlight> = job.ranks.iter().filter_map(|r| r.comms.first()?.in_flight.clone()).collect();
        Some((f, calls))
    });
    let took = stopped.elapsed();
    eprintln!("SIGSTOP of rank 2: named after {took:?}: {} | {}", finding.title, finding.detail);
    // The call named is the one the others wait in (ranks may be in different calls: one still finishing the
    // call before).
    let named = |c: &InFlight| finding.title == format!("rank 2 has not arrived at {} (stopped)", c.call());
    assert!(waiting.iter().any(named), "{} is not a call the others wait in: {waiting:?}", finding.title);
    assert!(finding.detail.contains("rank 2 is stopped: its process (pid "), "{}", finding.detail);
    assert!(took < Duration::from_secs(TIMEOUT_S), "{took:?}");
}

/// `demo --fault mismatch`: rank 1 broadcasts where the others all-reduce; rank 0's job view names rank 1, the
/// sequence number and what differs, while the ranks wait (as NCCL's ranks would) rather than abort.
#[test]
fn a_rank_that_calls_another_collective_is_named_with_the_sequence_number_and_what_differs() {
    let timeout = "60";
    let demo = Demo::start_with(
        &[("COLLSCOPE_TIMEOUT_S", timeout), ("COLLSCOPE_PEER_TIMEOUT", timeout)],
        &["--fault", "mismatch:rank=1,step=3"],
    );
    let (f, comms) = demo.poll("rank 0's job view to find the mismatch", |d| {
        let job = d.job()?;
        let comms: Vec<Option<String>> =
            job.ranks.iter().flat_map(|r| r.comms.iter().map(|c| c.comm.clone())).collect();
        Some((job.findings.into_iter().find(|f| f.code == "collective_mismatch")?, comms))
    });
    assert_eq!(f.rank, Some(1), "{f:?}");
    // The finding names the communicator the ranks disagree in (the demo's one, unnamed).
    let comm = f.comm.as_ref().expect("the mismatch's communicator");
    assert!(comms.contains(&Some(comm.id.clone())) && comm.name.is_none(), "{comm:?} not in {comms:?}");
    // The others' calls at that number may have left some ranks' windows of recent calls: at least one remains.
    assert!(
        f.title.starts_with("rank 1 called Broadcast where rank ") && f.title.contains(" called AllReduce at #"),
        "{}",
        f.title
    );
    assert!(f.detail.contains("differ: collective Broadcast vs AllReduce;"), "{}", f.detail);
}

/// The longest wait a not-arrived finding reports ("have waited up to X s").
fn waited_s(detail: &str) -> f64 {
    let rest = detail.split("have waited up to ").nth(1).expect("a wait in the detail");
    rest.split(' ').next().and_then(|x| x.parse().ok()).expect("seconds")
}

/// The sum of every series of `family` whose labels hold `label` in rank 0's metrics text.
fn metric_sum(text: &str, family: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `demo --fault stop:rank=2`: every surviving rank's job view, and the TUI, name rank 2 as not arrived at a call
/// the others wait in and say it is stopped (its /proc state quoted), the first within 5 s of their wait; nothing
/// aborts under the default timeouts; once it resumes, every survivor's job view keeps a stall finding with its
/// duration, naming rank 2 as the rank that did not wait, and the stall metrics count it.
#[test]
fn a_stopped_rank_is_named_stopped_by_every_survivor_then_kept_as_a_stall_and_counted() {
    const STOP_S: f64 = 15.0;
    let mut demo = Demo::launch(&[], &["--fault", &format!("stop:rank=2,secs={STOP_S},step=3")]);
    let t = Tmux::start("stopfault", &["tui", "--connect", &demo.url(0)]);
    let first = demo.poll("rank 0's job view to name rank 2 stopped", |d| {
        d.job()?.findings.into_iter().find(|f| f.code == "rank_not_arrived" && f.rank == Some(2))
    });
    let wait = waited_s(&first.detail);
    eprintln!("--fault stop: named after the others waited {wait} s: {} | {}", first.title, first.detail);
    // 3 s (the threshold) plus up to one job view's round (the stopped rank's fetch times out after 2 s).
    assert!(wait <= 5.5, "named only once the others had waited {wait} s: {}", first.detail);
    for rank in [0, 1, 3] {
        let (f, job) = demo.poll("a survivor's job view to name rank 2 stopped", |d| {
            let job = d.job_of(rank)?;
            let f = job.findings.iter().find(|f| f.code == "rank_not_arrived" && f.rank == Some(2))?.clone();
            f.title.ends_with("(stopped)").then_some((f, job))
        });
        let waiting: Vec<InFlight> = job.ranks.iter().filter_map(|r| r.comms.first()?.in_flight.clone()).collect();
        let named = |c: &InFlight| f.title == format!("rank 2 has not arrived at {} (stopped)", c.call());
        assert!(waiting.iter().any(named), "rank {rank}: {} is not a call the others wait in: {waiting:?}", f.title);
        assert!(f.detail.contains("rank 2 is stopped: its process (pid "), "rank {rank}: {}", f.detail);
        let pid = job.ranks.iter().find(|r| r.rank == 2).and_then(|r| r.pid).expect("rank 2's pid");
        assert_eq!(f.evidence[0].file, format!("/proc/{pid}/stat"));
        assert!(f.evidence[0].text.contains(") T"), "{:?}", f.evidence);
        assert!(f.fix.contains(&format!("kill -CONT {pid}")), "{}", f.fix);
    }
    t.keys(&["8"]);
    t.wait_for(&["rank 2 has not arrived at", "(stopped)"]);

    // It resumes: no survivor aborted, and each keeps the stall.
    for rank in [0, 1, 3] {
        let stall = demo.poll("a survivor's job view to keep the stall", |d| {
            d.job_of(rank)?.findings.into_iter().find(|f| f.code == "collective_stall")
        });
        let secs: f64 = stall.title.split(" stalled ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).unwrap();
        assert!((STOP_S - 5.0..=STOP_S + 10.0).contains(&secs), "rank {rank}: {}", stall.title);
        assert_eq!(stall.rank, Some(2), "rank {rank}: {}", stall.detail);
        assert!(stall.detail.ends_with("rank 2 did not wait: it arrived last"), "rank {rank}: {}", stall.detail);
    }
    let job = demo.poll("rank 2 to answer again", |d| {
        let job = d.job()?;
        job.ranks.iter().all(|r| r.state != RankState::Unreachable).then_some(job)
    });
    assert!(!job.findings.iter().any(|f| f.code == "rank_not_arrived"), "{:#?}", job.findings);
    let snap: Snapshot = serde_json::from_str(&demo.get("/api/v1/snapshot").unwrap()).unwrap();
    let aborted: Vec<_> = snap.findings.iter().filter(|f| f.code.starts_with("peer_")).collect();
    assert!(aborted.is_empty(), "a survivor gave up on the stopped rank: {aborted:#?}");
    let metrics = demo.get("/metrics").expect("rank 0's metrics");
    assert!(metric_sum(&metrics, "collscope_collective_stalls_total", "rank=\"0\"") >= 1.0, "{metrics}");
    let observed = metric_sum(&metrics, "collscope_collective_stall_seconds_sum", "rank=\"0\"");
    assert!(observed >= STOP_S - 5.0, "{observed} s of stalls: {metrics}");
    // The stall stays once the calls that stalled left the history.
    std::thread::sleep(Duration::from_secs(3));
    assert!(demo.job().unwrap().findings.iter().any(|f| f.code == "collective_stall" && f.rank == Some(2)));
    demo.stopped.clear();
}

/// `demo --fault kill`: a survivor's job view says the killed rank is dead, quoting its process's state.
#[test]
fn a_killed_rank_is_called_dead_in_a_survivors_job_view() {
    let demo = Demo::launch(&[], &["--fault", "kill:rank=2,step=3"]);
    let f = demo.poll("rank 0's job view to call rank 2 dead", |d| {
        d.job()?.findings.into_iter().find(|f| f.rank == Some(2) && f.title == "rank 2 is dead")
    });
    assert!(f.detail.contains("rank 2 is dead: its process (pid "), "{}", f.detail);
    assert!(f.detail.contains("has exited"), "{}", f.detail);
    assert!(f.evidence[0].file.starts_with("/proc/"), "{:?}", f.evidence);
    assert!(f.fix.contains("exit status"), "{}", f.fix);
}

/// `demo --fault slow:rank=1,factor=2`: rank 1 reaches every call twice as late as it would; within 30 s of the
/// job answering, every rank's job view names rank 1 a straggler with its lag, the calls and the window, and no
/// other rank.
#[test]
fn a_rank_slowed_by_2_is_named_a_straggler_in_every_ranks_job_view_within_30_s() {
    let demo = Demo::start_with(&[], &["--fault", "slow:rank=1,factor=2"]);
    let answering = Instant::now();
    for rank in 0..4u16 {
        let left = Duration::from_secs(30).saturating_sub(answering.elapsed());
        let stragglers = collscope_testkit::poll(&format!("rank {rank}'s job view to name a straggler"), left, || {
            let job = demo.job_of(rank).ok_or_else(|| "no job view".to_string())?;
            let found: Vec<_> = job.findings.iter().filter(|f| f.code == "straggler").cloned().collect();
            if found.is_empty() {
                Err(job.findings.iter().map(|f| f.title.clone()).collect::<Vec<_>>().join(" | "))
            } else {
                Ok(found)
            }
        });
        assert!(stragglers.iter().all(|f| f.rank == Some(1)), "rank {rank}: {stragglers:#?}");
        let f = &stragglers[0];
        assert_eq!(f.title, "rank 1 arrives late at most calls (a straggler)");
        assert!(
            f.detail.contains("latest calls every rank made")
                && f.detail.contains("after the median of the other ranks"),
            "rank {rank}: {}",
            f.detail
        );
        eprintln!("--fault slow: rank {rank} named it after {:?}: {}", answering.elapsed(), f.detail);
    }
}

/// The seq column of the Ops view's rows on screen, top to bottom.
fn ops_seqs(screen: &str) -> Vec<u64> {
    screen
        .lines()
        .filter_map(|l| {
            let mut cells = l.split_whitespace();
            let (_rank, seq) = (cells.next()?.parse::<u32>().ok()?, cells.next()?.parse().ok()?);
            cells.next().filter(|c| c.chars().all(|ch| ch.is_ascii_alphabetic()))?;
            Some(seq)
        })
        .collect()
}

/// The rate on the Overview's Traffic line, in bytes per second.
fn traffic_rate(screen: &str) -> Option<f64> {
    let line = screen.lines().find_map(|l| l.strip_prefix("Traffic"))?;
    let mut cells = line.split_whitespace();
    let n: f64 = cells.next()?.parse().ok()?;
    let unit = match cells.next()? {
        "B/s" => 1.0,
        "kB/s" => 1e3,
        "MB/s" => 1e6,
        "GB/s" => 1e9,
        _ => return None,
    };
    Some(n * unit)
}

/// A recording of the demo's TUI replays with the job's rank strip and its traffic moving (rates on the
/// recording's own clock); paused, a seek forward shows the calls of that moment with none missing.
#[test]
fn a_demo_recording_replays_the_strip_and_rates_and_a_seek_keeps_the_calls_whole() {
    let dir = temp_dir("rec-demo");
    let rec = dir.join("demo.rec");
    let addr = format!("127.0.0.1:{}", free_ports(2));
    let args = ["demo", "--nranks", "2", "--grad-mib", "1", "--metrics-addr", &addr, "--record", rec.to_str().unwrap()];
    let t = Tmux::start("rec-demo", &args);
    t.wait_for(&["live", "Job: 2 ranks", "SHM"]);
    // Past two keyframes (one each 10 s).
    std::thread::sleep(Duration::from_secs(25));
    t.keys(&["q"]);
    t.wait_for(&["EXIT="]);
    let size = std::fs::metadata(&rec).map(|m| m.len()).unwrap_or(0);
    assert!(std::fs::read(&rec).unwrap().starts_with(&[0x1f, 0x8b]), "the recording is gzip ({size} bytes)");

    let replay = Tmux::start("rec-replay", &["tui", "--replay", rec.to_str().unwrap()]);
    replay.wait_for(&["replay playing", "Job: 2 ranks", " r0 ", " r1 ", "Traffic"]);
    poll_screen(&replay, "a traffic rate above 0 B/s", |s| traffic_rate(s).filter(|r| *r > 0.0));
    replay.keys(&["7", "P", ".", "."]);
    let forward = replay.wait_for(&["replay paused 2", " operations"]);
    let seqs = ops_seqs(&forward);
    assert!(seqs.len() > 5, "{forward}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "a gap in the calls: {seqs:?}\n{forward}");
    // The strip is the job as recorded then, too.
    assert!(forward.contains("Job: 2 ranks") && forward.contains(" r1 "), "{forward}");
    std::fs::remove_dir_all(&dir).ok();
}
