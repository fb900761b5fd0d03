//! ResNet-18 backbone with the CIFAR stem (protocol: first convolution 3 x 3, stride 1, padding 1,
//! no bias; max-pool removed for 32 x 32 inputs, kept for larger ones), returning the pooled
//! features (512 at width 64).
//!
//! Initialisation as torchvision's ResNet: every convolution of the network Kaiming-normal with
//! fan-out and ReLU gain, batch-norm weight 1 and bias 0; the replaced first convolution keeps
//! PyTorch's default (Kaiming-uniform, bound 1 / sqrt(fan_in)), as it does in the SimCLR code that
//! swaps it in after torchvision's initialisation.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Initializer, PaddingConfig2d, Relu};
use burn::prelude::*;
use vlgo_core::layers::{LayerBackend, conv2d_module, global_avg_pool};

use crate::error::ClrError;
use crate::norm::{StatsSum, batch_norm, batch_norm_add_relu, batch_norm_relu};

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type ClrResult<T> = crate::error::Result<T>;

fn torchvision_conv(cin: usize, cout: usize, kernel: usize, stride: usize) -> Conv2dConfig {
    let pad = kernel / 2;
    Conv2dConfig::new([cin, cout], [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .with_initializer(Initializer::KaimingNormal {
            gain: std::f64::consts::SQRT_2,
            fan_out_only: true,
        })
}

/// ResNet's basic block: two 3 x 3 convolutions with batch norm, a projection shortcut where the
/// shape changes.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm<B>,
    shortcut: Option<(Conv2d<B>, BatchNorm<B>)>,
    /// Kept so that records keep their fields; both ReLUs run fused with the batch norms
    /// before them ([`batch_norm_relu`], [`batch_norm_add_relu`]).
    relu: Relu,
}

impl<B: Backend> BasicBlock<B> {
    fn new(cin: usize, cout: usize, stride: usize, device: &B::Device) -> Self {
        let shortcut = (stride != 1 || cin != cout).then(|| {
            (
                torchvision_conv(cin, cout, 1, stride).init(device),
                BatchNormConfig::new(cout).init(device),
            )
        });
        Self {
            conv1: torchvision_conv(cin, cout, 3, stride).init(device),
            bn1: BatchNormConfig::new(cout).init(device),
            conv2: torchvision_conv(cout, cout, 3, 1).init(device),
            bn2: BatchNormConfig::new(cout).init(device),
            shortcut,
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 4>, stats: Option<&dyn StatsSum<B>>) -> ClrResult<Tensor<B, 4>>
    where
        B: LayerBackend,
    {
        let identity = match &self.shortcut {
            Some((conv, bn)) => batch_norm(bn, conv2d_module(conv, x.clone()), stats)?,
            None => x.clone(),
        };
        let out = batch_norm_relu(&self.bn1, conv2d_module(&self.conv1, x), stats, None)?;
        batch_norm_add_relu(&self.bn2, conv2d_module(&self.conv2, out), identity, stats)
    }
}

/// Settings of [`ResNet18`].
#[derive(Config, Debug)]
pub struct ResNet18Config {
    /// Channels of the first stage (64 in ResNet-18; the stages have 1, 2, 4 and 8 times as many,
    /// so the features have 8 x width entries). A smaller width makes a CPU-sized network.
    #[config(default = 64)]
    pub width: usize,
    /// Input channels: 3 for colour, 1 for grayscale data (Fashion-MNIST).
    #[config(default = 3)]
    pub in_channels: usize,
    /// Keep the max-pool after the stem (the protocol keeps it for 64 x 64 inputs and removes it
    /// for 32 x 32 ones).
    #[config(default = false)]
    pub max_pool: bool,
}

impl ResNet18Config {
    /// Checks the settings.
    pub fn validate(&self) -> ClrResult<()> {
        if self.width == 0 {
            return Err(ClrError::invalid("backbone width", 0, "must be >= 1"));
        }
        if self.in_channels == 0 {
            return Err(ClrError::invalid("backbone in_channels", 0, "must be >= 1"));
        }
        Ok(())
    }

    /// Features per image: 8 x width (512 at width 64).
    pub fn features(&self) -> usize {
        8 * self.width
    }

    /// The network, initialised as torchvision's (module docs).
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use manifoldclr::ResNet18Config;
    ///
    /// let device = Default::default();
    /// let net = ResNet18Config::new().with_width(8).init::<NdArray>(&device).unwrap();
    /// let features = net.forward(Tensor::zeros([2, 3, 32, 32], &device));
    /// assert_eq!(features.dims(), [2, 64]);
    /// ```
    pub fn init<B: Backend>(&self, device: &B::Device) -> ClrResult<ResNet18<B>> {
        self.validate()?;
        let w = self.width;
        let stem = Conv2dConfig::new([self.in_channels, w], [3, 3])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .with_bias(false)
            .init(device);
        let max_pool = self.max_pool.then(|| {
            MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init()
        });
        let mut blocks = Vec::new();
        let mut cin = w;
        for (cout, stride) in [(w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)] {
            blocks.push(BasicBlock::new(cin, cout, stride, device));
            blocks.push(BasicBlock::new(cout, cout, 1, device));
            cin = cout;
        }
        Ok(ResNet18 {
            stem,
            stem_bn: BatchNormConfig::new(w).init(device),
            max_pool,
            blocks,
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            relu: Relu::new(),
            in_channels: self.in_channels,
            features: self.features(),
        })
    }
}

/// ResNet-18 without its classifier: images [B, C, H, W] to pooled features [B, 8 x width].
#[derive(Module, Debug)]
pub struct ResNet18<B: Backend> {
    stem: Conv2d<B>,
    stem_bn: BatchNorm<B>,
    max_pool: Option<MaxPool2d>,
    blocks: Vec<BasicBlock<B>>,
    /// Kept so that records keep their fields; the forward pools with
    /// [`global_avg_pool`], which every backend runs.
    pool: AdaptiveAvgPool2d,
    /// Kept so that records keep their fields; the stem's ReLU (and pooling) runs fused with
    /// its batch norm ([`batch_norm_relu`]).
    relu: Relu,
    in_channels: usize,
    features: usize,
}

impl<B: Backend> ResNet18<B> {
    /// Features per image.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Pooled features of a batch of images. Panics on a wrong channel count or an empty image;
    /// [`try_forward`](Self::try_forward) returns an error naming it instead.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2>
    where
        B: LayerBackend,
    {
        self.try_forward(images).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`forward`](Self::forward): an error, not a panic, for inputs of the wrong shape.
    pub fn try_forward(&self, images: Tensor<B, 4>) -> ClrResult<Tensor<B, 2>>
    where
        B: LayerBackend,
    {
        self.try_forward_with(images, None)
    }

    /// [`try_forward`](Self::try_forward) with the batch-norm statistics in training summed
    /// over `stats`' devices (synchronised batch norm; `None`: this batch's own).
    pub fn try_forward_with(
        &self,
        images: Tensor<B, 4>,
        stats: Option<&dyn StatsSum<B>>,
    ) -> ClrResult<Tensor<B, 2>>
    where
        B: LayerBackend,
    {
        let [_, c, h, w] = images.dims();
        if c != self.in_channels || h == 0 || w == 0 {
            return Err(ClrError::invalid(
                "backbone input",
                format!("{:?}", images.dims()),
                format!("[batch, {}, height >= 1, width >= 1]", self.in_channels),
            ));
        }
        let mut x = batch_norm_relu(
            &self.stem_bn,
            conv2d_module(&self.stem, images),
            stats,
            self.max_pool.as_ref(),
        )?;
        for block in &self.blocks {
            x = block.forward(x, stats)?;
        }
        Ok(global_avg_pool(x))
    }
}
