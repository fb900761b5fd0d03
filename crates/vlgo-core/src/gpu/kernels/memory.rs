//! Loads into the slots (scaled, transposed walks) and stores out of them.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::plan::barrier;
#[allow(unused_imports)]
use super::*;

/// work[e] *= scale over slot 0, each unit its own entries (no barrier: the caller meets one).
#[cube]
pub(crate) fn scale_in_place(work: &mut Slice<f32, ReadWrite>, scale: f32, n: usize) {
    let mut e = UNIT_POS as usize;
    while e < n * n {
        work[e] = work[e] * scale;
        e += CUBE_DIM as usize;
    }
}

/// Entries of `src` a unit reads before it writes them: each read waits on device memory, and
/// the one or two cubes on a multiprocessor would otherwise wait for each in turn.
pub(crate) const LOAD_DEPTH: usize = 8;

/// The visits of a transposed copy between a row-major matrix (in device memory) and its
/// transpose (in the slots): blocks of 8 rows x 4 columns of the row-major side, a block per 32
/// consecutive units (a warp). A warp then touches 8 runs of 16 bytes on the row-major side and
/// 8 banks of shared memory, 4 ways each, on the other. Visiting entry by entry made one side
/// 32 accesses apart: 32 lines of device memory per warp access, or (the transposed side in
/// shared memory at n = 64, where a column's entries share a bank) a 32-way bank conflict.
///
/// A unit keeps its place in the block (units come in multiples of 32) and steps through the
/// blocks by additions, as [`combine`](super::products::combine) steps through entries.
#[derive(CubeType)]
pub(crate) struct TransposedWalk {
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
pub(crate) fn load_scaled(
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
pub(crate) fn store<L: ListMut<f32>>(
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
pub(crate) fn fill(out: &mut Tensor<f32>, offset: usize, value: f32, n: usize) {
    let mut e = UNIT_POS as usize;
    while e < n * n {
        out[offset + e] = value;
        e += CUBE_DIM as usize;
    }
}
