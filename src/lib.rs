//! # vlgo
//!
//! The `vlgo` program's library: the experiments it runs, their run folders, progress bars and
//! plots. The numerical core is [`vlgo_core`], the networks [`vlgo_nn`], the data
//! [`vlgo_datasets`].
//!
//! The modules depend on each other in one direction, from the bottom up (a module uses only
//! those on lines above its own):
//!
//! 1. [`error`], [`stats`], [`demo`];
//! 2. [`settings`] (`KEY=VALUE` overrides), [`run_folder`], [`plot`], [`backend`];
//! 3. [`compare`] (tables of run folders);
//! 4. [`pretrain`] (image runs and their settings);
//! 5. [`diagnostics`], [`semisup`], [`sweep`] (each on pre-training's run folders);
//! 6. [`swiss_roll`] (its grid shares the sweep's axes);
//! 7. [`args`], the command line, over all of them.

pub mod args;
pub mod backend;
pub mod compare;
pub mod demo;
pub mod diagnostics;
pub mod error;
pub mod plot;
pub mod pretrain;
pub mod run_folder;
pub mod semisup;
pub mod settings;
pub mod stats;
pub mod sweep;
pub mod swiss_roll;

pub use error::{CliError, Result};
