//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong when user input enters `vlgo-core`.
///
/// Each variant names the operation or parameter and carries the offending value, so a message
/// reads like "expm: expected square matrices [N, n, n], got shape [4, 3, 2]".
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum VlgoError {
    /// A tensor had the wrong shape for the operation.
    #[error("{op}: expected {expected}, got shape {got:?}")]
    Shape {
        /// The operation that rejected the input.
        op: &'static str,
        /// What the operation expects, in words.
        expected: String,
        /// The shape that came.
        got: Vec<usize>,
    },
    /// Two tensors' shapes do not fit together.
    #[error("{op}: shapes do not match: {what} (got {lhs:?} and {rhs:?})")]
    ShapeMismatch {
        /// The operation that rejected the input.
        op: &'static str,
        /// Which dimensions must agree.
        what: &'static str,
        /// Shape of the first operand.
        lhs: Vec<usize>,
        /// Shape of the second operand.
        rhs: Vec<usize>,
    },
    /// A configuration value is outside its allowed range.
    #[error("invalid {name} = {value}: {requirement}")]
    InvalidParameter {
        /// The parameter's name as it appears in the config.
        name: &'static str,
        /// The value that came, formatted.
        value: String,
        /// What the value must satisfy.
        requirement: &'static str,
    },
    /// A floating-point data type that the operation cannot compute in.
    #[error("{op}: unsupported data type {dtype}; expected f16, bf16, f32 or f64")]
    UnsupportedDType {
        /// The operation that rejected the input.
        op: &'static str,
        /// The data type that came, formatted.
        dtype: String,
    },
    /// CubeCL could not compile a GPU kernel for its target.
    #[error("kernel {kernel} does not compile: {reason}")]
    KernelCompilation {
        /// The kernel (and its program table).
        kernel: String,
        /// The compiler's message.
        reason: String,
    },
}

impl VlgoError {
    /// Shorthand for [`VlgoError::InvalidParameter`].
    pub fn invalid(name: &'static str, value: impl ToString, requirement: &'static str) -> Self {
        Self::InvalidParameter {
            name,
            value: value.to_string(),
            requirement,
        }
    }
}

/// An error naming `op` unless the two shapes agree; `what` says which dimensions must.
pub(crate) fn check_same_shape(
    op: &'static str,
    what: &'static str,
    lhs: &[usize],
    rhs: &[usize],
) -> Result<()> {
    if lhs != rhs {
        return Err(VlgoError::ShapeMismatch {
            op,
            what,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        });
    }
    Ok(())
}

/// The crate's result type.
pub type Result<T> = core::result::Result<T, VlgoError>;
