//! Channels: every connection as channel x peer x direction with bytes sent (the sender's count) and received
//! (the receiver's), rate, a rate sparkline, transport and GDR, wider columns on wider terminals (which also show
//! the share of the sent bytes moved in place, where the source tells); for a machine without connections (a
//! model computed on one GPU), the channel counts and each graph's channels.

use super::style::{bold, fmt_bytes, fmt_rate, selected, sparkline, transport_label, EdgeKind};
use crate::app::App;
use crate::live::Live;
use crate::traffic::{EdgeKey, HISTORY};
use collscope_model::{Direction, Snapshot};
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

fn draw(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    let s = &live.snapshot;
    if s.connections.is_empty() {
        if s.graphs.is_empty() {
            frame.render_widget(Paragraph::new(format!("No connections in {}.", s.source.describe())), area);
        } else {
            draw_graph_channels(frame, area, app, s);
        }
        return;
    }
    // Columns besides transport and history; the transport column and then the history take what the
    // terminal has beyond them (the history only where it has at least 8 columns).
    const FIXED: usize = 57;
    // The share moved in place, where the terminal has room for it beside the narrowest transport column.
    const IN_PLACE: usize = 9;
    let in_place = area.width as usize >= FIXED + IN_PLACE + 20;
    let fixed = if in_place { FIXED + IN_PLACE } else { FIXED };
    let spare = (area.width as usize).saturating_sub(fixed);
    let tw = (spare / 2).clamp(20, 48);
    let hw = spare.saturating_sub(tw).min(HISTORY);
    let hw = if hw < 8 { 0 } else { hw };
    let mut lines = vec![Line::styled(
        format!(
            "{:<3} {:<9} {:<4} {:<tw$} {:<4} {:>9} {:>9} {:>10} {}{}",
            "ch",
            "peer",
            "dir",
            "transport",
            "GDR",
            "sent",
            "received",
            "rate",
            if in_place { format!("{:>8} ", "in place") } else { String::new() },
            if hw > 0 { "rate history" } else { "" }
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
        let traffic = live.sent_on(EdgeKey { channel: c.channel, src: c.src, dst: c.dst });
        let (bytes, rate, hist) = match traffic {
            Some(t) => (fmt_bytes(t.bytes), fmt_rate(t.rate), sparkline(&t.history, hw)),
            None => ("-".into(), "-".into(), String::new()),
        };
        let share = if in_place {
            let pct = traffic.filter(|t| t.bytes > 0).and_then(|t| Some(100.0 * t.in_place? as f64 / t.bytes as f64));
            format!("{:>8} ", pct.map_or_else(|| "-".into(), |p| format!("{p:.0}%")))
        } else {
            String::new()
        };
        let received = live.received_on(EdgeKey { channel: c.channel, src: c.src, dst: c.dst });
        let received = received.map_or("-".into(), |t| fmt_bytes(t.bytes));
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
            Span::raw(format!("{gdr:<4} {bytes:>9} {received:>9} {rate:>10} {share}")),
            Span::styled(hist, kind.style()),
        ]);
        lines.push(if i == app.row { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

pub(super) struct Channels;

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
        // A modelled machine has no connections; its graphs' channels are listed instead.
        if s.connections.is_empty() {
            s.graphs.iter().map(|g| g.channels.len()).sum()
        } else {
            s.connections.len()
        }
    }
}

/// The channel counts connect settled on, then every channel of every graph: its GPUs inside the node (by
/// local rank) and the NET devices it enters and leaves by.
fn draw_graph_channels(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let c = &s.channels;
    let n = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let mut lines = vec![
        Line::styled(
            format!(
                "{} coll, {} collnet, {} nvls, {} p2p channels, {} p2p per peer",
                n(c.coll),
                n(c.collnet),
                n(c.nvls),
                n(c.p2p),
                n(c.p2p_per_peer)
            ),
            bold(),
        ),
        Line::styled(format!("{:<14} {:<3} {:<40} NET in/out", "graph", "ch", "GPUs in the node"), bold()),
    ];
    let rows: Vec<String> = s
        .graphs
        .iter()
        .flat_map(|g| {
            g.channels.iter().enumerate().map(move |(i, ch)| {
                let gpus: Vec<String> = ch.intra.iter().map(i32::to_string).collect();
                let nets: Vec<String> = ch.inter.iter().map(i64::to_string).collect();
                format!("{:<14} {i:02}  {:<40} {}", format!("{:?}", g.pattern), gpus.join(" "), nets.join("/"))
            })
        })
        .collect();
    let room = (area.height as usize).saturating_sub(2).max(1);
    let first = app.row.saturating_sub(room - 1).min(rows.len().saturating_sub(room));
    for (i, row) in rows.into_iter().enumerate().skip(first).take(room) {
        lines.push(if i == app.row { Line::styled(row, selected()) } else { Line::raw(row) });
    }
    frame.render_widget(Paragraph::new(lines), area);
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
        assert!(text.contains("00  0 -> 1         P2P/IPC/read         -      9.3 GiB         -  10.0 GB/s"), "{text}");
        assert!(text.contains("00  3 -> 4    send NET/IB/0/GDRDMA      yes  953.7 MiB         -   1.0 GB/s"), "{text}");
        assert!(text.contains("00  7 -> 0    send NET/IB/1             no"), "{text}");
        assert!(text.contains("01  0 -> 7    send NET/IB/0/GDRDMA      yes          -         -          -"), "{text}");
        assert_fits(&lines);
    }

    #[test]
    fn wide_terminals_widen_the_table_and_add_received_bytes_and_the_share_moved_in_place() {
        let app = App { tab: Tab::Channels, ..App::default() };
        let mut live = fixture::live();
        live.received.set_total(crate::traffic::EdgeKey { channel: 0, src: 3, dst: 4 }, 3 << 20, None);
        // A quarter of what 0 sent to 1 moved in place; 3 -> 4's source does not tell.
        let e01 = crate::traffic::EdgeKey { channel: 0, src: 0, dst: 1 };
        live.traffic.set_total(e01, 10_000_000_000, Some(2_500_000_000));
        let lines = render(&app, &live, 200, 60);
        let text = screen(&lines);
        assert!(lines[1].contains("received") && lines[1].ends_with("in place rate history"), "{text}");
        let row = lines.iter().find(|l| l.starts_with("00  3 -> 4    send")).unwrap();
        assert!(row.contains("953.7 MiB   3.0 MiB   1.0 GB/s        - █"), "{text}");
        let p2p = lines.iter().find(|l| l.starts_with("00  0 -> 1")).unwrap();
        assert!(p2p.contains("10.0 GB/s      25% █"), "{text}");
        // The transport column grew past its 80-column width of 20.
        assert!(row.contains(&format!("NET/IB/0/GDRDMA{}yes", " ".repeat(48 - 15 + 1))), "{row}");
    }

    #[test]
    fn a_modelled_machine_lists_its_graphs_channels() {
        use collscope_model::{ChannelCounts, GraphChannel, PathType, Pattern, Source};
        let mut live = fixture::live();
        live.snapshot.source = Source::Model { topology: "preset:dgx-h100".into() };
        live.snapshot.connections.clear();
        live.snapshot.channels =
            ChannelCounts { coll: Some(16), collnet: None, nvls: Some(16), p2p: Some(16), p2p_per_peer: Some(2) };
        live.snapshot.graphs = vec![collscope_model::Graph {
            pattern: Pattern::Ring,
            n_channels: 2,
            bw_intra: 48.0,
            bw_inter: 48.0,
            type_intra: PathType::NVL,
            type_inter: PathType::PIX,
            same_channels: false,
            cross_nic: 2,
            channels: vec![
                GraphChannel { intra: vec![0, 7, 6, 5, 4, 3, 2, 1], inter: vec![0, 0] },
                GraphChannel { intra: vec![1, 2, 3, 4, 5, 6, 7, 0], inter: vec![1, 1] },
            ],
            host: None,
        }];
        let app = App { tab: Tab::Channels, row: 1, ..App::default() };
        let lines = render(&app, &live, 80, 24);
        let text = screen(&lines);
        assert!(lines[0].ends_with("model"), "{text}");
        assert_eq!(lines[1], "16 coll, - collnet, 16 nvls, 16 p2p channels, 2 p2p per peer", "{text}");
        assert!(lines[2].starts_with("graph          ch  GPUs in the node"), "{text}");
        assert_eq!(lines[3], "Ring           00  0 7 6 5 4 3 2 1                          0/0", "{text}");
        assert!(lines[4].starts_with("Ring           01  1 2 3 4 5 6 7 0"), "{text}");
        assert_fits(&lines);
        // Without graphs either, nothing to show.
        live.snapshot.graphs.clear();
        assert!(screen(&render(&app, &live, 80, 24)).contains("No connections in the model."));
    }
}
