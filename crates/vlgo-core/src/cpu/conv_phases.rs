//! The 3 x 3 convolution with stride 2 and padding 1 (a ResNet's downsampling convolution)
//! without a column buffer: the register-tiled kernels of [`conv_grid`](super::conv_grid) over
//! the input's four phases.
//!
//! With stride 2, output (i, j) reads input rows 2i - 1, 2i and 2i + 1: row 2i - 1 is row i - 1
//! of the input's odd rows, row 2i is row i of its even rows and row 2i + 1 row i of its odd
//! rows; the same holds for columns. So each image splits into four phases (even or odd rows
//! times even or odd columns) of the output's size, Ho x Wo, and kernel offset (ki, kj) reads
//! one phase at a shift of 0 or -1 row and 0 or -1 column. The phases are laid out like the
//! grid path's images (each row followed by a zero, each image by a zero row, between zero
//! margins), the four phases of a channel one after the other: an offset is then a fixed shift
//! in a channel's four phases, the padding is the layout's zeros, and the forward is
//! [`shifted_product`] with the nine offsets over (Ho + 1) (Wo + 1) positions per image for
//! Ho Wo outputs. The weight's adjoint is [`shifted_gram`] of the output's adjoint against the
//! phases. The input's adjoint is computed phase by phase: each phase of the input receives
//! the offsets that read it (one, two or four), each a [`shifted_product`] with that many
//! offsets from the output adjoint's layout, written into the phase's pixels.
//!
//! im2col at stride 2 gathers nine entries per output position with a stride of two, and its
//! adjoint scatters them back one by one; here each operand is copied once into its layout and each
//! result once out of it. Sums run in another order than im2col's product, so results agree
//! with it to rounding; they do not depend on the number of threads.

use std::mem::MaybeUninit;

use super::conv::ConvShape;
use super::conv_grid::{Grid, Scratch};
#[cfg(doc)]
use super::simd::shifted_gram;
use super::simd::shifted_product;

/// Output positions a group should have at least, as for the grid path.
const PHASE_COLUMNS: usize = 1024;

/// Each shifted product sums over C_in or C_out terms: thinner ones keep im2col.
const MIN_CHANNELS: usize = 8;

/// The smallest output side taken. The layout computes (Ho + 1) (Wo + 1) positions for Ho Wo
/// outputs: 1.31x at 7 x 7, 1.56x at 4 x 4, where the path measured no faster than im2col (32
/// -> 64 channels, 7 x 7 to 4 x 4, 512 images: forward 1.70 against 1.77-1.97 ms, adjoints
/// 3.69-3.79 against 3.30-3.62; `docs/pretrain.md`).
const MIN_SIDE: usize = 7;

/// Where the path is used: a 3 x 3 convolution with stride 2, padding 1 and no dilation, with
/// at least [`MIN_CHANNELS`] channels in and out and outputs of at least [`MIN_SIDE`] a side.
pub(crate) fn applies(s: &ConvShape) -> bool {
    let [ho, wo] = match s.output() {
        Some(o) => o,
        None => return false,
    };
    s.kernel == [3, 3]
        && s.stride == [2, 2]
        && s.padding == [1, 1]
        && s.dilation == [1, 1]
        && ho >= MIN_SIDE
        && wo >= MIN_SIDE
        && s.channels_in >= MIN_CHANNELS
        && s.channels_out >= MIN_CHANNELS
}

/// Images per group for the shape: enough for [`PHASE_COLUMNS`] output positions.
pub(crate) fn group(s: &ConvShape) -> usize {
    let [ho, wo] = s.out();
    PHASE_COLUMNS
        .div_ceil((ho + 1) * (wo + 1))
        .clamp(1, s.batch.max(1))
}

/// The output's layout for a group of `images`.
fn output_grid(s: &ConvShape, images: usize) -> Grid {
    let [ho, wo] = s.out();
    Grid::sized(ho, wo, images)
}

/// The phase (row parity, column parity) that kernel offset `k` along one axis reads, and
/// whether it reads the phase's previous row (column): offset 0 reads the odd entries one
/// before, 1 the even ones, 2 the odd ones.
fn axis_phase(k: usize) -> (usize, bool) {
    (usize::from(k != 1), k == 0)
}

/// The phase index (2 x row parity + column parity) of kernel offset (ki, kj).
fn phase_of(ki: usize, kj: usize) -> usize {
    2 * axis_phase(ki).0 + axis_phase(kj).0
}

/// Where offset k = 3 ki + kj reads a channel's four phases ([4, len]) for output position 0.
fn forward_shifts(grid: &Grid) -> [usize; 9] {
    std::array::from_fn(|k| {
        let (ki, kj) = (k / 3, k % 3);
        let (up, left) = (axis_phase(ki).1, axis_phase(kj).1);
        phase_of(ki, kj) * grid.len() + grid.margin()
            - usize::from(up) * grid.row()
            - usize::from(left)
    })
}

/// The kernel offsets that read phase `phase`, in row-major order: one, two or four.
fn offsets_of(phase: usize) -> Vec<usize> {
    (0..9)
        .filter(|&k| phase_of(k / 3, k % 3) == phase)
        .collect()
}

/// Writes a group's images `src` ([images, channels, H, W]) as `buf` [channels, 4, len]: each
/// channel's four phases in the output's layout, every other entry zero.
fn fill_phases(s: &ConvShape, grid: &Grid, src: &[f32], channels: usize, buf: &mut Vec<f32>) {
    let (h, w) = (s.height, s.width);
    let [ho, wo] = s.out();
    let (row, plane, margin, len) = (grid.row(), grid.plane(), grid.margin(), grid.len());
    buf.clear();
    buf.resize(channels * 4 * len, 0.0);
    for (i, image) in src.chunks_exact(channels * h * w).enumerate() {
        for (c, x) in image.chunks_exact(h * w).enumerate() {
            for phase in 0..4 {
                let (pr, pc) = (phase / 2, phase % 2);
                let start = (c * 4 + phase) * len + margin + i * plane;
                let dst = &mut buf[start..start + ho * row];
                for (a, line) in dst.chunks_exact_mut(row).enumerate() {
                    let r = 2 * a + pr;
                    if r >= h {
                        break;
                    }
                    let src_row = &x[r * w..(r + 1) * w];
                    for (d, &v) in line[..wo]
                        .iter_mut()
                        .zip(src_row.iter().skip(pc).step_by(2))
                    {
                        *d = v;
                    }
                }
            }
        }
    }
}

/// The weights for the input's adjoint, per phase: [C_in, C_out, K] with the K offsets of
/// [`offsets_of`], the four phases one after the other.
pub(crate) fn pack_adjoint(weight: &[f32], co: usize, ci: usize) -> Vec<f32> {
    let mut packed = Vec::with_capacity(9 * ci * co);
    for phase in 0..4 {
        let offsets = offsets_of(phase);
        for c in 0..ci {
            for o in 0..co {
                let taps = &weight[(o * ci + c) * 9..][..9];
                packed.extend(offsets.iter().map(|&k| taps[k]));
            }
        }
    }
    packed
}

/// The convolution of one group of images `x` ([images, C_in, H, W]) with `weight` ([C_out,
/// C_in, 3, 3]) into `out` ([images, C_out, Ho, Wo]), every entry written.
pub(crate) fn forward_group(
    s: &ConvShape,
    x: &[f32],
    weight: &[f32],
    out: &mut [MaybeUninit<f32>],
    scratch: &mut Scratch,
) {
    let (ci, co) = (s.channels_in, s.channels_out);
    let grid = output_grid(s, x.len() / (ci * s.height * s.width));
    fill_phases(s, &grid, x, ci, &mut scratch.input);
    let (input, ld, shifts) = (&scratch.input, 4 * grid.len(), forward_shifts(&grid));
    grid.product_gather(weight, input, (co, ci), ld, &shifts, &mut scratch.out, out);
}

/// One group's part of the convolution's adjoints, given the output's adjoint `dy` ([images,
/// C_out, Ho, Wo]) and the group's input `x`: the weight adjoint added into `lanes` (as the
/// grid path's), and the input adjoint written into `dx` ([images, C_in, H, W]) with the
/// weights `adjoint` packed by [`pack_adjoint`].
pub(crate) fn backward_group(
    s: &ConvShape,
    x: &[f32],
    dy: &[f32],
    lanes: Option<&mut [f32]>,
    dx: Option<(&mut [f32], &[f32])>,
    scratch: &mut Scratch,
) {
    let (ci, co) = (s.channels_in, s.channels_out);
    let [ho, wo] = s.out();
    let grid = output_grid(s, dy.len() / (co * ho * wo));
    let (len, cols, row, margin) = (grid.len(), grid.columns(), grid.row(), grid.margin());
    grid.fill(dy, co, &mut scratch.grad);
    if let Some(lanes) = lanes {
        fill_phases(s, &grid, x, ci, &mut scratch.input);
        let shifts = forward_shifts(&grid);
        grid.gram(
            &scratch.grad,
            &scratch.input,
            (co, ci),
            4 * len,
            &shifts,
            lanes,
        );
    }
    let Some((dx, adjoint)) = dx else { return };
    let (h, w, plane) = (s.height, s.width, grid.plane());
    let mut packed = adjoint;
    scratch.out.resize(ci * cols, 0.0);
    for phase in 0..4 {
        let (pr, pc) = (phase / 2, phase % 2);
        // Offset (ki, kj) adds w dy[i, j] to the phase's entry (i - up, j - left): the entry
        // (a, b) reads the output adjoint at (a + up, b + left).
        let shifts: Vec<usize> = offsets_of(phase)
            .iter()
            .map(|&k| {
                let (up, left) = (axis_phase(k / 3).1, axis_phase(k % 3).1);
                margin + usize::from(up) * row + usize::from(left)
            })
            .collect();
        let (weights, rest) = packed.split_at(shifts.len() * ci * co);
        packed = rest;
        shifted_product(
            weights,
            &scratch.grad,
            &mut scratch.out,
            (ci, co),
            len,
            cols,
            &shifts,
        );
        // The phase's pixels: entry (a, b) is dx[2a + pr, 2b + pc].
        for (i, image) in dx.chunks_exact_mut(ci * h * w).enumerate() {
            for (c, plane_dx) in image.chunks_exact_mut(h * w).enumerate() {
                let src = &scratch.out[c * cols + i * plane..][..ho * row];
                for (a, line) in src.chunks_exact(row).enumerate() {
                    let r = 2 * a + pr;
                    if r >= h {
                        break;
                    }
                    let dst = &mut plane_dx[r * w..(r + 1) * w];
                    for (d, &v) in dst.iter_mut().skip(pc).step_by(2).zip(&line[..wo]) {
                        *d = v;
                    }
                }
            }
        }
    }
}
