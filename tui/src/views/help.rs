//! The one-line key bar and the `?` help screen.

use super::style::wrap_indent;
use crate::app::{App, Tab};
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::widgets::{Block, Clear, Paragraph};
use ratatui::Frame;

pub(super) fn bar(app: &App) -> String {
    if app.editing_filter {
        return format!("filter: {}_   Enter done  Esc clear", app.filter);
    }
    format!("{}1-{}/Tab view  ? help  q quit", app.tab.view().hint(), Tab::ALL.len())
}

const HELP: &[(&str, &str)] = &[
    ("[ ]  (or p n)", "previous / next channel (Rings, Trees) or collective (Tuning)"),
    ("Up/Down, j/k, PgUp/PgDn", "move the selection"),
    ("g / G", "first / last row; G follows new operations"),
    ("/", "filter operations (Ops): collective, algorithm, protocol, rankN"),
    ("space", "pause / resume the operation log (Ops)"),
    ("s", "sort operations by time, slowest first, or by call (Ops)"),
    ("Esc", "clear the filter, close evidence"),
    ("Enter", "show the evidence and the fix of a finding; j/k then scroll it"),
    ("< >", "previous / next rank of a live job (the rank strip)"),
    ("o", "order the strip: rank, state (stuck first), age"),
    ("D", "ask every rank of a live job to write its dump"),
    ("P , .", "pause / resume a replay; back / forward 10 s"),
    ("?", "this help"),
    ("q", "quit"),
];

/// The help as lines of at most `width` characters: each key, then what it does, wrapped under itself.
fn lines(width: usize) -> Vec<String> {
    let views = format!("1-{}, Tab, Shift-Tab, Left/Right", Tab::ALL.len());
    let keys: Vec<(&str, &str)> =
        std::iter::once((views.as_str(), "switch view")).chain(HELP.iter().copied()).collect();
    // The key column fits the longest key, up to a third of the width (longer keys wrap like the text).
    let col = keys.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0).min(width / 3).max(1);
    let key_width = col - 1;
    let mut text: Vec<String> =
        keys.iter().flat_map(|(k, what)| wrap_indent(&format!("{k:<key_width$} {what}"), width, col)).collect();
    text.push(String::new());
    text.extend(wrap_indent("Edge colours: P2P green, SHM yellow, NET+GDRDMA cyan, NET without GDRDMA red", width, 2));
    text.push("Any key closes this help.".into());
    text
}

pub(super) fn draw_full(frame: &mut Frame, area: Rect) {
    let width = area.width.min(100);
    let text = lines(width.saturating_sub(2) as usize);
    let height = area.height.min(text.len() as u16 + 2);
    let [row] = Layout::vertical([Constraint::Length(height)]).flex(Flex::Center).areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(width)]).flex(Flex::Center).areas(row);
    frame.render_widget(Clear, popup);
    frame.render_widget(Paragraph::new(text.join("\n")).block(Block::bordered().title(" Keys ")), popup);
}
