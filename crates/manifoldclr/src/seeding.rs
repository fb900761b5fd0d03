//! Seeded draws from the backend's generator that other threads cannot interleave.
//!
//! Burn initialises parameters (and draws `Tensor::random`) from one generator per backend,
//! shared by the whole process, and `Backend::seed` resets it for everybody. Two threads that
//! each seed and then initialise a model interleave their draws in the order the scheduler
//! picks: the same seed then gives other weights from one process to the next. [`seeded`] holds
//! a process-wide lock from the seed to the last draw, so that the library's own seeded
//! initialisations ([`Pretrainer::new`](crate::Pretrainer::new), [`linear_probe`](crate::linear_probe))
//! and any caller's that goes through it give the same values whatever runs beside them. Code
//! that draws from the generator without it can still disturb them.

use std::sync::Mutex;

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

static GENERATOR: Mutex<()> = Mutex::new(());

/// Seeds the backend's generator with `seed` and runs `draw`, while no other [`seeded`] call of
/// the process seeds or draws.
///
/// Burn draws a parameter's initial values lazily, at its first use: materialise the module's
/// parameters inside `draw` (with [`materialised`]), or they are drawn later, outside the lock.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let draw = || {
///     manifoldclr::seeded::<NdArray, _>(&device, 7, || {
///         Tensor::<NdArray, 1>::random([4], burn::tensor::Distribution::Default, &device)
///     })
/// };
/// assert_eq!(draw().into_data(), draw().into_data());
/// ```
pub fn seeded<B: Backend, T>(device: &B::Device, seed: u64, draw: impl FnOnce() -> T) -> T {
    // A panic inside another draw leaves nothing half-done that this one depends on: the seed
    // below resets the generator.
    let _guard = GENERATOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    B::seed(device, seed);
    draw()
}

/// `module` with every parameter's initial values drawn now, from the generator as it stands.
///
/// Burn draws them lazily, at first use; a clone of a parameter not yet used draws on its own.
/// Inside [`seeded`] this fixes a module's weights to its seed.
pub fn materialised<B: Backend, M: Module<B>>(module: M) -> M {
    module.visit(&mut Materialise);
    module
}

struct Materialise;

impl<B: Backend> ModuleVisitor<B> for Materialise {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}
