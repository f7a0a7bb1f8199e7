//! Ops: the live operation log, newest last (or slowest first, `s`), filtered by `/` text on collective,
//! algorithm, protocol, state, rank or communicator, paused by space.

use super::style::{bold, dim, fmt_bytes, fmt_us, selected};
use crate::app::{App, Key};
use crate::live::Live;
use collscope_model::{OpRecord, OpState, Snapshot};
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// The words an operation is matched on.
fn matches(o: &OpRecord, filter: &str) -> bool {
    if filter.is_empty() {
        return true;
    }
    let f = filter.to_ascii_lowercase();
    let words = [
        o.coll.as_str().to_string(),
        o.algo.map(|a| a.as_str().to_string()).unwrap_or_default(),
        o.proto.map(|p| p.as_str().to_string()).unwrap_or_default(),
        format!("{:?}", o.state),
        format!("rank{}", o.rank),
        o.comm.as_deref().unwrap_or_default().to_string(),
    ];
    f.split_whitespace().all(|term| words.iter().any(|w| w.to_ascii_lowercase().contains(term)))
}

/// The operations listed, in the order shown: those up to the pause, filtered, by call or slowest first.
fn listed<'a>(app: &App, s: &'a Snapshot) -> Vec<&'a OpRecord> {
    let mut ops: Vec<&OpRecord> =
        s.ops.iter().filter(|o| app.ops_paused.is_none_or(|at| o.seq <= at) && matches(o, &app.filter)).collect();
    if app.ops_by_time {
        // Running calls have no duration yet: they come last.
        ops.sort_by(|a, b| b.duration_us.unwrap_or(-1.0).total_cmp(&a.duration_us.unwrap_or(-1.0)));
    }
    ops
}

fn draw(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let ops = listed(app, s);
    let mut title = if app.filter.is_empty() {
        format!("{} operations", ops.len())
    } else {
        format!("{} of {} operations match '{}'", ops.len(), s.ops.len(), app.filter)
    };
    if app.ops_by_time {
        title.push_str(", slowest first (s: by call)");
    }
    if let Some(at) = app.ops_paused {
        let newer = s.ops.iter().filter(|o| o.seq > at).count();
        title.push_str(&format!(", PAUSED at #{at}: {newer} newer not shown (space resumes)"));
    }
    let mut lines = vec![
        Line::styled(title, dim()),
        Line::styled(
            format!(
                "{:>4} {:>6} {:<13} {:>9} {:<12} {:>3} {:>7} {:>9} {:>8} {}",
                "rank", "seq", "collective", "size", "algo/proto", "ch", "state", "time", "busbw", "communicator"
            ),
            bold(),
        ),
    ];
    let room = (area.height as usize).saturating_sub(2).max(1);
    let follow = app.follow_ops && app.ops_paused.is_none() && !app.ops_by_time;
    let first = if follow { ops.len().saturating_sub(room) } else { app.row.saturating_sub(room - 1) };
    for (i, o) in ops.iter().enumerate().skip(first).take(room) {
        let algo = match (o.algo, o.proto) {
            (Some(a), Some(p)) => format!("{a}/{p}"),
            (Some(a), None) => a.to_string(),
            _ => "-".into(),
        };
        let (state, colour) = match o.state {
            OpState::Enqueued => ("queued", Color::DarkGray),
            OpState::Started => ("running", Color::Yellow),
            OpState::Completed => ("done", Color::Reset),
            OpState::Failed => ("FAILED", Color::Red),
        };
        let line = Line::styled(
            format!(
                // The communicator last, shown where the terminal is wider than 80 columns.
                "{:>4} {:>6} {:<13} {:>9} {:<12} {:>3} {:>7} {:>9} {:>8} {}",
                o.rank,
                o.seq,
                o.coll.as_str(),
                fmt_bytes(o.bytes),
                algo,
                o.n_channels.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
                state,
                o.duration_us.map(fmt_us).unwrap_or_else(|| "-".into()),
                o.busbw_gbps.map(|b| format!("{b:.2}")).unwrap_or_else(|| "-".into()),
                // Its name (live sources) or its handle (a log's).
                o.comm.as_deref().unwrap_or("-"),
            ),
            Style::default().fg(colour),
        );
        let is_selected = !follow && i == app.row;
        lines.push(if is_selected { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

pub(super) struct Ops;

impl super::View for Ops {
    fn title(&self) -> &'static str {
        "Ops"
    }

    fn hint(&self) -> &'static str {
        "/ filter  Esc clear  space pause  s sort  j/k G  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, &live.snapshot)
    }

    fn rows(&self, app: &App, s: &Snapshot) -> usize {
        listed(app, s).len()
    }

    fn key(&self, app: &mut App, key: Key, s: &Snapshot) -> bool {
        match key {
            Key::Char('/') => app.editing_filter = true,
            Key::Char(' ') => {
                app.ops_paused = match app.ops_paused {
                    Some(_) => None,
                    None => Some(s.ops.iter().map(|o| o.seq).max().unwrap_or(0)),
                }
            }
            Key::Char('s') => {
                app.ops_by_time ^= true;
                app.row = 0;
            }
            _ => return false,
        }
        true
    }

    /// The newest operation stays in view while the selection is on the last row.
    fn moved(&self, app: &mut App, rows: usize) {
        app.follow_ops = app.row + 1 >= rows;
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Key, Tab};
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn the_log_lists_operations_and_the_filter_narrows_it() {
        let app = App { tab: Tab::Ops, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("3 operations"), "{text}");
        assert!(
            text.contains("   0      1 AllReduce       4.0 KiB Tree/LL        2    done    490 us     0.01"),
            "{text}"
        );
        assert!(
            text.contains("   0      3 AllReduce      64.0 MiB Ring/Simple    2 running         -        -"),
            "{text}"
        );
        let app = App { tab: Tab::Ops, filter: "ring ll128".into(), ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("1 of 3 operations match 'ring ll128'"), "{text}");
        assert!(text.contains("AllGather") && !text.contains("AllReduce "), "{text}");
    }

    #[test]
    fn a_wide_terminal_shows_each_calls_communicator_and_the_filter_matches_it() {
        let mut live = fixture::live();
        live.snapshot.ops[0].comm = Some("tp0".into());
        let app = App { tab: Tab::Ops, ..App::default() };
        let text = screen(&render(&app, &live, 100, 24));
        assert!(text.contains("    busbw communicator"), "{text}");
        assert!(
            text.contains("   0      1 AllReduce       4.0 KiB Tree/LL        2    done    490 us     0.01 tp0"),
            "{text}"
        );
        assert!(text.contains("       - 0x1"), "the others keep their handle:\n{text}");
        let app = App { tab: Tab::Ops, filter: "tp0".into(), ..App::default() };
        let text = screen(&render(&app, &live, 100, 24));
        assert!(text.contains("1 of 3 operations match 'tp0'"), "{text}");
    }

    #[test]
    fn space_pauses_s_sorts_slowest_first() {
        let mut s = fixture::snapshot();
        s.ops[1].duration_us = Some(900.0);
        let mut live = fixture::live();
        live.snapshot = s.clone();
        let mut app = App { tab: Tab::Ops, ..App::default() };
        app.key(Key::Char(' '), &s);
        assert_eq!(app.ops_paused, Some(3));
        // A call that arrives while paused waits.
        let mut newer = s.ops[0].clone();
        newer.seq = 4;
        live.snapshot.ops.push_back(newer);
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("3 operations, PAUSED at #3: 1 newer not shown"), "{text}");
        assert!(!text.contains("      4 AllReduce"), "{text}");
        app.key(Key::Char(' '), &s);
        app.key(Key::Char('s'), &s);
        let lines = render(&app, &live, 80, 24);
        let seqs: Vec<&str> = lines[3..7].iter().map(|l| l.split_whitespace().nth(1).unwrap_or("")).collect();
        assert_eq!(seqs, ["2", "1", "4", "3"], "{}", screen(&lines));
        assert!(lines[1].contains("4 operations, slowest first"), "{}", lines[1]);
    }
}
