//! How the CPU kernels read a backend's f32 tensors and hand their results back: in place where
//! the backend lends its buffers, so a call costs its arithmetic and one fresh output buffer.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use rayon::prelude::*;

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
/// Unless the program keeps freed buffers ([`keep_freed_buffers`]), buffers of tens of MiB
/// usually come fresh from the system (glibc maps anything above its mmap threshold, at most
/// 32 MiB), and touching them a 4 KiB page at a time is slow on a virtual machine (measured:
/// 55-70 ms for 64 MiB against 5 ms once mapped). On Linux the buffer is
/// advised for transparent huge pages, which the kernel grants where its policy is `madvise` or
/// `always` (12-25 ms for the same 64 MiB); pages already touched keep their size. Elsewhere it
/// is a plain zeroed vector.
pub fn output(len: usize) -> Vec<f32> {
    let out = vec![0.0f32; len];
    #[cfg(target_os = "linux")]
    advise_huge_pages(&out);
    out
}

/// The parts of [`output_in_parts`]'s buffer, each zeroed as it is handed out.
pub(crate) type ZeroedParts<'a> = rayon::iter::Map<
    rayon::slice::ChunksMut<'a, MaybeUninit<f32>>,
    &'a (dyn for<'x> Fn(&'x mut [MaybeUninit<f32>]) -> &'x mut [f32] + Sync),
>;

/// A buffer of `len` floats for a kernel's output (as [`output`]) that `write` fills in parts of
/// `part` floats on rayon's threads. Each part is zeroed by the thread that takes it, just before
/// it is written, rather than the whole buffer on the calling thread first. Zeroing a 64 MiB
/// output on one thread was about 5 % of a profile of the exponential's forward through the
/// tensor API (`docs/expm.md`); a part zeroed in cache costs little more than its first write
/// would. Returns the buffer and what `write` returned.
///
/// # Panics
/// If `write` does not take every part (each must be written, or the buffer would hold
/// uninitialised floats).
pub(crate) fn output_in_parts<T>(
    len: usize,
    part: usize,
    write: impl FnOnce(ZeroedParts<'_>) -> T,
) -> (Vec<f32>, T) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut out = Vec::with_capacity(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    #[cfg(target_os = "linux")]
    advise_huge_pages(spare);
    let zeroed = AtomicUsize::new(0);
    let zero: &(dyn for<'x> Fn(&'x mut [MaybeUninit<f32>]) -> &'x mut [f32] + Sync) = &|p| {
        p.fill(MaybeUninit::new(0.0));
        zeroed.fetch_add(p.len(), Ordering::Relaxed);
        // SAFETY: every entry of the part was just written, and MaybeUninit<f32> has the size,
        // alignment and valid bit patterns of f32.
        unsafe { &mut *(p as *mut [MaybeUninit<f32>] as *mut [f32]) }
    };
    let result = write(spare.par_chunks_mut(part.max(1)).map(zero));
    assert_eq!(
        zeroed.into_inner(),
        len,
        "the writer of an output in parts takes every part"
    );
    // SAFETY: the parts cover the first `len` entries, and all of them were written (counted).
    unsafe { out.set_len(len) };
    (out, result)
}

/// Keeps freed buffers in the C heap for reuse instead of handing them back to the system, and
/// returns whether the setting took effect.
///
/// A training step on Burn's CPU backends allocates a fresh buffer for nearly every tensor:
/// activations, their adjoints, the convolutions' column buffers. With glibc's defaults each
/// large one is a new mapping, and the system zeroes its pages one by one when they are first
/// touched, step after step. With this setting the heap keeps them: on the Fashion-MNIST CPU
/// config's training step it removed two thirds to four fifths of the page faults, and the
/// first steps of a fresh process ran up to 1.2x faster; once glibc's own adaptive threshold
/// has caught up the gain is smaller (`docs/pretrain.md`, "Speed of a training step").
///
/// Buffers above 32 MiB (glibc's largest mmap threshold) are kept too: the main heap serves
/// every size, no allocation becomes a mapping of its own. A 64 MiB batch of 4096 matrices of
/// 64 x 64 then costs its pages once per process rather than once per call: the host -> tensor
/// -> host round trip of such a batch on `Flex` went from 58-61 ms to 6-7 ms, and the
/// exponential's forward through the tensor API no longer costs more than into a kept buffer
/// (`docs/expm.md`). Threads served by one of glibc's secondary arenas (the rayon workers,
/// mostly) still map buffers of 64 MiB and more, the size of one of that arena's heaps.
///
/// The cost is memory. The main heap keeps up to 1 GiB of freed memory mapped at its top
/// instead of returning it, and a large buffer freed below a live one stays mapped until it is
/// reused or the buffers above it are freed; secondary arenas keep their peak.
///
/// It changes the allocator of the whole process, so the library never calls it on its own:
/// a program calls it once, first thing in `main` (the `vlgo` program, the examples and the
/// benchmarks do). It acts on glibc's allocator on Linux (`mallopt`); elsewhere, or under
/// another C library, it does nothing and returns `false`. A Rust program that installs its
/// own `#[global_allocator]` is not affected either way.
///
/// ```
/// // First thing in `main`:
/// let kept = vlgo_core::cpu::host::keep_freed_buffers();
/// assert_eq!(kept, cfg!(all(target_os = "linux", target_env = "gnu")));
/// // ... then choose the backend and train.
/// ```
pub fn keep_freed_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // glibc's largest mmap threshold on 64-bit targets: moot once M_MMAP_MAX is 0, kept in
        // case that setting is refused.
        const LARGEST_HEAP_BUFFER: libc::c_int = 32 << 20;
        // SAFETY: mallopt only changes the allocator's parameters (under its own lock); no
        // memory is touched. Setting the thresholds explicitly also turns off glibc's dynamic
        // threshold, which otherwise resets the trim threshold to a few MiB. glibc ignores the
        // mapping count where a heap cannot grow (it maps then), so no allocation fails for it.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, LARGEST_HEAP_BUFFER) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) == 1
                && libc::mallopt(libc::M_TOP_PAD, 64 << 20) == 1
                // Above the largest threshold, no mappings at all: the heap serves every size.
                && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(buffer: &[T]) {
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
