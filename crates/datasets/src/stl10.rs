//! STL-10, binary version (`stl10_binary/`).
//!
//! Images are 96 x 96 x 3 = 27,648 bytes each, stored channel by channel with **each channel
//! column-major**: byte `c * 9216 + x * 96 + y` is row y, column x of channel c. The reader
//! transposes every plane to row-major. Labels (`*_y.bin`) are bytes 1-10; they become 0-9.
//! The 100,000 unlabeled images (2.6 GiB) are not loaded: [`Stl10Unlabeled`] reads them by index
//! from the file.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{DatasetError, Result};
use crate::images::{ImageSet, read_file, read_lines, record_count};

/// STL-10's class names, in label order (those of `class_names.txt`).
pub const STL10_CLASSES: [&str; 10] = [
    "airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck",
];

/// Side of an STL-10 image.
pub const STL10_SIDE: usize = 96;

/// Bytes per STL-10 image.
pub const STL10_IMAGE: usize = 3 * STL10_SIDE * STL10_SIDE;

/// STL-10's labeled splits and the predefined training folds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stl10 {
    /// `train_X.bin` with `train_y.bin` (5,000 images).
    pub train: ImageSet,
    /// `test_X.bin` with `test_y.bin` (8,000 images).
    pub test: ImageSet,
    /// `fold_indices.txt`: 10 folds of 0-based indices into `train` (empty when the file is
    /// absent).
    pub folds: Vec<Vec<usize>>,
}

impl Stl10 {
    /// Reads the folder holding `train_X.bin`. Class names come from `class_names.txt` when it
    /// is there, else the standard ones.
    pub fn open(dir: &Path) -> Result<Self> {
        let names = dir.join("class_names.txt");
        let classes: Vec<String> = if names.is_file() {
            let lines = read_lines(&names)?;
            if lines.len() != 10 {
                return Err(DatasetError::format(
                    &names,
                    "10 class names, one per line",
                    format!("{} non-empty lines", lines.len()),
                ));
            }
            lines
        } else {
            STL10_CLASSES.iter().map(|c| c.to_string()).collect()
        };
        let train = read_split(dir, "train", &classes)?;
        let test = read_split(dir, "test", &classes)?;
        let folds_path = dir.join("fold_indices.txt");
        let folds = if folds_path.is_file() {
            read_folds(&folds_path, train.len())?
        } else {
            Vec::new()
        };
        Ok(Self { train, test, folds })
    }
}

/// The unlabeled images, read from `unlabeled_X.bin` by index (the file is 2.6 GiB).
#[derive(Debug)]
pub struct Stl10Unlabeled {
    path: PathBuf,
    file: File,
    count: usize,
}

impl Stl10Unlabeled {
    /// Opens `<dir>/unlabeled_X.bin` and checks that it holds whole images.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("unlabeled_X.bin");
        let file = File::open(&path).map_err(|e| DatasetError::io(&path, e))?;
        let len = file
            .metadata()
            .map_err(|e| DatasetError::io(&path, e))?
            .len();
        let len = usize::try_from(len).map_err(|_| {
            DatasetError::format(
                &path,
                "a size this machine can address",
                format!("{len} bytes"),
            )
        })?;
        let count = record_count(&path, len, STL10_IMAGE, "STL-10 image")?;
        Ok(Self { path, file, count })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the file holds no image (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Images `start..start + out.len() / 27648` into `out`, planes row-major.
    pub fn read(&self, start: usize, out: &mut [u8]) -> Result<()> {
        let n = out.len() / STL10_IMAGE;
        if !out.len().is_multiple_of(STL10_IMAGE) || start + n > self.count {
            return Err(DatasetError::invalid(
                "unlabeled range",
                format!("{n} images from {start} ({} bytes)", out.len()),
                format!("whole images within 0..{}", self.count),
            ));
        }
        let mut raw = vec![0u8; out.len()];
        read_at(&self.file, &mut raw, (start * STL10_IMAGE) as u64)
            .map_err(|e| DatasetError::io(&self.path, e))?;
        for (src, dst) in raw
            .chunks_exact(STL10_IMAGE)
            .zip(out.chunks_exact_mut(STL10_IMAGE))
        {
            transpose_image(src, dst);
        }
        Ok(())
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file.try_clone()?;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// One image from STL-10's layout (planes column-major) to planes row-major.
fn transpose_image(src: &[u8], dst: &mut [u8]) {
    let side = STL10_SIDE;
    for (s, d) in src
        .chunks_exact(side * side)
        .zip(dst.chunks_exact_mut(side * side))
    {
        for x in 0..side {
            for y in 0..side {
                d[y * side + x] = s[x * side + y];
            }
        }
    }
}

fn read_split(dir: &Path, split: &str, classes: &[String]) -> Result<ImageSet> {
    let x_path = dir.join(format!("{split}_X.bin"));
    let y_path = dir.join(format!("{split}_y.bin"));
    let raw = read_file(&x_path)?;
    let count = record_count(&x_path, raw.len(), STL10_IMAGE, "STL-10 image")?;
    let y = read_file(&y_path)?;
    if y.len() != count {
        return Err(DatasetError::format(
            &y_path,
            format!("{count} label bytes, one per image of {}", x_path.display()),
            format!("{} bytes", y.len()),
        ));
    }
    let mut labels = Vec::with_capacity(count);
    for (i, &l) in y.iter().enumerate() {
        if l == 0 || usize::from(l) > classes.len() {
            return Err(DatasetError::format(
                &y_path,
                format!("labels 1..={}", classes.len()),
                format!("label {l} at position {i}"),
            ));
        }
        labels.push(u16::from(l) - 1);
    }
    let mut pixels = vec![0u8; raw.len()];
    for (src, dst) in raw
        .chunks_exact(STL10_IMAGE)
        .zip(pixels.chunks_exact_mut(STL10_IMAGE))
    {
        transpose_image(src, dst);
    }
    ImageSet::new(3, STL10_SIDE, STL10_SIDE, pixels, labels, classes.to_vec())
}

fn read_folds(path: &Path, train: usize) -> Result<Vec<Vec<usize>>> {
    let lines = read_lines(path)?;
    if lines.len() != 10 {
        return Err(DatasetError::format(
            path,
            "10 folds, one line of indices each",
            format!("{} non-empty lines", lines.len()),
        ));
    }
    lines
        .iter()
        .enumerate()
        .map(|(f, line)| {
            line.split_whitespace()
                .map(|token| match token.parse::<usize>() {
                    Ok(i) if i < train => Ok(i),
                    _ => Err(DatasetError::format(
                        path,
                        format!("0-based indices below {train} (the train split's size)"),
                        format!("{token:?} on line {}", f + 1),
                    )),
                })
                .collect()
        })
        .collect()
}
