//! Small dense f32 kernels on row-major n x n matrices held in cache: products (A B, x^T M,
//! P^T Q), matrix-vector product, axpy and linear combinations, LU with partial pivoting and its
//! solve, transpose. The bodies are plain loops over fixed-width chunks that the compiler
//! vectorises; they are compiled three times (AVX-512, AVX2 + FMA, portable) and the widest the
//! CPU has is chosen once at run time, so one binary runs everywhere and uses AVX-512 where it
//! exists. At n = 64 on AVX-512 the product, the LU factorisation and its solves are written
//! with intrinsics instead (`n64`; on AVX2 the product and the solves): the generic bodies'
//! speed there depended on how the compiler happened to fold their constants.
//!
//! The `try_into().unwrap()` calls turn a slice of a fixed-width strip into an array of that
//! width; the loop bounds give every such slice exactly W (or R, PANEL) entries, so they never
//! fail (and compile to nothing once the bounds are known). The callers check the matrices'
//! sizes.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
mod n64;

/// a * b + c, fused where the instruction set has FMA (the fused form is also more accurate).
trait Fma {
    fn fma(a: f32, b: f32, c: f32) -> f32;
}
struct Fused;
struct Unfused;
impl Fma for Fused {
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}
impl Fma for Unfused {
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// One R x W tile of C (+)= A B: R rows of C, W columns, accumulated over k in registers while
/// a W-wide strip of each row of B streams from L1. R * W is sized per instruction set so that the
/// accumulators, one strip of B and a broadcast fit the register file.
#[inline(always)]
fn tile<F: Fma, const R: usize, const W: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    n: usize,
    (i0, j0): (usize, usize),
    accumulate: bool,
) {
    let mut acc = [[0f32; W]; R];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&c[(i0 + r) * n + j0..(i0 + r) * n + j0 + W]);
        }
    }
    // Rows of A as slices of length n, so that indexing by k < n needs no bounds check.
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[(i0 + r) * n..(i0 + r) * n + n]);
    for (k, strip) in b.chunks_exact(n).take(n).enumerate() {
        let strip: &[f32; W] = strip[j0..j0 + W].try_into().unwrap();
        for (row, a_row) in acc.iter_mut().zip(&rows) {
            let x = a_row[k];
            for j in 0..W {
                row[j] = F::fma(x, strip[j], row[j]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        c[(i0 + r) * n + j0..(i0 + r) * n + j0 + W].copy_from_slice(row);
    }
}

/// A product whose output is covered by register tiles: the tile at (i0, j0) and the single
/// entry that the tiles leave over.
trait Tiles {
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize));
    fn entry(&mut self, i: usize, j: usize);
}

/// Covers `rows` x n of the output: R x W tiles, the rows left over in 4-, 2- and 1-row tiles
/// (one row at a time would load a strip per two multiply-adds), then 8-wide strips and single
/// columns at the right edge.
#[inline(always)]
fn cover<T: Tiles, const R: usize, const W: usize>(t: &mut T, rows: usize, n: usize) {
    let mut j0 = 0;
    while j0 + W <= n {
        let mut i0 = 0;
        while i0 + R <= rows {
            t.tile::<R, W>((i0, j0));
            i0 += R;
        }
        if R > 4 && i0 + 4 <= rows {
            t.tile::<4, W>((i0, j0));
            i0 += 4;
        }
        if R > 2 && i0 + 2 <= rows {
            t.tile::<2, W>((i0, j0));
            i0 += 2;
        }
        while i0 < rows {
            t.tile::<1, W>((i0, j0));
            i0 += 1;
        }
        j0 += W;
    }
    // One-row strips narrower than W where W does not fit (a vector-matrix product's W is
    // wider than the product's). Each entry's sum runs over k in order whatever the strip's
    // width, so the widths change the speed only: a strip of v vectors keeps v chains of
    // multiply-adds in flight.
    while W > 64 && j0 + 64 <= n {
        for i0 in 0..rows {
            t.tile::<1, 64>((i0, j0));
        }
        j0 += 64;
    }
    while W > 32 && j0 + 32 <= n {
        for i0 in 0..rows {
            t.tile::<1, 32>((i0, j0));
        }
        j0 += 32;
    }
    while W > 16 && j0 + 16 <= n {
        for i0 in 0..rows {
            t.tile::<1, 16>((i0, j0));
        }
        j0 += 16;
    }
    while j0 + 8 <= n {
        for i0 in 0..rows {
            t.tile::<1, 8>((i0, j0));
        }
        j0 += 8;
    }
    for j in j0..n {
        for i in 0..rows {
            t.entry(i, j);
        }
    }
}

/// C (+)= A B, row-major with rows of length n (A and C may hold fewer rows than n).
struct Product<'a, F> {
    a: &'a [f32],
    b: &'a [f32],
    c: &'a mut [f32],
    n: usize,
    accumulate: bool,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> Tiles for Product<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        tile::<F, R, W>(self.a, self.b, self.c, self.n, at, self.accumulate);
    }

    #[inline(always)]
    fn entry(&mut self, i: usize, j: usize) {
        let n = self.n;
        let mut s = if self.accumulate {
            self.c[i * n + j]
        } else {
            0.0
        };
        for k in 0..n {
            s = F::fma(self.a[i * n + k], self.b[k * n + j], s);
        }
        self.c[i * n + j] = s;
    }
}

/// C (+)= A B for row-major n x n matrices, in R x W register tiles.
#[inline(always)]
fn matmul_body<F: Fma, const R: usize, const W: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    n: usize,
    accumulate: bool,
) {
    let fma = std::marker::PhantomData::<F>;
    cover::<_, R, W>(
        &mut Product {
            a,
            b,
            c,
            n,
            accumulate,
            fma,
        },
        n,
        n,
    );
}

/// y (+)= x^T M for a row-major n x n M: the product as one row of C = A B, so y stays in
/// registers in W-wide strips while the rows of M stream past (no horizontal sums, unlike a
/// row-by-row dot product).
#[inline(always)]
fn vecmat_body<F: Fma, const W: usize>(
    x: &[f32],
    m: &[f32],
    y: &mut [f32],
    n: usize,
    accumulate: bool,
) {
    let fma = std::marker::PhantomData::<F>;
    let mut one_row = Product {
        a: x,
        b: m,
        c: y,
        n,
        accumulate,
        fma,
    };
    cover::<_, 1, W>(&mut one_row, 1, n);
}

/// One product y (+)= x^T M of [`vecmat_pair`], M row-major n x n.
pub struct VecMat<'a> {
    /// The vector x, of at least n entries.
    pub x: &'a [f32],
    /// The matrix M, row-major n x n.
    pub m: &'a [f32],
    /// The output y, of at least n entries.
    pub y: &'a mut [f32],
    /// Add to what y holds instead of overwriting it.
    pub accumulate: bool,
}

/// Two independent vector-matrix products in one pass over k: each strip of y is a chain of n
/// dependent multiply-adds, so a single product waits on the multiply-add's latency; the
/// second product's chains fill the gaps. Each entry is summed as [`vecmat`] sums it.
struct Pair<'a, F> {
    p: Product<'a, F>,
    q: Product<'a, F>,
}

impl<F: Fma> Tiles for Pair<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, (_, j0): (usize, usize)) {
        // One row: `vecmat_pair_body` covers a 1 x n output.
        debug_assert_eq!(R, 1);
        let n = self.p.n;
        let start = |t: &Product<'_, F>| -> [f32; W] {
            if t.accumulate {
                t.c[j0..j0 + W].try_into().unwrap()
            } else {
                [0.0; W]
            }
        };
        let (mut s, mut t) = (start(&self.p), start(&self.q));
        let (x, y) = (&self.p.a[..n], &self.q.a[..n]);
        let strips = self.p.b.chunks_exact(n).zip(self.q.b.chunks_exact(n));
        for (k, (bp, bq)) in strips.take(n).enumerate() {
            let bp: &[f32; W] = bp[j0..j0 + W].try_into().unwrap();
            let bq: &[f32; W] = bq[j0..j0 + W].try_into().unwrap();
            let (xk, yk) = (x[k], y[k]);
            for j in 0..W {
                s[j] = F::fma(xk, bp[j], s[j]);
                t[j] = F::fma(yk, bq[j], t[j]);
            }
        }
        self.p.c[j0..j0 + W].copy_from_slice(&s);
        self.q.c[j0..j0 + W].copy_from_slice(&t);
    }

    #[inline(always)]
    fn entry(&mut self, i: usize, j: usize) {
        self.p.entry(i, j);
        self.q.entry(i, j);
    }
}

impl<'a> VecMat<'a> {
    #[inline(always)]
    fn product<F>(self, n: usize) -> Product<'a, F> {
        Product {
            a: self.x,
            b: self.m,
            c: self.y,
            n,
            accumulate: self.accumulate,
            fma: std::marker::PhantomData,
        }
    }
}

#[inline(always)]
fn vecmat_pair_body<F: Fma, const W: usize>(first: VecMat<'_>, second: VecMat<'_>, n: usize) {
    let mut pair = Pair::<'_, F> {
        p: first.product(n),
        q: second.product(n),
    };
    cover::<_, 1, W>(&mut pair, 1, n);
}

/// One R x W tile of C += P^T Q for P, Q of `depth` rows of length n (see [`gemm_tn`]).
#[inline(always)]
fn tile_tn<F: Fma, const R: usize, const W: usize>(
    p: &[f32],
    q: &[f32],
    c: &mut [f32],
    n: usize,
    depth: usize,
    (i0, j0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&c[(i0 + r) * n + j0..(i0 + r) * n + j0 + W]);
    }
    for (p_row, q_row) in p.chunks_exact(n).zip(q.chunks_exact(n)).take(depth) {
        let strip: &[f32; W] = q_row[j0..j0 + W].try_into().unwrap();
        let xs: &[f32; R] = p_row[i0..i0 + R].try_into().unwrap();
        for (row, &x) in acc.iter_mut().zip(xs) {
            for j in 0..W {
                row[j] = F::fma(x, strip[j], row[j]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        c[(i0 + r) * n + j0..(i0 + r) * n + j0 + W].copy_from_slice(row);
    }
}

/// C += P^T Q for P, Q of `depth` rows of length n.
struct ProductTn<'a, F> {
    p: &'a [f32],
    q: &'a [f32],
    c: &'a mut [f32],
    n: usize,
    depth: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> Tiles for ProductTn<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        tile_tn::<F, R, W>(self.p, self.q, self.c, self.n, self.depth, at);
    }

    #[inline(always)]
    fn entry(&mut self, i: usize, j: usize) {
        let n = self.n;
        let mut s = self.c[i * n + j];
        for k in 0..self.depth {
            s = F::fma(self.p[k * n + i], self.q[k * n + j], s);
        }
        self.c[i * n + j] = s;
    }
}

/// C += P^T Q, in the tiles of [`matmul_body`].
#[inline(always)]
fn gemm_tn_body<F: Fma, const R: usize, const W: usize>(
    p: &[f32],
    q: &[f32],
    c: &mut [f32],
    n: usize,
    depth: usize,
) {
    let fma = std::marker::PhantomData::<F>;
    cover::<_, R, W>(
        &mut ProductTn {
            p,
            q,
            c,
            n,
            depth,
            fma,
        },
        n,
        n,
    );
}

/// out (+)= sum_t c_t x_t in one pass, W entries at a time held in registers across the terms
/// (the same multiply-adds in the same order as one axpy per term).
#[inline(always)]
fn lin_comb_body<F: Fma, const W: usize>(
    terms: &[(&[f32], f32)],
    out: &mut [f32],
    accumulate: bool,
) {
    let len = out.len();
    let full = len / W * W;
    for j0 in (0..full).step_by(W) {
        let mut acc = [0f32; W];
        if accumulate {
            acc.copy_from_slice(&out[j0..j0 + W]);
        }
        for &(x, c) in terms {
            let xv: &[f32; W] = x[j0..j0 + W].try_into().unwrap();
            for j in 0..W {
                acc[j] = F::fma(c, xv[j], acc[j]);
            }
        }
        out[j0..j0 + W].copy_from_slice(&acc);
    }
    for j in full..len {
        let mut acc = if accumulate { out[j] } else { 0.0 };
        for &(x, c) in terms {
            acc = F::fma(c, x[j], acc);
        }
        out[j] = acc;
    }
}

/// Padé's last steps without storing V: V = sum_t c_t x_t + eye I (as [`lin_comb_body`] and the
/// identity term after it compute it), then Q = V - U and P = V + U. Every entry in one pass (in
/// W-wide chunks, then one at a time past the last full chunk), without the identity term; then,
/// where that term is not zero, each diagonal entry again with it added, as the separate steps
/// round it.
#[inline(always)]
fn pade_tail_body<F: Fma, const W: usize>(
    terms: &[(&[f32], f32)],
    eye: f32,
    u: &[f32],
    (q, p): (&mut [f32], &mut [f32]),
    n: usize,
) {
    let len = n * n;
    let (u, q, p) = (&u[..len], &mut q[..len], &mut p[..len]);
    let full = len / W * W;
    // The chunks as arrays, Q's and P's formed in local arrays and stored whole: indexing the
    // slices left the last vector of every chunk to a scalar loop (the bounds checks), and
    // writing the output arrays entry by entry compiled to scalar stores; the pass took 5.7 %
    // of the Padé forward at n = 64 before (`docs/expm.md`).
    let chunks = (q.chunks_exact_mut(W).zip(p.chunks_exact_mut(W))).zip(u.chunks_exact(W));
    for (k, ((qc, pc), uc)) in chunks.enumerate() {
        let j0 = k * W;
        let (qc, pc): (&mut [f32; W], &mut [f32; W]) =
            (qc.try_into().unwrap(), pc.try_into().unwrap());
        let uc: &[f32; W] = uc.try_into().unwrap();
        let mut v = [0f32; W];
        for &(x, c) in terms {
            let xv: &[f32; W] = x[j0..j0 + W].try_into().unwrap();
            for j in 0..W {
                v[j] = F::fma(c, xv[j], v[j]);
            }
        }
        let (mut qv, mut pv) = ([0f32; W], [0f32; W]);
        for j in 0..W {
            qv[j] = v[j] - uc[j];
            pv[j] = v[j] + uc[j];
        }
        (*qc, *pc) = (qv, pv);
    }
    let entry = |k: usize| terms.iter().fold(0.0, |v, &(x, c)| F::fma(c, x[k], v));
    for k in full..len {
        let v = entry(k);
        (q[k], p[k]) = (v - u[k], v + u[k]);
    }
    if eye != 0.0 {
        for d in 0..n {
            let k = d * n + d;
            let v = entry(k) + eye;
            (q[k], p[k]) = (v - u[k], v + u[k]);
        }
    }
}

/// The generators of [`GENERATED_ROWS`] problems that share a dictionary block: row g of `out`
/// (n^2 entries) is sum_m c[g M + m] psi[m], the terms in order of m. W entries of every row
/// are held in registers across the terms, so each dictionary entry loaded serves all the rows.
#[inline(always)]
fn generators_body<F: Fma, const W: usize>(c: &[f32], psi: &[&[f32]], out: &mut [f32], nn: usize) {
    const G: usize = GENERATED_ROWS;
    let m = psi.len();
    let full = nn / W * W;
    for j0 in (0..full).step_by(W) {
        let mut acc = [[0f32; W]; G];
        for (t, x) in psi.iter().enumerate() {
            let x: &[f32; W] = x[j0..j0 + W].try_into().unwrap();
            for (g, acc) in acc.iter_mut().enumerate() {
                let coefficient = c[g * m + t];
                for j in 0..W {
                    acc[j] = F::fma(coefficient, x[j], acc[j]);
                }
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            out[g * nn + j0..g * nn + j0 + W].copy_from_slice(acc);
        }
    }
    for j in full..nn {
        for g in 0..G {
            let mut acc = 0.0;
            for (t, x) in psi.iter().enumerate() {
                acc = F::fma(c[g * m + t], x[j], acc);
            }
            out[g * nn + j] = acc;
        }
    }
}

/// y += alpha x.
#[inline(always)]
fn axpy_body<F: Fma>(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y_j, &x_j) in y.iter_mut().zip(x) {
        *y_j = F::fma(alpha, x_j, *y_j);
    }
}

/// y = A x for a row-major n x n A (sixteen partial sums per row keep the adds independent).
#[inline(always)]
fn matvec_body<F: Fma>(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
    for (i, y_i) in y.iter_mut().enumerate().take(n) {
        let row = &a[i * n..i * n + n];
        let mut part = [0f32; 16];
        let chunks = n / 16;
        for c in 0..chunks {
            for l in 0..16 {
                part[l] = F::fma(row[c * 16 + l], x[c * 16 + l], part[l]);
            }
        }
        let mut s: f32 = part.iter().sum();
        for k in chunks * 16..n {
            s = F::fma(row[k], x[k], s);
        }
        *y_i = s;
    }
}

/// Columns per panel of the blocked factorisation.
const PANEL: usize = 8;

/// LU with partial pivoting (see [`lu_factor`]), blocked right-looking: the matrix is factored
/// PANEL columns at a time (full panels of matrices up to COLUMN_ROWS rows in a column-major copy,
/// [`Columns`], unless COLUMNS is false; the others in place, [`factor_panel`]: the same
/// factors either way); then the rows of U right of the panel are solved with the panel's unit
/// lower triangle ([`panel_rows`]), and the trailing matrix is updated once per panel by a
/// product of depth PANEL in the register tiles of [`matmul`] (a rank-1 update per column would
/// load and store the whole trailing matrix once per column).
#[inline(always)]
fn lu_factor_body<F: Fma, const R: usize, const W: usize, const COLUMNS: bool>(
    a: &mut [f32],
    l: &mut [f32],
    perm: &mut [usize],
    n: usize,
) {
    // Exactly n x n: rows past n in a longer slice would join the row panels' pivot search.
    let (a, l) = (&mut a[..n * n], &mut l[..n * n]);
    for (i, p) in perm.iter_mut().enumerate().take(n) {
        *p = i;
    }
    // Built at the first full panel that takes it: filling it costs more than a 3 x 3 LU.
    let mut columns = None;
    let mut k0 = 0;
    while k0 < n {
        let width = PANEL.min(n - k0);
        let end = k0 + width;
        if COLUMNS && width == PANEL && n <= COLUMN_ROWS {
            columns
                .get_or_insert_with(Columns::new)
                .factor::<F>(a, l, perm, n, k0);
        } else {
            factor_panel::<F>(a, l, perm, n, k0, width);
        }
        if end < n {
            // U's rows k0..end right of the panel (only the last panel may be narrower than
            // PANEL, and it has nothing on its right), in registers strip by strip.
            match W {
                32.. => panel_rows::<F, 16>(a, l, n, k0),
                16..32 => panel_rows::<F, 8>(a, l, n, k0),
                _ => panel_rows::<F, 4>(a, l, n, k0),
            }
            let (top, bottom) = a.split_at_mut(end * n);
            let mut trailing = Trailing::<F> {
                l,
                u: top,
                rest: bottom,
                n,
                k0,
                end,
                fma: std::marker::PhantomData,
            };
            for (i0, rows) in row_blocks::<R>(n - end) {
                solve_block::<_, R, W>(&mut trailing, (i0, rows), end, n);
            }
        }
        k0 = end;
    }
}

/// U's rows k0..k0 + PANEL right of a full panel (columns k0 + PANEL..n): forward substitution
/// with the panel's unit lower triangle, the PANEL rows of an S-wide strip held in registers
/// (the same multiply-adds in the same order as one axpy per multiplier, which would load and
/// store every row once per multiplier); strips of S, then 8, then single columns.
#[inline(always)]
fn panel_rows<F: Fma, const S: usize>(a: &mut [f32], l: &[f32], n: usize, k0: usize) {
    #[inline(always)]
    fn strip<F: Fma, const S: usize>(a: &mut [f32], l: &[f32], n: usize, k0: usize, j0: usize) {
        let mut acc = [[0f32; S]; PANEL];
        for (r, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&a[(k0 + r) * n + j0..][..S]);
        }
        let how = Triangle {
            ascending: true,
            transposed: false,
            unit: true,
        };
        triangle::<F, PANEL, S>(&mut acc, &diagonal_block(l, n, k0), how);
        for (r, row) in acc.iter().enumerate().skip(1) {
            a[(k0 + r) * n + j0..][..S].copy_from_slice(row);
        }
    }
    let mut j0 = k0 + PANEL;
    while j0 + S <= n {
        strip::<F, S>(a, l, n, k0, j0);
        j0 += S;
    }
    if S > 8 && j0 + 8 <= n {
        strip::<F, 8>(a, l, n, k0, j0);
        j0 += 8;
    }
    while j0 < n {
        strip::<F, 1>(a, l, n, k0, j0);
        j0 += 1;
    }
}

/// The most rows for which a full panel is factored in a column-major copy ([`Columns`]).
const COLUMN_ROWS: usize = 128;

/// Lanes of the column-major panel's vector loops.
const LANES: usize = 16;

/// A full panel (PANEL columns, rows k0..n) copied column by column, so that the pivot search,
/// the multipliers and the panel's updates each run down a contiguous column LANES rows at a
/// time, where the row-major panel takes one row per step ([`factor_panel`]). Each column is
/// padded with NaN past its last row: vector steps that reach past it change only padding, and
/// NaN never wins the pivot search.
struct Columns {
    cols: [[f32; STRIDE]; PANEL],
}

/// The length of a column of [`Columns`].
const STRIDE: usize = COLUMN_ROWS + LANES;

impl Columns {
    #[inline(always)]
    fn new() -> Self {
        Columns {
            cols: [[f32::NAN; STRIDE]; PANEL],
        }
    }

    /// Factors the full panel k0..k0 + PANEL of an n x n matrix (n <= COLUMN_ROWS) in place,
    /// with the same operations in the same order as [`factor_panel`]: the same pivots (the
    /// first row of largest magnitude), multipliers and updated entries, to the bit.
    #[inline(always)]
    fn factor<F: Fma>(
        &mut self,
        a: &mut [f32],
        l: &mut [f32],
        perm: &mut [usize],
        n: usize,
        k0: usize,
    ) {
        let rows = n - k0;
        let cols = &mut self.cols;
        // In: rows k0..n of the panel's columns, 8 x 8 blocks at a time.
        let mut i = 0;
        while i + 8 <= rows {
            transpose8(
                &a[(k0 + i) * n + k0..],
                n,
                &mut cols.as_flattened_mut()[i..],
                STRIDE,
            );
            i += 8;
        }
        for i in i..rows {
            for (j, col) in cols.iter_mut().enumerate() {
                col[i] = a[(k0 + i) * n + k0 + j];
            }
        }
        for col in cols.iter_mut() {
            col[rows..rows + LANES].fill(f32::NAN);
        }
        // Step by step with the step a constant, so that each step's loop over the columns
        // right of it has a constant length and unrolls (with a run-time length the compiler
        // tested the count before every column of every vector of rows).
        self.step::<F, 0>(a, l, perm, n, k0);
        self.step::<F, 1>(a, l, perm, n, k0);
        self.step::<F, 2>(a, l, perm, n, k0);
        self.step::<F, 3>(a, l, perm, n, k0);
        self.step::<F, 4>(a, l, perm, n, k0);
        self.step::<F, 5>(a, l, perm, n, k0);
        self.step::<F, 6>(a, l, perm, n, k0);
        self.step::<F, 7>(a, l, perm, n, k0);
        const { assert!(PANEL == 8) };
        let cols = &mut self.cols;
        // Out: U's rows of the panel into `a` (the whole 8 x 8 block, one transpose: below its
        // diagonal is scratch), the multipliers into `l` below the diagonal.
        transpose8(cols.as_flattened(), STRIDE, &mut a[k0 * n + k0..], n);
        for r in 1..PANEL {
            for (j, col) in cols.iter().enumerate().take(r) {
                l[(k0 + r) * n + k0 + j] = col[r];
            }
        }
        let mut i = PANEL;
        while i + 8 <= rows {
            transpose8(
                &cols.as_flattened()[i..],
                STRIDE,
                &mut l[(k0 + i) * n + k0..],
                n,
            );
            i += 8;
        }
        for i in i..rows {
            for (j, col) in cols.iter().enumerate() {
                l[(k0 + i) * n + k0 + j] = col[i];
            }
        }
    }

    /// Step C of [`Columns::factor`] (the panel's column k0 + C): the pivot, the row exchange,
    /// the multipliers, and the update of the panel's columns right of C.
    #[inline(always)]
    fn step<F: Fma, const C: usize>(
        &mut self,
        a: &mut [f32],
        l: &mut [f32],
        perm: &mut [usize],
        n: usize,
        k0: usize,
    ) {
        let (c, k, end, rows) = (C, k0 + C, k0 + PANEL, n - k0);
        let cols = &mut self.cols;
        // A pass of its own: searching the next column in the pass that updates it (as the
        // row panel does) measured slower.
        let piv = pivot_row(&cols[c], c, rows);
        if piv != c {
            for col in cols.iter_mut() {
                col.swap(c, piv);
            }
            let p = k0 + piv;
            let (upper, lower) = a.split_at_mut(p * n);
            upper[k * n + end..k * n + n].swap_with_slice(&mut lower[end..n]);
            let (upper, lower) = l.split_at_mut(p * n);
            upper[k * n..k * n + k0].swap_with_slice(&mut lower[..k0]);
            perm.swap(k, p);
        }
        let inv = 1.0 / cols[c][c];
        let pivot: [f32; PANEL] = std::array::from_fn(|j| cols[j][c]);
        let (done, right) = cols.split_at_mut(c + 1);
        let multipliers = &mut done[c];
        let mut i = c + 1;
        while i < rows {
            let m: &mut [f32; LANES] = (&mut multipliers[i..i + LANES]).try_into().unwrap();
            for v in m.iter_mut() {
                *v *= inv;
            }
            for (col, &p) in right.iter_mut().zip(&pivot[c + 1..]) {
                let x: &mut [f32; LANES] = (&mut col[i..i + LANES]).try_into().unwrap();
                for t in 0..LANES {
                    x[t] = F::fma(-m[t], p, x[t]);
                }
            }
            i += LANES;
        }
    }
}

/// The pivot of a column-major panel's column from row `from` (of `rows`; `col` is padded with
/// NaN to `rows` + LANES): the first row of largest magnitude, as a plain scan with `>` finds
/// it (NaN never wins; `from` when every candidate is NaN). One pass keeps each lane's largest
/// magnitude (a select on `>`, which NaN never passes; -1 in lanes that saw only NaN), the lanes
/// are merged, and a second pass finds the first row of that magnitude.
#[inline(always)]
fn pivot_row(col: &[f32], from: usize, rows: usize) -> usize {
    let mut best = [-1.0f32; LANES];
    let mut i = from;
    while i < rows {
        let x: &[f32; LANES] = col[i..i + LANES].try_into().unwrap();
        for t in 0..LANES {
            let v = x[t].abs();
            best[t] = if v > best[t] { v } else { best[t] };
        }
        i += LANES;
    }
    let mut half = LANES / 2;
    while half > 0 {
        for t in 0..half {
            best[t] = if best[t + half] > best[t] {
                best[t + half]
            } else {
                best[t]
            };
        }
        half /= 2;
    }
    let top = best[0];
    if top < 0.0 {
        return from;
    }
    let at = col[from..rows].iter().position(|x| x.abs() == top);
    from + at.expect("the largest magnitude lies in the column")
}

/// Factors the panel's columns k0..k0 + width in place: per column the pivot (the first row of
/// largest magnitude, found while the previous column's update wrote it; NaN never wins, as in
/// a plain `>` scan), the row exchange (of `a` from the panel on, of the multipliers in `l` left
/// of the column), the multipliers, and the rank-1 update of the panel's columns right of the
/// column: one PANEL-wide vector per row, with the pivot row's entries at and left of the column
/// zeroed so they change nothing (what lies below the diagonal of `a` is scratch).
#[inline(always)]
fn factor_panel<F: Fma>(
    a: &mut [f32],
    l: &mut [f32],
    perm: &mut [usize],
    n: usize,
    k0: usize,
    width: usize,
) {
    let end = k0 + width;
    let mut piv = k0;
    let mut best = -1.0f32;
    for i in k0..n {
        let v = a[i * n + k0].abs();
        if v > best {
            best = v;
            piv = i;
        }
    }
    for k in k0..end {
        if piv != k {
            let (upper, lower) = a.split_at_mut(piv * n);
            upper[k * n + k0..k * n + n].swap_with_slice(&mut lower[k0..n]);
            let (upper, lower) = l.split_at_mut(piv * n);
            upper[k * n..k * n + k].swap_with_slice(&mut lower[..k]);
            perm.swap(k, piv);
        }
        let inv = 1.0 / a[k * n + k];
        let (top, rest) = a.split_at_mut((k + 1) * n);
        let next = k + 1 - k0;
        let (mut new_piv, mut new_best) = (k + 1, -1.0f32);
        if width == PANEL {
            let mut pivot = [0f32; PANEL];
            pivot[next..].copy_from_slice(&top[k * n + k + 1..k * n + end]);
            let rows = rest
                .chunks_exact_mut(n)
                .zip(l[(k + 1) * n..].chunks_exact_mut(n));
            // Two copies of the row loop, so that the one run per row does not test whether
            // there is a next column to search.
            if next < PANEL {
                for (r, (row, l_row)) in rows.enumerate() {
                    let seg: &mut [f32; PANEL] = (&mut row[k0..end]).try_into().unwrap();
                    let m = seg[next - 1] * inv;
                    l_row[k] = m;
                    for j in 0..PANEL {
                        seg[j] = F::fma(-m, pivot[j], seg[j]);
                    }
                    let v = seg[next].abs();
                    if v > new_best {
                        new_best = v;
                        new_piv = k + 1 + r;
                    }
                }
            } else {
                // The panel's last column: multipliers only (the update would reach only
                // entries at and left of the column, which are scratch).
                for (row, l_row) in rows {
                    l_row[k] = row[k] * inv;
                }
            }
        } else {
            let pivot = &top[k * n + k + 1..k * n + end];
            for (r, row) in rest.chunks_exact_mut(n).enumerate() {
                let m = row[k] * inv;
                l[(k + 1 + r) * n + k] = m;
                axpy_body::<F>(-m, pivot, &mut row[k + 1..end]);
                if k + 1 < end {
                    let v = row[k + 1].abs();
                    if v > new_best {
                        new_best = v;
                        new_piv = k + 1 + r;
                    }
                }
            }
        }
        piv = new_piv;
    }
}

/// The trailing update A22 -= L21 U12 of the panel k0..end: `u` holds rows ..end of the
/// matrix (U12 in rows k0..end), `rest` the rows from `end` on.
struct Trailing<'a, F> {
    l: &'a [f32],
    u: &'a [f32],
    rest: &'a mut [f32],
    n: usize,
    k0: usize,
    end: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> RowBlocks for Trailing<'_, F> {
    /// Rows end + i0..end + i0 + R, columns j0..j0 + W, accumulated over the panel's columns in
    /// registers.
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, (i0, j0): (usize, usize)) {
        let (n, k0, end) = (self.n, self.k0, self.end);
        let mut acc = [[0f32; W]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&self.rest[(i0 + r) * n + j0..][..W]);
        }
        let coefs: [&[f32]; R] =
            std::array::from_fn(|r| &self.l[(end + i0 + r) * n + k0..][..end - k0]);
        for (c, u_row) in self.u[k0 * n..].chunks_exact(n).take(end - k0).enumerate() {
            let strip: &[f32; W] = u_row[j0..j0 + W].try_into().unwrap();
            for (row, coef) in acc.iter_mut().zip(&coefs) {
                let x = -coef[c];
                for j in 0..W {
                    row[j] = F::fma(x, strip[j], row[j]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            self.rest[(i0 + r) * n + j0..][..W].copy_from_slice(row);
        }
    }
}

/// The diagonal R x R block of a factor at (i0, i0), row by row (references, so that each
/// coefficient is broadcast straight from memory).
#[inline(always)]
fn diagonal_block<const R: usize>(m: &[f32], n: usize, i0: usize) -> [&[f32; R]; R] {
    std::array::from_fn(|r| m[(i0 + r) * n + i0..][..R].try_into().unwrap())
}

/// How [`triangle`] reads its diagonal block of a factor.
#[derive(Clone, Copy)]
struct Triangle {
    /// Rows in ascending order (a lower triangle of the block's matrix) or descending (upper).
    ascending: bool,
    /// The block holds the transpose of the triangle's matrix.
    transposed: bool,
    /// The diagonal is ones (L); otherwise each row is divided by its diagonal entry (U).
    unit: bool,
}

/// The triangle inside a block of R rows held in registers: row by row (ascending or
/// descending), row r <- (row r - sum_c t(r, c) row c) (1 / t(r, r)) over the rows c already
/// done (c < r ascending, c > r descending), c in the order they were done (ascending: 0, 1, ..,
/// r - 1; descending: R - 1, R - 2, .., r + 1), with t the diagonal block (or its transpose).
/// That order puts the one multiply-add that waits on the row just finished last in each row's
/// chain: the others run while that row is still being computed (summed from r + 1 upwards, a
/// descending triangle's row r could start only once row r + 1 was done, and the block's chain
/// grew with the square of R). All indices are constants once R is, so the rows stay in
/// registers (a run-time row index would keep them in memory).
#[inline(always)]
fn triangle<F: Fma, const R: usize, const W: usize>(
    acc: &mut [[f32; W]; R],
    block: &[&[f32; R]; R],
    how: Triangle,
) {
    for step in 0..R {
        let r = if how.ascending { step } else { R - 1 - step };
        for done in 0..step {
            let c = if how.ascending { done } else { R - 1 - done };
            let m = -if how.transposed {
                block[c][r]
            } else {
                block[r][c]
            };
            // Indexed: the two rows are entries of one array in registers.
            #[allow(clippy::needless_range_loop)]
            for j in 0..W {
                acc[r][j] = F::fma(m, acc[c][j], acc[r][j]);
            }
        }
        if !how.unit {
            let s = 1.0 / block[r][r];
            if s != 1.0 {
                for v in acc[r].iter_mut() {
                    *v *= s;
                }
            }
        }
    }
}

/// Forward substitution for rows i0..i0 + R of X, columns j0..j0 + W: x_i = b_i - sum_{k<i}
/// L[i][k] x_k with the rows above the block already solved in `x` and b_i read from row
/// `perm[i]` of `b`. The R x W block is held in registers while the solved strips stream past
/// (a register tile of a product, R multiply-adds per strip loaded), then the triangle inside the
/// block is solved in registers, k still ascending for every row.
#[inline(always)]
fn lower_tile<F: Fma, const R: usize, const W: usize>(
    l: &[f32],
    perm: &[usize],
    b: &[f32],
    x: &mut [f32],
    n: usize,
    (i0, j0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&b[perm[i0 + r] * n + j0..][..W]);
    }
    // Each row's multipliers left of the block, as slices of length i0.
    let coefs: [&[f32]; R] = std::array::from_fn(|r| &l[(i0 + r) * n..][..i0]);
    for (k, strip) in x.chunks_exact(n).take(i0).enumerate() {
        let strip: &[f32; W] = strip[j0..j0 + W].try_into().unwrap();
        for (row, c) in acc.iter_mut().zip(&coefs) {
            debug_assert!(k < c.len());
            // SAFETY: each slice of `coefs` holds i0 entries and k < i0 (`take(i0)`). The
            // compiler kept this bounds check inside the loop, at 16 % of the solve's time.
            let c = -unsafe { *c.get_unchecked(k) };
            for j in 0..W {
                row[j] = F::fma(c, strip[j], row[j]);
            }
        }
    }
    let how = Triangle {
        ascending: true,
        transposed: false,
        unit: true,
    };
    triangle::<F, R, W>(&mut acc, &diagonal_block(l, n, i0), how);
    for (r, row) in acc.iter().enumerate() {
        x[(i0 + r) * n + j0..][..W].copy_from_slice(row);
    }
}

/// Back substitution for rows i0..i0 + R, columns j0..j0 + W: x_i = (y_i - sum_{k>i} U[i][k]
/// x_k) / U[i][i] with y in `y` and the rows below the block already solved in `x`; the rows
/// below first (ascending), then the triangle inside the block in registers.
#[inline(always)]
fn upper_tile<F: Fma, const R: usize, const W: usize>(
    u: &[f32],
    y: &[f32],
    x: &mut [f32],
    n: usize,
    (i0, j0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&y[(i0 + r) * n + j0..][..W]);
    }
    let below = i0 + R;
    let coefs: [&[f32]; R] = std::array::from_fn(|r| &u[(i0 + r) * n + below..(i0 + r + 1) * n]);
    for (k, strip) in x[below * n..].chunks_exact(n).take(n - below).enumerate() {
        let strip: &[f32; W] = strip[j0..j0 + W].try_into().unwrap();
        for (row, c) in acc.iter_mut().zip(&coefs) {
            debug_assert!(k < c.len());
            // SAFETY: each slice of `coefs` holds n - below entries and k < n - below
            // (`take(n - below)`); unchecked for the reason given in `lower_tile`.
            let c = -unsafe { *c.get_unchecked(k) };
            for j in 0..W {
                row[j] = F::fma(c, strip[j], row[j]);
            }
        }
    }
    let how = Triangle {
        ascending: false,
        transposed: false,
        unit: false,
    };
    triangle::<F, R, W>(&mut acc, &diagonal_block(u, n, i0), how);
    for (r, row) in acc.iter().enumerate() {
        x[(i0 + r) * n + j0..][..W].copy_from_slice(row);
    }
}

/// The row blocks of the solve, top to bottom: R rows at a time, the rows left over in blocks
/// of 4, 2 and 1 (as [`cover`] tiles a product); (first row, rows).
#[inline(always)]
fn row_blocks<const R: usize>(n: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    let full = n / R * R;
    let mut tail = [None; 3];
    let mut i0 = full;
    for (slot, size) in tail.iter_mut().zip([4, 2, 1]) {
        if (n - full) & size != 0 {
            *slot = Some((i0, size));
            i0 += size;
        }
    }
    (0..full)
        .step_by(R)
        .map(|i0| (i0, R))
        .chain(tail.into_iter().flatten())
}

/// A solve whose rows are covered block by block, each block strip by strip.
trait RowBlocks {
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize));
}

/// One block of `rows` rows (R, 4, 2 or 1) from row i0, across columns from..n: W-wide strips,
/// then 8-wide, then single columns.
#[inline(always)]
fn solve_block<T: RowBlocks, const R: usize, const W: usize>(
    t: &mut T,
    (i0, rows): (usize, usize),
    from: usize,
    n: usize,
) {
    #[inline(always)]
    fn strips<T: RowBlocks, const R: usize, const W: usize>(
        t: &mut T,
        i0: usize,
        from: usize,
        n: usize,
    ) {
        let mut j0 = from;
        while j0 + W <= n {
            t.tile::<R, W>((i0, j0));
            j0 += W;
        }
        // A 16-wide strip before the 8-wide ones where the widest strip is wider than 16 (one
        // full vector on AVX-512 rather than two half ones): the factorisation's trailing
        // updates have widths 8, 16, ..., n - 8.
        if W > 16 && j0 + 16 <= n {
            t.tile::<R, 16>((i0, j0));
            j0 += 16;
        }
        while j0 + 8 <= n {
            t.tile::<R, 8>((i0, j0));
            j0 += 8;
        }
        while j0 < n {
            t.tile::<R, 1>((i0, j0));
            j0 += 1;
        }
    }
    match rows {
        4 if R != 4 => strips::<T, 4, W>(t, i0, from, n),
        2 if R != 2 => strips::<T, 2, W>(t, i0, from, n),
        1 if R != 1 => strips::<T, 1, W>(t, i0, from, n),
        _ => strips::<T, R, W>(t, i0, from, n),
    }
}

struct Lower<'a, F> {
    l: &'a [f32],
    perm: &'a [usize],
    b: &'a [f32],
    x: &'a mut [f32],
    n: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> RowBlocks for Lower<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        lower_tile::<F, R, W>(self.l, self.perm, self.b, self.x, self.n, at);
    }
}

struct Upper<'a, F> {
    u: &'a [f32],
    y: &'a [f32],
    x: &'a mut [f32],
    n: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> RowBlocks for Upper<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        upper_tile::<F, R, W>(self.u, self.y, self.x, self.n, at);
    }
}

/// Solve with the factors of [`lu_factor`] (see [`lu_solve`]): L Y = P B into `tmp` block by
/// block from the top, then U X = Y into `b` from the bottom, in the register tiles of the
/// product (R x W), so both run at the speed of a product rather than of row-by-row axpys.
#[inline(always)]
fn lu_solve_body<F: Fma, const R: usize, const W: usize>(
    u: &[f32],
    l: &[f32],
    perm: &[usize],
    b: &mut [f32],
    tmp: &mut [f32],
    n: usize,
) {
    let fma = std::marker::PhantomData::<F>;
    let mut lower = Lower::<F> {
        l,
        perm,
        b,
        x: tmp,
        n,
        fma,
    };
    for block in row_blocks::<R>(n) {
        solve_block::<_, R, W>(&mut lower, block, 0, n);
    }
    let mut upper = Upper::<F> {
        u,
        y: tmp,
        x: b,
        n,
        fma,
    };
    for block in row_blocks::<R>(n).rev() {
        solve_block::<_, R, W>(&mut upper, block, 0, n);
    }
}

/// Forward substitution with U^T for rows i0..i0 + R of W into `x`, b_i read from `b`:
/// w_i = (b_i - sum_{k<i} U[k][i] w_k) / U[i][i]. U's column entries for the block's rows
/// are contiguous in row k of U, as the rows of P in [`tile_tn`].
#[inline(always)]
fn upper_t_tile<F: Fma, const R: usize, const W: usize>(
    u: &[f32],
    b: &[f32],
    x: &mut [f32],
    n: usize,
    (i0, j0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&b[(i0 + r) * n + j0..][..W]);
    }
    for (x_row, u_row) in x.chunks_exact(n).zip(u.chunks_exact(n)).take(i0) {
        let strip: &[f32; W] = x_row[j0..j0 + W].try_into().unwrap();
        let cs: &[f32; R] = u_row[i0..i0 + R].try_into().unwrap();
        for (row, &c) in acc.iter_mut().zip(cs) {
            for j in 0..W {
                row[j] = F::fma(-c, strip[j], row[j]);
            }
        }
    }
    let how = Triangle {
        ascending: true,
        transposed: true,
        unit: false,
    };
    triangle::<F, R, W>(&mut acc, &diagonal_block(u, n, i0), how);
    for (r, row) in acc.iter().enumerate() {
        x[(i0 + r) * n + j0..][..W].copy_from_slice(row);
    }
}

/// Back substitution with the unit upper L^T for rows i0..i0 + R, in place in `x`:
/// z_i = w_i - sum_{k>i} L[k][i] z_k, the rows below the block first.
#[inline(always)]
fn lower_t_tile<F: Fma, const R: usize, const W: usize>(
    l: &[f32],
    x: &mut [f32],
    n: usize,
    (i0, j0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&x[(i0 + r) * n + j0..][..W]);
    }
    let below = i0 + R;
    let rows = x[below * n..]
        .chunks_exact(n)
        .zip(l[below * n..].chunks_exact(n));
    for (x_row, l_row) in rows.take(n - below) {
        let strip: &[f32; W] = x_row[j0..j0 + W].try_into().unwrap();
        let cs: &[f32; R] = l_row[i0..i0 + R].try_into().unwrap();
        for (row, &c) in acc.iter_mut().zip(cs) {
            for j in 0..W {
                row[j] = F::fma(-c, strip[j], row[j]);
            }
        }
    }
    let how = Triangle {
        ascending: false,
        transposed: true,
        unit: true,
    };
    triangle::<F, R, W>(&mut acc, &diagonal_block(l, n, i0), how);
    for (r, row) in acc.iter().enumerate() {
        x[(i0 + r) * n + j0..][..W].copy_from_slice(row);
    }
}

struct UpperT<'a, F> {
    u: &'a [f32],
    b: &'a [f32],
    x: &'a mut [f32],
    n: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> RowBlocks for UpperT<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        upper_t_tile::<F, R, W>(self.u, self.b, self.x, self.n, at);
    }
}

struct LowerT<'a, F> {
    l: &'a [f32],
    x: &'a mut [f32],
    n: usize,
    fma: std::marker::PhantomData<F>,
}

impl<F: Fma> RowBlocks for LowerT<'_, F> {
    #[inline(always)]
    fn tile<const R: usize, const W: usize>(&mut self, at: (usize, usize)) {
        lower_t_tile::<F, R, W>(self.l, self.x, self.n, at);
    }
}

/// Solve with the transpose (see [`lu_solve_transposed`]): A^T = U^T L^T P, so U^T W = B from
/// the top into `tmp` and L^T Z = W from the bottom in place, then X = P^T Z into `b`. (B is
/// read where it lies rather than copied into `tmp` first: besides the pass, glibc's copy of
/// two buffers whose distance is a few bytes past a multiple of 4 KiB, as two consecutive
/// allocations of n x n floats are, ran 30x slower than a plain one on an AMD EPYC.)
#[inline(always)]
fn lu_solve_transposed_body<F: Fma, const R: usize, const W: usize>(
    u: &[f32],
    l: &[f32],
    perm: &[usize],
    b: &mut [f32],
    tmp: &mut [f32],
    n: usize,
) {
    let fma = std::marker::PhantomData::<F>;
    let mut upper = UpperT::<F> {
        u,
        b: &*b,
        x: tmp,
        n,
        fma,
    };
    for block in row_blocks::<R>(n) {
        solve_block::<_, R, W>(&mut upper, block, 0, n);
    }
    let mut lower = LowerT::<F> { l, x: tmp, n, fma };
    for block in row_blocks::<R>(n).rev() {
        solve_block::<_, R, W>(&mut lower, block, 0, n);
    }
    for (i, &p) in perm.iter().enumerate().take(n) {
        b[p * n..p * n + n].copy_from_slice(&tmp[i * n..i * n + n]);
    }
}

#[cfg(feature = "layers")]
/// One R x W tile of [`shifted_product`]'s output at (a0, q0): output rows a0.., positions
/// q0..q0 + W, summed over the input rows and their K shifts in registers.
#[inline(always)]
fn shifted_tile<F: Fma, const R: usize, const W: usize, const K: usize>(
    s: &Shifted<'_>,
    shifts: &[usize; K],
    out: &mut [f32],
    (a0, q0): (usize, usize),
) {
    let mut acc = [[0f32; W]; R];
    let taps = K * s.b;
    // Rows of the weights as slices of length K b (the structure of `tile`, which the compiler
    // keeps in vector registers).
    let rows: [&[f32]; R] = std::array::from_fn(|r| &s.w[(a0 + r) * taps..(a0 + r + 1) * taps]);
    // Input row by input row, its K strips taken as slices of the part of the row the tile
    // reads: the taps' index arithmetic (a division by K per tap) and bounds checks stay out
    // of the multiply-adds' loop. The sums run in the same order as tap by tap.
    let span = shifts.iter().max().copied().unwrap_or(0) + W;
    for b in 0..s.b {
        let x = &s.x[b * s.ld + q0..][..span];
        let w: [&[f32; K]; R] =
            std::array::from_fn(|r| rows[r][b * K..(b + 1) * K].try_into().unwrap());
        for (k, &shift) in shifts.iter().enumerate() {
            // Copied to a local array: borrowed from the slice, the strip kept the multiply-adds
            // scalar (the compiler did not vectorise them).
            let strip: [f32; W] = x[shift..shift + W].try_into().unwrap();
            for (row, w_row) in acc.iter_mut().zip(&w) {
                let v = w_row[k];
                for j in 0..W {
                    row[j] = F::fma(v, strip[j], row[j]);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        out[(a0 + r) * s.cols + q0..][..W].copy_from_slice(acc);
    }
}

#[cfg(feature = "layers")]
/// The operands of [`shifted_product`] and [`shifted_gram`].
struct Shifted<'a> {
    w: &'a [f32],
    x: &'a [f32],
    a: usize,
    b: usize,
    /// Row stride of `x`.
    ld: usize,
    /// Row stride of the gram's `y`.
    y_ld: usize,
    cols: usize,
    shifts: &'a [usize],
}

#[cfg(feature = "layers")]
#[inline(always)]
fn shifted_product_body<F: Fma, const R: usize, const W: usize, const K: usize>(
    s: &Shifted<'_>,
    out: &mut [f32],
) {
    let shifts: &[usize; K] = s.shifts.try_into().expect("K shifts");
    for q0 in (0..s.cols).step_by(W) {
        let mut a0 = 0;
        while a0 + R <= s.a {
            shifted_tile::<F, R, W, K>(s, shifts, out, (a0, q0));
            a0 += R;
        }
        while a0 < s.a {
            shifted_tile::<F, 1, W, K>(s, shifts, out, (a0, q0));
            a0 += 1;
        }
    }
}

#[cfg(feature = "layers")]
/// One block of [`shifted_gram`]: output rows a0..a0 + R against input row b, the sums of the
/// S shifts from k0 on over the positions in W f32 lanes, added into the lanes kept in `lanes`.
#[inline(always)]
fn shifted_gram_tile<F: Fma, const R: usize, const W: usize, const S: usize>(
    s: &Shifted<'_>,
    y: &[f32],
    lanes: &mut [f32],
    (a0, b, k0): (usize, usize, usize),
) {
    let at = |r: usize, k: usize| (((a0 + r) * s.b + b) * 9 + k0 + k) * GRAM_LANES;
    // Local copies throughout: borrowed strips kept the multiply-adds scalar, and summing the
    // accumulators where they lie kept them in memory (see `shifted_tile`).
    let mut acc: [[[f32; W]; R]; S] = std::array::from_fn(|k| {
        std::array::from_fn(|r| lanes[at(r, k)..at(r, k) + W].try_into().unwrap())
    });
    let row = &s.x[b * s.ld..(b + 1) * s.ld];
    let ys: [&[f32]; R] = std::array::from_fn(|r| &y[(a0 + r) * s.y_ld..][..s.cols]);
    let strips: [&[f32]; S] =
        std::array::from_fn(|k| &row[s.shifts[k0 + k]..s.shifts[k0 + k] + s.cols]);
    for q0 in (0..s.cols / W).map(|i| i * W) {
        let ys: [[f32; W]; R] = std::array::from_fn(|r| ys[r][q0..q0 + W].try_into().unwrap());
        for (acc, strip) in acc.iter_mut().zip(&strips) {
            let strip: [f32; W] = strip[q0..q0 + W].try_into().unwrap();
            for (acc, y) in acc.iter_mut().zip(&ys) {
                for j in 0..W {
                    acc[j] = F::fma(y[j], strip[j], acc[j]);
                }
            }
        }
    }
    for (k, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            lanes[at(r, k)..at(r, k) + W].copy_from_slice(acc);
        }
    }
}

#[cfg(feature = "layers")]
/// [`shifted_gram`] by blocks of R output rows, one input row and S of the nine shifts: R S
/// accumulators, and R + S loads for R S multiply-adds per vector of positions. Each sum's
/// lanes add the positions in order whatever R and S, so every instantiation gives the same
/// lanes to the bit.
#[inline(always)]
fn shifted_gram_body<F: Fma, const R: usize, const W: usize, const S: usize>(
    s: &Shifted<'_>,
    y: &[f32],
    lanes: &mut [f32],
) {
    const { assert!(9 % S == 0) };
    let mut a0 = 0;
    while a0 + R <= s.a {
        for b in 0..s.b {
            for k0 in (0..9).step_by(S) {
                shifted_gram_tile::<F, R, W, S>(s, y, lanes, (a0, b, k0));
            }
        }
        a0 += R;
    }
    while a0 < s.a {
        for b in 0..s.b {
            for k0 in (0..9).step_by(S) {
                shifted_gram_tile::<F, 1, W, S>(s, y, lanes, (a0, b, k0));
            }
        }
        a0 += 1;
    }
}

/// Returns from an instantiation's kernel through `n64`'s intrinsics where n = 64 and the
/// instruction set has them (AVX2 and AVX-512: widths 16 and 32).
macro_rules! at_64 {
    ($n:expr, $width:literal, $f:ident($($arg:expr),*)) => {
        #[cfg(target_arch = "x86_64")]
        if $n == 64 && $width >= 16 {
            // SAFETY: only the AVX2 and AVX-512 instantiations come here, and their callers
            // have checked that the CPU has the instruction set.
            return unsafe {
                if $width == 32 {
                    n64::avx512::$f($($arg),*)
                } else {
                    n64::avx2::$f($($arg),*)
                }
            };
        }
    };
}

macro_rules! instantiate {
    ($name:ident, $fma:ty, $rows:literal, $width:literal, $($feature:literal),*) => {
        mod $name {
            use super::*;
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize, acc: bool) {
                at_64!(n, $width, matmul(a, b, c, acc));
                // AVX-512's 32 registers take 8 x 32 tiles (16 accumulators): each B strip
                // loaded serves 8 rows instead of 6. Every entry's sum runs over k in order
                // whatever the tile, so the bits do not change; the factorisation and the
                // solves keep the instruction set's row blocks.
                matmul_body::<$fma, { if $width == 32 { 8 } else { $rows } }, $width>(
                    a, b, c, n, acc,
                )
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lin_comb(terms: &[(&[f32], f32)], out: &mut [f32], acc: bool) {
                lin_comb_body::<$fma, { 2 * $width }>(terms, out, acc)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn pade_tail(
                terms: &[(&[f32], f32)],
                eye: f32,
                u: &[f32],
                qp: (&mut [f32], &mut [f32]),
                n: usize,
            ) {
                pade_tail_body::<$fma, { 2 * $width }>(terms, eye, u, qp, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn generators(c: &[f32], psi: &[&[f32]], out: &mut [f32], nn: usize) {
                // 8 rows of W entries: 8 accumulators and the dictionary's strip.
                generators_body::<$fma, { $width / 2 }>(c, psi, out, nn)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
                axpy_body::<$fma>(alpha, x, y)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lu_factor(a: &mut [f32], l: &mut [f32], perm: &mut [usize], n: usize) {
                #[cfg(target_arch = "x86_64")]
                if $width == 32 && n == 64 {
                    // SAFETY: only the AVX-512 instantiation comes here, and its callers have
                    // checked that the CPU has AVX-512F.
                    return unsafe { n64::avx512::lu_factor(a, l, perm) };
                }
                #[cfg(target_arch = "x86_64")]
                if $width == 16 && n == 64 {
                    // SAFETY: only the AVX2 instantiation comes here, and its callers have
                    // checked that the CPU has AVX2 and FMA.
                    return unsafe { n64::avx2::lu_factor(a, l, perm) };
                }
                lu_factor_body::<$fma, $rows, $width, true>(a, l, perm, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lu_solve(
                u: &[f32],
                l: &[f32],
                perm: &[usize],
                b: &mut [f32],
                tmp: &mut [f32],
                n: usize,
            ) {
                // Its blocks are this instantiation's, so that the bits are the same.
                #[cfg(target_arch = "x86_64")]
                const { assert!($width < 16 || $rows == n64::ROWS) };
                at_64!(n, $width, lu_solve(u, l, perm, b, tmp));
                lu_solve_body::<$fma, $rows, $width>(u, l, perm, b, tmp, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lu_solve_transposed(
                u: &[f32],
                l: &[f32],
                perm: &[usize],
                b: &mut [f32],
                tmp: &mut [f32],
                n: usize,
            ) {
                #[cfg(target_arch = "x86_64")]
                const { assert!($width < 16 || $rows == n64::ROWS) };
                at_64!(n, $width, lu_solve_transposed(u, l, perm, b, tmp));
                lu_solve_transposed_body::<$fma, $rows, $width>(u, l, perm, b, tmp, n)
            }
            $(#[target_feature(enable = $feature)])*
            #[inline]
            pub unsafe fn run<T>(f: impl FnOnce() -> T) -> T {
                f()
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matvec(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
                matvec_body::<$fma>(a, x, y, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn vecmat(x: &[f32], m: &[f32], y: &mut [f32], n: usize, acc: bool) {
                vecmat_body::<$fma, { 4 * $width }>(x, m, y, n, acc)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn vecmat_pair(first: VecMat<'_>, second: VecMat<'_>, n: usize) {
                // Half vecmat's strip: two products' accumulators fit the registers.
                vecmat_pair_body::<$fma, { 2 * $width }>(first, second, n)
            }
            #[cfg(feature = "layers")]
            $(#[target_feature(enable = $feature)])*
            pub(super) unsafe fn shifted_product(s: &Shifted<'_>, out: &mut [f32]) {
                const R: usize = if $width == 32 { 8 } else { 4 };
                match s.shifts.len() {
                    9 => shifted_product_body::<$fma, R, $width, 9>(s, out),
                    4 => shifted_product_body::<$fma, R, $width, 4>(s, out),
                    2 => shifted_product_body::<$fma, R, $width, 2>(s, out),
                    1 => shifted_product_body::<$fma, R, $width, 1>(s, out),
                    k => unreachable!("shifted_product checks the offsets' count, {k}"),
                }
            }
            #[cfg(feature = "layers")]
            $(#[target_feature(enable = $feature)])*
            pub(super) unsafe fn shifted_gram(s: &Shifted<'_>, y: &[f32], lanes: &mut [f32]) {
                // R rows by S shifts per block: R S accumulators, R strips of y and one of x
                // in registers. 16 zmm hold 2 x 9 (11 loads per 18 multiply-adds); 16 ymm hold
                // 3 x 3 (6 loads per 9) where 1 x 9 took 10 per 9 and ran load-bound.
                const R: usize = if $width == 32 { 2 } else if $width == 16 { 3 } else { 1 };
                const S: usize = if $width == 16 { 3 } else { 9 };
                shifted_gram_body::<$fma, R, { $width / 2 }, S>(s, y, lanes)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn gemm_tn(p: &[f32], q: &[f32], c: &mut [f32], n: usize, depth: usize) {
                gemm_tn_body::<$fma, $rows, $width>(p, q, c, n, depth)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
// Tiles: 6 x 32 (12 of 32 zmm; the product's 8 x 32, 16), 6 x 16 (12 of 16 ymm), 4 x 8 (8 of
// 16 xmm).
instantiate!(avx512, Fused, 6, 32, "avx512f", "avx2", "fma");
#[cfg(target_arch = "x86_64")]
instantiate!(avx2, Fused, 6, 16, "avx2", "fma");
instantiate!(portable, Unfused, 4, 8,);

/// The instruction set the kernels use on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512F with FMA.
    Avx512,
    /// AVX2 with FMA.
    Avx2,
    /// Whatever the compilation target guarantees.
    Portable,
}

impl Isa {
    /// Vector width order: Portable < Avx2 < Avx512.
    fn rank(self) -> u8 {
        match self {
            Isa::Portable => 0,
            Isa::Avx2 => 1,
            Isa::Avx512 => 2,
        }
    }
}

impl std::str::FromStr for Isa {
    type Err = crate::VlgoError;

    /// `avx512` (or `avx-512`), `avx2` or `portable`, in any case, as [`limit_isa`] takes them
    /// from a command line.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "avx512" | "avx-512" => Ok(Isa::Avx512),
            "avx2" => Ok(Isa::Avx2),
            "portable" => Ok(Isa::Portable),
            _ => Err(crate::VlgoError::InvalidParameter {
                name: "instruction set",
                value: s.to_string(),
                requirement: "one of avx512, avx2, portable",
            }),
        }
    }
}

/// The instruction set in use, chosen once: the widest the CPU has, or narrower where
/// [`limit_isa`] capped it before.
static ISA: OnceLock<Isa> = OnceLock::new();

/// The widest instruction set the CPU has (AVX-512 and AVX2 with FMA only).
fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx2;
        }
    }
    Isa::Portable
}

/// The instruction set the kernels use: the widest the CPU has, detected once, unless
/// [`limit_isa`] capped it first.
pub fn isa() -> Isa {
    *ISA.get_or_init(detect)
}

/// Caps the instruction set of this module's kernels (and of the closures run through
/// [`vectorised`]) at `cap` for the rest of the process, and returns the set in use: `cap`, or
/// the CPU's own where that is narrower. Meant for measuring a narrower set's kernels on a wider
/// machine (the AVX2 kernels on an AVX-512 CPU, as `cargo bench --bench expm -- --isa avx2`
/// does); products that go through the `gemm` crate choose their own instructions.
///
/// # Errors
///
/// [`VlgoError::InvalidParameter`](crate::VlgoError::InvalidParameter) when the set was already
/// fixed to a different one (by the first kernel call, or any call of [`isa`]); it is left as it
/// was.
///
/// # Example
///
/// ```
/// use vlgo_core::cpu::simd::{Isa, isa, limit_isa};
///
/// let used = limit_isa("portable".parse().unwrap()).unwrap();
/// assert_eq!(used, Isa::Portable);
/// assert_eq!(isa(), Isa::Portable);
/// // The set is fixed now: the same cap is accepted again, and one that would change it (on a
/// // CPU with AVX2) fails and changes nothing.
/// assert_eq!(limit_isa(Isa::Portable).unwrap(), Isa::Portable);
/// if let Err(e) = limit_isa(Isa::Avx2) {
///     assert!(e.to_string().contains("before the first CPU kernel runs"));
/// }
/// assert_eq!(isa(), Isa::Portable);
/// assert!("avx3".parse::<Isa>().is_err());
/// ```
pub fn limit_isa(cap: Isa) -> crate::Result<Isa> {
    let detected = detect();
    let wanted = if cap.rank() < detected.rank() {
        cap
    } else {
        detected
    };
    let used = *ISA.get_or_init(|| wanted);
    if used == wanted {
        Ok(used)
    } else {
        Err(crate::VlgoError::InvalidParameter {
            name: "instruction set cap",
            value: format!("{cap:?} (the kernels use {used:?})"),
            requirement: "a cap takes effect only before the first CPU kernel runs, and the \
                          kernels already use another set",
        })
    }
}

macro_rules! dispatch {
    ($f:ident ( $($arg:expr),* )) => {
        match isa() {
            // SAFETY: `isa()` reported these features on the running CPU.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { avx512::$f($($arg),*) },
            // SAFETY: as above, AVX2 and FMA reported by `isa()`.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { avx2::$f($($arg),*) },
            // SAFETY: the portable build enables no feature.
            _ => unsafe { portable::$f($($arg),*) },
        }
    };
}

/// Memory to bring into the core's cache while a kernel computes something else: up to three
/// ranges of floats (a batch's next matrices and output part), fetched line by line
/// with `prefetcht1`. A prefetch neither faults nor writes, so the ranges need not be valid
/// memory; they are held as addresses, not slices, for that reason.
#[derive(Clone, Copy, Default)]
pub(crate) struct Ahead {
    ranges: [(usize, usize); 3],
}

impl Ahead {
    /// Bytes per cache line.
    const LINE: usize = 64;

    /// The lines that hold `ranges` (address and length in floats each), from the line of each
    /// range's first float to that of its last.
    pub(crate) fn new(ranges: [(*const f32, usize); 3]) -> Self {
        Self {
            ranges: ranges.map(|(p, len)| {
                let (start, end) = (p as usize, p as usize + 4 * len);
                let first = start / Self::LINE * Self::LINE;
                (
                    first,
                    if len == 0 {
                        0
                    } else {
                        (end - first).div_ceil(Self::LINE)
                    },
                )
            }),
        }
    }

    /// The addresses of the lines left, in order.
    fn addresses(&self) -> impl Iterator<Item = usize> + '_ {
        self.ranges
            .iter()
            .flat_map(|&(start, lines)| (0..lines).map(move |l| start + l * Self::LINE))
    }

    /// Lines left to fetch.
    pub(crate) fn lines(&self) -> usize {
        self.ranges.iter().map(|r| r.1).sum()
    }

    /// The first `count` lines left, and what remains after them.
    pub(crate) fn split(self, count: usize) -> (Self, Self) {
        let (mut first, mut rest) = (self, self);
        let mut left = count;
        for (f, r) in first.ranges.iter_mut().zip(&mut rest.ranges) {
            let take = left.min(r.1);
            *f = (r.0, take);
            *r = (r.0 + take * Self::LINE, r.1 - take);
            left -= take;
        }
        (first, rest)
    }

    /// Fetches the next `count` lines.
    #[inline(always)]
    pub(crate) fn fetch(&mut self, count: usize) {
        let (now, rest) = self.split(count);
        #[cfg(target_arch = "x86_64")]
        for at in now.addresses() {
            // SAFETY: a prefetch is a hint: it neither faults nor writes, at any address.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                    at as *const i8,
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = now;
        *self = rest;
    }
}

/// [`matmul`] that also fetches `ahead`, spread over the product's tiles, where the kernel
/// does (n = 64 on AVX2 and AVX-512); elsewhere `ahead` is ignored, since fetched in one burst
/// the lines cost more than they saved (`docs/expm.md`).
pub(crate) fn matmul_ahead(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    n: usize,
    accumulate: bool,
    ahead: Ahead,
) {
    #[cfg(target_arch = "x86_64")]
    if n == 64 {
        match isa() {
            // SAFETY: `isa()` reported the instruction set; the kernel checks the lengths.
            Isa::Avx512 => return unsafe { n64::avx512::matmul_ahead(a, b, c, accumulate, ahead) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { n64::avx2::matmul_ahead(a, b, c, accumulate, ahead) },
            Isa::Portable => {}
        }
    }
    let _ = ahead;
    matmul(a, b, c, n, accumulate);
}

/// C = A B (`accumulate` false) or C += A B, row-major n x n.
pub fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize, accumulate: bool) {
    debug_assert!(a.len() >= n * n && b.len() >= n * n && c.len() >= n * n);
    dispatch!(matmul(a, b, c, n, accumulate))
}

#[cfg(feature = "layers")]
/// Positions [`shifted_product`] and [`shifted_gram`] take in multiples of: their widest tile.
pub(crate) const SHIFT_ALIGN: usize = 32;

#[cfg(feature = "layers")]
/// `out[a, q]` = sum over the input rows b and the K kernel offsets k of
/// `w[(a b_count + b) K + k] x[b ld + shifts[k] + q]`, q in 0..cols, for K = `shifts.len()`
/// of 1, 2, 4 or 9: a convolution over a layout in which each kernel offset is a fixed shift
/// of the position (`conv_grid`, `conv_phases`; a forward with nine offsets takes the weights
/// in the convolution's own [C_out, C_in, 3, 3] order). The offsets' terms are summed in
/// registers, so the output is written once.
///
/// # Panics
/// If `cols` is not a multiple of [`SHIFT_ALIGN`], K is not one of those, or a buffer is too
/// short for the sizes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn shifted_product(
    w: &[f32],
    x: &[f32],
    out: &mut [f32],
    (a, b): (usize, usize),
    ld: usize,
    cols: usize,
    shifts: &[usize],
) {
    let s = Shifted {
        w,
        x,
        a,
        b,
        ld,
        y_ld: 0,
        cols,
        shifts,
    };
    s.check();
    let k = shifts.len();
    assert!(
        matches!(k, 1 | 2 | 4 | 9) && out.len() >= a * cols && w.len() >= k * a * b,
        "shifted_product: {k} shifts, or the output or weights too short"
    );
    dispatch!(shifted_product(&s, out))
}

#[cfg(feature = "layers")]
/// Lanes per sum that [`shifted_gram`] keeps: its widest (the instruction sets with narrower
/// vectors use the first ones, and leave the others zero).
pub(crate) const GRAM_LANES: usize = 16;

#[cfg(feature = "layers")]
/// `lanes[((a b_count + b) 9 + k) GRAM_LANES + l]` += the sum over positions q = l (mod the
/// vector width) of `y[a y_ld + q] x[b ld + shifts[k] + q]`: the weight adjoint of
/// [`shifted_product`]'s convolution with nine offsets (`y` the output's adjoint, zero wherever
/// the layout is), kept in f32 lanes across calls. [`fold_lanes`] adds each sum's lanes.
///
/// # Panics
/// If `cols` is not a multiple of [`SHIFT_ALIGN`], or a buffer (`lanes` included) is too
/// short for the sizes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn shifted_gram(
    (y, y_ld): (&[f32], usize),
    x: &[f32],
    lanes: &mut [f32],
    (a, b): (usize, usize),
    ld: usize,
    cols: usize,
    shifts: &[usize; 9],
) {
    let s = Shifted {
        w: &[],
        x,
        a,
        b,
        ld,
        y_ld,
        cols,
        shifts,
    };
    s.check();
    assert!(
        (a == 0 || y.len() >= (a - 1) * y_ld + cols) && lanes.len() >= a * b * 9 * GRAM_LANES,
        "shifted_gram: buffers too short"
    );
    dispatch!(shifted_gram(&s, y, lanes))
}

#[cfg(feature = "layers")]
/// The sums that [`shifted_gram`] keeps in lanes: each sum's [`GRAM_LANES`] lanes added
/// pairwise, in a fixed order, into `out` (one entry per sum).
pub(crate) fn fold_lanes(lanes: &[f32], out: &mut [f32]) {
    for (out, lanes) in out.iter_mut().zip(lanes.chunks_exact(GRAM_LANES)) {
        let mut v: [f32; GRAM_LANES] = lanes.try_into().unwrap();
        let mut half = GRAM_LANES;
        while half > 1 {
            half /= 2;
            for j in 0..half {
                v[j] += v[j + half];
            }
        }
        *out = v[0];
    }
}

#[cfg(feature = "layers")]
impl Shifted<'_> {
    /// The sizes that make every index of the kernels valid (they index with bounds checks
    /// all the same; this turns a wrong call into one clear panic).
    fn check(&self) {
        let widest = self.shifts.iter().max().copied().unwrap_or(0);
        assert!(
            self.cols.is_multiple_of(SHIFT_ALIGN)
                && widest + self.cols <= self.ld
                && self.x.len() >= self.b * self.ld,
            "shifted kernels: sizes do not fit (cols {}, ld {}, widest shift {widest})",
            self.cols,
            self.ld
        );
    }
}

/// Below this length plain loops beat the dispatch and vector set-up.
const SMALL: usize = 8;

/// Runs `f` compiled for the widest instruction set the CPU has, like the kernels here, so that
/// the compiler vectorises plain loops in it with 256-bit (or wider) registers rather than the
/// compilation target's baseline (SSE2 on x86-64); for element-wise passes outside the kernels
/// (norms, sums of matrices). The closure must be marked `#[inline(always)]`: it is called from
/// one copy of this function per instruction set, and only when inlined into them is it compiled
/// for theirs. The results are those of the same loop compiled for the baseline: the compiler
/// does not reorder floating-point operations or fuse them into multiply-adds on its own.
///
/// ```
/// use vlgo_core::cpu::simd::vectorised;
///
/// let x = vec![1.5f32; 1000];
/// let sum = vectorised(
///     #[inline(always)]
///     || x.iter().map(|&v| v as f64).sum::<f64>(),
/// );
/// assert_eq!(sum, 1500.0);
/// ```
#[inline(always)]
pub fn vectorised<T>(f: impl FnOnce() -> T) -> T {
    dispatch!(run(f))
}

/// y += alpha x.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    if x.len() < SMALL {
        y.iter_mut().zip(x).for_each(|(yi, &xi)| *yi += alpha * xi);
        return;
    }
    dispatch!(axpy(alpha, x, y))
}

/// out = sum_t c_t x_t (`accumulate` false) or out += sum_t c_t x_t, in one pass over out;
/// every x_t is at least as long as out.
pub fn lin_comb(terms: &[(&[f32], f32)], out: &mut [f32], accumulate: bool) {
    debug_assert!(terms.iter().all(|(x, _)| x.len() >= out.len()));
    dispatch!(lin_comb(terms, out, accumulate))
}

/// Padé's V = sum_t c_t x_t + eye I (every x_t n x n), then Q = V - U and P = V + U, V never
/// stored (one pass over the entries and a second over the diagonal), with the bits of
/// [`lin_comb`], the identity term and the two sums in turn.
pub fn pade_tail(
    terms: &[(&[f32], f32)],
    eye: f32,
    u: &[f32],
    qp: (&mut [f32], &mut [f32]),
    n: usize,
) {
    debug_assert!(terms.iter().all(|(x, _)| x.len() >= n * n) && u.len() >= n * n);
    dispatch!(pade_tail(terms, eye, u, qp, n))
}

/// Problems whose generators [`generators`] forms at once.
pub(crate) const GENERATED_ROWS: usize = 8;

/// The generators of [`GENERATED_ROWS`] problems that share a dictionary block `psi` (M slices
/// of n^2 = `nn` entries), with coefficients `c` [GENERATED_ROWS, M] row-major: row g of `out`
/// [GENERATED_ROWS, nn] is sum_m c[g, m] psi[m].
pub(crate) fn generators(c: &[f32], psi: &[&[f32]], out: &mut [f32], nn: usize) {
    assert!(
        c.len() >= GENERATED_ROWS * psi.len()
            && out.len() >= GENERATED_ROWS * nn
            && psi.iter().all(|x| x.len() >= nn),
        "generators: operands too short"
    );
    dispatch!(generators(c, psi, out, nn))
}

/// y = A x, row-major n x n.
pub fn matvec(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
    if n < SMALL {
        for (yi, row) in y[..n].iter_mut().zip(a.chunks_exact(n)) {
            *yi = row.iter().zip(x).map(|(r, v)| r * v).sum();
        }
        return;
    }
    dispatch!(matvec(a, x, y, n))
}

/// y = x^T M (`accumulate` false) or y += x^T M for a row-major n x n M; with M = A^T this is
/// A x, and much faster than [`matvec`] for n >= 16 (no horizontal sums).
pub fn vecmat(x: &[f32], m: &[f32], y: &mut [f32], n: usize, accumulate: bool) {
    debug_assert!(x.len() >= n && m.len() >= n * n && y.len() >= n);
    dispatch!(vecmat(x, m, y, n, accumulate))
}

/// [`vecmat`] of two independent products at once, with the same results: about twice the
/// throughput where one product's chain of multiply-adds is bound by their latency.
pub fn vecmat_pair(first: VecMat<'_>, second: VecMat<'_>, n: usize) {
    debug_assert!(
        [&first, &second]
            .iter()
            .all(|v| { v.x.len() >= n && v.m.len() >= n * n && v.y.len() >= n })
    );
    dispatch!(vecmat_pair(first, second, n))
}

/// C += P^T Q for P and Q of `depth` rows of length n (row-major) and C n x n: a sum of
/// `depth` outer products p_k q_k^T in one pass over C.
pub fn gemm_tn(p: &[f32], q: &[f32], c: &mut [f32], n: usize, depth: usize) {
    debug_assert!(p.len() >= depth * n && q.len() >= depth * n && c.len() >= n * n);
    dispatch!(gemm_tn(p, q, c, n, depth))
}

/// Factors `a` (row-major n x n) with partial pivoting: U in the upper triangle of `a` (what lies
/// below it is scratch), the unit lower L strictly below the diagonal of `l`; `perm[i]` is the
/// original row of row i. A zero or NaN pivot leaves Inf/NaN in the factors (the solve then
/// returns non-finite values), never a panic.
pub fn lu_factor(a: &mut [f32], l: &mut [f32], perm: &mut [usize], n: usize) {
    debug_assert!(a.len() >= n * n && l.len() >= n * n && perm.len() >= n);
    dispatch!(lu_factor(a, l, perm, n))
}

/// Solves A X = B from the factors of [`lu_factor`]; `b` (n x n) is overwritten by X, `tmp` is
/// n x n scratch.
pub fn lu_solve(u: &[f32], l: &[f32], perm: &[usize], b: &mut [f32], tmp: &mut [f32], n: usize) {
    debug_assert!(u.len() >= n * n && l.len() >= n * n && b.len() >= n * n && tmp.len() >= n * n);
    dispatch!(lu_solve(u, l, perm, b, tmp, n))
}

/// Solves A^T X = B from the factors of A by [`lu_factor`], as [`lu_solve`] does A X = B: the
/// reverse pass of a solve needs the transposed system, and this saves factoring A^T.
pub fn lu_solve_transposed(
    u: &[f32],
    l: &[f32],
    perm: &[usize],
    b: &mut [f32],
    tmp: &mut [f32],
    n: usize,
) {
    debug_assert!(u.len() >= n * n && l.len() >= n * n && b.len() >= n * n && tmp.len() >= n * n);
    dispatch!(lu_solve_transposed(u, l, perm, b, tmp, n))
}

/// Transpose of a row-major n x n matrix, in 8 x 8 blocks (in registers where the CPU has AVX).
pub fn transpose(a: &[f32], out: &mut [f32], n: usize) {
    let (a, out) = (&a[..n * n], &mut out[..n * n]);
    #[cfg(target_arch = "x86_64")]
    if isa() != Isa::Portable && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX was detected just above; both slices hold n x n.
        unsafe { avx_transpose(a, out, n) };
        return;
    }
    transpose_blocks(a, out, n, 0);
}

/// One 8 x 8 block transposed: dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8
/// (row r of `src` becomes column r of `dst`), with AVX shuffles where the CPU has them.
#[inline(always)]
fn transpose8(src: &[f32], src_stride: usize, dst: &mut [f32], dst_stride: usize) {
    assert!(src.len() >= 7 * src_stride + 8 && dst.len() >= 7 * dst_stride + 8);
    #[cfg(target_arch = "x86_64")]
    if isa() != Isa::Portable && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX detected just above; lengths checked above.
        unsafe { avx_transpose8(src, src_stride, dst, dst_stride) };
        return;
    }
    for r in 0..8 {
        for c in 0..8 {
            dst[c * dst_stride + r] = src[r * src_stride + c];
        }
    }
}

/// [`transpose8`] with AVX.
///
/// # Safety
///
/// The CPU must have AVX, and both slices must hold 8 rows of 8 floats at their strides (a
/// length of at least 7 stride + 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn avx_transpose8(src: &[f32], src_stride: usize, dst: &mut [f32], dst_stride: usize) {
    use std::arch::x86_64::*;
    debug_assert!(src.len() >= 7 * src_stride + 8 && dst.len() >= 7 * dst_stride + 8);
    // SAFETY: the caller guarantees 8 rows of 8 floats at these strides in both slices.
    unsafe {
        let r: [__m256; 8] =
            std::array::from_fn(|k| _mm256_loadu_ps(src.as_ptr().add(k * src_stride)));
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let c = [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ];
        for (k, v) in c.into_iter().enumerate() {
            _mm256_storeu_ps(dst.as_mut_ptr().add(k * dst_stride), v);
        }
    }
}

/// Scalar transpose of the blocks from row and column `from` on, plus the edges: all of it
/// for `from` = 0.
fn transpose_blocks(a: &[f32], out: &mut [f32], n: usize, from: usize) {
    const BLOCK: usize = 8;
    for i0 in (0..n).step_by(BLOCK) {
        for j0 in (0..n).step_by(BLOCK) {
            if i0 + BLOCK <= from && j0 + BLOCK <= from {
                continue;
            }
            for i in i0..(i0 + BLOCK).min(n) {
                for j in j0..(j0 + BLOCK).min(n) {
                    out[j * n + i] = a[i * n + j];
                }
            }
        }
    }
}

/// The full 8 x 8 blocks through the register transpose (unpack, shuffle, lane permute), the
/// edges through [`transpose_blocks`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn avx_transpose(a: &[f32], out: &mut [f32], n: usize) {
    let full = n / 8 * 8;
    for i0 in (0..full).step_by(8) {
        for j0 in (0..full).step_by(8) {
            // SAFETY: AVX as for this function; rows i0..i0+8 and columns j0..j0+8 lie inside
            // the n x n matrix, so every 8-float row of the block lies inside its slice.
            unsafe { avx_transpose8(&a[i0 * n + j0..], n, &mut out[j0 * n + i0..], n) };
        }
    }
    if full < n {
        transpose_blocks(a, out, n, full);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Padé's fused tail gives the bits of the steps it stands in for: V by `lin_comb`, the
    /// identity term on the diagonal, then V - U and V + U; with one to three terms, with and
    /// without the identity term, at n = 64 and at n = 5 (entries past the last full chunk), on
    /// this CPU's instruction set and on the portable (unfused) code.
    #[test]
    fn pade_tail_matches_the_steps_it_fuses() {
        type Lin = unsafe fn(&[(&[f32], f32)], &mut [f32], bool);
        type Tail = unsafe fn(&[(&[f32], f32)], f32, &[f32], (&mut [f32], &mut [f32]), usize);
        let sets: [(&str, Lin, Tail); 2] = [
            ("dispatched", lin_comb, pade_tail),
            ("portable", portable::lin_comb, portable::pade_tail),
        ];
        for ((set, lin, tail), n) in sets.into_iter().flat_map(|s| [(s, 5), (s, 64)]) {
            let matrix =
                |seed: usize| -> Vec<f32> { (0..n * n).map(|k| spread(k, seed, 9)).collect() };
            let (x, u) = ([matrix(1), matrix(2), matrix(3)], matrix(4));
            let coefs = [1.0f32 / 9.0, 1.0 / 1008.0, -3.5e-7];
            for (count, eye) in [(1, 1.0f32), (2, 1.0), (3, 1.0), (2, 0.0)] {
                let terms: Vec<(&[f32], f32)> = x
                    .iter()
                    .zip(coefs)
                    .take(count)
                    .map(|(x, c)| (&x[..], c))
                    .collect();
                let mut v = vec![0.0; n * n];
                let (mut q, mut p) = (vec![f32::NAN; n * n], vec![f32::NAN; n * n]);
                // SAFETY: the dispatched pair checks the CPU itself; the portable code needs no
                // feature.
                unsafe {
                    lin(&terms, &mut v, false);
                    tail(&terms, eye, &u, (&mut q, &mut p), n);
                }
                if eye != 0.0 {
                    for d in 0..n {
                        v[d * n + d] += eye;
                    }
                }
                let want: Vec<(u32, u32)> = v
                    .iter()
                    .zip(&u)
                    .map(|(v, u)| ((v - u).to_bits(), (v + u).to_bits()))
                    .collect();
                let got: Vec<(u32, u32)> = q
                    .iter()
                    .zip(&p)
                    .map(|(q, p)| (q.to_bits(), p.to_bits()))
                    .collect();
                assert_eq!(
                    got, want,
                    "{set}, n = {n}, {count} terms, identity term {eye}"
                );
            }
        }
    }

    #[test]
    fn ahead_hands_out_every_line_once_in_order() {
        // Addresses only (a prefetch never reads them): 40 floats from 16 bytes into a line
        // span 3 lines, 33 floats from a line's start 3, and an empty range none. Handed out
        // 2 at a time they must come back as consecutive lines, in order, each once.
        let at = |address: usize| address as *const f32;
        let ahead = Ahead::new([(at(0x1010), 40), (at(0x2000), 33), (at(0x3000), 0)]);
        assert_eq!(ahead.lines(), 6);
        let want = [0x1000, 0x1040, 0x1080, 0x2000, 0x2040, 0x2080];
        assert_eq!(ahead.addresses().collect::<Vec<_>>(), want);
        let mut got = Vec::new();
        let mut rest = ahead;
        while rest.lines() > 0 {
            let (now, left) = rest.split(2);
            assert_eq!(now.lines(), 2);
            got.extend(now.addresses());
            rest = left;
        }
        assert_eq!(got, want);
        // Asking for more than is left takes what is left.
        let (now, left) = ahead.split(10);
        assert_eq!((now.lines(), left.lines()), (6, 0));
    }

    fn naive(a: &[f32], b: &[f32], n: usize) -> Vec<f64> {
        (0..n * n)
            .map(|ij| {
                let (i, j) = (ij / n, ij % n);
                (0..n)
                    .map(|k| a[i * n + k] as f64 * b[k * n + j] as f64)
                    .sum()
            })
            .collect()
    }

    /// Entry k of a test matrix (`seed` picks the matrix): a value in [-0.5, 0.5) times a power of
    /// two among `binades` around 1, so that sums lose bits when their order changes.
    fn spread(k: usize, seed: usize, binades: i32) -> f32 {
        let v = ((k * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5;
        v * 2f32.powi((k * 31 + seed) as i32 % binades - binades / 2)
    }

    /// An n x n matrix whose entries' magnitudes come from a small set, so that pivot candidates
    /// tie, with a zero diagonal, so that the first step exchanges rows.
    fn tied(n: usize) -> Vec<f32> {
        (0..n * n)
            .map(|k| match (k / n, k % n) {
                (i, j) if i == j => 0.0,
                (i, j) => [-2.0, -1.0, 0.5, 1.0, 2.0][(i * 7 + j * 3) % 5] * (1.0 + j as f32),
            })
            .collect()
    }

    /// The bits of a factorisation's result: U on and above the diagonal, L below it (the rest
    /// is scratch).
    fn factor_bits(u: &[f32], l: &[f32], n: usize) -> Vec<u32> {
        (0..n * n)
            .map(|k| if k % n >= k / n { u[k] } else { l[k] }.to_bits())
            .collect()
    }

    /// The column-major panels ([`Columns`]) factor as the row-major ones do, to the bit: the
    /// same pivots (ties in magnitude go to the first row, NaN never wins), multipliers and U,
    /// with and without FMA, on sizes with a narrower last panel and rows left over from the
    /// 8 x 8 transposes.
    #[test]
    fn column_panels_factor_as_row_panels_do() {
        fn factors<F: Fma>(a: &[f32], n: usize, columns: bool) -> (Vec<u32>, Vec<usize>) {
            let (mut u, mut l, mut perm) = (a.to_vec(), vec![0.0; n * n], vec![0; n]);
            if columns {
                lu_factor_body::<F, 4, 8, true>(&mut u, &mut l, &mut perm, n);
            } else {
                lu_factor_body::<F, 4, 8, false>(&mut u, &mut l, &mut perm, n);
            }
            (factor_bits(&u, &l, n), perm)
        }
        for n in [8, 13, 21, 64, 100, 128] {
            let mut a = tied(n);
            let rows = factors::<Unfused>(&a, n, false);
            assert_eq!(factors::<Unfused>(&a, n, true), rows, "n = {n}");
            assert_eq!(
                factors::<Fused>(&a, n, true),
                factors::<Fused>(&a, n, false),
                "n = {n}, fused"
            );
            // The pivots moved rows, and the same ones; a NaN below the first pivot is never
            // chosen and spreads the same way.
            assert_ne!(
                rows.1,
                (0..n).collect::<Vec<_>>(),
                "n = {n}: no row exchanged"
            );
            a[(n - 1) * n] = f32::NAN;
            assert_eq!(
                factors::<Unfused>(&a, n, true),
                factors::<Unfused>(&a, n, false),
                "n = {n}, NaN"
            );
        }
    }

    /// The factorisation and both solves of every instantiation this CPU can run (the portable
    /// one always: other CPUs run it, and its tiles are 4 x 8 instead of 6 x 32), on sizes that
    /// reach every row block, column strip and a narrower last panel, with column-major panels
    /// (n <= 128) and without (129, 136).
    #[test]
    fn lu_of_every_instruction_set_solves_both_systems() {
        type Kernels = (
            unsafe fn(&mut [f32], &mut [f32], &mut [usize], usize),
            unsafe fn(&[f32], &[f32], &[usize], &mut [f32], &mut [f32], usize),
            unsafe fn(&[f32], &[f32], &[usize], &mut [f32], &mut [f32], usize),
        );
        let mut sets: Vec<(&str, Kernels)> = vec![(
            "portable",
            (
                portable::lu_factor,
                portable::lu_solve,
                portable::lu_solve_transposed,
            ),
        )];
        #[cfg(target_arch = "x86_64")]
        {
            if matches!(isa(), Isa::Avx2 | Isa::Avx512) {
                sets.push((
                    "avx2",
                    (avx2::lu_factor, avx2::lu_solve, avx2::lu_solve_transposed),
                ));
            }
            if isa() == Isa::Avx512 {
                sets.push((
                    "avx512",
                    (
                        avx512::lu_factor,
                        avx512::lu_solve,
                        avx512::lu_solve_transposed,
                    ),
                ));
            }
        }
        for n in [2, 3, 7, 13, 33, 64, 70, 128, 129, 136] {
            // Zero diagonal: the first step exchanges rows.
            let a: Vec<f32> = (0..n * n)
                .map(|k| match (k / n, k % n) {
                    (i, j) if i == j => 0.0,
                    (i, j) => {
                        ((i * 7 + j * 13) % 17) as f32 / 17.0 - 0.5 + (i == j + 1) as u8 as f32
                    }
                })
                .collect();
            let x: Vec<f32> = (0..n * n)
                .map(|k| ((k * 29) % 23) as f32 / 23.0 - 0.5)
                .collect();
            let at: Vec<f32> = (0..n * n).map(|k| a[(k % n) * n + k / n]).collect();
            for (name, (factor, solve, solve_t)) in &sets {
                let (mut u, mut l, mut perm) = (a.clone(), vec![0.0; n * n], vec![0; n]);
                let mut b: Vec<f32> = naive(&a, &x, n).iter().map(|&v| v as f32).collect();
                let mut c: Vec<f32> = naive(&at, &x, n).iter().map(|&v| v as f32).collect();
                let mut tmp = vec![0.0; n * n];
                // SAFETY: each set is listed only where `isa()` reported its features.
                unsafe {
                    factor(&mut u, &mut l, &mut perm, n);
                    solve(&u, &l, &perm, &mut b, &mut tmp, n);
                    solve_t(&u, &l, &perm, &mut c, &mut tmp, n);
                }
                for (what, got) in [("A X = B", &b), ("A^T X = C", &c)] {
                    // NaN must fail (f32::max would drop it).
                    let err = got
                        .iter()
                        .zip(&x)
                        .map(|(g, w)| (g - w).abs())
                        .fold(0.0f32, |m, e| if e.is_nan() || e > m { e } else { m });
                    assert!(err < 1e-3, "{name}, n = {n}, {what}: max error {err:.2e}");
                }
            }
        }
    }

    /// The 64 x 64 factorisations in intrinsics (`n64`: groups of 4 columns on AVX-512,
    /// left-looking panels on AVX2) give the generic blocked body's factors to the bit: the
    /// same pivots, multipliers and U, on matrices that exchange rows, tie in magnitude, hold a
    /// NaN or an infinity below the first pivot, or are singular (whose NaNs are compared as
    /// NaN).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn factorisation_of_64_in_intrinsics_matches_the_generic_body_to_the_bit() {
        type Factor = unsafe fn(&mut [f32], &mut [f32], &mut [usize], usize);
        let sets: Vec<(&str, Factor)> = match isa() {
            Isa::Avx512 => vec![("avx512", avx512::lu_factor), ("avx2", avx2::lu_factor)],
            Isa::Avx2 => vec![("avx2", avx2::lu_factor)],
            Isa::Portable => {
                eprintln!("skipped: this CPU has neither AVX-512 nor AVX2");
                return;
            }
        };
        const N: usize = 64;
        fn factors(a: &[f32], fast: Option<Factor>) -> (Vec<u32>, Vec<usize>) {
            let (mut u, mut l, mut perm) = (a.to_vec(), vec![0.0; N * N], vec![0; N]);
            // SAFETY: the CPU has the set's features (checked by the caller); every buffer is
            // N x N.
            unsafe {
                match fast {
                    Some(factor) => factor(&mut u, &mut l, &mut perm, N),
                    None => lu_factor_body::<Fused, 6, 32, true>(&mut u, &mut l, &mut perm, N),
                }
            }
            (factor_bits(&u, &l, N), perm)
        }
        let value = |k: usize, seed: usize| spread(k, seed, 21);
        let spread: Vec<f32> = (0..N * N)
            .map(|k| if k / N == k % N { 0.0 } else { value(k, 1) })
            .collect();
        let ties = tied(N);
        let mut with_nan = spread.clone();
        with_nan[40 * N + 3] = f32::NAN;
        let mut with_inf = spread.clone();
        with_inf[20 * N + 9] = f32::INFINITY;
        let mut singular = ties.clone();
        for i in 0..N {
            singular[i * N + 5] = 0.0;
        }
        let matrices = [
            ("spread", &spread),
            ("ties", &ties),
            ("NaN", &with_nan),
            ("infinity", &with_inf),
            ("singular", &singular),
        ];
        for ((what, a), (set, factor)) in matrices
            .into_iter()
            .flat_map(|m| sets.iter().map(move |&s| (m, s)))
        {
            let what = format!("{set}, {what}");
            let (fast, generic) = (factors(a, Some(factor)), factors(a, None));
            assert_ne!(
                generic.1,
                (0..N).collect::<Vec<_>>(),
                "{what}: no row exchanged"
            );
            assert_eq!(fast.1, generic.1, "{what}: pivots");
            // NaN is NaN: where several operands of an instruction are NaN, which one it returns
            // (and so the sign a singular matrix's NaNs carry) depends on the instruction's form,
            // which the compiler picks.
            let same = |f: u32, g: u32| {
                f == g || (f32::from_bits(f).is_nan() && f32::from_bits(g).is_nan())
            };
            let first = fast
                .0
                .iter()
                .zip(&generic.0)
                .position(|(&f, &g)| !same(f, g));
            assert_eq!(first, None, "{what}: first entry that differs");
            if what.ends_with("singular") {
                assert!(
                    fast.0.iter().any(|&f| f32::from_bits(f).is_nan()),
                    "no NaN in {what}"
                );
            }
        }
    }

    /// The 64 x 64 solves in intrinsics (`n64`) give the generic bodies' bits on AVX2 (6-row
    /// blocks, 16-wide strips) and AVX-512 (6-row blocks, 32-wide strips), on a factorisation
    /// with row exchanges and right-hand sides whose magnitudes span many binades; `tmp` starts
    /// as NaN, so a read of a row not yet solved would show.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn solves_of_64_in_intrinsics_match_the_generic_bodies_to_the_bit() {
        type Solve = unsafe fn(&[f32], &[f32], &[usize], &mut [f32], &mut [f32], usize);
        // Per instruction set: the dispatched pair (the intrinsics at n = 64) and the generic
        // bodies with that set's blocks, compiled for it.
        let mut sets: Vec<(&str, [Solve; 2], [Solve; 2])> = Vec::new();
        if matches!(isa(), Isa::Avx2 | Isa::Avx512) {
            sets.push((
                "avx2",
                [avx2::lu_solve, avx2::lu_solve_transposed],
                [generic::avx2_solve, generic::avx2_solve_transposed],
            ));
        }
        if isa() == Isa::Avx512 {
            sets.push((
                "avx512",
                [avx512::lu_solve, avx512::lu_solve_transposed],
                [generic::avx512_solve, generic::avx512_solve_transposed],
            ));
        }
        if sets.is_empty() {
            eprintln!("skipped: this CPU has neither AVX2 nor AVX-512");
            return;
        }
        const N: usize = 64;
        let value = |k: usize, seed: usize| spread(k, seed, 21);
        let mut a: Vec<f32> = (0..N * N).map(|k| value(k, 1)).collect();
        // Rows 0..8 all but zero on the diagonal: the first steps exchange rows.
        for i in 0..8 {
            a[i * N + i] = 0.0;
        }
        let (mut u, mut l, mut perm) = (a.clone(), vec![0.0; N * N], vec![0; N]);
        lu_factor(&mut u, &mut l, &mut perm, N);
        assert_ne!(perm, (0..N).collect::<Vec<_>>(), "no row exchanged");
        // Unit diagonal entries in U at a few rows, where the generic body skips the scaling and
        // the intrinsics multiply by 1 (which changes no value).
        for i in [5, 30, 63] {
            u[i * N + i] = 1.0;
        }
        let b: Vec<f32> = (0..N * N).map(|k| value(k, 2)).collect();
        let run = |solve: Solve| {
            let (mut x, mut tmp) = (b.clone(), vec![f32::NAN; N * N]);
            // SAFETY: the CPU has the set's features (checked above); every buffer is N x N.
            unsafe { solve(&u, &l, &perm, &mut x, &mut tmp, N) };
            x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        for (name, fast, generic) in sets {
            for (t, (&fast, &generic)) in fast.iter().zip(&generic).enumerate() {
                let (fast, generic) = (run(fast), run(generic));
                assert!(generic.iter().all(|&v| f32::from_bits(v).is_finite()));
                let first = fast.iter().zip(&generic).position(|(f, g)| f != g);
                assert_eq!(
                    first,
                    None,
                    "{name}, transposed {}: first entry that differs",
                    t == 1
                );
            }
        }
    }

    /// The generic solve bodies with the blocks of the AVX2 and AVX-512 instantiations, compiled
    /// for those sets, for comparison with what the instantiations dispatch to at n = 64.
    #[cfg(target_arch = "x86_64")]
    mod generic {
        use super::super::*;

        macro_rules! bodies {
            ($solve:ident, $transposed:ident, $width:literal, $($feature:literal),+) => {
                $(#[target_feature(enable = $feature)])+
                pub(super) unsafe fn $solve(
                    u: &[f32],
                    l: &[f32],
                    perm: &[usize],
                    b: &mut [f32],
                    tmp: &mut [f32],
                    n: usize,
                ) {
                    lu_solve_body::<Fused, { n64::ROWS }, $width>(u, l, perm, b, tmp, n)
                }
                $(#[target_feature(enable = $feature)])+
                pub(super) unsafe fn $transposed(
                    u: &[f32],
                    l: &[f32],
                    perm: &[usize],
                    b: &mut [f32],
                    tmp: &mut [f32],
                    n: usize,
                ) {
                    lu_solve_transposed_body::<Fused, { n64::ROWS }, $width>(u, l, perm, b, tmp, n)
                }
            };
        }
        bodies!(avx2_solve, avx2_solve_transposed, 16, "avx2", "fma");
        bodies!(
            avx512_solve,
            avx512_solve_transposed,
            32,
            "avx512f",
            "avx2",
            "fma"
        );
    }

    #[test]
    fn transpose_moves_every_entry_for_every_edge_case() {
        for n in [1, 5, 8, 13, 64, 67] {
            let a: Vec<f32> = (0..n * n).map(|k| k as f32).collect();
            // The dispatched version and the scalar one (all a CPU without AVX runs).
            let mut t = vec![f32::NAN; n * n];
            transpose(&a, &mut t, n);
            let mut scalar = vec![f32::NAN; n * n];
            transpose_blocks(&a, &mut scalar, n, 0);
            for i in 0..n {
                for j in 0..n {
                    assert_eq!(t[j * n + i], a[i * n + j], "n = {n}, ({i}, {j})");
                    assert_eq!(scalar[j * n + i], a[i * n + j], "n = {n}, ({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn linear_combinations_sum_every_term_fresh_and_accumulated() {
        // Ten terms over a length past the last full strip, then once more on top.
        let len = 77;
        let xs: Vec<Vec<f32>> = (0..10)
            .map(|t| {
                (0..len)
                    .map(|k| ((k * 7 + t * 3) % 11) as f32 - 5.0)
                    .collect()
            })
            .collect();
        let terms: Vec<(&[f32], f32)> = xs
            .iter()
            .enumerate()
            .map(|(t, x)| (&x[..], 0.5 - t as f32 * 0.25))
            .collect();
        let mut out = vec![f32::NAN; len];
        lin_comb(&terms, &mut out, false);
        lin_comb(&terms[..3], &mut out, true);
        for k in 0..len {
            let sum = |ts: &[(&[f32], f32)]| ts.iter().map(|(x, c)| c * x[k]).sum::<f32>();
            let want = sum(&terms) + sum(&terms[..3]);
            assert!(
                (out[k] - want).abs() < 1e-4 * (1.0 + want.abs()),
                "entry {k}"
            );
        }
    }

    /// The product of every instruction set sums each entry over k in order, one multiply-add
    /// at a time (fused where the set has them), whatever its tiles: the bits of the loop
    /// `Product::entry` runs, fresh and added to what C holds, with sizes that leave rows to
    /// every smaller tile (63 = 7 x 8 + 4 + 2 + 1) and columns to the narrow strips, and
    /// values scaled by 2^-20 to 2^20 so that another order of the sums would show.
    #[test]
    fn matmul_of_every_instruction_set_sums_each_entry_in_order() {
        type Kernel = unsafe fn(&[f32], &[f32], &mut [f32], usize, bool);
        type MulAdd = fn(f32, f32, f32) -> f32;
        let mut sets: Vec<(&str, Kernel, MulAdd)> =
            vec![("portable", portable::matmul, Unfused::fma)];
        #[cfg(target_arch = "x86_64")]
        {
            if matches!(isa(), Isa::Avx2 | Isa::Avx512) {
                sets.push(("avx2", avx2::matmul, Fused::fma));
            }
            if isa() == Isa::Avx512 {
                sets.push(("avx512", avx512::matmul, Fused::fma));
            }
        }
        let value = |k: usize, seed: usize| spread(k, seed, 41);
        for (name, matmul, fma) in sets {
            for n in [1, 2, 3, 7, 16, 63, 64, 65, 130] {
                let a: Vec<f32> = (0..n * n).map(|k| value(k, 1)).collect();
                let b: Vec<f32> = (0..n * n).map(|k| value(k, 2)).collect();
                let start: Vec<f32> = (0..n * n).map(|k| value(k, 3)).collect();
                for accumulate in [false, true] {
                    let mut c = if accumulate {
                        start.clone()
                    } else {
                        vec![f32::NAN; n * n]
                    };
                    // SAFETY: a, b and c are n x n; the set's instructions were detected.
                    unsafe { matmul(&a, &b, &mut c, n, accumulate) };
                    for i in 0..n {
                        for j in 0..n {
                            let mut s = if accumulate { start[i * n + j] } else { 0.0 };
                            for k in 0..n {
                                s = fma(a[i * n + k], b[k * n + j], s);
                            }
                            assert_eq!(
                                c[i * n + j].to_bits(),
                                s.to_bits(),
                                "{name}, n = {n}, accumulate {accumulate}: entry ({i}, {j})"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn matmul_matches_the_naive_product_for_every_shape_branch() {
        for n in [1, 2, 3, 7, 16, 63, 64, 65, 130] {
            let a: Vec<f32> = (0..n * n)
                .map(|k| ((k * 37 % 11) as f32 - 5.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..n * n)
                .map(|k| ((k * 53 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let mut c = vec![1.0f32; n * n];
            matmul(&a, &b, &mut c, n, true);
            let want = naive(&a, &b, n);
            for (x, y) in c.iter().zip(&want) {
                assert!(
                    (*x as f64 - (y + 1.0)).abs() < 1e-4 * (1.0 + y.abs()),
                    "n = {n}"
                );
            }
            let mut v = vec![0.0f32; n];
            matvec(&a, &b[..n], &mut v, n);
            for i in 0..n {
                let want: f64 = (0..n).map(|k| a[i * n + k] as f64 * b[k] as f64).sum();
                assert!((v[i] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()));
            }
            // x^T B, fresh and added to what y holds.
            let mut y = vec![2.0f32; n];
            vecmat(&a[..n], &b, &mut y, n, true);
            let mut fresh = vec![f32::NAN; n];
            vecmat(&a[..n], &b, &mut fresh, n, false);
            for j in 0..n {
                let want: f64 = (0..n).map(|k| a[k] as f64 * b[k * n + j] as f64).sum();
                assert!(
                    (y[j] as f64 - want - 2.0).abs() < 1e-4 * (1.0 + want.abs()),
                    "n = {n}"
                );
                assert!(
                    (fresh[j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                    "n = {n}"
                );
            }
            // Both at once, over different matrices: the same bits as one at a time.
            let (mut y2, mut fresh2) = (vec![2.0f32; n], vec![f32::NAN; n]);
            vecmat_pair(
                VecMat {
                    x: &b[n * (n - 1)..],
                    m: &a,
                    y: &mut fresh2,
                    accumulate: false,
                },
                VecMat {
                    x: &a[..n],
                    m: &b,
                    y: &mut y2,
                    accumulate: true,
                },
                n,
            );
            let mut other = vec![f32::NAN; n];
            vecmat(&b[n * (n - 1)..], &a, &mut other, n, false);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y2), bits(&y), "n = {n}");
            assert_eq!(bits(&fresh2), bits(&other), "n = {n}");
            // C += P^T Q with 3 rows: the sum of three outer products.
            let depth = 3.min(n);
            let mut c = vec![1.0f32; n * n];
            gemm_tn(&a, &b, &mut c, n, depth);
            for i in 0..n {
                for j in 0..n {
                    let want: f64 = (0..depth)
                        .map(|k| a[k * n + i] as f64 * b[k * n + j] as f64)
                        .sum::<f64>()
                        + 1.0;
                    let got = c[i * n + j] as f64;
                    assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "n = {n}");
                }
            }
        }
    }

    /// The shifted product (with 9, 4, 2 and 1 offsets) and Gram (rows of `y` at a stride of
    /// their own) kernels of every instruction set the CPU has against their definitions in
    /// f64, with output rows left over by every tile height (11 = 8 + 3 = 4 + 4 + 3) and two
    /// tile widths of positions.
    #[test]
    #[cfg(feature = "layers")]
    fn shifted_kernels_of_every_instruction_set_match_their_definitions() {
        type Kernels = (
            unsafe fn(&Shifted<'_>, &mut [f32]),
            unsafe fn(&Shifted<'_>, &[f32], &mut [f32]),
        );
        let mut sets: Vec<(&str, Kernels)> = vec![(
            "portable",
            (portable::shifted_product, portable::shifted_gram),
        )];
        #[cfg(target_arch = "x86_64")]
        {
            if matches!(isa(), Isa::Avx2 | Isa::Avx512) {
                sets.push(("avx2", (avx2::shifted_product, avx2::shifted_gram)));
            }
            if isa() == Isa::Avx512 {
                sets.push(("avx512", (avx512::shifted_product, avx512::shifted_gram)));
            }
        }
        let (a, b, cols) = (11, 3, 2 * SHIFT_ALIGN);
        let shifts = [0, 1, 2, 9, 10, 11, 18, 19, 20];
        let ld = cols + 20;
        // The Gram's y with a row stride of its own.
        let y_ld = cols + 7;
        let value = |i: usize, seed: usize| ((i * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5;
        let w: Vec<f32> = (0..9 * a * b).map(|i| value(i, 1)).collect();
        let x: Vec<f32> = (0..b * ld).map(|i| value(i, 2)).collect();
        let y: Vec<f32> = (0..a * y_ld).map(|i| value(i, 3)).collect();
        for (name, (product, gram)) in sets {
            // Every number of offsets the product takes.
            for taps in [&shifts[..], &[0, 1, 9, 10], &[1, 19], &[20]] {
                let k_count = taps.len();
                let s = Shifted {
                    w: &w[..k_count * a * b],
                    x: &x,
                    a,
                    b,
                    ld,
                    y_ld: 0,
                    cols,
                    shifts: taps,
                };
                let mut out = vec![f32::NAN; a * cols];
                s.check();
                // SAFETY: `isa()` reported the set's features; the sizes fit (`check` passes).
                unsafe { product(&s, &mut out) };
                for i in 0..a {
                    for q in 0..cols {
                        let want: f64 = (0..b)
                            .flat_map(|j| (0..k_count).map(move |k| (j, k)))
                            .map(|(j, k)| {
                                w[(i * b + j) * k_count + k] as f64 * x[j * ld + taps[k] + q] as f64
                            })
                            .sum();
                        let got = out[i * cols + q] as f64;
                        assert!(
                            (got - want).abs() < 1e-5,
                            "{name} product, {k_count} offsets ({i}, {q}): {got} vs {want}"
                        );
                    }
                }
            }
            let s = Shifted {
                w: &[],
                x: &x,
                a,
                b,
                ld,
                y_ld,
                cols,
                shifts: &shifts,
            };
            let mut lanes = vec![0.0f32; a * b * 9 * GRAM_LANES];
            // SAFETY: as above.
            unsafe { gram(&s, &y, &mut lanes) };
            let mut sums = vec![0.0f32; a * b * 9];
            fold_lanes(&lanes, &mut sums);
            for i in 0..a {
                for j in 0..b {
                    for k in 0..9 {
                        let want: f64 = (0..cols)
                            .map(|q| y[i * y_ld + q] as f64 * x[j * ld + shifts[k] + q] as f64)
                            .sum();
                        let got = sums[(i * b + j) * 9 + k] as f64;
                        assert!(
                            (got - want).abs() < 1e-4,
                            "{name} gram ({i}, {j}, {k}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
