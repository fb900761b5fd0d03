//! Writers of small data sets in each reader's exact byte layout, for tests and examples: what
//! they write, the readers must read back.
//!
//! ```
//! use vlgo_datasets::{Cifar10, fixtures};
//!
//! let dir = std::env::temp_dir().join(format!("vlgo-doc-cifar-{}", std::process::id()));
//! let train = fixtures::synthetic(3, 32, 32, 10, 10, 1);
//! let test = fixtures::synthetic(3, 32, 32, 10, 4, 2);
//! fixtures::write_cifar10(&dir, &train, &test).unwrap();
//! let read = Cifar10::open(&dir).unwrap();
//! assert_eq!(read.train.pixels, train.pixels);
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs;
use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use rand::Rng;

use crate::cifar10::{CIFAR10_TEST_FILE, CIFAR10_TRAIN_FILES};
use crate::error::{DatasetError, Result};
use crate::images::ImageSet;
use crate::rng::stream;
use crate::stl10::{STL10_IMAGE, STL10_SIDE};

/// `count` seeded images of `classes` classes: each class a smooth pattern of its own (a
/// brightness ramp whose direction and phase depend on the class) plus per-image noise, so that
/// the classes are learnable but not identical images. Labels cycle through the classes.
pub fn synthetic(
    channels: usize,
    height: usize,
    width: usize,
    classes: usize,
    count: usize,
    seed: u64,
) -> ImageSet {
    let classes = classes.max(1);
    let size = channels * height * width;
    let mut pixels = Vec::with_capacity(count * size);
    let mut labels = Vec::with_capacity(count);
    for i in 0..count {
        let label = i % classes;
        let mut rng = stream(seed, i as u64, 0);
        let angle = label as f64 * std::f64::consts::TAU / classes as f64;
        let (dx, dy) = (angle.cos(), angle.sin());
        for c in 0..channels {
            for y in 0..height {
                for x in 0..width {
                    let u = x as f64 / width as f64 - 0.5;
                    let v = y as f64 / height as f64 - 0.5;
                    let wave = ((u * dx + v * dy) * 6.0 + c as f64).sin();
                    let noise = rng.random::<f64>() - 0.5;
                    let value = 127.5 + 90.0 * wave + 60.0 * noise;
                    pixels.push(value.clamp(0.0, 255.0) as u8);
                }
            }
        }
        labels.push(label as u16);
    }
    let names = (0..classes).map(|c| format!("class-{c}")).collect();
    ImageSet::new(channels, height, width, pixels, labels, names)
        .expect("the synthetic set is consistent by construction")
}

fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).map_err(|e| DatasetError::io(path, e))
}

fn check_shape(set: &ImageSet, channels: usize, side: usize, what: &str) -> Result<()> {
    if (set.channels, set.height, set.width) != (channels, side, side) {
        return Err(DatasetError::invalid(
            "fixture images",
            format!("{} x {} x {}", set.channels, set.height, set.width),
            format!("{channels} x {side} x {side} for {what}"),
        ));
    }
    Ok(())
}

/// An IDX file of unsigned bytes with the given dimensions, gzip-compressed or plain.
pub fn write_idx(path: &Path, dims: &[usize], data: &[u8], gzip: bool) -> Result<()> {
    let mut bytes = vec![0, 0, 0x08, dims.len() as u8];
    for &d in dims {
        bytes.extend_from_slice(&(d as u32).to_be_bytes());
    }
    bytes.extend_from_slice(data);
    if gzip {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder
            .write_all(&bytes)
            .map_err(|e| DatasetError::io(path, e))?;
        bytes = encoder.finish().map_err(|e| DatasetError::io(path, e))?;
    }
    write(path, &bytes)
}

/// The four gzip files of an IDX image data set (Fashion-MNIST's names) from single-channel
/// sets.
pub fn write_idx_dataset(dir: &Path, train: &ImageSet, test: &ImageSet) -> Result<()> {
    create_dir(dir)?;
    for (prefix, set) in [("train", train), ("t10k", test)] {
        if set.channels != 1 {
            return Err(DatasetError::invalid(
                "fixture channels",
                set.channels,
                "1 for an IDX image file",
            ));
        }
        let labels: Vec<u8> = set.labels.iter().map(|&l| l as u8).collect();
        write_idx(
            &dir.join(format!("{prefix}-images-idx3-ubyte.gz")),
            &[set.len(), set.height, set.width],
            &set.pixels,
            true,
        )?;
        write_idx(
            &dir.join(format!("{prefix}-labels-idx1-ubyte.gz")),
            &[set.len()],
            &labels,
            true,
        )?;
    }
    Ok(())
}

/// CIFAR-10's binary files from 3 x 32 x 32 sets: the train set spread over the five data batches
/// (as evenly as it divides, in order), the test set in `test_batch.bin`, and
/// `batches.meta.txt`.
pub fn write_cifar10(dir: &Path, train: &ImageSet, test: &ImageSet) -> Result<()> {
    create_dir(dir)?;
    check_shape(train, 3, 32, "CIFAR-10")?;
    check_shape(test, 3, 32, "CIFAR-10")?;
    let records = |set: &ImageSet, range: std::ops::Range<usize>| -> Vec<u8> {
        range
            .flat_map(|i| std::iter::once(set.label(i) as u8).chain(set.image(i).iter().copied()))
            .collect()
    };
    let files = CIFAR10_TRAIN_FILES.len();
    for (k, name) in CIFAR10_TRAIN_FILES.iter().enumerate() {
        let range = k * train.len() / files..(k + 1) * train.len() / files;
        write(&dir.join(name), &records(train, range))?;
    }
    write(&dir.join(CIFAR10_TEST_FILE), &records(test, 0..test.len()))?;
    write(
        &dir.join("batches.meta.txt"),
        train.classes.join("\n").as_bytes(),
    )
}

/// STL-10's binary files from 3 x 96 x 96 sets (planes transposed to the file's column-major
/// layout, labels written 1-based), the unlabeled images (row-major planes, as
/// [`crate::Stl10Unlabeled::read`] returns them), `class_names.txt` and, when given,
/// `fold_indices.txt`.
pub fn write_stl10(
    dir: &Path,
    train: &ImageSet,
    test: &ImageSet,
    unlabeled: &[u8],
    folds: &[Vec<usize>],
) -> Result<()> {
    create_dir(dir)?;
    check_shape(train, 3, STL10_SIDE, "STL-10")?;
    check_shape(test, 3, STL10_SIDE, "STL-10")?;
    let column_major = |pixels: &[u8]| -> Vec<u8> {
        let side = STL10_SIDE;
        let mut out = vec![0u8; pixels.len()];
        for (s, d) in pixels
            .chunks_exact(side * side)
            .zip(out.chunks_exact_mut(side * side))
        {
            for y in 0..side {
                for x in 0..side {
                    d[x * side + y] = s[y * side + x];
                }
            }
        }
        out
    };
    for (split, set) in [("train", train), ("test", test)] {
        write(
            &dir.join(format!("{split}_X.bin")),
            &column_major(&set.pixels),
        )?;
        let labels: Vec<u8> = set.labels.iter().map(|&l| l as u8 + 1).collect();
        write(&dir.join(format!("{split}_y.bin")), &labels)?;
    }
    if !unlabeled.len().is_multiple_of(STL10_IMAGE) {
        return Err(DatasetError::invalid(
            "fixture unlabeled bytes",
            unlabeled.len(),
            format!("a multiple of {STL10_IMAGE}"),
        ));
    }
    write(&dir.join("unlabeled_X.bin"), &column_major(unlabeled))?;
    write(
        &dir.join("class_names.txt"),
        train.classes.join("\n").as_bytes(),
    )?;
    if !folds.is_empty() {
        let text: Vec<String> = folds
            .iter()
            .map(|f| {
                f.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        write(&dir.join("fold_indices.txt"), text.join("\n").as_bytes())?;
    }
    Ok(())
}

/// A TinyImageNet folder from 3 x 64 x 64 sets (JPEG at quality 100, so pixels come back within
/// JPEG's rounding, not exactly): `wnids.txt` with ids `n<label>`, `words.txt`, the train folders
/// and the validation images with `val_annotations.txt`. Images whose three planes are equal
/// are written as grayscale JPEGs, as some real ones are.
pub fn write_tiny_imagenet(dir: &Path, train: &ImageSet, val: &ImageSet) -> Result<()> {
    check_shape(train, 3, 64, "TinyImageNet")?;
    check_shape(val, 3, 64, "TinyImageNet")?;
    let wnids: Vec<String> = (0..train.classes.len())
        .map(|c| format!("n{c:08}"))
        .collect();
    create_dir(dir)?;
    write(&dir.join("wnids.txt"), wnids.join("\n").as_bytes())?;
    let words: Vec<String> = wnids
        .iter()
        .zip(&train.classes)
        .map(|(w, n)| format!("{w}\t{n}"))
        .collect();
    write(&dir.join("words.txt"), words.join("\n").as_bytes())?;
    for w in &wnids {
        create_dir(&dir.join("train").join(w).join("images"))?;
    }
    for i in 0..train.len() {
        let w = &wnids[usize::from(train.label(i))];
        let path = dir
            .join("train")
            .join(w)
            .join("images")
            .join(format!("{w}_{i}.JPEG"));
        write_jpeg(&path, train.image(i))?;
    }
    let images = dir.join("val").join("images");
    create_dir(&images)?;
    let mut annotations = Vec::new();
    for i in 0..val.len() {
        let name = format!("val_{i}.JPEG");
        write_jpeg(&images.join(&name), val.image(i))?;
        annotations.push(format!(
            "{name}\t{}\t0\t0\t63\t63",
            wnids[usize::from(val.label(i))]
        ));
    }
    write(
        &dir.join("val").join("val_annotations.txt"),
        annotations.join("\n").as_bytes(),
    )
}

fn write_jpeg(path: &Path, planes: &[u8]) -> Result<()> {
    let plane = 64 * 64;
    let (r, rest) = planes.split_at(plane);
    let (g, b) = rest.split_at(plane);
    let mut bytes = Vec::new();
    let mut encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 100);
    let encoded = if r == g && g == b {
        encoder.encode(r, 64, 64, image::ExtendedColorType::L8)
    } else {
        let rgb: Vec<u8> = (0..plane).flat_map(|i| [r[i], g[i], b[i]]).collect();
        encoder.encode(&rgb, 64, 64, image::ExtendedColorType::Rgb8)
    };
    encoded.map_err(|e| DatasetError::io(path, std::io::Error::other(e.to_string())))?;
    write(path, &bytes)
}
