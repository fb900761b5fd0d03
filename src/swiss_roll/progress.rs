//! Progress bars for long work: rate and time left, on standard error.

use indicatif::{ProgressBar, ProgressStyle};

use super::{EpochMetrics, MethodRun};

/// One method's epoch bar.
pub struct EpochBar {
    bar: ProgressBar,
}

impl EpochBar {
    /// A bar of `epochs` steps labelled `name` (hidden when standard error is not a terminal).
    pub fn new(name: &str, epochs: usize) -> Self {
        let bar = ProgressBar::new(epochs as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>16} [{bar:30}] {pos:>4}/{len} epochs {per_sec:>12} eta {eta:>4} {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(name.to_string());
        Self { bar }
    }

    /// Advances to `m`'s epoch and shows its figures.
    pub fn update(&self, m: &EpochMetrics) {
        self.bar.set_position(m.epoch as u64);
        self.bar
            .set_message(format!("mse {:.4}  l1 {:.4}", m.mse, m.l1));
    }

    /// Leaves the bar with the final figures.
    pub fn finish(&self, run: &MethodRun) {
        self.bar.finish_with_message(format!(
            "mse {:.4}  l1 {:.4}  {:.1} s",
            run.epochs.last().map_or(f64::NAN, |e| e.mse),
            run.epochs.last().map_or(f64::NAN, |e| e.l1),
            run.train_seconds()
        ));
    }
}
