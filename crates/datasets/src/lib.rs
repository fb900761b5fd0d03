#![doc = include_str!("../README.md")]

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
