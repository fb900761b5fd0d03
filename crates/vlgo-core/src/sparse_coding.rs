//! Exact sparse inference of transport coefficients with FISTA (Beck and Teboulle, 2009), the
//! baseline the variational encoder replaces (Culpepper and Olshausen's alternating scheme:
//! infer c per batch with the operators fixed, then step the operators with c fixed).
//!
//! Per datum n it solves min_c ||z1_n - T(c) z0_n||^2 + l1 ||c||_1, starting from c = 0. The
//! smooth part's gradient runs through the same transport (and so the same matrix-exponential
//! code and backward) that the variational methods train with.

use burn::prelude::*;

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = crate::error::Result<T>;
use crate::error::VlgoError;
use crate::expm::ExpmBackend;
use crate::operators::LieOperators;

/// Settings of [`fista`].
#[derive(Config, Debug)]
pub struct FistaConfig {
    /// Weight of the l1 penalty on sum_m |c_m| (>= 0).
    #[config(default = 0.6)]
    pub l1: f64,
    /// Stop when ||c_k - c_{k-1}|| <= tolerance * max(||c_{k-1}||, 1e-8), norms over the batch.
    #[config(default = 1e-4)]
    pub tolerance: f64,
    /// Stop after this many iterations at the latest (>= 1).
    #[config(default = 300)]
    pub max_iterations: usize,
    /// Starting estimate of each datum's Lipschitz constant (> 0).
    #[config(default = 1.0)]
    pub initial_lipschitz: f64,
    /// Factor by which backtracking raises the Lipschitz estimate (> 1).
    #[config(default = 2.0)]
    pub backtracking_factor: f64,
    /// Backtracking rounds per iteration at most (a datum whose estimate is still too small then
    /// takes the step anyway).
    #[config(default = 64)]
    pub max_backtracks: usize,
}

impl FistaConfig {
    /// Checks every setting.
    ///
    /// ```
    /// use vlgo_core::FistaConfig;
    /// assert!(FistaConfig::new().validate().is_ok());
    /// assert!(FistaConfig::new().with_l1(-1.0).validate().is_err());
    /// assert!(FistaConfig::new().with_max_iterations(0).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        let checks = [
            (
                "fista l1",
                self.l1,
                self.l1 >= 0.0,
                "must be finite and >= 0",
            ),
            (
                "fista tolerance",
                self.tolerance,
                self.tolerance >= 0.0,
                "must be finite and >= 0",
            ),
            (
                "fista initial_lipschitz",
                self.initial_lipschitz,
                self.initial_lipschitz > 0.0,
                "must be finite and > 0",
            ),
            (
                "fista backtracking_factor",
                self.backtracking_factor,
                self.backtracking_factor > 1.0,
                "must be finite and > 1",
            ),
        ];
        for (name, value, ok, why) in checks {
            if !(ok && value.is_finite()) {
                return Err(VlgoError::invalid(name, value, why));
            }
        }
        for (name, value) in [
            ("fista max_iterations", self.max_iterations),
            ("fista max_backtracks", self.max_backtracks),
        ] {
            if value == 0 {
                return Err(VlgoError::invalid(name, 0, "must be >= 1"));
            }
        }
        Ok(())
    }
}

/// What [`fista`] found.
#[derive(Debug, Clone)]
pub struct FistaSolution<B: Backend> {
    /// The sparse coefficients, [N, M] (no gradient).
    pub coefficients: Tensor<B, 2>,
    /// Iterations run.
    pub iterations: usize,
    /// Whether the tolerance was met before `max_iterations`.
    pub converged: bool,
    /// Backtracking trials run (each one evaluation of the smooth part without gradient).
    pub trials: usize,
}

/// Solves min_c ||z1_n - T(c) z0_n||^2 + l1 ||c||_1 for every datum n of the batch with FISTA,
/// starting from zero, with the operators held fixed.
///
/// Each datum keeps its own Lipschitz estimate, raised by backtracking until the sufficient
/// decrease f(p) <= f(y) + <p - y, grad f(y)> + L/2 ||p - y||^2 holds for it (the problems are
/// independent, so one stiff datum does not shrink everyone's step). The gradient of the smooth
/// part comes from the exponential's own backward through
/// [`LieOperators::transport_pullback`] (the code an autodiff graph would run, without building
/// one), so call it on a plain backend, e.g. the inner backend of a training model.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use vlgo_core::{FistaConfig, LieOperatorsConfig, fista};
///
/// type B = NdArray;
/// let device = Default::default();
/// let ops = LieOperatorsConfig::new(2, 4).init::<B>(&device).unwrap();
/// let z = Tensor::<B, 2>::ones([3, 4], &device);
/// // z1 = z0: nothing to explain, so the sparsest answer c = 0 is optimal.
/// let solution = fista(&ops, z.clone(), z, &FistaConfig::new()).unwrap();
/// assert_eq!(solution.coefficients.abs().max().into_scalar(), 0.0);
/// ```
pub fn fista<B: ExpmBackend>(
    operators: &LieOperators<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    config: &FistaConfig,
) -> VlgoResult<FistaSolution<B>> {
    config.validate()?;
    if z0.dims() != z1.dims() || z0.dims()[1] != operators.dim {
        return Err(VlgoError::ShapeMismatch {
            op: "fista",
            what: "z0 and z1 must both be [N, d] with d the operators' dimension",
            lhs: z0.dims().to_vec(),
            rhs: z1.dims().to_vec(),
        });
    }
    let [n, _] = z0.dims();
    let m = operators.num_operators();
    let device = z0.device();
    let (z0, z1) = (z0.detach(), z1.detach());
    let smooth = |c: Tensor<B, 2>| -> VlgoResult<Tensor<B, 1>> {
        Ok((operators.transport(c, z0.clone())? - z1.clone())
            .square()
            .sum_dim(1)
            .reshape([n]))
    };
    let l1 = config.l1;
    let shrink = |v: Tensor<B, 2>, step: Tensor<B, 2>| {
        let cut = step * l1;
        v.clone().sign() * (v.abs() - cut).clamp_min(0.0)
    };

    let target_norms = z1.clone().square().sum_dim(1).sqrt().reshape([n]);
    let mut c = Tensor::<B, 2>::zeros([n, m], &device);
    let mut y = c.clone();
    let mut t = 1.0f64;
    let mut trials = 0;
    let mut lipschitz = Tensor::<B, 1>::full([n], config.initial_lipschitz, &device);
    for k in 1..=config.max_iterations {
        let (moved, pullback) = operators.transport_pullback(y.clone(), z0.clone())?;
        let r = moved - z1.clone();
        let fy = r.clone().square().sum_dim(1).reshape([n]);
        let grad = pullback.coefficients(r * 2.0)?;

        // Rounding noise of f = ||r||^2 is about 2 ||r|| eps ||z1|| (the residual is a
        // difference of vectors of size ||z1||): without this slack, a datum fitted to within
        // rounding fails every test and its step shrinks to nothing.
        let slack = (fy.clone().sqrt() * target_norms.clone() + fy.clone()) * 1e-6;
        let mut p = y.clone();
        for _ in 0..config.max_backtracks {
            let step = lipschitz.clone().recip().unsqueeze_dim::<2>(1);
            p = shrink(y.clone() - grad.clone() * step.clone(), step);
            let d = p.clone() - y.clone();
            let model = fy.clone()
                + (d.clone() * grad.clone()).sum_dim(1).reshape([n])
                + lipschitz.clone() * d.square().sum_dim(1).reshape([n]) * 0.5;
            // NaN (an overflowing trial) counts as a failure, so the step shrinks.
            trials += 1;
            let fails = smooth(p.clone())?
                .lower_equal(model + slack.clone())
                .bool_not();
            if !fails.clone().any().into_scalar().to_bool() {
                break;
            }
            let raised = lipschitz.clone() * config.backtracking_factor;
            lipschitz = lipschitz.mask_where(fails, raised);
        }

        let change = (p.clone() - c.clone())
            .square()
            .sum()
            .sqrt()
            .into_scalar()
            .to_f64();
        let size = c.clone().square().sum().sqrt().into_scalar().to_f64();
        let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
        y = p.clone() + (p.clone() - c) * ((t - 1.0) / t_next);
        c = p;
        t = t_next;
        if change <= config.tolerance * size.max(1e-8) {
            return Ok(FistaSolution {
                coefficients: c,
                iterations: k,
                converged: true,
                trials,
            });
        }
    }
    Ok(FistaSolution {
        coefficients: c,
        iterations: config.max_iterations,
        converged: false,
        trials,
    })
}
