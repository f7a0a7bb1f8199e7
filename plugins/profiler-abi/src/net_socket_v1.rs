//! The NetPlugin event data of NCCL's socket network (NCCL 2.28.9 `src/include/plugin/profiler/net_socket_v1.h`;
//! the id bits from `src/include/plugin/nccl_profiler.h`): a NetPlugin event's `id` names the network type and the
//! version of its `data`, which points at a [`Descr`].

use std::ffi::c_int;

/// `NCCL_PROFILER_NET_VER_BITS`: the low bits of `id` hold the data's version, the high ones the network type.
pub const NET_VER_BITS: u32 = 16;
/// `NCCL_PROFILER_NET_TYPE_SOCK`.
pub const NET_TYPE_SOCK: u32 = 2 << NET_VER_BITS;
/// `NCCL_PROFILER_NET_SOCKET_VER`.
pub const VERSION: u32 = 1;
/// The `id` of a socket event of this version.
pub const ID: i64 = (NET_TYPE_SOCK | VERSION) as i64;
/// `ncclProfileSocket`: one transfer on one socket.
pub const PROFILE_SOCKET: u8 = 1;
/// `NCCL_SOCKET_SEND` / `NCCL_SOCKET_RECV` (`src/include/socket.h`).
pub const OP_SEND: c_int = 0;
pub const OP_RECV: c_int = 1;

/// `ncclProfilerNetSockDescr_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Descr {
    pub type_: u8,
    pub sock: Sock,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sock {
    pub fd: c_int,
    pub op: c_int,
    pub length: usize,
}
