//! Datasets for VLGO and ManifoldCLR: image dataset readers (CIFAR-10, STL-10, TinyImageNet,
//! IDX files such as Fashion-MNIST), synthetic manifolds and pair samplers. The crate knows
//! nothing of models; it yields plain host arrays ([`ImageSet`]: bytes in [N, C, H, W] order).
//! Readers take local paths and check every file against its format: a bad file is an error
//! that names it, what was expected and what was found.
//!
//! ```
//! use vlgo_datasets::{NeighbourPairs, SwissRollConfig};
//!
//! let roll = SwissRollConfig { points: 500, seed: 0 }.generate().unwrap();
//! let pairs = NeighbourPairs::new(&roll.points, 20, 60).unwrap();
//! let batches = pairs.epoch(0, 0, 100);
//! assert_eq!(batches.len(), 5);
//! ```

pub mod augment;
pub mod cifar10;
pub mod error;
pub mod fixtures;
pub mod idx;
pub mod images;
pub mod neighbours;
mod rng;
pub mod stl10;
pub mod swiss_roll;
pub mod tiny_imagenet;

pub use augment::{Augment, AugmentConfig, EvalTransform, Normalization, ViewParams};
pub use cifar10::{CIFAR10_CLASSES, Cifar10};
pub use error::{DatasetError, Result};
pub use idx::{FASHION_MNIST_CLASSES, IdxArray, IdxDataset, find_fashion_mnist, read_idx};
pub use images::ImageSet;
pub use neighbours::NeighbourPairs;
pub use stl10::{STL10_CLASSES, Stl10, Stl10Unlabeled};
pub use swiss_roll::{SwissRoll, SwissRollConfig};
pub use tiny_imagenet::TinyImageNet;
