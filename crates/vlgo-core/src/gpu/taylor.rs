//! CubeCL kernels of `expmv`: exp(A) v by the truncated Taylor series with shift and early
//! termination (Al-Mohy and Higham), one cube per matrix, and its checkpointed adjoint.
//!
//! [`route_kernel`] makes, per matrix, the choices of the CPU and tensor-op paths (shift
//! mu = tr(A)/n, the degree m and steps s that minimise m s matrix-vector products, the
//! explicit exponential when that is cheaper) and writes them to a route buffer that the other
//! kernels and the backward read: no host synchronisation. [`taylor_kernel`] and
//! [`taylor_backward_kernel`] take the Taylor routes; the dense routes go through the slot
//! interpreter of [`super::kernels`].
//!
//! Each unit owns the vector entries i = unit, unit + units, ... and computes their dot products
//! in full, so a matrix-vector product needs no reduction; only the vector being multiplied is
//! shared by the cube. Up to 64 x 64, A sits in shared memory with an odd row stride, so rows
//! (A x) and columns (A^T x) are read without bank conflicts; larger A are read from global
//! memory. The two infinity norms of each term reduce over the cube in shared memory.

// Kernel signatures carry the layout explicitly.
#![allow(clippy::too_many_arguments)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::kernels::MAX_UNITS;

/// Entries per matrix in the route buffer: kind, degree m, steps s, shift mu (a NaN made from
/// the data for a non-finite matrix).
pub(crate) const ROUTE_STRIDE: usize = 4;
/// Route kinds.
pub(crate) const ROUTE_TAYLOR: u32 = 0; // route_kernel writes the kinds as literals
pub(crate) const ROUTE_DENSE: u32 = 1;
pub(crate) const ROUTE_NON_FINITE: u32 = 2;
/// Checkpoints per level of the backward: the step inputs are kept every ceil(s / CHECKPOINTS)
/// steps, and a segment's inputs are recomputed from its checkpoint, so s is at most
/// CHECKPOINTS^2 on the kernels (more steps take the explicit exponential).
pub(crate) const CHECKPOINTS: usize = 64;
/// Most Taylor steps a route may take.
pub(crate) const MAX_STEPS: usize = CHECKPOINTS * CHECKPOINTS;
const _: () = assert!(
    MAX_STEPS == 4096,
    "route_kernel writes MAX_STEPS as a literal"
);
/// Largest n whose A is staged in shared memory, and the stride of its rows.
pub(crate) const STAGED_N: usize = 64;
pub(crate) const STAGED_FLOATS: usize = STAGED_N * (STAGED_N + 1);

/// Whether a route entry holds this kind.
#[cube]
pub(crate) fn is_kind(value: f32, #[comptime] kind: u32) -> bool {
    u32::cast_from(value) == kind
}

/// Row stride of a staged A: odd, so a warp reading a column touches distinct banks.
#[cube]
fn odd_stride(n: usize) -> usize {
    n + 1 - n % 2
}

/// Per matrix: the shift, the Taylor degree and steps, and whether the explicit exponential
/// (Padé, whose largest theta is `pade_theta`) is cheaper, as `cpu::expmv` decides them.
/// `inv_thetas` holds 1 / theta_m for m = 1..=m_max.
#[cube(launch)]
pub(crate) fn route_kernel(
    a: &Tensor<f32>,
    inv_thetas: &Array<f32>,
    routes: &mut Array<f32>,
    n: u32,
    m_max: u32,
    shift: u32,
    fallback: u32,
    pade_theta: f32,
    max_squarings: f32,
) {
    let nf = f32::cast_from(n);
    let n = n as usize;
    let nn = n * n;
    let count = a.len() / nn;
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let mut top = SharedMemory::<f32>::new(MAX_UNITS);
    let mut top_shifted = SharedMemory::<f32>::new(MAX_UNITS);
    let mut bad = SharedMemory::<f32>::new(MAX_UNITS);
    let mut mat = CUBE_POS;
    while mat < count {
        let src = mat * nn;
        // Every unit sums the trace itself (n reads): mu is then known without a reduction.
        let mut mu = f32::new(0.0);
        if shift == 1u32 {
            let mut trace = f32::new(0.0);
            for i in 0..n {
                trace += a[src + i * n + i];
            }
            mu = trace / nf;
        }
        let mut best = f32::new(0.0);
        let mut best_shifted = f32::new(0.0);
        // Non-finite sums are told by their exponent bits (see `kernels::plan::plan_here`).
        let mut flag = f32::new(0.0);
        let mut j = tid;
        while j < n {
            let mut s = f32::new(0.0);
            let mut s_shifted = f32::new(0.0);
            for i in 0..n {
                let x = a[src + i * n + j];
                s += x.abs();
                let mut y = x;
                if i == j {
                    y = x - mu;
                }
                s_shifted += y.abs();
            }
            let bits = u32::reinterpret(s);
            if (bits & 0x7f80_0000u32) == 0x7f80_0000u32 {
                flag = f32::reinterpret(bits | 0x0040_0000u32);
            } else {
                best = max(best, s);
                best_shifted = max(best_shifted, s_shifted);
            }
            j += units;
        }
        top[tid] = best;
        top_shifted[tid] = best_shifted;
        bad[tid] = flag;
        sync_cube();
        if tid == 0 {
            let mut norm = f32::new(0.0);
            let mut shifted = f32::new(0.0);
            let mut finite = true;
            let mut nan = f32::new(0.0);
            for u in 0..units {
                norm = max(norm, top[u]);
                shifted = max(shifted, top_shifted[u]);
                if u32::reinterpret(bad[u]) != 0u32 {
                    finite = false;
                    nan = bad[u];
                }
            }
            let mut kind = f32::new(0.0); // ROUTE_TAYLOR
            let mut m = f32::new(0.0);
            let mut s = f32::new(0.0);
            let mut shift_out = mu;
            if finite {
                m = cheapest_degree(shifted, inv_thetas, m_max);
                if m > f32::new(0.0) {
                    s = taylor_steps(shifted, inv_thetas, m);
                }
                let cost = m * s;
                let floor = nf * f32::new(16.0) / f32::new(3.0);
                if m == f32::new(0.0) || s > f32::new(4096.0) {
                    kind = f32::new(1.0); // ROUTE_DENSE
                } else if fallback == 1u32 && cost > floor {
                    // Squarings of the explicit exponential at this norm.
                    let mut t = norm / pade_theta;
                    let mut squarings = f32::new(0.0);
                    while t > f32::new(1.0) && squarings < max_squarings {
                        t *= f32::new(0.5);
                        squarings += f32::new(1.0);
                    }
                    if cost > floor + squarings * nf {
                        kind = f32::new(1.0); // ROUTE_DENSE
                    }
                }
            } else {
                kind = f32::new(2.0); // ROUTE_NON_FINITE
                shift_out = nan;
            }
            let at = mat * ROUTE_STRIDE;
            routes[at] = kind;
            routes[at + 1] = m;
            routes[at + 2] = s;
            routes[at + 3] = shift_out;
        }
        sync_cube();
        mat += CUBE_COUNT;
    }
}

/// The Taylor degree m in 1..=`m_max` whose steps (see [`taylor_steps`]) need the fewest
/// products m s at the shifted 1-norm `shifted`, the smallest on ties; 0 when every degree would
/// take more than 1e9 steps. `inv_thetas` holds 1 / theta_m.
#[cube]
fn cheapest_degree(shifted: f32, inv_thetas: &Array<f32>, m_max: u32) -> f32 {
    let mut m = f32::new(0.0);
    let mut cost = f32::new(0.0);
    for k in 0..m_max as usize {
        let q = shifted * inv_thetas[k];
        if q <= f32::new(1e9) {
            let ck = f32::cast_from(k as u32 + 1) * max(q.ceil(), f32::new(1.0));
            if m == f32::new(0.0) || ck < cost {
                cost = ck;
                m = f32::cast_from(k as u32 + 1);
            }
        }
    }
    m
}

/// Steps s = max(ceil(||A'||_1 / theta_m), 1) of degree m >= 1.
#[cube]
fn taylor_steps(shifted: f32, inv_thetas: &Array<f32>, m: f32) -> f32 {
    let k = u32::cast_from(m) as usize - 1;
    max((shifted * inv_thetas[k]).ceil(), f32::new(1.0))
}

/// sa = A with rows `odd_stride(n)` apart.
#[cube]
fn stage(a: &Tensor<f32>, src: usize, sa: &mut SharedMemory<f32>, n: usize) {
    let stride = odd_stride(n);
    let mut e = UNIT_POS as usize;
    while e < n * n {
        sa[(e / n) * stride + e % n] = a[src + e];
        e += CUBE_DIM as usize;
    }
    sync_cube();
}

/// out[i] = c ((A x)_i - mu x_i) for the unit's entries i, or with A^T when `transposed`;
/// A is `sa` when `staged`, else read from `a` at `src`.
#[cube]
fn matvec(
    a: &Tensor<f32>,
    sa: &SharedMemory<f32>,
    src: usize,
    x: &SharedMemory<f32>,
    out: &mut SharedMemory<f32>,
    mu: f32,
    c: f32,
    n: usize,
    #[comptime] staged: bool,
    #[comptime] transposed: bool,
) {
    let stride = odd_stride(n);
    let mut i = UNIT_POS as usize;
    while i < n {
        let mut s = f32::new(0.0);
        for k in 0..n {
            let e = if comptime!(staged) {
                if comptime!(transposed) {
                    sa[k * stride + i]
                } else {
                    sa[i * stride + k]
                }
            } else if comptime!(transposed) {
                a[src + k * n + i]
            } else {
                a[src + i * n + k]
            };
            s += e * x[k];
        }
        out[i] = c * (s - mu * x[i]);
        i += CUBE_DIM as usize;
    }
}

/// The maxima over the cube of r[unit] and q[unit] (every unit has written its entries), in
/// r[0] and q[0] for every unit to read.
///
/// A tree: log2(units) loop iterations per unit, where a scan by each unit takes units - 1.
/// Software Vulkan (llvmpipe) stops every loop of an invocation once their iterations together
/// pass 65 535, so iterations are what these kernels spend most carefully there.
#[cube]
fn reduce_max2(r: &mut SharedMemory<f32>, q: &mut SharedMemory<f32>) {
    let tid = UNIT_POS as usize;
    sync_cube();
    let mut stride = CUBE_DIM as usize / 2;
    while stride > 0 {
        if tid < stride {
            r[tid] = max(r[tid], r[tid + stride]);
            q[tid] = max(q[tid], q[tid + stride]);
        }
        sync_cube();
        stride /= 2;
    }
}

/// One outer step from the input b in `x`: F = sum_{j <= m} (A'/s)^j b / j! into `f` with
/// A' = A - mu I, stopping once the last two terms are below tol ||F||_inf (as the CPU and
/// tensor-op paths do). Returns the number of terms used. With `keep`, w_0 .. w_{used-1} are
/// written to `powers` at `at` (each unit its own entries). `x` ends holding the last term.
#[cube]
fn taylor_step(
    a: &Tensor<f32>,
    sa: &SharedMemory<f32>,
    src: usize,
    x: &mut SharedMemory<f32>,
    t: &mut SharedMemory<f32>,
    f: &mut SharedMemory<f32>,
    r: &mut SharedMemory<f32>,
    q: &mut SharedMemory<f32>,
    powers: &mut Array<f32>,
    at: usize,
    m: usize,
    mu: f32,
    inv_s: f32,
    tol: f32,
    n: usize,
    #[comptime] staged: bool,
    #[comptime] keep: bool,
) -> usize {
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let mut local = f32::new(0.0);
    let mut i = tid;
    while i < n {
        f[i] = x[i];
        local = max(local, x[i].abs());
        i += units;
    }
    r[tid] = local;
    q[tid] = f32::new(0.0);
    reduce_max2(r, q);
    let mut prev = r[0];
    let mut used = 0usize;
    let mut j = 1usize;
    let mut going = true;
    while going && j <= m {
        if comptime!(keep) {
            let mut i = tid;
            while i < n {
                powers[at + (j - 1) * n + i] = x[i];
                i += units;
            }
        }
        let c = inv_s / f32::cast_from(j as u32);
        matvec(a, sa, src, x, t, mu, c, n, staged, false);
        sync_cube();
        let mut lw = f32::new(0.0);
        let mut lf = f32::new(0.0);
        let mut i = tid;
        while i < n {
            let w = t[i];
            let fi = f[i] + w;
            x[i] = w;
            f[i] = fi;
            lw = max(lw, w.abs());
            lf = max(lf, fi.abs());
            i += units;
        }
        // r and q are written again only after the next product's barrier.
        r[tid] = lw;
        q[tid] = lf;
        reduce_max2(r, q);
        let norm = r[0];
        used = j;
        if prev + norm <= tol * q[0] {
            going = false;
        }
        prev = norm;
        j += 1;
    }
    used
}

/// x <- exp(A) x by `steps` outer Taylor steps of degree m with shift mu (the forward of the
/// Taylor route; `steps` as a float is s). x must be loaded and the cube synchronised.
#[cube]
fn taylor_forward(
    a: &Tensor<f32>,
    sa: &SharedMemory<f32>,
    src: usize,
    x: &mut SharedMemory<f32>,
    t: &mut SharedMemory<f32>,
    f: &mut SharedMemory<f32>,
    r: &mut SharedMemory<f32>,
    q: &mut SharedMemory<f32>,
    m: usize,
    steps: f32,
    mu: f32,
    tol: f32,
    n: usize,
    #[comptime] staged: bool,
) {
    let inv_s = f32::new(1.0) / steps;
    let eta = (mu * inv_s).exp();
    let mut unused = Array::<f32>::new(1usize);
    for _ in 0..u32::cast_from(steps) as usize {
        taylor_step(
            a,
            sa,
            src,
            x,
            t,
            f,
            r,
            q,
            &mut unused,
            0,
            m,
            mu,
            inv_s,
            tol,
            n,
            staged,
            false,
        );
        next_input(x, f, eta, n);
    }
}

/// x[i] = eta f[i] for the unit's entries, then the cube synchronises: the next step's input.
#[cube]
fn next_input(x: &mut SharedMemory<f32>, f: &SharedMemory<f32>, eta: f32, n: usize) {
    let mut i = UNIT_POS as usize;
    while i < n {
        x[i] = eta * f[i];
        i += CUBE_DIM as usize;
    }
    sync_cube();
}

/// y = exp(A) v for the matrices routed to Taylor ([N, n]); NaN rows for non-finite ones.
///
/// `acap` (shared floats for A: [`STAGED_FLOATS`] when `staged`) and `vcap` (>= n) are
/// compile-time, with the workgroup size.
#[cube(launch)]
pub(crate) fn taylor_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    routes: &Array<f32>,
    y: &mut Tensor<f32>,
    n: u32,
    tol: f32,
    #[comptime] acap: usize,
    #[comptime] vcap: usize,
    #[comptime] staged: bool,
) {
    let n = n as usize;
    let nn = n * n;
    let count = a.len() / nn;
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let mut sa = SharedMemory::<f32>::new(acap);
    let mut x = SharedMemory::<f32>::new(vcap);
    let mut t = SharedMemory::<f32>::new(vcap);
    let mut f = SharedMemory::<f32>::new(vcap);
    let mut r = SharedMemory::<f32>::new(MAX_UNITS);
    let mut q = SharedMemory::<f32>::new(MAX_UNITS);
    let mut mat = CUBE_POS;
    while mat < count {
        let at = mat * ROUTE_STRIDE;
        let src = mat * nn;
        let kind = routes[at];
        if is_kind(kind, ROUTE_TAYLOR) {
            let m = u32::cast_from(routes[at + 1]) as usize;
            if comptime!(staged) {
                stage(a, src, &mut sa, n);
            }
            let mut i = tid;
            while i < n {
                x[i] = v[mat * n + i];
                i += units;
            }
            sync_cube();
            taylor_forward(
                a,
                &sa,
                src,
                &mut x,
                &mut t,
                &mut f,
                &mut r,
                &mut q,
                m,
                routes[at + 2],
                routes[at + 3],
                tol,
                n,
                staged,
            );
            let mut i = tid;
            while i < n {
                y[mat * n + i] = x[i];
                i += units;
            }
            sync_cube();
        } else if is_kind(kind, ROUTE_NON_FINITE) {
            let mut i = tid;
            while i < n {
                y[mat * n + i] = routes[at + 3];
                i += units;
            }
        }
        mat += CUBE_COUNT;
    }
}

/// Most Taylor steps of [`generated_taylor_kernel`]: a forward keeps no checkpoints, so it has
/// no [`MAX_STEPS`]; this only bounds the work a single enormous generator can take (shifted
/// 1-norms up to about 2e5).
pub(crate) const GENERATED_MAX_STEPS: usize = 1 << 16;

/// y_p = exp(A_p) v_p for generators formed in the kernel: problem p = r S + k (S = `blocks`)
/// has A_p = sum_m c[r, m] psi[m, k], with c [R, M], psi [M, S, n, n] and v, y [R S, n].
///
/// A_p exists only in the cube's shared memory: best-of-J with `TransportMethod::Generated`
/// evaluates J x N x S such generators without writing any of them to device memory. The cube
/// gathers the row's non-zero coefficients first (Laplace samples are sparse after thresholding),
/// so forming A_p reads only the generators in use. Then, as [`route_kernel`] and [`taylor_kernel`]
/// do, shift mu = tr(A_p)/n, the cheapest (m, s), and the Taylor steps with early termination;
/// there is no explicit-exponential fallback (it would need A_p in device memory), so the Taylor
/// route takes every finite generator up to [`GENERATED_MAX_STEPS`] steps. Non-finite generators,
/// and any beyond that, give NaN rows.
///
/// `acap` (>= n `odd_stride(n)`), `ccap` (>= M) and `vcap` (>= n) are compile-time, with the
/// workgroup size; n <= [`STAGED_N`].
#[cube(launch)]
pub(crate) fn generated_taylor_kernel(
    c: &Tensor<f32>,
    psi: &Tensor<f32>,
    v: &Tensor<f32>,
    inv_thetas: &Array<f32>,
    y: &mut Tensor<f32>,
    n: u32,
    blocks: u32,
    m_max: u32,
    shift: u32,
    tol: f32,
    #[comptime] acap: usize,
    #[comptime] ccap: usize,
    #[comptime] vcap: usize,
) {
    let nf = f32::cast_from(n);
    let n = n as usize;
    let nn = n * n;
    let blocks = blocks as usize;
    let coeffs = c.shape(1);
    let count = v.len() / n;
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let stride = odd_stride(n);
    let mut sa = SharedMemory::<f32>::new(acap);
    let mut vals = SharedMemory::<f32>::new(ccap);
    let mut used = SharedMemory::<u32>::new(ccap);
    let mut nnz = SharedMemory::<u32>::new(1usize);
    let mut x = SharedMemory::<f32>::new(vcap);
    let mut t = SharedMemory::<f32>::new(vcap);
    let mut f = SharedMemory::<f32>::new(vcap);
    let mut r = SharedMemory::<f32>::new(MAX_UNITS);
    let mut q = SharedMemory::<f32>::new(MAX_UNITS);
    let mut p = CUBE_POS;
    while p < count {
        let row = p / blocks;
        let block = p % blocks;
        // The row's coefficients are read by all units (coalesced), then compacted in place by
        // one (k <= j, so nothing is overwritten before it is read).
        let mut j = tid;
        while j < coeffs {
            vals[j] = c[row * coeffs + j];
            j += units;
        }
        sync_cube();
        if tid == 0 {
            // Zero is told by the bits, so NaN and Inf coefficients are kept whatever a shader
            // compiler assumes about NaN; -0 is skipped.
            let mut k = 0usize;
            for j in 0..coeffs {
                let cj = vals[j];
                if (u32::reinterpret(cj) & 0x7fff_ffffu32) != 0u32 {
                    vals[k] = cj;
                    used[k] = j as u32;
                    k += 1;
                }
            }
            nnz[0] = k as u32;
        }
        sync_cube();
        let terms = nnz[0] as usize;
        let mut e = tid;
        while e < nn {
            let mut sum = f32::new(0.0);
            for k in 0..terms {
                sum += vals[k] * psi[(used[k] as usize * blocks + block) * nn + e];
            }
            sa[(e / n) * stride + e % n] = sum;
            e += units;
        }
        sync_cube();
        let mut mu = f32::new(0.0);
        if shift == 1u32 {
            let mut trace = f32::new(0.0);
            for i in 0..n {
                trace += sa[i * stride + i];
            }
            mu = trace / nf;
        }
        // Shifted column sums; a non-finite one (told by its exponent bits) stands in as a norm
        // no degree takes, which gives the NaN row.
        let mut local = f32::new(0.0);
        let mut j = tid;
        while j < n {
            let mut sum = f32::new(0.0);
            for i in 0..n {
                let mut entry = sa[i * stride + j];
                if i == j {
                    entry -= mu;
                }
                sum += entry.abs();
            }
            if (u32::reinterpret(sum) & 0x7f80_0000u32) == 0x7f80_0000u32 {
                sum = f32::new(3.0e38);
            }
            local = max(local, sum);
            j += units;
        }
        r[tid] = local;
        q[tid] = f32::new(0.0);
        reduce_max2(&mut r, &mut q);
        let shifted = r[0];
        let m = cheapest_degree(shifted, inv_thetas, m_max);
        let mut steps = f32::new(0.0);
        if m > f32::new(0.0) {
            steps = taylor_steps(shifted, inv_thetas, m);
        }
        let mut i = tid;
        while i < n {
            x[i] = v[p * n + i];
            i += units;
        }
        // Every unit has read r[0] before the steps write r again.
        sync_cube();
        if m > f32::new(0.0) && steps <= f32::cast_from(GENERATED_MAX_STEPS as u32) {
            taylor_forward(
                psi,
                &sa,
                0usize,
                &mut x,
                &mut t,
                &mut f,
                &mut r,
                &mut q,
                u32::cast_from(m) as usize,
                steps,
                mu,
                tol,
                n,
                true,
            );
            let mut i = tid;
            while i < n {
                y[p * n + i] = x[i];
                i += units;
            }
        } else {
            // A NaN made from the data at run time: a constant one may be folded away.
            let nan = f32::reinterpret(u32::reinterpret(shifted) | 0x7fc0_0000u32);
            let mut i = tid;
            while i < n {
                y[p * n + i] = nan;
                i += units;
            }
        }
        sync_cube();
        p += CUBE_COUNT;
    }
}

/// The adjoints of the Taylor routes given the upstream gradient g [N, n]: per matrix Abar and
/// vbar into out [N, n * n + n] (NaN for non-finite matrices).
///
/// Per outer step in reverse (`expm.md`): Fbar = eta bbar; for j = used..1: row_j = acc / j,
/// acc = Fbar + (A'/s)^T row_j; Abar += sum_j row_j w_{j-1}^T; bbar = acc. The step inputs are
/// kept every ceil(s / [`CHECKPOINTS`]) steps and a segment's are recomputed from its first;
/// each step's terms w_j are recomputed from its input (the same arithmetic as the forward, so
/// the same early termination). Workspace per cube: `2 CHECKPOINTS + 2 m_max` vectors.
#[cube(launch)]
pub(crate) fn taylor_backward_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    g: &Tensor<f32>,
    routes: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    tol: f32,
    m_max: u32,
    #[comptime] acap: usize,
    #[comptime] vcap: usize,
    #[comptime] staged: bool,
) {
    let n = n as usize;
    let nn = n * n;
    let count = a.len() / nn;
    let tid = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let m_max = m_max as usize;
    let base = CUBE_POS * (2 * CHECKPOINTS + 2 * m_max) * n;
    let checkpoints = base;
    let segment = base + CHECKPOINTS * n;
    let terms = base + 2 * CHECKPOINTS * n;
    let rows = terms + m_max * n;
    let mut sa = SharedMemory::<f32>::new(acap);
    let mut x = SharedMemory::<f32>::new(vcap);
    let mut t = SharedMemory::<f32>::new(vcap);
    let mut f = SharedMemory::<f32>::new(vcap);
    let mut bbar = SharedMemory::<f32>::new(vcap);
    let mut acc = SharedMemory::<f32>::new(vcap);
    let mut r = SharedMemory::<f32>::new(MAX_UNITS);
    let mut q = SharedMemory::<f32>::new(MAX_UNITS);
    let mut mat = CUBE_POS;
    while mat < count {
        let at = mat * ROUTE_STRIDE;
        let src = mat * nn;
        let row = mat * (nn + n);
        let kind = routes[at];
        if is_kind(kind, ROUTE_TAYLOR) {
            let m = u32::cast_from(routes[at + 1]) as usize;
            let steps = u32::cast_from(routes[at + 2]) as usize;
            let mu = routes[at + 3];
            let inv_s = f32::new(1.0) / routes[at + 2];
            let eta = (mu * inv_s).exp();
            if comptime!(staged) {
                stage(a, src, &mut sa, n);
            }
            // Abar is accumulated in place, by columns: unit k owns columns k, k + units, ...
            let mut k = tid;
            while k < n {
                for i in 0..n {
                    out[row + i * n + k] = f32::new(0.0);
                }
                k += units;
            }
            let mut i = tid;
            while i < n {
                x[i] = v[mat * n + i];
                i += units;
            }
            sync_cube();
            let every = steps.div_ceil(CHECKPOINTS);
            let segments = steps.div_ceil(every);
            // The inputs of steps 0, every, 2 every, ...: the steps after the last are not run.
            let last_checkpoint = (segments - 1) * every;
            for step in 0..last_checkpoint + 1 {
                if step % every == 0 {
                    let mut i = tid;
                    while i < n {
                        work[checkpoints + (step / every) * n + i] = x[i];
                        i += units;
                    }
                }
                if step < last_checkpoint {
                    taylor_step(
                        a, &sa, src, &mut x, &mut t, &mut f, &mut r, &mut q, work, 0, m, mu, inv_s,
                        tol, n, staged, false,
                    );
                    next_input(&mut x, &f, eta, n);
                }
            }
            let mut i = tid;
            while i < n {
                bbar[i] = g[mat * n + i];
                i += units;
            }
            for back in 0..segments {
                let seg = segments - 1 - back;
                let first = seg * every;
                let last = min(steps, first + every);
                // The inputs of the segment's steps, from its checkpoint.
                let mut i = tid;
                while i < n {
                    x[i] = work[checkpoints + seg * n + i];
                    i += units;
                }
                sync_cube();
                for st in first..last {
                    let mut i = tid;
                    while i < n {
                        work[segment + (st - first) * n + i] = x[i];
                        i += units;
                    }
                    if st + 1 < last {
                        taylor_step(
                            a, &sa, src, &mut x, &mut t, &mut f, &mut r, &mut q, work, 0, m, mu,
                            inv_s, tol, n, staged, false,
                        );
                        next_input(&mut x, &f, eta, n);
                    }
                }
                for back_step in 0..(last - first) {
                    let st = last - 1 - back_step;
                    let mut i = tid;
                    while i < n {
                        x[i] = work[segment + (st - first) * n + i];
                        i += units;
                    }
                    sync_cube();
                    let used = taylor_step(
                        a, &sa, src, &mut x, &mut t, &mut f, &mut r, &mut q, work, terms, m, mu,
                        inv_s, tol, n, staged, true,
                    );
                    sync_cube();
                    let mut i = tid;
                    while i < n {
                        acc[i] = eta * bbar[i];
                        i += units;
                    }
                    for jj in 0..used {
                        let j = used - jj;
                        let c = f32::new(1.0) / f32::cast_from(j as u32);
                        let mut i = tid;
                        while i < n {
                            let p = acc[i] * c;
                            work[rows + (j - 1) * n + i] = p;
                            x[i] = p;
                            i += units;
                        }
                        sync_cube();
                        matvec(a, &sa, src, &x, &mut t, mu, inv_s, n, staged, true);
                        sync_cube();
                        let mut i = tid;
                        while i < n {
                            acc[i] = eta * bbar[i] + t[i];
                            i += units;
                        }
                    }
                    // The rows written by other units become visible; the terms are the unit's
                    // own entries.
                    sync_storage();
                    sync_cube();
                    let mut k = tid;
                    while k < n {
                        for i in 0..n {
                            let mut s = f32::new(0.0);
                            for j in 0..used {
                                s += work[rows + j * n + i] * work[terms + j * n + k];
                            }
                            // d(A'/s)/dA = 1/s; the shift is a constant of the backward.
                            out[row + i * n + k] += s * inv_s;
                        }
                        k += units;
                    }
                    let mut i = tid;
                    while i < n {
                        bbar[i] = acc[i];
                        i += units;
                    }
                    sync_cube();
                }
            }
            let mut i = tid;
            while i < n {
                out[row + nn + i] = bbar[i];
                i += units;
            }
            sync_cube();
        } else if is_kind(kind, ROUTE_NON_FINITE) {
            let mut e = tid;
            while e < nn + n {
                out[row + e] = routes[at + 3];
                e += units;
            }
        }
        mat += CUBE_COUNT;
    }
}
