//! PNG plots with the bundled font, so they draw the same on a machine without fonts.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::error::{CliError, Result};

static FONT: Once = Once::new();

fn ensure_font() {
    FONT.call_once(|| {
        // DejaVu Sans (assets/fonts, Bitstream Vera licence) under plotters' default family name.
        let bytes = include_bytes!("../assets/fonts/DejaVuSans.ttf");
        register_font("sans-serif", FontStyle::Normal, bytes)
            .unwrap_or_else(|_| unreachable!("the bundled font parses"));
    });
}

fn plot_error(path: &Path) -> impl Fn(String) -> CliError + '_ {
    move |message| CliError::Plot {
        path: path.to_path_buf(),
        message,
    }
}

/// Colour of series `i`.
pub fn colour(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(0, 0, 0),
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
    ];
    PALETTE[i % PALETTE.len()]
}

/// One named line.
pub struct Series<'a> {
    /// Legend label.
    pub name: &'a str,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// A line chart with one line per series and a legend; `log_y` draws y on a log scale
/// (non-positive values are dropped there).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let keep = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log_y || y > 0.0);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied().filter(keep))
        .collect();
    let range = |f: fn(&(f64, f64)) -> f64, log: bool| {
        let lo = all.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = all.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
        match (lo.is_finite(), hi > lo, log) {
            (true, true, _) => (lo, hi),
            // One distinct value: a range around it that stays positive on a log axis.
            (true, false, true) => (lo / 2.0, lo * 2.0),
            (true, false, false) => (lo - 0.5, lo + 0.5),
            (false, _, true) => (0.1, 1.0),
            (false, _, false) => (0.0, 1.0),
        }
    };
    let (x0, x1) = range(|p| p.0, false);
    let (y0, y1) = range(|p| p.1, log_y);
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(|e| err(e.to_string()))?;
            for (i, s) in series.iter().enumerate() {
                let style = colour(i).stroke_width(2);
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied().filter(keep),
                        style,
                    ))
                    .map_err(|e| err(e.to_string()))?
                    .label(s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }};
    }
    if log_y {
        draw!(
            builder
                .build_cartesian_2d(x0..x1, (y0..y1 * 1.05).log_scale())
                .map_err(|e| err(e.to_string()))?
        );
    } else {
        let pad = 0.05 * (y1 - y0);
        draw!(
            builder
                .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
                .map_err(|e| err(e.to_string()))?
        );
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// Points in 3-D (grey) with coloured paths over them, seen from an oblique angle.
pub fn paths_3d(
    path: &Path,
    title: &str,
    cloud: &[[f32; 3]],
    paths: &[(String, Vec<Vec<[f32; 3]>>)],
) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in cloud
        .iter()
        .chain(paths.iter().flat_map(|(_, ps)| ps.iter().flatten()))
    {
        for k in 0..3 {
            let v = p[k] as f64;
            if v.is_finite() {
                lo[k] = lo[k].min(v);
                hi[k] = hi[k].max(v);
            }
        }
    }
    let root = BitMapBackend::new(path, (900, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(10)
        .build_cartesian_3d(lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2])
        .map_err(|e| err(e.to_string()))?;
    chart.with_projection(|mut p| {
        p.pitch = 0.45;
        p.yaw = 0.6;
        p.scale = 0.85;
        p.into_matrix()
    });
    chart
        .configure_axes()
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let grey = RGBColor(170, 170, 170).mix(0.5).filled();
    chart
        .draw_series(
            cloud
                .iter()
                .map(|p| Circle::new((p[0] as f64, p[1] as f64, p[2] as f64), 1, grey)),
        )
        .map_err(|e| err(e.to_string()))?;
    for (i, (name, lines)) in paths.iter().enumerate() {
        let style = colour(i + 1).stroke_width(3);
        let finite = |p: &&[f32; 3]| p.iter().all(|v| v.is_finite());
        let mut first = true;
        for line in lines {
            let drawn = chart
                .draw_series(LineSeries::new(
                    line.iter()
                        .filter(finite)
                        .map(|p| (p[0] as f64, p[1] as f64, p[2] as f64)),
                    style,
                ))
                .map_err(|e| err(e.to_string()))?;
            if std::mem::take(&mut first) {
                drawn
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}
