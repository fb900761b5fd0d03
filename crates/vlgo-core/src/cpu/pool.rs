//! Two-dimensional max pooling on f32 slices in Burn's [N, C, H, W] layout (dilation 1, floor
//! mode): the forward, and the input's adjoint, which finds each window's largest entry again
//! instead of keeping its index.
//!
//! Burn's `Flex` backend pools through a generic three-dimensional loop that tests every tap
//! against the padding and writes an i64 index per output, which the backward then scatters
//! through; after the stem of the Fashion-MNIST CPU network this one layer took about 6 % of a
//! training step. Here every window's rows and columns are clipped to the image once, and the
//! backward recomputes the argmax from the input it already keeps. Ties and NaN go as in
//! `Flex`: the first largest entry in row-major order wins, and a NaN wins only as a window's
//! first entry. Planes (one image and channel) are independent, so results do not depend on
//! the number of threads.

use rayon::prelude::*;

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

    /// Per output of one plane, the plane offset of its window's largest entry (`columns`
    /// from [`columns`](Self::columns)).
    pub(crate) fn argmax(
        &self,
        plane: &[f32],
        columns: &[(usize, usize)],
        mut visit: impl FnMut(usize, usize),
    ) {
        let [ho, wo] = self.out();
        for oh in 0..ho {
            let (r0, r1) = self.window(0, oh);
            for (ow, &(c0, c1)) in columns.iter().enumerate() {
                let mut best = r0 * self.width + c0;
                let mut value = plane[best];
                for start in (r0 * self.width..r1 * self.width).step_by(self.width) {
                    for (i, &v) in (start + c0..).zip(&plane[start + c0..start + c1]) {
                        if v > value {
                            (best, value) = (i, v);
                        }
                    }
                }
                visit(oh * wo + ow, best);
            }
        }
    }
}

/// The max pooling of `x` [N, C, H, W], as [N, C, Ho, Wo].
pub(crate) fn forward(s: &PoolShape, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; s.batch * s.channels * s.plane_out()];
    if out.is_empty() || s.plane_in() == 0 {
        return out;
    }
    let columns = s.columns();
    out.par_chunks_mut(s.plane_out())
        .zip(x.par_chunks(s.plane_in()))
        .for_each(|(out, plane)| s.argmax(plane, &columns, |o, i| out[o] = plane[i]));
    out
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
        .for_each(|(dx, (plane, grad))| s.argmax(plane, &columns, |o, i| dx[i] += grad[o]));
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
