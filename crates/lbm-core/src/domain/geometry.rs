//! Bodies and their footprint on a patch: which cells are solid, the wall
//! distance of every fluid-to-solid link (for interpolated bounce-back), and
//! the momentum-exchange link table.
//!
//! Shapes are given in base-level lattice units (one base cell = 1), so one body
//! description serves every level. This module builds host tables only; the
//! stepper uploads them.

use serde::{Deserialize, Serialize};

use crate::domain::hierarchy::Patch;
use crate::kernels::lbm::wall_distance_table;
use crate::lattice::{C, OPP};

/// Cell flag values (one byte per cell) shared with `kernels/common.cuh`.
pub const FLAG_FLUID: u8 = 0;
pub const FLAG_SOLID: u8 = 1;

/// Words per body link in the link table: the fluid cell's storage index; the
/// direction pointing into the body plus 16 x the body's accumulator slot; the
/// lever arm (x, y) from the body centre to the link's wall point as f32 bits;
/// the wall distance q as f32 bits; and the storage index of the fluid cell
/// behind (`cell - c_dir`), or [`NO_CELL`] when that is not fluid.
pub const LINK_WORDS: usize = 6;
/// The link table's value for "no fluid cell behind".
pub const NO_CELL: u32 = u32::MAX;

/// Cells of its level a body keeps from every side of the domain it does not
/// touch (it may touch or cross a resting wall or a free-slip side) and from
/// every other body.
/// Interpolated bounce-back reads a second fluid cell behind each link, and a
/// gap narrower than this is a channel the lattice hardly resolves; a body
/// nearer a periodic side would also need the rasteriser to wrap, which it
/// does not.
pub const BODY_CLEARANCE: f64 = 4.0;

/// A rigid, stationary body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "lowercase", deny_unknown_fields)]
pub enum Shape {
    Circle {
        center: [f64; 2],
        radius: f64,
    },
    /// Axis-aligned rectangle between two corners.
    Rectangle {
        min: [f64; 2],
        max: [f64; 2],
    },
    /// Simple polygon, vertices in order (either orientation).
    Polygon {
        points: Vec<[f64; 2]>,
    },
}

impl Shape {
    pub fn contains(&self, p: [f64; 2]) -> bool {
        match self {
            Shape::Circle { center, radius } => {
                let (dx, dy) = (p[0] - center[0], p[1] - center[1]);
                dx * dx + dy * dy <= radius * radius
            }
            Shape::Rectangle { min, max } => p[0] >= min[0] && p[0] <= max[0] && p[1] >= min[1] && p[1] <= max[1],
            Shape::Polygon { points } => {
                // A point on the outline is inside, as for a rectangle or a
                // circle: with the even-odd rule alone a cell centre on an
                // edge went in on the left and bottom edges and out on the
                // right and top, so a square turned by 0 or 90 degrees lost
                // one row of cells on one side and took a spurious lift.
                let scale = p[0].abs().max(p[1].abs()).max(1.0);
                if edges(points).any(|(a, b)| point_to_segment(p, a, b) <= ON_OUTLINE * scale) {
                    return true;
                }
                // Even-odd rule by a ray towards +x.
                let mut inside = false;
                for (a, b) in edges(points) {
                    if (a[1] > p[1]) != (b[1] > p[1]) {
                        let x = a[0] + (p[1] - a[1]) / (b[1] - a[1]) * (b[0] - a[0]);
                        if p[0] < x {
                            inside = !inside;
                        }
                    }
                }
                inside
            }
        }
    }

    /// The reference point for torques: the centre of a circle or rectangle,
    /// the area centroid of a polygon.
    pub fn center(&self) -> [f64; 2] {
        match self {
            Shape::Circle { center, .. } => *center,
            Shape::Rectangle { min, max } => [0.5 * (min[0] + max[0]), 0.5 * (min[1] + max[1])],
            Shape::Polygon { points } => {
                let (mut area, mut cx, mut cy) = (0.0, 0.0, 0.0);
                for (a, b) in edges(points) {
                    let cross = a[0] * b[1] - b[0] * a[1];
                    area += cross;
                    cx += (a[0] + b[0]) * cross;
                    cy += (a[1] + b[1]) * cross;
                }
                [cx / (3.0 * area), cy / (3.0 * area)]
            }
        }
    }

    /// `[x0, y0, x1, y1]` enclosing the shape.
    pub fn bounds(&self) -> [f64; 4] {
        match self {
            Shape::Circle { center, radius } => [
                center[0] - radius,
                center[1] - radius,
                center[0] + radius,
                center[1] + radius,
            ],
            Shape::Rectangle { min, max } => [min[0], min[1], max[0], max[1]],
            Shape::Polygon { points } => points.iter().fold(
                [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY],
                |b, p| [b[0].min(p[0]), b[1].min(p[1]), b[2].max(p[0]), b[3].max(p[1])],
            ),
        }
    }

    /// The same shape with every length multiplied by `scale`.
    pub fn scaled(&self, scale: f64) -> Shape {
        let s = |p: &[f64; 2]| [p[0] * scale, p[1] * scale];
        match self {
            Shape::Circle { center, radius } => Shape::Circle {
                center: s(center),
                radius: radius * scale,
            },
            Shape::Rectangle { min, max } => Shape::Rectangle {
                min: s(min),
                max: s(max),
            },
            Shape::Polygon { points } => Shape::Polygon {
                points: points.iter().map(s).collect(),
            },
        }
    }

    /// The fraction `t` in `[0, 1]` of the segment `from -> from + step` at which
    /// it first meets the boundary, if it does.
    pub fn crossing(&self, from: [f64; 2], step: [f64; 2]) -> Option<f64> {
        let hits = |t: f64| (-1e-12..=1.0 + 1e-12).contains(&t);
        match self {
            Shape::Circle { center, radius } => {
                let (ox, oy) = (from[0] - center[0], from[1] - center[1]);
                let a = step[0] * step[0] + step[1] * step[1];
                let b = 2.0 * (ox * step[0] + oy * step[1]);
                let c = ox * ox + oy * oy - radius * radius;
                let disc = b * b - 4.0 * a * c;
                if disc < 0.0 {
                    return None;
                }
                let root = disc.sqrt();
                [(-b - root) / (2.0 * a), (-b + root) / (2.0 * a)]
                    .into_iter()
                    .filter(|t| hits(*t))
                    .reduce(f64::min)
                    .map(|t| t.clamp(0.0, 1.0))
            }
            Shape::Rectangle { min, max } => {
                let corners = vec![*min, [max[0], min[1]], *max, [min[0], max[1]]];
                Shape::Polygon { points: corners }.crossing(from, step)
            }
            Shape::Polygon { points } => edges(points)
                .filter_map(|(a, b)| {
                    let e = [b[0] - a[0], b[1] - a[1]];
                    let denom = step[0] * e[1] - step[1] * e[0];
                    if denom.abs() < 1e-15 {
                        return None;
                    }
                    let w = [a[0] - from[0], a[1] - from[1]];
                    let t = (w[0] * e[1] - w[1] * e[0]) / denom;
                    let u = (w[0] * step[1] - w[1] * step[0]) / denom;
                    // An end of the edge within round-off counts: a link
                    // to a cell centred on a corner met neither edge once
                    // the corner was turned by a right angle (q fell back to
                    // 1/2 there, and the turned square took a lift).
                    let on_edge = (-ON_EDGE..=1.0 + ON_EDGE).contains(&u);
                    (hits(t) && on_edge).then_some(t.clamp(0.0, 1.0))
                })
                .reduce(f64::min),
        }
    }
}

impl Shape {
    /// The shortest distance between the two shapes, 0 where they touch or
    /// overlap.
    pub fn distance(&self, other: &Shape) -> f64 {
        match (self, other) {
            (Shape::Circle { center: a, radius: ra }, Shape::Circle { center: b, radius: rb }) => {
                (length(sub(*a, *b)) - ra - rb).max(0.0)
            }
            (Shape::Circle { center, radius }, shape) | (shape, Shape::Circle { center, radius }) => {
                (shape.distance_to(*center) - radius).max(0.0)
            }
            (a, b) => {
                let (a, b) = (a.outline(), b.outline());
                let inside = |points: &[[f64; 2]], of: &[[f64; 2]]| {
                    let polygon = Shape::Polygon { points: of.to_vec() };
                    points.iter().any(|p| polygon.contains(*p))
                };
                if inside(&a, &b) || inside(&b, &a) {
                    return 0.0;
                }
                edges(&a)
                    .flat_map(|e| edges(&b).map(move |f| segments_apart(e, f)))
                    .fold(f64::INFINITY, f64::min)
            }
        }
    }

    /// The distance from `p` to the shape, 0 inside it.
    fn distance_to(&self, p: [f64; 2]) -> f64 {
        match self {
            Shape::Circle { center, radius } => (length(sub(p, *center)) - radius).max(0.0),
            _ if self.contains(p) => 0.0,
            _ => edges(&self.outline())
                .map(|(a, b)| point_to_segment(p, a, b))
                .fold(f64::INFINITY, f64::min),
        }
    }

    /// The length of the outline.
    pub fn perimeter(&self) -> f64 {
        match self {
            Shape::Circle { radius, .. } => 2.0 * std::f64::consts::PI * radius,
            _ => edges(&self.outline()).map(|(a, b)| length(sub(b, a))).sum(),
        }
    }

    /// The bounds `[x0, y0, x1, y1]` of the shape's part inside the box
    /// `[x0, y0, x1, y1]` (its edges included), `None` where none is: what
    /// of a body that crosses a side of the domain lies in the domain, so
    /// that a large circle centred below a floor, a bump, is not taken for
    /// one that reaches the sides its whole circle passes.
    pub fn bounds_within(&self, [bx0, by0, bx1, by1]: [f64; 4]) -> Option<[f64; 4]> {
        let inside = |p: [f64; 2]| p[0] >= bx0 && p[0] <= bx1 && p[1] >= by0 && p[1] <= by1;
        let corners = [[bx0, by0], [bx1, by0], [bx1, by1], [bx0, by1]];
        let mut points: Vec<[f64; 2]> = Vec::new();
        match self {
            Shape::Circle { center, radius } => {
                let [cx, cy] = *center;
                points.extend(
                    [
                        [cx - radius, cy],
                        [cx + radius, cy],
                        [cx, cy - radius],
                        [cx, cy + radius],
                    ]
                    .into_iter()
                    .filter(|p| inside(*p)),
                );
                // Where the circle meets each side of the box.
                for (axis, at) in [(0, bx0), (0, bx1), (1, by0), (1, by1)] {
                    let off = at - center[axis];
                    let half = (radius * radius - off * off).sqrt();
                    if half.is_nan() {
                        continue;
                    }
                    for along in [center[1 - axis] - half, center[1 - axis] + half] {
                        let p = if axis == 0 { [at, along] } else { [along, at] };
                        if inside(p) {
                            points.push(p);
                        }
                    }
                }
            }
            _ => {
                // The outline clipped to the box, side by side
                // (Sutherland-Hodgman; a convex box clips any polygon).
                let mut poly = self.outline();
                for (axis, at, keep_below) in [(0, bx0, false), (0, bx1, true), (1, by0, false), (1, by1, true)] {
                    let kept = |p: &[f64; 2]| if keep_below { p[axis] <= at } else { p[axis] >= at };
                    let mut clipped = Vec::new();
                    for (a, b) in edges(&poly) {
                        if kept(&a) {
                            clipped.push(a);
                        }
                        if kept(&a) != kept(&b) {
                            let t = (at - a[axis]) / (b[axis] - a[axis]);
                            clipped.push([a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])]);
                        }
                    }
                    poly = clipped;
                }
                points = poly;
            }
        }
        points.extend(corners.into_iter().filter(|c| self.contains(*c)));
        points.iter().fold(None, |acc: Option<[f64; 4]>, p| {
            let [x0, y0, x1, y1] = acc.unwrap_or([p[0], p[1], p[0], p[1]]);
            Some([x0.min(p[0]), y0.min(p[1]), x1.max(p[0]), y1.max(p[1])])
        })
    }

    /// The length of the outline within the box `[x0, y0, x1, y1]`, or more:
    /// exact for a polygon or rectangle (each edge clipped to the box, an
    /// edge along one of the box's sides left out), and for a circle at most
    /// the perimeter of the box its part inside spans (a convex shape's
    /// outline is no longer than a box around it). A body that crosses or
    /// touches a side of the domain has links only where its outline is in
    /// the domain, and none along the side.
    pub fn outline_within(&self, [x0, y0, x1, y1]: [f64; 4]) -> f64 {
        match self {
            Shape::Circle { center, radius } => {
                let w = ((center[0] + radius).min(x1) - (center[0] - radius).max(x0)).max(0.0);
                let h = ((center[1] + radius).min(y1) - (center[1] - radius).max(y0)).max(0.0);
                match w > 0.0 && h > 0.0 {
                    true => (2.0 * std::f64::consts::PI * radius).min(2.0 * (w + h)),
                    false => 0.0,
                }
            }
            _ => edges(&self.outline())
                .map(|(a, b)| {
                    let along = |k: usize, at: f64| (a[k] - at).abs() < 1e-9 && (b[k] - at).abs() < 1e-9;
                    if along(0, x0) || along(0, x1) || along(1, y0) || along(1, y1) {
                        return 0.0;
                    }
                    // Liang-Barsky: the part of a + t (b - a), t in [0, 1], in the box.
                    let d = sub(b, a);
                    let (mut lo, mut hi) = (0.0f64, 1.0f64);
                    for (p, q) in [
                        (-d[0], a[0] - x0),
                        (d[0], x1 - a[0]),
                        (-d[1], a[1] - y0),
                        (d[1], y1 - a[1]),
                    ] {
                        if p == 0.0 {
                            if q < 0.0 {
                                return 0.0;
                            }
                        } else if p < 0.0 {
                            lo = lo.max(q / p);
                        } else {
                            hi = hi.min(q / p);
                        }
                    }
                    (hi - lo).max(0.0) * length(d)
                })
                .sum(),
        }
    }

    /// The outline's edges along an axis, or within `across` of one over
    /// their length: (0, x at one end, x at the other, the y they span) for
    /// an edge along y, (1, y, y, the x spanned) for one along x (a circle
    /// has none).
    pub fn axis_edges(&self, across: f64) -> Vec<(usize, f64, f64, [f64; 2])> {
        edges(&self.outline())
            .filter_map(|(a, b)| {
                let (dx, dy) = ((a[0] - b[0]).abs(), (a[1] - b[1]).abs());
                let span = |k: usize| [a[k].min(b[k]), a[k].max(b[k])];
                match (dx <= across && dy > dx, dy <= across && dx > dy) {
                    (true, _) => Some((0, a[0], b[0], span(1))),
                    (_, true) => Some((1, a[1], b[1], span(0))),
                    _ => None,
                }
            })
            .collect()
    }

    /// The corners of a rectangle or polygon, in order (none for a circle).
    fn outline(&self) -> Vec<[f64; 2]> {
        match self {
            Shape::Circle { .. } => Vec::new(),
            Shape::Rectangle { min, max } => vec![*min, [max[0], min[1]], *max, [min[0], max[1]]],
            Shape::Polygon { points } => points.clone(),
        }
    }
}

/// How near a point must lie to an outline, relative to its coordinates
/// (base cells), to count as on it: round-off of a turn by a right angle.
const ON_OUTLINE: f64 = 1e-12;

/// How far past an end of an edge, as a fraction of the edge, a link still
/// meets it.
const ON_EDGE: f64 = 1e-9;

fn sub(a: [f64; 2], b: [f64; 2]) -> [f64; 2] {
    [a[0] - b[0], a[1] - b[1]]
}

fn length(v: [f64; 2]) -> f64 {
    v[0].hypot(v[1])
}

fn cross(a: [f64; 2], b: [f64; 2]) -> f64 {
    a[0] * b[1] - a[1] * b[0]
}

fn point_to_segment(p: [f64; 2], a: [f64; 2], b: [f64; 2]) -> f64 {
    let (ab, ap) = (sub(b, a), sub(p, a));
    let t = ((ap[0] * ab[0] + ap[1] * ab[1]) / (ab[0] * ab[0] + ab[1] * ab[1]).max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
    length(sub(ap, [t * ab[0], t * ab[1]]))
}

/// The distance between two segments, 0 where they cross.
fn segments_apart((p, q): ([f64; 2], [f64; 2]), (r, s): ([f64; 2], [f64; 2])) -> f64 {
    let side = |a: [f64; 2], b: [f64; 2], c: [f64; 2]| cross(sub(b, a), sub(c, a));
    if side(r, s, p) * side(r, s, q) < 0.0 && side(p, q, r) * side(p, q, s) < 0.0 {
        return 0.0;
    }
    [
        point_to_segment(p, r, s),
        point_to_segment(q, r, s),
        point_to_segment(r, p, q),
        point_to_segment(s, p, q),
    ]
    .into_iter()
    .fold(f64::INFINITY, f64::min)
}

fn edges(points: &[[f64; 2]]) -> impl Iterator<Item = ([f64; 2], [f64; 2])> + '_ {
    points.iter().zip(points.iter().cycle().skip(1)).map(|(a, b)| (*a, *b))
}

/// A body and the level whose patches resolve it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Body {
    pub shape: Shape,
    pub level: usize,
}

/// Base-lattice coordinates of the centre of allocation cell (x, y) of `patch`.
pub fn cell_center(patch: &Patch, x: u32, y: u32) -> [f64; 2] {
    let scale = 0.5f64.powi(patch.level as i32);
    [
        (patch.origin[0] as f64 + x as f64 + 0.5) * scale,
        (patch.origin[1] as f64 + y as f64 + 0.5) * scale,
    ]
}

/// Solid flags of `patch` (storage order) with the index of the body owning each
/// solid cell. Cells beyond the domain (a patch's ghost band past a side it
/// touches) stay fluid where a body crosses a wall: the wall's rule, not the
/// body's, governs the links that cross it, and a solid cell there would
/// give the body links into the wall.
pub fn rasterize(patch: &Patch, bodies: &[(usize, &Shape)]) -> (Vec<u8>, Vec<Option<usize>>) {
    let layout = patch.layout;
    let a = patch.active;
    let outside = |x: u32, y: u32| {
        let past = [x < a.x0, x >= a.x1, y < a.y0, y >= a.y1];
        (0..4).any(|s| past[s] && patch.on_boundary[s])
    };
    let mut flags = vec![FLAG_FLUID; layout.plane_cells()];
    let mut owner = vec![None; layout.plane_cells()];
    for y in 0..layout.ny {
        for x in 0..layout.nx {
            if outside(x, y) {
                continue;
            }
            let p = cell_center(patch, x, y);
            if let Some((b, _)) = bodies.iter().find(|(_, s)| s.contains(p)) {
                let index = layout.index(x, y);
                flags[index] = FLAG_SOLID;
                owner[index] = Some(*b);
            }
        }
    }
    (flags, owner)
}

/// What a patch's bodies give its kernels.
pub struct WallTables {
    /// The momentum-exchange links, `LINK_WORDS` words each.
    pub links: Vec<u32>,
    /// The wall-distance table of `stream_collide`
    /// ([`crate::kernels::lbm::WallDistances`]).
    pub wall_distance: Vec<u32>,
    /// The cells that table lists: the fluid cells with a link.
    pub wall_cells: usize,
}

/// Links and wall distances of the fluid cells of the active region that have
/// a solid neighbour. The wall distance q of a link is the fraction of it, from
/// the fluid cell, that lies in fluid; where the segment misses the shape (a
/// grazing link) q falls back to 1/2, i.e. half-way bounce-back. `slot` maps a
/// body index to its slot in the level's accumulator.
///
/// Across a `mirror` side of the patch (a free-slip side of the domain) the
/// flow beyond is the mirror image of the flow inside, bodies included: a
/// link that leaves through it towards the mirror image of a solid cell
/// gets that image's wall distance (the free-slip rule pulls from the
/// mirrored cell, and a solid one returns through the body's rule) and a
/// momentum-exchange entry: the force is that of the fluid in the domain on
/// the body and its image, half the drag of the whole body the two make.
pub fn wall_tables(
    patch: &Patch,
    owner: &[Option<usize>],
    bodies: &[(usize, &Shape)],
    mirror: [bool; 4],
    slot: impl Fn(usize) -> u32,
) -> WallTables {
    let layout = patch.layout;
    let scale = 2f64.powi(patch.level as i32);
    let a = patch.active;
    let mut links = Vec::new();
    let mut distances = Vec::new();
    let fluid_at = |x: i64, y: i64| {
        let inside = x >= a.x0 as i64 && y >= a.y0 as i64 && x < a.x1 as i64 && y < a.y1 as i64;
        (inside && owner[layout.index(x as u32, y as u32)].is_none()).then(|| layout.index(x as u32, y as u32))
    };
    for y in a.y0..a.y1 {
        for x in a.x0..a.x1 {
            let index = layout.index(x, y);
            if owner[index].is_some() {
                continue;
            }
            for (d, c) in C.iter().enumerate().skip(1) {
                let (nx, ny) = (x as i64 + c[0] as i64, y as i64 + c[1] as i64);
                let across = [
                    nx < a.x0 as i64 && mirror[0],
                    nx >= a.x1 as i64 && mirror[1],
                    ny < a.y0 as i64 && mirror[2],
                    ny >= a.y1 as i64 && mirror[3],
                ];
                if across.iter().any(|m| *m) {
                    if let Some((body, shape, q)) = mirrored_distance(patch, owner, bodies, across, x, y, d) {
                        push_link(&mut links, patch, shape, x, y, d, q, slot(body), &fluid_at);
                        distances.push((index as u32, OPP[d], q as f32));
                    }
                    continue;
                }
                if nx < 0 || ny < 0 || nx >= layout.nx as i64 || ny >= layout.ny as i64 {
                    continue;
                }
                let Some(body) = owner[layout.index(nx as u32, ny as u32)] else {
                    continue;
                };
                let shape = bodies
                    .iter()
                    .find(|(b, _)| *b == body)
                    .expect("owner is a listed body")
                    .1;
                let p = cell_center(patch, x, y);
                // The link in base units: one level cell along c_d.
                let step = [c[0] as f64 / scale, c[1] as f64 / scale];
                let q = shape.crossing(p, step).unwrap_or(0.5).max(1e-3);
                push_link(&mut links, patch, shape, x, y, d, q, slot(body), &fluid_at);
                distances.push((index as u32, OPP[d], q as f32));
            }
        }
    }
    debug_assert_eq!(links.len() % LINK_WORDS, 0);
    let (wall_distance, wall_cells) = wall_distance_table(distances);
    WallTables {
        links,
        wall_distance,
        wall_cells,
    }
}

/// Appends the momentum-exchange entry of the link from fluid cell (x, y)
/// of `patch` along `d` into `shape` at wall distance `q`.
#[allow(clippy::too_many_arguments)]
fn push_link(
    links: &mut Vec<u32>,
    patch: &Patch,
    shape: &Shape,
    x: u32,
    y: u32,
    d: usize,
    q: f64,
    slot: u32,
    fluid_at: &impl Fn(i64, i64) -> Option<usize>,
) {
    let (c, scale) = (C[d], 2f64.powi(patch.level as i32));
    let p = cell_center(patch, x, y);
    let center = shape.center();
    let rx = ((p[0] - center[0]) * scale + q * c[0] as f64) as f32;
    let ry = ((p[1] - center[1]) * scale + q * c[1] as f64) as f32;
    let behind = fluid_at(x as i64 - c[0] as i64, y as i64 - c[1] as i64).map_or(NO_CELL, |b| b as u32);
    links.extend([
        patch.layout.index(x, y) as u32,
        d as u32 | (slot << 4),
        rx.to_bits(),
        ry.to_bits(),
        (q as f32).to_bits(),
        behind,
    ]);
}

/// The body, its shape and the wall distance of the link from fluid cell (x, y) of `patch` along
/// `d` that leaves the active region across its mirror sides `across`,
/// where the mirror image of the cell it reaches is solid; `None` where that
/// image is fluid. The link runs to the mirror line and on into the image
/// of the domain, so q is where it first meets a body on this side of the
/// line, or the image of a body beyond it: along the mirrored link, which
/// runs from beyond the line back into the domain, the first point inside
/// the domain that lies in a body (the line itself where a body stands on
/// it). A body's part beyond the line, where it crosses a mirror side, is
/// not the image of its part inside and is left out.
fn mirrored_distance<'s>(
    patch: &Patch,
    owner: &[Option<usize>],
    bodies: &[(usize, &'s Shape)],
    across: [bool; 4],
    x: u32,
    y: u32,
    d: usize,
) -> Option<(usize, &'s Shape, f64)> {
    let (a, layout, c) = (patch.active, patch.layout, C[d]);
    let flip = [across[0] || across[1], across[2] || across[3]];
    // The image of the cell reached: back across each line crossed, which
    // puts it in the cell's own column (row), and the cell itself at a
    // corner, which is fluid.
    let mx = if flip[0] { x as i64 } else { x as i64 + c[0] as i64 };
    let my = if flip[1] { y as i64 } else { y as i64 + c[1] as i64 };
    // Across another kind of side too (a wall at the corner): that side's
    // rule takes the link.
    if mx < a.x0 as i64 || my < a.y0 as i64 || mx >= a.x1 as i64 || my >= a.y1 as i64 {
        return None;
    }
    let body = owner[layout.index(mx as u32, my as u32)]?;
    let shape = bodies
        .iter()
        .find(|(b, _)| *b == body)
        .expect("owner is a listed body")
        .1;
    let scale = 2f64.powi(patch.level as i32);
    let p = cell_center(patch, x, y);
    let step = [c[0] as f64 / scale, c[1] as f64 / scale];
    // The mirror lines, in base units.
    let lines = [
        (patch.origin[0] + a.x0 as i64) as f64 / scale,
        (patch.origin[0] + a.x1 as i64) as f64 / scale,
        (patch.origin[1] + a.y0 as i64) as f64 / scale,
        (patch.origin[1] + a.y1 as i64) as f64 / scale,
    ];
    let line = |axis: usize| lines[2 * axis + usize::from(across[2 * axis + 1])];
    // Where the link meets the first line it crosses.
    let t_line = (0..2)
        .filter(|axis| flip[*axis])
        .map(|axis| (line(axis) - p[axis]) / step[axis])
        .fold(f64::INFINITY, f64::min);
    let inside = shape
        .crossing(p, [step[0] * t_line, step[1] * t_line])
        .map(|t| t * t_line);
    let mirrored = |v: [f64; 2], through: bool| -> [f64; 2] {
        std::array::from_fn(|k| match flip[k] {
            true if through => 2.0 * line(k) - v[k],
            true => -v[k],
            false => v[k],
        })
    };
    let at = mirrored([p[0] + step[0] * t_line, p[1] + step[1] * t_line], true);
    let rest = mirrored([step[0] * (1.0 - t_line), step[1] * (1.0 - t_line)], false);
    let beyond = match shape.contains(at) {
        true => Some(t_line),
        false => shape.crossing(at, rest).map(|t| t_line + t * (1.0 - t_line)),
    };
    Some((body, shape, inside.or(beyond).unwrap_or(0.5).max(1e-3)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_land_on_the_boundary() {
        let circle = Shape::Circle {
            center: [0.0, 0.0],
            radius: 1.0,
        };
        assert!((circle.crossing([-2.0, 0.0], [2.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(circle.crossing([-3.0, 0.0], [1.0, 0.0]), None);
        let square = Shape::Rectangle {
            min: [0.0, 0.0],
            max: [1.0, 1.0],
        };
        assert!((square.crossing([-0.25, 0.5], [1.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        let triangle = Shape::Polygon {
            points: vec![[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]],
        };
        assert!(triangle.contains([0.5, 0.5]) && !triangle.contains([1.5, 1.5]));
        assert!((triangle.crossing([1.5, 1.5], [-1.0, -1.0]).unwrap() - 0.5).abs() < 1e-12);
        let c = triangle.center();
        assert!((c[0] - 2.0 / 3.0).abs() < 1e-12 && (c[1] - 2.0 / 3.0).abs() < 1e-12);
    }

    /// A point on a polygon's outline is inside, on every edge, as on a
    /// rectangle's: a square whose edges lie on cell centres keeps the same
    /// cells turned by 0, 90 or 180 degrees (the even-odd rule alone put the
    /// left and bottom edges' centres in and the right and top ones out).
    #[test]
    fn a_polygon_holds_its_outline_as_a_rectangle_does() {
        let rectangle = Shape::Rectangle {
            min: [2.5, 3.5],
            max: [6.5, 7.5],
        };
        // Turned as a case file's `rotation` turns it, about its centre.
        let turned = |degrees: f64| {
            crate::case::BodyTable {
                rotation: Some(degrees),
                ..crate::case::BodyTable::from(rectangle.clone())
            }
            .placed(0)
            .unwrap()
        };
        let cells = |shape: &Shape| -> Vec<(u32, u32)> {
            (0..10)
                .flat_map(|y| (0..10).map(move |x| (x, y)))
                .filter(|&(x, y)| shape.contains([x as f64 + 0.5, y as f64 + 0.5]))
                .collect()
        };
        let want = cells(&rectangle);
        assert_eq!(want.len(), 25, "5 x 5 centres, the edges' included");
        for degrees in [0.0, 90.0, 180.0, 270.0] {
            assert_eq!(cells(&turned(degrees)), want, "turned by {degrees}");
        }
        assert!(turned(0.0).contains([2.5, 5.0]) && !turned(0.0).contains([2.4999, 5.0]));
        assert_eq!(
            rectangle.axis_edges(0.0),
            [
                (1, 3.5, 3.5, [2.5, 6.5]),
                (0, 6.5, 6.5, [3.5, 7.5]),
                (1, 7.5, 7.5, [2.5, 6.5]),
                (0, 2.5, 2.5, [3.5, 7.5])
            ]
        );
        let round = |v: f64| (v * 1e9).round() / 1e9;
        let edges: Vec<_> = turned(90.0)
            .axis_edges(1e-9)
            .into_iter()
            .map(|(axis, a, b, _)| (axis, round(a), round(b)))
            .collect();
        assert_eq!(edges, [(0, 6.5, 6.5), (1, 7.5, 7.5), (0, 2.5, 2.5), (1, 3.5, 3.5)]);
        assert!(turned(30.0).axis_edges(0.1).is_empty());
        // Turned by a hair the edges are along the axes to within 0.1.
        assert_eq!(turned(0.5).axis_edges(0.1).len(), 4);
        assert!(turned(2.0).axis_edges(0.1).is_empty());
        // A link to a cell centred on a turned corner meets the outline at
        // its end (it fell back to q = 1/2 with no crossing found).
        for degrees in [90.0, 180.0, 270.0] {
            let q = turned(degrees).crossing([1.5, 2.5], [1.0, 1.0]).unwrap();
            assert!((q - 1.0).abs() < 1e-9, "turned by {degrees}: {q}");
        }
    }

    /// Every link's q is the one the wall-distance table gives its cell and
    /// arriving direction; the table lists exactly the cells with a link, in
    /// ascending storage order (a tiled layout, where that is not row order),
    /// and gives 0 for every other cell and direction.
    #[test]
    fn the_wall_distance_table_holds_every_link_and_nothing_else() {
        use crate::domain::hierarchy::{Layout, Rect};
        use crate::kernels::lbm::wall_distance;
        use crate::lattice::Q;
        let layout = Layout {
            nx: 40,
            ny: 30,
            tile: [8, 8],
        };
        let patch = Patch {
            level: 1,
            index: 0,
            parent: Some(0),
            rect: Rect::new(0, 0, 20, 15),
            origin: [0, 0],
            layout,
            active: Rect::new(0, 0, 40, 30),
            on_boundary: [false; 4],
        };
        let shapes = [
            Shape::Circle {
                center: [7.0, 7.5],
                radius: 3.3,
            },
            Shape::Polygon {
                points: vec![[12.0, 4.0], [17.0, 6.0], [13.0, 11.0]],
            },
        ];
        let bodies: Vec<(usize, &Shape)> = shapes.iter().enumerate().collect();
        let (_, owner) = rasterize(&patch, &bodies);
        let tables = wall_tables(&patch, &owner, &bodies, [false; 4], |b| b as u32);
        let (table, cells) = (&tables.wall_distance, tables.wall_cells);
        assert!(cells > 20 && table.len() == cells * (1 + Q));
        assert!(table[..cells].windows(2).all(|w| w[0] < w[1]));
        let mut expected = std::collections::BTreeMap::new();
        for link in tables.links.chunks(LINK_WORDS) {
            let (cell, d) = (link[0], (link[1] & 15) as usize);
            expected.insert((cell, OPP[d]), f32::from_bits(link[4]));
        }
        assert_eq!(
            table[..cells].to_vec(),
            expected
                .keys()
                .map(|(c, _)| *c)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
        );
        for cell in 0..layout.plane_cells() as u32 {
            for i in 0..Q {
                let want = expected.get(&(cell, i)).copied().unwrap_or(0.0);
                assert_eq!(
                    wall_distance(table, cells, cell, i).to_bits(),
                    want.to_bits(),
                    "cell {cell} i {i}"
                );
            }
        }
    }

    #[test]
    fn the_bounds_within_a_box_are_those_of_the_part_inside() {
        let close = |a: [f64; 4], b: [f64; 4]| a.iter().zip(b).all(|(p, q)| (p - q).abs() < 1e-9);
        let domain = [0.0, 0.0, 4.0, 1.0];
        // A bump: a circle of radius 10 centred 9.9 below the floor.
        let bump = Shape::Circle {
            center: [2.0, -9.9],
            radius: 10.0,
        };
        let half = (100.0f64 - 9.9 * 9.9).sqrt();
        let got = bump.bounds_within(domain).unwrap();
        assert!(close(got, [2.0 - half, 0.0, 2.0 + half, 0.1]), "{got:?}");
        // A rectangle through the floor, a polygon wholly outside.
        let block = Shape::Rectangle {
            min: [1.0, -5.0],
            max: [1.5, 0.3],
        };
        assert!(close(block.bounds_within(domain).unwrap(), [1.0, 0.0, 1.5, 0.3]));
        let below = Shape::Polygon {
            points: vec![[0.0, -2.0], [1.0, -2.0], [0.5, -1.0]],
        };
        assert_eq!(below.bounds_within(domain), None);
        // A circle around the whole box holds its corners.
        let around = Shape::Circle {
            center: [2.0, 0.5],
            radius: 10.0,
        };
        assert!(close(around.bounds_within(domain).unwrap(), domain));
    }

    #[test]
    fn the_outline_within_a_box_is_what_of_it_lies_inside() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let square = Shape::Rectangle {
            min: [0.0, -5.0],
            max: [2.0, 1.0],
        };
        // Above y = 0: the top and two sides' upper units; on y = 0, its
        // bottom along the box's side is left out.
        assert!(close(square.outline_within([-10.0, 0.0, 10.0, 10.0]), 4.0));
        assert!(close(square.outline_within([-10.0, -5.0, 10.0, 10.0]), 14.0));
        assert!(close(
            square.outline_within([-10.0, -10.0, 10.0, 10.0]),
            square.perimeter()
        ));
        assert_eq!(square.outline_within([5.0, 0.0, 10.0, 10.0]), 0.0);
        // A huge circle of which a sliver is in the box: at most the box's
        // perimeter, and never more than its own.
        let huge = Shape::Circle {
            center: [0.0, -1e6],
            radius: 1e6 + 0.5,
        };
        assert!(huge.outline_within([-2.0, 0.0, 2.0, 1.0]) <= 2.0 * (4.0 + 0.5) + 1e-6);
        let small = Shape::Circle {
            center: [0.0, 0.0],
            radius: 1.0,
        };
        assert!(close(small.outline_within([-5.0, -5.0, 5.0, 5.0]), small.perimeter()));
    }

    #[test]
    fn distances_between_shapes_are_zero_where_they_touch_or_overlap() {
        let circle = |x: f64, y: f64, r: f64| Shape::Circle {
            center: [x, y],
            radius: r,
        };
        let rect = |x0: f64, y0: f64, x1: f64, y1: f64| Shape::Rectangle {
            min: [x0, y0],
            max: [x1, y1],
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(circle(0.0, 0.0, 1.0).distance(&circle(5.0, 0.0, 1.0)), 3.0));
        assert_eq!(circle(0.0, 0.0, 1.0).distance(&circle(1.5, 0.0, 1.0)), 0.0);
        // A circle beside, inside and around a rectangle, both ways round.
        assert!(close(circle(0.0, 0.0, 1.0).distance(&rect(3.0, -1.0, 4.0, 1.0)), 2.0));
        assert!(close(rect(3.0, -1.0, 4.0, 1.0).distance(&circle(0.0, 0.0, 1.0)), 2.0));
        assert!(close(
            circle(0.0, 0.0, 1.0).distance(&rect(4.0, 4.0, 5.0, 5.0)),
            32f64.sqrt() - 1.0
        ));
        assert_eq!(circle(0.5, 0.5, 0.1).distance(&rect(0.0, 0.0, 1.0, 1.0)), 0.0);
        assert_eq!(circle(0.5, 0.5, 9.0).distance(&rect(0.0, 0.0, 1.0, 1.0)), 0.0);
        // Polygons: apart, one inside the other, and crossing with no corner
        // inside the other (a plus sign).
        assert!(close(rect(0.0, 0.0, 1.0, 1.0).distance(&rect(3.0, 0.5, 4.0, 2.0)), 2.0));
        assert_eq!(rect(0.0, 0.0, 4.0, 4.0).distance(&rect(1.0, 1.0, 2.0, 2.0)), 0.0);
        assert_eq!(rect(-2.0, -0.1, 2.0, 0.1).distance(&rect(-0.1, -2.0, 0.1, 2.0)), 0.0);
        let triangle = Shape::Polygon {
            points: vec![[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]],
        };
        assert!(close(triangle.distance(&rect(2.0, 2.0, 3.0, 3.0)), 2f64.sqrt()));
    }
}
