//! SimCLR pre-training on TinyImageNet, then the linear probe and kNN of the frozen features: the
//! library call behind `vlgo pretrain --config configs/tinyimagenet-simclr-mlp.toml`.
//!
//! `cargo run --release --example tinyimagenet -- [--backend NAME] [DATA_DIR] [OUT_DIR] [KEY=VALUE ...]`
//! DATA_DIR: the folder holding `wnids.txt`; OUT_DIR defaults to `runs/example-tinyimagenet-simclr-mlp`;
//! KEY=VALUE overrides any setting, e.g. `pretrain.epochs=2`; `--backend` (or `VLGO_BACKEND`)
//! picks the backend as for `vlgo` (`docs/backends.md`).

fn main() -> Result<(), vlgo::CliError> {
    // Reuse freed tensor buffers instead of having the system zero fresh pages every step.
    vlgo_core::cpu::host::keep_freed_buffers();
    vlgo_core::threads::pool_on_this_thread();
    let summary = vlgo::pretrain::example("tinyimagenet-simclr-mlp")?;
    println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    Ok(())
}
