//! LU factorisation with partial pivoting and solves with n right-hand sides, for one small
//! matrix in cache: 2n^3/3 flops for the factorisation, 2n^3 for the two triangular solves. The
//! bodies live with the other vectorised kernels so that their inner loops inline per instruction
//! set.

pub use super::simd::{lu_factor as factor, lu_solve as solve};

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
