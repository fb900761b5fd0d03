//! Datasets for VLGO and ManifoldCLR: image dataset readers, synthetic manifolds and pair
//! samplers. The crate knows nothing of models; it yields plain host arrays.
//!
//! ```
//! use vlgo_datasets::{NeighbourPairs, SwissRollConfig};
//!
//! let roll = SwissRollConfig { points: 500, seed: 0 }.generate().unwrap();
//! let pairs = NeighbourPairs::new(&roll.points, 20, 60).unwrap();
//! let batches = pairs.epoch(0, 0, 100);
//! assert_eq!(batches.len(), 5);
//! ```

pub mod error;
pub mod neighbours;
mod rng;
pub mod swiss_roll;

pub use error::{DatasetError, Result};
pub use neighbours::NeighbourPairs;
pub use swiss_roll::{SwissRoll, SwissRollConfig};
