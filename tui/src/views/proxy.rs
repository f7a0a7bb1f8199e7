//! Proxy: per channel and peer, how many steps were posted, transmitted and done, and where the steps waited.

use super::style::{bar, bold, selected};
use crate::app::App;
use crate::live::Live;
use collscope_model::{ProxyOp, ProxyWait, Snapshot};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::collections::BTreeMap;

fn draw(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    if s.proxy.is_empty() {
        frame.render_widget(Paragraph::new("No proxy progress in this source (logs do not carry it)."), area);
        return;
    }
    let waits_height = WAITS.len() as u16 + 2;
    let [table, waits] = Layout::vertical([Constraint::Min(3), Constraint::Length(waits_height)]).areas(area);
    let mut lines = vec![Line::styled(
        format!(
            "{:<3} {:<8} {:<4} {:<14} {:<14} {:<14} {:>5}",
            "ch", "link", "dir", "posted", "transmitted", "done", "steps"
        ),
        bold(),
    )];
    let room = (table.height as usize).saturating_sub(1).max(1);
    let first = app.row.saturating_sub(room - 1);
    for (i, p) in s.proxy.iter().enumerate().skip(first).take(room) {
        let line = Line::raw(format!(
            "{:02}  {:<8} {:<4} {} {} {} {:>5}",
            p.channel,
            format!("{} {} {}", p.rank, if p.send { "->" } else { "<-" }, p.peer),
            if p.send { "send" } else { "recv" },
            progress(p.posted, p.n_steps),
            progress(p.transmitted, p.n_steps),
            progress(p.done, p.n_steps),
            p.n_steps
        ));
        lines.push(if i == app.row { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), table);

    let mut totals: BTreeMap<ProxyWait, f64> = BTreeMap::new();
    for (w, secs) in s.proxy.iter().flat_map(|p: &ProxyOp| &p.waits) {
        *totals.entry(*w).or_default() += secs;
    }
    let sum: f64 = totals.values().sum();
    let mut lines = vec![Line::styled(format!("Where steps waited ({sum:.2} s over all sub-operations)"), bold())];
    for w in WAITS {
        let secs = totals.get(&w).copied().unwrap_or(0.0);
        let frac = if sum > 0.0 { secs / sum } else { 0.0 };
        lines.push(Line::raw(format!("{:<26} {} {:>5.1}% {secs:>7.3} s", wait_name(w), bar(frac, 30), frac * 100.0)));
    }
    frame.render_widget(Paragraph::new(lines), waits);
}

/// `█████····· 48`: a 10-cell bar and the count.
fn progress(steps: u64, of: u64) -> String {
    let frac = if of == 0 { 0.0 } else { steps as f64 / of as f64 };
    format!("{} {steps:>3}", bar(frac, 10))
}

fn wait_name(w: ProxyWait) -> &'static str {
    match w {
        ProxyWait::WaitingForData => "waiting for data (GPU)",
        ProxyWait::WaitingForPeer => "waiting for peer (credit)",
        ProxyWait::WaitingForSendCompletion => "waiting for send to finish",
        ProxyWait::WaitingForRecv => "waiting for receive",
        ProxyWait::WaitingForFlush => "waiting for flush",
    }
}

/// Every wait state, in the order a step passes through them.
const WAITS: [ProxyWait; 5] = [
    ProxyWait::WaitingForData,
    ProxyWait::WaitingForPeer,
    ProxyWait::WaitingForSendCompletion,
    ProxyWait::WaitingForRecv,
    ProxyWait::WaitingForFlush,
];

pub struct Proxy;

impl super::View for Proxy {
    fn title(&self) -> &'static str {
        "Proxy"
    }

    fn hint(&self) -> &'static str {
        "j/k row  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, &live.snapshot)
    }

    fn rows(&self, _app: &App, s: &Snapshot) -> usize {
        s.proxy.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn progress_bars_and_wait_breakdown() {
        let app = App { tab: Tab::Proxy, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("00  3 -> 4   send ████████··  48 ██████····  40 █████·····  32    64"), "{text}");
        assert!(text.contains("00  4 <- 3   recv ██████████  64 ██████····  36 █████·····  30    64"), "{text}");
        assert!(text.contains("Where steps waited (0.80 s over all sub-operations)"), "{text}");
        assert!(text.contains("waiting for peer (credit)  ███████████···················  37.5%   0.300 s"), "{text}");
        assert!(text.contains("waiting for data (GPU)     ······························   0.0%   0.000 s"), "{text}");
    }
}
