//! CubeCL kernels of the explicit exponential: one cube per matrix, persistent over the batch.
//!
//! The kernels are small interpreters. The host compiles each scheme of `expm::scheme` into a
//! slot program ([`super::program`]): products, linear combinations and a solve over n x n slots
//! of the cube's workspace. [`expm_kernel`] and [`frechet_kernel`] load a matrix, pick its
//! degree and squarings from its 1-norm, then run that degree's program and the squarings.
//! Matrix size, degree and k-slab width are run-time values: a shader is compiled per
//! workgroup size (32 to 256 units, by n), per power of two of n above 64 and, where the slots
//! are resident, per power of two of n^2 and (on CUDA) whether n is a multiple of 4, not per n
//! and degree (a per-size shader took seconds
//! to compile on software Vulkan, and each inlined product multiplied the shader's size).
//!
//! The slots live in shared memory where the device has room for all of them (resident), else
//! in the cube's part of a device-memory workspace, whose products stage k-slabs of their
//! operands in shared memory. Every unit accumulates a 4 x 4 tile of a product in registers; on
//! CUDA, resident slots are read and written four floats at a time (`wide`). A product or
//! combination writes slots that other units of the cube read next, so each ends with a barrier
//! (`sync_cube`, and `sync_storage` where the slots lie in device memory). Loops and
//! branches that contain barriers depend only on values that are the same for the whole cube
//! (the program, and the plan at the cube's own matrix), so the barriers sit in uniform control
//! flow.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::program::{
    ENTRY, HEADER, KIND_COMBINE, KIND_LOAD, KIND_MUL, KIND_SOLVE, KIND_STORE, KIND_TANGENT,
    PLAN_HEADER, ROW, SAVED,
};
use super::taylor::{ROUTE_DENSE, ROUTE_STRIDE, is_kind};

/// Entries per matrix in the plan buffer: scale 2^-s (a NaN for a non-finite matrix), s,
/// degree, and 1 for a finite matrix or 0.
pub(crate) const PLAN_STRIDE: usize = 4;
/// Most units per cube (the size of the per-unit shared arrays).
pub(crate) const MAX_UNITS: usize = 256;
/// Widest k-slab of a product.
const MAX_TK: usize = 32;

/// The cube's writes become visible to its other units: its shared memory, and its slots in
/// device memory when they lie there (`staged`; resident slots need only the cube barrier).
#[cube]
fn barrier(#[comptime] staged: bool) {
    if comptime!(staged) {
        sync_storage();
    }
    sync_cube();
}

/// Four f32 read or written by one instruction (a 16-byte shared-memory access).
type F4 = Vector<f32, Const<4>>;

/// The plan of the matrix in slot 0 (A, or A^T in the derivatives), as `expm::plan::choose`
/// picks it from its 1-norm and the planning table `table` ([`PLAN_HEADER`] floats, then
/// (theta, degree) pairs, ascending): [2^-s (a NaN made from the data for a non-finite
/// matrix), s, degree, 1 for a finite matrix or 0], the same in every unit.
///
/// The column sums are formed in the slots after slot 0, which hold nothing yet (the tables
/// have at least three slots): where the cube has at least twice as many units as columns,
/// `groups` units share a column (each summing every groups-th entry, a quarter of the
/// dependent reads at n = 64 and 256 units) and the column's partial sums are added after a
/// barrier. Every unit then reads the n sums and decides the plan itself, which saves a barrier
/// and a broadcast. Non-finite matrices get the highest degree and no squaring, as on the CPU
/// paths: the output is NaN or Inf either way and s never depends on log2(inf). The caller must
/// meet a barrier before the slots after slot 0 are written again.
#[cube]
fn plan_here(
    work: &mut Slice<f32, ReadWrite>,
    table: &Array<f32>,
    n: usize,
    slots: usize,
    #[comptime] staged: bool,
) -> F4 {
    let nn = n * n;
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    // The partial sums and then the column sums fit in slots 1.. ((groups + 1) n floats).
    let groups = max(min(units / n, (slots - 1) * n - 1), 1);
    let mut p = tid;
    while p < groups * n {
        let g = p / n;
        let j = p % n;
        let mut s = f32::new(0.0);
        let mut i = g;
        while i < n {
            s += work[i * n + j].abs();
            i += groups;
        }
        work[nn + p] = s;
        p += units;
    }
    barrier(staged);
    let mut sums = nn;
    if groups > 1 {
        sums = nn + groups * n;
        let mut j = tid;
        while j < n {
            let mut s = f32::new(0.0);
            for g in 0..groups {
                s += work[nn + g * n + j];
            }
            work[sums + j] = s;
            j += units;
        }
        barrier(staged);
    }
    // Non-finite sums are recognised by their exponent bits: WGSL lets a compiler assume that
    // no NaN or Inf exists, so float comparisons and `is_nan` may be folded away. `nan` is a
    // quiet NaN made from data at run time (WGSL has no NaN literal).
    let mut norm = f32::new(0.0);
    let mut finite = f32::new(1.0);
    let mut nan = f32::new(0.0);
    for j in 0..n {
        let s = work[sums + j];
        let bits = u32::reinterpret(s);
        if (bits & 0x7f80_0000u32) == 0x7f80_0000u32 {
            finite = f32::new(0.0);
            nan = f32::reinterpret(bits | 0x0040_0000u32);
        } else {
            norm = max(norm, s);
        }
    }
    let degrees = u32::cast_from(table[0]) as usize;
    let max_s = table[1];
    let last = PLAN_HEADER + (degrees - 1) * 2;
    let theta_max = table[last];
    let mut degree = table[last + 1];
    let mut scale = f32::new(1.0);
    let mut s = f32::new(0.0);
    if finite > f32::new(0.5) {
        let mut found = u32::new(0);
        for k in 0..degrees {
            if found == 0u32 && norm <= table[PLAN_HEADER + 2 * k] {
                degree = table[PLAN_HEADER + 2 * k + 1];
                found = u32::new(1);
            }
        }
        if found == 0u32 {
            // s = ceil(log2(norm / theta)) by halving, capped where 2^-s stays normal.
            let mut t = norm / theta_max;
            while t > f32::new(1.0) && s < max_s {
                t *= f32::new(0.5);
                scale *= f32::new(0.5);
                s += f32::new(1.0);
            }
        }
    } else {
        // The interpreter fills such a matrix's output with this NaN.
        scale = nan;
    }
    let mut plan = F4::empty();
    plan[0] = scale;
    plan[1] = s;
    plan[2] = degree;
    plan[3] = finite;
    plan
}

/// work[e] *= scale over slot 0, each unit its own entries (no barrier: the caller meets one).
#[cube]
fn scale_in_place(work: &mut Slice<f32, ReadWrite>, scale: f32, n: usize) {
    let mut e = UNIT_POS as usize;
    while e < n * n {
        work[e] = work[e] * scale;
        e += CUBE_DIM as usize;
    }
}

/// Entries of `src` a unit reads before it writes them: each read waits on device memory, and
/// the one or two cubes on a multiprocessor would otherwise wait for each in turn.
const LOAD_DEPTH: usize = 8;

/// The visits of a transposed copy between a row-major matrix (in device memory) and its
/// transpose (in the slots): blocks of 8 rows x 4 columns of the row-major side, a block per 32
/// consecutive units (a warp). A warp then touches 8 runs of 16 bytes on the row-major side and
/// 8 banks of shared memory, 4 ways each, on the other. Visiting entry by entry made one side
/// 32 accesses apart: 32 lines of device memory per warp access, or (the transposed side in
/// shared memory at n = 64, where a column's entries share a bank) a 32-way bank conflict.
///
/// A unit keeps its place in the block (units come in multiples of 32) and steps through the
/// blocks by additions, as [`combine`] steps through entries.
#[derive(CubeType)]
struct TransposedWalk {
    n: usize,
    blocks: usize,
    per_row: usize,
    block: usize,
    /// The current block's first row and column (row-major side).
    row: usize,
    col: usize,
    step: usize,
    row_step: usize,
    col_step: usize,
    /// The unit's row and column within a block.
    dr: usize,
    dc: usize,
}

#[cube]
impl TransposedWalk {
    fn new(n: usize) -> TransposedWalk {
        let tid = UNIT_POS as usize;
        let per_row = n.div_ceil(4);
        let step = CUBE_DIM as usize / 32;
        let block = tid / 32;
        TransposedWalk {
            n,
            blocks: n.div_ceil(8) * per_row,
            per_row,
            block,
            row: (block / per_row) * 8,
            col: (block % per_row) * 4,
            step,
            row_step: (step / per_row) * 8,
            col_step: (step % per_row) * 4,
            dr: (tid % 32) / 4,
            dc: tid % 4,
        }
    }

    fn more(&self) -> bool {
        self.block < self.blocks
    }

    /// The unit's entry of the current block: (its index on the row-major side, its index on
    /// the transposed side), or n^2 for both where the block overhangs the matrix.
    fn here(&self) -> (usize, usize) {
        let n = self.n;
        let r = self.row + self.dr;
        let c = self.col + self.dc;
        let mut at = (n * n, n * n);
        if self.block < self.blocks && r < n && c < n {
            at = (r * n + c, c * n + r);
        }
        at
    }

    fn advance(&mut self) {
        self.block += self.step;
        self.row += self.row_step;
        self.col += self.col_step;
        if self.col >= self.per_row * 4 {
            self.col -= self.per_row * 4;
            self.row += 8;
        }
    }
}

/// work[dst..] = scale * src[offset..], or with `transpose` its transpose ([`TransposedWalk`]),
/// [`LOAD_DEPTH`] reads in flight per unit.
#[cube]
fn load_scaled(
    src: &Tensor<f32>,
    offset: usize,
    work: &mut Slice<f32, ReadWrite>,
    dst: usize,
    scale: f32,
    n: usize,
    #[comptime] transpose: bool,
    #[comptime] staged: bool,
) {
    let units = CUBE_DIM as usize;
    let nn = n * n;
    if comptime!(transpose) {
        let mut walk = TransposedWalk::new(n);
        while walk.more() {
            let mut v = Array::<f32>::new(LOAD_DEPTH);
            let mut to = Array::<usize>::new(LOAD_DEPTH);
            #[unroll]
            for u in 0..LOAD_DEPTH {
                let (from, at) = walk.here();
                to[u] = at;
                if at < nn {
                    v[u] = src[offset + from];
                }
                walk.advance();
            }
            #[unroll]
            for u in 0..LOAD_DEPTH {
                if to[u] < nn {
                    work[dst + to[u]] = v[u] * scale;
                }
            }
        }
    } else {
        let mut e = UNIT_POS as usize;
        while e + (LOAD_DEPTH - 1) * units < nn {
            let mut v = Array::<f32>::new(LOAD_DEPTH);
            #[unroll]
            for u in 0..LOAD_DEPTH {
                v[u] = src[offset + e + u * units];
            }
            #[unroll]
            for u in 0..LOAD_DEPTH {
                work[dst + e + u * units] = v[u] * scale;
            }
            e += LOAD_DEPTH * units;
        }
        while e < nn {
            work[dst + e] = src[offset + e] * scale;
            e += units;
        }
    }
    barrier(staged);
}

/// out[offset..] = work[src..], or with `transpose` its transpose ([`TransposedWalk`]) (`out`
/// an output tensor, or the checkpoint).
#[cube]
fn store<L: ListMut<f32>>(
    work: &Slice<f32, ReadWrite>,
    src: usize,
    out: &mut L,
    offset: usize,
    n: usize,
    #[comptime] transpose: bool,
    #[comptime] staged: bool,
) {
    let nn = n * n;
    if comptime!(transpose) {
        let mut walk = TransposedWalk::new(n);
        while walk.more() {
            let (to, from) = walk.here();
            if from < nn {
                out.write(offset + to, work[src + from]);
            }
            walk.advance();
        }
    } else {
        let mut e = UNIT_POS as usize;
        while e < nn {
            out.write(offset + e, work[src + e]);
            e += CUBE_DIM as usize;
        }
    }
    barrier(staged);
}

/// out[offset..offset + n^2] = value.
#[cube]
fn fill(out: &mut Tensor<f32>, offset: usize, value: f32, n: usize) {
    let mut e = UNIT_POS as usize;
    while e < n * n {
        out[offset + e] = value;
        e += CUBE_DIM as usize;
    }
}

/// work[dst] = eye I + sum of five coefficient-weighted slots (a slot may be `dst` itself:
/// every unit reads and writes the same entries).
#[cube]
fn combine(
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
fn matmul(
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
fn read_rows(wv: &Slice<F4, ReadWrite>, rows: &Array<usize>, k4: usize, out: &mut Array<F4>) {
    #[unroll]
    for r in 0..4usize {
        out[r] = wv[rows[r] + k4];
    }
}

/// Reads the four vectors of rows 4 k4 .. 4 k4 + 4 at vector column `col` (B's 4 x 4 block).
#[cube]
fn read_block(wv: &Slice<F4, ReadWrite>, col: usize, k4: usize, n4: usize, out: &mut Array<F4>) {
    let first = col + 4 * k4 * n4;
    #[unroll]
    for u in 0..4usize {
        out[u] = wv[first + u * n4];
    }
}

/// acc (4 x 4, row-major) += a b for 4 x 4 blocks a (rows) and b (rows), as vectors.
#[cube]
fn fma_block(acc: &mut Array<f32>, a: &Array<F4>, b: &Array<F4>) {
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
fn write_tile(
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
fn matmul_wide(
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
fn matmul_tangent_wide(
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
fn combine_wide(
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
fn fma_tile(acc: &mut Array<f32>, av: &Array<f32>, bv: &Array<f32>) {
    #[unroll]
    for r in 0..4usize {
        #[unroll]
        for q in 0..4usize {
            acc[r * 4 + q] += av[r] * bv[q];
        }
    }
}

/// Gauss-Jordan elimination with partial pivoting: work[p] <- work[q]^{-1} work[p].
///
/// `fac` holds the n multipliers of a step; `mag` and `arg` (one entry per unit) the pivot
/// search, a tree reduction over the cube (the first largest magnitude wins, as in a serial
/// scan). q_m(X) is well conditioned for ||X||_1 <= theta_m, but the pivoting stays (`expm.md`).
#[cube]
fn gauss_jordan(
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

/// What an interpreter run computes and where it writes (`out` per matrix).
pub(crate) const MODE_EXPM: u32 = 0;
/// L(A^T, G): the adjoint of A for the upstream gradient G.
pub(crate) const MODE_FRECHET: u32 = 1;
/// exp(A) v for the matrices that `expmv` routes to the explicit exponential: [n] per matrix.
pub(crate) const MODE_DENSE: u32 = 2;
/// Their adjoints: L(A^T, g v^T) then exp(A)^T g, [n * n + n] per matrix.
pub(crate) const MODE_DENSE_BACKWARD: u32 = 3;
/// exp(A) with Taylor into `out`, and the checkpoint of the derivative at the start of `work`
/// (the plans, then the saved values: [`checkpoint_len`] floats; slots in device memory
/// follow it).
pub(crate) const MODE_EXPM_SAVE: u32 = 4;
/// L(A^T, G) from a checkpoint of [`MODE_EXPM_SAVE`] (in `v`): L(A, G^T)^T by forward mode at
/// X = 2^-s A, E = 2^-s G^T with the forward's plan, the tangents alone over its saved values.
pub(crate) const MODE_FRECHET_SAVED: u32 = 5;

/// Floats of the checkpoint of `count` n x n matrices: their plans ([`PLAN_STRIDE`] floats
/// each, as [`plan_here`] returns them), then their saved values (the result's place is left
/// unwritten where the plan does not square: nothing reads it then).
pub(crate) fn checkpoint_len(count: usize, n: usize) -> usize {
    count * (PLAN_STRIDE + SAVED * n * n)
}

/// Where a checkpoint holds matrix `mat`'s saved value `k` (after the `count` plans; matrix
/// `count`'s first value would start at the checkpoint's end).
#[cube]
fn saved_value(count: usize, nn: usize, mat: usize, k: usize) -> usize {
    count * PLAN_STRIDE + (mat * SAVED + k) * nn
}

/// work[dst..] = scale * g v^T (row i of the outer product is g_i v^T).
#[cube]
fn load_outer(
    g: &Tensor<f32>,
    v: &Tensor<f32>,
    offset: usize,
    work: &mut Slice<f32, ReadWrite>,
    dst: usize,
    scale: f32,
    n: usize,
    #[comptime] staged: bool,
) {
    let mut e = UNIT_POS as usize;
    while e < n * n {
        work[dst + e] = scale * g[offset + e / n] * v[offset + e % n];
        e += CUBE_DIM as usize;
    }
    barrier(staged);
}

/// out[offset + i] = sum_k work[src + i n + k] x[at + k].
#[cube]
fn store_matvec(
    work: &Slice<f32, ReadWrite>,
    src: usize,
    x: &Tensor<f32>,
    at: usize,
    out: &mut Tensor<f32>,
    offset: usize,
    n: usize,
    #[comptime] staged: bool,
) {
    let mut i = UNIT_POS as usize;
    while i < n {
        let mut s = f32::new(0.0);
        for k in 0..n {
            s += work[src + i * n + k] * x[at + k];
        }
        out[offset + i] = s;
        i += CUBE_DIM as usize;
    }
    barrier(staged);
}

/// The interpreter shared by the kernels. Per matrix: load A (A^T for the Fréchet derivative)
/// and plan it ([`plan_here`] with the planning table `plan`; the derivative from a checkpoint
/// reads the forward's plan from `v` instead), scale it to X = 2^-s A (with E = 2^-s G in
/// slot 1 for the derivative), run the program of the plan's degree, then the squarings:
/// T -> T^2, and for the derivative also dT -> dT T + T dT, ping-ponging with the spare slots
/// that the program's header names.
///
/// `mode` says what is computed and stored ([`MODE_EXPM`] ...). In the `expmv` modes `v` and `u`
/// are the vectors v and g [N, n], only matrices whose route (`routes`) is dense are taken, and
/// the others are left to the Taylor kernels; otherwise `v`, `u` and `routes` are not read.
///
/// The kernels that call it are launched without bounds checks (which took a compare and a
/// select from every read of the product's inner loop), on these invariants: every matrix index
/// is below the batch, every slot below the table's count, shared arrays within their
/// compile-time sizes (`Layout`), the tables have at least three slots (the planning's column
/// sums), and the loops are bounded by n, the program and the plan's squarings.
///
/// `wide` is set only with resident slots (`resident` > 0) and n a multiple of 4 (`Layout`): the
/// wide kernels read shared memory as vectors and end with the cube barrier alone. Only the
/// Fréchet programs have tangent rows, only the checkpointing forward store rows and only the
/// derivative from a checkpoint load rows (`program` tests it); a checkpoint holds
/// [`checkpoint_len`] floats, and the checkpointing forward's `work` holds it before the slots.
// A compile-time condition (`comptime!`) does not join a run-time one with `&&`, so some `if`s
// nest where clippy would merge them.
#[allow(clippy::collapsible_if)]
#[cube]
fn run(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    v: &Tensor<f32>,
    u: &Tensor<f32>,
    routes: &Array<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
    #[comptime] mode: u32,
) {
    let frechet = comptime!(
        mode == MODE_FRECHET || mode == MODE_DENSE_BACKWARD || mode == MODE_FRECHET_SAVED
    );
    let vectors = comptime!(mode == MODE_DENSE || mode == MODE_DENSE_BACKWARD);
    let saving = comptime!(mode == MODE_EXPM_SAVE);
    let from_saved = comptime!(mode == MODE_FRECHET_SAVED);
    let n = n as usize;
    let nn = n * n;
    let count = a.len() / nn;
    let slots = slots as usize;
    // The cube's slots: in shared memory when they fit (`resident` floats), else its share of
    // the workspace in device memory, read by the products through k-slabs.
    let staged = comptime!(resident == 0);
    // 16-byte aligned for the wide kernels' vector reads.
    let mut shared_slots = if comptime!(wide) {
        SharedMemory::<f32>::new_aligned(comptime!(resident.max(1)), 16usize)
    } else {
        SharedMemory::<f32>::new(comptime!(resident.max(1)))
    };
    let mut slot_view = if comptime!(staged) {
        // The checkpointing forward keeps its checkpoint ahead of the slots.
        let mut base = CUBE_POS * slots * nn;
        if comptime!(saving) {
            base += saved_value(count, nn, count, 0);
        }
        work.slice_mut(base, base + slots * nn)
    } else {
        shared_slots.to_slice_mut()
    };
    let tk = min(slab / n, MAX_TK);
    let mut sa = SharedMemory::<f32>::new(comptime!(slab.max(1)));
    let mut sb = SharedMemory::<f32>::new(comptime!(slab.max(1)));
    // The solve's arrays, only where the program has a solve (`cap` > 0).
    let mut fac = SharedMemory::<f32>::new(comptime!(cap.max(1)));
    let mut mag = SharedMemory::<f32>::new(comptime!(if cap > 0 { MAX_UNITS } else { 1 }));
    let mut arg = SharedMemory::<f32>::new(comptime!(if cap > 0 { MAX_UNITS } else { 1 }));
    let one = f32::new(1.0);
    let mut mat = CUBE_POS;
    while mat < count {
        let at = mat * PLAN_STRIDE;
        let mut scale = f32::new(1.0);
        let mut squarings = 0usize;
        let mut degree = 0usize;
        let mut take = true;
        if comptime!(from_saved) {
            // The forward's plan, so that the derivative is that of the exponential the
            // forward computed.
            let plans = v.to_slice();
            scale = plans[at];
            squarings = u32::cast_from(plans[at + 1]) as usize;
            degree = u32::cast_from(plans[at + 2]) as usize;
            take = plans[at + 3] > f32::new(0.5);
        } else {
            if comptime!(vectors) {
                take = is_kind(routes[mat * ROUTE_STRIDE], ROUTE_DENSE);
            }
            // A (A^T in the derivatives) into slot 0 as it is, then the plan from its 1-norm,
            // then X = 2^-s A in place: the matrix is read from device memory once.
            if take {
                load_scaled(a, mat * nn, &mut slot_view, 0, one, n, frechet, staged);
                let p = plan_here(&mut slot_view, plan, n, slots, staged);
                scale = p[0];
                squarings = u32::cast_from(p[1]) as usize;
                degree = u32::cast_from(p[2]) as usize;
                let finite = p[3] > f32::new(0.5);
                if comptime!(saving) {
                    if UNIT_POS == 0 {
                        #[unroll]
                        for k in 0..PLAN_STRIDE {
                            work[at + k] = p[k];
                        }
                    }
                }
                if comptime!(!vectors) {
                    take = finite;
                }
                // A non-finite matrix that `expmv` routed here becomes NaN (its scale), as
                // its output would; the other modes fill such a matrix's output instead.
                let mut rescale = squarings > 0;
                if comptime!(vectors) {
                    rescale = rescale || !finite;
                }
                if rescale {
                    scale_in_place(&mut slot_view, scale, n);
                }
                barrier(staged);
            }
        }
        if take {
            if comptime!(mode == MODE_DENSE_BACKWARD) {
                load_outer(u, v, mat * n, &mut slot_view, nn, scale, n, staged);
            } else if comptime!(from_saved) {
                load_scaled(a, mat * nn, &mut slot_view, 0, scale, n, false, staged);
                load_scaled(g, mat * nn, &mut slot_view, nn, scale, n, true, staged);
            } else if comptime!(mode == MODE_FRECHET) {
                load_scaled(g, mat * nn, &mut slot_view, nn, scale, n, false, staged);
            }
            let entry = degree * ENTRY;
            let start = ops[entry] as usize;
            let len = ops[entry + 1] as usize;
            let mut t = ops[entry + 2] as usize;
            let mut dt = ops[entry + 3] as usize;
            let mut nt = ops[entry + 4] as usize;
            let mut ndt = ops[entry + 5] as usize;
            let total = len + squarings;
            for step in 0..total {
                // A squaring step unless the program says otherwise.
                let mut kind = u32::new(KIND_MUL as i64);
                let mut dst = nt;
                let mut s1 = t;
                let mut s2 = t;
                let mut s3 = s1;
                let mut s4 = s1;
                let mut s5 = s1;
                let mut flag = u32::new(0);
                let mut eye = f32::new(0.0);
                let mut c1 = f32::new(0.0);
                let mut c2 = f32::new(0.0);
                let mut c3 = f32::new(0.0);
                let mut c4 = f32::new(0.0);
                let mut c5 = f32::new(0.0);
                if step < len {
                    let row = start + step;
                    let o = HEADER + row * ROW;
                    kind = ops[o];
                    dst = ops[o + 1] as usize;
                    s1 = ops[o + 2] as usize;
                    s2 = ops[o + 3] as usize;
                    s3 = ops[o + 4] as usize;
                    s4 = ops[o + 5] as usize;
                    s5 = ops[o + 6] as usize;
                    flag = ops[o + 7];
                    let r = row * ROW;
                    eye = vals[r];
                    c1 = vals[r + 1];
                    c2 = vals[r + 2];
                    c3 = vals[r + 3];
                    c4 = vals[r + 4];
                    c5 = vals[r + 5];
                } else if comptime!(frechet) {
                    // T^2 and its tangent dT T + T dT.
                    kind = u32::new(KIND_TANGENT as i64);
                    s3 = dt;
                    s4 = dt;
                    s5 = ndt;
                }
                if kind == KIND_MUL || kind == KIND_TANGENT {
                    // The tangent kernel only in the recomputing derivative's shaders: its
                    // registers (175 per unit on CUDA) would otherwise be the forward's too and
                    // halve its cubes per multiprocessor. The derivative from a checkpoint has
                    // tangent steps only in its squarings, which take three products instead,
                    // so that its seven slots leave room for two cubes per multiprocessor.
                    if comptime!(wide && frechet && !from_saved) {
                        if kind == KIND_TANGENT {
                            matmul_tangent_wide(
                                &mut slot_view,
                                s1 * nn,
                                s2 * nn,
                                s3 * nn,
                                s4 * nn,
                                dst * nn,
                                s5 * nn,
                                n,
                            );
                        } else {
                            matmul_wide(&mut slot_view, s1 * nn, s2 * nn, dst * nn, flag, n);
                        }
                    } else if comptime!(wide && !frechet) {
                        // The forward's products: a call of its own, not a loop of one part
                        // (the shader it has been timed with).
                        matmul_wide(&mut slot_view, s1 * nn, s2 * nn, dst * nn, flag, n);
                    } else {
                        // A tangent step is three products: P Q, dP Q, then += P dQ (one call
                        // site: each inlined product adds to the shader).
                        let mut parts = 1usize;
                        if kind == KIND_TANGENT {
                            parts = 3usize;
                        }
                        for part in 0..parts {
                            let mut x = s1;
                            let mut y = s2;
                            let mut z = dst;
                            let mut accumulate = flag;
                            if part == 1 {
                                x = s3;
                                z = s5;
                            }
                            if part == 2 {
                                y = s4;
                                z = s5;
                                accumulate = u32::new(1);
                            }
                            if comptime!(wide) {
                                matmul_wide(&mut slot_view, x * nn, y * nn, z * nn, accumulate, n);
                            } else {
                                matmul(
                                    &mut slot_view,
                                    x * nn,
                                    y * nn,
                                    z * nn,
                                    accumulate,
                                    &mut sa,
                                    &mut sb,
                                    n,
                                    tk,
                                    staged,
                                );
                            }
                        }
                    }
                } else if kind == KIND_COMBINE {
                    if comptime!(wide) {
                        combine_wide(
                            &mut slot_view,
                            dst * nn,
                            eye,
                            s1 * nn,
                            c1,
                            s2 * nn,
                            c2,
                            s3 * nn,
                            c3,
                            s4 * nn,
                            c4,
                            s5 * nn,
                            c5,
                            n,
                        );
                    } else {
                        combine(
                            &mut slot_view,
                            dst * nn,
                            eye,
                            s1 * nn,
                            c1,
                            s2 * nn,
                            c2,
                            s3 * nn,
                            c3,
                            s4 * nn,
                            c4,
                            s5 * nn,
                            c5,
                            n,
                            staged,
                        );
                    }
                } else if kind == KIND_SOLVE {
                    let q = s1 * nn;
                    gauss_jordan(
                        &mut slot_view,
                        q,
                        dst * nn,
                        &mut fac,
                        &mut mag,
                        &mut arg,
                        n,
                        staged,
                    );
                } else if comptime!(saving) {
                    // The value in `dst` joins the checkpoint as number s1 (the result, flag 1,
                    // only where the derivative will square it).
                    if kind == KIND_STORE && (flag == 0u32 || squarings > 0) {
                        let to = saved_value(count, nn, mat, s1);
                        store::<Array<f32>>(&slot_view, dst * nn, work, to, n, false, staged);
                    }
                } else if comptime!(from_saved) {
                    // The forward's saved value number s1 into `dst` (as the store).
                    if kind == KIND_LOAD && (flag == 0u32 || squarings > 0) {
                        let from = saved_value(count, nn, mat, s1);
                        load_scaled(v, from, &mut slot_view, dst * nn, one, n, false, staged);
                    }
                }
                if step >= len {
                    let t0 = t;
                    t = nt;
                    nt = t0;
                    if comptime!(frechet) {
                        let d0 = dt;
                        dt = ndt;
                        ndt = d0;
                    }
                }
            }
            if comptime!(mode == MODE_EXPM || saving) {
                store::<Tensor<f32>>(&slot_view, t * nn, out, mat * nn, n, false, staged);
            } else if comptime!(mode == MODE_FRECHET) {
                store::<Tensor<f32>>(&slot_view, dt * nn, out, mat * nn, n, false, staged);
            } else if comptime!(from_saved) {
                store::<Tensor<f32>>(&slot_view, dt * nn, out, mat * nn, n, true, staged);
            } else if comptime!(mode == MODE_DENSE) {
                store_matvec(&slot_view, t * nn, v, mat * n, out, mat * n, n, staged);
            } else {
                // The slot T holds exp(A^T) = exp(A)^T: vbar = exp(A)^T g is T g.
                let row = mat * (nn + n);
                store::<Tensor<f32>>(&slot_view, dt * nn, out, row, n, false, staged);
                store_matvec(&slot_view, t * nn, u, mat * n, out, row + nn, n, staged);
            }
        } else if comptime!(!vectors) {
            fill(out, mat * nn, scale, n);
        }
        mat += CUBE_COUNT;
    }
}

/// exp(A) for a batch [count, n, n], each matrix with its own degree and squarings from the
/// planning table `plan`.
///
/// `slab` floats of shared memory per operand slab and `cap` >= n multipliers of the solve are
/// the only compile-time arguments (with the workgroup size of the launch).
#[cube(launch_unchecked)]
pub(crate) fn expm_kernel(
    a: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a, a, a, a, plan, plan, ops, vals, out, work, n, slots, slab, cap, resident, wide,
        MODE_EXPM,
    );
}

/// The Fréchet derivative L(A^T, G) of exp, which is the adjoint of A for the upstream
/// gradient G: forward mode through the Taylor scheme and the squarings at X = 2^-s A^T,
/// E = 2^-s G (the plan's degree and s come from ||A^T||_1).
#[cube(launch_unchecked)]
pub(crate) fn frechet_kernel(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        g,
        a,
        g,
        plan,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_FRECHET,
    );
}

/// exp(A) by Taylor into `out`, with the checkpoint of its derivative (per matrix its plan and
/// the scheme's values that the derivative reads, [`checkpoint_len`] floats) at the start of
/// `work`.
#[cube(launch_unchecked)]
pub(crate) fn expm_saving_kernel(
    a: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        a,
        a,
        a,
        plan,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_EXPM_SAVE,
    );
}

/// L(A^T, G) from the checkpoint `saved` of [`expm_saving_kernel`]: its plans and values, the
/// tangents alone (two products per product of the scheme where [`frechet_kernel`] takes
/// three), and no planning.
#[cube(launch_unchecked)]
pub(crate) fn frechet_saved_kernel(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    saved: &Tensor<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        g,
        saved,
        g,
        vals,
        vals,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_FRECHET_SAVED,
    );
}

/// exp(A) v for the matrices that `expmv` routes to the explicit exponential (Padé), into
/// out [N, n]; the Taylor kernel writes the others.
#[cube(launch_unchecked)]
pub(crate) fn expmv_dense_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    routes: &Array<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a, a, v, v, routes, plan, ops, vals, out, work, n, slots, slab, cap, resident, wide,
        MODE_DENSE,
    );
}

/// The adjoints of the matrices that `expmv` routed to the explicit exponential: per matrix
/// Abar = L(A^T, g v^T) and vbar = exp(A)^T g into out [N, n * n + n].
#[cube(launch_unchecked)]
pub(crate) fn expmv_dense_backward_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    g: &Tensor<f32>,
    routes: &Array<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        a,
        v,
        g,
        routes,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_DENSE_BACKWARD,
    );
}
