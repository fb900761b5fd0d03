//! AdamW with its per-parameter update as one backend operation
//! ([`LayerBackend::adamw_step`]): a single pass over the parameter and its moments on the CPU
//! backends, Burn's tensor operations elsewhere.

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::optim::SimpleOptimizer;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;

use super::{LayerBackend, unwrap, wrap};

/// The constants of one AdamW step on one parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta_1: f32,
    /// Decay of the second moment.
    pub beta_2: f32,
    /// Added to the square root of the second moment.
    pub epsilon: f32,
    /// Decoupled weight decay (the parameter shrinks by `lr * weight_decay` each step).
    pub weight_decay: f32,
    /// The step's number, from 1 (for the moments' bias correction).
    pub time: i32,
}

/// Settings of [`FusedAdamW`]; the defaults are those of `burn::optim::AdamWConfig`.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, Optimizer};
/// use burn::prelude::*;
/// use vlgo_core::layers::FusedAdamWConfig;
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(3, 2).init(&device);
/// let mut optim = FusedAdamWConfig::new().with_weight_decay(5e-4).init::<B, Linear<B>>();
/// let x = Tensor::<B, 2>::ones([4, 3], &device);
/// let loss = model.forward(x).powi_scalar(2).mean();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// model = optim.step(1e-3, model, grads);
/// assert_eq!(model.weight.dims(), [3, 2]);
/// ```
#[derive(Config, Debug)]
pub struct FusedAdamWConfig {
    /// Decay of the first moment.
    #[config(default = 0.9)]
    pub beta_1: f32,
    /// Decay of the second moment.
    #[config(default = 0.999)]
    pub beta_2: f32,
    /// Added to the square root of the second moment.
    #[config(default = 1e-5)]
    pub epsilon: f32,
    /// Decoupled weight decay.
    #[config(default = 1e-4)]
    pub weight_decay: f32,
}

impl FusedAdamWConfig {
    /// The optimiser for the parameters of a module `M` on `B`.
    pub fn init<B, M>(&self) -> OptimizerAdaptor<FusedAdamW, M, B>
    where
        B: AutodiffBackend<InnerBackend: LayerBackend>,
        M: AutodiffModule<B>,
    {
        OptimizerAdaptor::from(FusedAdamW {
            config: self.clone(),
        })
    }
}

/// AdamW (decoupled weight decay) computing what `burn::optim::AdamW` computes without AMSGrad
/// or cautious decay, each parameter in one [`LayerBackend::adamw_step`].
#[derive(Debug, Clone)]
pub struct FusedAdamW {
    config: FusedAdamWConfig,
}

/// The moments of one parameter and the number of steps taken.
#[derive(Record, Clone, Debug)]
pub struct FusedAdamWState<B: Backend, const D: usize> {
    /// First moment.
    pub moment_1: Tensor<B, D>,
    /// Second moment.
    pub moment_2: Tensor<B, D>,
    /// Steps taken.
    pub time: usize,
}

impl<B: LayerBackend> SimpleOptimizer<B> for FusedAdamW {
    type State<const D: usize> = FusedAdamWState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let (m, v, time) = match state {
            Some(s) => (s.moment_1, s.moment_2, s.time + 1),
            None => (grad.zeros_like(), grad.zeros_like(), 1),
        };
        let c = &self.config;
        let hp = AdamWStep {
            lr,
            beta_1: c.beta_1,
            beta_2: c.beta_2,
            epsilon: c.epsilon,
            weight_decay: c.weight_decay,
            time: i32::try_from(time).unwrap_or(i32::MAX),
        };
        let [p, m, v] = B::adamw_step(unwrap(tensor), unwrap(grad), unwrap(m), unwrap(v), hp);
        let state = FusedAdamWState {
            moment_1: wrap(m),
            moment_2: wrap(v),
            time,
        };
        (wrap(p), Some(state))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        FusedAdamWState {
            moment_1: state.moment_1.to_device(device),
            moment_2: state.moment_2.to_device(device),
            time: state.time,
        }
    }
}
