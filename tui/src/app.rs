//! Which view is shown and what is selected in it; keys change it. Pure state, so key handling is tested
//! without a terminal.

use crate::rings::ring_paths;
use collscope_model::{Collective, Snapshot};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Rings,
    Trees,
    Channels,
    Proxy,
    Tuning,
    Ops,
    Findings,
}

impl Tab {
    pub const ALL: [Tab; 8] =
        [Tab::Overview, Tab::Rings, Tab::Trees, Tab::Channels, Tab::Proxy, Tab::Tuning, Tab::Ops, Tab::Findings];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Rings => "Rings",
            Tab::Trees => "Trees",
            Tab::Channels => "Channels",
            Tab::Proxy => "Proxy",
            Tab::Tuning => "Tuning",
            Tab::Ops => "Ops",
            Tab::Findings => "Findings",
        }
    }

    fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }
}

/// A key, as the app understands it (the terminal layer maps crossterm's events to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Esc,
    Backspace,
    Tab,
    BackTab,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
}

#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub tab: Tab,
    pub show_help: bool,
    /// Selected channel in Rings and Trees (index into the channels the snapshot has).
    pub channel: usize,
    /// Selected row in Channels, Proxy, Ops and Findings.
    pub row: usize,
    /// Collective shown in Tuning.
    pub collective: Collective,
    /// Ops filter text, and whether it is being typed.
    pub filter: String,
    pub editing_filter: bool,
    /// Findings: the evidence and fix of the selected finding are shown.
    pub detail: bool,
    /// Ops: keep the newest operation in view.
    pub follow_ops: bool,
    pub quit: bool,
}

impl Default for App {
    fn default() -> Self {
        App {
            tab: Tab::Overview,
            show_help: false,
            channel: 0,
            row: 0,
            collective: Collective::AllReduce,
            filter: String::new(),
            editing_filter: false,
            detail: false,
            follow_ops: true,
            quit: false,
        }
    }
}

impl App {
    /// Applies a key. `snapshot` bounds selections. Returns whether anything changed.
    pub fn key(&mut self, key: Key, snapshot: &Snapshot) -> bool {
        let before = self.clone();
        if self.editing_filter {
            match key {
                Key::Enter | Key::Esc => self.editing_filter = false,
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
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.show_help = true,
            Key::Tab | Key::Right | Key::Char('l') => self.switch(Tab::ALL[(self.tab.index() + 1) % Tab::ALL.len()]),
            Key::BackTab | Key::Left | Key::Char('h') => {
                self.switch(Tab::ALL[(self.tab.index() + Tab::ALL.len() - 1) % Tab::ALL.len()])
            }
            Key::Char(c @ '1'..='8') => self.switch(Tab::ALL[(c as usize) - ('1' as usize)]),
            Key::Char(']') | Key::Char('n') => self.next_item(snapshot, 1),
            Key::Char('[') | Key::Char('p') => self.next_item(snapshot, -1),
            Key::Down | Key::Char('j') => self.move_row(1, snapshot),
            Key::Up | Key::Char('k') => self.move_row(-1, snapshot),
            Key::PageDown => self.move_row(10, snapshot),
            Key::PageUp => self.move_row(-10, snapshot),
            Key::Home | Key::Char('g') => self.move_row(-(self.row as i64), snapshot),
            Key::End | Key::Char('G') => {
                self.row = rows(self.tab, snapshot, self.channel).saturating_sub(1);
                self.follow_ops = true;
            }
            Key::Char('/') if self.tab == Tab::Ops => self.editing_filter = true,
            Key::Enter if self.tab == Tab::Findings => self.detail = !self.detail,
            Key::Esc => {
                self.detail = false;
                self.filter.clear();
            }
            _ => {}
        }
        *self != before
    }

    fn switch(&mut self, tab: Tab) {
        if tab != self.tab {
            self.tab = tab;
            self.row = 0;
            self.detail = false;
        }
    }

    /// `[`/`]`: the previous/next channel (Rings, Trees) or collective (Tuning).
    fn next_item(&mut self, snapshot: &Snapshot, step: i64) {
        match self.tab {
            Tab::Rings | Tab::Trees => {
                let n =
                    if self.tab == Tab::Rings { ring_channels(snapshot).len() } else { tree_channels(snapshot).len() };
                if n > 0 {
                    self.channel = (self.channel as i64 + step).rem_euclid(n as i64) as usize;
                    self.row = 0;
                }
            }
            Tab::Tuning => {
                let colls = tuned_collectives(snapshot);
                if !colls.is_empty() {
                    let at = colls.iter().position(|c| *c == self.collective).unwrap_or(0) as i64;
                    self.collective = colls[(at + step).rem_euclid(colls.len() as i64) as usize];
                }
            }
            _ => self.move_row(step, snapshot),
        }
    }

    fn move_row(&mut self, step: i64, snapshot: &Snapshot) {
        let n = rows(self.tab, snapshot, self.channel);
        self.row = (self.row as i64 + step).clamp(0, n.saturating_sub(1) as i64) as usize;
        if self.tab == Tab::Ops {
            self.follow_ops = self.row + 1 >= n;
        }
    }
}

/// Channels that have a ring, in order.
pub fn ring_channels(s: &Snapshot) -> Vec<u32> {
    let mut v: Vec<u32> = ring_paths(s).iter().map(|r| r.channel).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Channels that have tree lines, in order.
pub fn tree_channels(s: &Snapshot) -> Vec<u32> {
    let mut v: Vec<u32> = s.trees.iter().map(|t| t.channel).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Collectives with a tuning table or decisions, in NCCL's order; AllReduce when there are none.
pub fn tuned_collectives(s: &Snapshot) -> Vec<Collective> {
    let mut v: Vec<Collective> = s.tuning.keys().copied().chain(s.decisions.iter().map(|d| d.coll)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Selectable (or scrollable) rows of a tab.
fn rows(tab: Tab, s: &Snapshot, channel: usize) -> usize {
    match tab {
        Tab::Rings => ring_channels(s)
            .get(channel)
            .map_or(0, |ch| ring_paths(s).iter().filter(|r| r.channel == *ch).map(|r| r.order.len()).sum()),
        Tab::Trees => tree_channels(s).get(channel).map_or(0, |ch| s.trees.iter().filter(|t| t.channel == *ch).count()),
        // A modelled machine has no connections; its graphs' channels are listed instead.
        Tab::Channels if s.connections.is_empty() => s.graphs.iter().map(|g| g.channels.len()).sum(),
        Tab::Channels => s.connections.len(),
        Tab::Proxy => s.proxy.len(),
        Tab::Ops => s.ops.len(),
        Tab::Findings => s.findings.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

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
