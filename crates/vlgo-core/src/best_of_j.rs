//! Best-of-J sample selection (the paper's best-of-J training).

use burn::module::Module;
use burn::prelude::*;

use crate::error::{Result, VlgoError};
use crate::expm::{ExpmBackend, ExpmvConfig};
use crate::laplace::{LaplaceParams, Threshold, sample};
use crate::operators::{LieOperators, TransportMethod};
use crate::rng::NoiseStreams;

/// Generator entries (candidates x N x S x b x b) evaluated in one stacked transport: small
/// problems evaluate all J candidates at once (a few large tensor ops instead of many small
/// ones), large ones one at a time, so memory stays bounded whatever J is.
const CANDIDATE_BUDGET: usize = 1 << 22;

/// The selected coefficients and which candidate won per datum.
#[derive(Debug, Clone)]
pub struct BestOfJ<B: Backend> {
    /// The winner re-formed with gradient to location and scale, [N, M].
    pub coefficients: Tensor<B, 2>,
    /// The winning noise draw, [N, M] (U(-1/2, 1/2)).
    pub noise: Tensor<B, 2>,
    /// Index of the winning candidate per datum, `[N]`, left on the device (a training step
    /// does not wait for it): [`BestOfJ::winners`] reads it.
    pub winner: Tensor<B, 1, Int>,
    /// Reconstruction error ||T(c) z0 - z1||^2 of the winner per datum, `[N]` (no gradient;
    /// +inf where no candidate's transport is finite).
    pub error: Tensor<B, 1>,
}

impl<B: Backend> BestOfJ<B> {
    /// The winners' indices read back to the host.
    pub fn winners(&self) -> Vec<usize> {
        self.winner
            .clone()
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .expect("an int tensor converts to i64")
            .into_iter()
            .map(|x| x as usize)
            .collect()
    }
}

/// Draws J candidate samples, keeps per datum the one whose transport T(c_j) z0 lands nearest
/// z1, and re-forms only that one with gradient.
///
/// The candidates are evaluated without gradient (detached parameters and features, operators
/// without grad) in chunks stacked along the batch (at most 2^22 generator entries per chunk),
/// keeping a running minimum: memory does not grow with J, and only the winner enters the
/// autodiff graph. `draws` yields J uniform tensors U(-1/2, 1/2) of
/// shape [N, M]; [`best_of_j_seeded`] draws them from host streams.
pub fn best_of_j<B: ExpmBackend>(
    operators: &LieOperators<B>,
    params: &LaplaceParams<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    threshold: &Threshold,
    draws: impl IntoIterator<Item = Tensor<B, 2>>,
) -> Result<BestOfJ<B>> {
    best_of_j_with(
        operators,
        params,
        z0,
        z1,
        threshold,
        draws,
        TransportMethod::Expmv,
    )
}

/// [`best_of_j`] with the candidates' transport method. With
/// [`TransportMethod::Generated`] the GPU backends form each candidate's generators inside the
/// kernel, so no candidate generator is ever stored (the chunks are sized as for the other
/// methods, which form them).
pub fn best_of_j_with<B: ExpmBackend>(
    operators: &LieOperators<B>,
    params: &LaplaceParams<B>,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    threshold: &Threshold,
    draws: impl IntoIterator<Item = Tensor<B, 2>>,
    method: TransportMethod,
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
    let (s, b) = operators.blocks();
    // Sized by the generators whatever the method: `Generated` forms them too wherever the
    // backend has no kernel for it (the CPU backends, large blocks, small shared memory).
    let chunk = (CANDIDATE_BUDGET / (n * s * b * b).max(1)).max(1);
    let mut draws = draws.into_iter();
    let mut best: Option<(Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1>)> = None;
    let mut first = 0;
    loop {
        // Draws are taken lazily, one chunk at a time, so memory stays bounded whatever J is.
        let group = draws
            .by_ref()
            .take(chunk)
            .map(|u| {
                if u.dims() != [n, m] {
                    return Err(VlgoError::Shape {
                        op: "best_of_j",
                        expected: format!("noise draws [N, M] = [{n}, {m}]"),
                        got: u.dims().to_vec(),
                    });
                }
                Ok(u.detach())
            })
            .collect::<Result<Vec<_>>>()?;
        if group.is_empty() {
            break;
        }
        let k = group.len();
        let u = Tensor::cat(group, 0);
        let stacked = LaplaceParams {
            loc: fixed.loc.clone().repeat_dim(0, k),
            log_scale: fixed.log_scale.clone().repeat_dim(0, k),
        };
        let c = sample(&stacked, u.clone(), threshold);
        let err = (frozen.transport_with(
            c,
            z0d.clone().repeat_dim(0, k),
            method,
            &ExpmvConfig::default(),
        )? - z1d.clone().repeat_dim(0, k))
        .square()
        .sum_dim(1)
        .reshape([k, n]);
        // A NaN error (a non-finite transport) must never win, and backends order NaN
        // differently in a minimum: it counts as +inf. "Not below +inf" is the test, an ordered
        // comparison that is false for NaN everywhere (NdArray's vectorised `not_equal`, which
        // `is_nan` uses, does not see NaN).
        let finite = err.clone().lower_elem(f32::INFINITY);
        let err = err.mask_fill(finite.bool_not(), f32::INFINITY);
        // Ties go to the earlier candidate, within a chunk (argmin) and across chunks (strict <).
        let (err, idx) = err.min_dim_with_indices(0);
        let err = err.reshape([n]);
        let u = u
            .reshape([k, n, m])
            .gather(0, idx.clone().reshape([1, n, 1]).repeat_dim(2, m))
            .reshape([n, m]);
        let idx = idx.reshape([n]).float() + first as f64;
        first += k;
        best = Some(match best {
            None => (u, err, idx),
            Some((bu, berr, bidx)) => {
                let better = err.clone().lower(berr.clone());
                let bu = bu.mask_where(better.clone().unsqueeze_dim::<2>(1).expand([n, m]), u);
                let bidx = bidx.mask_where(better.clone(), idx);
                (bu, berr.mask_where(better, err), bidx)
            }
        });
    }
    let (noise, error, index) = best.ok_or(VlgoError::invalid(
        "best_of_j J",
        0,
        "at least one candidate is needed",
    ))?;
    let winner = index.int();
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
