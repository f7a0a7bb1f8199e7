//! The OpenTelemetry export: the same metrics under OTel names with UCUM units, and one span per call with
//! its proxy sub-operations as span events, sent over OTLP/HTTP (binary protobuf) to
//! `OTEL_EXPORTER_OTLP_ENDPOINT`.
//!
//! Build and shut down an `Otel` outside any tokio runtime: the OTLP client is a blocking one that runs
//! on the SDK's own export threads. Recording only hands data to the SDK and never blocks.

use crate::catalogue::{Kind, Metric};
use crate::labels;
use crate::store::{Change, Store};
use collscope_model::{OpRecord, OpState, ProxyOp};
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use rustc_hash::FxHashMap;
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
    meter: Meter,
    /// By OpenTelemetry name.
    instruments: FxHashMap<&'static str, Instrument>,
    /// Spans of finished calls, kept open for one more drain so that proxy events reported just after the
    /// call still attach; value: (span, end time, generation created).
    pending: HashMap<SpanKey, (Span, SystemTime, u64)>,
    /// Proxy operations that arrived before their call's span; value: (generation, ops).
    early_proxy: HashMap<SpanKey, (u64, Vec<ProxyOp>)>,
    generation: u64,
}

/// The instrument of one catalogue metric, made when it first changes.
enum Instrument {
    U64Counter(Counter<u64>),
    F64Counter(Counter<f64>),
    I64UpDown(UpDownCounter<i64>),
    F64UpDown(UpDownCounter<f64>),
    I64Gauge(Gauge<i64>),
    F64Gauge(Gauge<f64>),
    Histogram(Histogram<f64>),
}

impl Instrument {
    fn new(meter: &Meter, m: &Metric, name: &'static str) -> Self {
        match (m.kind, m.integral()) {
            (Kind::Counter, true) => {
                Instrument::U64Counter(meter.u64_counter(name).with_unit(m.unit).with_description(m.help).build())
            }
            (Kind::Counter, false) => {
                Instrument::F64Counter(meter.f64_counter(name).with_unit(m.unit).with_description(m.help).build())
            }
            (Kind::UpDownCounter, true) => Instrument::I64UpDown(
                meter.i64_up_down_counter(name).with_unit(m.unit).with_description(m.help).build(),
            ),
            (Kind::UpDownCounter, false) => Instrument::F64UpDown(
                meter.f64_up_down_counter(name).with_unit(m.unit).with_description(m.help).build(),
            ),
            (Kind::Gauge, true) => {
                Instrument::I64Gauge(meter.i64_gauge(name).with_unit(m.unit).with_description(m.help).build())
            }
            (Kind::Gauge, false) => {
                Instrument::F64Gauge(meter.f64_gauge(name).with_unit(m.unit).with_description(m.help).build())
            }
            (Kind::Histogram(buckets), _) => Instrument::Histogram(
                meter
                    .f64_histogram(name)
                    .with_unit(m.unit)
                    .with_description(m.help)
                    .with_boundaries(buckets.bounds())
                    .build(),
            ),
        }
    }

    /// The store hands each kind of metric its own kind of change.
    fn record(&self, change: Change, attrs: &[KeyValue]) {
        match (self, change) {
            (Instrument::U64Counter(c), Change::Add(n)) => c.add(n.as_i64().max(0) as u64, attrs),
            (Instrument::F64Counter(c), Change::Add(n)) => c.add(n.as_f64(), attrs),
            (Instrument::I64UpDown(c), Change::Add(n)) => c.add(n.as_i64(), attrs),
            (Instrument::F64UpDown(c), Change::Add(n)) => c.add(n.as_f64(), attrs),
            (Instrument::I64Gauge(g), Change::Set(n)) => g.record(n.as_i64(), attrs),
            (Instrument::F64Gauge(g), Change::Set(n)) => g.record(n.as_f64(), attrs),
            // Each bucket's new observations at their mean: true counts and sum, each inside its bucket.
            (Instrument::Histogram(h), Change::Observed(buckets)) => {
                for (n, sum) in buckets.into_iter().filter(|b| b.0 > 0) {
                    (0..n).for_each(|_| h.record(sum / n as f64, attrs));
                }
            }
            _ => {}
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
            meter: meters.meter("collscope"),
            instruments: FxHashMap::default(),
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

    /// Takes what changed in the store into the instruments (the SDK exports them every `export_interval`).
    pub fn push(&mut self, store: &mut Store) {
        let (meter, instruments) = (&self.meter, &mut self.instruments);
        store.take_changes(|m, values, change| {
            let Some(name) = m.otel else { return };
            let attrs: Vec<KeyValue> =
                m.labels.iter().zip(values).map(|(l, v)| KeyValue::new(l.otel, v.to_string())).collect();
            instruments.entry(name).or_insert_with(|| Instrument::new(meter, m, name)).record(change, &attrs);
        });
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
