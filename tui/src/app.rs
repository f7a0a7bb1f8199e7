//! Which view is shown and what is selected in it; keys change it. Pure state, so key handling is tested
//! without a terminal.

use crate::rings::ring_paths;
use collscope_model::{Collective, RankEndpoint, Snapshot};

/// A view's place in the tab bar. The views and their names (`Tab::Rings`, `Tab::ALL`) are listed once, in
/// `views/mod.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tab(pub(crate) usize);

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

/// What a key asks of a replay (`--replay`); the terminal loop hands it to the replay's thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReplayCmd {
    TogglePause,
    /// Moves by this many seconds of the recording (back when negative).
    Seek(f64),
}

/// How the rank strip orders a job's ranks (`o` cycles): by rank unless the user asks, so the lines stay put
/// while states change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StripOrder {
    #[default]
    Rank,
    /// Stuck ranks (failed, not answering, named by an error finding) first, then the straggler, then by rank.
    State,
    /// The oldest call in flight first (in whole seconds, then by rank), ranks with none last.
    Age,
}

impl StripOrder {
    pub fn next(self) -> Self {
        match self {
            StripOrder::Rank => StripOrder::State,
            StripOrder::State => StripOrder::Age,
            StripOrder::Age => StripOrder::Rank,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StripOrder::Rank => "rank",
            StripOrder::State => "state",
            StripOrder::Age => "age",
        }
    }
}

/// How far `,` and `.` move a replay.
pub const SEEK_STEP_S: f64 = 10.0;

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
    /// The rank of the job whose snapshot the views show (`<`/`>`); `None`: the connected process's.
    pub rank: Option<u32>,
    /// The rank strip's order (`o`).
    pub strip_order: StripOrder,
    pub quit: bool,
    /// Findings: how many lines the open detail is scrolled.
    pub scroll: u16,
    /// Ops: paused (space) at the call with this sequence number; later calls wait until it resumes.
    pub ops_paused: Option<u64>,
    /// Ops: sorted by duration, slowest first (`s`), instead of by call.
    pub ops_by_time: bool,
    /// A key asked the replay to pause, resume or seek; taken by the terminal loop.
    pub replay_cmd: Option<ReplayCmd>,
    /// `D` asked every rank of the job to write its dump; taken by the terminal loop.
    pub dump_request: bool,
}

impl Default for App {
    fn default() -> Self {
        App {
            // The first view.
            tab: Tab(0),
            show_help: false,
            channel: 0,
            row: 0,
            collective: Collective::AllReduce,
            filter: String::new(),
            editing_filter: false,
            detail: false,
            follow_ops: true,
            rank: None,
            strip_order: StripOrder::Rank,
            quit: false,
            scroll: 0,
            ops_paused: None,
            ops_by_time: false,
            replay_cmd: None,
            dump_request: false,
        }
    }
}

impl App {
    /// Shows `tab`, with its selection at the top.
    pub(crate) fn switch(&mut self, tab: Tab) {
        if tab != self.tab {
            self.tab = tab;
            self.row = 0;
            self.detail = false;
            self.scroll = 0;
        }
    }
}

impl App {
    /// `<`/`>`: the previous or next rank of the job's `endpoints`, the connected process's between the last
    /// and the first.
    pub(crate) fn step_rank(&mut self, step: i64, endpoints: &[RankEndpoint]) {
        let ranks: Vec<u32> = endpoints.iter().map(|e| e.rank).collect();
        if ranks.is_empty() {
            return;
        }
        // Place 0 is the connected process, 1.. the ranks in order.
        let places = ranks.len() as i64 + 1;
        let now = self.rank.and_then(|r| ranks.iter().position(|&q| q == r)).map_or(0, |i| i as i64 + 1);
        let next = (now + step).rem_euclid(places);
        self.rank = (next > 0).then(|| ranks[next as usize - 1]);
        self.row = 0;
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
