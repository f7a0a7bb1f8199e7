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

/// Bytes of memory this process could still get: the kernel's `MemAvailable`, or less when its cgroup (v2)
/// caps memory lower. `None` when the kernel says neither.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    });
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok()?.trim().parse::<u64>().ok();
    // memory.max reads "max" without a limit, which does not parse.
    let cgroup = read("memory.max").map(|max| max.saturating_sub(read("memory.current").unwrap_or(0)));
    match (meminfo.map(|k| k * 1024), cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn available_memory_is_read_from_the_kernel() {
        let avail = super::available_memory().expect("/proc/meminfo has MemAvailable");
        assert!(avail > 1 << 20, "{avail}");
    }
}
