//! Which threads run a training step's parallel work on the CPU backends.
//!
//! The CPU kernels of this crate and most of Burn's CPU tensor operations spread their work over
//! rayon's global pool. Called from a thread outside it (a program's main thread), each such
//! operation is handed to the pool while the caller sleeps until it is done: a pool thread and
//! then the caller are woken once per operation, hundreds of times in a training step, and the
//! caller's core takes no share of the work. Called from a thread of the pool, the operation
//! starts there and the pool's other threads join in.

/// Makes the calling thread the first thread of rayon's global pool (the pool's other threads
/// are started as usual, as many in all as rayon would start), and returns whether that took
/// effect: `false` where the global pool already existed (something ran on it before), which
/// leaves everything as it was.
///
/// Called first thing in `main` (the `vlgo` program, the examples and the step bench do), it
/// lets the main thread take part in the parallel work of every step it runs instead of handing
/// each operation over and sleeping. On a 2-core machine that made the Fashion-MNIST CPU
/// configs' training step faster (`docs/pretrain.md`, "The main thread in rayon's pool"). The
/// step's buffers still come from the main thread's allocator arena, which
/// `vlgo_core::cpu::host::keep_freed_buffers` tunes; running the step on
/// another pool thread instead made the 64 MiB activations of a wider network come fresh from
/// the system at every step.
///
/// It changes the global pool of the whole process, so the library never calls it on its own.
/// The calling thread runs pool work only while it waits inside a parallel operation (or
/// `rayon::yield_now`); jobs that other threads hand to the pool meanwhile go to its other
/// threads.
///
/// A pool of one thread is left alone (returns `false`): its only thread would then be the
/// caller, and work that other threads hand to the pool (the trainer's views) would wait while
/// the caller waits for it.
///
/// ```
/// // First thing in `main`:
/// let joined = vlgo_core::threads::pool_on_this_thread();
/// assert_eq!(rayon::current_thread_index() == Some(0), joined);
/// // The pool exists now (or stays as rayon makes it): a second call changes nothing.
/// assert!(!vlgo_core::threads::pool_on_this_thread());
/// ```
pub fn pool_on_this_thread() -> bool {
    // The count rayon's builder would take.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads < 2 {
        return false;
    }
    rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global()
        .is_ok()
}
