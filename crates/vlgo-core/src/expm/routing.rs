//! [`ExpmBackend`], implemented for every Burn backend: the shipped backends' kernels where `B`
//! is one of them, the tensor-op path otherwise (see [`crate::shipped`]).

use core::any::{Any, TypeId};

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};

#[allow(unused_imports)]
use super::backend::{ExpmKernels, expmv_generated_by_ops, unwrap, wrap};
use super::expmv::{self, ExpmvCheckpoints};
use super::{ExpmMethod, ExpmvConfig, tensor_ops};
// Built without a kernel feature, the dispatchers reach no kernel and take no argument.
#[allow(unused_imports)]
use crate::shipped::{dispatch_shipped, route, take};

/// Backends that compute the matrix exponential and the exponential-times-vector product:
/// every Burn backend.
///
/// The trait is implemented for every `B: Backend`, so a backend this crate does not know
/// (`burn-candle`, `burn-tch`, `Router`, a backend of your own) runs the operators, the
/// exponential and the training code as they are. Where `B` is one of the backends the crate's
/// features ship (`NdArray` and `Flex` on the CPU, `Wgpu` and `Cuda` through CubeCL, each also
/// under `Autodiff`), the methods run that backend's kernels; elsewhere they run
/// [`tensor_ops`]: the same scheme in Burn's tensor operations, differentiated by Burn's autodiff.
///
/// Inputs reach these methods already checked (square, matching shapes) and in f32 or f64; call
/// [`expm`](crate::expm()), [`expmv`](crate::expmv()) and their `try_*` forms rather than these
/// methods.
///
/// ```
/// use burn::prelude::*;
/// use vlgo_core::ExpmBackend;
///
/// // Any backend satisfies the bound: generic code needs nothing more than `Backend`.
/// fn rotate<B: Backend>(angle: f32, device: &B::Device) -> Tensor<B, 3> {
///     let a = Tensor::<B, 3>::from_data([[[0.0, -angle], [angle, 0.0]]], device);
///     vlgo_core::expm(a)
/// }
/// fn needs_expm<B: ExpmBackend>() {}
/// needs_expm::<burn::backend::NdArray<f64>>();
/// let r = rotate::<burn::backend::NdArray>(1.0, &Default::default());
/// assert!((r.into_data().to_vec::<f32>().unwrap()[0] - 1f32.cos()).abs() < 1e-6);
/// ```
pub trait ExpmBackend: Backend {
    /// Whether [`ExpmBackend::expm`] and its backward run a kernel of their own for inputs of
    /// this dtype and shape (rather than the tensor ops).
    #[doc(hidden)]
    fn has_expm_kernel(dtype: DType, shape: &Shape) -> bool;

    /// Whether [`ExpmBackend::expmv`] and its backward run kernels of their own for A of this
    /// dtype and shape.
    #[doc(hidden)]
    fn has_expmv_kernel(dtype: DType, shape: &Shape) -> bool;

    /// Whether [`ExpmBackend::expmv_generated`] with a gradient to take runs a kernel of its own
    /// for generators psi [M, S, n, n] of this dtype and shape, forming each generator where it
    /// is used (the CPU backends, f32).
    #[doc(hidden)]
    fn has_generated_kernel(dtype: DType, psi: &Shape) -> bool;

    /// exp(A) for A [N, n, n] in A's dtype.
    fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self>;

    /// The adjoint of A given the adjoint `grad` of exp(A).
    fn expm_backward(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> FloatTensor<Self>;

    /// Floats of the checkpoint that [`ExpmBackend::expm_checkpointed`] keeps on `device` for A
    /// of this dtype and shape, or `None` where it keeps none.
    #[doc(hidden)]
    fn expm_checkpoint_floats(
        device: &Self::Device,
        dtype: DType,
        shape: &Shape,
        method: ExpmMethod,
    ) -> Option<usize>;

    /// exp(A) together with what its backward needs beyond A where the backend keeps such a
    /// checkpoint (the GPU kernels), `None` otherwise.
    #[doc(hidden)]
    fn expm_checkpointed(
        a: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>);

    /// [`ExpmBackend::expm_backward`] with the checkpoint of
    /// [`ExpmBackend::expm_checkpointed`].
    #[doc(hidden)]
    fn expm_backward_checkpointed(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
        checkpoint: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self>;

    /// exp(A) v for A [N, n, n], v [N, n].
    fn expmv(a: FloatTensor<Self>, v: FloatTensor<Self>, config: ExpmvConfig) -> FloatTensor<Self>;

    /// exp(A) v together with what its adjoint needs.
    fn expmv_checkpointed(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> (Tensor<Self, 2>, ExpmvCheckpoints<Self>);

    /// exp(A_p) v_p for the generators A_p = sum_m c[r, m] psi[m, k] of the problems
    /// p = r S + k, with c [R, M], psi [M, S, n, n] and v [R S, n], all in one dtype, R >= 1.
    ///
    /// The CPU backends form the generators in the cache of the thread that solves them (in the
    /// backward too, under autodiff) for f32 dictionaries of at most 128 Ki floats per block,
    /// and the GPU backends inside the kernel when no input needs a gradient, so the R S
    /// generators never exist in memory together; elsewhere one matmul forms them and
    /// [`ExpmBackend::expmv`] runs.
    fn expmv_generated(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> FloatTensor<Self>;

    /// The adjoints of A and v given the adjoint `grad` of exp(A) v.
    fn expmv_backward(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        saved: &ExpmvCheckpoints<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

impl<B: Backend> ExpmBackend for B {
    fn has_expm_kernel(dtype: DType, shape: &Shape) -> bool {
        route::<B, _, _>(dispatch::has_expm_kernel, (dtype, shape.clone()), |_| false)
    }

    fn has_expmv_kernel(dtype: DType, shape: &Shape) -> bool {
        route::<B, _, _>(dispatch::has_expmv_kernel, (dtype, shape.clone()), |_| {
            false
        })
    }

    fn has_generated_kernel(dtype: DType, psi: &Shape) -> bool {
        route::<B, _, _>(dispatch::has_generated_kernel, (dtype, psi.clone()), |_| {
            false
        })
    }

    fn expm(a: FloatTensor<B>, method: ExpmMethod) -> FloatTensor<B> {
        route::<B, _, _>(dispatch::expm, (a, method), |(a, method)| {
            unwrap(tensor_ops::expm::<B>(wrap(a), method))
        })
    }

    fn expm_backward(
        a: FloatTensor<B>,
        grad: FloatTensor<B>,
        method: ExpmMethod,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::expm_backward,
            (a, grad, method),
            |(a, grad, method)| unwrap(tensor_ops::expm_backward::<B>(wrap(a), wrap(grad), method)),
        )
    }

    fn expm_checkpoint_floats(
        device: &B::Device,
        dtype: DType,
        shape: &Shape,
        method: ExpmMethod,
    ) -> Option<usize> {
        let args = (device.clone(), dtype, shape.clone(), method);
        route::<B, _, _>(dispatch::expm_checkpoint_floats, args, |_| None)
    }

    fn expm_checkpointed(
        a: FloatTensor<B>,
        method: ExpmMethod,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        route::<B, _, _>(dispatch::expm_checkpointed, (a, method), |(a, method)| {
            (<B as ExpmBackend>::expm(a, method), None)
        })
    }

    fn expm_backward_checkpointed(
        a: FloatTensor<B>,
        grad: FloatTensor<B>,
        method: ExpmMethod,
        checkpoint: Option<FloatTensor<B>>,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::expm_backward_checkpointed,
            (a, grad, method, checkpoint),
            |(a, grad, method, _)| <B as ExpmBackend>::expm_backward(a, grad, method),
        )
    }

    fn expmv(a: FloatTensor<B>, v: FloatTensor<B>, config: ExpmvConfig) -> FloatTensor<B> {
        route::<B, _, _>(dispatch::expmv, (a, v, config), |(a, v, config)| {
            unwrap(expmv::expmv_forward::<B>(wrap(a), wrap(v), &config).0)
        })
    }

    fn expmv_checkpointed(
        a: FloatTensor<B>,
        v: FloatTensor<B>,
        config: ExpmvConfig,
    ) -> (Tensor<B, 2>, ExpmvCheckpoints<B>) {
        route::<B, _, _>(
            dispatch::expmv_checkpointed,
            (a, v, config),
            |(a, v, config)| expmv::expmv_forward::<B>(wrap(a), wrap(v), &config),
        )
    }

    fn expmv_generated(
        c: FloatTensor<B>,
        psi: FloatTensor<B>,
        v: FloatTensor<B>,
        config: ExpmvConfig,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::expmv_generated,
            (c, psi, v, config),
            |(c, psi, v, config)| expmv_generated_by_ops::<B>(c, psi, v, config),
        )
    }

    fn expmv_backward(
        a: FloatTensor<B>,
        v: FloatTensor<B>,
        grad: FloatTensor<B>,
        saved: &ExpmvCheckpoints<B>,
    ) -> (FloatTensor<B>, FloatTensor<B>) {
        // The checkpoints stay borrowed: the dispatcher reads them through a second argument.
        let mut args = Some((a, v, grad));
        if let Some(out) = dispatch::expmv_backward(TypeId::of::<B>(), &mut args, saved) {
            return *out
                .downcast()
                .expect("a shipped kernel returns its backend's types");
        }
        let (a, v, grad) = args.expect("a dispatcher that declines leaves the arguments");
        let (abar, vbar) = expmv::expmv_backward::<B>(wrap(a), wrap(v), wrap(grad), saved);
        (unwrap(abar), unwrap(vbar))
    }
}

/// The dispatchers of the methods above: each runs the shipped backend's [`ExpmKernels`]
/// method.
// Built without a kernel feature, the dispatchers decline everything and read nothing.
#[allow(unused_variables)]
mod dispatch {
    use super::*;

    pub fn has_expm_kernel(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (dtype, shape) = take::<(DType, Shape)>(args);
            <K as ExpmKernels>::has_expm_kernel(dtype, &shape)
        });
        None
    }

    pub fn has_expmv_kernel(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (dtype, shape) = take::<(DType, Shape)>(args);
            <K as ExpmKernels>::has_expmv_kernel(dtype, &shape)
        });
        None
    }

    pub fn has_generated_kernel(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (dtype, shape) = take::<(DType, Shape)>(args);
            <K as ExpmKernels>::has_generated_kernel(dtype, &shape)
        });
        None
    }

    pub fn expm(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, method) = take::<(FloatTensor<K>, ExpmMethod)>(args);
            <K as ExpmKernels>::expm(a, method)
        });
        None
    }

    pub fn expm_backward(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, grad, method) = take::<(FloatTensor<K>, FloatTensor<K>, ExpmMethod)>(args);
            <K as ExpmKernels>::expm_backward(a, grad, method)
        });
        None
    }

    pub fn expm_checkpoint_floats(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (device, dtype, shape, method) =
                take::<(burn::tensor::Device<K>, DType, Shape, ExpmMethod)>(args);
            <K as ExpmKernels>::expm_checkpoint_floats(&device, dtype, &shape, method)
        });
        None
    }

    pub fn expm_checkpointed(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, method) = take::<(FloatTensor<K>, ExpmMethod)>(args);
            <K as ExpmKernels>::expm_checkpointed(a, method)
        });
        None
    }

    pub fn expm_backward_checkpointed(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        type Args<K> = (
            FloatTensor<K>,
            FloatTensor<K>,
            ExpmMethod,
            Option<FloatTensor<K>>,
        );
        dispatch_shipped!(id, K => {
            let (a, grad, method, checkpoint) = take::<Args<K>>(args);
            <K as ExpmKernels>::expm_backward_checkpointed(a, grad, method, checkpoint)
        });
        None
    }

    pub fn expmv(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, v, config) = take::<(FloatTensor<K>, FloatTensor<K>, ExpmvConfig)>(args);
            <K as ExpmKernels>::expmv(a, v, config)
        });
        None
    }

    pub fn expmv_checkpointed(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, v, config) = take::<(FloatTensor<K>, FloatTensor<K>, ExpmvConfig)>(args);
            <K as ExpmKernels>::expmv_checkpointed(a, v, config)
        });
        None
    }

    pub fn expmv_generated(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        type Args<K> = (FloatTensor<K>, FloatTensor<K>, FloatTensor<K>, ExpmvConfig);
        dispatch_shipped!(id, K => {
            let (c, psi, v, config) = take::<Args<K>>(args);
            <K as ExpmKernels>::expmv_generated(c, psi, v, config)
        });
        None
    }

    pub fn expmv_backward(id: TypeId, args: &mut dyn Any, saved: &dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (a, v, grad) = take::<(FloatTensor<K>, FloatTensor<K>, FloatTensor<K>)>(args);
            let saved = saved
                .downcast_ref::<ExpmvCheckpoints<K>>()
                .expect("the checkpoints belong to the caller's backend");
            <K as ExpmKernels>::expmv_backward(a, v, grad, saved)
        });
        None
    }
}
