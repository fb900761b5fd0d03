//! # vlgo-core
//!
//! The numerical core of variational Lie group operators (VLGO): a dictionary of Lie algebra
//! generators Psi_m acting on features, the transport T(c) z = expm(sum_m c_m Psi_m) z, a batched
//! and differentiable matrix exponential and exponential-times-vector product, and the Laplace
//! coefficient distributions of variational sparse coding. Everything is generic over Burn
//! backends.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::prelude::*;
//!
//! let device = Default::default();
//! let a = Tensor::<NdArray, 3>::zeros([2, 4, 4], &device);
//! let t = vlgo_core::expm(a); // identity matrices
//! assert_eq!(t.dims(), [2, 4, 4]);
//! ```
//!
//! Backends: the cargo features `ndarray` (default), `flex`, `wgpu` and `cuda` implement
//! [`ExpmBackend`] for the matching Burn backends; `Autodiff` over any of them gets the
//! exponential's own backward.

pub mod best_of_j;
#[cfg(any(feature = "ndarray", feature = "flex"))]
pub mod cpu;
pub mod error;
pub mod expm;
pub mod laplace;
pub mod loss;
pub mod operators;
pub mod rng;
#[doc(hidden)]
pub mod testing;

pub use best_of_j::{BestOfJ, best_of_j, best_of_j_seeded};
pub use laplace::{
    FixedPrior, LaplaceParams, Threshold, ThresholdVariant, WarmupBlend, kl_divergence,
    laplace_noise, sample, warmup_prior,
};
pub use loss::{distance_improvement, manifold_loss};
pub use operators::{BlockLayout, LieOperators, LieOperatorsConfig, OperatorForm, TransportMethod};
pub use rng::NoiseStreams;

pub use error::{Result, VlgoError};
pub use expm::{
    ExpmBackend, ExpmConfig, ExpmMethod, ExpmvConfig, expm, expm_with, expmv, expmv_with, try_expm,
    try_expm_nd, try_expmv,
};
