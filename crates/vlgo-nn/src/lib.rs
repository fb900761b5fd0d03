#![doc = include_str!("../README.md")]
//!
//! The operators, the exponential and the coefficient distributions these networks use live in
//! [`vlgo_core`]. Errors are [`vlgo_core::VlgoError`]: every failure here is a bad configuration
//! or shape of the same kinds.

pub mod encoder;
pub mod mlp;
pub mod model;
pub mod prior;

pub use encoder::{CoefficientEncoder, CoefficientEncoderConfig, InputNorm};
pub use model::{Vlgo, VlgoConfig, VlgoStep};
pub use prior::{CoefficientPrior, CoefficientPriorConfig};
pub use vlgo_core;
