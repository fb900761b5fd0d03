//! Neural networks of the VLGO model: the coefficient encoder q(c | z0, z1), the learned prior
//! p(c | z0) and the model that infers, samples and transports.
//!
//! The operators, the exponential and the coefficient distributions these networks use live in
//! [`vlgo_core`]; this crate adds only what has trainable network weights. Errors are
//! [`vlgo_core::VlgoError`]: every failure here is a bad configuration or shape of the same kinds.

pub mod encoder;
pub mod mlp;
pub mod model;
pub mod prior;

pub use encoder::{CoefficientEncoder, CoefficientEncoderConfig, InputNorm};
pub use model::{Vlgo, VlgoConfig, VlgoStep};
pub use prior::{CoefficientPrior, CoefficientPriorConfig};
pub use vlgo_core;
