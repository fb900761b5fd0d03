//! The data of an image run: the splits, their normalisation, augmented views and evaluation
//! inputs.

use std::path::{Path, PathBuf};

use manifoldclr::ViewSource;
use vlgo_datasets::{
    Augment, AugmentConfig, Cifar10, EvalTransform, IdxDataset, ImageSet, Normalization,
    TinyImageNet, find_fashion_mnist,
};

use crate::error::{CliError, Result};
use crate::pretrain::config::ImageRunConfig;

/// Train and test splits with the normalisation the run uses.
#[derive(Debug, Clone)]
pub struct ImageData {
    /// The pre-training and probe-training images.
    pub train: ImageSet,
    /// The evaluation images.
    pub test: ImageSet,
    /// Per-channel constants.
    pub norm: Normalization,
    /// Where they came from.
    pub dir: PathBuf,
}

impl ImageData {
    /// Opens and checks the data set the config names (before any backend starts).
    pub fn open(config: &ImageRunConfig) -> Result<Self> {
        let dir = match (&config.data_dir, config.dataset.as_str()) {
            (Some(dir), _) => dir.clone(),
            (None, "fashion-mnist") => find_fashion_mnist().ok_or_else(|| {
                CliError::invalid(
                    "--data-dir",
                    "nothing",
                    "the Fashion-MNIST folder (or install the Debian package dataset-fashion-mnist)",
                )
            })?,
            (None, name) => {
                return Err(CliError::invalid(
                    "--data-dir",
                    "nothing",
                    format!("the {name} folder"),
                ));
            }
        };
        let (mut train, mut test, norm) = match config.dataset.as_str() {
            "fashion-mnist" => {
                let d = IdxDataset::fashion_mnist(&dir)?;
                let norm = Normalization::measured(&d.train);
                (d.train, d.test, norm)
            }
            "cifar10" => {
                let d = Cifar10::open(&dir)?;
                (d.train, d.test, Normalization::cifar10())
            }
            "tinyimagenet" => {
                let d = TinyImageNet::open(&dir)?;
                (d.train, d.val, Normalization::tiny_imagenet())
            }
            other => {
                return Err(CliError::invalid(
                    "dataset",
                    format!("{other:?}"),
                    "fashion-mnist, cifar10 or tinyimagenet (STL-10 pre-training, which streams \
                     the unlabeled file, is not built yet)",
                ));
            }
        };
        if config.train_limit > 0 && config.train_limit < train.len() {
            train = subset(&train, config.train_limit);
        }
        if config.test_limit > 0 && config.test_limit < test.len() {
            test = subset(&test, config.test_limit);
        }
        Ok(Self {
            train,
            test,
            norm,
            dir,
        })
    }

    /// The training augmentation.
    pub fn augment(&self, config: &ImageRunConfig) -> Result<Augment> {
        let t = &self.train;
        Ok(Augment::new(
            AugmentConfig::simclr(config.image_size),
            self.norm.clone(),
            t.channels,
            t.height,
            t.width,
        )?)
    }

    /// The evaluation transform (a centre crop of `image_size` from the image as it is).
    pub fn eval_transform(&self, config: &ImageRunConfig) -> Result<EvalTransform> {
        let t = &self.train;
        let side = t.height.min(t.width);
        Ok(EvalTransform::new(
            side,
            config.image_size.min(side),
            self.norm.clone(),
            t.channels,
            t.height,
            t.width,
        )?)
    }
}

/// The first `n` images of a set.
pub fn subset(set: &ImageSet, n: usize) -> ImageSet {
    let n = n.min(set.len());
    ImageSet {
        pixels: set.pixels[..n * set.image_size()].to_vec(),
        labels: set.labels[..n].to_vec(),
        ..set.clone()
    }
}

/// Keyed SimCLR views of a training set.
pub struct AugmentedViews<'a> {
    /// The images.
    pub set: &'a ImageSet,
    /// The augmentation.
    pub augment: &'a Augment,
    /// Seed of the views.
    pub seed: u64,
    /// Output side.
    pub size: usize,
}

impl ViewSource for AugmentedViews<'_> {
    fn len(&self) -> usize {
        self.set.len()
    }

    fn shape(&self) -> [usize; 3] {
        [self.set.channels, self.size, self.size]
    }

    fn views(&self, indices: &[usize], epoch: usize) -> manifoldclr::Result<[Vec<f32>; 2]> {
        self.augment
            .two_views(self.set, indices, self.seed, epoch as u64)
            .map_err(|e| manifoldclr::ClrError::invalid("views", e, "readable images"))
    }
}

/// Whether `path` holds a checkpoint.
pub fn has_checkpoint(path: &Path) -> bool {
    path.join("state.json").is_file()
}
