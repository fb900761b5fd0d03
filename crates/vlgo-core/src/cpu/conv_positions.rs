//! Convolutions on small output maps as one product per output position over the whole batch,
//! with only the kernel offsets that fall inside the image.
//!
//! On the 2 x 2 maps of a ResNet's last stage on small images, a 3 x 3 kernel with padding 1
//! reaches past the image for most offsets: every position sees 4 of its 9 offsets inside. The
//! im2col path multiplies the padding's zeros like any other entry, so 56 % of its products'
//! work is on zeros, and it packs columns of 4 entries per image. Here output position p is the product of the weights at its
//! valid offsets, [C_out, C_in x offsets], with those offsets' input pixels for every image of the
//! batch, [C_in x offsets, N]: long rows (N entries) and no zeros. The batch is transposed once
//! to [C_in x H x W, N] so that each such row is one copy, and the output back from position-major.
//!
//! The adjoints are the transposed products per position, summed over positions in position
//! order (input adjoint, per pixel; weight adjoint, per offset), so the result does not depend on
//! the number of threads. The sums run in another order than the im2col path's, so results agree
//! with it to rounding, not bit for bit.
//!
//! Where every output position sees every input pixel (a 3 x 3 "same" convolution on a 2 x 2
//! map), the convolution of one image is a dense linear map from its C_in H W inputs to its
//! C_out P outputs, and the whole batch is one product in Burn's own layout: [N, C_in H W] times
//! that map as a [C_in H W, C_out P] matrix, the weights at their offsets. The product is as
//! long as the per-position ones together (no zeros: each pair of pixel and position has one
//! offset), but it is one product spread over the threads, and neither the batch nor the output
//! is transposed. The weight's adjoint is the product's adjoint, [C_in H W, C_out P], summed back
//! onto the offsets in position order.

use rayon::prelude::*;

use super::conv::ConvShape;
use super::gemm::{View, product, product_into, written};

/// The largest output map taken (positions). Per layer, on 512 images: 2.5-2.8x faster at
/// 2 x 2 outputs (128 channels); at 4 x 4 outputs the forward was 1.0-1.6x faster but the
/// adjoints 0.6-0.9x as fast, their sixteen per-position products and the sums over them
/// costing more than the zeros they skip (`docs/pretrain.md`).
const MAX_POSITIONS: usize = 4;

/// Where the per-position path is used: small output maps of a batch large enough for the
/// products' columns.
pub(crate) fn applies(s: &ConvShape) -> bool {
    let p = s.positions();
    p > 0 && p <= MAX_POSITIONS && s.batch >= MIN_BATCH && s.channels_in * s.channels_out > 0
}

/// Images below which a product per position would be too narrow.
const MIN_BATCH: usize = 64;

/// The valid kernel offsets of one output position: (offset index ki kw + kj, input pixel
/// ih W + iw) for each offset whose input pixel lies inside the image.
fn taps(s: &ConvShape, p: usize) -> Vec<(usize, usize)> {
    let [_, wo] = s.out();
    let (oh, ow) = (p / wo, p % wo);
    let [kh, kw] = s.kernel;
    let mut taps = Vec::new();
    for ki in 0..kh {
        let ih = s.source(0, oh, ki);
        if ih < 0 || ih >= s.height as isize {
            continue;
        }
        for kj in 0..kw {
            let iw = s.source(1, ow, kj);
            if iw >= 0 && iw < s.width as isize {
                taps.push((ki * kw + kj, ih as usize * s.width + iw as usize));
            }
        }
    }
    taps
}

/// `src` [rows, cols] transposed to [cols, rows], in blocks that stay in cache.
fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const BLOCK: usize = 32;
    let mut dst = vec![0.0f32; rows * cols];
    dst.par_chunks_mut(BLOCK * rows)
        .enumerate()
        .for_each(|(jb, dst)| {
            let j0 = jb * BLOCK;
            for i0 in (0..rows).step_by(BLOCK) {
                for (dj, dst) in dst.chunks_mut(rows).enumerate() {
                    for i in i0..(i0 + BLOCK).min(rows) {
                        dst[i] = src[i * cols + j0 + dj];
                    }
                }
            }
        });
    dst
}

/// One position's operands, each when its source is given: the weights at its valid offsets,
/// [C_out, C_in x taps], and the inputs there, [C_in x taps, N], rows in (channel, tap) order.
fn operands(
    s: &ConvShape,
    weight: Option<&[f32]>,
    xt: Option<&[f32]>,
    taps: &[(usize, usize)],
) -> (Vec<f32>, Vec<f32>) {
    let (n, ci, co) = (s.batch, s.channels_in, s.channels_out);
    let (k, hw) = (s.kernel[0] * s.kernel[1], s.height * s.width);
    let kp = ci * taps.len();
    if kp == 0 {
        // A position that sees only padding: no operands (its output is zero).
        return (Vec::new(), Vec::new());
    }
    let wp = weight.map_or_else(Vec::new, |weight| {
        let mut wp = vec![0.0f32; co * kp];
        for (o, row) in wp.chunks_exact_mut(kp).enumerate() {
            for c in 0..ci {
                for (j, &(t, _)) in taps.iter().enumerate() {
                    row[c * taps.len() + j] = weight[(o * ci + c) * k + t];
                }
            }
        }
        wp
    });
    let xp = xt.map_or_else(Vec::new, |xt| {
        let mut xp = vec![0.0f32; kp * n];
        for (r, row) in xp.chunks_exact_mut(n).enumerate() {
            let (c, j) = (r / taps.len(), r % taps.len());
            let src = (c * hw + taps[j].1) * n;
            row.copy_from_slice(&xt[src..src + n]);
        }
        xp
    });
    (wp, xp)
}

/// Whether the shape takes the one-product form (every position sees every pixel).
#[cfg(test)]
pub(crate) fn whole(s: &ConvShape) -> bool {
    whole_map(s).is_some()
}

/// The offset through which each position sees each pixel, `[P][H W]`, where every position sees
/// every pixel (through one offset each: distinct offsets reach distinct pixels); `None` otherwise.
fn whole_map(s: &ConvShape) -> Option<Vec<Vec<usize>>> {
    let hw = s.height * s.width;
    (0..s.positions())
        .map(|p| {
            let taps = taps(s, p);
            (taps.len() == hw).then(|| {
                let mut offset = vec![0; hw];
                for (t, pixel) in taps {
                    offset[pixel] = t;
                }
                offset
            })
        })
        .collect()
}

/// The convolution as one [C_in H W, C_out P] matrix (see the module's documentation): entry
/// (c H W + pixel, o P + p) is the weight of the offset through which position p sees the pixel.
fn dense_weight(s: &ConvShape, weight: &[f32], offsets: &[Vec<usize>]) -> Vec<f32> {
    let (ci, co, p) = (s.channels_in, s.channels_out, offsets.len());
    let (k, hw) = (s.kernel[0] * s.kernel[1], s.height * s.width);
    let mut dense = vec![0.0f32; ci * hw * co * p];
    dense
        .par_chunks_mut(co * p)
        .enumerate()
        .for_each(|(r, row)| {
            let (c, pixel) = (r / hw, r % hw);
            for (o, outs) in row.chunks_exact_mut(p).enumerate() {
                for (v, offset) in outs.iter_mut().zip(offsets) {
                    *v = weight[(o * ci + c) * k + offset[pixel]];
                }
            }
        });
    dense
}

/// [`forward`] where every position sees every pixel: one product over the batch.
fn forward_whole(s: &ConvShape, x: &[f32], weight: &[f32], offsets: &[Vec<usize>]) -> Vec<f32> {
    let (n, cols) = (s.batch, s.channels_out * offsets.len());
    let rows = s.channels_in * s.height * s.width;
    let dense = dense_weight(s, weight, offsets);
    // SAFETY: x is [n, rows], dense [rows, cols].
    unsafe {
        fresh_product(
            (n, cols, rows),
            View::rows(x, rows),
            View::rows(&dense, cols),
        )
    }
}

/// A new [m, n] buffer holding lhs [m, k] rhs [k, n], computed over rayon's threads.
///
/// # Safety
/// As for [`product_into`]: the views must address m x k and k x n matrices in live slices.
unsafe fn fresh_product(dims: (usize, usize, usize), lhs: View, rhs: View) -> Vec<f32> {
    let (m, n, _) = dims;
    // SAFETY: the caller's contract; the product writes all m x n entries.
    unsafe { written(m * n, |out| product_into(dims, out, n, lhs, rhs, true)) }
}

/// [`backward`] where every position sees every pixel: the input's adjoint is one product with
/// the dense map's transpose, the weight's the dense map's adjoint summed onto the offsets.
fn backward_whole(
    s: &ConvShape,
    (x, weight, grad): (&[f32], &[f32], &[f32]),
    offsets: &[Vec<usize>],
    want_input: bool,
    want_weight: bool,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (n, ci) = (s.batch, s.channels_in);
    let (p, k, hw) = (offsets.len(), s.kernel[0] * s.kernel[1], s.height * s.width);
    let (rows, cols) = (ci * hw, s.channels_out * p);
    let dx = want_input.then(|| {
        let dense = dense_weight(s, weight, offsets);
        let (grad, dense) = (View::rows(grad, cols), View::transposed(&dense, cols));
        // SAFETY: grad is [n, cols], dense [rows, cols] read transposed.
        unsafe { fresh_product((n, rows, cols), grad, dense) }
    });
    let dw = want_weight.then(|| {
        let (xt, grad) = (View::transposed(x, rows), View::rows(grad, cols));
        // SAFETY: x is [n, rows] read transposed, grad [n, cols].
        let dense = unsafe { fresh_product((rows, cols, n), xt, grad) };
        let mut dw = vec![0.0f32; s.channels_out * ci * k];
        dw.par_chunks_mut(k).enumerate().for_each(|(oc, dw)| {
            let (o, c) = (oc / ci, oc % ci);
            for (p0, offset) in offsets.iter().enumerate() {
                for (pixel, &t) in offset.iter().enumerate() {
                    dw[t] += dense[(c * hw + pixel) * cols + o * p + p0];
                }
            }
        });
        dw
    });
    (dx, dw)
}

/// The convolution of `x` [N, C_in, H, W] with `weight` [C_out, C_in, kh, kw], as [N, C_out,
/// Ho, Wo] (no bias).
pub(crate) fn forward(s: &ConvShape, x: &[f32], weight: &[f32]) -> Vec<f32> {
    if let Some(offsets) = whole_map(s) {
        return forward_whole(s, x, weight, &offsets);
    }
    let (n, ci, co, p) = (s.batch, s.channels_in, s.channels_out, s.positions());
    let xt = transpose(x, n, ci * s.height * s.width);
    let outs: Vec<Vec<f32>> = (0..p)
        .into_par_iter()
        .map(|p| {
            let taps = taps(s, p);
            let (wp, xp) = operands(s, Some(weight), Some(&xt), &taps);
            let mut out = vec![0.0f32; co * n];
            if taps.is_empty() {
                return out;
            }
            // SAFETY: wp is [co, kp], xp [kp, n], out [co, n].
            unsafe {
                product(
                    (co, n, ci * taps.len()),
                    &mut out,
                    n,
                    false,
                    View::rows(&wp, ci * taps.len()),
                    View::rows(&xp, n),
                    false,
                )
            };
            out
        })
        .collect();
    // SAFETY: each image's C_out x P entries are written, one per (channel, position).
    unsafe {
        written(n * co * p, |dst| {
            dst.par_chunks_mut(co * p)
                .enumerate()
                .for_each(|(b, image)| {
                    for (o, row) in image.chunks_mut(p).enumerate() {
                        for (v, out) in row.iter_mut().zip(&outs) {
                            v.write(out[o * n + b]);
                        }
                    }
                })
        })
    }
}

/// One position's share of the adjoints: its valid offsets, and the products over them.
struct Part {
    taps: Vec<(usize, usize)>,
    /// [C_out, C_in x taps], empty when the weight's adjoint is not wanted.
    dw: Vec<f32>,
    /// [C_in x taps, N], empty when the input's adjoint is not wanted.
    dx: Vec<f32>,
}

/// What [`super::conv::backward`] computes (the adjoints wanted of the input and of the
/// weight, from the output's adjoint `grad`), by the products per position.
pub(crate) fn backward(
    s: &ConvShape,
    x: &[f32],
    weight: &[f32],
    grad: &[f32],
    want_input: bool,
    want_weight: bool,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    if let Some(offsets) = whole_map(s) {
        return backward_whole(s, (x, weight, grad), &offsets, want_input, want_weight);
    }
    let (n, ci, co, p) = (s.batch, s.channels_in, s.channels_out, s.positions());
    let (k, hw) = (s.kernel[0] * s.kernel[1], s.height * s.width);
    let xt = want_weight.then(|| transpose(x, n, ci * hw));
    // [C_out x P, N]: position p's adjoint is rows o P + p.
    let gt = transpose(grad, n, co * p);
    let parts: Vec<Part> = (0..p)
        .into_par_iter()
        .map(|p0| {
            let taps = taps(s, p0);
            let kp = ci * taps.len();
            let (wp, xp) = operands(s, want_input.then_some(weight), xt.as_deref(), &taps);
            let dy = View::rows(&gt[p0 * n..], p * n);
            let mut dw = Vec::new();
            if want_weight && kp > 0 {
                dw = vec![0.0f32; co * kp];
                // SAFETY: dy is [co, n] with row stride P n, xp [kp, n] read transposed,
                // dw [co, kp].
                unsafe {
                    product(
                        (co, kp, n),
                        &mut dw,
                        kp,
                        false,
                        dy,
                        View::transposed(&xp, n),
                        false,
                    )
                };
            }
            let mut dx = Vec::new();
            if want_input && kp > 0 {
                dx = vec![0.0f32; kp * n];
                // SAFETY: wp is [co, kp] read transposed, dy [co, n], dx [kp, n].
                unsafe {
                    product(
                        (kp, n, co),
                        &mut dx,
                        n,
                        false,
                        View::transposed(&wp, kp),
                        dy,
                        false,
                    )
                };
            }
            Part { taps, dw, dx }
        })
        .collect();
    let dw = want_weight.then(|| {
        let mut dw = vec![0.0f32; co * ci * k];
        // Positions that see only padding add nothing (their parts are empty).
        for Part { taps, dw: part, .. } in parts.iter().filter(|part| !part.taps.is_empty()) {
            let kp = ci * taps.len();
            for (o, row) in part.chunks_exact(kp).enumerate() {
                for c in 0..ci {
                    for (j, &(t, _)) in taps.iter().enumerate() {
                        dw[(o * ci + c) * k + t] += row[c * taps.len() + j];
                    }
                }
            }
        }
        dw
    });
    let dx = want_input.then(|| {
        // Where each position's adjoint rows land: pixel -> its row within the position's taps.
        let slots: Vec<Vec<Option<usize>>> = parts
            .iter()
            .map(|Part { taps, .. }| {
                let mut slot = vec![None; hw];
                for (j, &(_, pixel)) in taps.iter().enumerate() {
                    slot[pixel] = Some(j);
                }
                slot
            })
            .collect();
        let mut dxt = vec![0.0f32; ci * hw * n];
        dxt.par_chunks_mut(n).enumerate().for_each(|(r, row)| {
            let (c, pixel) = (r / hw, r % hw);
            for (Part { taps, dx: part, .. }, slot) in parts.iter().zip(&slots) {
                if let Some(j) = slot[pixel] {
                    let src = (c * taps.len() + j) * n;
                    row.iter_mut()
                        .zip(&part[src..src + n])
                        .for_each(|(d, v)| *d += v);
                }
            }
        });
        transpose(&dxt, ci * hw, n)
    });
    (dx, dw)
}
