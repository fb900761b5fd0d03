//! IDX files (LeCun's MNIST format, also Fashion-MNIST's), gzip-compressed or plain.
//!
//! Layout: two zero bytes, a type code (0x08 for unsigned bytes, the only one image data sets
//! use), the number of dimensions, each dimension as a big-endian u32, then the values. Images
//! are magic 2051 (3 dimensions: count, rows, columns), labels 2049 (1 dimension: count).

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use crate::error::{DatasetError, Result};
use crate::images::{ImageSet, read_file};

/// Names of Fashion-MNIST's ten classes, in label order.
pub const FASHION_MNIST_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// Where Debian's `dataset-fashion-mnist` package installs the data.
pub const FASHION_MNIST_DEBIAN_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// An IDX array of unsigned bytes: its dimensions and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    /// Dimensions, outermost first (the count of items first).
    pub dims: Vec<usize>,
    /// The values, `dims` product of them.
    pub data: Vec<u8>,
}

/// Reads an IDX file, gzip-compressed (recognised by its magic bytes) or plain. The header's
/// dimensions must account for the file's length exactly: a truncated file or trailing bytes are
/// errors naming the file.
///
/// ```no_run
/// let labels = vlgo_datasets::read_idx("train-labels-idx1-ubyte.gz".as_ref()).unwrap();
/// println!("{} labels", labels.dims[0]);
/// ```
pub fn read_idx(path: &Path) -> Result<IdxArray> {
    let raw = read_file(path)?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| DatasetError::format(path, "a complete gzip stream", e.to_string()))?;
        out
    } else {
        raw
    };
    if bytes.len() < 4 {
        return Err(DatasetError::format(
            path,
            "an IDX header (at least 4 bytes)",
            format!("{} bytes", bytes.len()),
        ));
    }
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let (zero, kind, ndims) = (u16::from_be_bytes([bytes[0], bytes[1]]), bytes[2], bytes[3]);
    if zero != 0 || kind != 0x08 || ndims == 0 {
        return Err(DatasetError::format(
            path,
            "IDX magic 0x0000 08 <dims> (unsigned bytes, e.g. 2049 labels, 2051 images)",
            format!("magic {magic} (0x{magic:08x})"),
        ));
    }
    let header = 4 + 4 * usize::from(ndims);
    if bytes.len() < header {
        return Err(DatasetError::format(
            path,
            format!("a {header}-byte header for {ndims} dimensions"),
            format!("{} bytes", bytes.len()),
        ));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let want = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let found = bytes.len() - header;
    if want != Some(found) {
        return Err(DatasetError::format(
            path,
            format!(
                "{} value bytes after the header (dimensions {dims:?})",
                want.map_or("an addressable number of".into(), |w| w.to_string())
            ),
            format!("{found}"),
        ));
    }
    let mut data = bytes;
    data.drain(..header);
    Ok(IdxArray { dims, data })
}

/// The train and test splits of an IDX image data set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxDataset {
    /// `train-images-idx3-ubyte.gz` with `train-labels-idx1-ubyte.gz`.
    pub train: ImageSet,
    /// `t10k-images-idx3-ubyte.gz` with `t10k-labels-idx1-ubyte.gz`.
    pub test: ImageSet,
}

impl IdxDataset {
    /// Reads the four files of an IDX image data set from `dir` (Fashion-MNIST's names; each
    /// may also be stored without `.gz`). Counts come from the headers, whatever they are, and
    /// are checked against the files' lengths and the label count against the image count.
    /// Labels must be below `classes.len()`.
    pub fn open(dir: &Path, classes: &[&str]) -> Result<Self> {
        let classes: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
        let split = |prefix: &str| -> Result<ImageSet> {
            let images_path = find(dir, &format!("{prefix}-images-idx3-ubyte"))?;
            let labels_path = find(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
            let images = read_idx(&images_path)?;
            let labels = read_idx(&labels_path)?;
            let [count, rows, cols] = images.dims[..] else {
                return Err(DatasetError::format(
                    &images_path,
                    "3 dimensions (magic 2051: count, rows, columns)",
                    format!("{} dimensions", images.dims.len()),
                ));
            };
            if labels.dims.len() != 1 {
                return Err(DatasetError::format(
                    &labels_path,
                    "1 dimension (magic 2049: count)",
                    format!("{} dimensions", labels.dims.len()),
                ));
            }
            if labels.dims[0] != count {
                return Err(DatasetError::format(
                    &labels_path,
                    format!("{count} labels, one per image of {}", images_path.display()),
                    format!("{} labels", labels.dims[0]),
                ));
            }
            if let Some((i, &l)) = labels
                .data
                .iter()
                .enumerate()
                .find(|&(_, &l)| usize::from(l) >= classes.len())
            {
                return Err(DatasetError::format(
                    &labels_path,
                    format!("labels 0..{}", classes.len()),
                    format!("label {l} at position {i}"),
                ));
            }
            let labels = labels.data.into_iter().map(u16::from).collect();
            ImageSet::new(1, rows, cols, images.data, labels, classes.clone())
        };
        Ok(Self {
            train: split("train")?,
            test: split("t10k")?,
        })
    }

    /// Fashion-MNIST from `dir`, with its class names.
    pub fn fashion_mnist(dir: &Path) -> Result<Self> {
        Self::open(dir, &FASHION_MNIST_CLASSES)
    }
}

/// Fashion-MNIST's folder when Debian's `dataset-fashion-mnist` package is installed.
pub fn find_fashion_mnist() -> Option<PathBuf> {
    let dir = PathBuf::from(FASHION_MNIST_DEBIAN_DIR);
    find(&dir, "train-images-idx3-ubyte").ok().map(|_| dir)
}

/// `<dir>/<stem>.gz`, or `<dir>/<stem>` when only the plain file exists.
fn find(dir: &Path, stem: &str) -> Result<PathBuf> {
    let gz = dir.join(format!("{stem}.gz"));
    let plain = dir.join(stem);
    if gz.is_file() {
        Ok(gz)
    } else if plain.is_file() {
        Ok(plain)
    } else {
        Err(DatasetError::io(
            &gz,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("neither {stem}.gz nor {stem} in this folder"),
            ),
        ))
    }
}
