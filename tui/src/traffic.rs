//! Bytes moved per ring edge / connection, turned into rates and a short history for sparklines.

use std::collections::{BTreeMap, VecDeque};

/// How many rate samples a sparkline shows.
pub const HISTORY: usize = 32;

/// One directed edge on one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EdgeKey {
    pub channel: u32,
    pub src: u32,
    pub dst: u32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EdgeTraffic {
    /// Cumulative bytes sent over the edge.
    pub bytes: u64,
    /// Of `bytes`, those moved in place (no connection buffer carried them), where the source tells.
    pub in_place: Option<u64>,
    /// Bytes per second over the last sampling interval.
    pub rate: f64,
    /// Recent rates, oldest first.
    pub history: VecDeque<f64>,
    /// (seconds, cumulative bytes) at the last sample.
    last: Option<(f64, u64)>,
}

/// Per-edge counters. Totals come from the source (cumulative); rates are taken at each [`Traffic::sample`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    edges: BTreeMap<EdgeKey, EdgeTraffic>,
}

impl Traffic {
    /// Sets the cumulative byte count of an edge, `in_place` of them moved in place where the source tells
    /// (counters only grow; a smaller value means the source restarted).
    pub fn set_total(&mut self, key: EdgeKey, bytes: u64, in_place: Option<u64>) {
        let edge = self.edges.entry(key).or_default();
        if bytes < edge.bytes {
            edge.last = None;
        }
        edge.bytes = bytes;
        edge.in_place = in_place;
    }

    /// Takes a rate sample of every edge at time `now` (seconds on any monotonic clock).
    pub fn sample(&mut self, now: f64) {
        for edge in self.edges.values_mut() {
            if let Some((t, b)) = edge.last {
                let dt = now - t;
                if dt <= 0.0 {
                    continue;
                }
                edge.rate = (edge.bytes.saturating_sub(b)) as f64 / dt;
                if edge.history.len() == HISTORY {
                    edge.history.pop_front();
                }
                edge.history.push_back(edge.rate);
            }
            edge.last = Some((now, edge.bytes));
        }
    }

    pub fn get(&self, key: EdgeKey) -> Option<&EdgeTraffic> {
        self.edges.get(&key)
    }

    pub fn is_empty(&self) -> bool {
        self.edges.is_empty()
    }

    /// Sum of all edges' current rates.
    pub fn total_rate(&self) -> f64 {
        self.edges.values().map(|e| e.rate).sum()
    }

    /// Drops the edges `keep` says no to.
    pub fn retain(&mut self, keep: impl Fn(&EdgeKey) -> bool) {
        self.edges.retain(|k, _| keep(k));
    }

    pub fn clear(&mut self) {
        self.edges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: EdgeKey = EdgeKey { channel: 0, src: 0, dst: 1 };

    #[test]
    fn rate_is_bytes_over_interval_and_history_is_bounded() {
        let mut t = Traffic::default();
        t.set_total(K, 1000, None);
        t.sample(0.0);
        assert_eq!(t.get(K).unwrap().rate, 0.0, "no rate before two samples");
        t.set_total(K, 3000, None);
        t.sample(0.5);
        assert_eq!(t.get(K).unwrap().rate, 4000.0);
        for i in 1..=(HISTORY as u64 + 5) {
            t.set_total(K, 3000 + 100 * i, Some(25 * i));
            t.sample(i as f64);
        }
        let e = t.get(K).unwrap();
        assert_eq!(e.history.len(), HISTORY);
        assert_eq!(e.rate, 100.0);
        assert_eq!(t.total_rate(), 100.0);
        assert_eq!(e.in_place, Some(25 * (HISTORY as u64 + 5)));
    }

    #[test]
    fn counter_reset_does_not_give_a_negative_or_huge_rate() {
        let mut t = Traffic::default();
        t.set_total(K, 5000, None);
        t.sample(0.0);
        t.set_total(K, 10, None);
        t.sample(1.0);
        t.set_total(K, 110, None);
        t.sample(2.0);
        assert_eq!(t.get(K).unwrap().rate, 100.0);
    }
}
