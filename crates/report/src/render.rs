//! Draws a [`ChartData`] as SVG or PNG with plotters, with no system library: the text is laid
//! out and rasterised with ab_glyph from DejaVu Sans, embedded in the binary (the `dejavu`
//! crate), and PNG files are encoded by the pure-Rust `png` crate.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::chart::{Axis, ChartData, Scale, Style, Unit};
use crate::units::fmt_ns;

/// The font family every chart uses; registered once with the embedded DejaVu Sans.
const FAMILY: &str = "sans-serif";

/// Default size of a chart, in pixels.
pub const CHART_SIZE: (u32, u32) = (960, 540);

/// Why a chart could not be drawn (the drawing backend's message).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw chart {chart}: {message}")]
pub struct ChartError {
    /// The chart's id.
    pub chart: String,
    /// What went wrong.
    pub message: String,
}

/// Colours of runs (and of a single run's lines), chosen to stay apart on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans is a valid TrueType font; a failure here would be a packaging bug.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Draws a chart as an SVG document (`<svg ...>...</svg>`) of `size` pixels.
pub fn render_svg(c: &ChartData, size: (u32, u32)) -> Result<String, ChartError> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(root, c).map_err(|m| ChartError { chart: c.id.clone(), message: m })?;
    }
    Ok(out)
}

/// Draws a chart as a PNG image of `size` pixels (RGB, 8 bits per channel).
pub fn render_png(c: &ChartData, size: (u32, u32)) -> Result<Vec<u8>, ChartError> {
    register_font();
    let err = |m: String| ChartError { chart: c.id.clone(), message: m };
    let (w, h) = size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(root, c).map_err(err)?;
    }
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|e| err(e.to_string()))?;
        writer.write_image_data(&rgb).map_err(|e| err(e.to_string()))?;
        writer.finish().map_err(|e| err(e.to_string()))?;
    }
    Ok(png_bytes)
}

/// Maps a value to drawing space (log10 for log axes, negated for reversed ones); `None` for
/// values a log axis cannot show (≤ 0 or not finite).
fn fwd(scale: Scale, v: f64) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    match scale {
        Scale::Linear => Some(v),
        Scale::Log if v > 0.0 => Some(v.log10()),
        Scale::LogReversed if v > 0.0 => Some(-v.log10()),
        _ => None,
    }
}

fn inv(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => 10f64.powf(v),
        Scale::LogReversed => 10f64.powf(-v),
    }
}

/// A tick label in the axis's unit.
fn tick(axis: &Axis, v: f64) -> String {
    let x = inv(axis.scale, v);
    match axis.unit {
        Unit::Nanos => fmt_ns(x.max(0.0).round() as u64),
        Unit::Percent => format!("{}%", short(x)),
        Unit::Seconds => format!("{}s", short(x)),
        Unit::Number => compact(x),
    }
}

/// A number with at most 3 significant decimals, trailing zeros removed.
fn short(x: f64) -> String {
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else if x.abs() >= 1.0 {
        2
    } else {
        4
    };
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `1500` → `1.5k`, `2000000` → `2M`.
fn compact(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{}G", short(x / 1e9))
    } else if a >= 1e6 {
        format!("{}M", short(x / 1e6))
    } else if a >= 1e3 {
        format!("{}k", short(x / 1e3))
    } else {
        short(x)
    }
}

/// The drawing-space range of an axis: its fixed range, else the data's extent (log axes
/// widened to whole decades, linear ones starting at 0 when the data is positive).
fn range(axis: &Axis, values: &[f64]) -> (f64, f64) {
    let (lo, hi) = match axis.range {
        Some((a, b)) => {
            let (a, b) = (fwd(axis.scale, a).unwrap_or(0.0), fwd(axis.scale, b).unwrap_or(1.0));
            (a.min(b), a.max(b))
        }
        None => {
            let mut lo = f64::INFINITY;
            let mut hi = f64::NEG_INFINITY;
            for v in values {
                lo = lo.min(*v);
                hi = hi.max(*v);
            }
            if !lo.is_finite() {
                return (0.0, 1.0);
            }
            match axis.scale {
                Scale::Linear => (lo.min(0.0), hi + (hi - lo.min(0.0)).abs() * 0.05),
                _ => (lo.floor(), hi.ceil()),
            }
        }
    };
    if hi - lo < 1e-9 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

fn colour(c: &ChartData, run: usize, shade: usize) -> RGBColor {
    let runs = c.series.iter().map(|s| s.run).chain(c.bands.iter().map(|b| b.run)).max().unwrap_or(0) + 1;
    if runs == 1 {
        return PALETTE[shade % PALETTE.len()];
    }
    // Several runs: a run's colour, darker or lighter for each further line of the run.
    const FACTORS: [f64; 6] = [1.0, 0.55, 1.45, 0.35, 1.8, 0.75];
    let RGBColor(r, g, b) = PALETTE[run % PALETTE.len()];
    let f = FACTORS[shade % FACTORS.len()];
    let ch = |c: u8| {
        let c = c as f64;
        (if f <= 1.0 { c * f } else { c + (255.0 - c) * (f - 1.0) }).round().clamp(0.0, 255.0) as u8
    };
    RGBColor(ch(r), ch(g), ch(b))
}

/// Points in drawing space, staircased for step series.
fn drawn(c: &ChartData, style: Style, points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> =
        points.iter().filter_map(|&(x, y)| Some((fwd(c.x.scale, x)?, fwd(c.y.scale, y)?))).collect();
    if style != Style::Step {
        return pts;
    }
    let mut out = Vec::with_capacity(pts.len() * 2);
    for (i, p) in pts.iter().enumerate() {
        if i > 0 {
            out.push((p.0, pts[i - 1].1));
        }
        out.push(*p);
    }
    out
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &ChartData) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (w, h) = root.dim_in_pixel();

    // Legend entries below the plot, in as many columns as fit.
    let mut entries: Vec<(String, RGBColor, Option<Style>)> = Vec::new();
    for s in &c.series {
        entries.push((s.name.clone(), colour(c, s.run, s.shade), Some(s.style)));
    }
    for b in &c.bands {
        entries.push((b.name.clone(), colour(c, b.run, 0), None));
    }
    let col_w = 230u32;
    let cols = (w.saturating_sub(40) / col_w).max(1);
    let rows = (entries.len() as u32).div_ceil(cols);
    let legend_h = rows * 20 + if rows > 0 { 10 } else { 0 };
    let (plot, legend) = root.split_vertically(h.saturating_sub(legend_h).max(h / 2));

    let xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.bands.iter().flat_map(|b| b.points.iter().map(|p| p.0)))
        .chain(c.markers.iter().map(|m| m.x))
        .filter_map(|x| fwd(c.x.scale, x))
        .collect();
    let ys: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(c.bands.iter().flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])))
        .filter_map(|y| fwd(c.y.scale, y))
        .collect();
    let (x0, x1) = range(&c.x, &xs);
    let (y0, y1) = range(&c.y, &ys);

    let mut chart = ChartBuilder::on(&plot)
        .caption(&c.title, (FAMILY, 22))
        .margin(12)
        .margin_right(36)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    let xf = |v: &f64| tick(&c.x, *v);
    let yf = |v: &f64| tick(&c.y, *v);
    let log_labels = |scale: Scale, lo: f64, hi: f64| match scale {
        Scale::Linear => 8,
        _ => ((hi - lo).round() as usize + 1).clamp(2, 12),
    };
    chart
        .configure_mesh()
        .x_desc(c.x.label.as_str())
        .y_desc(c.y.label.as_str())
        .x_labels(log_labels(c.x.scale, x0, x1))
        .y_labels(log_labels(c.y.scale, y0, y1))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(e)?;

    for b in &c.bands {
        let col = colour(c, b.run, 0);
        let upper: Vec<(f64, f64)> =
            b.points.iter().filter_map(|&(x, _, hi)| Some((fwd(c.x.scale, x)?, fwd(c.y.scale, hi)?))).collect();
        let lower: Vec<(f64, f64)> =
            b.points.iter().filter_map(|&(x, lo, _)| Some((fwd(c.x.scale, x)?, fwd(c.y.scale, lo)?))).collect();
        if upper.len() < 2 || upper.len() != lower.len() {
            continue;
        }
        let mut poly = upper;
        poly.extend(lower.into_iter().rev());
        chart.draw_series(std::iter::once(Polygon::new(poly, col.mix(0.15).filled()))).map_err(e)?;
    }
    for s in &c.series {
        let col = colour(c, s.run, s.shade);
        let pts = drawn(c, s.style, &s.points);
        match s.style {
            Style::Dashed => {
                chart.draw_series(DashedLineSeries::new(pts, 6, 4, col.stroke_width(2))).map_err(e)?;
            }
            Style::Line | Style::Step => {
                chart.draw_series(LineSeries::new(pts, col.stroke_width(2))).map_err(e)?;
            }
        }
    }
    for m in &c.markers {
        let Some(x) = fwd(c.x.scale, m.x) else { continue };
        let col = colour(c, m.run, 0);
        chart.draw_series(DashedLineSeries::new(vec![(x, y0), (x, y1)], 4, 4, col.stroke_width(2))).map_err(e)?;
        let style = TextStyle::from((FAMILY, 14).into_font()).color(&col);
        chart.draw_series(std::iter::once(Text::new(m.label.clone(), (x, y1), style))).map_err(e)?;
    }
    if c.is_empty() {
        let style = TextStyle::from((FAMILY, 18).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
        let (pw, ph) = plot.dim_in_pixel();
        plot.draw(&Text::new("no data", (pw as i32 / 2, ph as i32 / 2), style)).map_err(e)?;
    }

    // The legend.
    let font = TextStyle::from((FAMILY, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, col, style)) in entries.iter().enumerate() {
        let (r, k) = (i as u32 / cols, i as u32 % cols);
        let x = 20 + (k * col_w) as i32;
        let y = 10 + (r * 20) as i32;
        match style {
            None => legend.draw(&Rectangle::new([(x, y - 5), (x + 24, y + 5)], col.mix(0.25).filled())).map_err(e)?,
            Some(Style::Dashed) => {
                legend.draw(&PathElement::new(vec![(x, y), (x + 9, y)], col.stroke_width(2))).map_err(e)?;
                legend.draw(&PathElement::new(vec![(x + 15, y), (x + 24, y)], col.stroke_width(2))).map_err(e)?;
            }
            Some(_) => legend.draw(&PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(2))).map_err(e)?,
        }
        let mut text = name.clone();
        if text.chars().count() > 30 {
            text = text.chars().take(29).collect::<String>() + "…";
        }
        legend.draw(&Text::new(text, (x + 30, y), font.clone())).map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}
