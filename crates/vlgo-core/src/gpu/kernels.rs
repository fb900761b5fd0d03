//! CubeCL kernels of the explicit exponential: one cube per matrix, persistent over the batch.
//!
//! Every matrix of a cube's share of the batch runs the same straight-line scheme as the
//! tensor-op path (`expm::scheme`), with its own degree and number of squarings read from the
//! plan that [`plan_kernel`] wrote. The cube's intermediates live in its own slots of a global
//! workspace (small enough to stay in L2); each product stages k-tiles of its operands in shared
//! memory and every unit accumulates a 4x4 tile of the result in registers.
//!
//! Barriers: a product or combination writes global memory that other units of the cube read next,
//! so each ends with `sync_storage` + `sync_cube`. Loops that contain barriers run a number of
//! times that is the same for the whole cube (comptime bounds, or plan values read from a
//! read-only buffer at the cube's own index), so the barriers sit in uniform control flow.

// Kernel signatures carry the workspace offsets and comptime layout explicitly.
#![allow(clippy::too_many_arguments)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Workspace slots (n x n matrices) per cube of the forward kernel.
pub(crate) const FORWARD_SLOTS: usize = 10;
/// Workspace slots per cube of the Fréchet-derivative (backward) kernel.
pub(crate) const FRECHET_SLOTS: usize = 14;
/// Entries per matrix in the plan buffer: scale 2^-s (a NaN for a non-finite matrix), s,
/// degree, and 1 for a finite matrix or 0.
pub(crate) const PLAN_STRIDE: usize = 4;
/// Offset of the degree-18 Taylor rows in the Taylor coefficient buffer (after 4 x 4 of degree 12).
pub(crate) const BBC18_OFFSET: usize = 16;
/// Entries per Padé row in the Padé coefficient buffer (b_0..b_7, zero above the degree).
pub(crate) const PADE_ROW: usize = 8;

/// Which degree table the plan uses.
pub(crate) const PLAN_PADE: u32 = 0;
/// Taylor degrees 12 and 18 (the forward).
pub(crate) const PLAN_TAYLOR: u32 = 1;
/// Taylor degree 18 only (the Fréchet derivative).
pub(crate) const PLAN_TAYLOR18: u32 = 2;

/// Global-memory writes of this cube become visible to its other units.
#[cube]
fn barrier() {
    sync_storage();
    sync_cube();
}

/// Per matrix: 1-norm (of A, or of A^T when `rows`), then degree, s and 2^-s (`expm.md`).
///
/// Non-finite norms get the highest degree and no squaring, as on the CPU paths: the output is
/// NaN or Inf either way and s never depends on log2(inf).
#[cube(launch)]
pub(crate) fn plan_kernel(
    a: &Tensor<f32>,
    plan: &mut Array<f32>,
    #[comptime] n: usize,
    #[comptime] units: usize,
    #[comptime] rows: bool,
    #[comptime] table: u32,
) {
    let nn = comptime!(n * n);
    let count = a.len() / nn;
    let mut sums = SharedMemory::<f32>::new(n);
    let mut mat = CUBE_POS;
    while mat < count {
        let src = mat * nn;
        let mut j = UNIT_POS as usize;
        while j < n {
            let mut s = f32::new(0.0);
            for i in 0..n {
                let mut v = a[src + i * n + j];
                if comptime!(rows) {
                    v = a[src + j * n + i];
                }
                s += v.abs();
            }
            sums[j] = s;
            j += units;
        }
        sync_cube();
        if UNIT_POS == 0 {
            let mut norm = f32::new(0.0);
            // Non-finite sums are recognised by their exponent bits: WGSL lets a compiler assume
            // that no NaN or Inf exists, so float comparisons and `is_nan` may be folded away.
            let mut finite = f32::new(1.0);
            let mut nan = f32::new(0.0);
            for j in 0..n {
                let c = sums[j];
                let bits = u32::reinterpret(c);
                if (bits & 0x7f80_0000u32) == 0x7f80_0000u32 {
                    finite = f32::new(0.0);
                    // A quiet NaN made from data at run time (WGSL has no NaN literal).
                    nan = f32::reinterpret(bits | 0x0040_0000u32);
                }
                norm = max(norm, c);
            }
            // Thetas of `expm.md` for f32 compute: Padé 3, 5, 7; Taylor 12, 18.
            let mut theta = f32::new(3.925_724_8);
            let mut degree = f32::new(7.0);
            if comptime!(table != PLAN_PADE) {
                theta = f32::new(3.010_066_3);
                degree = f32::new(18.0);
            }
            let mut scale = f32::new(1.0);
            let mut s = f32::new(0.0);
            if finite > f32::new(0.5) {
                // s = ceil(log2(norm / theta)) by halving, capped where 2^-s stays normal.
                let mut t = norm / theta;
                while t > f32::new(1.0) && s < f32::new(126.0) {
                    t *= f32::new(0.5);
                    scale *= f32::new(0.5);
                    s += f32::new(1.0);
                }
                if s == f32::new(0.0) {
                    if comptime!(table == PLAN_PADE) {
                        if norm <= f32::new(0.425_873) {
                            degree = f32::new(3.0);
                        } else if norm <= f32::new(1.880_152_7) {
                            degree = f32::new(5.0);
                        }
                    }
                    if comptime!(table == PLAN_TAYLOR) && norm <= f32::new(1.461_661_5) {
                        degree = f32::new(12.0);
                    }
                }
            }
            if finite < f32::new(0.5) {
                // The main kernels fill such a matrix with this NaN.
                scale = nan;
            }
            let at = mat * comptime!(PLAN_STRIDE);
            plan[at] = scale;
            plan[at + 1] = s;
            plan[at + 2] = degree;
            plan[at + 3] = finite;
        }
        sync_cube();
        mat += CUBE_COUNT;
    }
}

/// work[dst..] = scale * src[offset..] (or its transpose).
#[cube]
fn load_scaled(
    src: &Tensor<f32>,
    offset: usize,
    work: &mut Array<f32>,
    dst: usize,
    scale: f32,
    #[comptime] transpose: bool,
    #[comptime] n: usize,
    #[comptime] units: usize,
) {
    let mut e = UNIT_POS as usize;
    while e < comptime!(n * n) {
        let mut v = src[offset + e];
        if comptime!(transpose) {
            v = src[offset + (e % n) * n + e / n];
        }
        work[dst + e] = v * scale;
        e += units;
    }
    barrier();
}

/// out[offset..] = work[src..].
#[cube]
fn store(
    work: &mut Array<f32>,
    src: usize,
    out: &mut Tensor<f32>,
    offset: usize,
    #[comptime] n: usize,
    #[comptime] units: usize,
) {
    let mut e = UNIT_POS as usize;
    while e < comptime!(n * n) {
        out[offset + e] = work[src + e];
        e += units;
    }
    barrier();
}

/// out[offset..offset + n^2] = value.
#[cube]
fn fill(
    out: &mut Tensor<f32>,
    offset: usize,
    value: f32,
    #[comptime] n: usize,
    #[comptime] units: usize,
) {
    let mut e = UNIT_POS as usize;
    while e < comptime!(n * n) {
        out[offset + e] = value;
        e += units;
    }
}

/// work[dst] = eye I + sum of five coefficient-weighted slots (a slot may be `dst` itself).
///
/// Unused terms point at an initialised slot with coefficient 0.
#[cube]
fn combine(
    work: &mut Array<f32>,
    dst: usize,
    eye: f32,
    o1: usize,
    c1: f32,
    o2: usize,
    c2: f32,
    o3: usize,
    c3: f32,
    o4: usize,
    c4: f32,
    o5: usize,
    c5: f32,
    #[comptime] n: usize,
    #[comptime] units: usize,
) {
    let mut e = UNIT_POS as usize;
    while e < comptime!(n * n) {
        let mut v = c1 * work[o1 + e]
            + c2 * work[o2 + e]
            + c3 * work[o3 + e]
            + c4 * work[o4 + e]
            + c5 * work[o5 + e];
        if e / n == e % n {
            v += eye;
        }
        work[dst + e] = v;
        e += units;
    }
    barrier();
}

/// work[c] (+)= work[a] work[b]; `c` must differ from `a` and `b`.
///
/// Tiles of 4x4 outputs per unit, `rounds` passes when the matrix has more tiles than the cube
/// has units; the k-loop is split into `tk`-wide slabs of A's columns and B's rows in shared
/// memory (2 n tk floats, sized by the host to fit the device's shared memory).
#[cube]
fn matmul(
    work: &mut Array<f32>,
    a: usize,
    b: usize,
    c: usize,
    sa: &mut SharedMemory<f32>,
    sb: &mut SharedMemory<f32>,
    #[comptime] accumulate: bool,
    #[comptime] n: usize,
    #[comptime] tk: usize,
    #[comptime] units: usize,
) {
    let tid = UNIT_POS as usize;
    let nt = comptime!(n.div_ceil(4));
    let tiles = comptime!(nt * nt);
    let rounds = comptime!(tiles.div_ceil(units));
    let slabs = comptime!(n.div_ceil(tk));
    for round in 0..rounds {
        let tile = round * units + tid;
        let active = tile < tiles;
        let i0 = (tile / nt) * 4;
        let j0 = (tile % nt) * 4;
        let mut acc = Array::<f32>::new(16usize);
        #[unroll]
        for r in 0..16usize {
            acc[r] = f32::new(0.0);
        }
        for slab in 0..slabs {
            let k0 = slab * tk;
            let mut e = tid;
            while e < comptime!(n * tk) {
                let i = e / tk;
                let k = k0 + e % tk;
                let mut va = f32::new(0.0);
                if k < n {
                    va = work[a + i * n + k];
                }
                sa[e] = va;
                let kb = k0 + e / n;
                let mut vb = f32::new(0.0);
                if kb < n {
                    vb = work[b + kb * n + e % n];
                }
                sb[e] = vb;
                e += units;
            }
            sync_cube();
            if active {
                // Not unrolled: with one copy of every product inlined per call site, an
                // unrolled slab makes shaders that software Vulkan takes minutes to compile.
                for kk in 0..tk {
                    let mut av = Array::<f32>::new(4usize);
                    let mut bv = Array::<f32>::new(4usize);
                    #[unroll]
                    for r in 0..4usize {
                        let row = min(i0 + r, comptime!(n - 1));
                        av[r] = sa[row * tk + kk];
                        let col = min(j0 + r, comptime!(n - 1));
                        bv[r] = sb[kk * n + col];
                    }
                    #[unroll]
                    for r in 0..4usize {
                        #[unroll]
                        for q in 0..4usize {
                            acc[r * 4 + q] += av[r] * bv[q];
                        }
                    }
                }
            }
            sync_cube();
        }
        if active {
            #[unroll]
            for r in 0..4usize {
                #[unroll]
                for q in 0..4usize {
                    let i = i0 + r;
                    let j = j0 + q;
                    if i < n && j < n {
                        let at = c + i * n + j;
                        if comptime!(accumulate) {
                            work[at] += acc[r * 4 + q];
                        } else {
                            work[at] = acc[r * 4 + q];
                        }
                    }
                }
            }
        }
    }
    barrier();
}

/// Gauss-Jordan elimination with partial pivoting: work[p] <- work[q]^{-1} work[p].
///
/// `fac` holds the n multipliers of a step; `mag` and `arg` (one entry per unit) the pivot
/// search, a tree reduction over the cube (the first largest magnitude wins, as in a serial
/// scan). q_m(X) is well conditioned for ||X||_1 <= theta_m, but the pivoting stays (`expm.md`).
#[cube]
fn gauss_jordan(
    work: &mut Array<f32>,
    q: usize,
    p: usize,
    fac: &mut SharedMemory<f32>,
    mag: &mut SharedMemory<f32>,
    arg: &mut SharedMemory<f32>,
    #[comptime] n: usize,
    #[comptime] units: usize,
) {
    let tid = UNIT_POS as usize;
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
        // A runtime stride (the cube's size, a power of two): a comptime one cannot be mutated.
        let mut stride = (CUBE_DIM as usize) / 2;
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
            while e < comptime!(2 * n) {
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
        barrier();
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
        while e < comptime!(2 * n * n) {
            let i = e / comptime!(2 * n);
            let j = e % comptime!(2 * n);
            if i != k {
                let f = fac[i];
                if j < n {
                    if j > k {
                        work[q + i * n + j] -= f * work[q + k * n + j];
                    }
                } else {
                    let jj = j - n;
                    work[p + i * n + jj] -= f * work[p + k * n + jj];
                }
            }
            e += units;
        }
        barrier();
    }
    let mut e = tid;
    while e < comptime!(n * n) {
        let i = e / n;
        work[p + e] = work[p + e] / work[q + i * n + i];
        e += units;
    }
    barrier();
}

/// Bader-Blanes-Casas Taylor of degree 12 or 18 on the scaled X in slot 0; returns T's slot.
#[cube]
fn taylor_forward(
    work: &mut Array<f32>,
    coef: &Array<f32>,
    base: usize,
    degree: u32,
    sa: &mut SharedMemory<f32>,
    sb: &mut SharedMemory<f32>,
    #[comptime] n: usize,
    #[comptime] tk: usize,
    #[comptime] units: usize,
) -> usize {
    let nn = comptime!(n * n);
    let x = base;
    let x2 = base + nn;
    let x3 = base + 2 * nn;
    let x6 = base + 3 * nn;
    let b0 = base + 4 * nn;
    let b1 = base + 5 * nn;
    let b2 = base + 6 * nn;
    let b3 = base + 7 * nn;
    let b4 = base + 8 * nn;
    let p = base + 9 * nn;
    matmul(work, x, x, x2, sa, sb, false, n, tk, units);
    matmul(work, x2, x, x3, sa, sb, false, n, tk, units);
    if degree == 12 {
        // B_i = sum_j c_ij [I, X, X^2, X^3]_j
        for i in 0..4usize {
            let r = i * 4;
            let zero = f32::new(0.0);
            combine(
                work,
                b0 + i * nn,
                coef[r],
                x,
                coef[r + 1],
                x2,
                coef[r + 2],
                x3,
                coef[r + 3],
                x,
                zero,
                x,
                zero,
                n,
                units,
            );
        }
        let one = f32::new(1.0);
        let zero = f32::new(0.0);
        matmul(work, b3, b3, x6, sa, sb, false, n, tk, units);
        // A6 = B2 + B3^2, L = B1 + A6, T = B0 + L A6
        combine(
            work, b2, zero, b2, one, x6, one, x, zero, x, zero, x, zero, n, units,
        );
        combine(
            work, b1, zero, b1, one, b2, one, x, zero, x, zero, x, zero, n, units,
        );
        matmul(work, b1, b2, x6, sa, sb, false, n, tk, units);
        combine(
            work, b0, zero, b0, one, x6, one, x, zero, x, zero, x, zero, n, units,
        );
        b0
    } else {
        matmul(work, x3, x3, x6, sa, sb, false, n, tk, units);
        // B_i = sum_j c_ij [I, X, X^2, X^3, X^6]_j
        for i in 0..5usize {
            let r = comptime!(BBC18_OFFSET) + i * 5;
            let zero = f32::new(0.0);
            combine(
                work,
                b0 + i * nn,
                coef[r],
                x,
                coef[r + 1],
                x2,
                coef[r + 2],
                x3,
                coef[r + 3],
                x6,
                coef[r + 4],
                x,
                zero,
                n,
                units,
            );
        }
        let one = f32::new(1.0);
        let zero = f32::new(0.0);
        // A9 = B3 + B0 B4, L = B2 + A9, T = B1 + L A9
        matmul(work, b0, b4, p, sa, sb, false, n, tk, units);
        combine(
            work, b3, zero, b3, one, p, one, x, zero, x, zero, x, zero, n, units,
        );
        combine(
            work, b2, zero, b2, one, b3, one, x, zero, x, zero, x, zero, n, units,
        );
        matmul(work, b2, b3, p, sa, sb, false, n, tk, units);
        combine(
            work, b1, zero, b1, one, p, one, x, zero, x, zero, x, zero, n, units,
        );
        b1
    }
}

/// Padé [m/m], m in {3, 5, 7}, on the scaled X in slot 0; returns the slot of r_m(X).
#[cube]
fn pade_forward(
    work: &mut Array<f32>,
    coef: &Array<f32>,
    base: usize,
    degree: u32,
    sa: &mut SharedMemory<f32>,
    sb: &mut SharedMemory<f32>,
    fac: &mut SharedMemory<f32>,
    mag: &mut SharedMemory<f32>,
    arg: &mut SharedMemory<f32>,
    #[comptime] n: usize,
    #[comptime] tk: usize,
    #[comptime] units: usize,
) -> usize {
    let nn = comptime!(n * n);
    let x = base;
    let x2 = base + nn;
    let x4 = base + 2 * nn;
    let x6 = base + 3 * nn;
    let w = base + 4 * nn;
    let u = base + 5 * nn;
    let q = base + 6 * nn;
    let p = base + 7 * nn;
    matmul(work, x, x, x2, sa, sb, false, n, tk, units);
    if degree >= 5 {
        matmul(work, x2, x2, x4, sa, sb, false, n, tk, units);
    }
    if degree >= 7 {
        matmul(work, x4, x2, x6, sa, sb, false, n, tk, units);
    }
    // Rows hold zeros above the degree; their slots point at X so that nothing unset is read.
    let mut o4 = x;
    if degree >= 5 {
        o4 = x4;
    }
    let mut o6 = x;
    if degree >= 7 {
        o6 = x6;
    }
    let r = ((degree - 3) / 2) as usize * comptime!(PADE_ROW);
    let zero = f32::new(0.0);
    let one = f32::new(1.0);
    // U = X (b1 I + b3 X^2 + b5 X^4 + b7 X^6), V = b0 I + b2 X^2 + b4 X^4 + b6 X^6
    combine(
        work,
        w,
        coef[r + 1],
        x2,
        coef[r + 3],
        o4,
        coef[r + 5],
        o6,
        coef[r + 7],
        x,
        zero,
        x,
        zero,
        n,
        units,
    );
    matmul(work, x, w, u, sa, sb, false, n, tk, units);
    combine(
        work,
        q,
        coef[r],
        x2,
        coef[r + 2],
        o4,
        coef[r + 4],
        o6,
        coef[r + 6],
        u,
        -one,
        x,
        zero,
        n,
        units,
    );
    combine(
        work,
        p,
        coef[r],
        x2,
        coef[r + 2],
        o4,
        coef[r + 4],
        o6,
        coef[r + 6],
        u,
        one,
        x,
        zero,
        n,
        units,
    );
    gauss_jordan(work, q, p, fac, mag, arg, n, units);
    p
}

/// exp(A) for a batch [count, n, n]: Padé (`taylor = false`) or Taylor, with the plan's degree
/// and squarings per matrix.
#[cube(launch)]
pub(crate) fn expm_kernel(
    a: &Tensor<f32>,
    plan: &Array<f32>,
    coef: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    #[comptime] n: usize,
    #[comptime] tk: usize,
    #[comptime] units: usize,
    #[comptime] taylor: bool,
) {
    let nn = comptime!(n * n);
    let count = a.len() / nn;
    let base = CUBE_POS * comptime!(FORWARD_SLOTS * n * n);
    let spare = base + comptime!((FORWARD_SLOTS - 1) * n * n);
    let mut sa = SharedMemory::<f32>::new(comptime!(n * tk));
    let mut sb = SharedMemory::<f32>::new(comptime!(n * tk));
    let mut fac = SharedMemory::<f32>::new(n);
    let mut mag = SharedMemory::<f32>::new(units);
    let mut arg = SharedMemory::<f32>::new(units);
    let mut mat = CUBE_POS;
    while mat < count {
        let at = mat * comptime!(PLAN_STRIDE);
        let scale = plan[at];
        let squarings = u32::cast_from(plan[at + 1]);
        let degree = u32::cast_from(plan[at + 2]);
        if plan[at + 3] > f32::new(0.5) {
            load_scaled(a, mat * nn, work, base, scale, false, n, units);
            let mut cur = if comptime!(taylor) {
                taylor_forward(work, coef, base, degree, &mut sa, &mut sb, n, tk, units)
            } else {
                pade_forward(
                    work, coef, base, degree, &mut sa, &mut sb, &mut fac, &mut mag, &mut arg, n,
                    tk, units,
                )
            };
            let mut other = spare;
            for _step in 0..squarings {
                matmul(work, cur, cur, other, &mut sa, &mut sb, false, n, tk, units);
                let t = cur;
                cur = other;
                other = t;
            }
            store(work, cur, out, mat * nn, n, units);
        } else {
            fill(out, mat * nn, scale, n, units);
        }
        mat += CUBE_COUNT;
    }
}

/// The Fréchet derivative L(A^T, G) of exp, which is the adjoint of A for the upstream
/// gradient G: forward mode through the degree-18 Taylor scheme and the squarings at
/// X = 2^-s A^T, E = 2^-s G (the plan's s comes from ||A^T||_1).
#[cube(launch)]
pub(crate) fn frechet_kernel(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    plan: &Array<f32>,
    coef: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    #[comptime] n: usize,
    #[comptime] tk: usize,
    #[comptime] units: usize,
) {
    let nn = comptime!(n * n);
    let count = a.len() / nn;
    let base = CUBE_POS * comptime!(FRECHET_SLOTS * n * n);
    let x = base;
    let e = base + nn;
    let x2 = base + 2 * nn;
    let dx2 = base + 3 * nn;
    let x3 = base + 4 * nn;
    let dx3 = base + 5 * nn;
    let x6 = base + 6 * nn;
    let dx6 = base + 7 * nn;
    let s8 = base + 8 * nn;
    let s9 = base + 9 * nn;
    let s10 = base + 10 * nn;
    let s11 = base + 11 * nn;
    let s12 = base + 12 * nn;
    let s13 = base + 13 * nn;
    let mut sa = SharedMemory::<f32>::new(comptime!(n * tk));
    let mut sb = SharedMemory::<f32>::new(comptime!(n * tk));
    let zero = f32::new(0.0);
    let one = f32::new(1.0);
    let mut mat = CUBE_POS;
    while mat < count {
        let at = mat * comptime!(PLAN_STRIDE);
        let scale = plan[at];
        let squarings = u32::cast_from(plan[at + 1]);
        if plan[at + 3] > f32::new(0.5) {
            load_scaled(a, mat * nn, work, x, scale, true, n, units);
            load_scaled(g, mat * nn, work, e, scale, false, n, units);
            // Powers and their derivatives: d(PQ) = dP Q + P dQ.
            matmul(work, x, x, x2, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, e, x, dx2, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, x, e, dx2, &mut sa, &mut sb, true, n, tk, units);
            matmul(work, x2, x, x3, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, dx2, x, dx3, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, x2, e, dx3, &mut sa, &mut sb, true, n, tk, units);
            matmul(work, x3, x3, x6, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, dx3, x3, dx6, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, x3, dx3, dx6, &mut sa, &mut sb, true, n, tk, units);
            // B_0, B_4 and their derivatives (rows 0 and 4 of the degree-18 table).
            let r0 = comptime!(BBC18_OFFSET);
            let r4 = comptime!(BBC18_OFFSET + 20);
            combine(
                work,
                s8,
                coef[r0],
                x,
                coef[r0 + 1],
                x2,
                coef[r0 + 2],
                x3,
                coef[r0 + 3],
                x6,
                coef[r0 + 4],
                x,
                zero,
                n,
                units,
            );
            combine(
                work,
                s9,
                coef[r4],
                x,
                coef[r4 + 1],
                x2,
                coef[r4 + 2],
                x3,
                coef[r4 + 3],
                x6,
                coef[r4 + 4],
                x,
                zero,
                n,
                units,
            );
            combine(
                work,
                s10,
                zero,
                e,
                coef[r0 + 1],
                dx2,
                coef[r0 + 2],
                dx3,
                coef[r0 + 3],
                dx6,
                coef[r0 + 4],
                x,
                zero,
                n,
                units,
            );
            combine(
                work,
                s11,
                zero,
                e,
                coef[r4 + 1],
                dx2,
                coef[r4 + 2],
                dx3,
                coef[r4 + 3],
                dx6,
                coef[r4 + 4],
                x,
                zero,
                n,
                units,
            );
            // P1 = B0 B4 and dP1.
            matmul(work, s8, s9, s12, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, s10, s9, s13, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, s8, s11, s13, &mut sa, &mut sb, true, n, tk, units);
            // A9 = B3 + P1 (slot 8), dA9 (slot 9).
            let r3 = comptime!(BBC18_OFFSET + 15);
            combine(
                work,
                s8,
                coef[r3],
                x,
                coef[r3 + 1],
                x2,
                coef[r3 + 2],
                x3,
                coef[r3 + 3],
                x6,
                coef[r3 + 4],
                s12,
                one,
                n,
                units,
            );
            combine(
                work,
                s9,
                zero,
                e,
                coef[r3 + 1],
                dx2,
                coef[r3 + 2],
                dx3,
                coef[r3 + 3],
                dx6,
                coef[r3 + 4],
                s13,
                one,
                n,
                units,
            );
            // L = B2 + A9 (slot 10), dL (slot 11).
            let r2 = comptime!(BBC18_OFFSET + 10);
            combine(
                work,
                s10,
                coef[r2],
                x,
                coef[r2 + 1],
                x2,
                coef[r2 + 2],
                x3,
                coef[r2 + 3],
                x6,
                coef[r2 + 4],
                s8,
                one,
                n,
                units,
            );
            combine(
                work,
                s11,
                zero,
                e,
                coef[r2 + 1],
                dx2,
                coef[r2 + 2],
                dx3,
                coef[r2 + 3],
                dx6,
                coef[r2 + 4],
                s9,
                one,
                n,
                units,
            );
            // P2 = L A9 and dP2.
            matmul(work, s10, s8, s12, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, s11, s8, s13, &mut sa, &mut sb, false, n, tk, units);
            matmul(work, s10, s9, s13, &mut sa, &mut sb, true, n, tk, units);
            // T = B1 + P2 (slot 8), dT (slot 9).
            let r1 = comptime!(BBC18_OFFSET + 5);
            combine(
                work,
                s8,
                coef[r1],
                x,
                coef[r1 + 1],
                x2,
                coef[r1 + 2],
                x3,
                coef[r1 + 3],
                x6,
                coef[r1 + 4],
                s12,
                one,
                n,
                units,
            );
            combine(
                work,
                s9,
                zero,
                e,
                coef[r1 + 1],
                dx2,
                coef[r1 + 2],
                dx3,
                coef[r1 + 3],
                dx6,
                coef[r1 + 4],
                s13,
                one,
                n,
                units,
            );
            // Squarings: (T, dT) -> (T^2, dT T + T dT).
            let mut t = s8;
            let mut dt = s9;
            let mut nt = s10;
            let mut ndt = s11;
            for _step in 0..squarings {
                matmul(work, t, t, nt, &mut sa, &mut sb, false, n, tk, units);
                matmul(work, dt, t, ndt, &mut sa, &mut sb, false, n, tk, units);
                matmul(work, t, dt, ndt, &mut sa, &mut sb, true, n, tk, units);
                let t0 = t;
                t = nt;
                nt = t0;
                let d0 = dt;
                dt = ndt;
                ndt = d0;
            }
            store(work, dt, out, mat * nn, n, units);
        } else {
            fill(out, mat * nn, scale, n, units);
        }
        mat += CUBE_COUNT;
    }
}
