//! Plays a recording back at the pace it was recorded, on the recording's own clock ([`Update::Clock`] before
//! the updates of each moment, so rates are the recorded bytes over recorded seconds whatever the pace). The user
//! pauses it and seeks in it ([`ReplayCmd`]): a seek forward plays what lies between at once; a seek back starts
//! the picture over ([`Update::Restart`]) from the nearest keyframe (a whole snapshot) at or before the new moment,
//! with the job view last recorded before it, and plays the events from there at once, so the picture is the one
//! the recording showed then, with no call missing.

use super::recording::RecordedEvent;
use super::stream::Decoded;
use crate::app::ReplayCmd;
use crate::live::{LinkState, Update};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How often the position shown is brought up to date while nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// Events decoded up front, so a bad recording is reported before the screen opens.
pub(super) struct Timeline(Vec<(f64, Update)>);

impl Timeline {
    pub(super) fn decode(events: Vec<RecordedEvent>) -> Result<Self, super::SourceError> {
        let mut timeline = Vec::new();
        for e in events {
            // A recording holds the snapshots that were fetched, so "fetch again" needs nothing here.
            if let Decoded::Update(u) = super::decode(&e.event, &e.data)? {
                timeline.push((e.t.max(0.0), u));
            }
        }
        Ok(Timeline(timeline))
    }

    /// The recording's length: the time of its last event.
    fn length(&self) -> f64 {
        self.0.iter().map(|(t, _)| *t).fold(0.0, f64::max)
    }

    /// Where a picture of moment `to` is rebuilt from: the last keyframe at or before it (else the start), and
    /// the last job view recorded before that keyframe (the strip and the job's findings, until the next one).
    fn rebuild_from(&self, to: f64) -> (usize, Option<usize>) {
        let played = &self.0[..self.0.partition_point(|(t, _)| *t <= to)];
        let Some(key) = played.iter().rposition(|(_, u)| matches!(u, Update::Snapshot(_))) else { return (0, None) };
        (key, played[..key].iter().rposition(|(_, u)| matches!(u, Update::Job(_))))
    }
}

/// The replay's position in the recording: where it was when last paused, resumed or moved, and since when it
/// plays (`None` while paused).
struct Clock {
    at: f64,
    playing_since: Option<Instant>,
}

impl Clock {
    fn now(&self) -> f64 {
        self.at + self.playing_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    fn set(&mut self, at: f64) {
        self.at = at;
        self.playing_since = self.playing_since.map(|_| Instant::now());
    }

    fn toggle(&mut self) {
        self.at = self.now();
        self.playing_since = match self.playing_since {
            Some(_) => None,
            None => Some(Instant::now()),
        };
    }
}

/// Plays `timeline` into `tx` until `stop` or the UI hangs up, obeying `control`. At its end the replay stays,
/// so the user can still seek back.
pub(super) fn run(timeline: Timeline, tx: &Sender<Update>, control: &Receiver<ReplayCmd>, stop: &AtomicBool) {
    let length = timeline.length();
    let mut clock = Clock { at: 0.0, playing_since: Some(Instant::now()) };
    let mut next = 0;
    let mut shown = None;
    // The recording's time last sent as the source's clock.
    let mut told = f64::NEG_INFINITY;
    let tell = |t: f64, told: &mut f64| {
        let sent = t <= *told || tx.send(Update::Clock(t)).is_ok();
        *told = told.max(t);
        sent
    };
    while !stop.load(Ordering::Relaxed) {
        let at = clock.now().min(length);
        for (t, update) in timeline.0[next..].iter().take_while(|(t, _)| *t <= at) {
            if !tell(*t, &mut told) || tx.send(update.clone()).is_err() {
                return;
            }
            next += 1;
        }
        if !tell(at, &mut told) {
            return;
        }
        // Both in whole tenths, so the end shows as at == length.
        let tenths = |s: f64| (s * 10.0).floor() / 10.0;
        let state =
            LinkState::Replay { at_s: tenths(at), length_s: tenths(length), paused: clock.playing_since.is_none() };
        if shown.as_ref() != Some(&state) {
            if tx.send(Update::Link(state.clone())).is_err() {
                return;
            }
            shown = Some(state);
        }
        let due = match (&clock.playing_since, timeline.0.get(next)) {
            (Some(_), Some((t, _))) => Duration::from_secs_f64((t - at).max(0.0)).min(TICK),
            _ => TICK,
        };
        match control.recv_timeout(due) {
            Ok(ReplayCmd::TogglePause) => clock.toggle(),
            Ok(ReplayCmd::Seek(by)) => {
                let to = (at + by).clamp(0.0, length);
                if to < at {
                    let (from, job) = timeline.rebuild_from(to);
                    if tx.send(Update::Restart).is_err() {
                        return;
                    }
                    told = f64::NEG_INFINITY;
                    if let Some((t, job)) = job.map(|j| &timeline.0[j]) {
                        if !tell(*t, &mut told) || tx.send(job.clone()).is_err() {
                            return;
                        }
                    }
                    next = from;
                }
                clock.set(to);
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Nobody steers this replay: it plays on.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(due),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Snapshot, Source};
    use std::sync::mpsc;

    fn snapshot(nranks: u32) -> Update {
        Update::Snapshot(Box::new(Snapshot { nranks: Some(nranks), ..Snapshot::new(Source::Runtime) }))
    }

    /// Receives until `want` arrives (within 5 s), returning what came before it but the clock.
    fn until(rx: &Receiver<Update>, want: impl Fn(&Update) -> bool) -> Vec<Update> {
        until_with_clock(rx, want).into_iter().filter(|u| !matches!(u, Update::Clock(_))).collect()
    }

    fn until_with_clock(rx: &Receiver<Update>, want: impl Fn(&Update) -> bool) -> Vec<Update> {
        let mut seen = Vec::new();
        loop {
            let u = rx.recv_timeout(Duration::from_secs(5)).expect("the replay keeps sending");
            if want(&u) {
                return seen;
            }
            seen.push(u);
        }
    }

    fn at(u: &Update) -> Option<(f64, bool)> {
        match u {
            Update::Link(LinkState::Replay { at_s, paused, .. }) => Some((*at_s, *paused)),
            _ => None,
        }
    }

    #[test]
    fn pauses_seeks_forward_at_once_and_back_by_starting_over() {
        // Three pictures 0, 60 and 120 s apart: only seeking reaches the later ones within the test.
        let timeline = Timeline(vec![(0.0, snapshot(1)), (60.0, snapshot(2)), (120.04, snapshot(3))]);
        let (tx, rx) = mpsc::channel();
        let (ctl, control) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let replay = {
            let stop = stop.clone();
            std::thread::spawn(move || run(timeline, &tx, &control, &stop))
        };
        assert_eq!(until(&rx, |u| at(u).is_some()), [snapshot(1)]);
        ctl.send(ReplayCmd::TogglePause).unwrap();
        until(&rx, |u| at(u).is_some_and(|(_, paused)| paused));
        // Forward 90 s while paused: the picture of 60 s arrives at once, the position says 90 s, paused.
        ctl.send(ReplayCmd::Seek(90.0)).unwrap();
        let before = until(&rx, |u| at(u).is_some_and(|(t, paused)| (90.0..90.2).contains(&t) && paused));
        assert!(before.contains(&snapshot(2)) && !before.contains(&snapshot(3)), "{before:?}");
        // Back 80 s: the picture starts over and plays to 10 s (only the first one).
        ctl.send(ReplayCmd::Seek(-80.0)).unwrap();
        let before = until(&rx, |u| at(u).is_some_and(|(t, _)| t < 11.0));
        assert_eq!(before, [Update::Restart, snapshot(1)]);
        // Past the end: the position stops at the recording's length (in tenths, as shown).
        ctl.send(ReplayCmd::Seek(500.0)).unwrap();
        let before = until(
            &rx,
            |u| matches!(u, Update::Link(LinkState::Replay { at_s, length_s, .. }) if at_s == length_s && *at_s == 120.0),
        );
        assert_eq!(before, [snapshot(2), snapshot(3)]);
        stop.store(true, Ordering::Relaxed);
        replay.join().unwrap();
    }

    /// A recording of 60 s: a call completed and 1 MB sent on one edge every second, a keyframe every 20 s
    /// (the snapshot as it was then) and a job view every 5 s. Seeking forward then back rebuilds from the
    /// keyframe before the new moment, with the job view before it, and the calls run whole; the rate is
    /// 1 MB/s, on the recording's clock, though the seek played 50 s at once.
    #[test]
    fn a_seek_back_rebuilds_from_the_nearest_keyframe_and_rates_are_on_the_recordings_clock() {
        use crate::fixture::op as record;
        use crate::live::Live;
        use crate::traffic::EdgeKey;
        use collscope_model::{
            Algorithm, ChannelTraffic, Collective, Direction, Event, JobView, OpState, Protocol, Transport,
        };
        let op = |seq| record(seq, Collective::AllReduce, 4096, Algorithm::Ring, Protocol::Simple, OpState::Completed);
        let traffic = Event::Traffic(ChannelTraffic {
            rank: 0,
            channel: 0,
            peer: 1,
            direction: Direction::Send,
            transport: Some(Transport::Shm),
            bytes: 1_000_000,
            in_place_bytes: None,
            seconds: 0.01,
        });
        let mut timeline = Vec::new();
        let mut picture = Live::new("recorded");
        for second in 0..=60u64 {
            let t = second as f64;
            if second % 20 == 0 {
                timeline.push((t, Update::Snapshot(Box::new(picture.snapshot.clone()))));
            }
            if second % 5 == 0 {
                let job = JobView { not_arrived_after_s: Some(t), ..Default::default() };
                timeline.push((t + 0.5, Update::Job(Box::new(job))));
            }
            for event in [Event::OpCompleted(op(second)), traffic.clone()] {
                picture.apply(Update::Event(Box::new(event.clone())));
                timeline.push((t + 0.25, Update::Event(Box::new(event))));
            }
        }
        let (tx, rx) = mpsc::channel();
        let (ctl, control) = mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let replay = {
            let stop = stop.clone();
            std::thread::spawn(move || run(Timeline(timeline), &tx, &control, &stop))
        };
        let mut live = Live::new("replay");
        let mut apply = |updates: Vec<Update>| updates.into_iter().for_each(|u| live.apply(u));
        ctl.send(ReplayCmd::TogglePause).unwrap();
        apply(until_with_clock(&rx, |u| at(u).is_some_and(|(_, paused)| paused)));
        ctl.send(ReplayCmd::Seek(50.0)).unwrap();
        apply(until_with_clock(&rx, |u| at(u).is_some_and(|(t, _)| t >= 50.0)));
        ctl.send(ReplayCmd::Seek(-15.0)).unwrap();
        let back = until_with_clock(&rx, |u| at(u).is_some_and(|(t, _)| t < 40.0));
        // From the keyframe of 20 s (not the start), after the job view of 15 s.
        let restart = back.iter().position(|u| *u == Update::Restart).expect("the picture starts over");
        let after: Vec<&Update> = back[restart..].iter().filter(|u| !matches!(u, Update::Clock(_))).collect();
        assert!(matches!(after[1], Update::Job(j) if j.not_arrived_after_s == Some(15.0)), "{:?}", after[1]);
        assert!(matches!(after[2], Update::Snapshot(s) if s.ops.len() == 20), "{:?}", after[2]);
        apply(back);
        let seqs: Vec<u64> = live.snapshot.ops.iter().map(|o| o.seq).collect();
        assert_eq!(seqs, (0..=34).collect::<Vec<_>>(), "every call up to 35 s, none missing");
        assert_eq!(live.job.as_ref().and_then(|j| j.not_arrived_after_s), Some(30.0));
        let edge = live.traffic.get(EdgeKey { channel: 0, src: 0, dst: 1 }).expect("the edge");
        assert_eq!(edge.rate, 1_000_000.0, "{edge:?}");
        stop.store(true, Ordering::Relaxed);
        replay.join().unwrap();
    }
}
