//! The loss terms of the semi-supervised trainer, each a function of tensors (or host values)
//! that a test can check by hand.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

/// Weights of the confident pseudo-label term: for each of `splits` x `rows` probability rows
/// q_b (`classes` entries each, row-major in `q`), 1/N_u on argmax q_b when max q_b >= `tau`, 0
/// elsewhere, where N_u is the split's count of confident rows (a split with none gets no
/// weight). Returns the weights ([splits, rows, classes], row-major) and each split's N_u.
///
/// ```
/// use manifoldclr::semisup::confidence_weights;
/// let q = [0.97, 0.03, 0.4, 0.6];
/// let (w, n) = confidence_weights(&q, 1, 2, 2, 0.95);
/// assert_eq!(n, vec![1]);
/// assert_eq!(w, vec![1.0, 0.0, 0.0, 0.0]);
/// ```
pub fn confidence_weights(
    q: &[f32],
    splits: usize,
    rows: usize,
    classes: usize,
    tau: f64,
) -> (Vec<f32>, Vec<usize>) {
    debug_assert_eq!(q.len(), splits * rows * classes);
    let mut weights = vec![0.0f32; q.len()];
    let mut counts = Vec::with_capacity(splits);
    for (q, w) in q
        .chunks_exact(rows * classes)
        .zip(weights.chunks_exact_mut(rows * classes))
    {
        let mut confident = Vec::new();
        for (r, row) in q.chunks_exact(classes).enumerate() {
            let (arg, max) =
                row.iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |best, (k, &p)| match p > best.1 {
                        true => (k, p),
                        false => best,
                    });
            // Compared in f32, the probabilities' own precision: 0.95 in f32 is below 0.95.
            if max >= tau as f32 {
                confident.push(r * classes + arg);
            }
        }
        let n = confident.len();
        for i in &confident {
            w[*i] = 1.0 / n as f32;
        }
        counts.push(n);
    }
    (weights, counts)
}

/// -sum over splits, rows and classes of `weights` * log softmax(`logits`): the cross-entropy of
/// each split weighted by its own row weights (one-hot / B_l for the labelled term,
/// [`confidence_weights`] for the pseudo-label term), summed over the splits so that each
/// split's parameters get their own split's gradient.
pub fn weighted_cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    weights: Tensor<B, 3>,
) -> Tensor<B, 1> {
    (log_softmax(logits, 2) * weights).sum().neg()
}

/// Manifold-Mixup ICT's target: l p1 + (1 - l) p2, with `mix` = l of shape [S, N, 1].
pub fn mix<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>, mix: Tensor<B, 3>) -> Tensor<B, 3> {
    a * mix.clone() + b * (mix.neg() + 1.0)
}

/// Per split, the mean over rows and classes of (p - target)^2 (PyTorch's `mse_loss`), summed
/// over the splits.
pub fn mean_square_per_split<B: Backend>(p: Tensor<B, 3>, target: Tensor<B, 3>) -> Tensor<B, 1> {
    let [_, n, c] = p.dims();
    (p - target).powi_scalar(2).sum() / (n * c) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use vlgo_core::testing::TestBackend as B;

    fn scalar(t: Tensor<B, 1>) -> f64 {
        f64::from(t.into_scalar().to_f32())
    }

    #[test]
    fn confident_rows_share_the_weight_and_no_confident_row_gives_no_term() {
        // Split 0: rows 0 and 2 confident (classes 1 and 0). Split 1: none confident.
        let q = [
            0.02, 0.98, 0.5, 0.5, 0.95, 0.05, //
            0.6, 0.4, 0.5, 0.5, 0.9, 0.1,
        ];
        let (w, n) = confidence_weights(&q, 2, 3, 2, 0.95);
        assert_eq!(n, vec![2, 0]);
        assert_eq!(
            w,
            vec![0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
        let device = Default::default();
        let logits = Tensor::<B, 3>::from_floats(
            [
                [[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]],
                [[5.0, 0.0], [0.0, 0.0], [1.0, 0.0]],
            ],
            &device,
        );
        let wt = Tensor::<B, 3>::from_data(TensorData::new(w, [2, 3, 2]), &device);
        // Split 0 by hand: (CE(row 0, class 1) + CE(row 2, class 0)) / 2; split 1: nothing.
        let ce = |z: [f64; 2], k: usize| (z[0].exp() + z[1].exp()).ln() - z[k];
        let want = (ce([0.0, 1.0], 1) + ce([1.0, 1.0], 0)) / 2.0;
        let got = scalar(weighted_cross_entropy(logits, wt));
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn the_mixup_target_and_the_squared_error_by_hand() {
        let device = Default::default();
        let p1 = Tensor::<B, 3>::from_floats([[[1.0, 0.0], [0.2, 0.8]]], &device);
        let p2 = Tensor::<B, 3>::from_floats([[[0.0, 1.0], [0.6, 0.4]]], &device);
        let l = Tensor::<B, 3>::from_floats([[[0.25], [0.5]]], &device);
        let t = mix(p1, p2, l);
        let got: Vec<f32> = t.clone().into_data().to_vec().unwrap();
        for (g, w) in got.iter().zip([0.25, 0.75, 0.4, 0.6]) {
            assert!((g - w).abs() < 1e-6, "{got:?}");
        }
        let p = Tensor::<B, 3>::from_floats([[[0.5, 0.5], [0.4, 0.6]]], &device);
        let want = (0.25f64.powi(2) * 2.0) / 4.0;
        assert!((scalar(mean_square_per_split(p, t)) - want).abs() < 1e-7);
    }
}
