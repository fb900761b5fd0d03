//! Batched fully connected layers on f32 slices: y = act(x w + b) for S independent layers at
//! once (x [S, N, K], w [S, K, M], b [S, 1, M]), with LeakyReLU (or none) applied in place, and
//! the three adjoints from the output and its adjoint.
//!
//! Burn's CPU backends run such a layer as a product, a broadcast sum and a masked select, each a
//! pass over fresh memory, and differentiate LeakyReLU through a comparison and another select;
//! here the bias is the product's starting value and the activation's derivative is read from
//! the output's sign (the same as the input's for a positive slope). One layer alone spreads its
//! products over the threads; several layers take a thread each. Every entry is summed in a fixed
//! order, so results do not depend on the number of threads.

use rayon::prelude::*;

use super::gemm::{View, product, product_into, written};

/// Entries per task of the elementwise passes.
const CHUNK: usize = 1 << 14;

/// Geometry of S batched layers: `rows` inputs of `inputs` features each, `outputs` outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DenseShape {
    pub splits: usize,
    pub rows: usize,
    pub inputs: usize,
    pub outputs: usize,
}

impl DenseShape {
    fn x(&self) -> usize {
        self.rows * self.inputs
    }

    fn w(&self) -> usize {
        self.inputs * self.outputs
    }

    fn y(&self) -> usize {
        self.rows * self.outputs
    }

    /// Whether one layer's products take all threads (fewer layers than threads).
    fn parallel_products(&self) -> bool {
        self.splits < rayon::current_num_threads()
    }
}

/// Runs `f(split, chunk)` over the `len`-sized chunks of `data`, one thread per chunk when the
/// products are not already parallel.
fn per_split<T: Send, F>(s: &DenseShape, data: &mut [T], len: usize, f: F)
where
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    if s.parallel_products() {
        data.chunks_mut(len).enumerate().for_each(|(j, c)| f(j, c));
    } else {
        data.par_chunks_mut(len)
            .enumerate()
            .for_each(|(j, c)| f(j, c));
    }
}

/// act(x w + b) as [S, N, M]; act is LeakyReLU with `slope` when given, the identity otherwise.
pub(crate) fn forward(
    s: &DenseShape,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    slope: Option<f32>,
) -> Vec<f32> {
    let (n, k, m) = (s.rows, s.inputs, s.outputs);
    if s.splits * s.y() == 0 {
        return Vec::new();
    }
    // The bias is the products' starting value.
    // SAFETY: every row of every layer gets its layer's bias.
    let mut y = unsafe {
        written(s.splits * s.y(), |y| {
            y.par_chunks_mut(m).enumerate().for_each(|(r, row)| {
                let bias = &b[(r / n) * m..(r / n + 1) * m];
                for (o, v) in row.iter_mut().zip(bias) {
                    o.write(*v);
                }
            })
        })
    };
    let parallel = s.parallel_products();
    per_split(s, &mut y, s.y(), |j, yj| {
        let (xj, wj) = (
            &x[j * s.x()..(j + 1) * s.x()],
            &w[j * s.w()..(j + 1) * s.w()],
        );
        // SAFETY: xj is [n, k], wj [k, m] and yj [n, m], all row-major.
        unsafe {
            product(
                (n, m, k),
                yj,
                m,
                true,
                View::rows(xj, k),
                View::rows(wj, m),
                parallel,
            )
        };
    });
    if let Some(a) = slope {
        y.par_chunks_mut(CHUNK).for_each(|c| {
            // A select on every entry, so that it vectorises (the signs are random) and a NaN
            // stays NaN.
            for v in c {
                *v = if *v < 0.0 { a * *v } else { *v };
            }
        });
    }
    y
}

/// The adjoints (dx, dw, db) of [`forward`] given its output `y` and the output's adjoint
/// `grad`, each only when `want` asks for it.
#[allow(clippy::type_complexity)]
pub(crate) fn backward(
    s: &DenseShape,
    x: &[f32],
    w: &[f32],
    y: &[f32],
    grad: &[f32],
    slope: Option<f32>,
    want: [bool; 3],
) -> (Option<Vec<f32>>, Option<Vec<f32>>, Option<Vec<f32>>) {
    let (n, k, m) = (s.rows, s.inputs, s.outputs);
    assert_eq!(
        y.len(),
        grad.len(),
        "the output and its adjoint have one shape"
    );
    // The adjoint before the activation: LeakyReLU's derivative is 1 where the output is
    // positive and the slope elsewhere (for a slope >= 0, the output's sign is the input's).
    debug_assert!(slope.is_none_or(|a| a >= 0.0));
    let pre: std::borrow::Cow<'_, [f32]> = match slope {
        None => grad.into(),
        // SAFETY: the zipped chunks cover the whole buffer, each entry written once.
        Some(a) => unsafe {
            written(grad.len(), |d| {
                d.par_chunks_mut(CHUNK)
                    .zip(grad.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
                    .for_each(|(d, (g, y))| {
                        for ((d, g), y) in d.iter_mut().zip(g).zip(y) {
                            let positive = f32::from(u8::from(*y > 0.0));
                            d.write(g * (a + (1.0 - a) * positive));
                        }
                    })
            })
        }
        .into(),
    };
    let pre = &*pre;
    let parallel = s.parallel_products();
    let db = want[2].then(|| {
        let mut db = vec![0.0f32; s.splits * m];
        // Column blocks of every layer, each summed over its rows in order.
        let block = 256.min(m.max(1));
        db.par_chunks_mut(m.max(1))
            .enumerate()
            .for_each(|(j, dbj)| {
                let pj = &pre[j * s.y()..(j + 1) * s.y()];
                dbj.par_chunks_mut(block).enumerate().for_each(|(c, out)| {
                    let (c0, width) = (c * block, out.len());
                    for row in pj.chunks_exact(m) {
                        for (o, v) in out.iter_mut().zip(&row[c0..c0 + width]) {
                            *o += v;
                        }
                    }
                });
            });
        db
    });
    // SAFETY: every layer's block of dW is written by its product.
    let dw = want[1].then(|| unsafe {
        written(s.splits * s.w(), |dw| {
            if dw.is_empty() {
                return;
            }
            per_split(s, dw, s.w(), |j, dwj| {
                let (xj, pj) = (
                    &x[j * s.x()..(j + 1) * s.x()],
                    &pre[j * s.y()..(j + 1) * s.y()],
                );
                // dW [k, m] = x^T [k, n] dpre [n, m]; xj is [n, k] read transposed.
                product_into(
                    (k, m, n),
                    dwj,
                    m,
                    View::transposed(xj, k),
                    View::rows(pj, m),
                    parallel,
                )
            })
        })
    });
    // SAFETY: every layer's block of dx is written by its product.
    let dx = want[0].then(|| unsafe {
        written(s.splits * s.x(), |dx| {
            if dx.is_empty() {
                return;
            }
            per_split(s, dx, s.x(), |j, dxj| {
                let (wj, pj) = (
                    &w[j * s.w()..(j + 1) * s.w()],
                    &pre[j * s.y()..(j + 1) * s.y()],
                );
                // dx [n, k] = dpre [n, m] W^T [m, k]; wj is [k, m] read transposed.
                product_into(
                    (n, k, m),
                    dxj,
                    k,
                    View::rows(pj, m),
                    View::transposed(wj, m),
                    parallel,
                )
            })
        })
    });
    (dx, dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One layer by definition, entry by entry.
    fn naive(s: &DenseShape, x: &[f32], w: &[f32], b: &[f32], slope: Option<f32>) -> Vec<f32> {
        let (n, k, m) = (s.rows, s.inputs, s.outputs);
        let mut y = vec![0.0; s.splits * n * m];
        for j in 0..s.splits {
            for r in 0..n {
                for c in 0..m {
                    let mut v = b[j * m + c];
                    for i in 0..k {
                        v += x[j * n * k + r * k + i] * w[j * k * m + i * m + c];
                    }
                    y[(j * n + r) * m + c] = match slope {
                        Some(a) if v < 0.0 => a * v,
                        _ => v,
                    };
                }
            }
        }
        y
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32
                    / 500.0
                    - 1.0
            })
            .collect()
    }

    #[test]
    fn forward_matches_the_definition_for_one_and_many_layers() {
        for splits in [1, 3] {
            let s = DenseShape {
                splits,
                rows: 5,
                inputs: 7,
                outputs: 300,
            };
            let (x, w, b) = (
                values(splits * 35, 1),
                values(splits * 2100, 2),
                values(splits * 300, 3),
            );
            for slope in [None, Some(0.01)] {
                let got = forward(&s, &x, &w, &b, slope);
                let want = naive(&s, &x, &w, &b, slope);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(err < 1e-4, "splits {splits}, slope {slope:?}: {err}");
            }
        }
    }

    #[test]
    fn backward_matches_the_adjoints_by_hand() {
        let s = DenseShape {
            splits: 2,
            rows: 3,
            inputs: 4,
            outputs: 300,
        };
        let (n, k, m) = (3, 4, 300);
        let (x, w, b) = (values(24, 4), values(2400, 5), values(600, 6));
        let g = values(1800, 7);
        let a = 0.1;
        let y = forward(&s, &x, &w, &b, Some(a));
        let (dx, dw, db) = backward(&s, &x, &w, &y, &g, Some(a), [true; 3]);
        let (dx, dw, db) = (dx.unwrap(), dw.unwrap(), db.unwrap());
        // The adjoint before the activation, from the pre-activation's sign.
        let pre = naive(&s, &x, &w, &b, None);
        let d: Vec<f32> = pre
            .iter()
            .zip(&g)
            .map(|(p, g)| if *p > 0.0 { *g } else { a * g })
            .collect();
        let close = |got: f32, want: f32, what: &str| {
            assert!((got - want).abs() < 1e-4, "{what}: {got} against {want}");
        };
        for j in 0..2 {
            for c in 0..m {
                let want: f32 = (0..n).map(|r| d[(j * n + r) * m + c]).sum();
                close(db[j * m + c], want, "db");
                for i in 0..k {
                    let want: f32 = (0..n)
                        .map(|r| x[(j * n + r) * k + i] * d[(j * n + r) * m + c])
                        .sum();
                    close(dw[(j * k + i) * m + c], want, "dw");
                }
            }
            for r in 0..n {
                for i in 0..k {
                    let want: f32 = (0..m)
                        .map(|c| d[(j * n + r) * m + c] * w[(j * k + i) * m + c])
                        .sum();
                    close(dx[(j * n + r) * k + i], want, "dx");
                }
            }
        }
        let (none, _, only_db) = backward(&s, &x, &w, &y, &g, Some(a), [false, false, true]);
        assert!(none.is_none() && only_db.is_some());
    }
}
