//! The program's error type: everything reaches the user as one message and a non-zero exit.

use std::path::PathBuf;

use thiserror::Error;

/// Errors of the `vlgo` program and its experiments.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CliError {
    /// A bad argument or setting: names it, what came and what was expected.
    #[error("invalid {name}: got {got}, {expected}")]
    Invalid {
        /// The argument or setting.
        name: String,
        /// What came.
        got: String,
        /// What it must satisfy.
        expected: String,
    },
    /// A malformed command line, as the argument parser words it (with the usage).
    #[error("{0}")]
    Usage(String),
    /// From the numerical core or the networks.
    #[error(transparent)]
    Core(#[from] vlgo_core::VlgoError),
    /// From the contrastive stack.
    #[error(transparent)]
    Clr(#[from] manifoldclr::ClrError),
    /// From a data set.
    #[error(transparent)]
    Dataset(#[from] vlgo_datasets::DatasetError),
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {path}: {message}")]
    Plot {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Training diverged.
    #[error("{method} diverged at epoch {epoch}: {what} is {value}")]
    Diverged {
        /// The method.
        method: String,
        /// The epoch.
        epoch: usize,
        /// The quantity.
        what: &'static str,
        /// Its value.
        value: f64,
    },
}

impl CliError {
    /// Shorthand for [`CliError::Invalid`].
    pub fn invalid(name: impl ToString, got: impl ToString, expected: impl ToString) -> Self {
        Self::Invalid {
            name: name.to_string(),
            got: got.to_string(),
            expected: expected.to_string(),
        }
    }

    /// Wraps an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

/// Result with [`CliError`].
pub type Result<T> = std::result::Result<T, CliError>;
