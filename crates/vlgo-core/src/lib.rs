#![cfg_attr(docsrs, feature(doc_cfg))]
// Built without a backend feature, the crate ships no kernel: the kernel side of the routing
// (`expm::backend`, `expm::autodiff`) is then unused, and every backend takes the tensor ops.
#![cfg_attr(
    not(any(
        feature = "ndarray",
        feature = "flex",
        feature = "wgpu",
        feature = "cuda"
    )),
    allow(dead_code, unused_imports)
)]
#![doc = include_str!("../README.md")]
//!
//! ## What is where
//!
//! * [`operators`]: [`LieOperatorsConfig`] and [`LieOperators`] (dense, block-diagonal or
//!   partial generators; transport by `expmv`, by `expm`, or with the generators formed inside
//!   the GPU kernel).
//! * [`mod@expm`]: [`expm()`], [`expmv()`] and their configs; [`ExpmBackend`], the trait a backend
//!   implements to run them on its own kernels.
//! * [`laplace`]: Laplace coefficient distributions, thresholded samples, the KL divergence, the
//!   prior's warm-up; [`rng`]: keyed noise streams that make samples independent of the thread
//!   count; [`mod@best_of_j`]: the best of J prior samples per datum.
//! * [`loss`]: the manifold loss and the distance improvement; [`sparse_coding`]: exact sparse
//!   inference by FISTA (the paper's baseline).
//! * `layers` (feature `layers`): CPU kernels for the ResNet's convolution, batch norm, batched
//!   linear layers and AdamW step, behind Burn's module API. A feature rather than a crate of its
//!   own: the layer kernels share the CPU host adapter, the SIMD code and the backend routing with
//!   the exponential's kernels, which a separate crate would need as public API of this one.
//! * [`cpu`] (features `ndarray`, `flex`) and `gpu` (features `wgpu`, `cuda`): the kernels
//!   behind [`ExpmBackend`]; other dtypes and backends use [`expm::tensor_ops`].
//!
//! ## Backends
//!
//! Everything here is generic over `B: Backend` and runs on every Burn backend: [`ExpmBackend`]
//! and `layers::LayerBackend` are implemented for all of them. Where `B` is a backend whose
//! kernels the crate's features ship (`ndarray`, `flex`: the CPU kernels; `wgpu`, `cuda`: the
//! CubeCL kernels; each also under `Autodiff`), the exponential and the layers run those
//! kernels; on any other backend (`burn-candle`, `burn-tch`, `Router`, ...) they run the same
//! scheme in Burn's tensor operations, which Burn's autodiff differentiates. The test suites run
//! on `burn-candle` to keep that path whole.
//!
//! ## Errors
//!
//! One rule throughout:
//!
//! * **Tensor maths whose only failures are a shape that does not fit (or a dtype it does not
//!   take)** panics, like Burn's own operations, and has a `try_*` twin that returns [`Result`] instead: [`expm()`] /
//!   [`try_expm`], [`expmv()`] / [`try_expmv`], [`sample`] / [`try_sample`], [`kl_divergence`] /
//!   [`try_kl_divergence`], [`manifold_loss`] / [`try_manifold_loss`], the distance improvement,
//!   the operators' [`LieOperators::transport`] / [`LieOperators::try_transport`] (and
//!   `generator`, `transforms`, `transport_pullback`, `usage_count`), `layers::conv2d` /
//!   `layers::try_conv2d`.
//! * **Configs and anything that reads or checks user settings return [`Result`]**: every config
//!   implements Burn's `Config`, one with constraints has `validate()`, and one that builds
//!   something has `init(&device)` (both `Result`); a call
//!   that takes a config (`expm_with`, `expmv_with`, [`LieOperators::transport_with`], ...)
//!   validates it. Constructors that take raw tensors or values validate them
//!   ([`LaplaceParams::new`], [`LaplaceParams::fixed`], [`LieOperators::from_generators`]), and
//!   fields that an invariant ties together are private behind them.
//! * Errors ([`VlgoError`]) and enums that may grow are `#[non_exhaustive]`. An `expect` left in
//!   library code states an internal invariant, never a property of the caller's input.
//!
//! ## Choices where the paper is silent
//!
//! * f16 / bf16 are promoted to f32 and rounded once on output; f64 computes in f64 with Padé
//!   degrees up to 13 (the oracle), and `expmv` on f64 forms exp(A) (its Taylor loop is tuned for
//!   f32 and carries m <= 24).
//! * `expmv`: m_max = 18 by default (accuracy against cancellation), 1..=24 allowed; a zero matrix
//!   uses degree 1 so its gradient is exact.
//! * A matrix holding NaN or Inf gives an all-NaN output and gradient; the rest of the batch is
//!   unaffected, on every backend.
//! * Both threshold variants need zeta finite and >= 0; zeta = 0 gives plain Laplace samples.
//! * The KL clamps log-scales at -80 only inside its exponentials, which are the terms that would
//!   overflow f32; elsewhere it uses the log-scales as they are.
//! * The stable initialisation needs an even block size for every form (dense: even d).
//! * Best-of-J evaluates candidates through `expmv` with frozen operators and a running minimum,
//!   in chunks stacked along the batch (at most 2^22 generator entries each; the draws are taken
//!   lazily), so memory does not grow with J and small problems pay for a few large tensor ops
//!   instead of J sets of small ones.
//! * The backward methods of [`ExpmBackend`] are plain tensor code on `Autodiff`, so they are
//!   recorded themselves (no hand-written second-order rule).
//! * Operators of odd block size (the swiss roll's 3 x 3) use [`OperatorInit::Normal`]; the stable
//!   initialisation needs pairs of features.
//! * [`fista`] keeps one Lipschitz estimate per datum and takes its gradients through
//!   [`LieOperators::transport_pullback`]: the exponential's own forward and backward, without an
//!   autodiff graph. Its sufficient-decrease test has a rounding slack proportional to
//!   ||r|| ||z1||, without which a datum fitted to rounding shrinks its step to nothing.
//! * On the CPU kernel, matrices of size n <= 4 run a fixed-size version of the same Taylor steps
//!   and norms, tiny matrices are grouped into parallel jobs of about 4096 entries, and the
//!   forward of `expmv` leaves each matrix's route in its checkpoints so the backward does not
//!   choose again (nor, for a single Taylor step, recompute the forward).

pub mod best_of_j;
#[cfg(any(feature = "ndarray", feature = "flex"))]
pub mod cpu;
pub mod error;
pub mod expm;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod gpu;
pub mod laplace;
#[cfg(feature = "layers")]
pub mod layers;
pub mod loss;
pub mod operators;
pub mod rng;
mod shipped;
pub mod sparse_coding;
#[cfg(any(
    feature = "ndarray",
    feature = "test-flex",
    feature = "test-wgpu",
    feature = "test-cuda",
    feature = "test-candle"
))]
#[doc(hidden)]
pub mod testing;
pub mod threads;

pub use best_of_j::{BestOfJ, best_of_j, best_of_j_seeded, best_of_j_with};
pub use laplace::{
    FixedPrior, LaplaceParams, Threshold, ThresholdVariant, WarmupBlend, kl_divergence,
    laplace_noise, sample, try_kl_divergence, try_sample, warmup_prior,
};
pub use loss::{
    distance_improvement, distance_improvement_tensor, manifold_loss, try_distance_improvement,
    try_distance_improvement_tensor, try_manifold_loss,
};
pub use operators::{
    BlockLayout, LieOperators, LieOperatorsConfig, OperatorForm, OperatorInit, TransportMethod,
    TransportPullback,
};
pub use rng::{NoiseStreams, StreamRng};
pub use sparse_coding::{FistaConfig, FistaSolution, fista};

pub use error::{Result, VlgoError};
pub use expm::{
    ExpmBackend, ExpmConfig, ExpmMethod, ExpmvConfig, ExpmvPullback, expm, expm_with, expmv,
    expmv_generated, expmv_pullback, expmv_with, try_expm, try_expm_nd, try_expmv,
};
