//! Batch normalisation on f32 slices in [N, C, S] layout (S = the spatial size): per-channel
//! statistics, the normalisation as one per-channel multiply-add, and the backward in two passes
//! (per-channel sums, then one multiply-add per entry).
//!
//! Burn's batch norm is a chain of broadcast tensor operations, each a strided pass (with its
//! own backward node) over the whole activation; in a ResNet-18 step on the CPU these took more
//! time than the convolutions. Sums are accumulated per image block in f32 lanes and over blocks in f64, channel by channel, so
//! results do not depend on the number of threads.

use rayon::prelude::*;

/// Layout of a batch-norm input: [batch, channels, size].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NormShape {
    pub batch: usize,
    pub channels: usize,
    pub size: usize,
}

impl NormShape {
    fn count(&self) -> f64 {
        (self.batch * self.size) as f64
    }

    /// Per channel, the sum over the batch and the spatial size of `f(c, a, b)` summed over
    /// matching entries a of `first` and b of `second` (blocks of one image and channel): each
    /// block in f32 lanes (vectorised), blocks added in f64.
    fn channel_sums(
        &self,
        first: &[f32],
        second: &[f32],
        f: impl Fn(usize, f32, f32) -> f32 + Sync,
    ) -> Vec<f64> {
        (0..self.channels)
            .into_par_iter()
            .map(|c| {
                let f = |a, b| f(c, a, b);
                (0..self.batch)
                    .map(|n| {
                        let start = (n * self.channels + c) * self.size;
                        let a = &first[start..start + self.size];
                        let b = &second[start..start + self.size];
                        block_sum(a, b, &f)
                    })
                    .sum()
            })
            .collect()
    }
}

/// sum f(a_i, b_i) with eight f32 accumulators, returned in f64.
fn block_sum(a: &[f32], b: &[f32], f: &impl Fn(f32, f32) -> f32) -> f64 {
    let mut lanes = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(&x, &y)| f(x, y) as f64)
        .sum();
    for (x, y) in ac.zip(bc) {
        for k in 0..8 {
            lanes[k] += f(x[k], y[k]);
        }
    }
    lanes.iter().map(|&v| v as f64).sum::<f64>() + tail
}

/// Mean and biased variance of every channel (two passes).
pub(crate) fn statistics(s: &NormShape, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mean = s.channel_sums(x, x, |_, v, _| v);
    let mean: Vec<f64> = mean.iter().map(|m| m / s.count()).collect();
    let centre: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
    let var = s.channel_sums(x, x, |c, v, _| (v - centre[c]) * (v - centre[c]));
    (
        mean.iter().map(|&m| m as f32).collect(),
        var.iter().map(|v| (v / s.count()) as f32).collect(),
    )
}

/// y = scale[c] x + shift[c] for every entry of channel c.
pub(crate) fn affine(s: &NormShape, x: &[f32], scale: &[f32], shift: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0f32; x.len()];
    let image = s.channels * s.size;
    if image == 0 {
        return y;
    }
    y.par_chunks_mut(image)
        .zip(x.par_chunks(image))
        .for_each(|(y, x)| {
            for ((y, x), (a, b)) in y
                .chunks_mut(s.size)
                .zip(x.chunks(s.size))
                .zip(scale.iter().zip(shift))
            {
                for (y, x) in y.iter_mut().zip(x) {
                    *y = a * x + b;
                }
            }
        });
    y
}

/// The normalisation with the batch's own statistics: (y, mean, biased variance).
pub(crate) fn forward_train(
    s: &NormShape,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (mean, var) = statistics(s, x);
    let (scale, shift) = scale_shift(&mean, &var, gamma, beta, epsilon);
    (affine(s, x, &scale, &shift), mean, var)
}

/// Per-channel scale gamma / sqrt(var + eps) and shift beta - mean scale.
pub(crate) fn scale_shift(
    mean: &[f32],
    var: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
) -> (Vec<f32>, Vec<f32>) {
    let scale: Vec<f32> = var
        .iter()
        .zip(gamma)
        .map(|(&v, &g)| (g as f64 / (v as f64 + epsilon).sqrt()) as f32)
        .collect();
    let shift = mean
        .iter()
        .zip(beta)
        .zip(&scale)
        .map(|((&m, &b), &a)| (b as f64 - m as f64 * a as f64) as f32)
        .collect();
    (scale, shift)
}

/// The adjoints (x, gamma, beta) of the training-mode normalisation given the output's adjoint,
/// the saved batch statistics and gamma.
pub(crate) fn backward(
    s: &NormShape,
    x: &[f32],
    gamma: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
    grad: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let inv_std: Vec<f64> = var
        .iter()
        .map(|&v| 1.0 / (v as f64 + epsilon).sqrt())
        .collect();
    let sum_dy = s.channel_sums(grad, grad, |_, g, _| g);
    // sum dy xhat = inv_std sum dy (x - mean)
    let sum_dy_xhat: Vec<f64> = s
        .channel_sums(grad, x, |c, g, v| g * (v - mean[c]))
        .iter()
        .zip(&inv_std)
        .map(|(v, r)| v * r)
        .collect();
    // dx = k (dy - sum_dy / m - xhat sum_dy_xhat / m) with k = gamma inv_std, written as
    // a dy + b x + d per channel.
    let m = s.count();
    let (mut a, mut b, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..s.channels {
        let k = gamma[c] as f64 * inv_std[c];
        let bc = -k * inv_std[c] * sum_dy_xhat[c] / m;
        a.push(k as f32);
        b.push(bc as f32);
        d.push((-k * sum_dy[c] / m - bc * mean[c] as f64) as f32);
    }
    let mut dx = vec![0.0f32; x.len()];
    let image = s.channels * s.size;
    if image > 0 {
        dx.par_chunks_mut(image)
            .zip(x.par_chunks(image).zip(grad.par_chunks(image)))
            .for_each(|(dx, (x, dy))| {
                for (c, ((dx, x), dy)) in dx
                    .chunks_mut(s.size)
                    .zip(x.chunks(s.size))
                    .zip(dy.chunks(s.size))
                    .enumerate()
                {
                    let (a, b, d) = (a[c], b[c], d[c]);
                    for ((dx, x), dy) in dx.iter_mut().zip(x).zip(dy) {
                        *dx = a * dy + b * x + d;
                    }
                }
            });
    }
    let dgamma = sum_dy_xhat.iter().map(|&v| v as f32).collect();
    let dbeta = sum_dy.iter().map(|&v| v as f32).collect();
    (dx, dgamma, dbeta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let v = (i as u32)
                    .wrapping_mul(2654435761)
                    .wrapping_add(seed * 7919);
                (v % 1000) as f32 / 250.0 - 1.5
            })
            .collect()
    }

    /// L = sum(w y) for a fixed w: the kernel's gradients against central differences in x,
    /// gamma and beta (the loss is computed in f64 from f32 outputs, so steps are coarse).
    #[test]
    fn backward_matches_finite_differences() {
        let s = NormShape {
            batch: 3,
            channels: 2,
            size: 5,
        };
        let x = values(30, 1);
        let gamma = vec![1.3f32, -0.7];
        let beta = vec![0.2f32, 0.5];
        let w = values(30, 2);
        let loss = |x: &[f32], g: &[f32], b: &[f32]| -> f64 {
            let (y, _, _) = forward_train(&s, x, g, b, 1e-5);
            y.iter().zip(&w).map(|(y, w)| *y as f64 * *w as f64).sum()
        };
        let (_, mean, var) = forward_train(&s, &x, &gamma, &beta, 1e-5);
        let (dx, dgamma, dbeta) = backward(&s, &x, &gamma, &mean, &var, 1e-5, &w);
        let h = 1e-2f32;
        let check = |analytic: f32, plus: f64, minus: f64, what: &str| {
            let numeric = (plus - minus) / (2.0 * h as f64);
            assert!(
                (analytic as f64 - numeric).abs() < 2e-3 * (1.0 + numeric.abs()),
                "{what}: {analytic} vs {numeric}"
            );
        };
        for i in 0..x.len() {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += h;
            xm[i] -= h;
            check(
                dx[i],
                loss(&xp, &gamma, &beta),
                loss(&xm, &gamma, &beta),
                "dx",
            );
        }
        for c in 0..2 {
            let (mut gp, mut gm) = (gamma.clone(), gamma.clone());
            gp[c] += h;
            gm[c] -= h;
            check(
                dgamma[c],
                loss(&x, &gp, &beta),
                loss(&x, &gm, &beta),
                "dgamma",
            );
            let (mut bp, mut bm) = (beta.clone(), beta.clone());
            bp[c] += h;
            bm[c] -= h;
            check(
                dbeta[c],
                loss(&x, &gamma, &bp),
                loss(&x, &gamma, &bm),
                "dbeta",
            );
        }
    }

    #[test]
    fn normalised_channels_have_zero_mean_and_unit_variance() {
        let s = NormShape {
            batch: 4,
            channels: 3,
            size: 7,
        };
        let x: Vec<f32> = values(84, 3).iter().map(|v| 5.0 * v + 3.0).collect();
        let (y, _, _) = forward_train(&s, &x, &[1.0; 3], &[0.0; 3], 0.0);
        let (mean, var) = statistics(&s, &y);
        for c in 0..3 {
            assert!(
                mean[c].abs() < 1e-5 && (var[c] - 1.0).abs() < 1e-4,
                "{mean:?} {var:?}"
            );
        }
    }
}
