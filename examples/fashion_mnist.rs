//! SimCLR pre-training on Fashion-MNIST, then the linear probe and kNN of the frozen features: the
//! library call behind `vlgo pretrain --config configs/fashion-mnist-simclr-mlp-cpu.toml`.
//!
//! `cargo run --release --example fashion_mnist -- [DATA_DIR] [OUT_DIR] [KEY=VALUE ...]`
//! DATA_DIR (default: the Debian package's folder); OUT_DIR defaults to `runs/example-fashion-mnist-simclr-mlp-cpu`; KEY=VALUE
//! overrides any setting, e.g. `pretrain.epochs=2`.

use burn::backend::{Autodiff, Flex};
use vlgo::pretrain::{ImageRunConfig, pretrain};

fn main() -> Result<(), vlgo::CliError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/fashion-mnist-simclr-mlp-cpu.toml"
    );
    let mut config = ImageRunConfig::load(path.as_ref())?;
    let (paths, sets): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| !a.contains('='));
    if let Some(dir) = paths.first() {
        config.data_dir = Some(dir.into());
    }
    for s in sets {
        config = vlgo::args::set(&config, s)?;
    }
    let out = paths
        .get(1)
        .map_or("runs/example-fashion-mnist-simclr-mlp-cpu".into(), |p| {
            p.to_string()
        });
    let summary = pretrain::<Autodiff<Flex>>(&config, out.as_ref(), false, &Default::default())?;
    println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    Ok(())
}
