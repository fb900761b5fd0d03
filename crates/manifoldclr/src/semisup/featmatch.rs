//! FeatMatch's feature augmentation (Kuo et al., ECCV 2020) as the paper's baseline runs it on
//! frozen features: multi-head attention from unlabelled features to prototypes (the labelled
//! features of the batch), a residual connection and a ReLU, trained jointly with the classifier
//! through the consistency loss. One module per label split, in batched parameters like
//! [`SplitMlp`](super::SplitMlp).
//!
//! Per head i (of h, each of width a = d / h): e = W_i f + b_i embeds features and prototypes
//! alike; the weights softmax(e_x e_p^T / sqrt(a)) (with dropout) pool the prototypes; a head's
//! output is ReLU(V_i [pooled, e_x] + c_i); the heads' outputs, concatenated, pass one linear
//! layer d -> d, and the augmented feature is ReLU(x + that).

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::activation::{relu, softmax};
use vlgo_core::StreamRng;

use super::classifier::{linear_init, stacked};
use crate::error::{ClrError, Result};

/// The attention module of `splits` label splits.
#[derive(Module, Debug)]
pub struct FeatMatchAttention<B: Backend> {
    /// Per-head embeddings, [S, h, d, a].
    pub embed_w: Param<Tensor<B, 4>>,
    /// Their biases, [S, h, 1, a].
    pub embed_b: Param<Tensor<B, 4>>,
    /// Per-head output layers on [pooled, embedded], [S, h, 2a, a].
    pub head_w: Param<Tensor<B, 4>>,
    /// Their biases, [S, h, 1, a].
    pub head_b: Param<Tensor<B, 4>>,
    /// The layer after the heads, [S, d, d].
    pub out_w: Param<Tensor<B, 3>>,
    /// Its bias, [S, 1, d].
    pub out_b: Param<Tensor<B, 3>>,
}

fn param4<B: Backend>(
    rngs: &mut [StreamRng],
    [h, rows, cols]: [usize; 3],
    fan_in: usize,
    device: &B::Device,
) -> Param<Tensor<B, 4>> {
    let s = rngs.len();
    let values: Vec<f32> = rngs
        .iter_mut()
        .flat_map(|rng| linear_init(rng, fan_in, h * rows * cols))
        .collect();
    Param::from_tensor(Tensor::from_data(
        TensorData::new(values, [s, h, rows, cols]),
        device,
    ))
}

impl<B: Backend> FeatMatchAttention<B> {
    /// One module per generator in `rngs`, for d-dimensional features and `heads` heads
    /// (d must be a multiple of `heads`).
    pub fn init(
        rngs: &mut [StreamRng],
        d: usize,
        heads: usize,
        device: &B::Device,
    ) -> Result<Self> {
        if heads == 0 || !d.is_multiple_of(heads) {
            return Err(ClrError::invalid(
                "semisup.featmatch_heads",
                format!("{heads} heads for {d}-dimensional features"),
                "a divisor of the feature dimension",
            ));
        }
        let a = d / heads;
        let embed_w = param4(rngs, [heads, d, a], d, device);
        let embed_b = param4(rngs, [heads, 1, a], d, device);
        let head_w = param4(rngs, [heads, 2 * a, a], 2 * a, device);
        let head_b = param4(rngs, [heads, 1, a], 2 * a, device);
        let out = |rows: usize, rngs: &mut [StreamRng]| {
            let values = rngs
                .iter_mut()
                .map(|rng| linear_init(rng, d, rows * d))
                .collect();
            Param::from_tensor(stacked::<B>(values, rows, d, device))
        };
        let out_w = out(d, rngs);
        let out_b = out(1, rngs);
        Ok(Self {
            embed_w,
            embed_b,
            head_w,
            head_b,
            out_w,
            out_b,
        })
    }

    /// Heads.
    pub fn heads(&self) -> usize {
        self.embed_w.dims()[1]
    }

    /// The augmented features [S, Nx, d] of `x` [S, Nx, d] given prototypes [S, Np, d];
    /// `keep` ([S, h, Nx, Np], entries 0 or 1/(1-p)) is the attention weights' dropout mask,
    /// `None` in evaluation.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        prototypes: Tensor<B, 3>,
        keep: Option<Tensor<B, 4>>,
    ) -> Tensor<B, 3> {
        let [s, nx, d] = x.dims();
        let np = prototypes.dims()[1];
        let h = self.heads();
        let a = d / h;
        let f = Tensor::cat(vec![x.clone(), prototypes], 1)
            .unsqueeze_dim::<4>(1)
            .repeat_dim(1, h);
        let e = f.matmul(self.embed_w.val()) + self.embed_b.val();
        let ex = e.clone().narrow(2, 0, nx);
        let ep = e.narrow(2, nx, np);
        let scores = ex.clone().matmul(ep.clone().swap_dims(2, 3)) / (a as f64).sqrt();
        let mut weights = softmax(scores, 3);
        if let Some(keep) = keep {
            weights = weights * keep;
        }
        let pooled = Tensor::cat(vec![weights.matmul(ep), ex], 3);
        let heads = relu(pooled.matmul(self.head_w.val()) + self.head_b.val());
        let joined = heads.swap_dims(1, 2).reshape([s, nx, h * a]);
        relu(x + joined.matmul(self.out_w.val()) + self.out_b.val())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::AutodiffModule;
    use rand::SeedableRng;
    use vlgo_core::testing::TestAutodiffBackend as AB;

    #[test]
    fn attention_keeps_the_shape_and_passes_gradient_to_every_parameter_and_input() {
        let device = Default::default();
        let mut rngs = [StreamRng::seed_from_u64(0), StreamRng::seed_from_u64(1)];
        let attn = FeatMatchAttention::<AB>::init(&mut rngs, 8, 4, &device).unwrap();
        assert_eq!(attn.embed_w.dims(), [2, 4, 8, 2]);
        assert_eq!(attn.head_w.dims(), [2, 4, 4, 2]);
        assert_eq!(attn.out_w.dims(), [2, 8, 8]);
        let leaf = |shape: [usize; 3]| {
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.3)
                .collect();
            Tensor::<AB, 3>::from_data(TensorData::new(values, shape), &device).require_grad()
        };
        let (x, p) = (leaf([2, 5, 8]), leaf([2, 3, 8]));
        let keep = Tensor::<AB, 4>::ones([2, 4, 5, 3], &device) * (1.0 / 0.9);
        let out = attn.forward(x.clone(), p.clone(), Some(keep));
        assert_eq!(out.dims(), [2, 5, 8]);
        let grads = out.sum().backward();
        for (name, g) in [
            ("embed_w", attn.embed_w.grad(&grads).map(|g| g.abs().sum())),
            ("head_w", attn.head_w.grad(&grads).map(|g| g.abs().sum())),
        ] {
            let g = g.unwrap_or_else(|| panic!("no gradient for {name}"));
            assert!(g.into_scalar() > 0.0, "{name}");
        }
        assert!(attn.out_w.grad(&grads).unwrap().abs().sum().into_scalar() > 0.0);
        assert!(x.grad(&grads).unwrap().abs().sum().into_scalar() > 0.0);
        assert!(p.grad(&grads).unwrap().abs().sum().into_scalar() > 0.0);
        // Output is a ReLU: non-negative; split 0's output ignores split 1's inputs.
        let valid = attn.valid();
        let (xi, pi) = (x.inner(), p.inner());
        let a = valid.forward(xi.clone(), pi.clone(), None);
        assert!(a.clone().min().into_scalar() >= 0.0);
        let x2 = Tensor::cat(
            vec![xi.clone().narrow(0, 0, 1), xi.narrow(0, 1, 1) * 3.0],
            0,
        );
        let b = valid.forward(x2, pi, None);
        let diff = (a.narrow(0, 0, 1) - b.narrow(0, 0, 1))
            .abs()
            .max()
            .into_scalar();
        assert!(diff < 1e-6, "{diff}");
    }

    #[test]
    fn heads_must_divide_the_dimension() {
        let mut rngs = [StreamRng::seed_from_u64(0)];
        let err = FeatMatchAttention::<AB>::init(&mut rngs, 10, 4, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("4 heads for 10-dimensional"), "{err}");
    }
}
