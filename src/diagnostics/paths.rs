//! `vlgo paths`: where each of the largest generators carries a feature. For a few test features
//! (the first of each class), z(t) = expm(t Psi_m) z over t in [-t_max, t_max]; the moves
//! z(t) - z(0) of all of them are projected on their two principal directions, one panel per
//! generator (a black dot at the origin: every path passes there at t = 0): `plots/paths.png` and `paths.json`.

use burn::prelude::*;
use manifoldclr::vlgo_nn::Vlgo;
use manifoldclr::{TrainBackend, symmetric_eigen};
use nalgebra::DMatrix;
use serde_json::{Value, json};
use vlgo_core::ExpmBackend;

use super::{ManifoldRun, first_of_each_class, host, l2};
use crate::error::{CliError, Result};
use crate::plot::{Panel, panels_2d};
use crate::pretrain::data::pick;

/// Indices of the `count` largest values, largest first.
fn largest(values: &[f64], count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(count);
    order
}

/// The moves (rows of `dim`) projected on their two principal directions (not centred: the
/// moves start at 0), with the share of the moves' energy those two directions hold.
pub fn principal_plane(moves: &[f64], dim: usize) -> Result<(Vec<(f64, f64)>, f64)> {
    if let Some(v) = moves.iter().find(|v| !v.is_finite()) {
        return Err(CliError::invalid(
            "paths",
            format!("a move of {v}"),
            "finite moves (a smaller diagnostics.path_t_max)",
        ));
    }
    let rows = moves.len() / dim.max(1);
    let x = DMatrix::from_row_slice(rows, dim, &moves[..rows * dim]);
    let eigen = symmetric_eigen(x.transpose() * &x, "the paths' moves")?;
    let mut order: Vec<usize> = (0..dim).collect();
    order.sort_by(|&a, &b| eigen.eigenvalues[b].total_cmp(&eigen.eigenvalues[a]));
    let total: f64 = eigen.eigenvalues.iter().map(|v| v.max(0.0)).sum();
    let top: f64 = order
        .iter()
        .take(2)
        .map(|&i| eigen.eigenvalues[i].max(0.0))
        .sum();
    let axis = |k: usize| {
        eigen
            .eigenvectors
            .column(order[k.min(dim - 1)])
            .clone_owned()
    };
    let (u, v) = (axis(0), axis(1));
    let points = (0..rows)
        .map(|r| {
            let row = x.row(r);
            ((row * &u)[0], (row * &v)[0])
        })
        .collect();
    Ok((points, if total > 0.0 { top / total } else { 1.0 }))
}

/// expm(t_i Psi_g) z_f - z_f for every feature f (rows of `z`, [n, k]) and t_i of `ts`: row
/// f * len(ts) + i of the result, `k` values each.
pub fn generator_moves<B: ExpmBackend>(
    vlgo: &Vlgo<B>,
    z: Tensor<B, 2>,
    g: usize,
    ts: &[f64],
) -> Result<Vec<f64>> {
    let ([n, k], p, m) = (z.dims(), ts.len(), vlgo.operators.num_operators());
    let start = host(z.clone())?;
    let zs = z.unsqueeze_dim::<3>(1).repeat_dim(1, p).reshape([n * p, k]);
    let mut c = vec![0.0f32; n * p * m];
    for (r, row) in c.chunks_exact_mut(m).enumerate() {
        row[g] = ts[r % p] as f32;
    }
    let c = Tensor::<B, 1>::from_floats(c.as_slice(), &zs.device()).reshape([n * p, m]);
    let moved = host(vlgo.try_transport(c, zs)?)?;
    Ok(moved
        .chunks_exact(k)
        .enumerate()
        .flat_map(|(r, row)| {
            let z0 = &start[(r / p) * k..(r / p + 1) * k];
            row.iter().zip(z0).map(|(a, b)| f64::from(a - b))
        })
        .collect())
}

/// Writes `paths.json` and `plots/paths.png`; returns the JSON.
pub fn paths<B: TrainBackend>(run: &ManifoldRun<B>) -> Result<Value> {
    let settings = &run.config.diagnostics;
    let test = &run.data.test;
    let vlgo = run.vlgo();
    let norms: Vec<f64> = host(vlgo.operators.generator_norms())?
        .into_iter()
        .map(f64::from)
        .collect();
    let picked = first_of_each_class(test, settings.path_features);
    let clean = run.embed(&pick(test, &picked))?;
    let (n, p, k) = (picked.len(), settings.path_points, run.operator_dims());
    let ts: Vec<f64> = (0..p)
        .map(|i| settings.path_t_max * (2.0 * i as f64 / (p - 1) as f64 - 1.0))
        .collect();
    let z = run.rows(&clean, 0..n).narrow(1, 0, k);
    let start = host(z.clone())?;
    let (mut panels, mut entries) = (Vec::new(), Vec::new());
    for g in largest(&norms, settings.path_generators) {
        let moves = generator_moves(vlgo, z.clone(), g, &ts)?;
        let relative = moves
            .chunks_exact(k)
            .enumerate()
            .map(|(r, d)| {
                let z0 = &start[(r / p) * k..(r / p + 1) * k];
                l2(d.iter().copied()) / l2(z0.iter().map(|&x| f64::from(x))).max(1e-12)
            })
            .fold(0.0, f64::max);
        let (points, share) = principal_plane(&moves, k)?;
        panels.push(Panel {
            title: format!("generator {g}, ||Psi|| = {:.3}", norms[g]),
            lines: points.chunks(p).map(<[_]>::to_vec).collect(),
            mark: (0.0, 0.0),
        });
        entries.push(json!({
            "generator": g,
            "norm": norms[g],
            "max_relative_move": relative,
            "plane_share": share,
        }));
    }
    let plot = run.folder.plots_dir()?.join("paths.png");
    panels_2d(
        &plot,
        &format!(
            "z(t) - z(0) = (expm(t Psi) - I) z, t in [-{0}, {0}], on the moves' principal plane",
            settings.path_t_max
        ),
        &panels,
    )?;
    let result = json!({
        "t_max": settings.path_t_max,
        "points": p,
        "test_indices": picked,
        "generators": entries,
        "plot": "plots/paths.png",
    });
    run.folder.write_json("paths.json", &result)?;
    Ok(result)
}
