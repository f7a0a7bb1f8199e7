//! The job view's fetches ignore proxy variables (issue 48): in a process whose environment names a proxy (a
//! process of its own, so setting the variables races no other test), a planted rank is asked directly and the
//! proxy sees nothing.

use collscope_model::{Event, RankEndpoint, Source};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::{Telemetry, TelemetryConfig};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn proxy_variables_are_not_honoured() {
    collscope_testkit::own_process!(proxy_variables_are_not_honoured);
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in proxy.incoming() {
            count.fetch_add(1, Ordering::Relaxed);
            drop(conn);
        }
    });
    for k in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::set_var(k, &proxy_url);
    }
    for k in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(k);
    }
    let config = || TelemetryConfig::new("127.0.0.1:0".parse().unwrap());
    let peer = Telemetry::start(&config(), Source::Runtime, None).unwrap();
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let victim = Telemetry::start(&config(), Source::Runtime, Some(rec)).unwrap();
    rec.push(Event::Endpoints(vec![RankEndpoint {
        rank: 1,
        host: "h".into(),
        url: peer.url(),
        pid: None,
        started: None,
    }]));
    let mut out = String::new();
    let mut s = std::net::TcpStream::connect(victim.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    std::io::Write::write_all(&mut s, b"GET /api/v1/job HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    std::io::Read::read_to_string(&mut s, &mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(seen.load(Ordering::Relaxed), 0, "the proxy was asked: {out}");
}
