//! Bad input gets an error that names what was expected and what came.

use burn::prelude::*;
use vlgo_core::{ExpmvConfig, VlgoError, expm, try_expm, try_expmv};

use crate::common::*;

#[test]
fn non_square_and_mismatched_shapes_are_errors() {
    let device = device();
    let err = try_expm(Tensor::<B, 3>::zeros([2, 3, 4], &device)).unwrap_err();
    assert!(
        matches!(err, VlgoError::Shape { ref got, .. } if got == &vec![2, 3, 4]),
        "{err}"
    );
    assert!(err.to_string().contains("[2, 3, 4]"));
    assert!(try_expm(Tensor::<B, 3>::zeros([2, 0, 0], &device)).is_err());
    let err = try_expmv(
        Tensor::<B, 3>::zeros([2, 3, 3], &device),
        Tensor::<B, 2>::zeros([2, 4], &device),
    )
    .unwrap_err();
    assert!(matches!(err, VlgoError::ShapeMismatch { .. }), "{err}");
    let err = vlgo_core::expmv_with(
        Tensor::<B, 3>::zeros([1, 2, 2], &device),
        Tensor::<B, 2>::zeros([1, 2], &device),
        &ExpmvConfig::new().with_m_max(0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("m_max"), "{err}");
}

#[test]
fn empty_batches_are_fine() {
    let device = device();
    assert_eq!(
        expm(Tensor::<B, 3>::zeros([0, 3, 3], &device)).dims(),
        [0, 3, 3]
    );
}

/// The error rule: tensor maths panics on a shape that does not fit and its `try_*` twin returns
/// an error that names the shape; a call that takes a config validates it.
#[test]
fn tensor_maths_panics_and_its_try_twin_returns_the_error() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use vlgo_core::{
        LaplaceParams, LieOperatorsConfig, Threshold, TransportMethod, kl_divergence,
        manifold_loss, sample, try_kl_divergence, try_manifold_loss, try_sample,
    };

    let device = device();
    let zeros = |shape: [usize; 2]| Tensor::<B, 2>::zeros(shape, &device);
    let params = |shape| LaplaceParams::<B>::new(zeros(shape), zeros(shape)).unwrap();
    let none = Threshold::none();
    let ops = LieOperatorsConfig::new(3, 4).init::<B>(&device).unwrap();

    let errors = [
        try_sample(&params([2, 3]), zeros([3, 2]), &none).map(|_| ()),
        try_kl_divergence(&params([2, 3]), &params([2, 4])).map(|_| ()),
        try_manifold_loss(zeros([2, 4]), zeros([2, 5])).map(|_| ()),
        ops.try_transport(zeros([2, 2]), zeros([2, 4])).map(|_| ()),
        ops.try_generator(zeros([2, 5])).map(|_| ()),
    ];
    for err in errors {
        let err = err.unwrap_err();
        assert!(
            matches!(
                err,
                VlgoError::Shape { .. } | VlgoError::ShapeMismatch { .. }
            ),
            "{err}"
        );
    }
    let panics: [Box<dyn FnOnce()>; 4] = [
        Box::new(|| drop(sample(&params([2, 3]), zeros([3, 2]), &none))),
        Box::new(|| drop(kl_divergence(&params([2, 3]), &params([2, 4])))),
        Box::new(|| drop(manifold_loss(zeros([2, 4]), zeros([2, 5])))),
        Box::new(|| drop(ops.transport(zeros([2, 2]), zeros([2, 4])))),
    ];
    for f in panics {
        assert!(catch_unwind(AssertUnwindSafe(f)).is_err());
    }
    // A config is validated where it is taken.
    let bad = ExpmvConfig::new().with_m_max(25);
    let err = ops
        .transport_with(zeros([2, 3]), zeros([2, 4]), TransportMethod::Expmv, &bad)
        .unwrap_err();
    assert!(err.to_string().contains("m_max"), "{err}");
}
