//! SimCLR pre-training on STL-10 (the labeled training split and the unlabeled images), then the linear probe and kNN of the frozen features: the
//! library call behind `vlgo pretrain --config configs/stl10-simclr-mlp.toml`.
//!
//! `cargo run --release --example stl10 -- [--backend NAME] [DATA_DIR] [OUT_DIR] [KEY=VALUE ...]`
//! DATA_DIR: the `stl10_binary` folder, with `unlabeled_X.bin`; OUT_DIR defaults to `runs/example-stl10-simclr-mlp`;
//! KEY=VALUE overrides any setting, e.g. `pretrain.epochs=2`; `--backend` (or `VLGO_BACKEND`)
//! picks the backend as for `vlgo` (`docs/backends.md`).

fn main() -> Result<(), vlgo::CliError> {
    // Reuse freed tensor buffers instead of having the system zero fresh pages every step.
    vlgo_core::cpu::host::keep_freed_buffers();
    vlgo_core::threads::pool_on_this_thread();
    let summary = vlgo::pretrain::example("stl10-simclr-mlp")?;
    println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    Ok(())
}
