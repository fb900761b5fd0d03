//! SimCLR pre-training on CIFAR-10, then the linear probe and kNN of the frozen features: the
//! library call behind `vlgo pretrain --config configs/cifar10-simclr-mlp.toml`.
//!
//! `cargo run --release --example cifar10 -- [DATA_DIR] [OUT_DIR] [KEY=VALUE ...]`
//! DATA_DIR: the folder holding `data_batch_1.bin`; OUT_DIR defaults to `runs/example-cifar10-simclr-mlp`;
//! KEY=VALUE overrides any setting, e.g. `pretrain.epochs=2`.

use burn::backend::{Autodiff, Flex};

fn main() -> Result<(), vlgo::CliError> {
    let summary =
        vlgo::pretrain::run_example::<Autodiff<Flex>>("cifar10-simclr-mlp", &Default::default())?;
    println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    Ok(())
}
