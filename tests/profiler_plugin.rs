//! End-to-end: collscope's runtime loads NCCL profiler plugins (`NCCL_PROFILER_PLUGIN`) and calls them as NCCL
//! does. A recorder plugin written in C (`tests/profiler/recorder.c`, compiled here with `cc`) writes down every
//! call; collscope's own plugin (`libcollscope_profiler.so`, built as a dev-dependency) dumps what it made of them.
//! Both run inside `collscope perf` over NET/Socket, as processes and as threads; bad plugins get NCCL's lines and
//! the job runs without them.

use collscope_testkit::{free_ports, output, poll, Proc};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::tmux;

use tmux::Tmux;

const LIMIT: Duration = Duration::from_secs(180);

/// Compiles a C file of tests/profiler into a shared library, once per name.
fn shared_lib(name: &str, src: &str) -> PathBuf {
    let so = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lib{name}.so"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = output(
        Command::new("cc")
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I"])
            .arg(root.join("plugins/profiler/tests"))
            .arg("-o")
            .arg(&so)
            .arg(root.join("tests/profiler").join(src)),
        LIMIT,
    );
    assert!(out.status.success(), "cc {src}: {}", String::from_utf8_lossy(&out.stderr));
    so
}

fn recorder() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| shared_lib("recorder", "recorder.c"))
}

/// collscope's plugin: cargo builds the cdylib of a dev-dependency beside the test binaries.
fn collscope_plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libcollscope_profiler.so");
    assert!(so.is_file(), "{} was not built", so.display());
    so
}

/// `collscope perf BENCH` on 4 ranks over NET/Socket with `args`, a deadline on its calls, and the plugin's
/// default mask.
fn socket_perf(bench: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["perf", bench, "--nranks", "4", "--transport", "socket"])
        .args(args)
        .env("COLLSCOPE_TIMEOUT_S", "60")
        .env_remove("NCCL_PROFILE_EVENT_MASK");
    cmd
}

/// `collscope perf all_reduce` on 4 ranks over NET/Socket (8 B and 1 MiB, 2 iterations after a warm-up) with
/// NCCL's INFO lines for INIT, ENV and TUNING. NCCL logs to stdout, as NCCL does. The plugin's own telemetry
/// server is off unless a test turns it on.
fn perf_cmd(launch: &str, env: &[(&str, &Path)]) -> Command {
    let mut cmd =
        socket_perf("all_reduce", &["--launch", launch, "-b", "8", "-e", "1M", "-f", "131072", "-n", "2", "-w", "1"]);
    cmd.env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "INIT,ENV,TUNING")
        .env("COLLSCOPE_PROFILER_METRICS", "0")
        .env_remove("COLLSCOPE_PROFILER_DUMP");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// [`perf_cmd`] run to its end: (success, stdout, stderr).
fn perf(launch: &str, env: &[(&str, &Path)]) -> (bool, String, String) {
    let out = output(&mut perf_cmd(launch, env), LIMIT);
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    (out.status.success(), o, format!("{e}\n(collscope perf: {})", out.status))
}

/// What rank 0 logged for each call, in order (collscope's TUNING line, NCCL 2.28.9 `src/enqueue.cc`):
/// ("RING"/"TREE", "LL"/"SIMPLE", channels).
fn decisions(log: &str) -> Vec<(String, String, u32)> {
    log.lines()
        .filter(|l| l.contains(" [0] NCCL INFO AllReduce: "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let at = |k: &str| f[f.iter().position(|w| *w == k).unwrap() + 1].to_string();
            let hi: u32 = l.rsplit("..").next().unwrap().trim_end_matches('}').parse().unwrap();
            (at("Algo"), at("proto"), hi + 1)
        })
        .collect()
}

/// One recorded `startEvent`.
#[derive(Debug)]
struct Start {
    line: usize,
    ctx: String,
    kind: u64,
    parent: String,
    rank: i32,
    f: HashMap<String, String>,
}

/// The recorder's file, read back.
#[derive(Default, Debug)]
struct Recorded {
    inits: Vec<HashMap<String, String>>,
    finalized: Vec<String>,
    starts: BTreeMap<String, Start>,
    /// Lines of each event's stops.
    stops: HashMap<String, Vec<usize>>,
    /// Each event's states: (line, state, argument; None when NCCL passes none).
    states: HashMap<String, Vec<(usize, i32, Option<u64>)>>,
}

const GROUP: u64 = 1;
const COLL: u64 = 2;
const P2P: u64 = 4;
const PROXY_OP: u64 = 8;
const PROXY_STEP: u64 = 16;
const PROXY_CTRL: u64 = 32;
const KERNEL_CH: u64 = 64;
const GROUP_API: u64 = 256;
const COLL_API: u64 = 512;
const P2P_API: u64 = 1024;
const KERNEL_LAUNCH: u64 = 2048;
const NET_PLUGIN: u64 = 128;

fn read(path: &Path) -> Recorded {
    let mut r = Recorded::default();
    for (n, l) in std::fs::read_to_string(path).unwrap().lines().enumerate() {
        let mut words = l.split_whitespace();
        let verb = words.next().unwrap();
        let f: HashMap<String, String> = words
            .map(|w| {
                let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("{l}"));
                (k.to_string(), v.to_string())
            })
            .collect();
        match verb {
            "init" => r.inits.push(f),
            "finalize" => r.finalized.push(f["ctx"].clone()),
            "start" => {
                let s = Start {
                    line: n,
                    ctx: f["ctx"].clone(),
                    kind: f["type"].parse().unwrap(),
                    parent: f["parent"].clone(),
                    rank: f["rank"].parse().unwrap(),
                    f: f.clone(),
                };
                r.starts.insert(f["id"].clone(), s);
            }
            "stop" => r.stops.entry(f["id"].clone()).or_default().push(n),
            "state" => r.states.entry(f["id"].clone()).or_default().push((
                n,
                f["st"].parse().unwrap(),
                (f["arg"] != "none").then(|| f["arg"].parse().unwrap()),
            )),
            other => panic!("unknown line {other}: {l}"),
        }
    }
    r
}

/// The recorder's variable for another activation mask.
const MASK: &str = "RECORDER_MASK";

/// What the recorder saw of `collscope perf BENCH` on 4 ranks over NET/Socket with `args` and `env`, once it ran
/// to success.
fn recorded_perf(bench: &str, args: &[&str], env: &[(&str, &str)]) -> Recorded {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("recorded.txt");
    let mut cmd = socket_perf(bench, args);
    cmd.env_remove("NCCL_DEBUG")
        .env("NCCL_PROFILER_PLUGIN", recorder())
        .env("RECORDER_OUT", &rec)
        .envs(env.iter().copied());
    let out = output(&mut cmd, LIMIT);
    assert!(out.status.success(), "perf {bench} {args:?} {env:?}: {}", String::from_utf8_lossy(&out.stderr));
    read(&rec)
}

/// Where a ProxyStep state sits in NCCL's order of a send step (8 SendGPUWait, 20 SendPeerWait, 9 SendWait) or
/// a receive step (10 RecvWait, 11 RecvFlushWait, 12 RecvGPUWait).
fn step_rank(send: bool, st: i32) -> Option<u8> {
    match (send, st) {
        (true, 8) => Some(0),
        (true, 20) => Some(1),
        (true, 9) => Some(2),
        (false, 10) => Some(0),
        (false, 11) => Some(1),
        (false, 12) => Some(2),
        _ => None,
    }
}

/// A 4-rank job's contexts, each initialised and finalized once, and every event started, stopped once, with its
/// states in between.
fn check_lifecycle(r: &Recorded) {
    assert_eq!(r.inits.len(), 4, "one init per communicator");
    assert!(r.inits.iter().all(|i| i["nranks"] == "4" && i["nnodes"] == "1"), "{:?}", r.inits);
    let mut fin = r.finalized.clone();
    fin.sort();
    let mut want: Vec<String> = r.inits.iter().map(|i| i["ctx"].clone()).collect();
    want.sort();
    assert_eq!(fin, want, "every context finalized once");

    for (id, s) in &r.starts {
        assert_eq!(r.stops.get(id).map(Vec::len), Some(1), "{id} {s:?}: stopped exactly once");
        let stop = r.stops[id][0];
        assert!(stop > s.line, "{id}: stopped after it started");
        for (line, _, _) in r.states.get(id).into_iter().flatten() {
            assert!(s.line < *line && *line < stop, "{id}: states between start and stop");
        }
    }
}

fn parent<'r>(r: &'r Recorded, id: &str) -> &'r Start {
    r.starts.get(id).unwrap_or_else(|| panic!("parent {id} was never started"))
}

/// A task event's API events (NCCL 2.28.9 `src/enqueue.cc`, `src/group.cc`): its parentObj is its call's API
/// event (of kind `api`), started and stopped before it, under a GroupApi of its communicator that records
/// GroupStartApiStop then GroupEndApiStart, without arguments, and stops after the task started, at launch.
/// A KernelLaunch, when the mask has them, sits under the same GroupApi. Returns the API event.
fn check_api<'r>(r: &'r Recorded, task: &Start, api: u64) -> &'r Start {
    let a = parent(r, &task.parent);
    assert_eq!((a.kind, &a.ctx, a.rank), (api, &task.ctx, task.rank), "{task:?}: parentObj is its API event");
    assert!(r.stops[&task.parent][0] < task.line, "{a:?}: the API event stopped before the launch");
    let g = parent(r, &a.parent);
    assert_eq!((g.kind, &g.ctx), (GROUP_API, &task.ctx), "{a:?}: under a GroupApi");
    let gid = &a.parent;
    let states: Vec<(i32, Option<u64>)> = r.states.get(gid).into_iter().flatten().map(|s| (s.1, s.2)).collect();
    assert_eq!(states, [(23, None), (24, None)], "{gid}: GroupStartApiStop, GroupEndApiStart, no arguments");
    assert!(r.stops[gid][0] > task.line, "{gid}: stops once its tasks were launched");
    for (id, k) in r.starts.iter().filter(|(_, s)| s.kind == KERNEL_LAUNCH && &s.parent == gid) {
        assert!(r.states[gid][1].0 < k.line && r.stops[id][0] < task.line, "{id}: launched after the group ended");
    }
    a
}

/// Everything the recorder saw of a 4-rank AllReduce job against NCCL's rules and collscope's own log.
fn check_recorded(r: &Recorded, calls: &[(String, String, u32)]) {
    check_lifecycle(r);
    let of = |id: &str| parent(r, id);

    // Colls: one per call per rank, NCCL's seqNumber from 0, under a Group, with rank 0's choice.
    let mut colls: BTreeMap<i32, Vec<&Start>> = BTreeMap::new();
    for s in r.starts.values().filter(|s| s.kind == COLL) {
        let api = check_api(r, s, COLL_API);
        assert_eq!(
            (api.f["func"].as_str(), api.f["count"].as_str(), api.f["datatype"].as_str()),
            (s.f["func"].as_str(), s.f["count"].as_str(), s.f["datatype"].as_str()),
            "{s:?}: its CollApi describes the same call"
        );
        let g = of(&s.f["group"]);
        assert_eq!((g.kind, &g.ctx), (GROUP, &s.ctx), "{s:?}: its parentGroup is a Group of its communicator");
        assert!(g.line < s.line);
        colls.entry(s.rank).or_default().push(s);
    }
    assert_eq!(colls.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (rank, list) in &mut colls {
        list.sort_by_key(|s| s.f["seq"].parse::<u64>().unwrap());
        let seqs: Vec<u64> = list.iter().map(|s| s.f["seq"].parse().unwrap()).collect();
        assert_eq!(seqs, (0..calls.len() as u64).collect::<Vec<_>>(), "rank {rank}: one Coll per call");
        for (s, (algo, proto, nch)) in list.iter().zip(calls) {
            let got = (s.f["algo"].as_str(), s.f["proto"].as_str(), s.f["nch"].parse::<u32>().unwrap());
            assert_eq!(got, (algo.as_str(), proto.as_str(), *nch), "rank {rank} seq {}", s.f["seq"]);
            assert_eq!((s.f["func"].as_str(), s.f["datatype"].as_str()), ("AllReduce", "ncclFloat32"));
        }
        // The user's buffers: perf runs each size out of place, then in place.
        assert!(list.iter().all(|s| s.f["send"] != "(nil)" && s.f["recv"] != "(nil)"), "rank {rank}: buffers");
        let in_place = list.iter().filter(|s| s.f["send"] == s.f["recv"]).count();
        assert_eq!(in_place, list.len() / 2, "rank {rank}: half the calls in place");
    }

    check_proxy(r, COLL);
    check_kernels(r, COLL, |s| s.f["nch"].parse().unwrap());
}

/// Proxy operations under a call (of kind `task`) of their rank, each with as many steps as it announced, in
/// NCCL's order of states.
fn check_proxy(r: &Recorded, task: u64) {
    let of = |id: &str| parent(r, id);
    let ops: Vec<(&String, &Start)> = r.starts.iter().filter(|(_, s)| s.kind == PROXY_OP).collect();
    assert!(!ops.is_empty(), "NET/Socket connections have proxy operations");
    let mut steps_of: HashMap<&str, Vec<&String>> = HashMap::new();
    for (id, s) in r.starts.iter().filter(|(_, s)| s.kind == PROXY_STEP) {
        steps_of.entry(s.parent.as_str()).or_default().push(id);
    }
    for (id, op) in &ops {
        let parent = of(&op.parent);
        assert_eq!((parent.kind, parent.rank, &parent.ctx), (task, op.rank, &op.ctx), "{op:?}");
        assert!(parent.line < op.line);
        let n: usize = op.f["nsteps"].parse().unwrap();
        let send = op.f["send"] == "1";
        let steps = steps_of.get(id.as_str()).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(steps.len(), n, "{op:?}: every step of the operation");
        for sid in steps {
            let states: Vec<i32> = r.states.get(*sid).into_iter().flatten().map(|s| s.1).collect();
            let ranks: Vec<u8> = states.iter().map(|st| step_rank(send, *st).unwrap_or(99)).collect();
            assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{sid} (send {send}): states {states:?} in order");
            assert_eq!(ranks.last(), Some(&2), "{sid}: ends handed to the network (send) or to the rank (recv)");
            assert!(r.stops[*sid][0] < r.stops[*id][0], "{sid}: a step stops before its operation");
        }
    }
    assert!(ops.iter().any(|(_, o)| o.f["send"] == "1") && ops.iter().any(|(_, o)| o.f["send"] == "0"));
}

/// KernelCh: one per channel of each call (of kind `task`; `nch`: its channels), under it, with a stop stamp
/// after its start stamp.
fn check_kernels(r: &Recorded, task: u64, nch: impl Fn(&Start) -> usize) {
    let mut kernels: HashMap<&str, usize> = HashMap::new();
    for (id, k) in r.starts.iter().filter(|(_, s)| s.kind == KERNEL_CH) {
        let parent = parent(r, &k.parent);
        assert_eq!(parent.kind, task, "{k:?}");
        *kernels.entry(k.parent.as_str()).or_default() += 1;
        let start: u64 = k.f["ptimer"].parse().unwrap();
        let st = &r.states[id];
        assert_eq!(st.len(), 1, "{id}: KernelChStop");
        assert!(st[0].1 == 22 && st[0].2.is_some_and(|t| t >= start), "{id}: {st:?} after {start}");
    }
    for (id, s) in r.starts.iter().filter(|(_, s)| s.kind == task) {
        assert_eq!(kernels.get(id.as_str()).copied().unwrap_or(0), nch(s), "{id}");
    }
}

fn recorder_run(launch: &str) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("recorded.txt");
    let (ok, out, err) = perf(launch, &[("NCCL_PROFILER_PLUGIN", recorder()), ("RECORDER_OUT", &rec)]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("NCCL INFO PROFILER/Plugin: Loaded recorder (v5)"), "{out}");
    for rank in 0..4 {
        assert!(
            out.contains(&format!("NCCL INFO recorder: rank {rank} of 4\n")),
            "the plugin logs through NCCL's logger: {out}"
        );
    }
    let calls = decisions(&out);
    assert_eq!(calls.len(), 2 * 2 * 4, "2 sizes x (1 warm-up + 2 timed + 1 checked) x out-of/in place: {out}");
    assert!(calls.iter().any(|c| c.1 == "LL") && calls.iter().any(|c| c.1 == "SIMPLE"), "{calls:?}");
    check_recorded(&read(&rec), &calls);
}

/// Set in the child process of [`a_communicator_whose_environment_says_none_runs_without_the_loaded_plugin`].
const NONE_CHILD: &str = "COLLSCOPE_TEST_NONE_CHILD";

/// Communicators each have their own environment: in one process, two ranks (threads over NET/Socket) load the
/// recorder, and two more whose environment says `NCCL_PROFILER_PLUGIN=none` run beside them without it, as the
/// in-process overhead bench (`bench/profiler_overhead.rs`) needs. The job runs in a child process (this test
/// again), since the plugin is loaded once per process and reads `RECORDER_OUT` from the process environment.
#[test]
fn a_communicator_whose_environment_says_none_runs_without_the_loaded_plugin() {
    use collscope_debug::env::Env;
    use collscope_runtime::comm::{job, CommOptions};
    if std::env::var_os(NONE_CHILD).is_some() {
        let base = Env::from_process().with("NCCL_P2P_DISABLE", "1").with("NCCL_SHM_DISABLE", "1");
        let init = |plugin: &str| {
            let env = base.with("NCCL_PROFILER_PLUGIN", plugin);
            job::init_threads(2, CommOptions { env, net: None, name: None }).unwrap()
        };
        for mut comms in [init(&recorder().display().to_string()), init("none")] {
            std::thread::scope(|s| {
                for c in comms.iter_mut() {
                    s.spawn(move || {
                        let mut buf = [1.0f32; 2];
                        c.all_reduce_in_place(&mut buf, collscope_model::RedOp::Sum).unwrap();
                        assert_eq!(buf, [2.0, 2.0]);
                    });
                }
            });
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("recorded.txt");
    let out = output(
        collscope_testkit::own::rerun(&collscope_testkit::own::test_path(
            module_path!(),
            "a_communicator_whose_environment_says_none_runs_without_the_loaded_plugin",
        ))
        .env(NONE_CHILD, "1")
        .env("RECORDER_OUT", &rec)
        .env("COLLSCOPE_TIMEOUT_S", "60")
        .env_remove("NCCL_PROFILER_PLUGIN"),
        LIMIT,
    );
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let r = read(&rec);
    assert_eq!(r.inits.len(), 2, "only the two communicators that named the plugin init it: {:?}", r.inits);
    let colls = r.starts.values().filter(|s| s.kind == COLL).count();
    assert_eq!(colls, 2, "one AllReduce on each of the two profiled ranks, none from the others");
    assert_eq!(r.finalized.len(), 2, "{:?}", r.finalized);
}

/// With ProxyCtrl in the mask, each proxy thread reports itself as NCCL's does (2.28.9 `src/proxy.cc`): short
/// events of one state (Idle, Active), Sleep then Wakeup, or Append then AppendEnd with how many operations it
/// took, and over the run it appends exactly the proxy operations its calls posted.
#[test]
fn a_c_plugin_sees_the_proxy_threads_ctrl_events() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("recorded.txt");
    let mask = Path::new("0x7f");
    let (ok, out, err) =
        perf("processes", &[("NCCL_PROFILER_PLUGIN", recorder()), ("RECORDER_OUT", &rec), (MASK, mask)]);
    assert!(ok, "{out}\n{err}");
    let r = read(&rec);
    check_lifecycle(&r);
    let mut appended: BTreeMap<String, u64> = BTreeMap::new();
    let mut posted: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen = BTreeMap::new();
    for (id, s) in &r.starts {
        let pid = id.split('-').next().unwrap().to_string();
        match s.kind {
            PROXY_OP => *posted.entry(pid).or_default() += 1,
            PROXY_CTRL => {
                let states: Vec<(i32, Option<u64>)> =
                    r.states.get(id).into_iter().flatten().map(|(_, st, a)| (*st, *a)).collect();
                let shape: Vec<i32> = states.iter().map(|s| s.0).collect();
                assert!(matches!(shape[..], [13] | [14] | [15, 16] | [17, 18]), "{id}: ProxyCtrl states {shape:?}");
                if let [(17, _), (18, Some(n))] = states[..] {
                    *appended.entry(pid).or_default() += n;
                }
                *seen.entry(shape[0]).or_insert(0u32) += 1;
            }
            _ => {}
        }
    }
    assert_eq!(appended, posted, "every proxy operation a call posted was appended once, per process");
    assert!(seen.contains_key(&13) && seen.contains_key(&14), "idle and active rounds: {seen:?}");
}

#[test]
fn a_c_plugin_sees_nccls_hierarchy_states_and_counts_on_processes() {
    recorder_run("processes");
}

#[test]
fn a_c_plugin_sees_nccls_hierarchy_states_and_counts_on_threads() {
    recorder_run("threads");
}

#[test]
fn a_c_plugin_sees_p2p_calls_of_sendrecv() {
    // The API events too: GroupApi, CollApi, P2pApi, KernelLaunch.
    let r =
        recorded_perf("sendrecv", &["-b", "8", "-e", "1M", "-f", "131072", "-n", "2", "-w", "1"], &[(MASK, "0xf5f")]);
    check_lifecycle(&r);
    check_proxy(&r, P2P);
    check_kernels(&r, P2P, |s| s.f["nch"].parse().unwrap());
    let mut per_rank: BTreeMap<(i32, String, String), usize> = BTreeMap::new();
    for s in r.starts.values().filter(|s| s.kind == P2P) {
        assert_ne!(s.f["buff"], "(nil)", "{s:?}: the user's buffer");
        let api = check_api(&r, s, P2P_API);
        assert_eq!((&api.f["func"], &api.f["count"]), (&s.f["func"], &s.f["count"]), "{s:?}: its P2pApi");
        // nccl-tests' sendrecv is the application's group around a send and a receive.
        assert_eq!(parent(&r, &api.parent).f["depth"], "2", "{api:?}");
        let g = parent(&r, &s.f["group"]);
        assert_eq!((g.kind, &g.ctx), (GROUP, &s.ctx), "{s:?}: its parentGroup is a Group of its communicator");
        *per_rank.entry((s.rank, s.f["func"].clone(), s.f["peer"].clone())).or_default() += 1;
    }
    // Each rank sends to the next and receives from the previous: once per call (2 sizes x 4 calls x 2 places).
    let want: BTreeMap<(i32, String, String), usize> = (0..4)
        .flat_map(|r: i32| {
            [
                ((r, "Send".to_string(), ((r + 1) % 4).to_string()), 16),
                ((r, "Recv".to_string(), ((r + 3) % 4).to_string()), 16),
            ]
        })
        .collect();
    assert_eq!(per_rank, want);
    // One GroupApi per call (the send and the receive share it), each launching once.
    let groups = r.starts.values().filter(|s| s.kind == GROUP_API).count();
    let launches = r.starts.values().filter(|s| s.kind == KERNEL_LAUNCH).count();
    assert_eq!((groups, launches), (4 * 16, 4 * 16), "4 ranks x 16 calls");
}

/// With NetPlugin in the mask, NET/Socket reports each transfer under its step as NCCL's socket plugin does
/// (2.28.9 `src/transport/net_socket.cc`): the socket id and data version, the socket, send (0) or receive (1),
/// and the bytes, which add up to what the step carried. Without helper threads the payload moves on the control
/// socket, one event a step; with two helper threads of one socket each, a large step is dealt out to both.
#[test]
fn a_c_plugin_sees_each_socket_transfer_under_its_step() {
    for (threads, bytes, min_events) in [("0", "8", 1), ("2", "1M", 2)] {
        let env = [("NCCL_SOCKET_NTHREADS", threads), ("NCCL_NSOCKS_PERTHREAD", "1"), (MASK, "0x9b")];
        // Group, Coll, ProxyOp, ProxyStep, NetPlugin.
        let r = recorded_perf("all_reduce", &["-b", bytes, "-e", bytes, "-n", "4", "-w", "0", "-c", "0"], &env);
        check_lifecycle(&r);
        let mut under: HashMap<&str, Vec<&Start>> = HashMap::new();
        for n in r.starts.values().filter(|s| s.kind == NET_PLUGIN) {
            under.entry(n.parent.as_str()).or_default().push(n);
        }
        let ops: Vec<&str> = under.values().flatten().map(|e| e.f["op"].as_str()).collect();
        assert!(ops.contains(&"0") && ops.contains(&"1"), "{threads} threads: sends and receives: {ops:?}");
        for (step_id, events) in &under {
            let step = parent(&r, step_id);
            let op = parent(&r, &step.parent);
            assert_eq!((step.kind, op.kind, step.rank), (PROXY_STEP, PROXY_OP, events[0].rank), "{events:?}");
            let want_op = if op.f["send"] == "1" { "0" } else { "1" };
            let mut sum = 0;
            for e in events {
                assert_eq!((e.f["sock"].as_str(), e.f["op"].as_str()), ("1", want_op), "{e:?}");
                assert!(e.f["fd"].parse::<i32>().unwrap() > 2, "{e:?}: a socket");
                assert!(r.stops[e.f["id"].as_str()][0] < r.stops[*step_id][0], "{e:?}: ends before its step");
                sum += e.f["length"].parse::<u64>().unwrap();
            }
            // What the step carried: its SendWait (send) or RecvFlushWait (receive) state's size.
            let carried = r.states[*step_id].iter().find(|s| s.1 == 9 || s.1 == 11).and_then(|s| s.2);
            assert_eq!(Some(sum), carried, "{step_id}: the transfers add up to the step");
            if bytes == "1M" && sum >= 1 << 18 {
                assert!(events.len() >= min_events, "{step_id}: dealt out to the helper threads: {events:?}");
            }
        }
    }
}

/// NCCL moves AllGather and Broadcast as bytes: their Coll events say ncclInt8 and count bytes, while their
/// CollApi events keep the application's type and count (NCCL 2.28.9 `src/enqueue.cc` `collTaskAppend`).
#[test]
fn a_c_plugin_sees_allgather_and_broadcast_as_bytes_under_their_api_calls() {
    for (bench, func, per_rank) in [("all_gather", "AllGather", 4), ("broadcast", "Broadcast", 1)] {
        let r = recorded_perf(bench, &["-b", "4096", "-e", "4096", "-n", "1", "-w", "0", "-c", "0"], &[]);
        check_lifecycle(&r);
        let colls: Vec<&Start> = r.starts.values().filter(|s| s.kind == COLL).collect();
        assert_eq!(colls.len(), 4 * 2, "{bench}: 4 ranks x out of place and in place");
        for s in colls {
            let api = check_api(&r, s, COLL_API);
            // perf's size is what each rank receives: 4096 B, of which each rank sends a quarter for AllGather.
            let (floats, bytes) = (1024 / per_rank, 4096 / per_rank);
            assert_eq!((s.f["func"].as_str(), s.f["datatype"].as_str()), (func, "ncclInt8"), "{s:?}");
            assert_eq!(s.f["count"], bytes.to_string(), "{s:?}: bytes");
            assert_eq!((api.f["datatype"].as_str(), api.f["count"].clone()), ("ncclFloat32", floats.to_string()));
        }
    }
}

#[test]
fn collscopes_own_plugin_counts_each_call_once_with_the_logged_choice() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump.jsonl");
    let plugin = collscope_plugin();
    let (ok, out, err) = perf("processes", &[("NCCL_PROFILER_PLUGIN", &plugin), ("COLLSCOPE_PROFILER_DUMP", &dump)]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("NCCL INFO PROFILER/Plugin: Loaded collscope (v6)"), "{out}");
    let calls = decisions(&out);
    let mut done: BTreeMap<u64, Vec<(u64, String, String)>> = BTreeMap::new();
    let mut proxies = Vec::new();
    for l in std::fs::read_to_string(&dump).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let d = &v["data"];
        match v["kind"].as_str().unwrap() {
            "op_completed" => done.entry(d["rank"].as_u64().unwrap()).or_default().push((
                d["seq"].as_u64().unwrap(),
                d["algo"].as_str().unwrap().to_uppercase(),
                d["proto"].as_str().unwrap().to_uppercase(),
            )),
            // Each drain's finished operations of a connection, summed.
            "proxy_tally" => proxies.push(d["sum"].clone()),
            _ => {}
        }
    }
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (rank, mut list) in done {
        list.sort();
        let want: Vec<(u64, String, String)> =
            calls.iter().enumerate().map(|(i, (a, p, _))| (i as u64 + 1, a.clone(), p.clone())).collect();
        assert_eq!(list, want, "rank {rank}: each call once, with the algorithm and protocol rank 0 logged");
    }
    assert!(!proxies.is_empty());
    for p in &proxies {
        let n = p["n_steps"].as_u64().unwrap();
        assert!(n > 0 && p["done"] == n && p["posted"] == n && p["transmitted"] == n, "{p}");
        assert!(!p["waits"].as_array().unwrap().is_empty(), "{p}: time in wait states");
    }
}

#[test]
fn bad_plugins_get_nccls_lines_and_the_job_runs_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libnot-there.so");
    let (ok, err, _) = perf("threads", &[("NCCL_PROFILER_PLUGIN", &missing)]);
    assert!(ok, "{err}");
    assert!(err.contains(&format!("NCCL INFO PROFILER/Plugin: Could not find: {}\n", missing.display())), "{err}");

    // A bare name is also tried as libnccl-profiler-NAME.so.
    let (ok, err, _) = perf("threads", &[("NCCL_PROFILER_PLUGIN", Path::new("nosuch"))]);
    assert!(ok, "{err}");
    assert!(err.contains("NCCL INFO PROFILER/Plugin: Could not find: nosuch libnccl-profiler-nosuch.so\n"), "{err}");

    let empty = shared_lib("no-profiler", "no_symbol.c");
    let (ok, err, _) = perf("threads", &[("NCCL_PROFILER_PLUGIN", &empty)]);
    assert!(ok, "{err}");
    assert!(err.contains(&format!("NCCL INFO External profiler plugin {} is unsupported\n", empty.display())), "{err}");

    let rec = dir.path().join("recorded.txt");
    let fail = Path::new("1");
    let (ok, err, _) =
        perf("threads", &[("NCCL_PROFILER_PLUGIN", recorder()), ("RECORDER_OUT", &rec), ("RECORDER_INIT_FAIL", fail)]);
    assert!(ok, "{err}");
    assert!(err.contains("NCCL INFO Profiler init failed with error '3': "), "{err}");
    assert!(err.contains(". Continue without profiler.\n"), "{err}");
    assert!(!rec.exists(), "no event reaches a plugin whose init failed");
}

fn get(url: &str) -> Option<String> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().ok()?;
    client.get(url).send().ok()?.error_for_status().ok()?.text().ok()
}

/// The value of each sample of `metric` in a Prometheus exposition whose labels include `rank="R"`, by labels.
fn samples(exposition: &str, metric: &str, rank: u16) -> Vec<(HashMap<String, String>, f64)> {
    let rank = rank.to_string();
    exposition
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels: HashMap<String, String> = labels
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                .collect();
            (name == metric && labels.get("rank") == Some(&rank)).then(|| (labels, value.parse().unwrap_or(f64::NAN)))
        })
        .collect()
}

/// The test: collscope's runtime with its own telemetry off (`COLLSCOPE_TELEMETRY=0`) and collscope's
/// plugin loaded; the plugin's servers alone serve the job: each rank's `/metrics` counts every call once with the
/// algorithm and protocol rank 0 logged, proxy wait seconds by state are there, `/api/v1/job` finds the four ranks
/// through the rendezvous folder, and the TUI's Ops and Proxy views fill from rank 0's plugin.
#[test]
fn the_plugin_alone_serves_a_jobs_metrics_job_view_and_tui() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("perf.log");
    let base = free_ports(4);
    let mut cmd = perf_cmd("processes", &[("NCCL_PROFILER_PLUGIN", &collscope_plugin())]);
    cmd.env("COLLSCOPE_TELEMETRY", "0")
        .env("COLLSCOPE_PROFILER_METRICS", "1")
        .env("COLLSCOPE_METRICS_ADDR", format!("127.0.0.1:{base}"))
        .env("COLLSCOPE_RENDEZVOUS_DIR", dir.path().join("rendezvous"))
        // Long enough for the checks below: the ranks end (and the servers with them) once it has passed.
        .env("COLLSCOPE_PROFILER_LINGER_S", "120")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null());
    let _perf = Proc::spawn(&mut cmd, LIMIT);
    let out = poll("perf's results", collscope_testkit::DEADLINE, || {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.contains("# Avg bus bandwidth") {
            Ok(out)
        } else {
            Err(out)
        }
    });
    assert!(out.contains("collscope profiler: telemetry at"), "{out}");
    assert!(!out.contains("collscope: telemetry for"), "collscope's own telemetry is off:\n{out}");
    let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (algo, proto, _) in decisions(&out) {
        *want.entry((algo, proto)).or_default() += 1.0;
    }
    assert!(!want.is_empty(), "{out}");
    for rank in 0..4u16 {
        let url = format!("http://127.0.0.1:{}", base + rank);
        let metrics = poll(&format!("rank {rank}'s calls at {url}/metrics"), Duration::from_secs(30), || {
            let m = get(&format!("{url}/metrics")).unwrap_or_default();
            let mut got: BTreeMap<(String, String), f64> = BTreeMap::new();
            for (l, v) in samples(&m, "collscope_collective_operations_total", rank) {
                *got.entry((l["algorithm"].to_uppercase(), l["protocol"].to_uppercase())).or_default() += v;
            }
            if got == want {
                Ok(m)
            } else {
                Err((got, want.clone()))
            }
        });
        let waits = samples(&metrics, "collscope_proxy_wait_seconds_total", rank);
        let states: Vec<&str> = waits.iter().filter(|(_, v)| *v > 0.0).map(|(l, _)| l["state"].as_str()).collect();
        assert!(states.contains(&"waiting_for_recv"), "rank {rank}: proxy wait seconds by state: {waits:?}");
        let snapshot: serde_json::Value =
            serde_json::from_str(&get(&format!("{url}/api/v1/snapshot")).unwrap()).unwrap();
        assert_eq!(snapshot["source"]["kind"], "profiler", "{}", snapshot["source"]);
    }
    let job = poll("rank 0's job view of the four ranks", Duration::from_secs(30), || {
        let job: serde_json::Value =
            serde_json::from_str(&get(&format!("http://127.0.0.1:{base}/api/v1/job")).unwrap_or_default())
                .unwrap_or_default();
        let ranks: Vec<u64> =
            job["ranks"].as_array().into_iter().flatten().filter_map(|r| r["rank"].as_u64()).collect();
        if ranks == [0, 1, 2, 3] {
            Ok(job)
        } else {
            Err(job)
        }
    });
    // A healthy job raises nothing, not even a straggler on a loaded host: a rank descheduled at some calls is
    // not late at most of them.
    assert_eq!(job["findings"].as_array().map(Vec::len), Some(0), "{job}");

    let calls = want.values().sum::<f64>() as u64;
    let tui = Tmux::start("plugin", &["tui", "--connect", &format!("http://127.0.0.1:{base}")]);
    tui.keys(&["7"]);
    tui.wait_for(&[format!("{calls} operations"), "AllReduce".to_string()]);
    tui.keys(&["5"]);
    tui.wait_for(&["Where proxy steps waited", "0 -> 1"]);
}

/// Issue 49, real processes: collscope's runtime writes NCCL's lines to NCCL's debug file (`NCCL_DEBUG_FILE` with
/// `%h.%p`: one a process) and collscope's plugin, loaded in each rank, follows its own process's file. Each rank's
/// plugin snapshot then has the rings (rank 0's ring orders; the others' neighbours, under GRAPH), its trees and
/// its printed connections, and every byte of its traffic sits on a printed connection's edge with its transport.
#[test]
fn the_plugin_reads_each_ranks_rings_trees_and_connections_from_its_debug_file() {
    use collscope_model::{Snapshot, Transport};
    let dir = tempfile::tempdir().unwrap();
    let base = free_ports(4);
    let mut cmd = perf_cmd("processes", &[("NCCL_PROFILER_PLUGIN", &collscope_plugin())]);
    cmd.env("NCCL_DEBUG_SUBSYS", "INIT,ENV,GRAPH")
        .env("NCCL_DEBUG_FILE", dir.path().join("nccl.%h.%p.log"))
        .env("COLLSCOPE_TELEMETRY", "0")
        .env("COLLSCOPE_PROFILER_METRICS", "1")
        .env("COLLSCOPE_METRICS_ADDR", format!("127.0.0.1:{base}"))
        .env("COLLSCOPE_RENDEZVOUS_DIR", dir.path().join("rendezvous"))
        .env("COLLSCOPE_PROFILER_LINGER_S", "120")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _perf = Proc::spawn(&mut cmd, LIMIT);
    for rank in 0..4u32 {
        let url = format!("http://127.0.0.1:{}/api/v1/snapshot", base + rank as u16);
        let snap = poll(&format!("rank {rank}'s structure and traffic at {url}"), collscope_testkit::DEADLINE, || {
            let snap: Snapshot = get(&url).and_then(|b| serde_json::from_str(&b).ok()).ok_or("no snapshot")?;
            let whole = !snap.rings.is_empty()
                && !snap.connections.is_empty()
                && !snap.traffic.is_empty()
                && snap.traffic.iter().all(|t| t.transport.is_some());
            whole.then_some(snap).ok_or("not yet")
        });
        let mine =
            |r: &collscope_model::Ring| r.order.contains(&rank) || r.neighbours.iter().any(|&(_, me, _)| me == rank);
        assert!(snap.rings.iter().all(mine), "rank {rank}: {:?}", snap.rings);
        if rank == 0 {
            assert!(snap.rings.iter().all(|r| r.order.len() == 4), "rank 0 prints the orders: {:?}", snap.rings);
        }
        assert!(snap.trees.iter().any(|t| t.rank == rank), "rank {rank}: {:?}", snap.trees);
        assert!(
            snap.connections.iter().all(|c| c.transport == Transport::Net && !c.inferred),
            "rank {rank}: NET/Socket, printed: {:?}",
            snap.connections
        );
        for t in &snap.traffic {
            let on_edge = snap.connections.iter().any(|c| {
                c.channel == t.channel && [c.src, c.dst].contains(&t.rank) && [c.src, c.dst].contains(&t.peer)
            });
            assert!(t.rank == rank && on_edge, "rank {rank}: {t:?} on no printed edge: {:?}", snap.connections);
            assert_eq!(t.transport, Some(Transport::Net), "{t:?}");
        }
    }
}
