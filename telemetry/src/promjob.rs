//! The job view from Prometheus (issue 54): every rank's state, its communicators' oldest call in flight and last
//! completion, its bus bandwidth and the findings its server raises, read with [`QUERIES`] PromQL instant queries
//! (`/api/v1/query`) over the series Prometheus already scraped from every rank: a few queries however many ranks,
//! where `/api/v1/job` fetches each rank.

use crate::catalogue as cat;
use collscope_model::job::MAX_JOB_FINDINGS;
use collscope_model::{CommProgress, Finding, InFlight, JobVia, JobView, RankState, RankSummary, Severity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

/// The queries one view costs.
pub const QUERIES: usize = 6;
/// How far back a rank's communicator series still names it: a rank whose endpoint stopped answering has no
/// fresh series, and `up` alone does not say which rank it was.
const LOOKBACK: &str = "1h";
/// The most one answer may send: a 16,384-rank job's series are a few MiB.
const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Ranks listed at most.
pub const MAX_FLEET_RANKS: usize = 16_384;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum PromJobError {
    #[error("'{0}': expected the Prometheus server's http://HOST:PORT (and path, if any)")]
    Url(String),
    #[error("Prometheus at {url}: {why}")]
    Http { url: String, why: String },
    #[error("Prometheus refused `{query}`: {why}")]
    Query { query: String, why: String },
}

/// One communicator of a rank, as its gauges say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetComm {
    /// Its name (or id in hex where unnamed): the `comm` label.
    pub comm: String,
    /// Age of its oldest call in flight (seconds; 0: none in flight).
    pub in_flight_age_s: Option<f64>,
    /// When its latest call completed (seconds since the UNIX epoch).
    pub last_completion_s: Option<f64>,
}

/// One rank as Prometheus holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRank {
    pub rank: u32,
    /// Prometheus' `job` and `instance` of the endpoint that serves the rank.
    pub job: String,
    pub instance: String,
    pub host: Option<String>,
    /// Whether Prometheus' latest scrape of the endpoint succeeded (`up`); `None`: Prometheus has no `up` for it.
    pub up: Option<bool>,
    pub comms: Vec<FleetComm>,
    /// Median over the rank's (collective, size, communicator) cells of the latest call's bus bandwidth (GB/s).
    pub busbw_gbps: Option<f64>,
}

impl FleetRank {
    /// `down` (its endpoint does not answer Prometheus), `running` (a call in flight), `idle`, or `unknown`.
    pub fn state(&self) -> &'static str {
        match self.up {
            Some(false) => "down",
            _ if self.comms.iter().any(|c| c.in_flight_age_s.is_some_and(|a| a > 0.0)) => "running",
            Some(true) => "idle",
            None => "unknown",
        }
    }

    /// The oldest call in flight over its communicators: (communicator, age in seconds).
    pub fn oldest(&self) -> Option<(&str, f64)> {
        self.comms
            .iter()
            .filter_map(|c| Some((c.comm.as_str(), c.in_flight_age_s.filter(|a| *a > 0.0)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// A finding an endpoint raises (`collscope_findings`), with the ranks that endpoint serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetFinding {
    pub job: String,
    pub instance: String,
    pub ranks: Vec<u32>,
    pub code: String,
    pub severity: String,
    pub count: u64,
}

/// The whole job (or every job) as Prometheus holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetView {
    pub ranks: Vec<FleetRank>,
    pub findings: Vec<FleetFinding>,
    /// Ranks past [`MAX_FLEET_RANKS`], not listed.
    pub more: usize,
    /// Seconds since the oldest of the latest scrapes of the endpoints, by Prometheus' clock (`None`: no scrape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_age_s: Option<f64>,
}

impl FleetView {
    /// The view as `job status --prometheus` prints it: a line per rank, then the findings.
    pub fn text(&self) -> String {
        let count = |s: &str| self.ranks.iter().filter(|r| r.state() == s).count();
        let mut out = format!(
            "{} ranks: {} running, {} idle, {} down, {} unknown{}\n",
            self.ranks.len(),
            count("running"),
            count("idle"),
            count("down"),
            count("unknown"),
            if self.more > 0 { format!(" ({} more not listed)", self.more) } else { String::new() }
        );
        out.push_str(&format!(
            "{:>6}  {:<12} {:<8} {:<16} {:>10} {:>10}  {}\n",
            "rank", "host", "state", "communicator", "in flight", "busbw GB/s", "job/instance"
        ));
        for r in &self.ranks {
            // The communicator with the oldest call in flight says most; else the first.
            let (comm, age) = match r.oldest() {
                Some((c, age)) => (c, format!("{age:.1}s")),
                None => (r.comms.first().map_or("-", |c| c.comm.as_str()), "-".to_string()),
            };
            out.push_str(&format!(
                "{:>6}  {:<12.12} {:<8} {:<16.16} {:>10} {:>10}  {}/{}\n",
                r.rank,
                r.host.as_deref().unwrap_or("?"),
                r.state(),
                comm,
                age,
                r.busbw_gbps.map_or("-".to_string(), |b| format!("{b:.2}")),
                r.job,
                r.instance,
            ));
        }
        for f in &self.findings {
            let ranks: Vec<String> = f.ranks.iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "{} {} ({}): raised by rank {} at {}/{}\n",
                f.severity,
                f.code,
                f.count,
                if ranks.is_empty() { "?".to_string() } else { ranks.join(",") },
                f.job,
                f.instance
            ));
        }
        out
    }

    /// The view as the model's [`JobView`] (the TUI's rank strip and findings), read through `prometheus`: what
    /// the gauges do not carry (a call's sequence number, collective and size, the latest calls, the ranks'
    /// edges) stays unknown; the findings are those the endpoints raise and the job-level rules' over what is
    /// known (a rank whose endpoint Prometheus cannot scrape).
    pub fn job_view(&self, prometheus: &str) -> JobView {
        let ranks: Vec<RankSummary> = self.ranks.iter().map(FleetRank::summary).collect();
        let mut view = JobView {
            ranks,
            findings: Vec::new(),
            not_arrived_after_s: None,
            via: Some(JobVia { prometheus: prometheus.to_string(), scrape_age_s: self.scrape_age_s }),
        };
        let raised = self.findings.iter().map(FleetFinding::finding);
        view.findings = raised.chain(collscope_diagnose::diagnose_job(&view)).collect();
        view.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
        view.findings.truncate(MAX_JOB_FINDINGS);
        view
    }
}

impl FleetRank {
    fn summary(&self) -> RankSummary {
        let comms = self
            .comms
            .iter()
            .map(|c| CommProgress {
                comm: Some(c.comm.clone()),
                name: None,
                last_completed: None,
                last_completed_us: c.last_completion_s.map(|s| (s * 1e6) as u64),
                // The gauge is 0 with nothing in flight.
                in_flight: c.in_flight_age_s.filter(|a| *a > 0.0).map(|age_s| InFlight {
                    seq: None,
                    coll: None,
                    bytes: None,
                    age_s,
                }),
                recent_starts: Vec::new(),
                recent_calls: Vec::new(),
            })
            .collect();
        let state = match self.state() {
            "down" => RankState::Unreachable,
            "running" => RankState::Running,
            _ => RankState::Idle,
        };
        let endpoint = format!("{}/{}", self.job, self.instance);
        RankSummary {
            rank: self.rank,
            host: self.host.clone(),
            url: Some(format!("http://{}", self.instance)),
            state,
            comms,
            busbw_gbps: self.busbw_gbps,
            p50_us: None,
            p99_us: None,
            error: (state == RankState::Unreachable)
                .then(|| format!("Prometheus' latest scrape of {endpoint} failed (up is 0)")),
            edges: Default::default(),
            pid: None,
            process: None,
            stalls: Vec::new(),
        }
    }
}

impl FleetFinding {
    /// The finding an endpoint raises, as far as its metric says (code, severity, count, the ranks it serves).
    fn finding(&self) -> Finding {
        let ranks: Vec<String> = self.ranks.iter().map(u32::to_string).collect();
        let severity = self.severity.parse().unwrap_or(Severity::Warning);
        Finding {
            code: self.code.clone(),
            severity,
            rank: match self.ranks[..] {
                [one] => Some(one),
                _ => None,
            },
            comm: None,
            title: format!("{} raised by rank {} ({}/{})", self.code, ranks.join(","), self.job, self.instance),
            detail: format!(
                "the endpoint {}/{} (rank {}) raises {} ({}, {} now); Prometheus holds its code, severity and count, \
                 not its detail",
                self.job,
                self.instance,
                ranks.join(","),
                self.code,
                self.severity,
                self.count
            ),
            evidence: Vec::new(),
            fix: format!("Read the finding in full on that rank: collscope tui --connect {}", self.instance),
        }
    }
}

/// A Prometheus server's query API, narrowed to one job when named.
pub struct PromJob {
    query_url: reqwest::Url,
    selector: String,
    http: reqwest::blocking::Client,
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    metric: BTreeMap<String, String>,
    /// (time, value as text).
    value: (f64, String),
}

impl Sample {
    fn label(&self, name: &str) -> &str {
        self.metric.get(name).map_or("", String::as_str)
    }

    fn number(&self) -> Option<f64> {
        self.value.1.parse().ok().filter(|v: &f64| v.is_finite())
    }

    fn endpoint(&self) -> (String, String) {
        (self.label("job").to_string(), self.label("instance").to_string())
    }
}

type RankKey = (String, String, u32);

impl PromJob {
    /// The Prometheus server at `url` (`http://HOST:PORT`, with its path prefix if any); `job`: only that job's
    /// series (else every job's collscope series).
    pub fn new(url: &str, job: Option<&str>) -> Result<Self, PromJobError> {
        let base = reqwest::Url::parse(url).map_err(|_| PromJobError::Url(url.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
            return Err(PromJobError::Url(url.to_string()));
        }
        let query_url = base
            .join(&format!("{}/api/v1/query", base.path().trim_end_matches('/')))
            .map_err(|_| PromJobError::Url(url.to_string()))?;
        let selector = match job {
            // PromQL string literals take Go's escapes; a job name is quoted with its backslashes and quotes escaped.
            Some(j) => format!("job=\"{}\"", j.replace('\\', "\\\\").replace('"', "\\\"")),
            None => "job!=\"\"".to_string(),
        };
        let http = reqwest::blocking::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| PromJobError::Http { url: url.to_string(), why: e.to_string() })?;
        Ok(PromJob { query_url, selector, http })
    }

    /// One instant query's samples.
    fn query(&self, q: &str) -> Result<Vec<Sample>, PromJobError> {
        let mut url = self.query_url.clone();
        url.query_pairs_mut().append_pair("query", q);
        let http_err = |why: String| PromJobError::Http { url: self.query_url.to_string(), why };
        let resp = self.http.get(url).send().map_err(|e| http_err(e.to_string()))?;
        let status = resp.status();
        let mut body = Vec::new();
        resp.take(MAX_ANSWER_BYTES + 1).read_to_end(&mut body).map_err(|e| http_err(e.to_string()))?;
        if body.len() as u64 > MAX_ANSWER_BYTES {
            return Err(http_err(format!("answer over {MAX_ANSWER_BYTES} bytes")));
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| http_err(format!("answered {status} with what is not its query API's JSON: {e}")))?;
        match (answer.status.as_str(), answer.data) {
            ("success", Some(d)) => Ok(d.result),
            _ => Err(PromJobError::Query {
                query: q.to_string(),
                why: answer.error.unwrap_or_else(|| format!("status {status}")),
            }),
        }
    }

    /// Every rank of the job (or jobs) with its state, communicators, bandwidth and findings.
    pub fn view(&self) -> Result<FleetView, PromJobError> {
        let s = &self.selector;
        let name = |m: &cat::Metric| m.prom.unwrap_or_default();
        let mut ranks: BTreeMap<RankKey, FleetRank> = BTreeMap::new();
        // Which ranks each endpoint serves, and on which host.
        let info = self.query(&format!("last_over_time({}{{{s}}}[{LOOKBACK}])", name(&cat::COMMUNICATOR_INFO)))?;
        for x in &info {
            let Ok(rank) = x.label("rank").parse::<u32>() else { continue };
            let (job, instance) = x.endpoint();
            let host = Some(x.label("host").to_string()).filter(|h| !h.is_empty());
            ranks.entry((job.clone(), instance.clone(), rank)).or_insert_with(|| FleetRank {
                rank,
                job,
                instance,
                host,
                up: None,
                comms: Vec::new(),
                busbw_gbps: None,
            });
        }
        let mut up: BTreeMap<(String, String), bool> = BTreeMap::new();
        for x in self.query(&format!("up{{{s}}}"))? {
            up.insert(x.endpoint(), x.number().is_some_and(|v| v > 0.0));
        }
        let ages = self.query(&format!("max(time() - timestamp(up{{{s}}}))"))?;
        let scrape_age_s = ages.first().and_then(Sample::number);
        for r in ranks.values_mut() {
            r.up = up.get(&(r.job.clone(), r.instance.clone())).copied();
        }
        let (age, done) = (name(&cat::IN_FLIGHT_AGE), name(&cat::LAST_COMPLETION));
        for x in self.query(&format!("{{__name__=~\"{age}|{done}\",{s}}}"))? {
            let Some(r) = rank_of(&mut ranks, &x) else { continue };
            let comm = x.label("comm").to_string();
            let c = match r.comms.iter_mut().position(|c| c.comm == comm) {
                Some(i) => &mut r.comms[i],
                None => {
                    r.comms.push(FleetComm { comm, in_flight_age_s: None, last_completion_s: None });
                    r.comms.last_mut().expect("just pushed")
                }
            };
            if x.label("__name__") == age {
                c.in_flight_age_s = x.number();
            } else {
                c.last_completion_s = x.number();
            }
        }
        let bw = self.query(&format!("quantile by (job, instance, rank) (0.5, {}{{{s}}})", name(&cat::BUSBW)))?;
        for x in &bw {
            if let Some(r) = rank_of(&mut ranks, x) {
                r.busbw_gbps = x.number().map(|b| b / 1e9);
            }
        }
        let mut findings = Vec::new();
        for x in self.query(&format!("{}{{{s}}} > 0", name(&cat::FINDINGS)))? {
            let (job, instance) = x.endpoint();
            let served = ranks.keys().filter(|k| k.0 == job && k.1 == instance).map(|k| k.2).collect();
            findings.push(FleetFinding {
                job,
                instance,
                ranks: served,
                code: x.label("code").to_string(),
                severity: x.label("severity").to_string(),
                count: x.number().unwrap_or(0.0) as u64,
            });
        }
        let mut ranks: Vec<FleetRank> = ranks.into_values().collect();
        ranks.sort_by(|a, b| (a.rank, &a.job, &a.instance).cmp(&(b.rank, &b.job, &b.instance)));
        for r in &mut ranks {
            r.comms.sort_by(|a, b| a.comm.cmp(&b.comm));
        }
        let more = ranks.len().saturating_sub(MAX_FLEET_RANKS);
        ranks.truncate(MAX_FLEET_RANKS);
        Ok(FleetView { ranks, findings, more, scrape_age_s })
    }
}

/// The rank a sample with `job`, `instance` and `rank` labels is about, if its endpoint named it.
fn rank_of<'a>(ranks: &'a mut BTreeMap<RankKey, FleetRank>, x: &Sample) -> Option<&'a mut FleetRank> {
    let rank = x.label("rank").parse::<u32>().ok()?;
    let (job, instance) = x.endpoint();
    ranks.get_mut(&(job, instance, rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_is_quoted_and_a_url_without_a_host_is_refused() {
        let p = PromJob::new("http://127.0.0.1:9090/prom/", Some("a\"b")).unwrap();
        assert_eq!(p.query_url.as_str(), "http://127.0.0.1:9090/prom/api/v1/query");
        assert_eq!(p.selector, "job=\"a\\\"b\"");
        assert!(matches!(PromJob::new("file:///etc/passwd", None), Err(PromJobError::Url(_))));
        assert!(matches!(PromJob::new("127.0.0.1:9090", None), Err(PromJobError::Url(_))));
    }

    /// Three ranks of job `j` (rank 1 in a call 3.5 s old, rank 2 down) that completed a call at
    /// `last_completion_s`, rank 1 raising `rank_not_arrived`, scraped `scrape_age_s` ago.
    fn three_ranks(last_completion_s: f64, scrape_age_s: f64) -> FleetView {
        let rank = |rank: u32, age: f64, up: bool| FleetRank {
            rank,
            job: "j".into(),
            instance: format!("h:{rank}"),
            host: Some("node0".into()),
            up: Some(up),
            comms: vec![FleetComm {
                comm: "tp0".into(),
                in_flight_age_s: Some(age),
                last_completion_s: Some(last_completion_s),
            }],
            busbw_gbps: Some(2.0),
        };
        FleetView {
            ranks: vec![rank(0, 0.0, true), rank(1, 3.5, true), rank(2, 0.0, false)],
            findings: vec![FleetFinding {
                job: "j".into(),
                instance: "h:1".into(),
                ranks: vec![1],
                code: "rank_not_arrived".into(),
                severity: "error".into(),
                count: 1,
            }],
            more: 0,
            scrape_age_s: Some(scrape_age_s),
        }
    }

    #[test]
    fn the_text_lists_each_rank_with_its_oldest_call_and_the_findings_with_their_ranks() {
        let view = three_ranks(1.0, 1.5);
        let text = view.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "3 ranks: 1 running, 1 idle, 1 down, 0 unknown");
        assert_eq!(lines[2], "     0  node0        idle     tp0                       -       2.00  j/h:0");
        assert_eq!(lines[3], "     1  node0        running  tp0                    3.5s       2.00  j/h:1");
        assert!(lines[4].contains("down"), "{text}");
        assert_eq!(lines[5], "error rank_not_arrived (1): raised by rank 1 at j/h:1");
    }

    #[test]
    fn a_rank_is_down_running_or_idle() {
        let mut r = FleetRank {
            rank: 3,
            job: "j".into(),
            instance: "h:1".into(),
            host: None,
            up: Some(true),
            comms: vec![FleetComm { comm: "tp0".into(), in_flight_age_s: Some(0.0), last_completion_s: None }],
            busbw_gbps: None,
        };
        assert_eq!((r.state(), r.oldest()), ("idle", None));
        r.comms[0].in_flight_age_s = Some(4.5);
        assert_eq!((r.state(), r.oldest()), ("running", Some(("tp0", 4.5))));
        r.up = Some(false);
        assert_eq!(r.state(), "down");
    }

    #[test]
    fn as_a_job_view_what_prometheus_does_not_hold_is_unknown_and_a_down_rank_is_unreachable() {
        let fleet = three_ranks(2.5, 0.8);
        let view = fleet.job_view("http://prom:9090");
        assert_eq!(view.via, Some(JobVia { prometheus: "http://prom:9090".into(), scrape_age_s: Some(0.8) }));
        let states: Vec<_> = view.ranks.iter().map(|r| (r.rank, r.state)).collect();
        assert_eq!(states, [(0, RankState::Idle), (1, RankState::Running), (2, RankState::Unreachable)]);
        let c = &view.ranks[1].comms[0];
        assert_eq!(c.in_flight, Some(InFlight { seq: None, coll: None, bytes: None, age_s: 3.5 }));
        assert_eq!((c.comm.as_deref(), c.last_completed, c.last_completed_us), (Some("tp0"), None, Some(2_500_000)));
        assert_eq!(view.ranks[0].comms[0].in_flight, None);
        let found: Vec<_> = view.findings.iter().map(|f| (f.code.as_str(), f.severity, f.rank)).collect();
        assert_eq!(
            found,
            [("rank_not_arrived", Severity::Error, Some(1)), ("rank_unreachable", Severity::Warning, Some(2))]
        );
        assert!(view.findings[1].detail.contains("latest scrape of j/h:2 failed"), "{}", view.findings[1].detail);
    }
}
