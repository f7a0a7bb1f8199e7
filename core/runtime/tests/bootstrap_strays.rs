//! A stranger on the same host who knows the bootstrap magic (NCCL's public one under `NCCL_COMM_ID`, torchrun,
//! MPI or Slurm) probes a rank's peer listener over loopback: a 4 GiB message header, many complete messages
//! nobody claims, many lasting connections. The rank must stay within a memory and descriptor bound, and the job
//! must go on working. One test in its own process, so the process's RSS and descriptors are the rank's.

use collscope_debug::env::Env;
use collscope_runtime::bootstrap::tcp::{TcpBootstrap, UniqueId};
use collscope_runtime::socket::{Socket, SocketType};
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn rss_mib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() / 1024
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A handshaken connection to `addr` whose header claims to come from `rank` (kind 0: a message, 1: a stream).
fn stranger(addr: SocketAddr, magic: u64, rank: u32, kind: u32, tag: u64) -> Socket {
    let mut s = Socket::connect(addr, magic, SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
    let mut hdr = [0u8; 16];
    hdr[..4].copy_from_slice(&rank.to_le_bytes());
    hdr[4..8].copy_from_slice(&kind.to_le_bytes());
    hdr[8..].copy_from_slice(&tag.to_le_bytes());
    s.send(&hdr).unwrap();
    s
}

/// Writes up to `bytes` zeros, stopping when the rank closes the connection.
fn pour(s: &Socket, bytes: usize) -> usize {
    let chunk = vec![0u8; MIB];
    let mut sent = 0;
    let _ = s.stream().set_write_timeout(Some(Duration::from_secs(5)));
    while sent < bytes {
        match (&mut s.stream()).write(&chunk) {
            Ok(n) if n > 0 => sent += n,
            _ => break,
        }
    }
    sent
}

#[test]
fn strangers_on_the_peer_listener_leave_the_rank_bounded_and_the_job_working() {
    collscope_testkit::own_process!(strangers_on_the_peer_listener_leave_the_rank_bounded_and_the_job_working);
    let env = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "10")]);
    let id = UniqueId::create(&env).unwrap();
    let boots: Vec<TcpBootstrap> = std::thread::scope(|s| {
        let (id, env) = (&id, &env);
        let hs: Vec<_> = (0..2).map(|r| s.spawn(move || TcpBootstrap::init(id, r, 2, env).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let target = boots[0].peer_addrs()[0];
    let (rss0, fds0) = (rss_mib(), fds());

    // A message that claims 4 GiB, fed 512 MiB.
    let s = stranger(target, id.magic, 1, 0, 0xdead);
    (&mut s.stream()).write_all(&(4u64 << 30).to_le_bytes()).unwrap();
    let poured = pour(&s, 512 * MIB);
    std::thread::sleep(Duration::from_millis(300));
    let rss_big = rss_mib().saturating_sub(rss0);
    drop(s);
    eprintln!("4 GiB header: {} MiB written, rank RSS +{rss_big} MiB", poured / MIB);

    // 40 complete 10 MiB messages with tags nobody will claim.
    let started = Instant::now();
    for i in 0..40u64 {
        let mut s = stranger(target, id.magic, 1, 0, 0x1000 + i);
        let _ = s.stream().set_write_timeout(Some(Duration::from_secs(5)));
        let _ = (&mut s.stream()).write_all(&(10 * MIB as u64).to_le_bytes());
        pour(&s, 10 * MIB);
        let mut ack = [0u8; 1];
        let _ = s.recv_timeout(&mut ack, Duration::from_secs(5), None);
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss_unclaimed = rss_mib().saturating_sub(rss0);
    eprintln!("40 x 10 MiB unclaimed: rank RSS +{rss_unclaimed} MiB after {:.1} s", started.elapsed().as_secs_f64());

    // 600 lasting connections nobody will accept (under a default 1024-descriptor limit).
    for i in 0..600u64 {
        drop(stranger(target, id.magic, 1, 1, 0x2000 + i));
    }
    std::thread::sleep(Duration::from_millis(300));
    let more_fds = fds().saturating_sub(fds0);
    eprintln!("600 streams: rank holds +{more_fds} descriptors");

    // A claimed rank out of range, and the job still works.
    drop(stranger(target, id.magic, 7, 0, 5));
    std::thread::scope(|s| {
        let b1 = &boots[1];
        s.spawn(move || b1.send(0, 5, b"real").unwrap());
        assert_eq!(boots[0].recv(1, 5).unwrap(), b"real");
    });
    std::thread::scope(|s| {
        for b in &boots {
            s.spawn(move || b.barrier().unwrap());
        }
    });

    assert!(rss_big < 64, "a 4 GiB header made the rank grow by {rss_big} MiB");
    assert!(rss_unclaimed < 128, "unclaimed messages made the rank grow by {rss_unclaimed} MiB");
    assert!(more_fds < 40, "600 stranger streams left the rank holding {more_fds} more descriptors");
    assert!(boots[0].strays() > 600, "each dropped connection is counted: {}", boots[0].strays());
}
