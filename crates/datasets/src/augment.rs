//! SimCLR's image augmentation and the evaluation transform, on host bytes.
//!
//! A view is drawn in two steps: [`Augment::draw`] picks the random parameters from a stream
//! keyed by (seed, epoch, index, view), so a sample's views do not depend on which thread made
//! them or on what was drawn before; [`Augment::apply`] is then a pure function of the image and
//! those parameters. The order and the parameter ranges are SimCLR's (the protocol): colour
//! jitter (brightness, contrast, saturation, hue, in a random order) with probability 0.8,
//! grayscale with probability 0.1, random resized crop (area scale and aspect ratio as
//! torchvision draws them), horizontal flip with probability 0.5, per-channel normalisation.

use crate::rng::StreamRng;
use rand::Rng;
use rayon::prelude::*;

use crate::error::{DatasetError, Result};
use crate::images::ImageSet;
use crate::rng::stream;

/// Per-channel normalisation constants (of pixels in [0, 1]).
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    /// Mean per channel.
    pub mean: Vec<f32>,
    /// Standard deviation per channel (> 0).
    pub std: Vec<f32>,
}

impl Normalization {
    /// CIFAR-10's constants (the protocol's).
    pub fn cifar10() -> Self {
        Self {
            mean: vec![0.4914, 0.4822, 0.4465],
            std: vec![0.2023, 0.1994, 0.2010],
        }
    }

    /// STL-10's constants.
    pub fn stl10() -> Self {
        Self {
            mean: vec![0.43, 0.42, 0.39],
            std: vec![0.27, 0.26, 0.27],
        }
    }

    /// TinyImageNet's constants.
    pub fn tiny_imagenet() -> Self {
        Self {
            mean: vec![0.480, 0.448, 0.398],
            std: vec![0.277, 0.269, 0.282],
        }
    }

    /// Constants measured on a (training) set, for data sets without published ones.
    pub fn measured(set: &ImageSet) -> Self {
        let stats = set.channel_statistics();
        Self {
            mean: stats.iter().map(|s| s.0 as f32).collect(),
            std: stats.iter().map(|s| (s.1 as f32).max(1e-6)).collect(),
        }
    }

    fn check(&self, channels: usize) -> Result<()> {
        if self.mean.len() != channels || self.std.len() != channels {
            return Err(DatasetError::invalid(
                "normalization",
                format!("{} means and {} stds", self.mean.len(), self.std.len()),
                format!("one of each per channel ({channels})"),
            ));
        }
        if let Some(s) = self.std.iter().find(|s| !(**s > 0.0 && s.is_finite())) {
            return Err(DatasetError::invalid(
                "normalization std",
                s,
                "finite and > 0",
            ));
        }
        Ok(())
    }
}

/// Settings of SimCLR's augmentation (the protocol's values by default).
#[derive(Debug, Clone, PartialEq)]
pub struct AugmentConfig {
    /// Output side (the crop is resized to size x size).
    pub size: usize,
    /// Colour jitter strengths: brightness, contrast and saturation factors in [1 - s, 1 + s].
    pub brightness: f64,
    /// See `brightness`.
    pub contrast: f64,
    /// See `brightness`.
    pub saturation: f64,
    /// Hue shift in [-hue, hue] (fraction of a turn, <= 0.5).
    pub hue: f64,
    /// Probability of applying the colour jitter.
    pub jitter_probability: f64,
    /// Probability of turning the image gray.
    pub grayscale_probability: f64,
    /// Range of the crop's area, as a fraction of the image's.
    pub crop_scale: (f64, f64),
    /// Range of the crop's aspect ratio (width / height).
    pub crop_ratio: (f64, f64),
    /// Probability of a horizontal flip.
    pub flip_probability: f64,
}

impl AugmentConfig {
    /// The protocol's SimCLR settings at output side `size`.
    pub fn simclr(size: usize) -> Self {
        Self {
            size,
            brightness: 0.4,
            contrast: 0.4,
            saturation: 0.4,
            hue: 0.1,
            jitter_probability: 0.8,
            grayscale_probability: 0.1,
            crop_scale: (0.2, 1.0),
            crop_ratio: (3.0 / 4.0, 4.0 / 3.0),
            flip_probability: 0.5,
        }
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        if self.size == 0 {
            return Err(DatasetError::invalid("augment size", 0, ">= 1"));
        }
        for (name, v, hi) in [
            ("brightness", self.brightness, 1.0),
            ("contrast", self.contrast, 1.0),
            ("saturation", self.saturation, 1.0),
            ("hue", self.hue, 0.5),
            ("jitter_probability", self.jitter_probability, 1.0),
            ("grayscale_probability", self.grayscale_probability, 1.0),
            ("flip_probability", self.flip_probability, 1.0),
        ] {
            if !(0.0..=hi).contains(&v) {
                return Err(DatasetError::invalid(name, v, format!("in [0, {hi}]")));
            }
        }
        let (s0, s1) = self.crop_scale;
        if !(0.0 < s0 && s0 <= s1 && s1 <= 1.0) {
            return Err(DatasetError::invalid(
                "crop_scale",
                format!("({s0}, {s1})"),
                "0 < low <= high <= 1",
            ));
        }
        let (r0, r1) = self.crop_ratio;
        if !(0.0 < r0 && r0 <= r1 && r1.is_finite()) {
            return Err(DatasetError::invalid(
                "crop_ratio",
                format!("({r0}, {r1})"),
                "0 < low <= high, finite",
            ));
        }
        Ok(())
    }
}

/// The colour jitter of one view: factors and the order of the four operations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    /// Brightness factor.
    pub brightness: f32,
    /// Contrast factor.
    pub contrast: f32,
    /// Saturation factor.
    pub saturation: f32,
    /// Hue shift (fraction of a turn).
    pub hue: f32,
    /// Order: 0 brightness, 1 contrast, 2 saturation, 3 hue.
    pub order: [u8; 4],
}

/// Everything random about one view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ViewParams {
    /// The colour jitter, when drawn.
    pub jitter: Option<Jitter>,
    /// Whether the view is turned gray.
    pub grayscale: bool,
    /// The crop: top, left, height, width in source pixels.
    pub crop: [usize; 4],
    /// Whether the view is flipped left-right.
    pub flip: bool,
}

/// A SimCLR augmentation for images of one shape.
#[derive(Debug, Clone)]
pub struct Augment {
    config: AugmentConfig,
    norm: Normalization,
    channels: usize,
    height: usize,
    width: usize,
}

impl Augment {
    /// An augmentation of `channels x height x width` images, checked.
    pub fn new(
        config: AugmentConfig,
        norm: Normalization,
        channels: usize,
        height: usize,
        width: usize,
    ) -> Result<Self> {
        config.validate()?;
        norm.check(channels)?;
        if channels != 1 && channels != 3 {
            return Err(DatasetError::invalid("channels", channels, "1 or 3"));
        }
        if height == 0 || width == 0 {
            return Err(DatasetError::invalid(
                "image size",
                format!("{height} x {width}"),
                ">= 1 x 1",
            ));
        }
        Ok(Self {
            config,
            norm,
            channels,
            height,
            width,
        })
    }

    /// Floats per output view: channels x size x size.
    pub fn view_len(&self) -> usize {
        self.channels * self.config.size * self.config.size
    }

    /// The random parameters of view `view` of sample `index` in `epoch`.
    pub fn draw(&self, seed: u64, epoch: u64, index: u64, view: u64) -> ViewParams {
        let mut rng = stream(
            seed ^ epoch.wrapping_mul(0xA24B_AED4_963E_E407),
            index,
            view,
        );
        self.draw_with(&mut rng)
    }

    fn draw_with(&self, rng: &mut StreamRng) -> ViewParams {
        let c = &self.config;
        let factor =
            |rng: &mut StreamRng, s: f64| rng.random_range((1.0 - s).max(0.0)..=1.0 + s) as f32;
        let jitter = (rng.random::<f64>() < c.jitter_probability).then(|| {
            let mut order = [0u8, 1, 2, 3];
            for i in (1..4).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            Jitter {
                brightness: factor(rng, c.brightness),
                contrast: factor(rng, c.contrast),
                saturation: factor(rng, c.saturation),
                hue: rng.random_range(-c.hue..=c.hue) as f32,
                order,
            }
        });
        let grayscale = rng.random::<f64>() < c.grayscale_probability;
        let crop = self.draw_crop(rng);
        let flip = rng.random::<f64>() < c.flip_probability;
        ViewParams {
            jitter,
            grayscale,
            crop,
            flip,
        }
    }

    /// torchvision's RandomResizedCrop draw: ten tries of (area, log-uniform ratio), then the
    /// whole image's centre with the ratio clamped into range.
    fn draw_crop(&self, rng: &mut StreamRng) -> [usize; 4] {
        let (h, w) = (self.height as f64, self.width as f64);
        let area = h * w;
        let (s0, s1) = self.config.crop_scale;
        let (r0, r1) = self.config.crop_ratio;
        for _ in 0..10 {
            let target = area * rng.random_range(s0..=s1);
            let ratio = rng.random_range(r0.ln()..=r1.ln()).exp();
            let cw = (target * ratio).sqrt().round();
            let ch = (target / ratio).sqrt().round();
            if cw >= 1.0 && ch >= 1.0 && cw <= w && ch <= h {
                let (cw, ch) = (cw as usize, ch as usize);
                let top = rng.random_range(0..=self.height - ch);
                let left = rng.random_range(0..=self.width - cw);
                return [top, left, ch, cw];
            }
        }
        let ratio = w / h;
        let (ch, cw) = if ratio < r0 {
            ((w / r0).round(), w)
        } else if ratio > r1 {
            (h, (h * r1).round())
        } else {
            (h, w)
        };
        let (ch, cw) = (ch.max(1.0) as usize, cw.max(1.0) as usize);
        [(self.height - ch) / 2, (self.width - cw) / 2, ch, cw]
    }

    /// The view of `image` (bytes, planes row-major) under `params`, into `out` (channel planes
    /// of size x size floats, normalised).
    pub fn apply(&self, image: &[u8], params: &ViewParams, out: &mut [f32]) {
        let plane = self.height * self.width;
        let mut px: Vec<f32> = image.iter().map(|&v| f32::from(v) / 255.0).collect();
        if let Some(j) = params.jitter {
            for op in j.order {
                match op {
                    0 => px
                        .iter_mut()
                        .for_each(|v| *v = (*v * j.brightness).clamp(0.0, 1.0)),
                    1 => {
                        let mean = gray_plane(&px, self.channels, plane).iter().sum::<f32>()
                            / plane as f32;
                        blend_with(&mut px, |_| mean, j.contrast);
                    }
                    2 if self.channels == 3 => {
                        let gray = gray_plane(&px, 3, plane);
                        blend_with(&mut px, |i| gray[i % plane], j.saturation);
                    }
                    3 if self.channels == 3 => shift_hue(&mut px, plane, j.hue),
                    _ => {}
                }
            }
        }
        if params.grayscale && self.channels == 3 {
            let gray = gray_plane(&px, 3, plane);
            for c in 0..3 {
                px[c * plane..(c + 1) * plane].copy_from_slice(&gray);
            }
        }
        let size = self.config.size;
        let [top, left, ch, cw] = params.crop;
        for c in 0..self.channels {
            let src = &px[c * plane..(c + 1) * plane];
            let dst = &mut out[c * size * size..(c + 1) * size * size];
            resize_crop(src, self.width, [top, left, ch, cw], size, dst);
            if params.flip {
                dst.chunks_exact_mut(size).for_each(|row| row.reverse());
            }
            let (m, s) = (self.norm.mean[c], self.norm.std[c]);
            dst.iter_mut().for_each(|v| *v = (*v - m) / s);
        }
    }

    /// Both views of the samples `indices` of `set` in `epoch`, in index order whatever the
    /// thread count: `[len, C, size, size]` floats per view.
    pub fn two_views(
        &self,
        set: &ImageSet,
        indices: &[usize],
        seed: u64,
        epoch: u64,
    ) -> Result<[Vec<f32>; 2]> {
        check_shape(set, [self.channels, self.height, self.width])?;
        if let Some(&i) = indices.iter().find(|&&i| i >= set.len()) {
            return Err(DatasetError::invalid(
                "sample index",
                i,
                format!("below the set's size, {}", set.len()),
            ));
        }
        Ok(self.views_of(indices.len(), seed, epoch, |k| {
            (indices[k], set.image(indices[k]))
        }))
    }

    /// Both views of a batch gathered from a larger pool (a file read in pieces): image k of
    /// `batch` is sample `keys[k]` of the pool and draws that sample's randomness, so the views
    /// equal what [`two_views`](Self::two_views) gives on the whole pool.
    pub fn two_views_keyed(
        &self,
        batch: &ImageSet,
        keys: &[usize],
        seed: u64,
        epoch: u64,
    ) -> Result<[Vec<f32>; 2]> {
        check_shape(batch, [self.channels, self.height, self.width])?;
        if keys.len() != batch.len() {
            return Err(DatasetError::invalid(
                "sample keys",
                keys.len(),
                format!("one per image of the batch, {}", batch.len()),
            ));
        }
        Ok(self.views_of(keys.len(), seed, epoch, |k| (keys[k], batch.image(k))))
    }

    /// Views of `count` samples, sample k being (its key, its pixels).
    fn views_of<'a>(
        &self,
        count: usize,
        seed: u64,
        epoch: u64,
        sample: impl Fn(usize) -> (usize, &'a [u8]) + Sync,
    ) -> [Vec<f32>; 2] {
        let len = self.view_len();
        let mut views = [vec![0.0f32; count * len], vec![0.0f32; count * len]];
        for (v, out) in views.iter_mut().enumerate() {
            out.par_chunks_mut(len).enumerate().for_each(|(k, o)| {
                let (key, image) = sample(k);
                let params = self.draw(seed, epoch, key as u64, v as u64);
                self.apply(image, &params, o);
            });
        }
        views
    }
}

/// The evaluation transform: resize the short side to `resize` (none when it equals the image's),
/// centre-crop `size`, normalise. STL-10 evaluates with resize 70 and crop 64.
#[derive(Debug, Clone)]
pub struct EvalTransform {
    resize: usize,
    size: usize,
    norm: Normalization,
    channels: usize,
    height: usize,
    width: usize,
}

impl EvalTransform {
    /// A transform of `channels x height x width` images, checked.
    pub fn new(
        resize: usize,
        size: usize,
        norm: Normalization,
        channels: usize,
        height: usize,
        width: usize,
    ) -> Result<Self> {
        norm.check(channels)?;
        if size == 0 || size > resize || height == 0 || width == 0 {
            return Err(DatasetError::invalid(
                "eval sizes",
                format!("resize {resize}, crop {size}, image {height} x {width}"),
                "1 <= crop <= resize, a non-empty image",
            ));
        }
        Ok(Self {
            resize,
            size,
            norm,
            channels,
            height,
            width,
        })
    }

    /// Floats per output image.
    pub fn view_len(&self) -> usize {
        self.channels * self.size * self.size
    }

    /// The transformed image into `out`.
    pub fn apply(&self, image: &[u8], out: &mut [f32]) {
        let plane = self.height * self.width;
        let short = self.height.min(self.width) as f64;
        let scale = self.resize as f64 / short;
        // The centre `size` x `size` window of the resized image, in source pixels.
        let (ch, cw) = (self.size as f64 / scale, self.size as f64 / scale);
        let top = (self.height as f64 - ch) / 2.0;
        let left = (self.width as f64 - cw) / 2.0;
        for c in 0..self.channels {
            let src: Vec<f32> = image[c * plane..(c + 1) * plane]
                .iter()
                .map(|&v| f32::from(v) / 255.0)
                .collect();
            let dst = &mut out[c * self.size * self.size..(c + 1) * self.size * self.size];
            resample(&src, self.width, [top, left, ch, cw], self.size, dst);
            let (m, s) = (self.norm.mean[c], self.norm.std[c]);
            dst.iter_mut().for_each(|v| *v = (*v - m) / s);
        }
    }

    /// Every image of `set`, in order: `[len, C, size, size]` floats.
    pub fn all(&self, set: &ImageSet) -> Result<Vec<f32>> {
        check_shape(set, [self.channels, self.height, self.width])?;
        let len = self.view_len();
        let mut out = vec![0.0f32; set.len() * len];
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, o)| self.apply(set.image(i), o));
        Ok(out)
    }
}

/// Checks that `set` holds images of the shape a transform was built for.
fn check_shape(set: &ImageSet, [c, h, w]: [usize; 3]) -> Result<()> {
    if (set.channels, set.height, set.width) != (c, h, w) {
        return Err(DatasetError::invalid(
            "images",
            format!("{} x {} x {}", set.channels, set.height, set.width),
            format!("{c} x {h} x {w} (the transform's shape)"),
        ));
    }
    Ok(())
}

/// ITU-R 601 luma (PIL's "L" conversion, torchvision's rgb_to_grayscale); the plane itself for one
/// channel.
fn gray_plane(px: &[f32], channels: usize, plane: usize) -> Vec<f32> {
    if channels == 1 {
        return px[..plane].to_vec();
    }
    (0..plane)
        .map(|i| 0.299 * px[i] + 0.587 * px[plane + i] + 0.114 * px[2 * plane + i])
        .collect()
}

/// px <- clamp(factor * px + (1 - factor) * other(i)), torchvision's `_blend`.
fn blend_with(px: &mut [f32], other: impl Fn(usize) -> f32, factor: f32) {
    for (i, v) in px.iter_mut().enumerate() {
        *v = (factor * *v + (1.0 - factor) * other(i)).clamp(0.0, 1.0);
    }
}

/// Rotates the hue of an RGB image by `shift` turns (through HSV, as torchvision does).
fn shift_hue(px: &mut [f32], plane: usize, shift: f32) {
    for i in 0..plane {
        let (r, g, b) = (px[i], px[plane + i], px[2 * plane + i]);
        let max = r.max(g).max(b);
        let min = r.min(g).min(b);
        let delta = max - min;
        if delta <= 0.0 {
            continue; // gray: no hue to turn
        }
        let h = if max == r {
            ((g - b) / delta).rem_euclid(6.0)
        } else if max == g {
            (b - r) / delta + 2.0
        } else {
            (r - g) / delta + 4.0
        } / 6.0;
        let h = (h + shift).rem_euclid(1.0);
        let (s, v) = (delta / max, max);
        let sector = h * 6.0;
        let k = |n: f32| {
            let k = (n + sector).rem_euclid(6.0);
            v - v * s * k.min(4.0 - k).clamp(0.0, 1.0)
        };
        px[i] = k(5.0);
        px[plane + i] = k(3.0);
        px[2 * plane + i] = k(1.0);
    }
}

/// The integer crop `[top, left, height, width]` of a plane resized to `size` x `size`.
fn resize_crop(src: &[f32], width: usize, crop: [usize; 4], size: usize, dst: &mut [f32]) {
    let [t, l, h, w] = crop.map(|v| v as f64);
    resample(src, width, [t, l, h, w], size, dst);
}

/// Resamples the window `[top, left, height, width]` (source pixels, may be fractional) of a
/// plane to `size` x `size` with a triangle (bilinear) filter widened by the scale when
/// shrinking, as PIL's bilinear resize does, so a large crop does not alias.
fn resample(src: &[f32], width: usize, window: [f64; 4], size: usize, dst: &mut [f32]) {
    let height = src.len() / width;
    let [top, left, wh, ww] = window;
    let rows = filter_weights(top, wh, size, height);
    let cols = filter_weights(left, ww, size, width);
    // Rows first into a size x width buffer, then columns.
    let mut tmp = vec![0.0f32; size * width];
    for (y, (start, weights)) in rows.iter().enumerate() {
        let line = &mut tmp[y * width..(y + 1) * width];
        for (k, &wgt) in weights.iter().enumerate() {
            let s = &src[(start + k) * width..(start + k + 1) * width];
            line.iter_mut().zip(s).for_each(|(d, &v)| *d += wgt * v);
        }
    }
    for y in 0..size {
        let line = &tmp[y * width..(y + 1) * width];
        for (x, (start, weights)) in cols.iter().enumerate() {
            dst[y * size + x] = weights
                .iter()
                .enumerate()
                .map(|(k, &wgt)| wgt * line[start + k])
                .sum();
        }
    }
}

/// For each of `size` outputs along an axis: the first source index and the normalised weights
/// of the source pixels that fall under its filter.
fn filter_weights(offset: f64, extent: f64, size: usize, limit: usize) -> Vec<(usize, Vec<f32>)> {
    let scale = extent / size as f64;
    let support = scale.max(1.0);
    (0..size)
        .map(|o| {
            let centre = offset + (o as f64 + 0.5) * scale;
            let lo = ((centre - support).floor().max(0.0)) as usize;
            let hi = ((centre + support).ceil() as usize).min(limit);
            let mut weights: Vec<f32> = (lo..hi)
                .map(|s| {
                    let d = (s as f64 + 0.5 - centre).abs() / support;
                    (1.0 - d).max(0.0) as f32
                })
                .collect();
            let total: f32 = weights.iter().sum();
            if total > 0.0 {
                weights.iter_mut().for_each(|w| *w /= total);
            } else {
                // A window narrower than a pixel between centres: take the nearest pixel.
                weights.iter_mut().for_each(|w| *w = 0.0);
                let nearest = (centre.floor().max(0.0) as usize).min(limit - 1);
                return (nearest, vec![1.0]);
            }
            (lo, weights)
        })
        .collect()
}
