//! `collscope tui` end to end: the real binary in a real terminal (tmux), driven by keys, read back with
//! `tmux capture-pane`. Each test uses its own tmux server (`-L`) and kills it at the end.

use collscope_core::model::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
    /// The server's socket file, removed at the end (tmux leaves it behind).
    socket_path: PathBuf,
}

impl Tmux {
    /// Starts `collscope <args>` in an 80x24 pane. The shell around it prints the exit status and lingers, so a
    /// test can check that `q` left the normal screen behind.
    fn start(name: &str, args: &[&str]) -> Tmux {
        let socket = format!("collscope-{name}-{}", std::process::id());
        let bin = env!("CARGO_BIN_EXE_collscope");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let cmd = format!("'{bin}' {}; echo EXIT=$?; sleep 60", quoted.join(" "));
        let mut t = Tmux { socket, socket_path: PathBuf::new() };
        t.tmux(&["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "80", "-y", "24", "sh", "-c", &cmd]);
        t.socket_path = PathBuf::from(t.tmux(&["display-message", "-p", "#{socket_path}"]).trim());
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", "t", k]);
        }
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits (up to 20 s) until every needle is on screen; returns the screen.
    fn wait_for(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if needles.iter().all(|n| screen.contains(n)) {
                return screen;
            }
            assert!(Instant::now() < deadline, "waited 20 s for {needles:?}; the screen is:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.socket).arg("kill-server").output();
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

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

/// A recording of two snapshots 1.5 s apart: the second has more operations.
fn write_recording(path: &Path) {
    let mut s = Snapshot::new(Source::Runtime);
    s.nranks = Some(4);
    s.rings.push(Ring { channel: 0, order: vec![0, 1, 2, 3], truncated: false, neighbours: vec![] });
    s.ops = (1..=3).map(op).collect();
    let first = serde_json::json!({"t": 0.0, "event": "fetched_snapshot", "data": s});
    s.ops = (1..=7).map(op).collect();
    let second = serde_json::json!({"t": 1.5, "event": "fetched_snapshot", "data": s});
    std::fs::write(path, format!("{first}\n{second}\n")).expect("write recording");
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

#[test]
fn bad_arguments_are_reported_without_opening_the_screen() {
    let dir = temp_dir("args");
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"t\": 0, \"event\": \"fetched_snapshot\", \"data\": {}}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_collscope"))
        .args(["tui", "--replay", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdout is not one"), "{err}");
    let t = Tmux::start("args", &["tui", "--replay", bad.to_str().unwrap()]);
    let screen = t.wait_for(&["EXIT=1"]);
    assert!(screen.contains("event 'fetched_snapshot' from the source is not valid"), "{screen}");
    let t2 = Tmux::start("args2", &["tui", "--connect", "localhost:1"]);
    let screen = t2.wait_for(&["EXIT=1"]);
    assert!(screen.contains("'localhost:1' is not a collscope URL: expected http://HOST:PORT"), "{screen}");
    let out = Command::new(env!("CARGO_BIN_EXE_collscope")).args(["tui", "--follow"]).output().unwrap();
    assert!(!out.status.success());
    std::fs::remove_dir_all(&dir).ok();
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/nccl-logs").join(name)
}

/// A real NCCL 2.5 log (16 ranks on 2 nodes, P2P, SHM and NET/IB without GDRDMA): ring rows, edge transports,
/// channels, findings with evidence, help, quit.
#[test]
fn log_views_show_rings_transports_and_findings() {
    let log = fixture("007_nccl-392.log");
    let t = Tmux::start("log", &["tui", "--log", log.to_str().unwrap()]);
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
    t.keys(&["Down", "Enter"]);
    let screen = t.wait_for(&["Evidence", "Fix: "]);
    assert!(screen.contains("007_nccl-392.log:17"), "{screen}");
    t.keys(&["?"]);
    t.wait_for(&["Keys", "Any key closes this help."]);
    t.keys(&["Escape", "q"]);
    let screen = t.wait_for(&["EXIT=0"]);
    assert!(!screen.contains("1Overview"), "{screen}");
}

/// `--follow`: lines appended to the log show up without restarting.
#[test]
fn follow_picks_up_appended_lines() {
    let dir = temp_dir("follow");
    let text = std::fs::read_to_string(fixture("007_nccl-392.log")).expect("fixture log");
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().take_while(|l| !l.contains("Ring 00 :")).count();
    let path = dir.join("job.log");
    std::fs::write(&path, lines[..head].join("\n") + "\n").unwrap();
    let t = Tmux::start("follow", &["tui", "--log", path.to_str().unwrap(), "--follow"]);
    t.wait_for(&["ranks 16", "Transports  -", "live"]);
    t.keys(&["2"]);
    t.wait_for(&["0 ─?▶ 1"]);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    t.wait_for(&["0 ─P2P▶ 1", "15 ─NET▶ ↺ 0"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A `collscope serve` child, killed when dropped so a failing test leaves no process behind.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `collscope serve --log FILE --follow` on `addr`; returns the server and its URL (from its first line).
fn serve(log: &Path, addr: &str) -> (Server, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_collscope"))
        .args(["serve", "--log", log.to_str().unwrap(), "--follow", "--poll-ms", "100", "--metrics-addr", addr])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("collscope serve starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("serve prints its URL");
    let url = line.split_whitespace().find_map(|w| w.strip_suffix("/healthz")).map(str::to_string);
    (Server(child), url.unwrap_or_else(|| panic!("no URL in {line:?}")))
}

/// Against a live `collscope serve`: lines appended to the served log arrive as events and the counts move;
/// when the server goes away the TUI says "disconnected" and keeps the picture, and reconnects when it is back;
/// the recording it wrote replays the same picture.
#[test]
fn connect_follows_a_live_server_survives_its_loss_and_records() {
    let dir = temp_dir("connect");
    let text = std::fs::read_to_string(fixture("007_nccl-392.log")).expect("fixture log");
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().take_while(|l| !l.contains("Ring 00 :")).count();
    let log = dir.join("job.log");
    std::fs::write(&log, lines[..head].join("\n") + "\n").unwrap();
    let rec = dir.join("rec.jsonl");
    let (server, url) = serve(&log, "127.0.0.1:0");
    let t = Tmux::start("connect", &["tui", "--connect", &url, "--record", rec.to_str().unwrap()]);
    t.wait_for(&["ranks 16", "Transports  -", "live"]);
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    t.wait_for(&["NET x2  P2P x2  SHM x1", "GDRDMA on 0 of 2 NET connections"]);
    t.keys(&["4"]);
    t.wait_for(&["00  15 -> 0   recv NET/IB/0"]);
    drop(server);
    let screen = t.wait_for(&["disconnected, retry"]);
    assert!(screen.contains("00  15 -> 0   recv NET/IB/0"), "the last picture stays:\n{screen}");
    let addr = url.trim_start_matches("http://").to_string();
    let (server, _) = serve(&log, &addr);
    t.wait_for(&["live", "00  15 -> 0   recv NET/IB/0"]);
    t.keys(&["q"]);
    t.wait_for(&["EXIT=0"]);
    drop(server);

    let replay = Tmux::start("connect-replay", &["tui", "--replay", rec.to_str().unwrap()]);
    replay.wait_for(&["ranks 16", "NET x2  P2P x2  SHM x1", "ended"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A base port whose next `n` ports are free now (the demo's ranks serve on base + local rank).
fn free_ports(n: u16) -> u16 {
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let base = first.local_addr().unwrap().port();
        let rest: Vec<_> = (1..n)
            .map_while(|i| base.checked_add(i))
            .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if rest.len() == usize::from(n - 1) {
            return base;
        }
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
/// moves while the ranks train; after `q` the launcher waits for its ranks and exits cleanly.
#[test]
fn demo_opens_the_tui_and_its_counters_move() {
    let base = free_ports(4);
    let addr = format!("127.0.0.1:{base}");
    let t = Tmux::start("demo", &["demo", "--nranks", "2", "--duration", "6", "--metrics-addr", &addr]);
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
