//! Ranks as separate processes on one host: the test re-runs its own binary as the ranks, which bootstrap
//! through a relay on a Unix socket (the TCP bootstrap belongs to the NET side), connect over SHM, run
//! collectives and check them; the parent then checks exit codes and that /dev/shm holds nothing of theirs.

use super::select::SelectConfig;
use crate::bootstrap::{all_gather_p2p, Bootstrap, Mailbox};
use crate::comm::{Comm, CommOptions};
use crate::error::{Result, RuntimeError};
use crate::transport::segment::{sweep_stale_segments, unlink_own_segments, SHM_PREFIX};
use crate::transport::shm::ShmTransport;
use collscope_debug::env::Env;
use collscope_model::{RedOp, Transport};
use collscope_testkit::Proc;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CHILD_ENV: &str = "COLLSCOPE_TEST_SHM_CHILD";

fn read_frame(s: &mut UnixStream) -> std::io::Result<(u32, u64, Vec<u8>)> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    let peer = u32::from_le_bytes(h[0..4].try_into().unwrap_or_default());
    let tag = u64::from_le_bytes(h[4..12].try_into().unwrap_or_default());
    let mut data = vec![0u8; u32::from_le_bytes(h[12..16].try_into().unwrap_or_default()) as usize];
    s.read_exact(&mut data)?;
    Ok((peer, tag, data))
}

fn write_frame(s: &mut UnixStream, peer: u32, tag: u64, data: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(16 + data.len());
    buf.extend_from_slice(&peer.to_le_bytes());
    buf.extend_from_slice(&tag.to_le_bytes());
    buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
    buf.extend_from_slice(data);
    s.write_all(&buf)
}

/// A rank's end of the relay: frames to the parent name the destination, frames from it the source.
struct RelayBootstrap {
    rank: u32,
    nranks: u32,
    out: Mutex<UnixStream>,
    inbox: Arc<Mailbox>,
    gathers: Mutex<u64>,
}

impl RelayBootstrap {
    fn connect(path: &str, rank: u32, nranks: u32) -> std::io::Result<Self> {
        let mut s = UnixStream::connect(path)?;
        s.write_all(&rank.to_le_bytes())?;
        let inbox = Arc::new(Mailbox::default());
        let (mut rd, ib) = (s.try_clone()?, inbox.clone());
        std::thread::spawn(move || {
            while let Ok((from, tag, data)) = read_frame(&mut rd) {
                ib.deliver(from, tag, data);
            }
        });
        Ok(RelayBootstrap { rank, nranks, out: Mutex::new(s), inbox, gathers: Mutex::new(0) })
    }
}

impl Bootstrap for RelayBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn nranks(&self) -> u32 {
        self.nranks
    }
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let seq = {
            let mut g = self.gathers.lock().unwrap_or_else(|p| p.into_inner());
            *g += 1;
            *g
        };
        all_gather_p2p(self, seq, mine)
    }
    fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        let mut s = self.out.lock().unwrap_or_else(|p| p.into_inner());
        write_frame(&mut s, peer, tag, data).map_err(|e| RuntimeError::Bootstrap(format!("relay send: {e}")))
    }
    fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.inbox.take(self.rank, peer, tag, Duration::from_secs(30))
    }
    fn recv_timeout(&self, peer: u32, tag: u64, timeout: Duration) -> Result<Option<Vec<u8>>> {
        Ok(self.inbox.take_within(peer, tag, timeout))
    }
}

/// The parent's relay: accepts `n` ranks and forwards each frame to its destination.
fn relay(listener: UnixListener, n: usize) {
    let mut streams: Vec<Option<UnixStream>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let Ok((mut s, _)) = listener.accept() else { return };
        let mut r = [0u8; 4];
        if s.read_exact(&mut r).is_err() {
            return;
        }
        let rank = u32::from_le_bytes(r) as usize;
        if rank < n {
            streams[rank] = Some(s);
        }
    }
    let writers: Arc<Vec<Mutex<UnixStream>>> =
        Arc::new(streams.iter().flatten().filter_map(|s| s.try_clone().ok()).map(Mutex::new).collect());
    for (from, s) in streams.into_iter().enumerate() {
        let (Some(mut s), w) = (s, writers.clone()) else { continue };
        std::thread::spawn(move || {
            while let Ok((to, tag, data)) = read_frame(&mut s) {
                if let Some(dst) = w.get(to as usize) {
                    let mut d = dst.lock().unwrap_or_else(|p| p.into_inner());
                    if write_frame(&mut d, from as u32, tag, &data).is_err() {
                        return;
                    }
                }
            }
        });
    }
}

fn segments_of(pid: u32) -> Vec<String> {
    let prefix = format!("{SHM_PREFIX}{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// What each child rank runs: `collectives` or `windows`.
fn child_main(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let (rank, nranks, path): (u32, u32, &str) = (parts[0].parse().unwrap(), parts[1].parse().unwrap(), parts[2]);
    let boot = RelayBootstrap::connect(path, rank, nranks).expect("connect to the relay");
    let env =
        Env::from_pairs([("NCCL_BUFFSIZE", "65536"), ("NCCL_LL_BUFFSIZE", "4096"), ("NCCL_LL128_BUFFSIZE", "6144")]);
    let mut comm = Comm::init_rank(Arc::new(boot), CommOptions { env, net: None, name: None }).expect("init");
    match parts[3] {
        "windows" => windows(&mut comm, rank, nranks),
        _ => collectives(&mut comm, rank, nranks),
    }
    println!("CHILD {rank} OK");
}

/// AllReduce over every protocol and both algorithms, then AllGather, then the transport's clean-up.
fn collectives(comm: &mut Comm, rank: u32, nranks: u32) {
    let n = 30_011usize;
    for (algo, proto) in [("ring", "simple"), ("ring", "ll"), ("tree", "ll128"), ("tree", "simple")] {
        let env = Env::from_pairs([("NCCL_ALGO", algo), ("NCCL_PROTO", proto)]);
        comm.set_select_config(SelectConfig::from_env(&env, comm.nchannels()).unwrap());
        let send: Vec<i64> = (0..n).map(|i| (i as i64) * (rank as i64 + 1)).collect();
        let mut recv = vec![0i64; n];
        comm.all_reduce(&send, &mut recv, RedOp::Sum).expect("all_reduce");
        let factor = (nranks * (nranks + 1) / 2) as i64;
        assert!(recv.iter().enumerate().all(|(i, v)| *v == i as i64 * factor), "{algo}/{proto} wrong");
    }
    let mine = vec![rank; 777];
    let mut all = vec![0u32; 777 * nranks as usize];
    comm.all_gather(&mine, &mut all).expect("all_gather");
    assert!(all.iter().enumerate().all(|(i, v)| *v == (i / 777) as u32));
    let conns = comm.records().connections();
    assert!(!conns.is_empty() && conns.iter().all(|c| c.transport == Transport::Shm), "{conns:?}");
    assert!(segments_of(std::process::id()).is_empty(), "segments left while running");
    // A receiver whose sender never came (died before mapping) can still drop its names on the way out.
    let (me, peer) = (crate::comm::local_peer_info(0), crate::comm::local_peer_info(1));
    let sizes = crate::transport::conn::BufSizes { simple: 4096, ll: 1024, ll128: 2048 };
    let spec = crate::transport::ConnSpec { channel: 5, conn_index: 0, me: &me, peer: &peer, sizes, comm: None };
    let (pending, _) = crate::transport::Transport::recv_setup(&ShmTransport::new(), &spec).expect("segment");
    assert_eq!(segments_of(std::process::id()).len(), 1);
    unlink_own_segments();
    assert!(segments_of(std::process::id()).is_empty());
    // And names none after: a rank ending by a signal while another thread connects leaves nothing behind.
    let refused = crate::transport::Transport::recv_setup(&ShmTransport::new(), &spec).err().map(|e| e.to_string());
    assert!(refused.as_deref().is_some_and(|e| e.contains("this process is ending")), "{refused:?}");
    assert!(segments_of(std::process::id()).is_empty());
    drop(pending);
}

/// Ring AllReduce and AllGather on registered buffers, checked, with every Simple slot of this rank's sends
/// filled with a mark beforehand: the steps go through the windows, so the marks stay, until the buffers are
/// deregistered.
fn windows(comm: &mut Comm, rank: u32, nranks: u32) {
    use crate::transport::conn::{Direct, NCCL_STEPS};
    use crate::transport::window::SharedBuf;
    use collscope_model::Protocol;
    let env = Env::from_pairs([("NCCL_ALGO", "ring"), ("NCCL_PROTO", "simple")]);
    comm.set_select_config(SelectConfig::from_env(&env, comm.nchannels()).unwrap());
    let n = 100_003usize;
    let input = |i: usize| (i as i64) * (rank as i64 + 1);
    let sum = |i: usize| i as i64 * (nranks * (nranks + 1) / 2) as i64;
    let (mut send, mut recv) = (SharedBuf::new(8 * n).unwrap(), SharedBuf::new(8 * n).unwrap());
    send.as_mut_slice::<i64>().iter_mut().enumerate().for_each(|(i, v)| *v = input(i));
    // Unregistered first: this connects, through the slots.
    comm.all_reduce(send.as_slice::<i64>(), recv.as_mut_slice::<i64>(), RedOp::Sum).expect("all_reduce");
    assert!(recv.as_slice::<i64>().iter().enumerate().all(|(i, v)| *v == sum(i)));
    let regs = [comm.register(&send).expect("register"), comm.register(&recv).expect("register")];
    let mems: Vec<_> = comm.channels.iter().flat_map(|c| c.send.values().map(|e| e.mem.clone())).collect();
    assert!(!mems.is_empty() && mems.iter().all(|m| m.direct() == Direct::ShmWindows));
    const MARK: u8 = 0xa5;
    let slot_bytes = mems[0].sizes().simple / NCCL_STEPS as usize;
    let slots = || (0..NCCL_STEPS).flat_map(|s| mems.iter().map(move |m| m.slot(Protocol::Simple, s)));
    // SAFETY: no call runs; the slots are this connection's memory.
    slots().for_each(|p| unsafe { std::ptr::write_bytes(p, MARK, slot_bytes) });
    // SAFETY: as above: each slot is `slot_bytes` of this connection's memory, which no call writes now.
    let marked = || slots().all(|p| unsafe { std::slice::from_raw_parts(p, slot_bytes) }.iter().all(|b| *b == MARK));
    recv.as_mut_slice::<i64>().fill(0);
    comm.all_reduce(send.as_slice::<i64>(), recv.as_mut_slice::<i64>(), RedOp::Sum).expect("all_reduce");
    assert!(recv.as_slice::<i64>().iter().enumerate().all(|(i, v)| *v == sum(i)), "registered all_reduce");
    let mut both = recv.as_mut_slice::<i64>();
    both.iter_mut().enumerate().for_each(|(i, v)| *v = input(i));
    comm.all_reduce_in_place(both, RedOp::Sum).expect("all_reduce in place");
    both = recv.as_mut_slice::<i64>();
    assert!(both.iter().enumerate().all(|(i, v)| *v == sum(i)), "registered all_reduce in place");
    let per = n / nranks as usize;
    let mine: Vec<i64> = (0..per).map(input).collect();
    send.as_mut_slice::<i64>()[..per].copy_from_slice(&mine);
    comm.all_gather(&send.as_slice::<i64>()[..per], &mut recv.as_mut_slice::<i64>()[..per * nranks as usize])
        .expect("all_gather");
    let gathered = &recv.as_slice::<i64>()[..per * nranks as usize];
    assert!(gathered.iter().enumerate().all(|(i, v)| *v == (i % per) as i64 * (i / per) as i64 + (i % per) as i64));
    assert!(marked(), "a step went through a slot though every buffer is registered");
    regs.into_iter().for_each(|r| comm.deregister(r).expect("deregister"));
    comm.all_reduce(send.as_slice::<i64>(), recv.as_mut_slice::<i64>(), RedOp::Sum).expect("all_reduce");
    assert!(!marked(), "deregistered buffers still moved in place");
}

#[test]
#[ignore = "a rank process of the tests run_children starts"]
fn shm_child() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child_main(&spec);
    }
}

/// Runs `nranks` child processes doing `mode` ([`child_main`]); asserts each succeeded and that /dev/shm holds
/// nothing of theirs after.
fn run_children(nranks: u32, mode: &str) {
    let path = std::env::temp_dir().join(format!(
        "collscope-relay-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
    ));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("bind relay socket");
    std::thread::spawn(move || relay(listener, nranks as usize));
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<Proc> = (0..nranks)
        .map(|r| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["--exact", "comm::proc_test::shm_child", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, format!("{r},{nranks},{},{mode}", path.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            Proc::spawn(&mut cmd, Duration::from_secs(90))
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(Proc::id).collect();
    // All at once: a rank blocked on a full pipe would stall the others' collectives.
    let waits: Vec<_> = children.into_iter().map(|c| std::thread::spawn(move || c.wait_with_output())).collect();
    let outputs: Vec<(bool, String)> = waits
        .into_iter()
        .map(|w| {
            let out = w.join().expect("a rank's output");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
            )
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    for (r, (ok, text)) in outputs.iter().enumerate() {
        assert!(*ok && text.contains(&format!("CHILD {r} OK")), "rank {r} failed:\n{text}");
    }
    for pid in pids {
        assert!(segments_of(pid).is_empty(), "rank process {pid} left {:?}", segments_of(pid));
    }
}

#[test]
fn shm_between_processes_is_correct_and_leaves_nothing_in_dev_shm() {
    run_children(3, "collectives");
}

#[test]
fn registered_windows_move_steps_without_the_slots_between_processes() {
    run_children(2, "windows");
}

#[test]
fn segments_of_dead_processes_are_swept() {
    let mut child = Proc::spawn(&mut std::process::Command::new("true"), Duration::from_secs(30));
    let dead = child.id();
    child.wait();
    let name = format!("/{SHM_PREFIX}{dead}-00000000deadbeef");
    let fd = nix::sys::mman::shm_open(
        name.as_str(),
        nix::fcntl::OFlag::O_CREAT | nix::fcntl::OFlag::O_RDWR,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .expect("create a stale segment");
    drop(fd);
    assert_eq!(segments_of(dead).len(), 1);
    sweep_stale_segments();
    assert!(segments_of(dead).is_empty());
}
