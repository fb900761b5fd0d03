//! TinyImageNet (`tiny-imagenet-200/`): 200 classes of 64 x 64 JPEGs.
//!
//! `wnids.txt` fixes the label order; `words.txt` (optional) names the classes; the training
//! images sit in `train/<wnid>/images/*.JPEG` (500 per class in the real set), the validation
//! images in `val/images/` with their classes in `val/val_annotations.txt` (tab-separated: file,
//! wnid, bounding box). Every image is decoded once, when the set is opened; grayscale images
//! become RGB by repeating the plane.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{DatasetError, Result};
use crate::images::{ImageSet, read_file, read_lines};

/// Side of a TinyImageNet image.
pub const TINY_IMAGENET_SIDE: usize = 64;

/// TinyImageNet's train and validation splits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TinyImageNet {
    /// `train/<wnid>/images/*.JPEG`, classes in `wnids.txt` order, files by name.
    pub train: ImageSet,
    /// `val/images/*.JPEG` in `val_annotations.txt` order.
    pub val: ImageSet,
    /// The WordNet ids, in label order.
    pub wnids: Vec<String>,
}

impl TinyImageNet {
    /// Reads and decodes the folder holding `wnids.txt`.
    pub fn open(dir: &Path) -> Result<Self> {
        let wnids = read_lines(&dir.join("wnids.txt"))?;
        if wnids.is_empty() {
            return Err(DatasetError::format(
                dir.join("wnids.txt"),
                "one WordNet id per line",
                "no line",
            ));
        }
        let classes = class_names(dir, &wnids)?;

        let mut train_files = Vec::new();
        for (label, wnid) in wnids.iter().enumerate() {
            let folder = dir.join("train").join(wnid).join("images");
            let mut files = jpegs_in(&folder)?;
            if files.is_empty() {
                return Err(DatasetError::format(
                    &folder,
                    format!("the JPEG images of class {wnid}"),
                    "no .JPEG file",
                ));
            }
            files.sort();
            train_files.extend(files.into_iter().map(|f| (f, label as u16)));
        }

        let annotations = dir.join("val").join("val_annotations.txt");
        let mut val_files = Vec::new();
        for (i, line) in read_lines(&annotations)?.iter().enumerate() {
            let mut fields = line.split('\t');
            let (Some(file), Some(wnid)) = (fields.next(), fields.next()) else {
                return Err(DatasetError::format(
                    &annotations,
                    "tab-separated lines: file, wnid, box",
                    format!("line {}: {line:?}", i + 1),
                ));
            };
            let Some(label) = wnids.iter().position(|w| w == wnid) else {
                return Err(DatasetError::format(
                    &annotations,
                    "WordNet ids listed in wnids.txt",
                    format!("{wnid:?} on line {}", i + 1),
                ));
            };
            val_files.push((dir.join("val").join("images").join(file), label as u16));
        }

        Ok(Self {
            train: decode_all(&train_files, &classes)?,
            val: decode_all(&val_files, &classes)?,
            wnids,
        })
    }
}

/// Names from `words.txt` (`wnid<TAB>names`), the wnid itself where it has none.
fn class_names(dir: &Path, wnids: &[String]) -> Result<Vec<String>> {
    let words = dir.join("words.txt");
    if !words.is_file() {
        return Ok(wnids.to_vec());
    }
    let lines = read_lines(&words)?;
    let names: std::collections::HashMap<&str, &str> =
        lines.iter().filter_map(|l| l.split_once('\t')).collect();
    Ok(wnids
        .iter()
        .map(|w| names.get(w.as_str()).map_or(w.clone(), |n| n.to_string()))
        .collect())
}

fn jpegs_in(folder: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(folder).map_err(|e| DatasetError::io(folder, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| DatasetError::io(folder, e))?.path();
        let is_jpeg = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("jpeg") || e.eq_ignore_ascii_case("jpg"));
        if is_jpeg {
            files.push(path);
        }
    }
    Ok(files)
}

fn decode_all(files: &[(PathBuf, u16)], classes: &[String]) -> Result<ImageSet> {
    let side = TINY_IMAGENET_SIDE;
    let plane = side * side;
    let mut pixels = vec![0u8; files.len() * 3 * plane];
    pixels
        .par_chunks_mut(3 * plane)
        .zip(files.par_iter())
        .try_for_each(|(out, (path, _))| decode(path, out))?;
    let labels = files.iter().map(|(_, l)| *l).collect();
    ImageSet::new(3, side, side, pixels, labels, classes.to_vec())
}

/// One JPEG into `out` as three row-major planes.
fn decode(path: &Path, out: &mut [u8]) -> Result<()> {
    let bytes = read_file(path)?;
    let image = image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
        .map_err(|e| DatasetError::format(path, "a JPEG image", e.to_string()))?;
    let side = TINY_IMAGENET_SIDE as u32;
    if image.width() != side || image.height() != side {
        return Err(DatasetError::format(
            path,
            format!("{side} x {side} pixels"),
            format!("{} x {}", image.width(), image.height()),
        ));
    }
    let rgb = image.to_rgb8();
    let plane = (side * side) as usize;
    for (i, px) in rgb.pixels().enumerate() {
        for c in 0..3 {
            out[c * plane + i] = px.0[c];
        }
    }
    Ok(())
}
