//! Decoded image sets: what every reader yields.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{DatasetError, Result};

/// The images of one split, decoded to bytes, with their labels.
///
/// Pixels are stored image after image, each as `channels` planes of `height x width` bytes in
/// row-major order (the layout a `[N, C, H, W]` tensor takes), whatever the file's own layout.
///
/// ```
/// use vlgo_datasets::ImageSet;
///
/// let set = ImageSet::new(1, 2, 2, vec![0, 1, 2, 3, 4, 5, 6, 7], vec![0, 1], vec!["a".into(), "b".into()]).unwrap();
/// assert_eq!(set.len(), 2);
/// assert_eq!(set.image(1), &[4, 5, 6, 7]);
/// assert_eq!(set.label(1), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSet {
    /// Channels per image (1 grayscale, 3 RGB).
    pub channels: usize,
    /// Rows per image.
    pub height: usize,
    /// Columns per image.
    pub width: usize,
    /// `len() * channels * height * width` bytes, channel planes row-major.
    pub pixels: Vec<u8>,
    /// One label per image, `0..classes.len()`.
    pub labels: Vec<u16>,
    /// Class names in label order.
    pub classes: Vec<String>,
}

impl ImageSet {
    /// Checks that the pixels hold whole images, one per label, and that every label names a
    /// class.
    pub fn new(
        channels: usize,
        height: usize,
        width: usize,
        pixels: Vec<u8>,
        labels: Vec<u16>,
        classes: Vec<String>,
    ) -> Result<Self> {
        let size = channels * height * width;
        if size == 0 {
            return Err(DatasetError::invalid(
                "image size",
                format!("{channels} x {height} x {width}"),
                "every dimension must be >= 1",
            ));
        }
        if pixels.len() != labels.len() * size {
            return Err(DatasetError::invalid(
                "pixels",
                format!("{} bytes", pixels.len()),
                format!(
                    "{} labels x {size} bytes per image = {}",
                    labels.len(),
                    labels.len() * size
                ),
            ));
        }
        if let Some((i, &l)) = labels
            .iter()
            .enumerate()
            .find(|&(_, &l)| usize::from(l) >= classes.len())
        {
            return Err(DatasetError::invalid(
                "label",
                format!("{l} (image {i})"),
                format!("below the number of classes, {}", classes.len()),
            ));
        }
        Ok(Self {
            channels,
            height,
            width,
            pixels,
            labels,
            classes,
        })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the set holds no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Bytes per image: channels x height x width.
    pub fn image_size(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Image `i`'s bytes, channel planes row-major. Panics when `i >= len()`, like slice indexing.
    pub fn image(&self, i: usize) -> &[u8] {
        let size = self.image_size();
        &self.pixels[i * size..(i + 1) * size]
    }

    /// Image `i`'s label.
    pub fn label(&self, i: usize) -> u16 {
        self.labels[i]
    }

    /// Per-channel mean and standard deviation of the pixels scaled to [0, 1] (population
    /// statistics, accumulated in f64), for data sets without published normalisation constants.
    pub fn channel_statistics(&self) -> Vec<(f64, f64)> {
        let plane = self.height * self.width;
        let mut sums = vec![(0.0f64, 0.0f64); self.channels];
        for image in self.pixels.chunks_exact(self.image_size()) {
            for (c, values) in image.chunks_exact(plane).enumerate() {
                let (s, q) = values.iter().fold((0u64, 0u64), |(s, q), &v| {
                    (s + u64::from(v), q + u64::from(v) * u64::from(v))
                });
                sums[c].0 += s as f64;
                sums[c].1 += q as f64;
            }
        }
        let count = (self.len() * plane) as f64 * 255.0;
        sums.into_iter()
            .map(|(s, q)| {
                let mean = s / count;
                let var = (q / (count * 255.0) - mean * mean).max(0.0);
                (mean, var.sqrt())
            })
            .collect()
    }
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| DatasetError::io(path, e))?;
    Ok(bytes)
}

/// Reads a text file's non-empty lines (trimmed), naming the file in the error.
pub(crate) fn read_lines(path: &Path) -> Result<Vec<String>> {
    let bytes = read_file(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| DatasetError::format(path, "UTF-8 text", e.to_string()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Checks that a file holds a whole, non-zero number of records of `record` bytes.
pub(crate) fn record_count(path: &Path, len: usize, record: usize, what: &str) -> Result<usize> {
    if len == 0 || !len.is_multiple_of(record) {
        return Err(DatasetError::format(
            path,
            format!("a whole number of {what} records of {record} bytes"),
            format!(
                "{len} bytes ({} records and {} bytes over)",
                len / record,
                len % record
            ),
        ));
    }
    Ok(len / record)
}
