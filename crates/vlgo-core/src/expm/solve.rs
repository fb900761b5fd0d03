//! Batched linear solve with partial pivoting, from tensor ops.
//!
//! Gauss-Jordan elimination on the augmented matrix [A | B]. Rows are not swapped: each step
//! picks, among the rows not yet used as pivots, the one with the largest entry in the current
//! column, and eliminates that column from every other row. The solution's row k then sits in the
//! k-th pivot row, and one gather at the end puts it in place. That is two full passes over the
//! augmented matrix per column instead of a row gather, a swap and an elimination.

use burn::prelude::*;

/// Solves A X = B for a batch: `a` [N, n, n], `b` [N, n, k] -> X [N, n, k].
///
/// Singular or NaN systems give NaN/Inf rows (division by a zero or NaN pivot), never a panic.
pub(crate) fn solve<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 3> {
    let device = a.device();
    let [batch, n, _] = a.dims();
    let k = b.dims()[2];
    let width = n + k;
    let mut m = Tensor::cat(vec![a, b], 2);
    let rows = Tensor::<B, 1, Int>::arange(0..n as i64, &device).reshape([1, n, 1]);
    let mut used = Tensor::<B, 3, Bool>::full([batch, n, 1], false, &device);
    let mut pivots: Vec<Tensor<B, 3, Int>> = Vec::with_capacity(n);
    for col in 0..n {
        let column = m.clone().slice([0..batch, 0..n, col..col + 1]); // [N, n, 1]
        // Rows already used as pivots are not candidates; -1 is below every |entry|.
        let candidates = column.clone().abs().mask_fill(used.clone(), -1.0);
        let pivot = candidates.argmax(1); // [N, 1, 1]
        let is_pivot = rows.clone().equal(pivot.clone()); // [N, n, 1]
        used = used.bool_or(is_pivot.clone());
        // The indices repeated, not expanded: an expanded (stride-0) index tensor breaks the
        // gather's backward on backends whose scatter needs contiguous input (Candle).
        let pivot_row = m.clone().gather(1, pivot.clone().repeat_dim(2, width)); // [N, 1, w]
        let pivot_value = pivot_row.clone().slice([0..batch, 0..1, col..col + 1]);
        let pivot_row = pivot_row / pivot_value;
        // Row p becomes the normalised pivot row, every other row loses factor * pivot row:
        // m - (factor - e_p) pivot_row does both in one update.
        let factor = column - is_pivot.float().cast(m.dtype());
        m = m - factor * pivot_row;
        pivots.push(pivot);
    }
    let pivots = Tensor::cat(pivots, 1); // [N, n, 1]: pivots[c] holds unknown c
    m.slice([0..batch, 0..n, n..width])
        .gather(1, pivots.repeat_dim(2, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestBackend, max_abs_diff};

    #[test]
    fn solves_systems_that_need_pivoting() {
        let device = Default::default();
        // The first system has a zero in the (0, 0) position: without pivoting it fails.
        let a = Tensor::<TestBackend, 3>::from_data(
            [
                [[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]],
                [[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]],
            ],
            &device,
        );
        let x = Tensor::<TestBackend, 3>::from_data(
            [
                [[1.0, -1.0], [2.0, 0.5], [-3.0, 2.0]],
                [[0.5, 1.0], [-1.0, 2.0], [2.0, -2.0]],
            ],
            &device,
        );
        let b = a.clone().matmul(x.clone());
        let solved = solve(a, b);
        assert!(max_abs_diff(solved, x) < 1e-5);
    }

    #[test]
    fn singular_system_gives_non_finite_values_not_a_panic() {
        let device = Default::default();
        let a = Tensor::<TestBackend, 3>::from_data([[[1.0, 2.0], [2.0, 4.0]]], &device);
        let b = Tensor::<TestBackend, 3>::from_data([[[1.0], [1.0]]], &device);
        let x = solve(a, b).into_data().to_vec::<f32>().unwrap();
        assert!(x.iter().any(|v| !v.is_finite()));
    }
}
