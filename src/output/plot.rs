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

/// Characters of the 8-pixel font a line across a panel holds.
const CHARS: usize = PANEL_WIDTH / 8;
/// Pixels a line of text takes.
const LINE: usize = 10;

/// `text` in lines of at most [`CHARS`], broken after a comma or space
/// where one is near, so that a long title is read whole.
fn wrap(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    let mut start = 0;
    while chars.len() - start > CHARS {
        let window = &chars[start..start + CHARS];
        let cut = window
            .iter()
            .rposition(|c| *c == ' ')
            .filter(|&at| at > CHARS / 2)
            .map_or(CHARS, |at| at + 1);
        lines.push(window[..cut].iter().collect::<String>().trim_end().to_owned());
        start += cut;
    }
    lines.push(chars[start..].iter().collect());
    lines
}

/// The panels stacked top to bottom, sharing the x axis named `x_title`.
pub fn render(series: &[Series], x_title: &str) -> Image {
    render_with(series, x_title, None)
}

/// [`render`], with the x axis's positions 0, 1, ... named by `categories`
/// (values that are not numbers) in place of its numeric ends.
pub fn render_with(series: &[Series], x_title: &str, categories: Option<&[String]>) -> Image {
    let titles: Vec<Vec<String>> = series.iter().map(|s| wrap(&s.title)).collect();
    // A title's lines above each panel: one line keeps the panel at TOP.
    let header = |k: usize| TOP + (titles[k].len() - 1) * LINE;
    let label_rows = if categories.is_some() { 2 } else { 0 };
    let height = (0..series.len())
        .map(|k| header(k) + PANEL_HEIGHT + BOTTOM)
        .sum::<usize>()
        + 12
        + label_rows * LINE;
    let mut image = Image::new(LEFT + PANEL_WIDTH + 16, height);
    let [x0, x1] = match categories {
        // Half a position's room at each end, so the first and last show.
        Some(names) => [-0.5, names.len() as f64 - 0.5],
        None => range(series.iter().flat_map(|s| s.points.iter().map(|p| p[0]))),
    };
    let mut top = 0;
    for (k, s) in series.iter().enumerate() {
        top += header(k);
        let [y0, y1] = range(s.points.iter().map(|p| p[1]));
        for (line, text) in titles[k].iter().enumerate() {
            image.text(LEFT, top - 12 - (titles[k].len() - 1 - line) * LINE, text);
        }
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
        top += PANEL_HEIGHT + BOTTOM;
    }
    let bottom = height - 10;
    match categories {
        Some(names) => {
            // Each name under its position, cut to the room between them,
            // on two rows that alternate so that neighbours do not touch.
            let room = PANEL_WIDTH / names.len().max(1);
            for (i, name) in names.iter().enumerate() {
                let fits: String = name.chars().take((2 * room / 8).saturating_sub(1).max(1)).collect();
                let centre = LEFT as f64 + (i as f64 + 0.5) * room as f64;
                let x = (centre - 4.0 * fits.chars().count() as f64).max(0.0) as usize;
                image.text(x, bottom - (2 - i % 2) * LINE, &fits);
            }
        }
        None => {
            image.text(LEFT, bottom, &label(x0));
            let right = label(x1);
            image.text(LEFT + PANEL_WIDTH - 8 * right.len(), bottom, &right);
        }
    }
    image.text(LEFT + PANEL_WIDTH / 2 - 4 * x_title.len(), bottom, x_title);
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long title wraps at spaces into lines a panel holds, every word
    /// kept; a short one stays one line.
    #[test]
    fn long_titles_wrap_whole() {
        let title = "body0_cd (boundaries.x_min.inlet.amplitude = { ramp = { duration = 0.2 } }, fluid.density = 1000.0, flow.collision = { model = \"bgk\" })";
        let lines = wrap(title);
        assert!(
            lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= CHARS),
            "{lines:?}"
        );
        assert_eq!(lines.join(" "), title);
        assert_eq!(wrap("body0_cd"), vec!["body0_cd"]);
        // A word longer than a line is cut, not lost.
        let long = "x".repeat(2 * CHARS + 3);
        assert_eq!(wrap(&long).concat(), long);
    }

    /// Categories take rows under the axis; the panels keep their size.
    #[test]
    fn categories_are_named_under_the_axis() {
        let series = [Series {
            title: "cd".into(),
            points: vec![[0.0, 1.0], [1.0, 2.0]],
            markers: true,
        }];
        let plain = render(&series, "key");
        let named = render_with(&series, "key", Some(&["\"a\"".to_owned(), "\"b\"".to_owned()]));
        assert_eq!(named.height, plain.height + 2 * LINE);
    }
}
