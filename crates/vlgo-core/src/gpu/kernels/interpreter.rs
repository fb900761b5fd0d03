//! The slot-program interpreter (`run`) that every kernel runs, its modes, and the checkpoint layout.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::memory::{fill, load_scaled, scale_in_place, store};
use super::plan::{barrier, plan_here};
use super::products::{combine, combine_wide, matmul, matmul_tangent_wide, matmul_wide};
use super::solve::gauss_jordan;
#[allow(unused_imports)]
use super::*;

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
pub(crate) fn saved_value(count: usize, nn: usize, mat: usize, k: usize) -> usize {
    count * PLAN_STRIDE + (mat * SAVED + k) * nn
}

/// work[dst..] = scale * g v^T (row i of the outer product is g_i v^T).
#[cube]
pub(crate) fn load_outer(
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
pub(crate) fn store_matvec(
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
pub(crate) fn run(
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
