//! CUDA C source of the reduce and copy kernels for NCCL's ten datatypes and five ops, compiled at run time
//! by NVRTC (NCCL 2.28.9 `src/device/reduce_kernel.h` semantics: integers wrap, `Avg` sums and then divides by
//! the rank count). The source needs no toolkit headers: half and bfloat16 are widened to float by bit
//! manipulation with round-to-nearest-even, so a driver-only machine with libnvrtc compiles it.

use collscope_kernels::{Dtype, Op};

/// The C type a datatype is stored as on the device.
pub(crate) fn c_type(d: Dtype) -> &'static str {
    match d {
        Dtype::I8 => "signed char",
        Dtype::U8 => "unsigned char",
        Dtype::I32 => "int",
        Dtype::U32 => "unsigned int",
        Dtype::I64 => "long long",
        Dtype::U64 => "unsigned long long",
        Dtype::F16 | Dtype::Bf16 => "unsigned short",
        Dtype::F32 => "float",
        Dtype::F64 => "double",
    }
}

/// NCCL's short datatype names, used in kernel names.
pub(crate) fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::I8 => "i8",
        Dtype::U8 => "u8",
        Dtype::I32 => "i32",
        Dtype::U32 => "u32",
        Dtype::I64 => "i64",
        Dtype::U64 => "u64",
        Dtype::F16 => "f16",
        Dtype::F32 => "f32",
        Dtype::F64 => "f64",
        Dtype::Bf16 => "bf16",
    }
}

/// The op a reduce kernel applies; `Avg` reduces as `Sum` and is finished by [`div_kernel`].
fn op_expr(op: Op) -> (&'static str, &'static str) {
    match op {
        Op::Sum | Op::Avg => ("sum", "x + y"),
        Op::Prod => ("prod", "x * y"),
        Op::Max => ("max", "(x > y ? x : y)"),
        Op::Min => ("min", "(x < y ? x : y)"),
    }
}

/// `dst[i] = a[i] op b[i]`, one kernel per datatype and op.
pub(crate) fn reduce_kernel(d: Dtype, op: Op) -> String {
    format!("reduce_{}_{}", dtype_name(d), op_expr(op).0)
}

/// `buf[i] /= n`, the last step of `Avg`.
pub(crate) fn div_kernel(d: Dtype) -> String {
    format!("div_{}", dtype_name(d))
}

/// Byte copy, the copy kernel every datatype shares.
#[cfg(test)]
pub(crate) const COPY_KERNEL: &str = "copy_bytes";

/// Ops that get their own reduce kernel.
const OPS: [Op; 4] = [Op::Sum, Op::Prod, Op::Max, Op::Min];

/// Every kernel name the module defines.
#[cfg(test)]
pub(crate) fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> = Dtype::ALL.iter().flat_map(|&d| OPS.iter().map(move |&op| reduce_kernel(d, op))).collect();
    v.extend(Dtype::ALL.iter().map(|&d| div_kernel(d)));
    v.push(COPY_KERNEL.to_string());
    v
}

const PRELUDE: &str = r#"
__device__ __forceinline__ float h2f(unsigned short h) {
  unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
  if (e == 0) {
    if (m == 0) { f = s; } else { e = 113; while (!(m & 0x400)) { m <<= 1; e--; } f = s | (e << 23) | ((m & 0x3ff) << 13); }
  } else if (e == 31) { f = s | 0x7f800000u | (m << 13); } else { f = s | ((e + 112) << 23) | (m << 13); }
  return __int_as_float((int)f);
}
__device__ __forceinline__ unsigned short f2h(float x) {
  unsigned int f = (unsigned int)__float_as_int(x), s = (f >> 16) & 0x8000u, a = f & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return (unsigned short)s;
    unsigned int e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e, r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (unsigned short)(s | r);
  }
  unsigned int r = ((a - 0x38000000u) >> 13), rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (unsigned short)(s | r);
}
__device__ __forceinline__ float bf2f(unsigned short h) { return __int_as_float((int)((unsigned int)h << 16)); }
__device__ __forceinline__ unsigned short f2bf(float x) {
  unsigned int f = (unsigned int)__float_as_int(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((f >> 16) | 0x40);
  f += 0x7fffu + ((f >> 16) & 1);
  return (unsigned short)(f >> 16);
}
extern "C" __global__ void copy_bytes(unsigned char* dst, const unsigned char* src, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) dst[i] = src[i];
}
"#;

/// How a value is loaded into arithmetic type and stored back.
fn widen(d: Dtype) -> (&'static str, &'static str, &'static str) {
    match d {
        Dtype::F16 => ("float", "h2f", "f2h"),
        Dtype::Bf16 => ("float", "bf2f", "f2bf"),
        other => (c_type(other), "", ""),
    }
}

/// The whole module source.
pub(crate) fn module_source() -> String {
    let mut s = String::from(PRELUDE);
    for d in Dtype::ALL {
        let t = c_type(d);
        let (w, load, store) = widen(d);
        for op in OPS {
            let (_, expr) = op_expr(op);
            s.push_str(&format!(
                "extern \"C\" __global__ void {name}({t}* dst, const {t}* a, const {t}* b, unsigned long long n) {{\n  \
                 for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
                 i += (unsigned long long)gridDim.x * blockDim.x) {{ {w} x = {load}(a[i]); {w} y = {load}(b[i]); \
                 dst[i] = ({t}){store}({expr}); }}\n}}\n",
                name = reduce_kernel(d, op)
            ));
        }
        s.push_str(&format!(
            "extern \"C\" __global__ void {name}({t}* buf, unsigned long long n, unsigned int ranks) {{\n  \
             for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
             i += (unsigned long long)gridDim.x * blockDim.x) {{ {w} x = {load}(buf[i]); buf[i] = ({t}){store}(x / ({w})ranks); }}\n}}\n",
            name = div_kernel(d)
        ));
    }
    s
}

/// A stable key for the compiled-module cache: changes whenever the source or the target changes.
pub(crate) fn cache_key(source: &str, arch: &str) -> String {
    // FNV-1a, enough to tell sources apart in a cache directory.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in source.bytes().chain(arch.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{arch}-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_and_op_has_a_kernel_in_the_source() {
        let src = module_source();
        let names = kernel_names();
        assert_eq!(names.len(), 10 * 4 + 10 + 1);
        for n in &names {
            assert!(src.contains(&format!("void {n}(")), "{n} missing");
        }
        assert_eq!(reduce_kernel(Dtype::Bf16, Op::Avg), "reduce_bf16_sum");
        assert!(src.contains("void reduce_f16_max(unsigned short* dst"));
        assert!(src.contains("float x = h2f(a[i])"));
        // No toolkit header is needed.
        assert!(!src.contains("#include"));
        let opens = src.matches('{').count();
        assert_eq!(opens, src.matches('}').count());
    }

    #[test]
    fn cache_key_follows_source_and_arch() {
        let a = cache_key("x", "compute_90");
        assert_eq!(a, cache_key("x", "compute_90"));
        assert_ne!(a, cache_key("y", "compute_90"));
        assert_ne!(a, cache_key("x", "compute_80"));
        assert!(a.starts_with("compute_90-"));
    }
}
