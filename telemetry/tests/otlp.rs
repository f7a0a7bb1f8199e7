//! OTLP/HTTP export: an in-process receiver decodes the protobuf payloads the exporter sends and the test
//! checks the spans and metrics that arrived.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use collscope_model::{
    Algorithm, Bounds, ChannelTraffic, Collective, Communicator, Connection, DataType, Decision, Direction, Event,
    Finding, InitTimings, KernelChannel, OpRecord, OpState, ProfilerCounters, Protocol, ProxyOp, ProxyWait, Severity,
    Source, Transport, Warning,
};
use collscope_runtime::observe::recorder::Recorder;
use collscope_telemetry::catalogue::{self, Kind};
use collscope_telemetry::{OtelConfig, Telemetry, TelemetryConfig};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

type Inbox = Arc<Mutex<Received>>;

async fn traces(State(inbox): State<Inbox>, body: Bytes) -> &'static str {
    let req = ExportTraceServiceRequest::decode(body).expect("a protobuf trace export");
    inbox.lock().unwrap().traces.push(req);
    ""
}

async fn metrics(State(inbox): State<Inbox>, body: Bytes) -> &'static str {
    let req = ExportMetricsServiceRequest::decode(body).expect("a protobuf metrics export");
    inbox.lock().unwrap().metrics.push(req);
    ""
}

/// An OTLP/HTTP receiver on a free loopback port, running until the test process ends.
fn receiver() -> (SocketAddr, Inbox) {
    let inbox = Inbox::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(inbox.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (addr, inbox)
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()
}

fn string(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// Telemetry on a free loopback port, exporting to the receiver at `addr` (pushed at shutdown).
fn config(addr: SocketAddr) -> TelemetryConfig {
    let mut cfg = TelemetryConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.otel = Some(OtelConfig {
        endpoint: format!("http://{addr}"),
        service_name: "collscope-test".into(),
        host: "testhost".into(),
        rank: Some(5),
        job_id: Some("4242".into()),
        export_interval: Duration::from_secs(60),
    });
    cfg
}

/// Every metric the receiver got.
fn metrics_of(got: &Received) -> Vec<&Metric> {
    got.metrics
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .collect()
}

/// An AllReduce of 1 MiB on rank 0 that ran for 500 us.
fn call(seq: u64, state: OpState) -> OpRecord {
    OpRecord {
        comm: Some("0xc0".into()),
        rank: 0,
        seq,
        coll: Collective::AllReduce,
        count: 1 << 18,
        datatype: DataType::F32,
        op: None,
        root: None,
        peer: None,
        bytes: 1 << 20,
        algo: Some(Algorithm::Ring),
        proto: Some(Protocol::Simple),
        n_channels: Some(2),
        state,
        enqueued_us: Some(1_700_000_000_000_000),
        started_us: Some(1_700_000_000_000_100),
        completed_us: Some(1_700_000_000_000_600),
        duration_us: Some(500.0),
        algbw_gbps: Some(2.0),
        busbw_gbps: Some(3.0),
    }
}

fn proxy(send: bool) -> ProxyOp {
    ProxyOp {
        rank: 0,
        seq: 7,
        channel: 1,
        peer: 1,
        send,
        n_steps: 4,
        posted: 4,
        transmitted: 4,
        done: 4,
        waits: vec![(ProxyWait::WaitingForPeer, 0.002)],
        started_us: None,
        updated_us: None,
    }
}

#[test]
fn spans_and_metrics_arrive_over_otlp_http_with_the_resource() {
    let (addr, inbox) = receiver();
    let cfg = config(addr);
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec)).unwrap();
    rec.push(Event::Proxy(proxy(true)));
    rec.push(Event::OpCompleted(call(7, OpState::Completed)));
    rec.push(Event::Proxy(proxy(false)));
    rec.push(Event::Communicator(Communicator {
        rank: Some(0),
        nranks: Some(2),
        init: InitTimings { total: Some(0.75), phases: vec![("bootstrap".into(), 0.5)] },
        ..Default::default()
    }));
    t.shutdown().unwrap();

    let got = inbox.lock().unwrap();
    let resource_spans: Vec<_> = got.traces.iter().flat_map(|r| &r.resource_spans).collect();
    let resource = resource_spans[0].resource.as_ref().unwrap();
    assert_eq!(string(&resource.attributes, "service.name").as_deref(), Some("collscope-test"));
    assert_eq!(string(&resource.attributes, "host.name").as_deref(), Some("testhost"));
    assert_eq!(int(&resource.attributes, "collscope.rank"), Some(5));
    assert_eq!(string(&resource.attributes, "collscope.job.id").as_deref(), Some("4242"));

    let spans: Vec<_> = resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).collect();
    assert_eq!(spans.len(), 1, "one span per call");
    let span = spans[0];
    assert_eq!(span.name, "AllReduce");
    assert_eq!(span.start_time_unix_nano, 1_700_000_000_000_100_000);
    assert_eq!(span.end_time_unix_nano, 1_700_000_000_000_600_000);
    assert_eq!(string(&span.attributes, "collscope.algorithm").as_deref(), Some("Ring"));
    assert_eq!(string(&span.attributes, "collscope.protocol").as_deref(), Some("Simple"));
    assert_eq!(int(&span.attributes, "collscope.channels"), Some(2));
    assert_eq!(int(&span.attributes, "collscope.bytes"), Some(1 << 20));
    let mut events: Vec<_> = span.events.iter().map(|e| e.name.as_str()).collect();
    events.sort();
    assert_eq!(events, ["proxy.recv", "proxy.send"], "proxy operations before and after the call both attach");
    assert_eq!(int(&span.events[0].attributes, "collscope.proxy.done"), Some(4));

    let all = metrics_of(&got);
    let find = |name: &str| *all.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no metric {name}"));
    let duration = find("collscope.collective.duration");
    assert_eq!(duration.unit, "s");
    match &duration.data {
        Some(metric::Data::Histogram(h)) => {
            assert_eq!(h.data_points[0].count, 1);
            assert!((h.data_points[0].sum.unwrap() - 500e-6).abs() < 1e-12);
        }
        other => panic!("duration is not a histogram: {other:?}"),
    }
    let io = find("collscope.collective.io");
    assert_eq!(io.unit, "By");
    match &io.data {
        Some(metric::Data::Sum(s)) => {
            assert!(s.is_monotonic);
            assert_eq!(s.data_points[0].value, Some(number_data_point::Value::AsInt(1 << 20)));
            assert_eq!(string(&s.data_points[0].attributes, "collscope.size_bucket").as_deref(), Some("256KiB-1MiB"));
        }
        other => panic!("io is not a sum: {other:?}"),
    }
    assert_eq!(find("collscope.collective.bus_bandwidth").unit, "By/s");
    assert_eq!(find("collscope.proxy.wait.time").unit, "s");
    match &find("collscope.init.phase.duration").data {
        Some(metric::Data::Gauge(g)) => {
            assert_eq!(g.data_points[0].value, Some(number_data_point::Value::AsDouble(0.5)));
        }
        other => panic!("init phase is not a gauge: {other:?}"),
    }
}

/// Every metric of the catalogue reaches the backends that name it: Prometheus' exposition (with its kind)
/// and the OTLP export (with its unit and kind), when the runtime reports each kind of thing once.
#[test]
fn every_catalogue_metric_is_exported_by_both_backends() {
    let (addr, inbox) = receiver();
    let mut cfg = config(addr);
    // One kept record of each history: the second decision drops the first ("history").
    cfg.limits = Bounds::histories(1);
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let t = Telemetry::start(&cfg, Source::Runtime, Some(rec)).unwrap();
    rec.push(Event::OpEnqueued(call(1, OpState::Enqueued)));
    rec.push(Event::OpCompleted(call(1, OpState::Completed)));
    rec.push(Event::OpCompleted(call(2, OpState::Failed)));
    // A call that took 4 s: a stall, counted and observed.
    let mut stalled = call(3, OpState::Completed);
    stalled.completed_us = stalled.started_us.map(|t| t + 4_000_000);
    // The call kept last completed: the communicator's last completion is a gauge.
    rec.push(Event::OpCompleted(stalled));
    rec.push(Event::Proxy(proxy(true)));
    rec.push(Event::Traffic(ChannelTraffic {
        rank: 0,
        channel: 1,
        peer: 1,
        direction: Direction::Send,
        transport: Some(Transport::Net),
        bytes: 4096,
        in_place_bytes: Some(1024),
        seconds: 0.001,
    }));
    rec.push(Event::Connection(Connection {
        comm: Some("0xc0".into()),
        ..Connection::net(1, 0, 1, Direction::Send, "Socket", 0)
    }));
    rec.push(Event::Communicator(Communicator {
        comm: Some("0xc0".into()),
        rank: Some(0),
        nranks: Some(2),
        init: InitTimings { total: Some(0.75), phases: vec![("bootstrap".into(), 0.5)] },
        ..Default::default()
    }));
    let decision = Decision {
        coll: Collective::AllReduce,
        bytes: 1 << 20,
        algo: Algorithm::Ring,
        proto: Protocol::Simple,
        n_channels: 2,
        time_us: None,
        runner_up: None,
        reason: None,
        datatype: None,
        rank: Some(0),
    };
    rec.push(Event::Decision(decision.clone()));
    rec.push(Event::Decision(decision));
    rec.push(Event::Warning(Warning {
        rank: Some(0),
        host: None,
        line: None,
        text: "NET/Socket : peer closed".into(),
        class: "socket".into(),
        source: None,
    }));
    rec.push(Event::Finding(Finding {
        code: "no_gdrdma_distance".into(),
        severity: Severity::Warning,
        rank: None,
        comm: None,
        title: "No GPUDirect RDMA on NET connections".into(),
        detail: "rank 0".into(),
        evidence: vec![],
        fix: "move the NIC".into(),
    }));
    rec.push(Event::KernelChannel(KernelChannel {
        comm: Some("0xc0".into()),
        rank: 0,
        channel: 1,
        calls: 2,
        gpu_seconds: 0.002,
    }));
    rec.push(Event::Profiler(ProfilerCounters {
        dropped_records: 1,
        proxy_sleep_seconds: 0.5,
        proxy_appended_ops: 3,
        ..Default::default()
    }));
    t.with_state(|s| s.update_facts(|f| f.channels.coll = Some(2)));
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let text = client.get(format!("{}/metrics", t.url())).send().unwrap().text().unwrap();
    t.shutdown().unwrap();

    for m in catalogue::ALL.iter() {
        let Some(name) = m.prom else { continue };
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::UpDownCounter => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name} ({kind}) is not exposed:\n{text}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name} has no help");
    }
    let got = inbox.lock().unwrap();
    let all = metrics_of(&got);
    for m in catalogue::ALL.iter() {
        let Some(name) = m.otel else { continue };
        let sent = all.iter().find(|x| x.name == name).unwrap_or_else(|| panic!("no OTLP metric {name}"));
        assert_eq!(sent.unit, m.unit, "{name}");
        assert_eq!(sent.description, m.help, "{name}");
        let kind = match &sent.data {
            Some(metric::Data::Sum(s)) if s.is_monotonic => Kind::Counter,
            Some(metric::Data::Sum(_)) => Kind::UpDownCounter,
            Some(metric::Data::Gauge(_)) => Kind::Gauge,
            // A histogram carries the catalogue's bucket bounds.
            Some(metric::Data::Histogram(h)) => {
                let Kind::Histogram(buckets) = m.kind else { panic!("{name}: a histogram, not {:?}", m.kind) };
                assert!(h.data_points.iter().all(|p| p.explicit_bounds == buckets.bounds()), "{name}: bounds");
                m.kind
            }
            other => panic!("{name}: unexpected data {other:?}"),
        };
        assert_eq!(kind, m.kind, "{name}");
        let point_attrs: Vec<&KeyValue> = match &sent.data {
            Some(metric::Data::Sum(s)) => s.data_points.iter().flat_map(|p| &p.attributes).collect(),
            Some(metric::Data::Gauge(g)) => g.data_points.iter().flat_map(|p| &p.attributes).collect(),
            Some(metric::Data::Histogram(h)) => h.data_points.iter().flat_map(|p| &p.attributes).collect(),
            _ => vec![],
        };
        for label in m.labels {
            assert!(point_attrs.iter().any(|a| a.key == label.otel), "{name} lacks attribute {}", label.otel);
        }
    }
}

/// Issue 54: the metrics export as an OpenTelemetry Collector's OTLP receiver takes it and its Prometheus exporter
/// turns it into series: every resource names the service, host, rank and job; every scope is named; sums and
/// histograms are cumulative with a start time (a Collector's Prometheus exporter drops delta sums, and a
/// cumulative point without a start cannot be told from a reset); units are UCUM, a count's in braces; a call's
/// points carry its communicator's name.
#[test]
fn the_metrics_export_is_what_a_collector_accepts() {
    use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
    let (addr, inbox) = receiver();
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new()));
    let t = Telemetry::start(&config(addr), Source::Runtime, Some(rec)).unwrap();
    rec.push(Event::OpEnqueued(call(1, OpState::Enqueued)));
    rec.push(Event::OpCompleted(call(1, OpState::Completed)));
    rec.push(Event::Proxy(proxy(true)));
    t.shutdown().unwrap();

    let got = inbox.lock().unwrap();
    let resources: Vec<_> = got.metrics.iter().flat_map(|r| &r.resource_metrics).collect();
    assert!(!resources.is_empty(), "no metrics export arrived");
    let cumulative = AggregationTemporality::Cumulative as i32;
    let (mut sums, mut histograms) = (0, 0);
    for r in &resources {
        let attrs = &r.resource.as_ref().expect("a resource").attributes;
        assert_eq!(string(attrs, "service.name").as_deref(), Some("collscope-test"));
        assert_eq!(string(attrs, "host.name").as_deref(), Some("testhost"));
        assert_eq!(int(attrs, "collscope.rank"), Some(5));
        assert_eq!(string(attrs, "collscope.job.id").as_deref(), Some("4242"));
        for s in &r.scope_metrics {
            assert!(s.scope.as_ref().is_some_and(|sc| !sc.name.is_empty()), "an unnamed instrumentation scope");
            for m in &s.metrics {
                // UCUM: a base unit, a ratio of them, "1", or an annotation in braces.
                let ucum = ["s", "By", "By/s", "1"].contains(&m.unit.as_str())
                    || (m.unit.starts_with('{') && m.unit.ends_with('}'));
                assert!(ucum, "{}: unit '{}' is not UCUM", m.name, m.unit);
                let starts: Vec<(u64, u64)> = match &m.data {
                    Some(metric::Data::Sum(x)) => {
                        sums += 1;
                        assert_eq!(x.aggregation_temporality, cumulative, "{}: not cumulative", m.name);
                        x.data_points.iter().map(|p| (p.start_time_unix_nano, p.time_unix_nano)).collect()
                    }
                    Some(metric::Data::Histogram(x)) => {
                        histograms += 1;
                        assert_eq!(x.aggregation_temporality, cumulative, "{}: not cumulative", m.name);
                        x.data_points.iter().map(|p| (p.start_time_unix_nano, p.time_unix_nano)).collect()
                    }
                    _ => vec![],
                };
                for (start, at) in starts {
                    assert!(start > 0 && start <= at, "{}: start {start} after its point {at}", m.name);
                }
            }
        }
    }
    assert!(sums > 0 && histograms > 0, "{sums} sums, {histograms} histograms");
    let all = metrics_of(&got);
    let ops = all.iter().find(|m| m.name == "collscope.collective.operations").expect("the call's count");
    let Some(metric::Data::Sum(s)) = &ops.data else { panic!("operations is not a sum") };
    assert_eq!(string(&s.data_points[0].attributes, "collscope.comm.name").as_deref(), Some("0xc0"));
}
