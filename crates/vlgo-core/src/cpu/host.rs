//! How the CPU kernels read a backend's f32 tensors and hand their results back: in place where
//! the backend lends its buffers, so a call costs its arithmetic and one fresh output buffer.

use std::borrow::Cow;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

/// A CPU backend whose f32 tensors the kernels can read as row-major slices.
pub trait Host: Backend {
    /// The entries in row-major order: borrowed when the tensor is a contiguous f32 buffer,
    /// copied otherwise.
    fn read(t: &FloatTensor<Self>) -> Cow<'_, [f32]>;
    /// A tensor of the given shape that takes ownership of row-major entries (no copy).
    fn make(data: Vec<f32>, dims: &[usize]) -> FloatTensor<Self>;
}

/// A zeroed buffer of `len` floats for a kernel's output.
///
/// Buffers of tens of MiB usually come fresh from the system (glibc maps anything above its
/// mmap threshold, at most 32 MiB), and touching them a 4 KiB page at a time is slow on a virtual
/// machine (measured: 55-70 ms for 64 MiB against 5 ms once mapped). On Linux the buffer is
/// advised for transparent huge pages, which the kernel grants where its policy is `madvise` or
/// `always` (12-25 ms for the same 64 MiB); pages already touched keep their size. Elsewhere it
/// is a plain zeroed vector.
pub fn output(len: usize) -> Vec<f32> {
    let out = vec![0.0f32; len];
    #[cfg(target_os = "linux")]
    advise_huge_pages(&out);
    out
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(buffer: &[f32]) {
    const HUGE: usize = 2 << 20;
    let start = buffer.as_ptr() as usize;
    let end = start + std::mem::size_of_val(buffer);
    let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if last > first {
        // SAFETY: [first, last) lies inside the buffer, which this process owns; the advice
        // changes how its pages are backed, never their contents. A refusal (old kernel, THP
        // off) leaves ordinary pages, so the result is ignored.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

/// `NdArray` lends f32 arrays in standard layout; views of other layouts are copied.
#[cfg(feature = "ndarray")]
mod ndarray_impl {
    use burn::tensor::ops::FloatTensorOps;
    use burn_ndarray::{
        FloatNdArrayElement, IntNdArrayElement, NdArray, NdArrayTensor, QuantElement, SharedArray,
    };

    use super::*;

    impl<E, I, Q> Host for NdArray<E, I, Q>
    where
        E: FloatNdArrayElement,
        I: IntNdArrayElement,
        Q: QuantElement,
        NdArrayTensor: From<SharedArray<E>>,
        NdArrayTensor: From<SharedArray<I>>,
    {
        fn read(t: &FloatTensor<Self>) -> Cow<'_, [f32]> {
            if let NdArrayTensor::F32(storage) = t
                && let Some(s) = storage.view().to_slice()
            {
                return Cow::Borrowed(s);
            }
            let data =
                Tensor::<Self, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(t.clone()))
                    .into_data();
            Cow::Owned(
                data.into_vec::<f32>()
                    .expect("the kernels take f32 tensors only"),
            )
        }

        fn make(data: Vec<f32>, dims: &[usize]) -> FloatTensor<Self> {
            // A native vector becomes the array's storage without a copy.
            Self::float_from_data(TensorData::new(data, dims.to_vec()), &Default::default())
        }
    }
}

/// `Flex` lends contiguous storage; other layouts are made contiguous first.
#[cfg(feature = "flex")]
mod flex_impl {
    use burn::tensor::{Bytes, DType, Shape};
    use burn_flex::{Flex, FlexTensor, Layout};

    use super::*;

    impl Host for Flex {
        fn read(t: &FlexTensor) -> Cow<'_, [f32]> {
            match t.as_slice::<f32>() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(
                    t.to_contiguous()
                        .as_slice::<f32>()
                        .expect("a contiguous f32 tensor")
                        .to_vec(),
                ),
            }
        }

        fn make(data: Vec<f32>, dims: &[usize]) -> FlexTensor {
            FlexTensor::new(
                Bytes::from_elems(data),
                Layout::contiguous(Shape::from(dims.to_vec())),
                DType::F32,
            )
        }
    }
}
