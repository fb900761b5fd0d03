//! Slot products and linear combinations: 4 x 4 register tiles, and the four-floats-wide forms that CUDA runs on resident slots.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::plan::{F4, barrier};
#[allow(unused_imports)]
use super::*;

/// work[dst] = eye I + sum of five coefficient-weighted slots (a slot may be `dst` itself:
/// every unit reads and writes the same entries).
#[cube]
pub(crate) fn combine(
    work: &mut Slice<f32, ReadWrite>,
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
    n: usize,
    #[comptime] staged: bool,
) {
    // Padding terms (coefficient 0, on the always finite slot 0) are skipped: the
    // coefficients are the same for the whole cube, so the branches are uniform, and each
    // skipped term saves a read of n^2 entries. The entry's row and column advance by
    // additions: a division by the run-time n per entry cost more than the sum.
    let units = CUBE_DIM as usize;
    let (row_step, col_step) = (units / n, units % n);
    let mut e = UNIT_POS as usize;
    let mut i = e / n;
    let mut j = e % n;
    while e < n * n {
        let mut v = f32::new(0.0);
        if c1 != f32::new(0.0) {
            v += c1 * work[o1 + e];
        }
        if c2 != f32::new(0.0) {
            v += c2 * work[o2 + e];
        }
        if c3 != f32::new(0.0) {
            v += c3 * work[o3 + e];
        }
        if c4 != f32::new(0.0) {
            v += c4 * work[o4 + e];
        }
        if c5 != f32::new(0.0) {
            v += c5 * work[o5 + e];
        }
        if i == j {
            v += eye;
        }
        work[dst + e] = v;
        e += units;
        i += row_step;
        j += col_step;
        if j >= n {
            j -= n;
            i += 1;
        }
    }
    barrier(staged);
}

/// work[c] = work[a] work[b], or += when `accumulate` is 1; `c` must differ from `a` and `b`.
///
/// 4 x 4 outputs per unit (rows i0..i0+4, columns j0, j0 + nt, .. j0 + 3 nt with nt = n/4
/// rounded up: neighbouring units read neighbouring columns of B, which shared memory serves
/// without bank conflicts), several rounds when the matrix has more tiles than the cube has
/// units. With `staged` (slots in device memory) the k-loop is split into `tk`-wide slabs
/// of A's columns and B's rows copied to shared memory (n tk floats each); slots that already
/// lie in shared memory are read in place, with no copy and no barrier inside the product.
#[cube]
pub(crate) fn matmul(
    work: &mut Slice<f32, ReadWrite>,
    a: usize,
    b: usize,
    c: usize,
    accumulate: u32,
    sa: &mut SharedMemory<f32>,
    sb: &mut SharedMemory<f32>,
    n: usize,
    tk: usize,
    #[comptime] staged: bool,
) {
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let nt = n.div_ceil(4);
    let tiles = nt * nt;
    let rounds = tiles.div_ceil(units);
    for round in 0..rounds {
        let tile = round * units + tid;
        let active = tile < tiles;
        let i0 = (tile / nt) * 4;
        let j0 = tile % nt;
        let mut acc = Array::<f32>::new(16usize);
        #[unroll]
        for r in 0..16usize {
            acc[r] = f32::new(0.0);
        }
        if comptime!(staged) {
            let slabs = n.div_ceil(tk);
            for slab in 0..slabs {
                let k0 = slab * tk;
                let mut e = tid;
                while e < n * tk {
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
                    for kk in 0..tk {
                        let mut av = Array::<f32>::new(4usize);
                        let mut bv = Array::<f32>::new(4usize);
                        #[unroll]
                        for r in 0..4usize {
                            let row = min(i0 + r, n - 1);
                            av[r] = sa[row * tk + kk];
                            let col = min(j0 + r * nt, n - 1);
                            bv[r] = sb[kk * n + col];
                        }
                        fma_tile(&mut acc, &av, &bv);
                    }
                }
                sync_cube();
            }
        } else if active {
            // Row starts of A and columns of B, clamped at the edge (those outputs are dropped).
            let mut ra = Array::<usize>::new(4usize);
            let mut cb = Array::<usize>::new(4usize);
            #[unroll]
            for r in 0..4usize {
                ra[r] = a + min(i0 + r, n - 1) * n;
                cb[r] = b + min(j0 + r * nt, n - 1);
            }
            // Four k at a time: the 32 reads are issued before the 64 multiply-adds that need
            // them, so a cube's few warps (one or two cubes fill a multiprocessor's shared
            // memory) wait once per four k instead of once per k.
            let mut k = 0usize;
            while k + 4 <= n {
                let mut av = Array::<f32>::new(16usize);
                let mut bv = Array::<f32>::new(16usize);
                #[unroll]
                for u in 0..4usize {
                    let kn = (k + u) * n;
                    #[unroll]
                    for r in 0..4usize {
                        av[u * 4 + r] = work[ra[r] + k + u];
                        bv[u * 4 + r] = work[cb[r] + kn];
                    }
                }
                #[unroll]
                for u in 0..4usize {
                    #[unroll]
                    for r in 0..4usize {
                        #[unroll]
                        for q in 0..4usize {
                            acc[r * 4 + q] += av[u * 4 + r] * bv[u * 4 + q];
                        }
                    }
                }
                k += 4;
            }
            while k < n {
                let mut av = Array::<f32>::new(4usize);
                let mut bv = Array::<f32>::new(4usize);
                let kn = k * n;
                #[unroll]
                for r in 0..4usize {
                    av[r] = work[ra[r] + k];
                    bv[r] = work[cb[r] + kn];
                }
                fma_tile(&mut acc, &av, &bv);
                k += 1;
            }
        }
        if active {
            #[unroll]
            for r in 0..4usize {
                #[unroll]
                for q in 0..4usize {
                    let i = i0 + r;
                    let j = j0 + q * nt;
                    if i < n && j < n {
                        let at = c + i * n + j;
                        if accumulate == 1u32 {
                            // (`+=` does not expand on a slice index.)
                            work[at] = work[at] + acc[r * 4 + q];
                        } else {
                            work[at] = acc[r * 4 + q];
                        }
                    }
                }
            }
        }
    }
    barrier(staged);
}

/// Reads the four vectors of rows `rows[r]` at vector column `k4` (A's 4 x 4 block at k = 4 k4).
#[cube]
pub(crate) fn read_rows(
    wv: &Slice<F4, ReadWrite>,
    rows: &Array<usize>,
    k4: usize,
    out: &mut Array<F4>,
) {
    #[unroll]
    for r in 0..4usize {
        out[r] = wv[rows[r] + k4];
    }
}

/// Reads the four vectors of rows 4 k4 .. 4 k4 + 4 at vector column `col` (B's 4 x 4 block).
#[cube]
pub(crate) fn read_block(
    wv: &Slice<F4, ReadWrite>,
    col: usize,
    k4: usize,
    n4: usize,
    out: &mut Array<F4>,
) {
    let first = col + 4 * k4 * n4;
    #[unroll]
    for u in 0..4usize {
        out[u] = wv[first + u * n4];
    }
}

/// acc (4 x 4, row-major) += a b for 4 x 4 blocks a (rows) and b (rows), as vectors.
#[cube]
pub(crate) fn fma_block(acc: &mut Array<f32>, a: &Array<F4>, b: &Array<F4>) {
    #[unroll]
    for u in 0..4usize {
        let bu = b[u];
        #[unroll]
        for r in 0..4usize {
            let ar = a[r];
            let x = ar[u];
            #[unroll]
            for q in 0..4usize {
                acc[r * 4 + q] += x * bu[q];
            }
        }
    }
}

/// Writes the 4 x 4 tile `acc` at vector index `at` (row stride n4), or adds it when
/// `accumulate` is 1.
// `x = x + y` on vectors, the form that ran on CUDA (compound assignment on a CubeCL vector was
// not run there).
#[allow(clippy::assign_op_pattern)]
#[cube]
pub(crate) fn write_tile(
    wv: &mut Slice<F4, ReadWrite>,
    acc: &Array<f32>,
    at: usize,
    n4: usize,
    accumulate: u32,
) {
    #[unroll]
    for r in 0..4usize {
        let mut out = F4::empty();
        #[unroll]
        for q in 0..4usize {
            out[q] = acc[r * 4 + q];
        }
        let to = at + r * n4;
        if accumulate == 1u32 {
            out = out + wv[to];
        }
        wv[to] = out;
    }
}

/// The resident product read and written four floats at a time (`wide`: n a multiple of 4 and
/// a backend that reinterprets shared memory as vectors, CUDA): work[c] = work[a] work[b], or
/// += when `accumulate` is 1; `c` must differ from `a` and `b`.
///
/// Each unit holds the 4 x 4 tile of rows i0..i0+4 and the contiguous columns 4 jc..4 jc+4. Per
/// four k it reads four vectors of A (a row each) and four of B (a k each) for 64
/// multiply-adds: a quarter of the scalar product's reads and of their address arithmetic,
/// which took most of its instructions (`docs/expm.md`, "GPU benchmark"). The reads of the
/// next four k are issued before the multiply-adds of the current ones (two register sets),
/// since the one or two cubes that fill a multiprocessor have too few warps to hide them.
#[cube]
pub(crate) fn matmul_wide(
    work: &mut Slice<f32, ReadWrite>,
    a: usize,
    b: usize,
    c: usize,
    accumulate: u32,
    n: usize,
) {
    let mut wv = work.into_vectorized().with_vector_size::<Const<4>>();
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let n4 = n / 4;
    let tiles = n4 * n4;
    let rounds = tiles.div_ceil(units);
    // Slots start at multiples of 4 floats: n is a multiple of 4, so n^2 of 16.
    let (a4, b4, c4) = (a / 4, b / 4, c / 4);
    for round in 0..rounds {
        let tile = round * units + tid;
        if tile < tiles {
            let i0 = (tile / n4) * 4;
            let jc = tile % n4;
            let mut acc = Array::<f32>::new(16usize);
            #[unroll]
            for r in 0..16usize {
                acc[r] = f32::new(0.0);
            }
            let mut ra = Array::<usize>::new(4usize);
            #[unroll]
            for r in 0..4usize {
                ra[r] = a4 + (i0 + r) * n4;
            }
            let col = b4 + jc;
            let mut a0 = Array::<F4>::new(4usize);
            let mut b0 = Array::<F4>::new(4usize);
            let mut a1 = Array::<F4>::new(4usize);
            let mut b1 = Array::<F4>::new(4usize);
            read_rows(&wv, &ra, 0, &mut a0);
            read_block(&wv, col, 0, n4, &mut b0);
            let mut k4 = 0usize;
            while k4 + 2 <= n4 {
                read_rows(&wv, &ra, k4 + 1, &mut a1);
                read_block(&wv, col, k4 + 1, n4, &mut b1);
                fma_block(&mut acc, &a0, &b0);
                // The last pair reads block n4 - 1 again (in bounds, unused: a sixteenth of the
                // reads at n = 64).
                let next = min(k4 + 2, n4 - 1);
                read_rows(&wv, &ra, next, &mut a0);
                read_block(&wv, col, next, n4, &mut b0);
                fma_block(&mut acc, &a1, &b1);
                k4 += 2;
            }
            if k4 < n4 {
                fma_block(&mut acc, &a0, &b0);
            }
            write_tile(&mut wv, &acc, c4 + i0 * n4 + jc, n4, accumulate);
        }
    }
    barrier(false);
}

/// A product and its tangent read four floats at a time (`wide`, as [`matmul_wide`]):
/// work[o] = work[p] work[q] and work[d] = work[dp] work[q] + work[p] work[dq]. `o` and `d`
/// differ from each other and from the operands.
///
/// Each operand vector is read once for both results (16 reads per four k where three
/// separate products take 24), and the cube meets one barrier where it met three.
#[cube]
pub(crate) fn matmul_tangent_wide(
    work: &mut Slice<f32, ReadWrite>,
    p: usize,
    q: usize,
    dp: usize,
    dq: usize,
    o: usize,
    d: usize,
    n: usize,
) {
    let mut wv = work.into_vectorized().with_vector_size::<Const<4>>();
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let n4 = n / 4;
    let tiles = n4 * n4;
    let rounds = tiles.div_ceil(units);
    for round in 0..rounds {
        let tile = round * units + tid;
        if tile < tiles {
            let i0 = (tile / n4) * 4;
            let jc = tile % n4;
            let mut acc = Array::<f32>::new(16usize);
            let mut dacc = Array::<f32>::new(16usize);
            #[unroll]
            for r in 0..16usize {
                acc[r] = f32::new(0.0);
                dacc[r] = f32::new(0.0);
            }
            let mut rp = Array::<usize>::new(4usize);
            let mut rdp = Array::<usize>::new(4usize);
            #[unroll]
            for r in 0..4usize {
                let row = (i0 + r) * n4;
                rp[r] = p / 4 + row;
                rdp[r] = dp / 4 + row;
            }
            let (cq, cdq) = (q / 4 + jc, dq / 4 + jc);
            let mut p0 = Array::<F4>::new(4usize);
            let mut dp0 = Array::<F4>::new(4usize);
            let mut q0 = Array::<F4>::new(4usize);
            let mut dq0 = Array::<F4>::new(4usize);
            let mut p1 = Array::<F4>::new(4usize);
            let mut dp1 = Array::<F4>::new(4usize);
            let mut q1 = Array::<F4>::new(4usize);
            let mut dq1 = Array::<F4>::new(4usize);
            read_rows(&wv, &rp, 0, &mut p0);
            read_rows(&wv, &rdp, 0, &mut dp0);
            read_block(&wv, cq, 0, n4, &mut q0);
            read_block(&wv, cdq, 0, n4, &mut dq0);
            let mut k4 = 0usize;
            while k4 + 2 <= n4 {
                read_rows(&wv, &rp, k4 + 1, &mut p1);
                read_rows(&wv, &rdp, k4 + 1, &mut dp1);
                read_block(&wv, cq, k4 + 1, n4, &mut q1);
                read_block(&wv, cdq, k4 + 1, n4, &mut dq1);
                fma_block(&mut acc, &p0, &q0);
                fma_block(&mut dacc, &dp0, &q0);
                fma_block(&mut dacc, &p0, &dq0);
                let next = min(k4 + 2, n4 - 1);
                read_rows(&wv, &rp, next, &mut p0);
                read_rows(&wv, &rdp, next, &mut dp0);
                read_block(&wv, cq, next, n4, &mut q0);
                read_block(&wv, cdq, next, n4, &mut dq0);
                fma_block(&mut acc, &p1, &q1);
                fma_block(&mut dacc, &dp1, &q1);
                fma_block(&mut dacc, &p1, &dq1);
                k4 += 2;
            }
            if k4 < n4 {
                fma_block(&mut acc, &p0, &q0);
                fma_block(&mut dacc, &dp0, &q0);
                fma_block(&mut dacc, &p0, &dq0);
            }
            let at = i0 * n4 + jc;
            write_tile(&mut wv, &acc, o / 4 + at, n4, u32::new(0));
            write_tile(&mut wv, &dacc, d / 4 + at, n4, u32::new(0));
        }
    }
    barrier(false);
}

/// [`combine`] four floats at a time (`wide`, as [`matmul_wide`]): a unit's coefficient tests,
/// reads and index arithmetic serve four entries.
// `x = x + y` on vectors, the form that ran on CUDA (compound assignment on a CubeCL vector was
// not run there).
#[allow(clippy::assign_op_pattern)]
#[cube]
pub(crate) fn combine_wide(
    work: &mut Slice<f32, ReadWrite>,
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
    n: usize,
) {
    let mut wv = work.into_vectorized().with_vector_size::<Const<4>>();
    let units = CUBE_DIM as usize;
    let n4 = n / 4;
    let (row_step, col_step) = (units / n4, units % n4);
    let mut e = UNIT_POS as usize;
    // Row i of vector e, and the first column 4 j of it.
    let mut i = e / n4;
    let mut j = e % n4;
    let (d, s1, s2, s3, s4, s5) = (dst / 4, o1 / 4, o2 / 4, o3 / 4, o4 / 4, o5 / 4);
    while e < n * n4 {
        let mut v = F4::new(f32::new(0.0));
        if c1 != f32::new(0.0) {
            v = v + F4::new(c1) * wv[s1 + e];
        }
        if c2 != f32::new(0.0) {
            v = v + F4::new(c2) * wv[s2 + e];
        }
        if c3 != f32::new(0.0) {
            v = v + F4::new(c3) * wv[s3 + e];
        }
        if c4 != f32::new(0.0) {
            v = v + F4::new(c4) * wv[s4 + e];
        }
        if c5 != f32::new(0.0) {
            v = v + F4::new(c5) * wv[s5 + e];
        }
        if j == i / 4 {
            #[unroll]
            for q in 0..4usize {
                if j * 4 + q == i {
                    v[q] = v[q] + eye;
                }
            }
        }
        wv[d + e] = v;
        e += units;
        i += row_step;
        j += col_step;
        if j >= n4 {
            j -= n4;
            i += 1;
        }
    }
    barrier(false);
}

/// acc (4 x 4, row-major) += av bv^T.
#[cube]
pub(crate) fn fma_tile(acc: &mut Array<f32>, av: &Array<f32>, bv: &Array<f32>) {
    #[unroll]
    for r in 0..4usize {
        #[unroll]
        for q in 0..4usize {
            acc[r * 4 + q] += av[r] * bv[q];
        }
    }
}
