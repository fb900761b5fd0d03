//! Helpers shared by the suite: tensors from host data, host references, random matrices.

use burn::prelude::*;
use burn::tensor::DType;
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use vlgo_core::StreamRng;
pub use vlgo_core::testing::{
    TestAutodiffBackend as AD, TestBackend as B, rel_frobenius_host, supports_f64, to_f64,
};

/// Unit roundoff of f32.
pub const U32: f64 = 5.960464477539063e-8;

pub fn device() -> burn::tensor::Device<B> {
    Default::default()
}

/// A [N, n, n] tensor from row-major host data in the given dtype.
pub fn batch<BK: Backend>(data: &[f64], n: usize, dtype: DType) -> Tensor<BK, 3> {
    let count = data.len() / (n * n);
    Tensor::<BK, 1>::from_data(
        TensorData::new(data.to_vec(), [data.len()]),
        (&Default::default(), dtype),
    )
    .reshape([count, n, n])
}

/// Independent float64 reference: nalgebra's matrix exponential.
pub fn reference_expm(a: &[f64], n: usize) -> Vec<f64> {
    let m = DMatrix::from_row_slice(n, n, a);
    let e = m.exp();
    let mut out = Vec::with_capacity(n * n);
    for i in 0..n {
        for j in 0..n {
            out.push(e[(i, j)]);
        }
    }
    out
}

/// Spectral norm (largest singular value).
pub fn two_norm(a: &[f64], n: usize) -> f64 {
    let m = DMatrix::from_row_slice(n, n, a);
    m.singular_values().max()
}

/// The accuracy bar of `expm.md` for f32 compute: 10 (1 + ||A||_2) 2^-24.
pub fn f32_bar(a: &[f64], n: usize) -> f64 {
    10.0 * (1.0 + two_norm(a, n)) * U32
}

/// Dense Gaussian matrix scaled to a given 1-norm.
pub fn random_matrix(rng: &mut StreamRng, n: usize, norm1: f64) -> Vec<f64> {
    let mut a: Vec<f64> = (0..n * n).map(|_| gaussian(rng)).collect();
    let current = one_norm(&a, n);
    for x in &mut a {
        *x *= norm1 / current;
    }
    a
}

pub fn one_norm(a: &[f64], n: usize) -> f64 {
    (0..n)
        .map(|j| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max)
}

pub fn gaussian(rng: &mut StreamRng) -> f64 {
    // Box-Muller: rand_distr is not a dependency of this crate.
    let u1: f64 = rng.random::<f64>().max(1e-300);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

pub fn rng(seed: u64) -> StreamRng {
    StreamRng::seed_from_u64(seed)
}

/// A random orthogonal matrix (QR of a Gaussian matrix).
pub fn random_orthogonal(rng: &mut StreamRng, n: usize) -> DMatrix<f64> {
    let g = DMatrix::from_fn(n, n, |_, _| gaussian(rng));
    g.qr().q()
}

pub fn row_major(m: &DMatrix<f64>) -> Vec<f64> {
    let (r, c) = m.shape();
    (0..r)
        .flat_map(|i| (0..c).map(move |j| m[(i, j)]))
        .collect()
}

/// Block-diagonal rotation generator with the given frequencies (n = 2 * len).
pub fn rotation_blocks(freqs: &[f64], damping: f64) -> (Vec<f64>, Vec<f64>) {
    let n = 2 * freqs.len();
    let mut a = vec![0.0; n * n];
    let mut e = vec![0.0; n * n];
    for (k, &w) in freqs.iter().enumerate() {
        let (i, j) = (2 * k, 2 * k + 1);
        a[i * n + i] = damping;
        a[j * n + j] = damping;
        a[i * n + j] = w;
        a[j * n + i] = -w;
        let g = damping.exp();
        e[i * n + i] = g * w.cos();
        e[j * n + j] = g * w.cos();
        e[i * n + j] = g * w.sin();
        e[j * n + i] = -g * w.sin();
    }
    (a, e)
}

/// The float64 block trick: the upper-right block of expm([[A^T, G], [0, A^T]]).
pub fn block_trick(a: &[f64], g: &[f64], n: usize) -> Vec<f64> {
    let at = DMatrix::from_row_slice(n, n, a).transpose();
    let gm = DMatrix::from_row_slice(n, n, g);
    let mut big = DMatrix::zeros(2 * n, 2 * n);
    big.view_mut((0, 0), (n, n)).copy_from(&at);
    big.view_mut((n, n), (n, n)).copy_from(&at);
    big.view_mut((0, n), (n, n)).copy_from(&gm);
    let e = big.exp();
    row_major(&e.view((0, n), (n, n)).into_owned())
}
