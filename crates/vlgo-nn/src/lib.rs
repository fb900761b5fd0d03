//! Neural networks of the VLGO model: the coefficient encoder q(c | z0, z1), the learned prior
//! p(c | z0) and the model that infers, samples and transports (design note `math.md`, section 3).
//!
//! The operators, the exponential and the coefficient distributions these networks use live in
//! [`vlgo_core`]; this crate adds only what has trainable network weights.

pub use vlgo_core;
