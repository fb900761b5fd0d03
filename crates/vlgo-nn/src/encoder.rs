//! The coefficient encoder q(c | z0, z1).

use burn::prelude::*;
use vlgo_core::{FixedPrior, LaplaceParams, VlgoError};

use crate::mlp::{LaplaceHeads, Mlp};

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = vlgo_core::Result<T>;

/// Configuration of a [`CoefficientEncoder`]: MLP 2d -> 4F -> 4F -> F with LeakyReLU, then
/// location and log-scale heads F -> M.
#[derive(Config, Debug)]
pub struct CoefficientEncoderConfig {
    /// Feature dimension d (the input is cat(z0, z1), 2d).
    pub feature_dim: usize,
    /// Number of coefficients M.
    pub num_operators: usize,
    /// Width F (512 for images).
    #[config(default = 512)]
    pub width: usize,
    /// The fixed prior whose shift and log-scale offset the heads.
    #[config(default = "FixedPrior::default()")]
    pub prior: FixedPrior,
    /// A fixed standardisation of both inputs before the MLP (none by default).
    #[config(default = "None")]
    pub input_norm: Option<InputNorm>,
}

/// A fixed, untrained standardisation (z - mean) / std of the encoder's inputs, per feature:
/// for data whose coordinates are large or of unequal scales (the swiss roll's reach about 14),
/// which a network at a fixed learning rate reads badly. The transport still acts on the raw
/// features; only what the encoder sees changes.
///
/// ```
/// use vlgo_nn::InputNorm;
/// // Two points in 2-d: the first coordinate has mean 2 and deviation 1, the second is constant.
/// let norm = InputNorm::of_rows(&[1.0, 5.0, 3.0, 5.0], 2).unwrap();
/// assert_eq!(norm.mean, vec![2.0, 5.0]);
/// assert_eq!(norm.std, vec![1.0, 1.0]); // a constant feature keeps its scale
/// assert!(InputNorm::new(vec![0.0], vec![0.0]).validate(1).is_err());
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct InputNorm {
    /// Per-feature mean, subtracted.
    pub mean: Vec<f64>,
    /// Per-feature standard deviation (> 0), divided by.
    pub std: Vec<f64>,
}

impl InputNorm {
    /// The mean and (population) standard deviation of each of `dim` features over the rows of
    /// `values` (row-major); a feature without spread gets a deviation of 1.
    pub fn of_rows(values: &[f32], dim: usize) -> VlgoResult<Self> {
        if dim == 0 || values.is_empty() || !values.len().is_multiple_of(dim) {
            return Err(VlgoError::invalid(
                "input rows",
                format!("{} values of dimension {dim}", values.len()),
                "at least one whole row of dimension >= 1",
            ));
        }
        let rows = (values.len() / dim) as f64;
        let mut mean = vec![0.0f64; dim];
        for row in values.chunks_exact(dim) {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += f64::from(*v) / rows;
            }
        }
        let mut var = vec![0.0f64; dim];
        for row in values.chunks_exact(dim) {
            for ((s, v), m) in var.iter_mut().zip(row).zip(&mean) {
                *s += (f64::from(*v) - m).powi(2) / rows;
            }
        }
        let std = var
            .into_iter()
            .map(|v| if v > 0.0 { v.sqrt() } else { 1.0 })
            .collect();
        Ok(Self { mean, std })
    }

    /// Checks that both vectors have `dim` finite entries and every deviation is > 0.
    pub fn validate(&self, dim: usize) -> VlgoResult<()> {
        if self.mean.len() != dim || self.std.len() != dim {
            return Err(VlgoError::invalid(
                "input_norm",
                format!(
                    "{} means and {} deviations for {dim} features",
                    self.mean.len(),
                    self.std.len()
                ),
                "one of each per feature",
            ));
        }
        let bad = self
            .mean
            .iter()
            .find(|m| !m.is_finite())
            .copied()
            .or_else(|| {
                self.std
                    .iter()
                    .find(|s| !(s.is_finite() && **s > 0.0))
                    .copied()
            });
        match bad {
            Some(v) => Err(VlgoError::invalid(
                "input_norm",
                v,
                "finite means and finite deviations > 0",
            )),
            None => Ok(()),
        }
    }
}

/// Checks that named sizes are >= 1.
pub(crate) fn check_sizes(sizes: &[(&'static str, usize)]) -> VlgoResult<()> {
    match sizes.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(VlgoError::invalid(name, 0, "must be >= 1")),
        None => Ok(()),
    }
}

impl CoefficientEncoderConfig {
    /// Checks sizes and the prior.
    ///
    /// ```
    /// use vlgo_nn::CoefficientEncoderConfig;
    /// assert!(CoefficientEncoderConfig::new(3, 6).with_width(16).validate().is_ok());
    /// assert!(CoefficientEncoderConfig::new(3, 0).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        check_sizes(&[
            ("encoder feature_dim (d)", self.feature_dim),
            ("encoder num_operators (M)", self.num_operators),
            ("encoder width (F)", self.width),
        ])?;
        if let Some(norm) = &self.input_norm {
            norm.validate(self.feature_dim)?;
        }
        self.prior.validate()
    }

    /// Builds the encoder.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlgoResult<CoefficientEncoder<B>> {
        self.validate()?;
        let (d, f) = (self.feature_dim, self.width);
        Ok(CoefficientEncoder {
            mlp: Mlp::new(&[2 * d, 4 * f, 4 * f, f], device),
            heads: LaplaceHeads::new(f, self.num_operators, device),
            shift: self.prior.shift,
            ln_scale: self.prior.scale.ln(),
            feature_dim: d,
            input_norm: self.input_norm.as_ref().map(|n| {
                let shift = n.mean.iter().map(|&m| m as f32).collect();
                let inv = n.std.iter().map(|&s| (1.0 / s) as f32).collect();
                (shift, inv)
            }),
        })
    }
}

/// q(c | z0, z1): Laplace location and log-scale per coefficient from a feature pair.
#[derive(Module, Debug)]
pub struct CoefficientEncoder<B: Backend> {
    mlp: Mlp<B>,
    heads: LaplaceHeads<B>,
    #[module(skip)]
    shift: f64,
    #[module(skip)]
    ln_scale: f64,
    #[module(skip)]
    feature_dim: usize,
    /// Per-feature mean and inverse deviation of [`InputNorm`].
    #[module(skip)]
    input_norm: Option<(Vec<f32>, Vec<f32>)>,
}

impl<B: Backend> CoefficientEncoder<B> {
    /// Encodes the pair: input cat(sg(z0), sg(z1)); mu = clamp(h_mu, -5, 5) + shift_prior,
    /// log_s = clamp(h_s, -100, 3) + ln(scale_prior). Panics unless z0 and z1 are both [N, d];
    /// [`try_forward`](Self::try_forward) returns an error instead.
    pub fn forward(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> LaplaceParams<B> {
        self.try_forward(z0, z1).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`forward`](Self::forward): an error, not a panic, for inputs of the wrong shape.
    pub fn try_forward(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        let d = self.feature_dim;
        if z0.dims() != z1.dims() || z0.dims()[1] != d {
            return Err(VlgoError::ShapeMismatch {
                op: "CoefficientEncoder::forward",
                what: "z0 and z1 must both be [N, d] with d the encoder's feature_dim",
                lhs: z0.dims().to_vec(),
                rhs: z1.dims().to_vec(),
            });
        }
        let (z0, z1) = match &self.input_norm {
            Some((shift, inv)) => {
                let device = z0.device();
                let row = |v: &[f32]| Tensor::<B, 1>::from_floats(v, &device).reshape([1, d]);
                let (shift, inv) = (row(shift), row(inv));
                let norm = |z: Tensor<B, 2>| (z - shift.clone()) * inv.clone();
                (norm(z0), norm(z1))
            }
            None => (z0, z1),
        };
        let h = self
            .mlp
            .forward(Tensor::cat(vec![z0.detach(), z1.detach()], 1));
        let (mu, log_s) = self.heads.forward(h);
        LaplaceParams::new(
            mu.clamp(-5.0, 5.0) + self.shift,
            log_s.clamp(-100.0, 3.0) + self.ln_scale,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vlgo_core::testing::TestBackend as B;

    #[test]
    fn the_norm_is_the_plain_encoder_on_standardised_inputs() {
        let device = Default::default();
        let norm = InputNorm::new(vec![1.0, -2.0, 10.0], vec![2.0, 0.5, 4.0]);
        let with = CoefficientEncoderConfig::new(3, 2)
            .with_width(4)
            .with_input_norm(Some(norm))
            .init::<B>(&device)
            .unwrap();
        let z0 = Tensor::<B, 2>::from_floats([[3.0, -1.0, 14.0], [0.0, -2.5, 2.0]], &device);
        let z1 = Tensor::<B, 2>::from_floats([[1.0, 0.0, 6.0], [5.0, -3.0, 10.0]], &device);
        // Parameters initialise lazily, each clone on its own: a forward pass fixes them first.
        let a = with.try_forward(z0.clone(), z1.clone()).unwrap();
        let mut without = with.clone();
        without.input_norm = None;
        let standard = |z: Tensor<B, 2>| {
            let mean = Tensor::<B, 1>::from_floats([1.0, -2.0, 10.0], &device).reshape([1, 3]);
            let std = Tensor::<B, 1>::from_floats([2.0, 0.5, 4.0], &device).reshape([1, 3]);
            (z - mean) / std
        };
        let b = without.try_forward(standard(z0), standard(z1)).unwrap();
        let diff =
            |x: Tensor<B, 2>, y: Tensor<B, 2>| -> f32 { x.sub(y).abs().max().into_scalar().elem() };
        assert!(diff(a.loc.clone(), b.loc.clone()) < 1e-5);
        assert!(diff(a.log_scale.clone(), b.log_scale) < 1e-5);
        // And the norm does change what the encoder sees.
        let raw = without.forward(
            Tensor::<B, 2>::from_floats([[3.0, -1.0, 14.0], [0.0, -2.5, 2.0]], &device),
            Tensor::<B, 2>::from_floats([[1.0, 0.0, 6.0], [5.0, -3.0, 10.0]], &device),
        );
        assert!(diff(a.loc, raw.loc) > 1e-4);
    }

    #[test]
    fn a_norm_of_the_wrong_size_is_refused() {
        let config = CoefficientEncoderConfig::new(3, 2)
            .with_input_norm(Some(InputNorm::new(vec![0.0; 2], vec![1.0; 2])));
        assert!(config.validate().is_err());
    }
}
