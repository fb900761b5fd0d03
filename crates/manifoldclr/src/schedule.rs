//! Learning-rate schedule: linear warm-up, then cosine annealing per iteration to a minimum.
//!
//! A pure function of the iteration, so a resumed run needs nothing but the iteration count.

use serde::{Deserialize, Serialize};

use crate::error::{ClrError, Result};

/// Warm-up for `warmup` iterations (lr rising linearly to `base` at the end of the warm-up),
/// then cosine from `base` down to `min` at iteration `total`, and `min` after it.
///
/// ```
/// use manifoldclr::WarmupCosine;
///
/// let s = WarmupCosine { base: 1e-3, min: 1e-5, warmup: 10, total: 110 };
/// let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
/// assert!(close(s.lr(0), 1e-4)); // first iteration: 1/10 of the base
/// assert!(close(s.lr(9), 1e-3)); // end of warm-up
/// assert!(close(s.lr(59), 0.505e-3)); // half-way down the cosine
/// assert!(close(s.lr(500), 1e-5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WarmupCosine {
    /// Peak learning rate.
    pub base: f64,
    /// Learning rate at the end.
    pub min: f64,
    /// Warm-up iterations.
    pub warmup: usize,
    /// Iterations of the whole schedule (warm-up included).
    pub total: usize,
}

impl WarmupCosine {
    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        if !(self.base > 0.0 && self.base.is_finite() && self.min >= 0.0 && self.min <= self.base) {
            return Err(ClrError::invalid(
                "learning rates",
                format!("base {}, min {}", self.base, self.min),
                "0 <= min <= base, base finite and > 0",
            ));
        }
        if self.warmup > self.total {
            return Err(ClrError::invalid(
                "warm-up",
                format!("{} of {} iterations", self.warmup, self.total),
                "at most the schedule's length",
            ));
        }
        Ok(())
    }

    /// The learning rate of iteration `iteration` (0-based).
    pub fn lr(&self, iteration: usize) -> f64 {
        let step = iteration + 1;
        if step <= self.warmup {
            return self.base * step as f64 / self.warmup as f64;
        }
        let span = (self.total - self.warmup).max(1) as f64;
        let t = ((step - self.warmup) as f64 / span).min(1.0);
        self.min + 0.5 * (self.base - self.min) * (1.0 + (std::f64::consts::PI * t).cos())
    }
}
