//! The classifier r: d -> hidden -> LeakyReLU -> C, one independent copy per label split held in
//! batched parameters ([S, ...]), so S splits train in one matrix product per layer; and the
//! exponential moving average of its weights that scores the test set.

use burn::module::Param;
use burn::prelude::*;
use rand::Rng;
use vlgo_core::StreamRng;
use vlgo_core::layers::{LayerBackend, batched_linear};

/// `splits` independent MLPs d -> hidden -> C in batched parameters.
#[derive(Module, Debug)]
pub struct SplitMlp<B: Backend> {
    /// First layer's weights, [S, d, hidden].
    pub w1: Param<Tensor<B, 3>>,
    /// First layer's biases, [S, 1, hidden].
    pub b1: Param<Tensor<B, 3>>,
    /// Second layer's weights, [S, hidden, C].
    pub w2: Param<Tensor<B, 3>>,
    /// Second layer's biases, [S, 1, C].
    pub b2: Param<Tensor<B, 3>>,
    /// LeakyReLU's slope on negative inputs.
    #[module(skip)]
    pub negative_slope: f64,
}

/// Values U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the default initialisation of a PyTorch linear
/// layer (weights and biases), drawn per split from that split's generator.
pub(crate) fn linear_init(rng: &mut StreamRng, fan_in: usize, count: usize) -> Vec<f32> {
    let bound = 1.0 / (fan_in as f32).sqrt();
    (0..count)
        .map(|_| rng.random_range(-bound..=bound))
        .collect()
}

/// A [S, rows, cols] tensor from per-split host values.
pub(crate) fn stacked<B: Backend>(
    per_split: Vec<Vec<f32>>,
    rows: usize,
    cols: usize,
    device: &B::Device,
) -> Tensor<B, 3> {
    let s = per_split.len();
    let values: Vec<f32> = per_split.into_iter().flatten().collect();
    Tensor::from_data(TensorData::new(values, [s, rows, cols]), device)
}

impl<B: LayerBackend> SplitMlp<B> {
    /// One MLP per generator in `rngs` (each split's own), PyTorch's default initialisation.
    pub fn init(
        rngs: &mut [StreamRng],
        dims: [usize; 3],
        negative_slope: f64,
        device: &B::Device,
    ) -> Self {
        let [d, h, c] = dims;
        let mut draw = |rows: usize, cols: usize, fan_in: usize| {
            let values = rngs
                .iter_mut()
                .map(|rng| linear_init(rng, fan_in, rows * cols))
                .collect();
            Param::from_tensor(stacked::<B>(values, rows, cols, device))
        };
        let (w1, b1) = (draw(d, h, d), draw(1, h, d));
        let (w2, b2) = (draw(h, c, h), draw(1, c, h));
        Self {
            w1,
            b1,
            w2,
            b2,
            negative_slope,
        }
    }

    /// Logits [S, N, C] of inputs [S, N, d].
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        mlp(
            x,
            [
                &self.w1.val(),
                &self.b1.val(),
                &self.w2.val(),
                &self.b2.val(),
            ],
            self.negative_slope,
        )
    }
}

/// r(x) with weights `[w1, b1, w2, b2]`, for the trained and the averaged classifier alike.
pub(crate) fn mlp<B: LayerBackend>(
    x: Tensor<B, 3>,
    w: [&Tensor<B, 3>; 4],
    slope: f64,
) -> Tensor<B, 3> {
    let hidden = batched_linear(x, w[0].clone(), w[1].clone(), Some(slope));
    batched_linear(hidden, w[2].clone(), w[3].clone(), None)
}

/// The exponential moving average of a [`SplitMlp`]'s weights (no gradient).
#[derive(Debug, Clone)]
pub struct EmaMlp<B: Backend> {
    weights: [Tensor<B, 3>; 4],
    negative_slope: f64,
}

impl<B: LayerBackend> EmaMlp<B> {
    /// Starts at the classifier's current weights (given on the inner backend).
    pub fn new(weights: [Tensor<B, 3>; 4], negative_slope: f64) -> Self {
        Self {
            weights,
            negative_slope,
        }
    }

    /// ema <- decay ema + (1 - decay) w.
    pub fn update(&mut self, current: [Tensor<B, 3>; 4], decay: f64) {
        for (avg, w) in self.weights.iter_mut().zip(current) {
            *avg = avg.clone() * decay + w * (1.0 - decay);
        }
    }

    /// Logits [S, N, C] of inputs [S, N, d] under the averaged weights.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [w1, b1, w2, b2] = &self.weights;
        mlp(x, [w1, b1, w2, b2], self.negative_slope)
    }

    /// Logits [N, C] of split `split`'s classifier on inputs [N, d].
    pub fn forward_split(&self, split: usize, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let one = |t: &Tensor<B, 3>| t.clone().narrow(0, split, 1);
        let [w1, b1, w2, b2] = &self.weights;
        let (w1, b1, w2, b2) = (one(w1), one(b1), one(w2), one(b2));
        mlp(
            x.unsqueeze_dim(0),
            [&w1, &b1, &w2, &b2],
            self.negative_slope,
        )
        .squeeze_dim(0)
    }

    /// The averaged weights `[w1, b1, w2, b2]`.
    pub fn weights(&self) -> &[Tensor<B, 3>; 4] {
        &self.weights
    }
}

impl<B: burn::tensor::backend::AutodiffBackend<InnerBackend: LayerBackend>> SplitMlp<B> {
    /// Logits [S, N, C] of inputs [S, N, d] under the current weights, outside the graph.
    pub fn logits_without_grad(&self, x: Tensor<B::InnerBackend, 3>) -> Tensor<B::InnerBackend, 3> {
        let [w1, b1, w2, b2] = self.inner_weights();
        mlp(x, [&w1, &b1, &w2, &b2], self.negative_slope)
    }

    /// The current weights on the inner backend, without gradient.
    pub fn inner_weights(&self) -> [Tensor<B::InnerBackend, 3>; 4] {
        [
            self.w1.val().inner(),
            self.b1.val().inner(),
            self.w2.val().inner(),
            self.b2.val().inner(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use vlgo_core::testing::TestBackend as B;

    fn host(t: Tensor<B, 3>) -> Vec<f32> {
        t.into_data().convert::<f32>().to_vec().unwrap()
    }

    #[test]
    fn each_split_is_its_own_mlp() {
        let device = Default::default();
        let mut rngs = [StreamRng::seed_from_u64(1), StreamRng::seed_from_u64(2)];
        let mlp = SplitMlp::<B>::init(&mut rngs, [3, 5, 2], 0.01, &device);
        let x = Tensor::<B, 3>::from_floats([[[1.0, -2.0, 0.5]], [[0.25, 1.0, -1.0]]], &device);
        let out = host(mlp.forward(x.clone()));
        // Split 1 by hand from its own weights.
        let w = |p: &Param<Tensor<B, 3>>| host(p.val().narrow(0, 1, 1));
        let (w1, b1, w2, b2) = (w(&mlp.w1), w(&mlp.b1), w(&mlp.w2), w(&mlp.b2));
        let xs = [0.25f32, 1.0, -1.0];
        let hidden: Vec<f32> = (0..5)
            .map(|j| {
                let a = (0..3).map(|i| xs[i] * w1[i * 5 + j]).sum::<f32>() + b1[j];
                if a > 0.0 { a } else { 0.01 * a }
            })
            .collect();
        for k in 0..2 {
            let want = (0..5).map(|j| hidden[j] * w2[j * 2 + k]).sum::<f32>() + b2[k];
            assert!((out[2 + k] - want).abs() < 1e-5, "{} vs {want}", out[2 + k]);
        }
        // The bounds of PyTorch's initialisation.
        assert!(w1.iter().all(|v| v.abs() <= 1.0 / 3f32.sqrt()));
        assert!(w2.iter().all(|v| v.abs() <= 1.0 / 5f32.sqrt()));
    }

    #[test]
    fn the_average_moves_toward_the_weights_by_one_minus_decay() {
        let device = Default::default();
        let t = |v: f32| Tensor::<B, 3>::full([1, 1, 2], v, &device);
        let mut ema = EmaMlp::new([t(1.0), t(0.0), t(2.0), t(-1.0)], 0.01);
        ema.update([t(3.0), t(1.0), t(2.0), t(1.0)], 0.9);
        let got: Vec<f32> = ema.weights().iter().map(|w| host(w.clone())[0]).collect();
        for (g, want) in got.iter().zip([1.2f32, 0.1, 2.0, -0.8]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
        ema.update([t(3.0), t(1.0), t(2.0), t(1.0)], 0.9);
        assert!((host(ema.weights()[0].clone())[0] - 1.38).abs() < 1e-6);
    }
}
