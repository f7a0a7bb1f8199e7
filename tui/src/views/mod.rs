//! Drawing: a tab bar with the link state, the selected view, and a help bar of the keys that view takes.

mod channels;
mod findings;
mod help;
mod ops;
mod overview;
mod proxy;
#[cfg(test)]
mod real_logs;
mod rings;
pub mod style;
mod trees;
mod tuning;

use crate::app::{App, Tab};
use crate::live::{LinkState, Live};
use collscope_model::Source;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Tabs};
use ratatui::Frame;

pub fn draw(frame: &mut Frame, app: &App, live: &Live) {
    let [top, body, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)]).areas(frame.area());
    draw_top(frame, top, app, live);
    let s = &live.snapshot;
    match app.tab {
        Tab::Overview => overview::draw(frame, body, live),
        Tab::Rings => rings::draw(frame, body, app, live),
        Tab::Trees => trees::draw(frame, body, app, s),
        Tab::Channels => channels::draw(frame, body, app, live),
        Tab::Proxy => proxy::draw(frame, body, app, s),
        Tab::Tuning => tuning::draw(frame, body, app, s),
        Tab::Ops => ops::draw(frame, body, app, s),
        Tab::Findings => findings::draw(frame, body, app, s),
    }
    frame.render_widget(Paragraph::new(help::bar(app)).style(style::dim()), bottom);
    if app.show_help {
        help::draw_full(frame, frame.area());
    }
}

/// The channel list at the left of Rings and Trees; the selected one is marked and kept in view.
fn channel_list(frame: &mut Frame, area: Rect, channels: &[u32], current: usize) {
    let items: Vec<Line> = channels
        .iter()
        .enumerate()
        .map(|(i, ch)| {
            if i == current {
                Line::styled(format!(">ch {ch:02}"), style::selected())
            } else {
                Line::raw(format!(" ch {ch:02}"))
            }
        })
        .skip(current.saturating_sub(area.height.saturating_sub(1) as usize))
        .collect();
    frame.render_widget(Paragraph::new(items).block(Block::new().borders(Borders::RIGHT)), area);
}

fn draw_top(frame: &mut Frame, area: Rect, app: &App, live: &Live) {
    // A modelled machine has no link to watch: the bar says what it is instead.
    let link = match live.snapshot.source {
        Source::Model { .. } => Span::styled("model", Style::default().fg(Color::Magenta)),
        _ => link_span(&live.link),
    };
    let width = link.width() as u16 + 1;
    let [tabs_area, link_area] = Layout::horizontal([Constraint::Min(10), Constraint::Length(width)]).areas(area);
    let titles = Tab::ALL.iter().enumerate().map(|(i, t)| format!("{}{}", i + 1, t.title()));
    let selected = Tab::ALL.iter().position(|t| *t == app.tab).unwrap_or(0);
    let tabs = Tabs::new(titles)
        .select(selected)
        .padding("", "")
        .divider(" ")
        .highlight_style(Style::default().fg(Color::Black).bg(Color::Cyan));
    frame.render_widget(tabs, tabs_area);
    frame.render_widget(Paragraph::new(Line::from(vec![Span::raw(" "), link])), link_area);
}

fn link_span(link: &LinkState) -> Span<'static> {
    match link {
        LinkState::Connecting => Span::styled("connecting", Style::default().fg(Color::Yellow)),
        LinkState::Live { following: true } => Span::styled("live", Style::default().fg(Color::Green)),
        LinkState::Live { following: false } => Span::styled("reading", Style::default().fg(Color::Green)),
        LinkState::Disconnected { retry_in_s, .. } => {
            Span::styled(format!("disconnected, retry {retry_in_s}s"), Style::default().fg(Color::Red))
        }
        LinkState::Ended => Span::styled("ended", style::dim()),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Renders a view into a TestBackend and returns the screen as text lines.

    use crate::app::App;
    use crate::live::Live;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    pub fn render(app: &App, live: &Live, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
        terminal.draw(|f| super::draw(f, app, live)).expect("draw");
        let buf = terminal.backend().buffer();
        (0..height)
            .map(|y| (0..width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string())
            .collect()
    }

    pub fn screen(lines: &[String]) -> String {
        lines.join("\n")
    }

    pub fn assert_fits(lines: &[String]) {
        assert!(lines.iter().all(|l| unicode_width(l) <= 80), "{}", screen(lines));
    }

    fn unicode_width(s: &str) -> usize {
        s.chars().count()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use crate::app::{App, Tab};
    use crate::fixture;
    use crate::live::LinkState;

    #[test]
    fn every_view_draws_at_80x24_and_shows_the_tabs_and_keys() {
        let live = fixture::live();
        for tab in Tab::ALL {
            let app = App { tab, ..App::default() };
            let lines = render(&app, &live, 80, 24);
            assert!(lines[0].starts_with("1Overview 2Rings 3Trees"), "{}", lines[0]);
            assert!(lines[0].ends_with("live"), "{}", lines[0]);
            assert!(lines[23].contains("q quit") && lines[23].contains("? help"), "{tab:?}: {}", lines[23]);
            assert_fits(&lines);
        }
    }

    #[test]
    fn a_tiny_terminal_does_not_panic() {
        let live = fixture::live();
        for tab in Tab::ALL {
            render(&App { tab, show_help: true, ..App::default() }, &live, 20, 5);
        }
    }

    #[test]
    fn a_lost_source_says_disconnected() {
        let mut live = fixture::live();
        live.link = LinkState::Disconnected { reason: "connection refused".into(), retry_in_s: 2 };
        let lines = render(&App::default(), &live, 100, 24);
        assert!(lines[0].ends_with("disconnected, retry 2s"), "{}", lines[0]);
    }

    #[test]
    fn question_mark_shows_the_full_help() {
        let live = fixture::live();
        let lines = render(&App { show_help: true, ..App::default() }, &live, 80, 24);
        let text = screen(&lines);
        assert!(text.contains("Keys") && text.contains("filter operations") && text.contains("evidence"), "{text}");
    }
}
