//! The throughput chart of the distinct-keys scenario, as a self-contained SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::distinct_keys::PairSummary;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws pairs/s against concurrency, one line per implementation.
pub fn throughput_by_concurrency(
    path: &Path,
    rows: &[PairSummary],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut names: Vec<&str> = rows.iter().map(|row| row.which).collect();
    names.dedup();
    names.sort_unstable();
    names.dedup();
    let max_c = rows.iter().map(|row| row.concurrency).max().unwrap_or(1) as f64;
    let max_rate = rows.iter().map(|row| row.pairs_per_s).fold(0.0, f64::max) * 1.1;

    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "lock + unlock pairs/s on distinct keys (loopback Redis 7.0, 2 vCPUs)",
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
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|point| Circle::new(point, 4, color.filled())),
        )?;
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
