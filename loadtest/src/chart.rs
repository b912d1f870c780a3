//! lockbench's charts, as self-contained SVGs: throughput against concurrency (distinct
//! keys), and throughput and wait time per implementation (hot key).

use std::path::Path;

use plotters::prelude::*;

use crate::distinct_keys::PairSummary;
use crate::report::HotKeySummary;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

pub type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Every implementation named in `rows`, sorted.
fn implementations<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Creates `path`'s folder when it has one.
fn folder_of(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => std::fs::create_dir_all(folder),
        _ => Ok(()),
    }
}

/// Draws `points` on `chart` as a line with a dot at each, in `color`, named `label` in the
/// legend when given.
fn line_with_dots<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    label: Option<&str>,
) -> Drawn
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let line = chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
    if let Some(label) = label {
        line.label(label).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    let dots = points
        .into_iter()
        .map(|point| Circle::new(point, 4, color.filled()));
    chart.draw_series(dots)?;
    Ok(())
}

/// Draws pairs/s against concurrency, one line per implementation, on the store `store`.
pub fn throughput_by_concurrency(path: &Path, store: &str, rows: &[PairSummary]) -> Drawn {
    folder_of(path)?;
    let names = implementations(rows.iter().map(|row| row.which));
    let max_c = rows.iter().map(|row| row.concurrency).max().unwrap_or(1) as f64;
    let max_rate = rows.iter().map(|row| row.pairs_per_s).fold(0.0, f64::max) * 1.1;

    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("lock + unlock pairs/s on distinct keys ({store}, loopback, 2 vCPUs)"),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_c).log_scale(), 0.0..max_rate)?;
    chart
        .configure_mesh()
        .x_desc("concurrent tasks (log scale)")
        .y_desc("pairs/s")
        .x_labels(8)
        .y_label_formatter(&|rate| format!("{:.0}k", rate / 1000.0))
        .draw()?;
    for (index, name) in names.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let mut points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|row| row.which == *name)
            .map(|row| (row.concurrency as f64, row.pairs_per_s))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        line_with_dots(&mut chart, points, color, Some(name))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Draws, per implementation, hot-key acquisitions/s (top) and the p99 wait for the lock
/// (bottom), both on log scales (a 0 ms hold is ten times the rate of a 1 ms one), for each
/// configuration measured (contenders C, hold H), on `store`.
pub fn hot_key_by_implementation(path: &Path, store: &str, rows: &[HotKeySummary]) -> Drawn {
    folder_of(path)?;
    let names = implementations(rows.iter().map(|row| row.which));
    let mut configurations: Vec<(usize, u64)> = rows
        .iter()
        .map(|row| (row.concurrency, row.hold_ms))
        .collect();
    configurations.sort_unstable();
    configurations.dedup();
    let position = |row: &HotKeySummary| {
        let at = (configurations.iter()).position(|c| *c == (row.concurrency, row.hold_ms));
        at.unwrap_or_default() as f64
    };
    let label = |x: &f64| {
        let (c, h) = configurations
            .get(x.round() as usize)
            .copied()
            .unwrap_or_default();
        format!("C={c} H={h}ms")
    };
    let last = configurations.len().saturating_sub(1) as f64;
    let x_range = -0.3..last + 0.3;
    let rates = rows.iter().map(|row| row.acquisitions_per_s.max(0.1));
    let (low_rate, high_rate) =
        rates.fold((f64::MAX, 0.1_f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let waits = rows.iter().map(|row| row.wait_p99_ms.max(0.01));
    let (low_wait, high_wait) =
        waits.fold((f64::MAX, 0.01_f64), |(lo, hi), w| (lo.min(w), hi.max(w)));

    let root = SVGBackend::new(path, (900, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("one hot key: handoffs by implementation ({store}, loopback, 2 vCPUs)"),
        ("sans-serif", 18),
    )?;
    let (upper, lower) = root.split_vertically(360);
    let mut rate = ChartBuilder::on(&upper)
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(
            x_range.clone(),
            (low_rate * 0.8..high_rate * 1.25).log_scale(),
        )?;
    rate.configure_mesh()
        .x_labels(configurations.len().max(2))
        .x_label_formatter(&label)
        .y_desc("acquisitions/s (log)")
        .draw()?;
    let mut wait = ChartBuilder::on(&lower)
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, (low_wait * 0.8..high_wait * 1.25).log_scale())?;
    wait.configure_mesh()
        .x_labels(configurations.len().max(2))
        .x_label_formatter(&label)
        .y_desc("wait for the lock, p99 (ms, log)")
        .draw()?;
    for (index, name) in names.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let mut mine: Vec<&HotKeySummary> = rows.iter().filter(|row| row.which == *name).collect();
        mine.sort_by(|a, b| position(a).total_cmp(&position(b)));
        let rates: Vec<(f64, f64)> = mine
            .iter()
            .map(|row| (position(row), row.acquisitions_per_s))
            .collect();
        let p99: Vec<(f64, f64)> = mine
            .iter()
            .map(|row| (position(row), row.wait_p99_ms.max(0.01)))
            .collect();
        line_with_dots(&mut rate, rates, color, Some(name))?;
        line_with_dots(&mut wait, p99, color, None)?;
    }
    rate.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
