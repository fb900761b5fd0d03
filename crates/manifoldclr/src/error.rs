//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong in the contrastive stack.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClrError {
    /// A setting or an input out of its range: names it, what came and what was expected.
    #[error("invalid {name}: got {got}, {expected}")]
    Invalid {
        /// The setting or input.
        name: &'static str,
        /// What came.
        got: String,
        /// What it must satisfy.
        expected: String,
    },
    /// The loss or the gradients stopped being finite.
    #[error("training diverged at epoch {epoch}, step {step}: the {what} is {value}")]
    Diverged {
        /// 1-based epoch.
        epoch: usize,
        /// 1-based step.
        step: usize,
        /// What stopped being finite.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// A file or folder that could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A checkpoint that could not be written or read back.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// An exchange between data-parallel peers that failed.
    #[error("{op} between data-parallel peers failed: {reason}")]
    Collective {
        /// The exchange.
        op: &'static str,
        /// What the collective engine said.
        reason: String,
    },
    /// Another device of a data-parallel run failed (its own error is reported by that
    /// device): this one stopped with it.
    #[error("another device of the data-parallel run failed")]
    PeerFailed,
    /// An error of the operators and the exponential.
    #[error(transparent)]
    Core(#[from] vlgo_core::VlgoError),
}

impl ClrError {
    /// Shorthand for [`ClrError::Invalid`].
    pub fn invalid(name: &'static str, got: impl ToString, expected: impl ToString) -> Self {
        Self::Invalid {
            name,
            got: got.to_string(),
            expected: expected.to_string(),
        }
    }
}

/// Result with [`ClrError`].
pub type Result<T> = std::result::Result<T, ClrError>;
