//! PNG line plots: one panel per series, stacked, each with its axis box,
//! its name and unit, the x and y ranges at the ends, and the curve drawn as
//! connected segments (and each point as a square where asked). What `lbm
//! run` plots: cd and cl over time, and each line probe's last profile;
//! `lbm sweep` each quantity against the first swept key.
//!
//! It draws; the data and file names are the caller's.

use super::picture::{Image, label};

const PANEL_WIDTH: usize = 640;
const PANEL_HEIGHT: usize = 180;
const LEFT: usize = 88;
const TOP: usize = 16;
const BOTTOM: usize = 14;
const CURVE: [u8; 3] = [31, 119, 180];
const AXIS: [u8; 3] = [0, 0, 0];

/// One panel: a title with its unit, and (x, y) points in order.
pub struct Series {
    pub title: String,
    pub points: Vec<[f64; 2]>,
    /// Each point drawn as a square too: where each is a run of its own (a
    /// sweep's member), and one alone still shows.
    pub markers: bool,
}

/// Half the side of a marker, pixels.
const MARKER: i64 = 3;

fn range(values: impl Iterator<Item = f64>) -> [f64; 2] {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    match (lo.is_finite(), hi > lo) {
        (true, true) => [lo, hi],
        (true, false) => [lo - 0.5 * lo.abs().max(1e-12), hi + 0.5 * hi.abs().max(1e-12)],
        _ => [0.0, 1.0],
    }
}

/// The panels stacked top to bottom, sharing the x axis named `x_title`.
pub fn render(series: &[Series], x_title: &str) -> Image {
    let height = series.len() * (PANEL_HEIGHT + TOP + BOTTOM) + 12;
    let mut image = Image::new(LEFT + PANEL_WIDTH + 16, height);
    let [x0, x1] = range(series.iter().flat_map(|s| s.points.iter().map(|p| p[0])));
    for (k, s) in series.iter().enumerate() {
        let top = k * (PANEL_HEIGHT + TOP + BOTTOM) + TOP;
        let [y0, y1] = range(s.points.iter().map(|p| p[1]));
        image.text(LEFT, top - 12, &s.title);
        for x in LEFT..LEFT + PANEL_WIDTH {
            image.set(x, top, AXIS);
            image.set(x, top + PANEL_HEIGHT, AXIS);
        }
        for y in top..=top + PANEL_HEIGHT {
            image.set(LEFT, y, AXIS);
            image.set(LEFT + PANEL_WIDTH - 1, y, AXIS);
        }
        image.text(2, top, &label(y1));
        image.text(2, top + PANEL_HEIGHT - 8, &label(y0));
        let to_px = |p: [f64; 2]| {
            let fx = (p[0] - x0) / (x1 - x0);
            let fy = (p[1] - y0) / (y1 - y0);
            (
                LEFT as f64 + fx * (PANEL_WIDTH - 1) as f64,
                (top + PANEL_HEIGHT) as f64 - fy * PANEL_HEIGHT as f64,
            )
        };
        if s.markers {
            for p in s.points.iter().filter(|p| p[1].is_finite()) {
                let (cx, cy) = to_px(*p);
                for dy in -MARKER..=MARKER {
                    for dx in -MARKER..=MARKER {
                        let (x, y) = (cx as i64 + dx, cy as i64 + dy);
                        if x >= 0 && y >= 0 {
                            image.set(x as usize, y as usize, CURVE);
                        }
                    }
                }
            }
        }
        for pair in s.points.windows(2) {
            if !(pair[0][1].is_finite() && pair[1][1].is_finite()) {
                continue;
            }
            let (a, b) = (to_px(pair[0]), to_px(pair[1]));
            let steps = (b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil().max(1.0) as usize;
            for i in 0..=steps {
                let t = i as f64 / steps as f64;
                image.set(
                    (a.0 + t * (b.0 - a.0)) as usize,
                    (a.1 + t * (b.1 - a.1)) as usize,
                    CURVE,
                );
            }
        }
    }
    let bottom = height - 10;
    image.text(LEFT, bottom, &label(x0));
    let right = label(x1);
    image.text(LEFT + PANEL_WIDTH - 8 * right.len(), bottom, &right);
    image.text(LEFT + PANEL_WIDTH / 2 - 4 * x_title.len(), bottom, x_title);
    image
}
