//! The plugin as NCCL sees it: the built `libcollscope_profiler.so`, its dynamic symbols, and a C program
//! (`tests/driver.c`, compiled here with `cc`) that dlopens it and calls it the way NCCL does, through NCCL's
//! own struct layouts (`tests/nccl_profiler.h`).

use collscope_model::{
    CommState, Direction, Event, Finding, JobView, KernelChannel, ProxyWait, RankState, Snapshot, Transport,
};
use collscope_profiler::abi::{net_socket_v1 as sock, v4, v5, v6, StateArgs};
use collscope_profiler::Counters;
use collscope_testkit::{output, Proc, DEADLINE};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The cdylib cargo built beside this test binary.
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libcollscope_profiler.so");
    assert!(so.is_file(), "{} was not built", so.display());
    so
}

/// The C driver, compiled once per test run.
fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/driver.c");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("collscope-profiler-driver");
        let out = output(
            Command::new("cc")
                .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
                .arg(&bin)
                .arg(&src)
                .args(["-rdynamic", "-ldl", "-lpthread"]),
            DEADLINE,
        );
        assert!(out.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
        bin
    })
}

/// The driver with the plugin's settings cleared: its telemetry on a free loopback port, its rendezvous folder
/// in `rendezvous`, no OTLP.
fn driver_cmd(args: &[&std::ffi::OsStr], rendezvous: &Path, env: &[(&str, &Path)]) -> Command {
    let mut cmd = Command::new(driver());
    cmd.arg(plugin()).args(args);
    for k in [
        "NCCL_PROFILE_EVENT_MASK",
        "COLLSCOPE_PROFILER_DUMP",
        "COLLSCOPE_PROFILER_METRICS",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        cmd.env_remove(k);
    }
    for k in ["COLLSCOPE_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK", "LOCAL_RANK", "SLURM_LOCALID"] {
        cmd.env_remove(k);
    }
    cmd.env("COLLSCOPE_METRICS_ADDR", "127.0.0.1:0").env("COLLSCOPE_RENDEZVOUS_DIR", rendezvous);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let rendezvous = tempfile::tempdir().unwrap();
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let out = output(&mut driver_cmd(&args, rendezvous.path(), env), DEADLINE);
    let left: Vec<_> = std::fs::read_dir(rendezvous.path()).unwrap().collect();
    assert!(left.is_empty(), "every finalize removed its rendezvous file: {left:?}");
    out
}

fn text(out: &Output) -> String {
    format!("--- stdout\n{}--- stderr\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_library_exports_nccls_profiler_symbols_and_collscopes_query() {
    let out = output(Command::new("nm").args(["-D", "--defined-only"]).arg(plugin()), DEADLINE);
    assert!(out.status.success(), "{}", text(&out));
    let syms: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect();
    for v in ["ncclProfiler_v4", "ncclProfiler_v5", "ncclProfiler_v6"] {
        // NCCL dlsym()s a data symbol: the plugin struct.
        assert!(matches!(syms.get(v).map(String::as_str), Some("D" | "R" | "B")), "{v} in {syms:?}");
    }
    assert_eq!(syms.get("collscope_profiler_counters").map(String::as_str), Some("T"));
}

/// `(offset, size)` of a field path in a Rust type, without a value of it.
macro_rules! field {
    ($t:ty, $($f:tt)+) => {{
        let m = std::mem::MaybeUninit::<$t>::uninit();
        let p = m.as_ptr();
        // SAFETY: only the address of a place in `m` is taken.
        let f = unsafe { std::ptr::addr_of!((*p).$($f)+) };
        (f as usize - p as usize, size_of_pointee(f))
    }};
}

fn size_of_pointee<F>(_: *const F) -> usize {
    std::mem::size_of::<F>()
}

fn shape<T>() -> (usize, usize) {
    (std::mem::size_of::<T>(), std::mem::align_of::<T>())
}

#[test]
fn the_rust_structs_lay_out_as_nccls_c_headers() {
    type P5 = v5::Profiler<v5::Descr>;
    type P6 = v5::Profiler<v6::Descr>;
    let d4 = "ncclProfilerEventDescr_v4_t";
    let d5 = "ncclProfilerEventDescr_v5_t";
    let d6 = "ncclProfilerEventDescr_v6_t";
    let rust: BTreeMap<String, (usize, usize)> = [
        (format!("{d4}.size"), shape::<v4::Descr>()),
        (format!("{d4}.type"), field!(v4::Descr, type_)),
        (format!("{d4}.parentObj"), field!(v4::Descr, parent_obj)),
        (format!("{d4}.rank"), field!(v4::Descr, rank)),
        (format!("{d4}.coll.seqNumber"), field!(v4::Descr, u.coll.seq_number)),
        (format!("{d4}.coll.func"), field!(v4::Descr, u.coll.func)),
        (format!("{d4}.coll.count"), field!(v4::Descr, u.coll.count)),
        (format!("{d4}.coll.root"), field!(v4::Descr, u.coll.root)),
        (format!("{d4}.coll.datatype"), field!(v4::Descr, u.coll.datatype)),
        (format!("{d4}.coll.nChannels"), field!(v4::Descr, u.coll.n_channels)),
        (format!("{d4}.coll.nWarps"), field!(v4::Descr, u.coll.n_warps)),
        (format!("{d4}.coll.algo"), field!(v4::Descr, u.coll.algo)),
        (format!("{d4}.coll.proto"), field!(v4::Descr, u.coll.proto)),
        (format!("{d4}.p2p.func"), field!(v4::Descr, u.p2p.func)),
        (format!("{d4}.p2p.datatype"), field!(v4::Descr, u.p2p.datatype)),
        (format!("{d4}.p2p.count"), field!(v4::Descr, u.p2p.count)),
        (format!("{d4}.p2p.peer"), field!(v4::Descr, u.p2p.peer)),
        (format!("{d4}.p2p.nChannels"), field!(v4::Descr, u.p2p.n_channels)),
        (format!("{d4}.proxyOp.pid"), field!(v4::Descr, u.proxy_op.pid)),
        (format!("{d4}.proxyOp.channelId"), field!(v4::Descr, u.proxy_op.channel_id)),
        (format!("{d4}.proxyOp.peer"), field!(v4::Descr, u.proxy_op.peer)),
        (format!("{d4}.proxyOp.nSteps"), field!(v4::Descr, u.proxy_op.n_steps)),
        (format!("{d4}.proxyOp.chunkSize"), field!(v4::Descr, u.proxy_op.chunk_size)),
        (format!("{d4}.proxyOp.isSend"), field!(v4::Descr, u.proxy_op.is_send)),
        (format!("{d4}.proxyStep.step"), field!(v4::Descr, u.proxy_step.step)),
        (format!("{d4}.kernelCh.channelId"), field!(v4::Descr, u.kernel_ch.channel_id)),
        (format!("{d4}.kernelCh.pTimer"), field!(v4::Descr, u.kernel_ch.p_timer)),
        (format!("{d4}.netPlugin.id"), field!(v4::Descr, u.net_plugin.id)),
        (format!("{d4}.netPlugin.data"), field!(v4::Descr, u.net_plugin.data)),
        (format!("{d5}.size"), shape::<v5::Descr>()),
        (format!("{d5}.type"), field!(v5::Descr, type_)),
        (format!("{d5}.parentObj"), field!(v5::Descr, parent_obj)),
        (format!("{d5}.rank"), field!(v5::Descr, rank)),
        (format!("{d5}.collApi.root"), field!(v5::Descr, u.coll_api.root)),
        (format!("{d5}.collApi.graphCaptured"), field!(v5::Descr, u.coll_api.graph_captured)),
        (format!("{d5}.p2pApi.graphCaptured"), field!(v5::Descr, u.p2p_api.graph_captured)),
        (format!("{d5}.coll.func"), field!(v5::Descr, u.coll.func)),
        (format!("{d5}.coll.count"), field!(v5::Descr, u.coll.count)),
        (format!("{d5}.coll.root"), field!(v5::Descr, u.coll.root)),
        (format!("{d5}.coll.datatype"), field!(v5::Descr, u.coll.datatype)),
        (format!("{d5}.coll.nChannels"), field!(v5::Descr, u.coll.n_channels)),
        (format!("{d5}.coll.algo"), field!(v5::Descr, u.coll.algo)),
        (format!("{d5}.coll.proto"), field!(v5::Descr, u.coll.proto)),
        (format!("{d5}.coll.parentGroup"), field!(v5::Descr, u.coll.parent_group)),
        (format!("{d5}.p2p.func"), field!(v5::Descr, u.p2p.func)),
        (format!("{d5}.p2p.datatype"), field!(v5::Descr, u.p2p.datatype)),
        (format!("{d5}.p2p.count"), field!(v5::Descr, u.p2p.count)),
        (format!("{d5}.p2p.peer"), field!(v5::Descr, u.p2p.peer)),
        (format!("{d5}.p2p.nChannels"), field!(v5::Descr, u.p2p.n_channels)),
        (format!("{d5}.p2p.parentGroup"), field!(v5::Descr, u.p2p.parent_group)),
        (format!("{d5}.proxyOp.pid"), field!(v5::Descr, u.proxy_op.pid)),
        (format!("{d5}.proxyOp.channelId"), field!(v5::Descr, u.proxy_op.channel_id)),
        (format!("{d5}.proxyOp.isSend"), field!(v5::Descr, u.proxy_op.is_send)),
        (format!("{d5}.proxyStep.step"), field!(v5::Descr, u.proxy_step.step)),
        (format!("{d5}.kernelCh.pTimer"), field!(v5::Descr, u.kernel_ch.p_timer)),
        (format!("{d6}.size"), shape::<v6::Descr>()),
        (format!("{d6}.type"), field!(v6::Descr, type_)),
        (format!("{d6}.rank"), field!(v6::Descr, rank)),
        (format!("{d6}.coll.algo"), field!(v6::Descr, u.v5.coll.algo)),
        (format!("{d6}.coll.parentGroup"), field!(v6::Descr, u.v5.coll.parent_group)),
        (format!("{d6}.proxyOp.isSend"), field!(v6::Descr, u.v5.proxy_op.is_send)),
        (format!("{d6}.kernelCh.pTimer"), field!(v6::Descr, u.v5.kernel_ch.p_timer)),
        (format!("{d6}.ceColl.syncStrategy"), field!(v6::Descr, u.ce_coll.sync_strategy)),
        (format!("{d6}.ceColl.intraBatchSync"), field!(v6::Descr, u.ce_coll.intra_batch_sync)),
        (format!("{d6}.ceColl.batchSize"), field!(v6::Descr, u.ce_coll.batch_size)),
        (format!("{d6}.ceColl.stream"), field!(v6::Descr, u.ce_coll.stream)),
        (format!("{d6}.ceCollSync.nRanks"), field!(v6::Descr, u.ce_coll_sync.n_ranks)),
        (format!("{d6}.ceCollBatch.totalBytes"), field!(v6::Descr, u.ce_coll_batch.total_bytes)),
        (format!("{d6}.ceCollBatch.useIntraSync"), field!(v6::Descr, u.ce_coll_batch.use_intra_sync)),
        ("ncclProfilerEventStateArgs_v4_t.size".into(), shape::<StateArgs>()),
        ("ncclProfilerEventStateArgs_v4_t.proxyStep.transSize".into(), field!(StateArgs, proxy_step.trans_size)),
        (
            "ncclProfilerEventStateArgs_v4_t.proxyCtrl.appendedProxyOps".into(),
            field!(StateArgs, proxy_ctrl.appended_proxy_ops),
        ),
        ("ncclProfilerEventStateArgs_v4_t.kernelCh.pTimer".into(), field!(StateArgs, kernel_ch.p_timer)),
        ("ncclProfiler_v4_t.size".into(), shape::<v4::Profiler>()),
        ("ncclProfiler_v4_t.init".into(), field!(v4::Profiler, init)),
        ("ncclProfiler_v4_t.finalize".into(), field!(v4::Profiler, finalize)),
        ("ncclProfiler_v5_t.size".into(), shape::<P5>()),
        ("ncclProfiler_v5_t.startEvent".into(), field!(P5, start_event)),
        ("ncclProfiler_v5_t.finalize".into(), field!(P5, finalize)),
        ("ncclProfiler_v6_t.size".into(), shape::<P6>()),
        ("ncclProfiler_v6_t.recordEventState".into(), field!(P6, record_event_state)),
        ("struct collscope_profiler_counters.size".into(), shape::<Counters>()),
        ("struct collscope_profiler_counters.disabled".into(), field!(Counters, disabled)),
        ("ncclProfilerNetSockDescr_v1_t.size".into(), shape::<sock::Descr>()),
        ("ncclProfilerNetSockDescr_v1_t.type".into(), field!(sock::Descr, type_)),
        ("ncclProfilerNetSockDescr_v1_t.sock.fd".into(), field!(sock::Descr, sock.fd)),
        ("ncclProfilerNetSockDescr_v1_t.sock.op".into(), field!(sock::Descr, sock.op)),
        ("ncclProfilerNetSockDescr_v1_t.sock.length".into(), field!(sock::Descr, sock.length)),
    ]
    .into_iter()
    .collect();

    let out = run(&["layout"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let c: BTreeMap<String, (usize, usize)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (name, nums) = l.rsplit_once(' ').and_then(|(a, b)| Some((a.rsplit_once(' ')?, b))).unwrap();
            (name.0.to_string(), (name.1.parse().unwrap(), nums.parse().unwrap()))
        })
        .collect();
    assert_eq!(c.len(), rust.len(), "the C side prints what the Rust side checks");
    for (name, want) in &c {
        assert_eq!(rust.get(name), Some(want), "{name}: C (offset or size, size or align) {want:?}");
    }
}

/// The dump: contract events, and the kernel channels among them.
fn read_dump(path: &Path) -> (Vec<Event>, Vec<KernelChannel>) {
    let events: Vec<Event> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let kernels = events
        .iter()
        .filter_map(|e| match e {
            Event::KernelChannel(k) => Some(k.clone()),
            _ => None,
        })
        .collect();
    (events, kernels)
}

#[test]
fn the_c_driver_runs_nccls_event_sequence_through_every_abi_version() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("events.jsonl");
    let out = run(&["scenario"], &[("COLLSCOPE_PROFILER_DUMP", &dump)]);
    assert!(out.status.success(), "{}", text(&out));
    let (events, kernels) = read_dump(&dump);

    for v in [6, 5, 4] {
        let comm = format!("driver-v{v}");
        let records: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::Communicator(c) if c.comm.as_deref() == Some(&comm) => Some(c),
                _ => None,
            })
            .collect();
        let states: Vec<CommState> = records.iter().map(|c| c.state).collect();
        assert_eq!(states, [CommState::Ready, CommState::Destroyed], "{comm}");
        let version_ok = records.iter().all(|c| c.version.as_deref() == Some("2.28.9"));
        assert!(version_ok, "{comm}: the driver's ncclGetVersion");
        let done: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::OpCompleted(o) if o.comm.as_deref() == Some(&comm) => Some(o),
                _ => None,
            })
            .collect();
        let got: Vec<_> =
            done.iter().map(|o| (o.seq, o.coll.as_str(), o.bytes, o.peer, o.n_channels, o.duration_us)).collect();
        assert_eq!(
            got,
            [
                (1, "AllReduce", 1 << 20, None, Some(2), Some(1000.0)),
                (2, "Send", 2000, Some(2), Some(1), Some(100.0)),
                (3, "Recv", 2000, Some(0), Some(1), Some(200.0)),
            ],
            "{comm}: GPU time from the kernel channels' globaltimer stamps"
        );
        let ar = done[0];
        assert_eq!((ar.algo.map(|a| a.as_str()), ar.proto.map(|p| p.as_str())), (Some("Ring"), Some("Simple")));
        assert_eq!(ar.busbw_gbps, ar.algbw_gbps.map(|b| b * 1.5), "{comm}");
        // A call enqueued and completed between two drains goes only as completed.
        let enqueued: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::OpEnqueued(o) if o.comm.as_deref() == Some(&comm) => Some(o.seq),
                _ => None,
            })
            .collect();
        assert!(enqueued.iter().all(|s| (1..=3).contains(s)), "{comm}: {enqueued:?}");
        assert!(enqueued.windows(2).all(|w| w[0] < w[1]), "{comm}: once each, in order: {enqueued:?}");
        let chans: Vec<_> = kernels.iter().filter(|k| k.comm.as_deref() == Some(&comm)).map(|k| k.channel).collect();
        assert!(chans.contains(&0) && chans.contains(&1), "{comm}: {chans:?}");
    }

    // Each drain hands on a connection's finished operations as one tally.
    let tallies: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ProxyTally(t) => Some(t),
            _ => None,
        })
        .collect();
    let ops: u64 = tallies.iter().map(|t| t.ops).sum();
    assert_eq!(ops, 3 * 6 + 3, "six per version, and each version's PXN operation");
    let wait = |p: &collscope_model::ProxyOp, w| p.waits.iter().find(|(k, _)| *k == w).map_or(0.0, |x| x.1);
    // Channel 1 ran only the AllReduce (channel 0 also the send and receive, tallied with it).
    let allreduce: Vec<_> = tallies.iter().filter(|t| t.last.channel == 1).collect();
    assert_eq!(allreduce.len(), 3 * 2, "each version's AllReduce on channel 1: a send and a receive");
    for t in allreduce {
        let p = &t.sum;
        assert_eq!((t.ops, t.last.seq), (1, 1), "{t:?}");
        assert_eq!((p.n_steps, p.posted, p.transmitted, p.done), (4, 4, 4, 4));
        if p.send {
            assert!(wait(p, ProxyWait::WaitingForPeer) >= 4.0 * 300e-6, "{p:?}");
        } else {
            assert!(wait(p, ProxyWait::WaitingForRecv) >= 4.0 * 200e-6, "{p:?}");
        }
    }
    let pxn: Vec<_> =
        tallies.iter().filter(|t| t.last.seq == 0).map(|t| (t.last.channel, t.last.peer, t.sum.done, t.ops)).collect();
    assert_eq!(pxn, [(5, 7, 2, 1); 3], "PXN operations: no call of this process");
    let traffic: u64 = events
        .iter()
        .filter_map(|e| match e {
            Event::Traffic(t) if t.channel < 2 => Some(t.bytes),
            _ => None,
        })
        .sum();
    assert_eq!(traffic, 3 * (2 * 8 * 65536 + 2 * 65536), "every step's bytes, once");
}

#[test]
fn proxy_control_events_and_a_bad_mask_as_nccl_would_meet_them() {
    let out = run(&["scenario"], &[("NCCL_PROFILE_EVENT_MASK", Path::new("127"))]);
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("counter proxy_appended_ops=9"), "{}", text(&out));

    // A mask that is not a number: init fails (the only call that may), NCCL's logger names the input, and the
    // calls NCCL would still make with no context crash nothing.
    let out = run(&["scenario"], &[("NCCL_PROFILE_EVENT_MASK", Path::new("all"))]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NCCL_PROFILE_EVENT_MASK='all' is not an event mask"), "{}", text(&out));
    assert!(err.contains("v6 init") && err.contains("v4 init"), "{}", text(&out));
}

#[test]
fn the_hot_path_bench_runs_and_reports_ns_per_event() {
    let out = run(&["bench", "20000"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for key in ["intra_node_ns_per_event=", "network_ns_per_event="] {
        let v: f64 = s.split(key).nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
        assert!(v > 0.0, "{key}{v}");
    }
    assert!(s.contains("counter calls_completed=40000"), "{s}");
}

/// A driver in hold mode: it ran its calls and waits for `release` before it finalizes.
struct Held {
    proc: Proc,
    /// The base URL of the plugin's telemetry, as it logged it through NCCL's logger.
    url: String,
    /// "lingering" once the plugin logged that its last finalize serves on; each warning about NCCL's debug file.
    later: mpsc::Receiver<String>,
    stderr: JoinHandle<String>,
}

/// Reads `pipe` to its end on a thread; the first line `find` answers is sent at once.
fn watch(
    pipe: impl Read + Send + 'static,
    find: fn(&str) -> Option<String>,
) -> (mpsc::Receiver<String>, JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if let Some(found) = find(&line) {
                let _ = tx.send(found);
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (rx, h)
}

fn hold(release: &Path, rendezvous: &Path, rank: u32, nranks: u32, extra: &[(&str, &Path)]) -> Held {
    let (rank, nranks) = (rank.to_string(), nranks.to_string());
    let mut env = vec![
        ("DRIVER_RANK", Path::new(&rank)),
        ("DRIVER_NRANKS", Path::new(&nranks)),
        ("NCCL_PROFILE_EVENT_MASK", Path::new("127")),
    ];
    env.extend_from_slice(extra);
    let mut cmd = driver_cmd(&["hold".as_ref(), release.as_os_str()], rendezvous, &env);
    let mut proc = Proc::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()), DEADLINE);
    let (said, stderr) = watch(proc.take_stderr(), |l| {
        let url = l.split("telemetry at ").nth(1).and_then(|u| u.split("/metrics").next()).map(str::to_string);
        url.or_else(|| l.contains("serving the final figures").then(|| "lingering".to_string()))
            .or_else(|| l.contains("NCCL's debug file").then(|| l.to_string()))
    });
    let (held, _stdout) = watch(proc.take_stdout(), |l| (l == "held").then(String::new));
    let url = said.recv_timeout(DEADLINE).expect("the plugin logs where it serves");
    held.recv_timeout(DEADLINE).expect("the driver ran its calls");
    Held { proc, url, later: said, stderr }
}

fn get(url: &str) -> String {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let r = client.get(url).send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.text().unwrap()
}

/// The value of the series of `family` whose labels include every one of `labels`, if exposed.
fn series(text: &str, family: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Polls `url` until `ready` accepts its body (the drain thread hands events on every 10 ms, counters every
/// second), within a generous bound.
fn poll(url: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = get(url);
        if ready(&text) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_plugin_serves_collscopes_telemetry_while_nccl_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
    let mut held = hold(&release, &rendezvous, 1, 1, &[]);
    let metrics = format!("{}/metrics", held.url);
    let text = poll(&metrics, |t| series(t, "collscope_proxy_thread_seconds_total", &[r#"state="sleep""#]).is_some());
    let ops = |algo: &str, proto: &str| {
        // The communicator's name, as NCCL hands `commName` to `init`, labels its calls.
        let labels = [
            r#"collective="AllReduce""#,
            &format!(r#"algorithm="{algo}""#),
            &format!(r#"protocol="{proto}""#),
            r#"comm_name="held""#,
        ];
        series(&text, "collscope_collective_operations_total", &labels)
    };
    assert_eq!(ops("Ring", "Simple"), Some(2.0), "each call once, with NCCL's algorithm and protocol:\n{text}");
    assert_eq!(ops("Tree", "LL"), Some(1.0), "{text}");
    let bytes = series(&text, "collscope_collective_bytes_total", &[r#"algorithm="Ring""#]);
    assert_eq!(bytes, Some(2.0 * 1048576.0), "{text}");
    let wait = |dir: &str, state: &str| {
        let labels = [r#"rank="1""#, &format!(r#"direction="{dir}""#), &format!(r#"state="{state}""#)];
        series(&text, "collscope_proxy_wait_seconds_total", &labels).unwrap_or(0.0)
    };
    // 3 calls x 2 channels x 4 steps, each 300 us waiting for the peer (sends) and 200 us for data (receives).
    assert!(wait("send", "waiting_for_peer") >= 24.0 * 300e-6, "{text}");
    assert!(wait("recv", "waiting_for_recv") >= 24.0 * 200e-6, "{text}");
    assert!(wait("recv", "recv_gpu_wait") > 0.0, "NCCL's RecvGPUWait is a wait state of its own:\n{text}");
    for ch in ["0", "1"] {
        let labels = [r#"rank="1""#, &format!(r#"channel="{ch}""#)];
        let secs = series(&text, "collscope_kernel_channel_seconds_total", &labels);
        // Each call's channel ran 0.9 ms on the GPU's clock (the driver's globaltimer stamps).
        assert!(secs.is_some_and(|s| (s - 3.0 * 0.9e-3).abs() < 1e-9), "channel {ch}: {secs:?}\n{text}");
    }
    assert!(series(&text, "collscope_proxy_thread_seconds_total", &[r#"state="sleep""#]).unwrap() >= 0.002);
    assert_eq!(series(&text, "collscope_profiler_events_lost_total", &[r#"reason="ring_full""#]), Some(0.0));
    assert_eq!(series(&text, "collscope_profiler_disabled", &[]), Some(0.0));
    assert!(text.contains(r#"collscope_job_info{"#) && text.contains(r#"source="profiler""#), "{text}");

    let snap: Snapshot = serde_json::from_str(&get(&format!("{}/api/v1/snapshot", held.url))).unwrap();
    let done: Vec<_> = snap.ops.iter().map(|o| (o.comm.as_deref(), o.seq, o.state)).collect();
    let completed = collscope_model::OpState::Completed;
    assert_eq!(done, [(Some("held"), 1, completed), (Some("held"), 2, completed), (Some("held"), 3, completed)]);
    let names: Vec<_> = snap.communicators.iter().map(|c| (c.rank, c.name.as_deref())).collect();
    assert_eq!(names, [(Some(1), Some("held"))], "the snapshot names the communicator");
    assert_eq!(snap.source.describe(), "the NCCL job");
    assert_eq!(snap.kernel_channels.len(), 2, "{:?}", snap.kernel_channels);
    assert!(snap.profiler.as_ref().is_some_and(|p| p.proxy_sleep_seconds >= 0.002), "{:?}", snap.profiler);

    std::fs::write(&release, "").unwrap();
    let status = held.proc.wait();
    let log = held.stderr.join().unwrap();
    assert!(status.success(), "{log}");
    assert!(!rendezvous.join(format!("{:016x}", 0x4e1d)).exists(), "finalize removed its rendezvous file:\n{log}");
}

#[test]
fn two_ranks_find_each_other_through_the_rendezvous_folder_and_the_job_view_shows_both() {
    let dir = tempfile::tempdir().unwrap();
    let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
    let ranks: Vec<Held> = (0..2).map(|r| hold(&release, &rendezvous, r, 2, &[])).collect();
    let job_url = format!("{}/api/v1/job", ranks[0].url);
    let body = poll(&job_url, |t| serde_json::from_str::<JobView>(t).is_ok_and(|j| j.ranks.len() == 2));
    let job: JobView = serde_json::from_str(&body).unwrap();
    let seen: Vec<_> = job
        .ranks
        .iter()
        .map(|r| (r.rank, r.state, r.comms.first().and_then(|c| Some((c.last_completed?, c.name.as_deref()?)))))
        .collect();
    let done = Some((3, "held"));
    assert_eq!(seen, [(0, RankState::Idle, done), (1, RankState::Idle, done)], "{body}");
    let snap: Snapshot = serde_json::from_str(&get(&format!("{}/api/v1/snapshot", ranks[1].url))).unwrap();
    let urls: Vec<_> = snap.endpoints.iter().map(|e| (e.rank, e.url.clone())).collect();
    assert_eq!(urls, [(0, ranks[0].url.clone()), (1, ranks[1].url.clone())]);

    std::fs::write(&release, "").unwrap();
    for mut held in ranks {
        let status = held.proc.wait();
        let log = held.stderr.join().unwrap();
        assert!(status.success(), "{log}");
    }
    assert_eq!(std::fs::read_dir(&rendezvous).unwrap().count(), 0, "both ranks left the folder");
}

/// The job view a plugin serves runs the runtime's job rules on the calls NCCL's events numbered per
/// communicator: two ranks replayed by the C driver whose calls diverge at one sequence number (rank 1 broadcasts
/// where rank 0 all-reduces, at #3) raise the mismatch naming rank 1; one rank waiting in a fourth call that the
/// other never makes names the other as not arrived at it.
#[test]
fn two_ranks_whose_calls_diverge_raise_the_runtimes_mismatch_and_not_arrived_findings() {
    let findings = |diverge: [&str; 2], code: &str| {
        let dir = tempfile::tempdir().unwrap();
        let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
        let ranks: Vec<Held> = (0..2)
            .map(|r| {
                let env = [("DRIVER_DIVERGE", Path::new(diverge[r])), ("COLLSCOPE_NOT_ARRIVED_S", Path::new("1"))];
                hold(&release, &rendezvous, r as u32, 2, &env)
            })
            .collect();
        let body = poll(&format!("{}/api/v1/job", ranks[0].url), |t| {
            serde_json::from_str::<JobView>(t).is_ok_and(|j| j.findings.iter().any(|f| f.code == code))
        });
        std::fs::write(&release, "").unwrap();
        for mut held in ranks {
            let status = held.proc.wait();
            let log = held.stderr.join().unwrap();
            assert!(status.success(), "{log}");
        }
        let job: JobView = serde_json::from_str(&body).unwrap();
        let found: Vec<Finding> = job.findings.into_iter().filter(|f| f.code == code).collect();
        assert_eq!(found.len(), 1, "{body}");
        found.into_iter().next().unwrap()
    };
    let f = findings(["", "broadcast"], "collective_mismatch");
    assert_eq!(f.rank, Some(1), "{f:?}");
    assert_eq!(f.title, "rank 1 called Broadcast where rank 0 called AllReduce at #3");
    assert!(f.detail.contains("differ: collective Broadcast vs AllReduce"), "{}", f.detail);

    let f = findings(["wait", ""], "rank_not_arrived");
    assert_eq!(f.rank, Some(1), "{f:?}");
    assert_eq!(f.title, "rank 1 has not arrived at AllReduce #4 (alive, slow)");
    assert!(
        f.detail.starts_with("ranks 0 have waited up to ") && f.detail.contains("finished #3 and has not begun #4")
    );
}

#[test]
fn a_rank_that_finished_first_stays_in_the_folder_while_it_lingers() {
    // Rank 1 runs its calls and finalizes before rank 0 starts: its server lingers, and so does its endpoint, so
    // rank 0's job view still reaches it.
    let dir = tempfile::tempdir().unwrap();
    let rendezvous = dir.path().join("rendezvous");
    let (release0, release1) = (dir.path().join("release0"), dir.path().join("release1"));
    let mut first = hold(&release1, &rendezvous, 1, 2, &[("COLLSCOPE_PROFILER_LINGER_S", Path::new("15"))]);
    std::fs::write(&release1, "").unwrap();
    assert_eq!(first.later.recv_timeout(DEADLINE).as_deref(), Ok("lingering"), "rank 1 finalized and serves on");
    let mut second = hold(&release0, &rendezvous, 0, 2, &[]);
    let body = poll(&format!("{}/api/v1/job", second.url), |t| {
        serde_json::from_str::<JobView>(t).is_ok_and(|j| j.ranks.len() == 2)
    });
    let job: JobView = serde_json::from_str(&body).unwrap();
    assert_eq!(job.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1], "{body}");
    std::fs::write(&release0, "").unwrap();
    for held in [&mut first, &mut second] {
        assert!(held.proc.wait().success());
    }
    assert_eq!(std::fs::read_dir(&rendezvous).unwrap().count(), 0, "both ranks left the folder once they stopped");
}

#[test]
fn a_taken_port_is_one_warning_and_nccl_carries_on_with_the_dump() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("events.jsonl");
    let out = run(&["scenario"], &[("COLLSCOPE_METRICS_ADDR", Path::new(&port)), ("COLLSCOPE_PROFILER_DUMP", &dump)]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let warned = err.lines().filter(|l| l.contains("cannot serve telemetry on") && l.contains(&port)).count();
    assert_eq!(warned, 1, "one warning, then NCCL's later communicators do not try again:\n{err}");
    let (events, _) = read_dump(&dump);
    assert_eq!(events.iter().filter(|e| matches!(e, Event::OpCompleted(_))).count(), 9, "the dump still works");

    let out = run(&["scenario"], &[("COLLSCOPE_PROFILER_METRICS", Path::new("0"))]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("telemetry"), "switched off: no server, no line");
}

/// `COLLSCOPE_PROFILER_DUMP` naming a FIFO nobody reads (issue 48): init fails at once naming the variable and
/// what the path is, instead of blocking NCCL's init in open() until a reader comes.
#[test]
fn a_dump_path_that_is_a_fifo_fails_init_at_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("events.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = Instant::now();
    let out = run(&["scenario"], &[("COLLSCOPE_PROFILER_DUMP", &fifo)]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "init waited {took:?}:\n{}", text(&out));
    assert_eq!(out.status.code(), Some(1), "init fails: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("COLLSCOPE_PROFILER_DUMP") && err.contains("events.fifo' is a FIFO"), "{}", text(&out));
}

/// A rendezvous path that is a link (planted by another user, issue 48): the rank warns naming the path and the
/// fix, writes nothing where the link points, and NCCL carries on.
#[test]
fn a_rendezvous_folder_that_is_a_link_is_refused_and_nccl_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let (target, link) = (dir.path().join("elsewhere"), dir.path().join("rendezvous"));
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = output(&mut driver_cmd(&["scenario".as_ref()], &link, &[]), DEADLINE);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a symbolic link") && err.contains("set COLLSCOPE_RENDEZVOUS_DIR to a folder you own"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "nothing written through the link");
}

/// An OTLP/HTTP receiver: each request's path and body, answered 200.
fn otlp_receiver() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut r = BufReader::new(conn);
            let mut head = Vec::new();
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                head.push(std::mem::take(&mut line));
            }
            let path = head.first().and_then(|l| l.split(' ').nth(1)).unwrap_or("").to_string();
            let len = head
                .iter()
                .find_map(|h| h.to_ascii_lowercase().strip_prefix("content-length:")?.trim().parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = std::io::Write::write_all(
                r.get_mut(),
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            if tx.send((path, body)).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

#[test]
fn with_an_otlp_endpoint_the_plugin_pushes_its_metrics_there_by_the_last_finalize() {
    let (endpoint, received) = otlp_receiver();
    let dir = tempfile::tempdir().unwrap();
    let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
    let otel = [("OTEL_EXPORTER_OTLP_ENDPOINT", Path::new(&endpoint)), ("OTEL_SERVICE_NAME", Path::new("trainer"))];
    let mut held = hold(&release, &rendezvous, 0, 1, &otel);
    std::fs::write(&release, "").unwrap();
    let status = held.proc.wait();
    let log = held.stderr.join().unwrap();
    assert!(status.success(), "{log}");
    let metrics: Vec<Vec<u8>> = received.try_iter().filter(|(p, _)| p == "/v1/metrics").map(|(_, b)| b).collect();
    let has = |b: &[u8], s: &str| b.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(
        metrics.iter().any(|b| has(b, "collscope.collective.operations") && has(b, "trainer")),
        "the last export carries the calls, as service 'trainer' ({} metric exports):\n{log}",
        metrics.len()
    );
    assert!(metrics.iter().any(|b| has(b, "collscope.kernel.channel.time")), "{log}");
}

/// Rank 0's NCCL debug file as NCCL 2.28.9 writes it before the profiler's `init` (`src/init.cc`): a 4-rank,
/// 2-node communicator (ranks 0 and 1 on this node), its ring orders (`src/graph/rings.cc`, rank 0 only) and its
/// trees; then, after `init`, the connections of its ring (`src/transport/p2p.cc`, `src/transport/net.cc`).
const RANK0_INIT: &str = "\
nodeA:4242:4242 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>
nodeA:4242:4242 [0] NCCL INFO NCCL version 2.28.9+cuda12.9
nodeA:4242:4242 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x4e1d - Init START
nodeA:4242:4242 [0] NCCL INFO comm 0x55d0c0 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
nodeA:4242:4242 [0] NCCL INFO Channel 00/02 : 0 1 2 3
nodeA:4242:4242 [0] NCCL INFO Channel 01/02 : 0 1 2 3
nodeA:4242:4242 [0] NCCL INFO Trees [0] 1/2/-1->0->-1 [1] 1/-1/-1->0->2
nodeA:4242:4242 [0] NCCL INFO P2P Chunksize set to 131072
nodeA:4242:4242 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
nodeA:4242:4242 [0] NCCL INFO Channel 01/0 : 3[1] -> 0[0] [receive] via NET/IB/1/GDRDMA
nodeA:4242:4242 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
nodeA:4242:4242 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
nodeA:4242:4242 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
";

/// A tree's connection, set up later (runtime connection: at the first call that uses the tree).
const RANK0_LATER: &str = "nodeA:4242:4242 [0] NCCL INFO Channel 01/0 : 0[0] -> 2[0] [send] via NET/IB/1/GDRDMA\n";

/// Issue 49: given NCCL's debug file (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_FILE` with `%h`), the plugin's snapshot has
/// the job's rings, trees and connections with their transports, and the proxy operations' bytes on the right
/// edge (channel, this rank, peer) with that edge's transport; a connection printed later is read later.
#[test]
fn nccls_debug_file_gives_the_plugin_rings_trees_connections_and_the_traffic_on_each_edge() {
    let dir = tempfile::tempdir().unwrap();
    let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
    let host = collscope_debug::sys::hostname();
    let log = dir.path().join(format!("nccl.{host}.log"));
    std::fs::write(&log, RANK0_INIT).unwrap();
    let pattern = dir.path().join("nccl.%h.log");
    let env = [("NCCL_DEBUG", Path::new("INFO")), ("NCCL_DEBUG_FILE", pattern.as_path())];
    let mut held = hold(&release, &rendezvous, 0, 4, &env);
    let url = format!("{}/api/v1/snapshot", held.url);
    // 3 AllReduces, each 4 steps of 64 KiB a channel: sent to the ring's next rank, received from its previous.
    let bytes = 3 * 4 * 65536;
    let all_moved = |s: Snapshot| s.traffic.len() == 4 && s.traffic.iter().all(|t| t.bytes == bytes);
    let body = poll(&url, |t| serde_json::from_str::<Snapshot>(t).is_ok_and(all_moved));
    let snap: Snapshot = serde_json::from_str(&body).unwrap();

    let rings: Vec<_> = snap.rings.iter().map(|r| (r.channel, r.order.clone())).collect();
    assert_eq!(rings, [(0, vec![0, 1, 2, 3]), (1, vec![0, 1, 2, 3])], "{body}");
    let trees: Vec<_> = snap.trees.iter().map(|t| (t.channel, t.rank, t.up, t.down.clone())).collect();
    assert_eq!(trees, [(0, 0, -1, vec![1, 2, -1]), (1, 0, 2, vec![1, -1, -1])], "{body}");
    let conns: Vec<_> = snap
        .connections
        .iter()
        .map(|c| (c.channel, c.src, c.dst, c.direction, c.transport, c.device, c.gdrdma, c.comm.as_deref()))
        .collect();
    let (net, p2p, held_comm) = (Transport::Net, Transport::P2p, Some("held"));
    assert_eq!(
        conns,
        [
            (0, 3, 0, Direction::Recv, net, Some(0), Some(true), held_comm),
            (1, 3, 0, Direction::Recv, net, Some(1), Some(true), held_comm),
            (0, 0, 1, Direction::Both, p2p, None, None, held_comm),
            (1, 0, 1, Direction::Both, p2p, None, None, held_comm),
        ],
        "the communicator by its commId, named as the plugin names it: {body}"
    );
    assert!(snap.connections.iter().all(|c| !c.inferred), "printed, not inferred");
    let mut traffic: Vec<_> =
        snap.traffic.iter().map(|t| (t.channel, t.rank, t.peer, t.direction, t.transport, t.bytes)).collect();
    traffic.sort_by_key(|t| (t.0, t.3));
    assert_eq!(
        traffic,
        [
            (0, 0, 1, Direction::Send, Some(p2p), bytes),
            (0, 0, 3, Direction::Recv, Some(net), bytes),
            (1, 0, 1, Direction::Send, Some(p2p), bytes),
            (1, 0, 3, Direction::Recv, Some(net), bytes),
        ],
        "{body}"
    );

    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(RANK0_LATER.as_bytes()).unwrap();
    let body = poll(&url, |t| serde_json::from_str::<Snapshot>(t).is_ok_and(|s| s.connections.len() == 5));
    let snap: Snapshot = serde_json::from_str(&body).unwrap();
    let later = snap.connections.last().map(|c| (c.channel, c.src, c.dst, c.direction, c.transport));
    assert_eq!(later, Some((1, 0, 2, Direction::Send, net)), "read as NCCL printed it: {body}");

    std::fs::write(&release, "").unwrap();
    let status = held.proc.wait();
    let stderr = held.stderr.join().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("debug file"), "no warning about the file: {stderr}");
}

/// Reads the FIFO `path` until `stop`, without blocking: NCCL opens its debug file for writing (`fopen(.., "w")`,
/// and so does collscope's logger in the plugin), which waits for a reader.
fn fifo_reader(path: &Path, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> JoinHandle<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if !matches!(f.read(&mut buf), Ok(n) if n > 0) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })
}

/// The debug file is untrusted: a FIFO (read by someone else), or a file far larger than any init's lines, neither
/// blocks nor breaks NCCL's init or the plugin's other output; each is one warning through NCCL's logger naming it.
#[test]
fn a_debug_file_that_is_a_fifo_or_huge_is_one_warning_and_nccl_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("nccl.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = fifo_reader(&fifo, stop.clone());
    let huge = dir.path().join("nccl.huge");
    std::fs::File::create(&huge).unwrap().set_len(1 << 30).unwrap();
    for (file, said) in [(&fifo, "it is a FIFO, not a regular file"), (&huge, "reached 67108864 bytes")] {
        let (release, rendezvous) = (dir.path().join("release"), dir.path().join("rendezvous"));
        let _ = std::fs::remove_file(&release);
        let env = [("NCCL_DEBUG", Path::new("INFO")), ("NCCL_DEBUG_FILE", file.as_path())];
        // `hold` returns once the driver ran its calls: init was not held up.
        let mut held = hold(&release, &rendezvous, 0, 4, &env);
        let warning = held.later.recv_timeout(DEADLINE).expect("a warning about the debug file");
        assert!(warning.contains(&format!("'{}' ", file.display())) && warning.contains(said), "{warning}");
        let url = format!("{}/api/v1/snapshot", held.url);
        let done = |s: Snapshot| s.ops.iter().filter(|o| o.state == collscope_model::OpState::Completed).count() == 3;
        let body = poll(&url, |t| serde_json::from_str::<Snapshot>(t).is_ok_and(done));
        let snap: Snapshot = serde_json::from_str(&body).unwrap();
        assert!(done(snap.clone()), "the calls still reach telemetry: {body}");
        assert!(snap.rings.is_empty() && snap.trees.is_empty() && snap.connections.is_empty(), "{body}");
        std::fs::write(&release, "").unwrap();
        let status = held.proc.wait();
        let stderr = held.stderr.join().unwrap();
        assert!(status.success(), "{stderr}");
        assert_eq!(stderr.matches("NCCL's debug file").count(), 1, "one warning: {stderr}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
}
