//! The options of the exponential and of the exponential-times-vector product.

use burn::config::Config;

// `#[derive(Config)]` expands to code that names `Result` unqualified.
use crate::error::{Result as VlgoResult, VlgoError};

use super::ExpmMethod;
/// Options of [`expm_with`](super::expm_with).
///
/// ```
/// use vlgo_core::{ExpmConfig, ExpmMethod};
/// let config = ExpmConfig::new().with_method(ExpmMethod::Taylor);
/// assert_eq!(config.method, ExpmMethod::Taylor);
/// ```
#[derive(Config, Debug, Copy, PartialEq)]
pub struct ExpmConfig {
    /// Approximation method (Padé by default).
    #[config(default = "ExpmMethod::Pade")]
    pub method: ExpmMethod,
}

impl Default for ExpmConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Options of [`expmv_with`](super::expmv_with): `new()` gives m_max 18, tol 2^-24, shift and fallback on.
///
/// ```
/// use vlgo_core::ExpmvConfig;
/// let config = ExpmvConfig::new().with_m_max(24);
/// assert_eq!((config.m_max, config.shift), (24, true));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Config, Debug, Copy, PartialEq)]
pub struct ExpmvConfig {
    /// Highest Taylor degree per step, 1..=24. The default 18 keeps the cancellation of terms as
    /// large as e^theta_m within f32's accuracy bar; 24 is slightly cheaper and slightly less
    /// accurate. (The f64 value 55 loses 2-4e-2 relative accuracy in f32.)
    #[config(default = 18)]
    pub m_max: usize,
    /// Early-termination tolerance relative to ||F||_inf; 2^-24 (f32 unit roundoff) by default
    /// (0 turns early termination off).
    #[config(default = "2f64.powi(-24)")]
    pub tol: f64,
    /// Shift by mu = tr(A)/n before the series (exact: exp(A) = e^mu exp(A - mu I)).
    #[config(default = true)]
    pub shift: bool,
    /// Form exp(A) and multiply, per matrix, when that is cheaper than the Taylor loop.
    #[config(default = true)]
    pub fallback: bool,
}

impl Default for ExpmvConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ExpmvConfig {
    /// Checks the options.
    ///
    /// ```
    /// use vlgo_core::ExpmvConfig;
    /// assert!(ExpmvConfig::new().with_m_max(30).validate().is_err());
    /// assert!(ExpmvConfig::new().with_tol(f64::NAN).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        if !(1..=24).contains(&self.m_max) {
            return Err(VlgoError::invalid(
                "expmv m_max",
                self.m_max,
                "must lie in 1..=24 (f32 Taylor thetas exist up to 24)",
            ));
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(VlgoError::invalid(
                "expmv tol",
                self.tol,
                "must be finite and >= 0",
            ));
        }
        Ok(())
    }
}
