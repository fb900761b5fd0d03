//! The CPU kernel behind [`ExpmBackend`](crate::ExpmBackend) for `NdArray` and `Flex`: each
//! matrix is evaluated while it sits in L1/L2 with small vectorised kernels ([`simd`]), matrices
//! are spread over the cores with rayon. Same plans, schemes and reverse modes as the tensor-op
//! version, so the two agree within the accuracy bar; every matrix is computed by one thread from
//! its own data, so results do not depend on the number of threads.
//!
//! The kernel computes in f32 (f16 and bf16 inputs arrive promoted); f64 inputs, the test
//! oracle, keep the tensor-op path.

#[cfg(feature = "layers")]
pub(crate) mod adamw;
pub(crate) mod aligned;
#[cfg(feature = "layers")]
pub(crate) mod batch_norm;
#[cfg(feature = "layers")]
pub(crate) mod conv;
#[cfg(feature = "layers")]
pub(crate) mod conv_grid;
#[cfg(feature = "layers")]
pub(crate) mod conv_phases;
#[cfg(feature = "layers")]
pub(crate) mod conv_positions;
#[cfg(feature = "layers")]
pub(crate) mod conv_winograd;
#[cfg(feature = "layers")]
pub(crate) mod dense;
pub(crate) mod expm;
pub(crate) mod expmv;
#[cfg(feature = "layers")]
pub(crate) mod gemm;
pub mod host;
pub(crate) mod lu;
#[cfg(feature = "layers")]
pub(crate) mod pool;
pub mod simd;
pub(crate) mod small;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, FloatDType, TensorMetadata};
use rayon::iter::plumbing::{Producer, ProducerCallback};
use rayon::prelude::*;

use crate::expm::expmv::KernelRecord;
use crate::expm::{ExpmMethod, ExpmvConfig};
use host::{Host, output, output_in_parts};

/// Whether the kernel takes this tensor (f32); other dtypes keep the tensor-op path.
pub(crate) fn accepts<B: Backend>(t: &FloatTensor<B>) -> bool {
    t.dtype() == DType::F32
}

/// An upstream gradient in f32 (autodiff may hand one over in another float dtype).
fn in_f32<B: Backend>(t: FloatTensor<B>) -> FloatTensor<B> {
    if accepts::<B>(&t) {
        t
    } else {
        B::float_cast(t, FloatDType::F32)
    }
}

/// exp(A) for a batch of row-major n x n f32 matrices in `a`, written into the caller's `out`
/// (same length): the CPU kernel behind [`expm_with`](crate::expm_with) on `NdArray` and `Flex`,
/// without a tensor around it. A buffer reused from call to call is neither allocated nor
/// faulted in again: at [4096, 64, 64] a fresh 64 MiB output costs its pages on every call
/// (`docs/expm.md`). Matrices are spread over rayon's threads; a matrix holding NaN or Inf gets
/// NaN and leaves its neighbours untouched.
///
/// # Errors
///
/// [`VlgoError::Shape`](crate::VlgoError::Shape) unless `a` holds whole n x n matrices (n >= 1),
/// [`VlgoError::ShapeMismatch`](crate::VlgoError::ShapeMismatch) unless `out` is as long as `a`.
///
/// ```
/// use vlgo_core::ExpmMethod;
/// use vlgo_core::cpu::expm_into;
/// // exp of diag(0, ln 2) and of a nilpotent matrix, into one buffer kept across calls.
/// let a = [0.0f32, 0.0, 0.0, std::f32::consts::LN_2, 0.0, 1.0, 0.0, 0.0];
/// let mut out = vec![0.0f32; a.len()];
/// expm_into(&a, &mut out, 2, ExpmMethod::Pade)?;
/// let want = [1.0f32, 0.0, 0.0, 2.0, 1.0, 1.0, 0.0, 1.0];
/// assert!(out.iter().zip(want).all(|(o, w)| (o - w).abs() < 1e-6));
/// assert!(expm_into(&a[..7], &mut out[..7], 2, ExpmMethod::Pade).is_err());
/// # Ok::<(), vlgo_core::VlgoError>(())
/// ```
pub fn expm_into(a: &[f32], out: &mut [f32], n: usize, method: ExpmMethod) -> crate::Result<()> {
    check_batch("expm_into", a, out.len(), n)?;
    forward_matrices(a, out.par_chunks_mut(n * n), n, method);
    Ok(())
}

/// The adjoint of A for a batch, given the adjoint `grad` of exp(A), into the caller's `abar`:
/// the backward of [`expm_into`] (the same as autodiff takes through [`expm_with`](crate::expm_with)),
/// with the same layout, errors and reuse of the output buffer.
///
/// # Errors
///
/// As [`expm_into`], and [`VlgoError::ShapeMismatch`](crate::VlgoError::ShapeMismatch) unless
/// `grad` is as long as `a`.
pub fn expm_backward_into(
    a: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    n: usize,
    method: ExpmMethod,
) -> crate::Result<()> {
    check_batch("expm_backward_into", a, abar.len(), n)?;
    crate::error::check_same_shape(
        "expm_backward_into",
        "the lengths of a and grad",
        &[a.len()],
        &[grad.len()],
    )?;
    backward_matrices(a, grad, abar.par_chunks_mut(n * n), n, method);
    Ok(())
}

/// Whole n x n matrices in `a` and an output as long.
fn check_batch(op: &'static str, a: &[f32], out: usize, n: usize) -> crate::Result<()> {
    if !n
        .checked_mul(n)
        .is_some_and(|nn| nn > 0 && a.len().is_multiple_of(nn))
    {
        return Err(crate::VlgoError::Shape {
            op,
            expected: format!("whole {n} x {n} matrices (n >= 1) in a slice of f32"),
            got: vec![a.len()],
        });
    }
    crate::error::check_same_shape(op, "the lengths of a and out", &[a.len()], &[out])
}

/// exp(A) for a batch [N, n, n] of f32 matrices.
pub(crate) fn expm_batch<B: Host>(a: FloatTensor<B>, method: ExpmMethod) -> FloatTensor<B> {
    let dims = a.shape().dims::<3>();
    let n = dims[1];
    let input = B::read(&a);
    let (out, ()) = output_in_parts(input.len(), n * n, |parts| {
        if n > 0 {
            forward_matrices(&input, parts, n, method);
        }
    });
    B::make(out, &dims)
}

/// exp(A) of every n x n matrix of `a` into the parts of `out`, one matrix each (n >= 1, whole
/// matrices, as many parts as matrices).
fn forward_matrices<'o>(
    a: &[f32],
    out: impl IndexedParallelIterator<Item = &'o mut [f32]>,
    n: usize,
    method: ExpmMethod,
) {
    let nn = n * n;
    let items = out.zip(a.par_chunks(nn).enumerate());
    for_each_matrix(items, n, |ws, (o, (k, m))| {
        // The next matrix and output part, fetched during this one's products: at 4096
        // matrices of 64 their first read and write cost about 9 % of the forward otherwise
        // (`docs/expm.md`). The next part follows this one in the output buffer; at a job's
        // last matrix it is another thread's, and past the batch's last it lies beyond the
        // buffer: a wasted hint either way.
        let ahead = expm::Ahead::new([
            following(a, k, nn),
            (o.as_ptr().wrapping_add(nn), nn),
            (std::ptr::null(), 0),
        ]);
        expm::forward(m, o, n, method, ws, ahead)
    });
}

/// The matrix after the k-th of a batch of `nn`-float matrices, as an address and length for
/// [`expm::Ahead`] (empty after the last).
fn following(x: &[f32], k: usize, nn: usize) -> (*const f32, usize) {
    let x = x.get((k + 1) * nn..(k + 2) * nn).unwrap_or_default();
    (x.as_ptr(), x.len())
}

/// The adjoint of every n x n matrix of `a` given that of its exponential in `grad`, into the
/// parts of `abar` (as [`forward_matrices`]).
fn backward_matrices<'o>(
    a: &[f32],
    grad: &[f32],
    abar: impl IndexedParallelIterator<Item = &'o mut [f32]>,
    n: usize,
    method: ExpmMethod,
) {
    let nn = n * n;
    let items = abar.zip(a.par_chunks(nn).zip(grad.par_chunks(nn)).enumerate());
    for_each_matrix(items, n, |ws, (o, (k, (m, g)))| {
        // As in the forward: the next matrix, its adjoint and output part.
        let o_next = (o.as_ptr().wrapping_add(nn), nn);
        let ahead = expm::Ahead::new([following(a, k, nn), following(grad, k, nn), o_next]);
        expm::backward(m, g, o, n, method, ws, ahead)
    });
}

/// The adjoint of A for a batch, given the adjoint of exp(A).
pub(crate) fn expm_backward_batch<B: Host>(
    a: FloatTensor<B>,
    grad: FloatTensor<B>,
    method: ExpmMethod,
) -> FloatTensor<B> {
    let dims = a.shape().dims::<3>();
    let n = dims[1];
    let grad = in_f32::<B>(grad);
    let (input, grad) = (B::read(&a), B::read(&grad));
    let (out, ()) = output_in_parts(input.len(), n * n, |parts| {
        if n > 0 {
            backward_matrices(&input, &grad, parts, n, method);
        }
    });
    B::make(out, &dims)
}

/// Matrices per parallel job at least: tiny matrices are grouped so that a job holds about 4096
/// matrix entries, since scheduling a job and building its workspace cost more than a 3 x 3
/// product.
fn min_matrices(n: usize) -> usize {
    (4096 / (n * n).max(1)).max(1)
}

/// The largest n whose workspace a thread keeps between calls: some 24 buffers of n x n, 1.5 MiB
/// at 128. Larger ones are built per call rather than held for the life of the thread.
const KEPT_WORKSPACE_N: usize = 128;

thread_local! {
    /// Each thread's workspace, kept across calls (and training steps) so that its buffers are
    /// not allocated and zeroed again per parallel job.
    static WORKSPACE: std::cell::RefCell<expm::Workspace> = Default::default();
}

/// Runs `job` with this thread's kept workspace (a fresh one where n is too large to keep, or
/// where the kept one is in use further up this thread's stack).
fn with_workspace<R>(n: usize, job: impl FnOnce(&mut expm::Workspace) -> R) -> R {
    if n > KEPT_WORKSPACE_N {
        return job(&mut expm::Workspace::default());
    }
    WORKSPACE.with(|kept| match kept.try_borrow_mut() {
        Ok(mut ws) => job(&mut ws),
        Err(_) => job(&mut expm::Workspace::default()),
    })
}

/// Runs `job` on every matrix of the batch with one workspace per thread. A batch of at most
/// one job's worth runs on the calling thread: where the caller is not a pool thread (FISTA's
/// chunk threads, a program that keeps its main thread out of the pool), rayon would hand it to a pool worker and
/// wait, a cross-thread round trip that costs more than a batch of hundreds of 3 x 3 problems,
/// and that serialises callers that solve chunks on their own threads.
fn for_each_matrix<I, F>(items: I, n: usize, job: F)
where
    I: IndexedParallelIterator,
    F: Fn(&mut expm::Workspace, I::Item) + Sync + Send,
{
    for_each_item(items, n, min_matrices(n), job)
}

/// [`for_each_matrix`] for items of any size: at least `min` items per parallel job.
fn for_each_item<I, F>(items: I, n: usize, min: usize, job: F)
where
    I: IndexedParallelIterator,
    F: Fn(&mut expm::Workspace, I::Item) + Sync + Send,
{
    struct Serial<F> {
        job: F,
        n: usize,
    }
    impl<T, F: Fn(&mut expm::Workspace, T)> ProducerCallback<T> for Serial<F> {
        type Output = ();
        fn callback<P: Producer<Item = T>>(self, producer: P) {
            let job = self.job;
            with_workspace(self.n, |ws| {
                producer.into_iter().for_each(|item| job(ws, item))
            });
        }
    }
    if items.len() < 2 * min {
        items.with_producer(Serial { job, n });
    } else {
        items
            .with_min_len(min)
            .for_each(|item| with_workspace(n, |ws| job(ws, item)));
    }
}

/// exp(A) v for a batch: A [N, n, n], v [N, n], with each matrix's route for the backward.
pub(crate) fn expmv_batch<B: Host>(
    a: FloatTensor<B>,
    v: FloatTensor<B>,
    config: &ExpmvConfig,
) -> (FloatTensor<B>, Vec<KernelRecord>) {
    let dims = v.shape().dims::<2>();
    let n = dims[1];
    let v = in_f32::<B>(v);
    let (a, v) = (B::read(&a), B::read(&v));
    let mut y = output(v.len());
    let mut records = vec![KernelRecord::default(); dims[0]];
    if n > 0 {
        let items = y
            .par_chunks_mut(n)
            .zip(records.par_iter_mut())
            .zip(a.par_chunks(n * n).zip(v.par_chunks(n)));
        for_each_matrix(items, n, |ws, ((y, r), (a, v))| {
            *r = expmv::forward(a, v, y, n, config, ws)
        });
    }
    (B::make(y, &dims), records)
}

/// Adjoints (Abar, vbar) of exp(A) v for a batch, given the adjoint of the output.
pub(crate) fn expmv_backward_batch<B: Host>(
    a: FloatTensor<B>,
    v: FloatTensor<B>,
    grad: FloatTensor<B>,
    config: &ExpmvConfig,
    records: &[KernelRecord],
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (adims, vdims) = (a.shape().dims::<3>(), v.shape().dims::<2>());
    let n = vdims[1];
    let (v, grad) = (in_f32::<B>(v), in_f32::<B>(grad));
    let (a, v, g) = (B::read(&a), B::read(&v), B::read(&grad));
    let mut vbar = output(v.len());
    // Abar's parts are zeroed by the threads that write them, in cache: zeroing the whole
    // buffer first (8 MiB for the ManifoldCLR step's transport) was one thread's pass over
    // memory.
    let (abar, ()) = output_in_parts(a.len(), n * n, |parts| {
        if n > 0 {
            let items = parts
                .zip(vbar.par_chunks_mut(n))
                .zip(
                    a.par_chunks(n * n)
                        .zip(v.par_chunks(n).zip(g.par_chunks(n))),
                )
                .enumerate();
            for_each_matrix(items, n, |ws, (i, ((ab, vb), (a, (v, g))))| {
                expmv::backward(a, v, g, ab, vb, n, config, records.get(i), ws)
            });
        }
    });
    (B::make(abar, &adims), B::make(vbar, &vdims))
}

/// The largest dictionary block, M n^2 floats (what forming one generator reads), for which the
/// CPU forms each generator per problem: 512 KiB, 16 generators of 64 x 64 twice over, which the
/// L2 of the x86 cores measured (1 MiB and more) holds. A larger dictionary would stream from
/// further out for every group of rows, where one matmul over the batch reads it once
/// ([`generated_takes`]).
const GENERATED_MAX_FLOATS: usize = 128 * 1024;

/// Whether the CPU kernel forms the generators of a dictionary psi [M, S, n, n] of these
/// dimensions per problem (see [`GENERATED_MAX_FLOATS`]; M >= 1: an empty dictionary's
/// generators are zero, which the matmul forms).
pub(crate) fn generated_takes(psi: &[usize]) -> bool {
    matches!(psi, &[m, _, n, n2] if n == n2 && m >= 1 && m * n * n <= GENERATED_MAX_FLOATS)
}

/// Whether [`expmv_generated_batch`] takes these inputs: all three f32, and a dictionary that
/// [`generated_takes`].
pub(crate) fn generated_accepts<B: Backend>(
    c: &FloatTensor<B>,
    psi: &FloatTensor<B>,
    v: &FloatTensor<B>,
) -> bool {
    generated_takes(&psi.shape()) && [c, psi, v].into_iter().all(accepts::<B>)
}

/// The blocks of generator block k: psi [M, S, n, n] as M slices of n x n.
fn blocks_of(psi: &[f32], m: usize, s: usize, n: usize, k: usize) -> Vec<&[f32]> {
    let nn = n * n;
    (0..m)
        .map(|i| &psi[(i * s + k) * nn..(i * s + k + 1) * nn])
        .collect()
}

/// Runs `job(ws, item, rows, generators)` for each group of rows (`items`: one per group of
/// [`simd::GENERATED_ROWS`] rows of c [R, M], the last `rows` < that when R is not a multiple),
/// `generators` the group's generators of one block formed in the thread's cache
/// ([`simd::generators`]): each dictionary entry loaded serves the group's rows, and the block's
/// dictionary, read by every group, stays in cache.
fn for_each_group<I>(
    items: I,
    n: usize,
    (c, [r, m], psi): (&[f32], [usize; 2], &[&[f32]]),
    job: impl Fn(&mut expm::Workspace, I::Item, usize, &[f32]) + Sync + Send,
) where
    I: IndexedParallelIterator,
{
    let nn = n * n;
    let min = min_matrices(n).div_ceil(simd::GENERATED_ROWS);
    for_each_item(items.enumerate(), n, min, |ws, (group, item)| {
        // The group's coefficients (zero rows past the batch's last), then its generators, in
        // the thread's kept buffers.
        let mut buffers = std::mem::take(&mut ws.vectors.generators);
        let (first, width) = (group * simd::GENERATED_ROWS, simd::GENERATED_ROWS * m);
        let rows = r.saturating_sub(first).min(simd::GENERATED_ROWS);
        buffers.resize(width + simd::GENERATED_ROWS * nn, 0.0);
        let (coefficients, a) = buffers.split_at_mut(width);
        coefficients[..rows * m].copy_from_slice(&c[first * m..(first + rows) * m]);
        coefficients[rows * m..].fill(0.0);
        simd::generators(coefficients, psi, a, nn);
        job(ws, item, rows, a);
        ws.vectors.generators = buffers;
    });
}

/// exp(A_p) v_p for the generators A_p = sum_m c[r, m] psi[m, k] of the problems p = r S + k
/// (c [R, M], psi [M, S, n, n], v [R S, n]), with each problem's route for the backward. The
/// generators are formed in the cache of the thread that solves them, a group of rows of one
/// block at a time (block by block), and never written out: at the ManifoldCLR step's
/// transport they would be 8 MiB written and read back.
pub(crate) fn expmv_generated_batch<B: Host>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    config: &ExpmvConfig,
) -> (FloatTensor<B>, Vec<KernelRecord>) {
    let vdims = v.shape().dims::<2>();
    let [m, s, n, _] = psi.shape().dims::<4>();
    let count = c.shape().dims::<2>()[0];
    let (c, psi, v) = (B::read(&c), B::read(&psi), B::read(&v));
    let mut y = output(v.len());
    let mut records = vec![KernelRecord::default(); vdims[0]];
    let group = simd::GENERATED_ROWS * s;
    for k in (0..s).filter(|_| n > 0) {
        let items = y
            .par_chunks_mut(group * n)
            .zip(records.par_chunks_mut(group))
            .zip(v.par_chunks(group * n));
        let block = blocks_of(&psi, m, s, n, k);
        for_each_group(
            items,
            n,
            (&c, [count, m], &block),
            |ws, ((y, records), v), rows, a| {
                for (row, a) in a.chunks_exact(n * n).take(rows).enumerate() {
                    let p = row * s + k;
                    let (v, y) = (&v[p * n..(p + 1) * n], &mut y[p * n..(p + 1) * n]);
                    records[p] = expmv::forward(a, v, y, n, config, ws);
                }
            },
        );
    }
    (B::make(y, &vdims), records)
}

/// The adjoints (A_bar [R S, n, n], v_bar) of [`expmv_generated_batch`] given the adjoint of its
/// output: each generator formed again in cache as in the forward (never read from memory).
pub(crate) fn expmv_generated_backward_batch<B: Host>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    grad: FloatTensor<B>,
    config: &ExpmvConfig,
    records: &[KernelRecord],
) -> (FloatTensor<B>, FloatTensor<B>) {
    let vdims = v.shape().dims::<2>();
    let [m, s, n, _] = psi.shape().dims::<4>();
    let grad = in_f32::<B>(grad);
    let count = c.shape().dims::<2>()[0];
    let (c, psi, v, g) = (B::read(&c), B::read(&psi), B::read(&v), B::read(&grad));
    let mut vbar = output(v.len());
    // A_bar's entries are zeroed problem by problem in cache, just before the problem's
    // adjoint is added into them, rather than the whole 8 MiB (the step's transport) on one
    // thread first.
    let len = vdims[0] * n * n;
    let mut abar = Vec::with_capacity(len);
    let spare = &mut abar.spare_capacity_mut()[..len];
    let group = simd::GENERATED_ROWS * s;
    for k in (0..s).filter(|_| n > 0) {
        let items = spare
            .par_chunks_mut(group * n * n)
            .zip(vbar.par_chunks_mut(group * n))
            .zip(v.par_chunks(group * n).zip(g.par_chunks(group * n)))
            .zip(records.par_chunks(group));
        let block = blocks_of(&psi, m, s, n, k);
        for_each_group(items, n, (&c, [count, m], &block), |ws, item, rows, a| {
            let (((abar, vbar), (v, g)), records) = item;
            for (row, a) in a.chunks_exact(n * n).take(rows).enumerate() {
                let p = row * s + k;
                let (v, g) = (&v[p * n..(p + 1) * n], &g[p * n..(p + 1) * n]);
                let vb = &mut vbar[p * n..(p + 1) * n];
                let ab = &mut abar[p * n * n..(p + 1) * n * n];
                ab.fill(std::mem::MaybeUninit::new(0.0));
                // SAFETY: every entry of `ab` was just written, and MaybeUninit<f32> has the
                // size, alignment and valid bit patterns of f32.
                let ab = unsafe { &mut *(ab as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) };
                expmv::backward(a, v, g, ab, vb, n, config, records.get(p), ws);
            }
        });
    }
    // SAFETY: the passes over the blocks k = 0..S wrote problem r S + k of every row r, so all
    // R S problems' n^2 entries (n = 0 or S = 0: none to write).
    unsafe { abar.set_len(len) };
    (B::make(abar, &[vdims[0], n, n]), B::make(vbar, &vdims))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expm::dense;
    use crate::testing::rel_frobenius;
    use burn::tensor::{Distribution, TensorPrimitive};

    // The kernels run on the CPU backends only: the test backend when it is one.
    #[cfg(feature = "test-flex")]
    type B = burn::backend::Flex;
    #[cfg(all(not(feature = "test-flex"), feature = "ndarray"))]
    type B = burn::backend::NdArray;
    #[cfg(all(not(feature = "test-flex"), not(feature = "ndarray")))]
    type B = burn::backend::Flex;

    fn prim<const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
        t.into_primitive().tensor()
    }

    fn tensor<const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
        Tensor::from_primitive(TensorPrimitive::Float(t))
    }

    fn expm_batch(a: Tensor<B, 3>, method: ExpmMethod) -> Tensor<B, 3> {
        tensor(super::expm_batch::<B>(prim(a), method))
    }

    fn expm_backward_batch(a: Tensor<B, 3>, g: Tensor<B, 3>, method: ExpmMethod) -> Tensor<B, 3> {
        tensor(super::expm_backward_batch::<B>(prim(a), prim(g), method))
    }

    fn expmv_batch(
        a: Tensor<B, 3>,
        v: Tensor<B, 2>,
        config: &ExpmvConfig,
    ) -> (Tensor<B, 2>, Vec<KernelRecord>) {
        let (y, records) = super::expmv_batch::<B>(prim(a), prim(v), config);
        (tensor(y), records)
    }

    fn expmv_backward_batch(
        a: Tensor<B, 3>,
        v: Tensor<B, 2>,
        g: Tensor<B, 2>,
        config: &ExpmvConfig,
        records: &[KernelRecord],
    ) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let (ab, vb) = super::expmv_backward_batch::<B>(prim(a), prim(v), prim(g), config, records);
        (tensor(ab), tensor(vb))
    }

    fn batch(count: usize, n: usize, norm: f64) -> Tensor<B, 3> {
        let device = Default::default();
        B::seed(&device, 3);
        let a = Tensor::<B, 3>::random([count, n, n], Distribution::Normal(0.0, 1.0), &device);
        let norms = a.clone().abs().sum_dim(1).max_dim(2);
        a / norms * norm
    }

    /// The per-problem generators are taken for the training configs' dictionaries (16
    /// generators of 64 x 64) and left to the matmul for the paper's largest (128 of them).
    #[test]
    fn generators_are_formed_per_problem_only_for_dictionaries_in_cache() {
        assert!(generated_takes(&[16, 2, 64, 64]));
        assert!(generated_takes(&[32, 8, 64, 64]));
        assert!(!generated_takes(&[128, 8, 64, 64]));
        assert!(!generated_takes(&[16, 2, 64, 63]));
        assert!(!generated_takes(&[16, 64, 64]));
    }

    #[test]
    fn kernel_agrees_with_the_tensor_op_path() {
        // n = 1 and 5 (scalar edges only), 12 (one strip and an edge), 16 (whole strips).
        let cases = [1, 5, 12, 16]
            .into_iter()
            .flat_map(|n| [0.3, 2.0, 9.0, 80.0].map(|norm| (n, norm)));
        for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
            for (n, norm) in cases.clone() {
                let a = batch(6, n, norm);
                let tensor_ops = dense::expm_forward(a.clone(), method);
                let kernel = expm_batch(a.clone(), method);
                let err = rel_frobenius(kernel, tensor_ops);
                assert!(
                    err < 2e-5 * (1.0 + norm),
                    "{method:?} n {n} {norm}: {err:.2e}"
                );
                let g = batch(6, n, 1.0);
                let plan = dense::plan(&a, method);
                let tensor_ops = dense::expm_backward(a.clone(), g.clone(), &plan);
                let kernel = expm_backward_batch(a.clone(), g, method);
                let err = rel_frobenius(kernel, tensor_ops);
                assert!(
                    err < 2e-5 * (1.0 + norm),
                    "{method:?} n {n} {norm} backward: {err:.2e}"
                );
            }
        }
    }

    #[test]
    fn expmv_kernel_agrees_with_the_tensor_op_path() {
        let device = Default::default();
        let config = ExpmvConfig::default();
        // n <= 4 runs the fixed-size kernel, n = 10 and 64 the general one (64: the products'
        // wide strips, where 10 takes only the narrowest and single entries).
        for (n, norm) in [1, 2, 3, 4, 10, 64]
            .into_iter()
            .flat_map(|n| [0.0, 0.3, 4.0, 30.0, 60.0].map(|norm| (n, norm)))
        {
            let a = batch(5, n, norm);
            let v = Tensor::<B, 2>::random([5, n], Distribution::Normal(0.0, 1.0), &device);
            let g = Tensor::<B, 2>::random([5, n], Distribution::Normal(0.0, 1.0), &device);
            let (want, saved) = crate::expm::expmv::expmv_forward(a.clone(), v.clone(), &config);
            let (got, records) = expmv_batch(a.clone(), v.clone(), &config);
            assert!(rel_frobenius(got, want) < 1e-5, "n {n} norm {norm}");
            // A single step leaves its terms in the record, which the backward then takes
            // instead of recomputing the step: the comparison below covers both ways.
            if norm == 0.3 {
                assert!(records.iter().all(|r| r.s == 1 && r.used > 0), "n {n}");
            }
            let (wa, wv) =
                crate::expm::expmv::expmv_backward(a.clone(), v.clone(), g.clone(), &saved);
            // With the forward's records and without (recomputing the routes): same adjoints.
            let (ra, rv) = expmv_backward_batch(a.clone(), v.clone(), g.clone(), &config, &records);
            let (ga, gv) = expmv_backward_batch(a, v, g, &config, &[]);
            assert_eq!(
                ra.clone().into_data(),
                ga.clone().into_data(),
                "n {n} norm {norm}"
            );
            assert_eq!(rv.into_data(), gv.clone().into_data(), "n {n} norm {norm}");
            assert!(
                rel_frobenius(ga, wa) < 1e-4 * (1.0 + norm),
                "n {n} norm {norm} dA"
            );
            assert!(
                rel_frobenius(gv, wv) < 1e-4 * (1.0 + norm),
                "n {n} norm {norm} dv"
            );
        }
    }

    #[test]
    fn into_variants_equal_the_tensor_kernels_and_reject_bad_lengths() {
        let to_vec = |t: Tensor<B, 3>| t.into_data().to_vec::<f32>().unwrap();
        // n = 9 and 5 in turn on the same threads: each thread's kept workspace changes size
        // between calls and must not carry anything over.
        for (n, method) in [
            (9, ExpmMethod::Pade),
            (5, ExpmMethod::Taylor),
            (9, ExpmMethod::Taylor),
            (5, ExpmMethod::Pade),
        ] {
            let (a, g) = (batch(7, n, 3.0), batch(7, n, 1.0));
            let want = to_vec(expm_batch(a.clone(), method));
            let want_bar = to_vec(expm_backward_batch(a.clone(), g.clone(), method));
            let (a, g) = (to_vec(a), to_vec(g));
            // Whatever the caller's buffer held is overwritten.
            let mut out = vec![f32::NAN; a.len()];
            super::expm_into(&a, &mut out, n, method).unwrap();
            assert_eq!(out, want, "n {n} {method:?}");
            super::expm_backward_into(&a, &g, &mut out, n, method).unwrap();
            assert_eq!(out, want_bar, "n {n} {method:?} backward");
        }
        let (a, mut out) = (vec![0.0f32; 8], vec![0.0f32; 8]);
        let pade = ExpmMethod::Pade;
        let shape = |r: crate::Result<()>| matches!(r, Err(crate::VlgoError::Shape { .. }));
        let mismatch =
            |r: crate::Result<()>| matches!(r, Err(crate::VlgoError::ShapeMismatch { .. }));
        assert!(shape(super::expm_into(&a, &mut out, 0, pade)));
        assert!(shape(super::expm_into(&a, &mut out, 3, pade)));
        assert!(mismatch(super::expm_into(&a, &mut out[..4], 2, pade)));
        assert!(mismatch(super::expm_backward_into(
            &a,
            &a[..4],
            &mut out,
            2,
            pade
        )));
        assert!(super::expm_backward_into(&a, &a, &mut out, 2, pade).is_ok());
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let a = batch(16, 9, 5.0);
        let g = batch(16, 9, 1.0);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let f = expm_batch(a.clone(), ExpmMethod::Pade).into_data();
                let b = expm_backward_batch(a.clone(), g.clone(), ExpmMethod::Pade).into_data();
                (f, b)
            })
        };
        let (f1, b1) = run(1);
        let (f2, b2) = run(2);
        assert_eq!(f1, f2);
        assert_eq!(b1, b2);
    }
}
