//! NCCL-compatible debug log. Lines follow NCCL 2.28.9's `ncclDebugLog` (`src/debug.cc`) byte for byte so that
//! any NCCL log tool, and collscope's own log reader, reads them:
//! `host:pid:tid [dev] NCCL INFO msg`, `\nhost:pid:tid [dev] file:line NCCL WARN msg` (with a timestamp by
//! default), `host:pid:tid [dev] ms file:line NCCL TRACE msg`, and VERSION lines without the prefix.
//!
//! Beside the logger, what NCCL keeps in `src/misc/` and every other crate needs: parameters from the
//! environment ([`mod@env`], `misc/param.cc`, each declared once in [`params`]), host facts ([`sys`]) and
//! bounded reads of small files ([`mod@file`]).
//! Depends on collscope-model only (for the `EnvSetting` the parameters record).

pub mod env;
pub mod file;
pub mod params;
mod subsys;
pub mod sys;

pub use subsys::{Level, Subsys};

use std::cell::Cell;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The NCCL release whose behaviour collscope models.
pub const NCCL_MODEL_VERSION: &str = "2.28.9";

/// What `NCCL_DEBUG*` asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct DebugConfig {
    pub level: Level,
    pub mask: Subsys,
    /// `NCCL_DEBUG_FILE` after `%h`/`%p` expansion.
    pub file: Option<String>,
    /// Levels that carry a timestamp (`NCCL_DEBUG_TIMESTAMP_LEVELS`, default WARN).
    pub timestamp_levels: u32,
}

impl Default for DebugConfig {
    fn default() -> Self {
        DebugConfig { level: Level::None, mask: Subsys::DEFAULT, file: None, timestamp_levels: 1 << Level::Warn as u32 }
    }
}

/// A bad `NCCL_DEBUG*` value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name}='{value}' is not valid: expected {expected}")]
pub struct DebugConfigError {
    pub name: &'static str,
    pub value: String,
    pub expected: String,
}

impl DebugConfig {
    /// Reads `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS`, `NCCL_DEBUG_FILE` and `NCCL_DEBUG_TIMESTAMP_LEVELS` through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, host: &str, pid: u32) -> Result<Self, DebugConfigError> {
        let mut cfg = DebugConfig::default();
        if let Some(v) = get("NCCL_DEBUG").filter(|v| !v.is_empty()) {
            cfg.level =
                v.parse().map_err(|expected| DebugConfigError { name: "NCCL_DEBUG", value: v.clone(), expected })?;
        }
        if let Some(v) = get("NCCL_DEBUG_SUBSYS").filter(|v| !v.is_empty()) {
            cfg.mask = Subsys::parse_list(&v).map_err(|expected| DebugConfigError {
                name: "NCCL_DEBUG_SUBSYS",
                value: v.clone(),
                expected,
            })?;
        }
        if let Some(v) = get("NCCL_DEBUG_TIMESTAMP_LEVELS") {
            cfg.timestamp_levels = parse_timestamp_levels(&v).map_err(|expected| DebugConfigError {
                name: "NCCL_DEBUG_TIMESTAMP_LEVELS",
                value: v.clone(),
                expected,
            })?;
        }
        cfg.file = get("NCCL_DEBUG_FILE").filter(|v| !v.is_empty()).map(|v| expand_file_name(&v, host, pid));
        Ok(cfg)
    }

    pub fn enabled(&self, level: Level, subsys: Subsys) -> bool {
        self.level >= level && (level <= Level::Warn || self.mask.intersects(subsys))
    }
}

fn parse_timestamp_levels(s: &str) -> Result<u32, String> {
    let (invert, body) = match s.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let mut mask = if invert { !0u32 } else { 0 };
    for tok in body.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let bits = if tok.eq_ignore_ascii_case("ALL") {
            !0u32
        } else {
            1u32 << tok.parse::<Level>().map_err(|e| format!("a comma list of ALL or {e}"))? as u32
        };
        if invert {
            mask &= !bits;
        } else {
            mask |= bits;
        }
    }
    Ok(mask)
}

/// `%h` becomes the host name, `%p` the pid, `%%` a percent sign, as in NCCL.
pub fn expand_file_name(pattern: &str, host: &str, pid: u32) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('h') => out.push_str(host),
            Some('p') => out.push_str(&pid.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Writes `line` and a newline to `out` in one `write_all` of one buffer, so an unbuffered stream (stderr, a
/// file) gets them in one write(2): on a pipe that several rank processes share (the launcher's stderr), a line
/// of up to `PIPE_BUF` (4096) bytes is then never cut by another's (POSIX makes such writes atomic). A longer
/// one may be split by the kernel with other processes' output between its parts, as with any writer.
/// `format!`-style printing (`eprintln!`) writes each piece in a write of its own, which another rank's line
/// can come between. A failed write is dropped: a closed stderr must not fail or stop a rank.
pub fn write_line(out: &mut impl Write, mut line: String) {
    line.push('\n');
    let _ = out.write_all(line.as_bytes());
}

/// `eprintln!` as whole lines: the message, newline included, reaches stderr in one write ([`write_line`]).
#[macro_export]
macro_rules! eprintln_whole {
    ($($arg:tt)+) => {
        $crate::write_line(&mut ::std::io::stderr(), ::std::format!($($arg)+))
    };
}

/// Who is printing: the fixed part of every line's prefix.
#[derive(Debug, Clone)]
pub struct Origin {
    pub host: String,
    pub pid: u32,
}

impl Origin {
    pub fn current() -> Self {
        Origin { host: crate::sys::hostname(), pid: std::process::id() }
    }
}

/// Formats one log line exactly as NCCL does (without the trailing newline). `timestamp` is the already
/// formatted `[%F %T] ` prefix when this level carries one; `trace_ms` the milliseconds since start for TRACE.
#[allow(clippy::too_many_arguments)]
pub fn format_line(
    level: Level,
    origin: &Origin,
    tid: u32,
    dev: i32,
    location: (&str, u32),
    timestamp: Option<&str>,
    trace_ms: f64,
    msg: &str,
) -> String {
    let mut s = String::with_capacity(msg.len() + 64);
    if level == Level::Warn {
        s.push('\n');
    }
    if let Some(ts) = timestamp {
        s.push_str(ts);
    }
    if level != Level::Version {
        s.push_str(&format!("{}:{}:{} ", origin.host, origin.pid, tid));
    }
    match level {
        Level::Warn => s.push_str(&format!("[{dev}] {}:{} NCCL WARN ", location.0, location.1)),
        Level::Info => s.push_str(&format!("[{dev}] NCCL INFO ")),
        Level::Trace => s.push_str(&format!("[{dev}] {trace_ms:.6} {}:{} NCCL TRACE ", location.0, location.1)),
        _ => {}
    }
    s.push_str(msg);
    s
}

/// The process-wide logger: one configuration, one sink, whole lines written at once so threads never interleave.
pub struct Logger {
    config: DebugConfig,
    origin: Origin,
    sink: Mutex<Box<dyn Write + Send>>,
    start: Instant,
}

thread_local! {
    static DEVICE: Cell<i32> = const { Cell::new(0) };
}

/// Sets the `[dev]` printed by this thread (the CUDA device, or the local rank for host-memory ranks).
pub fn set_thread_device(dev: i32) {
    DEVICE.with(|d| d.set(dev));
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

impl Logger {
    pub fn new(config: DebugConfig, origin: Origin, sink: Box<dyn Write + Send>) -> Self {
        Logger { config, origin, sink: Mutex::new(sink), start: Instant::now() }
    }

    /// Builds the logger from the process environment. A bad value is reported once on stderr and logging
    /// falls back to NCCL's defaults, so a typo in a debug variable never stops a job.
    fn from_env() -> Self {
        let origin = Origin::current();
        let config = DebugConfig::from_lookup(params::process_var, &origin.host, origin.pid).unwrap_or_else(|e| {
            eprintln_whole!("collscope: {e}; debug logging keeps its defaults");
            DebugConfig::default()
        });
        let sink: Box<dyn Write + Send> = match &config.file {
            // Never waiting on a FIFO without a reader (a process loading collscope would hang in that open).
            Some(path) => {
                match file::open_regular_with(Path::new(path), OpenOptions::new().create(true).append(true), true) {
                    Ok(f) => Box::new(f),
                    Err(e) => {
                        eprintln_whole!("collscope: cannot open NCCL_DEBUG_FILE '{path}': {e}; logging to stdout");
                        Box::new(std::io::stdout())
                    }
                }
            }
            None => Box::new(std::io::stdout()),
        };
        Logger::new(config, origin, sink)
    }

    pub fn config(&self) -> &DebugConfig {
        &self.config
    }

    pub fn enabled(&self, level: Level, subsys: Subsys) -> bool {
        self.config.enabled(level, subsys)
    }

    pub fn log(&self, level: Level, subsys: Subsys, location: (&str, u32), msg: &str) {
        if !self.enabled(level, subsys) {
            return;
        }
        let ts = (self.config.timestamp_levels & (1 << level as u32) != 0).then(crate::sys::timestamp_prefix);
        let trace_ms = self.start.elapsed().as_secs_f64() * 1000.0;
        let dev = DEVICE.with(|d| d.get());
        let line = format_line(level, &self.origin, crate::sys::gettid(), dev, location, ts.as_deref(), trace_ms, msg);
        if let Ok(mut sink) = self.sink.lock() {
            // A failed write to the debug sink must not fail the collective that logged.
            write_line(&mut *sink, line);
            let _ = sink.flush();
        }
    }
}

/// The process-wide logger, created from the environment on first use.
pub fn logger() -> &'static Logger {
    LOGGER.get_or_init(Logger::from_env)
}

/// Installs a logger before first use (tests, the CLI's `--log` modes). Returns false if one was already set.
pub fn install(logger: Logger) -> bool {
    LOGGER.set(logger).is_ok()
}

/// `INFO(subsys, fmt, ...)`.
#[macro_export]
macro_rules! nccl_info {
    ($subsys:expr, $($arg:tt)+) => {{
        let l = $crate::logger();
        if l.enabled($crate::Level::Info, $subsys) {
            l.log($crate::Level::Info, $subsys, (file!(), line!()), &format!($($arg)+));
        }
    }};
}

/// `WARN(fmt, ...)`: always carries `file:line`.
#[macro_export]
macro_rules! nccl_warn {
    ($($arg:tt)+) => {{
        let l = $crate::logger();
        if l.enabled($crate::Level::Warn, $crate::Subsys::ALL) {
            let file = file!();
            let short = file.rsplit('/').next().unwrap_or(file);
            l.log($crate::Level::Warn, $crate::Subsys::ALL, (short, line!()), &format!($($arg)+));
        }
    }};
}

/// `TRACE(subsys, fmt, ...)`.
#[macro_export]
macro_rules! nccl_trace {
    ($subsys:expr, $($arg:tt)+) => {{
        let l = $crate::logger();
        if l.enabled($crate::Level::Trace, $subsys) {
            let file = file!();
            let short = file.rsplit('/').next().unwrap_or(file);
            l.log($crate::Level::Trace, $subsys, (short, line!()), &format!($($arg)+));
        }
    }};
}

/// The version line: `NCCL version 2.28.9+collscope0.1.0` in NCCL's place, so log tools find the modelled
/// version, and collscope's own version after the `+` where NCCL prints its CUDA version.
pub fn version_string() -> String {
    format!("NCCL version {}", version())
}

/// The version as the version line prints it (`2.28.9+collscope0.1.0`), as a log reader reads it back.
pub fn version() -> String {
    format!("{NCCL_MODEL_VERSION}+collscope{}", env!("CARGO_PKG_VERSION"))
}

/// Prints the version line the way NCCL's `showVersion` does: as a VERSION line at VERSION/WARN, else INFO.
pub fn show_version() {
    let l = logger();
    let level = match l.config.level {
        Level::Version | Level::Warn => Level::Version,
        _ => Level::Info,
    };
    l.log(level, Subsys::ALL, (file!(), line!()), &version_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin { host: "node1".into(), pid: 4242 }
    }

    #[test]
    fn info_line_matches_nccl() {
        let l = format_line(Level::Info, &origin(), 4300, 3, ("x.rs", 1), None, 0.0, "Init COMPLETE");
        assert_eq!(l, "node1:4242:4300 [3] NCCL INFO Init COMPLETE");
    }

    #[test]
    fn warn_line_has_newline_timestamp_and_location() {
        let l = format_line(
            Level::Warn,
            &origin(),
            7,
            0,
            ("transport.rs", 88),
            Some("[2026-12-01 10:00:00] "),
            0.0,
            "oops",
        );
        assert_eq!(l, "\n[2026-12-01 10:00:00] node1:4242:7 [0] transport.rs:88 NCCL WARN oops");
    }

    #[test]
    fn trace_and_version_lines() {
        let t = format_line(Level::Trace, &origin(), 7, 1, ("p.rs", 9), None, 12.5, "x");
        assert_eq!(t, "node1:4242:7 [1] 12.500000 p.rs:9 NCCL TRACE x");
        let v = format_line(Level::Version, &origin(), 7, 0, ("", 0), None, 0.0, &version_string());
        assert!(v.starts_with("NCCL version 2.28.9+collscope"));
    }

    #[test]
    fn config_from_env_and_errors() {
        let env = |k: &str| match k {
            "NCCL_DEBUG" => Some("info".to_string()),
            "NCCL_DEBUG_SUBSYS" => Some("^NET".to_string()),
            "NCCL_DEBUG_FILE" => Some("/tmp/nccl.%h.%p.%%.log".to_string()),
            _ => None,
        };
        let c = DebugConfig::from_lookup(env, "h1", 12).unwrap();
        assert_eq!(c.level, Level::Info);
        assert!(c.enabled(Level::Info, Subsys::INIT));
        assert!(!c.enabled(Level::Info, Subsys::NET));
        assert!(c.enabled(Level::Warn, Subsys::NET), "WARN ignores the subsystem mask");
        assert_eq!(c.file.as_deref(), Some("/tmp/nccl.h1.12.%.log"));

        let bad = |k: &str| (k == "NCCL_DEBUG").then(|| "LOUD".to_string());
        let e = DebugConfig::from_lookup(bad, "h", 1).unwrap_err().to_string();
        assert!(e.contains("NCCL_DEBUG='LOUD'") && e.contains("INFO"), "{e}");
    }

    #[test]
    fn default_config_prints_nothing_but_timestamps_warns() {
        let c = DebugConfig::default();
        assert!(!c.enabled(Level::Warn, Subsys::ALL));
        assert_eq!(c.timestamp_levels, 1 << Level::Warn as u32);
        assert_eq!(parse_timestamp_levels("INFO,WARN").unwrap(), (1 << 3) | (1 << 2));
        assert!(parse_timestamp_levels("LOUD").is_err());
    }

    #[test]
    fn a_line_is_one_write_with_its_newline() {
        /// Records each write it gets.
        struct Writes(Vec<Vec<u8>>);
        impl Write for Writes {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut w = Writes(Vec::new());
        write_line(&mut w, format!("Error: {}\n\nCaused by:\n    {}", "rank 1 exited", "signal 9"));
        assert_eq!(w.0, vec![b"Error: rank 1 exited\n\nCaused by:\n    signal 9\n".to_vec()]);
    }

    #[test]
    fn logger_writes_whole_lines_to_its_sink() {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let cfg = DebugConfig { level: Level::Info, mask: Subsys::ALL, ..DebugConfig::default() };
        let l = Logger::new(cfg, origin(), Box::new(buf.clone()));
        l.log(Level::Info, Subsys::GRAPH, ("f", 1), "Pattern 4");
        l.log(Level::Trace, Subsys::GRAPH, ("f", 1), "hidden");
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(out.starts_with("node1:4242:") && out.ends_with("NCCL INFO Pattern 4\n"), "{out}");
        assert_eq!(out.lines().count(), 1);
    }
}
