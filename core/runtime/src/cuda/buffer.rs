//! `DeviceBuffer`: GPU memory holding `count` elements of one NCCL datatype, the buffer type of collscope's
//! public GPU API (a cudarc `CudaSlice<u8>` underneath, reachable for callers that already use cudarc).

use super::device::drv;
use super::CudaError;
use collscope_kernels::{Dtype, Element};
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;

pub struct DeviceBuffer {
    bytes: CudaSlice<u8>,
    dtype: Dtype,
    count: usize,
}

/// The bytes of a slice of kernel elements (all plain data without padding).
pub fn element_bytes<T: Element>(v: &[T]) -> &[u8] {
    // SAFETY: Element types are integers, floats and half types: no padding, no invalid byte patterns read.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

impl DeviceBuffer {
    /// `count` zeroed elements on `stream`'s device.
    pub fn zeros(stream: &Arc<CudaStream>, dtype: Dtype, count: usize) -> Result<DeviceBuffer, CudaError> {
        let bytes = stream.alloc_zeros::<u8>(count * dtype.size()).map_err(drv("cuMemAllocAsync"))?;
        Ok(DeviceBuffer { bytes, dtype, count })
    }

    /// A copy of `host` (whole elements of `dtype`) on `stream`'s device.
    pub fn from_host(stream: &Arc<CudaStream>, dtype: Dtype, host: &[u8]) -> Result<DeviceBuffer, CudaError> {
        if !host.len().is_multiple_of(dtype.size()) {
            return Err(CudaError::Usage(format!("{} bytes are not whole {dtype:?} elements", host.len())));
        }
        let bytes = stream.clone_htod(host).map_err(drv("cuMemcpyHtoDAsync"))?;
        Ok(DeviceBuffer { bytes, dtype, count: host.len() / dtype.size() })
    }

    /// A copy of `src`, queued on `stream`.
    pub fn from_device(stream: &Arc<CudaStream>, src: &DeviceBuffer) -> Result<DeviceBuffer, CudaError> {
        let mut b = Self::zeros(stream, src.dtype, src.count)?;
        b.copy_from(stream, src)?;
        Ok(b)
    }

    /// A typed copy of `host`.
    pub fn from_elements<T: Element>(stream: &Arc<CudaStream>, host: &[T]) -> Result<DeviceBuffer, CudaError> {
        Self::from_host(stream, T::DTYPE, element_bytes(host))
    }

    /// The contents, after the stream's queued work.
    pub fn to_host(&self, stream: &Arc<CudaStream>) -> Result<Vec<u8>, CudaError> {
        stream.clone_dtoh(&self.bytes).map_err(drv("cuMemcpyDtoHAsync"))
    }

    /// Overwrites the contents with `host`, queued on `stream`.
    pub fn copy_from_host(&mut self, stream: &Arc<CudaStream>, host: &[u8]) -> Result<(), CudaError> {
        if host.len() != self.bytes.len() {
            return Err(CudaError::Usage(format!(
                "copy of {} bytes into a {}-byte buffer",
                host.len(),
                self.bytes.len()
            )));
        }
        stream.memcpy_htod(host, &mut self.bytes).map_err(drv("cuMemcpyHtoDAsync"))
    }

    /// Device-to-device copy from `src` (same device, or peer access enabled), queued on `stream`.
    pub fn copy_from(&mut self, stream: &Arc<CudaStream>, src: &DeviceBuffer) -> Result<(), CudaError> {
        if src.bytes.len() != self.bytes.len() {
            return Err(CudaError::Usage("device copy between buffers of different sizes".into()));
        }
        stream.memcpy_dtod(&src.bytes, &mut self.bytes).map_err(drv("cuMemcpyDtoDAsync"))
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.bytes
    }

    pub fn bytes_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.bytes
    }
}
