//! The multilayer perceptron and Laplace heads shared by the encoder and the prior.

use burn::nn::{LeakyRelu, LeakyReluConfig, Linear, LinearConfig};
use burn::prelude::*;

/// Linear layers, each followed by LeakyReLU (slope 0.01).
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
    activation: LeakyRelu,
}

impl<B: Backend> Mlp<B> {
    /// Layers `sizes[0] -> sizes[1] -> ..` (PyTorch's default initialisation).
    pub fn new(sizes: &[usize], device: &B::Device) -> Self {
        Self {
            layers: sizes
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).init(device))
                .collect(),
            activation: LeakyReluConfig::new().with_negative_slope(0.01).init(),
        }
    }

    /// Applies every layer and activation.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.layers
            .iter()
            .fold(x, |h, layer| self.activation.forward(layer.forward(h)))
    }
}

/// Two linear heads F -> M: raw location and raw log-scale.
#[derive(Module, Debug)]
pub struct LaplaceHeads<B: Backend> {
    loc: Linear<B>,
    log_scale: Linear<B>,
}

impl<B: Backend> LaplaceHeads<B> {
    /// Heads from width `f` to `m` coefficients.
    pub fn new(f: usize, m: usize, device: &B::Device) -> Self {
        Self {
            loc: LinearConfig::new(f, m).init(device),
            log_scale: LinearConfig::new(f, m).init(device),
        }
    }

    /// (raw location, raw log-scale), each [N, M].
    pub fn forward(&self, h: Tensor<B, 2>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        (self.loc.forward(h.clone()), self.log_scale.forward(h))
    }
}
