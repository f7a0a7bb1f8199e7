//! CUDA through cudarc, loaded at run time. Without libcuda collscope says so once and runs on host memory;
//! nothing here panics for lack of a driver because [`device::driver`] checks for the library before any call.
//!
//! - [`source`]: the reduce/copy kernels as CUDA C (builds and tests everywhere).
//! - [`device`] (feature `cuda`): driver presence, GPUs and their facts (bus id, SM, memory, P2P access).
//! - [`kernels`] (feature `cuda`): NVRTC compilation with an on-disk PTX cache, launches on a stream with
//!   GPU timestamps from events.
//! - [`buffer`] (feature `cuda`): `DeviceBuffer`, device memory tagged with its datatype.
//! - [`collective`] (feature `cuda`): AllReduce across the GPUs of in-process ranks (P2P, local or host-staged).

// The kernels' CUDA C, compiled by NVRTC only with `cuda`; its tests run without it.
#[cfg(any(feature = "cuda", test))]
pub(crate) mod source;

#[cfg(feature = "cuda")]
pub mod buffer;
#[cfg(feature = "cuda")]
pub mod collective;
#[cfg(feature = "cuda")]
pub mod device;
#[cfg(feature = "cuda")]
pub(crate) mod kernels;

/// Errors of the CUDA layer, each naming the driver or NVRTC call that failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver (libcuda.so could not be loaded)")]
    NoDriver,
    #[error("CUDA {call} failed: {msg}")]
    Driver { call: &'static str, msg: String },
    /// A driver call's own error (cudarc's `DriverError`, boxed: the type exists only with feature `cuda`).
    #[error("CUDA {call} failed: {source}")]
    DriverFailed {
        call: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// NVRTC's error (cudarc's `CompileError`, boxed as for `DriverFailed`).
    #[error("NVRTC could not compile the collscope kernels for {arch}: {source}")]
    Compile {
        arch: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Env(#[from] collscope_debug::env::EnvError),
    #[error("{0}")]
    Usage(String),
}
