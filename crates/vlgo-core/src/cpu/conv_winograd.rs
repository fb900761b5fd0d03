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
//! The transforms add and subtract entries of tiles, so they run on the batch's last axis:
//! each group of images is transposed to [C x H x W, images] first (and the results back), and
//! every transform works on 16 images at a time, one vector per tile entry. The transforms'
//! coefficients are 0, +-1 and +-1/2, and the sums run in another order than the direct
//! convolution's, so results agree with the other paths to rounding, not bit for bit.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::conv::ConvShape;
use super::gemm::{View, product, written};
use super::simd::vectorised;

/// The sides the path takes: below, the 2 x 2 tiles waste most of their work on a map of 1 or
/// 2 pixels (the per-position path takes those); above, the grid path (`conv_grid`) is
/// measured faster.
const SIDES: std::ops::RangeInclusive<usize> = 3..=6;

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

/// Images per group: enough for [`TARGET_TILES`], a multiple of [`LANES`].
fn group(s: &ConvShape) -> usize {
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

/// `src` [rows, cols] into `dst` as [cols, rows], in 16 x 16 blocks held in registers.
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [MaybeUninit<f32>]) {
    const B: usize = 16;
    vectorised(|| {
        for r0 in (0..rows).step_by(B) {
            let rn = B.min(rows - r0);
            for c0 in (0..cols).step_by(B) {
                let cn = B.min(cols - c0);
                let mut block = [[0.0f32; B]; B];
                if rn == B && cn == B {
                    for (i, row) in block.iter_mut().enumerate() {
                        row.copy_from_slice(&src[(r0 + i) * cols + c0..][..B]);
                    }
                    for j in 0..B {
                        let out: &mut [MaybeUninit<f32>; B] =
                            (&mut dst[(c0 + j) * rows + r0..][..B]).try_into().unwrap();
                        for i in 0..B {
                            out[i].write(block[i][j]);
                        }
                    }
                } else {
                    for (i, row) in block.iter_mut().enumerate().take(rn) {
                        row[..cn].copy_from_slice(&src[(r0 + i) * cols + c0..][..cn]);
                    }
                    for j in 0..cn {
                        for i in 0..rn {
                            dst[(c0 + j) * rows + r0 + i].write(block[i][j]);
                        }
                    }
                }
            }
        }
    })
}

/// Buffers of one job, kept across its groups.
#[derive(Default)]
struct Scratch {
    /// The group's images as [C x H x W, images].
    planes: Vec<f32>,
    /// The transformed input tiles V, [16][C_in][tiles x images].
    v: Vec<f32>,
    /// The products M (or the output adjoint's transform dM), [16][C_out][tiles x images].
    m: Vec<f32>,
    /// The input adjoint's transform dV, [16][C_in][tiles x images].
    dv: Vec<f32>,
}

/// A buffer resized to `len` (its values are overwritten by the caller).
fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// The group's images `x` ([images, C, H, W]) as [C x H x W, images] in `planes`.
fn lay_out(x: &[f32], images: usize, planes: &mut Vec<f32>) {
    let rows = x.len() / images.max(1);
    planes.clear();
    planes.reserve(x.len());
    transpose_into(x, images, rows, &mut planes.spare_capacity_mut()[..x.len()]);
    // SAFETY: the transpose wrote every entry.
    unsafe { planes.set_len(x.len()) };
}

/// Loads lanes l0..l0 + LANES (fewer at the end, the rest zero) of a row of `images` entries.
#[inline(always)]
fn load(row: Option<&[f32]>, l0: usize, images: usize) -> Lanes {
    let mut v = [0.0f32; LANES];
    if let Some(row) = row {
        if images - l0 >= LANES {
            // A fixed-size copy: one vector move, not a call.
            v.copy_from_slice(&row[l0..l0 + LANES]);
        } else {
            let n = images - l0;
            v[..n].copy_from_slice(&row[l0..l0 + n]);
        }
    }
    v
}

/// Stores the first `images - l0` lanes of `v` at l0 of `row`.
#[inline(always)]
fn store(v: &Lanes, row: &mut [f32], l0: usize, images: usize) {
    if images - l0 >= LANES {
        row[l0..l0 + LANES].copy_from_slice(v);
    } else {
        let n = images - l0;
        row[l0..l0 + n].copy_from_slice(&v[..n]);
    }
}

/// Geometry of one group: map sizes, tiles, images.
#[derive(Clone, Copy)]
struct Group {
    h: usize,
    w: usize,
    th: usize,
    tw: usize,
    images: usize,
}

impl Group {
    fn new(s: &ConvShape, images: usize) -> Self {
        let (th, tw) = tiles(s);
        Group {
            h: s.height,
            w: s.width,
            th,
            tw,
            images,
        }
    }

    /// Columns of each transformed matrix: tiles x images, tile-major.
    fn columns(&self) -> usize {
        self.th * self.tw * self.images
    }

    /// The row of channel plane `plane` ([H x W, images] rows) at pixel (i, j), `None` outside
    /// the map.
    fn pixel(&self, i: isize, j: isize) -> Option<usize> {
        (i >= 0 && j >= 0 && (i as usize) < self.h && (j as usize) < self.w)
            .then(|| (i as usize * self.w + j as usize) * self.images)
    }

    /// The input rows of tile (ty, tx)'s 4 x 4 entries, relative to a channel's plane.
    fn input_rows(&self, ty: usize, tx: usize) -> [Option<usize>; 16] {
        std::array::from_fn(|e| {
            let (i, j) = ((2 * ty + e / 4) as isize - 1, (2 * tx + e % 4) as isize - 1);
            self.pixel(i, j)
        })
    }

    /// The output rows of tile (ty, tx)'s 2 x 2 entries, relative to a channel's plane.
    fn output_rows(&self, ty: usize, tx: usize) -> [Option<usize>; 4] {
        std::array::from_fn(|e| self.pixel((2 * ty + e / 2) as isize, (2 * tx + e % 2) as isize))
    }
}

/// V from `planes` ([C_in x H x W, images]) into `v` ([16][C_in][columns]).
fn transform_input(g: Group, ci: usize, planes: &[f32], v: &mut [f32]) {
    let (hw, cols) = (g.h * g.w * g.images, g.columns());
    vectorised(|| {
        for ty in 0..g.th {
            for tx in 0..g.tw {
                let rows = g.input_rows(ty, tx);
                let col = (ty * g.tw + tx) * g.images;
                for c in 0..ci {
                    let plane = &planes[c * hw..(c + 1) * hw];
                    for l0 in (0..g.images).step_by(LANES) {
                        let mut d = [[0.0f32; LANES]; 16];
                        for (d, r) in d.iter_mut().zip(rows) {
                            *d = load(r.map(|r| &plane[r..]), l0, g.images);
                        }
                        let t = input_transform(&d);
                        for (xi, t) in t.iter().enumerate() {
                            store(t, &mut v[(xi * ci + c) * cols + col..], l0, g.images);
                        }
                    }
                }
            }
        }
    })
}

/// The output [C_out x H x W, images] into `planes` from `m` ([16][C_out][columns]).
fn transform_output(g: Group, co: usize, m: &[f32], planes: &mut [f32]) {
    let (hw, cols) = (g.h * g.w * g.images, g.columns());
    vectorised(|| {
        for ty in 0..g.th {
            for tx in 0..g.tw {
                let rows = g.output_rows(ty, tx);
                let col = (ty * g.tw + tx) * g.images;
                for o in 0..co {
                    let plane = &mut planes[o * hw..(o + 1) * hw];
                    for l0 in (0..g.images).step_by(LANES) {
                        let mut mt = [[0.0f32; LANES]; 16];
                        for (xi, mt) in mt.iter_mut().enumerate() {
                            *mt = load(Some(&m[(xi * co + o) * cols + col..]), l0, g.images);
                        }
                        let y = output_transform(&mt);
                        for (y, r) in y.iter().zip(rows) {
                            if let Some(r) = r {
                                store(y, &mut plane[r..], l0, g.images);
                            }
                        }
                    }
                }
            }
        }
    })
}

/// dM into `m` ([16][C_out][columns]) from the output adjoint `planes` ([C_out x H x W,
/// images]); the entries of hanging tiles outside the map count as zero.
fn transform_output_adjoint(g: Group, co: usize, planes: &[f32], m: &mut [f32]) {
    let (hw, cols) = (g.h * g.w * g.images, g.columns());
    vectorised(|| {
        for ty in 0..g.th {
            for tx in 0..g.tw {
                let rows = g.output_rows(ty, tx);
                let col = (ty * g.tw + tx) * g.images;
                for o in 0..co {
                    let plane = &planes[o * hw..(o + 1) * hw];
                    for l0 in (0..g.images).step_by(LANES) {
                        let mut dy = [[0.0f32; LANES]; 4];
                        for (dy, r) in dy.iter_mut().zip(rows) {
                            *dy = load(r.map(|r| &plane[r..]), l0, g.images);
                        }
                        let dm = output_adjoint(&dy);
                        for (xi, dm) in dm.iter().enumerate() {
                            store(dm, &mut m[(xi * co + o) * cols + col..], l0, g.images);
                        }
                    }
                }
            }
        }
    })
}

/// The input adjoint [C_in x H x W, images] into `planes` (every entry written) from dV
/// (`dv`, [16][C_in][columns]): each tile's B dV B^T added where its entries lie in the map.
fn transform_input_adjoint(g: Group, ci: usize, dv: &[f32], planes: &mut [f32]) {
    let (hw, cols) = (g.h * g.w * g.images, g.columns());
    planes.fill(0.0);
    vectorised(|| {
        for ty in 0..g.th {
            for tx in 0..g.tw {
                let rows = g.input_rows(ty, tx);
                let col = (ty * g.tw + tx) * g.images;
                for c in 0..ci {
                    let plane = &mut planes[c * hw..(c + 1) * hw];
                    for l0 in (0..g.images).step_by(LANES) {
                        let mut t = [[0.0f32; LANES]; 16];
                        for (xi, t) in t.iter_mut().enumerate() {
                            *t = load(Some(&dv[(xi * ci + c) * cols + col..]), l0, g.images);
                        }
                        let dd = input_adjoint(&t);
                        for (dd, r) in dd.iter().zip(rows) {
                            if let Some(r) = r {
                                let mut acc = load(Some(&plane[r..]), l0, g.images);
                                for (a, v) in acc.iter_mut().zip(dd) {
                                    *a += v;
                                }
                                store(&acc, &mut plane[r..], l0, g.images);
                            }
                        }
                    }
                }
            }
        }
    })
}

/// The convolution of `x` [N, C_in, H, W] with `weight` [C_out, C_in, 3, 3], as [N, C_out, H,
/// W] (no bias).
pub(crate) fn forward(s: &ConvShape, x: &[f32], weight: &[f32]) -> Vec<f32> {
    let (ci, co) = (s.channels_in, s.channels_out);
    let (image_in, image_out) = (ci * s.height * s.width, co * s.height * s.width);
    let u = transform_weights(weight, co, ci);
    let g = group(s);
    let job = |scratch: &mut Scratch, (out, x): (&mut [MaybeUninit<f32>], &[f32])| {
        let geo = Group::new(s, x.len() / image_in);
        let cols = geo.columns();
        lay_out(x, geo.images, &mut scratch.planes);
        let v = sized(&mut scratch.v, 16 * ci * cols);
        transform_input(geo, ci, &scratch.planes, v);
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
        let planes = sized(&mut scratch.planes, geo.images * image_out);
        transform_output(geo, co, m, planes);
        transpose_into(planes, image_out, geo.images, out);
    };
    // SAFETY: each job writes its whole chunk of images (the transpose of the output planes).
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
    let chunk = |first: usize, mut dx: Option<&mut [MaybeUninit<f32>]>| -> Option<Vec<f32>> {
        let count = per_chunk.min(s.batch - first);
        let mut du = want_weight.then(|| vec![0.0f32; 16 * co * ci]);
        let mut scratch = Scratch::default();
        for start in (0..count).step_by(g) {
            let geo = Group::new(s, g.min(count - start));
            let (n0, cols) = (first + start, geo.columns());
            let dy = &grad[n0 * image_out..(n0 + geo.images) * image_out];
            lay_out(dy, geo.images, &mut scratch.planes);
            let m = sized(&mut scratch.m, 16 * co * cols);
            transform_output_adjoint(geo, co, &scratch.planes, m);
            if let Some(du) = du.as_mut() {
                let xg = &x[n0 * image_in..(n0 + geo.images) * image_in];
                lay_out(xg, geo.images, &mut scratch.planes);
                let v = sized(&mut scratch.v, 16 * ci * cols);
                transform_input(geo, ci, &scratch.planes, v);
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
                let planes = sized(&mut scratch.planes, geo.images * image_in);
                transform_input_adjoint(geo, ci, dv, planes);
                let dx = &mut dx[start * image_in..(start + geo.images) * image_in];
                transpose_into(planes, image_in, geo.images, dx);
            }
        }
        du
    };
    let chunks = s.batch.div_ceil(per_chunk.max(1));
    let mut partials = Vec::new();
    let dx = want_input.then(|| {
        // SAFETY: each chunk's job writes every entry of its images (the transposed planes).
        unsafe {
            written(s.batch * image_in, |dx| {
                partials = dx
                    .par_chunks_mut(per_chunk * image_in)
                    .enumerate()
                    .map(|(k, dx)| chunk(k * per_chunk, Some(dx)))
                    .collect();
            })
        }
    });
    if !want_input {
        partials = (0..chunks)
            .into_par_iter()
            .map(|k| chunk(k * per_chunk, None))
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
