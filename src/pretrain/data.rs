//! The data of an image run: the splits, their normalisation, augmented views and evaluation
//! inputs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use manifoldclr::ViewSource;
use vlgo_datasets::{
    Augment, AugmentConfig, Cifar10, EvalTransform, IdxDataset, ImageSet, Normalization, Stl10,
    Stl10Unlabeled, TinyImageNet, find_fashion_mnist,
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
    /// More pre-training images after `train` (STL-10's unlabeled file, read as batches need
    /// it), with how many of them the run uses.
    pub extra: Option<(Arc<Stl10Unlabeled>, usize)>,
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
        let mut extra = None;
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
            "stl10" => {
                // Pre-training uses the labeled split and the unlabeled images (protocol).
                let d = Stl10::open(&dir)?;
                let unlabeled = Stl10Unlabeled::open(&dir)?;
                let count = unlabeled.len();
                extra = Some((Arc::new(unlabeled), count));
                (d.train, d.test, Normalization::stl10())
            }
            other => {
                return Err(CliError::invalid(
                    "dataset",
                    format!("{other:?}"),
                    "fashion-mnist, cifar10, stl10 or tinyimagenet",
                ));
            }
        };
        // The limit applies to the pre-training pool: the training split first, then the extra
        // images.
        if config.train_limit > 0 {
            if config.train_limit < train.len() {
                train = subset(&train, config.train_limit);
            }
            if let Some((_, count)) = extra.as_mut() {
                *count = (*count).min(config.train_limit - train.len());
            }
        }
        if config.test_limit > 0 && config.test_limit < test.len() {
            test = subset(&test, config.test_limit);
        }
        Ok(Self {
            train,
            test,
            norm,
            dir,
            extra,
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

    /// The evaluation transform: a centre crop of `image_size` from the image as it is, except
    /// STL-10's, whose 96-pixel images are resized to 70 first (protocol).
    pub fn eval_transform(&self, config: &ImageRunConfig) -> Result<EvalTransform> {
        let t = &self.train;
        let side = t.height.min(t.width);
        let resize = match config.dataset.as_str() {
            "stl10" => 70.min(side),
            _ => side,
        };
        Ok(EvalTransform::new(
            resize,
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

/// The images of `set` at `indices`, in that order.
pub fn pick(set: &ImageSet, indices: &[usize]) -> ImageSet {
    ImageSet {
        channels: set.channels,
        height: set.height,
        width: set.width,
        pixels: indices
            .iter()
            .flat_map(|&i| set.image(i))
            .copied()
            .collect(),
        labels: indices.iter().map(|&i| set.labels[i]).collect(),
        classes: set.classes.clone(),
    }
}

/// Keyed SimCLR views of a training set, followed by extra images read as they are needed.
pub struct AugmentedViews<'a> {
    /// The images.
    pub set: &'a ImageSet,
    /// Pre-training images after `set` (sample `set.len() + i` is image `i` of the file).
    pub extra: Option<(&'a Stl10Unlabeled, usize)>,
    /// The augmentation.
    pub augment: &'a Augment,
    /// Seed of the views.
    pub seed: u64,
    /// Output side.
    pub size: usize,
}

impl ViewSource for AugmentedViews<'_> {
    fn len(&self) -> usize {
        self.set.len() + self.extra.map_or(0, |(_, count)| count)
    }

    fn shape(&self) -> [usize; 3] {
        [self.set.channels, self.size, self.size]
    }

    fn views(&self, indices: &[usize], epoch: usize) -> manifoldclr::Result<[Vec<f32>; 2]> {
        let failed = |e| manifoldclr::ClrError::invalid("views", e, "readable images");
        let n = self.set.len();
        let Some((file, count)) = self.extra.filter(|_| indices.iter().any(|&i| i >= n)) else {
            return self
                .augment
                .two_views(self.set, indices, self.seed, epoch as u64)
                .map_err(failed);
        };
        // Gather the batch (one positioned read per extra image), keyed by pool index.
        let size = self.set.image_size();
        let mut pixels = vec![0u8; indices.len() * size];
        for (&i, out) in indices.iter().zip(pixels.chunks_exact_mut(size)) {
            match i.checked_sub(n) {
                None => out.copy_from_slice(self.set.image(i)),
                Some(j) if j < count => file.read(j, out).map_err(failed)?,
                Some(_) => {
                    return Err(manifoldclr::ClrError::invalid(
                        "sample index",
                        i,
                        format!("below the pool's size, {}", n + count),
                    ));
                }
            }
        }
        let s = self.set;
        let labels = vec![0; indices.len()];
        let batch = ImageSet::new(
            s.channels,
            s.height,
            s.width,
            pixels,
            labels,
            s.classes.clone(),
        )
        .map_err(failed)?;
        self.augment
            .two_views_keyed(&batch, indices, self.seed, epoch as u64)
            .map_err(failed)
    }
}

/// Whether `path` holds a checkpoint.
pub fn has_checkpoint(path: &Path) -> bool {
    path.join("state.json").is_file()
}
