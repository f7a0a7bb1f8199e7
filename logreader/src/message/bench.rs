//! The device list nccl-tests and rccl-tests print before their results (`src/common.cu`): every rank of the
//! job, its process and its host.

/// `#  Rank  0 Group  0 Pid 1789224 on H20-GPU-05 device  0 [0000:18:00] NVIDIA H20-3e`, and the older
/// `#   Rank  0 Pid   3801 on ip-172-31-41-105 device  0 [0x00] Tesla V100-SXM2-32GB`: (rank, host).
pub fn rank_line(text: &str) -> Option<(u32, &str)> {
    let mut words = text.trim_start().strip_prefix('#')?.split_ascii_whitespace();
    if words.next()? != "Rank" {
        return None;
    }
    let rank = words.next()?.parse().ok()?;
    let mut words = words.skip_while(|w| *w != "on");
    words.next()?;
    let host = words.next()?;
    (words.next()? == "device").then_some((rank, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_and_nothing_else() {
        let new = "#  Rank  3 Group  0 Pid 4015540 on H20-GPU-06 device  1 [0000:38:00] NVIDIA H20-3e";
        assert_eq!(rank_line(new), Some((3, "H20-GPU-06")));
        let old = "#   Rank  7 Pid   3813 on ip-172-31-41-105 device  7 [0x00] Tesla V100-SXM2-32GB";
        assert_eq!(rank_line(old), Some((7, "ip-172-31-41-105")));
        assert_eq!(rank_line("#  Rank  x Pid 1 on h device 0"), None);
        assert_eq!(rank_line("# Rank of the results: 1"), None);
        assert_eq!(rank_line("#       size         count"), None);
    }
}
