//! The README as a user runs it (issue 55): every `collscope` command of its `sh` blocks runs as written, in a
//! folder that holds the files its examples name (`nccl.log`, `topo.xml`, `logs/`, `rank0.log.gz`), and every
//! sample it quotes is what the command prints now. A sample is a `text` block right after
//! `<!-- sample: COMMAND -->` (a shell line, so `| head -20` works) or `<!-- screen: COLSxROWS KEYS COMMAND -->`
//! (the TUI in a tmux pane of that size after the keys, `-` for none). `COLLSCOPE_UPDATE_README=1` rewrites the
//! samples from what the commands print (then review the diff).
//!
//! A command that needs what this machine lacks (a GPU job, a running job to connect to, another program) is not
//! run, and the test names it with the reason; a new kind of line must be given a place here.

use crate::tmux::Tmux;
use collscope_testkit::{output, Proc};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// Programs other than collscope the README shows, and why they are not run here.
const OTHER_PROGRAMS: &[(&str, &str)] = &[
    ("cargo", "builds and tests what this suite builds and tests"),
    ("bash", "the set-up commands: this suite is what they run"),
    ("torchrun", "a PyTorch job on GPUs"),
    ("python", "a PyTorch job on GPUs"),
    ("curl", "asks a running job (tests/telemetry.rs serves and asks one)"),
    ("prometheus", "a Prometheus server (tests/telemetry.rs starts one on the shipped configuration)"),
    ("kubectl", "a Kubernetes cluster"),
    ("srun", "a Slurm cluster"),
    ("sbatch", "a Slurm cluster"),
    ("mpirun", "an MPI launch across hosts"),
    ("export", "sets a variable for the lines after it"),
];

/// collscope arguments that need a running job elsewhere.
const NEEDS_A_JOB: &[&str] = &["--connect", "--prometheus"];

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_collscope")).parent().expect("the binary's folder").to_path_buf()
}

/// The line without its trailing `# comment` (a `#` outside quotes after a blank).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        prev = c;
    }
    line.trim_end()
}

/// The program a shell line runs: its first word after `VAR=value` words.
fn program(line: &str) -> &str {
    line.split_whitespace().find(|w| !w.contains('=')).unwrap_or("")
}

/// A folder with the files the README's examples name.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/readme/nccl.log");
    std::fs::copy(&log, dir.path().join("nccl.log")).unwrap();
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    std::fs::copy(&log, dir.path().join("logs/rank0.log")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &std::fs::read(&log).unwrap()).unwrap();
    std::fs::write(dir.path().join("rank0.log.gz"), gz.finish().unwrap()).unwrap();
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_collscope"))
            .args(["topo", "dump", "--preset", "dgx-h100", "-o", "topo.xml"])
            .current_dir(dir.path()),
        LIMIT,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// `line` run by bash in `dir` with collscope on the PATH.
fn shell(dir: &Path, line: &str) -> Command {
    let path = format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.args(["-o", "pipefail", "-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .env("COLLSCOPE_TIMEOUT_S", "60")
        .env_remove("NCCL_DEBUG")
        .stdin(Stdio::null());
    cmd
}

/// A pane running `line` in `dir` (collscope on the PATH), lingering after it with its exit status.
fn pane(name: &str, size: (u16, u16), dir: &Path, line: &str) -> Tmux {
    let quoted = line.replace('\'', r"'\''");
    let cmd = format!(
        "cd '{}' && PATH='{}':\"$PATH\" timeout --foreground -s KILL 240 bash -c '{quoted}'; echo EXIT=$?; sleep 60",
        dir.display(),
        bin_dir().display()
    );
    Tmux::start_shell(name, size, &cmd)
}

/// The README's lines and what its blocks are.
struct Readme {
    lines: Vec<String>,
}

enum Block {
    /// The command lines of a `sh` block.
    Commands(Vec<String>),
    /// A sample: what produces it, and the block's line range (fences excluded) in the README.
    Sample { source: String, body: std::ops::Range<usize> },
}

impl Readme {
    fn read() -> Readme {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        Readme { lines: std::fs::read_to_string(path).unwrap().lines().map(String::from).collect() }
    }

    fn blocks(&self) -> Vec<Block> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.lines.len() {
            let line = self.lines[i].trim();
            let marker = line.strip_prefix("<!-- ").and_then(|l| l.strip_suffix(" -->"));
            let fence = |lang: &str| line == format!("```{lang}");
            if let Some(source) = marker.filter(|m| m.starts_with("sample: ") || m.starts_with("screen: ")) {
                assert_eq!(self.lines.get(i + 1).map(String::as_str), Some("```text"), "README line {}", i + 1);
                let end = (i + 2..self.lines.len()).find(|&j| self.lines[j] == "```").expect("a closed block");
                out.push(Block::Sample { source: source.to_string(), body: i + 2..end });
                i = end + 1;
            } else if fence("sh") {
                let end = (i + 1..self.lines.len()).find(|&j| self.lines[j] == "```").expect("a closed block");
                // A line ending in `\` goes on in the next, as in the shell.
                let mut cmds = Vec::new();
                let mut pending = String::new();
                for l in &self.lines[i + 1..end] {
                    let l = strip_comment(l);
                    match l.strip_suffix('\\') {
                        Some(head) => pending.push_str(head),
                        None => cmds.push(std::mem::take(&mut pending) + l),
                    }
                }
                cmds.retain(|l| !l.trim().is_empty());
                out.push(Block::Commands(cmds));
                i = end + 1;
            } else {
                i += 1;
            }
        }
        out
    }
}

/// Runs one command line as written; `Err` says why it is not run here.
fn run(dir: &Path, line: &str, n: usize) -> Result<(), String> {
    let prog = program(line);
    if prog != "collscope" {
        let why = OTHER_PROGRAMS.iter().find(|(p, _)| *p == prog).map(|(_, why)| *why);
        return Err(why
            .unwrap_or_else(|| panic!("`{line}`: no rule here for `{prog}` (add it to OTHER_PROGRAMS)"))
            .into());
    }
    if let Some(arg) = NEEDS_A_JOB.iter().find(|a| line.split_whitespace().any(|w| w == **a)) {
        return Err(format!("{arg} needs a running job (tests/tui.rs and tests/telemetry.rs start one)"));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let sub = words.iter().skip_while(|w| **w != "collscope").nth(1).copied().unwrap_or("");
    let interactive = sub == "tui" || (sub == "demo" && !words.contains(&"--no-tui"));
    if interactive {
        // A demo serves on 9470 and up unless told otherwise; other tests may hold those ports right now.
        let line = match sub {
            "demo" => format!("COLLSCOPE_METRICS_ADDR=127.0.0.1:{} {line}", collscope_testkit::free_ports(8)),
            _ => line.to_string(),
        };
        let t = pane(&format!("readme{n}"), (120, 40), dir, &line);
        t.wait_for(&["1Overview"]);
        t.keys(&["q"]);
        let screen = t.wait_for(&["EXIT="]);
        assert!(screen.contains("EXIT=0"), "`{line}` in a terminal:\n{screen}");
    } else if sub == "serve" {
        // A server runs until stopped: up for 3 s with no error is what the line promises.
        let mut p = Proc::spawn(shell(dir, line).stdout(Stdio::null()).stderr(Stdio::piped()), LIMIT);
        std::thread::sleep(Duration::from_secs(3));
        if let Some(status) = p.try_wait() {
            let err = p.finish().stderr;
            panic!("`{line}` ended at once ({status}): {}", String::from_utf8_lossy(&err));
        }
    } else {
        let out = output(&mut shell(dir, line), LIMIT);
        let err = String::from_utf8_lossy(&out.stderr);
        // `log analyze` exits 2 when a finding is an error, as documented; a usage error names --help.
        let documented = out.status.code() == Some(0) || (sub == "log" && out.status.code() == Some(2));
        assert!(documented && !err.contains("--help"), "`{line}`: {}\n{err}", out.status);
    }
    Ok(())
}

/// What a sample's source prints now.
fn capture(dir: &Path, source: &str, n: usize) -> Vec<String> {
    let text = if let Some(cmd) = source.strip_prefix("sample: ") {
        let out = output(&mut shell(dir, cmd), LIMIT);
        assert!(out.status.success() || out.status.code() == Some(2), "`{cmd}`: {}", out.status);
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        let spec = source.strip_prefix("screen: ").unwrap_or(source);
        let mut parts = spec.splitn(3, ' ');
        let size = parts.next().unwrap_or("");
        let keys = parts.next().unwrap_or("-");
        let cmd = parts.next().unwrap_or("");
        let (cols, rows) = size.split_once('x').expect("COLSxROWS");
        let t = pane(&format!("readme-screen{n}"), (cols.parse().unwrap(), rows.parse().unwrap()), dir, cmd);
        t.wait_for(&["1Overview"]);
        // A static source draws once it has its model; give it the time to settle before reading.
        std::thread::sleep(Duration::from_secs(2));
        for k in keys.split(',').filter(|k| *k != "-") {
            t.keys(&[k]);
            std::thread::sleep(Duration::from_millis(500));
        }
        t.screen()
    };
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

#[test]
fn every_command_in_the_readme_runs_as_written_and_its_samples_are_what_it_prints() {
    let mut readme = Readme::read();
    let dir = workdir();
    let (mut ran, mut skipped, mut stale) = (0, Vec::new(), Vec::new());
    let update = std::env::var("COLLSCOPE_UPDATE_README").is_ok_and(|v| v == "1");
    let mut edits = Vec::new();
    for (n, block) in readme.blocks().into_iter().enumerate() {
        match block {
            Block::Commands(cmds) => {
                for line in cmds {
                    match run(dir.path(), &line, n) {
                        Ok(()) => ran += 1,
                        Err(why) => skipped.push(format!("{line}: {why}")),
                    }
                }
            }
            Block::Sample { source, body } => {
                let now = capture(dir.path(), &source, n);
                if now != readme.lines[body.clone()] {
                    stale.push(format!("{source}:\n{}", now.join("\n")));
                    edits.push((body, now));
                }
            }
        }
    }
    eprintln!("ran {ran} README commands; not run here:\n  {}", skipped.join("\n  "));
    if update && !edits.is_empty() {
        for (body, now) in edits.into_iter().rev() {
            readme.lines.splice(body, now);
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        std::fs::write(path, readme.lines.join("\n") + "\n").unwrap();
        return;
    }
    assert!(ran > 0, "no README command ran");
    assert!(
        stale.is_empty(),
        "README samples differ from what the commands print now (COLLSCOPE_UPDATE_README=1 rewrites them):\n{}",
        stale.join("\n\n")
    );
}
