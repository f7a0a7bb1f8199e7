//! End-to-end: one of four rank processes is killed mid-run; the others must end on their own within 15 s,
//! non-zero, with an error naming the dead rank, the operation and its sequence number, and leave nothing in
//! /dev/shm.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn spawn_rank(rank: u32, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_collscope"))
        .args(["demo", "--duration", "120", "--grad-mib", "1"])
        .env("COLLSCOPE_RANK", rank.to_string())
        .env("COLLSCOPE_NRANKS", "4")
        .env("COLLSCOPE_LOCAL_RANK", rank.to_string())
        .env("NCCL_COMM_ID", format!("127.0.0.1:{port}"))
        .env("COLLSCOPE_TIMEOUT_S", "60")
        .env_remove("NCCL_DEBUG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rank starts")
}

fn segments_of(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pids.iter().any(|p| n.starts_with(&format!("collscope-{p}-"))))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn killing_one_of_four_processes_ends_the_others_with_a_named_error() {
    let port = free_port();
    let mut ranks: Vec<Child> = (0..4).map(|r| spawn_rank(r, port)).collect();
    let pids: Vec<u32> = ranks.iter().map(Child::id).collect();

    // Wait until the job is running (rank 0 printed a few steps).
    let stdout = ranks[0].stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let started = Instant::now();
    loop {
        let line = lines.next().expect("rank 0 keeps printing").unwrap();
        if line.starts_with("step    2") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the job did not start");
    }
    std::thread::spawn(move || for _ in lines {});

    ranks[2].kill().unwrap();
    ranks[2].wait().unwrap();
    let killed = Instant::now();

    for (r, child) in ranks.iter_mut().enumerate().filter(|(r, _)| *r != 2) {
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if killed.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                panic!("rank {r} still running 15 s after rank 2 was killed");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(!status.success(), "rank {r} exited successfully");
        assert!(err.contains("rank 2"), "rank {r} does not name rank 2: {err}");
        let names_op = ["AllReduce #", "AllGather #", "ReduceScatter #"].iter().any(|op| err.contains(op));
        assert!(names_op, "rank {r} does not name the operation and its sequence number: {err}");
    }
    assert!(killed.elapsed() < Duration::from_secs(15));
    assert_eq!(segments_of(&pids), Vec::<String>::new());
}
