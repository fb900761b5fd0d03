//! Exact sparse inference of transport coefficients with FISTA (Beck and Teboulle, 2009), the
//! baseline the variational encoder replaces (Culpepper and Olshausen's alternating scheme:
//! infer c per batch with the operators fixed, then step the operators with c fixed).
//!
//! Per datum n it solves min_c ||z1_n - T(c) z0_n||^2 + l1 ||c||_1, starting from c = 0. The
//! smooth part's gradient runs through the same transport (and so the same matrix-exponential
//! code and backward) that the variational methods train with.

use std::sync::{Condvar, Mutex, MutexGuard};

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
    /// Row chunks of the batch solved at once, each on its own thread (>= 1). The data's
    /// problems are independent and only the stopping rule is shared (the chunks exchange their
    /// squared norms every iteration, summed in chunk order), so every chunk count runs the same
    /// arithmetic per datum: the coefficients are bit for bit those of one thread wherever the
    /// backend rounds a row of a product independently of the rows around it (Flex), and equal
    /// to rounding elsewhere (NdArray's matmul tiles). Worth it on a CPU backend with spare
    /// cores, where a batch of small problems leaves all but one core idle (about 1.3x on 2
    /// cores for 500 3 x 3 problems: per-iteration tensor-op costs do not shrink with the
    /// chunk); keep 1 on a GPU.
    #[config(default = 1)]
    pub threads: usize,
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
            ("fista threads", self.threads),
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
    /// Backtracking trials run (each one evaluation of the smooth part without gradient), summed
    /// over the chunks when [`FistaConfig::threads`] splits the batch.
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
    if z0.dims() != z1.dims() || z0.dims()[1] != operators.dim() {
        return Err(VlgoError::ShapeMismatch {
            op: "fista",
            what: "z0 and z1 must both be [N, d] with d the operators' dimension",
            lhs: z0.dims().to_vec(),
            rhs: z1.dims().to_vec(),
        });
    }
    let n = z0.dims()[0];
    let (z0, z1) = (z0.detach(), z1.detach());
    let chunks = config.threads.min(n).max(1);
    let rendezvous = Rendezvous::new(chunks);
    if chunks == 1 {
        return solve(operators, z0, z1, config, &rendezvous, 0)
            .map(|part| part.expect("a lone chunk is never stopped by another"));
    }
    let bounds: Vec<usize> = (0..=chunks).map(|i| i * n / chunks).collect();
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let (a, b) = (w[0], w[1]);
                let (ops, x0, x1) = (
                    operators.clone(),
                    z0.clone().narrow(0, a, b - a),
                    z1.clone().narrow(0, a, b - a),
                );
                let rendezvous = &rendezvous;
                scope.spawn(move || {
                    // A failed or panicking chunk releases the others from the rendezvous.
                    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        solve(&ops, x0, x1, config, rendezvous, i)
                    }));
                    if !matches!(run, Ok(Ok(Some(_)))) {
                        rendezvous.abort();
                    }
                    run
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<Vec<_>>()
    });
    let mut solved = Vec::with_capacity(chunks);
    let mut first_error = None;
    for part in parts {
        match part {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Ok(Ok(Some(part))) => solved.push(part),
            Ok(Ok(None)) => {}
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let first = &solved[0];
    let (iterations, converged) = (first.iterations, first.converged);
    let trials = solved.iter().map(|p| p.trials).sum();
    Ok(FistaSolution {
        coefficients: Tensor::cat(solved.into_iter().map(|p| p.coefficients).collect(), 0),
        iterations,
        converged,
        trials,
    })
}

/// FISTA on one chunk of the batch; `None` when another chunk failed first.
fn solve<B: ExpmBackend>(
    operators: &LieOperators<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    config: &FistaConfig,
    rendezvous: &Rendezvous,
    chunk: usize,
) -> VlgoResult<Option<FistaSolution<B>>> {
    let [n, _] = z0.dims();
    let m = operators.num_operators();
    let device = z0.device();
    let smooth = |c: Tensor<B, 2>| -> VlgoResult<Tensor<B, 1>> {
        Ok((operators.try_transport(c, z0.clone())? - z1.clone())
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
        let (moved, pullback) = operators.try_transport_pullback(y.clone(), z0.clone())?;
        let r = moved - z1.clone();
        let fy = r.clone().square().sum_dim(1).reshape([n]);
        let grad = pullback.try_coefficients(r * 2.0)?;

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

        let squares = [
            (p.clone() - c.clone())
                .square()
                .sum()
                .into_scalar()
                .to_f64(),
            c.clone().square().sum().into_scalar().to_f64(),
        ];
        let Some([change, size]) = rendezvous.totals(chunk, squares) else {
            return Ok(None);
        };
        let (change, size) = (change.sqrt(), size.sqrt());
        let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
        y = p.clone() + (p.clone() - c) * ((t - 1.0) / t_next);
        c = p;
        t = t_next;
        if change <= config.tolerance * size.max(1e-8) {
            return Ok(Some(FistaSolution {
                coefficients: c,
                iterations: k,
                converged: true,
                trials,
            }));
        }
    }
    Ok(Some(FistaSolution {
        coefficients: c,
        iterations: config.max_iterations,
        converged: false,
        trials,
    }))
}

/// Where the chunks of one FISTA solve meet every iteration to add up the batch's squared norms
/// (in chunk order, so the sums do not depend on which thread arrives first).
struct Rendezvous {
    state: Mutex<Round>,
    turn: Condvar,
}

struct Round {
    parts: Vec<[f64; 2]>,
    arrived: usize,
    generation: u64,
    totals: [f64; 2],
    aborted: bool,
}

impl Rendezvous {
    fn new(chunks: usize) -> Self {
        Self {
            state: Mutex::new(Round {
                parts: vec![[0.0; 2]; chunks],
                arrived: 0,
                generation: 0,
                totals: [0.0; 2],
                aborted: false,
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Round> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This chunk's part in, the batch's totals out once every chunk has given its part; `None`
    /// when a chunk gave up.
    fn totals(&self, chunk: usize, part: [f64; 2]) -> Option<[f64; 2]> {
        let mut round = self.lock();
        if round.aborted {
            return None;
        }
        round.parts[chunk] = part;
        round.arrived += 1;
        if round.arrived == round.parts.len() {
            round.totals = round
                .parts
                .iter()
                .fold([0.0; 2], |t, p| [t[0] + p[0], t[1] + p[1]]);
            round.arrived = 0;
            round.generation += 1;
            self.turn.notify_all();
            return Some(round.totals);
        }
        let generation = round.generation;
        while round.generation == generation && !round.aborted {
            round = self.turn.wait(round).unwrap_or_else(|e| e.into_inner());
        }
        (!round.aborted).then_some(round.totals)
    }

    fn abort(&self) {
        self.lock().aborted = true;
        self.turn.notify_all();
    }
}
