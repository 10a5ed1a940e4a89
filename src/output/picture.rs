//! PNG pictures of a scalar field over the whole domain: every level
//! composited at the finest resolution (each pixel takes the finest patch that
//! holds it), y up, a perceptual colour map (viridis for magnitudes, a
//! diverging map symmetric about zero for signed fields, spanning the 98th
//! percentile of |value| and marked `+` when larger values are clipped),
//! bodies in grey,
//! refined patches outlined, and a colour bar labelled with its range and unit.
//!
//! It draws and encodes (with the `png` crate); which fields are drawn and
//! where the files go is the caller's.

use font8x8::UnicodeFonts;

use super::fields::PatchFields;

/// A picture's field: its values per patch, its name and unit, and whether
/// its colour map is diverging (signed, symmetric about zero).
pub struct Scalar<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    pub values: Vec<Vec<f32>>,
    pub diverging: bool,
}

const BODY: [u8; 3] = [150, 150, 150];
const OUTLINE: [u8; 3] = [255, 255, 255];
const BACKGROUND: [u8; 3] = [255, 255, 255];
const INK: [u8; 3] = [0, 0, 0];
/// Pixels right of the field: the bar and its labels.
const BAR_MARGIN: usize = 16;
const BAR_WIDTH: usize = 20;
const LABEL_WIDTH: usize = 12 * 8;

/// An RGB image, row 0 at the top.
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

impl Image {
    pub(super) fn new(width: usize, height: usize) -> Image {
        Image {
            width,
            height,
            rgb: BACKGROUND.repeat(width * height),
        }
    }

    pub(super) fn set(&mut self, x: usize, y: usize, colour: [u8; 3]) {
        if x < self.width && y < self.height {
            let at = 3 * (y * self.width + x);
            self.rgb[at..at + 3].copy_from_slice(&colour);
        }
    }

    pub(super) fn text(&mut self, x: usize, y: usize, text: &str) {
        for (k, c) in text.chars().enumerate() {
            let glyph = font8x8::BASIC_FONTS.get(c).unwrap_or([0; 8]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 1 {
                        self.set(x + 8 * k + col, y + row, INK);
                    }
                }
            }
        }
    }

    /// The PNG bytes.
    pub fn png(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("an in-memory PNG header");
        writer.write_image_data(&self.rgb).expect("an in-memory PNG body");
        writer.finish().expect("an in-memory PNG end");
        out
    }
}

/// The colour of `t` in [0, 1] on the map.
fn colour(t: f64, diverging: bool) -> [u8; 3] {
    let c = match diverging {
        true => colorous::RED_BLUE.eval_continuous(1.0 - t.clamp(0.0, 1.0)),
        false => colorous::VIRIDIS.eval_continuous(t.clamp(0.0, 1.0)),
    };
    [c.r, c.g, c.b]
}

/// A short label for a bar end.
pub(super) fn label(v: f64) -> String {
    match v.abs() {
        a if a != 0.0 && !(1e-2..1e4).contains(&a) => format!("{v:.2e}"),
        _ => format!("{v:.3}"),
    }
}

/// The longest and shortest a default picture's longer side is, pixels (the
/// field part).
const PICTURE_LONGEST: f64 = 1600.0;
const PICTURE_SHORTEST: f64 = 512.0;
/// Pixels above the field: the title.
const HEADER: usize = 14;

/// The scale of the pictures of `domain` (m) whose finest cells are `finest`
/// m across: `width` pixels across the domain when given, else the finest
/// level's resolution, enlarged or reduced so that the domain's longer side
/// is PICTURE_SHORTEST to PICTURE_LONGEST pixels (a tall domain's picture
/// bounded by its width alone was tens of thousands of pixels tall).
pub fn pixels_per_metre(domain: [f64; 2], finest: f64, width: Option<u32>) -> f64 {
    let longer = domain[0].max(domain[1]);
    match width {
        Some(w) => w as f64 / domain[0],
        None => (1.0 / finest)
            .max(PICTURE_SHORTEST / longer)
            .min(PICTURE_LONGEST / longer),
    }
}

/// The field's pixels `[w, h]` of a picture of `domain` at `pixels_per_metre`.
fn field_pixels(domain: [f64; 2], pixels_per_metre: f64) -> [usize; 2] {
    domain.map(|d| (d * pixels_per_metre).round().max(1.0) as usize)
}

/// The pixels `[w, h]` of the image [`render`] draws, colour bar and title
/// included.
pub fn image_size(domain: [f64; 2], pixels_per_metre: f64) -> [usize; 2] {
    let [w, h] = field_pixels(domain, pixels_per_metre);
    [w + BAR_MARGIN + BAR_WIDTH + LABEL_WIDTH, h + HEADER]
}

/// Draws `scalar` over the domain at `pixels_per_metre`; see the module docs.
pub fn render(patches: &[PatchFields], scalar: &Scalar, domain: [f64; 2], pixels_per_metre: f64) -> Image {
    let [w, h] = field_pixels(domain, pixels_per_metre);
    // The range over visible fluid cells: those no finer patch covers.
    let visible = |p: &PatchFields, i: usize| {
        let [nx, _] = p.size;
        !p.solid[(i / nx, i % nx)] && !p.covered[(i / nx, i % nx)]
    };
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (p, values) in patches.iter().zip(&scalar.values) {
        for (i, v) in values.iter().enumerate() {
            if visible(p, i) && v.is_finite() {
                lo = lo.min(*v as f64);
                hi = hi.max(*v as f64);
            }
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let mut clipped = false;
    if scalar.diverging {
        // Signed fields peak at corners and edges (a lid's corners, a body's
        // shoulders); the bar spans the 98th percentile of |value| so the
        // flow between them stays visible, and says so.
        let mut magnitudes: Vec<f64> = patches
            .iter()
            .zip(&scalar.values)
            .flat_map(|(p, values)| {
                values
                    .iter()
                    .enumerate()
                    .filter(move |(i, _)| visible(p, *i))
                    .map(|(_, v)| v.abs() as f64)
            })
            .filter(|v| v.is_finite())
            .collect();
        magnitudes.sort_by(f64::total_cmp);
        let m = magnitudes
            .get(magnitudes.len() * 98 / 100)
            .copied()
            .unwrap_or(1.0)
            .max(f64::MIN_POSITIVE);
        clipped = m < lo.abs().max(hi.abs());
        (lo, hi) = (-m, m);
    }
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let header = HEADER;
    let [width, height] = image_size(domain, pixels_per_metre);
    let mut image = Image::new(width, height);
    image.text(2, 3, &format!("{} [{}]", scalar.title, scalar.unit));
    for py in 0..h {
        // Row 0 of the picture is the top of the domain: y up.
        let y = (h - 1 - py) as f64 + 0.5;
        for px in 0..w {
            let point = [(px as f64 + 0.5) / pixels_per_metre, y / pixels_per_metre];
            let Some((k, p)) = patches.iter().enumerate().rev().find(|(_, p)| p.contains(point)) else {
                continue;
            };
            let [nx, ny] = p.size;
            let cx = (((point[0] - p.origin[0]) / p.spacing) as usize).min(nx - 1);
            let cy = (((point[1] - p.origin[1]) / p.spacing) as usize).min(ny - 1);
            let c = match p.solid[(cy, cx)] {
                true => BODY,
                false => colour((scalar.values[k][cy * nx + cx] as f64 - lo) / span, scalar.diverging),
            };
            image.set(px, py + header, c);
        }
    }
    for p in patches.iter().filter(|p| p.level > 0) {
        let to_px = |m: f64| (m * pixels_per_metre).round() as isize;
        let [x0, y0] = p.origin.map(to_px);
        let [x1, y1] = [0, 1].map(|k| to_px(p.origin[k] + p.size[k] as f64 * p.spacing));
        let row = |y: isize| (h as isize - y).clamp(0, h as isize - 1) as usize + header;
        for x in x0..x1 {
            image.set(x.clamp(0, w as isize - 1) as usize, row(y0), OUTLINE);
            image.set(x.clamp(0, w as isize - 1) as usize, row(y1), OUTLINE);
        }
        for y in y0..y1 {
            image.set(x0.clamp(0, w as isize - 1) as usize, row(y), OUTLINE);
            image.set((x1 - 1).clamp(0, w as isize - 1) as usize, row(y), OUTLINE);
        }
    }
    let bar_x = w + BAR_MARGIN;
    for py in 0..h {
        let c = colour(1.0 - py as f64 / (h.max(2) - 1) as f64, scalar.diverging);
        for x in bar_x..bar_x + BAR_WIDTH {
            image.set(x, py + header, c);
        }
    }
    let label_x = bar_x + BAR_WIDTH + 4;
    let beyond = if clipped { "+" } else { "" };
    image.text(label_x, header, &format!("{}{beyond}", label(hi)));
    image.text(label_x, header + h.saturating_sub(8), &format!("{}{beyond}", label(lo)));
    if scalar.diverging && h > 24 {
        image.text(label_x, header + h / 2 - 4, "0");
    }
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the domain's shape and the finest cells, a default picture's
    /// longer side is 512 to 1600 pixels, at the finest resolution where that
    /// fits; `--picture-width` sets the width.
    #[test]
    fn a_default_picture_keeps_the_domains_longer_side_within_bounds() {
        for domain in [[1.0, 1.0], [2.2, 0.41], [0.25, 8.0], [100.0, 1.0], [0.01, 0.002]] {
            for finest in [1e-1, 1e-3, 1e-5] {
                let [w, h] = field_pixels(domain, pixels_per_metre(domain, finest, None));
                let longer = w.max(h) as f64;
                assert!(
                    (PICTURE_SHORTEST..=PICTURE_LONGEST).contains(&longer),
                    "domain {domain:?}, cells of {finest} m: {w} x {h} pixels"
                );
                let native = domain[0].max(domain[1]) / finest;
                if (PICTURE_SHORTEST..=PICTURE_LONGEST).contains(&native) {
                    assert_eq!(longer, native.round(), "domain {domain:?}: one pixel a finest cell");
                }
            }
            assert_eq!(field_pixels(domain, pixels_per_metre(domain, 1e-3, Some(700)))[0], 700);
        }
    }
}
