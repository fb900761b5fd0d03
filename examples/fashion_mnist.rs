//! SimCLR pre-training on Fashion-MNIST, then the linear probe and kNN of the frozen features: the
//! library call behind `vlgo pretrain --config configs/fashion-mnist-simclr-mlp-cpu.toml`.
//!
//! `cargo run --release --example fashion_mnist -- [--backend NAME] [DATA_DIR] [OUT_DIR] [KEY=VALUE ...]`
//! DATA_DIR: the folder of the IDX files (default: the Debian package's); OUT_DIR defaults to `runs/example-fashion-mnist-simclr-mlp-cpu`;
//! KEY=VALUE overrides any setting, e.g. `pretrain.epochs=2`; `--backend` (or `VLGO_BACKEND`)
//! picks the backend as for `vlgo` (`docs/backends.md`).

fn main() -> Result<(), vlgo::CliError> {
    // Reuse freed tensor buffers instead of having the system zero fresh pages every step.
    vlgo_core::cpu::host::keep_freed_buffers();
    vlgo_core::threads::pool_on_this_thread();
    let summary = vlgo::pretrain::example("fashion-mnist-simclr-mlp-cpu")?;
    println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    Ok(())
}
