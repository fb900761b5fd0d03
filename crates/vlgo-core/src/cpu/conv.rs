//! Two-dimensional convolution on f32 slices in Burn's [N, C, H, W] layout: im2col into a
//! column buffer, one matrix product per group of images, and the two adjoints (input and
//! weight) by the transposed products and col2im.
//!
//! Burn's CPU backends convolve forward by im2col and gemm too, but differentiate through a
//! transposed convolution and a convolution over permuted tensors, whose strided copies took
//! more time than the arithmetic in a ResNet-18 step. Here the adjoints reuse the forward's
//! column layout, so every pass is one product per group plus contiguous copies.
//!
//! Images are grouped so that a product has at least [`TARGET_COLUMNS`] columns (late ResNet
//! stages have 4 x 4 maps, and a product per image would repack the weight for 16 columns).
//! The weight gradient sums over images in a fixed number of chunks, added in chunk order, so
//! results do not depend on the number of threads.
//!
//! Four kinds of convolution take other paths, where they measured faster: 3 x 3 "same"
//! convolutions on maps of 7 x 7 and up ([`conv_grid`]: no column buffer, the nine kernel
//! offsets summed in registers over a zero-bordered layout), 3 x 3 convolutions with stride 2
//! and outputs of 7 x 7 and up ([`conv_phases`]: the same kernels over the input's four
//! phases), 3 x 3 "same" convolutions on maps of 3, 4 or 6 pixels a side with 32 channels or
//! more ([`conv_winograd`]: Winograd's F(2 x 2, 3 x 3), 16 products over the channels) and
//! convolutions with 2 x 2 outputs ([`conv_positions`]: one product per output position over
//! the whole batch, on the kernel offsets inside the image only).

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::conv_grid::{self, Grid};
use super::conv_phases;
use super::conv_positions;
use super::conv_winograd;
use super::gemm::{View, as_uninit, product, product_into, written};
use super::simd::{GRAM_LANES, fold_lanes};

/// Columns a product should have at least: groups of images are formed to reach it.
const TARGET_COLUMNS: usize = 256;

/// Chunks the weight gradient is summed in (then added in order): enough to keep a few cores
/// busy, fixed so that the sum's rounding does not depend on the thread count.
const WEIGHT_CHUNKS: usize = 8;

/// Geometry of a convolution (groups = 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvShape {
    pub batch: usize,
    pub channels_in: usize,
    pub channels_out: usize,
    pub height: usize,
    pub width: usize,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

impl ConvShape {
    /// Output height and width; `None` when the dilated kernel does not fit the padded input.
    pub fn output(&self) -> Option<[usize; 2]> {
        let dim = |size: usize, k: usize| {
            let span = self.dilation[k] * (self.kernel[k] - 1) + 1;
            let padded = size + 2 * self.padding[k];
            (self.kernel[k] > 0 && self.stride[k] > 0 && self.dilation[k] > 0 && padded >= span)
                .then(|| (padded - span) / self.stride[k] + 1)
        };
        Some([dim(self.height, 0)?, dim(self.width, 1)?])
    }

    pub(crate) fn out(&self) -> [usize; 2] {
        self.output().expect("checked by the caller")
    }

    /// Rows of the column buffer: C_in x kh x kw.
    fn rows(&self) -> usize {
        self.channels_in * self.kernel[0] * self.kernel[1]
    }

    pub(crate) fn positions(&self) -> usize {
        let [ho, wo] = self.out();
        ho * wo
    }

    fn image_in(&self) -> usize {
        self.channels_in * self.height * self.width
    }

    fn image_out(&self) -> usize {
        self.channels_out * self.positions()
    }

    /// Images per product.
    fn group(&self) -> usize {
        TARGET_COLUMNS
            .div_ceil(self.positions().max(1))
            .clamp(1, self.batch.max(1))
    }

    /// Stride 1 and an output as wide as the input: the column buffer's rows are shifted
    /// copies of the planes ([`FlatRow`]).
    fn is_flat(&self) -> bool {
        self.stride == [1, 1] && self.out()[1] == self.width
    }

    /// Input rows `ih` that output row `o` reads through kernel offset `k` along axis `axis`,
    /// as a signed index (out of range means padding).
    pub(crate) fn source(&self, axis: usize, o: usize, k: usize) -> isize {
        (o * self.stride[axis] + k * self.dilation[axis]) as isize - self.padding[axis] as isize
    }

    /// The range of output columns `ow` whose input column lies inside the image for kernel
    /// column `kj`: `ow` in `lo..hi`.
    fn valid_columns(&self, kj: usize) -> (usize, usize) {
        let [_, wo] = self.out();
        let (stride, offset) = (self.stride[1] as isize, self.source(1, 0, kj));
        let lo = if offset >= 0 {
            0
        } else {
            ((-offset + stride - 1) / stride) as usize
        };
        let last = self.width as isize - 1 - offset;
        let hi = if last < 0 {
            0
        } else {
            ((last / stride) as usize + 1).min(wo)
        };
        (lo.min(hi), hi)
    }
}

/// Where a row of the column buffer reads its channel's plane when the convolution has stride 1
/// and an output as wide as its input (every 3 x 3 "same" convolution of a ResNet): output
/// position i = oh * W + ow reads the flat plane at i + `shift`, so the row is one shifted copy
/// instead of one short copy per output row. The copy also carries values into the columns
/// whose input lies in the padding (`ow` outside `lo..hi`, where the shift wraps to the
/// neighbouring image row): those are cleared after.
struct FlatRow {
    /// Output rows whose input row lies inside the image; the others read padding only.
    rows: std::ops::Range<usize>,
    /// The output positions whose shifted source lies inside the plane.
    copy: std::ops::Range<usize>,
    shift: isize,
    /// The output columns whose input column lies inside the image.
    columns: (usize, usize),
}

impl FlatRow {
    /// The row for kernel offset (ki, kj), when `s` is flat (see [`ConvShape::is_flat`]).
    fn new(s: &ConvShape, ki: usize, kj: usize) -> Self {
        let (ho, w) = (s.out()[0], s.width);
        let d = s.source(0, 0, ki);
        let first = (-d).clamp(0, ho as isize) as usize;
        let rows = first..(s.height as isize - d).clamp(first as isize, ho as isize) as usize;
        let shift = d * w as isize + s.source(1, 0, kj);
        let plane = (s.height * w) as isize;
        let start = (rows.start * w).max((-shift).max(0) as usize);
        let end = (rows.end * w).min((plane - shift).max(0) as usize);
        // Empty (an image row shorter than the shift, or no row inside the image): a range
        // that lies inside the buffer all the same.
        let copy = if start < end { start..end } else { 0..0 };
        Self {
            copy,
            rows,
            shift,
            columns: s.valid_columns(kj),
        }
    }

    /// The rows of every kernel offset, (ki, kj) in row-major order: the same for every channel.
    fn all(s: &ConvShape) -> Vec<Self> {
        let [kh, kw] = s.kernel;
        (0..kh * kw).map(|k| Self::new(s, k / kw, k % kw)).collect()
    }

    /// The plane's positions that `copy` reads.
    fn source(&self) -> std::ops::Range<usize> {
        if self.copy.is_empty() {
            return 0..0;
        }
        let start = (self.copy.start as isize + self.shift) as usize;
        start..start + self.copy.len()
    }

    /// Zeroes, in a row of the column buffer, the positions of `rows` whose input column lies
    /// in the padding. At the ends of `rows` these include the positions `copy` left out.
    fn clear_padding(&self, row: &mut [f32], w: usize) {
        let (lo, hi) = self.columns;
        let lines = &mut row[self.rows.start * w..self.rows.end * w];
        // One padding column at a time, as strided stores: the network's kernels pad one to
        // three columns, and two runs per image row, of lengths known only at run time, went
        // through a dispatch per row that cost more than the stores (measured on a Zen 5: this
        // function and im2col took 16 % of the SimCLR-MLP step's samples, 11 % after).
        for j in (0..lo).chain(hi..w) {
            for x in lines.iter_mut().skip(j).step_by(w) {
                *x = 0.0;
            }
        }
    }
}

/// How the rows of the column buffer read an image, worked out once per convolution.
enum Columns {
    /// Stride 1 and an output as wide as the input: one shifted copy per row ([`FlatRow`]).
    Flat(Vec<FlatRow>),
    /// Any other shape: each row gathers from the channel's zero-padded plane ([`Gather`]).
    Gather(Gather),
}

impl Columns {
    fn new(s: &ConvShape) -> Self {
        if s.is_flat() {
            Self::Flat(FlatRow::all(s))
        } else {
            Self::Gather(Gather::new(s))
        }
    }
}

/// Where each row of the column buffer reads a channel's plane, for any stride, padding and
/// dilation: the plane is copied into a buffer with its padding around it, in which every
/// kernel offset of every output position lands, and the row of kernel offset k gathers
/// through `index[k P..(k + 1) P]`. A copy per output row (of Wo entries, strided with
/// stride 2) cost more than the product at the stride-2 convolutions of a ResNet's small maps
/// (on 7 x 7 inputs, 4 entries per copy: im2col took as many samples as the product).
struct Gather {
    /// Rows and columns of the padded plane.
    padded: [usize; 2],
    /// For kernel offset k = ki kw + kj and output position q, the padded plane's entry.
    index: Vec<usize>,
    /// No padding: the padded plane is the plane, read and summed in place.
    in_place: bool,
}

impl Gather {
    fn new(s: &ConvShape) -> Self {
        let [ho, wo] = s.out();
        let [kh, kw] = s.kernel;
        let padded = [s.height + 2 * s.padding[0], s.width + 2 * s.padding[1]];
        let at = |axis: usize, o: usize, k: usize| {
            (s.source(axis, o, k) + s.padding[axis] as isize) as usize
        };
        let mut index = Vec::with_capacity(kh * kw * ho * wo);
        for ki in 0..kh {
            for kj in 0..kw {
                for oh in 0..ho {
                    for ow in 0..wo {
                        index.push(at(0, oh, ki) * padded[1] + at(1, ow, kj));
                    }
                }
            }
        }
        Self {
            padded,
            index,
            in_place: s.padding == [0, 0],
        }
    }

    /// `buf` as the padded plane of `plane` ([H, W]): zeros around it.
    fn pad(&self, s: &ConvShape, plane: &[f32], buf: &mut Vec<f32>) {
        let [ph, pw] = s.padding;
        let wp = self.padded[1];
        buf.clear();
        buf.resize(self.padded[0] * wp, 0.0);
        for (line, src) in buf[ph * wp..]
            .chunks_exact_mut(wp)
            .zip(plane.chunks_exact(s.width))
        {
            line[pw..pw + s.width].copy_from_slice(src);
        }
    }

    /// Writes the padded plane `buf`'s interior back into `plane` ([H, W]).
    fn unpad(&self, s: &ConvShape, buf: &[f32], plane: &mut [f32]) {
        let [ph, pw] = s.padding;
        let wp = self.padded[1];
        for (dst, line) in plane
            .chunks_exact_mut(s.width)
            .zip(buf[ph * wp..].chunks_exact(wp))
        {
            dst.copy_from_slice(&line[pw..pw + s.width]);
        }
    }
}

/// Writes image `x` ([C_in, H, W]) into columns `offset..offset + P` of the row-major column
/// buffer with row stride `ld`: row (c, ki, kj), column (oh, ow) holds x[c, ih, iw] or 0.
/// `pad` is scratch for [`Gather`].
fn im2col(
    s: &ConvShape,
    map: &Columns,
    x: &[f32],
    (cols, ld, offset): (&mut [f32], usize, usize),
    pad: &mut Vec<f32>,
) {
    match map {
        Columns::Flat(flats) => im2col_flat(s, flats, x, cols, ld, offset),
        Columns::Gather(gather) => im2col_gather(s, gather, x, (cols, ld, offset), pad),
    }
}

/// [`im2col`] by one shifted copy per row of the column buffer ([`FlatRow`]).
fn im2col_flat(
    s: &ConvShape,
    flats: &[FlatRow],
    x: &[f32],
    cols: &mut [f32],
    ld: usize,
    offset: usize,
) {
    let (p, w) = (s.positions(), s.width);
    for (c, plane) in x.chunks_exact(s.height * w).enumerate() {
        for (k, flat) in flats.iter().enumerate() {
            let row = c * flats.len() + k;
            let dst = &mut cols[row * ld + offset..row * ld + offset + p];
            dst[..flat.rows.start * w].fill(0.0);
            dst[flat.rows.end * w..].fill(0.0);
            dst[flat.copy.clone()].copy_from_slice(&plane[flat.source()]);
            flat.clear_padding(dst, w);
        }
    }
}

/// [`im2col`] by gathers from each channel's padded plane ([`Gather`]): any stride, padding and
/// dilation.
fn im2col_gather(
    s: &ConvShape,
    gather: &Gather,
    x: &[f32],
    (cols, ld, offset): (&mut [f32], usize, usize),
    pad: &mut Vec<f32>,
) {
    let (p, taps) = (s.positions(), s.kernel[0] * s.kernel[1]);
    for (c, plane) in x.chunks_exact(s.height * s.width).enumerate() {
        let src = if gather.in_place {
            plane
        } else {
            gather.pad(s, plane, pad);
            pad.as_slice()
        };
        for (k, index) in gather.index.chunks_exact(p).enumerate() {
            let row = c * taps + k;
            let dst = &mut cols[row * ld + offset..row * ld + offset + p];
            for (d, &i) in dst.iter_mut().zip(index) {
                *d = src[i];
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds columns `offset..offset + P` of `cols` into image `dx`. The
/// entries of those columns that stand for padding may be zeroed on the way.
fn col2im(
    s: &ConvShape,
    map: &Columns,
    (cols, ld, offset): (&mut [f32], usize, usize),
    dx: &mut [f32],
    pad: &mut Vec<f32>,
) {
    match map {
        Columns::Flat(flats) => col2im_flat(s, flats, cols, ld, offset, dx),
        Columns::Gather(gather) => col2im_gather(s, gather, (&*cols, ld, offset), dx, pad),
    }
}

/// [`col2im`] by one shifted sum per row of the column buffer ([`FlatRow`]): the padding's
/// entries are zeroed first, so that the wrapped positions add nothing.
fn col2im_flat(
    s: &ConvShape,
    flats: &[FlatRow],
    cols: &mut [f32],
    ld: usize,
    offset: usize,
    dx: &mut [f32],
) {
    let (p, w) = (s.positions(), s.width);
    for (c, plane) in dx.chunks_exact_mut(s.height * w).enumerate() {
        for (k, flat) in flats.iter().enumerate() {
            let row = c * flats.len() + k;
            let src = &mut cols[row * ld + offset..row * ld + offset + p];
            flat.clear_padding(src, w);
            for (d, g) in plane[flat.source()].iter_mut().zip(&src[flat.copy.clone()]) {
                *d += g;
            }
        }
    }
}

/// [`col2im`] by sums into each channel's padded plane ([`Gather`]), which starts as the
/// plane of `dx` and goes back into it: each pixel adds its terms in the order of the offsets
/// and positions, as a sum straight into `dx` would. Any stride, padding and dilation.
fn col2im_gather(
    s: &ConvShape,
    gather: &Gather,
    (cols, ld, offset): (&[f32], usize, usize),
    dx: &mut [f32],
    pad: &mut Vec<f32>,
) {
    let (p, taps) = (s.positions(), s.kernel[0] * s.kernel[1]);
    for (c, plane) in dx.chunks_exact_mut(s.height * s.width).enumerate() {
        let dst: &mut [f32] = if gather.in_place {
            &mut *plane
        } else {
            gather.pad(s, plane, pad);
            pad.as_mut_slice()
        };
        for (k, index) in gather.index.chunks_exact(p).enumerate() {
            let row = c * taps + k;
            let src = &cols[row * ld + offset..row * ld + offset + p];
            for (g, &i) in src.iter().zip(index) {
                dst[i] += g;
            }
        }
        if !gather.in_place {
            gather.unpad(s, pad, plane);
        }
    }
}

/// The convolution of `x` [N, C_in, H, W] with `weight` [C_out, C_in, kh, kw] plus `bias`
/// [C_out], as [N, C_out, Ho, Wo].
pub(crate) fn forward(s: &ConvShape, x: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (k, p, co) = (s.rows(), s.positions(), s.channels_out);
    let len = s.batch * s.image_out();
    if len == 0 {
        return Vec::new();
    }
    if let Some(whole) = Whole::of(s) {
        let mut out = whole.forward(s, x, weight);
        // SAFETY: `add_bias` writes initialised values only.
        add_bias(s, unsafe { as_uninit(&mut out) }, bias);
        return out;
    }
    if let Some(layout) = Layout::of(s) {
        let g = layout.group(s);
        // SAFETY: each job writes its whole chunk of whole images (`forward_group`'s contract),
        // then adds the bias.
        return unsafe {
            written(len, |out| {
                out.par_chunks_mut(g * s.image_out())
                    .zip(x.par_chunks(g * s.image_in()))
                    .for_each_init(conv_grid::Scratch::default, |scratch, (out, x)| {
                        layout.forward_group(s, x, weight, out, scratch);
                        add_bias(s, out, bias);
                    })
            })
        };
    }
    let g = s.group();
    let map = Columns::new(s);
    let job = |(cols, tmp, pad): &mut (Vec<f32>, Vec<f32>, Vec<f32>),
               (out, x): (&mut [MaybeUninit<f32>], &[f32])| {
        let images = out.len() / s.image_out();
        let ld = images * p;
        cols.resize(k * ld, 0.0);
        for (i, image) in x.chunks(s.image_in()).enumerate() {
            im2col(s, &map, image, (cols, ld, i * p), pad);
        }
        let w = View::rows(weight, k);
        let c = View::rows(cols, ld);
        if images == 1 {
            // SAFETY: w is [co, k], cols [k, p], out [co, p].
            unsafe { product_into((co, p, k), out, p, w, c, false) };
        } else {
            tmp.resize(co * ld, 0.0);
            // SAFETY: w is [co, k], cols [k, ld], tmp [co, ld].
            unsafe { product((co, ld, k), tmp, ld, false, w, c, false) };
            for (i, image) in out.chunks_mut(s.image_out()).enumerate() {
                for (o, row) in image.chunks_mut(p).zip(tmp.chunks(ld)) {
                    for (o, &v) in o.iter_mut().zip(&row[i * p..(i + 1) * p]) {
                        o.write(v);
                    }
                }
            }
        }
        add_bias(s, out, bias);
    };
    // SAFETY: each job writes its whole chunk of whole images: the product all co x p entries
    // of a lone image, or the copies every row of each image of a group.
    unsafe {
        written(len, |out| {
            out.par_chunks_mut(g * s.image_out())
                .zip(x.par_chunks(g * s.image_in()))
                .for_each_init(|| (Vec::new(), Vec::new(), Vec::new()), job)
        })
    }
}

/// The paths that take the whole batch at once and return their results (no bias).
#[derive(Debug, Clone, Copy)]
enum Whole {
    /// Outputs of at most 4 positions ([`conv_positions`]).
    Positions,
    /// 3 x 3 stride-1 convolutions on small maps ([`conv_winograd`]).
    Winograd,
}

impl Whole {
    /// The whole-batch path that takes the shape, if one does.
    fn of(s: &ConvShape) -> Option<Self> {
        if conv_positions::applies(s) {
            Some(Self::Positions)
        } else if conv_winograd::applies(s) {
            Some(Self::Winograd)
        } else {
            None
        }
    }

    /// The path's forward (without the bias).
    fn forward(self, s: &ConvShape, x: &[f32], weight: &[f32]) -> Vec<f32> {
        match self {
            Self::Positions => conv_positions::forward(s, x, weight),
            Self::Winograd => conv_winograd::forward(s, x, weight),
        }
    }

    /// The path's adjoints (what [`backward`] returns).
    fn backward(
        self,
        s: &ConvShape,
        x: &[f32],
        weight: &[f32],
        grad: &[f32],
        want_input: bool,
        want_weight: bool,
    ) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
        match self {
            Self::Positions => {
                conv_positions::backward(s, x, weight, grad, want_input, want_weight)
            }
            Self::Winograd => conv_winograd::backward(s, x, weight, grad, want_input, want_weight),
        }
    }
}

/// The paths that lay a group of images out for the shifted kernels instead of im2col.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// 3 x 3 stride-1 convolutions ([`conv_grid`]).
    Grid,
    /// 3 x 3 stride-2 convolutions ([`conv_phases`]).
    Phases,
}

impl Layout {
    /// The layout path that takes the shape, if one does.
    fn of(s: &ConvShape) -> Option<Self> {
        if conv_grid::applies(s) {
            Some(Self::Grid)
        } else if conv_phases::applies(s) {
            Some(Self::Phases)
        } else {
            None
        }
    }

    /// Images per group.
    fn group(self, s: &ConvShape) -> usize {
        match self {
            Self::Grid => Grid::group(s),
            Self::Phases => conv_phases::group(s),
        }
    }

    /// The weights as the path's input adjoint takes them.
    fn pack_adjoint(self, weight: &[f32], co: usize, ci: usize) -> Vec<f32> {
        match self {
            Self::Grid => conv_grid::pack_adjoint(weight, co, ci),
            Self::Phases => conv_phases::pack_adjoint(weight, co, ci),
        }
    }

    /// One group's forward (the paths' `forward_group`).
    fn forward_group(
        self,
        s: &ConvShape,
        x: &[f32],
        weight: &[f32],
        out: &mut [MaybeUninit<f32>],
        scratch: &mut conv_grid::Scratch,
    ) {
        match self {
            Self::Grid => conv_grid::forward_group(s, x, weight, out, scratch),
            Self::Phases => conv_phases::forward_group(s, x, weight, out, scratch),
        }
    }

    /// One group's adjoints (the paths' `backward_group`).
    fn backward_group(
        self,
        s: &ConvShape,
        (x, dy): (&[f32], &[f32]),
        lanes: Option<&mut [f32]>,
        dx: Option<(&mut [f32], &[f32])>,
        scratch: &mut conv_grid::Scratch,
    ) {
        match self {
            Self::Grid => conv_grid::backward_group(s, x, dy, lanes, dx, scratch),
            Self::Phases => conv_phases::backward_group(s, x, dy, lanes, dx, scratch),
        }
    }
}

/// Adds the bias to every image of `out` ([images, C_out, Ho, Wo]), whose entries are all
/// written.
fn add_bias(s: &ConvShape, out: &mut [MaybeUninit<f32>], bias: Option<&[f32]>) {
    let Some(bias) = bias else { return };
    // SAFETY: the caller has written every entry of `out`.
    let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len()) };
    for image in out.chunks_mut(s.image_out()) {
        for (o, b) in image.chunks_mut(s.positions()).zip(bias) {
            o.iter_mut().for_each(|v| *v += b);
        }
    }
}

/// The adjoints of the input (when `want_input`) and of the weight (when `want_weight`) given
/// the adjoint `grad` [N, C_out, Ho, Wo] of the output.
pub(crate) fn backward(
    s: &ConvShape,
    x: &[f32],
    weight: &[f32],
    grad: &[f32],
    want_input: bool,
    want_weight: bool,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (k, p, co) = (s.rows(), s.positions(), s.channels_out);
    let wsize = co * k;
    if let Some(whole) = Whole::of(s).filter(|_| s.batch > 0 && (want_input || want_weight)) {
        return whole.backward(s, x, weight, grad, want_input, want_weight);
    }
    let mut dx = want_input.then(|| vec![0.0f32; s.batch * s.image_in()]);
    if s.batch == 0 || p == 0 || !(want_input || want_weight) {
        return (dx, want_weight.then(|| vec![0.0; wsize]));
    }
    // Both layout paths share the scratch, the lanes of the weight adjoint and the loop below.
    let layout = Layout::of(s);
    // The im2col path's copies, worked out only where it runs.
    let map = layout.is_none().then(|| Columns::new(s));
    let g = layout.map_or_else(|| s.group(), |l| l.group(s));
    let adjoint = layout
        .filter(|_| want_input)
        .map(|l| l.pack_adjoint(weight, co, s.channels_in));
    let groups = s.batch.div_ceil(g);
    let per_chunk = groups.div_ceil(WEIGHT_CHUNKS.min(groups)) * g;
    let chunks = s.batch.div_ceil(per_chunk);
    // Each chunk of images: its slice of dx (if wanted) and its part of the weight gradient.
    let dx_chunks: Vec<Option<&mut [f32]>> = match dx.as_mut() {
        Some(dx) => dx.chunks_mut(per_chunk * s.image_in()).map(Some).collect(),
        None => (0..chunks).map(|_| None).collect(),
    };
    let partials: Vec<Option<Vec<f32>>> = dx_chunks
        .into_par_iter()
        .enumerate()
        .map(|(chunk, mut dx)| {
            let first = chunk * per_chunk;
            let count = per_chunk.min(s.batch - first);
            let mut dw = want_weight.then(|| vec![0.0f32; wsize]);
            let (mut cols, mut dy, mut pad) = (Vec::new(), Vec::new(), Vec::new());
            let mut scratch = conv_grid::Scratch::default();
            // The layout paths' weight adjoint, in the lanes that `shifted_gram` keeps.
            let mut lanes =
                (layout.is_some() && want_weight).then(|| vec![0.0f32; wsize * GRAM_LANES]);
            for start in (0..count).step_by(g) {
                let images = g.min(count - start);
                let ld = images * p;
                let n0 = first + start;
                let dy_group = &grad[n0 * s.image_out()..(n0 + images) * s.image_out()];
                if let Some(layout) = layout {
                    let dx = dx.as_mut().map(|dx| {
                        let dx = &mut dx[start * s.image_in()..(start + images) * s.image_in()];
                        (
                            dx,
                            adjoint
                                .as_deref()
                                .expect("packed when the input's adjoint is"),
                        )
                    });
                    let x_group = &x[n0 * s.image_in()..(n0 + images) * s.image_in()];
                    let lanes = lanes.as_deref_mut();
                    layout.backward_group(s, (x_group, dy_group), lanes, dx, &mut scratch);
                    continue;
                }
                let map = map.as_ref().expect("built where no layout path runs");
                // The output adjoint as [co, images x p] (a view when there is one image).
                let dy_view: &[f32] = if images == 1 {
                    dy_group
                } else {
                    dy.resize(co * ld, 0.0);
                    for (i, image) in dy_group.chunks(s.image_out()).enumerate() {
                        for (row, src) in dy.chunks_mut(ld).zip(image.chunks(p)) {
                            row[i * p..(i + 1) * p].copy_from_slice(src);
                        }
                    }
                    &dy
                };
                cols.resize(k * ld, 0.0);
                if let Some(dw) = dw.as_mut() {
                    let images_in = &x[n0 * s.image_in()..(n0 + images) * s.image_in()];
                    for (i, image) in images_in.chunks(s.image_in()).enumerate() {
                        im2col(s, map, image, (&mut cols, ld, i * p), &mut pad);
                    }
                    // dW [co, k] += dY [co, ld] cols^T [ld, k].
                    // SAFETY: dy_view is [co, ld], cols [k, ld] read transposed, dw [co, k].
                    unsafe {
                        product(
                            (co, k, ld),
                            dw,
                            k,
                            true,
                            View::rows(dy_view, ld),
                            View::transposed(&cols, ld),
                            false,
                        )
                    };
                }
                if let Some(dx) = dx.as_mut() {
                    // dcols [k, ld] = W^T [k, co] dY [co, ld].
                    // SAFETY: weight is [co, k] read transposed, dy_view [co, ld], cols [k, ld].
                    unsafe {
                        product(
                            (k, ld, co),
                            &mut cols,
                            ld,
                            false,
                            View::transposed(weight, k),
                            View::rows(dy_view, ld),
                            false,
                        )
                    };
                    let dx_group = &mut dx[start * s.image_in()..(start + images) * s.image_in()];
                    for (i, image) in dx_group.chunks_mut(s.image_in()).enumerate() {
                        col2im(s, map, (&mut cols, ld, i * p), image, &mut pad);
                    }
                }
            }
            if let (Some(dw), Some(lanes)) = (dw.as_mut(), lanes) {
                fold_lanes(&lanes, dw);
            }
            dw
        })
        .collect();
    let dw = want_weight.then(|| {
        let mut total = vec![0.0f32; wsize];
        for part in partials.into_iter().flatten() {
            total.iter_mut().zip(&part).for_each(|(t, v)| *t += v);
        }
        total
    });
    (dx, dw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convolution by its definition, in f64.
    fn direct(s: &ConvShape, x: &[f32], w: &[f32]) -> Vec<f64> {
        let [ho, wo] = s.out();
        let mut out = vec![0.0; s.batch * s.channels_out * ho * wo];
        for n in 0..s.batch {
            for o in 0..s.channels_out {
                for oh in 0..ho {
                    for ow in 0..wo {
                        let mut acc = 0.0f64;
                        for c in 0..s.channels_in {
                            for ki in 0..s.kernel[0] {
                                for kj in 0..s.kernel[1] {
                                    let ih = s.source(0, oh, ki);
                                    let iw = s.source(1, ow, kj);
                                    if ih < 0
                                        || iw < 0
                                        || ih >= s.height as isize
                                        || iw >= s.width as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((n * s.channels_in + c) * s.height + ih as usize)
                                        * s.width
                                        + iw as usize;
                                    let wi = ((o * s.channels_in + c) * s.kernel[0] + ki)
                                        * s.kernel[1]
                                        + kj;
                                    acc += x[xi] as f64 * w[wi] as f64;
                                }
                            }
                        }
                        out[((n * s.channels_out + o) * ho + oh) * wo + ow] = acc;
                    }
                }
            }
        }
        out
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let v = (i as u32).wrapping_mul(2654435761).wrapping_add(seed * 97);
                (v % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    /// A 3 x 3 "same" convolution of 3 images, 2 channels in and 3 out, 7 x 6.
    fn base() -> ConvShape {
        ConvShape {
            batch: 3,
            channels_in: 2,
            channels_out: 3,
            height: 7,
            width: 6,
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        }
    }

    fn shapes() -> Vec<ConvShape> {
        let base = base();
        vec![
            base,
            ConvShape {
                stride: [2, 2],
                ..base
            },
            ConvShape {
                kernel: [1, 1],
                padding: [0, 0],
                stride: [2, 2],
                ..base
            },
            ConvShape {
                kernel: [3, 2],
                stride: [2, 3],
                padding: [2, 0],
                dilation: [1, 2],
                ..base
            },
            ConvShape {
                batch: 40,
                height: 3,
                width: 3,
                ..base
            },
            // Kernel columns that see only padding, left of the image as well as right.
            ConvShape {
                kernel: [7, 7],
                padding: [3, 3],
                stride: [2, 1],
                height: 2,
                width: 2,
                ..base
            },
            // The grid path (`conv_grid`): several groups of images, the last partial.
            grid_shape(),
            // The phase path (`conv_phases`): odd sides (phases of unequal sizes) in several
            // groups, the last partial, and even sides.
            phase_shape(),
            ConvShape {
                batch: 5,
                height: 14,
                width: 16,
                ..phase_shape()
            },
            // The Winograd path (`conv_winograd`): an odd side (tiles hanging over the map's
            // edge) and an even one, a last group of images partial and shorter than a
            // vector; 4 x 4; a batch smaller than a vector, three rows of tiles and an odd
            // width.
            winograd_shape(),
            ConvShape {
                batch: 40,
                height: 4,
                width: 4,
                ..winograd_shape()
            },
            ConvShape {
                batch: 5,
                height: 6,
                width: 3,
                ..winograd_shape()
            },
            // The per-position path (`conv_positions`): a 2 x 2 output map whose positions
            // but the last see only padding, a 2 x 2 "same" one (every position sees every
            // pixel: the one-product form) and a stride-2 2 x 2 one.
            ConvShape {
                batch: 64,
                height: 2,
                width: 2,
                kernel: [1, 1],
                stride: [2, 2],
                ..base
            },
            ConvShape {
                batch: 70,
                height: 2,
                width: 2,
                ..base
            },
            ConvShape {
                batch: 64,
                height: 4,
                width: 3,
                stride: [2, 2],
                ..base
            },
        ]
    }

    fn grid_shape() -> ConvShape {
        ConvShape {
            batch: 18,
            channels_in: 8,
            channels_out: 9,
            width: 8,
            ..base()
        }
    }

    fn winograd_shape() -> ConvShape {
        ConvShape {
            batch: 37,
            channels_in: 32,
            channels_out: 33,
            height: 3,
            width: 6,
            ..base()
        }
    }

    fn phase_shape() -> ConvShape {
        ConvShape {
            batch: 80,
            channels_in: 8,
            channels_out: 9,
            height: 13,
            width: 15,
            stride: [2, 2],
            ..base()
        }
    }

    /// The tests above reach the grid path (in more than one group, the last partial), the
    /// phase path (likewise), the Winograd path (likewise) and the per-position path only if
    /// their shapes take them.
    #[test]
    fn the_test_shapes_take_the_grid_phase_winograd_and_per_position_paths() {
        let s = grid_shape();
        assert!(conv_grid::applies(&s));
        assert!(!conv_grid::applies(&ConvShape {
            channels_in: 1,
            ..s
        }));
        assert!(!conv_grid::applies(&ConvShape {
            stride: [2, 2],
            ..s
        }));
        let positions = &shapes()[shapes().len() - 3..];
        for s in positions {
            assert!(conv_positions::applies(s), "{s:?}");
        }
        // The 2 x 2 "same" map takes the one-product form, the others the products per
        // position.
        let whole: Vec<bool> = positions.iter().map(conv_positions::whole).collect();
        assert_eq!(whole, [false, true, false]);
        let g = Grid::group(&s);
        assert!(s.batch > g && !s.batch.is_multiple_of(g), "group {g}");
        let s = phase_shape();
        assert!(conv_phases::applies(&s) && !conv_grid::applies(&s));
        let g = conv_phases::group(&s);
        assert!(s.batch > g && !s.batch.is_multiple_of(g), "group {g}");
        assert!(!conv_phases::applies(&ConvShape {
            channels_in: 2,
            ..s
        }));
        assert!(!conv_phases::applies(&ConvShape {
            padding: [0, 0],
            ..s
        }));
        assert!(!conv_phases::applies(&ConvShape { height: 12, ..s }));
        let s = winograd_shape();
        assert!(conv_winograd::applies(&s));
        let g = conv_winograd::group(&s);
        assert!(s.batch > g && !s.batch.is_multiple_of(g), "group {g}");
        assert!(!conv_winograd::applies(&ConvShape {
            channels_out: 16,
            ..s
        }));
        assert!(!conv_winograd::applies(&ConvShape { height: 7, ..s }));
        assert!(!conv_winograd::applies(&ConvShape { width: 5, ..s }));
        assert!(!conv_winograd::applies(&ConvShape {
            padding: [0, 0],
            ..s
        }));
    }

    /// The flat path writes the gather path's columns bit for bit and adds the same sums
    /// back (up to the sign of a zero), on shapes with padding in either axis, dilation, one-pixel
    /// images and kernels wider than the image.
    #[test]
    fn flat_rows_match_the_gathers() {
        let mut flat = 0;
        for (kernel, padding, dilation, [height, width]) in [
            ([3, 3], [1, 1], [1, 1], [7, 6]),
            ([5, 5], [2, 2], [1, 1], [4, 5]),
            ([1, 1], [0, 0], [1, 1], [3, 4]),
            ([3, 3], [1, 1], [1, 1], [1, 1]),
            ([3, 3], [2, 2], [2, 2], [6, 5]),
            ([3, 3], [0, 1], [1, 1], [5, 4]),
            ([3, 1], [1, 0], [1, 1], [2, 3]),
            ([7, 7], [3, 3], [1, 1], [2, 2]),
            ([2, 2], [1, 1], [1, 1], [3, 3]),
        ] {
            let s = ConvShape {
                batch: 1,
                channels_in: 2,
                channels_out: 1,
                height,
                width,
                kernel,
                stride: [1, 1],
                padding,
                dilation,
            };
            if !s.is_flat() {
                continue;
            }
            flat += 1;
            let (p, rows) = (s.positions(), s.rows());
            let x = values(s.image_in(), 11);
            // Two images' columns, this one's second: offsets are honoured.
            let (mut a, mut b) = (vec![f32::NAN; rows * 2 * p], vec![f32::NAN; rows * 2 * p]);
            let (flats, gather, mut pad) = (FlatRow::all(&s), Gather::new(&s), Vec::new());
            im2col_flat(&s, &flats, &x, &mut a, 2 * p, p);
            im2col_gather(&s, &gather, &x, (&mut b, 2 * p, p), &mut pad);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{s:?}");
            let cols = values(rows * 2 * p, 12);
            let (mut da, mut db) = (values(s.image_in(), 13), values(s.image_in(), 13));
            col2im_flat(&s, &flats, &mut cols.clone(), 2 * p, p, &mut da);
            col2im_gather(&s, &gather, (&cols, 2 * p, p), &mut db, &mut pad);
            assert_eq!(da, db, "{s:?}");
        }
        // All but the 2 x 2 kernel, whose output is one column wider than its input.
        assert_eq!(flat, 8);
    }

    #[test]
    fn forward_matches_the_definition() {
        for s in shapes() {
            let x = values(s.batch * s.image_in(), 1);
            let w = values(s.channels_out * s.rows(), 2);
            let got = forward(&s, &x, &w, None);
            let want = direct(&s, &x, &w);
            // Relative to the output: the Winograd shapes sum up to 288 products (outputs of
            // up to about 20), and their transforms round differently from a direct sum.
            for (g, e) in got.iter().zip(&want) {
                assert!(
                    (*g as f64 - e).abs() < 1e-5 * (1.0 + e.abs()),
                    "{s:?}: {g} vs {e}"
                );
            }
        }
    }

    /// <dY, conv(x, w)> is linear in x and in w, so its gradients are exact dot products:
    /// <dx, x'> = <dY, conv(x', w)> and <dw, w'> = <dY, conv(x, w')> for any x', w'.
    #[test]
    fn backward_is_the_adjoint_of_forward() {
        for s in shapes() {
            let x = values(s.batch * s.image_in(), 3);
            let w = values(s.channels_out * s.rows(), 4);
            let dy = values(s.batch * s.image_out(), 5);
            let (dx, dw) = backward(&s, &x, &w, &dy, true, true);
            let (dx, dw) = (dx.unwrap(), dw.unwrap());
            // Each adjoint alone is the one computed with the other.
            assert_eq!(
                backward(&s, &x, &w, &dy, true, false),
                (Some(dx.clone()), None)
            );
            assert_eq!(
                backward(&s, &x, &w, &dy, false, true),
                (None, Some(dw.clone()))
            );
            let dot =
                |a: &[f32], b: &[f64]| -> f64 { a.iter().zip(b).map(|(a, b)| *a as f64 * b).sum() };
            let x2 = values(x.len(), 6);
            let w2 = values(w.len(), 7);
            let lhs_x = dot(&dx, &x2.iter().map(|v| *v as f64).collect::<Vec<_>>());
            let rhs_x = dot(&dy, &direct(&s, &x2, &w));
            let tol = |v: f64| 1e-5 * (1.0 + v.abs());
            assert!(
                (lhs_x - rhs_x).abs() < tol(rhs_x),
                "{s:?}: {lhs_x} vs {rhs_x}"
            );
            let lhs_w = dot(&dw, &w2.iter().map(|v| *v as f64).collect::<Vec<_>>());
            let rhs_w = dot(&dy, &direct(&s, &x, &w2));
            assert!(
                (lhs_w - rhs_w).abs() < tol(rhs_w),
                "{s:?}: {lhs_w} vs {rhs_w}"
            );
        }
    }

    #[test]
    fn weight_gradient_does_not_depend_on_the_thread_count() {
        let (whole, positions) = (shapes()[shapes().len() - 2], shapes()[shapes().len() - 1]);
        for s in [
            shapes()[4],
            grid_shape(),
            phase_shape(),
            winograd_shape(),
            whole,
            positions,
        ] {
            let x = values(s.batch * s.image_in(), 8);
            let w = values(s.channels_out * s.rows(), 9);
            let dy = values(s.batch * s.image_out(), 10);
            let run = |threads: usize| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| backward(&s, &x, &w, &dy, true, true))
            };
            assert_eq!(run(1), run(3), "{s:?}");
        }
    }
}
