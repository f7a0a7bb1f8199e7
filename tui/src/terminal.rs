//! The terminal loop: raw mode and the alternate screen (restored on exit, error or panic), keys, resizes,
//! updates from the source thread, and redraws only when something changed.

use crate::app::{App, Key, ReplayCmd};
use crate::live::{Live, Update};
use crate::source::{self, SourceError, SourceSpec};
use crate::views;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::Terminal;
use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the loop wakes when nothing happens (about 10 frames per second at most).
const TICK: Duration = Duration::from_millis(100);
/// How often traffic rates are sampled.
const SAMPLE: Duration = Duration::from_secs(1);
/// How long quitting waits for the source's thread (a recording closed whole).
const CLOSE_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the terminal: {0}")]
    Terminal(#[from] io::Error),
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Restores the terminal when dropped, so an error or a panic never leaves it in raw mode.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, ratatui::crossterm::cursor::Show);
    }
}

/// Runs the TUI on this terminal until `q`.
pub fn run(spec: SourceSpec) -> Result<(), RunError> {
    run_to_quit(spec).map(drop)
}

/// Runs the TUI on this terminal until `q`; returns what it showed last, for a summary once the terminal is
/// back (`collscope demo`).
pub fn run_to_quit(spec: SourceSpec) -> Result<Live, RunError> {
    let label = spec.label();
    let (tx, rx) = mpsc::channel::<Update>();
    let stop = Arc::new(AtomicBool::new(false));
    let shown = source::Shown::default();
    let (control, controlled) = mpsc::channel();
    let worker = source::spawn(spec, tx.clone(), controlled, stop.clone(), shown.clone())?;

    enable_raw_mode()?;
    let _restore = Restore;
    execute!(io::stdout(), EnterAlternateScreen)?;
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen);
        previous_hook(info);
    }));
    let mut terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    terminal.clear()?;
    let mut live = Live::new(label);
    let result = event_loop(&mut terminal, &mut live, (&tx, rx), &shown, &control);
    stop.store(true, Ordering::Relaxed);
    // The source threads notice `stop` or the closed channel and end on their own; a little wait lets the one
    // that writes a recording close it whole.
    let closed = Instant::now() + CLOSE_WAIT;
    while !worker.is_finished() && Instant::now() < closed {
        std::thread::sleep(Duration::from_millis(10));
    }
    result.map(|()| live)
}

fn event_loop(
    terminal: &mut Terminal<CrosstermBackend<Stdout>>,
    live: &mut Live,
    (tx, rx): (&mpsc::Sender<Update>, mpsc::Receiver<Update>),
    shown: &source::Shown,
    replay: &mpsc::Sender<ReplayCmd>,
) -> Result<(), RunError> {
    let mut app = App::default();
    let start = Instant::now();
    let mut next_sample = start + SAMPLE;
    let mut drawn: Option<u64> = None;
    let mut dirty = true;
    loop {
        while let Ok(update) = rx.try_recv() {
            live.apply(update);
        }
        if Instant::now() >= next_sample {
            live.sample(start.elapsed().as_secs_f64());
            next_sample += SAMPLE;
        }
        if dirty || drawn != Some(live.generation) {
            terminal.draw(|f| views::draw(f, &app, live))?;
            drawn = Some(live.generation);
            dirty = false;
        }
        if event::poll(TICK)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
                        return Ok(());
                    }
                    if let Some(key) = map_key(k.code) {
                        dirty |= app.key(key, &live.snapshot);
                    }
                    if std::mem::take(&mut app.dump_request) {
                        request_dumps(live, tx);
                    }
                    if let Some(cmd) = app.replay_cmd.take() {
                        // Only a replay listens; for another source the command goes nowhere.
                        let _ = replay.send(cmd);
                    }
                    if app.rank != live.shown_rank {
                        let endpoint = app.rank.and_then(|r| live.snapshot.endpoints.iter().find(|e| e.rank == r));
                        if let Ok(mut s) = shown.lock() {
                            *s = endpoint.cloned();
                        }
                        // After the job's end the rank shown stays: `<`/`>` have nothing to fetch.
                        app.rank = live.show_rank(app.rank);
                    }
                    if app.quit {
                        return Ok(());
                    }
                }
                Event::Resize(..) => {
                    terminal.autoresize()?;
                    dirty = true;
                }
                _ => {}
            }
        }
    }
}

/// `D`: every rank the job view lists (a live job's) is asked to write its dump.
fn request_dumps(live: &Live, tx: &mpsc::Sender<Update>) {
    let urls: Vec<(u32, String)> =
        live.job.iter().flat_map(|j| &j.ranks).filter_map(|r| Some((r.rank, r.url.clone()?))).collect();
    if urls.is_empty() {
        let _ = tx.send(Update::Notice("dump: no live rank to ask (connect to a running job)".into()));
    } else {
        source::request_dumps(urls, tx.clone());
    }
}

fn map_key(code: KeyCode) -> Option<Key> {
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        _ => return None,
    })
}
