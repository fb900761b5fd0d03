//! CIFAR-10, binary version (`cifar-10-batches-bin/`).
//!
//! Each batch file is a run of 3073-byte records: one label byte (0-9), then the 1024 red, 1024
//! green and 1024 blue bytes of a 32 x 32 image, each plane row-major: already the [C, H, W]
//! layout of [`ImageSet`]. The real files hold 10,000 records each; the reader takes any whole,
//! non-zero number, so small fixture files work the same way.

use std::path::Path;

use crate::error::{DatasetError, Result};
use crate::images::{ImageSet, read_file, read_lines, record_count};

/// CIFAR-10's class names, in label order (those of `batches.meta.txt`).
pub const CIFAR10_CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];

/// Bytes per record: a label and a 3 x 32 x 32 image.
pub const CIFAR10_RECORD: usize = 1 + 3 * 32 * 32;

/// The train files, in order.
pub const CIFAR10_TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];

/// The test file.
pub const CIFAR10_TEST_FILE: &str = "test_batch.bin";

/// CIFAR-10's train (the five data batches, in order) and test splits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cifar10 {
    /// `data_batch_1.bin` .. `data_batch_5.bin`.
    pub train: ImageSet,
    /// `test_batch.bin`.
    pub test: ImageSet,
}

impl Cifar10 {
    /// Reads the folder holding `data_batch_1.bin`. Class names come from `batches.meta.txt`
    /// when it is there (10 names), else the standard ones.
    pub fn open(dir: &Path) -> Result<Self> {
        let meta = dir.join("batches.meta.txt");
        let classes: Vec<String> = if meta.is_file() {
            let names = read_lines(&meta)?;
            if names.len() != 10 {
                return Err(DatasetError::format(
                    &meta,
                    "10 class names, one per line",
                    format!("{} non-empty lines", names.len()),
                ));
            }
            names
        } else {
            CIFAR10_CLASSES.iter().map(|c| c.to_string()).collect()
        };
        let train = read_batches(dir, &CIFAR10_TRAIN_FILES, &classes)?;
        let test = read_batches(dir, &[CIFAR10_TEST_FILE], &classes)?;
        Ok(Self { train, test })
    }
}

fn read_batches(dir: &Path, files: &[&str], classes: &[String]) -> Result<ImageSet> {
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    for name in files {
        let path = dir.join(name);
        let bytes = read_file(&path)?;
        let count = record_count(&path, bytes.len(), CIFAR10_RECORD, "CIFAR-10")?;
        pixels.reserve(count * (CIFAR10_RECORD - 1));
        for (i, record) in bytes.chunks_exact(CIFAR10_RECORD).enumerate() {
            if usize::from(record[0]) >= classes.len() {
                return Err(DatasetError::format(
                    &path,
                    format!("labels 0..{}", classes.len()),
                    format!("label {} in record {i}", record[0]),
                ));
            }
            labels.push(u16::from(record[0]));
            pixels.extend_from_slice(&record[1..]);
        }
    }
    ImageSet::new(3, 32, 32, pixels, labels, classes.to_vec())
}
