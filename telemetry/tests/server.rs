//! The HTTP endpoints, served for real on loopback ports the OS picks.

use collscope_model::{Algorithm, Collective, DataType, Event, OpRecord, OpState, Protocol, Source, Warning};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::io::{BufRead, BufReader};
use std::time::Duration;

fn recorder() -> &'static Recorder {
    Box::leak(Box::new(Recorder::new()))
}

fn config() -> TelemetryConfig {
    TelemetryConfig::new("127.0.0.1:0".parse().unwrap())
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

fn get(url: &str) -> String {
    let r = client().get(url).send().unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.text().unwrap()
}

fn completed(rank: u32, seq: u64) -> OpRecord {
    OpRecord {
        comm: Some("0xc0".into()),
        rank,
        seq,
        coll: Collective::AllGather,
        count: 256,
        datatype: DataType::F32,
        op: None,
        root: None,
        peer: None,
        bytes: 1024,
        algo: Some(Algorithm::Ring),
        proto: Some(Protocol::Ll),
        n_channels: Some(1),
        state: OpState::Completed,
        enqueued_us: Some(10),
        started_us: Some(11),
        completed_us: Some(31),
        duration_us: Some(20.0),
        algbw_gbps: Some(0.05),
        busbw_gbps: Some(0.025),
    }
}

#[test]
fn endpoints_serve_what_the_runtime_recorded() {
    let rec = recorder();
    let t = Telemetry::start(&config(), Source::Runtime, Some(rec)).unwrap();
    assert!(t.addr().ip().is_loopback());
    assert!(rec.is_enabled(), "starting telemetry turns the recorder on");
    assert_eq!(get(&format!("{}/healthz", t.url())), "ok\n");

    rec.push(Event::OpCompleted(completed(3, 1)));
    rec.push(Event::Warning(Warning {
        rank: Some(3),
        host: None,
        line: None,
        text: "NET/Socket : peer closed".into(),
        class: "socket".into(),
        source: None,
    }));
    let resp = client().get(format!("{}/metrics", t.url())).send().unwrap();
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let text = resp.text().unwrap();
    assert!(
        text.contains("collscope_collective_operations_total{algorithm=\"Ring\",collective=\"AllGather\",comm_name=\"0xc0\",protocol=\"LL\",rank=\"3\",size_bucket=\"0-1KiB\"} 1"),
        "{text}"
    );
    assert!(text.contains("collscope_errors_total{class=\"socket\",rank=\"3\"} 1"), "{text}");

    let snap: serde_json::Value = serde_json::from_str(&get(&format!("{}/api/v1/snapshot", t.url()))).unwrap();
    assert_eq!(snap["source"]["kind"], "runtime");
    assert_eq!(snap["ops"][0]["seq"], 1);
    assert_eq!(snap["warnings"][0]["class"], "socket");

    let missing = client().get(format!("{}/nope", t.url())).send().unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    t.shutdown().unwrap();
    assert!(!rec.is_enabled(), "shutting down turns the recorder off");
}

#[test]
fn event_stream_delivers_events_as_they_happen() {
    let rec = recorder();
    let t = Telemetry::start(&config(), Source::Runtime, Some(rec)).unwrap();
    let resp = client().get(format!("{}/api/v1/events", t.url())).send().unwrap();
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    // The subscription exists once the response head arrived; what is recorded now reaches it.
    rec.push(Event::OpCompleted(completed(0, 42)));
    let mut lines = BufReader::new(resp).lines();
    let mut event = None;
    let mut data = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(e) = line.strip_prefix("event: ") {
            event = Some(e.to_string());
        } else if let Some(d) = line.strip_prefix("data: ") {
            data = Some(d.to_string());
            break;
        }
    }
    assert_eq!(event.as_deref(), Some("op_completed"));
    let ev: Event = serde_json::from_str(&data.unwrap()).unwrap();
    match ev {
        Event::OpCompleted(op) => assert_eq!(op.seq, 42),
        other => panic!("unexpected event {other:?}"),
    }
    drop(lines);
    t.shutdown().unwrap();
}

#[test]
fn local_rank_zero_aggregates_the_other_ranks_metrics() {
    let rec1 = recorder();
    let peer = Telemetry::start(&config(), Source::Runtime, Some(rec1)).unwrap();
    rec1.push(Event::OpCompleted(completed(1, 1)));
    // A port nobody listens on: bind one, note it, free it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut cfg = config();
    cfg.aggregate_peers = vec![peer.addr(), dead];
    let rec0 = recorder();
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec0)).unwrap();
    rec0.push(Event::OpCompleted(completed(0, 1)));
    let text = get(&format!("{}/metrics/aggregate", t.url()));
    assert_eq!(text.matches("# TYPE collscope_collective_operations_total counter").count(), 1, "{text}");
    for rank in ["0", "1"] {
        assert!(
            text.contains(&format!("collective=\"AllGather\",comm_name=\"0xc0\",protocol=\"LL\",rank=\"{rank}\"")),
            "{text}"
        );
    }
    assert!(text.contains(&format!("collscope_aggregate_peer_up{{peer=\"{}\"}} 1", peer.addr())), "{text}");
    assert!(text.contains(&format!("collscope_aggregate_peer_up{{peer=\"{dead}\"}} 0")), "{text}");
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = TelemetryConfig::new(held.local_addr().unwrap());
    let err = Telemetry::start(&cfg, Source::Runtime, None).err().expect("the port is taken").to_string();
    assert!(err.contains(&held.local_addr().unwrap().to_string()) && err.contains("cannot serve"), "{err}");
}

/// 512 clients open an event stream each and read nothing (the cap of connections, issue 48): streams have their
/// own smaller cap, past which a stream request is answered 503 and closed, so `/metrics` still gets through.
#[test]
fn held_event_streams_leave_room_for_scrapes() {
    use std::io::{Read, Write};
    const HELD: usize = 512;
    // Both ends of every connection live in this process: room for them past a default soft limit of 1024.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, soft.max(hard.min(4096)), hard).unwrap();
    let t = Telemetry::start(&config(), Source::Runtime, None).unwrap();
    let held: Vec<std::net::TcpStream> = (0..HELD)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(t.addr()).unwrap();
            s.write_all(b"GET /api/v1/events HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    // The streams past the cap are answered and closed as the server gets to them: /metrics gets in once it has.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let r = client().get(format!("{}/metrics", t.url())).send().map(|r| r.status().as_u16());
        if r.as_ref().is_ok_and(|s| *s == 200) || std::time::Instant::now() > until {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answer.ok(), Some(200), "/metrics with {HELD} event streams held");
    let mut streams = 0;
    for mut s in held {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        streams += usize::from(&head == b"HTTP/1.1 200");
    }
    assert_eq!(streams, collscope_telemetry::config::MAX_STREAMS, "streams served, the rest refused");
}

/// The first line of the answer to a new event stream request.
fn stream_answer(t: &Telemetry) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(t.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /api/v1/events HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    let _ = s.read_exact(&mut head);
    String::from_utf8_lossy(&head).into_owned()
}

/// An event stream whose client stops reading (a 4 KiB receive window, never read) is closed once a write has
/// waited the write timeout, and its place goes to the next stream.
#[test]
fn a_stream_nobody_reads_is_closed_and_its_place_freed() {
    use nix::sys::socket::{connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let rec = recorder();
    let mut cfg = config();
    cfg.max_streams = 1;
    cfg.write_timeout = Duration::from_secs(1);
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec)).unwrap();
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::empty(), None).unwrap();
    setsockopt(&fd, sockopt::RcvBuf, &4096).unwrap();
    let std::net::SocketAddr::V4(addr) = t.addr() else { panic!("loopback v4") };
    connect(fd.as_raw_fd(), &SockaddrIn::from(addr)).unwrap();
    let mut stalled = std::net::TcpStream::from(fd);
    stalled.write_all(b"GET /api/v1/events HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    collscope_testkit::poll("the stalled stream holding the only place", Duration::from_secs(20), || {
        let a = stream_answer(&t);
        if a == "HTTP/1.1 503" {
            Ok(())
        } else {
            Err(a)
        }
    });
    // About 10 MB of events, in batches the stream's buffer holds: past what the client's window and the server's
    // send buffer take (on loopback the server's queue stopped at 2.8 MB).
    for batch in 0..10 {
        for seq in 0..2500 {
            rec.push(Event::OpCompleted(completed(0, batch * 2500 + seq)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    collscope_testkit::poll("a new stream once the stalled one is closed", Duration::from_secs(20), || {
        let a = stream_answer(&t);
        if a == "HTTP/1.1 200" {
            Ok(())
        } else {
            Err(a)
        }
    });
    drop(stalled);
}
