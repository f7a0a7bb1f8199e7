//! The reduce and copy kernels every collscope protocol shares, for NCCL's ten datatypes and five reduction ops
//! (NCCL 2.28.9 `src/device/reduce_kernel.h`). Inner loops walk `chunks_exact` blocks of fixed width so the
//! compiler unrolls and vectorizes them without bounds checks; f16/bf16 go through f32 a block at a time, as
//! NCCL's half kernels widen to float.
//!
//! `Avg` reduces as `Sum`; the last write of a fully reduced value divides by the number of ranks
//! ([`reduce_final`], [`divide`]), as NCCL's `ncclAvg` does for integers (`SumPostDiv`); for floats NCCL
//! pre-multiplies each input by 1/n, which differs from sum-then-divide only by rounding.
//!
//! Depends on no other collscope crate; the runtime's protocols and the CUDA sources build on it.

use half::{bf16, f16};

/// Elements per unrolled block: 64 bytes of i8 up to 512 bytes of f64, enough for two AVX-512 registers.
const BLOCK: usize = 64;
/// Elements the half types widen to f32 at a time: large enough to amortize each conversion call.
const HALF_BLOCK: usize = 1024;

/// NCCL's reduction ops (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

/// NCCL's datatypes (`ncclDataType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 10] = [
        Dtype::I8,
        Dtype::U8,
        Dtype::I32,
        Dtype::U32,
        Dtype::I64,
        Dtype::U64,
        Dtype::F16,
        Dtype::F32,
        Dtype::F64,
        Dtype::Bf16,
    ];

    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::F32 | Dtype::F64 | Dtype::Bf16)
    }
}

/// A type the kernels reduce. Integers wrap on overflow, as CUDA integer arithmetic does.
pub trait Element: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    const DTYPE: Dtype;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn max_of(self, o: Self) -> Self;
    fn min_of(self, o: Self) -> Self;
    /// `self / n`, the post-division of `Avg`.
    fn div_n(self, n: u32) -> Self;
    /// A small test value for index `i` (exact in every type).
    fn from_index(i: usize) -> Self;
    fn to_f64(self) -> f64;

    /// `dst[i] = a[i] op b[i]` over equal-length slices; the half types override it to widen a block at a time.
    fn reduce_slices(op: Op, dst: &mut [Self], a: &[Self], b: &[Self]) {
        match op {
            Op::Sum | Op::Avg => zip_blocks(dst, a, b, Self::add),
            Op::Prod => zip_blocks(dst, a, b, Self::mul),
            Op::Max => zip_blocks(dst, a, b, Self::max_of),
            Op::Min => zip_blocks(dst, a, b, Self::min_of),
        }
    }

    /// `acc[i] = acc[i] op b[i]`; the half types override it as they do `reduce_slices`.
    fn reduce_assign(op: Op, acc: &mut [Self], b: &[Self]) {
        match op {
            Op::Sum | Op::Avg => assign_blocks(acc, b, Self::add),
            Op::Prod => assign_blocks(acc, b, Self::mul),
            Op::Max => assign_blocks(acc, b, Self::max_of),
            Op::Min => assign_blocks(acc, b, Self::min_of),
        }
    }
}

/// Runs `body` compiled for AVX2 when the CPU has it (the build targets baseline x86-64, SSE2 only), so the
/// unrolled blocks below become 256-bit vector code; elsewhere it runs as built.
#[inline(always)]
fn widest<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { avx2(body) };
        }
    }
    body()
}

#[inline(always)]
fn zip_blocks<T: Copy>(dst: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
    widest(
        #[inline(always)]
        || {
            let n = dst.len().min(a.len()).min(b.len());
            let (dst, a, b) = (&mut dst[..n], &a[..n], &b[..n]);
            let mut d = dst.chunks_exact_mut(BLOCK);
            let mut x = a.chunks_exact(BLOCK);
            let mut y = b.chunks_exact(BLOCK);
            for ((d, x), y) in (&mut d).zip(&mut x).zip(&mut y) {
                for i in 0..BLOCK {
                    d[i] = f(x[i], y[i]);
                }
            }
            for ((d, x), y) in d.into_remainder().iter_mut().zip(x.remainder()).zip(y.remainder()) {
                *d = f(*x, *y);
            }
        },
    )
}

#[inline(always)]
fn assign_blocks<T: Copy>(acc: &mut [T], b: &[T], f: impl Fn(T, T) -> T) {
    widest(
        #[inline(always)]
        || {
            let n = acc.len().min(b.len());
            let (acc, b) = (&mut acc[..n], &b[..n]);
            let mut d = acc.chunks_exact_mut(BLOCK);
            let mut y = b.chunks_exact(BLOCK);
            for (d, y) in (&mut d).zip(&mut y) {
                for i in 0..BLOCK {
                    d[i] = f(d[i], y[i]);
                }
            }
            for (d, y) in d.into_remainder().iter_mut().zip(y.remainder()) {
                *d = f(*d, *y);
            }
        },
    )
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn max_of(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            #[inline(always)]
            fn min_of(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            fn div_n(self, n: u32) -> Self {
                // n is a rank count (>= 1) that fits every type's range except i8/u8 for n > 127, where the
                // wrapped quotient mirrors C's conversion.
                self.wrapping_div(n as $t)
            }
            fn from_index(i: usize) -> Self {
                (i % 7) as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

int_element!(i8, I8);
int_element!(u8, U8);
int_element!(i32, I32);
int_element!(u32, U32);
int_element!(i64, I64);
int_element!(u64, U64);

macro_rules! float_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn max_of(self, o: Self) -> Self {
                if self > o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn min_of(self, o: Self) -> Self {
                if self < o {
                    self
                } else {
                    o
                }
            }
            fn div_n(self, n: u32) -> Self {
                self / n as $t
            }
            fn from_index(i: usize) -> Self {
                (i % 7) as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

float_element!(f32, F32);
float_element!(f64, F64);

macro_rules! half_element {
    ($t:ty, $d:ident, $widen:path, $narrow:path) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            fn mul(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() * o.to_f32())
            }
            fn max_of(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32().max_of(o.to_f32()))
            }
            fn min_of(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32().min_of(o.to_f32()))
            }
            fn div_n(self, n: u32) -> Self {
                <$t>::from_f32(self.to_f32() / n as f32)
            }
            fn from_index(i: usize) -> Self {
                <$t>::from_f32((i % 7) as f32)
            }
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            fn reduce_slices(op: Op, dst: &mut [Self], a: &[Self], b: &[Self]) {
                let n = dst.len().min(a.len()).min(b.len());
                let mut fa = [0f32; HALF_BLOCK];
                let mut fb = [0f32; HALF_BLOCK];
                let mut fd = [0f32; HALF_BLOCK];
                let mut start = 0;
                while start < n {
                    let len = HALF_BLOCK.min(n - start);
                    $widen(&a[start..start + len], &mut fa[..len]);
                    $widen(&b[start..start + len], &mut fb[..len]);
                    f32::reduce_slices(op, &mut fd[..len], &fa[..len], &fb[..len]);
                    $narrow(&fd[..len], &mut dst[start..start + len]);
                    start += len;
                }
            }
            fn reduce_assign(op: Op, acc: &mut [Self], b: &[Self]) {
                // Blockwise through a stack copy of `acc`, so the widening path keeps its three-slice form.
                let mut tmp = [<$t>::ZERO; HALF_BLOCK];
                for (acc, b) in acc.chunks_mut(HALF_BLOCK).zip(b.chunks(HALF_BLOCK)) {
                    let len = acc.len();
                    tmp[..len].copy_from_slice(acc);
                    Self::reduce_slices(op, acc, &tmp[..len], b);
                }
            }
        }
    };
}

/// f16 <-> f32 through `half`'s slice conversions (F16C when the CPU has it).
mod f16_slices {
    use half::f16;
    use half::slice::HalfFloatSliceExt;

    pub(crate) fn widen(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }

    pub(crate) fn narrow(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
}

/// bf16 <-> f32 as plain bit operations the compiler vectorizes; rounding (to nearest, ties to even) and NaN
/// handling are `half`'s `bf16::from_f32`, so the fast path and the per-element path agree bit for bit.
mod bf16_slices {
    use half::bf16;

    pub(crate) fn widen(src: &[bf16], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
    }

    pub(crate) fn narrow(src: &[f32], dst: &mut [bf16]) {
        for (d, s) in dst.iter_mut().zip(src) {
            let x = s.to_bits();
            let nan = x & 0x7fff_ffff > 0x7f80_0000;
            let round_up = (x & 0x8000 != 0) && (x & 0x17fff != 0);
            let bits = if nan { (x >> 16) | 0x40 } else { (x >> 16) + round_up as u32 };
            *d = bf16::from_bits(bits as u16);
        }
    }
}

half_element!(f16, F16, f16_slices::widen, f16_slices::narrow);
half_element!(bf16, Bf16, bf16_slices::widen, bf16_slices::narrow);

/// `dst = a op b` (`Avg` sums).
pub fn reduce<T: Element>(op: Op, dst: &mut [T], a: &[T], b: &[T]) {
    T::reduce_slices(op, dst, a, b);
}

/// `acc = acc op b`, for in-place buffers.
pub fn reduce_in_place<T: Element>(op: Op, acc: &mut [T], b: &[T]) {
    T::reduce_assign(op, acc, b);
}

/// `buf /= nranks` where `op` is `Avg`; nothing for the other ops.
pub fn divide<T: Element>(op: Op, buf: &mut [T], nranks: u32) {
    if op != Op::Avg || nranks <= 1 {
        return;
    }
    for v in buf.iter_mut() {
        *v = v.div_n(nranks);
    }
}

/// `dst = a op b`, divided by `nranks` for `Avg`: the write that completes a reduction.
pub fn reduce_final<T: Element>(op: Op, dst: &mut [T], a: &[T], b: &[T], nranks: u32) {
    T::reduce_slices(op, dst, a, b);
    divide(op, dst, nranks);
}

/// `dst = src`.
pub fn copy<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
}

/// The byte-level entry points the runtime uses: it moves untyped bytes and names the datatype at run time.
pub mod bytes {
    use super::*;

    macro_rules! dispatch {
        ($dt:expr, $f:ident ( $($arg:expr),* )) => {
            match $dt {
                Dtype::I8 => $f::<i8>($($arg),*),
                Dtype::U8 => $f::<u8>($($arg),*),
                Dtype::I32 => $f::<i32>($($arg),*),
                Dtype::U32 => $f::<u32>($($arg),*),
                Dtype::I64 => $f::<i64>($($arg),*),
                Dtype::U64 => $f::<u64>($($arg),*),
                Dtype::F16 => $f::<f16>($($arg),*),
                Dtype::F32 => $f::<f32>($($arg),*),
                Dtype::F64 => $f::<f64>($($arg),*),
                Dtype::Bf16 => $f::<bf16>($($arg),*),
            }
        };
    }

    /// `dst = a op b` on byte buffers of whole elements, divided by `nranks` when `post` (Avg's last write).
    /// `dst` may be the same memory as `a` (in-place operations); pointers are used for that reason.
    ///
    /// # Safety
    /// `dst`, `a` and `b` must be valid for `nbytes`, aligned for `dt`, and `b` must not overlap `dst`;
    /// `a` may equal `dst` exactly.
    pub unsafe fn reduce(
        dt: Dtype,
        op: Op,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        nbytes: usize,
        post: Option<u32>,
    ) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        // `reduce_typed` asks the same for the datatype `dt` names.
        unsafe { dispatch!(dt, reduce_typed(op, dst, a, b, nbytes, post)) }
    }

    unsafe fn reduce_typed<T: Element>(
        op: Op,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        nbytes: usize,
        post: Option<u32>,
    ) {
        // SAFETY: as for `reduce`, whose contract this is, `T` being `dt`'s type: `dst`, `a` and `b` hold `n` aligned
        // `T`s, and `b` overlaps neither (`a` may be `dst`, taken in place).
        unsafe {
            let n = nbytes / std::mem::size_of::<T>();
            let d = std::slice::from_raw_parts_mut(dst as *mut T, n);
            let y = std::slice::from_raw_parts(b as *const T, n);
            if std::ptr::eq(dst as *const u8, a) {
                reduce_in_place(op, d, y);
            } else {
                super::reduce(op, d, std::slice::from_raw_parts(a as *const T, n), y);
            }
            if let Some(nranks) = post {
                super::divide(op, d, nranks);
            }
        }
    }

    /// `buf /= nranks` for `Avg` on a byte buffer.
    ///
    /// # Safety
    /// `buf` must be valid for `nbytes` and aligned for `dt`.
    pub unsafe fn divide(dt: Dtype, op: Op, buf: *mut u8, nbytes: usize, nranks: u32) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        // `divide_typed` asks the same for the datatype `dt` names.
        unsafe { dispatch!(dt, divide_typed(op, buf, nbytes, nranks)) }
    }

    unsafe fn divide_typed<T: Element>(op: Op, buf: *mut u8, nbytes: usize, nranks: u32) {
        // SAFETY: as for `divide`, whose contract this is: `buf` holds `n` aligned `T`s.
        unsafe {
            let n = nbytes / std::mem::size_of::<T>();
            super::divide(op, std::slice::from_raw_parts_mut(buf as *mut T, n), nranks);
        }
    }

    /// `dst = src` (possibly the same memory, then nothing happens).
    ///
    /// On x86-64, from [`VECTOR_COPY_MIN`] bytes on, with vector loads and stores of our own rather than the C
    /// library's `memcpy`: glibc (2.36) copies from 4 KiB to the L2's size with `rep movsb`, which on AMD EPYC ran
    /// at 1.7-2.8 GB/s instead of 21-36 whenever the destination lay 1-31 bytes past the source modulo 4 KiB
    /// (16 KiB pieces, all in L2). That is the runtime's commonest copy: a page-aligned slot into a buffer from
    /// `malloc`, which starts 16 bytes into its pages. These loops ran at 28-37 GB/s at every offset measured.
    ///
    /// # Safety
    /// Both must be valid for `nbytes`; they must be equal or not overlap.
    pub unsafe fn copy(dst: *mut u8, src: *const u8, nbytes: usize) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        // AVX2 runs only where the CPU has it.
        unsafe {
            if std::ptr::eq(dst as *const u8, src) || nbytes == 0 {
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if nbytes >= VECTOR_COPY_MIN {
                if std::arch::is_x86_feature_detected!("avx2") {
                    return copy_avx2(dst, src, nbytes);
                }
                return copy_sse2(dst, src, nbytes);
            }
            std::ptr::copy_nonoverlapping(src, dst, nbytes);
        }
    }

    /// Below this, `memcpy` moves bytes with vector registers anyway (its `rep movsb` starts at 2-4 KiB).
    const VECTOR_COPY_MIN: usize = 256;

    /// [`copy`] in 32-byte AVX2 moves, four a round, the destination aligned (a store that splits two lines
    /// costs more than a load that does); the ends (under a round) go through `memcpy`'s vector path.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy_avx2(dst: *mut u8, src: *const u8, nbytes: usize) {
        // SAFETY: the caller's contract (`copy`'s), and the CPU has AVX2 (`copy` checks): every load and store is
        // inside the `nbytes` of `src` and `dst`.
        unsafe {
            use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
            let head = ((dst as usize).wrapping_neg() & 31).min(nbytes);
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 128 <= nbytes {
                let (s, d) = (src.add(i) as *const __m256i, dst.add(i) as *mut __m256i);
                let v = [
                    _mm256_loadu_si256(s),
                    _mm256_loadu_si256(s.add(1)),
                    _mm256_loadu_si256(s.add(2)),
                    _mm256_loadu_si256(s.add(3)),
                ];
                for (k, v) in v.into_iter().enumerate() {
                    _mm256_storeu_si256(d.add(k), v);
                }
                i += 128;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), nbytes - i);
        }
    }

    /// [`copy_avx2`] with SSE2's 16-byte moves, which every x86-64 has.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn copy_sse2(dst: *mut u8, src: *const u8, nbytes: usize) {
        // SAFETY: the caller's contract (`copy`'s) is `sse2_rounds`'; SSE2 is baseline on x86-64.
        unsafe {
            sse2_rounds(dst, src, nbytes, |d, v| std::arch::x86_64::_mm_storeu_si128(d, v));
        }
    }

    /// Copies the bytes up to the destination's next 16-byte boundary with `memcpy`, then 64-byte rounds of four
    /// 16-byte loads and four `store`s to the aligned destination, then the tail under a round with `memcpy`:
    /// [`copy_sse2`] stores ordinarily, [`copy_streaming`] past the caches.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sse2_rounds(
        dst: *mut u8,
        src: *const u8,
        nbytes: usize,
        store: impl Fn(*mut std::arch::x86_64::__m128i, std::arch::x86_64::__m128i),
    ) {
        // SAFETY: the caller's contract (`copy`'s or `copy_streaming`'s): every load and store is inside the `nbytes`
        // of `src` and `dst`, and `store` gets 16-byte aligned destinations.
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            let head = ((dst as usize).wrapping_neg() & 15).min(nbytes);
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 64 <= nbytes {
                let (s, d) = (src.add(i) as *const __m128i, dst.add(i) as *mut __m128i);
                let v = [
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                ];
                for (k, v) in v.into_iter().enumerate() {
                    store(d.add(k), v);
                }
                i += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), nbytes - i);
        }
    }

    /// `dst = src` with streaming (non-temporal) stores where the CPU has them (x86-64: SSE2's `movntdq`, 64
    /// bytes a round): the lines of `dst` are neither read for ownership first nor kept in the caches, so a
    /// result nothing reads soon costs one write to memory instead of a read and a write, and evicts nothing.
    /// Elsewhere an ordinary copy. Call [`stream_fence`] before anything tells another core `dst` is written.
    ///
    /// # Safety
    /// Both must be valid for `nbytes` and must not overlap.
    pub unsafe fn copy_streaming(dst: *mut u8, src: *const u8, nbytes: usize) {
        // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
        unsafe {
            // Streaming stores take 16-byte aligned addresses: the head up to one goes the ordinary way.
            #[cfg(target_arch = "x86_64")]
            sse2_rounds(dst, src, nbytes, |d, v| std::arch::x86_64::_mm_stream_si128(d, v));
            #[cfg(not(target_arch = "x86_64"))]
            copy(dst, src, nbytes);
        }
    }

    /// Orders every streaming store before this thread's later stores (x86-64 `sfence`), as streaming stores
    /// are not ordered with the others: call it before publishing what [`copy_streaming`] wrote.
    pub fn stream_fence() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: sfence has no operands and SSE is baseline on x86-64.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference<T: Element>(op: Op, a: T, b: T) -> T {
        match op {
            Op::Sum | Op::Avg => a.add(b),
            Op::Prod => a.mul(b),
            Op::Max => a.max_of(b),
            Op::Min => a.min_of(b),
        }
    }

    fn check<T: Element>() {
        // Lengths around the block size exercise the unrolled body and the remainder.
        for len in [0, 1, 63, 64, 65, 200] {
            let a: Vec<T> = (0..len).map(T::from_index).collect();
            let b: Vec<T> = (0..len).map(|i| T::from_index(i * 3 + 1)).collect();
            for op in [Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg] {
                let mut d = vec![T::from_index(0); len];
                reduce_final(op, &mut d, &a, &b, 2);
                let mut inplace = a.clone();
                // SAFETY: `inplace`, `a` and `b` are `len` elements of `T` each, aligned for it; `inplace` is
                // `dst` and `a` at once, which `reduce` allows, and `b` is apart.
                unsafe {
                    bytes::reduce(
                        T::DTYPE,
                        op,
                        inplace.as_mut_ptr() as *mut u8,
                        inplace.as_ptr() as *const u8,
                        b.as_ptr() as *const u8,
                        len * std::mem::size_of::<T>(),
                        Some(2),
                    );
                }
                for i in 0..len {
                    let mut want = reference(op, a[i], b[i]);
                    if op == Op::Avg {
                        want = want.div_n(2);
                    }
                    assert_eq!(d[i], want, "{:?} {op:?} len {len} at {i}", T::DTYPE);
                    assert_eq!(inplace[i], want, "in place {:?} {op:?} len {len} at {i}", T::DTYPE);
                }
            }
        }
    }

    #[test]
    fn every_dtype_and_op_matches_the_scalar_definition() {
        check::<i8>();
        check::<u8>();
        check::<i32>();
        check::<u32>();
        check::<i64>();
        check::<u64>();
        check::<f16>();
        check::<f32>();
        check::<f64>();
        check::<bf16>();
    }

    #[test]
    fn bf16_block_path_matches_per_element_rounding_bit_for_bit() {
        // Bit patterns across the range: normals, subnormals, ties, infinities and NaNs.
        let pats: Vec<bf16> =
            (0..4096u32).map(|i| bf16::from_bits((i.wrapping_mul(2654435761) >> 16) as u16)).collect();
        let other: Vec<bf16> = pats.iter().rev().copied().collect();
        for op in [Op::Sum, Op::Prod, Op::Max, Op::Min] {
            let mut d = vec![bf16::ZERO; pats.len()];
            reduce(op, &mut d, &pats, &other);
            for i in 0..pats.len() {
                let want = reference(op, pats[i], other[i]);
                assert!(d[i].to_bits() == want.to_bits() || (d[i].is_nan() && want.is_nan()), "{op:?} {i}");
            }
        }
    }

    #[test]
    fn integer_arithmetic_wraps_and_avg_divides() {
        let mut d = [0i8; 2];
        reduce(Op::Sum, &mut d, &[127, -128], &[1, -1]);
        assert_eq!(d, [-128, 127]);
        let mut d = [0u32; 3];
        reduce_final(Op::Avg, &mut d, &[3, 10, 7], &[4, 10, 0], 2);
        assert_eq!(d, [3, 10, 3]);
        let mut h = [f16::ZERO; 2];
        reduce_final(Op::Avg, &mut h, &[f16::from_f32(1.5), f16::from_f32(-2.0)], &[f16::from_f32(0.5), f16::ONE], 2);
        assert_eq!(h, [f16::ONE, f16::from_f32(-0.5)]);
        let mut m = [0f32; 2];
        reduce(Op::Min, &mut m, &[1.0, -3.0], &[2.0, -4.0]);
        assert_eq!(m, [1.0, -4.0]);
    }

    #[test]
    fn streaming_copy_writes_every_byte_at_every_alignment() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..17 {
            for len in [0, 1, 15, 63, 64, 65, 80, 1000, 16_384 + 5] {
                let mut dst = vec![0u8; len + 40];
                // SAFETY: `dst` has `off + len` bytes and more (`off` < 17, 40 spare), `src` 20,000 from 3 on; two
                // vectors do not overlap.
                unsafe {
                    bytes::copy_streaming(dst.as_mut_ptr().add(off), src.as_ptr().add(3), len);
                }
                bytes::stream_fence();
                assert_eq!(&dst[off..off + len], &src[3..3 + len], "offset {off}, {len} bytes");
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0), "offset {off}, {len} bytes");
            }
        }
    }

    #[test]
    fn byte_copy_writes_every_byte_at_every_alignment() {
        type Copy = unsafe fn(*mut u8, *const u8, usize);
        let mut copies: Vec<(&str, Copy)> = vec![("copy", bytes::copy)];
        #[cfg(target_arch = "x86_64")]
        {
            copies.push(("SSE2", bytes::copy_sse2));
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected just above; the closure passes on `Copy`'s contract, which each call
                // below keeps.
                copies.push(("AVX2", |d, s, n| unsafe { bytes::copy_avx2(d, s, n) }));
            }
        }
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for (name, copy) in copies {
            for (s_off, d_off) in [(0, 0), (3, 0), (0, 16), (5, 31), (17, 1), (32, 32)] {
                for len in [1, 31, 127, 255, 256, 257, 300, 1000, 4096 + 33, 16_384 + 5] {
                    let mut dst = vec![0u8; len + 64];
                    // SAFETY: `dst` has `d_off + len` bytes (`d_off` <= 32, 64 spare) and `src` 20,000 past `s_off`
                    // (<= 32); two vectors do not overlap.
                    unsafe { copy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(s_off), len) };
                    let what = format!("{name}: source +{s_off}, destination +{d_off}, {len} bytes");
                    assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len], "{what}");
                    assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0), "{what}");
                }
            }
        }
    }

    #[test]
    fn byte_copy_is_a_no_op_on_the_same_buffer() {
        let mut v = [1u8, 2, 3];
        let src = [9u8, 8, 7];
        // SAFETY: both arrays hold 3 bytes; a copy onto itself is equal pointers, which `copy` allows, and `src` is
        // another array.
        unsafe {
            bytes::copy(v.as_mut_ptr(), v.as_ptr(), 3);
            assert_eq!(v, [1, 2, 3]);
            bytes::copy(v.as_mut_ptr(), src.as_ptr(), 2);
        }
        assert_eq!(v, [9, 8, 3]);
    }
}
