//! Small dense f32 kernels on row-major n x n matrices held in cache: matrix product, axpy and
//! dot. The bodies are plain loops over fixed-width chunks that the compiler vectorises; they are
//! compiled three times (AVX-512, AVX2 + FMA, portable) and the widest the CPU has is chosen once
//! at run time, so one binary runs everywhere and uses AVX-512 where it exists.

use std::sync::OnceLock;

/// Columns of C kept in registers per pass: 64 f32 = four 512-bit or eight 256-bit registers.
const W: usize = 64;

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

/// C (+)= A B for row-major n x n matrices. Two rows of C at a time, W columns per pass, so the
/// accumulators (2 x W) stay in registers while a row of B streams from L1.
#[inline(always)]
fn matmul_body<F: Fma>(a: &[f32], b: &[f32], c: &mut [f32], n: usize, accumulate: bool) {
    let mut j0 = 0;
    while j0 < n {
        let w = (n - j0).min(W);
        let mut i = 0;
        if w == W {
            while i + 2 <= n {
                let mut acc0 = [0f32; W];
                let mut acc1 = [0f32; W];
                if accumulate {
                    acc0.copy_from_slice(&c[i * n + j0..i * n + j0 + W]);
                    acc1.copy_from_slice(&c[(i + 1) * n + j0..(i + 1) * n + j0 + W]);
                }
                let (ra, rb) = (&a[i * n..i * n + n], &a[(i + 1) * n..(i + 1) * n + n]);
                for k in 0..n {
                    let (x0, x1) = (ra[k], rb[k]);
                    let brow: &[f32; W] = b[k * n + j0..k * n + j0 + W].try_into().unwrap();
                    for j in 0..W {
                        acc0[j] = F::fma(x0, brow[j], acc0[j]);
                        acc1[j] = F::fma(x1, brow[j], acc1[j]);
                    }
                }
                c[i * n + j0..i * n + j0 + W].copy_from_slice(&acc0);
                c[(i + 1) * n + j0..(i + 1) * n + j0 + W].copy_from_slice(&acc1);
                i += 2;
            }
        }
        // Remaining rows, and column tails narrower than W.
        while i < n {
            let mut acc = [0f32; W];
            if accumulate {
                acc[..w].copy_from_slice(&c[i * n + j0..i * n + j0 + w]);
            }
            for k in 0..n {
                let x = a[i * n + k];
                let brow = &b[k * n + j0..k * n + j0 + w];
                for (acc_j, &b_j) in acc[..w].iter_mut().zip(brow) {
                    *acc_j = F::fma(x, b_j, *acc_j);
                }
            }
            c[i * n + j0..i * n + j0 + w].copy_from_slice(&acc[..w]);
            i += 1;
        }
        j0 += W;
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

macro_rules! instantiate {
    ($name:ident, $fma:ty, $($feature:literal),*) => {
        mod $name {
            use super::*;
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize, acc: bool) {
                matmul_body::<$fma>(a, b, c, n, acc)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
                axpy_body::<$fma>(alpha, x, y)
            }
            $(#[target_feature(enable = $feature)])*
            pub unsafe fn matvec(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
                matvec_body::<$fma>(a, x, y, n)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
instantiate!(avx512, Fused, "avx512f", "avx2", "fma");
#[cfg(target_arch = "x86_64")]
instantiate!(avx2, Fused, "avx2", "fma");
instantiate!(portable, Unfused,);

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

/// y += alpha x.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    dispatch!(axpy(alpha, x, y))
}

/// y = A x, row-major n x n.
pub fn matvec(a: &[f32], x: &[f32], y: &mut [f32], n: usize) {
    dispatch!(matvec(a, x, y, n))
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
