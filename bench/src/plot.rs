//! Plots of a sweep (`--plot FILE.svg` or `FILE.html`), drawn with plotters: the median
//! round trip and the bandwidth against the payload size, log-log, one line per
//! configuration (every axis but the size), and the inline/chunked crossovers marked on
//! the latency panel.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::crossover::Crossover;
use crate::point::{Point, PointConfig};
use crate::report::label;

/// Why a plot could not be made.
#[derive(Debug)]
pub enum PlotError {
    /// No point has a positive size and latency to plot.
    Nothing,
    /// The drawing failed.
    Draw(String),
}

impl core::fmt::Display for PlotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlotError::Nothing => f.write_str("nothing to plot: no point with a payload"),
            PlotError::Draw(e) => write!(f, "drawing the plot: {e}"),
        }
    }
}

impl std::error::Error for PlotError {}

/// One line: (size, median p50 ns, median bandwidth B/s) per size, in size order.
type Series = Vec<(u32, f64, f64)>;

fn series(points: &[Point]) -> BTreeMap<PointConfig, Series> {
    let mut by: BTreeMap<PointConfig, BTreeMap<u32, Vec<(f64, f64)>>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.config.size > 0) {
        let mut key = p.config.clone();
        key.size = 0;
        by.entry(key)
            .or_default()
            .entry(p.config.size)
            .or_default()
            .push((p.lat_ns.p50 as f64, p.bandwidth_bps));
    }
    by.into_iter()
        .map(|(k, sizes)| {
            let s = sizes
                .into_iter()
                .map(|(size, mut v)| {
                    v.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let (lat, bw) = v[v.len() / 2];
                    (size, lat.max(1.0), bw.max(1.0))
                })
                .collect();
            (k, s)
        })
        .collect()
}

fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// The plot as SVG text.
pub fn svg(points: &[Point], crossovers: &[Crossover], title: &str) -> Result<String, PlotError> {
    let lines = series(points);
    if lines.is_empty() {
        return Err(PlotError::Nothing);
    }
    let all = || lines.values().flatten();
    let (min_s, max_s) = all().fold((u32::MAX, 0), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (min_l, max_l) = all().fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (min_b, max_b) = all().fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.2), b.max(p.2)));
    let x = (min_s.max(1)..max_s.max(2) * 2).log_scale();
    let mut text = String::new();
    {
        let height = 900 + 18 * lines.len() as u32;
        let root = SVGBackend::with_string(&mut text, (1100, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let root = root.titled(title, ("sans-serif", 22)).map_err(draw_err)?;
        let (top, bottom) = root.split_vertically(height / 2);
        let mut lat = ChartBuilder::on(&top)
            .caption(
                "median round trip (ns) against payload size (bytes)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(x.clone(), (min_l / 1.5..max_l * 1.5).log_scale())
            .map_err(draw_err)?;
        lat.configure_mesh()
            .x_desc("bytes")
            .y_desc("ns")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(draw_err)?;
        let mut bw = ChartBuilder::on(&bottom)
            .caption(
                "bandwidth (bytes/s) against payload size (bytes)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(x, (min_b / 1.5..max_b * 1.5).log_scale())
            .map_err(draw_err)?;
        bw.configure_mesh()
            .x_desc("bytes")
            .y_desc("B/s")
            .y_label_formatter(&|v| format!("{v:.1e}"))
            .draw()
            .map_err(draw_err)?;
        for (i, (config, pts)) in lines.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let name = label(config).replace(" 0 B", "");
            lat.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            lat.draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.1), 3, color.filled())),
            )
            .map_err(draw_err)?;
            bw.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.2)),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?;
        }
        // Crossovers: a black cross where chunked overtakes inline, with its size.
        for c in crossovers {
            let Some(size) = c.size else { continue };
            let Some(&(_, inline, _)) = c.compared.iter().find(|p| p.0 == size) else {
                continue;
            };
            lat.draw_series(std::iter::once(Cross::new(
                (size, inline),
                8,
                BLACK.stroke_width(2),
            )))
            .map_err(draw_err)?;
            lat.draw_series(std::iter::once(Text::new(
                format!(
                    "{} crossover {size} B (inline {})",
                    c.config.op, c.config.inline
                ),
                (size, inline * 1.15),
                ("sans-serif", 12),
            )))
            .map_err(draw_err)?;
        }
        lat.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(text)
}

/// What a plot file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An SVG image (`.svg`).
    Svg,
    /// An HTML page holding the SVG (`.html`, `.htm`).
    Html,
}

impl Format {
    /// The format a file name asks for by its extension; `None` for any other name.
    pub fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Some(Format::Svg),
            "html" | "htm" => Some(Format::Html),
            _ => None,
        }
    }
}

/// The plot as the bytes of a file in `format`.
pub fn render(
    format: Format,
    points: &[Point],
    crossovers: &[Crossover],
    title: &str,
) -> Result<String, PlotError> {
    let svg = svg(points, crossovers, title)?;
    Ok(match format {
        Format::Html => format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body>\n{svg}\n</body></html>\n"
        ),
        Format::Svg => svg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crossover::crossovers;
    use crate::point::tests::point;

    #[test]
    fn draws_every_configuration_and_marks_crossovers() {
        let mut pts = Vec::new();
        for (i, size) in [1024u32, 4096, 16384, 65536].into_iter().enumerate() {
            let inline = 500 * (i as u64 + 1) * (i as u64 + 1);
            pts.push(point("echo", size, "short", 0, inline, 1e5));
            pts.push(point("echo", size, "chunked", 0, 900 + 300 * i as u64, 1e5));
        }
        pts.push(point("null", 0, "auto", 0, 300, 3e6));
        let c = crossovers(&pts);
        let s = svg(&pts, &c, "test sweep").unwrap();
        assert!(s.starts_with("<svg"));
        assert!(
            s.contains("form short") && s.contains("form chunked"),
            "legend"
        );
        assert!(s.contains("crossover 4096 B"), "crossover marked");
        let html = render(Format::Html, &pts, &c, "t").unwrap();
        assert!(html.starts_with("<!doctype html>") && html.contains("<svg"));
        assert_eq!(
            render(Format::Svg, &pts, &c, "t").unwrap(),
            svg(&pts, &c, "t").unwrap()
        );
    }

    #[test]
    fn formats_follow_the_file_name() {
        assert_eq!(Format::of(Path::new("a/b.svg")), Some(Format::Svg));
        assert_eq!(Format::of(Path::new("b.HTML")), Some(Format::Html));
        assert_eq!(Format::of(Path::new("b.htm")), Some(Format::Html));
        for other in ["b.png", "b", "svg", "b.svg.txt"] {
            assert_eq!(Format::of(Path::new(other)), None, "{other}");
        }
    }

    #[test]
    fn nothing_to_plot_is_an_error() {
        let pts = vec![point("null", 0, "auto", 0, 300, 3e6)];
        assert!(matches!(svg(&pts, &[], "t"), Err(PlotError::Nothing)));
    }
}
