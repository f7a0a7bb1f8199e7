//! What the server fetches from other ranks (`/api/v1/job`, `/metrics/aggregate`). The job view's endpoints come
//! from other processes (a rendezvous folder, the bootstrap), so each is hostile until checked: only
//! `http://HOST:PORT` that is not this server, no redirects, no proxies, a capped body read as it streams, a few
//! fetches at once, and one job view built at a time (requests meanwhile share it).

use collscope_model::job::proc_stat;
use collscope_model::job::{MAX_JOB_FINDINGS, MAX_JOB_RANKS};
use collscope_model::{routes, Finding, JobView, ProcState, ProcessSeen, RankEndpoint, RankSummary};
use futures_util::StreamExt;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long `/metrics/aggregate` and `/api/v1/job` wait for each other rank (the whole answer, body included).
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The most one rank's `/api/v1/summary` may send: a summary is under 100 KiB a rank (its progress in 1 KiB, its
/// edges, `MAX_RANK_EDGES` of each kind, the rest), and one process serves a handful of ranks (ranks as threads:
/// a node's worth); 1 MiB leaves room and bounds 16 fetches to 16 MiB.
pub(crate) const MAX_SUMMARY_BYTES: usize = 1 << 20;
/// The most one local rank's `/metrics` may send to `/metrics/aggregate`: tens of thousands of series.
pub(crate) const MAX_METRICS_BYTES: usize = 16 << 20;
/// Ranks asked at once: enough to hide a round trip, few enough that the answers' memory stays bounded.
const MAX_PARALLEL: usize = 16;
/// A whole job view is built within this: ranks not asked by then are listed as unreachable (1024 ranks, each
/// up to [`PEER_TIMEOUT`], would otherwise hold a request for two minutes).
const JOB_DEADLINE: Duration = Duration::from_secs(8);
/// A job view built this recently is served again as it is: clients polling every second, or a burst of them,
/// cost one round of fetches.
pub(crate) const JOB_REUSE: Duration = Duration::from_millis(500);

/// The client every fetch goes through: no redirects followed, no proxy variables honoured.
pub(crate) fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build()
}

/// `url` if it is `http://HOST:PORT` (a name, an IPv4 address or a bracketed IPv6 one, and a port, nothing else)
/// and not `own`, this server; else why not.
pub(crate) fn check_endpoint(url: &str, own: SocketAddr) -> Result<(), String> {
    let refused = |why: &str| Err(format!("refused endpoint '{url}': {why}"));
    let Some(rest) = url.strip_prefix("http://") else {
        return refused("expected http://HOST:PORT");
    };
    if rest.contains(['/', '?', '#', '@']) {
        return refused("expected http://HOST:PORT, without a path, query or user");
    }
    let Some((host, port)) = rest.rsplit_once(':') else { return refused("expected http://HOST:PORT, with a port") };
    let Some(port) = port.parse::<u16>().ok().filter(|p| *p != 0) else {
        return refused("expected a port from 1 to 65535");
    };
    let ip = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => match v6.parse::<std::net::Ipv6Addr>() {
            Ok(a) => Some(IpAddr::V6(a)),
            Err(_) => return refused("expected an IPv6 address inside [ ]"),
        },
        None if host.is_empty()
            || host.len() > 253
            || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') =>
        {
            return refused("expected a host name or an IP address");
        }
        None => host.parse::<IpAddr>().ok(),
    };
    let me = match ip {
        Some(ip) => ip.is_loopback() || ip.is_unspecified() || ip == own.ip(),
        None => host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case(&collscope_debug::sys::hostname()),
    };
    if me && port == own.port() {
        return refused("it is this process's own server");
    }
    Ok(())
}

/// GETs `url` within `timeout` and reads at most `cap` bytes of its answer as they arrive; a redirect, an error
/// status or a longer answer is an error that says so.
pub(crate) async fn fetch(http: &reqwest::Client, url: &str, timeout: Duration, cap: usize) -> Result<Vec<u8>, String> {
    let mut resp = http.get(url).timeout(timeout).send().await.map_err(|e| describe(&e))?;
    let status = resp.status();
    if status.is_redirection() {
        return Err(format!("answered {status}, a redirect; redirects are not followed"));
    }
    if !status.is_success() {
        return Err(format!("answered {status}"));
    }
    let too_long = || format!("answered more than {cap} bytes, the most expected; the rest was not read");
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
        if body.len() + chunk.len() > cap {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A failed fetch with its causes ("connection refused", "operation timed out"), not only reqwest's summary.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// One rank's summaries from `endpoint`, or why there are none.
async fn summary_of(
    http: &reqwest::Client,
    endpoint: &RankEndpoint,
    own: SocketAddr,
    deadline: Instant,
) -> Result<Vec<RankSummary>, String> {
    check_endpoint(&endpoint.url, own)?;
    let left = deadline.saturating_duration_since(Instant::now()).min(PEER_TIMEOUT);
    if left.is_zero() {
        return Err(format!("not asked: the job view's {} s ran out", JOB_DEADLINE.as_secs()));
    }
    let url = format!("{}{}", endpoint.url, routes::SUMMARY);
    let body = fetch(http, &url, left, MAX_SUMMARY_BYTES).await.map_err(|e| format!("rank {}: {e}", endpoint.rank))?;
    serde_json::from_slice(&body).map_err(|e| format!("not a summary: {e}"))
}

/// The most of `/proc/PID/stat` read: its first fields (pid, name, state) fit well within.
const MAX_STAT_BYTES: usize = 4096;

/// Process `pid` on this host as `/proc/PID/stat` shows it ([`collscope_model::job::proc_stat`]): no such file is
/// a process that exited, and so is a process whose start time is not `started`, the one the rank reported (the
/// kernel gave its pid to another process); a file that cannot be read says nothing (`None`).
fn process_seen(pid: u32, started: Option<u64>) -> Option<ProcessSeen> {
    let file = format!("/proc/{pid}/stat");
    let read = std::fs::File::open(&file).and_then(|f| {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_STAT_BYTES as u64), &mut text)?;
        Ok(text)
    });
    match read {
        Ok(text) => {
            let (letter, start) = proc_stat(&text);
            // What the evidence quotes: up to the state and the parent pid.
            let shown: String = text.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
            match (start, started) {
                (Some(now), Some(was)) if now != was => Some(ProcessSeen {
                    state: ProcState::Dead,
                    file,
                    text: format!(
                        "{shown} ... started at tick {now}, not {was} as the rank's did: another process has its pid"
                    ),
                }),
                _ => Some(ProcessSeen { state: ProcState::of_letter(letter), file, text: shown }),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(ProcessSeen { state: ProcState::Dead, file, text: "no such process".into() })
        }
        Err(_) => None,
    }
}

/// Whether `host` (a rank's host name as its endpoint gave it) is this one, so its pids are this host's.
fn is_this_host(host: Option<&str>) -> bool {
    host.is_some_and(|h| h.eq_ignore_ascii_case(&collscope_debug::sys::hostname()))
}

/// Every rank's summary: `ranks` (this process's own), the others' from their `/api/v1/summary` (a rank that
/// does not answer, or whose endpoint is refused, is listed as unreachable with why, and, on this host, with its
/// process's state), then the job-level rules, naming ranks not arrived after `not_arrived_after`. At most
/// [`MAX_JOB_RANKS`] ranks and [`MAX_JOB_FINDINGS`] findings.
pub(crate) async fn view(
    http: &reqwest::Client,
    own: SocketAddr,
    mut ranks: Vec<RankSummary>,
    endpoints: Vec<RankEndpoint>,
    not_arrived_after: Duration,
) -> JobView {
    let others: Vec<_> =
        endpoints.into_iter().filter(|e| !ranks.iter().any(|r| r.rank == e.rank)).take(MAX_JOB_RANKS).collect();
    let deadline = Instant::now() + JOB_DEADLINE;
    let answers: Vec<_> = futures_util::stream::iter(others)
        .map(|endpoint| {
            let http = http.clone();
            async move {
                let answer = summary_of(&http, &endpoint, own, deadline).await;
                (endpoint, answer)
            }
        })
        .buffer_unordered(MAX_PARALLEL)
        .collect()
        .await;
    for (endpoint, answer) in answers {
        match answer {
            Ok(summaries) => ranks.extend(summaries.into_iter().filter(|s| s.rank == endpoint.rank)),
            Err(e) => {
                let mut rank = RankSummary::unreachable(&endpoint, e);
                if is_this_host(Some(&endpoint.host)) {
                    rank.process = endpoint.pid.and_then(|pid| process_seen(pid, endpoint.started));
                }
                ranks.push(rank);
            }
        }
    }
    ranks.sort_by_key(|r| r.rank);
    ranks.dedup_by_key(|r| r.rank);
    ranks.truncate(MAX_JOB_RANKS);
    let not_arrived_after_s = Some(not_arrived_after.as_secs_f64());
    let mut view = JobView { ranks, findings: Vec::new(), not_arrived_after_s, via: None };
    view.findings = collscope_diagnose::diagnose_job(&view);
    view.findings.truncate(MAX_JOB_FINDINGS);
    view
}

/// The job view of a log: its ranks' summaries and the log's own findings (at most [`MAX_JOB_FINDINGS`]).
pub(crate) fn of_log(mut ranks: Vec<RankSummary>, mut findings: Vec<Finding>) -> JobView {
    ranks.truncate(MAX_JOB_RANKS);
    findings.truncate(MAX_JOB_FINDINGS);
    JobView { ranks, findings, not_arrived_after_s: None, via: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_host_port_of_another_server_is_an_endpoint() {
        let own: SocketAddr = "127.0.0.1:9470".parse().unwrap();
        for ok in ["http://127.0.0.1:9471", "http://node-3.cluster:9470", "http://[fe80::1]:80", "http://10.0.0.2:9470"]
        {
            assert_eq!(check_endpoint(ok, own), Ok(()), "{ok}");
        }
        let bad = [
            ("http://127.0.0.1:9470", "own server"),
            ("http://localhost:9470", "own server"),
            ("http://127.0.0.2:9470", "own server"),
            ("http://[::1]:9470", "own server"),
            ("http://127.0.0.1:9470/api/v1/job?", "without a path"),
            ("http://127.0.0.1:9471?x=", "without a path"),
            ("http://user@127.0.0.1:9471", "without a path"),
            ("https://127.0.0.1:9471", "expected http://HOST:PORT"),
            ("http://127.0.0.1", "with a port"),
            ("http://127.0.0.1:0", "port from 1"),
            ("http://bad host:1", "host name"),
            ("http://[zz]:1", "IPv6"),
        ];
        for (url, why) in bad {
            let e = check_endpoint(url, own).unwrap_err();
            assert!(e.contains(&format!("'{url}'")) && e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_process_is_seen_alive_stopped_or_dead_from_proc() {
        let me = process_seen(std::process::id(), None).unwrap();
        assert_eq!((me.state, me.file), (ProcState::Alive, format!("/proc/{}/stat", std::process::id())));
        assert!(me.text.starts_with(&format!("{} (", std::process::id())), "{}", me.text);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(std::process::Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let state = || process_seen(pid, None).map(|p| p.state);
        while state() != Some(ProcState::Stopped) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stopped = process_seen(pid, None).unwrap();
        assert_eq!(stopped.state, ProcState::Stopped, "{}", stopped.text);
        assert!(stopped.text.contains("(sleep) T"), "{}", stopped.text);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(state(), Some(ProcState::Dead));
        assert!(is_this_host(Some(&collscope_debug::sys::hostname())) && !is_this_host(None));
    }

    #[test]
    fn a_pid_that_another_process_took_is_the_ranks_process_dead() {
        let me = std::process::id();
        let started = collscope_debug::sys::process_started(me).expect("this process's start");
        assert_eq!(process_seen(me, Some(started)).map(|p| p.state), Some(ProcState::Alive));
        let reused = process_seen(me, Some(started + 1)).unwrap();
        assert_eq!(reused.state, ProcState::Dead, "{}", reused.text);
        assert!(reused.text.ends_with(&format!("not {} as the rank's did: another process has its pid", started + 1)));
        assert!(reused.text.contains(&format!("started at tick {started}")), "{}", reused.text);
    }
}
