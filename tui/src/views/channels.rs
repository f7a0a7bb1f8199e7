//! Channels: every connection as channel x peer x direction with bytes, rate, a rate sparkline, transport and GDR.

use super::style::{bold, fmt_bytes, fmt_rate, selected, sparkline, transport_label, EdgeKind};
use crate::app::App;
use crate::live::Live;
use crate::traffic::EdgeKey;
use collscope_model::{Direction, Snapshot};
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    let s = &live.snapshot;
    if s.connections.is_empty() {
        frame.render_widget(Paragraph::new("No connections in this source yet."), area);
        return;
    }
    // The transport column takes what the terminal has beyond 80 columns.
    let tw = (area.width as usize).saturating_sub(60).clamp(20, 40);
    let mut lines = vec![Line::styled(
        format!(
            "{:<3} {:<9} {:<4} {:<tw$} {:<4} {:>9} {:>10} {}",
            "ch", "peer", "dir", "transport", "GDR", "bytes", "rate", "rate history"
        ),
        bold(),
    )];
    let room = (area.height as usize).saturating_sub(1).max(1);
    let first = app.row.saturating_sub(room - 1).min(s.connections.len().saturating_sub(room));
    let mut conns: Vec<_> = s.connections.iter().collect();
    conns.sort_by_key(|c| (c.channel, c.src, c.dst, c.direction));
    for (i, c) in conns.into_iter().enumerate().skip(first).take(room) {
        let kind = EdgeKind::of(Some(c));
        let dir = match c.direction {
            Direction::Send => "send",
            Direction::Recv => "recv",
            Direction::Both => "",
        };
        let gdr = match c.gdrdma {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let traffic = live.traffic.get(EdgeKey { channel: c.channel, src: c.src, dst: c.dst });
        let (bytes, rate, hist) = match traffic {
            Some(t) => (fmt_bytes(t.bytes), fmt_rate(t.rate), sparkline(&t.history, 16)),
            None => ("-".into(), "-".into(), String::new()),
        };
        let mut label = transport_label(c);
        if label.chars().count() > tw {
            label = label.chars().take(tw - 1).chain(['…']).collect();
        }
        let line = Line::from(vec![
            Span::raw(format!(
                "{:<3} {:<9} {:<4} ",
                format!("{:02}", c.channel),
                format!("{} -> {}", c.src, c.dst),
                dir
            )),
            Span::styled(format!("{label:<tw$} "), kind.style()),
            Span::raw(format!("{gdr:<4} {bytes:>9} {rate:>10} ")),
            Span::styled(hist, kind.style()),
        ]);
        lines.push(if i == app.row { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

pub struct Channels;

impl super::View for Channels {
    fn title(&self) -> &'static str {
        "Channels"
    }

    fn hint(&self) -> &'static str {
        "j/k row  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, live)
    }

    fn rows(&self, _app: &App, s: &Snapshot) -> usize {
        s.connections.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn the_table_lists_each_connection_with_transport_gdr_and_traffic() {
        let app = App { tab: Tab::Channels, ..App::default() };
        let lines = render(&app, &fixture::live(), 80, 24);
        let text = screen(&lines);
        assert!(lines[1].starts_with("ch  peer      dir  transport"), "{text}");
        assert!(text.contains("00  0 -> 1         P2P/IPC/read         -      9.3 GiB  10.0 GB/s █"), "{text}");
        assert!(text.contains("00  3 -> 4    send NET/IB/0/GDRDMA      yes  953.7 MiB   1.0 GB/s █"), "{text}");
        assert!(text.contains("00  7 -> 0    send NET/IB/1             no"), "{text}");
        assert!(text.contains("01  0 -> 7    send NET/IB/0/GDRDMA      yes          -          -"), "{text}");
    }
}
