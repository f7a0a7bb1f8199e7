//! The metric store: every series of every catalogue metric, updated once (`sink.rs` says where each value
//! comes from) and read by both exports: Prometheus encodes it at each scrape (`prom.rs`), OpenTelemetry takes
//! what changed at each drain (`otel.rs`). A series is a metric and its label values, in the catalogue's label
//! order.

use crate::catalogue::{self as cat, Kind, Metric};
use hashbrown::{Equivalent, HashMap};
use rustc_hash::FxBuildHasher;
use std::hash::{Hash, Hasher};

/// A series' label values, in the catalogue's label order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LabelValues(Box<[Box<str>]>);

/// Label values as an update names them, looked up without allocating: hashes as a [`LabelValues`] does (a
/// slice hashes its length, then each `str`).
struct Query<'a>(&'a [&'a str]);

impl Hash for Query<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}

impl Equivalent<LabelValues> for Query<'_> {
    fn equivalent(&self, key: &LabelValues) -> bool {
        self.0.len() == key.0.len() && self.0.iter().zip(key.0.iter()).all(|(a, b)| *a == &**b)
    }
}

impl From<&Query<'_>> for LabelValues {
    fn from(q: &Query<'_>) -> Self {
        LabelValues(q.0.iter().map(|l| Box::from(*l)).collect())
    }
}

/// A counter's or gauge's value: whole for metrics that count things (see [`Metric::integral`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(x) => x,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Num::Int(n) => n,
            Num::Float(x) => x as i64,
        }
    }

    /// `self` grown by `by`, in `self`'s kind.
    fn plus(self, by: Num) -> Num {
        match self {
            Num::Int(n) => Num::Int(n.saturating_add(by.as_i64())),
            Num::Float(x) => Num::Float(x + by.as_f64()),
        }
    }

    /// `v` in `self`'s kind.
    fn like(self, v: Num) -> Num {
        match self {
            Num::Int(_) => Num::Int(v.as_i64()),
            Num::Float(_) => Num::Float(v.as_f64()),
        }
    }

    fn minus(self, v: Num) -> Num {
        match self {
            Num::Int(n) => Num::Int(n.saturating_sub(v.as_i64())),
            Num::Float(x) => Num::Float(x - v.as_f64()),
        }
    }
}

impl From<u64> for Num {
    fn from(n: u64) -> Self {
        Num::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<i64> for Num {
    fn from(n: i64) -> Self {
        Num::Int(n)
    }
}

impl From<f64> for Num {
    fn from(x: f64) -> Self {
        Num::Float(x)
    }
}

/// One series' value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(Num),
    /// (observations, their sum) per bucket of the metric's [`crate::catalogue::Buckets`], then above the last bound.
    Histogram(Vec<(u64, f64)>),
}

impl Value {
    fn zero(m: &Metric) -> Value {
        match m.kind {
            Kind::Histogram(buckets) => Value::Histogram(vec![(0, 0.0); buckets.count()]),
            _ if m.integral() => Value::Num(Num::Int(0)),
            _ => Value::Num(Num::Float(0.0)),
        }
    }
}

/// What a series did since OpenTelemetry last took it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A counter or up-down counter grew by this.
    Add(Num),
    /// A gauge's value now.
    Set(Num),
    /// A histogram's new observations: (how many, their sum) per bucket.
    Observed(Vec<(u64, f64)>),
}

#[derive(Debug)]
struct Series {
    value: Value,
    /// The value OpenTelemetry last took; `None` before it took any.
    taken: Option<Value>,
    changed: bool,
}

/// One metric's series.
#[derive(Debug)]
pub struct Family {
    pub metric: Metric,
    series: HashMap<LabelValues, Series, FxBuildHasher>,
    changed: bool,
}

impl Family {
    pub fn series(&self) -> impl Iterator<Item = (&[Box<str>], &Value)> {
        self.series.iter().map(|(l, s)| (&*l.0, &s.value))
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

#[derive(Debug)]
pub struct Store {
    /// By [`key`].
    families: HashMap<&'static str, Family, FxBuildHasher>,
}

/// A metric's name in the store: its Prometheus name, else its OpenTelemetry one (the catalogue test holds both
/// unique).
fn key(m: &Metric) -> &'static str {
    m.prom.or(m.otel).unwrap_or(m.help)
}

impl Store {
    pub fn new() -> Self {
        let mut s = Store { families: HashMap::default() };
        // A metric without labels is one series, there from the start (Prometheus shows it as 0 until set).
        for m in cat::ALL.iter().filter(|m| m.labels.is_empty()) {
            s.series(m, &[]);
        }
        s
    }

    fn family(&mut self, m: &Metric) -> &mut Family {
        self.families.entry(key(m)).or_insert_with(|| Family { metric: *m, series: HashMap::default(), changed: false })
    }

    fn series(&mut self, m: &Metric, labels: &[&str]) -> &mut Series {
        debug_assert_eq!(labels.len(), m.labels.len(), "{}: one value per label", key(m));
        let family = self.family(m);
        family.changed = true;
        let query = Query(labels);
        let (_, series) = family.series.raw_entry_mut().from_key(&query).or_insert_with(|| {
            (LabelValues::from(&query), Series { value: Value::zero(m), taken: None, changed: false })
        });
        series
    }

    /// Grows a counter (or moves an up-down counter) by `v`; creates the series at 0 if it is new.
    pub fn add(&mut self, m: &Metric, labels: &[&str], v: impl Into<Num>) {
        let s = self.series(m, labels);
        if let Value::Num(n) = &mut s.value {
            *n = n.plus(v.into());
            s.changed = true;
        }
    }

    /// Sets a gauge.
    pub fn set(&mut self, m: &Metric, labels: &[&str], v: impl Into<Num>) {
        let s = self.series(m, labels);
        if let Value::Num(n) = &mut s.value {
            *n = n.like(v.into());
            s.changed = true;
        }
    }

    /// Observes `v` `n` times in a histogram.
    pub fn observe(&mut self, m: &Metric, labels: &[&str], v: f64, n: u64) {
        let Kind::Histogram(bounds) = m.kind else { return };
        let s = self.series(m, labels);
        if let Value::Histogram(buckets) = &mut s.value {
            let i = bounds.index(v);
            buckets[i].0 += n;
            buckets[i].1 += v * n as f64;
            s.changed = true;
        }
    }

    /// Forgets every series of `m`: a fact replaced as a whole.
    pub fn reset(&mut self, m: &Metric) {
        self.family(m).series.clear();
    }

    pub fn families(&self) -> impl Iterator<Item = &Family> {
        self.families.values()
    }

    /// Hands `f` each series changed since the last call, as what it did since.
    pub fn take_changes(&mut self, mut f: impl FnMut(&Metric, &[Box<str>], Change)) {
        for family in self.families.values_mut().filter(|f| f.changed) {
            family.changed = false;
            for (labels, s) in family.series.iter_mut().filter(|(_, s)| s.changed) {
                s.changed = false;
                let change = match (&s.value, &s.taken, family.metric.kind) {
                    (Value::Num(n), _, Kind::Gauge) => Change::Set(*n),
                    (Value::Num(n), Some(Value::Num(was)), _) => Change::Add(n.minus(*was)),
                    (Value::Num(n), _, _) => Change::Add(*n),
                    (Value::Histogram(now), was, _) => Change::Observed(
                        now.iter()
                            .enumerate()
                            .map(|(i, &(n, sum))| match was {
                                Some(Value::Histogram(was)) => (n - was[i].0, sum - was[i].1),
                                _ => (n, sum),
                            })
                            .collect(),
                    ),
                };
                s.taken = Some(s.value.clone());
                f(&family.metric, &labels.0, change);
            }
        }
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_handed_over_as_what_it_grew_by_and_a_gauge_as_its_value() {
        let mut s = Store::new();
        s.add(&cat::COLL_OPS, &["AllReduce", "Ring", "Simple", "0-1KiB", "0", "tp0"], 2u64);
        s.set(&cat::INIT_TOTAL, &["0"], 0.5);
        let mut got = Vec::new();
        s.take_changes(|m, l, c| got.push((key(m), l.join(","), c)));
        got.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            got,
            [
                (
                    "collscope_collective_operations_total",
                    "AllReduce,Ring,Simple,0-1KiB,0,tp0".into(),
                    Change::Add(Num::Int(2))
                ),
                ("collscope_init_seconds", "0".into(), Change::Set(Num::Float(0.5))),
            ]
        );
        s.add(&cat::COLL_OPS, &["AllReduce", "Ring", "Simple", "0-1KiB", "0", "tp0"], 3u64);
        got.clear();
        s.take_changes(|m, _, c| got.push((key(m), String::new(), c)));
        assert_eq!(got, [("collscope_collective_operations_total", String::new(), Change::Add(Num::Int(3)))]);
        s.take_changes(|m, _, _| panic!("{} did not change", key(m)));
    }

    #[test]
    fn a_histogram_is_handed_over_as_its_new_observations_per_bucket() {
        let mut s = Store::new();
        let l = ["AllReduce", "Ring", "Simple", "0-1KiB", "0", "tp0"];
        let bounds = cat::Buckets::Durations.bounds();
        s.observe(&cat::COLL_DURATION, &l, bounds[0], 2);
        s.take_changes(|_, _, _| {});
        s.observe(&cat::COLL_DURATION, &l, bounds[1], 3);
        let mut got = Vec::new();
        s.take_changes(|_, _, c| got.push(c));
        let Some(Change::Observed(b)) = got.pop() else { panic!("{got:?}") };
        assert_eq!((b[0].0, b[1]), (0, (3, bounds[1] * 3.0)));
    }

    #[test]
    fn counting_metrics_hold_whole_numbers_and_times_fractions() {
        let mut s = Store::new();
        s.set(&cat::CONNECTIONS, &["0", "1", "send", "net", "", "off"], 2.0);
        s.add(&cat::CHANNEL_SECONDS, &["0", "1", "1", "send", "net"], 1u64);
        let value = |s: &Store, m: &Metric| {
            s.families().find(|f| key(&f.metric) == key(m)).unwrap().series().next().unwrap().1.clone()
        };
        assert_eq!(value(&s, &cat::CONNECTIONS), Value::Num(Num::Int(2)));
        assert_eq!(value(&s, &cat::CHANNEL_SECONDS), Value::Num(Num::Float(1.0)));
        assert_eq!(value(&s, &cat::PROFILER_DISABLED), Value::Num(Num::Int(0)), "a metric without labels starts at 0");
    }
}
