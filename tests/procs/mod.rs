//! The processes of a job, read from /proc: what the tests that kill or stop one rank of a job share.
#![allow(dead_code)] // each test file that shares this module uses a part of it

/// The variables through which a launcher tells a process it is a rank: none may leak in from the caller.
pub(crate) const LAUNCH_VARS: [&str; 14] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "COLLSCOPE_RANK",
    "COLLSCOPE_NRANKS",
    "COLLSCOPE_UNIQUE_ID",
    "NCCL_COMM_ID",
    "TORCHELASTIC_RUN_ID",
];

/// (pid, parent pid, process group) of every live (not zombie) process.
pub(crate) fn processes() -> Vec<(u32, u32, u32)> {
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

pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.1 == pid).map(|p| p.0).collect()
}

/// The process the launcher `launcher` started as rank `rank`, once it runs collscope (after exec).
pub(crate) fn rank_process(launcher: u32, rank: u32) -> Option<u32> {
    let mark = format!("COLLSCOPE_RANK={rank}");
    children_of(launcher).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == mark.as_bytes()))
    })
}
