//! Datasets for VLGO and ManifoldCLR: image dataset readers, synthetic manifolds and pair
//! samplers. The crate knows nothing of models; it yields plain host arrays.
