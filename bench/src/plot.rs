//! Plots of a sweep (`--plot FILE.svg` or `FILE.html`), drawn with plotters: the median
//! round trip and the bandwidth against the payload size, log-log, one line per
//! configuration (every axis but the size), and the inline/chunked crossovers marked on
//! the latency panel.
//!
//! Sizes read in B, KiB and MiB, round trips in ns, µs and ms, bandwidth in MB/s or GB/s
//! (decimal, as the sweep table's MB/s column); each axis has a few ticks at round values.
//! The legend, beside the panels, names a line by the axes that differ between the lines;
//! the values they share are said once, under the title.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::crossover::Crossover;
use crate::point::{Point, PointConfig};

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

/// The points with a payload as lines: one per configuration (the size set to 0), each
/// size's figures the medians of its repetitions.
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

/// One axis of a configuration in a word or two, as a line's name gives it.
type Axis = fn(&PointConfig) -> String;

/// The axes a line's name may give, in order (the size is the plot's x axis).
const AXES: [Axis; 11] = [
    |c| c.provider.clone(),
    |c| c.op.clone(),
    |c| format!("inline {}", size_text(c.inline)),
    |c| format!("credits {}", c.credits),
    |c| format!("depth {}", c.depth),
    |c| format!("inline-sends {}", size_text(c.inline_sends)),
    |c| {
        let ri = if c.remote_invalidation { "+ri" } else { "" };
        format!("{}{ri}", c.registration)
    },
    |c| format!("conns {}", c.conns),
    |c| format!("workers {}", c.workers),
    |c| format!("form {}", c.form),
    |c| match c.version {
        0 => "v auto".to_string(),
        v => format!("v{v}"),
    },
];

/// The lines' names — each line's values of the axes that differ between the lines — and
/// the values every line shares.
fn line_names<'a>(configs: impl Iterator<Item = &'a PointConfig> + Clone) -> (Vec<String>, String) {
    let mut names: Vec<Vec<String>> = configs.clone().map(|_| Vec::new()).collect();
    let mut shared = Vec::new();
    for axis in AXES {
        let values: Vec<String> = configs.clone().map(axis).collect();
        if values.iter().all(|v| *v == values[0]) {
            shared.extend(values.into_iter().next());
        } else {
            for (name, v) in names.iter_mut().zip(values) {
                name.push(v);
            }
        }
    }
    let names = names.into_iter().map(|n| n.join(", ")).collect();
    (names, shared.join(", "))
}

/// `v` to three significant digits (a whole number to all of its own) without trailing
/// zeros: 1, 1.5, 0.25, 640, 1234.
fn short_number(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A byte count in B, KiB or MiB: 64 B, 1 KiB, 1.5 KiB, 8 MiB.
pub fn size_text(bytes: u32) -> String {
    let b = f64::from(bytes);
    let (v, unit) = if bytes >= 1 << 20 {
        (b / f64::from(1 << 20), "MiB")
    } else if bytes >= 1 << 10 {
        (b / f64::from(1 << 10), "KiB")
    } else {
        (b, "B")
    };
    format!("{} {unit}", short_number(v))
}

/// A time in nanoseconds in ns, µs, ms or s: 500 ns, 2 µs, 1.5 ms.
fn time_text(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    format!("{} {unit}", short_number(v))
}

/// Most ticks labelled on an axis.
const MAX_TICKS: usize = 8;

/// The ticks of a log axis from `lo` to `hi`: 1 to 9, or 1, 2 and 5, or 1 alone in each
/// decade, the finest that are at most [`MAX_TICKS`]; past that every second, fifth or
/// tenth decade.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let in_decades = |mantissas: &[f64], every: i32| -> Vec<f64> {
        let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        (first..=last)
            .filter(|e| e.rem_euclid(every) == 0)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let fine: [&[f64]; 3] = [&[1., 2., 3., 4., 5., 6., 7., 8., 9.], &[1., 2., 5.], &[1.]];
    for mantissas in fine {
        let t = in_decades(mantissas, 1);
        if t.len() <= MAX_TICKS {
            return t;
        }
    }
    [2, 5, 10, 20]
        .into_iter()
        .map(|every| in_decades(&[1.], every))
        .find(|t| t.len() <= MAX_TICKS)
        .unwrap_or_default()
}

/// The light grid lines of a log axis from `lo` to `hi`: 1 to 9 in each decade.
fn log_grid(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (first..=last)
        .flat_map(|e| (1..10).map(move |m| f64::from(m) * 10f64.powi(e)))
        .filter(|v| (lo..=hi).contains(v))
        .collect()
}

/// The ticks of the size axis from `lo` to `hi`: its powers of two, every one if at most
/// [`MAX_TICKS`], else every second, fifth, tenth (which keeps 1 KiB and 1 MiB among them).
fn size_ticks(lo: u32, hi: u32) -> Vec<u32> {
    let powers = || (0..32u32).filter(move |k| (lo..=hi).contains(&(1u32 << k)));
    [1, 2, 5, 10, 20]
        .into_iter()
        .map(|every| {
            powers()
                .filter(|k| k % every == 0)
                .map(|k| 1u32 << k)
                .collect::<Vec<_>>()
        })
        .find(|t| t.len() <= MAX_TICKS)
        .unwrap_or_default()
}

/// The bandwidth's unit for figures from `lo` to `hi` bytes a second: GB/s when their
/// middle (geometric) is at least 1 GB/s, MB/s otherwise; the unit's bytes a second, and
/// its name.
fn bandwidth_unit(lo: f64, hi: f64) -> (f64, &'static str) {
    if (lo * hi).sqrt() >= 1e9 {
        (1e9, "GB/s")
    } else {
        (1e6, "MB/s")
    }
}

fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// A panel of the plot: a figure against the payload size, both axes log.
type Panel<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<WithKeyPoints<LogCoord<u32>>, WithKeyPoints<LogCoord<f64>>>,
>;

/// The size axis from `lo` to `hi` bytes: ticks at powers of two ([`size_ticks`]), a light
/// grid line at each.
fn size_axis(lo: u32, hi: u32) -> WithKeyPoints<LogCoord<u32>> {
    let grid: Vec<u32> = (0..32u32)
        .map(|k| 1u32 << k)
        .filter(|p| (lo..=hi).contains(p))
        .collect();
    (lo..hi)
        .log_scale()
        .with_key_points(size_ticks(lo, hi))
        .with_light_points(grid)
}

/// A log axis from `lo` to `hi`: ticks at round values ([`log_ticks`]), light grid lines
/// at 1 to 9 of each decade.
fn log_axis(lo: f64, hi: f64) -> WithKeyPoints<LogCoord<f64>> {
    (lo..hi)
        .log_scale()
        .with_key_points(log_ticks(lo, hi))
        .with_light_points(log_grid(lo, hi))
}

/// The plot as SVG text.
pub fn svg(points: &[Point], crossovers: &[Crossover], title: &str) -> Result<String, PlotError> {
    let lines = series(points);
    if lines.is_empty() {
        return Err(PlotError::Nothing);
    }
    let (names, shared) = line_names(lines.keys());
    let all = || lines.values().flatten();
    let (min_s, max_s) = all().fold((u32::MAX, 0), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (min_l, max_l) = all().fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (min_b, max_b) = all().fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.2), b.max(p.2)));
    let (per_unit, unit) = bandwidth_unit(min_b, max_b);
    let (min_b, max_b) = (min_b / per_unit, max_b / per_unit);
    let sizes = ((min_s / 2).max(1), max_s.max(2).saturating_mul(2));
    let mut text = String::new();
    {
        // The legend, where there are lines to tell apart, in a column of its own on the
        // right, clear of the lines.
        let key_width = if lines.len() > 1 {
            let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
            (longest as u32 * 7 + 60).clamp(160, 560)
        } else {
            0
        };
        let height = (924).max(140 + 20 * lines.len() as u32);
        let root =
            SVGBackend::with_string(&mut text, (1100 + key_width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut area = root.titled(title, ("sans-serif", 22)).map_err(draw_err)?;
        if !shared.is_empty() {
            area = area
                .titled(&format!("every line: {shared}"), ("sans-serif", 14))
                .map_err(draw_err)?;
        }
        let (charts, key) = area.split_horizontally(1100);
        draw_key(&key, &names)?;
        let (top, bottom) = charts.split_vertically(height / 2);
        let mut lat = panel(
            &top,
            "median round trip against payload size",
            sizes,
            (min_l / 1.5, max_l * 1.5),
            ("round trip", &|v| time_text(*v)),
        )?;
        let bw_caption = format!(
            "bandwidth ({unit}, {} bytes a second) against payload size",
            if per_unit >= 1e9 { "10^9" } else { "10^6" }
        );
        let mut bw = panel(
            &bottom,
            &bw_caption,
            sizes,
            (min_b / 1.5, max_b * 1.5),
            (unit, &|v| short_number(*v)),
        )?;
        for (i, pts) in lines.values().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            lat.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?;
            lat.draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.1), 3, color.filled())),
            )
            .map_err(draw_err)?;
            bw.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.2 / per_unit)),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?;
            bw.draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.2 / per_unit), 3, color.filled())),
            )
            .map_err(draw_err)?;
        }
        mark_crossovers(&mut lat, crossovers)?;
        root.present().map_err(draw_err)?;
    }
    Ok(text)
}

/// A panel on `area` under `caption`: payload sizes from `sizes.0` to `sizes.1` across, a
/// figure from `y.0` to `y.1` up, its axis named and its ticks labelled by `y_axis`.
fn panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    sizes: (u32, u32),
    y: (f64, f64),
    y_axis: (&str, &dyn Fn(&f64) -> String),
) -> Result<Panel<'a, 'b>, PlotError> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(size_axis(sizes.0, sizes.1), log_axis(y.0, y.1))
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .x_desc("payload size")
        .y_desc(y_axis.0)
        .x_label_formatter(&|s| size_text(*s))
        .y_label_formatter(y_axis.1)
        .light_line_style(BLACK.mix(0.04))
        .draw()
        .map_err(draw_err)?;
    Ok(chart)
}

/// Draws the legend in `area` (nothing for a single line, which has no name): each line's
/// colour and name, a row each, from the top of the latency panel down.
fn draw_key(area: &DrawingArea<SVGBackend<'_>, Shift>, names: &[String]) -> Result<(), PlotError> {
    if names.len() < 2 {
        return Ok(());
    }
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let y = 50 + 20 * i as i32;
        area.draw(&PathElement::new(
            vec![(8, y), (36, y)],
            color.stroke_width(2),
        ))
        .map_err(draw_err)?;
        area.draw(&Circle::new((22, y), 3, color.filled()))
            .map_err(draw_err)?;
        area.draw(&Text::new(name.clone(), (44, y - 7), ("sans-serif", 13)))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Marks each crossover on the latency panel: a black cross where chunked overtakes
/// inline, with its size.
fn mark_crossovers(lat: &mut Panel<'_, '_>, crossovers: &[Crossover]) -> Result<(), PlotError> {
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
                "{} crossover {} (inline {})",
                c.config.op,
                size_text(size),
                size_text(c.config.inline)
            ),
            (size, inline * 1.15),
            ("sans-serif", 12),
        )))
        .map_err(draw_err)?;
    }
    Ok(())
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
        // The axes every line shares are said once, not on each line of the legend.
        assert_eq!(s.matches("credits 32").count(), 1, "said once");
        assert!(s.contains("every line: soft, echo, inline 4 KiB, credits 32"));
        assert!(s.contains("64 KiB") && s.contains("MB/s"), "human units");
        assert!(s.contains("crossover 4 KiB"), "crossover marked");
        let html = render(Format::Html, &pts, &c, "t").unwrap();
        assert!(html.starts_with("<!doctype html>") && html.contains("<svg"));
        assert_eq!(
            render(Format::Svg, &pts, &c, "t").unwrap(),
            svg(&pts, &c, "t").unwrap()
        );
    }

    /// Sizes in B, KiB and MiB, times in ns to s, numbers to three digits; the bandwidth's
    /// unit by its middle.
    #[test]
    fn figures_read_in_human_units() {
        assert_eq!(size_text(64), "64 B");
        assert_eq!(size_text(1024), "1 KiB");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(65536), "64 KiB");
        assert_eq!(size_text(8 << 20), "8 MiB");
        assert_eq!(time_text(500.0), "500 ns");
        assert_eq!(time_text(2000.0), "2 µs");
        assert_eq!(time_text(1_500_000.0), "1.5 ms");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(0.1 * 3.0), "0.3");
        assert_eq!(short_number(1234.0), "1234");
        assert_eq!(bandwidth_unit(1e6, 1e8).1, "MB/s");
        assert_eq!(bandwidth_unit(1e9, 4e9), (1e9, "GB/s"));
    }

    /// At most MAX_TICKS ticks on an axis, at round values, whatever its range.
    #[test]
    fn ticks_are_few_and_round() {
        for (lo, hi) in [(1e4, 3e4), (300.0, 2e6), (1.0, 1e12), (0.05, 5000.0)] {
            let t = log_ticks(lo, hi);
            assert!(!t.is_empty() && t.len() <= MAX_TICKS, "{lo}..{hi}: {t:?}");
            assert!(t.iter().all(|v| (lo..=hi).contains(v)), "{t:?}");
        }
        assert_eq!(log_ticks(1e4, 3e4), vec![1e4, 2e4, 3e4]);
        assert_eq!(log_ticks(300.0, 2e6), vec![1e3, 1e4, 1e5, 1e6]);
        // Every power of two while they are few; past that every fifth: 1 KiB and 1 MiB
        // among them.
        assert_eq!(
            size_ticks(32, 2048),
            vec![32, 64, 128, 256, 512, 1024, 2048]
        );
        assert_eq!(size_ticks(1, 16 << 20), vec![1, 32, 1024, 32768, 1 << 20]);
    }

    /// A line is named by the axes that differ between the lines; the rest is said once.
    #[test]
    fn the_legend_names_what_differs() {
        let a = point("echo", 4096, "short", 0, 900, 1e5).config;
        let b = PointConfig {
            depth: 8,
            ..a.clone()
        };
        let c = PointConfig {
            op: "read".into(),
            ..a.clone()
        };
        let (lines, shared) = line_names([&a, &b, &c].into_iter());
        assert_eq!(lines, ["echo, depth 1", "echo, depth 8", "read, depth 1"]);
        assert_eq!(
            shared,
            "soft, inline 4 KiB, credits 32, inline-sends 256 B, windows+ri, conns 1, \
             workers 1, form short, v1"
        );
        let (one, all) = line_names([&a].into_iter());
        assert_eq!(one, [""]);
        assert!(all.starts_with("soft, echo, inline 4 KiB"), "{all}");
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
