//! Telemetry end to end: `collscope serve --log` on real NCCL logs, `collscope demo` serving its metrics, a real
//! Prometheus scraping it with the shipped scrape config, `promtool check metrics`, and the shipped Grafana
//! dashboard's metric names found in live expositions. Every server binds a loopback port the OS picks.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FIXTURES: &str = "../shared/fixtures/nccl-logs";
const WAIT: Duration = Duration::from_secs(90);

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join(FIXTURES).join(name)
}

/// Starts `collscope ARGS` and returns it with the base URL it printed (`http://127.0.0.1:PORT`).
fn start(args: &[&str]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_collscope"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("collscope starts");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let url: String = line[at..].chars().take_while(|c| !c.is_whitespace() && *c != ',').collect();
                let _ = tx.send(url.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let url = rx.recv_timeout(WAIT).unwrap_or_else(|_| panic!("collscope {args:?} printed no URL"));
    (running, url)
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

fn get(url: &str) -> String {
    let r = client().get(url).send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.text().unwrap()
}

/// Polls `f` until it returns something, or fails naming `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
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
    let out =
        Command::new(env!("CARGO_BIN_EXE_collscope")).args(["log", "analyze", "--json"]).arg(log).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn serve_log_exports_the_connection_and_gdr_facts_log_analyze_reports() {
    for name in ["021_nccl-1189.log", "005_nv_peer_memory-56.log", "x11_nccl-834.log", "x07_megatron-516.log"] {
        let log = fixture(name);
        let facts = analyze(&log);
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
    }
}

#[test]
fn serve_follow_reads_growth_and_survives_rotation() {
    let dir = std::env::temp_dir().join(format!("collscope-follow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nccl.log");
    let text = std::fs::read_to_string(fixture("x11_nccl-834.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let all = analyze(&fixture("x11_nccl-834.log"))["connections"].as_array().unwrap().len();
    let half = lines.len() / 2;
    std::fs::write(&log, lines[..half].join("\n") + "\n").unwrap();
    let first = analyze(&log)["connections"].as_array().unwrap().len();
    assert!(first < all, "the first half holds fewer connections than the whole");

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
    let connections = || -> usize {
        let snap: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/v1/snapshot"))).unwrap();
        snap["connections"].as_array().map_or(0, Vec::len)
    };
    wait_for("the first half", || (connections() == first).then_some(()));
    // Rotate: the old file moves away, the rest of the log goes to a new file at the same path.
    std::fs::rename(&log, dir.join("nccl.log.1")).unwrap();
    std::fs::write(&log, lines[half..].join("\n") + "\n").unwrap();
    wait_for("the rest after rotation", || (connections() == all).then_some(()));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A loopback port free now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn demo() -> (Running, String) {
    let args = ["demo", "--launch", "threads", "--nranks", "2", "--transport", "socket", "--grad-mib", "1"];
    let (child, url) = start(&[&args[..], &["--duration", "120", "--metrics-addr", "127.0.0.1:0"]].concat());
    wait_for("the demo's proxy metrics", || {
        get(&format!("{url}/metrics")).contains("collscope_proxy_wait_seconds_total{").then_some(())
    });
    (child, url)
}

#[test]
fn prometheus_scrapes_the_demo_with_the_shipped_config_and_promtool_accepts_the_exposition() {
    let (_demo, url) = demo();
    let exposition = get(&format!("{url}/metrics"));
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), exposition.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
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
    let dir = std::env::temp_dir().join(format!("collscope-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let _prometheus = Running(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/test.sh installs it)"),
    );
    let query = |q: &str| -> Vec<serde_json::Value> {
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
    };
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
    // The runtime (the demo) and a real NCCL log with warnings and findings between them feed every panel.
    let (_demo, demo_url) = demo();
    let log = fixture("025_nccl-290.log");
    let (_serve, log_url) = start(&["serve", "--log", log.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"]);
    let live = get(&format!("{demo_url}/metrics")) + &get(&format!("{log_url}/metrics"));
    let served: BTreeSet<String> = live
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect();
    let missing: Vec<_> = used.difference(&served).collect();
    assert!(missing.is_empty(), "dashboard metrics not served: {missing:?}");
}

#[test]
fn serve_names_bad_input() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_collscope")).args(args).envs(env.iter().copied()).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let dir = root().join(FIXTURES);
    let e = run(&["serve", "--log", dir.to_str().unwrap(), "--follow"], &[]);
    assert!(e.contains("--follow reads files") && e.contains("nccl-logs"), "{e}");
    let log = fixture("021_nccl-1189.log");
    let e = run(&["serve", "--log", log.to_str().unwrap()], &[("COLLSCOPE_METRICS_ADDR", "nowhere")]);
    assert!(e.contains("COLLSCOPE_METRICS_ADDR='nowhere'") && e.contains("HOST:PORT"), "{e}");
    let e = run(&["serve", "--log", "/nonexistent/nccl.log", "--metrics-addr", "127.0.0.1:0"], &[]);
    assert!(e.contains("/nonexistent/nccl.log"), "{e}");
}
