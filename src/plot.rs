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

/// A colour for `v` in [0, 1]: dark violet through teal to yellow (a viridis-like ramp that
/// stays readable in grey).
fn ramp(v: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 3] = [
        (68.0, 1.0, 84.0),
        (33.0, 145.0, 140.0),
        (253.0, 231.0, 37.0),
    ];
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    } * 2.0;
    let (i, f) = ((v.floor() as usize).min(1), v - v.floor().min(1.0));
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// A heat map of `values` (one row per label of `rows`, one column per index), coloured from 0
/// to the largest value, which the title states.
pub fn heat_map(
    path: &Path,
    title: &str,
    x_label: &str,
    rows: &[String],
    values: &[Vec<f64>],
) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let cols = values.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let top = values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    if values.len() != rows.len() {
        return Err(err(format!(
            "{} rows of values for {} row labels",
            values.len(),
            rows.len()
        )));
    }
    let n = rows.len().max(1);
    let height = (140 + 36 * rows.len()).max(400) as u32;
    let root = BitMapBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    // Cell (r, c) is the unit square centred on (c, n - 1 - r): the first row at the top, and
    // the axes' integer ticks at the cell centres.
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title} (yellow = {top:.4})"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(140)
        .build_cartesian_2d(-0.5..cols as f64 - 0.5, -0.5..n as f64 - 0.5)
        .map_err(|e| err(e.to_string()))?;
    let whole = |v: f64| (v >= -0.25 && (v - v.round()).abs() < 1e-6).then(|| v.round() as usize);
    let name = |y: &f64| {
        whole(*y)
            .and_then(|i| rows.get(n.checked_sub(i + 1)?).cloned())
            .unwrap_or_default()
    };
    let index = |x: &f64| whole(*x).map_or(String::new(), |i| i.to_string());
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x_label)
        .x_labels(cols)
        .y_labels(n)
        .x_label_formatter(&index)
        .y_label_formatter(&name)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let cells = values.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().map(move |(c, &v)| {
            let colour = ramp(if top > 0.0 { v / top } else { 0.0 });
            let (x, y) = (c as f64, (n - 1 - r) as f64);
            Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], colour.filled())
        })
    });
    chart.draw_series(cells).map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}

/// An image's bytes: `channels` planes of `height` x `width`, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Picture<'a> {
    /// 1 (grey) or 3 (RGB).
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// `channels * height * width` bytes.
    pub pixels: &'a [u8],
}

/// Rows of pictures under a title, a title above each column, each picture enlarged to about
/// 84 pixels.
pub fn image_grid(
    path: &Path,
    title: &str,
    column_titles: &[String],
    rows: &[Vec<Picture>],
) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let side = rows
        .iter()
        .flatten()
        .map(|p| p.height.max(p.width))
        .max()
        .unwrap_or(1)
        .max(1);
    let scale = (84 / side).max(1);
    let (cell, head) = (side * scale + 10, 64);
    let cols = rows
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(column_titles.len())
        .max(1);
    let size = (
        (cols * cell + 20).max(600) as u32,
        (head + rows.len() * cell + 10) as u32,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let text = |s: &str, x: usize, y: usize, px: u32| {
        root.draw(&Text::new(
            s.to_string(),
            (x as i32, y as i32),
            ("sans-serif", px).into_font(),
        ))
        .map_err(|e| err(e.to_string()))
    };
    text(title, 10, 8, 18)?;
    for (c, t) in column_titles.iter().enumerate() {
        text(t, 10 + c * cell, 38, 13)?;
    }
    for (r, row) in rows.iter().enumerate() {
        for (c, p) in row.iter().enumerate() {
            let (x0, y0) = (10 + c * cell, head + r * cell);
            let plane = p.height * p.width;
            for y in 0..p.height {
                for x in 0..p.width {
                    let at =
                        |ch: usize| p.pixels[(ch.min(p.channels - 1)) * plane + y * p.width + x];
                    let colour = RGBColor(at(0), at(1), at(2));
                    let (px, py) = ((x0 + x * scale) as i32, (y0 + y * scale) as i32);
                    root.draw(&Rectangle::new(
                        [(px, py), (px + scale as i32, py + scale as i32)],
                        colour.filled(),
                    ))
                    .map_err(|e| err(e.to_string()))?;
                }
            }
        }
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// One panel of [`panels_2d`]: lines of 2-D points and one marked point.
pub struct Panel {
    /// Caption.
    pub title: String,
    /// The lines.
    pub lines: Vec<Vec<(f64, f64)>>,
    /// A point drawn as a black dot (e.g. where every line passes at t = 0).
    pub mark: (f64, f64),
}

/// Panels side by side (two per row) under one title.
pub fn panels_2d(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(cols).max(1);
    let root =
        BitMapBackend::new(path, (500 * cols as u32, 60 + 460 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| err(e.to_string()))?;
    for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
        let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
        let all: Vec<(f64, f64)> = panel
            .lines
            .iter()
            .flatten()
            .filter(finite)
            .copied()
            .collect();
        let span = |f: fn(&(f64, f64)) -> f64| {
            let lo = all.iter().map(f).fold(f64::INFINITY, f64::min);
            let hi = all.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
            let pad = ((hi - lo) * 0.08).max(1e-9);
            if lo.is_finite() {
                (lo - pad)..(hi + pad)
            } else {
                -1.0..1.0
            }
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(span(|p| p.0), span(|p| p.1))
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_labels(5)
            .y_labels(5)
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (i, line) in panel.lines.iter().enumerate() {
            let style = colour(i + 1).stroke_width(2);
            chart
                .draw_series(LineSeries::new(line.iter().filter(finite).copied(), style))
                .map_err(|e| err(e.to_string()))?;
        }
        chart
            .draw_series([Circle::new(panel.mark, 4, BLACK.filled())])
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// One named line of means with its spread: (x, mean, standard deviation) points.
pub struct Band<'a> {
    /// Legend label.
    pub name: &'a str,
    /// (x, mean, std) points, in x order.
    pub points: Vec<(f64, f64, f64)>,
}

/// Means joined by lines with error bars of ± one standard deviation, one colour per band.
pub fn band_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    bands: &[Band],
) -> Result<()> {
    ensure_font();
    let err = plot_error(path);
    let finite = |p: &&(f64, f64, f64)| p.0.is_finite() && p.1.is_finite() && p.2.is_finite();
    let all: Vec<(f64, f64, f64)> = bands
        .iter()
        .flat_map(|b| b.points.iter().filter(finite).copied())
        .collect();
    let fold = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
        let lo = all.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = all.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
        match (lo.is_finite(), hi > lo) {
            (true, true) => (lo, hi),
            (true, false) => (lo - 0.5, lo + 0.5),
            (false, _) => (0.0, 1.0),
        }
    };
    let (x0, x1) = fold(&|p| p.0);
    let (y0, _) = fold(&|p| p.1 - p.2);
    let (_, y1) = fold(&|p| p.1 + p.2);
    let (xpad, ypad) = (0.05 * (x1 - x0), 0.08 * (y1 - y0));
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), (y0 - ypad)..(y1 + ypad))
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let cap = 0.01 * (x1 - x0 + 2.0 * xpad);
    for (i, band) in bands.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        let points: Vec<(f64, f64, f64)> = band.points.iter().filter(finite).copied().collect();
        chart
            .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), style))
            .map_err(|e| err(e.to_string()))?
            .label(band.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(points.iter().flat_map(|&(x, m, s)| {
                [
                    PathElement::new(vec![(x, m - s), (x, m + s)], style),
                    PathElement::new(vec![(x - cap, m - s), (x + cap, m - s)], style),
                    PathElement::new(vec![(x - cap, m + s), (x + cap, m + s)], style),
                ]
            }))
            .map_err(|e| err(e.to_string()))?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, m, _)| Circle::new((x, m), 4, style.filled())),
            )
            .map_err(|e| err(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}
