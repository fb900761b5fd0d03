#![doc = include_str!("../README.md")]
//!
//! The ResNet-18 backbone ([`ResNet18Config`]), projection heads ([`ProjectionHead`]), InfoNCE
//! in both variants ([`info_nce()`]), and the SimCLR family and the ManifoldCLR methods behind one
//! interface ([`Method`], [`ContrastiveModel`]; the Lie group part in [`manifold`]); the training
//! loop in [`pretrain`], evaluation in [`eval`], semi-supervised classification in [`semisup`];
//! with the `distributed` feature, data-parallel training (`Pretrainer::run_on`) and its
//! exchanges in `distributed`.

pub mod backbone;
pub mod clip;
#[cfg(feature = "distributed")]
pub mod distributed;
pub mod error;
pub mod eval;
pub mod head;
pub mod info_nce;
pub mod manifold;
pub mod method;
pub mod norm;
pub mod pretrain;
pub mod schedule;
pub mod seeding;
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
pub use method::{ContrastiveConfig, ContrastiveModel, Exchange, Method, OneDevice, StepLoss};
pub use pretrain::{
    FeatureLog, GroupConfig, ManifoldLog, PretrainConfig, PretrainHooks, Pretrainer, StepLog,
    TrainBackend, TrainState, ViewSource,
};
pub use schedule::WarmupCosine;
pub use seeding::{materialised, seeded};
pub use vlgo_nn;
