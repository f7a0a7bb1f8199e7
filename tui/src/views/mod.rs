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
mod strip;
pub mod style;
mod trees;
mod tuning;

use crate::app::{App, Key, ReplayCmd, Tab, SEEK_STEP_S};
use crate::live::{LinkState, Live};
use collscope_model::{Snapshot, Source};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Tabs};
use ratatui::Frame;

/// One view of the TUI: its tab title, its keys, how it draws and what it selects.
pub trait View {
    fn title(&self) -> &'static str;
    /// The view's own keys, for the key bar ("" when it has none; `?` lists them all).
    fn hint(&self) -> &'static str {
        ""
    }
    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live);
    /// Selectable (or scrollable) rows.
    fn rows(&self, _app: &App, _s: &Snapshot) -> usize {
        0
    }
    /// Takes a key only this view has; whether it did.
    fn key(&self, _app: &mut App, _key: Key, _s: &Snapshot) -> bool {
        false
    }
    /// After the selection moved, with the view's `rows`.
    fn moved(&self, _app: &mut App, _rows: usize) {}
}

/// The views in tab order, each named as a `Tab` constant and numbered by its place.
macro_rules! views {
    ($($tab:ident: $view:expr),* $(,)?) => {
        #[allow(non_upper_case_globals)]
        impl Tab {
            views!(@tabs 0; $($tab)*);
            pub const ALL: &[Tab] = &[$(Tab::$tab),*];
        }
        const VIEWS: &[&dyn View] = &[$(&$view),*];
    };
    (@tabs $i:expr; $tab:ident $($rest:ident)*) => {
        pub const $tab: Tab = Tab($i);
        views!(@tabs $i + 1; $($rest)*);
    };
    (@tabs $i:expr;) => {};
}

// The one list of views: adding a view is a file in this folder and a line here.
views! {
    Overview: overview::Overview,
    Rings: rings::Rings,
    Trees: trees::Trees,
    Channels: channels::Channels,
    Proxy: proxy::Proxy,
    Tuning: tuning::Tuning,
    Ops: ops::Ops,
    Findings: findings::Findings,
}

impl Tab {
    pub fn view(self) -> &'static dyn View {
        VIEWS[self.0]
    }

    pub fn title(self) -> &'static str {
        self.view().title()
    }
}

impl App {
    /// Applies a key. `snapshot` bounds selections. Returns whether anything changed.
    pub fn key(&mut self, key: Key, snapshot: &Snapshot) -> bool {
        let before = self.clone();
        if self.editing_filter {
            match key {
                Key::Enter => self.editing_filter = false,
                // As the help says: Esc clears the filter, also while it is typed.
                Key::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                Key::Backspace => {
                    self.filter.pop();
                }
                Key::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.row = 0;
            return *self != before;
        }
        if self.show_help {
            // Any key closes the help; `q` still quits.
            self.show_help = false;
            self.quit = key == Key::Char('q');
            return true;
        }
        let view = self.tab.view();
        if view.key(self, key, snapshot) {
            return *self != before;
        }
        let n = Tab::ALL.len();
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.show_help = true,
            Key::Tab | Key::Right | Key::Char('l') => self.switch(Tab::ALL[(self.tab.0 + 1) % n]),
            Key::BackTab | Key::Left | Key::Char('h') => self.switch(Tab::ALL[(self.tab.0 + n - 1) % n]),
            Key::Char(c) if c.to_digit(10).is_some_and(|d| (1..=n as u32).contains(&d)) => {
                self.switch(Tab::ALL[c as usize - '1' as usize])
            }
            Key::Char('>') => self.step_rank(1, &snapshot.endpoints),
            Key::Char('<') => self.step_rank(-1, &snapshot.endpoints),
            Key::Char('o') => self.strip_order = self.strip_order.next(),
            Key::Char('D') => self.dump_request = true,
            Key::Char('P') => self.replay_cmd = Some(ReplayCmd::TogglePause),
            Key::Char(',') => self.replay_cmd = Some(ReplayCmd::Seek(-SEEK_STEP_S)),
            Key::Char('.') => self.replay_cmd = Some(ReplayCmd::Seek(SEEK_STEP_S)),
            Key::Char(']') | Key::Char('n') => self.move_row(1, snapshot),
            Key::Char('[') | Key::Char('p') => self.move_row(-1, snapshot),
            Key::Down | Key::Char('j') => self.move_row(1, snapshot),
            Key::Up | Key::Char('k') => self.move_row(-1, snapshot),
            Key::PageDown => self.move_row(10, snapshot),
            Key::PageUp => self.move_row(-10, snapshot),
            Key::Home | Key::Char('g') => self.move_row(-(self.row as i64), snapshot),
            Key::End | Key::Char('G') => {
                self.row = view.rows(self, snapshot).saturating_sub(1);
                self.follow_ops = true;
            }
            Key::Esc => {
                self.detail = false;
                self.scroll = 0;
                self.filter.clear();
            }
            _ => {}
        }
        *self != before
    }

    fn move_row(&mut self, step: i64, snapshot: &Snapshot) {
        let view = self.tab.view();
        let n = view.rows(self, snapshot);
        self.row = (self.row as i64 + step).clamp(0, n.saturating_sub(1) as i64) as usize;
        view.moved(self, n);
    }
}

/// `]`/`n` and `[`/`p`: the step to the next or previous item.
fn bracket(key: Key) -> Option<i64> {
    match key {
        Key::Char(']') | Key::Char('n') => Some(1),
        Key::Char('[') | Key::Char('p') => Some(-1),
        _ => None,
    }
}

/// `[`/`]` over the `n` channels of Rings or Trees; whether `key` was one.
fn step_channel(app: &mut App, key: Key, n: usize) -> bool {
    let Some(step) = bracket(key) else { return false };
    if n > 0 {
        app.channel = (app.channel as i64 + step).rem_euclid(n as i64) as usize;
        app.row = 0;
    }
    true
}

pub fn draw(frame: &mut Frame, app: &App, live: &Live) {
    let strip_height = strip::height(live, frame.area());
    let [top, ranks, body, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(strip_height),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_top(frame, top, app, live);
    strip::draw(frame, ranks, app, live);
    app.tab.view().draw(frame, body, app, live);
    // A notice (a recording that stopped) takes the key bar's place: `?` still lists the keys.
    match &live.notice {
        Some(notice) => {
            frame.render_widget(Paragraph::new(notice.as_str()).style(Style::default().fg(Color::Yellow)), bottom)
        }
        None => frame.render_widget(Paragraph::new(help::bar(app)).style(style::dim()), bottom),
    }
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
    let selected = app.tab.0;
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
        LinkState::Replay { at_s, length_s, paused } => {
            let state = if *paused {
                "paused"
            } else if at_s >= length_s {
                "ended"
            } else {
                "playing"
            };
            Span::styled(format!("replay {state} {at_s:.1}/{length_s:.1} s"), Style::default().fg(Color::Cyan))
        }
        LinkState::Finished { clean: true } => Span::styled("job finished", Style::default().fg(Color::Green)),
        LinkState::Finished { clean: false } => Span::styled("rank failed, ended", Style::default().fg(Color::Red)),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Renders a view into a TestBackend and returns the screen as text lines.

    use crate::app::App;
    use crate::live::Live;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    pub(crate) fn render(app: &App, live: &Live, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
        terminal.draw(|f| super::draw(f, app, live)).expect("draw");
        let buf = terminal.backend().buffer();
        (0..height)
            .map(|y| (0..width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string())
            .collect()
    }

    pub(crate) fn screen(lines: &[String]) -> String {
        lines.join("\n")
    }

    pub(crate) fn assert_fits(lines: &[String]) {
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
        for &tab in Tab::ALL {
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
        for &tab in Tab::ALL {
            render(&App { tab, show_help: true, ..App::default() }, &live, 20, 5);
        }
    }

    #[test]
    fn a_replay_says_where_it_is_and_whether_it_plays() {
        let mut live = fixture::live();
        for (at_s, paused, says) in [
            (1.5, false, "replay playing 1.5/60.0 s"),
            (1.5, true, "replay paused 1.5/60.0 s"),
            (60.0, false, "replay ended 60.0/60.0 s"),
        ] {
            live.link = LinkState::Replay { at_s, length_s: 60.0, paused };
            let lines = render(&App::default(), &live, 100, 24);
            assert!(lines[0].ends_with(says), "{}", lines[0]);
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
        // At 80x24 every line fits inside the frame, the last one included.
        assert!(text.contains("Any key closes this help."), "{text}");
        assert!(lines.iter().all(|l| !l.contains('│') || l.trim_end().ends_with('│')), "{text}");
        assert_fits(&lines);
    }
}

#[cfg(test)]
mod keys {
    use crate::app::{App, Key, ReplayCmd, Tab, SEEK_STEP_S};
    use crate::fixture;
    use collscope_model::Collective;

    #[test]
    fn number_keys_tab_and_arrows_switch_views() {
        let s = fixture::snapshot();
        let mut app = App::default();
        assert!(app.key(Key::Char('2'), &s));
        assert_eq!(app.tab, Tab::Rings);
        app.key(Key::Tab, &s);
        assert_eq!(app.tab, Tab::Trees);
        app.key(Key::Left, &s);
        app.key(Key::Left, &s);
        assert_eq!(app.tab, Tab::Overview);
        app.key(Key::BackTab, &s);
        assert_eq!(app.tab, Tab::Findings);
        assert!(!app.key(Key::Char('z'), &s), "unbound keys change nothing");
    }

    #[test]
    fn brackets_cycle_channels_and_collectives() {
        let s = fixture::snapshot();
        let mut app = App { tab: Tab::Rings, ..App::default() };
        app.key(Key::Char(']'), &s);
        assert_eq!(app.channel, 1);
        app.key(Key::Char(']'), &s);
        assert_eq!(app.channel, 0, "wraps around the two ring channels");
        app.key(Key::Char('6'), &s);
        assert_eq!(app.collective, Collective::AllReduce);
        app.key(Key::Char('['), &s);
        assert_eq!(app.collective, Collective::AllGather);
    }

    #[test]
    fn capital_p_comma_and_dot_steer_a_replay_from_any_view() {
        let s = fixture::snapshot();
        let mut app = App::default();
        for (key, cmd) in
            [('P', ReplayCmd::TogglePause), (',', ReplayCmd::Seek(-SEEK_STEP_S)), ('.', ReplayCmd::Seek(SEEK_STEP_S))]
        {
            for &tab in Tab::ALL {
                app.switch(tab);
                app.replay_cmd = None;
                app.key(Key::Char(key), &s);
                assert_eq!(app.replay_cmd, Some(cmd), "{key} on {tab:?}");
            }
        }
    }

    #[test]
    fn slash_edits_the_ops_filter_until_enter() {
        let s = fixture::snapshot();
        let mut app = App { tab: Tab::Ops, ..App::default() };
        app.key(Key::Char('/'), &s);
        for c in "ring".chars() {
            app.key(Key::Char(c), &s);
        }
        app.key(Key::Char('q'), &s);
        assert!(!app.quit, "q is text while typing the filter");
        app.key(Key::Backspace, &s);
        app.key(Key::Enter, &s);
        assert_eq!(app.filter, "ring");
        assert!(!app.editing_filter);
        app.key(Key::Esc, &s);
        assert_eq!(app.filter, "");
        // Esc while typing clears what was typed.
        app.key(Key::Char('/'), &s);
        app.key(Key::Char('x'), &s);
        app.key(Key::Esc, &s);
        assert!(app.filter.is_empty() && !app.editing_filter);
    }

    #[test]
    fn help_closes_on_any_key_and_q_quits() {
        let s = fixture::snapshot();
        let mut app = App::default();
        app.key(Key::Char('?'), &s);
        assert!(app.show_help);
        app.key(Key::Char('x'), &s);
        assert!(!app.show_help && !app.quit);
        app.key(Key::Char('q'), &s);
        assert!(app.quit);
    }

    #[test]
    fn rows_are_bounded_by_the_snapshot() {
        let s = fixture::snapshot();
        let mut app = App { tab: Tab::Findings, ..App::default() };
        for _ in 0..10 {
            app.key(Key::Down, &s);
        }
        assert_eq!(app.row, s.findings.len() - 1);
        app.key(Key::Enter, &s);
        assert!(app.detail);
    }
}
