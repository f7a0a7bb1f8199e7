//! Ops: the live operation log, newest last, filtered by `/` text on collective, algorithm, protocol or state.

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
    ];
    f.split_whitespace().all(|term| words.iter().any(|w| w.to_ascii_lowercase().contains(term)))
}

fn draw(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let ops: Vec<&OpRecord> = s.ops.iter().filter(|o| matches(o, &app.filter)).collect();
    let title = if app.filter.is_empty() {
        format!("{} operations", ops.len())
    } else {
        format!("{} of {} operations match '{}'", ops.len(), s.ops.len(), app.filter)
    };
    let mut lines = vec![
        Line::styled(title, dim()),
        Line::styled(
            format!(
                "{:>6} {:<13} {:>9} {:<12} {:>3} {:>9} {:>9} {:>8}",
                "seq", "collective", "size", "algo/proto", "ch", "state", "time", "busbw"
            ),
            bold(),
        ),
    ];
    let room = (area.height as usize).saturating_sub(2).max(1);
    let first = if app.follow_ops { ops.len().saturating_sub(room) } else { app.row.saturating_sub(room - 1) };
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
                "{:>6} {:<13} {:>9} {:<12} {:>3} {:>9} {:>9} {:>8}",
                o.seq,
                o.coll.as_str(),
                fmt_bytes(o.bytes),
                algo,
                o.n_channels.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
                state,
                o.duration_us.map(fmt_us).unwrap_or_else(|| "-".into()),
                o.busbw_gbps.map(|b| format!("{b:.2}")).unwrap_or_else(|| "-".into()),
            ),
            Style::default().fg(colour),
        );
        let is_selected = !app.follow_ops && i == app.row;
        lines.push(if is_selected { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

pub struct Ops;

impl super::View for Ops {
    fn title(&self) -> &'static str {
        "Ops"
    }

    fn hint(&self) -> &'static str {
        "/ filter  Esc clear  j/k G  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, &live.snapshot)
    }

    fn rows(&self, _app: &App, s: &Snapshot) -> usize {
        s.ops.len()
    }

    fn key(&self, app: &mut App, key: Key, _s: &Snapshot) -> bool {
        let filter = key == Key::Char('/');
        app.editing_filter |= filter;
        filter
    }

    /// The newest operation stays in view while the selection is on the last row.
    fn moved(&self, app: &mut App, rows: usize) {
        app.follow_ops = app.row + 1 >= rows;
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn the_log_lists_operations_and_the_filter_narrows_it() {
        let app = App { tab: Tab::Ops, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("3 operations"), "{text}");
        assert!(
            text.contains("     1 AllReduce       4.0 KiB Tree/LL        2      done    490 us     0.01"),
            "{text}"
        );
        assert!(
            text.contains("     3 AllReduce      64.0 MiB Ring/Simple    2   running         -        -"),
            "{text}"
        );
        let app = App { tab: Tab::Ops, filter: "ring ll128".into(), ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("1 of 3 operations match 'ring ll128'"), "{text}");
        assert!(text.contains("AllGather") && !text.contains("AllReduce "), "{text}");
    }
}
