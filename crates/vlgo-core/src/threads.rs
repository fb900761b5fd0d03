//! Which thread runs a training step on the CPU backends.
//!
//! The CPU kernels of this crate and most of Burn's CPU tensor operations spread their work over
//! rayon's pool. Called from a thread outside it (a program's main thread), each such operation
//! is handed to the pool while the caller sleeps until it is done: a pool thread and then the
//! caller are woken once per operation, hundreds of times in a training step, and the caller's
//! core takes no share of the work. Called from a pool thread, the operation starts there and
//! the pool's other threads join in.

use core::any::TypeId;

use burn::tensor::backend::Backend;

/// Runs `job` on a thread of rayon's pool where `B` computes on the CPU with this crate's
/// kernels (`Flex` and `NdArray` in f32, and `Autodiff` over either), on the calling thread
/// otherwise, and returns its result. Where the caller already is a thread of a rayon pool,
/// `job` runs at once on it.
///
/// On a 2-core machine, running each training step of the Fashion-MNIST CPU configs this way
/// made the step benchmark 1.02-1.05x faster and the `vlgo` program's training 1.10-1.11x
/// (`docs/pretrain.md`, "The step on a thread of rayon's pool"). `manifoldclr`'s pre-training
/// loop runs each step through it when it exchanges nothing with other devices; a program that
/// drives its own steps can do the same. The GPU backends keep the calling thread: their
/// streams are chosen per thread, and a step that moved between threads would move between
/// streams.
///
/// `job` holds a pool thread for as long as it runs, and while it waits inside a parallel
/// operation that thread may run other jobs of the pool (another thread's parallel work). So
/// `job` must not wait on a thread that itself needs a pool thread to go on: steps that wait for
/// each other at a barrier could deadlock once they outnumber the pool's threads. Its
/// allocations come from the pool thread's allocator arena rather than the main thread's (see
/// `vlgo_core::cpu::host::keep_freed_buffers`).
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
///
/// let on_pool = vlgo_core::threads::on_pool_worker::<Autodiff<NdArray>, _>(|| {
///     rayon::current_thread_index().is_some()
/// });
/// assert!(on_pool);
/// ```
pub fn on_pool_worker<B: Backend, R: Send>(job: impl FnOnce() -> R + Send) -> R {
    if !computes_on_cpu(TypeId::of::<B>()) || rayon::current_thread_index().is_some() {
        job()
    } else {
        // From outside the pool, `scope` runs its body on one of the global pool's threads.
        rayon::scope(|_| job())
    }
}

/// Whether the backend of this `TypeId` is one of the shipped CPU backends.
// Built without a CPU backend's feature, nothing is one.
#[allow(unused_variables)]
fn computes_on_cpu(id: TypeId) -> bool {
    #[allow(unused_macros)]
    macro_rules! with_autodiff {
        ($backend:ty) => {{
            use burn::backend::Autodiff;
            use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
            id == TypeId::of::<$backend>()
                || id == TypeId::of::<Autodiff<$backend>>()
                || id == TypeId::of::<Autodiff<$backend, BalancedCheckpointing>>()
        }};
    }
    #[cfg(feature = "flex")]
    if with_autodiff!(burn_flex::Flex) {
        return true;
    }
    #[cfg(feature = "ndarray")]
    if with_autodiff!(burn_ndarray::NdArray<f32>) {
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_backend_runs_on_the_pool_and_stays_on_its_thread_there() {
        type B = crate::testing::TestBackend;
        let on_cpu = computes_on_cpu(TypeId::of::<B>());
        // The test backend is one of ours on the CPU unless the suite runs on a GPU backend or
        // on Candle.
        let other = cfg!(any(
            feature = "test-wgpu",
            feature = "test-cuda",
            feature = "test-candle"
        ));
        assert_eq!(on_cpu, !other);
        let outside = on_pool_worker::<B, _>(rayon::current_thread_index);
        assert_eq!(outside.is_some(), on_cpu);
        // From a pool thread, the job runs on that thread.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (caller, inside) = pool.install(|| {
            let caller = rayon::current_thread_index();
            (caller, on_pool_worker::<B, _>(rayon::current_thread_index))
        });
        assert_eq!(caller, inside);
        // A backend of no kernel of ours keeps the calling thread.
        struct NotABackend;
        assert!(!computes_on_cpu(TypeId::of::<NotABackend>()));
    }

    #[test]
    fn a_panic_in_the_job_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            on_pool_worker::<crate::testing::TestBackend, ()>(|| panic!("inside the job"))
        });
        let payload = caught.expect_err("the job panicked");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"inside the job"));
    }
}
