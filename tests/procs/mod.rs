//! The processes of a job, read from /proc: what the tests that kill or stop one rank of a job share.

/// (pid, parent pid, process group) of every live (not zombie) process.
pub fn processes() -> Vec<(u32, u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name in parentheses: state, ppid, pgrp.
            let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            (f.first() != Some(&"Z")).then_some((pid, f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?))
        })
        .collect()
}

pub fn children_of(pid: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.1 == pid).map(|p| p.0).collect()
}

/// The process the launcher `launcher` started as rank `rank`, once it runs collscope (after exec).
pub fn rank_process(launcher: u32, rank: u32) -> Option<u32> {
    let mark = format!("COLLSCOPE_RANK={rank}");
    children_of(launcher).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == mark.as_bytes()))
    })
}
