//! exp(A) v and its adjoint for tiny matrices (n <= 4) with fixed-size arrays: the same
//! truncated Taylor steps, early termination and adjoint as the general kernel in
//! [`super::expmv`], unrolled by the compiler instead of going through slices and calls, which
//! dominate at this size (a 3 x 3 step is nine multiply-adds).

/// Largest size handled here.
pub const MAX: usize = 4;

/// Terms per step at most (the configuration allows m <= 24).
const TERMS: usize = 25;

fn load<const N: usize>(a: &[f32], mu: f32, s: u64) -> [[f32; N]; N] {
    let inv = 1.0 / s as f32;
    let mut sa = [[0.0; N]; N];
    for i in 0..N {
        for j in 0..N {
            sa[i][j] = a[i * N + j] * inv;
        }
        sa[i][i] = (a[i * N + i] - mu) * inv;
    }
    sa
}

fn mv<const N: usize>(sa: &[[f32; N]; N], x: &[f32; N]) -> [f32; N] {
    let mut y = [0.0; N];
    for i in 0..N {
        y[i] = (0..N).map(|k| sa[i][k] * x[k]).sum();
    }
    y
}

fn inf_norm<const N: usize>(x: &[f32; N]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// One outer step from b: F = sum_j w_j, w_j = sa w_{j-1} / j, with the general kernel's early
/// termination. Returns F and the number of terms used.
fn step<const N: usize>(sa: &[[f32; N]; N], b: &[f32; N], m: usize, tol: f32) -> ([f32; N], usize) {
    let mut f = *b;
    let mut w = *b;
    let mut prev = inf_norm(&w);
    let mut used = 0;
    for j in 1..=m {
        let t = mv(sa, &w);
        let inv = 1.0 / j as f32;
        for k in 0..N {
            w[k] = t[k] * inv;
            f[k] += w[k];
        }
        used = j;
        let norm = inf_norm(&w);
        if prev + norm <= tol * inf_norm(&f) {
            break;
        }
        prev = norm;
    }
    (f, used)
}

fn scale<const N: usize>(x: &[f32; N], eta: f32) -> [f32; N] {
    x.map(|v| eta * v)
}

/// y = exp(A) v with degree m, s steps and shift mu; returns the terms the last step used.
#[allow(clippy::too_many_arguments)]
pub fn forward<const N: usize>(
    a: &[f32],
    v: &[f32],
    y: &mut [f32],
    m: usize,
    s: u64,
    mu: f32,
    tol: f32,
) -> usize {
    let sa = load::<N>(a, mu, s);
    let eta = (mu / s as f32).exp();
    let mut b: [f32; N] = v[..N].try_into().expect("length N");
    let mut used = 0;
    for _ in 0..s {
        let (f, j) = step(&sa, &b, m, tol);
        b = scale(&f, eta);
        used = j;
    }
    y[..N].copy_from_slice(&b);
    used
}

/// Adjoints (abar, vbar) of y = exp(A) v given ybar = `grad`; `inputs` and `used` are scratch.
/// `single_step_terms`: the terms the forward used when it took one step (its input is v), so
/// the forward need not run again.
#[allow(clippy::too_many_arguments)]
pub fn backward<const N: usize>(
    a: &[f32],
    v: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    vbar: &mut [f32],
    m: usize,
    s: u64,
    mu: f32,
    tol: f32,
    single_step_terms: Option<usize>,
    inputs: &mut Vec<f32>,
    used: &mut Vec<usize>,
) {
    let sa = load::<N>(a, mu, s);
    let eta = (mu / s as f32).exp();
    inputs.clear();
    used.clear();
    match single_step_terms {
        Some(j) if s == 1 => {
            inputs.extend_from_slice(&v[..N]);
            used.push(j);
        }
        _ => {
            let mut b: [f32; N] = v[..N].try_into().expect("length N");
            for _ in 0..s {
                inputs.extend_from_slice(&b);
                let (f, j) = step(&sa, &b, m, tol);
                used.push(j);
                b = scale(&f, eta);
            }
        }
    }
    // Adjoint step by step in reverse; g accumulates the adjoint of sa.
    let mut g = [[0.0f32; N]; N];
    let mut bbar: [f32; N] = grad[..N].try_into().expect("length N");
    let mut w = [[0.0f32; N]; TERMS];
    for (k, &j_max) in used.iter().enumerate().rev() {
        w[0].copy_from_slice(&inputs[k * N..(k + 1) * N]);
        for j in 1..j_max {
            let t = mv(&sa, &w[j - 1]);
            w[j] = t.map(|x| x / j as f32);
        }
        let fbar = scale(&bbar, eta);
        let mut acc = fbar;
        for j in (1..=j_max).rev() {
            let inv = 1.0 / j as f32;
            let mut next = fbar;
            for i in 0..N {
                let ai = acc[i] * inv;
                for c in 0..N {
                    g[i][c] += ai * w[j - 1][c];
                    next[c] += ai * sa[i][c];
                }
            }
            acc = next;
        }
        bbar = acc;
    }
    let inv_s = 1.0 / s as f32;
    for i in 0..N {
        for j in 0..N {
            abar[i * N + j] = g[i][j] * inv_s;
        }
    }
    vbar[..N].copy_from_slice(&bbar);
}
