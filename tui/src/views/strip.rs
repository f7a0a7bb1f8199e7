//! The rank strip of a live job, above every view: one line per rank (host, state, the communicator, its last
//! completed call, the call in flight and its age, bus bandwidth, p50/p99 duration), the stuck ranks (named by an error finding,
//! failed or not answering) in red, the slow one (the straggler) in yellow, the one shown marked `>`; in the
//! order the user chose (`o`: rank, state, age), by rank until then.

use super::style;
use crate::app::{App, StripOrder};
use crate::live::Live;
use collscope_model::{CommProgress, JobView, RankState, RankSummary, Severity};
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Rank lines shown at most; past them a last line counts the rest.
const MAX_LINES: usize = 8;

/// The strip's height: nothing without a job view, else a title and a line per rank (bounded).
pub(super) fn height(live: &Live, area: Rect) -> u16 {
    let Some(job) = live.job.as_ref().filter(|j| !j.ranks.is_empty()) else { return 0 };
    let lines = job.ranks.len().min(MAX_LINES) + 1 + usize::from(job.ranks.len() > MAX_LINES);
    (lines as u16).min(area.height / 3)
}

fn stuck(job: &JobView, r: &RankSummary) -> bool {
    matches!(r.state, RankState::Failed | RankState::Unreachable)
        || job.findings.iter().any(|f| f.rank == Some(r.rank) && f.severity == Severity::Error)
}

fn slow(job: &JobView, r: &RankSummary) -> bool {
    job.findings.iter().any(|f| f.rank == Some(r.rank) && f.code == "straggler")
}

fn state(r: &RankSummary) -> &'static str {
    match r.state {
        RankState::Running => "running",
        RankState::Idle => "idle",
        RankState::Failed => "failed",
        RankState::Unreachable => "no answer",
    }
}

/// The communicator with the oldest call in flight, which says most about the rank.
fn oldest(r: &RankSummary) -> Option<&CommProgress> {
    let age = |c: &&CommProgress| c.in_flight.as_ref().map_or(-1.0, |f| f.age_s);
    r.comms.iter().filter(|c| c.in_flight.is_some()).max_by(|a, b| age(a).total_cmp(&age(b)))
}

/// The ranks in `order`.
fn ordered(job: &JobView, order: StripOrder) -> Vec<&RankSummary> {
    let mut ranks: Vec<&RankSummary> = job.ranks.iter().collect();
    match order {
        StripOrder::Rank => ranks.sort_by_key(|r| r.rank),
        StripOrder::State => ranks.sort_by_key(|r| (!stuck(job, r), !slow(job, r), r.rank)),
        // Whole seconds: calls that started together keep their ranks' order as their ages grow.
        StripOrder::Age => ranks.sort_by_key(|r| {
            let age = oldest(r).and_then(|c| c.in_flight.as_ref()).map(|f| f.age_s as u64);
            (std::cmp::Reverse(age), r.rank)
        }),
    }
    ranks
}

fn line(r: &RankSummary, shown: bool) -> String {
    // The communicator with the oldest call in flight says most; else the first.
    let comm = oldest(r).or(r.comms.first());
    // Its given name, else how the rank's calls name it.
    let name = comm.and_then(|c| c.name.as_deref().or(c.comm.as_deref())).unwrap_or("-");
    let done = comm.and_then(|c| c.last_completed).map_or("-".into(), |s| format!("#{s}"));
    let running = comm
        .and_then(|c| c.in_flight.as_ref())
        .map_or("-".into(), |f| format!("{} #{} {:.1}s", f.coll, f.seq, f.age_s));
    let ms = |v: Option<f64>| v.map_or("-".into(), |us| format!("{:.1}", us / 1e3));
    // 80 columns: the units are in the title line.
    format!(
        "{}r{:<4}{:<8.8}{:<10}{:<9.8}{:<8}{:<22.22}{:>6} {:>6}/{}",
        if shown { '>' } else { ' ' },
        r.rank,
        r.host.as_deref().unwrap_or("?"),
        state(r),
        name,
        done,
        running,
        r.busbw_gbps.map_or("-".into(), |g| format!("{g:.2}")),
        ms(r.p50_us),
        ms(r.p99_us),
    )
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    let Some(job) = &live.job else { return };
    let shown = live.shown_rank.map_or_else(|| "the connected rank".to_string(), |r| format!("rank {r}"));
    let order = app.strip_order.as_str();
    let title = match &live.notice {
        Some(notice) => format!("Job: {} ranks; {notice}", job.ranks.len()),
        None => format!("Job: {} ranks, showing {shown} (< >, o: by {order})", job.ranks.len()),
    };
    let mut lines = vec![Line::styled(format!("{title:<68}GB/s p50/p99 ms"), style::bold())];
    let ranks = ordered(job, app.strip_order);
    let room = (area.height as usize).saturating_sub(1);
    let fit = if ranks.len() > room { room.saturating_sub(1) } else { ranks.len() };
    for r in &ranks[..fit] {
        let colour = if stuck(job, r) {
            Style::default().fg(Color::Red)
        } else if slow(job, r) {
            Style::default().fg(Color::Yellow)
        } else {
            Style::default()
        };
        lines.push(Line::styled(line(r, live.shown_rank == Some(r.rank)), colour));
    }
    if fit < ranks.len() {
        lines.push(Line::styled(format!(" ... {} more ranks", ranks.len() - fit), style::dim()));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Key, StripOrder};
    use crate::fixture;
    use crate::live::Update;
    use crate::views::testing::render;
    use collscope_model::{Collective, RankEndpoint};
    use collscope_model::{CommProgress, Finding, InFlight, JobView, RankState, RankSummary, Severity};

    fn rank(rank: u32, in_flight: Option<(u64, f64)>) -> RankSummary {
        RankSummary {
            rank,
            host: Some("node1".into()),
            url: None,
            state: if in_flight.is_some() { RankState::Running } else { RankState::Idle },
            comms: vec![CommProgress {
                comm: Some("0x5eed".into()),
                name: Some("tp0".into()),
                last_completed: Some(41),
                last_completed_us: None,
                in_flight: in_flight.map(|(seq, age_s)| InFlight {
                    seq,
                    coll: Collective::AllReduce,
                    bytes: 1 << 20,
                    age_s,
                }),
                recent_starts: vec![],
                recent_calls: Vec::new(),
            }],
            busbw_gbps: Some(1.5),
            p50_us: Some(900.0),
            p99_us: Some(4000.0),
            error: None,
            edges: Default::default(),
            pid: None,
            process: None,
            stalls: Vec::new(),
        }
    }

    #[test]
    fn every_rank_has_a_line_and_by_state_the_stuck_one_comes_first_with_its_finding_shown() {
        let mut live = fixture::live();
        let gone = RankEndpoint { rank: 3, host: "node2".into(), url: "http://127.0.0.1:9".into(), pid: None };
        let stuck = Finding {
            code: "rank_not_arrived".into(),
            severity: Severity::Error,
            rank: Some(3),
            title: "rank 3 has not arrived at AllReduce #42".into(),
            detail: String::new(),
            evidence: vec![],
            fix: String::new(),
        };
        let ranks = vec![
            rank(0, Some((42, 5.0))),
            rank(1, Some((42, 5.0))),
            rank(2, Some((42, 4.0))),
            RankSummary::unreachable(&gone, "timed out".into()),
        ];
        live.apply(Update::Job(Box::new(JobView { ranks, findings: vec![stuck.clone()], ..Default::default() })));
        let lines = render(&App { strip_order: StripOrder::State, ..App::default() }, &live, 80, 24);
        crate::views::testing::assert_fits(&lines);
        let strip = &lines[1..6];
        assert!(strip[0].starts_with("Job: 4 ranks, showing the connected rank (< >, o: by state)"), "{strip:?}");
        assert!(strip[1].starts_with(" r3   node2   no answer"), "{strip:?}");
        // The communicator by the name it was given, not its handle.
        assert_eq!(strip[2], " r0   node1   running   tp0      #41     AllReduce #42 5.0s      1.50    0.9/4.0");
        assert!(live.snapshot.findings.contains(&stuck), "the job's findings are in the Findings view");
        // A new job view replaces the old one's findings.
        live.apply(Update::Job(Box::default()));
        assert!(!live.snapshot.findings.contains(&stuck));
    }

    /// The rank of each strip line, top to bottom.
    fn order(app: &App, live: &crate::Live) -> Vec<String> {
        let lines = render(app, live, 80, 24);
        crate::views::testing::assert_fits(&lines);
        lines[2..6].iter().map(|l| l[1..4].trim().to_string()).collect()
    }

    #[test]
    fn the_strip_keeps_the_order_chosen_across_refreshes_and_o_cycles_it() {
        let mut live = fixture::live();
        let slow = |rank| Finding {
            code: "straggler".into(),
            severity: Severity::Warning,
            rank: Some(rank),
            title: format!("rank {rank} is slow"),
            detail: String::new(),
            evidence: vec![],
            fix: String::new(),
        };
        // A hang as the job view refreshes: the calls age, and the straggler named changes.
        let view = |t: f64, straggler| JobView {
            ranks: vec![rank(0, Some((42, 3.2 + t))), rank(1, None), rank(2, Some((42, 3.7 + t))), rank(3, None)],
            findings: vec![slow(straggler)],
            ..Default::default()
        };
        let mut app = App::default();
        for (t, straggler) in [(0.0, 3), (1.0, 1), (2.0, 3)] {
            live.apply(Update::Job(Box::new(view(t, straggler))));
            assert_eq!(order(&app, &live), ["r0", "r1", "r2", "r3"], "by rank, whatever changes");
        }
        assert!(render(&app, &live, 80, 24)[1].contains("(< >, o: by rank)"));
        app.key(Key::Char('o'), &live.snapshot);
        assert_eq!(app.strip_order, StripOrder::State);
        assert_eq!(order(&app, &live), ["r3", "r0", "r1", "r2"], "the straggler first");
        app.key(Key::Char('o'), &live.snapshot);
        // By age: 5.7 s and 5.2 s are 5 whole seconds, so those two stay by rank; ranks with no call last.
        assert_eq!(order(&app, &live), ["r0", "r2", "r1", "r3"]);
        live.apply(Update::Job(Box::new(view(2.5, 3))));
        assert_eq!(order(&app, &live), ["r2", "r0", "r1", "r3"], "6.2 s is older than 5.7 s");
        assert!(render(&app, &live, 80, 24)[1].contains("(< >, o: by age)"));
        app.key(Key::Char('o'), &live.snapshot);
        assert_eq!(order(&app, &live), ["r0", "r1", "r2", "r3"]);
    }
}
