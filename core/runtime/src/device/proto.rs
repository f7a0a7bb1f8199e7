//! The three protocols over a connection's slots (NCCL 2.28.9 `src/device/prims_simple.h`, `prims_ll.h`,
//! `prims_ll128.h`), on host memory with explicit acquire/release ordering:
//! - Simple: payload bytes in the slot; the receiver waits for `tail`, the sender for `head` credit.
//! - LL: 16-byte lines of (4 data bytes, 4 flag bytes) x 2; each (data, flag) pair is one 64-bit atomic store,
//!   so a reader that sees flag == step + 1 sees its data. No wait on `tail`.
//! - LL128: 128-byte lines of 120 data bytes and an 8-byte flag stored with release after the data.
//!
//! Every protocol still posts `tail` and slot info, which the NET proxy uses to know a step is ready.

use crate::error::{Result, RuntimeError};
use crate::sync::wait::Waiter;
use crate::transport::conn::{RecvEnd, SendEnd, LL128_DATA, LL128_LINE, LL_LINE};
use collscope_model::Protocol;
use std::sync::atomic::{AtomicU64, Ordering};

fn ll_flag(step: u64) -> u64 {
    (step + 1) & 0xffff_ffff
}

/// Waits until the sender's current slot is free.
pub(crate) fn wait_credit(end: &SendEnd, w: &Waiter, channel: u32) -> Result<()> {
    w.wait_on(
        end.mem.head_bell(),
        || end.has_credit(),
        || format!("credit from rank {} on channel {channel} (step {})", end.peer, end.step),
    )
}

/// Writes `len` payload bytes from `src` into the sender's current slot and posts it. Credit must be held.
///
/// # Safety
/// `src` must be valid for `len` bytes, `len` at most the step payload of `proto`.
pub(crate) unsafe fn write_step(end: &mut SendEnd, proto: Protocol, src: *const u8, len: usize) {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. The
    // slot holds a step's payload of `proto`, which `len` does not exceed.
    unsafe {
        let slot = end.mem.slot(proto, end.step);
        let slot_bytes = match proto {
            Protocol::Simple => {
                collscope_kernels::bytes::copy(slot, src, len);
                len
            }
            Protocol::Ll => {
                let flag = ll_flag(end.step) << 32;
                let lines = len.div_ceil(8);
                for i in 0..lines {
                    let n = 8.min(len - 8 * i);
                    // Whole words are read in one load; only a short tail goes through a byte copy.
                    let v = if n == 8 {
                        u64::from_le((src.add(8 * i) as *const u64).read_unaligned())
                    } else {
                        let mut word = [0u8; 8];
                        std::ptr::copy_nonoverlapping(src.add(8 * i), word.as_mut_ptr(), n);
                        u64::from_le_bytes(word)
                    };
                    let (lo, hi) = (v & 0xffff_ffff, v >> 32);
                    let line = slot.add(i * LL_LINE) as *const AtomicU64;
                    (*line).store(lo | flag, Ordering::Release);
                    (*line.add(1)).store(hi | flag, Ordering::Release);
                }
                lines * LL_LINE
            }
            Protocol::Ll128 => {
                let flag = end.step + 1;
                let lines = len.div_ceil(LL128_DATA);
                for i in 0..lines {
                    let n = LL128_DATA.min(len - LL128_DATA * i);
                    let line = slot.add(i * LL128_LINE);
                    if n == LL128_DATA {
                        std::ptr::copy_nonoverlapping(src.add(LL128_DATA * i), line, LL128_DATA);
                    } else {
                        std::ptr::copy_nonoverlapping(src.add(LL128_DATA * i), line, n);
                    }
                    (*(line.add(LL128_DATA) as *const AtomicU64)).store(flag, Ordering::Release);
                }
                lines * LL128_LINE
            }
        };
        end.post(proto, slot_bytes);
    }
}

/// Waits for the receiver's current Simple step and returns where its `len` payload bytes lie: in the slot, or
/// in the sender's buffer for a direct step. The caller reads them, then calls `end.release()`.
pub(crate) fn read_simple(end: &RecvEnd, len: usize, w: &Waiter, channel: u32) -> Result<*const u8> {
    debug_assert!(len > 0, "steps always carry data");
    let what = || format!("data from rank {} on channel {channel} (step {}, Simple)", end.peer, end.step);
    w.wait_on(end.mem.tail_bell(), || end.has_data(), what)?;
    // Both sides cut a call into the same steps, so a different size means the ranks disagree.
    let (sent_proto, sent) = end.mem.step_info(end.step);
    if sent_proto != Some(Protocol::Simple) || sent != len {
        return Err(RuntimeError::Mismatch {
            what: "message size across ranks",
            detail: format!(
                "rank {} sent {sent} bytes ({}) for step {} on channel {channel} where {len} bytes (Simple) were \
                 expected: counts, datatypes, NCCL_PROTO or buffer sizes differ between ranks",
                end.peer,
                sent_proto.map_or("?", |p| p.as_str()),
                end.step
            ),
        });
    }
    end.payload(Protocol::Simple, len).ok_or_else(|| RuntimeError::Mismatch {
        what: "registered buffers across ranks",
        detail: format!(
            "rank {} posted step {} on channel {channel} from memory outside every buffer it registered with this \
             rank",
            end.peer, end.step
        ),
    })
}

/// Where [`read_lines`] unpacks an LL/LL128 step's payload.
pub(crate) enum Unpack<'a> {
    /// Into the caller's scratch, in whole words (LL) or lines (LL128), of which the caller reads `len` bytes.
    Scratch(&'a mut Vec<u64>),
    /// Into the `len` bytes at this address, and not past them: the destination of a step that is its only
    /// input, so it lands where it belongs with no copy after (OneShot's rows, a ring's final AllGather pieces).
    Into(*mut u8),
}

/// Waits for the receiver's current LL/LL128 step and unpacks its `len` payload bytes as `out` says, returning
/// where they are. The caller reads them, then calls `end.release()`.
///
/// # Safety
/// An [`Unpack::Into`] address must be writable for `len` bytes.
pub(crate) unsafe fn read_lines(
    end: &RecvEnd,
    proto: Protocol,
    len: usize,
    out: Unpack,
    w: &Waiter,
    channel: u32,
) -> Result<*const u8> {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. The
    // slot's lines lie inside the connection's memory and its words are 8-byte aligned.
    unsafe {
        debug_assert!(len > 0, "steps always carry data");
        let what = || format!("data from rank {} on channel {channel} (step {}, {proto})", end.peer, end.step);
        let slot = end.mem.slot(proto, end.step);
        // Where the payload goes, and whether it may be written in whole words or lines past `len`.
        let unpack_to = |whole: usize| match out {
            Unpack::Scratch(scratch) => {
                scratch.resize(whole.div_ceil(8), 0);
                (scratch.as_mut_ptr() as *mut u8, false)
            }
            Unpack::Into(at) => (at, true),
        };
        if proto == Protocol::Ll128 {
            let lines = len.div_ceil(LL128_DATA);
            let (out, exact) = unpack_to(lines * LL128_DATA);
            let flag = end.step + 1;
            let last = &*(slot.add((lines - 1) * LL128_LINE + LL128_DATA) as *const AtomicU64);
            w.wait_on(end.mem.tail_bell(), || last.load(Ordering::Acquire) == flag, what)?;
            for i in 0..lines {
                let line = slot.add(i * LL128_LINE);
                let f = &*(line.add(LL128_DATA) as *const AtomicU64);
                if f.load(Ordering::Acquire) != flag {
                    w.wait(|| f.load(Ordering::Acquire) == flag, what)?;
                }
                let to = out.add(LL128_DATA * i);
                match len - LL128_DATA * i {
                    // Whole lines at a fixed size (an inlined copy); into scratch the last one too, as it has room.
                    n if n >= LL128_DATA || !exact => std::ptr::copy_nonoverlapping(line, to, LL128_DATA),
                    n => std::ptr::copy_nonoverlapping(line, to, n),
                }
            }
            return Ok(out.cast_const());
        }
        debug_assert_eq!(proto, Protocol::Ll, "Simple steps are read with read_simple");
        let flag = ll_flag(end.step);
        let lines = len.div_ceil(8);
        let (out, exact) = unpack_to(lines * 8);
        // One writer stores the lines in order, so waiting for the last line first leaves the per-line checks below
        // to succeed at once instead of chasing the writer line by line.
        let last = slot.add((lines - 1) * LL_LINE) as *const AtomicU64;
        // The sender posts `tail` after the lines, so sleeping on it is safe.
        w.wait_on(end.mem.tail_bell(), || (*last.add(1)).load(Ordering::Acquire) >> 32 == flag, what)?;
        for i in 0..lines {
            // Lines of this step lie inside the slot; words are 8-byte aligned.
            let line = slot.add(i * LL_LINE) as *const AtomicU64;
            let (mut lo, mut hi) = ((*line).load(Ordering::Acquire), (*line.add(1)).load(Ordering::Acquire));
            // Lines before the last are almost always there already: wait only when one is not.
            if lo >> 32 != flag || hi >> 32 != flag {
                w.wait(
                    || {
                        lo = (*line).load(Ordering::Acquire);
                        hi = (*line.add(1)).load(Ordering::Acquire);
                        lo >> 32 == flag && hi >> 32 == flag
                    },
                    what,
                )?;
            }
            let word = ((lo & 0xffff_ffff) | (hi << 32)).to_le_bytes();
            let n = if exact { 8.min(len - 8 * i) } else { 8 };
            std::ptr::copy_nonoverlapping(word.as_ptr(), out.add(8 * i), n);
        }
        Ok(out.cast_const())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::wait::{AbortHandle, Patience};
    use crate::transport::conn::{BufSizes, ConnMem};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn every_protocol_carries_odd_lengths_across_many_steps_between_threads_into_scratch_or_a_destination() {
        let sizes = BufSizes { simple: 8 * 256, ll: 8 * 16 * 16, ll128: 8 * 128 * 2 };
        for proto in [Protocol::Simple, Protocol::Ll, Protocol::Ll128] {
            let mem = Arc::new(ConnMem::anonymous(sizes).unwrap());
            let w = Waiter {
                rank: 0,
                timeout: Duration::from_secs(20),
                abort: AbortHandle::default(),
                patience: Patience::ALONE,
            };
            let cap = sizes.step_payload(proto);
            let lens: Vec<usize> = (0..40).map(|i| (i * 37 + 1) % cap + 1).collect();
            let mut send = SendEnd::new(mem.clone(), 1);
            let mut recv = RecvEnd { mem, peer: 0, step: 0 };
            let lens2 = lens.clone();
            let w2 = w.clone();
            let t = std::thread::spawn(move || {
                for (s, len) in lens2.iter().enumerate() {
                    let data: Vec<u8> = (0..*len).map(|i| (i + s) as u8).collect();
                    wait_credit(&send, &w2, 0).unwrap();
                    // SAFETY: `data` is `len` bytes, and `wait_credit` above made room for the step.
                    unsafe { write_step(&mut send, proto, data.as_ptr(), *len) };
                }
            });
            let mut scratch = Vec::new();
            // Every other LL/LL128 step is unpacked into a destination at an odd address, between guard bytes
            // that must stay as they were: an exact unpack writes the step's bytes and nothing past them.
            let mut dest = vec![0xa5u8; cap + 16];
            for (s, len) in lens.iter().enumerate() {
                let into = dest[1..].as_mut_ptr();
                let p = match proto {
                    Protocol::Simple => read_simple(&recv, *len, &w, 0),
                    // SAFETY: `into` is `dest[1..]`, `cap + 15` bytes, and no step is longer than `cap`.
                    _ if s % 2 == 1 => unsafe { read_lines(&recv, proto, *len, Unpack::Into(into), &w, 0) },
                    // SAFETY: the scratch grows to the step; no pointer of the caller's is written.
                    _ => unsafe { read_lines(&recv, proto, *len, Unpack::Scratch(&mut scratch), &w, 0) },
                }
                .unwrap();
                // SAFETY: `read_simple`/`read_lines` returned `len` readable bytes, valid until `release` below.
                let got = unsafe { std::slice::from_raw_parts(p, *len) }.to_vec();
                recv.release();
                let want: Vec<u8> = (0..*len).map(|i| (i + s) as u8).collect();
                assert_eq!(got, want, "{proto} step {s}");
                if proto != Protocol::Simple && s % 2 == 1 {
                    assert_eq!(p, into.cast_const(), "{proto} step {s} lands in the destination");
                    assert_eq!(dest[0], 0xa5, "{proto} step {s} wrote before the destination");
                    assert!(dest[1 + len..].iter().all(|&b| b == 0xa5), "{proto} step {s} wrote past its {len} bytes");
                    dest[1..1 + len].fill(0xa5);
                }
            }
            t.join().unwrap();
        }
    }
}
