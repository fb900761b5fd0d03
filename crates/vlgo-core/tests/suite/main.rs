//! vlgo-core's integration suite: one test binary, written once against the test backend
//! (`NdArray` by default; `cargo test-flex`, `test-wgpu`, `test-cuda` and `test-candle` run it
//! elsewhere). The layer tests need the `layers` feature, which the `test-*` features and a
//! workspace build turn on.

mod common;
mod errors;
mod expm_accuracy;
mod expm_gradients;
mod expmv;
mod laplace;
#[cfg(feature = "layers")]
mod layers;
mod operators;
mod sparse_coding;
