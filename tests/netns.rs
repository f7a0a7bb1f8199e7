//! End-to-end: two "hosts" made of network namespaces joined by a veth pair (addresses 10.99.x.y exist only
//! inside the namespaces this test makes), each rank in its own namespace and UTS namespace (its own host
//! name), so NET/Socket carries the collective between them. Skipped with a note where the machine does not
//! allow namespaces.

use collscope_testkit::{Proc, DEADLINE};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn ip(args: &[&str]) -> bool {
    collscope_testkit::output(Command::new("ip").args(args), Duration::from_secs(30)).status.success()
}

/// Two namespaces and a veth pair, removed on drop.
struct Hosts {
    ns: [String; 2],
    addr: [String; 2],
}

impl Hosts {
    fn create() -> Option<Hosts> {
        let id = std::process::id();
        let ns = [format!("cs-a-{id}"), format!("cs-b-{id}")];
        let subnet = 1 + id % 250;
        let addr = [format!("10.99.{subnet}.1"), format!("10.99.{subnet}.2")];
        let (va, vb) = (format!("csa{}", id % 100_000), format!("csb{}", id % 100_000));
        let hosts = Hosts { ns: ns.clone(), addr: addr.clone() };
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns[0].clone()],
            vec!["netns".into(), "add".into(), ns[1].clone()],
            vec![
                "link".into(),
                "add".into(),
                va.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                vb.clone(),
            ],
            vec!["link".into(), "set".into(), va.clone(), "netns".into(), ns[0].clone()],
            vec!["link".into(), "set".into(), vb.clone(), "netns".into(), ns[1].clone()],
            vec![
                "-n".into(),
                ns[0].clone(),
                "addr".into(),
                "add".into(),
                format!("{}/24", addr[0]),
                "dev".into(),
                va.clone(),
            ],
            vec![
                "-n".into(),
                ns[1].clone(),
                "addr".into(),
                "add".into(),
                format!("{}/24", addr[1]),
                "dev".into(),
                vb.clone(),
            ],
            vec!["-n".into(), ns[0].clone(), "link".into(), "set".into(), "lo".into(), "up".into()],
            vec!["-n".into(), ns[1].clone(), "link".into(), "set".into(), "lo".into(), "up".into()],
            vec!["-n".into(), ns[0].clone(), "link".into(), "set".into(), va, "up".into()],
            vec!["-n".into(), ns[1].clone(), "link".into(), "set".into(), vb, "up".into()],
        ];
        for s in steps {
            let args: Vec<&str> = s.iter().map(String::as_str).collect();
            if !ip(&args) {
                println!("note: skipping the network-namespace test: `ip {}` is not permitted here", args.join(" "));
                return None;
            }
        }
        Some(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            ip(&["netns", "del", ns]);
        }
    }
}

fn run_rank(hosts: &Hosts, rank: usize) -> Proc {
    let exe = env!("CARGO_BIN_EXE_collscope");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &hosts.ns[rank], "unshare", "--uts", "sh", "-c"])
        .arg(format!("hostname host{rank} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(["perf", "all_reduce", "-b", "8", "-e", "4M", "-f", "8", "-n", "2", "-w", "1"])
        .env("COLLSCOPE_RANK", rank.to_string())
        .env("COLLSCOPE_NRANKS", "2")
        .env("NCCL_COMM_ID", format!("{}:29500", hosts.addr[0]))
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "INIT,NET,BOOTSTRAP")
        .env("COLLSCOPE_TIMEOUT_S", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Proc::spawn(&mut cmd, DEADLINE)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn net_socket_between_two_network_namespaces() {
    let Some(hosts) = Hosts::create() else { return };
    let children = [run_rank(&hosts, 0), run_rank(&hosts, 1)];
    let outs: Vec<Output> = children.into_iter().map(Proc::finish).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(o));
    }
    let out = text(&outs[0]);
    assert!(
        out.contains(&format!("NCCL INFO Bootstrap: Using csa{}:{}<0>", std::process::id() % 100_000, hosts.addr[0])),
        "{out}"
    );
    assert!(out.contains("NCCL INFO NET/Socket : Using [0]csa"), "{out}");
    assert!(out.contains("NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"), "{out}");
    assert!(out.contains("NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0"), "{out}");
    assert!(out.contains("\n# Out of bounds values : 0 OK\n"), "{out}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("   ") && l.split_whitespace().count() == 13).collect();
    assert_eq!(rows.len(), 7, "{out}");
    assert!(rows.iter().all(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f[8] == "0" && f[12] == "0"
    }));
    assert!(out.contains("on      host1 device  0"), "{out}");
}
