//! # vlgo
//!
//! The `vlgo` program's library: the experiments it runs, their run folders, progress bars and
//! plots. The numerical core is [`vlgo_core`], the networks [`vlgo_nn`], the data
//! [`vlgo_datasets`].

pub mod args;
pub mod backend;
pub mod compare;
pub mod demo;
pub mod diagnostics;
pub mod error;
pub mod plot;
pub mod pretrain;
pub mod progress;
pub mod run_folder;
pub mod semisup;
pub mod stats;
pub mod sweep;
pub mod swiss_roll;

pub use error::{CliError, Result};
