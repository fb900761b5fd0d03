//! The crate's one error type.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Everything that can go wrong when building or reading a data set.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    /// A file or folder that could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file whose content is not what its format says: names the file, what was expected and
    /// what was found.
    #[error("{}: expected {expected}, found {found}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the format requires.
        expected: String,
        /// What the file holds.
        found: String,
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

impl DatasetError {
    /// Shorthand for [`DatasetError::Io`].
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Shorthand for [`DatasetError::Format`].
    pub fn format(path: impl AsRef<Path>, expected: impl ToString, found: impl ToString) -> Self {
        Self::Format {
            path: path.as_ref().to_path_buf(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }
}

/// Result with [`DatasetError`].
pub type Result<T> = std::result::Result<T, DatasetError>;
