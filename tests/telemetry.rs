//! Telemetry end to end: `collscope serve --log` on collscope's own NCCL logs and on log text in NCCL's grammar
//! (and on the real NCCL logs in `../shared` where they exist), `collscope demo` serving its metrics, a real
//! Prometheus scraping it with the shipped scrape config, `promtool check metrics`, and the shipped Grafana
//! dashboard's metric names found in live expositions. Every server binds a loopback port the OS picks.

use crate::live;
use crate::tmux::Tmux;

use collscope_testkit::{fleet, Proc};
use live::start;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// Two nodes of two GPUs on NCCL 2.28.9 over IB, GPUDirect RDMA on one NIC and not on the other, and an IB
/// completion error. Formats: `src/init.cc` (comm line), `src/transport/p2p.cc`, `src/transport/net.cc`,
/// `src/transport/net_ib.cc` and the prefixes of `src/debug.cc`, NCCL 2.28.9.
const IB_LOG: &str = "\
node00:1201:1201 [0] NCCL INFO NCCL version 2.28.9+cuda12.9
node00:1201:1201 [0] NCCL INFO comm 0x5a1000 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
node00:1202:1202 [1] NCCL INFO comm 0x5a2000 rank 1 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0
node01:1301:1301 [0] NCCL INFO comm 0x5b1000 rank 2 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
node01:1302:1302 [1] NCCL INFO comm 0x5b2000 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0
node00:1201:1201 [0] NCCL INFO Channel 00/02 : 0 1 2 3
node00:1201:1201 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node00:1202:1202 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA
node01:1301:1301 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA
node01:1301:1301 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/CUMEM/read
node01:1302:1302 [1] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [send] via NET/IB/1
node00:1201:1201 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/1
node01:1302:1302 [1] transport/net_ib.cc:2543 NCCL WARN NET/IB: Got completion from peer 10.0.0.1<43044> with \
status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=1048576 vendor_err=129 req_type=Send hca mlx5_1
";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A directory of its own for one test, emptied first.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collscope-telemetry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// collscope's own logs (4 rank processes over SHM, 2 over NET/Socket, 2 threads over P2P) and [`IB_LOG`],
/// written to `dir`.
fn own_logs(dir: &Path) -> Vec<PathBuf> {
    let runs: [(&str, &[&str]); 3] = [
        ("shm.log", &["--nranks", "4", "--launch", "processes"]),
        ("socket.log", &["--nranks", "2", "--launch", "processes", "--transport", "socket"]),
        ("p2p.log", &["--nranks", "2", "--launch", "threads"]),
    ];
    let mut logs = Vec::new();
    for (name, ranks) in runs {
        let path = dir.join(name);
        std::fs::write(&path, live::own_log(ranks)).unwrap();
        logs.push(path);
    }
    let path = dir.join("ib.log");
    std::fs::write(&path, IB_LOG).unwrap();
    logs.push(path);
    logs
}

/// `collscope ARGS` run to its end: (success, stdout, stderr).
fn collscope(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = collscope_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_collscope")).args(args).envs(env.iter().copied()),
        Duration::from_secs(60),
    );
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

fn get(url: &str) -> String {
    let r = client().get(url).send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.text().unwrap()
}

/// Polls `f` until it returns something (within [`WAIT`]), or fails naming `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    collscope_testkit::poll(what, WAIT, || f().ok_or(()))
}

/// `(labels, value)` of every sample of `name` in an exposition.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

fn analyze(log: &Path) -> serde_json::Value {
    let (ok, out, err) = collscope(&["log", "analyze", "--json", "--no-fail", log.to_str().unwrap()], &[]);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// `collscope serve --log LOG` exports what `collscope log analyze` reads from LOG: connections by transport and
/// GPUDirect RDMA, the job, and the reader's model as the snapshot. Returns the (transport, gdrdma) pairs seen.
fn serve_matches_analyze(log: &Path) -> BTreeSet<(String, String)> {
    let name = log.display();
    let facts = analyze(log);
    let mut expected: BTreeMap<(String, String), f64> = BTreeMap::new();
    for c in facts["connections"].as_array().unwrap() {
        let gdr = match c["gdrdma"].as_bool() {
            Some(true) => "enabled",
            Some(false) => "disabled",
            None => "n/a",
        };
        *expected.entry((c["transport"].as_str().unwrap().to_string(), gdr.to_string())).or_default() += 1.0;
    }
    assert!(!expected.is_empty(), "{name} has connection lines");

    let (_serve, url) = start(&["serve", "--log", log.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"]);
    let text = wait_for("the log's connections", || {
        let t = get(&format!("{url}/metrics"));
        t.contains("collscope_connection_channels{").then_some(t)
    });
    let mut got: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (labels, v) in samples(&text, "collscope_connection_channels") {
        *got.entry((labels["transport"].clone(), labels["gdrdma"].clone())).or_default() += v;
    }
    assert_eq!(got, expected, "{name}: channels by transport and GPUDirect RDMA");
    let job = samples(&text, "collscope_job_info");
    assert_eq!(job.len(), 1, "{text}");
    assert_eq!(job[0].0["source"], "log");
    let opt = |v: &serde_json::Value| v.as_u64().map_or(String::new(), |n| n.to_string());
    assert_eq!(job[0].0["nranks"], opt(&facts["nranks"]), "{name}");
    assert_eq!(job[0].0["nnodes"], opt(&facts["nnodes"]), "{name}");

    let snap: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/v1/snapshot"))).unwrap();
    assert_eq!(snap["connections"], facts["connections"], "{name}: the snapshot is the reader's model");

    // The job view holds the log's findings, those `log analyze` gives and `/metrics` counts.
    let job: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/v1/job"))).unwrap();
    assert_eq!(job["findings"], facts["findings"], "{name}: the job view's findings are the log's");
    let mut counted: BTreeMap<(String, String), f64> = BTreeMap::new();
    for f in facts["findings"].as_array().unwrap() {
        let key = (f["code"].as_str().unwrap().to_string(), f["severity"].as_str().unwrap().to_string());
        *counted.entry(key).or_default() += 1.0;
    }
    let exported: BTreeMap<(String, String), f64> = samples(&text, "collscope_findings")
        .into_iter()
        .map(|(labels, v)| ((labels["code"].clone(), labels["severity"].clone()), v))
        .collect();
    assert_eq!(exported, counted, "{name}: /metrics counts the same findings");
    // Only what a log gives: no profiler plugin's or runtime queue's families with zeros nobody read.
    for family in [
        "collscope_profiler_disabled",
        "collscope_profiler_events_lost_total",
        "collscope_proxy_appended_operations_total",
        "collscope_proxy_thread_seconds_total",
        "collscope_kernel_channel_seconds_total",
    ] {
        assert!(!text.contains(family), "{name}: a log's exposition has {family}:\n{text}");
    }
    assert!(!text.contains("stage=\"queue\""), "{name}: a log has no runtime queue:\n{text}");
    got.into_keys().collect()
}

#[test]
fn serve_log_exports_the_connection_and_gdr_facts_log_analyze_reports() {
    let dir = temp_dir("facts");
    let seen: BTreeSet<(String, String)> = own_logs(&dir).iter().flat_map(|log| serve_matches_analyze(log)).collect();
    for (transport, gdr) in [("P2P", "n/a"), ("SHM", "n/a"), ("NET", "disabled"), ("NET", "enabled")] {
        assert!(seen.contains(&(transport.into(), gdr.into())), "{transport} with gdrdma {gdr} in {seen:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serve_log_exports_the_facts_of_real_logs() {
    let Some(fixtures) = collscope_testkit::fixtures("serve --log against log analyze on real NCCL logs") else {
        return;
    };
    for name in ["021_nccl-1189.log", "005_nv_peer_memory-56.log", "x11_nccl-834.log", "x07_megatron-516.log"] {
        serve_matches_analyze(&fixtures.join(name));
    }
}

/// `serve --follow` on the first part of `text` (up to its first connection line), then on the rest written to a
/// new file at the same path after the first moved away (a rotation): the snapshot grows to the whole log's.
fn follow_through_rotation(name: &str, text: &str) {
    let dir = temp_dir(&format!("follow-{name}"));
    let (whole, log) = (dir.join("whole.log"), dir.join("nccl.log"));
    std::fs::write(&whole, text).unwrap();
    // Printed connections only: a followed log's snapshot leaves out the inferred ones (they would vanish once
    // their line is read, and the served list only grows), which `log analyze` adds at the end.
    let printed = |snap: &serde_json::Value| {
        snap["connections"].as_array().map_or(0, |c| c.iter().filter(|c| c["inferred"] != true).count())
    };
    let all = printed(&analyze(&whole));
    let lines: Vec<&str> = text.lines().collect();
    let head = 1 + lines.iter().position(|l| l.contains(" via ")).expect("a connection line");
    std::fs::write(&log, lines[..head].join("\n") + "\n").unwrap();
    let first = printed(&analyze(&log));
    assert!(0 < first && first < all, "{name}: the first part holds {first} of {all} connections");

    let (_serve, url) = start(&[
        "serve",
        "--log",
        log.to_str().unwrap(),
        "--follow",
        "--poll-ms",
        "50",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let connections = || -> usize { printed(&serde_json::from_str(&get(&format!("{url}/api/v1/snapshot"))).unwrap()) };
    wait_for("the first part", || (connections() == first).then_some(()));
    std::fs::rename(&log, dir.join("nccl.log.1")).unwrap();
    std::fs::write(&log, lines[head..].join("\n") + "\n").unwrap();
    wait_for("the rest after rotation", || (connections() == all).then_some(()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serve_follow_reads_growth_and_survives_rotation() {
    follow_through_rotation("own", &live::own_log(&["--nranks", "4", "--launch", "processes"]));
    if let Some(fixtures) = collscope_testkit::fixtures("serve --follow through a rotation of a real NCCL log") {
        follow_through_rotation("real", &std::fs::read_to_string(fixtures.join("x11_nccl-834.log")).unwrap());
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn demo() -> (Proc, String) {
    let args = ["demo", "--launch", "threads", "--nranks", "2", "--transport", "socket", "--grad-mib", "1"];
    let (child, url) = start(&[&args[..], &["--duration", "120", "--metrics-addr", "127.0.0.1:0"]].concat());
    wait_for("the demo's proxy metrics", || {
        get(&format!("{url}/metrics")).contains("collscope_proxy_wait_seconds_total{").then_some(())
    });
    (child, url)
}

/// `collscope perf` (threads, NET/Socket) with collscope's telemetry off and collscope's NCCL profiler plugin
/// serving in its place, every event kind on (ProxyCtrl too), kept up after the job: (the job, the plugin's URL).
fn plugin_job() -> (Proc, String) {
    let plugin = std::env::current_exe().unwrap().parent().unwrap().join("libcollscope_profiler.so");
    assert!(plugin.is_file(), "{} was not built", plugin.display());
    let url = format!("http://127.0.0.1:{}", free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
    cmd.args(["perf", "all_reduce", "--nranks", "2", "--transport", "socket", "-b", "1M", "-e", "1M", "-n", "20"])
        .env("NCCL_PROFILER_PLUGIN", &plugin)
        .env("NCCL_PROFILE_EVENT_MASK", "127")
        .env("COLLSCOPE_TELEMETRY", "0")
        .env("COLLSCOPE_METRICS_ADDR", url.trim_start_matches("http://"))
        .env("COLLSCOPE_PROFILER_LINGER_S", "120")
        .env("COLLSCOPE_TIMEOUT_S", "60")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let job = Proc::spawn(&mut cmd, Duration::from_secs(180));
    wait_for("the plugin's proxy thread metrics", || {
        let m = client().get(format!("{url}/metrics")).send().ok()?.text().ok()?;
        m.contains("collscope_proxy_thread_seconds_total{").then_some(())
    });
    (job, url)
}

#[test]
fn prometheus_scrapes_the_demo_with_the_shipped_config_and_promtool_accepts_the_exposition() {
    let (_demo, url) = demo();
    let exposition = get(&format!("{url}/metrics"));
    // promtool and prometheus: Debian package prometheus, which scripts/test.sh installs.
    let mut cmd = Command::new("promtool");
    cmd.args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut promtool = Proc::spawn(&mut cmd, Duration::from_secs(60));
    let mut stdin = promtool.take_stdin();
    stdin.write_all(exposition.as_bytes()).unwrap();
    drop(stdin);
    let out = promtool.finish();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The shipped config, with its targets replaced by the demo's address.
    let shipped = std::fs::read_to_string(root().join("dashboards/prometheus.yml")).unwrap();
    let target = url.trim_start_matches("http://");
    let mut config = String::new();
    let mut replaced = false;
    for line in shipped.lines() {
        if line.trim_start().starts_with("- 127.0.0.1:") {
            if !replaced {
                config.push_str(&format!("{}- {target}\n", &line[..line.find('-').unwrap()]));
                replaced = true;
            }
        } else {
            config.push_str(line);
            config.push('\n');
        }
    }
    assert!(replaced, "the shipped config lists 127.0.0.1 targets");
    let dir = temp_dir("prometheus");
    std::fs::copy(root().join("dashboards/alerts.yml"), dir.join("alerts.yml")).unwrap();
    let (_prometheus, web) = fleet::prometheus(&dir, &config, live::LIFE);
    let query = |q: &str| promql(&web, q);
    for q in [
        "collscope_collective_operations_total > 0",
        "collscope_collective_bus_bandwidth_bytes_per_second > 0",
        "collscope_channel_bytes_total > 0",
        "collscope_proxy_steps_total > 0",
        "collscope_connection_channels > 0",
    ] {
        let result = wait_for(&format!("Prometheus to answer {q}"), || Some(query(q)).filter(|r| !r.is_empty()));
        let value: f64 = result[0]["value"][1].as_str().unwrap().parse().unwrap();
        assert!(value > 0.0, "{q}: {result:?}");
        assert_eq!(result[0]["metric"]["job"], "collscope");
    }
    // Every shipped alert evaluates against the real series without an error (a vector matching that the
    // demo's labels make ambiguous would show here, not in promtool's unit tests).
    let rules = wait_for("Prometheus to evaluate the shipped alerts", || {
        let text = client().get(format!("http://{web}/api/v1/rules")).send().ok()?.text().ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let rules: Vec<serde_json::Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        rules.iter().all(|r| r["health"] != "unknown").then_some(rules)
    });
    assert!(rules.len() >= 10, "{rules:?}");
    for r in &rules {
        assert_eq!(r["health"], "ok", "{}: {}", r["name"], r["lastError"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_shipped_alert_rules_pass_promtool_check_and_their_unit_tests() {
    for args in [&["check", "rules", "alerts.yml"][..], &["test", "rules", "alerts.test.yml"]] {
        let mut cmd = Command::new("promtool");
        cmd.args(args).current_dir(root().join("dashboards"));
        let out = collscope_testkit::output(&mut cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issue 54: `tui --prometheus` on a job of 1,024 ranks (synthetic endpoints served by this test, scraped by a
/// real Prometheus) counts every rank in its strip, and ordered by the age of the call in flight puts the one
/// rank stuck in a call first, however far down the job it is, with that call's age.
#[test]
fn tui_through_prometheus_shows_every_rank_of_a_1024_rank_job() {
    const N: u32 = 1024;
    const STUCK: u32 = 777;
    let targets = fleet::serve_ranks(
        N,
        std::sync::Arc::new(|rank, _path: &str| {
            let age = if rank == STUCK { 42.0 } else { 0.0 };
            Some((fleet::EXPOSITION, fleet::exposition(rank, N, age)))
        }),
    );
    let dir = temp_dir("prom-1024");
    let (_prometheus, web) = fleet::prometheus(&dir, &fleet::static_config("fleet", 2, &targets), live::LIFE);
    collscope_testkit::poll("Prometheus to scrape all 1,024 ranks", Duration::from_secs(240), || {
        let up = promql(&web, "count(up{job=\"fleet\"} == 1)");
        let n = up.first().and_then(|s| s["value"][1].as_str()).unwrap_or("0").to_string();
        if n == "1024" {
            Ok(())
        } else {
            Err(n)
        }
    });
    let prom = format!("http://{web}");
    let t = Tmux::start_sized("prom1024", (120, 40), &["tui", "--prometheus", &prom, "--job", "fleet"]);
    let screen = t.wait_for(&["Job: 1024 ranks via Prometheus, scraped "]);
    assert!(screen.lines().any(|l| l.starts_with(" r0 ")), "{screen}");
    t.keys(&["o", "o"]);
    let screen = t.wait_for(&["(o: by age)"]);
    let first = screen.lines().find(|l| l.starts_with(" r")).unwrap_or_default();
    assert!(first.starts_with(&format!(" r{STUCK} ")) && first.contains("42.0s"), "{screen}");
    t.keys(&["q"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// The result of an instant PromQL query (empty until Prometheus answers).
fn promql(web: &str, q: &str) -> Vec<serde_json::Value> {
    let encoded: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let r = client().get(format!("http://{web}/api/v1/query?query={encoded}")).send();
    let Ok(r) = r else { return Vec::new() };
    let v: serde_json::Value = r.text().ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Prometheus finds every rank of a 4-process demo through the target files the ranks write
/// (`COLLSCOPE_PROMETHEUS_SD_DIR`), no port listed anywhere; a rank that ends cleanly takes its file away.
#[test]
fn prometheus_discovers_every_rank_of_a_demo_through_the_target_files_the_ranks_write() {
    let dir = temp_dir("file-sd");
    let sd = dir.join("targets");
    std::fs::create_dir_all(&sd).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: collscope\n    file_sd_configs:\n      \
         - files: ['{}/*.json']\n        refresh_interval: 1s\n",
        sd.display()
    );
    let sd_env = sd.to_str().unwrap();
    let args = ["demo", "--no-tui", "--launch", "processes", "--nranks", "4", "--transport", "socket"];
    let (_demo, _) = live::start_with(
        &[&args[..], &["--grad-mib", "1", "--duration", "120", "--metrics-addr", "127.0.0.1:0"]].concat(),
        &[("COLLSCOPE_PROMETHEUS_SD_DIR", sd_env)],
    );
    let (_prometheus, web) = fleet::prometheus(&dir, &config, live::LIFE);
    let up = wait_for("Prometheus to find 4 ranks up", || {
        let r = promql(&web, "up == 1");
        (r.len() == 4).then_some(r)
    });
    let ranks: BTreeSet<String> = wait_for("every rank's job info", || {
        let r = promql(&web, "collscope_communicator_info");
        let ranks: BTreeSet<String> =
            r.iter().filter_map(|s| s["metric"]["rank"].as_str().map(str::to_string)).collect();
        (ranks.len() == 4).then_some(ranks)
    });
    assert_eq!(ranks, ["0", "1", "2", "3"].map(String::from).into(), "{up:?}");
    assert_eq!(std::fs::read_dir(&sd).unwrap().count(), 4, "one file per rank process");

    // Issue 54: `job status --prometheus` reads every rank back from that Prometheus, as text and as JSON.
    let prom = format!("http://{web}");
    let status = ["job", "status", "--prometheus", &prom, "--job", "collscope"];
    let (ok, text, err) = collscope(&status, &[]);
    assert!(ok, "{err}");
    assert!(text.starts_with("4 ranks: ") && text.contains(" 0 down, 0 unknown"), "{text}");
    let (ok, json, err) = collscope(&[&status[..], &["--json"]].concat(), &[]);
    assert!(ok, "{err}");
    let view: serde_json::Value = serde_json::from_str(&json).unwrap();
    let seen: Vec<(u64, bool)> = view["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), r["up"].as_bool().unwrap_or(false)))
        .collect();
    assert_eq!(seen, [(0, true), (1, true), (2, true), (3, true)], "{json}");
    // ... and `tui --prometheus` draws every rank in its strip, saying where the view comes from and how old.
    let t = Tmux::start_sized("promtui", (120, 30), &["tui", "--prometheus", &prom, "--job", "collscope"]);
    let screen = t.wait_for(&["via Prometheus http://", "Job: 4 ranks via Prometheus, scraped ", " s ago"]);
    for rank in 0..4 {
        assert!(screen.lines().any(|l| l.starts_with(&format!(" r{rank} "))), "rank {rank}:\n{screen}");
    }
    t.keys(&["q"]);

    // A short demo that ends by itself leaves no file behind.
    let clean = dir.join("clean");
    std::fs::create_dir_all(&clean).unwrap();
    let (ok, _, err) = collscope(
        &[
            "demo",
            "--no-tui",
            "--nranks",
            "2",
            "--launch",
            "processes",
            "--steps",
            "2",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
        &[("COLLSCOPE_PROMETHEUS_SD_DIR", clean.to_str().unwrap())],
    );
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_dir(&clean).unwrap().count(), 0, "the ranks took their target files away");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Metric family names a PromQL expression uses (histogram series names map to their family).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("collscope_") {
        let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        out.insert(family.to_string());
    }
    out
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn every_metric_the_dashboards_use_is_in_a_live_exposition() {
    let mut used = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("dashboards")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(dash.get("__inputs").is_none(), "{}: a datasource variable, not __inputs", path.display());
            let vars = dash["templating"]["list"].as_array().unwrap();
            assert!(vars.iter().any(|v| v["type"] == "datasource"), "{}: datasource variable", path.display());
            let mut all = Vec::new();
            exprs(&dash, &mut all);
            used.extend(all.iter().flat_map(|e| metric_names(e)));
        }
    }
    assert!(used.len() >= 15, "the dashboards use the metrics: {used:?}");
    // The runtime (the demo), a log with a WARN line and findings, and collscope's NCCL profiler plugin (in a
    // collscope job with its own telemetry off) between them feed every panel.
    let (_demo, demo_url) = demo();
    let dir = temp_dir("dashboards");
    let log = dir.join("ib.log");
    std::fs::write(&log, IB_LOG).unwrap();
    let (_serve, log_url) = start(&["serve", "--log", log.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"]);
    let (_job, plugin_url) = plugin_job();
    let live = get(&format!("{demo_url}/metrics"))
        + &get(&format!("{log_url}/metrics"))
        + &get(&format!("{plugin_url}/metrics"));
    let served: BTreeSet<String> = live
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect();
    let missing: Vec<_> = used.difference(&served).collect();
    assert!(missing.is_empty(), "dashboard metrics not served: {missing:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serve_names_bad_input() {
    let fails = |args: &[&str], env: &[(&str, &str)]| {
        let (ok, _, err) = collscope(args, env);
        assert!(!ok, "{args:?} should fail");
        err
    };
    let dir = temp_dir("bad-input");
    let e = fails(&["serve", "--log", dir.to_str().unwrap(), "--follow"], &[]);
    assert!(e.contains("--follow reads files") && e.contains(dir.to_str().unwrap()), "{e}");
    let log = dir.join("ib.log");
    std::fs::write(&log, IB_LOG).unwrap();
    let e = fails(&["serve", "--log", log.to_str().unwrap()], &[("COLLSCOPE_METRICS_ADDR", "nowhere")]);
    assert!(e.contains("COLLSCOPE_METRICS_ADDR='nowhere'") && e.contains("HOST:PORT"), "{e}");
    let e = fails(&["serve", "--log", "/nonexistent/nccl.log", "--metrics-addr", "127.0.0.1:0"], &[]);
    assert!(e.contains("/nonexistent/nccl.log"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Another program on collscope's default telemetry port does not stop the demo (issue 48), nor on a port the user
/// chose (issue 55): its ranks serve on free ports and say which, naming whose choice the taken port was.
#[test]
fn a_taken_telemetry_port_does_not_kill_the_demo_even_when_the_user_chose_it() {
    // Held here, or already held by another program: either way taken while the demo starts.
    let default = collscope_telemetry::config::DEFAULT_PORT;
    let _held = std::net::TcpListener::bind(("127.0.0.1", default));
    let args = ["demo", "--launch", "threads", "--nranks", "2", "--transport", "socket", "--grad-mib", "1"];
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_collscope"));
        cmd.args(args).args(["--steps", "2", "--no-tui"]).args(extra);
        cmd.env_remove("COLLSCOPE_METRICS_ADDR").env_remove("COLLSCOPE_TELEMETRY").env("COLLSCOPE_TIMEOUT_S", "20");
        let out = collscope_testkit::output(&mut cmd, Duration::from_secs(60));
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), format!("{}{}", text(&out.stdout), text(&out.stderr)))
    };
    let (ok, out) = run(&[]);
    assert!(ok, "the demo died on a taken default port:\n{out}");
    assert!(out.contains(&format!("telemetry port {default} is taken")) && out.contains("instead"), "{out}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let (ok, out) = run(&["--metrics-addr", &addr.to_string()]);
    assert!(ok, "the demo died on a taken port the user chose:\n{out}");
    let said = format!("telemetry port {} is taken by another program (chosen with --metrics-addr)", addr.port());
    assert!(out.contains(&said) && out.contains("instead"), "{out}");
}
