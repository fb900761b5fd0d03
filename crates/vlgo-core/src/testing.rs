//! Test support, shared by the workspace's test suites: the backend the tests run on and a few
//! comparisons. Not part of the stable API.
//!
//! The backend is `NdArray` unless a `test-*` feature names another (cargo aliases
//! `cargo test-flex`, `cargo test-wgpu`, `cargo test-cuda`, `cargo test-candle`). Candle is a
//! backend the crate ships no kernel for: on it the tests check the tensor-op path that every
//! such backend takes.

use burn::prelude::*;

#[cfg(feature = "test-candle")]
/// The backend the tests run on.
// Burn 0.21 deprecates burn-candle; it stays the pure-Rust backend without our kernels.
#[allow(deprecated)]
pub type TestBackend = burn_candle::Candle;
#[cfg(all(feature = "test-wgpu", not(feature = "test-candle")))]
/// The backend the tests run on.
pub type TestBackend = burn::backend::Wgpu;
#[cfg(all(
    feature = "test-cuda",
    not(any(feature = "test-wgpu", feature = "test-candle"))
))]
/// The backend the tests run on.
pub type TestBackend = burn::backend::Cuda;
#[cfg(all(
    feature = "test-flex",
    not(any(feature = "test-wgpu", feature = "test-cuda", feature = "test-candle"))
))]
/// The backend the tests run on.
pub type TestBackend = burn::backend::Flex;
#[cfg(not(any(
    feature = "test-flex",
    feature = "test-wgpu",
    feature = "test-cuda",
    feature = "test-candle"
)))]
/// The backend the tests run on.
pub type TestBackend = burn::backend::NdArray;

/// [`TestBackend`] with autodiff.
pub type TestAutodiffBackend = burn::backend::Autodiff<TestBackend>;

/// Whether the test backend computes in f64 throughout. Some GPUs have no f64, and Burn 0.21's
/// fusion compiler rejects f64 ("Unsupported precision for fusion: f64") even where the device has
/// it, so fused backends count as without; so does Candle, whose `sum` of an f64 tensor on
/// `Candle<f32>` fails ("unexpected dtype, expected: F32, got: F64").
pub fn supports_f64() -> bool {
    let device = Default::default();
    let name = <TestBackend as Backend>::name(&device);
    <TestBackend as Backend>::supports_dtype(&device, burn::tensor::DType::F64)
        && !name.contains("fusion")
        && !name.contains("candle")
}

/// Largest absolute difference of two tensors.
pub fn max_abs_diff<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    (a - b).abs().max().into_scalar().to_f64()
}

/// ||a - b||_F / ||b||_F over all elements, in f64 on the host.
pub fn rel_frobenius<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    let a = to_f64(a);
    let b = to_f64(b);
    rel_frobenius_host(&a, &b)
}

/// Relative Frobenius error of host vectors.
pub fn rel_frobenius_host(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// A tensor's values as f64 on the host.
pub fn to_f64<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float tensor converts to f64")
}

/// The degree and number of squarings that the f32 exponential of `method` picks for a matrix
/// of 1-norm `norm` (every path picks them so: the CPU kernels, the tensor-op path and the GPU
/// kernels, which plan on the device), for tests that read a plan back.
pub fn f32_expm_plan(norm: f64, method: crate::expm::ExpmMethod) -> (usize, u32) {
    crate::expm::plan::choose(norm, method, crate::expm::plan::Precision::Single)
}
