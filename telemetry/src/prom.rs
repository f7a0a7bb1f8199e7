//! The Prometheus export: `collscope_*` families in base units (seconds, bytes, bytes per second), counters
//! ending in `_total`, info-style gauges for facts, all in one registry per telemetry state.

use crate::catalogue::{self as cat, Metric};
use crate::labels::{self, CollLabels};
use crate::sink::{self, Calls, MetricSink};
use collscope_model::{
    Algorithm, ChannelTraffic, Collective, Direction, KernelChannel, ProfilerCounters, Protocol, ProxyOp, ProxyWait,
    RankSummary, Snapshot, Transport, Warning,
};
use prometheus::{
    Counter, CounterVec, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use rustc_hash::FxHashMap;

/// The series one kind of call updates, looked up once: label formatting and hashing label strings cost more
/// than the update itself, and the telemetry thread shares the machine with the ranks.
struct CollSeries {
    ops: IntCounter,
    bytes: IntCounter,
    duration: Histogram,
    busbw: Gauge,
    algbw: Gauge,
}

type CollKey = (Collective, Option<Algorithm>, Option<Protocol>, &'static str, u32, std::sync::Arc<str>);

/// The series one (rank, channel, peer, direction, transport) updates, looked up once as [`CollSeries`] are.
struct TrafficSeries {
    bytes: IntCounter,
    in_place: IntCounter,
    seconds: Counter,
}

type TrafficKey = (u32, u32, u32, Direction, Option<Transport>);
type DecisionKey = (Collective, Algorithm, Protocol, Option<u32>);
/// (rank, send) of a proxy's steps; with a wait state, of its wait seconds; with (channel, peer), of its
/// finished operations.
type ProxyKey = (u32, bool);
type ProxyOpKey = (u32, u32, u32, bool);

pub struct PromMetrics {
    registry: Registry,
    coll_series: FxHashMap<CollKey, CollSeries>,
    traffic_series: FxHashMap<TrafficKey, TrafficSeries>,
    decision_series: FxHashMap<DecisionKey, IntCounter>,
    in_flight_series: FxHashMap<u32, IntGauge>,
    proxy_wait_series: FxHashMap<(ProxyKey, ProxyWait), Counter>,
    proxy_step_series: FxHashMap<ProxyKey, [IntCounter; 3]>,
    proxy_op_series: FxHashMap<ProxyOpKey, IntCounter>,
    coll_duration: HistogramVec,
    coll_bytes: IntCounterVec,
    coll_ops: IntCounterVec,
    coll_failed: IntCounterVec,
    busbw: GaugeVec,
    algbw: GaugeVec,
    in_flight: IntGaugeVec,
    in_flight_age: GaugeVec,
    last_completion: GaugeVec,
    channel_bytes: IntCounterVec,
    channel_in_place: IntCounterVec,
    channel_seconds: CounterVec,
    proxy_wait: CounterVec,
    proxy_steps: IntCounterVec,
    proxy_ops: IntCounterVec,
    connections: IntGaugeVec,
    communicator: IntGaugeVec,
    job: IntGaugeVec,
    channels: IntGaugeVec,
    init_phase: GaugeVec,
    init_total: GaugeVec,
    decisions: IntCounterVec,
    errors: IntCounterVec,
    findings: IntGaugeVec,
    dropped: IntCounterVec,
    kernel_channel: CounterVec,
    profiler_lost: IntCounterVec,
    profiler_disabled: IntGauge,
    proxy_thread: CounterVec,
    proxy_appended: IntCounter,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> Result<T, prometheus::Error> {
    r.register(Box::new(m.clone()))?;
    Ok(m)
}

/// The catalogue's name and help of a metric Prometheus exports.
fn opts(m: &Metric) -> Opts {
    Opts::new(m.prom.expect("a metric Prometheus exports"), m.help)
}

impl PromMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let r = Registry::new();
        let int_counter = |m: &Metric| reg(&r, IntCounterVec::new(opts(m), &m.prom_labels())?);
        let counter = |m: &Metric| reg(&r, CounterVec::new(opts(m), &m.prom_labels())?);
        let gauge = |m: &Metric| reg(&r, GaugeVec::new(opts(m), &m.prom_labels())?);
        let int_gauge = |m: &Metric| reg(&r, IntGaugeVec::new(opts(m), &m.prom_labels())?);
        let duration = &cat::COLL_DURATION;
        let m = PromMetrics {
            coll_series: FxHashMap::default(),
            traffic_series: FxHashMap::default(),
            decision_series: FxHashMap::default(),
            in_flight_series: FxHashMap::default(),
            proxy_wait_series: FxHashMap::default(),
            proxy_step_series: FxHashMap::default(),
            proxy_op_series: FxHashMap::default(),
            coll_duration: reg(
                &r,
                HistogramVec::new(
                    HistogramOpts::from(opts(duration)).buckets(labels::duration_bounds()),
                    &duration.prom_labels(),
                )?,
            )?,
            coll_bytes: int_counter(&cat::COLL_BYTES)?,
            coll_ops: int_counter(&cat::COLL_OPS)?,
            coll_failed: int_counter(&cat::COLL_FAILED)?,
            busbw: gauge(&cat::BUSBW)?,
            algbw: gauge(&cat::ALGBW)?,
            in_flight: int_gauge(&cat::IN_FLIGHT)?,
            in_flight_age: gauge(&cat::IN_FLIGHT_AGE)?,
            last_completion: gauge(&cat::LAST_COMPLETION)?,
            channel_bytes: int_counter(&cat::CHANNEL_BYTES)?,
            channel_in_place: int_counter(&cat::CHANNEL_IN_PLACE_BYTES)?,
            channel_seconds: counter(&cat::CHANNEL_SECONDS)?,
            proxy_wait: counter(&cat::PROXY_WAIT)?,
            proxy_steps: int_counter(&cat::PROXY_STEPS)?,
            proxy_ops: int_counter(&cat::PROXY_OPS)?,
            connections: int_gauge(&cat::CONNECTIONS)?,
            communicator: int_gauge(&cat::COMMUNICATOR_INFO)?,
            job: int_gauge(&cat::JOB_INFO)?,
            channels: int_gauge(&cat::CHANNELS)?,
            init_phase: gauge(&cat::INIT_PHASE)?,
            init_total: gauge(&cat::INIT_TOTAL)?,
            decisions: int_counter(&cat::DECISIONS)?,
            errors: int_counter(&cat::ERRORS)?,
            findings: int_gauge(&cat::FINDINGS)?,
            dropped: int_counter(&cat::DROPPED)?,
            kernel_channel: counter(&cat::KERNEL_CHANNEL_SECONDS)?,
            profiler_lost: int_counter(&cat::PROFILER_LOST)?,
            profiler_disabled: reg(&r, IntGauge::with_opts(opts(&cat::PROFILER_DISABLED))?)?,
            proxy_thread: counter(&cat::PROXY_THREAD_SECONDS)?,
            proxy_appended: reg(&r, IntCounter::with_opts(opts(&cat::PROXY_APPENDED))?)?,
            registry: r,
        };
        // Both stages exist from the start, so a rate of drops reads 0 rather than nothing.
        for stage in ["queue", "history"] {
            m.dropped.with_label_values(&[stage]).inc_by(0);
        }
        Ok(m)
    }

    /// The exposition in Prometheus text format 0.0.4.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

impl MetricSink for PromMetrics {
    fn calls(&mut self, c: &Calls) {
        if c.failed > 0 {
            self.coll_failed.with_label_values(&[c.coll.as_str(), &c.rank.to_string()]).inc_by(c.failed);
        }
        if c.ok == 0 {
            return;
        }
        let key = (c.coll, c.algo, c.proto, c.size_bucket, c.rank, c.comm_name.clone());
        let s = self.coll_series.entry(key).or_insert_with(|| {
            let l = CollLabels::new(c.coll, c.algo, c.proto, c.size_bucket, c.rank);
            let values = [l.collective, l.algorithm, l.protocol, l.size_bucket, l.rank.as_str(), &c.comm_name];
            let bw_labels = [l.collective, l.size_bucket, l.rank.as_str(), &c.comm_name];
            CollSeries {
                ops: self.coll_ops.with_label_values(&values),
                bytes: self.coll_bytes.with_label_values(&values),
                duration: self.coll_duration.with_label_values(&values),
                busbw: self.busbw.with_label_values(&bw_labels),
                algbw: self.algbw.with_label_values(&bw_labels),
            }
        });
        s.ops.inc_by(c.ok);
        s.bytes.inc_by(c.bytes);
        for &(n, secs) in &c.durations {
            let mean = secs / n as f64;
            (0..n).for_each(|_| s.duration.observe(mean));
        }
        if let Some(bw) = c.busbw_gbps {
            s.busbw.set(bw * 1e9);
        }
        if let Some(bw) = c.algbw_gbps {
            s.algbw.set(bw * 1e9);
        }
    }

    fn in_flight(&mut self, rank: u32, delta: i64) {
        let g =
            self.in_flight_series.entry(rank).or_insert_with(|| self.in_flight.with_label_values(&[rank.to_string()]));
        g.add(delta);
    }

    fn decided(&mut self, coll: Collective, algo: Algorithm, proto: Protocol, rank: Option<u32>, n: u64) {
        let c = self.decision_series.entry((coll, algo, proto, rank)).or_insert_with(|| {
            let rank = sink::rank_label(rank);
            self.decisions.with_label_values(&[coll.as_str(), algo.as_str(), proto.as_str(), &rank])
        });
        c.inc_by(n);
    }

    fn traffic(&mut self, t: &ChannelTraffic) {
        let key = (t.rank, t.channel, t.peer, t.direction, t.transport);
        let series = self.traffic_series.entry(key).or_insert_with(|| {
            let v = [t.rank.to_string(), t.channel.to_string(), t.peer.to_string()];
            let values = [&v[0], &v[1], &v[2], labels::direction(t.direction), labels::transport(t.transport)];
            TrafficSeries {
                bytes: self.channel_bytes.with_label_values(&values),
                in_place: self.channel_in_place.with_label_values(&values),
                seconds: self.channel_seconds.with_label_values(&values),
            }
        });
        series.bytes.inc_by(t.bytes);
        if let Some(n) = t.in_place_bytes {
            series.in_place.inc_by(n);
        }
        if t.seconds > 0.0 {
            series.seconds.inc_by(t.seconds);
        }
    }

    /// Proxy reports come often (collscope's runtime reports every operation; the plugin a tally of each
    /// connection every drain), so their series are looked up once, as the calls' are.
    fn proxy(&mut self, p: &ProxyOp, finished: u64) {
        let key = (p.rank, p.send);
        let dir = labels::send_or_recv(p.send);
        for &(state, secs) in &p.waits {
            if secs > 0.0 {
                let c = self.proxy_wait_series.entry((key, state)).or_insert_with(|| {
                    self.proxy_wait.with_label_values(&[&p.rank.to_string(), dir, labels::wait_state(state)])
                });
                c.inc_by(secs);
            }
        }
        let steps = self.proxy_step_series.entry(key).or_insert_with(|| {
            let rank = p.rank.to_string();
            ["posted", "transmitted", "done"].map(|stage| self.proxy_steps.with_label_values(&[&rank, dir, stage]))
        });
        for (c, n) in steps.iter().zip([p.posted, p.transmitted, p.done]) {
            c.inc_by(n);
        }
        if finished > 0 {
            let c = self.proxy_op_series.entry((p.rank, p.channel, p.peer, p.send)).or_insert_with(|| {
                let (rank, channel, peer) = (p.rank.to_string(), p.channel.to_string(), p.peer.to_string());
                self.proxy_ops.with_label_values(&[&rank, &channel, &peer, dir])
            });
            c.inc_by(finished);
        }
    }

    fn error(&mut self, w: &Warning) {
        self.errors.with_label_values(&[w.class.clone(), sink::rank_label(w.rank)]).inc();
    }

    fn dropped(&mut self, stage: &'static str, n: u64) {
        self.dropped.with_label_values(&[stage]).inc_by(n);
    }

    fn kernel_channel(&mut self, k: &KernelChannel) {
        if k.gpu_seconds > 0.0 {
            self.kernel_channel.with_label_values(&[k.rank.to_string(), k.channel.to_string()]).inc_by(k.gpu_seconds);
        }
    }

    fn profiler(&mut self, c: &ProfilerCounters) {
        for (reason, n) in sink::lost_events(c) {
            self.profiler_lost.with_label_values(&[reason]).inc_by(n);
        }
        self.profiler_disabled.set(i64::from(c.disabled));
        for (state, secs) in sink::proxy_thread(c) {
            if secs > 0.0 {
                self.proxy_thread.with_label_values(&[state]).inc_by(secs);
            }
        }
        self.proxy_appended.inc_by(c.proxy_appended_ops);
    }

    fn progress(&mut self, ranks: &[RankSummary]) {
        self.in_flight_age.reset();
        self.last_completion.reset();
        for r in ranks {
            let rank = r.rank.to_string();
            for c in &r.comms {
                let values = [rank.as_str(), sink::comm_label(c)];
                self.in_flight_age.with_label_values(&values).set(c.in_flight.as_ref().map_or(0.0, |f| f.age_s));
                if let Some(us) = c.last_completed_us {
                    self.last_completion.with_label_values(&values).set(us as f64 / 1e6);
                }
            }
        }
    }

    fn facts(&mut self, snap: &Snapshot) {
        self.connections.reset();
        for (k, n) in sink::connection_groups(snap) {
            let values = [&k.rank.to_string(), &k.peer.to_string(), k.direction, k.transport, &k.mode, k.gdrdma];
            self.connections.with_label_values(&values).set(n as i64);
        }
        self.communicator.reset();
        self.init_phase.reset();
        self.init_total.reset();
        for c in &snap.communicators {
            let rank = sink::rank_label(c.rank);
            let values = [
                sink::opt_label(c.comm.as_ref()),
                rank.clone(),
                sink::opt_label(c.nranks),
                sink::opt_label(c.nnodes.or(snap.nnodes)),
                sink::opt_label(c.version.as_ref().or(snap.nccl_version.as_ref())),
                sink::opt_label(c.host.as_ref()),
            ];
            self.communicator.with_label_values(&values).set(1);
            for (phase, secs) in &c.init.phases {
                self.init_phase.with_label_values(&[rank.as_str(), phase.as_str()]).set(*secs);
            }
            if let Some(total) = c.init.total {
                self.init_total.with_label_values(&[rank.as_str()]).set(total);
            }
        }
        self.job.reset();
        let job = [
            labels::source(&snap.source).to_string(),
            sink::opt_label(snap.nccl_version.as_ref()),
            sink::opt_label(snap.network.as_ref()),
            sink::opt_label(snap.nranks),
            sink::opt_label(snap.nnodes),
        ];
        self.job.with_label_values(&job).set(1);
        self.channels.reset();
        let ch = &snap.channels;
        for (kind, n) in [("coll", ch.coll), ("collnet", ch.collnet), ("nvls", ch.nvls), ("p2p", ch.p2p)] {
            if let Some(n) = n {
                self.channels.with_label_values(&[kind]).set(i64::from(n));
            }
        }
        self.findings.reset();
        for f in &snap.findings {
            self.findings.with_label_values(&[f.code.as_str(), f.severity.as_str()]).inc();
        }
    }
}
