//! Small dense f32 kernels on row-major n x n matrices held in cache: matrix product, axpy and
//! dot. The bodies are plain loops over fixed-width chunks that the compiler vectorises; they are
//! compiled three times (AVX-512, AVX2 + FMA, portable) and the widest the CPU has is chosen once
//! at run time, so one binary runs everywhere and uses AVX-512 where it exists.

use std::sync::OnceLock;

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

/// C (+)= A B for row-major n x n matrices, in R x W register tiles, then narrower tiles and
/// single columns for the edges.
#[inline(always)]
fn matmul_body<F: Fma, const R: usize, const W: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    n: usize,
    accumulate: bool,
) {
    let mut j0 = 0;
    while j0 + W <= n {
        let mut i0 = 0;
        while i0 + R <= n {
            tile::<F, R, W>(a, b, c, n, (i0, j0), accumulate);
            i0 += R;
        }
        while i0 < n {
            tile::<F, 1, W>(a, b, c, n, (i0, j0), accumulate);
            i0 += 1;
        }
        j0 += W;
    }
    while j0 + 8 <= n {
        for i0 in 0..n {
            tile::<F, 1, 8>(a, b, c, n, (i0, j0), accumulate);
        }
        j0 += 8;
    }
    for j in j0..n {
        for i in 0..n {
            let mut s = if accumulate { c[i * n + j] } else { 0.0 };
            for k in 0..n {
                s = F::fma(a[i * n + k], b[k * n + j], s);
            }
            c[i * n + j] = s;
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

/// y = A x for a row-major n x n A (eight partial sums per row keep the adds independent).
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

/// LU with partial pivoting in place (see [`lu_factor`]).
#[inline(always)]
fn lu_factor_body<F: Fma>(a: &mut [f32], perm: &mut [usize], n: usize) {
    for (i, p) in perm.iter_mut().enumerate().take(n) {
        *p = i;
    }
    for k in 0..n {
        let mut piv = k;
        let mut best = a[k * n + k].abs();
        for i in k + 1..n {
            let v = a[i * n + k].abs();
            if v > best {
                best = v;
                piv = i;
            }
        }
        if piv != k {
            for j in 0..n {
                a.swap(k * n + j, piv * n + j);
            }
            perm.swap(k, piv);
        }
        let inv = 1.0 / a[k * n + k];
        let (top, rest) = a.split_at_mut((k + 1) * n);
        let pivot_row = &top[k * n + k + 1..k * n + n];
        for row in rest.chunks_exact_mut(n) {
            let l = row[k] * inv;
            row[k] = l;
            if l != 0.0 {
                axpy_body::<F>(-l, pivot_row, &mut row[k + 1..n]);
            }
        }
    }
}

/// Solve with the LU factors (see [`lu_solve`]).
#[inline(always)]
fn lu_solve_body<F: Fma>(lu: &[f32], perm: &[usize], b: &mut [f32], tmp: &mut [f32], n: usize) {
    for (i, &p) in perm.iter().enumerate().take(n) {
        tmp[i * n..i * n + n].copy_from_slice(&b[p * n..p * n + n]);
    }
    for i in 1..n {
        let (done, row) = tmp.split_at_mut(i * n);
        let row = &mut row[..n];
        for k in 0..i {
            let l = lu[i * n + k];
            if l != 0.0 {
                axpy_body::<F>(-l, &done[k * n..k * n + n], row);
            }
        }
    }
    for i in (0..n).rev() {
        let (head, tail) = tmp.split_at_mut((i + 1) * n);
        let row = &mut head[i * n..i * n + n];
        for k in i + 1..n {
            let u = lu[i * n + k];
            if u != 0.0 {
                axpy_body::<F>(-u, &tail[(k - i - 1) * n..(k - i - 1) * n + n], row);
            }
        }
        let inv = 1.0 / lu[i * n + i];
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
    b[..n * n].copy_from_slice(&tmp[..n * n]);
}

macro_rules! instantiate {
    ($name:ident, $fma:ty, $rows:literal, $width:literal, $($feature:literal),*) => {
        mod $name {
            use super::*;
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize, acc: bool) {
                matmul_body::<$fma, $rows, $width>(a, b, c, n, acc)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
                axpy_body::<$fma>(alpha, x, y)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lu_factor(a: &mut [f32], perm: &mut [usize], n: usize) {
                lu_factor_body::<$fma>(a, perm, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn lu_solve(lu: &[f32], perm: &[usize], b: &mut [f32], tmp: &mut [f32], n: usize) {
                lu_solve_body::<$fma>(lu, perm, b, tmp, n)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matvec(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
                matvec_body::<$fma>(a, x, y, n)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
// Tiles: 6 x 32 (12 of 32 zmm), 6 x 16 (12 of 16 ymm), 4 x 8 (8 of 16 xmm).
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

/// The widest instruction set available, detected once.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    })
}

macro_rules! dispatch {
    ($f:ident ( $($arg:expr),* )) => {
        match isa() {
            // SAFETY: `isa()` reported these features on the running CPU.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { avx512::$f($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { avx2::$f($($arg),*) },
            // SAFETY: the portable build enables no feature.
            _ => unsafe { portable::$f($($arg),*) },
        }
    };
}

/// C = A B (`accumulate` false) or C += A B, row-major n x n.
pub fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize, accumulate: bool) {
    debug_assert!(a.len() >= n * n && b.len() >= n * n && c.len() >= n * n);
    dispatch!(matmul(a, b, c, n, accumulate))
}

/// Below this length plain loops beat the dispatch and vector set-up.
const SMALL: usize = 8;

/// y += alpha x.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    if x.len() < SMALL {
        y.iter_mut().zip(x).for_each(|(yi, &xi)| *yi += alpha * xi);
        return;
    }
    dispatch!(axpy(alpha, x, y))
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

/// Factors `a` (row-major n x n) in place into L (unit lower, below the diagonal) and U with
/// partial pivoting; `perm[i]` is the original row of row i. A zero or NaN pivot leaves Inf/NaN in
/// the factors (the solve then returns non-finite values), never a panic.
pub fn lu_factor(a: &mut [f32], perm: &mut [usize], n: usize) {
    dispatch!(lu_factor(a, perm, n))
}

/// Solves A X = B from the factors of [`lu_factor`]; `b` (n x n) is overwritten by X, `tmp` is
/// n x n scratch.
pub fn lu_solve(lu: &[f32], perm: &[usize], b: &mut [f32], tmp: &mut [f32], n: usize) {
    dispatch!(lu_solve(lu, perm, b, tmp, n))
}

/// Transpose of a row-major n x n matrix.
pub fn transpose(a: &[f32], out: &mut [f32], n: usize) {
    for i in 0..n {
        for j in 0..n {
            out[j * n + i] = a[i * n + j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }
}
