//! The polynomial evaluation schemes of the explicit exponential, written as straight-line
//! programs of matrix products and linear combinations so that one interpreter evaluates them and
//! one interpreter runs them in reverse for the gradient.
//!
//! Padé: Higham 2005 (degrees 3, 5, 7, 9 and the 6-product degree 13), producing U and V with
//! r_m = (V - U)^{-1} (V + U). Taylor: Bader, Blanes and Casas 2019, degrees 1, 2, 4, 8, 12, 18
//! (degree 18 in 5 products), producing T directly.

// Constants are written as their sources publish them.
#![allow(clippy::excessive_precision)]

use burn::prelude::*;

/// One instruction: its result is appended to the list of values (value 0 is the scaled input X).
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// `values[i] @ values[j]`.
    MatMul(usize, usize),
    /// `sum_k coef_k values[i_k] + eye_coef I`.
    Lin(Vec<(usize, f64)>, f64),
}

/// A scheme and the indices of its outputs: (U, V) for Padé, (T, T) for Taylor.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub steps: Vec<Step>,
    pub outputs: (usize, usize),
    /// Whether the outputs are Padé's (U, V) (then a solve follows) or Taylor's T.
    pub pade: bool,
}

/// Coefficients c_j = (2m - j)! m! / ((2m)! j! (m - j)!) of the Padé numerator p_m.
pub(crate) fn pade_coefficients(m: usize) -> Vec<f64> {
    let mut c = vec![1.0f64; m + 1];
    for j in 1..=m {
        // c_j / c_{j-1} = (m - j + 1) / (j (2m - j + 1))
        c[j] = c[j - 1] * (m - j + 1) as f64 / (j as f64 * (2 * m - j + 1) as f64);
    }
    c
}

struct Builder {
    steps: Vec<Step>,
}

impl Builder {
    fn new() -> Self {
        Self { steps: Vec::new() }
    }
    fn push(&mut self, step: Step) -> usize {
        self.steps.push(step);
        self.steps.len()
    }
    fn mm(&mut self, i: usize, j: usize) -> usize {
        self.push(Step::MatMul(i, j))
    }
    fn lin(&mut self, terms: Vec<(usize, f64)>, eye: f64) -> usize {
        self.push(Step::Lin(terms, eye))
    }
}

/// Padé scheme of degree `m` (3, 5, 7, 9 or 13).
pub(crate) fn pade(m: usize) -> Program {
    let b = pade_coefficients(m);
    let mut p = Builder::new();
    let x = 0;
    let x2 = p.mm(x, x);
    let (u, v) = if m == 13 {
        let x4 = p.mm(x2, x2);
        let x6 = p.mm(x4, x2);
        let w1 = p.lin(vec![(x6, b[13]), (x4, b[11]), (x2, b[9])], 0.0);
        let w1 = p.mm(x6, w1);
        let w = p.lin(vec![(w1, 1.0), (x6, b[7]), (x4, b[5]), (x2, b[3])], b[1]);
        let u = p.mm(x, w);
        let z1 = p.lin(vec![(x6, b[12]), (x4, b[10]), (x2, b[8])], 0.0);
        let z1 = p.mm(x6, z1);
        let v = p.lin(vec![(z1, 1.0), (x6, b[6]), (x4, b[4]), (x2, b[2])], b[0]);
        (u, v)
    } else {
        // Even powers X^2, X^4, ..., X^(m-1); U = X sum b_odd X^(j-1), V = sum b_even X^j.
        let mut powers = vec![x2];
        while 2 * (powers.len() + 1) < m + 1 {
            let last = *powers.last().expect("non-empty");
            let next = p.mm(last, x2);
            powers.push(next);
        }
        let odd: Vec<(usize, f64)> = powers
            .iter()
            .enumerate()
            .map(|(k, &pw)| (pw, b[2 * k + 3]))
            .collect();
        let even: Vec<(usize, f64)> = powers
            .iter()
            .enumerate()
            .map(|(k, &pw)| (pw, b[2 * k + 2]))
            .collect();
        let w = p.lin(odd, b[1]);
        let u = p.mm(x, w);
        let v = p.lin(even, b[0]);
        (u, v)
    };
    Program {
        steps: p.steps,
        outputs: (u, v),
        pade: true,
    }
}

/// Bader-Blanes-Casas coefficients of the degree-12 scheme, `B_i = sum_j b[i][j] [I, X, X^2, X^3]_j`.
pub(crate) const BBC12: [[f64; 4]; 4] = [
    [
        9.0198e-16,
        0.46932117595418237389,
        -0.20099424927047284052,
        -0.04623946134063071740,
    ],
    [
        5.31597895759871264183,
        1.19926790417132231573,
        0.01179296240992997031,
        0.01108844528519167989,
    ],
    [
        0.18188869982170434744,
        0.05502798439925399070,
        0.09351590770535414968,
        0.00610700528898058230,
    ],
    [
        -2.0861320e-13,
        -0.13181061013830184015,
        -0.02027855540589259079,
        -0.00675951846863086359,
    ],
];

/// Bader-Blanes-Casas coefficients of the degree-18 scheme,
/// `B_i = sum_j b[i][j] [I, X, X^2, X^3, X^6]_j`.
pub(crate) const BBC18: [[f64; 5]; 5] = [
    [
        0.,
        -1.00365581030144618291e-01,
        -8.02924648241156932449e-03,
        -8.92138498045729985177e-04,
        0.,
    ],
    [
        0.,
        3.97849749499645077844e-01,
        1.36783778460411720168e+00,
        4.98289622525382669416e-01,
        -6.37898194594723280150e-04,
    ],
    [
        -1.09676396052962061844e+01,
        1.68015813878906206114e+00,
        5.71779846478865511061e-02,
        -6.98210122488052056106e-03,
        3.34975017086070470649e-05,
    ],
    [
        -9.04316832390810593223e-02,
        -6.76404519071381882256e-02,
        6.75961301770459654925e-02,
        2.95552570429315521194e-02,
        -1.39180257516060693404e-05,
    ],
    [
        0.,
        0.,
        -9.23364619367118555360e-02,
        -1.69364939002081722752e-02,
        -1.40086798182036094347e-05,
    ],
];

/// Taylor scheme of degree `m` (1, 2, 4, 8, 12 or 18).
pub(crate) fn taylor(m: usize) -> Program {
    let mut p = Builder::new();
    let x = 0;
    let t = match m {
        1 => p.lin(vec![(x, 1.0)], 1.0),
        2 => {
            let x2 = p.mm(x, x);
            p.lin(vec![(x, 1.0), (x2, 0.5)], 1.0)
        }
        4 => {
            let x2 = p.mm(x, x);
            let w = p.lin(vec![(x, 1.0 / 6.0), (x2, 1.0 / 24.0)], 0.5);
            let w = p.mm(x2, w);
            p.lin(vec![(x, 1.0), (w, 1.0)], 1.0)
        }
        8 => {
            let sqrt_177 = 0.1330413469565007072504e+2_f64;
            let x3 = 2.0 / 3.0;
            let x1 = x3 * ((1.0 + sqrt_177) / 88.0);
            let x2c = x3 * ((1.0 + sqrt_177) / 352.0);
            let x4 = (-271.0 + 29.0 * sqrt_177) / (315.0 * x3);
            let x5 = (-11.0 + 11.0 * sqrt_177) / (1260.0 * x3);
            let x6 = (-99.0 + 11.0 * sqrt_177) / (5040.0 * x3);
            // x3 squared (Bader-Blanes-Casas 2019): with a single x3, as one widely used
            // implementation has it, the scheme matches the series only up to degree 4.
            let x7 = (89.0 - sqrt_177) / (5040.0 * x3 * x3);
            let y2 = (857.0 - 58.0 * sqrt_177) / 630.0;
            let a2 = p.mm(x, x);
            let w = p.lin(vec![(x, x1), (a2, x2c)], 0.0);
            let a4 = p.mm(a2, w);
            let l = p.lin(vec![(a2, x3), (a4, 1.0)], 0.0);
            let r = p.lin(vec![(x, x5), (a2, x6), (a4, x7)], x4);
            let a8 = p.mm(l, r);
            p.lin(vec![(x, 1.0), (a2, y2), (a8, 1.0)], 1.0)
        }
        12 => {
            let x2 = p.mm(x, x);
            let x3 = p.mm(x2, x);
            let pw = [x, x2, x3];
            let b: Vec<usize> = BBC12
                .iter()
                .map(|row| p.lin((0..3).map(|j| (pw[j], row[j + 1])).collect(), row[0]))
                .collect();
            let sq = p.mm(b[3], b[3]);
            let a6 = p.lin(vec![(b[2], 1.0), (sq, 1.0)], 0.0);
            let l = p.lin(vec![(b[1], 1.0), (a6, 1.0)], 0.0);
            let prod = p.mm(l, a6);
            p.lin(vec![(b[0], 1.0), (prod, 1.0)], 0.0)
        }
        18 => {
            let x2 = p.mm(x, x);
            let x3 = p.mm(x2, x);
            let x6 = p.mm(x3, x3);
            let pw = [x, x2, x3, x6];
            let b: Vec<usize> = BBC18
                .iter()
                .map(|row| p.lin((0..4).map(|j| (pw[j], row[j + 1])).collect(), row[0]))
                .collect();
            let prod = p.mm(b[0], b[4]);
            let a9 = p.lin(vec![(b[3], 1.0), (prod, 1.0)], 0.0);
            let l = p.lin(vec![(b[2], 1.0), (a9, 1.0)], 0.0);
            let prod = p.mm(l, a9);
            p.lin(vec![(b[1], 1.0), (prod, 1.0)], 0.0)
        }
        other => unreachable!("no Taylor scheme of degree {other}"),
    };
    Program {
        steps: p.steps,
        outputs: (t, t),
        pade: false,
    }
}

/// Evaluates a program on X [N, n, n]; returns every value (value 0 is X).
pub(crate) fn evaluate<B: Backend>(program: &Program, x: Tensor<B, 3>) -> Vec<Tensor<B, 3>> {
    let [_, n, _] = x.dims();
    let eye = eye_as(n, &x);
    let mut values = vec![x];
    for step in &program.steps {
        let value = match step {
            Step::MatMul(i, j) => values[*i].clone().matmul(values[*j].clone()),
            Step::Lin(terms, eye_coef) => {
                let mut acc: Option<Tensor<B, 3>> = None;
                for &(k, c) in terms {
                    if c == 0.0 {
                        continue;
                    }
                    let term = values[k].clone().mul_scalar(c);
                    acc = Some(match acc {
                        Some(a) => a + term,
                        None => term,
                    });
                }
                let acc = acc.unwrap_or_else(|| values[0].zeros_like());
                if *eye_coef != 0.0 {
                    acc + eye.clone().mul_scalar(*eye_coef)
                } else {
                    acc
                }
            }
        };
        values.push(value);
    }
    values
}

/// Runs a program in reverse: given the adjoints of its two outputs, returns the adjoint of X.
///
/// `values` are those of [`evaluate`]. For Taylor programs both outputs are the same value, so
/// pass the adjoint once (as `bar_u`) and `None` for `bar_v`.
pub(crate) fn reverse<B: Backend>(
    program: &Program,
    values: &[Tensor<B, 3>],
    bar_u: Tensor<B, 3>,
    bar_v: Option<Tensor<B, 3>>,
) -> Tensor<B, 3> {
    let mut bars: Vec<Option<Tensor<B, 3>>> = vec![None; values.len()];
    accumulate(&mut bars, program.outputs.0, bar_u);
    if let Some(bar_v) = bar_v {
        accumulate(&mut bars, program.outputs.1, bar_v);
    }
    for (k, step) in program.steps.iter().enumerate().rev() {
        let out = k + 1;
        let Some(bar) = bars[out].take() else {
            continue;
        };
        match step {
            Step::MatMul(i, j) => {
                let (vi, vj) = (values[*i].clone(), values[*j].clone());
                accumulate(&mut bars, *i, bar.clone().matmul(vj.transpose()));
                accumulate(&mut bars, *j, vi.transpose().matmul(bar));
            }
            Step::Lin(terms, _) => {
                for &(i, c) in terms {
                    if c != 0.0 {
                        accumulate(&mut bars, i, bar.clone().mul_scalar(c));
                    }
                }
            }
        }
    }
    bars[0].take().unwrap_or_else(|| values[0].zeros_like())
}

fn accumulate<B: Backend>(bars: &mut [Option<Tensor<B, 3>>], i: usize, g: Tensor<B, 3>) {
    bars[i] = Some(match bars[i].take() {
        Some(acc) => acc + g,
        None => g,
    });
}

/// Identity [1, n, n] in the dtype and on the device of `like`.
pub(crate) fn eye_as<B: Backend, const D: usize>(n: usize, like: &Tensor<B, D>) -> Tensor<B, 3> {
    Tensor::<B, 2>::eye(n, &like.device())
        .cast(like.dtype())
        .unsqueeze_dim::<3>(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a program on a scalar x (1x1 matrices) in f64 on the host.
    fn scalar(program: &Program, x: f64) -> (f64, f64) {
        let mut v = vec![x];
        for step in &program.steps {
            let y = match step {
                Step::MatMul(i, j) => v[*i] * v[*j],
                Step::Lin(terms, e) => terms.iter().map(|&(k, c)| c * v[k]).sum::<f64>() + e,
            };
            v.push(y);
        }
        (v[program.outputs.0], v[program.outputs.1])
    }

    #[test]
    fn schemes_use_the_stated_number_of_products() {
        let count = |p: &Program| {
            p.steps
                .iter()
                .filter(|s| matches!(s, Step::MatMul(..)))
                .count()
        };
        for (m, k) in [(3, 2), (5, 3), (7, 4), (9, 5), (13, 6)] {
            assert_eq!(count(&pade(m)), k, "Padé {m}");
        }
        for (m, k) in [(1, 0), (2, 1), (4, 2), (8, 3), (12, 4), (18, 5)] {
            assert_eq!(count(&taylor(m)), k, "Taylor {m}");
        }
    }

    #[test]
    fn taylor_schemes_match_the_series() {
        // At small x the schemes agree with exp(x) to their order; at x = 1 the degree-18
        // scheme equals the truncated series to rounding.
        for m in [1usize, 2, 4, 8, 12, 18] {
            let x = 0.01;
            let (t, _) = scalar(&taylor(m), x);
            let truncated: f64 = (0..=m)
                .map(|k| x.powi(k as i32) / (1..=k).map(|i| i as f64).product::<f64>())
                .sum();
            assert!(
                (t - truncated).abs() < 1e-15,
                "degree {m}: {t} vs {truncated}"
            );
        }
        let (t, _) = scalar(&taylor(18), 1.0);
        let truncated: f64 = (0..=18)
            .map(|k| 1.0 / (1..=k).map(|i| i as f64).product::<f64>())
            .sum();
        assert!((t - truncated).abs() < 1e-14, "{t} vs {truncated}");
    }

    #[test]
    fn pade_schemes_approximate_exp() {
        for (m, x) in [(3, 0.01), (5, 0.2), (7, 0.9), (9, 2.0), (13, 5.0)] {
            let (u, v) = scalar(&pade(m), x);
            let r = (v + u) / (v - u);
            // (V - U) loses a few digits to cancellation at the top of each degree's range.
            assert!((r / x.exp() - 1.0).abs() < 1e-13, "degree {m}: {r}");
        }
    }
}
