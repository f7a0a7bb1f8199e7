//! Where proxy steps waited: summed over every sub-operation report this view received (a snapshot keeps only
//! each connection's latest call, so its rows alone cover milliseconds), and over the last [`RECENT_S`] seconds
//! as the growth of that sum between successive samples.

use collscope_model::{ProxyOp, ProxyTally, ProxyWait};
use std::collections::{HashMap, VecDeque};

/// The recent window (seconds).
pub const RECENT_S: f64 = 10.0;
/// Sub-operations remembered for their next report; past it, those of calls 64 or more before the newest go.
const SEEN: usize = 4096;

/// Seconds by [`ProxyWait::index`].
pub type WaitSecs = [f64; ProxyWait::ALL.len()];

type SubOpKey = (u32, u64, u32, u32, bool);

fn key(p: &ProxyOp) -> SubOpKey {
    (p.rank, p.seq, p.channel, p.peer, p.send)
}

fn secs(p: &ProxyOp) -> WaitSecs {
    let mut out = [0.0; ProxyWait::ALL.len()];
    for &(w, s) in &p.waits {
        out[w.index()] += s;
    }
    out
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyWaits {
    total: WaitSecs,
    /// Each recent sub-operation's waits as last reported: a report adds only what grew since.
    seen: HashMap<SubOpKey, WaitSecs>,
    /// (seconds on the sampling clock, `total` then), oldest first, reaching back just past [`RECENT_S`].
    samples: VecDeque<(f64, WaitSecs)>,
}

impl ProxyWaits {
    /// Takes a report of one sub-operation (while it runs or when it ends; a repeat adds nothing).
    pub fn observe(&mut self, p: &ProxyOp) {
        if self.seen.len() >= SEEN {
            self.seen.retain(|k, _| k.1 + 64 >= p.seq);
        }
        let now = secs(p);
        let before = self.seen.insert(key(p), now).unwrap_or_default();
        for (t, (n, b)) in self.total.iter_mut().zip(now.iter().zip(before)) {
            *t += (n - b).max(0.0);
        }
    }

    /// Takes a tally: the summed waits of operations not reported before; its newest one is marked seen, so a
    /// snapshot row of it adds nothing more.
    pub fn tally(&mut self, t: &ProxyTally) {
        for (tot, s) in self.total.iter_mut().zip(secs(&t.sum)) {
            *tot += s;
        }
        self.seen.insert(key(&t.last), secs(&t.last));
    }

    /// Records the sum at `now` (seconds on any monotonic clock), keeping one sample at or before
    /// `now - RECENT_S` as the recent window's start.
    pub fn sample(&mut self, now: f64) {
        self.samples.push_back((now, self.total));
        while self.samples.get(1).is_some_and(|&(t, _)| t <= now - RECENT_S) {
            self.samples.pop_front();
        }
    }

    /// Every second reported so far.
    pub fn total(&self) -> WaitSecs {
        self.total
    }

    /// The growth between the oldest kept sample and the newest, and the seconds between them (up to just past
    /// [`RECENT_S`], shorter while the view has watched for less); `None` before two samples.
    pub fn recent(&self) -> Option<(f64, WaitSecs)> {
        let (&(t0, a), &(t1, b)) = (self.samples.front()?, self.samples.back()?);
        if t1 <= t0 {
            return None;
        }
        let mut out = [0.0; ProxyWait::ALL.len()];
        for (o, (b, a)) in out.iter_mut().zip(b.iter().zip(a)) {
            *o = (b - a).max(0.0);
        }
        Some((t1 - t0, out))
    }

    pub fn clear(&mut self) {
        *self = ProxyWaits::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64, data: f64, peer: f64) -> ProxyOp {
        ProxyOp {
            seq,
            waits: vec![(ProxyWait::WaitingForData, data), (ProxyWait::WaitingForPeer, peer)],
            ..ProxyOp::default()
        }
    }

    const DATA: usize = ProxyWait::WaitingForData.index();
    const PEER: usize = ProxyWait::WaitingForPeer.index();

    #[test]
    fn repeated_reports_add_only_their_growth_and_new_calls_add_all() {
        let mut w = ProxyWaits::default();
        w.observe(&op(1, 1.0, 0.5));
        w.observe(&op(1, 1.0, 0.5)); // the same report again (a snapshot re-read)
        w.observe(&op(1, 2.0, 1.0)); // the call went on
        w.observe(&op(2, 0.25, 3.0)); // the next call on the connection
        assert_eq!((w.total()[DATA], w.total()[PEER]), (2.25, 4.0));
        let t = ProxyTally { last: op(5, 1.0, 1.0), ops: 3, sum: op(5, 3.0, 3.0) };
        w.tally(&t);
        w.observe(&t.last); // its row in the next snapshot
        assert_eq!((w.total()[DATA], w.total()[PEER]), (5.25, 7.0));
    }

    #[test]
    fn the_recent_window_is_the_growth_over_the_last_ten_seconds_not_since_start() {
        let mut w = ProxyWaits::default();
        assert_eq!(w.recent(), None);
        // Twenty seconds of a job that first waited for its peer, then for data.
        for s in 0..=20 {
            let (data, peer) = if s <= 10 { (0.0, s as f64) } else { ((s - 10) as f64, 10.0) };
            w.observe(&op(1, data, peer));
            w.sample(s as f64);
        }
        let (span, recent) = w.recent().unwrap();
        assert_eq!(span, RECENT_S);
        assert_eq!((recent[DATA], recent[PEER]), (10.0, 0.0));
        assert_eq!((w.total()[DATA], w.total()[PEER]), (10.0, 10.0));
        // Watched for less than the window: the window says how long it covers.
        let mut w = ProxyWaits::default();
        w.sample(0.0);
        w.observe(&op(1, 0.5, 0.0));
        w.sample(3.0);
        assert_eq!(w.recent().map(|(span, r)| (span, r[DATA])), Some((3.0, 0.5)));
    }
}
