//! Two-dimensional max pooling on f32 slices in Burn's [N, C, H, W] layout (dilation 1, floor
//! mode): the forward, and the input's adjoint, which finds each window's largest entry again
//! instead of keeping its index.
//!
//! Burn's `Flex` backend pools through a generic three-dimensional loop that tests every tap
//! against the padding and writes an i64 index per output, which the backward then scatters
//! through; after the stem of the Fashion-MNIST CPU network this one layer took about 6 % of a
//! training step. Here every window's rows and columns are clipped to the image once, the
//! windows that the image does not clip horizontally are taken sixteen outputs of a row at a time with
//! selects instead of branches, and the backward recomputes the argmax from the input it
//! already keeps. Ties and NaN go as in
//! `Flex`: the first largest entry in row-major order wins, and a NaN wins only as a window's
//! first entry. Planes (one image and channel) are independent, so results do not depend on
//! the number of threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::gemm::written;
use super::simd::vectorised;

/// Geometry of a max pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolShape {
    pub batch: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
}

impl PoolShape {
    /// Output height and width; `None` unless every window holds at least one entry of the
    /// image (padding at most half the kernel, the kernel within the padded image).
    pub fn output(&self) -> Option<[usize; 2]> {
        let dim = |size: usize, k: usize| {
            let (kernel, stride, pad) = (self.kernel[k], self.stride[k], self.padding[k]);
            (kernel > 0 && stride > 0 && 2 * pad <= kernel && size + 2 * pad >= kernel)
                .then(|| (size + 2 * pad - kernel) / stride + 1)
        };
        Some([dim(self.height, 0)?, dim(self.width, 1)?])
    }

    pub(crate) fn out(&self) -> [usize; 2] {
        self.output().expect("checked by the caller")
    }

    pub(crate) fn plane_in(&self) -> usize {
        self.height * self.width
    }

    pub(crate) fn plane_out(&self) -> usize {
        let [ho, wo] = self.out();
        ho * wo
    }

    /// The input rows (axis 0) or columns (axis 1) of output row or column `o`'s window,
    /// clipped to the image: never empty, given [`output`](Self::output).
    fn window(&self, axis: usize, o: usize) -> (usize, usize) {
        let size = if axis == 0 { self.height } else { self.width };
        let start = o * self.stride[axis];
        let lo = start.saturating_sub(self.padding[axis]);
        let hi = (start + self.kernel[axis] - self.padding[axis]).min(size);
        (lo, hi)
    }

    /// Every output column's window of input columns, shared by all planes.
    pub(crate) fn columns(&self) -> Vec<(usize, usize)> {
        (0..self.out()[1]).map(|ow| self.window(1, ow)).collect()
    }

    /// Whether [`windows`](Self::windows) takes unclipped windows [`LANES`] at a time: a row
    /// holds more than one window (the stride is at most the width), and every offset a lane
    /// computes, dropped lanes included, fits in u32.
    fn vectors(&self) -> bool {
        let [h, w, s] = [self.height, self.width, self.stride[1]];
        let last = || h.checked_mul(w)?.checked_add(s.checked_mul(LANES)?);
        s <= w && last().is_some_and(|v| v <= u32::MAX as usize)
    }

    /// Length of a row split by the column stride (see [`windows`](Self::windows)): the
    /// stride's phases one after the other, each with room for a vector read past its last
    /// column.
    fn split_row(&self) -> usize {
        self.stride[1] * (self.width.div_ceil(self.stride[1]) + LANES)
    }

    fn scratch_len(&self) -> usize {
        match self.vectors() {
            true => self.height * self.split_row(),
            false => 0,
        }
    }

    /// The scratch buffer [`argmax`](Self::argmax) and [`maxima`](Self::maxima) take: one per
    /// thread, shared by the planes (empty where the windows are taken one at a time).
    pub(crate) fn scratch(&self) -> Vec<f32> {
        vec![0.0; self.scratch_len()]
    }

    /// Per output of one plane, the plane offset of its window's largest entry (`columns`
    /// from [`columns`](Self::columns), `scratch` from [`scratch`](Self::scratch)), visited in
    /// row-major order of the outputs.
    pub(crate) fn argmax(
        &self,
        plane: &[f32],
        columns: &[(usize, usize)],
        scratch: &mut [f32],
        mut visit: impl FnMut(usize, usize),
    ) {
        self.windows(plane, columns, scratch, |o, best, _| {
            for (k, &i) in best.iter().enumerate() {
                visit(o + k, i);
            }
        })
    }

    /// The pooled plane: each window's largest entry (the one [`argmax`](Self::argmax) finds)
    /// into `out`, one plane's outputs, every one of them written.
    pub(crate) fn maxima(
        &self,
        plane: &[f32],
        columns: &[(usize, usize)],
        scratch: &mut [f32],
        out: &mut [MaybeUninit<f32>],
    ) {
        self.windows(plane, columns, scratch, |o, _, value| {
            for (out, &v) in out[o..o + value.len()].iter_mut().zip(value) {
                out.write(v);
            }
        })
    }

    /// Every window's largest entry, as `visit(o, offsets, values)` for runs of consecutive
    /// outputs from output o, in row-major order.
    ///
    /// Windows that the image does not clip horizontally are taken [`LANES`] outputs of a row
    /// at a time, with selects: a branch per tap, taken or not at random, cost more than the
    /// comparisons. For that the plane's rows are first split by the column stride (columns
    /// c, c + s, c + 2s, ... side by side), so that a tap of consecutive windows is a
    /// contiguous read. Each lane makes the scalar loop's comparisons in its order, so ties and
    /// NaN go the same way.
    #[inline(always)]
    fn windows(
        &self,
        plane: &[f32],
        columns: &[(usize, usize)],
        scratch: &mut [f32],
        mut visit: impl FnMut(usize, &[usize], &[f32]),
    ) {
        let [ho, wo] = self.out();
        let (width, stride) = (self.width, self.stride[1]);
        let lanes_fit =
            self.vectors() && plane.len() == self.plane_in() && scratch.len() >= self.scratch_len();
        let full = |ow: usize| lanes_fit && columns[ow].1 - columns[ow].0 == self.kernel[1];
        let scalar = |(r0, r1): (usize, usize), (c0, c1): (usize, usize)| {
            let mut best = r0 * width + c0;
            let mut value = plane[best];
            for start in (r0 * width..r1 * width).step_by(width) {
                for (i, &v) in (start + c0..).zip(&plane[start + c0..start + c1]) {
                    if v > value {
                        (best, value) = (i, v);
                    }
                }
            }
            (best, value)
        };
        vectorised(
            #[inline(always)]
            || {
                if lanes_fit && (0..wo).any(full) {
                    let split = self.split_row();
                    let phase = split / stride;
                    for (r, dst) in scratch
                        .chunks_exact_mut(split)
                        .take(self.height)
                        .enumerate()
                    {
                        let row = &plane[r * width..];
                        if stride == 2 {
                            Self::deinterleave(row, width, dst.split_at_mut(phase));
                            continue;
                        }
                        for (p, dst) in dst.chunks_exact_mut(phase).enumerate() {
                            let columns = (p..width).step_by(stride);
                            for (d, c) in dst.iter_mut().zip(columns) {
                                *d = row[c];
                            }
                        }
                    }
                }
                for oh in 0..ho {
                    let rows = self.window(0, oh);
                    let mut ow = 0;
                    while ow < wo {
                        if !full(ow) {
                            let (best, value) = scalar(rows, columns[ow]);
                            visit(oh * wo + ow, &[best], &[value]);
                            ow += 1;
                            continue;
                        }
                        let mut end = ow + 1;
                        while end < wo && end - ow < LANES && full(end) {
                            end += 1;
                        }
                        let (best, value) = self.lanes(scratch, rows, columns[ow].0);
                        let best: [usize; LANES] = std::array::from_fn(|l| best[l] as usize);
                        visit(oh * wo + ow, &best[..end - ow], &value[..end - ow]);
                        ow = end;
                    }
                }
            },
        )
    }

    /// The even and odd columns of the first `width` entries of `row` into `even` and `odd`
    /// (each at least `width / 2 + LANES` long). Whole vectors of 2 LANES entries are read
    /// while `row` holds them, past the row's end into the plane's next row (the extra
    /// entries land in the room past the columns); the deinterleave of a local array compiles
    /// to shuffles, an element loop to scalar moves.
    #[inline(always)]
    fn deinterleave(row: &[f32], width: usize, (even, odd): (&mut [f32], &mut [f32])) {
        let mut c = 0;
        while c < width && c + 2 * LANES <= row.len() {
            let chunk: [f32; 2 * LANES] = row[c..c + 2 * LANES].try_into().expect("2 LANES");
            let e: [f32; LANES] = std::array::from_fn(|l| chunk[2 * l]);
            let o: [f32; LANES] = std::array::from_fn(|l| chunk[2 * l + 1]);
            even[c / 2..c / 2 + LANES].copy_from_slice(&e);
            odd[c / 2..c / 2 + LANES].copy_from_slice(&o);
            c += 2 * LANES;
        }
        for c in c..width {
            let to = if c % 2 == 0 { &mut *even } else { &mut *odd };
            to[c / 2] = row[c];
        }
    }

    /// The argmax of [`LANES`] consecutive unclipped windows of one output row, the first at
    /// column `c0`, from the plane split by [`windows`](Self::windows): the scalar loop's
    /// comparisons, lane by lane (the first tap compared with itself changes nothing). Lanes
    /// past the run of unclipped windows (fewer than [`LANES`] at a row's end, or before a
    /// clipped window) read other columns or the split row's room, and the caller drops them.
    #[inline(always)]
    fn lanes(
        &self,
        split: &[f32],
        (r0, r1): (usize, usize),
        c0: usize,
    ) -> ([u32; LANES], [f32; LANES]) {
        let (width, stride, row) = (self.width, self.stride[1], self.split_row());
        let phase = row / stride;
        let step: [u32; LANES] = std::array::from_fn(|l| (l * stride) as u32);
        let read = |at: usize| -> [f32; LANES] {
            // A copy into a local array, not a borrowed one: the loops below vectorise.
            split[at..at + LANES].try_into().expect("LANES entries")
        };
        let (first, phase0) = (
            r0 * width + c0,
            r0 * row + (c0 % stride) * phase + c0 / stride,
        );
        let mut value = read(phase0);
        let mut best: [u32; LANES] = std::array::from_fn(|l| first as u32 + step[l]);
        for r in r0..r1 {
            // The tap's place in the split row, advanced column by column without a division.
            let (mut p, mut q) = (c0 % stride, c0 / stride);
            for c in c0..c0 + self.kernel[1] {
                let tap = read(r * row + p * phase + q);
                let at = (r * width + c) as u32;
                for l in 0..LANES {
                    let larger = tap[l] > value[l];
                    value[l] = if larger { tap[l] } else { value[l] };
                    best[l] = if larger { at + step[l] } else { best[l] };
                }
                p += 1;
                if p == stride {
                    (p, q) = (0, q + 1);
                }
            }
        }
        (best, value)
    }
}

/// Outputs of a row that [`PoolShape::argmax`] takes at a time.
const LANES: usize = 16;

/// The max pooling of `x` [N, C, H, W], as [N, C, Ho, Wo].
pub(crate) fn forward(s: &PoolShape, x: &[f32]) -> Vec<f32> {
    let len = s.batch * s.channels * s.plane_out();
    // A short x would leave outputs unwritten below.
    assert_eq!(
        x.len(),
        s.batch * s.channels * s.plane_in(),
        "max pooling: x does not fit {s:?}"
    );
    if len == 0 || s.plane_in() == 0 {
        return vec![0.0; len];
    }
    let columns = s.columns();
    // SAFETY: a plane of outputs per plane of x (asserted above), and `maxima` writes every
    // output of a plane.
    unsafe {
        written(len, |out| {
            out.par_chunks_mut(s.plane_out())
                .zip(x.par_chunks(s.plane_in()))
                .for_each_init(
                    || s.scratch(),
                    |scratch, (out, plane)| s.maxima(plane, &columns, scratch, out),
                )
        })
    }
}

/// The adjoint of `x` given the adjoint `grad` [N, C, Ho, Wo] of the output: each output's
/// adjoint added at its window's largest entry.
pub(crate) fn backward(s: &PoolShape, x: &[f32], grad: &[f32]) -> Vec<f32> {
    let mut dx = vec![0.0f32; x.len()];
    if grad.is_empty() || s.plane_in() == 0 {
        return dx;
    }
    let columns = s.columns();
    dx.par_chunks_mut(s.plane_in())
        .zip(
            x.par_chunks(s.plane_in())
                .zip(grad.par_chunks(s.plane_out())),
        )
        .for_each_init(
            || s.scratch(),
            |scratch, (dx, (plane, grad))| {
                s.argmax(plane, &columns, scratch, |o, i| dx[i] += grad[o])
            },
        );
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pooling by its definition: every tap tested against the padded image.
    fn direct(s: &PoolShape, x: &[f32]) -> (Vec<f32>, Vec<usize>) {
        let [ho, wo] = s.out();
        let (mut out, mut arg) = (Vec::new(), Vec::new());
        for plane in x.chunks(s.plane_in()) {
            for oh in 0..ho {
                for ow in 0..wo {
                    let mut best: Option<(usize, f32)> = None;
                    for ki in 0..s.kernel[0] {
                        for kj in 0..s.kernel[1] {
                            let ih = (oh * s.stride[0] + ki) as isize - s.padding[0] as isize;
                            let iw = (ow * s.stride[1] + kj) as isize - s.padding[1] as isize;
                            if ih < 0 || iw < 0 || ih >= s.height as isize || iw >= s.width as isize
                            {
                                continue;
                            }
                            let i = ih as usize * s.width + iw as usize;
                            if best.is_none_or(|(_, v)| plane[i] > v) {
                                best = Some((i, plane[i]));
                            }
                        }
                    }
                    let (i, v) = best.expect("a window holds an entry");
                    out.push(v);
                    arg.push(i);
                }
            }
        }
        (out, arg)
    }

    fn shapes() -> Vec<PoolShape> {
        let base = PoolShape {
            batch: 2,
            channels: 3,
            height: 7,
            width: 6,
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
        };
        vec![
            base,
            PoolShape {
                stride: [1, 1],
                ..base
            },
            PoolShape {
                kernel: [2, 2],
                padding: [0, 0],
                ..base
            },
            PoolShape {
                kernel: [3, 2],
                stride: [1, 3],
                padding: [1, 0],
                ..base
            },
            // Rows of more than one vector of windows: the stem's pooling on a wide image
            // (35 outputs a row), an odd width read past each row's end, stride 1 over
            // several vectors and a stride of 3 (the split rows without the even/odd
            // shuffles).
            PoolShape {
                height: 9,
                width: 70,
                ..base
            },
            PoolShape {
                height: 5,
                width: 37,
                kernel: [2, 2],
                padding: [0, 0],
                ..base
            },
            PoolShape {
                height: 6,
                width: 40,
                stride: [1, 1],
                ..base
            },
            PoolShape {
                height: 7,
                width: 53,
                kernel: [3, 4],
                stride: [2, 3],
                padding: [1, 2],
                ..base
            },
            // A column stride wider than the image: one window a row, no split rows.
            PoolShape {
                width: 3,
                stride: [2, 4],
                ..base
            },
        ]
    }

    /// Values with ties (a window's largest entry repeated) to check which one wins.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 97) % 7) as f32 - 3.0)
            .collect()
    }

    #[test]
    fn forward_and_backward_match_the_definition() {
        for s in shapes() {
            let x = values(s.batch * s.channels * s.plane_in(), 1);
            let grad: Vec<f32> = (0..s.batch * s.channels * s.plane_out())
                .map(|i| 1.0 + i as f32)
                .collect();
            let (want, arg) = direct(&s, &x);
            assert_eq!(forward(&s, &x), want, "{s:?}");
            let mut want_dx = vec![0.0f32; x.len()];
            for (o, (&i, g)) in arg.iter().zip(&grad).enumerate() {
                want_dx[o / s.plane_out() * s.plane_in() + i] += g;
            }
            assert_eq!(backward(&s, &x, &grad), want_dx, "{s:?}");
        }
    }

    /// NaN among the entries: a window's first entry that is NaN wins, a later one never does,
    /// in the vectorised windows as in the definition.
    #[test]
    fn nan_entries_go_as_the_definition_says() {
        for s in shapes() {
            let mut x = values(s.batch * s.channels * s.plane_in(), 2);
            for (i, v) in x.iter_mut().enumerate() {
                if i % 5 == 2 {
                    *v = f32::NAN;
                }
            }
            let (want, arg) = direct(&s, &x);
            let got = forward(&s, &x);
            let same = |a: &f32, b: &f32| a.to_bits() == b.to_bits();
            assert!(got.iter().zip(&want).all(|(a, b)| same(a, b)), "{s:?}");
            let grad: Vec<f32> = (0..want.len()).map(|i| i as f32).collect();
            let mut want_dx = vec![0.0f32; x.len()];
            for (o, (&i, g)) in arg.iter().zip(&grad).enumerate() {
                want_dx[o / s.plane_out() * s.plane_in() + i] += g;
            }
            assert_eq!(backward(&s, &x, &grad), want_dx, "{s:?}");
        }
    }

    #[test]
    fn windows_of_padding_only_are_refused() {
        let s = PoolShape {
            padding: [2, 1],
            ..shapes()[0]
        };
        assert_eq!(s.output(), None);
        assert_eq!(shapes()[0].output(), Some([4, 3]));
    }
}
