//! The hot path allocates nothing: NCCL's event calls, made through the exported `ncclProfiler_v5` the way NCCL
//! makes them, under an allocator that counts the calling thread's allocations.

use collscope_profiler::abi::{kind, v5, StateArgs, StateKernelCh, StateProxyStep};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::mem::zeroed;
use std::ptr::null_mut;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; only a thread-local counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `GlobalAlloc::alloc`'s contract, passed on to `System`.
        unsafe {
            ALLOCS.with(|a| a.set(a.get() + 1));
            System.alloc(l)
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller keeps `GlobalAlloc::dealloc`'s contract, passed on to `System`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: the caller keeps `GlobalAlloc::realloc`'s contract, passed on to `System`.
        unsafe {
            ALLOCS.with(|a| a.set(a.get() + 1));
            System.realloc(p, l, n)
        }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn start(ctx: *mut c_void, d: &mut v5::Descr) -> *mut c_void {
    let p = &v5::ncclProfiler_v5;
    let mut h = null_mut();
    // SAFETY: `ctx` is the context `init` gave, `h` a place for the handle and `d` a filled descriptor.
    assert_eq!(unsafe { (p.start_event)(ctx, &mut h, d) }, 0);
    h
}

fn descr(type_: u64, parent: *mut c_void) -> v5::Descr {
    // SAFETY: NCCL zeroes descriptors too; all-zero is valid for every member (pointers NULL, numbers 0).
    let mut d: v5::Descr = unsafe { zeroed() };
    d.type_ = type_;
    d.parent_obj = parent;
    d.rank = 0;
    d
}

#[test]
fn nccls_event_calls_do_not_allocate() {
    let p = &v5::ncclProfiler_v5;
    let (mut ctx, mut mask): (*mut c_void, c_int) = (null_mut(), 0);
    // SAFETY: `ctx` and `mask` are places for the plugin's writes; the name is NUL-terminated.
    assert_eq!(unsafe { (p.init)(&mut ctx, 7, &mut mask, c"alloc".as_ptr(), 1, 2, 0, None) }, 0);
    let call = |i: u64| {
        let mut d = descr(kind::COLL, null_mut());
        d.u.coll = v5::Coll {
            seq_number: i,
            func: c"AllReduce".as_ptr(),
            send_buff: null_mut(),
            recv_buff: null_mut(),
            count: 1024,
            root: 0,
            datatype: c"ncclFloat32".as_ptr(),
            n_channels: 1,
            n_warps: 8,
            algo: c"RING".as_ptr(),
            proto: c"LL".as_ptr(),
            parent_group: null_mut(),
        };
        let c = start(ctx, &mut d);
        assert!(!c.is_null());
        let mut d = descr(kind::PROXY_OP, c);
        d.u.proxy_op.pid = std::process::id() as i32;
        d.u.proxy_op.n_steps = 1;
        d.u.proxy_op.is_send = 1;
        let op = start(ctx, &mut d);
        let mut d = descr(kind::PROXY_STEP, op);
        let step = start(ctx, &mut d);
        let mut a = StateArgs { proxy_step: StateProxyStep { trans_size: 4096 } };
        for st in [8, 20, 9] {
            // SAFETY: `step` is a live handle and `a` the state arguments of a step.
            unsafe { (p.record_event_state)(step, st, &mut a) };
        }
        // SAFETY: each handle stopped is live and stopped once, children before parents.
        unsafe { (p.stop_event)(step) };
        // SAFETY: as above.
        unsafe { (p.stop_event)(op) };
        let mut d = descr(kind::KERNEL_CH, c);
        d.u.kernel_ch.p_timer = 10 + i;
        let k = start(ctx, &mut d);
        let mut a = StateArgs { kernel_ch: StateKernelCh { p_timer: 20 + i } };
        // SAFETY: `k` is a live handle and `a` a kernel channel's state arguments.
        unsafe { (p.record_event_state)(k, 22, &mut a) };
        // SAFETY: as above.
        unsafe { (p.stop_event)(k) };
        // SAFETY: as above.
        unsafe { (p.stop_event)(c) };
    };
    call(0); // the first call may initialise lazies
    let before = allocs();
    for i in 1..10_000 {
        call(i);
    }
    assert_eq!(allocs() - before, 0, "allocations on the hot path");
    let c = collscope_profiler::counters();
    assert_eq!((c.calls_completed, c.proxy_ops, c.dropped_events, c.orphan_events), (10_000, 10_000, 0, 0));
    // SAFETY: `ctx` is the context `init` gave, finalized once.
    assert_eq!(unsafe { (p.finalize)(ctx) }, 0);
}
