//! ManifoldCLR: contrastive learning whose positive views are moved along learned feature
//! manifolds by variational Lie group operators (`docs/manifoldclr.md`).
//!
//! The ResNet-18 backbone ([`ResNet18Config`]), projection heads ([`ProjectionHead`]), InfoNCE
//! in both variants ([`info_nce()`]), and the SimCLR family and the ManifoldCLR methods behind one
//! interface ([`Method`], [`ContrastiveModel`]; the Lie group part in [`manifold`]).
//!
//! ```
//! use burn::backend::{Autodiff, NdArray};
//! use burn::prelude::*;
//! use manifoldclr::{ContrastiveConfig, Method};
//!
//! type B = Autodiff<NdArray>;
//! let device = Default::default();
//! let config = ContrastiveConfig { width: 4, ..ContrastiveConfig::new(Method::SimClrMlp) };
//! let model = config.init::<B>(&device).unwrap();
//! let views = Tensor::<B, 4>::ones([2, 3, 16, 16], &device);
//! let step = model.step(views.clone(), views * 0.5, 0).unwrap();
//! assert!(step.loss.into_scalar() > 0.0);
//! ```

pub mod backbone;
pub mod clip;
pub mod error;
pub mod eval;
pub mod head;
pub mod info_nce;
pub mod manifold;
pub mod method;
pub mod pretrain;
pub mod schedule;
pub mod semisup;

pub use backbone::{ResNet18, ResNet18Config};
pub use clip::clip_global_norm;
pub use error::{ClrError, Result};
pub use eval::{
    Accuracy, Features, ProbeConfig, Spectrum, extract_features, feature_spectrum, knn,
    linear_probe, linear_probe_each, spectrum, symmetric_eigen,
};
pub use head::{HeadKind, ProjectionHead};
pub use info_nce::{InfoNceConfig, Similarity, info_nce, unit_rows};
pub use manifold::{ManifoldConfig, ManifoldDiagnostics, ManifoldFigures, ManifoldStep};
pub use method::{ContrastiveConfig, ContrastiveModel, Method, StepLoss};
pub use pretrain::{
    FeatureLog, GroupConfig, ManifoldLog, PretrainConfig, PretrainHooks, Pretrainer, StepLog,
    TrainBackend, TrainState, ViewSource,
};
pub use schedule::WarmupCosine;
pub use vlgo_nn;
