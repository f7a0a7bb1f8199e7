//! Rings: per channel, the ring as a cycle of ranks grouped by host, each edge tagged and coloured by its
//! transport, with the full transport and live rate per edge below.

use super::style::{bold, dim, edge_tag, fmt_rate, rank_host, sparkline, transport_label, EdgeKind};
use crate::app::{ring_channels, App, Key};
use crate::live::Live;
use crate::rings::{ring_paths, RingPath};
use crate::traffic::EdgeKey;
use collscope_model::Snapshot;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    let s = &live.snapshot;
    let channels = ring_channels(s);
    if channels.is_empty() {
        frame.render_widget(Paragraph::new(format!("No rings in {} yet.", s.source.describe())), area);
        return;
    }
    let [list, main] = Layout::horizontal([Constraint::Length(9), Constraint::Min(20)]).areas(area);
    let current = app.channel.min(channels.len() - 1);
    super::channel_list(frame, list, &channels, current);

    let channel = channels[current];
    let paths: Vec<RingPath> = ring_paths(s).into_iter().filter(|r| r.channel == channel).collect();
    let mut lines = Vec::new();
    let mut edges: Vec<(u32, u32)> = Vec::new();
    if paths.iter().any(|p| p.from_connections) {
        let parts = paths.len();
        let src = s.source.describe();
        let title = format!("Channel {channel:02}: no ring order in {src}; {parts} part(s) from connection lines");
        lines.push(Line::styled(title, bold()));
    }
    for p in &paths {
        if !p.from_connections {
            let what = if p.closed {
                "data flows left to right and wraps"
            } else {
                "partial: the rest was not in the source, so the ring is not closed"
            };
            lines.push(Line::styled(format!("Channel {channel:02}: {} ranks, {what}", p.order.len()), bold()));
        }
        lines.extend(cycle_lines(s, channel, &p.order, p.closed, main.width as usize));
        let n = p.order.len();
        let count = if p.closed { n } else { n.saturating_sub(1) };
        edges.extend((0..count).map(|i| (p.order[i], p.order[(i + 1) % n])));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(format!("{:<10} {:<22} {:>10}  {}", "edge", "transport", "rate", "history"), bold()));
    let room = (main.height as usize).saturating_sub(lines.len());
    let first = app.row.min(edges.len().saturating_sub(room.max(1)));
    for &(src, dst) in edges.iter().skip(first).take(room) {
        let conn = s.edge(channel, src, dst).connection();
        let kind = EdgeKind::of(conn);
        let label = conn.map(transport_label).unwrap_or_else(|| "?".into());
        let (rate, hist) = match live.sent_on(EdgeKey { channel, src, dst }) {
            Some(t) => (fmt_rate(t.rate), sparkline(&t.history, 16)),
            None => ("-".into(), String::new()),
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{:<10} ", format!("{src} -> {dst}"))),
            Span::styled(format!("{label:<22}"), kind.style()),
            Span::raw(format!(" {rate:>10}  ")),
            Span::styled(hist, kind.style()),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), main);
}

/// One row per run of ranks on the same host: `node-a  0 ─P2P▶ 1 ─SHM▶ 2 ─NET+GDR▶`, wrapped to `width`;
/// on a closed ring the last edge returns to the first rank (`↺ 0`).
fn cycle_lines(s: &Snapshot, channel: u32, order: &[u32], closed: bool, width: usize) -> Vec<Line<'static>> {
    let host_width = order.iter().filter_map(|r| rank_host(s, *r)).map(str::len).max().unwrap_or(0).min(16);
    let mut lines: Vec<Line> = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let mut used = 0usize;
    let mut host: Option<Option<&str>> = None;
    for (i, &rank) in order.iter().enumerate() {
        let h = rank_host(s, rank);
        if host != Some(h) {
            if !spans.is_empty() {
                lines.push(Line::from(std::mem::take(&mut spans)));
            }
            let name: String = h.unwrap_or("").chars().take(host_width).collect();
            spans.push(Span::styled(format!("{name:<host_width$} "), dim()));
            used = host_width + 1;
            host = Some(h);
        }
        let next = order[(i + 1) % order.len()];
        let conn = s.edge(channel, rank, next).connection();
        let (kind, tag) = (EdgeKind::of(conn), edge_tag(conn));
        let rank_text = format!("{rank}");
        let last = i + 1 == order.len();
        let edge_text = if last && !closed {
            String::new()
        } else if last {
            format!(" ─{tag}▶ ↺ {next}")
        } else {
            format!(" ─{tag}▶ ")
        };
        let need = rank_text.len() + edge_text.chars().count();
        if used + need > width && used > host_width + 1 {
            lines.push(Line::from(std::mem::take(&mut spans)));
            spans.push(Span::raw(" ".repeat(host_width + 1)));
            used = host_width + 1;
        }
        spans.push(Span::styled(rank_text, bold()));
        spans.push(Span::styled(edge_text, kind.style()));
        used += need;
    }
    if !spans.is_empty() {
        lines.push(Line::from(spans));
    }
    lines
}

pub(super) struct Rings;

impl super::View for Rings {
    fn title(&self) -> &'static str {
        "Rings"
    }

    fn hint(&self) -> &'static str {
        "[ ] channel  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, live)
    }

    fn rows(&self, app: &App, s: &Snapshot) -> usize {
        ring_channels(s)
            .get(app.channel)
            .map_or(0, |ch| ring_paths(s).iter().filter(|r| r.channel == *ch).map(|r| r.order.len()).sum())
    }

    fn key(&self, app: &mut App, key: Key, s: &Snapshot) -> bool {
        super::step_channel(app, key, ring_channels(s).len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;
    use collscope_model::Ring;
    use ratatui::style::Color;

    #[test]
    fn ring_rows_are_grouped_by_host_with_transport_tags_and_rates() {
        let app = App { tab: Tab::Rings, ..App::default() };
        let lines = render(&app, &fixture::live(), 80, 24);
        let text = screen(&lines);
        assert!(lines[1].starts_with(">ch 00") && lines[2].starts_with(" ch 01"), "{text}");
        assert!(text.contains("node-a 0 ─P2P▶ 1 ─P2P▶ 2 ─SHM▶ 3 ─NET+GDR▶"), "{text}");
        assert!(text.contains("node-b 4 ─P2P▶ 5 ─P2P▶ 6 ─P2P▶ 7 ─NET▶ ↺ 0"), "{text}");
        assert!(text.contains("3 -> 4     NET/IB/0/GDRDMA          1.0 GB/s  █"), "{text}");
        assert!(text.contains("0 -> 1     P2P/IPC/read            10.0 GB/s  █"), "{text}");
        assert!(text.contains("7 -> 0     NET/IB/1                        -"), "{text}");
    }

    #[test]
    fn next_channel_shows_its_ring_and_unknown_edges() {
        let app = App { tab: Tab::Rings, channel: 1, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("node-b 7 ─P2P▶ 6 ─?▶ 5 ─?▶ 4 ─NET▶"), "{text}");
        assert!(text.contains("0 ─NET+GDR▶ ↺ 7"), "{text}");
    }

    #[test]
    fn edges_are_coloured_by_kind() {
        let app = App { tab: Tab::Rings, ..App::default() };
        let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
        let live = fixture::live();
        terminal.draw(|f| crate::views::draw(f, &app, &live)).unwrap();
        let buf = terminal.backend().buffer();
        let find = |needle: &str| {
            (0..24u16)
                .find_map(|y| {
                    let row: String = (0..80u16).map(|x| buf[(x, y)].symbol().to_string()).collect();
                    row.find(needle).map(|byte| (row[..byte].chars().count() as u16, y))
                })
                .unwrap_or_else(|| panic!("{needle} not on screen"))
        };
        let (x, y) = find("NET+GDR▶");
        assert_eq!(buf[(x, y)].fg, Color::Cyan);
        let (x, y) = find("SHM▶");
        assert_eq!(buf[(x, y)].fg, Color::Yellow);
        let (x, y) = find("NET▶ ↺");
        assert_eq!(buf[(x, y)].fg, Color::Red);
    }

    #[test]
    fn long_rings_wrap_to_the_width() {
        let mut s = fixture::snapshot();
        s.rings = vec![Ring { channel: 0, order: (0..40).collect(), truncated: false, neighbours: vec![] }];
        s.communicators.clear();
        let lines = cycle_lines(&s, 0, &s.rings[0].order, true, 60);
        assert!(lines.len() > 2 && lines.iter().all(|l| l.width() <= 60));
    }
}
