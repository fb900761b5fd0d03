//! Batch normalisation on f32 slices in [N, C, S] layout (S = the spatial size): per-channel
//! statistics, the normalisation as one per-channel multiply-add, and the backward in two passes
//! (per-channel sums, then one multiply-add per entry).
//!
//! Burn's batch norm is a chain of broadcast tensor operations, each a strided pass (with its
//! own backward node) over the whole activation; in a ResNet-18 step on the CPU these took more
//! time than the convolutions. Sums are accumulated per image block in f32 lanes and over blocks
//! in f64, channel by channel, so results do not depend on the number of threads.
//!
//! The backward's two per-channel sums are taken in one pass: at the activations' sizes of a
//! training batch the reductions wait on memory.
//!
//! The fused layers (`relu_forward` / `relu_backward`: batch norm, ReLU and optionally max
//! pooling; `add_relu_forward` / `add_relu_backward`: batch norm, a residual sum and ReLU) write
//! only their output and recompute the intermediate activations from x in the backward, with
//! the separate layers' arithmetic and order of summation, so their results equal those layers'
//! to the bit.

use rayon::prelude::*;

use super::gemm::{assume_written, written};
use super::pool::PoolShape;
use super::simd::vectorised;

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

    /// Per channel c, the K sums over the batch and the spatial size of `f(c)(a, b)` over
    /// matching entries a of `first` and b of `second` (blocks of one image and channel): each
    /// block in f32 lanes (vectorised), blocks added in f64. `f(c)` takes the channel's
    /// constants out of the slices once: indexed per entry, they kept the loops scalar.
    fn channel_sums<const K: usize, F: Fn(f32, f32) -> [f32; K]>(
        &self,
        first: &[f32],
        second: &[f32],
        f: impl Fn(usize) -> F + Sync,
    ) -> Vec<[f64; K]> {
        if self.size < LANES {
            return self.short_block_sums(first, second, f);
        }
        self.plane_block_sums(first, second, f)
    }

    /// [`channel_sums`](Self::channel_sums) by planes: each plane's sums in memory order, then
    /// each channel's planes added in image order.
    fn plane_block_sums<const K: usize, F: Fn(f32, f32) -> [f32; K]>(
        &self,
        first: &[f32],
        second: &[f32],
        f: impl Fn(usize) -> F + Sync,
    ) -> Vec<[f64; K]> {
        if self.size == 0 {
            return vec![[0.0; K]; self.channels];
        }
        // A channel at a time, the reads jumped C x S entries from one image's block to the
        // next, a few cache lines each, which the prefetchers did not follow; by planes they
        // stream through the buffers.
        let planes: Vec<[f64; K]> = first
            .par_chunks(self.size)
            .zip(second.par_chunks(self.size))
            .enumerate()
            .map(|(p, (a, b))| {
                let f = f(p % self.channels);
                vectorised(
                    #[inline(always)]
                    || block_sums(a, b, &f),
                )
            })
            .collect();
        self.fold_planes(&planes)
    }

    /// [`channel_sums`](Self::channel_sums) where a block is shorter than [`block_sums`]'s
    /// [`LANES`] (a batch norm over [N, C], S = 1, or the last stage's 2 x 2 maps): every entry
    /// then goes through its f64 tail, so the blocks are summed here in memory order, images
    /// in turn and channels side by side, instead of one strided channel after another (a
    /// cache line or less per block). Each block's f64 sum starts from zero and is added to its
    /// channel's in image order, as there: the same bits (the empty vector lanes that
    /// `block_sums` adds are +0.0, and adding a zero leaves a sum that never is -0.0 as it is).
    fn short_block_sums<const K: usize, F: Fn(f32, f32) -> [f32; K]>(
        &self,
        first: &[f32],
        second: &[f32],
        f: impl Fn(usize) -> F + Sync,
    ) -> Vec<[f64; K]> {
        // Enough channels per task for whole cache lines of the images' rows; all of them when
        // the channels are few.
        const GROUP: usize = 64;
        let groups: Vec<Vec<[f64; K]>> = (0..self.channels.div_ceil(GROUP))
            .into_par_iter()
            .map(|g| {
                let channels = g * GROUP..((g + 1) * GROUP).min(self.channels);
                let fs: Vec<F> = channels.clone().map(&f).collect();
                let mut sums = vec![[0.0f64; K]; channels.len()];
                let span = channels.len() * self.size;
                vectorised(
                    #[inline(always)]
                    || {
                        for n in 0..self.batch {
                            let start = (n * self.channels + channels.start) * self.size;
                            let (a, b) =
                                (&first[start..start + span], &second[start..start + span]);
                            if self.size == 1 {
                                // One entry per block: its sum is the entry (0 + v is v, but
                                // for -0.0, which leaves the channel's sum as +0.0 does).
                                for (((sums, f), &x), &y) in sums.iter_mut().zip(&fs).zip(a).zip(b)
                                {
                                    for (s, v) in sums.iter_mut().zip(f(x, y)) {
                                        *s += v as f64;
                                    }
                                }
                                continue;
                            }
                            let blocks = a
                                .chunks_exact(self.size.max(1))
                                .zip(b.chunks_exact(self.size.max(1)));
                            for ((sums, f), (a, b)) in sums.iter_mut().zip(&fs).zip(blocks) {
                                let mut block = [0.0f64; K];
                                for (&x, &y) in a.iter().zip(b) {
                                    for (t, v) in block.iter_mut().zip(f(x, y)) {
                                        *t += v as f64;
                                    }
                                }
                                for (s, v) in sums.iter_mut().zip(block) {
                                    *s += v;
                                }
                            }
                        }
                    },
                );
                sums
            })
            .collect();
        groups.concat()
    }

    /// Per channel, the sums of its planes (one per image, in [N, C] order) added in image
    /// order, as [`channel_sums`](Self::channel_sums) adds them.
    fn fold_planes<const K: usize>(&self, planes: &[[f64; K]]) -> Vec<[f64; K]> {
        (0..self.channels)
            .map(|c| {
                (0..self.batch).fold([0.0; K], |mut sums, n| {
                    for (t, v) in sums.iter_mut().zip(planes[n * self.channels + c]) {
                        *t += v;
                    }
                    sums
                })
            })
            .collect()
    }
}

/// The f32 accumulators per sum of [`block_sums`].
const LANES: usize = 8;

/// The K sums of f(a_i, b_i) over matching entries, each with [`LANES`] f32 accumulators,
/// returned in f64.
#[inline(always)]
fn block_sums<const K: usize>(a: &[f32], b: &[f32], f: &impl Fn(f32, f32) -> [f32; K]) -> [f64; K] {
    let mut lanes = [[0.0f32; LANES]; K];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let mut tail = [0.0f64; K];
    for (&x, &y) in ac.remainder().iter().zip(bc.remainder()) {
        for (t, v) in tail.iter_mut().zip(f(x, y)) {
            *t += v as f64;
        }
    }
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            let v = f(x[l], y[l]);
            for k in 0..K {
                lanes[k][l] += v[k];
            }
        }
    }
    std::array::from_fn(|k| lanes[k].iter().map(|&v| v as f64).sum::<f64>() + tail[k])
}

/// Mean and biased variance of every channel (two passes: the means, then the squared
/// deviations from them).
pub(crate) fn statistics(s: &NormShape, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let count = s.count();
    let mean: Vec<f32> = s
        .channel_sums(x, x, |_| |v, _| [v])
        .iter()
        .map(|[v]| (v / count) as f32)
        .collect();
    let var = s
        .channel_sums(x, x, |c| {
            let m = mean[c];
            move |v, _| [(v - m) * (v - m)]
        })
        .iter()
        .map(|[v]| (v / count) as f32)
        .collect();
    (mean, var)
}

/// y = scale[c] x + shift[c] for every entry of channel c.
pub(crate) fn affine(s: &NormShape, x: &[f32], scale: &[f32], shift: &[f32]) -> Vec<f32> {
    channel_map(s, x, scale, shift, |x, a, b| a * x + b)
}

/// y = f(x, scale[c], shift[c]) for every entry x of channel c.
fn channel_map(
    s: &NormShape,
    x: &[f32],
    scale: &[f32],
    shift: &[f32],
    f: impl Fn(f32, f32, f32) -> f32 + Sync,
) -> Vec<f32> {
    let image = s.channels * s.size;
    if image == 0 {
        return vec![0.0; x.len()];
    }
    // `written` needs every entry written: whole images, a scale and shift per channel.
    assert!(
        x.len() == s.batch * image && scale.len() >= s.channels && shift.len() >= s.channels,
        "batch norm: buffers do not fit {s:?}"
    );
    // SAFETY: the loop zips y with x (as long) over whole images, and every image's chunks
    // with a scale and shift per channel (asserted above), so it writes every entry.
    unsafe {
        written(x.len(), |y| {
            y.par_chunks_mut(image)
                .zip(x.par_chunks(image))
                .for_each(|(y, x)| {
                    vectorised(
                        #[inline(always)]
                        || {
                            if s.size == 1 {
                                // [N, C]: a row is one vector loop; as blocks of one entry, each
                                // entry was a loop of its own.
                                for ((y, &x), (&a, &b)) in
                                    y.iter_mut().zip(x).zip(scale.iter().zip(shift))
                                {
                                    y.write(f(x, a, b));
                                }
                                return;
                            }
                            for ((y, x), (&a, &b)) in y
                                .chunks_mut(s.size)
                                .zip(x.chunks(s.size))
                                .zip(scale.iter().zip(shift))
                            {
                                for (y, &x) in y.iter_mut().zip(x) {
                                    y.write(f(x, a, b));
                                }
                            }
                        },
                    )
                })
        })
    }
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
    // sum dy and sum dy (x - mean), in one pass.
    let sums = s.channel_sums(grad, x, |c| {
        let m = mean[c];
        move |g, v| [g, g * (v - m)]
    });
    let k = Adjoint::new(s, gamma, mean, var, epsilon, &sums);
    let dx = k.input(s, x, grad, |_| |g, _| g);
    (dx, k.dgamma, k.dbeta)
}

/// The adjoint of the normalisation given the per-channel sums of dy and dy (x - mean): the
/// input's as `a dy + b x + d` per channel, gamma's and beta's.
struct Adjoint {
    a: Vec<f32>,
    b: Vec<f32>,
    d: Vec<f32>,
    dgamma: Vec<f32>,
    dbeta: Vec<f32>,
}

impl Adjoint {
    fn new(
        s: &NormShape,
        gamma: &[f32],
        mean: &[f32],
        var: &[f32],
        epsilon: f64,
        sums: &[[f64; 2]],
    ) -> Self {
        let inv_std: Vec<f64> = var
            .iter()
            .map(|&v| 1.0 / (v as f64 + epsilon).sqrt())
            .collect();
        // sum dy xhat = inv_std sum dy (x - mean).
        let sum_dy: Vec<f64> = sums.iter().map(|s| s[0]).collect();
        let sum_dy_xhat: Vec<f64> = sums.iter().zip(&inv_std).map(|(s, r)| s[1] * r).collect();
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
        Self {
            a,
            b,
            d,
            dgamma: sum_dy_xhat.iter().map(|&v| v as f32).collect(),
            dbeta: sum_dy.iter().map(|&v| v as f32).collect(),
        }
    }

    /// dx = a dy + b x + d, where dy = `dy(c)(g, x)` from the matching entries of `grad` and
    /// `x` in channel c.
    fn input<D: Fn(f32, f32) -> f32>(
        &self,
        s: &NormShape,
        x: &[f32],
        grad: &[f32],
        dy: impl Fn(usize) -> D + Sync,
    ) -> Vec<f32> {
        let image = s.channels * s.size;
        if image == 0 {
            return vec![0.0; x.len()];
        }
        // `written` needs every entry written: whole images and an adjoint for each.
        assert!(
            x.len() == s.batch * image && grad.len() == x.len(),
            "batch norm: buffers do not fit {s:?}"
        );
        // SAFETY: the loop zips dx with x and the adjoint (as long, asserted above) over whole
        // images, and a channel's coefficients exist for every chunk, so it writes every entry.
        unsafe {
            written(x.len(), |dx| {
                dx.par_chunks_mut(image)
                    .zip(x.par_chunks(image).zip(grad.par_chunks(image)))
                    .for_each(|(dx, (x, g))| {
                        vectorised(
                            #[inline(always)]
                            || {
                                if s.size == 1 {
                                    // [N, C]: a row is one vector loop, as in `channel_map`.
                                    for (c, ((dx, &x), &g)) in
                                        dx.iter_mut().zip(x).zip(g).enumerate()
                                    {
                                        let (a, b, d) = (self.a[c], self.b[c], self.d[c]);
                                        dx.write(a * dy(c)(g, x) + b * x + d);
                                    }
                                    return;
                                }
                                for (c, ((dx, x), g)) in dx
                                    .chunks_mut(s.size)
                                    .zip(x.chunks(s.size))
                                    .zip(g.chunks(s.size))
                                    .enumerate()
                                {
                                    let (a, b, d) = (self.a[c], self.b[c], self.d[c]);
                                    let dy = dy(c);
                                    for ((dx, &x), &g) in dx.iter_mut().zip(x).zip(g) {
                                        dx.write(a * dy(g, x) + b * x + d);
                                    }
                                }
                            },
                        )
                    })
            })
        }
    }
}

/// Asserts that the fused layers' buffers fit `s`: every one of `inputs` [N, C, S], every one
/// of `outputs` the layer's output (pooled by `pool` when given, whose images and planes must
/// be those of `s`). A mismatch would silently truncate the zipped loops.
fn fits(s: &NormShape, pool: Option<&PoolShape>, inputs: &[&[f32]], outputs: &[&[f32]]) {
    let planes = s.batch * s.channels;
    let out = match pool {
        Some(ps) => {
            assert!(
                ps.batch == s.batch && ps.channels == s.channels && ps.plane_in() == s.size,
                "batch norm: pooling {ps:?} does not fit {s:?}"
            );
            planes * ps.plane_out()
        }
        None => planes * s.size,
    };
    assert!(
        inputs.iter().all(|b| b.len() == planes * s.size) && outputs.iter().all(|b| b.len() == out),
        "batch norm: buffers do not fit {s:?}"
    );
}

/// Batch norm followed by ReLU, and by a max pooling when `pool` is given (its batch, channels
/// and plane those of `s`), in one pass after the statistics: neither the normalised nor the
/// rectified activation is written out. Returns (y, mean, biased variance); y is
/// `max(scale x + shift, 0)` (pooled), the same arithmetic as [`affine`] followed by a ReLU
/// and [`pool::forward`], so the results are those of the three layers to the bit.
pub(crate) fn relu_forward(
    s: &NormShape,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
    pool: Option<&PoolShape>,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    fits(s, pool, &[x], &[]);
    let (mean, var) = statistics(s, x);
    let (scale, shift) = scale_shift(&mean, &var, gamma, beta, epsilon);
    let rectified = |x: f32, a: f32, b: f32| (a * x + b).max(0.0);
    let y = match pool {
        None => channel_map(s, x, &scale, &shift, rectified),
        Some(ps) => {
            let len = s.batch * s.channels * ps.plane_out();
            if s.size == 0 || len == 0 {
                vec![0.0; len]
            } else {
                let columns = ps.columns();
                // SAFETY: a plane of outputs per plane of x (asserted by `fits`), and `maxima`
                // writes every output of a plane.
                unsafe {
                    written(len, |y| {
                        y.par_chunks_mut(ps.plane_out())
                            .zip(x.par_chunks(s.size))
                            .enumerate()
                            .for_each_init(
                                || (vec![0.0f32; s.size], ps.scratch()),
                                |(z, scratch), (p, (y, x))| {
                                    let (a, b) = (scale[p % s.channels], shift[p % s.channels]);
                                    vectorised(
                                        #[inline(always)]
                                        || {
                                            for (z, &x) in z.iter_mut().zip(x) {
                                                *z = rectified(x, a, b);
                                            }
                                        },
                                    );
                                    ps.maxima(z, &columns, scratch, y);
                                },
                            )
                    })
                }
            }
        }
    };
    (y, mean, var)
}

/// The adjoints (x, gamma, beta) of [`relu_forward`] given its output's adjoint `grad` (pooled
/// when `pool` is given), the saved statistics, gamma and beta. The rectified activation is
/// recomputed from x with the forward's arithmetic, so the ReLU's mask and the pooling's
/// argmax are the forward's; the results equal those of the three layers' adjoints to the bit.
#[allow(clippy::too_many_arguments)]
pub(crate) fn relu_backward(
    s: &NormShape,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
    pool: Option<&PoolShape>,
    grad: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    fits(s, pool, &[x], &[grad]);
    let (scale, shift) = scale_shift(mean, var, gamma, beta, epsilon);
    // The forward's ReLU output max(scale x + shift, 0) is positive exactly where
    // scale x + shift is: dy through the ReLU.
    let masked = |c: usize| {
        let (a, b) = (scale[c], shift[c]);
        move |g: f32, v: f32| if a * v + b > 0.0 { g } else { 0.0 }
    };
    let Some(ps) = pool else {
        // The ReLU's mask recomputed in both passes: nothing but x and dy is read.
        let sums = s.channel_sums(grad, x, |c| {
            let (m, masked) = (mean[c], masked(c));
            move |g, v| {
                let g = masked(g, v);
                [g, g * (v - m)]
            }
        });
        let k = Adjoint::new(s, gamma, mean, var, epsilon, &sums);
        let dx = k.input(s, x, grad, masked);
        return (dx, k.dgamma, k.dbeta);
    };
    // The pooling's adjoint costs an argmax per window: computed once per plane, kept in dx's
    // buffer, and overwritten there by dx.
    if s.size == 0 || grad.is_empty() {
        let k = Adjoint::new(s, gamma, mean, var, epsilon, &vec![[0.0; 2]; s.channels]);
        return (vec![0.0; x.len()], k.dgamma, k.dbeta);
    }
    let columns = ps.columns();
    let mut planes = Vec::new();
    // SAFETY: a plane of dx per plane of x (asserted by `fits`), each zeroed whole before it is
    // read. Zeroing plane by plane, in the cache, spares a pass over the whole buffer.
    let mut dx = unsafe {
        written(x.len(), |dx| {
            planes = dx
                .par_chunks_mut(s.size)
                .zip(x.par_chunks(s.size).zip(grad.par_chunks(ps.plane_out())))
                .enumerate()
                .map_init(
                    || (vec![0.0f32; s.size], ps.scratch()),
                    |(z, scratch), (p, (dy, (x, grad)))| {
                        for dy in dy.iter_mut() {
                            dy.write(0.0);
                        }
                        // Every entry was just written: the plane reads as f32.
                        let dy = assume_written(dy);
                        let c = p % s.channels;
                        let (a, b) = (scale[c], shift[c]);
                        vectorised(
                            #[inline(always)]
                            || {
                                for (z, &x) in z.iter_mut().zip(x) {
                                    *z = (a * x + b).max(0.0);
                                }
                            },
                        );
                        ps.argmax(z, &columns, scratch, |o, i| dy[i] += grad[o]);
                        let m = mean[c];
                        vectorised(
                            #[inline(always)]
                            || {
                                // The ReLU's adjoint as Burn's: through where its output is
                                // positive.
                                for (dy, &z) in dy.iter_mut().zip(z.iter()) {
                                    *dy = if z > 0.0 { *dy } else { 0.0 };
                                }
                                block_sums(dy, x, &|g, v| [g, g * (v - m)])
                            },
                        )
                    },
                )
                .collect();
        })
    };
    let k = Adjoint::new(s, gamma, mean, var, epsilon, &s.fold_planes(&planes));
    dx.par_chunks_mut(s.size)
        .zip(x.par_chunks(s.size))
        .enumerate()
        .for_each(|(p, (dx, x))| {
            let c = p % s.channels;
            let (a, b, d) = (k.a[c], k.b[c], k.d[c]);
            vectorised(
                #[inline(always)]
                || {
                    for (dx, &x) in dx.iter_mut().zip(x) {
                        *dx = a * *dx + b * x + d;
                    }
                },
            )
        });
    (dx, k.dgamma, k.dbeta)
}

/// relu(batch norm of x + residual), x and the residual [N, C, S]: the second half of a
/// ResNet block in one pass after the statistics. Returns (y, mean, biased variance); the
/// arithmetic is [`affine`]'s, then the sum, then the ReLU, as when the three layers run in turn.
pub(crate) fn add_relu_forward(
    s: &NormShape,
    x: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    fits(s, None, &[x, residual], &[]);
    let (mean, var) = statistics(s, x);
    let (scale, shift) = scale_shift(&mean, &var, gamma, beta, epsilon);
    if s.size == 0 {
        return (vec![0.0; x.len()], mean, var);
    }
    let image = s.channels * s.size;
    // SAFETY: the images of y, x and the residual match one for one (lengths asserted by
    // `fits`), and each image's planes one per channel, so every entry of y is written.
    // Whole images per task: planes of the last stages hold 4 or 16 entries.
    let y = unsafe {
        written(x.len(), |y| {
            y.par_chunks_mut(image)
                .zip(x.par_chunks(image).zip(residual.par_chunks(image)))
                .for_each(|(y, (x, r))| {
                    vectorised(
                        #[inline(always)]
                        || {
                            for (c, ((y, x), r)) in y
                                .chunks_mut(s.size)
                                .zip(x.chunks(s.size))
                                .zip(r.chunks(s.size))
                                .enumerate()
                            {
                                let (a, b) = (scale[c], shift[c]);
                                for ((y, &x), &r) in y.iter_mut().zip(x).zip(r) {
                                    y.write((a * x + b + r).max(0.0));
                                }
                            }
                        },
                    )
                });
        })
    };
    (y, mean, var)
}

/// The adjoints (x, gamma, beta, residual) of [`add_relu_forward`] given its output's adjoint.
/// The ReLU's mask is recomputed from x and the residual with the forward's arithmetic; the
/// residual's adjoint is the output's through the mask, which is also batch norm's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_relu_backward(
    s: &NormShape,
    x: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
    grad: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    fits(s, None, &[x, residual, grad], &[]);
    let (scale, shift) = scale_shift(mean, var, gamma, beta, epsilon);
    let image = s.channels * s.size;
    let mut planes = vec![[0.0; 2]; s.batch * s.channels];
    // SAFETY: the images of dr, x, the residual and the adjoint match one for one (lengths
    // asserted by `fits`), each image's planes one per channel, and every entry of a plane is
    // written before the plane is read; with no entries there is nothing to write.
    let dr = unsafe {
        written(x.len(), |dr| {
            if image == 0 {
                return;
            }
            // Whole images per task, each image's planes in channel order: the planes' sums
            // in [N, C] order as `fold_planes` takes them.
            let per_image: Vec<Vec<[f64; 2]>> = dr
                .par_chunks_mut(image)
                .zip(x.par_chunks(image))
                .zip(residual.par_chunks(image).zip(grad.par_chunks(image)))
                .map(|((dr, x), (r, g))| {
                    vectorised(
                        #[inline(always)]
                        || {
                            let planes = dr
                                .chunks_mut(s.size)
                                .zip(x.chunks(s.size))
                                .zip(r.chunks(s.size).zip(g.chunks(s.size)));
                            // A loop, not `map` and `collect`: the compiler kept the closure
                            // of an iterator chain out of line, and the reduction inside it
                            // compiled without the vector width.
                            let mut sums = Vec::with_capacity(s.channels);
                            for (c, ((dr, x), (r, g))) in planes.enumerate() {
                                let (a, b, m) = (scale[c], shift[c], mean[c]);
                                for (((d, &x), &r), &g) in dr.iter_mut().zip(x).zip(r).zip(g) {
                                    d.write(if a * x + b + r > 0.0 { g } else { 0.0 });
                                }
                                // The loop above wrote every entry of the plane (see the SAFETY
                                // note above): it reads as f32.
                                let dr = assume_written(dr);
                                sums.push(block_sums(dr, x, &|g, v| [g, g * (v - m)]));
                            }
                            sums
                        },
                    )
                })
                .collect();
            planes = per_image.concat();
        })
    };
    let k = Adjoint::new(s, gamma, mean, var, epsilon, &s.fold_planes(&planes));
    let dx = k.input(s, x, &dr, |_| |g, _| g);
    (dx, k.dgamma, k.dbeta, dr)
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

    /// The fused layer against batch norm, ReLU and max pooling run one after the other by
    /// their own kernels, to the bit: values, and the adjoints of x, gamma and beta (negative
    /// gamma, entries on both sides of zero, ties in the pooling windows).
    #[test]
    fn fused_relu_and_pooling_equal_the_layers_in_turn() {
        let s = NormShape {
            batch: 3,
            channels: 4,
            size: 7 * 6,
        };
        let pools = [
            None,
            Some(PoolShape {
                batch: 3,
                channels: 4,
                height: 7,
                width: 6,
                kernel: [3, 3],
                stride: [2, 2],
                padding: [1, 1],
            }),
            Some(PoolShape {
                batch: 3,
                channels: 4,
                height: 7,
                width: 6,
                kernel: [2, 3],
                stride: [1, 2],
                padding: [0, 1],
            }),
        ];
        // Steps of 1/250 repeat within a window: ties.
        let x = values(s.batch * s.channels * s.size, 5);
        let gamma = [1.3f32, -0.7, 0.4, 2.0];
        let beta = [0.2f32, 0.5, -0.3, 0.0];
        let relu = |v: &[f32]| v.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>();
        for pool in pools {
            let (y, mean, var) = relu_forward(&s, &x, &gamma, &beta, 1e-5, pool.as_ref());
            let (normalised, mean_0, var_0) = forward_train(&s, &x, &gamma, &beta, 1e-5);
            let rectified = relu(&normalised);
            let want = match &pool {
                Some(ps) => crate::cpu::pool::forward(ps, &rectified),
                None => rectified.clone(),
            };
            assert_eq!((&y, &mean, &var), (&want, &mean_0, &var_0), "{pool:?}");
            let grad = values(y.len(), 6);
            let adjoints = relu_backward(
                &s,
                &x,
                &gamma,
                &beta,
                &mean,
                &var,
                1e-5,
                pool.as_ref(),
                &grad,
            );
            let dz = match &pool {
                Some(ps) => crate::cpu::pool::backward(ps, &rectified, &grad),
                None => grad.clone(),
            };
            let dz: Vec<f32> = dz
                .iter()
                .zip(&rectified)
                .map(|(&g, &z)| if z > 0.0 { g } else { 0.0 })
                .collect();
            assert!(dz.contains(&0.0) && dz.iter().any(|&g| g != 0.0));
            let want = backward(&s, &x, &gamma, &mean, &var, 1e-5, &dz);
            assert_eq!(adjoints, want, "{pool:?}");
        }
    }

    /// The fused second half of a block against batch norm, the residual sum and ReLU in
    /// turn, to the bit.
    #[test]
    fn fused_residual_and_relu_equal_the_layers_in_turn() {
        let s = NormShape {
            batch: 3,
            channels: 4,
            size: 13,
        };
        let x = values(s.batch * s.channels * s.size, 7);
        let residual = values(x.len(), 8);
        let gamma = [1.3f32, -0.7, 0.4, 2.0];
        let beta = [0.2f32, 0.5, -0.3, 0.0];
        let (y, mean, var) = add_relu_forward(&s, &x, &residual, &gamma, &beta, 1e-5);
        let (normalised, mean_0, var_0) = forward_train(&s, &x, &gamma, &beta, 1e-5);
        let want: Vec<f32> = normalised
            .iter()
            .zip(&residual)
            .map(|(t, r)| (t + r).max(0.0))
            .collect();
        assert_eq!((&y, &mean, &var), (&want, &mean_0, &var_0));
        let grad = values(y.len(), 9);
        let (dx, dgamma, dbeta, dr) =
            add_relu_backward(&s, &x, &residual, &gamma, &beta, &mean, &var, 1e-5, &grad);
        let masked: Vec<f32> = grad
            .iter()
            .zip(&want)
            .map(|(&g, &y)| if y > 0.0 { g } else { 0.0 })
            .collect();
        assert!(masked.contains(&0.0) && masked.iter().any(|&g| g != 0.0));
        assert_eq!(dr, masked);
        let want = backward(&s, &x, &gamma, &mean, &var, 1e-5, &masked);
        assert_eq!((dx, dgamma, dbeta), want);
    }

    /// Both paths of `channel_sums` (rows of short blocks, planes of long ones) against the
    /// per-channel loop they replaced, bit for bit: sizes under and over the lanes, channels
    /// over one task's group, an empty batch and no channels, and zeros of both signs among
    /// the entries (one channel all negative zeros).
    #[test]
    fn channel_sums_equal_the_per_channel_loop_to_the_bit() {
        let shapes = [
            (9usize, 130usize, 1usize),
            (9, 3, 1),
            (9, 70, 2),
            (9, 64, 4),
            (9, 5, 7),
            (9, 4, 0),
            (9, 5, 8),
            (9, 3, 13),
            (7, 6, 49),
            (0, 3, 5),
            (0, 3, 16),
            (4, 0, 5),
        ];
        for (batch, channels, size) in shapes {
            let s = NormShape {
                batch,
                channels,
                size,
            };
            let len = batch * channels * size;
            let x: Vec<f32> = values(len, 5)
                .iter()
                .enumerate()
                .map(
                    |(i, &v)| match ((i / size.max(1)) % channels.max(1), i % 11) {
                        (1, _) => -0.0,
                        (_, 3) => 0.0,
                        // Magnitudes from 2^-60 to 2^60: the f64 sums round, so another
                        // order of the additions shows.
                        _ => v * 2f32.powi((i * 37 % 121) as i32 - 60),
                    },
                )
                .collect();
            let g = values(len, 6);
            let f = |c: usize| move |g: f32, v: f32| [g, g * (v - c as f32), -v];
            // The loop `channel_sums` was: a channel at a time, its blocks in image order.
            let want: Vec<[f64; 3]> = (0..channels)
                .map(|c| {
                    let mut sums = [0.0; 3];
                    for n in 0..batch {
                        let start = (n * channels + c) * size;
                        let block =
                            block_sums(&g[start..start + size], &x[start..start + size], &f(c));
                        for (t, v) in sums.iter_mut().zip(block) {
                            *t += v;
                        }
                    }
                    sums
                })
                .collect();
            let got = s.channel_sums(&g, &x, f);
            assert_eq!(got.len(), channels);
            for (c, (a, b)) in got.iter().zip(&want).enumerate() {
                for k in 0..3 {
                    assert_eq!(
                        a[k].to_bits(),
                        b[k].to_bits(),
                        "{batch} x {channels} x {size}: channel {c} sum {k}"
                    );
                }
            }
        }
    }

    /// Against the two-pass definition in f64, on channels far from zero (where a sum of
    /// squares minus the squared mean would lose the variance), with blocks of several sizes.
    /// (Offsets much larger than 1e2 times the spread would meet the f32 rounding of the mean,
    /// which the variance then inherits.)
    #[test]
    fn statistics_match_the_two_pass_definition() {
        for size in [1usize, 5, 13, 49, 64, 100, 196] {
            let s = NormShape {
                batch: 6,
                channels: 3,
                size,
            };
            let x: Vec<f32> = values(6 * 3 * size, 4)
                .iter()
                .enumerate()
                .map(|(i, v)| 1e2 * (1 + (i / size) % 3) as f32 + 0.1 * v)
                .collect();
            let (mean, var) = statistics(&s, &x);
            for c in 0..3 {
                let channel: Vec<f64> = (0..6)
                    .flat_map(|n| {
                        let start = (n * 3 + c) * size;
                        x[start..start + size].iter().map(|&v| v as f64)
                    })
                    .collect();
                let m = channel.iter().sum::<f64>() / channel.len() as f64;
                let v =
                    channel.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / channel.len() as f64;
                assert!(
                    (mean[c] as f64 - m).abs() < 1e-7 * m.abs(),
                    "{size} {c}: {} vs {m}",
                    mean[c]
                );
                assert!(
                    (var[c] as f64 - v).abs() < 1e-4 * v,
                    "{size} {c}: {} vs {v}",
                    var[c]
                );
            }
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
