//! 3 x 3 "same" convolutions on small maps by Winograd's minimal filtering F(2 x 2, 3 x 3)
//! (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).
//!
//! The output map is cut into 2 x 2 tiles; each reads a 4 x 4 tile of the zero-padded input.
//! With V = B^T d B the transform of an input tile d, U = G g G^T that of a 3 x 3 kernel g, the
//! output tile is A^T (U . V) A (`.` entrywise). Summed over input channels, the entrywise
//! product at each of the 16 transformed positions xi is one matrix product, M_xi = U_xi V_xi,
//! [C_out, C_in] x [C_in, tiles]: 16 multiplies per 2 x 2 outputs and channel pair where the
//! direct convolution takes 36, so 2.25x fewer, in products of the full channel depth.
//!
//! The adjoints are those of the same linear maps, in reverse (so they are exact for the
//! computed forward, not a second approximation): dM = A dY A^T, the input's dV_xi = U_xi^T
//! dM_xi then dd = B dV B^T added over the overlapping tiles, the weight's dU_xi = sum over
//! tiles of dM_xi V_xi^T then dg = G^T dU G. The weight adjoint is summed in a fixed number of
//! chunks of images, added in chunk order, so results do not depend on the number of threads.
//!
//! The transforms add and subtract entries of tiles, so they run across images: each group of
//! images is laid out pixel by pixel, a pixel's entries for the group's images side by side
//! ([`Layout`], zero margins where tiles reach past the map), and every transform takes 16
//! images at a time, one vector per tile entry, with no test at the map's edges. The
//! transforms' coefficients are 0, +-1 and +-1/2, and the sums run in another order than the
//! direct convolution's, so results agree with the other paths to rounding, not bit for bit.
//! The transforms subtract entries, so an infinite input can give NaN where the direct
//! convolution gives an infinity.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::conv::ConvShape;
use super::gemm::{View, product, written};
use super::simd::vectorised;

/// The map sides the path takes. Sides of 1 or 2 leave most of a tile's work outside the map
/// (the per-position path takes 2 x 2 maps); at 5 the hanging tiles compute 36 outputs per 25
/// and the path measured 1.0-1.2x slower than im2col, at 3 (16 per 9) still faster, im2col
/// there multiplying even more padding; from 7 on the grid path (`conv_grid`) is used.
const SIDES: [usize; 3] = [3, 4, 6];

/// Channels (in and out) below which the 16 products are too thin for the transforms' cost.
const MIN_CHANNELS: usize = 32;

/// Tiles a group's products should have at least (columns of each M_xi).
const TARGET_TILES: usize = 128;

/// Images per vector of the transforms.
const LANES: usize = 16;

/// Chunks the weight adjoint is summed in, as in the im2col path.
const WEIGHT_CHUNKS: usize = 8;

/// Where the Winograd path is used.
pub(crate) fn applies(s: &ConvShape) -> bool {
    s.kernel == [3, 3]
        && s.stride == [1, 1]
        && s.padding == [1, 1]
        && s.dilation == [1, 1]
        && SIDES.contains(&s.height)
        && SIDES.contains(&s.width)
        && s.channels_in >= MIN_CHANNELS
        && s.channels_out >= MIN_CHANNELS
}

/// Tile rows and columns of the output map (the last row or column of tiles may hang over).
fn tiles(s: &ConvShape) -> (usize, usize) {
    (s.height.div_ceil(2), s.width.div_ceil(2))
}

/// Images per group: enough for [`TARGET_TILES`], a multiple of [`LANES`] (or the whole batch
/// when it is smaller; the layout pads the lanes either way).
pub(crate) fn group(s: &ConvShape) -> usize {
    let (th, tw) = tiles(s);
    TARGET_TILES
        .div_ceil(th * tw)
        .next_multiple_of(LANES)
        .clamp(1, s.batch.max(1))
}

/// U = G g G^T for every kernel, as [16][C_out][C_in] (the 16 transformed positions outermost,
/// so that each U_xi is one row-major matrix).
fn transform_weights(weight: &[f32], co: usize, ci: usize) -> Vec<f32> {
    let mut u = vec![0.0f32; 16 * co * ci];
    for (k, g) in weight.chunks_exact(9).enumerate() {
        // G g: 4 x 3, then (G g) G^T: 4 x 4.
        let mut t = [[0.0f32; 3]; 4];
        for j in 0..3 {
            let (g0, g1, g2) = (g[j], g[3 + j], g[6 + j]);
            t[0][j] = g0;
            t[1][j] = 0.5 * (g0 + g1 + g2);
            t[2][j] = 0.5 * (g0 - g1 + g2);
            t[3][j] = g2;
        }
        for (r, row) in t.iter().enumerate() {
            let [g0, g1, g2] = *row;
            let out = [g0, 0.5 * (g0 + g1 + g2), 0.5 * (g0 - g1 + g2), g2];
            for (q, v) in out.into_iter().enumerate() {
                u[(4 * r + q) * co * ci + k] = v;
            }
        }
    }
    u
}

/// dg = G^T dU G for every kernel, from dU as [16][C_out][C_in], into [C_out, C_in, 3, 3].
fn weights_adjoint(du: &[f32], co: usize, ci: usize) -> Vec<f32> {
    let plane = co * ci;
    let mut dw = vec![0.0f32; plane * 9];
    for (k, dg) in dw.chunks_exact_mut(9).enumerate() {
        let at = |r: usize, q: usize| du[(4 * r + q) * plane + k];
        // G^T dU: 3 x 4, then (G^T dU) G: 3 x 3. G^T's rows: (1, 1/2, 1/2, 0), (0, 1/2, -1/2,
        // 0), (0, 1/2, 1/2, 1).
        let column = |q: usize| (at(0, q), at(1, q), at(2, q), at(3, q));
        let t: [[f32; 4]; 3] = [
            std::array::from_fn(|q| {
                let (d0, d1, d2, _) = column(q);
                d0 + 0.5 * (d1 + d2)
            }),
            std::array::from_fn(|q| {
                let (_, d1, d2, _) = column(q);
                0.5 * (d1 - d2)
            }),
            std::array::from_fn(|q| {
                let (_, d1, d2, d3) = column(q);
                0.5 * (d1 + d2) + d3
            }),
        ];
        for (i, [d0, d1, d2, d3]) in t.into_iter().enumerate() {
            dg[3 * i] = d0 + 0.5 * (d1 + d2);
            dg[3 * i + 1] = 0.5 * (d1 - d2);
            dg[3 * i + 2] = 0.5 * (d1 + d2) + d3;
        }
    }
    dw
}

type Lanes = [f32; LANES];

/// V = B^T d B for one tile entry-wise over the lanes: B^T's rows are (1, 0, -1, 0), (0, 1, 1,
/// 0), (0, -1, 1, 0), (0, 1, 0, -1).
#[inline(always)]
fn input_transform(d: &[Lanes; 16]) -> [Lanes; 16] {
    let mut t = [[0.0f32; LANES]; 16];
    let mut v = [[0.0f32; LANES]; 16];
    for q in 0..4 {
        for l in 0..LANES {
            let (d0, d1, d2, d3) = (d[q][l], d[4 + q][l], d[8 + q][l], d[12 + q][l]);
            t[q][l] = d0 - d2;
            t[4 + q][l] = d1 + d2;
            t[8 + q][l] = d2 - d1;
            t[12 + q][l] = d1 - d3;
        }
    }
    for r in 0..4 {
        for l in 0..LANES {
            let (t0, t1, t2, t3) = (
                t[4 * r][l],
                t[4 * r + 1][l],
                t[4 * r + 2][l],
                t[4 * r + 3][l],
            );
            v[4 * r][l] = t0 - t2;
            v[4 * r + 1][l] = t1 + t2;
            v[4 * r + 2][l] = t2 - t1;
            v[4 * r + 3][l] = t1 - t3;
        }
    }
    v
}

/// The adjoint of [`input_transform`]: dd = B dV B^T.
#[inline(always)]
fn input_adjoint(dv: &[Lanes; 16]) -> [Lanes; 16] {
    let mut f = [[0.0f32; LANES]; 16];
    let mut dd = [[0.0f32; LANES]; 16];
    for q in 0..4 {
        for l in 0..LANES {
            let (v0, v1, v2, v3) = (dv[q][l], dv[4 + q][l], dv[8 + q][l], dv[12 + q][l]);
            f[q][l] = v0;
            f[4 + q][l] = v1 - v2 + v3;
            f[8 + q][l] = v1 + v2 - v0;
            f[12 + q][l] = -v3;
        }
    }
    for i in 0..4 {
        for l in 0..LANES {
            let (f0, f1, f2, f3) = (
                f[4 * i][l],
                f[4 * i + 1][l],
                f[4 * i + 2][l],
                f[4 * i + 3][l],
            );
            dd[4 * i][l] = f0;
            dd[4 * i + 1][l] = f1 - f2 + f3;
            dd[4 * i + 2][l] = f1 + f2 - f0;
            dd[4 * i + 3][l] = -f3;
        }
    }
    dd
}

/// Y = A^T M A for one tile: A^T's rows are (1, 1, 1, 0) and (0, 1, -1, -1).
#[inline(always)]
fn output_transform(m: &[Lanes; 16]) -> [Lanes; 4] {
    let mut s = [[0.0f32; LANES]; 8];
    let mut y = [[0.0f32; LANES]; 4];
    for q in 0..4 {
        for l in 0..LANES {
            let (m0, m1, m2, m3) = (m[q][l], m[4 + q][l], m[8 + q][l], m[12 + q][l]);
            s[q][l] = m0 + m1 + m2;
            s[4 + q][l] = m1 - m2 - m3;
        }
    }
    for a in 0..2 {
        for l in 0..LANES {
            let (s0, s1, s2, s3) = (
                s[4 * a][l],
                s[4 * a + 1][l],
                s[4 * a + 2][l],
                s[4 * a + 3][l],
            );
            y[2 * a][l] = s0 + s1 + s2;
            y[2 * a + 1][l] = s1 - s2 - s3;
        }
    }
    y
}

/// The adjoint of [`output_transform`]: dM = A dY A^T.
#[inline(always)]
fn output_adjoint(dy: &[Lanes; 4]) -> [Lanes; 16] {
    let mut e = [[0.0f32; LANES]; 8];
    let mut dm = [[0.0f32; LANES]; 16];
    for b in 0..2 {
        for l in 0..LANES {
            let (y0, y1) = (dy[b][l], dy[2 + b][l]);
            e[b][l] = y0;
            e[2 + b][l] = y0 + y1;
            e[4 + b][l] = y0 - y1;
            e[6 + b][l] = -y1;
        }
    }
    for r in 0..4 {
        for l in 0..LANES {
            let (e0, e1) = (e[2 * r][l], e[2 * r + 1][l]);
            dm[4 * r][l] = e0;
            dm[4 * r + 1][l] = e0 + e1;
            dm[4 * r + 2][l] = e0 - e1;
            dm[4 * r + 3][l] = -e1;
        }
    }
    dm
}

/// A group's maps laid out for the transforms: per channel a grid of `rows` x `cols` pixels
/// holding the map at `margin` from its top left corner, zeros around it, and each pixel a row
/// of `lanes` entries, one per image (zeros past the group's images). With the input's margin
/// of 1 and the grids as large as the tiles reach, no tile reads or writes outside the grid,
/// so the transforms need no tests at the edges.
#[derive(Clone, Copy)]
struct Layout {
    rows: usize,
    cols: usize,
    margin: usize,
    lanes: usize,
    /// The map's height and width.
    h: usize,
    w: usize,
    images: usize,
}

impl Layout {
    /// The input's layout (the tiles' reach, margin 1) or the output's (margin 0).
    fn new(s: &ConvShape, images: usize, input: bool) -> Self {
        let (th, tw) = tiles(s);
        let margin = usize::from(input);
        Layout {
            rows: 2 * th + 2 * margin,
            cols: 2 * tw + 2 * margin,
            margin,
            lanes: images.next_multiple_of(LANES),
            h: s.height,
            w: s.width,
            images,
        }
    }

    /// Floats of the layout of `channels` maps.
    fn len(&self, channels: usize) -> usize {
        channels * self.rows * self.cols * self.lanes
    }

    /// Offset of the row of grid pixel (i, j) of `channel`.
    #[inline(always)]
    fn at(&self, channel: usize, i: usize, j: usize) -> usize {
        ((channel * self.rows + i) * self.cols + j) * self.lanes
    }

    /// The grid row of map pixel p (row-major in the map) of `channel`.
    #[inline(always)]
    fn pixel(&self, channel: usize, p: usize) -> usize {
        self.at(channel, p / self.w + self.margin, p % self.w + self.margin)
    }

    /// `src` ([images, channels, H, W]) laid out in `dst` (zeros elsewhere).
    fn fill(&self, src: &[f32], channels: usize, dst: &mut Vec<f32>) {
        dst.clear();
        dst.resize(self.len(channels), 0.0);
        let hw = self.h * self.w;
        vectorised(
            #[inline(always)]
            || {
                for c in 0..channels {
                    for n0 in (0..self.images).step_by(LANES) {
                        let nn = LANES.min(self.images - n0);
                        for p0 in (0..hw).step_by(LANES) {
                            let pn = LANES.min(hw - p0);
                            // 16 images x 16 pixels, transposed through registers.
                            let mut block = [[0.0f32; LANES]; LANES];
                            for (b, row) in block.iter_mut().enumerate().take(nn) {
                                let from = ((n0 + b) * channels + c) * hw + p0;
                                if pn == LANES {
                                    *row = lanes(src, from);
                                } else {
                                    row[..pn].copy_from_slice(&src[from..from + pn]);
                                }
                            }
                            let columns: [Lanes; LANES] =
                                std::array::from_fn(|k| std::array::from_fn(|b| block[b][k]));
                            for (k, column) in columns.iter().enumerate().take(pn) {
                                let to = self.pixel(c, p0 + k) + n0;
                                if nn == LANES {
                                    dst[to..to + LANES].copy_from_slice(column);
                                } else {
                                    dst[to..to + nn].copy_from_slice(&column[..nn]);
                                }
                            }
                        }
                    }
                }
            },
        )
    }

    /// The maps ([images, channels, H, W], every entry written) taken out of the layout `src`.
    fn extract(&self, src: &[f32], channels: usize, dst: &mut [MaybeUninit<f32>]) {
        let hw = self.h * self.w;
        vectorised(
            #[inline(always)]
            || {
                for c in 0..channels {
                    for n0 in (0..self.images).step_by(LANES) {
                        let nn = LANES.min(self.images - n0);
                        for p0 in (0..hw).step_by(LANES) {
                            let pn = LANES.min(hw - p0);
                            let mut block = [[0.0f32; LANES]; LANES];
                            for (k, row) in block.iter_mut().enumerate().take(pn) {
                                let from = self.pixel(c, p0 + k) + n0;
                                *row = src[from..from + LANES].try_into().unwrap();
                            }
                            for b in 0..nn {
                                let to = ((n0 + b) * channels + c) * hw + p0;
                                if pn == LANES {
                                    let out: &mut [MaybeUninit<f32>; LANES] =
                                        (&mut dst[to..to + LANES]).try_into().unwrap();
                                    for (d, row) in out.iter_mut().zip(&block) {
                                        d.write(row[b]);
                                    }
                                } else {
                                    for (d, row) in dst[to..to + pn].iter_mut().zip(&block) {
                                        d.write(row[b]);
                                    }
                                }
                            }
                        }
                    }
                }
            },
        )
    }
}

/// Buffers of one job, kept across its groups.
#[derive(Default)]
struct Scratch {
    /// A layout of the group's maps (input, output or either adjoint).
    planes: Vec<f32>,
    /// The transformed input tiles V, [16][C_in][tiles x lanes].
    v: Vec<f32>,
    /// The products M (or the output adjoint's transform dM), [16][C_out][tiles x lanes].
    m: Vec<f32>,
    /// The input adjoint's transform dV, [16][C_in][tiles x lanes].
    dv: Vec<f32>,
}

/// A buffer resized to `len` (its values are overwritten by the caller).
fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// The lanes at `at`.
#[inline(always)]
fn lanes(buf: &[f32], at: usize) -> Lanes {
    buf[at..at + LANES].try_into().unwrap()
}

/// K vectors of lanes, the e-th at `at(e)`.
#[inline(always)]
fn gather<const K: usize>(buf: &[f32], at: impl Fn(usize) -> usize) -> [Lanes; K] {
    let mut out = [[0.0f32; LANES]; K];
    for (e, out) in out.iter_mut().enumerate() {
        *out = lanes(buf, at(e));
    }
    out
}

/// Stores the e-th vector of `values` at `at(e)`.
#[inline(always)]
fn scatter(buf: &mut [f32], values: &[Lanes], at: impl Fn(usize) -> usize) {
    for (e, v) in values.iter().enumerate() {
        let at = at(e);
        buf[at..at + LANES].copy_from_slice(v);
    }
}

/// Tiles of a group: rows, columns, and the columns of each transformed matrix (tiles x lanes,
/// tile-major).
fn tile_grid(s: &ConvShape, lanes: usize) -> (usize, usize, usize) {
    let (th, tw) = tiles(s);
    (th, tw, th * tw * lanes)
}

/// Calls `visit(channel, (ty, tx), (column, l0))` for every channel, tile and vector of lanes
/// l0..l0 + LANES (`column`: that vector's first column of the transformed matrices), all in
/// one function compiled for the widest instruction set.
#[inline(always)]
fn each_tile(
    s: &ConvShape,
    channels: usize,
    lanes: usize,
    mut visit: impl FnMut(usize, (usize, usize), (usize, usize)),
) {
    let (th, tw) = tiles(s);
    vectorised(
        #[inline(always)]
        || {
            for c in 0..channels {
                for ty in 0..th {
                    for tx in 0..tw {
                        let col = (ty * tw + tx) * lanes;
                        for l0 in (0..lanes).step_by(LANES) {
                            visit(c, (ty, tx), (col + l0, l0));
                        }
                    }
                }
            }
        },
    )
}

/// V from the input's layout `planes` into `v` ([16][C_in][columns]).
fn transform_input(s: &ConvShape, l: Layout, planes: &[f32], v: &mut [f32]) {
    let (ci, cols) = (s.channels_in, tile_grid(s, l.lanes).2);
    each_tile(
        s,
        ci,
        l.lanes,
        #[inline(always)]
        |c, (ty, tx), (col, l0)| {
            let d = gather(planes, |e| l.at(c, 2 * ty + e / 4, 2 * tx + e % 4) + l0);
            scatter(v, &input_transform(&d), |xi| (xi * ci + c) * cols + col);
        },
    )
}

/// The output's layout into `planes` from M (`m`, [16][C_out][columns]).
fn transform_output(s: &ConvShape, l: Layout, m: &[f32], planes: &mut [f32]) {
    let (co, cols) = (s.channels_out, tile_grid(s, l.lanes).2);
    each_tile(
        s,
        co,
        l.lanes,
        #[inline(always)]
        |o, (ty, tx), (col, l0)| {
            let mt = gather(m, |xi| (xi * co + o) * cols + col);
            scatter(planes, &output_transform(&mt), |e| {
                l.at(o, 2 * ty + e / 2, 2 * tx + e % 2) + l0
            });
        },
    )
}

/// dM into `m` ([16][C_out][columns]) from the output adjoint's layout `planes` (zeros at the
/// hanging tiles' entries outside the map).
fn transform_output_adjoint(s: &ConvShape, l: Layout, planes: &[f32], m: &mut [f32]) {
    let (co, cols) = (s.channels_out, tile_grid(s, l.lanes).2);
    each_tile(
        s,
        co,
        l.lanes,
        #[inline(always)]
        |o, (ty, tx), (col, l0)| {
            let dy = gather(planes, |e| l.at(o, 2 * ty + e / 2, 2 * tx + e % 2) + l0);
            scatter(m, &output_adjoint(&dy), |xi| (xi * co + o) * cols + col);
        },
    )
}

/// The input adjoint's layout into `planes` (zeroed here) from dV (`dv`, [16][C_in][columns]):
/// each tile's B dV B^T added at its 4 x 4 entries.
fn transform_input_adjoint(s: &ConvShape, l: Layout, dv: &[f32], planes: &mut Vec<f32>) {
    let (ci, cols) = (s.channels_in, tile_grid(s, l.lanes).2);
    planes.clear();
    planes.resize(l.len(ci), 0.0);
    each_tile(
        s,
        ci,
        l.lanes,
        #[inline(always)]
        |c, (ty, tx), (col, l0)| {
            let t = gather(dv, |xi| (xi * ci + c) * cols + col);
            for (e, dd) in input_adjoint(&t).iter().enumerate() {
                let to = l.at(c, 2 * ty + e / 4, 2 * tx + e % 4) + l0;
                let acc: &mut [f32; LANES] = (&mut planes[to..to + LANES]).try_into().unwrap();
                for (a, v) in acc.iter_mut().zip(dd) {
                    *a += v;
                }
            }
        },
    )
}

/// The convolution of `x` [N, C_in, H, W] with `weight` [C_out, C_in, 3, 3], as [N, C_out, H,
/// W] (no bias).
pub(crate) fn forward(s: &ConvShape, x: &[f32], weight: &[f32]) -> Vec<f32> {
    let (ci, co) = (s.channels_in, s.channels_out);
    let (image_in, image_out) = (ci * s.height * s.width, co * s.height * s.width);
    let u = transform_weights(weight, co, ci);
    let g = group(s);
    let job = |scratch: &mut Scratch, (out, x): (&mut [MaybeUninit<f32>], &[f32])| {
        let images = x.len() / image_in;
        let (input, output) = (Layout::new(s, images, true), Layout::new(s, images, false));
        let cols = tile_grid(s, input.lanes).2;
        input.fill(x, ci, &mut scratch.planes);
        let v = sized(&mut scratch.v, 16 * ci * cols);
        transform_input(s, input, &scratch.planes, v);
        let m = sized(&mut scratch.m, 16 * co * cols);
        for xi in 0..16 {
            // SAFETY: U_xi is [co, ci], V_xi [ci, cols], M_xi [co, cols].
            unsafe {
                product(
                    (co, cols, ci),
                    &mut m[xi * co * cols..(xi + 1) * co * cols],
                    cols,
                    false,
                    View::rows(&u[xi * co * ci..], ci),
                    View::rows(&v[xi * ci * cols..], cols),
                    false,
                )
            };
        }
        let planes = sized(&mut scratch.planes, output.len(co));
        transform_output(s, output, m, planes);
        output.extract(planes, co, out);
    };
    // SAFETY: each job writes its whole chunk of images (`extract` writes every entry).
    unsafe {
        written(s.batch * image_out, |out| {
            out.par_chunks_mut(g * image_out)
                .zip(x.par_chunks(g * image_in))
                .for_each_init(Scratch::default, job)
        })
    }
}

/// What [`super::conv::backward`] computes (the adjoints wanted of the input and of the
/// weight, from the output's adjoint `grad`), through the transforms' adjoints.
pub(crate) fn backward(
    s: &ConvShape,
    x: &[f32],
    weight: &[f32],
    grad: &[f32],
    want_input: bool,
    want_weight: bool,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (ci, co) = (s.channels_in, s.channels_out);
    let (image_in, image_out) = (ci * s.height * s.width, co * s.height * s.width);
    let g = group(s);
    let groups = s.batch.div_ceil(g);
    let per_chunk = groups.div_ceil(WEIGHT_CHUNKS.min(groups).max(1)) * g;
    let u = want_input.then(|| transform_weights(weight, co, ci));
    // Each chunk's part of the weight's adjoint, the scratch kept across the chunks of a job.
    let chunk = |scratch: &mut Scratch,
                 first: usize,
                 mut dx: Option<&mut [MaybeUninit<f32>]>|
     -> Option<Vec<f32>> {
        let count = per_chunk.min(s.batch - first);
        let mut du = want_weight.then(|| vec![0.0f32; 16 * co * ci]);
        for start in (0..count).step_by(g) {
            let (n0, images) = (first + start, g.min(count - start));
            let (input, output) = (Layout::new(s, images, true), Layout::new(s, images, false));
            let cols = tile_grid(s, input.lanes).2;
            output.fill(
                &grad[n0 * image_out..(n0 + images) * image_out],
                co,
                &mut scratch.planes,
            );
            let m = sized(&mut scratch.m, 16 * co * cols);
            transform_output_adjoint(s, output, &scratch.planes, m);
            if let Some(du) = du.as_mut() {
                let xg = &x[n0 * image_in..(n0 + images) * image_in];
                input.fill(xg, ci, &mut scratch.planes);
                let v = sized(&mut scratch.v, 16 * ci * cols);
                transform_input(s, input, &scratch.planes, v);
                for xi in 0..16 {
                    // SAFETY: dM_xi is [co, cols], V_xi [ci, cols] read transposed, dU_xi
                    // [co, ci].
                    unsafe {
                        product(
                            (co, ci, cols),
                            &mut du[xi * co * ci..(xi + 1) * co * ci],
                            ci,
                            true,
                            View::rows(&m[xi * co * cols..], cols),
                            View::transposed(&v[xi * ci * cols..], cols),
                            false,
                        )
                    };
                }
            }
            if let (Some(dx), Some(u)) = (dx.as_mut(), u.as_deref()) {
                let dv = sized(&mut scratch.dv, 16 * ci * cols);
                for xi in 0..16 {
                    // SAFETY: U_xi is [co, ci] read transposed, dM_xi [co, cols], dV_xi [ci,
                    // cols].
                    unsafe {
                        product(
                            (ci, cols, co),
                            &mut dv[xi * ci * cols..(xi + 1) * ci * cols],
                            cols,
                            false,
                            View::transposed(&u[xi * co * ci..], ci),
                            View::rows(&m[xi * co * cols..], cols),
                            false,
                        )
                    };
                }
                transform_input_adjoint(s, input, dv, &mut scratch.planes);
                let dx = &mut dx[start * image_in..(start + images) * image_in];
                input.extract(&scratch.planes, ci, dx);
            }
        }
        du
    };
    let chunks = s.batch.div_ceil(per_chunk.max(1));
    let mut partials = Vec::new();
    let dx = want_input.then(|| {
        // SAFETY: each chunk's job writes every entry of its images (`extract`).
        unsafe {
            written(s.batch * image_in, |dx| {
                partials = dx
                    .par_chunks_mut(per_chunk * image_in)
                    .enumerate()
                    .map_init(Scratch::default, |scratch, (k, dx)| {
                        chunk(scratch, k * per_chunk, Some(dx))
                    })
                    .collect();
            })
        }
    });
    if !want_input {
        partials = (0..chunks)
            .into_par_iter()
            .map_init(Scratch::default, |scratch, k| {
                chunk(scratch, k * per_chunk, None)
            })
            .collect();
    }
    let dw = want_weight.then(|| {
        let mut du = vec![0.0f32; 16 * co * ci];
        for part in partials.iter().flatten() {
            du.iter_mut().zip(part).for_each(|(d, p)| *d += p);
        }
        weights_adjoint(&du, co, ci)
    });
    (dx, dw)
}
