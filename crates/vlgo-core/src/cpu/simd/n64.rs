//! The kernels of 64 x 64 matrices (the exponential's usual size, and that of ManifoldCLR's
//! blocks), written with intrinsics: the product and the two solves with the LU factors on AVX2
//! and AVX-512 alike (generic over the vector, [`Lanes`]), and the LU factorisation, in two
//! organisations: groups of 4 columns on AVX-512, left-looking panels on AVX2. Each does the
//! multiply-adds of the generic body it stands in for
//! ([`super::matmul_body`], [`super::lu_factor_body`], [`super::lu_solve_body`],
//! [`super::lu_solve_transposed_body`]) in the same order, one fused multiply-add per term, so
//! the results are the same to the bit (the tests hold them to it; a NaN's sign and payload
//! aside, which depend on the instruction forms the compiler picks).
//!
//! Why intrinsics: at a run-time n the generic loops carried a dozen integer instructions per
//! step beside their multiply-adds, and getting n = 64 folded into them depended on the
//! compiler's inlining, which came and went with unrelated edits elsewhere in the crate (one build
//! ran the product at half the speed of another from the same source). Here every row is a fixed
//! offset from one pointer and the loops are what the source says. AVX2 needs twice the
//! instructions of AVX-512 for the same multiply-adds, which makes it the more sensitive to
//! such overhead: on a Zen 4 machine (where both have the same FMA peak) the generic AVX2 bodies
//! ran at 4.8 us a product in one sitting and 6.3-7.9 us in another, while the AVX-512
//! intrinsics held 5.0 (`docs/expm.md`). The factorisation also organises its work differently
//! from the generic body (groups of 4 columns, one pass over the rows below per group, instead
//! of panels of 8 and register tiles), which the bits allow since each entry's sequence of
//! operations is the same. The same factorisation on AVX2 (its pivot rows, 32 vectors, on the
//! stack rather than in registers) measured no faster than the generic body there, 8.5-8.9 us
//! against 7.6-8.6 on the Zen 4 machine; AVX2 keeps the generic body's panels of 8 and applies
//! their updates left-looking instead ([`factor_left`]), each 8 x 8 tile in registers across its
//! whole depth: 5.1-5.9 us against 6.3-6.9 for the generic body on a Zen 4 without AVX-512.

use std::arch::x86_64::*;

const N: usize = 64;

/// One vector of f32 lanes and the few operations the product and the solves need, so that one
/// source serves AVX-512 (`__m512`) and AVX2 + FMA (`__m256`).
///
/// # Safety
///
/// Each method is an intrinsic of its instruction set: call it only on a CPU that has the set,
/// from code inlined into a function compiled with it enabled (the `#[target_feature]` entry
/// points below; elsewhere the intrinsics stay calls), with pointers to `LANES` readable (for
/// `store`, writable) f32.
trait Lanes: Copy {
    /// f32 per vector.
    const LANES: usize;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(p: *mut f32, x: Self);
    unsafe fn splat(x: f32) -> Self;
    unsafe fn zero() -> Self;
    /// a b + c, rounded once.
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
    /// -(a b) + c, rounded once: fma(-a, b, c) to the bit (the signs of zeros included).
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
}

/// `Lanes` for a vector type through its instruction set's intrinsics.
macro_rules! lanes {
    ($v:ty, $lanes:literal, $load:ident, $store:ident, $splat:ident, $zero:ident, $fmadd:ident,
     $fnmadd:ident, $mul:ident) => {
        impl Lanes for $v {
            const LANES: usize = $lanes;
            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $load(p) }
            }
            #[inline(always)]
            unsafe fn store(p: *mut f32, x: Self) {
                // SAFETY: the trait's conditions.
                unsafe { $store(p, x) }
            }
            #[inline(always)]
            unsafe fn splat(x: f32) -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $splat(x) }
            }
            #[inline(always)]
            unsafe fn zero() -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $zero() }
            }
            #[inline(always)]
            unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $fmadd(a, b, c) }
            }
            #[inline(always)]
            unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $fnmadd(a, b, c) }
            }
            #[inline(always)]
            unsafe fn mul(a: Self, b: Self) -> Self {
                // SAFETY: the trait's conditions.
                unsafe { $mul(a, b) }
            }
        }
    };
}

lanes!(
    __m512,
    16,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_setzero_ps,
    _mm512_fmadd_ps,
    _mm512_fnmadd_ps,
    _mm512_mul_ps
);
lanes!(
    __m256,
    8,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_setzero_ps,
    _mm256_fmadd_ps,
    _mm256_fnmadd_ps,
    _mm256_mul_ps
);

/// The entry points of one instruction set: its vector type, the product's tiles of
/// `rows` rows by 2 vectors (accumulators in registers beside one strip of B and a broadcast:
/// AVX-512's 32 registers take 8 x 2, 16 accumulators, and 64 rows are whole tiles; AVX2's 16
/// take 6 x 2, 12, and a last tile of 4 rows, as the generic body's tiles), and the solves'
/// strips of `strip` vectors.
macro_rules! entry_points {
    ($v:ty, $rows:literal, $strip:literal, $($feature:literal),+) => {
        /// C (+)= A B: register tiles, each entry summed over k in order.
        $(#[target_feature(enable = $feature)])+
        #[inline(never)]
        pub(crate) unsafe fn matmul(a: &[f32], b: &[f32], c: &mut [f32], accumulate: bool) {
            // SAFETY: the caller's conditions; no lines to fetch.
            unsafe { matmul_ahead(a, b, c, accumulate, crate::cpu::simd::Ahead::default()) }
        }

        /// [`matmul`], bringing the lines of `ahead` into the cache a few at a time, spread
        /// over the product's tiles.
        $(#[target_feature(enable = $feature)])+
        #[inline(never)]
        pub(crate) unsafe fn matmul_ahead(
            a: &[f32],
            b: &[f32],
            c: &mut [f32],
            accumulate: bool,
            ahead: crate::cpu::simd::Ahead,
        ) {
            // SAFETY: the caller's conditions (the CPU has the instruction set enabled here).
            unsafe { super::product::<$v, $rows, 2>(a, b, c, accumulate, ahead) }
        }

        /// A X = B with the factors of `lu_factor` (P A = L U): L Y = P B into `tmp` from
        /// the top, then U X = Y into `b` from the bottom.
        $(#[target_feature(enable = $feature)])+
        #[inline(never)]
        pub(crate) unsafe fn lu_solve(
            u: &[f32],
            l: &[f32],
            perm: &[usize],
            b: &mut [f32],
            tmp: &mut [f32],
        ) {
            // SAFETY: the caller's conditions (the CPU has the instruction set enabled here).
            unsafe { super::solve::<$v, $strip>(u, l, perm, b, tmp) }
        }

        /// A^T X = B with the same factors (A^T = U^T L^T P): U^T W = B into `tmp` from the
        /// top, L^T Z = W in place from the bottom, then X = P^T Z into `b`.
        $(#[target_feature(enable = $feature)])+
        #[inline(never)]
        pub(crate) unsafe fn lu_solve_transposed(
            u: &[f32],
            l: &[f32],
            perm: &[usize],
            b: &mut [f32],
            tmp: &mut [f32],
        ) {
            // SAFETY: the caller's conditions (the CPU has the instruction set enabled here).
            unsafe { super::solve_transposed::<$v, $strip>(u, l, perm, b, tmp) }
        }

    };
}

/// AVX-512F: whole rows (4 vectors) per strip of the solves.
pub(crate) mod avx512 {
    use super::*;
    entry_points!(__m512, 8, 4, "avx512f");

    /// P A = L U with partial pivoting: [`super::factor`].
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    pub(crate) unsafe fn lu_factor(a: &mut [f32], l: &mut [f32], perm: &mut [usize]) {
        // SAFETY: the caller's conditions (the CPU has AVX-512F, enabled here).
        unsafe { super::factor::<__m512, 4>(a, l, perm) }
    }
}

/// AVX2 + FMA: 16 columns (2 vectors) per strip of the solves: a block's 6 rows take 12 of the
/// 16 registers.
pub(crate) mod avx2 {
    use super::*;
    entry_points!(__m256, 6, 2, "avx2", "fma");

    /// P A = L U with partial pivoting: [`super::factor_left`].
    #[target_feature(enable = "avx2", enable = "fma")]
    #[inline(never)]
    pub(crate) unsafe fn lu_factor(a: &mut [f32], l: &mut [f32], perm: &mut [usize]) {
        // SAFETY: the caller's conditions (the CPU has AVX2 and FMA, enabled here).
        unsafe { super::factor_left::<__m256>(a, l, perm) }
    }
}

/// P A = L U with partial pivoting, as the generic `lu_factor_body` computes it to the bit, for
/// vectors of one panel's width (8 lanes: AVX2). The generic body is right-looking: after each
/// panel it updates the whole trailing matrix by a product of depth 8, loading and storing every
/// trailing entry once per panel. Here the updates are applied left-looking: before a panel is
/// factored, its columns (rows from the panel down) take the updates of all the panels before it
/// in one pass of depth k0, each 8 x 8 tile held in registers across the whole depth; after it
/// is factored, U's rows of the panel right of it take theirs the same way, and then the
/// panel's unit lower triangle in the same registers ([`tile`]). Each entry still receives one
/// fused multiply-add per column of the factorisation, columns in order, with the same
/// multipliers and pivots (the panel itself is factored by the generic column-major panel,
/// `Columns`), so the bits do not change. The pivots are chosen from the panel's columns, which
/// are up to date in both orders; a row exchange moves a row's multipliers (in `l`) with its
/// entries right of the panel (in `a`), so every later update of those entries pairs them with
/// the same multipliers as the generic body does, whatever updates they hold so far.
///
/// # Safety
///
/// V's instruction set enabled.
#[inline(always)]
unsafe fn factor_left<V: Lanes>(a: &mut [f32], l: &mut [f32], perm: &mut [usize]) {
    use super::{Columns, Fused, PANEL};
    const { assert!(V::LANES == PANEL && N.is_multiple_of(PANEL)) };
    let (a, l, perm) = (&mut a[..N * N], &mut l[..N * N], &mut perm[..N]);
    for (i, p) in perm.iter_mut().enumerate() {
        *p = i;
    }
    let mut columns = Columns::new();
    for k0 in (0..N).step_by(PANEL) {
        let end = k0 + PANEL;
        // The first panel has no earlier panels to take updates from.
        if k0 > 0 {
            for i0 in (k0..N).step_by(PANEL) {
                // SAFETY: the caller's conditions; i0 + PANEL <= N, k0 + PANEL <= N.
                unsafe { tile::<V, false>(a.as_mut_ptr(), l.as_ptr(), (i0, k0), k0) };
            }
        }
        columns.factor::<Fused>(a, l, perm, N, k0);
        for j0 in (end..N).step_by(PANEL) {
            // SAFETY: as above, j0 + PANEL <= N.
            unsafe { tile::<V, true>(a.as_mut_ptr(), l.as_ptr(), (k0, j0), k0) };
        }
    }
}

/// Rows i0..i0 + 8 of `a` at columns j0..j0 + 8, one vector a row: minus the product of L's
/// rows (columns 0..depth of `l`) and U's rows 0..depth (of `a`), column by column in order
/// (as the generic body's trailing updates, `fma(-l, u, x)`); then, with TRIANGLE, the unit
/// lower triangle of L at (i0, i0), rows in ascending order (as its `panel_rows`).
///
/// # Safety
///
/// V's instruction set enabled, V::LANES == 8; `a` and `l` point to N x N matrices;
/// i0, j0 + 8 <= N and depth <= N.
#[inline(always)]
unsafe fn tile<V: Lanes, const TRIANGLE: bool>(
    a: *mut f32,
    l: *const f32,
    (i0, j0): (usize, usize),
    depth: usize,
) {
    const R: usize = 8;
    // SAFETY: the caller's conditions; every row index is below N and every column below N.
    unsafe {
        let mut acc: [V; R] = std::array::from_fn(|r| V::load(a.add((i0 + r) * N + j0)));
        for c in 0..depth {
            let u = V::load(a.add(c * N + j0));
            for (r, acc) in acc.iter_mut().enumerate() {
                // -(l u) + x rounds once, as fma(-l, u, x) does.
                *acc = V::fnmadd(V::splat(*l.add((i0 + r) * N + c)), u, *acc);
            }
        }
        if TRIANGLE {
            for r in 1..R {
                for c in 0..r {
                    let m = V::splat(*l.add((i0 + r) * N + i0 + c));
                    acc[r] = V::fnmadd(m, acc[c], acc[r]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            V::store(a.add((i0 + r) * N + j0), *acc);
        }
    }
}

/// C (+)= A B in R x S-vector tiles (R = 8 or 6; 6 leaves a last tile of 4 rows), each entry
/// summed over k in order; `ahead`'s lines fetched a share at the start of each tile.
///
/// # Safety
///
/// V's instruction set enabled.
#[inline(always)]
unsafe fn product<V: Lanes, const R: usize, const S: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    accumulate: bool,
    mut ahead: super::Ahead,
) {
    let (a, b, c) = (&a[..N * N], &b[..N * N], &mut c[..N * N]);
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // The row blocks are then R-row ones and at most one of 4 (`product_tile` below).
    const { assert!(N.is_multiple_of(R) || N % R == 4) };
    let width = S * V::LANES;
    // A share at the start of each tile (a sixteenth on AVX-512, a 44th on AVX2: 11 or 4 lines
    // in the forward at ||A||_1 ~ 1.6, whose Padé-5 scheme has three products to share the 512
    // lines of the next matrix and output part). Spread finer, a few lines every 8 steps of k, measured slower;
    // the whole share in one burst before one of the scheme's steps, slower still
    // (`docs/expm.md`).
    let tiles = super::row_blocks::<R>(N).count() * (N / width);
    let share = ahead.lines().div_ceil(tiles);
    for j0 in (0..N).step_by(width) {
        for (i0, rows) in super::row_blocks::<R>(N) {
            if share > 0 {
                ahead.fetch(share);
            }
            // SAFETY: the caller's conditions; the blocks lie inside the N x N matrices whose
            // lengths the slicing above checked.
            unsafe {
                if rows == R {
                    product_tile::<V, R, S>(a, b, c, (i0, j0), accumulate);
                } else {
                    product_tile::<V, 4, S>(a, b, c, (i0, j0), accumulate);
                }
            }
        }
    }
}

/// One R x S-vector tile of [`product`] at (i0, j0).
///
/// # Safety
///
/// V's instruction set enabled; `a`, `b` and `c` point to N x N matrices; i0 + R <= N,
/// j0 + S V::LANES <= N.
#[inline(always)]
unsafe fn product_tile<V: Lanes, const R: usize, const S: usize>(
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    (i0, j0): (usize, usize),
    accumulate: bool,
) {
    // SAFETY: every offset below is a row below N times N plus a column below N; unaligned
    // loads and stores.
    unsafe {
        let mut acc = [[V::zero(); S]; R];
        if accumulate {
            for (r, row) in acc.iter_mut().enumerate() {
                let from = c.add((i0 + r) * N + j0);
                *row = std::array::from_fn(|v| V::load(from.add(v * V::LANES)));
            }
        }
        let rows = a.add(i0 * N);
        for k in 0..N {
            let from = b.add(k * N + j0);
            let strip: [V; S] = std::array::from_fn(|v| V::load(from.add(v * V::LANES)));
            for (r, row) in acc.iter_mut().enumerate() {
                let x = V::splat(*rows.add(r * N + k));
                for (acc, &b) in row.iter_mut().zip(&strip) {
                    *acc = V::fmadd(x, b, *acc);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            let to = c.add((i0 + r) * N + j0);
            for (v, &x) in row.iter().enumerate() {
                V::store(to.add(v * V::LANES), x);
            }
        }
    }
}

/// One block of R rows of a triangular solve, a strip of S vectors at a time in registers (R = 6
/// and S = 4, whole rows, takes 24 of AVX-512's 32 registers; S = 2 on AVX2, 12 of its 16):
/// the block's right-hand sides, minus the solved rows' terms one row at a time, then the
/// triangle inside the block, as the generic `triangle` solves it. Every entry is summed in the
/// generic tiles' order; the strip's width changes no sum.
struct Block<Init, Coef, Tri> {
    /// The first row of the block.
    i0: usize,
    /// Where the right-hand side of the block's row r starts.
    init: Init,
    /// The solved rows that enter, in order: first and past-the-last index.
    solved: (usize, usize),
    /// The coefficient of solved row k in the block's row r: `coef(r, k)`.
    coef: Coef,
    /// The triangle's coefficient of the block's row c in its row r (`tri(r, r)` the diagonal).
    tri: Tri,
}

impl<Init, Coef, Tri> Block<Init, Coef, Tri>
where
    Init: Fn(usize) -> *const f32,
    Coef: Fn(usize, usize) -> f32,
    Tri: Fn(usize, usize) -> f32,
{
    /// Solves the block's R rows from the solved rows of `x` into rows i0.. of `out` (which may
    /// be `x`, and `init` may point into the rows written: every load of a strip comes before
    /// its stores, and the strips are disjoint). With `ASCENDING` the rows go in ascending
    /// order (a lower triangle), otherwise descending (upper); with `UNIT` the diagonal is
    /// ones (L), otherwise each row is scaled by 1 / `tri(r, r)` (U). Both are constants so
    /// that the triangle's loops unroll and the block's rows stay in registers: with them read
    /// at run time, the descending triangle kept the rows on the stack, each multiply-add a
    /// load, an FMA and a store in a chain.
    ///
    /// # Safety
    ///
    /// V's instruction set enabled; `init` and the rows of `x` and `out` named by the block
    /// hold 64 readable (and, for `out`, writable) f32 each; i0 + R and `solved.1` are at most
    /// N; `coef` and `tri` read in bounds for r < R, c < R and k in `solved`.
    #[inline(always)]
    unsafe fn solve<
        V: Lanes,
        const S: usize,
        const R: usize,
        const ASCENDING: bool,
        const UNIT: bool,
    >(
        &self,
        x: *const f32,
        out: *mut f32,
    ) {
        let width = S * V::LANES;
        // SAFETY: the caller's conditions; every offset is a row index below N times N plus a
        // column below N.
        unsafe {
            for j0 in (0..N).step_by(width) {
                let load = |p: *const f32| -> [V; S] {
                    std::array::from_fn(|v| V::load(p.add(j0 + v * V::LANES)))
                };
                let mut acc: [[V; S]; R] = std::array::from_fn(|r| load((self.init)(r)));
                for k in self.solved.0..self.solved.1 {
                    let strip = load(x.add(k * N));
                    for (r, row) in acc.iter_mut().enumerate() {
                        let c = V::splat((self.coef)(r, k));
                        for (acc, &x) in row.iter_mut().zip(&strip) {
                            // -(c x) + acc rounds once, as fma(-c, x, acc) does.
                            *acc = V::fnmadd(c, x, *acc);
                        }
                    }
                }
                for step in 0..R {
                    let r = if ASCENDING { step } else { R - 1 - step };
                    // Over all of 0..R with the test inside, not over the run-time range of
                    // the rows already solved, so that the loop has constant bounds to unroll;
                    // the rows enter in the order they were solved, as in the generic
                    // `triangle`.
                    for done in 0..R {
                        let c = if ASCENDING { done } else { R - 1 - done };
                        let earlier = if ASCENDING { c < r } else { c > r };
                        if earlier {
                            let (m, prev) = (V::splat((self.tri)(r, c)), acc[c]);
                            for (acc, &p) in acc[r].iter_mut().zip(&prev) {
                                *acc = V::fnmadd(m, p, *acc);
                            }
                        }
                    }
                    if !UNIT {
                        // Times 1 / u_rr even where that is 1, which leaves every value as it
                        // was.
                        let s = V::splat(1.0 / (self.tri)(r, r));
                        for v in acc[r].iter_mut() {
                            *v = V::mul(*v, s);
                        }
                    }
                }
                for (r, row) in acc.iter().enumerate() {
                    let to = out.add((self.i0 + r) * N + j0);
                    for (v, &x) in row.iter().enumerate() {
                        V::store(to.add(v * V::LANES), x);
                    }
                }
            }
        }
    }
}

/// Rows per block of the solves: those of the generic bodies' instantiations on AVX2 and
/// AVX-512 (their row count in `instantiate!`), whose partition fixes the order of the back
/// substitution's sums.
pub(super) const ROWS: usize = 6;

/// The solves' row blocks, `(first row, rows)`: ten of 6 rows, then one of 4.
fn blocks() -> impl DoubleEndedIterator<Item = (usize, usize)> {
    super::row_blocks::<ROWS>(N)
}

/// Solves a block of 6 or 4 rows (those that `blocks` gives).
///
/// # Safety
///
/// As [`Block::solve`].
#[inline(always)]
unsafe fn solve_rows<V: Lanes, const S: usize, I, C, T, const ASCENDING: bool, const UNIT: bool>(
    block: &Block<I, C, T>,
    rows: usize,
    x: *const f32,
    out: *mut f32,
) where
    I: Fn(usize) -> *const f32,
    C: Fn(usize, usize) -> f32,
    T: Fn(usize, usize) -> f32,
{
    // SAFETY: the caller's conditions.
    unsafe {
        match rows {
            ROWS => block.solve::<V, S, ROWS, ASCENDING, UNIT>(x, out),
            4 => block.solve::<V, S, 4, ASCENDING, UNIT>(x, out),
            _ => unreachable!("the blocks of 64 rows are of {ROWS} and 4"),
        }
    }
}

/// The body of the `lu_solve` entry points.
///
/// # Safety
///
/// V's instruction set enabled.
#[inline(always)]
unsafe fn solve<V: Lanes, const S: usize>(
    u: &[f32],
    l: &[f32],
    perm: &[usize],
    b: &mut [f32],
    tmp: &mut [f32],
) {
    let (u, l, perm) = (&u[..N * N], &l[..N * N], &perm[..N]);
    let (b, tmp) = (&mut b[..N * N], &mut tmp[..N * N]);
    // Checked once here rather than per block.
    assert!(perm.iter().all(|&p| p < N), "a pivot row past the matrix");
    let (u, l) = (u.as_ptr(), l.as_ptr());
    let (b, tmp) = (b.as_mut_ptr(), tmp.as_mut_ptr());
    // The rows of B in pivot order, from the one pointer through which `b` is also written.
    // SAFETY: each p < N (checked above) and `b` holds N x N entries.
    let sources: [*const f32; N] = std::array::from_fn(|i| unsafe { b.add(perm[i] * N) } as _);
    // SAFETY: the caller's conditions; every row index below is < N and the matrices are N x N.
    unsafe {
        for (i0, rows) in blocks() {
            let lower = Block {
                i0,
                init: |r| sources[i0 + r],
                solved: (0, i0),
                coef: |r, k| *l.add((i0 + r) * N + k),
                tri: |r, c| *l.add((i0 + r) * N + i0 + c),
            };
            solve_rows::<V, S, _, _, _, true, true>(&lower, rows, tmp, tmp);
        }
        for (i0, rows) in blocks().rev() {
            let upper = Block {
                i0,
                init: |r| tmp.add((i0 + r) * N) as *const f32,
                solved: (i0 + rows, N),
                coef: |r, k| *u.add((i0 + r) * N + k),
                tri: |r, c| *u.add((i0 + r) * N + i0 + c),
            };
            solve_rows::<V, S, _, _, _, false, false>(&upper, rows, b, b);
        }
    }
}

/// The body of the `lu_solve_transposed` entry points.
///
/// # Safety
///
/// V's instruction set enabled.
#[inline(always)]
unsafe fn solve_transposed<V: Lanes, const S: usize>(
    u: &[f32],
    l: &[f32],
    perm: &[usize],
    b: &mut [f32],
    tmp: &mut [f32],
) {
    let (u, l, perm) = (&u[..N * N], &l[..N * N], &perm[..N]);
    let (b, tmp) = (&mut b[..N * N], &mut tmp[..N * N]);
    {
        let (u, l) = (u.as_ptr(), l.as_ptr());
        let (source, tmp) = (b.as_ptr(), tmp.as_mut_ptr());
        // SAFETY: the caller's conditions; every row index below is < N and the matrices are
        // N x N.
        unsafe {
            for (i0, rows) in blocks() {
                let upper = Block {
                    i0,
                    init: |r| source.add((i0 + r) * N),
                    solved: (0, i0),
                    coef: |r, k| *u.add(k * N + i0 + r),
                    tri: |r, c| *u.add((i0 + c) * N + i0 + r),
                };
                solve_rows::<V, S, _, _, _, true, false>(&upper, rows, tmp, tmp);
            }
            for (i0, rows) in blocks().rev() {
                let lower = Block {
                    i0,
                    init: |r| tmp.add((i0 + r) * N) as *const f32,
                    solved: (i0 + rows, N),
                    coef: |r, k| *l.add(k * N + i0 + r),
                    tri: |r, c| *l.add((i0 + c) * N + i0 + r),
                };
                solve_rows::<V, S, _, _, _, false, true>(&lower, rows, tmp, tmp);
            }
        }
    }
    for (i, &p) in perm.iter().enumerate() {
        b[p * N..p * N + N].copy_from_slice(&tmp[i * N..i * N + N]);
    }
}

/// What the factorisation needs beyond [`Lanes`]: lane masks by row, the pivot search's
/// comparisons and a 4-lane piece of a vector (AVX-512 only: see the module's notes).
///
/// # Safety
///
/// As [`Lanes`].
trait Pivoting: Lanes {
    /// A set of lanes.
    type Mask: Copy;
    /// The lanes of vector v (rows `LANES v..`) that hold rows `from` and below.
    unsafe fn rows_from(v: usize, from: usize) -> Self::Mask;
    /// Stores the lanes of `mask`, leaving the others as they were.
    unsafe fn store_where(p: *mut f32, mask: Self::Mask, x: Self);
    unsafe fn abs(x: Self) -> Self;
    /// Per lane, x where the lane is in `mask` and x > best (which NaN never is), else best.
    unsafe fn larger(mask: Self::Mask, x: Self, best: Self) -> Self;
    /// The largest lane (no lane NaN).
    unsafe fn max_lane(x: Self) -> f32;
    /// The lanes of `mask` where x == y, one bit each from the lowest.
    unsafe fn equal_lanes(mask: Self::Mask, x: Self, y: Self) -> u32;
    /// Lanes 4 q..4 q + 4.
    unsafe fn quarter(x: Self, q: usize) -> __m128;
}

impl Pivoting for __m512 {
    type Mask = __mmask16;
    #[inline(always)]
    unsafe fn rows_from(v: usize, from: usize) -> __mmask16 {
        if 16 * v >= from {
            0xffff
        } else if 16 * v + 16 <= from {
            0
        } else {
            0xffff << (from - 16 * v)
        }
    }
    #[inline(always)]
    unsafe fn store_where(p: *mut f32, mask: __mmask16, x: Self) {
        // SAFETY: the trait's conditions.
        unsafe { _mm512_mask_storeu_ps(p, mask, x) }
    }
    #[inline(always)]
    unsafe fn abs(x: Self) -> Self {
        // SAFETY: the trait's conditions.
        unsafe { _mm512_abs_ps(x) }
    }
    #[inline(always)]
    unsafe fn larger(mask: __mmask16, x: Self, best: Self) -> Self {
        // SAFETY: the trait's conditions.
        unsafe {
            let larger = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(mask, x, best);
            _mm512_mask_blend_ps(larger, best, x)
        }
    }
    #[inline(always)]
    unsafe fn max_lane(x: Self) -> f32 {
        // SAFETY: the trait's conditions.
        unsafe { _mm512_reduce_max_ps(x) }
    }
    #[inline(always)]
    unsafe fn equal_lanes(mask: __mmask16, x: Self, y: Self) -> u32 {
        // SAFETY: the trait's conditions.
        unsafe { _mm512_mask_cmp_ps_mask::<_CMP_EQ_OQ>(mask, x, y) as u32 }
    }
    #[inline(always)]
    unsafe fn quarter(x: Self, q: usize) -> __m128 {
        // SAFETY: the trait's conditions.
        unsafe {
            match q {
                0 => _mm512_extractf32x4_ps::<0>(x),
                1 => _mm512_extractf32x4_ps::<1>(x),
                2 => _mm512_extractf32x4_ps::<2>(x),
                _ => _mm512_extractf32x4_ps::<3>(x),
            }
        }
    }
}

/// Columns per pass of [`factor`] over the rows below them.
const GROUP: usize = 4;
// The pass moves four rows' multipliers and column entries at a time through `transpose4`.
const _: () = assert!(GROUP == 4);

/// P A = L U with partial pivoting, as the generic `lu_factor_body` computes it to the bit: the
/// same pivots (the first row of largest magnitude; NaN never wins), multipliers (the entry times
/// 1 / pivot) and entries of U, each entry updated by one fused multiply-add per column of the
/// factorisation, columns in order. The generic body blocks the updates by panels of 8 columns in
/// register tiles; here a group of GROUP columns is factored in contiguous copies (each column
/// brought up to date by the group's earlier steps, so that its pivot can be chosen), then one
/// pass over the rows below applies the group's steps to each row, its vectors loaded and stored
/// once per group, the group's pivot rows in registers. U lands on and above the diagonal
/// of `a` (below it is scratch), the multipliers below the diagonal of `l` (the rest of `l` is
/// left as it was). P is the number of vectors in a row (N / V::LANES).
///
/// # Safety
///
/// V's instruction set enabled.
#[inline(always)]
unsafe fn factor<V: Pivoting, const P: usize>(a: &mut [f32], l: &mut [f32], perm: &mut [usize]) {
    // The passes below are those of at most 4 vectors a row.
    const { assert!(P * V::LANES == N && P <= 4) };
    let (a, l, perm) = (&mut a[..N * N], &mut l[..N * N], &mut perm[..N]);
    for (i, p) in perm.iter_mut().enumerate() {
        *p = i;
    }
    // The group's columns, contiguous, and its multipliers so far.
    let mut columns: [[f32; N]; GROUP] =
        std::array::from_fn(|c| std::array::from_fn(|i| a[i * N + c]));
    let mut multipliers = [[0f32; N]; GROUP];
    for k in (0..N).step_by(GROUP) {
        for j in 0..GROUP {
            let kj = k + j;
            // SAFETY: the caller's conditions; kj < N.
            let p = unsafe { pivot::<V, P>(&columns[j], kj) };
            if p != kj {
                // Whole rows of `a` (left of the diagonal is scratch); of `l`, the multipliers
                // left of the group (the group's own are written by the pass).
                let (top, bottom) = a.split_at_mut(p * N);
                top[kj * N..(kj + 1) * N].swap_with_slice(&mut bottom[..N]);
                let (top, bottom) = l.split_at_mut(p * N);
                top[kj * N..kj * N + k].swap_with_slice(&mut bottom[..k]);
                for c in columns[j..].iter_mut().chain(&mut multipliers[..j]) {
                    c.swap(kj, p);
                }
                perm.swap(kj, p);
            }
            // SAFETY: the caller's conditions; kj < N.
            unsafe { column_step::<V, P>(&mut columns, &mut multipliers, j, kj) };
        }
        // SAFETY: the caller's conditions; `a` and `l` are N x N and k + GROUP <= N.
        unsafe {
            let (a, l) = (a.as_mut_ptr(), l.as_mut_ptr());
            let (columns, multipliers) = (&mut columns, &multipliers);
            // The first vector right of the group, a constant of each pass.
            match (k + GROUP) / V::LANES {
                0 => pass::<V, P, 0>(a, l, columns, multipliers, k),
                1 => pass::<V, P, 1>(a, l, columns, multipliers, k),
                2 => pass::<V, P, 2>(a, l, columns, multipliers, k),
                3 => pass::<V, P, 3>(a, l, columns, multipliers, k),
                _ => pass::<V, P, 4>(a, l, columns, multipliers, k),
            }
        }
    }
}

/// Step kj = k + j inside the group: column j's multipliers below its pivot, and the group's
/// later columns below row kj updated by the step (their entries in row kj are U's and stay).
///
/// # Safety
///
/// V's instruction set enabled; j < GROUP and kj < N.
// Indexed: the loops run over vectors of fixed arrays, several arrays at the same index.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn column_step<V: Pivoting, const P: usize>(
    columns: &mut [[f32; N]; GROUP],
    multipliers: &mut [[f32; N]; GROUP],
    j: usize,
    kj: usize,
) {
    let lanes = V::LANES;
    // SAFETY: the caller's conditions; each vector lies inside its array.
    unsafe {
        let inv = V::splat(1.0 / columns[j][kj]);
        for v in (kj + 1) / lanes..P {
            let rows = V::rows_from(v, kj + 1);
            let m = V::mul(V::load(columns[j].as_ptr().add(lanes * v)), inv);
            V::store_where(multipliers[j].as_mut_ptr().add(lanes * v), rows, m);
            for c in j + 1..GROUP {
                let u = V::splat(columns[c][kj]);
                let to = columns[c].as_mut_ptr().add(lanes * v);
                // -(m u) + x: fma(-m, u, x) to the bit (the signs of zeros included).
                let x = V::fnmadd(m, u, V::load(to));
                V::store_where(to, rows, x);
            }
        }
    }
}

/// The pass of the group of steps k..k + GROUP over the rows below them: the group's pivot rows
/// finished right of the group (row k + r by steps k..k + r, in order) and their entries inside
/// the group from the columns, the group's multipliers into `l`, and each row below updated by
/// the group's steps in order from vector F = (k + GROUP) / V::LANES on (the columns left of
/// k + GROUP in that vector are scratch below the diagonal, so they need no mask; in the pivot
/// rows they are U's entries inside the group, which the vectors overwrite and the copies then
/// restore); the rows' entries in the next group's columns go into `columns`.
///
/// # Safety
///
/// V's instruction set enabled; `a` and `l` point to N x N matrices; k + GROUP <= N;
/// F = (k + GROUP) / V::LANES.
// Indexed: the loops run over vectors of fixed arrays, several arrays at the same index.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn pass<V: Pivoting, const P: usize, const F: usize>(
    a: *mut f32,
    l: *mut f32,
    columns: &mut [[f32; N]; GROUP],
    multipliers: &[[f32; N]; GROUP],
    k: usize,
) {
    let lanes = V::LANES;
    // SAFETY: the caller's conditions; rows below N, columns below N.
    unsafe {
        let mut u = [[V::zero(); P]; GROUP];
        for r in 0..GROUP {
            let row = a.add((k + r) * N);
            for v in F..P {
                u[r][v] = V::load(row.add(lanes * v));
            }
            for s in 0..r {
                let m = multipliers[s][k + r];
                *l.add((k + r) * N + k + s) = m;
                // Negated before the broadcast, fma(-m, u, x), as the generic body writes it.
                let m = V::splat(-m);
                let prev = u[s];
                for v in F..P {
                    u[r][v] = V::fmadd(m, prev[v], u[r][v]);
                }
            }
            for v in F..P {
                V::store(row.add(lanes * v), u[r][v]);
            }
            for (c, column) in columns.iter().enumerate().skip(r) {
                *row.add(k + c) = column[k + r];
            }
        }
        let next = k + GROUP;
        // Four rows at a time (next and N are multiples of 4), so that their multipliers go
        // into `l`, and their entries in the next group's columns into `columns`, as four
        // 4-wide stores each (a 4 x 4 transpose) instead of sixteen scalar ones: scalar stores
        // were the pass's bottleneck. The next group's columns are taken from the registers
        // just computed (one 4-lane piece of vector next / V::LANES), not reloaded from the row.
        for i0 in (next..N).step_by(4) {
            let mut taken = [_mm_setzero_ps(); 4];
            for (t, taken) in taken.iter_mut().enumerate() {
                let i = i0 + t;
                let row = a.add(i * N);
                let mut x: [V; P] = std::array::from_fn(|v| {
                    if v >= F {
                        V::load(row.add(lanes * v))
                    } else {
                        V::zero()
                    }
                });
                for (column, pivot_row) in multipliers.iter().zip(&u) {
                    // -(m u) + x, as fma(-m, u, x) in the generic body, to the bit.
                    let m = V::splat(column[i]);
                    for v in F..P {
                        x[v] = V::fnmadd(m, pivot_row[v], x[v]);
                    }
                }
                for v in F..P {
                    V::store(row.add(lanes * v), x[v]);
                }
                if next < N {
                    *taken = V::quarter(x[next / lanes], (next % lanes) / 4);
                }
            }
            let lf = transpose4(std::array::from_fn(|s| {
                _mm_loadu_ps(multipliers[s].as_ptr().add(i0))
            }));
            for (t, m) in lf.into_iter().enumerate() {
                _mm_storeu_ps(l.add((i0 + t) * N + k), m);
            }
            if next < N {
                for (column, c) in columns.iter_mut().zip(transpose4(taken)) {
                    _mm_storeu_ps(column.as_mut_ptr().add(i0), c);
                }
            }
        }
    }
}

/// The 4 x 4 transpose of four 4-lane rows.
#[inline(always)]
fn transpose4(r: [__m128; 4]) -> [__m128; 4] {
    // SAFETY: SSE, which x86_64 always has.
    unsafe {
        let (t0, t1) = (_mm_unpacklo_ps(r[0], r[1]), _mm_unpackhi_ps(r[0], r[1]));
        let (t2, t3) = (_mm_unpacklo_ps(r[2], r[3]), _mm_unpackhi_ps(r[2], r[3]));
        [
            _mm_movelh_ps(t0, t2),
            _mm_movehl_ps(t2, t0),
            _mm_movelh_ps(t1, t3),
            _mm_movehl_ps(t3, t1),
        ]
    }
}

/// The pivot of a column (its entries in `column`) from the row `from`: the first row of
/// largest magnitude, as a plain scan with `>` finds it (NaN never wins; `from` when every
/// candidate is NaN). Per lane the largest magnitude (a select on `>`, which NaN never passes;
/// -1 in lanes that saw only NaN), the lanes' largest, then the first row of that magnitude.
///
/// # Safety
///
/// V's instruction set enabled; from < N.
#[inline(always)]
unsafe fn pivot<V: Pivoting, const P: usize>(column: &[f32; N], from: usize) -> usize {
    let lanes = V::LANES;
    // SAFETY: the caller's conditions; each vector lies inside `column`.
    unsafe {
        let magnitude = |v: usize| V::abs(V::load(column.as_ptr().add(lanes * v)));
        let mut best = V::splat(-1.0);
        for v in from / lanes..P {
            best = V::larger(V::rows_from(v, from), magnitude(v), best);
        }
        let top = V::max_lane(best);
        if top < 0.0 {
            return from;
        }
        let top = V::splat(top);
        for v in from / lanes..P {
            let equal = V::equal_lanes(V::rows_from(v, from), magnitude(v), top);
            if equal != 0 {
                return lanes * v + equal.trailing_zeros() as usize;
            }
        }
    }
    unreachable!("the largest magnitude lies in the column")
}
