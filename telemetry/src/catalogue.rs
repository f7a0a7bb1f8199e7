//! The metric catalogue: every metric collscope exports, defined once (names, help, unit, kind, labels) and
//! read by both backends: the Prometheus registry (`prom.rs`) and the OpenTelemetry instruments (`otel.rs`).
//! Prometheus names are in base units with counters ending in `_total`; OpenTelemetry names are dotted with
//! UCUM units, and every label is an attribute under `collscope.`.

use collscope_model::observe::DURATION_BOUNDS_NS;

/// What kind of instrument a metric is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram(Buckets),
    /// A count that rises and falls (a Prometheus gauge, an OpenTelemetry up-down counter).
    UpDownCounter,
}

/// A histogram's bucket bounds, in the metric's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buckets {
    /// The runtime's own call-duration bounds (`observe::DURATION_BOUNDS_NS`), in seconds.
    Durations,
    /// Bounds of this metric alone.
    Fixed(&'static [f64]),
}

impl Buckets {
    /// The upper bounds, rising; the last bucket (above the last bound) is implied.
    pub fn bounds(self) -> Vec<f64> {
        match self {
            Buckets::Durations => DURATION_BOUNDS_NS.iter().map(|ns| *ns as f64 / 1e9).collect(),
            Buckets::Fixed(b) => b.to_vec(),
        }
    }

    /// The bucket `v` falls in: the first bound it does not exceed, else the one above the last.
    pub fn index(self, v: f64) -> usize {
        match self {
            Buckets::Durations => {
                DURATION_BOUNDS_NS.iter().position(|ns| v <= *ns as f64 / 1e9).unwrap_or(DURATION_BOUNDS_NS.len())
            }
            Buckets::Fixed(b) => b.iter().position(|x| v <= *x).unwrap_or(b.len()),
        }
    }

    /// How many buckets, the one above the last bound included.
    pub fn count(self) -> usize {
        match self {
            Buckets::Durations => DURATION_BOUNDS_NS.len() + 1,
            Buckets::Fixed(b) => b.len() + 1,
        }
    }
}

/// One label: its Prometheus name and its OpenTelemetry attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    pub prom: &'static str,
    pub otel: &'static str,
}

/// A label whose attribute is `collscope.<name>`, or one with its own attribute name.
macro_rules! label {
    ($name:literal) => {
        Label { prom: $name, otel: concat!("collscope.", $name) }
    };
    ($name:literal, $attr:literal) => {
        Label { prom: $name, otel: concat!("collscope.", $attr) }
    };
}

/// One metric. A backend that carries the fact another way has no name for it (`None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    pub prom: Option<&'static str>,
    pub otel: Option<&'static str>,
    pub help: &'static str,
    /// UCUM unit (OpenTelemetry); Prometheus names carry theirs.
    pub unit: &'static str,
    pub kind: Kind,
    pub labels: &'static [Label],
}

impl Metric {
    /// The Prometheus label names, in order.
    pub fn prom_labels(&self) -> Vec<&'static str> {
        self.labels.iter().map(|l| l.prom).collect()
    }

    /// Whether its values are whole: it counts things (bytes, `{operation}`s, info-style `1`s); times and rates
    /// are fractions. The store holds and OpenTelemetry sends it as an integer.
    pub fn integral(&self) -> bool {
        matches!(self.unit, "By" | "1") || self.unit.starts_with('{')
    }
}

/// `comm_name`: the communicator's name (NCCL's `commName`, the runtime's), bounded by `labels::CommNames`.
const COLL: &[Label] = &[
    label!("collective"),
    label!("algorithm"),
    label!("protocol"),
    label!("size_bucket"),
    label!("rank"),
    label!("comm_name", "comm.name"),
];
const BANDWIDTH: &[Label] =
    &[label!("collective"), label!("size_bucket"), label!("rank"), label!("comm_name", "comm.name")];
const CHANNEL: &[Label] =
    &[label!("rank"), label!("channel"), label!("peer"), label!("direction"), label!("transport")];

pub const COLL_DURATION: Metric = Metric {
    prom: Some("collscope_collective_duration_seconds"),
    otel: Some("collscope.collective.duration"),
    help: "Time from start to completion of collective and point-to-point calls.",
    unit: "s",
    kind: Kind::Histogram(Buckets::Durations),
    labels: COLL,
};
pub const COLL_BYTES: Metric = Metric {
    prom: Some("collscope_collective_bytes_total"),
    otel: Some("collscope.collective.io"),
    help: "Bytes of the user buffer moved by calls (count times datatype size).",
    unit: "By",
    kind: Kind::Counter,
    labels: COLL,
};
pub const COLL_OPS: Metric = Metric {
    prom: Some("collscope_collective_operations_total"),
    otel: Some("collscope.collective.operations"),
    help: "Calls completed or reported.",
    unit: "{operation}",
    kind: Kind::Counter,
    labels: COLL,
};
pub const COLL_FAILED: Metric = Metric {
    prom: Some("collscope_collective_failures_total"),
    otel: Some("collscope.collective.failures"),
    help: "Calls that failed.",
    unit: "{operation}",
    kind: Kind::Counter,
    labels: &[label!("collective"), label!("rank")],
};
pub const BUSBW: Metric = Metric {
    prom: Some("collscope_collective_bus_bandwidth_bytes_per_second"),
    otel: Some("collscope.collective.bus_bandwidth"),
    help: "Bus bandwidth of the latest call (nccl-tests' busbw), by collective and size bucket.",
    unit: "By/s",
    kind: Kind::Gauge,
    labels: BANDWIDTH,
};
pub const ALGBW: Metric = Metric {
    prom: Some("collscope_collective_algorithm_bandwidth_bytes_per_second"),
    otel: Some("collscope.collective.algorithm_bandwidth"),
    help: "Algorithm bandwidth (bytes over time) of the latest call, by collective and size bucket.",
    unit: "By/s",
    kind: Kind::Gauge,
    labels: BANDWIDTH,
};
pub const IN_FLIGHT: Metric = Metric {
    prom: Some("collscope_collectives_in_flight"),
    otel: Some("collscope.collective.in_flight"),
    help: "Calls enqueued and not yet completed.",
    unit: "{operation}",
    kind: Kind::UpDownCounter,
    labels: &[label!("rank")],
};
/// Zero while nothing is in flight, so a rank that has not arrived shows beside the ranks that wait for it.
pub const IN_FLIGHT_AGE: Metric = Metric {
    prom: Some("collscope_collective_in_flight_oldest_age_seconds"),
    otel: Some("collscope.collective.in_flight.oldest_age"),
    help: "Age of the oldest call begun and not completed, per rank and communicator (0: none in flight).",
    unit: "s",
    kind: Kind::Gauge,
    labels: &[label!("rank"), label!("comm")],
};
pub const LAST_COMPLETION: Metric = Metric {
    prom: Some("collscope_collective_last_completion_timestamp_seconds"),
    otel: Some("collscope.collective.last_completion"),
    help: "When the latest call completed, per rank and communicator (seconds since the UNIX epoch).",
    unit: "s",
    kind: Kind::Gauge,
    labels: &[label!("rank"), label!("comm")],
};
/// A call that completed after `model::job::STALL_AFTER_S` or more, counted once when it completes.
pub const STALLS: Metric = Metric {
    prom: Some("collscope_collective_stalls_total"),
    otel: Some("collscope.collective.stalls"),
    help: "Calls that waited 3 s or more and then completed (hangs that recovered), per rank and communicator.",
    unit: "{operation}",
    kind: Kind::Counter,
    labels: &[label!("rank"), label!("comm")],
};
pub const STALL_SECONDS: Metric = Metric {
    prom: Some("collscope_collective_stall_seconds"),
    otel: Some("collscope.collective.stall.duration"),
    help: "How long each stalled call took, from 3 s (a stall) to the 10 minutes of PyTorch's watchdog and beyond.",
    unit: "s",
    // From the stall threshold to past PyTorch's 10 minute timeout.
    kind: Kind::Histogram(Buckets::Fixed(&[3.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0])),
    labels: &[label!("rank")],
};
pub const CHANNEL_BYTES: Metric = Metric {
    prom: Some("collscope_channel_bytes_total"),
    otel: Some("collscope.channel.io"),
    help: "Bytes moved on one channel to or from one peer.",
    unit: "By",
    kind: Kind::Counter,
    labels: CHANNEL,
};
pub const CHANNEL_IN_PLACE_BYTES: Metric = Metric {
    prom: Some("collscope_channel_in_place_bytes_total"),
    otel: Some("collscope.channel.io.in_place"),
    help: "Of those bytes, the ones no connection buffer carried: read in the sender's buffer or written into the \
           receiver's (threads' P2P, registered SHM windows, NET from or into user memory).",
    unit: "By",
    kind: Kind::Counter,
    labels: CHANNEL,
};
pub const CHANNEL_SECONDS: Metric = Metric {
    prom: Some("collscope_channel_transfer_seconds_total"),
    otel: Some("collscope.channel.transfer.time"),
    help: "Time spent moving those bytes.",
    unit: "s",
    kind: Kind::Counter,
    labels: CHANNEL,
};
pub const PROXY_WAIT: Metric = Metric {
    prom: Some("collscope_proxy_wait_seconds_total"),
    otel: Some("collscope.proxy.wait.time"),
    help: "Time proxy steps spent in each wait state.",
    unit: "s",
    kind: Kind::Counter,
    labels: &[label!("rank"), label!("direction"), label!("state", "proxy.state")],
};
pub const PROXY_STEPS: Metric = Metric {
    prom: Some("collscope_proxy_steps_total"),
    otel: Some("collscope.proxy.steps"),
    help: "Proxy steps that reached each stage (posted, transmitted, done).",
    unit: "{step}",
    kind: Kind::Counter,
    labels: &[label!("rank"), label!("direction"), label!("stage", "proxy.stage")],
};
pub const PROXY_OPS: Metric = Metric {
    prom: Some("collscope_proxy_operations_total"),
    otel: Some("collscope.proxy.operations"),
    help: "Proxy sub-operations finished, per channel and peer.",
    unit: "{operation}",
    kind: Kind::Counter,
    labels: &[label!("rank"), label!("channel"), label!("peer"), label!("direction")],
};
pub const CONNECTIONS: Metric = Metric {
    prom: Some("collscope_connection_channels"),
    otel: Some("collscope.connection.channels"),
    help: "Channels connecting a rank to a peer, by direction, transport, mode and GPUDirect RDMA state.",
    unit: "{channel}",
    kind: Kind::Gauge,
    labels: &[
        label!("rank"),
        label!("peer"),
        label!("direction"),
        label!("transport"),
        label!("mode", "connection.mode"),
        label!("gdrdma"),
    ],
};
/// Prometheus' info-style gauge; OpenTelemetry carries the size as a value ([`COMMUNICATOR_SIZE`]).
pub const COMMUNICATOR_INFO: Metric = Metric {
    prom: Some("collscope_communicator_info"),
    otel: None,
    help: "One per rank of each communicator, with its size and NCCL version.",
    unit: "1",
    kind: Kind::Gauge,
    labels: &[
        label!("comm"),
        label!("rank"),
        label!("nranks"),
        label!("nnodes"),
        label!("version", "nccl.version"),
        label!("host"),
    ],
};
pub const COMMUNICATOR_SIZE: Metric = Metric {
    prom: None,
    otel: Some("collscope.communicator.size"),
    help: "Ranks in each communicator, as each of its ranks reports it.",
    unit: "{rank}",
    kind: Kind::Gauge,
    labels: &[label!("comm"), label!("rank"), label!("nnodes"), label!("version", "nccl.version")],
};
/// Prometheus only: OpenTelemetry puts what the data describes in the resource.
pub const JOB_INFO: Metric = Metric {
    prom: Some("collscope_job_info"),
    otel: None,
    help: "What this data describes: its source, NCCL version and network.",
    unit: "1",
    kind: Kind::Gauge,
    labels: &[label!("source"), label!("nccl_version"), label!("network"), label!("nranks"), label!("nnodes")],
};
pub const CHANNELS: Metric = Metric {
    prom: Some("collscope_channels"),
    otel: Some("collscope.channels"),
    help: "Channels set up, by kind.",
    unit: "{channel}",
    kind: Kind::Gauge,
    labels: &[label!("kind", "channel.kind")],
};
pub const INIT_PHASE: Metric = Metric {
    prom: Some("collscope_init_phase_seconds"),
    otel: Some("collscope.init.phase.duration"),
    help: "Communicator init time by phase (NCCL's Init timings line).",
    unit: "s",
    kind: Kind::Gauge,
    labels: &[label!("rank"), label!("phase", "init.phase")],
};
pub const INIT_TOTAL: Metric = Metric {
    prom: Some("collscope_init_seconds"),
    otel: Some("collscope.init.duration"),
    help: "Total communicator init time.",
    unit: "s",
    kind: Kind::Gauge,
    labels: &[label!("rank")],
};
pub const DECISIONS: Metric = Metric {
    prom: Some("collscope_tuning_decisions_total"),
    otel: Some("collscope.tuning.decisions"),
    help: "Algorithm and protocol choices made by the tuner.",
    unit: "{decision}",
    kind: Kind::Counter,
    labels: &[label!("collective"), label!("algorithm"), label!("protocol"), label!("rank")],
};
pub const ERRORS: Metric = Metric {
    prom: Some("collscope_errors_total"),
    otel: Some("collscope.errors"),
    help: "Warnings and errors, by class.",
    unit: "{error}",
    kind: Kind::Counter,
    labels: &[label!("class", "error.class"), label!("rank")],
};
pub const FINDINGS: Metric = Metric {
    prom: Some("collscope_findings"),
    otel: Some("collscope.findings"),
    help: "Diagnoses currently raised, by code and severity.",
    unit: "{finding}",
    kind: Kind::Gauge,
    labels: &[label!("code", "finding.code"), label!("severity", "finding.severity")],
};
pub const DROPPED: Metric = Metric {
    prom: Some("collscope_dropped_records_total"),
    otel: Some("collscope.telemetry.dropped"),
    help: "Telemetry records dropped to bound memory: 'queue' when the runtime's queue was full, 'history' when \
           the oldest kept record made room.",
    unit: "{record}",
    kind: Kind::Counter,
    labels: &[label!("stage", "telemetry.stage")],
};

pub const KERNEL_CHANNEL_SECONDS: Metric = Metric {
    prom: Some("collscope_kernel_channel_seconds_total"),
    otel: Some("collscope.kernel.channel.time"),
    help: "GPU time of each channel's share of the calls (NCCL's profiler KernelCh events, on the GPU's clock).",
    unit: "s",
    kind: Kind::Counter,
    labels: &[label!("rank"), label!("channel")],
};
pub const PROFILER_LOST: Metric = Metric {
    prom: Some("collscope_profiler_events_lost_total"),
    otel: Some("collscope.profiler.events.lost"),
    help: "NCCL profiler events the plugin could not keep or place: no free event object (no_free_event), a \
           full ring (ring_full), a child of an unknown or finished call (orphan), a call the model cannot name \
           (unsupported), a handle used after its end (misused).",
    unit: "{event}",
    kind: Kind::Counter,
    labels: &[label!("reason", "profiler.reason")],
};
pub const PROFILER_DISABLED: Metric = Metric {
    prom: Some("collscope_profiler_disabled"),
    otel: Some("collscope.profiler.disabled"),
    help: "1 once an internal error disabled the NCCL profiler plugin (NCCL carries on without it).",
    unit: "1",
    kind: Kind::Gauge,
    labels: &[],
};
pub const PROXY_THREAD_SECONDS: Metric = Metric {
    prom: Some("collscope_proxy_thread_seconds_total"),
    otel: Some("collscope.proxy.thread.time"),
    help: "Time NCCL's proxy thread spent asleep, polling idle, progressing operations and appending new ones \
           (NCCL's profiler ProxyCtrl events).",
    unit: "s",
    kind: Kind::Counter,
    labels: &[label!("state", "proxy.thread_state")],
};
pub const PROXY_APPENDED: Metric = Metric {
    prom: Some("collscope_proxy_appended_operations_total"),
    otel: Some("collscope.proxy.appended"),
    help: "Proxy operations NCCL's proxy thread took from its queue (NCCL's profiler ProxyCtrl events).",
    unit: "{operation}",
    kind: Kind::Counter,
    labels: &[],
};

/// The metrics only a running process gives (NCCL's profiler plugin's own counters, the GPU's clock): a server
/// of a log exports none of them, rather than zeros it never read.
pub const PROCESS_ONLY: &[Metric] =
    &[KERNEL_CHANNEL_SECONDS, PROFILER_LOST, PROFILER_DISABLED, PROXY_THREAD_SECONDS, PROXY_APPENDED];

/// Every metric, in the order the backends define them.
pub const ALL: &[Metric] = &[
    COLL_DURATION,
    COLL_BYTES,
    COLL_OPS,
    COLL_FAILED,
    BUSBW,
    ALGBW,
    IN_FLIGHT,
    IN_FLIGHT_AGE,
    LAST_COMPLETION,
    STALLS,
    STALL_SECONDS,
    CHANNEL_BYTES,
    CHANNEL_IN_PLACE_BYTES,
    CHANNEL_SECONDS,
    PROXY_WAIT,
    PROXY_STEPS,
    PROXY_OPS,
    CONNECTIONS,
    COMMUNICATOR_INFO,
    COMMUNICATOR_SIZE,
    JOB_INFO,
    CHANNELS,
    INIT_PHASE,
    INIT_TOTAL,
    DECISIONS,
    ERRORS,
    FINDINGS,
    DROPPED,
    KERNEL_CHANNEL_SECONDS,
    PROFILER_LOST,
    PROFILER_DISABLED,
    PROXY_THREAD_SECONDS,
    PROXY_APPENDED,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_duration_bounds_rise_from_a_microsecond() {
        let b = Buckets::Durations.bounds();
        assert_eq!(b[0], 1e-6);
        assert!(b.windows(2).all(|w| w[1] > w[0]));
        assert!(*b.last().unwrap() > 1.0);
        assert_eq!(Buckets::Durations.count(), b.len() + 1);
        assert_eq!(Buckets::Durations.index(b[1]), 1, "a bound is inside its bucket");
    }

    #[test]
    fn every_metric_a_dashboard_or_an_alert_queries_is_in_the_catalogue() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
        let mut queried = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // Dashboards (json) and alerting rules with their tests (yml).
            if path.extension().is_none_or(|e| e != "json" && e != "yml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("collscope_") {
                let name: String = text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                // A histogram's series carry suffixes its family name does not.
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| ALL.iter().any(|m| m.prom == Some(*f))))
                    .unwrap_or(&name);
                assert!(
                    ALL.iter().any(|m| m.prom == Some(family)),
                    "{}: {name} is not in the catalogue",
                    path.display()
                );
                queried += 1;
            }
        }
        assert!(queried > 0, "no dashboard in {} queries a collscope metric", dir.display());
    }

    /// Issue 54: a fleet's dashboard picks the job, the host and the communicator, and a panel filters a metric
    /// only by labels the catalogue gives it.
    #[test]
    fn dashboards_pick_job_host_and_communicator_by_labels_their_metrics_carry() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
        let text = std::fs::read_to_string(dir.join("collscope-overview.json")).unwrap();
        let board: serde_json::Value = serde_json::from_str(&text).unwrap();
        let vars: Vec<&str> =
            board["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
        for want in ["job", "host", "comm"] {
            assert!(vars.contains(&want), "no {want} variable: {vars:?}");
        }
        let mut filtered = 0;
        for (at, _) in text.match_indices("=~\\\"$") {
            let selector = &text[..at];
            let open = selector.rfind('{').unwrap();
            let label = selector.rsplit([',', '{', ' ']).next().unwrap();
            let name: String = selector[..open]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
                .chars()
                .rev()
                .collect();
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
            let m = ALL.iter().find(|m| m.prom == Some(family) || m.prom == Some(name.as_str()));
            let Some(m) = m else { panic!("{name} is not in the catalogue") };
            // job and instance are Prometheus' own target labels.
            if !["job", "instance"].contains(&label) {
                assert!(m.prom_labels().contains(&label), "{name} has no {label} label");
                filtered += usize::from(label == "comm_name");
            }
        }
        assert!(filtered > 0, "no panel filters by communicator");
    }

    #[test]
    fn names_and_attributes_are_unique() {
        let mut names: Vec<_> = ALL.iter().flat_map(|m| [m.prom, m.otel]).flatten().collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a metric name is defined twice");
        for m in ALL {
            assert!(m.prom.is_some() || m.otel.is_some(), "{m:?} is exported by no backend");
            assert!(m.labels.iter().all(|l| l.otel.starts_with("collscope.")), "{m:?}");
        }
    }
}
