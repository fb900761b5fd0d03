//! LU factorisation with partial pivoting and solves with n right-hand sides, for one small
//! matrix in cache. 2n^3/3 flops for the factorisation, 2n^3 for the two triangular solves.

use super::simd::axpy;

/// Factors `a` (row-major n x n) in place into L (unit lower, below the diagonal) and U, with
/// the row permutation in `perm` (`perm[i]` = original row of row i). A zero or NaN pivot leaves
/// Inf/NaN in the factors: the solve then returns non-finite values, never panics.
pub fn factor(a: &mut [f32], perm: &mut [usize], n: usize) {
    for (i, p) in perm.iter_mut().enumerate().take(n) {
        *p = i;
    }
    for k in 0..n {
        let mut piv = k;
        let mut best = a[k * n + k].abs();
        for i in k + 1..n {
            let v = a[i * n + k].abs();
            if v > best {
                best = v;
                piv = i;
            }
        }
        if piv != k {
            for j in 0..n {
                a.swap(k * n + j, piv * n + j);
            }
            perm.swap(k, piv);
        }
        let inv = 1.0 / a[k * n + k];
        let (top, rest) = a.split_at_mut((k + 1) * n);
        let pivot_row = &top[k * n + k + 1..k * n + n];
        for i in 0..n - k - 1 {
            let row = &mut rest[i * n..i * n + n];
            let l = row[k] * inv;
            row[k] = l;
            if l != 0.0 {
                axpy(-l, pivot_row, &mut row[k + 1..n]);
            }
        }
    }
}

/// Solves A X = B given the factors of A; `b` (row-major n x n) is overwritten by X. `tmp` is
/// scratch of n*n.
pub fn solve(lu: &[f32], perm: &[usize], b: &mut [f32], tmp: &mut [f32], n: usize) {
    // Row permutation: Y = P B.
    for (i, &p) in perm.iter().enumerate().take(n) {
        tmp[i * n..i * n + n].copy_from_slice(&b[p * n..p * n + n]);
    }
    // Forward: L Z = Y, row by row (each row an axpy over n right-hand sides).
    for i in 1..n {
        let (done, row) = tmp.split_at_mut(i * n);
        let row = &mut row[..n];
        for k in 0..i {
            let l = lu[i * n + k];
            if l != 0.0 {
                axpy(-l, &done[k * n..k * n + n], row);
            }
        }
    }
    // Backward: U X = Z.
    for i in (0..n).rev() {
        let (head, tail) = tmp.split_at_mut((i + 1) * n);
        let row = &mut head[i * n..i * n + n];
        for k in i + 1..n {
            let u = lu[i * n + k];
            if u != 0.0 {
                axpy(-u, &tail[(k - i - 1) * n..(k - i - 1) * n + n], row);
            }
        }
        let inv = 1.0 / lu[i * n + i];
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
    b[..n * n].copy_from_slice(&tmp[..n * n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_system_that_needs_pivoting() {
        let n = 3;
        let a = [0.0f32, 2.0, 1.0, 1.0, 1.0, 0.0, 3.0, 0.0, 1.0];
        let x = [1.0f32, -1.0, 0.0, 2.0, 0.5, 1.0, -3.0, 2.0, 4.0];
        let mut b = vec![0.0f32; 9];
        for i in 0..3 {
            for j in 0..3 {
                b[i * 3 + j] = (0..3).map(|k| a[i * 3 + k] * x[k * 3 + j]).sum();
            }
        }
        let mut lu = a.to_vec();
        let mut perm = vec![0; n];
        factor(&mut lu, &mut perm, n);
        let mut tmp = vec![0.0; 9];
        solve(&lu, &perm, &mut b, &mut tmp, n);
        for (got, want) in b.iter().zip(&x) {
            assert!((got - want).abs() < 1e-5, "{b:?}");
        }
    }
}
