//! The plan of a matrix: its degree and squarings from its 1-norm, and the cube barrier.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

#[allow(unused_imports)]
use super::*;

/// The cube's writes become visible to its other units: its shared memory, and its slots in
/// device memory when they lie there (`staged`; resident slots need only the cube barrier).
#[cube]
pub(crate) fn barrier(#[comptime] staged: bool) {
    if comptime!(staged) {
        sync_storage();
    }
    sync_cube();
}

/// Four f32 read or written by one instruction (a 16-byte shared-memory access).
pub(crate) type F4 = Vector<f32, Const<4>>;

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
pub(crate) fn plan_here(
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
