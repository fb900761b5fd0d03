//! `vlgo swiss-roll --grid`: the experiment over a grid of settings (regimes), each method trained
//! once per distinct setting that matters to it, and `study.md`: per regime, the paper's four
//! swiss-roll conclusions (holds or not, with the numbers) and the diagnostics that explain them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;
use vlgo_core::ExpmBackend;

use super::config::{Method, SwissRollConfig};
use super::report::{MethodSummary, Summary};
use crate::error::{CliError, Result};
use crate::settings::set;
use crate::sweep::Axis;

/// The J the paper's speed, sparsity and operator-count conclusions are read at (its largest).
pub const PAPER_SAMPLES: usize = 20;

/// A grid of swiss-roll runs: the base settings (with `--set` applied), the axes, the folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Study {
    /// The settings every regime starts from; its `methods` are trained in every regime.
    pub base: SwissRollConfig,
    /// The swept settings (linked keys move together, e.g. `beta:prior.scale`).
    pub axes: Vec<Axis>,
    /// The study's folder: one subfolder per regime that trains something, and `study.md`.
    pub out: PathBuf,
}

/// One point of the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Regime {
    /// The value of each axis, in the axes' order.
    pub values: Vec<String>,
    /// Its settings, validated (all of the base's methods).
    pub config: SwissRollConfig,
    /// Its folder.
    pub dir: PathBuf,
    /// Per method, in `config.methods`' order: the index of the regime whose folder trains it
    /// (the first regime with the same settings for that method; [`SwissRollConfig::for_method`]).
    pub trained_in: Vec<(Method, usize)>,
}

impl Regime {
    /// The methods this regime's own folder trains.
    pub fn own_methods(&self, index: usize) -> Vec<String> {
        self.trained_in
            .iter()
            .filter(|(_, i)| *i == index)
            .map(|(m, _)| m.to_string())
            .collect()
    }
}

impl Study {
    /// The default folder: `runs/swiss-roll[-full]-seed<N>-grid-<axis names joined by '-'>`.
    pub fn default_out(full: bool, seed: u64, axes: &[Axis]) -> PathBuf {
        let names: Vec<String> = axes.iter().map(Axis::name).collect();
        let full = if full { "-full" } else { "" };
        PathBuf::from("runs").join(format!(
            "swiss-roll{full}-seed{seed}-grid-{}",
            names.join("-").replace(':', "+")
        ))
    }

    /// Every regime of the grid (the last axis varying fastest), each config built and
    /// validated, and where each of its methods is trained: a bad key or value is an error
    /// before any run starts.
    pub fn regimes(&self) -> Result<Vec<Regime>> {
        if self.axes.is_empty() {
            return Err(CliError::invalid(
                "swiss-roll --grid",
                "no --grid",
                "at least one --grid KEY=V1,V2,...",
            ));
        }
        if let Some(keys) = Axis::clash(&self.axes) {
            return Err(CliError::invalid(
                "--grid",
                keys,
                "settings whose last names differ (each names its folders and columns)",
            ));
        }
        if let Some(a) = self.axes.iter().find(|a| a.keys().any(|k| k == "methods")) {
            return Err(CliError::invalid(
                "--grid",
                &a.key,
                "another setting (every regime trains the --methods given)",
            ));
        }
        let mut regimes: Vec<Regime> = Vec::new();
        let mut first: HashMap<String, usize> = HashMap::new();
        for values in Axis::grid(&self.axes) {
            let mut config = self.base.clone();
            for (axis, v) in self.axes.iter().zip(&values) {
                for assignment in axis.settings(v) {
                    config = set(&config, &assignment)?;
                }
            }
            let methods = config.validate()?;
            let index = regimes.len();
            let trained_in = methods
                .into_iter()
                .map(|m| {
                    let key = toml::to_string(&config.for_method(m)).expect("settings serialise");
                    (m, *first.entry(key).or_insert(index))
                })
                .collect();
            let dir = self.out.join(Axis::label(&self.axes, &values));
            if let Some(r) = regimes.iter().find(|r| r.dir == dir) {
                return Err(CliError::invalid(
                    "--grid",
                    format!("{} and {}", r.values.join(","), values.join(",")),
                    "values that name distinct folders ('/' is written '_')",
                ));
            }
            regimes.push(Regime {
                values,
                config,
                dir,
                trained_in,
            });
        }
        Ok(regimes)
    }

    /// Trains what is not trained yet (a regime whose folder has its `summary.json` is skipped; one
    /// interrupted before it is trained again), then writes `study.md` and returns it.
    pub fn run<B>(&self, device: &B::Device) -> Result<String>
    where
        B: AutodiffBackend + ExpmBackend,
        B::InnerBackend: ExpmBackend,
    {
        let regimes = self.regimes()?;
        let own: Vec<SwissRollConfig> = regimes
            .iter()
            .enumerate()
            .map(|(i, r)| SwissRollConfig {
                methods: r.own_methods(i),
                ..r.config.clone()
            })
            .collect();
        // Every folder is checked before the first run: a folder of other settings is an error.
        for (r, config) in regimes.iter().zip(&own) {
            let stored = r.dir.join("config.toml");
            if stored.is_file() && read_toml::<SwissRollConfig>(&stored)? != *config {
                return Err(CliError::invalid(
                    "swiss-roll --grid",
                    r.dir.display(),
                    "a folder of this grid's settings (it holds another run; use --out)",
                ));
            }
        }
        std::fs::create_dir_all(&self.out).map_err(CliError::io(&self.out))?;
        let total = own.iter().filter(|c| !c.methods.is_empty()).count();
        let mut done = 0;
        for (r, config) in regimes.iter().zip(&own) {
            if config.methods.is_empty() {
                continue;
            }
            done += 1;
            if r.dir.join("summary.json").is_file() {
                println!("[{done}/{total}] {}: finished, skipped", r.dir.display());
                continue;
            }
            if r.dir.exists() {
                // Ours (same settings, checked above), stopped before its summary: train it
                // again. A folder without our config.toml is not ours to delete.
                if !r.dir.join("config.toml").is_file() {
                    return Err(CliError::invalid(
                        "swiss-roll --grid",
                        r.dir.display(),
                        "a folder of this grid (it holds something else; use --out)",
                    ));
                }
                std::fs::remove_dir_all(&r.dir).map_err(CliError::io(&r.dir))?;
            }
            println!(
                "[{done}/{total}] {}: {}",
                r.dir.display(),
                config.methods.join(", ")
            );
            super::run::<B>(config, &r.dir, device)?;
        }
        let summaries = regimes
            .iter()
            .zip(&own)
            .map(|(r, c)| match c.methods.is_empty() {
                true => Ok(None),
                false => {
                    let path = r.dir.join("summary.json");
                    let text = std::fs::read_to_string(&path).map_err(CliError::io(&path))?;
                    serde_json::from_str::<Summary>(&text)
                        .map(Some)
                        .map_err(|e| CliError::invalid(path.display(), e, "a swiss-roll summary"))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let results: Vec<RegimeResults> = regimes
            .iter()
            .map(|r| RegimeResults::gather(r, &summaries))
            .collect::<Result<_>>()?;
        let mut text = self.report(&regimes, &results);
        // Figures of one study come from one backend: timings of two are not comparable.
        let backends: std::collections::BTreeSet<&str> = summaries
            .iter()
            .flatten()
            .map(|s| s.backend.as_str())
            .collect();
        let backends: Vec<&str> = backends.into_iter().collect();
        text += &format!("\nBackend: {}.\n", backends.join(", "));
        if backends.len() > 1 {
            text += "Warning: the regimes ran on different backends; the speed-ups compare them.\n";
        }
        let path = self.out.join("study.md");
        std::fs::write(&path, &text).map_err(CliError::io(&path))?;
        Ok(text)
    }

    /// `study.md`: the grid, the four conclusions per regime and the diagnostics.
    pub fn report(&self, regimes: &[Regime], results: &[RegimeResults]) -> String {
        let mut out = String::from("# Swiss-roll study\n\n");
        let axes: Vec<String> = self
            .axes
            .iter()
            .map(|a| format!("`{}` in {{{}}}", a.key, a.values.join(", ")))
            .collect();
        let _ = writeln!(
            out,
            "Grid: {}; methods {}; {} epochs, seed {}. Each method is trained once per distinct \
             setting that matters to it (FISTA whatever the encoder, KL, prior and threshold; \
             plain Laplace whatever the threshold), in the first regime that needs it.\n",
            axes.join(" x "),
            self.base.methods.join(", "),
            self.base.epochs,
            self.base.seed
        );
        out += &conclusions_table(self, regimes, results);
        out += "\n";
        out += &mse_table(self, regimes, results);
        out += "\n";
        out += &diagnostics_table(self, regimes, results);
        out
    }
}

fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(CliError::io(path))?;
    toml::from_str(&text).map_err(|e| CliError::invalid(path.display(), e.message(), "settings"))
}

/// One regime's figures, per method, from the folders that trained them.
#[derive(Debug, Clone, PartialEq)]
pub struct RegimeResults {
    /// What the data were divided by.
    pub data_scale: f64,
    /// Per method, in the regime's order.
    pub methods: Vec<(Method, MethodSummary)>,
}

impl RegimeResults {
    fn gather(regime: &Regime, summaries: &[Option<Summary>]) -> Result<Self> {
        let mut data_scale = f64::NAN;
        let mut methods = Vec::new();
        for &(m, i) in &regime.trained_in {
            let summary = summaries[i]
                .as_ref()
                .expect("a regime that trains has a summary");
            let name = m.to_string();
            let figures = summary.methods.get(&name).ok_or_else(|| {
                CliError::invalid(
                    format!("{}/summary.json", regime.dir.display()),
                    "no such method",
                    format!("figures of {name}"),
                )
            })?;
            data_scale = summary.data_scale;
            methods.push((m, figures.clone()));
        }
        Ok(Self {
            data_scale,
            methods,
        })
    }

    /// The figures of `method`, if it ran.
    pub fn get(&self, method: Method) -> Option<&MethodSummary> {
        self.methods
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, s)| s)
    }

    /// The sample counts of one family, ascending.
    fn samples(&self, thresholded: bool) -> Vec<usize> {
        let mut js: Vec<usize> = self
            .methods
            .iter()
            .filter_map(|(m, _)| match *m {
                Method::Vlgo {
                    thresholded: t,
                    samples,
                } if t == thresholded => Some(samples),
                _ => None,
            })
            .collect();
        js.sort_unstable();
        js
    }

    /// J of the paper's conclusions 2-4: [`PAPER_SAMPLES`] when both families ran it, else the
    /// largest J both ran.
    fn reference_samples(&self) -> Option<usize> {
        let (plain, thresholded) = (self.samples(false), self.samples(true));
        let both: Vec<usize> = plain
            .into_iter()
            .filter(|j| thresholded.contains(j))
            .collect();
        match both.contains(&PAPER_SAMPLES) {
            true => Some(PAPER_SAMPLES),
            false => both.last().copied(),
        }
    }

    /// The four conclusions, each held (true) or not, with its numbers.
    pub fn conclusions(&self) -> [Conclusion; 4] {
        let fista = self.get(Method::Fista);
        let family = |thresholded, samples| {
            self.get(Method::Vlgo {
                thresholded,
                samples,
            })
        };
        let missing = |why: &str| Conclusion {
            holds: None,
            text: why.to_string(),
        };
        let largest = |t: bool| self.samples(t).last().copied();
        // 1. With more samples VLGO reaches FISTA's MSE: both families' largest J within 10%.
        let c1 = match (fista, largest(false), largest(true)) {
            (Some(f), Some(jp), Some(jt)) => {
                let (p, t) = (family(false, jp).unwrap(), family(true, jt).unwrap());
                let (rp, rt) = (p.final_mse / f.final_mse, t.final_mse / f.final_mse);
                let (lp, lt) = (p.final_l1 / f.final_l1, t.final_l1 / f.final_l1);
                Conclusion {
                    holds: Some(rp <= 1.1 && rt <= 1.1),
                    text: format!(
                        "{rp:.2}x (J={jp}), {rt:.2}x (J={jt}); at l1 {lp:.1}x, {lt:.1}x FISTA's"
                    ),
                }
            }
            _ => missing("needs fista and both families"),
        };
        let reference = self.reference_samples();
        let pair = reference.map(|j| (family(false, j).unwrap(), family(true, j).unwrap(), j));
        // 2. Thresholded samples: plain Laplace's MSE (within 25%) at a much lower l1 (<= 0.8x).
        let c2 = match pair {
            Some((p, t, j)) => {
                let (mse, l1) = (t.final_mse / p.final_mse, t.final_l1 / p.final_l1);
                let zeros = 100.0 * t.final_zero_fraction;
                Conclusion {
                    holds: Some(mse <= 1.25 && l1 <= 0.8),
                    text: format!("J={j}: l1 {l1:.2}x, MSE {mse:.2}x plain's; {zeros:.0}% zeros"),
                }
            }
            None => missing("needs both families"),
        };
        // 3. Variational training at least 16x faster than FISTA.
        let c3 = match (fista, pair) {
            (Some(f), Some((p, t, j))) => {
                let (sp, st) = (
                    f.train_seconds / p.train_seconds,
                    f.train_seconds / t.train_seconds,
                );
                let its = f.mean_fista_iterations.unwrap_or(f64::NAN);
                Conclusion {
                    holds: Some(sp >= 16.0 && st >= 16.0),
                    text: format!("J={j}: {sp:.1}x, {st:.1}x; FISTA {its:.0} iterations"),
                }
            }
            _ => missing("needs fista and both families"),
        };
        // 4. FISTA and thresholded end with 2 operators, plain Laplace with more.
        let c4 = match (fista, pair) {
            (Some(f), Some((p, t, j))) => {
                let (nf, nt, np) = (
                    f.nonzero_operators,
                    t.nonzero_operators,
                    p.nonzero_operators,
                );
                Conclusion {
                    holds: Some(nf == 2 && nt == 2 && np > 2),
                    text: format!("FISTA {nf}, thresholded {nt}, plain {np} (J={j})"),
                }
            }
            _ => missing("needs fista and both families"),
        };
        [c1, c2, c3, c4]
    }
}

/// Whether a conclusion holds in a regime, and the numbers that decide it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    /// Holds, does not, or cannot be read (a method missing).
    pub holds: Option<bool>,
    /// The deciding numbers.
    pub text: String,
}

impl std::fmt::Display for Conclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = match self.holds {
            Some(true) => "**yes**",
            Some(false) => "no",
            None => "-",
        };
        write!(f, "{verdict}: {}", self.text)
    }
}

fn header(study: &Study, columns: &[&str]) -> String {
    let mut names: Vec<String> = study.axes.iter().map(Axis::name).collect();
    names.extend(columns.iter().map(|c| c.to_string()));
    format!(
        "| {} |\n|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    )
}

fn conclusions_table(study: &Study, regimes: &[Regime], results: &[RegimeResults]) -> String {
    let mut out = String::from(
        "## The paper's conclusions per regime\n\n\
         1. VLGO reaches FISTA's MSE with more samples: the largest J of both families within \
         1.1x FISTA's MSE.\n\
         2. Thresholded samples reach plain Laplace's MSE with a much lower l1: at J = 20 (else \
         the largest J both ran), MSE within 1.25x and l1 at most 0.8x plain Laplace's.\n\
         3. Variational training is about 16x faster than FISTA: both J = 20 methods (else the \
         largest J both ran) at least 16x (training seconds), beside FISTA's mean iterations per \
         batch.\n\
         4. FISTA and thresholded Laplace end with 2 non-zero operators (F-norm above 5% of the \
         largest), plain Laplace with more.\n\n",
    );
    out += &header(
        study,
        &[
            "1. MSE / FISTA's",
            "2. thresholded vs plain",
            "3. speed-up",
            "4. operators",
        ],
    );
    for (r, res) in regimes.iter().zip(results) {
        let cells: Vec<String> = r
            .values
            .iter()
            .cloned()
            .chain(res.conclusions().iter().map(Conclusion::to_string))
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

fn mse_table(study: &Study, regimes: &[Regime], results: &[RegimeResults]) -> String {
    let Some(first) = results.first() else {
        return String::new();
    };
    let names: Vec<String> = first.methods.iter().map(|(m, _)| m.to_string()).collect();
    let mut columns = vec!["data scale".to_string()];
    columns.extend(names.iter().cloned());
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut out = String::from(
        "## Final MSE (l1) per method\n\nIn the divided coordinates: MSEs at data scale s are \
         1/s^2 of the raw roll's.\n\n",
    );
    out += &header(study, &columns);
    for (r, res) in regimes.iter().zip(results) {
        let mut cells: Vec<String> = r.values.clone();
        cells.push(format!("{:.3}", res.data_scale));
        for (_, s) in &res.methods {
            cells.push(format!("{:.4} ({:.3})", s.final_mse, s.final_l1));
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

fn diagnostics_table(study: &Study, regimes: &[Regime], results: &[RegimeResults]) -> String {
    let mut out = String::from(
        "## Diagnostics\n\n\
         Per method: the MSE of the coefficients used for transport (FISTA's, the sample's); the MSE at the encoder's location (no sampling); the \
         posterior's mean scale (mean over operators); the last amortisation gap, FISTA with the \
         method's own operators on one batch: location MSE / FISTA's MSE, and the objective gap \
         (MSE + l1 weight x l1, location minus FISTA's); the share of exact zeros among the \
         coefficients used for transport; the non-zero operators.\n\n",
    );
    out += &header(
        study,
        &[
            "method",
            "sample MSE",
            "MSE at location",
            "posterior scale",
            "gap: location / FISTA MSE",
            "objective gap",
            "zeros",
            "operators",
        ],
    );
    for (r, res) in regimes.iter().zip(results) {
        for (m, s) in &res.methods {
            let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
            let scale = s
                .final_posterior_scale
                .as_ref()
                .map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64);
            let (ratio, objective) = match s.last_gap {
                Some(g) => (
                    format!(
                        "{:.4} / {:.4} ({:.1}x)",
                        g.location_mse,
                        g.fista_mse,
                        g.location_mse / g.fista_mse
                    ),
                    format!("{:.4}", g.objective_gap),
                ),
                None => ("-".into(), "-".into()),
            };
            let mut cells: Vec<String> = r.values.clone();
            cells.extend([
                m.to_string(),
                format!("{:.4}", s.final_mse),
                opt(s.final_mse_at_location),
                opt(scale),
                ratio,
                objective,
                format!("{:.0}%", 100.0 * s.final_zero_fraction),
                s.nonzero_operators.to_string(),
            ]);
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(mse: f64, l1: f64, seconds: f64, norms: &[f64]) -> MethodSummary {
        let largest = norms.iter().cloned().fold(0.0, f64::max);
        MethodSummary {
            final_mse: mse,
            final_l1: l1,
            final_zero_fraction: 0.0,
            train_seconds: seconds,
            nonzero_operators: norms.iter().filter(|&&n| n > 0.05 * largest).count(),
            speedup_vs_fista: None,
            mean_fista_iterations: None,
            final_mse_at_location: None,
            last_gap: None,
            final_posterior_scale: None,
            operator_norms: norms.to_vec(),
        }
    }

    fn results(plain20: MethodSummary, thresholded20: MethodSummary) -> RegimeResults {
        let vlgo = |t, j| Method::Vlgo {
            thresholded: t,
            samples: j,
        };
        let mut fista = figures(0.010, 0.5, 320.0, &[1.0, 2.0, 0.0, 0.01, 0.0, 0.0]);
        fista.mean_fista_iterations = Some(140.0);
        RegimeResults {
            data_scale: 1.0,
            methods: vec![
                (Method::Fista, fista),
                (vlgo(false, 1), figures(0.5, 0.6, 2.0, &[1.0; 6])),
                (vlgo(false, 20), plain20),
                (vlgo(false, 100), figures(0.0105, 0.6, 40.0, &[1.0; 6])),
                (vlgo(true, 20), thresholded20),
                (
                    vlgo(true, 100),
                    figures(0.0108, 0.3, 40.0, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
                ),
            ],
        }
    }

    #[test]
    fn conclusions_read_the_largest_j_for_error_and_j20_for_the_rest() {
        let holds = results(
            figures(0.02, 0.60, 10.0, &[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
            figures(0.024, 0.45, 20.0, &[1.0, 0.5, 0.0, 0.0, 0.0, 0.0]),
        );
        let verdicts: Vec<Option<bool>> = holds.conclusions().iter().map(|c| c.holds).collect();
        assert_eq!(verdicts, [Some(true); 4]);
        let c = holds.conclusions();
        assert!(
            c[0].text
                .contains("1.05x (J=100), 1.08x (J=100); at l1 1.2x, 0.6x"),
            "{}",
            c[0].text
        );
        assert!(
            c[1].text.contains("l1 0.75x, MSE 1.20x plain's; 0% zeros"),
            "{}",
            c[1].text
        );
        assert!(
            c[2].text.contains("32.0x, 16.0x; FISTA 140 iterations"),
            "{}",
            c[2].text
        );
        assert!(
            c[3].text.contains("FISTA 2, thresholded 2, plain 3"),
            "{}",
            c[3].text
        );

        // Each criterion can fail on its own.
        let fails = results(
            figures(0.02, 0.60, 40.0, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
            figures(0.03, 0.55, 20.0, &[1.0, 0.5, 0.5, 0.0, 0.0, 0.0]),
        );
        let verdicts: Vec<Option<bool>> = fails.conclusions().iter().map(|c| c.holds).collect();
        assert_eq!(
            verdicts,
            [Some(true), Some(false), Some(false), Some(false)]
        );
        let mut far = holds.clone();
        far.methods[3].1.final_mse = 0.0111;
        assert_eq!(far.conclusions()[0].holds, Some(false));

        // Without FISTA the comparisons with it cannot be read.
        let mut alone = holds;
        alone.methods.remove(0);
        let c = alone.conclusions();
        assert_eq!(
            (c[0].holds, c[1].holds, c[2].holds),
            (None, Some(true), None)
        );
    }
}
