//! A real terminal for the TUI's end-to-end tests: `collscope` in an 80x24 tmux pane, driven by keys and read
//! back with `tmux capture-pane`. Each one has its own tmux server (`-L`), killed when the test ends however it
//! ends; the program in the pane has a deadline too.

use collscope_testkit::{output, Proc};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one tmux command may take.
pub(crate) const TMUX_DEADLINE: Duration = Duration::from_secs(30);
/// How long a wait for the screen may take.
pub(crate) const SCREEN_WAIT: Duration = Duration::from_secs(30);

pub(crate) struct Tmux {
    socket: String,
    /// The server's socket file, removed at the end (tmux leaves it behind).
    socket_path: PathBuf,
}

impl Tmux {
    /// Starts `collscope <args>` in an 80x24 pane. The shell around it prints the exit status and lingers, so a
    /// test can check that `q` left the normal screen behind. `timeout --foreground` keeps the terminal the
    /// program's and bounds it: the pane, and with it the server, ends within 5 minutes whatever happens.
    pub(crate) fn start(name: &str, args: &[&str]) -> Tmux {
        Tmux::start_sized(name, (80, 24), args)
    }

    /// [`Tmux::start`] in a pane of (columns, rows).
    pub(crate) fn start_sized(name: &str, (cols, rows): (u16, u16), args: &[&str]) -> Tmux {
        let bin = env!("CARGO_BIN_EXE_collscope");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let cmd = format!("timeout --foreground -s KILL 240 '{bin}' {}; echo EXIT=$?; sleep 60", quoted.join(" "));
        Tmux::start_shell(name, (cols, rows), &cmd)
    }

    /// A pane of (columns, rows) running the shell command `cmd`, which must bound itself and linger as
    /// [`Tmux::start`]'s does.
    pub(crate) fn start_shell(name: &str, (cols, rows): (u16, u16), cmd: &str) -> Tmux {
        let socket = format!("collscope-{name}-{}", std::process::id());
        let mut t = Tmux { socket, socket_path: PathBuf::new() };
        let (x, y) = (cols.to_string(), rows.to_string());
        t.tmux(&["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", &x, "-y", &y, "sh", "-c", cmd]);
        t.socket_path = PathBuf::from(t.tmux(&["display-message", "-p", "#{socket_path}"]).trim());
        t
    }

    pub(crate) fn tmux(&self, args: &[&str]) -> String {
        let out = output(Command::new("tmux").arg("-L").arg(&self.socket).args(args), TMUX_DEADLINE);
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", "t", k]);
        }
    }

    pub(crate) fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits (up to [`SCREEN_WAIT`]) until every needle is on screen; returns the screen.
    pub(crate) fn wait_for<S: AsRef<str>>(&self, needles: &[S]) -> String {
        let deadline = Instant::now() + SCREEN_WAIT;
        loop {
            let screen = self.screen();
            if needles.iter().all(|n| screen.contains(n.as_ref())) {
                return screen;
            }
            let needles: Vec<&str> = needles.iter().map(AsRef::as_ref).collect();
            assert!(Instant::now() < deadline, "waited {SCREEN_WAIT:?} for {needles:?}; the screen is:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    /// Waits without asserting: a panic here, while a failed test unwinds, would abort the whole run.
    fn drop(&mut self) {
        let mut kill = Command::new("tmux");
        kill.arg("-L").arg(&self.socket).arg("kill-server").stdout(Stdio::null()).stderr(Stdio::null());
        Proc::spawn(&mut kill, TMUX_DEADLINE).wait();
        let _ = std::fs::remove_file(&self.socket_path);
    }
}
