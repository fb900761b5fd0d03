//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong when building or reading a data set.
#[derive(Debug, Error)]
pub enum DatasetError {
    /// A parameter out of its range: names it, what came and what was expected.
    #[error("invalid {name}: got {got}, {expected}")]
    Invalid {
        /// The parameter.
        name: &'static str,
        /// The value that came.
        got: String,
        /// What it must satisfy.
        expected: String,
    },
}

impl DatasetError {
    /// Shorthand for [`DatasetError::Invalid`].
    pub fn invalid(name: &'static str, got: impl ToString, expected: impl ToString) -> Self {
        Self::Invalid {
            name,
            got: got.to_string(),
            expected: expected.to_string(),
        }
    }
}

/// Result with [`DatasetError`].
pub type Result<T> = std::result::Result<T, DatasetError>;
