//! The reduce/copy kernels on a GPU: [`super::source`] compiled by NVRTC for the device's architecture,
//! cached on disk (`$COLLSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/collscope`, else `~/.cache/collscope`) and per
//! context in memory; launched on a stream between two timing events so every call has GPU timestamps.

use super::buffer::DeviceBuffer;
use super::device::drv;
use super::source::{cache_key, div_kernel, module_source, reduce_kernel};
use super::CudaError;
use collscope_kernels::Op;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::sync::Arc;

/// The compiled module of one context.
pub(crate) struct GpuKernels {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
}

/// GPU time of one launch, from events recorded around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuTiming {
    pub ms: f32,
}

/// NVRTC wants the virtual architecture as a static string.
fn arch_of(sm: i32) -> &'static str {
    match sm {
        ..=60 => "compute_60",
        61..=69 => "compute_61",
        70..=74 => "compute_70",
        75..=79 => "compute_75",
        80..=85 => "compute_80",
        86..=88 => "compute_86",
        89 => "compute_89",
        90..=99 => "compute_90",
        _ => "compute_100",
    }
}

impl GpuKernels {
    /// Compiles (or loads from the cache) the kernels for `ctx`'s device.
    pub(crate) fn load(ctx: &Arc<CudaContext>) -> Result<GpuKernels, CudaError> {
        let (major, minor) = ctx.compute_capability().map_err(drv("cuDeviceGetAttribute"))?;
        let arch = arch_of(major * 10 + minor);
        let src = module_source();
        let key = cache_key(&src, arch);
        let cached = collscope_debug::params::cache_dir().map(|d| d.join(format!("kernels-{key}.ptx")));
        // Far above any PTX of these kernels; the cache path may name anything (a link to a device, a FIFO).
        let read_cache = |p: &std::path::Path| collscope_debug::file::read_small_string(p, 256 << 20).ok();
        let ptx = match cached.as_deref().and_then(read_cache) {
            Some(text) => Ptx::from_src(text),
            None => {
                let opts = CompileOptions { arch: Some(arch), ..Default::default() };
                let ptx = compile_ptx_with_opts(&src, opts)
                    .map_err(|e| CudaError::Compile { arch: arch.into(), source: Box::new(e) })?;
                if let Some(p) = &cached {
                    // A cache that cannot be written only costs a recompilation next time.
                    let _ = p.parent().map(std::fs::create_dir_all);
                    let _ = std::fs::write(p, ptx.to_src());
                }
                ptx
            }
        };
        let module = ctx.load_module(ptx).map_err(drv("cuModuleLoadData"))?;
        Ok(GpuKernels { ctx: ctx.clone(), module })
    }

    fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        self.module.load_function(name).map_err(drv("cuModuleGetFunction"))
    }

    fn config(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(512).clamp(1, 65_535) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 }
    }

    /// `dst = a op b` elementwise on `stream`; returns once queued, with the events that time it.
    pub(crate) fn reduce(
        &self,
        stream: &Arc<CudaStream>,
        op: Op,
        dst: &mut DeviceBuffer,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
    ) -> Result<Timed, CudaError> {
        let d = dst.dtype();
        if a.dtype() != d || b.dtype() != d || a.count() < dst.count() || b.count() < dst.count() {
            return Err(CudaError::Usage(format!(
                "reduce needs inputs of {d:?} at least {} long (got {:?}x{}, {:?}x{})",
                dst.count(),
                a.dtype(),
                a.count(),
                b.dtype(),
                b.count()
            )));
        }
        let f = self.function(&reduce_kernel(d, op))?;
        let n = dst.count() as u64;
        let cfg = Self::config(dst.count());
        let timed = Timed::start(&self.ctx, stream)?;
        let mut launch = stream.launch_builder(&f);
        launch.arg(dst.bytes_mut()).arg(a.bytes()).arg(b.bytes()).arg(&n);
        // SAFETY: the kernel's signature is (T*, const T*, const T*, u64) and all three buffers hold n elements.
        unsafe { launch.launch(cfg) }.map_err(drv("cuLaunchKernel"))?;
        timed.stop(stream)
    }

    /// `buf /= ranks`, the end of `Avg`.
    pub(crate) fn divide(
        &self,
        stream: &Arc<CudaStream>,
        buf: &mut DeviceBuffer,
        ranks: u32,
    ) -> Result<Timed, CudaError> {
        let f = self.function(&div_kernel(buf.dtype()))?;
        let n = buf.count() as u64;
        let cfg = Self::config(buf.count());
        let timed = Timed::start(&self.ctx, stream)?;
        let mut launch = stream.launch_builder(&f);
        launch.arg(buf.bytes_mut()).arg(&n).arg(&ranks);
        // SAFETY: the kernel's signature is (T*, u64, u32) and the buffer holds n elements.
        unsafe { launch.launch(cfg) }.map_err(drv("cuLaunchKernel"))?;
        timed.stop(stream)
    }
}

/// Events recorded before and after queued work, read once the stream reaches the second.
pub struct Timed {
    start: cudarc::driver::CudaEvent,
    end: Option<cudarc::driver::CudaEvent>,
}

impl Timed {
    pub fn start(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Timed, CudaError> {
        let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cuEventCreate"))?;
        start.record(stream).map_err(drv("cuEventRecord"))?;
        Ok(Timed { start, end: None })
    }

    pub fn stop(mut self, stream: &Arc<CudaStream>) -> Result<Timed, CudaError> {
        let end =
            self.start.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cuEventCreate"))?;
        end.record(stream).map_err(drv("cuEventRecord"))?;
        self.end = Some(end);
        Ok(self)
    }

    /// Whether the GPU has finished the timed work (non-blocking, like `ncclCommGetAsyncError` polling).
    pub fn is_done(&self) -> bool {
        self.end.as_ref().is_none_or(|e| e.is_complete())
    }

    /// Waits for the work and returns its GPU time.
    pub fn wait(&self) -> Result<GpuTiming, CudaError> {
        let Some(end) = &self.end else { return Err(CudaError::Usage("timing was never stopped".into())) };
        end.synchronize().map_err(drv("cuEventSynchronize"))?;
        Ok(GpuTiming { ms: self.start.elapsed_ms(end).map_err(drv("cuEventElapsedTime"))? })
    }
}

#[cfg(test)]
mod tests {
    use super::super::buffer::element_bytes;
    use super::super::device;
    use super::*;
    use collscope_kernels::Element;

    #[test]
    fn archs() {
        assert_eq!(arch_of(90), "compute_90");
        assert_eq!(arch_of(80), "compute_80");
        assert_eq!(arch_of(86), "compute_86");
        assert_eq!(arch_of(120), "compute_100");
    }

    /// Every GPU kernel against the CPU kernels of `collscope-kernels`, bit for bit. Runs where a driver and
    /// NVRTC are present (scripts/device-check.sh); elsewhere it checks that the absence is reported, not a panic.
    #[test]
    fn gpu_kernels_match_cpu_kernels() {
        let ctx = match device::context(0) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    matches!(e, CudaError::NoDriver | CudaError::Driver { .. } | CudaError::DriverFailed { .. }),
                    "{e}"
                );
                eprintln!("skipped: {e}");
                return;
            }
        };
        let k = GpuKernels::load(&ctx).expect("NVRTC compiles the kernels");
        let stream = ctx.default_stream();
        check::<i8>(&k, &stream);
        check::<u8>(&k, &stream);
        check::<i32>(&k, &stream);
        check::<u32>(&k, &stream);
        check::<i64>(&k, &stream);
        check::<u64>(&k, &stream);
        check::<half::f16>(&k, &stream);
        check::<f32>(&k, &stream);
        check::<f64>(&k, &stream);
        check::<half::bf16>(&k, &stream);
    }

    fn check<T: Element>(k: &GpuKernels, stream: &Arc<CudaStream>) {
        let n = 10_007;
        let a: Vec<T> = (0..n).map(T::from_index).collect();
        let b: Vec<T> = (0..n).map(|i| T::from_index(i + 3)).collect();
        for op in [Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg] {
            let da = DeviceBuffer::from_elements(stream, &a).unwrap();
            let db = DeviceBuffer::from_elements(stream, &b).unwrap();
            let mut out = DeviceBuffer::zeros(stream, T::DTYPE, n).unwrap();
            let t = k.reduce(stream, op, &mut out, &da, &db).unwrap();
            assert!(t.wait().unwrap().ms >= 0.0);
            if op == Op::Avg {
                k.divide(stream, &mut out, 2).unwrap().wait().unwrap();
            }
            let mut want = vec![a[0]; n];
            collscope_kernels::reduce(op, &mut want, &a, &b);
            collscope_kernels::divide(op, &mut want, 2);
            assert_eq!(out.to_host(stream).unwrap(), element_bytes(&want), "{:?} {op:?}", T::DTYPE);
        }
    }
}
