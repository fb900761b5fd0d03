//! vlgo-core's integration suite: one test binary, written once against the test backend
//! (`NdArray` by default; `cargo test-flex` / `test-wgpu` run it elsewhere).

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
