//! Run-time routing from every Burn backend to the kernels of the backends this crate ships.
//!
//! [`ExpmBackend`](crate::ExpmBackend) and `layers::LayerBackend` (feature `layers`) are
//! implemented for every `B: Backend`. A trait implemented backend by backend would shut out
//! every backend not on our list (`burn-candle`, `burn-tch`, `Router`, the next one): the orphan
//! rule forbids a user's impl for a foreign backend, and Rust has no specialisation that would
//! let a blanket impl step aside for ours. So each method asks at run time whether `B` is one of
//! the shipped backends (by its `TypeId`) and then calls that backend's kernel; any other backend
//! takes the tensor-op path, the same maths in Burn's operations, which Burn's autodiff
//! differentiates.
//!
//! The shipped backends are the ones the crate's features name, with the type parameters of
//! Burn's aliases: `NdArray` (f32) with `ndarray`, `Flex` with `flex`, `Wgpu` and `Vulkan` with
//! `wgpu`, `Cuda` with `cuda` (each fused or not), and `Autodiff` over each of them with either
//! checkpointing strategy. Another instantiation (say `NdArray<f64>`, or `Wgpu<f16>`) is a
//! backend like any other: correct, through the tensor ops.
//!
//! The dispatchers are plain functions, not generic ones, so the shipped kernels compile once in
//! this crate rather than in every crate that calls them, and a call costs one `TypeId`
//! comparison per shipped backend and one small allocation for the result.

use core::any::{Any, TypeId};

/// Runs a shipped backend's kernel on arguments behind `dyn Any` (an `Option` of a tuple) for
/// the backend whose `TypeId` is given, or returns `None` and leaves the arguments in place
/// when that backend is not shipped.
pub(crate) type Dispatcher = fn(TypeId, &mut dyn Any) -> Option<Box<dyn Any>>;

/// Moves the value out of an `Option<T>` behind `dyn Any`.
///
/// Panics when the slot holds another type or nothing: [`route`] writes the argument tuple that
/// the dispatcher reads, so this is an invariant of the crate, not of the caller's input.
pub(crate) fn take<T: 'static>(slot: &mut dyn Any) -> T {
    slot.downcast_mut::<Option<T>>()
        .and_then(Option::take)
        .expect("a dispatcher reads the argument tuple its shim wrote")
}

/// `dispatch` on `args` where `B` is a shipped backend, `fallback` otherwise.
pub(crate) fn route<B: 'static, A: 'static, R: 'static>(
    dispatch: Dispatcher,
    args: A,
    fallback: impl FnOnce(A) -> R,
) -> R {
    let mut slot = Some(args);
    match dispatch(TypeId::of::<B>(), &mut slot) {
        // The dispatcher ran `B`'s own kernel, whose result type is `R` for `B`.
        Some(out) => *out
            .downcast::<R>()
            .expect("a shipped kernel returns its backend's types"),
        None => fallback(
            slot.take()
                .expect("a dispatcher that declines leaves the arguments"),
        ),
    }
}

/// Evaluates `$body` with the type `$K` bound to the shipped backend whose `TypeId` is `$id`,
/// and returns it (boxed, in `Some`) from the enclosing function; falls through when `$id` is
/// none of them.
macro_rules! dispatch_shipped {
    ($id:expr, $K:ident => $body:expr) => {{
        let id: core::any::TypeId = $id;
        $crate::shipped::dispatch_shipped!(@with_autodiff id, $K, $body, "ndarray",
            burn_ndarray::NdArray<f32>);
        $crate::shipped::dispatch_shipped!(@with_autodiff id, $K, $body, "flex", burn_flex::Flex);
        $crate::shipped::dispatch_shipped!(@cube id, $K, $body, "wgpu",
            burn_cubecl::cubecl::wgpu::WgpuRuntime, u32);
        $crate::shipped::dispatch_shipped!(@cube id, $K, $body, "wgpu",
            burn_cubecl::cubecl::wgpu::WgpuRuntime, u8);
        $crate::shipped::dispatch_shipped!(@cube id, $K, $body, "cuda",
            burn_cubecl::cubecl::cuda::CudaRuntime, u8);
    }};
    (@cube $id:ident, $K:ident, $body:expr, $feature:literal, $runtime:ty, $bool:ty) => {
        $crate::shipped::dispatch_shipped!(@with_autodiff $id, $K, $body, $feature,
            burn_cubecl::CubeBackend<$runtime, f32, i32, $bool>);
        $crate::shipped::dispatch_shipped!(@with_autodiff $id, $K, $body, $feature,
            burn_fusion::Fusion<burn_cubecl::CubeBackend<$runtime, f32, i32, $bool>>);
    };
    (@with_autodiff $id:ident, $K:ident, $body:expr, $feature:literal, $backend:ty) => {
        #[cfg(feature = $feature)]
        {
            $crate::shipped::dispatch_shipped!(@one $id, $K, $body, $backend);
            $crate::shipped::dispatch_shipped!(@one $id, $K, $body,
                burn::backend::Autodiff<$backend>);
            $crate::shipped::dispatch_shipped!(@one $id, $K, $body,
                burn::backend::Autodiff<$backend,
                    burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing>);
        }
    };
    (@one $id:ident, $K:ident, $body:expr, $backend:ty) => {{
        type $K = $backend;
        if $id == core::any::TypeId::of::<$K>() {
            return Some(Box::new($body));
        }
    }};
}
pub(crate) use dispatch_shipped;
