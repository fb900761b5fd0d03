//! The 3-D swiss roll of the paper's synthetic experiment (`docs/swiss-roll.md`).

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::{DatasetError, Result};
use crate::rng::stream;

/// Settings of a swiss roll: t ~ 1.5 pi (1 + 2 U), height ~ 21 U, point (t cos t, height,
/// t sin t). No rescaling: coordinates span about [-14, 14] x [0, 21] x [-14, 14].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwissRollConfig {
    /// Number of points (>= 1).
    pub points: usize,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for SwissRollConfig {
    fn default() -> Self {
        Self {
            points: 5000,
            seed: 0,
        }
    }
}

/// Points on the roll with their intrinsic coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct SwissRoll {
    /// Points (x, y, z) with y the height.
    pub points: Vec<[f32; 3]>,
    /// Angle-radius parameter t of each point, in [1.5 pi, 4.5 pi].
    pub t: Vec<f32>,
}

impl SwissRollConfig {
    /// Draws the roll.
    ///
    /// ```
    /// use vlgo_datasets::SwissRollConfig;
    /// let roll = SwissRollConfig { points: 100, seed: 1 }.generate().unwrap();
    /// assert_eq!(roll.points.len(), 100);
    /// assert!(SwissRollConfig { points: 0, seed: 1 }.generate().is_err());
    /// ```
    pub fn generate(&self) -> Result<SwissRoll> {
        if self.points == 0 {
            return Err(DatasetError::invalid(
                "swiss roll points",
                0,
                "must be >= 1",
            ));
        }
        let mut rng = stream(self.seed, 0x5317, 0);
        let (points, t) = (0..self.points)
            .map(|_| {
                let t = 1.5 * std::f64::consts::PI * (1.0 + 2.0 * rng.random::<f64>());
                let h = 21.0 * rng.random::<f64>();
                (
                    [(t * t.cos()) as f32, h as f32, (t * t.sin()) as f32],
                    t as f32,
                )
            })
            .unzip();
        Ok(SwissRoll { points, t })
    }
}
