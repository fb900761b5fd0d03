//! Per-matrix choice of approximation degree and scaling (`expm.md`, "Explicit exponential").
//!
//! The norms are read back to the host once per call; the choices are made there and the batch is
//! reordered so that every degree group and every squaring step is a contiguous range. That keeps
//! per-matrix degree and scaling without a host synchronisation per matrix.

// Constants are written as their sources publish them.
#![allow(clippy::excessive_precision)]

use super::ExpmMethod;

/// Working precision of the explicit exponential, which fixes the degree table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precision {
    /// f32 compute (also used for f16 / bf16 inputs, which are promoted).
    Single,
    /// f64 compute: the test oracle.
    Double,
}

/// Padé degrees and their thetas for f32 compute (Higham 2005, u = 2^-24).
const PADE_F32: [(usize, f64); 3] = [
    (3, 4.258730016922831e-1),
    (5, 1.880152677804762),
    (7, 3.925724783138660),
];

/// Padé degrees and their thetas for f64 compute (Higham 2005, u = 2^-53).
const PADE_F64: [(usize, f64); 5] = [
    (3, 1.495585217958292e-2),
    (5, 2.539398330063230e-1),
    (7, 9.504178996162932e-1),
    (9, 2.097847961257068),
    (13, 5.371920351148152),
];

/// Taylor degrees of Bader-Blanes-Casas 2019 and their thetas for f32.
const TAYLOR_F32: [(usize, f64); 6] = [
    (1, 1.192092800768788e-7),
    (2, 5.978858893805233e-4),
    (4, 5.116619363445086e-2),
    (8, 5.800524627688768e-1),
    (12, 1.461661507209034),
    (18, 3.010066362817634),
];

/// Taylor degrees of Bader-Blanes-Casas 2019 and their thetas for f64.
const TAYLOR_F64: [(usize, f64); 6] = [
    (1, 2.220446049250313e-16),
    (2, 2.580956802971767e-8),
    (4, 3.397168839976962e-4),
    (8, 4.991228871115323e-2),
    (12, 2.996158913811580e-1),
    (18, 1.090863719290036),
];

/// Largest scaling exponent tried for a finite norm. Beyond it 2^-s underflows in the working
/// precision, so a larger s could not help; a non-finite norm gets s = 0 (see [`choose`]).
pub(crate) const fn max_scaling(precision: Precision) -> u32 {
    match precision {
        Precision::Single => 126,
        Precision::Double => 1022,
    }
}

pub(crate) fn table(method: ExpmMethod, precision: Precision) -> &'static [(usize, f64)] {
    match (method, precision) {
        (ExpmMethod::Pade, Precision::Single) => &PADE_F32,
        (ExpmMethod::Pade, Precision::Double) => &PADE_F64,
        (ExpmMethod::Taylor, Precision::Single) => &TAYLOR_F32,
        (ExpmMethod::Taylor, Precision::Double) => &TAYLOR_F64,
    }
}

/// Degree and number of squarings for one matrix of 1-norm `norm`.
///
/// `s = ceil(log2(norm / theta_max))`: with floor the scaled norm may reach 2 theta, which loses
/// about three digits in f32 on rotation generators. NaN and infinite norms get the highest degree
/// and no squaring: their output is NaN or Inf either way, and a scaling exponent derived from
/// `log2(inf)` must never become a loop bound.
pub(crate) fn choose(norm: f64, method: ExpmMethod, precision: Precision) -> (usize, u32) {
    let table = table(method, precision);
    let (m_max, theta_max) = table[table.len() - 1];
    if !norm.is_finite() {
        return (m_max, 0);
    }
    if let Some(&(m, _)) = table.iter().find(|(_, theta)| norm <= *theta) {
        return (m, 0);
    }
    (
        m_max,
        ceil_log2(norm / theta_max).min(max_scaling(precision)),
    )
}

/// ceil(log2(x)) for finite x > 1 from the float's bits (0 for x <= 1): no libm call, since the
/// CPU kernel asks once per matrix.
fn ceil_log2(x: f64) -> u32 {
    if x <= 1.0 {
        return 0;
    }
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as u32 - 1023;
    exponent + u32::from(bits & ((1u64 << 52) - 1) != 0)
}

/// The plan for a batch: a permutation that sorts the matrices by (degree, squarings)
/// descending, the contiguous degree groups of the sorted batch, and each sorted matrix's s.
#[derive(Debug, Clone)]
pub(crate) struct ExpmPlan {
    /// `order[k]` is the original index of the k-th sorted matrix.
    pub order: Vec<usize>,
    /// `(degree, start, end)` ranges over the sorted batch, highest degree first.
    pub groups: Vec<(usize, usize, usize)>,
    /// Squarings per sorted matrix (non-increasing).
    pub squarings: Vec<u32>,
    /// The method the degrees belong to.
    pub method: ExpmMethod,
    /// Original indices of matrices whose norm is NaN (they hold NaN or Inf).
    pub non_finite: Vec<usize>,
}

impl ExpmPlan {
    /// Builds the plan from the matrices' 1-norms.
    pub fn new(norms: &[f64], method: ExpmMethod, precision: Precision) -> Self {
        let choices: Vec<(usize, u32)> = norms
            .iter()
            .map(|&n| choose(n, method, precision))
            .collect();
        let mut order: Vec<usize> = (0..norms.len()).collect();
        order.sort_by(|&i, &j| choices[j].cmp(&choices[i]));
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            let m = choices[i].0;
            match groups.last_mut() {
                Some((gm, _, end)) if *gm == m => *end = k + 1,
                _ => groups.push((m, k, k + 1)),
            }
        }
        let squarings = order.iter().map(|&i| choices[i].1).collect();
        let non_finite = (0..norms.len())
            .filter(|&i| !norms[i].is_finite())
            .collect();
        Self {
            order,
            groups,
            squarings,
            method,
            non_finite,
        }
    }

    /// Whether the sorted order is the identity (then no reordering is needed).
    pub fn is_identity(&self) -> bool {
        self.order.iter().enumerate().all(|(k, &i)| k == i)
    }

    /// Number of sorted matrices that still square at step `k` (a prefix of the sorted batch).
    pub fn active_at(&self, k: u32) -> usize {
        self.squarings.iter().take_while(|&&s| s > k).count()
    }

    /// Largest number of squarings in the batch.
    pub fn max_squarings(&self) -> u32 {
        self.squarings.first().copied().unwrap_or(0)
    }
}

/// `inverse[order[k]] = k`.
pub(crate) fn inverse_permutation(order: &[usize]) -> Vec<usize> {
    let mut inverse = vec![0; order.len()];
    for (k, &i) in order.iter().enumerate() {
        inverse[i] = k;
    }
    inverse
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_matches_the_float_formula() {
        for x in [
            0.5,
            1.0,
            1.0 + 1e-12,
            1.5,
            2.0,
            2.0001,
            3.0,
            4.0,
            1000.0,
            1024.0,
            1e300,
        ] {
            let expected = f64::log2(x).ceil().max(0.0) as u32;
            assert_eq!(ceil_log2(x), expected, "x = {x}");
        }
    }

    #[test]
    fn degrees_follow_the_thetas() {
        let p = Precision::Single;
        assert_eq!(choose(0.0, ExpmMethod::Pade, p), (3, 0));
        assert_eq!(choose(0.42, ExpmMethod::Pade, p), (3, 0));
        assert_eq!(choose(0.43, ExpmMethod::Pade, p), (5, 0));
        assert_eq!(choose(3.9, ExpmMethod::Pade, p), (7, 0));
        // ceil, not floor: 2 theta_7 needs one squaring, 2 theta_7 + eps two.
        assert_eq!(choose(2.0 * 3.925724783138660, ExpmMethod::Pade, p), (7, 1));
        assert_eq!(
            choose(2.0 * 3.925724783138660 + 1e-6, ExpmMethod::Pade, p),
            (7, 2)
        );
        assert_eq!(choose(5.0, ExpmMethod::Pade, Precision::Double), (13, 0));
        assert_eq!(choose(1.0, ExpmMethod::Taylor, p), (12, 0));
        assert_eq!(choose(3.0, ExpmMethod::Taylor, p), (18, 0));
    }

    #[test]
    fn non_finite_norms_never_scale() {
        for n in [f64::NAN, f64::INFINITY] {
            assert_eq!(choose(n, ExpmMethod::Pade, Precision::Single), (7, 0));
        }
        assert_eq!(choose(f64::MAX, ExpmMethod::Pade, Precision::Single).1, 126);
    }

    #[test]
    fn plan_sorts_into_contiguous_groups() {
        let norms = [0.1, 20.0, 1.0, 0.1, 100.0];
        let plan = ExpmPlan::new(&norms, ExpmMethod::Pade, Precision::Single);
        assert_eq!(plan.order, vec![4, 1, 2, 0, 3]);
        assert_eq!(plan.groups, vec![(7, 0, 2), (5, 2, 3), (3, 3, 5)]);
        assert_eq!(plan.squarings, vec![5, 3, 0, 0, 0]);
        assert_eq!(plan.active_at(0), 2);
        assert_eq!(plan.active_at(3), 1);
        assert_eq!(inverse_permutation(&plan.order)[4], 0);
    }
}
