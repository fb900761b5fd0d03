//! Summary statistics of runs over seeds: mean and spread, and Welch's t-test between two
//! groups (the t distribution from `statrs`).

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Mean and sample standard deviation (0 for one value).
///
/// ```
/// let (m, s) = vlgo::stats::mean_std(&[1.0, 2.0, 3.0]);
/// assert_eq!((m, s), (2.0, 1.0));
/// ```
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = match xs.len() {
        0 | 1 => 0.0,
        k => xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64,
    };
    (mean, var.sqrt())
}

/// Welch's unequal-variance t-test of mean(a) - mean(b).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    /// The t statistic.
    pub t: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p_two_sided: f64,
}

/// Welch's t-test of two samples; None when either has fewer than two values or both have no
/// spread (the statistic is undefined).
///
/// ```
/// let w = vlgo::stats::welch(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.5]).unwrap();
/// assert!(w.t < 0.0 && w.p_two_sided < 0.05);
/// ```
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ma, sa) = mean_std(a);
    let (mb, sb) = mean_std(b);
    let (va, vb) = (sa * sa / a.len() as f64, sb * sb / b.len() as f64);
    let se2 = va + vb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let t = (ma - mb) / se2.sqrt();
    let df = se2 * se2 / (va * va / (a.len() - 1) as f64 + vb * vb / (b.len() - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(Welch {
        t,
        df,
        p_two_sided: 2.0 * dist.cdf(-t.abs()),
    })
}

/// A one-sided paired t-test of mean(a - b) > 0 (SciPy's `ttest_rel(a, b,
/// alternative='greater')`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// The t statistic.
    pub t: f64,
    /// Degrees of freedom, pairs - 1.
    pub df: f64,
    /// P(T >= t) under the null hypothesis of no difference.
    pub p_greater: f64,
}

/// The paired test of `a` against `b` (pairs by position); None for fewer than two pairs,
/// unequal lengths, or differences without spread (the statistic is undefined).
///
/// ```
/// let p = vlgo::stats::paired_greater(&[2.0, 3.0, 5.0, 4.0], &[1.0, 2.5, 3.0, 3.0]).unwrap();
/// assert_eq!(p.df, 3.0);
/// assert!(p.t > 0.0 && p.p_greater < 0.05);
/// ```
pub fn paired_greater(a: &[f64], b: &[f64]) -> Option<Paired> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let (mean, sd) = mean_std(&d);
    if sd <= 0.0 || !sd.is_finite() {
        return None;
    }
    let df = (d.len() - 1) as f64;
    let t = mean / (sd / (d.len() as f64).sqrt());
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(Paired {
        t,
        df,
        p_greater: dist.sf(t),
    })
}
