//! Findings: the diagnosis list; Enter shows the selected finding's detail, evidence lines and fix.

use super::style::{bold, dim, selected, severity_style, wrap_indent};
use crate::app::{App, Key};
use crate::live::Live;
use collscope_model::Snapshot;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

fn draw(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    if s.findings.is_empty() {
        let text = format!("No findings. {} WARN lines.", s.warnings.len());
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    let current = app.row.min(s.findings.len() - 1);
    let (list_area, detail_area) = if app.detail {
        let list_height = (s.findings.len() as u16 + 1).min(area.height / 3).max(2);
        let [a, b] = Layout::vertical([Constraint::Length(list_height), Constraint::Min(3)]).areas(area);
        (a, Some(b))
    } else {
        (area, None)
    };
    let room = (list_area.height as usize).saturating_sub(1).max(1);
    let first = current.saturating_sub(room - 1);
    let mut lines = vec![Line::styled(format!("{} findings (Enter: evidence and fix)", s.findings.len()), dim())];
    for (i, f) in s.findings.iter().enumerate().skip(first).take(room) {
        let line = Line::from(vec![
            Span::styled(format!("{:<8}", f.severity.as_str()), severity_style(f.severity)),
            Span::raw(format!("{}  ", f.title)),
            Span::styled(f.code.clone(), dim()),
            Span::styled(f.comm.as_ref().map(|c| format!("  comm {c}")).unwrap_or_default(), dim()),
        ]);
        lines.push(if i == current { line.style(selected()) } else { line });
    }
    frame.render_widget(Paragraph::new(lines), list_area);

    if let Some(area) = detail_area {
        let f = &s.findings[current];
        let mut lines = Vec::new();
        if let Some(c) = &f.comm {
            lines.push(Line::from(vec![Span::styled("Communicator: ", bold()), Span::raw(c.to_string())]));
        }
        lines.extend([Line::raw(f.detail.clone()), Line::raw(""), Line::styled("Evidence", bold())]);
        for e in &f.evidence {
            // The file name is enough here; the full path is in the Overview's source line.
            let file = std::path::Path::new(&e.file).file_name().and_then(|f| f.to_str()).unwrap_or(&e.file);
            lines.push(Line::from(vec![Span::styled(format!("{file}:{} ", e.line), dim()), Span::raw(e.text.clone())]));
        }
        lines.push(Line::raw(""));
        lines.push(Line::from(vec![Span::styled("Fix: ", bold()), Span::raw(f.fix.clone())]));
        // Scrolled by j/k while open, never past its last line (as wrapped to the area's width).
        let width = area.width.max(1) as usize;
        let rows: usize = lines.iter().map(|l| wrap_indent(&l.to_string(), width, 0).len()).sum();
        let inner = area.height.saturating_sub(1) as usize;
        let scroll = (app.scroll as usize).min(rows.saturating_sub(inner)) as u16;
        let more = if rows > inner { "  (j/k scroll)" } else { "" };
        let block = Block::new().borders(Borders::TOP).title(format!(" {}{more} ", f.title));
        let para = Paragraph::new(lines).block(block).wrap(Wrap { trim: false }).scroll((scroll, 0));
        frame.render_widget(para, area);
    }
}

pub(super) struct Findings;

impl super::View for Findings {
    fn title(&self) -> &'static str {
        "Findings"
    }

    fn hint(&self) -> &'static str {
        "j/k row (scroll when open)  Enter evidence  "
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, live: &Live) {
        draw(frame, area, app, &live.snapshot)
    }

    fn rows(&self, _app: &App, s: &Snapshot) -> usize {
        s.findings.len()
    }

    fn key(&self, app: &mut App, key: Key, _s: &Snapshot) -> bool {
        match key {
            Key::Enter => {
                app.detail ^= true;
                app.scroll = 0;
            }
            // With the detail open, the keys that move the selection scroll the detail.
            Key::Down | Key::Char('j') if app.detail => app.scroll = app.scroll.saturating_add(1),
            Key::Up | Key::Char('k') if app.detail => app.scroll = app.scroll.saturating_sub(1),
            Key::PageDown if app.detail => app.scroll = app.scroll.saturating_add(10),
            Key::PageUp if app.detail => app.scroll = app.scroll.saturating_sub(10),
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::app::{App, Key, Tab};
    use crate::fixture;
    use crate::views::testing::*;

    #[test]
    fn the_list_then_enter_shows_evidence_and_fix() {
        let app = App { tab: Tab::Findings, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("warning NET without GPUDirect RDMA on ring channel 0  no_gdrdma"), "{text}");
        assert!(text.contains("info    SHM used between GPUs 2 and 3"), "{text}");
        assert!(!text.contains("Evidence"), "{text}");
        let app = App { tab: Tab::Findings, row: 1, detail: true, ..App::default() };
        let text = screen(&render(&app, &fixture::live(), 80, 24));
        assert!(text.contains("Evidence"), "{text}");
        assert!(text.contains("job.log:40 Channel 00/0 : 2[2] -> 3[3] via SHM/direct/direct"), "{text}");
        assert!(text.contains("Fix: Check ACS and IOMMU settings."), "{text}");
    }

    #[test]
    fn a_finding_about_one_communicator_names_it_in_the_list_and_the_detail() {
        let mut live = fixture::live();
        live.snapshot.findings[0].comm =
            Some(collscope_model::FindingComm { id: "0x7f01".into(), name: Some("tp0".into()) });
        let app = App { tab: Tab::Findings, ..App::default() };
        let text = screen(&render(&app, &live, 100, 24));
        assert!(text.contains("no_gdrdma  comm tp0 (0x7f01)"), "{text}");
        assert!(
            text.contains("SHM used between GPUs 2 and 3  shm_intra") && !text.contains("shm_intra  comm"),
            "{text}"
        );
        let app = App { tab: Tab::Findings, detail: true, ..App::default() };
        let text = screen(&render(&app, &live, 100, 24));
        assert!(text.contains("Communicator: tp0 (0x7f01)"), "{text}");
    }

    #[test]
    fn an_open_detail_scrolls_to_its_fix() {
        let mut live = fixture::live();
        let f = &mut live.snapshot.findings[0];
        f.detail = (1..=100).map(|i| format!("Detail sentence {i}.")).collect::<Vec<_>>().join(" ");
        f.fix = "the fix at the end".into();
        let mut app = App { tab: Tab::Findings, ..App::default() };
        let s = live.snapshot.clone();
        app.key(Key::Enter, &s);
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("(j/k scroll)") && !text.contains("the fix at the end"), "{text}");
        for _ in 0..40 {
            app.key(Key::Char('j'), &s);
        }
        assert_eq!(app.row, 0, "j scrolls the open detail, not the list");
        let text = screen(&render(&app, &live, 80, 24));
        assert!(text.contains("Fix: the fix at the end"), "{text}");
        app.key(Key::Enter, &s);
        assert!(!app.detail && app.scroll == 0);
    }
}
