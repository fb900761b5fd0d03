//! Wall time spent in each layer kernel, per kernel and shape: where a training step's time goes
//! on the CPU backends, layer by layer, in the terms a framework's profiler uses (PyTorch's
//! `torch.profiler` reports each operator's time on the calling thread the same way).
//!
//! Off unless [`start`] is called; while off, a kernel call pays one relaxed atomic load. While
//! on, each call of a CPU layer kernel (convolution, batch norm and its fused variants, max
//! pooling, batched linear layers, the fused AdamW step; forward and backward) adds its wall time,
//! reading its operands and making its outputs included, to its record. The kernels run their own
//! threads inside the call, so the time is that of the whole machine's work on the layer. Burn's
//! operations between the layers (element-wise operations, the loss, autodiff's bookkeeping)
//! are not recorded: a step's time less the sum of the records is theirs. Calls made at the same
//! time from several threads (one model per thread) each count their own wall time, so their
//! records can add up to more than the time that passed.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::prelude::*;
//! use vlgo_core::layers::{self, timing};
//!
//! let device = Default::default();
//! let x = Tensor::<NdArray, 4>::ones([2, 3, 8, 8], &device);
//! let pool = burn::nn::pool::MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
//! timing::start();
//! let _y = layers::max_pool2d_module(&pool, x);
//! let times = timing::finish();
//! assert_eq!(times[0].layer, "max pool forward");
//! assert_eq!(times[0].shape, "[2, 3, 8, 8] kernel 2x2 stride 2x2 padding 0x0");
//! assert_eq!(times[0].calls, 1);
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
/// Calls and total time per (layer, shape); `None` while never started or after [`finish`].
type Records = Option<HashMap<(&'static str, String), (u64, Duration)>>;

static RECORDS: Mutex<Records> = Mutex::new(None);

/// The calls of one layer kernel on one shape since [`start`].
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTime {
    /// The kernel and its pass, e.g. `"conv backward"`.
    pub layer: &'static str,
    /// The input's shape and the layer's settings.
    pub shape: String,
    /// How many calls were timed.
    pub calls: u64,
    /// Their wall time in all, in seconds.
    pub seconds: f64,
}

/// Starts recording layer times, dropping any records not yet taken.
pub fn start() {
    *records() = Some(HashMap::new());
    ON.store(true, Ordering::Relaxed);
}

/// Stops recording and returns the records since [`start`], the largest total time first (empty
/// if recording was not started).
pub fn finish() -> Vec<LayerTime> {
    ON.store(false, Ordering::Relaxed);
    let mut times: Vec<LayerTime> = records()
        .take()
        .unwrap_or_default()
        .into_iter()
        .map(|((layer, shape), (calls, time))| LayerTime {
            layer,
            shape,
            calls,
            seconds: time.as_secs_f64(),
        })
        .collect();
    times.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.layer.cmp(b.layer)));
    times
}

fn records() -> MutexGuard<'static, Records> {
    // A panic elsewhere while the lock was held leaves the records usable.
    RECORDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Times `work` as a call of `layer` on the shape that `shape` describes, when recording.
// Only the CPU kernels, which the backend features bring, are timed.
#[cfg_attr(not(any(feature = "ndarray", feature = "flex")), allow(dead_code))]
pub(crate) fn timed<T>(
    layer: &'static str,
    shape: impl FnOnce() -> String,
    work: impl FnOnce() -> T,
) -> T {
    if !ON.load(Ordering::Relaxed) {
        return work();
    }
    let t = Instant::now();
    let out = work();
    let elapsed = t.elapsed();
    if let Some(map) = records().as_mut() {
        let entry = map.entry((layer, shape())).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
    }
    out
}
