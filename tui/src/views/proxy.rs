//! Proxy: the NET sub-operations (one per channel, peer and direction: its latest call), in flight first with
//! their call and age, the oldest one that stopped moving flagged, finished ones for `FINISHED_KEEP_S` after
//! their last step; then where steps waited since this view began watching and over the last `RECENT_S` seconds
//! (`crate::proxy_waits`), each column named by its window.

use super::style::{bar, bold, dim, selected};
use crate::app::App;
use crate::live::{LinkState, Live};
use crate::proxy_waits::{WaitSecs, RECENT_S};
use collscope_model::{ProxyOp, ProxyWait, Snapshot, Source, Transport};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::time::SystemTime;

/// How long a finished sub-operation stays listed after its last step (seconds).
const FINISHED_KEEP_S: f64 = 10.0;
/// An unfinished sub-operation with no step for this long is stuck (seconds).
const STUCK_AFTER_S: f64 = 2.0;

/// What the Proxy view lists, in order: in-flight sub-operations oldest first, then finished ones newest first.
struct Listing<'a> {
    rows: Vec<&'a ProxyOp>,
    /// Index in `rows` of the oldest stuck sub-operation.
    stuck: Option<usize>,
    /// Finished sub-operations no longer listed.
    aged_out: usize,
}

fn secs_between(from_us: u64, to_us: u64) -> f64 {
    to_us.saturating_sub(from_us) as f64 / 1e6
}

fn listing(s: &Snapshot, now_us: u64) -> Listing<'_> {
    let in_flight = |p: &ProxyOp| p.done < p.n_steps;
    let mut running: Vec<&ProxyOp> = s.proxy.iter().filter(|p| in_flight(p)).collect();
    running.sort_by_key(|p| (p.started_us.unwrap_or(0), p.seq));
    // Sources without times (NCCL's profiler) keep every finished sub-operation.
    let recent = |p: &&ProxyOp| p.updated_us.is_none_or(|t| secs_between(t, now_us) <= FINISHED_KEEP_S);
    let finished: Vec<&ProxyOp> = s.proxy.iter().filter(|p| !in_flight(p)).collect();
    let mut kept: Vec<&ProxyOp> = finished.iter().copied().filter(recent).collect();
    kept.sort_by_key(|p| std::cmp::Reverse((p.updated_us.unwrap_or(0), p.seq)));
    let stuck = running.iter().position(|p| p.updated_us.is_some_and(|t| secs_between(t, now_us) >= STUCK_AFTER_S));
    let aged_out = finished.len() - kept.len();
    running.extend(kept);
    Listing { rows: running, stuck, aged_out }
}

/// `850 ms`, `12.3 s`, `4 min`, `3 h`.
fn age(secs: f64) -> String {
    if secs < 1.0 {
        format!("{:.0} ms", secs * 1e3)
    } else if secs < 60.0 {
        format!("{secs:.1} s")
    } else if secs < 3600.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.0} h", secs / 3600.0)
    }
}

/// The time the view measures ages against: the wall clock while a live source follows the job, else the
/// latest moment the source recorded (a log or replay read to its end).
fn now_us(live: &Live) -> u64 {
    match live.link {
        LinkState::Live { following: true } | LinkState::Disconnected { .. } => {
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
        }
        _ => live.snapshot.proxy.iter().filter_map(|p| p.updated_us).max().unwrap_or(0),
    }
}

/// Why the view has no sub-operation to list, in the source's terms.
fn empty_reason(s: &Snapshot) -> String {
    let transports: Vec<Transport> = s.connections.iter().map(|c| c.transport).collect();
    match s.source {
        Source::Log { .. } => "No proxy progress in this source (logs do not carry it).".into(),
        Source::Model { .. } => "No proxy progress in a model (nothing runs).".into(),
        Source::Runtime | Source::Profiler if !transports.is_empty() && !transports.contains(&Transport::Net) => {
            let mut names: Vec<&str> = transports.iter().map(|t| t.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            format!(
                "No NET connection: the proxy thread only serves NET (this rank's connections are {}).",
                names.join(", ")
            )
        }
        Source::Runtime | Source::Profiler => "No proxy sub-operation reported yet.".into(),
    }
}

fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live, now_us: u64) {
    let s = &live.snapshot;
    if s.proxy.is_empty() {
        frame.render_widget(Paragraph::new(empty_reason(s)), area);
        return;
    }
    let list = listing(s, now_us);
    let waits_height = ProxyWait::ALL.len() as u16 + 3;
    let [table, waits] = Layout::vertical([Constraint::Min(3), Constraint::Length(waits_height)]).areas(area);
    let running = list.rows.iter().filter(|p| p.done < p.n_steps).count();
    let mut lines = vec![
        Line::styled(
            format!(
                "{running} in flight, {} finished (listed for {FINISHED_KEEP_S:.0} s after their last step; {} older \
                 hidden)",
                list.rows.len() - running,
                list.aged_out
            ),
            dim(),
        ),
        Line::styled(
            format!(
                "{:>6} {:>7} {:<2} {:<8} {:<4} {:<10} {:<10} {:<10} {:>5}",
                "seq", "age", "ch", "link", "dir", "posted", "transmit", "done", "steps"
            ),
            bold(),
        ),
    ];
    let room = (table.height as usize).saturating_sub(2).max(1);
    let first = app.row.saturating_sub(room - 1);
    for (i, p) in list.rows.iter().enumerate().skip(first).take(room) {
        let finished = p.done >= p.n_steps;
        let when = if finished { p.updated_us } else { p.started_us };
        let mut text = format!(
            "{:>6} {:>7} {:02} {:<8} {:<4} {} {} {} {:>5}",
            p.seq,
            when.map_or("-".into(), |t| age(secs_between(t, now_us))),
            p.channel,
            format!("{} {} {}", p.rank, if p.send { "->" } else { "<-" }, p.peer),
            if p.send { "send" } else { "recv" },
            progress(p.posted, p.n_steps),
            progress(p.transmitted, p.n_steps),
            progress(p.done, p.n_steps),
            p.n_steps
        );
        let style = if list.stuck == Some(i) {
            let idle = p.updated_us.map_or(0.0, |t| secs_between(t, now_us));
            text.push_str(&format!(" STUCK {}", age(idle)));
            Style::default().fg(Color::Red)
        } else if finished {
            dim()
        } else {
            Style::default()
        };
        let line = Line::styled(text, style);
        lines.push(if i == app.row { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), table);

    // A followed live source is sampled once a second; elsewhere the view's clock says nothing of the job's.
    let followed = matches!(live.link, LinkState::Live { following: true });
    let recent = live.waits.recent().filter(|_| followed);
    let total = live.waits.total();
    let mut lines = vec![
        Line::styled("Where proxy steps waited (seconds summed over sub-operations)", bold()),
        Line::styled(
            format!(
                "{:<26} {:<25} {}",
                "",
                "since start",
                match recent {
                    Some((span, _)) => format!("last {}", age(span)),
                    None if followed => format!("last {RECENT_S:.0} s: no sample yet"),
                    None => format!("last {RECENT_S:.0} s: not followed"),
                }
            ),
            bold(),
        ),
    ];
    for w in ProxyWait::ALL {
        let mut line = format!("{:<26} {}", wait_name(w), share(&total, w));
        if let Some((_, r)) = &recent {
            line.push_str(&format!(" {}", share(r, w)));
        }
        lines.push(Line::raw(line));
    }
    frame.render_widget(Paragraph::new(lines), waits);
}

/// `████···· 48.2% 1.234 s`: one state's share of the window's wait seconds, and its seconds.
fn share(secs: &WaitSecs, w: ProxyWait) -> String {
    let sum: f64 = secs.iter().sum();
    let v = secs[w.index()];
    let frac = if sum > 0.0 { v / sum } else { 0.0 };
    format!("{} {:>5.1}% {v:>7.3} s", bar(frac, 8), frac * 100.0)
}

/// `███··· 48`: a 6-cell bar and the count.
fn progress(steps: u64, of: u64) -> String {
    let frac = if of == 0 { 0.0 } else { steps as f64 / of as f64 };
    format!("{} {steps:>3}", bar(frac, 6))
}

fn wait_name(w: ProxyWait) -> &'static str {
    match w {
        ProxyWait::WaitingForData => "waiting for data (GPU)",
        ProxyWait::WaitingForPeer => "waiting for peer (credit)",
        ProxyWait::WaitingForSendCompletion => "waiting for send to finish",
        ProxyWait::WaitingForRecv => "waiting for receive",
        ProxyWait::WaitingForFlush => "waiting for flush",
        ProxyWait::RecvGpuWait => "waiting for GPU to consume",
    }
}

pub(super) struct Proxy;

impl super::View for Proxy {
    fn title(&self) -> &'static str {
        "Proxy"
    }

    fn hint(&self) -> &'static str {
        "j/k row  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, live, now_us(live))
    }

    fn rows(&self, _app: &App, s: &Snapshot) -> usize {
        s.proxy.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{listing, FINISHED_KEEP_S};
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::live::{LinkState, Live, Update};
    use crate::views::testing::*;
    use collscope_model::{Connection, Direction, Event, ProxyOp, ProxyWait, Snapshot, Source, Transport};

    fn sub(seq: u64, channel: u32, done: u64, started_s: f64, updated_s: f64) -> ProxyOp {
        let us = |s: f64| Some((s * 1e6) as u64);
        ProxyOp {
            rank: 0,
            seq,
            channel,
            peer: 1,
            send: true,
            n_steps: 8,
            posted: 8,
            transmitted: 8,
            done,
            waits: vec![],
            started_us: us(started_s),
            updated_us: us(updated_s),
        }
    }

    #[test]
    fn in_flight_first_oldest_stuck_flagged_finished_aged_out() {
        let mut s = Snapshot::new(Source::Runtime);
        s.proxy = vec![
            sub(1, 0, 8, 0.1, 0.5),   // finished 19.5 s ago: past FINISHED_KEEP_S
            sub(6, 1, 8, 18.0, 19.0), // finished 1 s ago
            sub(6, 2, 3, 2.0, 19.5),  // in flight, moved 0.5 s ago
            sub(5, 3, 2, 1.0, 1.1),   // in flight, no step for 18.9 s: stuck
        ];
        const { assert!(19.5 > FINISHED_KEEP_S) };
        let list = listing(&s, 20_000_000);
        let order: Vec<(u64, u32)> = list.rows.iter().map(|p| (p.seq, p.channel)).collect();
        assert_eq!(order, [(5, 3), (6, 2), (6, 1)]);
        assert_eq!((list.stuck, list.aged_out), (Some(0), 1));
    }

    #[test]
    fn progress_bars_ages_and_the_wait_window() {
        let app = App { tab: Tab::Proxy, ..App::default() };
        // Read to its end: ages count to the source's last recorded step.
        let mut live = fixture::live();
        live.link = LinkState::Ended;
        let text = screen(&render(&app, &live, 80, 24));
        assert!(
            text.contains("2 in flight, 0 finished (listed for 10 s after their last step; 0 older hidden)"),
            "{text}"
        );
        assert!(text.contains("     3  450 ms 00 3 -> 4   send █████·  48 ████··  40 ███···  32    64"), "{text}");
        assert!(text.contains("     3  440 ms 00 4 <- 3   recv ██████  64 ███···  36 ███···  30    64"), "{text}");
        // Read to its end, the view's clock says nothing of the job's: no recent window, the total only.
        assert!(text.contains("since start               last 10 s: not followed"), "{text}");
        assert!(text.contains("waiting for peer (credit)  ███·····  37.5%   0.300 s\n"), "{text}");
        assert!(!text.contains("STUCK"), "{text}");
        // Followed live, long after the fixture's steps: the oldest in-flight one is flagged.
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        let stuck: Vec<&str> = text.lines().filter(|l| l.contains("STUCK")).collect();
        assert!(stuck.len() == 1 && stuck[0].contains("3 -> 4"), "{text}");
        assert_fits(&render(&app, &fixture::live(), 80, 24));
    }

    #[test]
    fn a_followed_job_shows_its_last_ten_seconds_beside_the_total_each_named_by_its_window() {
        let app = App { tab: Tab::Proxy, ..App::default() };
        let mut live = Live::new("test");
        live.apply(Update::Link(LinkState::Live { following: true }));
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("No proxy sub-operation reported yet."), "{text}");
        // Ten seconds waiting for the peer, then ten waiting for data, one call a second on one connection.
        for s in 0..=20u64 {
            let (wait, other) = if s <= 10 {
                (ProxyWait::WaitingForPeer, ProxyWait::WaitingForData)
            } else {
                (ProxyWait::WaitingForData, ProxyWait::WaitingForPeer)
            };
            let op = ProxyOp { seq: s, waits: vec![(wait, 1.0), (other, 0.0)], ..sub(s, 0, 8, 0.0, 0.0) };
            live.apply(Update::Event(Box::new(Event::Proxy(op))));
            live.sample(s as f64);
        }
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("since start               last 10.0 s"), "{text}");
        assert!(
            text.contains("waiting for data (GPU)     ████····  47.6%  10.000 s ████████ 100.0%  10.000 s"),
            "{text}"
        );
        assert!(
            text.contains("waiting for peer (credit)  ████····  52.4%  11.000 s ········   0.0%   0.000 s"),
            "{text}"
        );
        assert_fits(&render(&app, &live, 80, 24));
    }

    #[test]
    fn without_sub_operations_the_view_says_why_in_the_sources_terms() {
        let app = App { tab: Tab::Proxy, ..App::default() };
        let mut s = Snapshot::new(Source::Runtime);
        s.connections = vec![
            Connection::new(0, 0, 1, Direction::Send, Transport::Shm),
            Connection::new(1, 0, 1, Direction::Send, Transport::P2p),
            Connection::new(2, 0, 1, Direction::Send, Transport::Shm),
        ];
        let mut live = Live::with_snapshot("test", s.clone());
        live.link = LinkState::Live { following: true };
        let text = screen(&render(&app, &live, 100, 24));
        assert!(
            text.contains(
                "No NET connection: the proxy thread only serves NET (this rank's connections are P2P, SHM)."
            ),
            "{text}"
        );
        assert!(!text.contains("logs do not carry it"), "{text}");
        // A NET connection whose sub-operations have not been reported yet is not said to be missing.
        s.connections.push(Connection::new(3, 0, 2, Direction::Send, Transport::Net));
        let text = screen(&render(&app, &Live::with_snapshot("test", s), 100, 24));
        assert!(text.contains("No proxy sub-operation reported yet."), "{text}");
        let log = Snapshot::new(Source::Log { files: vec!["a.log".into()] });
        let text = screen(&render(&app, &Live::with_snapshot("test", log), 100, 24));
        assert!(text.contains("No proxy progress in this source (logs do not carry it)."), "{text}");
    }
}
