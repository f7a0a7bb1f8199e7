//! Small facts about the running process and host that log lines and ids need.

/// The short host name NCCL prints (`gethostname`, cut at the first dot like NCCL's `getHostName`).
pub fn hostname() -> String {
    let full =
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".to_string());
    match full.split_once('.') {
        Some((short, _)) if !short.is_empty() => short.to_string(),
        _ => full,
    }
}

/// The kernel thread id, as NCCL's `syscall(SYS_gettid)`.
pub fn gettid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

/// NCCL's default timestamp prefix, `[%F %T] ` in local time.
pub fn timestamp_prefix() -> String {
    chrono::Local::now().format("[%F %T] ").to_string()
}
