//! Lie group operators: a dictionary of generators Psi_m and the transport
//! T(c) z = expm(sum_m c_m Psi_m) z.

use burn::module::Param;
use burn::prelude::*;
use nalgebra::DMatrix;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::VlgoError;

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = crate::error::Result<T>;
use crate::expm::{
    ExpmBackend, ExpmvConfig, ExpmvPullback, expmv_generated, expmv_pullback, expmv_with, try_expm,
};
use crate::rng::NoiseStreams;

/// How the generators act on a d-dimensional feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "form", content = "block_size")]
#[non_exhaustive]
pub enum OperatorForm {
    /// One dense d x d generator each (S = 1, b = d).
    Dense,
    /// blockdiag(Psi[m, 0], .., Psi[m, S-1]) with S = d / b blocks of b x b; one coefficient per
    /// generator, shared by all blocks.
    BlockDiagonal(usize),
    /// A dense b x b generator acting on the first b features only; the rest pass through
    /// unchanged. (ManifoldDirectCLR does not need it: it slices its first `direct_dims`
    /// features before the operators see them, and uses [`Dense`](Self::Dense) on those.)
    Direct(usize),
}

/// How transport computes T(c) z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TransportMethod {
    /// exp(A) z without forming exp(A) (the default: the cheaper hot path).
    #[default]
    Expmv,
    /// Form T = expm(A), then multiply.
    Expm,
    /// exp(A) z with each generator A = sum_m c_m Psi_m formed inside the exponential's kernel
    /// where the backend has one (the GPU backends, with nothing tracked by autodiff): the
    /// N S generators never exist in device memory. Elsewhere it is [`Expmv`](Self::Expmv),
    /// which on the CPU backends forms them in cache as well (f32, small dictionaries; see
    /// [`expmv_generated`]). The GPU kernel takes the Taylor route for every finite generator
    /// (no explicit-exponential fallback) and reads M n^2 generator entries per block where a
    /// matmul reuses them across the batch, so it is the lean choice for memory, not the fast
    /// one for dense coefficients (see `docs/expm.md` and the GPU benchmark).
    Generated,
}

/// How the generators are initialised.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "init")]
#[non_exhaustive]
pub enum OperatorInit {
    /// Psi[m, s] = r I + w J (the paper's initialisation): bounded, cyclic paths at the start. Needs an even
    /// block size.
    #[default]
    Stable,
    /// Every entry drawn from N(0, std^2): small generic generators, any block size (the
    /// synthetic experiments, whose 3 x 3 operators cannot pair features into rotations).
    Normal {
        /// Standard deviation of the entries, finite and > 0.
        std: f64,
    },
}

/// Configuration of a [`LieOperators`] dictionary.
#[derive(Config, Debug)]
pub struct LieOperatorsConfig {
    /// Number of generators M (>= 1).
    pub num_operators: usize,
    /// Feature dimension d.
    pub dim: usize,
    /// How the generators act on features.
    #[config(default = "OperatorForm::Dense")]
    pub form: OperatorForm,
    /// Width of the centred uniform range of the identity part r (the paper's alpha).
    #[config(default = 1e-4)]
    pub init_alpha: f64,
    /// Width of the centred uniform range of the rotation part w (the paper's beta).
    #[config(default = 6.0)]
    pub init_beta: f64,
    /// Seed of the initialisation draws.
    #[config(default = 0)]
    pub seed: u64,
    /// Initialisation of the generators (stable by default; `init_alpha` and `init_beta` are its
    /// widths).
    #[config(default = "OperatorInit::Stable")]
    pub init: OperatorInit,
}

/// The block layout of a validated configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    /// Number of blocks S.
    pub blocks: usize,
    /// Block size b.
    pub block_size: usize,
    /// Features the generators act on (S b); the rest pass through.
    pub active: usize,
}

impl LieOperatorsConfig {
    /// Checks the configuration and returns its block layout.
    ///
    /// ```
    /// use vlgo_core::{LieOperatorsConfig, OperatorForm};
    /// assert!(LieOperatorsConfig::new(4, 64).with_form(OperatorForm::BlockDiagonal(16)).validate().is_ok());
    /// assert!(LieOperatorsConfig::new(4, 64).with_form(OperatorForm::BlockDiagonal(15)).validate().is_err());
    /// assert!(LieOperatorsConfig::new(0, 64).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<BlockLayout> {
        if self.num_operators == 0 {
            return Err(VlgoError::invalid("num_operators (M)", 0, "must be >= 1"));
        }
        if self.dim == 0 {
            return Err(VlgoError::invalid("dim (d)", 0, "must be >= 1"));
        }
        let (blocks, b) = match self.form {
            OperatorForm::Dense => (1, self.dim),
            OperatorForm::BlockDiagonal(b) => {
                if b == 0 || !self.dim.is_multiple_of(b) {
                    return Err(VlgoError::invalid(
                        "block_size (b)",
                        format!("{b} for d = {}", self.dim),
                        "must be >= 1 and divide the feature dimension d",
                    ));
                }
                (self.dim / b, b)
            }
            OperatorForm::Direct(b) => {
                if b == 0 || b > self.dim {
                    return Err(VlgoError::invalid(
                        "block_size (b)",
                        format!("{b} for d = {}", self.dim),
                        "must lie in 1..=d for the direct form",
                    ));
                }
                (1, b)
            }
        };
        if let OperatorInit::Normal { std } = self.init
            && !(std > 0.0 && std.is_finite())
        {
            return Err(VlgoError::invalid(
                "init std",
                std,
                "must be finite and > 0",
            ));
        }
        if b % 2 != 0 && self.init == OperatorInit::Stable {
            return Err(VlgoError::invalid(
                "block_size (b)",
                b,
                "must be even for the stable initialisation (it pairs features into 2x2 rotations); \
                 use OperatorInit::Normal for odd sizes",
            ));
        }
        for (name, v) in [
            ("init_alpha", self.init_alpha),
            ("init_beta", self.init_beta),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(VlgoError::invalid(name, v, "must be finite and >= 0"));
            }
        }
        Ok(BlockLayout {
            blocks,
            block_size: b,
            active: blocks * b,
        })
    }

    /// Builds the dictionary. With the stable initialisation every Psi[m, s] = r I + w J, with J
    /// the block diagonal of b/2 copies of [[0, -1], [1, 0]], r ~ U(-alpha/2, alpha/2) and
    /// w ~ U(-beta/2, beta/2) drawn once per (m, s). exp(c Psi) is then
    /// e^{c r}(cos(c w) I + sin(c w) J): bounded, cyclic paths at the start of training.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlgoResult<LieOperators<B>> {
        let layout = self.validate()?;
        let (m, s, b) = (self.num_operators, layout.blocks, layout.block_size);
        let mut rng = NoiseStreams::new(self.seed).generator(0, 0);
        let mut data = vec![0.0f32; m * s * b * b];
        match self.init {
            OperatorInit::Normal { std } => {
                let normal =
                    rand_distr::Normal::new(0.0, std).expect("std validated finite and > 0");
                data.iter_mut().for_each(|x| *x = rng.sample(normal) as f32);
            }
            OperatorInit::Stable => stable_blocks(&mut data, b, self, &mut rng),
        }
        let psi = Tensor::<B, 1>::from_floats(data.as_slice(), device).reshape([m, s, b, b]);
        Ok(LieOperators {
            psi: Param::from_tensor(psi),
            form: self.form,
            dim: self.dim,
        })
    }
}

/// Fills `data` ([.., b, b] blocks) with r I + w J per block.
fn stable_blocks(data: &mut [f32], b: usize, config: &LieOperatorsConfig, rng: &mut impl Rng) {
    for block in data.chunks_mut(b * b) {
        let r = (rng.random::<f64>() - 0.5) * config.init_alpha;
        let w = (rng.random::<f64>() - 0.5) * config.init_beta;
        for i in 0..b {
            block[i * b + i] = r as f32;
        }
        for k in 0..b / 2 {
            let (i, j) = (2 * k, 2 * k + 1);
            block[i * b + j] = -w as f32;
            block[j * b + i] = w as f32;
        }
    }
}

/// A dictionary of M Lie algebra generators in block form, `psi` [M, S, b, b]. Built by
/// [`LieOperatorsConfig::init`] or, from given generators, by [`LieOperators::from_generators`];
/// both check that the generators' shape fits the form and the feature dimension, which the
/// fields are private to keep.
#[derive(Module, Debug)]
pub struct LieOperators<B: Backend> {
    /// The generators Psi [M, S, b, b]. Not normalised: its F-norm penalty is weight decay on this
    /// parameter (or an explicit term where an experiment asks for it).
    psi: Param<Tensor<B, 4>>,
    /// How the generators act on features.
    #[module(skip)]
    form: OperatorForm,
    /// Feature dimension d.
    #[module(skip)]
    dim: usize,
}

impl<B: Backend> LieOperators<B> {
    /// A dictionary of the given generators `psi` [M, S, b, b] acting on `dim`-dimensional
    /// features in `form`; an error when the shape does not fit (S and b as
    /// [`LieOperatorsConfig::validate`] derives them from the form and `dim`).
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use vlgo_core::{LieOperators, OperatorForm};
    ///
    /// let device = Default::default();
    /// // One rotation generator of the plane.
    /// let psi = Tensor::<NdArray, 4>::from_data([[[[0.0, -1.0], [1.0, 0.0]]]], &device);
    /// let ops = LieOperators::from_generators(psi.clone(), OperatorForm::Dense, 2).unwrap();
    /// assert_eq!((ops.num_operators(), ops.dim()), (1, 2));
    /// assert!(LieOperators::from_generators(psi, OperatorForm::Dense, 3).is_err());
    /// ```
    pub fn from_generators(psi: Tensor<B, 4>, form: OperatorForm, dim: usize) -> VlgoResult<Self> {
        let [m, s, b, b2] = psi.dims();
        // The layout only: the stable initialisation's even block size does not apply to given
        // generators.
        let layout = LieOperatorsConfig::new(m.max(1), dim)
            .with_form(form)
            .with_init(OperatorInit::Normal { std: 1.0 })
            .validate()?;
        let want = [
            m.max(1),
            layout.blocks,
            layout.block_size,
            layout.block_size,
        ];
        if [m, s, b, b2] != want {
            return Err(VlgoError::Shape {
                op: "LieOperators::from_generators",
                expected: format!("generators {want:?} for {form:?} on d = {dim}"),
                got: vec![m, s, b, b2],
            });
        }
        Ok(Self {
            psi: Param::from_tensor(psi),
            form,
            dim,
        })
    }

    /// The generators Psi [M, S, b, b], a trainable parameter (`psi().grad(&grads)` is their
    /// gradient).
    pub fn psi(&self) -> &Param<Tensor<B, 4>> {
        &self.psi
    }

    /// How the generators act on features.
    pub fn form(&self) -> OperatorForm {
        self.form
    }

    /// The feature dimension d.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of generators M.
    pub fn num_operators(&self) -> usize {
        self.psi.dims()[0]
    }

    /// (S, b).
    pub fn blocks(&self) -> (usize, usize) {
        let [_, s, b, _] = self.psi.dims();
        (s, b)
    }

    fn check_coefficients(&self, op: &'static str, c: &Tensor<B, 2>) -> VlgoResult<()> {
        let m = self.num_operators();
        if c.dims()[1] != m {
            return Err(VlgoError::Shape {
                op,
                expected: format!("coefficients [N, M] with M = {m}"),
                got: c.dims().to_vec(),
            });
        }
        Ok(())
    }

    /// Generators for coefficients c [N, M]: A(c)[n, s] = sum_m c[n, m] Psi[m, s], [N, S, b, b].
    ///
    /// Panics when c is not [N, M]; [`try_generator`](Self::try_generator) returns an error.
    pub fn generator(&self, c: Tensor<B, 2>) -> Tensor<B, 4> {
        self.try_generator(c).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`generator`](Self::generator).
    pub fn try_generator(&self, c: Tensor<B, 2>) -> VlgoResult<Tensor<B, 4>> {
        self.check_coefficients("LieOperators::generator", &c)?;
        let [m, s, b, _] = self.psi.dims();
        let n = c.dims()[0];
        if n == 0 {
            // Some backends' matmul divides by the row count.
            return Ok(Tensor::zeros([0, s, b, b], &c.device()));
        }
        let flat = self.psi.val().reshape([m, s * b * b]);
        Ok(c.matmul(flat).reshape([n, s, b, b]))
    }

    /// F-norm of each generator over all its blocks, ||Psi_m||_F, `[M]`.
    pub fn generator_norms(&self) -> Tensor<B, 1> {
        let m = self.num_operators();
        self.psi
            .val()
            .reshape([m as i32, -1])
            .square()
            .sum_dim(1)
            .sqrt()
            .reshape([m])
    }

    /// sum_m ||Psi_m||_F^2 (the synthetic experiment's explicit penalty).
    pub fn frobenius_penalty(&self) -> Tensor<B, 1> {
        self.psi.val().square().sum()
    }

    /// Number of generators used by at least one coefficient sample of `c` [N, M] (non-zero).
    ///
    /// Panics when c is not [N, M]; [`try_usage_count`](Self::try_usage_count) returns an error.
    pub fn usage_count(&self, c: Tensor<B, 2>) -> usize {
        self.try_usage_count(c).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`usage_count`](Self::usage_count).
    pub fn try_usage_count(&self, c: Tensor<B, 2>) -> VlgoResult<usize> {
        self.check_coefficients("LieOperators::usage_count", &c)?;
        let used = c.abs().max_dim(0).greater_elem(0.0);
        Ok(used.int().sum().into_scalar().to_i64() as usize)
    }

    /// Real parts of the eigenvalues of each generator (over all blocks), computed on the host.
    /// Near zero means cyclic, bounded paths; positive means growth.
    pub fn eigenvalue_real_parts(&self) -> Vec<Vec<f64>> {
        let [m, s, b, _] = self.psi.dims();
        let data = self
            .psi
            .val()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .expect("float tensor converts to f64");
        (0..m)
            .map(|mi| {
                (0..s)
                    .flat_map(|si| {
                        let off = (mi * s + si) * b * b;
                        DMatrix::from_row_slice(b, b, &data[off..off + b * b])
                            .complex_eigenvalues()
                            .iter()
                            .map(|z| z.re)
                            .collect::<Vec<f64>>()
                    })
                    .collect()
            })
            .collect()
    }
}

impl<B: ExpmBackend> LieOperators<B> {
    fn check_features(
        &self,
        op: &'static str,
        c: &Tensor<B, 2>,
        z: &Tensor<B, 2>,
    ) -> VlgoResult<()> {
        self.check_coefficients(op, c)?;
        let [n, d] = z.dims();
        if d != self.dim || n != c.dims()[0] {
            return Err(VlgoError::Shape {
                op,
                expected: format!(
                    "features [N, d] with N = {} and d = {}",
                    c.dims()[0],
                    self.dim
                ),
                got: z.dims().to_vec(),
            });
        }
        Ok(())
    }

    /// T(c) = expm(A(c)) per block, [N, S, b, b].
    ///
    /// Panics when c is not [N, M]; [`try_transforms`](Self::try_transforms) returns an error.
    pub fn transforms(&self, c: Tensor<B, 2>) -> Tensor<B, 4> {
        self.try_transforms(c).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`transforms`](Self::transforms).
    pub fn try_transforms(&self, c: Tensor<B, 2>) -> VlgoResult<Tensor<B, 4>> {
        crate::expm::try_expm_nd(self.try_generator(c)?)
    }

    /// Transport z_hat = T(c) z for coefficients c [N, M] and features z [N, d], block by block,
    /// through `expmv` (no T is formed).
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use vlgo_core::LieOperatorsConfig;
    ///
    /// let device = Default::default();
    /// let ops = LieOperatorsConfig::new(3, 4).init::<NdArray>(&device).unwrap();
    /// let z = Tensor::<NdArray, 2>::ones([2, 4], &device);
    /// let c = Tensor::<NdArray, 2>::zeros([2, 3], &device);
    /// let moved = ops.transport(c, z.clone()); // c = 0: T = I
    /// assert!((moved - z).abs().max().into_scalar() < 1e-6);
    /// ```
    ///
    /// Panics when c is not [N, M] or z not [N, d]; [`try_transport`](Self::try_transport)
    /// returns an error instead.
    pub fn transport(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> Tensor<B, 2> {
        self.try_transport(c, z).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`transport`](Self::transport).
    pub fn try_transport(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        self.transport_with(c, z, TransportMethod::Expmv, &ExpmvConfig::default())
    }

    /// [`transport`](Self::transport) together with its pullback to the coefficients: the
    /// gradient of sum_n <g_n, T(c_n) z_n> w.r.t. c for any g, through the exponential's own
    /// backward and without an autodiff graph (sparse inference takes hundreds of such
    /// gradients per batch with the operators fixed).
    ///
    /// Panics on shapes that do not fit, as [`transport`](Self::transport) does;
    /// [`try_transport_pullback`](Self::try_transport_pullback) returns an error instead.
    pub fn transport_pullback(
        &self,
        c: Tensor<B, 2>,
        z: Tensor<B, 2>,
    ) -> (Tensor<B, 2>, TransportPullback<B>) {
        self.try_transport_pullback(c, z)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`transport_pullback`](Self::transport_pullback).
    pub fn try_transport_pullback(
        &self,
        c: Tensor<B, 2>,
        z: Tensor<B, 2>,
    ) -> VlgoResult<(Tensor<B, 2>, TransportPullback<B>)> {
        self.check_features("LieOperators::transport_pullback", &c, &z)?;
        let [n, d] = z.dims();
        let (s, b) = self.blocks();
        let (a, v) = self.block_problems(c, &z)?;
        let (moved, pullback) = expmv_pullback(a, v, &ExpmvConfig::default())?;
        let moved = self.reassemble(moved, z);
        let m = self.num_operators();
        Ok((
            moved,
            TransportPullback {
                pullback,
                psi: self.psi.val().reshape([m, s * b * b]),
                shape: [n, d, s, b],
            },
        ))
    }

    /// [`transport`](Self::transport) with a choice of method and the options of the
    /// exponential-times-vector (`config`, validated here; the `Expm` method does not use it).
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use vlgo_core::{ExpmvConfig, LieOperatorsConfig, TransportMethod};
    ///
    /// let device = Default::default();
    /// let ops = LieOperatorsConfig::new(3, 4).init::<NdArray>(&device).unwrap();
    /// let (c, z) = (Tensor::zeros([2, 3], &device), Tensor::ones([2, 4], &device));
    /// let config = ExpmvConfig::new().with_m_max(24);
    /// let moved = ops.transport_with(c.clone(), z.clone(), TransportMethod::Expmv, &config).unwrap();
    /// assert_eq!(moved.dims(), [2, 4]);
    /// let bad = ExpmvConfig::new().with_m_max(0);
    /// assert!(ops.transport_with(c, z, TransportMethod::Expmv, &bad).is_err());
    /// ```
    pub fn transport_with(
        &self,
        c: Tensor<B, 2>,
        z: Tensor<B, 2>,
        method: TransportMethod,
        config: &ExpmvConfig,
    ) -> VlgoResult<Tensor<B, 2>> {
        config.validate()?;
        self.check_features("LieOperators::transport", &c, &z)?;
        let psi = self.psi.val();
        // Where the backend forms each generator in cache (the CPU backends), the R S
        // generators are never written out: megabytes at a training batch.
        let generated = B::has_generated_kernel(psi.dtype(), &psi.shape());
        let moved = match method {
            TransportMethod::Expmv if generated => {
                expmv_generated(c, psi, self.block_vectors(&z), config)?
            }
            TransportMethod::Expmv => {
                let (a, v) = self.block_problems(c, &z)?;
                expmv_with(a, v, config)?
            }
            TransportMethod::Expm => {
                let (a, v) = self.block_problems(c, &z)?;
                try_expm(a)?
                    .matmul(v.unsqueeze_dim::<3>(2))
                    .squeeze_dim::<2>(2)
            }
            TransportMethod::Generated => expmv_generated(c, psi, self.block_vectors(&z), config)?,
        };
        Ok(self.reassemble(moved, z))
    }

    /// The per-block problems of a transport: generators A [N S, b, b] and the features' active
    /// part as vectors [N S, b].
    fn block_problems(
        &self,
        c: Tensor<B, 2>,
        z: &Tensor<B, 2>,
    ) -> VlgoResult<(Tensor<B, 3>, Tensor<B, 2>)> {
        let (s, b) = self.blocks();
        let a = self.try_generator(c)?.reshape([z.dims()[0] * s, b, b]);
        Ok((a, self.block_vectors(z)))
    }

    /// The features' active part as per-block vectors [N S, b].
    fn block_vectors(&self, z: &Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, d] = z.dims();
        let (s, b) = self.blocks();
        let head = if s * b == d {
            z.clone()
        } else {
            z.clone().slice([0..n, 0..s * b])
        };
        head.reshape([n * s, b])
    }

    /// Features [N, d] from the moved blocks [N S, b] and the pass-through tail of `z`.
    fn reassemble(&self, moved: Tensor<B, 2>, z: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, d] = z.dims();
        let active = self.blocks().0 * self.blocks().1;
        let moved = moved.reshape([n, active]);
        if active == d {
            moved
        } else {
            Tensor::cat(vec![moved, z.slice([0..n, active..d])], 1)
        }
    }
}

/// The pullback of [`LieOperators::transport_pullback`] to the coefficients.
pub struct TransportPullback<B: ExpmBackend> {
    pullback: ExpmvPullback<B>,
    psi: Tensor<B, 2>,
    /// [N, d, S, b].
    shape: [usize; 4],
}

impl<B: ExpmBackend> TransportPullback<B> {
    /// d/dc of sum_n <g_n, T(c_n) z_n> for g = `grad` [N, d], as [N, M].
    ///
    /// Panics when `grad` is not the transport's shape; [`try_coefficients`](Self::try_coefficients)
    /// returns an error instead.
    pub fn coefficients(&self, grad: Tensor<B, 2>) -> Tensor<B, 2> {
        self.try_coefficients(grad)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`coefficients`](Self::coefficients).
    pub fn try_coefficients(&self, grad: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        let [n, d, s, b] = self.shape;
        if grad.dims() != [n, d] {
            return Err(VlgoError::Shape {
                op: "TransportPullback::coefficients",
                expected: format!("the transport's output shape [{n}, {d}]"),
                got: grad.dims().to_vec(),
            });
        }
        if n == 0 {
            return Ok(Tensor::zeros([0, self.psi.dims()[0]], &grad.device()));
        }
        let g = grad.slice([0..n, 0..s * b]).reshape([n * s, b]);
        let (abar, _) = self.pullback.apply(g)?;
        Ok(abar
            .reshape([n, s * b * b])
            .matmul(self.psi.clone().transpose()))
    }
}
