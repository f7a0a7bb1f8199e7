//! The Prometheus export: the store's `collscope_*` families in base units (seconds, bytes, bytes per second),
//! counters ending in `_total`, info-style gauges for facts, encoded as the `prometheus` crate's registry would
//! (families by name, series by label values, label pairs by name; empty families left out).

use crate::catalogue::{Buckets, Kind, Metric};
use crate::store::{Family, Store, Value};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

/// The exposition of `store` in Prometheus text format 0.0.4.
pub fn encode(store: &Store) -> Result<String, prometheus::Error> {
    let mut families: Vec<MetricFamily> = store.families().filter_map(family).collect();
    families.sort_by(|a, b| a.name().cmp(b.name()));
    let mut buf = Vec::new();
    TextEncoder::new().encode(&families, &mut buf)?;
    String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

/// A family Prometheus exports, with its series.
fn family(f: &Family) -> Option<MetricFamily> {
    let name = f.metric.prom?;
    if f.is_empty() {
        return None;
    }
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(f.metric.help.to_string());
    mf.set_field_type(match f.metric.kind {
        Kind::Counter => MetricType::COUNTER,
        Kind::Gauge | Kind::UpDownCounter => MetricType::GAUGE,
        Kind::Histogram(_) => MetricType::HISTOGRAM,
    });
    let mut series: Vec<proto::Metric> = f.series().map(|(values, v)| metric(&f.metric, values, v)).collect();
    series.sort_by(|a, b| label_values(a).cmp(label_values(b)));
    mf.set_metric(series);
    Some(mf)
}

fn label_values(m: &proto::Metric) -> impl Iterator<Item = &str> {
    m.get_label().iter().map(|l| l.value())
}

fn metric(m: &Metric, values: &[Box<str>], v: &Value) -> proto::Metric {
    let mut pairs: Vec<LabelPair> = m
        .labels
        .iter()
        .zip(values)
        .map(|(l, v)| {
            let mut p = LabelPair::default();
            p.set_name(l.prom.to_string());
            p.set_value(v.to_string());
            p
        })
        .collect();
    pairs.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = proto::Metric::default();
    out.set_label(pairs);
    match (v, m.kind) {
        (Value::Num(n), Kind::Counter) => {
            let mut c = proto::Counter::default();
            c.set_value(n.as_f64());
            out.set_counter(c);
        }
        (Value::Num(n), _) => {
            let mut g = proto::Gauge::default();
            g.set_value(n.as_f64());
            out.set_gauge(g);
        }
        (Value::Histogram(counts), Kind::Histogram(buckets)) => out.set_histogram(histogram(buckets, counts)),
        (Value::Histogram(_), _) => {}
    }
    out
}

/// Prometheus' cumulative buckets, one per bound (the text encoder adds `+Inf` from the count).
fn histogram(bounds: Buckets, buckets: &[(u64, f64)]) -> proto::Histogram {
    let mut h = proto::Histogram::default();
    let mut count = 0;
    let cumulative = bounds
        .bounds()
        .into_iter()
        .zip(buckets)
        .map(|(bound, (n, _))| {
            count += n;
            let mut b = proto::Bucket::default();
            b.set_upper_bound(bound);
            b.set_cumulative_count(count);
            b
        })
        .collect();
    h.set_bucket(cumulative);
    h.set_sample_count(buckets.iter().map(|b| b.0).sum());
    h.set_sample_sum(buckets.iter().map(|b| b.1).sum());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue as cat;

    #[test]
    fn a_histogram_is_exposed_with_cumulative_buckets_its_count_and_sum() {
        let mut s = Store::new();
        let bounds = Buckets::Durations.bounds();
        let l = ["AllReduce", "Ring", "Simple", "0-1KiB", "0", "tp0"];
        s.observe(&cat::COLL_DURATION, &l, bounds[0], 2);
        s.observe(&cat::COLL_DURATION, &l, bounds[2], 1);
        let text = encode(&s).unwrap();
        let bucket = |i: usize, n: u64| {
            format!("collscope_collective_duration_seconds_bucket{{algorithm=\"Ring\",collective=\"AllReduce\",comm_name=\"tp0\",protocol=\"Simple\",rank=\"0\",size_bucket=\"0-1KiB\",le=\"{}\"}} {n}\n", bounds[i])
        };
        assert!(text.contains(&bucket(0, 2)), "{text}");
        assert!(text.contains(&bucket(1, 2)), "{text}");
        assert!(text.contains(&bucket(2, 3)), "{text}");
        assert!(text.contains("le=\"+Inf\"} 3\n"), "{text}");
        let count = "_count{algorithm=\"Ring\",collective=\"AllReduce\",comm_name=\"tp0\",protocol=\"Simple\",rank=\"0\",size_bucket=\"0-1KiB\"} 3\n";
        assert!(text.contains(count), "{text}");
    }
}
