//! The kernels of the shipped backends behind the exponential.
//!
//! A custom op with its own backward cannot be a blanket impl over every `Backend` (the
//! `Autodiff` impl would overlap and Rust has no specialisation), so this trait is implemented per
//! shipped backend, and [`ExpmBackend`](super::ExpmBackend) routes to it at run time. Every
//! method has a default built from Burn tensor ops; a backend with a fast kernel overrides the
//! forward and backward it accelerates.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::FloatTensor;

use super::expmv::{self, ExpmvCheckpoints};
use super::{ExpmMethod, ExpmvConfig, tensor_ops};

pub(super) fn wrap<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

pub(super) fn unwrap<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// The generators A_p = sum_m c[r, m] psi[m, k] of the problems p = r S + k, [R S, n, n], by one
/// matmul (c [R, M], psi [M, S, n, n]).
fn generators<B: Backend>(c: FloatTensor<B>, psi: FloatTensor<B>) -> FloatTensor<B> {
    let (c, psi): (Tensor<B, 2>, Tensor<B, 4>) = (wrap(c), wrap(psi));
    let [m, s, n, _] = psi.dims();
    let rows = c.dims()[0];
    unwrap(
        c.matmul(psi.reshape([m, s * n * n]))
            .reshape([rows * s, n, n]),
    )
}

/// The adjoints of c and psi given the adjoint `abar` [R S, n, n] of their [`generators`]: the
/// matmul's two adjoint products.
fn generator_adjoints<B: Backend>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    abar: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (c, psi, abar): (Tensor<B, 2>, Tensor<B, 4>, Tensor<B, 3>) =
        (wrap(c), wrap(psi), wrap(abar));
    let [m, s, n, _] = psi.dims();
    let rows = c.dims()[0];
    let abar = abar.reshape([rows, s * n * n]);
    let cbar = abar.clone().matmul(psi.reshape([m, s * n * n]).transpose());
    let psibar = c.transpose().matmul(abar).reshape([m, s, n, n]);
    (unwrap(cbar), unwrap(psibar))
}

/// exp(A_p) v_p by forming the generators with a matmul (the default of
/// [`ExpmKernels::expmv_generated`] and the fallback of [`ExpmBackend::expmv_generated`]).
pub(crate) fn expmv_generated_by_ops<B: super::ExpmBackend>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    config: ExpmvConfig,
) -> FloatTensor<B> {
    <B as super::ExpmBackend>::expmv(generators::<B>(c, psi), v, config)
}

/// [`ExpmKernels::expmv_generated_checkpointed`] by forming the generators with a matmul.
fn generated_checkpointed_by_ops<B: ExpmKernels>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    config: ExpmvConfig,
) -> (FloatTensor<B>, ExpmvCheckpoints<B>) {
    let (y, saved) = B::expmv_checkpointed(generators::<B>(c, psi), v, config);
    (unwrap(y), saved)
}

/// [`ExpmKernels::expmv_generated_backward`] by forming the generators with a matmul.
fn generated_backward_by_ops<B: ExpmKernels>(
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    grad: FloatTensor<B>,
    saved: &ExpmvCheckpoints<B>,
) -> [FloatTensor<B>; 3] {
    let a = generators::<B>(c.clone(), psi.clone());
    let (abar, vbar) = B::expmv_backward(a, v, grad, saved);
    let (cbar, psibar) = generator_adjoints::<B>(c, psi, abar);
    [cbar, psibar, vbar]
}

/// The shipped backends' exponential and exponential-times-vector kernels.
///
/// Implemented for `NdArray` (feature `ndarray`), `Flex` (`flex`), `CubeBackend` and `Fusion`
/// (`wgpu`, `cuda`) and for `Autodiff<B>` over any of them. Inputs reach these methods already
/// checked (square, matching shapes) and in f32 or f64.
pub(crate) trait ExpmKernels: Backend {
    /// Whether [`ExpmKernels::expm`] and its backward run a kernel of their own for inputs of
    /// this dtype and shape (rather than the tensor-op default). Wrappers such as fusion ask it
    /// to decide between recording an opaque op and recording the tensor ops, which fuse.
    fn has_expm_kernel(_dtype: burn::tensor::DType, _shape: &burn::tensor::Shape) -> bool {
        false
    }

    /// Whether [`ExpmKernels::expmv_checkpointed`] and its backward run kernels of their own for
    /// A of this dtype and shape (see [`ExpmKernels::has_expm_kernel`]).
    fn has_expmv_kernel(_dtype: burn::tensor::DType, _shape: &burn::tensor::Shape) -> bool {
        false
    }

    /// exp(A) for A [N, n, n] in A's dtype.
    fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self> {
        unwrap(tensor_ops::expm::<Self>(wrap(a), method))
    }

    /// The adjoint of A given the adjoint `grad` of exp(A).
    fn expm_backward(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> FloatTensor<Self> {
        unwrap(tensor_ops::expm_backward::<Self>(
            wrap(a),
            wrap(grad),
            method,
        ))
    }

    /// Floats of the checkpoint that [`ExpmKernels::expm_checkpointed`] keeps on `device` for A
    /// of this dtype and shape, or `None` where it keeps none. Wrappers (fusion) ask it to
    /// declare the checkpoint before the inner backend computes it.
    fn expm_checkpoint_floats(
        _device: &Self::Device,
        _dtype: burn::tensor::DType,
        _shape: &burn::tensor::Shape,
        _method: ExpmMethod,
    ) -> Option<usize> {
        None
    }

    /// exp(A) together with what its backward needs beyond A, where the backend keeps such a
    /// checkpoint (the GPU kernels keep the Taylor scheme's values that its derivative reads,
    /// so that the backward need not recompute them); `None` otherwise. Autodiff calls it for a
    /// tracked A.
    fn expm_checkpointed(
        a: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        (Self::expm(a, method), None)
    }

    /// [`ExpmKernels::expm_backward`] with the checkpoint of
    /// [`ExpmKernels::expm_checkpointed`].
    fn expm_backward_checkpointed(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
        _checkpoint: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        Self::expm_backward(a, grad, method)
    }

    /// exp(A) v for A [N, n, n], v [N, n].
    fn expmv(a: FloatTensor<Self>, v: FloatTensor<Self>, config: ExpmvConfig) -> FloatTensor<Self> {
        unwrap(Self::expmv_checkpointed(a, v, config).0)
    }

    /// exp(A) v together with what its adjoint needs.
    fn expmv_checkpointed(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> (Tensor<Self, 2>, ExpmvCheckpoints<Self>) {
        expmv::expmv_forward::<Self>(wrap(a), wrap(v), &config)
    }

    /// exp(A_p) v_p for the generators A_p = sum_m c[r, m] psi[m, k] of the problems
    /// p = r S + k, with c [R, M], psi [M, S, n, n] and v [R S, n], all in one dtype, R >= 1.
    ///
    /// The default forms the generators (one matmul) and calls [`ExpmKernels::expmv`]; the GPU
    /// backends form each generator inside the kernel when no input needs a gradient, so the
    /// R S generators never exist in device memory.
    fn expmv_generated(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> FloatTensor<Self> {
        expmv_generated_by_ops::<Self>(c, psi, v, config)
    }

    /// Whether [`ExpmKernels::expmv_generated_checkpointed`] and its backward run kernels of their
    /// own for generators psi [M, S, n, n] of this dtype and shape, forming each generator where
    /// it is used (the CPU backends, f32); the autodiff backend then records one node for the
    /// whole product rather than the generators' matmul and the exponential.
    fn has_generated_kernel(_dtype: burn::tensor::DType, _psi: &burn::tensor::Shape) -> bool {
        false
    }

    /// [`ExpmKernels::expmv_generated`] together with what its adjoint needs. The default forms
    /// the generators with a matmul and keeps [`ExpmKernels::expmv_checkpointed`]'s checkpoints.
    fn expmv_generated_checkpointed(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> (FloatTensor<Self>, ExpmvCheckpoints<Self>) {
        generated_checkpointed_by_ops::<Self>(c, psi, v, config)
    }

    /// The adjoints [c_bar, psi_bar, v_bar] given the adjoint `grad` of
    /// [`ExpmKernels::expmv_generated_checkpointed`]'s output and its checkpoints.
    fn expmv_generated_backward(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        saved: &ExpmvCheckpoints<Self>,
    ) -> [FloatTensor<Self>; 3] {
        generated_backward_by_ops::<Self>(c, psi, v, grad, saved)
    }

    /// The adjoints of A and v given the adjoint `grad` of exp(A) v.
    fn expmv_backward(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        saved: &ExpmvCheckpoints<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (abar, vbar) = expmv::expmv_backward::<Self>(wrap(a), wrap(v), wrap(grad), saved);
        (unwrap(abar), unwrap(vbar))
    }
}

/// The CPU backends take the cache-resident kernel of [`crate::cpu`] for f32 and keep the
/// tensor-op path for f64 (the oracle).
#[cfg(any(feature = "ndarray", feature = "flex"))]
macro_rules! cpu_kernel_methods {
    () => {
        fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self> {
            if crate::cpu::accepts::<Self>(&a) {
                crate::cpu::expm_batch::<Self>(a, method)
            } else {
                unwrap(tensor_ops::expm::<Self>(wrap(a), method))
            }
        }

        fn expm_backward(
            a: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            method: ExpmMethod,
        ) -> FloatTensor<Self> {
            if crate::cpu::accepts::<Self>(&a) {
                crate::cpu::expm_backward_batch::<Self>(a, grad, method)
            } else {
                unwrap(tensor_ops::expm_backward::<Self>(
                    wrap(a),
                    wrap(grad),
                    method,
                ))
            }
        }

        fn expmv_checkpointed(
            a: FloatTensor<Self>,
            v: FloatTensor<Self>,
            config: ExpmvConfig,
        ) -> (Tensor<Self, 2>, ExpmvCheckpoints<Self>) {
            if crate::cpu::accepts::<Self>(&a) {
                let (y, records) = crate::cpu::expmv_batch::<Self>(a, v, &config);
                (wrap(y), ExpmvCheckpoints::for_kernel(config, records))
            } else {
                expmv::expmv_forward::<Self>(wrap(a), wrap(v), &config)
            }
        }

        fn has_generated_kernel(dtype: burn::tensor::DType, psi: &burn::tensor::Shape) -> bool {
            dtype == burn::tensor::DType::F32 && crate::cpu::generated_takes(psi)
        }

        fn expmv_generated(
            c: FloatTensor<Self>,
            psi: FloatTensor<Self>,
            v: FloatTensor<Self>,
            config: ExpmvConfig,
        ) -> FloatTensor<Self> {
            Self::expmv_generated_checkpointed(c, psi, v, config).0
        }

        fn expmv_generated_checkpointed(
            c: FloatTensor<Self>,
            psi: FloatTensor<Self>,
            v: FloatTensor<Self>,
            config: ExpmvConfig,
        ) -> (FloatTensor<Self>, ExpmvCheckpoints<Self>) {
            if crate::cpu::generated_accepts::<Self>(&c, &psi, &v) {
                let (y, records) = crate::cpu::expmv_generated_batch::<Self>(c, psi, v, &config);
                (y, ExpmvCheckpoints::for_kernel(config, records))
            } else {
                generated_checkpointed_by_ops::<Self>(c, psi, v, config)
            }
        }

        fn expmv_generated_backward(
            c: FloatTensor<Self>,
            psi: FloatTensor<Self>,
            v: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            saved: &ExpmvCheckpoints<Self>,
        ) -> [FloatTensor<Self>; 3] {
            // The forward took the kernel exactly where these inputs pass its gate; `kernel`
            // alone would also hold for the fallback's `expmv` kernel on formed generators.
            if !(saved.kernel && crate::cpu::generated_accepts::<Self>(&c, &psi, &v)) {
                return generated_backward_by_ops::<Self>(c, psi, v, grad, saved);
            }
            let (abar, vbar) = crate::cpu::expmv_generated_backward_batch::<Self>(
                c.clone(),
                psi.clone(),
                v,
                grad,
                &saved.config,
                &saved.records,
            );
            let (cbar, psibar) = generator_adjoints::<Self>(c, psi, abar);
            [cbar, psibar, vbar]
        }

        fn expmv_backward(
            a: FloatTensor<Self>,
            v: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            saved: &ExpmvCheckpoints<Self>,
        ) -> (FloatTensor<Self>, FloatTensor<Self>) {
            if saved.kernel {
                crate::cpu::expmv_backward_batch::<Self>(a, v, grad, &saved.config, &saved.records)
            } else {
                let (abar, vbar) =
                    expmv::expmv_backward::<Self>(wrap(a), wrap(v), wrap(grad), saved);
                (unwrap(abar), unwrap(vbar))
            }
        }
    };
}

#[cfg(feature = "ndarray")]
impl<E, I, Q> ExpmKernels for burn_ndarray::NdArray<E, I, Q>
where
    E: burn_ndarray::FloatNdArrayElement,
    I: burn_ndarray::IntNdArrayElement,
    Q: burn_ndarray::QuantElement,
    burn_ndarray::NdArrayTensor: From<burn_ndarray::SharedArray<E>>,
    burn_ndarray::NdArrayTensor: From<burn_ndarray::SharedArray<I>>,
{
    cpu_kernel_methods!();
}

#[cfg(feature = "flex")]
impl ExpmKernels for burn_flex::Flex {
    cpu_kernel_methods!();
}

/// The CubeCL backends run the kernels of [`crate::gpu`] where they take the input (f32
/// [N, n, n], see [`crate::gpu::accepts`] and [`crate::gpu::expmv_takes`]) and keep the
/// tensor-op path otherwise.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, F, I, BT> ExpmKernels for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
    fn has_expm_kernel(dtype: burn::tensor::DType, shape: &burn::tensor::Shape) -> bool {
        crate::gpu::takes::<R>(dtype, shape)
    }

    fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self> {
        if crate::gpu::accepts(&a) {
            crate::gpu::expm(a, method)
        } else {
            unwrap(tensor_ops::expm::<Self>(wrap(a), method))
        }
    }

    fn expm_backward(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> FloatTensor<Self> {
        if crate::gpu::accepts(&a) && grad.dtype == a.dtype {
            crate::gpu::expm_backward(a, grad)
        } else {
            unwrap(tensor_ops::expm_backward::<Self>(
                wrap(a),
                wrap(grad),
                method,
            ))
        }
    }

    fn expm_checkpoint_floats(
        device: &Self::Device,
        dtype: burn::tensor::DType,
        shape: &burn::tensor::Shape,
        method: ExpmMethod,
    ) -> Option<usize> {
        crate::gpu::checkpoint_floats(&R::client(device), dtype, shape, method)
    }

    fn expm_checkpointed(
        a: FloatTensor<Self>,
        method: ExpmMethod,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        if crate::gpu::checkpoint_floats(&a.client, a.dtype, a.meta.shape(), method).is_some() {
            let (out, checkpoint) = crate::gpu::expm_checkpointed(a);
            (out, Some(checkpoint))
        } else {
            (Self::expm(a, method), None)
        }
    }

    fn expm_backward_checkpointed(
        a: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        method: ExpmMethod,
        checkpoint: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        match checkpoint {
            Some(checkpoint) if grad.dtype == a.dtype => {
                crate::gpu::expm_backward_checkpointed(a, grad, checkpoint)
            }
            _ => Self::expm_backward(a, grad, method),
        }
    }

    fn has_expmv_kernel(dtype: burn::tensor::DType, shape: &burn::tensor::Shape) -> bool {
        crate::gpu::expmv_takes(dtype, shape)
    }

    fn expmv_checkpointed(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> (Tensor<Self, 2>, ExpmvCheckpoints<Self>) {
        if crate::gpu::expmv_takes(a.dtype, a.meta.shape()) && v.dtype == a.dtype {
            let (y, routes) = crate::gpu::expmv(a, v, &config);
            (wrap(y), ExpmvCheckpoints::for_device(config, wrap(routes)))
        } else {
            expmv::expmv_forward::<Self>(wrap(a), wrap(v), &config)
        }
    }

    fn expmv_generated(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> FloatTensor<Self> {
        if crate::gpu::generated_takes(&c, &psi) && v.dtype == c.dtype {
            crate::gpu::expmv_generated(c, psi, v, &config)
        } else {
            expmv_generated_by_ops::<Self>(c, psi, v, config)
        }
    }

    fn expmv_backward(
        a: FloatTensor<Self>,
        v: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        saved: &ExpmvCheckpoints<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        match &saved.routes {
            Some(routes) => {
                let (count, n) = (a.meta.shape()[0], a.meta.shape()[1]);
                let routes = unwrap(routes.clone());
                let out = crate::gpu::expmv_backward(a, v, grad, routes, &saved.config);
                let out: Tensor<Self, 2> = wrap(out);
                let abar = out
                    .clone()
                    .slice([0..count, 0..n * n])
                    .reshape([count, n, n]);
                let vbar = out.slice([0..count, n * n..n * n + n]);
                (unwrap(abar), unwrap(vbar))
            }
            None => {
                let (abar, vbar) =
                    expmv::expmv_backward::<Self>(wrap(a), wrap(v), wrap(grad), saved);
                (unwrap(abar), unwrap(vbar))
            }
        }
    }
}

/// `Wgpu` and `Cuda` with fusion are `Fusion<CubeBackend>`: where the inner backend has a kernel,
/// the exponential enters the fusion stream as an opaque custom op (a fusion barrier) that runs
/// it; elsewhere the tensor ops are recorded as they are, so they fuse.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod fusion {
    use burn::tensor::ops::FloatTensor;
    use burn_fusion::stream::{Operation, OperationStreams};
    use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
    use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

    use burn::prelude::*;

    use super::{ExpmKernels, expmv_generated_by_ops, tensor_ops, unwrap, wrap};
    use crate::expm::expmv::{self, ExpmvCheckpoints};
    use crate::expm::{ExpmMethod, ExpmvConfig};
    use crate::gpu::ROUTE_STRIDE;

    /// exp(A) v with its routes (inputs A, v) or its adjoints (inputs A, v, the upstream
    /// gradient and the routes).
    #[derive(Debug)]
    struct ExpmvOp<B> {
        desc: CustomOpIr,
        config: ExpmvConfig,
        backward: bool,
        _backend: core::marker::PhantomData<B>,
    }

    impl<B: FusionBackend + ExpmKernels> Operation<B::FusionRuntime> for ExpmvOp<B> {
        fn execute(
            &self,
            handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
        ) {
            if self.backward {
                let ([a, v, grad, routes], [abar, vbar]) = self.desc.as_fixed();
                let routes = handles.get_float_tensor::<B>(routes);
                let saved = ExpmvCheckpoints::for_device(self.config, wrap(routes));
                let (abar_t, vbar_t) = B::expmv_backward(
                    handles.get_float_tensor::<B>(a),
                    handles.get_float_tensor::<B>(v),
                    handles.get_float_tensor::<B>(grad),
                    &saved,
                );
                handles.register_float_tensor::<B>(&abar.id, abar_t);
                handles.register_float_tensor::<B>(&vbar.id, vbar_t);
            } else {
                let ([a, v], [y, routes]) = self.desc.as_fixed();
                let (y_t, saved) = B::expmv_checkpointed(
                    handles.get_float_tensor::<B>(a),
                    handles.get_float_tensor::<B>(v),
                    self.config,
                );
                let routes_t = saved
                    .routes
                    .expect("the inner backend's expmv kernel keeps its routes");
                handles.register_float_tensor::<B>(&y.id, unwrap(y_t));
                handles.register_float_tensor::<B>(&routes.id, unwrap(routes_t));
            }
        }
    }

    /// exp(A_p) v_p for generators formed from the coefficients (inputs c, psi, v).
    #[derive(Debug)]
    struct GeneratedOp<B> {
        desc: CustomOpIr,
        config: ExpmvConfig,
        _backend: core::marker::PhantomData<B>,
    }

    impl<B: FusionBackend + ExpmKernels> Operation<B::FusionRuntime> for GeneratedOp<B> {
        fn execute(
            &self,
            handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
        ) {
            let ([c, psi, v], [y]) = self.desc.as_fixed();
            let y_t = B::expmv_generated(
                handles.get_float_tensor::<B>(c),
                handles.get_float_tensor::<B>(psi),
                handles.get_float_tensor::<B>(v),
                self.config,
            );
            handles.register_float_tensor::<B>(&y.id, y_t);
        }
    }

    /// What an [`ExpmOp`] computes, with its inputs and outputs.
    #[derive(Debug, Clone, Copy)]
    enum Pass {
        /// A -> exp(A).
        Forward,
        /// A -> exp(A) and the inner backend's checkpoint.
        Checkpointed,
        /// A, the upstream gradient -> the adjoint of A.
        Backward,
        /// A, the upstream gradient, the checkpoint -> the adjoint of A.
        BackwardCheckpointed,
    }

    /// The exponential or its adjoint, as [`Pass`] says.
    #[derive(Debug)]
    struct ExpmOp<B> {
        desc: CustomOpIr,
        method: ExpmMethod,
        pass: Pass,
        _backend: core::marker::PhantomData<B>,
    }

    impl<B: FusionBackend + ExpmKernels> Operation<B::FusionRuntime> for ExpmOp<B> {
        fn execute(
            &self,
            handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
        ) {
            let method = self.method;
            let (result, out) = match self.pass {
                Pass::Forward => {
                    let ([a], [out]) = self.desc.as_fixed();
                    (B::expm(handles.get_float_tensor::<B>(a), method), out)
                }
                Pass::Checkpointed => {
                    let ([a], [out, checkpoint]) = self.desc.as_fixed();
                    let (result, saved) =
                        B::expm_checkpointed(handles.get_float_tensor::<B>(a), method);
                    let saved = saved.expect("the inner backend keeps the checkpoint it declared");
                    handles.register_float_tensor::<B>(&checkpoint.id, saved);
                    (result, out)
                }
                Pass::Backward => {
                    let ([a, grad], [out]) = self.desc.as_fixed();
                    let a = handles.get_float_tensor::<B>(a);
                    let grad = handles.get_float_tensor::<B>(grad);
                    (B::expm_backward(a, grad, method), out)
                }
                Pass::BackwardCheckpointed => {
                    let ([a, grad, checkpoint], [out]) = self.desc.as_fixed();
                    let a = handles.get_float_tensor::<B>(a);
                    let grad = handles.get_float_tensor::<B>(grad);
                    let saved = handles.get_float_tensor::<B>(checkpoint);
                    (
                        B::expm_backward_checkpointed(a, grad, method, Some(saved)),
                        out,
                    )
                }
            };
            handles.register_float_tensor::<B>(&out.id, result);
        }
    }

    /// Records `op` with `inputs` and `outputs` (dtype and shape each) on `client`'s stream.
    fn record<B: FusionBackend + ExpmKernels, const O: usize>(
        name: &'static str,
        inputs: Vec<FloatTensor<Fusion<B>>>,
        outputs: [(burn::tensor::DType, Shape); O],
        method: ExpmMethod,
        pass: Pass,
    ) -> [FloatTensor<Fusion<B>>; O] {
        let client = inputs[0].client.clone();
        let streams = OperationStreams::with_inputs(inputs.iter());
        let outputs = outputs
            .map(|(dtype, shape)| TensorIr::uninit(client.create_empty_handle(), shape, dtype));
        let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
        let desc = CustomOpIr::new(name, &inputs, &outputs);
        let op = ExpmOp::<B> {
            desc: desc.clone(),
            method,
            pass,
            _backend: core::marker::PhantomData,
        };
        client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs()
    }

    impl<B: FusionBackend + ExpmKernels> ExpmKernels for Fusion<B> {
        fn has_expm_kernel(dtype: burn::tensor::DType, shape: &burn::tensor::Shape) -> bool {
            B::has_expm_kernel(dtype, shape)
        }

        fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self> {
            if !B::has_expm_kernel(a.dtype, &a.shape) {
                return unwrap(tensor_ops::expm::<Self>(wrap(a), method));
            }
            let out = (a.dtype, a.shape.clone());
            let [out] = record::<B, 1>("vlgo_expm", vec![a], [out], method, Pass::Forward);
            out
        }

        fn expm_checkpoint_floats(
            device: &Self::Device,
            dtype: burn::tensor::DType,
            shape: &Shape,
            method: ExpmMethod,
        ) -> Option<usize> {
            B::expm_checkpoint_floats(device, dtype, shape, method)
        }

        fn expm_checkpointed(
            a: FloatTensor<Self>,
            method: ExpmMethod,
        ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
            let floats = B::expm_checkpoint_floats(a.client.device(), a.dtype, &a.shape, method);
            let Some(floats) = floats else {
                return (Self::expm(a, method), None);
            };
            let outputs = [
                (a.dtype, a.shape.clone()),
                (burn::tensor::DType::F32, Shape::new([floats])),
            ];
            let [out, checkpoint] = record::<B, 2>(
                "vlgo_expm_checkpointed",
                vec![a],
                outputs,
                method,
                Pass::Checkpointed,
            );
            (out, Some(checkpoint))
        }

        fn expm_backward_checkpointed(
            a: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            method: ExpmMethod,
            checkpoint: Option<FloatTensor<Self>>,
        ) -> FloatTensor<Self> {
            let checkpoint = match checkpoint {
                Some(checkpoint) if grad.dtype == a.dtype => checkpoint,
                _ => return Self::expm_backward(a, grad, method),
            };
            let out = (a.dtype, a.shape.clone());
            let [out] = record::<B, 1>(
                "vlgo_expm_backward_checkpointed",
                vec![a, grad, checkpoint],
                [out],
                method,
                Pass::BackwardCheckpointed,
            );
            out
        }

        fn expm_backward(
            a: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            method: ExpmMethod,
        ) -> FloatTensor<Self> {
            if !B::has_expm_kernel(a.dtype, &a.shape) || grad.dtype != a.dtype {
                let (a, grad) = (wrap(a), wrap(grad));
                return unwrap(tensor_ops::expm_backward::<Self>(a, grad, method));
            }
            let out = (a.dtype, a.shape.clone());
            let [out] = record::<B, 1>(
                "vlgo_expm_backward",
                vec![a, grad],
                [out],
                method,
                Pass::Backward,
            );
            out
        }

        fn has_expmv_kernel(dtype: burn::tensor::DType, shape: &burn::tensor::Shape) -> bool {
            B::has_expmv_kernel(dtype, shape)
        }

        fn expmv_checkpointed(
            a: FloatTensor<Self>,
            v: FloatTensor<Self>,
            config: ExpmvConfig,
        ) -> (Tensor<Self, 2>, ExpmvCheckpoints<Self>) {
            if !B::has_expmv_kernel(a.dtype, &a.shape) || v.dtype != a.dtype {
                return expmv::expmv_forward::<Self>(wrap(a), wrap(v), &config);
            }
            let client = a.client.clone();
            let count = a.shape[0];
            let streams = OperationStreams::with_inputs([&a, &v]);
            let y = TensorIr::uninit(client.create_empty_handle(), v.shape.clone(), a.dtype);
            let routes = TensorIr::uninit(
                client.create_empty_handle(),
                Shape::new([count, ROUTE_STRIDE]),
                a.dtype,
            );
            let desc = CustomOpIr::new("vlgo_expmv", &[a.into_ir(), v.into_ir()], &[y, routes]);
            let op = ExpmvOp::<B> {
                desc: desc.clone(),
                config,
                backward: false,
                _backend: core::marker::PhantomData,
            };
            let [y, routes] = client
                .register(streams, OperationIr::Custom(desc), op)
                .outputs();
            (wrap(y), ExpmvCheckpoints::for_device(config, wrap(routes)))
        }

        fn expmv_generated(
            c: FloatTensor<Self>,
            psi: FloatTensor<Self>,
            v: FloatTensor<Self>,
            config: ExpmvConfig,
        ) -> FloatTensor<Self> {
            let n = psi.shape[2];
            let block = Shape::new([1, n, n]);
            if !B::has_expmv_kernel(c.dtype, &block) || psi.dtype != c.dtype || v.dtype != c.dtype {
                return expmv_generated_by_ops::<Self>(c, psi, v, config);
            }
            // The inner backend forms the generators in its kernel where the device can.
            let client = c.client.clone();
            let streams = OperationStreams::with_inputs([&c, &psi, &v]);
            let y = TensorIr::uninit(client.create_empty_handle(), v.shape.clone(), c.dtype);
            let desc = CustomOpIr::new(
                "vlgo_expmv_generated",
                &[c.into_ir(), psi.into_ir(), v.into_ir()],
                &[y],
            );
            let op = GeneratedOp::<B> {
                desc: desc.clone(),
                config,
                _backend: core::marker::PhantomData,
            };
            client
                .register(streams, OperationIr::Custom(desc), op)
                .output()
        }

        fn expmv_backward(
            a: FloatTensor<Self>,
            v: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            saved: &ExpmvCheckpoints<Self>,
        ) -> (FloatTensor<Self>, FloatTensor<Self>) {
            let Some(routes) = &saved.routes else {
                let (abar, vbar) =
                    expmv::expmv_backward::<Self>(wrap(a), wrap(v), wrap(grad), saved);
                return (unwrap(abar), unwrap(vbar));
            };
            let routes = unwrap(routes.clone());
            let client = a.client.clone();
            let streams = OperationStreams::with_inputs([&a, &v, &grad, &routes]);
            let abar = TensorIr::uninit(client.create_empty_handle(), a.shape.clone(), a.dtype);
            let vbar = TensorIr::uninit(client.create_empty_handle(), v.shape.clone(), a.dtype);
            let desc = CustomOpIr::new(
                "vlgo_expmv_backward",
                &[a.into_ir(), v.into_ir(), grad.into_ir(), routes.into_ir()],
                &[abar, vbar],
            );
            let op = ExpmvOp::<B> {
                desc: desc.clone(),
                config: saved.config,
                backward: true,
                _backend: core::marker::PhantomData,
            };
            let [abar, vbar] = client
                .register(streams, OperationIr::Custom(desc), op)
                .outputs();
            (abar, vbar)
        }
    }
}
