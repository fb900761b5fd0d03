//! Matrix products on strided f32 views through the `gemm` crate, shared by the layer kernels.

use std::mem::MaybeUninit;

/// A matrix view for [`product`]: pointer, row stride, column stride.
#[derive(Clone, Copy)]
pub(crate) struct View {
    ptr: *const f32,
    rs: isize,
    cs: isize,
}

impl View {
    /// A row-major matrix with row stride `ld`.
    pub(crate) fn rows(data: &[f32], ld: usize) -> Self {
        View {
            ptr: data.as_ptr(),
            rs: ld as isize,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix with row stride `ld`.
    pub(crate) fn transposed(data: &[f32], ld: usize) -> Self {
        View {
            ptr: data.as_ptr(),
            rs: 1,
            cs: ld as isize,
        }
    }
}

/// dst [m, n] (row stride `ld`) = lhs [m, k] rhs [k, n], added to dst when `accumulate`; spread
/// over rayon's threads when `parallel` (by output blocks: the sum over k keeps its order, so
/// the result does not depend on the number of threads).
///
/// # Safety
/// The views must address m x k and k x n matrices inside live slices, and `dst` must hold
/// m rows of stride `ld` with at least n entries each.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product(
    dims: (usize, usize, usize),
    dst: &mut [f32],
    ld: usize,
    accumulate: bool,
    lhs: View,
    rhs: View,
    parallel: bool,
) {
    let (m, n, _) = dims;
    debug_assert!(m == 0 || dst.len() >= (m - 1) * ld + n);
    // SAFETY: the caller's contract.
    unsafe { raw(dims, dst.as_mut_ptr(), ld, accumulate, lhs, rhs, parallel) }
}

/// [`product`] into memory not yet written: every entry of dst [m, n] is written, none read.
///
/// # Safety
/// As for [`product`].
pub(crate) unsafe fn product_into(
    dims: (usize, usize, usize),
    dst: &mut [MaybeUninit<f32>],
    ld: usize,
    lhs: View,
    rhs: View,
    parallel: bool,
) {
    let (m, n, k) = dims;
    debug_assert!(m == 0 || dst.len() >= (m - 1) * ld + n);
    if k == 0 {
        // An empty sum: zeros, written here rather than left to gemm's handling of k = 0.
        for row in dst.chunks_mut(ld.max(1)).take(m) {
            row[..n].fill(MaybeUninit::new(0.0));
        }
        return;
    }
    // SAFETY: the caller's contract; gemm writes dst without reading it when not accumulating.
    unsafe { raw(dims, dst.as_mut_ptr().cast(), ld, false, lhs, rhs, parallel) }
}

/// An initialised buffer viewed as one to be written, for the kernels that write through
/// `MaybeUninit` views.
///
/// # Safety
/// Only initialised values may be written through the view (never `MaybeUninit::uninit()`):
/// `buf` is read as `f32` afterwards.
pub(crate) unsafe fn as_uninit(buf: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: f32 and MaybeUninit<f32> share their layout; the caller writes values only.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), buf.len()) }
}

/// A written buffer read as f32: the other direction of [`as_uninit`].
///
/// # Safety
/// Every entry of `buf` must have been written.
pub(crate) unsafe fn assume_written(buf: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: the layouts match (see `as_uninit`) and the caller wrote every entry.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), buf.len()) }
}

/// A buffer of `len` floats filled by `fill`, without zeroing it first (the kernels' outputs
/// are megabytes, rewritten at every step).
///
/// # Safety
/// `fill` must write every one of the `len` entries.
pub(crate) unsafe fn written(len: usize, fill: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
    let mut out = Vec::with_capacity(len);
    fill(&mut out.spare_capacity_mut()[..len]);
    // SAFETY: the caller's contract.
    unsafe { out.set_len(len) };
    out
}

#[allow(clippy::too_many_arguments)]
unsafe fn raw(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    ld: usize,
    accumulate: bool,
    lhs: View,
    rhs: View,
    parallel: bool,
) {
    let parallelism = match parallel {
        true => gemm::Parallelism::Rayon(rayon::current_num_threads()),
        false => gemm::Parallelism::None,
    };
    // SAFETY: the callers' contract; gemm reads dst only when `accumulate`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            ld as isize,
            accumulate,
            lhs.ptr,
            lhs.cs,
            lhs.rs,
            rhs.ptr,
            rhs.cs,
            rhs.rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}
