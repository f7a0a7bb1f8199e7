//! A stranger on the same host finds a joining rank's bootstrap ports in /proc/net/tcp (as any local user can)
//! and opens connections to them that send nothing. Init must still end within `COLLSCOPE_TIMEOUT_S`, and
//! complete when the real ranks come. Its own process, so only this job's listeners are probed.

use collscope_debug::env::Env;
use collscope_runtime::bootstrap::tcp::{TcpBootstrap, UniqueId};
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Ports in the LISTEN state (`0A`), from /proc/net/tcp and tcp6.
fn listening() -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(3) == Some(&"0A") {
                let port = cols[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
                ports.extend(port);
            }
        }
    }
    ports
}

#[test]
fn idle_connections_to_a_joining_ranks_listeners_do_not_stall_init() {
    collscope_testkit::own_process!(idle_connections_to_a_joining_ranks_listeners_do_not_stall_init);
    let env = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "10")]);
    let id = UniqueId::create(&env).unwrap();
    let before = listening();
    let started = Instant::now();
    let results = std::thread::scope(|s| {
        let (id, env) = (&id, &env);
        let r0 = s.spawn(move || TcpBootstrap::init(id, 0, 2, env).map(|b| b.all_gather(b"x").map(drop)));
        // Rank 0's ring and peer listeners appear before it checks in.
        let mut new = BTreeSet::new();
        while new.len() < 2 && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            new = listening().difference(&before).copied().collect();
        }
        assert!(new.len() >= 2, "rank 0's listeners not found: {new:?}");
        let idle: Vec<TcpStream> = new
            .iter()
            .flat_map(|&port| (0..4).map(move |_| SocketAddr::new(id.addr.ip(), port)))
            .chain((0..8).map(|_| id.addr))
            .filter_map(|a| TcpStream::connect(a).ok())
            .collect();
        assert!(idle.len() >= 16, "{} idle connections", idle.len());
        let r1 = s.spawn(move || TcpBootstrap::init(id, 1, 2, env).map(|b| b.all_gather(b"y").map(drop)));
        let results = [r0.join().unwrap(), r1.join().unwrap()];
        drop(idle);
        results
    });
    let took = started.elapsed();
    eprintln!("init with 4+4 idle connections to rank 0's listeners and 8 to the root: {took:?}");
    for r in results {
        r.unwrap().unwrap();
    }
    assert!(took < Duration::from_secs(10), "init took {took:?} (COLLSCOPE_TIMEOUT_S=10)");
}
