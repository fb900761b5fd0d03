//! The kernels of 64 x 64 matrices on AVX-512 (the exponential's usual size, and that of
//! ManifoldCLR's blocks), written with the instruction set's intrinsics: the product, the LU
//! factorisation and the two solves with its factors. Each does the multiply-adds of the generic
//! body it stands in for ([`super::matmul_body`], [`super::lu_factor_body`],
//! [`super::lu_solve_body`], [`super::lu_solve_transposed_body`]) in the same order, one fused
//! multiply-add per term, so the results are the same to the bit (the tests hold them to it; a
//! NaN's sign and payload aside, which depend on the instruction forms the compiler picks).
//!
//! Why intrinsics: at a run-time n the generic loops carried a dozen integer instructions per
//! step beside their multiply-adds, and getting n = 64 folded into them depended on the
//! compiler's inlining, which came and went with unrelated edits elsewhere in the crate (one build
//! ran the product at half the speed of another from the same source). Here every row is a fixed
//! offset from one pointer and the loops are what the source says. The factorisation also
//! organises its work differently from the generic body (groups of 4 columns, one pass over the
//! rows below per group, instead of panels of 8 and register tiles), which the bits allow since
//! each entry's sequence of operations is the same.

use std::arch::x86_64::*;

const N: usize = 64;

/// C (+)= A B: 8 x 32 register tiles, each entry summed over k in order.
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn matmul(a: &[f32], b: &[f32], c: &mut [f32], accumulate: bool) {
    // SAFETY: the caller's conditions; no lines to fetch.
    unsafe { matmul_ahead(a, b, c, accumulate, super::Ahead::default()) }
}

/// [`matmul`], bringing the lines of `ahead` into the cache a few at a time, spread over the
/// product's 16 tiles.
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn matmul_ahead(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    accumulate: bool,
    mut ahead: super::Ahead,
) {
    const R: usize = 8;
    let (a, b, c) = (&a[..N * N], &b[..N * N], &mut c[..N * N]);
    let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // A sixteenth at the start of each tile (11 lines in the forward at ||A||_1 ~ 1.6, whose
    // Padé-5 scheme has three products to share the 512 lines of the next matrix and output
    // part). Spread finer, a few lines every 8 steps of k, measured slower; the whole share in
    // one burst before one of the scheme's steps, slower still (`docs/expm.md`).
    let share = ahead.lines().div_ceil((N / R) * (N / 32));
    for j0 in (0..N).step_by(32) {
        for i0 in (0..N).step_by(R) {
            if share > 0 {
                ahead.fetch(share);
            }
            // SAFETY: i0 + r < N, j0 + 32 <= N and k < N, so every offset below lies inside the
            // N x N matrices whose lengths the slicing above checked; unaligned loads and stores.
            unsafe {
                let mut acc = [_mm512_setzero_ps(); 2 * R];
                if accumulate {
                    for r in 0..R {
                        let row = c.add((i0 + r) * N + j0);
                        acc[2 * r] = _mm512_loadu_ps(row);
                        acc[2 * r + 1] = _mm512_loadu_ps(row.add(16));
                    }
                }
                let rows = a.add(i0 * N);
                for k in 0..N {
                    let strip = b.add(k * N + j0);
                    let (b0, b1) = (_mm512_loadu_ps(strip), _mm512_loadu_ps(strip.add(16)));
                    for r in 0..R {
                        let x = _mm512_set1_ps(*rows.add(r * N + k));
                        acc[2 * r] = _mm512_fmadd_ps(x, b0, acc[2 * r]);
                        acc[2 * r + 1] = _mm512_fmadd_ps(x, b1, acc[2 * r + 1]);
                    }
                }
                for r in 0..R {
                    let row = c.add((i0 + r) * N + j0);
                    _mm512_storeu_ps(row, acc[2 * r]);
                    _mm512_storeu_ps(row.add(16), acc[2 * r + 1]);
                }
            }
        }
    }
}

/// A whole row of 64 entries in four registers.
type Row = [__m512; 4];

/// One block of R rows of a triangular solve, whole rows in registers (R = 6 takes 24 of the 32
/// registers, the row streaming past 4 more): the block's right-hand sides, minus the solved rows'
/// terms one row at a time, then the triangle inside the block, as the generic `triangle` solves
/// it. Every entry is summed in the generic tiles' order; only the strip is wider (a whole row
/// rather than 32 columns), which changes no sum.
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
    /// be `x`, and `init` may point into the rows written: every load comes before the stores).
    /// With `ASCENDING` the rows go in ascending order (a lower triangle), otherwise descending
    /// (upper); with `UNIT` the diagonal is ones (L), otherwise each row is scaled by
    /// 1 / `tri(r, r)` (U). Both are constants so that the triangle's loops unroll and the
    /// block's rows stay in registers: with them read at run time, the descending triangle kept
    /// the rows on the stack, each multiply-add a load, an FMA and a store in a chain.
    ///
    /// # Safety
    ///
    /// AVX-512F; `init` and the rows of `x` and `out` named by the block hold 64 readable (and,
    /// for `out`, writable) f32 each; i0 + R and `solved.1` are at most N; `coef` and `tri` read
    /// in bounds for r < R, c < R and k in `solved`.
    #[inline(always)]
    unsafe fn solve<const R: usize, const ASCENDING: bool, const UNIT: bool>(
        &self,
        x: *const f32,
        out: *mut f32,
    ) {
        // SAFETY: the caller's conditions; every offset is a row index below N times N plus a
        // column below N.
        unsafe {
            let mut acc: [Row; R] = std::array::from_fn(|r| load((self.init)(r)));
            for k in self.solved.0..self.solved.1 {
                let strip = load(x.add(k * N));
                for (r, row) in acc.iter_mut().enumerate() {
                    let c = _mm512_set1_ps((self.coef)(r, k));
                    for v in 0..4 {
                        // -(c x) + acc rounds once, as fma(-c, x, acc) does.
                        row[v] = _mm512_fnmadd_ps(c, strip[v], row[v]);
                    }
                }
            }
            for step in 0..R {
                let r = if ASCENDING { step } else { R - 1 - step };
                // Over all of 0..R with the test inside, not over the run-time range of the
                // rows already solved, so that the loop has constant bounds to unroll; the
                // rows still enter in ascending order.
                for c in 0..R {
                    let earlier = if ASCENDING { c < r } else { c > r };
                    if earlier {
                        let (m, prev) = (_mm512_set1_ps((self.tri)(r, c)), acc[c]);
                        for v in 0..4 {
                            acc[r][v] = _mm512_fnmadd_ps(m, prev[v], acc[r][v]);
                        }
                    }
                }
                if !UNIT {
                    // Times 1 / u_rr even where that is 1, which leaves every value as it was.
                    let s = _mm512_set1_ps(1.0 / (self.tri)(r, r));
                    for v in acc[r].iter_mut() {
                        *v = _mm512_mul_ps(*v, s);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                let to = out.add((self.i0 + r) * N);
                for (v, &x) in row.iter().enumerate() {
                    _mm512_storeu_ps(to.add(16 * v), x);
                }
            }
        }
    }
}

/// # Safety
///
/// AVX-512F; 64 readable f32 from `p`.
#[inline(always)]
unsafe fn load(p: *const f32) -> Row {
    // SAFETY: the caller's conditions.
    unsafe { std::array::from_fn(|v| _mm512_loadu_ps(p.add(16 * v))) }
}

/// Rows per block of the solves: those of the AVX-512 instantiation's generic bodies (its row
/// count in `instantiate!`), whose partition fixes the order of the back substitution's sums.
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
unsafe fn solve_rows<I, C, T, const ASCENDING: bool, const UNIT: bool>(
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
            ROWS => block.solve::<ROWS, ASCENDING, UNIT>(x, out),
            4 => block.solve::<4, ASCENDING, UNIT>(x, out),
            _ => unreachable!("the blocks of 64 rows are of {ROWS} and 4"),
        }
    }
}

/// A X = B with the factors of `lu_factor` (P A = L U): L Y = P B into `tmp` from the top, then
/// U X = Y into `b` from the bottom.
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn lu_solve(
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
    // SAFETY: AVX-512F is enabled; every row index below is < N and the matrices are N x N.
    unsafe {
        for (i0, rows) in blocks() {
            let lower = Block {
                i0,
                init: |r| sources[i0 + r],
                solved: (0, i0),
                coef: |r, k| *l.add((i0 + r) * N + k),
                tri: |r, c| *l.add((i0 + r) * N + i0 + c),
            };
            solve_rows::<_, _, _, true, true>(&lower, rows, tmp, tmp);
        }
        for (i0, rows) in blocks().rev() {
            let upper = Block {
                i0,
                init: |r| tmp.add((i0 + r) * N) as *const f32,
                solved: (i0 + rows, N),
                coef: |r, k| *u.add((i0 + r) * N + k),
                tri: |r, c| *u.add((i0 + r) * N + i0 + c),
            };
            solve_rows::<_, _, _, false, false>(&upper, rows, b, b);
        }
    }
}

/// A^T X = B with the same factors (A^T = U^T L^T P): U^T W = B into `tmp` from the top, L^T Z =
/// W in place from the bottom, then X = P^T Z into `b`.
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn lu_solve_transposed(
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
        // SAFETY: AVX-512F is enabled; every row index below is < N and the matrices are N x N.
        unsafe {
            for (i0, rows) in blocks() {
                let upper = Block {
                    i0,
                    init: |r| source.add((i0 + r) * N),
                    solved: (0, i0),
                    coef: |r, k| *u.add(k * N + i0 + r),
                    tri: |r, c| *u.add((i0 + c) * N + i0 + r),
                };
                solve_rows::<_, _, _, true, false>(&upper, rows, tmp, tmp);
            }
            for (i0, rows) in blocks().rev() {
                let lower = Block {
                    i0,
                    init: |r| tmp.add((i0 + r) * N) as *const f32,
                    solved: (i0 + rows, N),
                    coef: |r, k| *l.add(k * N + i0 + r),
                    tri: |r, c| *l.add((i0 + c) * N + i0 + r),
                };
                solve_rows::<_, _, _, false, true>(&lower, rows, tmp, tmp);
            }
        }
    }
    for (i, &p) in perm.iter().enumerate() {
        b[p * N..p * N + N].copy_from_slice(&tmp[i * N..i * N + N]);
    }
}

/// Columns per pass of [`lu_factor`] over the rows below them.
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
/// once per group, the group's pivot rows in registers. U lands on and above the diagonal of `a`
/// (below it is scratch), the multipliers below the diagonal of `l` (the rest of `l` is left as
/// it was).
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn lu_factor(a: &mut [f32], l: &mut [f32], perm: &mut [usize]) {
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
            // SAFETY: AVX-512F is enabled and kj < N.
            let p = unsafe { pivot(&columns[j], kj) };
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
            // SAFETY: AVX-512F is enabled; kj < N.
            unsafe { column_step(&mut columns, &mut multipliers, j, kj) };
        }
        // SAFETY: AVX-512F is enabled; `a` and `l` are N x N and k + GROUP <= N.
        unsafe {
            let (a, l) = (a.as_mut_ptr(), l.as_mut_ptr());
            match (k + GROUP) / 16 {
                0 => pass::<0>(a, l, &mut columns, &multipliers, k),
                1 => pass::<1>(a, l, &mut columns, &multipliers, k),
                2 => pass::<2>(a, l, &mut columns, &multipliers, k),
                3 => pass::<3>(a, l, &mut columns, &multipliers, k),
                _ => pass::<4>(a, l, &mut columns, &multipliers, k),
            }
        }
    }
}

/// The lanes of vector v that hold rows `from` and below.
#[inline(always)]
fn rows_from(v: usize, from: usize) -> __mmask16 {
    if 16 * v >= from {
        0xffff
    } else if 16 * v + 16 <= from {
        0
    } else {
        0xffff << (from - 16 * v)
    }
}

/// Step kj = k + j inside the group: column j's multipliers below its pivot, and the group's
/// later columns below row kj updated by the step (their entries in row kj are U's and stay).
///
/// # Safety
///
/// AVX-512F; j < GROUP and kj < N.
// Indexed: the loops run over vectors of fixed arrays, several arrays at the same index.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn column_step(
    columns: &mut [[f32; N]; GROUP],
    multipliers: &mut [[f32; N]; GROUP],
    j: usize,
    kj: usize,
) {
    // SAFETY: the caller's conditions; each vector lies inside its array.
    unsafe {
        let inv = _mm512_set1_ps(1.0 / columns[j][kj]);
        for v in (kj + 1) / 16..4 {
            let rows = rows_from(v, kj + 1);
            let m = _mm512_mul_ps(_mm512_loadu_ps(columns[j].as_ptr().add(16 * v)), inv);
            _mm512_mask_storeu_ps(multipliers[j].as_mut_ptr().add(16 * v), rows, m);
            for c in j + 1..GROUP {
                let u = _mm512_set1_ps(columns[c][kj]);
                let to = columns[c].as_mut_ptr().add(16 * v);
                // -(m u) + x: fma(-m, u, x) to the bit (the signs of zeros included).
                let x = _mm512_fnmadd_ps(m, u, _mm512_loadu_ps(to));
                _mm512_mask_storeu_ps(to, rows, x);
            }
        }
    }
}

/// The pass of the group of steps k..k + GROUP over the rows below them: the group's pivot rows
/// finished right of the group (row k + r by steps k..k + r, in order) and their entries inside
/// the group from the columns, the group's multipliers into `l`, and each row below updated by
/// the group's steps in order from vector V = (k + GROUP) / 16 on (the columns left of
/// k + GROUP in that vector are scratch below the diagonal, so they need no mask; in the pivot
/// rows they are U's entries inside the group, which the vectors overwrite and the copies then
/// restore); the rows' entries in the next group's columns go into `columns`.
///
/// # Safety
///
/// AVX-512F; `a` and `l` point to N x N matrices; k + GROUP <= N; V = (k + GROUP) / 16.
// Indexed: the loops run over vectors of fixed arrays, several arrays at the same index.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn pass<const V: usize>(
    a: *mut f32,
    l: *mut f32,
    columns: &mut [[f32; N]; GROUP],
    multipliers: &[[f32; N]; GROUP],
    k: usize,
) {
    // SAFETY: the caller's conditions; rows below N, columns below N.
    unsafe {
        let mut u = [[_mm512_setzero_ps(); 4]; GROUP];
        for r in 0..GROUP {
            let row = a.add((k + r) * N);
            for v in V..4 {
                u[r][v] = _mm512_loadu_ps(row.add(16 * v));
            }
            for s in 0..r {
                let m = multipliers[s][k + r];
                *l.add((k + r) * N + k + s) = m;
                // Negated before the broadcast, fma(-m, u, x), as the generic body writes it.
                let m = _mm512_set1_ps(-m);
                let prev = u[s];
                for v in V..4 {
                    u[r][v] = _mm512_fmadd_ps(m, prev[v], u[r][v]);
                }
            }
            for v in V..4 {
                _mm512_storeu_ps(row.add(16 * v), u[r][v]);
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
        // just computed (one 4-lane piece of vector next / 16), not reloaded from the row.
        let piece = _mm512_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        let piece = _mm512_add_epi32(piece, _mm512_set1_epi32((next % 16) as i32));
        for i0 in (next..N).step_by(4) {
            let mut taken = [_mm_setzero_ps(); 4];
            for (t, taken) in taken.iter_mut().enumerate() {
                let i = i0 + t;
                let row = a.add(i * N);
                let mut x: [__m512; 4] = std::array::from_fn(|v| {
                    if v >= V {
                        _mm512_loadu_ps(row.add(16 * v))
                    } else {
                        _mm512_setzero_ps()
                    }
                });
                for (column, pivot_row) in multipliers.iter().zip(&u) {
                    // -(m u) + x, as fma(-m, u, x) in the generic body, to the bit.
                    let m = _mm512_set1_ps(column[i]);
                    for v in V..4 {
                        x[v] = _mm512_fnmadd_ps(m, pivot_row[v], x[v]);
                    }
                }
                for v in V..4 {
                    _mm512_storeu_ps(row.add(16 * v), x[v]);
                }
                if next < N {
                    *taken = _mm512_castps512_ps128(_mm512_permutexvar_ps(piece, x[next / 16]));
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

/// The pivot of a column (its entries in `column`) from the row `from`: the first row of largest magnitude, as a plain scan
/// with `>` finds it (NaN never wins; `from` when every candidate is NaN). Per lane the largest
/// magnitude (a select on `>`, which NaN never passes; -1 in lanes that saw only NaN), the lanes'
/// largest, then the first row of that magnitude.
///
/// # Safety
///
/// AVX-512F; from < N.
#[inline(always)]
unsafe fn pivot(column: &[f32; N], from: usize) -> usize {
    let valid = |v: usize| rows_from(v, from);
    // SAFETY: the caller's conditions; each vector lies inside `column`.
    unsafe {
        let magnitude = |v: usize| _mm512_abs_ps(_mm512_loadu_ps(column.as_ptr().add(16 * v)));
        let mut best = _mm512_set1_ps(-1.0);
        for v in from / 16..4 {
            let x = magnitude(v);
            let larger = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(valid(v), x, best);
            best = _mm512_mask_blend_ps(larger, best, x);
        }
        let top = _mm512_reduce_max_ps(best);
        if top < 0.0 {
            return from;
        }
        let top = _mm512_set1_ps(top);
        for v in from / 16..4 {
            let equal = _mm512_mask_cmp_ps_mask::<_CMP_EQ_OQ>(valid(v), magnitude(v), top);
            if equal != 0 {
                return 16 * v + equal.trailing_zeros() as usize;
            }
        }
    }
    unreachable!("the largest magnitude lies in the column")
}
