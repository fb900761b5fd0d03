//! The 3 x 3 "same" convolution (stride 1, padding 1, no dilation) without a column buffer:
//! one register-tiled kernel sums the nine kernel offsets over a zero-bordered layout of the
//! images (an implicit GEMM).
//!
//! A group of images is laid out per channel as one long row: each image's rows with one zero
//! after each (a zero column shared by the right edge of a row and the left edge of the next),
//! and one zero row after each image (shared by the bottom of an image and the top of the
//! next), between zero margins. In that layout the neighbour of a position at kernel offset
//! (ki, kj) lies at a fixed shift, (ki - 1) (W + 1) + kj - 1, and the neighbours that the
//! convolution pads with zeros are the zeros of the layout. So the output at every position of
//! the layout is a sum over input channels and the nine offsets of a weight times the input at
//! a shifted position, and [`shifted_product`] computes it with each output tile's nine
//! offsets summed in registers. The positions that stand for the layout's zeros are computed
//! and dropped: (H + 1) (W + 1) columns per image for H W outputs. The input's adjoint is the
//! same product from the output adjoint's layout with the kernels flipped; the weight's adjoint
//! is [`shifted_gram`], sums over the positions of the output's adjoint times the shifted input.
//!
//! The im2col path (`conv.rs`) writes nine shifted copies of every input, 9 C_in rows per
//! output position, and its product reads them back (and packs them again); in the backward
//! the input's adjoint goes through a column buffer as large and col2im's sums. At the first
//! stages of a ResNet on small images that copying cost as much as the arithmetic. Here each
//! operand is copied once into the layout and each result once out of it. Sums run in another
//! order than the im2col path's (input channel outermost, then the offsets), so results agree
//! with it to rounding, not bit for bit; they do not depend on the number of threads.

use std::mem::MaybeUninit;

use super::conv::ConvShape;
use super::gemm::as_uninit;
#[cfg(doc)]
use super::simd::fold_lanes;
use super::simd::{SHIFT_ALIGN, shifted_gram, shifted_product};

/// Output positions a group should have at least: images are grouped to reach it. The weight
/// adjoint's kernel loads and stores its accumulators once per group, so longer groups spread
/// that cost (per layer, both adjoints: 3.2 ms at 1,024 against 3.4 ms at 256 and 512 positions
/// for 512 images of 16 x 14 x 14).
const GRID_COLUMNS: usize = 1024;

/// Where the grid path is used: a 3 x 3 stride-1 convolution padded by 1, on maps whose layout
/// wastes little. The layout computes (H + 1) (W + 1) positions for H W outputs: 1.15x at
/// 14 x 14, 1.31x at 7 x 7, 1.56x at 4 x 4 and 2.25x at 2 x 2, where the extra work
/// outweighs the copies saved (measured per layer: `docs/pretrain.md`).
pub(crate) fn applies(s: &ConvShape) -> bool {
    s.kernel == [3, 3]
        && s.stride == [1, 1]
        && s.padding == [1, 1]
        && s.dilation == [1, 1]
        && s.height >= MIN_SIDE
        && s.width >= MIN_SIDE
        && s.channels_in >= MIN_CHANNELS
        && s.channels_out >= MIN_CHANNELS
}

/// The smallest map side the grid path takes (see [`applies`]).
const MIN_SIDE: usize = 7;

/// Each shifted product sums over C_in (forward, weight adjoint) or C_out (input adjoint)
/// terms: with fewer than this, the products are too thin (a one-channel stem keeps im2col).
const MIN_CHANNELS: usize = 8;

/// The layout of one group of images (see the module's documentation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    height: usize,
    width: usize,
    images: usize,
}

impl Grid {
    pub(crate) fn new(s: &ConvShape, images: usize) -> Self {
        Self::sized(s.height, s.width, images)
    }

    /// The layout of `images` maps of `height` x `width`.
    pub(crate) fn sized(height: usize, width: usize, images: usize) -> Self {
        Self {
            height,
            width,
            images,
        }
    }

    /// Images per group for the shape: enough for [`GRID_COLUMNS`] positions.
    pub(crate) fn group(s: &ConvShape) -> usize {
        let plane = (s.height + 1) * (s.width + 1);
        GRID_COLUMNS.div_ceil(plane.max(1)).clamp(1, s.batch.max(1))
    }

    /// Stride between grid rows.
    pub(crate) fn row(&self) -> usize {
        self.width + 1
    }

    /// Positions per image: its rows and the zero row after it.
    pub(crate) fn plane(&self) -> usize {
        (self.height + 1) * self.row()
    }

    /// Zeros before the first image and after the last: the largest shift.
    pub(crate) fn margin(&self) -> usize {
        self.row() + 1
    }

    /// The output positions of the group, rounded up to the kernels' tile width: the
    /// products' columns.
    pub(crate) fn columns(&self) -> usize {
        (self.images * self.plane()).next_multiple_of(SHIFT_ALIGN)
    }

    /// Floats per channel: the margins and the positions.
    pub(crate) fn len(&self) -> usize {
        2 * self.margin() + self.columns()
    }

    /// Where kernel offset (ki, kj), ki and kj in 0..3 in row-major order, reads a channel's
    /// row for output position 0: the margin plus the offset's shift.
    fn shifts(&self) -> [usize; 9] {
        let row = self.row();
        std::array::from_fn(|k| (k / 3) * row + k % 3)
    }

    /// `buf` as [channels, len]: the group's images `src` ([images, channels, H, W]) in the
    /// layout, every other entry zero.
    pub(crate) fn fill(&self, src: &[f32], channels: usize, buf: &mut Vec<f32>) {
        let (h, w, row, plane, margin) = (
            self.height,
            self.width,
            self.row(),
            self.plane(),
            self.margin(),
        );
        // Every entry is written below (the pixels copied, the rest zeroed), so the buffer
        // keeps its old contents rather than being zeroed first.
        buf.resize(channels * self.len(), 0.0);
        let images = self.images;
        debug_assert_eq!(src.len(), images * channels * h * w);
        for (c, dst) in buf.chunks_exact_mut(self.len()).enumerate() {
            let (head, rest) = dst.split_at_mut(margin);
            head.fill(0.0);
            let (body, tail) = rest.split_at_mut(images * plane);
            tail.fill(0.0);
            for (i, image) in body.chunks_exact_mut(plane).enumerate() {
                let start = (i * channels + c) * h * w;
                let (rows, zero_row) = image.split_at_mut(h * row);
                zero_row.fill(0.0);
                for (d, s) in rows
                    .chunks_exact_mut(row)
                    .zip(src[start..start + h * w].chunks_exact(w))
                {
                    d[..w].copy_from_slice(s);
                    d[w] = 0.0;
                }
            }
        }
    }

    /// [`shifted_product`] of `weight` over `input` (rows `ld` apart) at every position of
    /// the layout, into `out` ([rows, columns]), then its pixels into `dst` ([images, rows, H,
    /// W]), every entry written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn product_gather(
        &self,
        weight: &[f32],
        input: &[f32],
        (rows, depth): (usize, usize),
        ld: usize,
        shifts: &[usize],
        out: &mut Vec<f32>,
        dst: &mut [MaybeUninit<f32>],
    ) {
        let cols = self.columns();
        out.resize(rows * cols, 0.0);
        shifted_product(weight, input, out, (rows, depth), ld, cols, shifts);
        self.gather(out, rows, dst);
    }

    /// [`shifted_gram`] of the output adjoint `grad` in this layout ([rows, len]) against
    /// `input` (rows `ld` apart), added into `lanes`.
    pub(crate) fn gram(
        &self,
        grad: &[f32],
        input: &[f32],
        (rows, depth): (usize, usize),
        ld: usize,
        shifts: &[usize; 9],
        lanes: &mut [f32],
    ) {
        // The adjoint's zeros at the layout's zeros keep the dropped positions out of the sums.
        let grad = (&grad[self.margin()..], self.len());
        shifted_gram(
            grad,
            input,
            lanes,
            (rows, depth),
            ld,
            self.columns(),
            shifts,
        );
    }

    /// The group's images ([images, channels, H, W]) from `grid` ([channels, columns], no
    /// margins): the positions that stand for pixels.
    pub(crate) fn gather(&self, grid: &[f32], channels: usize, dst: &mut [MaybeUninit<f32>]) {
        let (h, w, row, plane) = (self.height, self.width, self.row(), self.plane());
        let columns = self.columns();
        for (i, image) in dst.chunks_exact_mut(channels * h * w).enumerate() {
            for (c, dst_plane) in image.chunks_exact_mut(h * w).enumerate() {
                let start = c * columns + i * plane;
                let src = &grid[start..start + h * row];
                for (d, s) in dst_plane.chunks_exact_mut(w).zip(src.chunks_exact(row)) {
                    for (d, &s) in d.iter_mut().zip(s) {
                        d.write(s);
                    }
                }
            }
        }
    }
}

/// The weights as [`shifted_product`] takes them for the input's adjoint: [C_in, C_out, 3, 3],
/// each kernel flipped (offset k of the adjoint is offset 8 - k of the forward, whose shift is
/// the opposite). The forward takes the weights as they are.
pub(crate) fn pack_adjoint(weight: &[f32], co: usize, ci: usize) -> Vec<f32> {
    let mut packed = vec![0.0; 9 * ci * co];
    for (i, taps) in weight.chunks_exact(9).take(co * ci).enumerate() {
        let (o, c) = (i / ci, i % ci);
        for (k, &v) in taps.iter().enumerate() {
            packed[(c * co + o) * 9 + 8 - k] = v;
        }
    }
    packed
}

/// Scratch buffers of a thread, kept across its groups.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) input: Vec<f32>,
    pub(crate) grad: Vec<f32>,
    pub(crate) out: Vec<f32>,
}

/// The convolution of one group of images `x` ([images, C_in, H, W]) with `weight` ([C_out,
/// C_in, 3, 3]) into `out` ([images, C_out, H, W]), every entry written.
pub(crate) fn forward_group(
    s: &ConvShape,
    x: &[f32],
    weight: &[f32],
    out: &mut [MaybeUninit<f32>],
    scratch: &mut Scratch,
) {
    let (ci, co) = (s.channels_in, s.channels_out);
    let grid = Grid::new(s, x.len() / (ci * s.height * s.width));
    grid.fill(x, ci, &mut scratch.input);
    let (input, ld) = (&scratch.input, grid.len());
    grid.product_gather(
        weight,
        input,
        (co, ci),
        ld,
        &grid.shifts(),
        &mut scratch.out,
        out,
    );
}

/// One group's part of the convolution's adjoints, given the output's adjoint `dy` ([images,
/// C_out, H, W]) and the group's input `x`: the weight adjoint added into `lanes` (see
/// [`shifted_gram`]; [`fold_lanes`] gives [C_out, C_in, 3, 3]), and the input adjoint written
/// into `dx` ([images, C_in, H, W]) with the weights `adjoint` packed by [`pack_adjoint`].
pub(crate) fn backward_group(
    s: &ConvShape,
    x: &[f32],
    dy: &[f32],
    lanes: Option<&mut [f32]>,
    dx: Option<(&mut [f32], &[f32])>,
    scratch: &mut Scratch,
) {
    let (ci, co) = (s.channels_in, s.channels_out);
    let grid = Grid::new(s, dy.len() / (co * s.height * s.width));
    let (len, shifts) = (grid.len(), grid.shifts());
    grid.fill(dy, co, &mut scratch.grad);
    if let Some(lanes) = lanes {
        grid.fill(x, ci, &mut scratch.input);
        grid.gram(&scratch.grad, &scratch.input, (co, ci), len, &shifts, lanes);
    }
    if let Some((dx, adjoint)) = dx {
        // SAFETY: `product_gather` writes initialised values only.
        let dx = unsafe { as_uninit(dx) };
        grid.product_gather(
            adjoint,
            &scratch.grad,
            (ci, co),
            len,
            &shifts,
            &mut scratch.out,
            dx,
        );
    }
}
