//! ManifoldCLR: contrastive learning whose positive views are moved along learned feature
//! manifolds by variational Lie group operators (design note `math.md`, section 5).
//!
//! The crate is laid out per concept; the contrastive objectives, methods, training loop and
//! evaluation are added on top of [`vlgo_nn`].

pub use vlgo_nn;
