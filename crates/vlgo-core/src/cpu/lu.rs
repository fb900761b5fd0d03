//! LU factorisation with partial pivoting and solves with n right-hand sides, for one small
//! matrix in cache: 2n^3/3 flops for the factorisation (blocked by panels of 8 columns, the full
//! ones factored in a column-major copy for n <= 128), 2n^3 for the two triangular solves (blocks of
//! rows of the solution held in registers while the solved rows stream past, the triangle inside
//! each block solved in registers). The bodies live with the other vectorised kernels so that
//! their inner loops inline per instruction set.

pub use super::simd::{
    lu_factor as factor, lu_solve as solve, lu_solve_transposed as solve_transposed,
};

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
        let mut u = a.to_vec();
        let mut l = vec![0.0; 9];
        let mut perm = vec![0; n];
        factor(&mut u, &mut l, &mut perm, n);
        let mut tmp = vec![0.0; 9];
        solve(&u, &l, &perm, &mut b, &mut tmp, n);
        for (got, want) in b.iter().zip(&x) {
            assert!((got - want).abs() < 1e-5, "{b:?}");
        }
    }

    #[test]
    fn solves_larger_systems_across_every_row_width_branch() {
        // A zero diagonal forces a row exchange at the first step and makes later ones likely;
        // n = 13 and 75 leave columns past the last full strip and a narrower last panel, n = 64
        // has neither, n = 150 spans many panels. The bar is
        // loose (1e-3) because these matrices' conditioning is not controlled.
        for n in [13, 64, 75, 150] {
            let a: Vec<f32> = (0..n * n)
                .map(|k| {
                    let (i, j) = (k / n, k % n);
                    if i == j {
                        0.0
                    } else {
                        ((i * 7 + j * 13) % 17) as f32 / 17.0 - 0.5
                    }
                })
                .collect();
            let x: Vec<f32> = (0..n * n)
                .map(|k| ((k * 29) % 23) as f32 / 23.0 - 0.5)
                .collect();
            let mut b = vec![0.0f32; n * n];
            for i in 0..n {
                for j in 0..n {
                    b[i * n + j] = (0..n)
                        .map(|k| a[i * n + k] as f64 * x[k * n + j] as f64)
                        .sum::<f64>() as f32;
                }
            }
            let (mut u, mut l, mut perm, mut tmp) =
                (a.clone(), vec![0.0; n * n], vec![0; n], vec![0.0; n * n]);
            factor(&mut u, &mut l, &mut perm, n);
            // A^T X = C from the same factors.
            let mut c = vec![0.0f32; n * n];
            for i in 0..n {
                for j in 0..n {
                    c[i * n + j] = (0..n)
                        .map(|k| a[k * n + i] as f64 * x[k * n + j] as f64)
                        .sum::<f64>() as f32;
                }
            }
            solve(&u, &l, &perm, &mut b, &mut tmp, n);
            solve_transposed(&u, &l, &perm, &mut c, &mut tmp, n);
            for (what, got) in [("A X = B", &b), ("A^T X = C", &c)] {
                let err = got
                    .iter()
                    .zip(&x)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0f32, |m, e| if e.is_nan() || e > m { e } else { m });
                assert!(err < 1e-3, "n = {n}, {what}: max error {err:.2e}");
            }
        }
    }
}
