//! Bad input gets an error that names what was expected and what came.

use burn::prelude::*;
use vlgo_core::{ExpmvConfig, VlgoError, try_expm, try_expmv};

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
        try_expm(Tensor::<B, 3>::zeros([0, 3, 3], &device))
            .unwrap()
            .dims(),
        [0, 3, 3]
    );
}
