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

/// When process `pid` started (field 22 of `/proc/PID/stat`, clock ticks after boot): with its pid, what names
/// a process, since the kernel reuses a pid once its process exited. `None` when it cannot be read.
pub fn process_started(pid: u32) -> Option<u64> {
    // A stat line is a few hundred bytes.
    let text = crate::file::read_small_string(std::path::Path::new(&format!("/proc/{pid}/stat")), 4096).ok()?;
    collscope_model::job::proc_stat(&text).1
}

/// NCCL's default timestamp prefix, `[%F %T] ` in local time.
pub fn timestamp_prefix() -> String {
    chrono::Local::now().format("[%F %T] ").to_string()
}

/// Bytes of memory this process could still get: the kernel's `MemAvailable`, or less when its cgroup (v2)
/// caps memory lower. `None` when the kernel says neither.
pub fn available_memory() -> Option<u64> {
    // /proc/meminfo is a few KiB; the cgroup files hold one number.
    let read = |p: &str, limit: u64| crate::file::read_small_string(std::path::Path::new(p), limit).ok();
    let meminfo = read("/proc/meminfo", 64 << 10).and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    });
    let read = |f: &str| read(&format!("/sys/fs/cgroup/{f}"), 4096)?.trim().parse::<u64>().ok();
    // memory.max reads "max" without a limit, which does not parse.
    let cgroup = read("memory.max").map(|max| max.saturating_sub(read("memory.current").unwrap_or(0)));
    match (meminfo.map(|k| k * 1024), cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A CPU's last-level cache: its size and the CPUs that share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub bytes: u64,
    pub cpus: Vec<u32>,
}

/// The last-level cache of `cpu` as the kernel describes it (`/sys/devices/system/cpu/cpuN/cache/index*`: the
/// highest level that holds data), or `None` when it does not.
pub fn last_level_cache(cpu: u32) -> Option<Cache> {
    last_level_cache_in(std::path::Path::new("/sys/devices/system/cpu"), cpu)
}

fn last_level_cache_in(root: &std::path::Path, cpu: u32) -> Option<Cache> {
    let dir = root.join(format!("cpu{cpu}/cache"));
    // sysfs attributes are at most a page.
    let read = |d: &std::path::Path, f: &str| {
        crate::file::read_small_string(&d.join(f), 4096).ok().map(|s| s.trim().to_string())
    };
    let mut best: Option<(u32, Cache)> = None;
    for entry in std::fs::read_dir(&dir).ok()?.flatten() {
        let d = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index")
            || read(&d, "type").as_deref() == Some("Instruction")
        {
            continue;
        }
        let (Some(level), Some(bytes), Some(cpus)) = (
            read(&d, "level").and_then(|l| l.parse::<u32>().ok()),
            read(&d, "size").and_then(|s| cache_bytes(&s)),
            read(&d, "shared_cpu_list").and_then(|l| cpu_list(&l)),
        ) else {
            continue;
        };
        if best.as_ref().is_none_or(|(l, _)| level > *l) {
            best = Some((level, Cache { bytes, cpus }));
        }
    }
    best.map(|(_, c)| c)
}

/// sysfs's cache size: a number with a K, M or G suffix ("32768K").
fn cache_bytes(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(scale)
}

/// The kernel's CPU list format ("0-3,8,10-11").
fn cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_level_cache_is_the_highest_level_that_holds_data() {
        let root = std::env::temp_dir().join(format!("collscope-cache-{}", std::process::id()));
        let index = |i: u32, level: &str, kind: &str, size: &str, cpus: &str| {
            let d = root.join(format!("cpu1/cache/index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [("level", level), ("type", kind), ("size", size), ("shared_cpu_list", cpus)] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        index(0, "1", "Data", "32K", "1");
        index(1, "1", "Instruction", "32K", "1");
        index(2, "2", "Unified", "1024K", "1");
        index(3, "3", "Unified", "32768K", "0-3,8,10-11");
        let got = super::last_level_cache_in(&root, 1);
        assert_eq!(got, Some(super::Cache { bytes: 32 << 20, cpus: vec![0, 1, 2, 3, 8, 10, 11] }));
        assert_eq!(super::last_level_cache_in(&root, 2), None, "no cache directory");
        // An instruction cache is never the last level for data, however high; a size without a unit is bytes.
        index(4, "4", "Instruction", "64M", "1");
        assert_eq!(super::last_level_cache_in(&root, 1).map(|c| c.bytes), Some(32 << 20));
        assert_eq!(super::cache_bytes("4096"), Some(4096));
        assert_eq!(super::cache_bytes("12Q"), None);
        assert_eq!(super::cpu_list("0-1,x"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn available_memory_is_read_from_the_kernel() {
        let avail = super::available_memory().expect("/proc/meminfo has MemAvailable");
        assert!(avail > 1 << 20, "{avail}");
    }
}
