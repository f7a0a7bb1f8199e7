//! The one-line key bar and the `?` help screen.

use crate::app::{App, Tab};
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::widgets::{Block, Clear, Paragraph};
use ratatui::Frame;

pub fn bar(app: &App) -> String {
    if app.editing_filter {
        return format!("filter: {}_   Enter done  Esc done", app.filter);
    }
    format!("{}1-{}/Tab view  ? help  q quit", app.tab.view().hint(), Tab::ALL.len())
}

const HELP: &[(&str, &str)] = &[
    ("[ ]  (or p n)", "previous / next channel (Rings, Trees) or collective (Tuning)"),
    ("Up/Down, j/k, PgUp/PgDn", "move the selection"),
    ("g / G", "first / last row; G follows new operations"),
    ("/", "filter operations (Ops): collective, algorithm, protocol"),
    ("Esc", "clear the filter, close evidence"),
    ("Enter", "show the evidence and the fix of a finding"),
    ("< >", "previous / next rank of a live job (the rank strip)"),
    ("?", "this help"),
    ("q", "quit"),
];

pub fn draw_full(frame: &mut Frame, area: Rect) {
    let width = area.width.min(78);
    let height = area.height.min(HELP.len() as u16 + 7);
    let [row] = Layout::vertical([Constraint::Length(height)]).flex(Flex::Center).areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(width)]).flex(Flex::Center).areas(row);
    let views = format!("1-{}, Tab, Shift-Tab, Left/Right", Tab::ALL.len());
    let mut text: Vec<String> = std::iter::once((views.as_str(), "switch view"))
        .chain(HELP.iter().copied())
        .map(|(k, what)| format!("{k:<32} {what}"))
        .collect();
    text.push(String::new());
    text.push("Edge colours: P2P green, SHM yellow, NET+GDRDMA cyan, NET without GDRDMA red".into());
    text.push("Any key closes this help.".into());
    frame.render_widget(Clear, popup);
    frame.render_widget(Paragraph::new(text.join("\n")).block(Block::bordered().title(" Keys ")), popup);
}
