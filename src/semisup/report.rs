//! `summary.json`, `table.md` and `plots/per_trial_<k>.png` of `vlgo semisup`: per labels per
//! class and method, the mean accuracy, the percent improvement over `ce-only` (mean ± std over
//! splits, the paper's Table 2 form) and the one-sided paired t-test of `vlgo` against the method.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use manifoldclr::semisup::SemisupMethod;
use serde_json::{Value, json};

use super::ResultLine;
use crate::error::Result;
use crate::plot::{Series, line_chart};
use crate::run_folder::RunFolder;
use crate::stats::{mean_std, paired_greater};

/// Accuracy per split of one method at one labels count.
type BySplit = BTreeMap<u64, f64>;

fn by_split(results: &[ResultLine], k: usize, method: SemisupMethod) -> BySplit {
    results
        .iter()
        .filter(|r| r.labels_per_class == k && r.method == method)
        .map(|r| (r.split, r.accuracy))
        .collect()
}

/// The values of `a` and `b` on the splits both have, in split order.
fn paired(a: &BySplit, b: &BySplit) -> (Vec<f64>, Vec<f64>) {
    a.iter()
        .filter_map(|(s, x)| b.get(s).map(|y| (*x, *y)))
        .unzip()
}

/// Per split, 100 (a - ce) / ce: the relative improvement over the cross-entropy-only classifier.
pub fn improvements(method: &BySplit, ce: &BySplit) -> Vec<f64> {
    let (m, c) = paired(method, ce);
    m.iter().zip(&c).map(|(a, b)| 100.0 * (a - b) / b).collect()
}

fn finite(x: f64) -> Value {
    match x.is_finite() {
        true => json!(x),
        false => Value::Null,
    }
}

/// One method's entry at one labels count.
fn entry(results: &[ResultLine], k: usize, method: SemisupMethod) -> Value {
    let mine = by_split(results, k, method);
    let accs: Vec<f64> = mine.values().copied().collect();
    if accs.is_empty() {
        return json!({"splits": 0});
    }
    let (mean, std) = mean_std(&accs);
    let seconds: Vec<f64> = results
        .iter()
        .filter(|r| r.labels_per_class == k && r.method == method)
        .map(|r| r.seconds)
        .collect();
    let mut v = json!({
        "splits": accs.len(),
        "mean_accuracy": finite(mean),
        "std_accuracy": finite(std),
        "seconds_per_split": finite(mean_std(&seconds).0),
    });
    let ce = by_split(results, k, SemisupMethod::CeOnly);
    if method != SemisupMethod::CeOnly && !ce.is_empty() {
        let imp = improvements(&mine, &ce);
        let (m, s) = match imp.is_empty() {
            true => (f64::NAN, f64::NAN),
            false => mean_std(&imp),
        };
        v["improvement_mean"] = finite(m);
        v["improvement_std"] = finite(s);
        let (a, c) = paired(&mine, &ce);
        v["improvement_points_mean"] = finite(mean_std(&a).0 - mean_std(&c).0);
    }
    let vlgo = by_split(results, k, SemisupMethod::Vlgo);
    if method != SemisupMethod::Vlgo && !vlgo.is_empty() {
        let (a, b) = paired(&vlgo, &mine);
        if let Some(t) = paired_greater(&a, &b) {
            v["vlgo_greater"] = json!({"t": t.t, "df": t.df, "p": t.p_greater, "pairs": a.len()});
        }
    }
    v
}

/// Writes the three outputs for `labels` x `methods` from every result in the folder and
/// returns the summary.
pub fn write(
    out: &RunFolder,
    results: &[ResultLine],
    labels: &[usize],
    methods: &[SemisupMethod],
) -> Result<Value> {
    let mut summary = serde_json::Map::new();
    for &k in labels {
        let per: serde_json::Map<String, Value> = methods
            .iter()
            .map(|&m| (m.name().to_string(), entry(results, k, m)))
            .collect();
        summary.insert(format!("labels_{k}"), Value::Object(per));
    }
    let summary = Value::Object(summary);
    out.write_json("summary.json", &summary)?;
    std::fs::write(
        out.path().join("table.md"),
        table(&summary, labels, methods),
    )
    .map_err(crate::error::CliError::io(out.path().join("table.md")))?;
    let plots = out.plots_dir()?;
    for &k in labels {
        per_trial_plot(
            &plots.join(format!("per_trial_{k}.png")),
            results,
            k,
            methods,
        )?;
    }
    Ok(summary)
}

/// The markdown table: one row per method, per labels count its accuracy, improvement and p.
pub fn table(summary: &Value, labels: &[usize], methods: &[SemisupMethod]) -> String {
    let mut s = String::from("| method |");
    for k in labels {
        let _ = write!(
            s,
            " {k} labels: accuracy (%) | improvement over ce-only (%) | p (vlgo greater) |"
        );
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|---:|---:|".repeat(labels.len()));
    s.push('\n');
    for m in methods {
        let _ = write!(s, "| {m} |");
        for k in labels {
            let e = &summary[format!("labels_{k}")][m.name()];
            let num = |key: &str| e[key].as_f64();
            let acc = match (num("mean_accuracy"), num("std_accuracy")) {
                (Some(a), Some(sd)) => format!("{a:.2} ± {sd:.2} ({})", e["splits"]),
                _ => "-".into(),
            };
            let imp = match (num("improvement_mean"), num("improvement_std")) {
                (Some(a), Some(sd)) => format!("{a:+.2} ± {sd:.2}"),
                _ => "-".into(),
            };
            let p = e["vlgo_greater"]["p"]
                .as_f64()
                .map_or("-".into(), |p| format!("{p:.2e}"));
            let _ = write!(s, " {acc} | {imp} | {p} |");
        }
        s.push('\n');
    }
    s.push_str(
        "\naccuracy: mean ± std over splits (number of splits); improvement: 100 (acc - \
         acc_ce-only) / acc_ce-only per split, mean ± std; p: one-sided paired t-test that vlgo's \
         mean accuracy is greater than the row's.\n",
    );
    s
}

/// Accuracy per split, splits ordered by the `ce-only` accuracy (the paper's Figure 8).
fn per_trial_plot(
    path: &std::path::Path,
    results: &[ResultLine],
    k: usize,
    methods: &[SemisupMethod],
) -> Result<()> {
    let ce = by_split(results, k, SemisupMethod::CeOnly);
    let order: Vec<u64> = {
        let mut o: Vec<(u64, f64)> = match ce.is_empty() {
            true => by_split(results, k, methods[0]).into_iter().collect(),
            false => ce.into_iter().collect(),
        };
        o.sort_by(|a, b| a.1.total_cmp(&b.1));
        o.into_iter().map(|(s, _)| s).collect()
    };
    let series: Vec<Series> = methods
        .iter()
        .map(|&m| {
            let mine = by_split(results, k, m);
            Series {
                name: m.name(),
                points: order
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| mine.get(s).map(|a| (i as f64, *a)))
                    .collect(),
            }
        })
        .collect();
    line_chart(
        path,
        &format!("{k} labels per class: accuracy per split"),
        "split, ordered by the ce-only accuracy",
        "test accuracy (%)",
        &series,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn improvements_are_relative_and_paired_by_split() {
        let a: BySplit = [(0, 55.0), (1, 60.0), (3, 10.0)].into();
        let ce: BySplit = [(0, 50.0), (1, 60.0), (2, 70.0)].into();
        assert_eq!(improvements(&a, &ce), vec![10.0, 0.0]);
    }

    #[test]
    fn a_method_without_splits_is_a_dash_not_a_zero() {
        let line = |method, split, accuracy| ResultLine {
            labels_per_class: 5,
            method,
            split,
            seed: 0,
            accuracy,
            iterations: 1,
            seconds: 1.0,
            confident_fraction: None,
        };
        let results = [
            line(SemisupMethod::CeOnly, 0, 50.0),
            line(SemisupMethod::CeOnly, 1, 60.0),
        ];
        assert_eq!(
            entry(&results, 5, SemisupMethod::Vlgo),
            json!({"splits": 0})
        );
        assert_eq!(
            entry(&results, 50, SemisupMethod::CeOnly),
            json!({"splits": 0})
        );
        let methods = [SemisupMethod::CeOnly, SemisupMethod::Vlgo];
        let summary = json!({"labels_5": {
            "ce-only": entry(&results, 5, SemisupMethod::CeOnly),
            "vlgo": entry(&results, 5, SemisupMethod::Vlgo),
        }});
        let t = table(&summary, &[5], &methods);
        assert!(t.contains("| ce-only | 55.00 ± 7.07 (2) | - | - |"), "{t}");
        assert!(t.contains("| vlgo | - | - | - |"), "{t}");
    }
}
