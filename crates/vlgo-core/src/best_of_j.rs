//! Best-of-J sample selection (design note `math.md`, section 2).

use burn::module::Module;
use burn::prelude::*;

use crate::error::{Result, VlgoError};
use crate::expm::ExpmBackend;
use crate::laplace::{LaplaceParams, Threshold, sample};
use crate::operators::LieOperators;
use crate::rng::NoiseStreams;

/// The selected coefficients and which candidate won per datum.
#[derive(Debug, Clone)]
pub struct BestOfJ<B: Backend> {
    /// The winner re-formed with gradient to location and scale, [N, M].
    pub coefficients: Tensor<B, 2>,
    /// The winning noise draw, [N, M] (U(-1/2, 1/2)).
    pub noise: Tensor<B, 2>,
    /// Index of the winning candidate per datum.
    pub winner: Vec<usize>,
    /// Reconstruction error ||T(c) z0 - z1||^2 of the winner per datum, [N] (no gradient).
    pub error: Tensor<B, 1>,
}

/// Draws J candidate samples, keeps per datum the one whose transport T(c_j) z0 lands nearest
/// z1, and re-forms only that one with gradient.
///
/// The candidates are evaluated without gradient (detached parameters and features, operators
/// without grad) and one at a time, keeping a running minimum: memory does not grow with J, and
/// only the winner enters the autodiff graph. `draws` yields J uniform tensors U(-1/2, 1/2) of
/// shape [N, M]; [`best_of_j_seeded`] draws them from host streams.
pub fn best_of_j<B: ExpmBackend>(
    operators: &LieOperators<B>,
    params: &LaplaceParams<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    threshold: &Threshold,
    draws: impl IntoIterator<Item = Tensor<B, 2>>,
) -> Result<BestOfJ<B>> {
    let [n, m] = params.dims();
    if z0.dims() != z1.dims() || z0.dims()[0] != n {
        return Err(VlgoError::ShapeMismatch {
            op: "best_of_j",
            what: "z0 and z1 must both be [N, d] with N the coefficients' batch",
            lhs: z0.dims().to_vec(),
            rhs: z1.dims().to_vec(),
        });
    }
    let frozen = operators.clone().no_grad();
    let fixed = params.detach();
    let (z0d, z1d) = (z0.detach(), z1.detach());
    let mut best: Option<(Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1>)> = None;
    for (j, u) in draws.into_iter().enumerate() {
        if u.dims() != [n, m] {
            return Err(VlgoError::Shape {
                op: "best_of_j",
                expected: format!("noise draws [N, M] = [{n}, {m}]"),
                got: u.dims().to_vec(),
            });
        }
        let u = u.detach();
        let c = sample(&fixed, u.clone(), threshold);
        let err = (frozen.transport(c, z0d.clone())? - z1d.clone())
            .square()
            .sum_dim(1)
            .reshape([n]);
        best = Some(match best {
            None => (u, err, Tensor::zeros([n], &z0d.device())),
            Some((bu, berr, bidx)) => {
                let better = err.clone().lower(berr.clone());
                let bu = bu.mask_where(better.clone().unsqueeze_dim::<2>(1).expand([n, m]), u);
                let bidx = bidx.mask_fill(better.clone(), j as f64);
                (bu, berr.mask_where(better, err), bidx)
            }
        });
    }
    let (noise, error, index) = best.ok_or(VlgoError::invalid(
        "best_of_j J",
        0,
        "at least one candidate is needed",
    ))?;
    let winner = index
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float tensor converts to f64")
        .into_iter()
        .map(|x| x as usize)
        .collect();
    let coefficients = sample(params, noise.clone(), threshold);
    Ok(BestOfJ {
        coefficients,
        noise,
        winner,
        error,
    })
}

/// [`best_of_j`] with the J draws taken from host streams keyed by (step, j), so that a resumed
/// run draws the same numbers.
#[allow(clippy::too_many_arguments)]
pub fn best_of_j_seeded<B: ExpmBackend>(
    operators: &LieOperators<B>,
    params: &LaplaceParams<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    threshold: &Threshold,
    streams: &NoiseStreams,
    step: u64,
    samples: usize,
) -> Result<BestOfJ<B>> {
    let [n, m] = params.dims();
    let device = z0.device();
    let draws = (0..samples as u64).map(|j| {
        let u = streams.uniform_centered(step, j, n * m);
        Tensor::<B, 1>::from_floats(u.as_slice(), &device).reshape([n, m])
    });
    best_of_j(operators, params, z0, z1, threshold, draws)
}
