//! One AdamW step on f32 slices in a single pass: the parameter, both moments and the update
//! read once and written once, where Burn's optimiser makes about fourteen passes, each into a
//! fresh buffer (measured on the semi-supervised classifier: a tenth of its step).

use rayon::prelude::*;

use crate::layers::AdamWStep;

/// Entries per task.
const CHUNK: usize = 1 << 14;

/// (parameter, first moment, second moment) after one step from `param`, `grad`, `m`, `v`; the
/// same arithmetic as `burn::optim::AdamW` (bias-corrected moments, epsilon added to the square
/// root, decoupled weight decay applied before the update).
pub(crate) fn step(
    param: &[f32],
    grad: &[f32],
    m: &[f32],
    v: &[f32],
    hp: &AdamWStep,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = param.len();
    debug_assert!(grad.len() == n && m.len() == n && v.len() == n);
    let (b1, b2, eps) = (hp.beta_1, hp.beta_2, hp.epsilon);
    let (c1, c2) = (1.0 - b1.powi(hp.time), 1.0 - b2.powi(hp.time));
    let lr = hp.lr as f32;
    let keep = (1.0 - hp.lr * f64::from(hp.weight_decay)) as f32;
    let mut outs = [
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    ];
    {
        let [p_out, m_out, v_out] = outs.each_mut().map(|o| &mut o.spare_capacity_mut()[..n]);
        p_out
            .par_chunks_mut(CHUNK)
            .zip(m_out.par_chunks_mut(CHUNK))
            .zip(v_out.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(i, ((po, mo), vo))| {
                let r = i * CHUNK..i * CHUNK + po.len();
                let inputs = param[r.clone()]
                    .iter()
                    .zip(&grad[r.clone()])
                    .zip(&m[r.clone()])
                    .zip(&v[r]);
                let outputs = po.iter_mut().zip(mo.iter_mut()).zip(vo.iter_mut());
                for ((((p, g), m), v), ((po, mo), vo)) in inputs.zip(outputs) {
                    let m = b1 * m + (1.0 - b1) * g;
                    let v = b2 * v + (1.0 - b2) * (g * g);
                    let delta = (m / c1) / ((v / c2).sqrt() + eps);
                    po.write(p * keep - lr * delta);
                    mo.write(m);
                    vo.write(v);
                }
            });
    }
    for o in &mut outs {
        // SAFETY: the chunks above cover all n entries of each buffer, each written once.
        unsafe { o.set_len(n) };
    }
    let [p, m, v] = outs;
    (p, m, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_step_by_hand() {
        let hp = AdamWStep {
            lr: 0.1,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay: 0.05,
            time: 2,
        };
        let (p, g, m, v) = (
            [1.0f32, -2.0],
            [0.5f32, -0.25],
            [0.1f32, 0.0],
            [0.01f32, 0.2],
        );
        let (pn, mn, vn) = step(&p, &g, &m, &v, &hp);
        for i in 0..2 {
            let m1 = 0.9 * m[i] + 0.1 * g[i];
            let v1 = 0.999 * v[i] + 0.001 * g[i] * g[i];
            let delta = (m1 / (1.0 - 0.81)) / ((v1 / (1.0 - 0.999f32.powi(2))).sqrt() + 1e-5);
            let want = p[i] * (1.0 - 0.1 * 0.05) - 0.1 * delta;
            assert!((mn[i] - m1).abs() < 1e-7 && (vn[i] - v1).abs() < 1e-7);
            assert!((pn[i] - want).abs() < 1e-6, "{} against {want}", pn[i]);
        }
    }
}
