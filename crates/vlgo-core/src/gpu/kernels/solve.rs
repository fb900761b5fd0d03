//! The Gauss-Jordan solve of the Padé denominator on the slots.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::plan::barrier;
#[allow(unused_imports)]
use super::*;

/// Gauss-Jordan elimination with partial pivoting: work[p] <- work[q]^{-1} work[p].
///
/// `fac` holds the n multipliers of a step; `mag` and `arg` (one entry per unit) the pivot
/// search, a tree reduction over the cube (the first largest magnitude wins, as in a serial
/// scan). q_m(X) is well conditioned for ||X||_1 <= theta_m, but the pivoting stays (`expm.md`).
#[cube]
pub(crate) fn gauss_jordan(
    work: &mut Slice<f32, ReadWrite>,
    q: usize,
    p: usize,
    fac: &mut SharedMemory<f32>,
    mag: &mut SharedMemory<f32>,
    arg: &mut SharedMemory<f32>,
    n: usize,
    #[comptime] staged: bool,
) {
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    for k in 0..n {
        // Each unit scans its rows of column k (rows >= k), then the cube reduces.
        let mut best = f32::new(-1.0);
        let mut row = k;
        let mut i = k + tid;
        while i < n {
            let v = work[q + i * n + k].abs();
            if v > best {
                best = v;
                row = i;
            }
            i += units;
        }
        mag[tid] = best;
        arg[tid] = f32::cast_from(row as u32);
        sync_cube();
        let mut stride = units / 2;
        while stride > 0 {
            if tid < stride {
                let other = mag[tid + stride];
                let other_row = arg[tid + stride];
                if other > mag[tid] || (other == mag[tid] && other_row < arg[tid]) {
                    mag[tid] = other;
                    arg[tid] = other_row;
                }
            }
            sync_cube();
            stride /= 2;
        }
        let row = u32::cast_from(arg[0]) as usize;
        if row != k {
            let mut e = tid;
            while e < 2 * n {
                let mut base = q;
                let mut j = e;
                if e >= n {
                    base = p;
                    j = e - n;
                }
                let top = work[base + k * n + j];
                work[base + k * n + j] = work[base + row * n + j];
                work[base + row * n + j] = top;
                e += units;
            }
        }
        barrier(staged);
        let pivot = work[q + k * n + k];
        let mut i = tid;
        while i < n {
            let mut f = f32::new(0.0);
            if i != k {
                f = work[q + i * n + k] / pivot;
            }
            fac[i] = f;
            i += units;
        }
        sync_cube();
        let mut e = tid;
        while e < 2 * n * n {
            let i = e / (2 * n);
            let j = e % (2 * n);
            if i != k {
                let f = fac[i];
                if j < n {
                    if j > k {
                        let at = q + i * n + j;
                        work[at] = work[at] - f * work[q + k * n + j];
                    }
                } else {
                    let jj = j - n;
                    let at = p + i * n + jj;
                    work[at] = work[at] - f * work[p + k * n + jj];
                }
            }
            e += units;
        }
        barrier(staged);
    }
    let mut e = tid;
    while e < n * n {
        let i = e / n;
        work[p + e] = work[p + e] / work[q + i * n + i];
        e += units;
    }
    barrier(staged);
}
