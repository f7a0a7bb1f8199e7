//! The OpenTelemetry export: the same metrics under OTel names with UCUM units, and one span per call with
//! its proxy sub-operations as span events, sent over OTLP/HTTP (binary protobuf) to
//! `OTEL_EXPORTER_OTLP_ENDPOINT`.
//!
//! Build and shut down an `Otel` outside any tokio runtime: the OTLP client is a blocking one that runs
//! on the SDK's own export threads. Recording only hands data to the SDK and never blocks.

use crate::catalogue::{self as cat, Metric};
use crate::labels::{self, CollLabels};
use crate::sink::{self, Calls, MetricSink};
use collscope_model::{
    self as model, Algorithm, ChannelTraffic, Collective, KernelChannel, OpRecord, OpState, ProfilerCounters, ProxyOp,
    RankSummary, Snapshot, Warning,
};
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where to send and how to describe this process.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// Base URL (`http://host:4318`); `/v1/traces` and `/v1/metrics` are appended, as the OTLP spec says for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    pub service_name: String,
    pub host: String,
    pub rank: Option<u32>,
    /// `SLURM_JOB_ID` when the job runs under Slurm.
    pub job_id: Option<String>,
    /// How often metrics are pushed.
    pub export_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP exporter for '{endpoint}': {reason}")]
pub struct OtelError {
    pub endpoint: String,
    pub reason: String,
}

/// (rank, seq): proxy operations name no communicator, so a span is found by rank and sequence number.
type SpanKey = (u32, u64);

pub struct Otel {
    meters: SdkMeterProvider,
    tracers: SdkTracerProvider,
    tracer: SdkTracer,
    m: Instruments,
    /// Spans of finished calls, kept open for one more drain so that proxy events reported just after the
    /// call still attach; value: (span, end time, generation created).
    pending: HashMap<SpanKey, (Span, SystemTime, u64)>,
    /// Proxy operations that arrived before their call's span; value: (generation, ops).
    early_proxy: HashMap<SpanKey, (u64, Vec<ProxyOp>)>,
    generation: u64,
}

struct Instruments {
    coll_duration: Histogram<f64>,
    coll_io: Counter<u64>,
    coll_ops: Counter<u64>,
    coll_failed: Counter<u64>,
    busbw: Gauge<f64>,
    algbw: Gauge<f64>,
    in_flight: UpDownCounter<i64>,
    in_flight_age: Gauge<f64>,
    last_completion: Gauge<f64>,
    channel_io: Counter<u64>,
    channel_in_place: Counter<u64>,
    channel_time: Counter<f64>,
    proxy_wait: Counter<f64>,
    proxy_steps: Counter<u64>,
    proxy_ops: Counter<u64>,
    connections: Gauge<i64>,
    comm_size: Gauge<u64>,
    channels: Gauge<i64>,
    init_phase: Gauge<f64>,
    init_total: Gauge<f64>,
    decisions: Counter<u64>,
    errors: Counter<u64>,
    findings: Gauge<i64>,
    dropped: Counter<u64>,
    kernel_channel: Counter<f64>,
    profiler_lost: Counter<u64>,
    profiler_disabled: Gauge<i64>,
    proxy_thread: Counter<f64>,
    proxy_appended: Counter<u64>,
}

/// The catalogue's name of a metric OpenTelemetry exports.
fn name(m: &Metric) -> &'static str {
    m.otel.expect("a metric OpenTelemetry exports")
}

impl Instruments {
    fn new(m: &Meter) -> Self {
        let u64_counter = |c: &Metric| m.u64_counter(name(c)).with_unit(c.unit).with_description(c.help).build();
        let f64_counter = |c: &Metric| m.f64_counter(name(c)).with_unit(c.unit).with_description(c.help).build();
        let f64_gauge = |c: &Metric| m.f64_gauge(name(c)).with_unit(c.unit).with_description(c.help).build();
        let i64_gauge = |c: &Metric| m.i64_gauge(name(c)).with_unit(c.unit).with_description(c.help).build();
        let duration = &cat::COLL_DURATION;
        let comm_size = &cat::COMMUNICATOR_SIZE;
        let in_flight = &cat::IN_FLIGHT;
        Instruments {
            coll_duration: m
                .f64_histogram(name(duration))
                .with_unit(duration.unit)
                .with_description(duration.help)
                .with_boundaries(labels::duration_bounds())
                .build(),
            coll_io: u64_counter(&cat::COLL_BYTES),
            coll_ops: u64_counter(&cat::COLL_OPS),
            coll_failed: u64_counter(&cat::COLL_FAILED),
            busbw: f64_gauge(&cat::BUSBW),
            algbw: f64_gauge(&cat::ALGBW),
            in_flight: m
                .i64_up_down_counter(name(in_flight))
                .with_unit(in_flight.unit)
                .with_description(in_flight.help)
                .build(),
            in_flight_age: f64_gauge(&cat::IN_FLIGHT_AGE),
            last_completion: f64_gauge(&cat::LAST_COMPLETION),
            channel_io: u64_counter(&cat::CHANNEL_BYTES),
            channel_in_place: u64_counter(&cat::CHANNEL_IN_PLACE_BYTES),
            channel_time: f64_counter(&cat::CHANNEL_SECONDS),
            proxy_wait: f64_counter(&cat::PROXY_WAIT),
            proxy_steps: u64_counter(&cat::PROXY_STEPS),
            proxy_ops: u64_counter(&cat::PROXY_OPS),
            connections: i64_gauge(&cat::CONNECTIONS),
            comm_size: m.u64_gauge(name(comm_size)).with_unit(comm_size.unit).with_description(comm_size.help).build(),
            channels: i64_gauge(&cat::CHANNELS),
            init_phase: f64_gauge(&cat::INIT_PHASE),
            init_total: f64_gauge(&cat::INIT_TOTAL),
            decisions: u64_counter(&cat::DECISIONS),
            errors: u64_counter(&cat::ERRORS),
            findings: i64_gauge(&cat::FINDINGS),
            dropped: u64_counter(&cat::DROPPED),
            kernel_channel: f64_counter(&cat::KERNEL_CHANNEL_SECONDS),
            profiler_lost: u64_counter(&cat::PROFILER_LOST),
            profiler_disabled: i64_gauge(&cat::PROFILER_DISABLED),
            proxy_thread: f64_counter(&cat::PROXY_THREAD_SECONDS),
            proxy_appended: u64_counter(&cat::PROXY_APPENDED),
        }
    }
}

fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
}

fn time_us(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

impl Otel {
    pub fn new(cfg: &OtelConfig) -> Result<Self, OtelError> {
        let fail = |reason: String| OtelError { endpoint: cfg.endpoint.clone(), reason };
        let base = cfg.endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(fail("expected an http:// or https:// URL".into()));
        }
        let mut attrs = vec![kv("host.name", cfg.host.clone()), kv("process.pid", i64::from(std::process::id()))];
        if let Some(rank) = cfg.rank {
            attrs.push(kv("collscope.rank", i64::from(rank)));
        }
        if let Some(job) = &cfg.job_id {
            attrs.push(kv("collscope.job.id", job.clone()));
        }
        let resource =
            Resource::builder_empty().with_service_name(cfg.service_name.clone()).with_attributes(attrs).build();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/traces"))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/metrics"))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let tracers = SdkTracerProvider::builder().with_resource(resource.clone()).with_batch_exporter(spans).build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(PeriodicReader::builder(metrics).with_interval(cfg.export_interval).build())
            .build();
        Ok(Otel {
            tracer: tracers.tracer("collscope"),
            m: Instruments::new(&meters.meter("collscope")),
            meters,
            tracers,
            pending: HashMap::new(),
            early_proxy: HashMap::new(),
            generation: 0,
        })
    }

    /// Opens the span of a finished call; it ends at the call's completion time on the next-but-one `tick`.
    pub fn span(&mut self, op: &OpRecord) {
        let (Some(start), Some(end)) = (op.started_us.or(op.enqueued_us), op.completed_us) else { return };
        let mut attrs = vec![
            kv("collscope.collective", op.coll.as_str()),
            kv("collscope.rank", i64::from(op.rank)),
            kv("collscope.seq", op.seq as i64),
            kv("collscope.count", op.count as i64),
            kv("collscope.datatype", op.datatype.as_str()),
            kv("collscope.bytes", op.bytes as i64),
        ];
        if let Some(a) = op.algo {
            attrs.push(kv("collscope.algorithm", a.as_str()));
        }
        if let Some(p) = op.proto {
            attrs.push(kv("collscope.protocol", p.as_str()));
        }
        if let Some(n) = op.n_channels {
            attrs.push(kv("collscope.channels", i64::from(n)));
        }
        if let Some(bw) = op.busbw_gbps {
            attrs.push(kv("collscope.busbw", bw * 1e9));
        }
        if let Some(c) = &op.comm {
            attrs.push(kv("collscope.comm", c.clone()));
        }
        if let Some(p) = op.peer {
            attrs.push(kv("collscope.peer", i64::from(p)));
        }
        let mut span = self
            .tracer
            .span_builder(op.coll.as_str())
            .with_kind(SpanKind::Internal)
            .with_start_time(time_us(start))
            .with_attributes(attrs)
            .start(&self.tracer);
        if op.state == OpState::Failed {
            span.set_status(Status::error("call failed"));
        }
        let end = time_us(end);
        if let Some((_, early)) = self.early_proxy.remove(&(op.rank, op.seq)) {
            for p in &early {
                add_proxy_event(&mut span, p, end);
            }
        }
        if let Some((mut old, old_end, _)) = self.pending.insert((op.rank, op.seq), (span, end, self.generation)) {
            old.end_with_timestamp(old_end);
        }
    }

    /// Attaches a proxy sub-operation to its call's span, or keeps it for the span to come.
    pub fn proxy_event(&mut self, p: &ProxyOp) {
        if let Some((span, end, _)) = self.pending.get_mut(&(p.rank, p.seq)) {
            add_proxy_event(span, p, *end);
            return;
        }
        self.early_proxy.entry((p.rank, p.seq)).or_insert_with(|| (self.generation, Vec::new())).1.push(p.clone());
    }

    /// Once per drain: ends the spans opened before the previous drain and forgets stale proxy operations.
    pub fn tick(&mut self) {
        let now = self.generation;
        self.pending.retain(|_, (span, end, created)| {
            let keep = *created >= now;
            if !keep {
                span.end_with_timestamp(*end);
            }
            keep
        });
        self.early_proxy.retain(|_, (created, _)| *created >= now);
        self.generation += 1;
    }

    /// Ends every open span and pushes everything recorded so far.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        for (_, (mut span, end, _)) in self.pending.drain() {
            span.end_with_timestamp(end);
        }
        let fail = |what: &str, e: opentelemetry_sdk::error::OTelSdkError| OtelError {
            endpoint: what.to_string(),
            reason: e.to_string(),
        };
        self.tracers.shutdown().map_err(|e| fail("traces", e))?;
        self.meters.shutdown().map_err(|e| fail("metrics", e))
    }
}

fn add_proxy_event(span: &mut Span, p: &ProxyOp, at: SystemTime) {
    let mut attrs = vec![
        kv("collscope.channel", i64::from(p.channel)),
        kv("collscope.peer", i64::from(p.peer)),
        kv("collscope.proxy.steps", p.n_steps as i64),
        kv("collscope.proxy.posted", p.posted as i64),
        kv("collscope.proxy.transmitted", p.transmitted as i64),
        kv("collscope.proxy.done", p.done as i64),
    ];
    for (state, secs) in &p.waits {
        attrs.push(KeyValue::new(format!("collscope.proxy.{}", labels::wait_state(*state)), *secs));
    }
    let name = if p.send { "proxy.send" } else { "proxy.recv" };
    span.add_event_with_timestamp(name, at, attrs);
}

impl MetricSink for Otel {
    fn calls(&mut self, c: &Calls) {
        let l = CollLabels::new(c.coll, c.algo, c.proto, c.size_bucket, c.rank);
        if c.failed > 0 {
            self.m.coll_failed.add(c.failed, &cat::COLL_FAILED.attrs([l.collective.into(), l.rank.clone().into()]));
        }
        if c.ok == 0 {
            return;
        }
        let (collective, algorithm, protocol, size_bucket) = (l.collective, l.algorithm, l.protocol, l.size_bucket);
        let comm: opentelemetry::Value = c.comm_name.to_string().into();
        let values = [
            collective.into(),
            algorithm.into(),
            protocol.into(),
            size_bucket.into(),
            l.rank.clone().into(),
            comm.clone(),
        ];
        let attrs = cat::COLL_OPS.attrs(values);
        self.m.coll_ops.add(c.ok, &attrs);
        self.m.coll_io.add(c.bytes, &attrs);
        for &(n, secs) in &c.durations {
            let mean = secs / n as f64;
            (0..n).for_each(|_| self.m.coll_duration.record(mean, &attrs));
        }
        let bw_attrs = cat::BUSBW.attrs([l.collective.into(), l.size_bucket.into(), l.rank.clone().into(), comm]);
        if let Some(bw) = c.busbw_gbps {
            self.m.busbw.record(bw * 1e9, &bw_attrs);
        }
        if let Some(bw) = c.algbw_gbps {
            self.m.algbw.record(bw * 1e9, &bw_attrs);
        }
    }

    fn in_flight(&mut self, rank: u32, delta: i64) {
        self.m.in_flight.add(delta, &cat::IN_FLIGHT.attrs([rank.to_string().into()]));
    }

    fn decided(&mut self, coll: Collective, algo: Algorithm, proto: model::Protocol, rank: Option<u32>, n: u64) {
        let values = [coll.as_str().into(), algo.as_str().into(), proto.as_str().into(), sink::rank_label(rank).into()];
        self.m.decisions.add(n, &cat::DECISIONS.attrs(values));
    }

    fn traffic(&mut self, t: &ChannelTraffic) {
        let attrs = cat::CHANNEL_BYTES.attrs([
            t.rank.to_string().into(),
            t.channel.to_string().into(),
            t.peer.to_string().into(),
            labels::direction(t.direction).into(),
            labels::transport(t.transport).into(),
        ]);
        self.m.channel_io.add(t.bytes, &attrs);
        if let Some(n) = t.in_place_bytes {
            self.m.channel_in_place.add(n, &attrs);
        }
        if t.seconds > 0.0 {
            self.m.channel_time.add(t.seconds, &attrs);
        }
    }

    fn proxy(&mut self, p: &ProxyOp, finished: u64) {
        let rank = p.rank.to_string();
        let dir = labels::send_or_recv(p.send);
        for (state, secs) in &p.waits {
            if *secs > 0.0 {
                let attrs = cat::PROXY_WAIT.attrs([rank.clone().into(), dir.into(), labels::wait_state(*state).into()]);
                self.m.proxy_wait.add(*secs, &attrs);
            }
        }
        for (stage, n) in [("posted", p.posted), ("transmitted", p.transmitted), ("done", p.done)] {
            self.m.proxy_steps.add(n, &cat::PROXY_STEPS.attrs([rank.clone().into(), dir.into(), stage.into()]));
        }
        if finished > 0 {
            let values = [rank.into(), p.channel.to_string().into(), p.peer.to_string().into(), dir.into()];
            self.m.proxy_ops.add(finished, &cat::PROXY_OPS.attrs(values));
        }
    }

    fn error(&mut self, w: &Warning) {
        self.m.errors.add(1, &cat::ERRORS.attrs([w.class.clone().into(), sink::rank_label(w.rank).into()]));
    }

    fn dropped(&mut self, stage: &'static str, n: u64) {
        self.m.dropped.add(n, &cat::DROPPED.attrs([stage.into()]));
    }

    fn kernel_channel(&mut self, k: &KernelChannel) {
        if k.gpu_seconds > 0.0 {
            let attrs = cat::KERNEL_CHANNEL_SECONDS.attrs([k.rank.to_string().into(), k.channel.to_string().into()]);
            self.m.kernel_channel.add(k.gpu_seconds, &attrs);
        }
    }

    fn profiler(&mut self, c: &ProfilerCounters) {
        for (reason, n) in sink::lost_events(c) {
            self.m.profiler_lost.add(n, &cat::PROFILER_LOST.attrs([reason.into()]));
        }
        self.m.profiler_disabled.record(i64::from(c.disabled), &cat::PROFILER_DISABLED.attrs([]));
        for (state, secs) in sink::proxy_thread(c) {
            if secs > 0.0 {
                self.m.proxy_thread.add(secs, &cat::PROXY_THREAD_SECONDS.attrs([state.into()]));
            }
        }
        self.m.proxy_appended.add(c.proxy_appended_ops, &cat::PROXY_APPENDED.attrs([]));
    }

    fn progress(&mut self, ranks: &[RankSummary]) {
        for r in ranks {
            for c in &r.comms {
                let attrs =
                    cat::IN_FLIGHT_AGE.attrs([r.rank.to_string().into(), sink::comm_label(c).to_string().into()]);
                self.m.in_flight_age.record(c.in_flight.as_ref().map_or(0.0, |f| f.age_s), &attrs);
                if let Some(us) = c.last_completed_us {
                    self.m.last_completion.record(us as f64 / 1e6, &attrs);
                }
            }
        }
    }

    fn facts(&mut self, snap: &Snapshot) {
        for (k, n) in sink::connection_groups(snap) {
            let attrs = cat::CONNECTIONS.attrs([
                k.rank.to_string().into(),
                k.peer.to_string().into(),
                k.direction.into(),
                k.transport.into(),
                k.mode.into(),
                k.gdrdma.into(),
            ]);
            self.m.connections.record(n as i64, &attrs);
        }
        for c in &snap.communicators {
            let rank = sink::rank_label(c.rank);
            if let Some(n) = c.nranks {
                let attrs = cat::COMMUNICATOR_SIZE.attrs([
                    sink::opt_label(c.comm.as_ref()).into(),
                    rank.clone().into(),
                    sink::opt_label(c.nnodes.or(snap.nnodes)).into(),
                    sink::opt_label(c.version.as_ref().or(snap.nccl_version.as_ref())).into(),
                ]);
                self.m.comm_size.record(u64::from(n), &attrs);
            }
            for (phase, secs) in &c.init.phases {
                self.m.init_phase.record(*secs, &cat::INIT_PHASE.attrs([rank.clone().into(), phase.clone().into()]));
            }
            if let Some(total) = c.init.total {
                self.m.init_total.record(total, &cat::INIT_TOTAL.attrs([rank.clone().into()]));
            }
        }
        let ch = &snap.channels;
        for (kind, n) in [("coll", ch.coll), ("collnet", ch.collnet), ("nvls", ch.nvls), ("p2p", ch.p2p)] {
            if let Some(n) = n {
                self.m.channels.record(i64::from(n), &cat::CHANNELS.attrs([kind.into()]));
            }
        }
        let mut findings: HashMap<(&str, &str), i64> = HashMap::new();
        for f in &snap.findings {
            *findings.entry((f.code.as_str(), f.severity.as_str())).or_default() += 1;
        }
        for ((code, severity), n) in findings {
            self.m.findings.record(n, &cat::FINDINGS.attrs([code.to_string().into(), severity.into()]));
        }
    }
}
