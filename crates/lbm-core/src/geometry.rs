//! Bodies and their footprint on a patch: which cells are solid and which
//! fluid-to-solid links carry momentum exchange.
//!
//! Shapes are given in base-level lattice units (one base cell = 1), so one body
//! description serves every level. This module builds host tables only; the
//! stepper uploads them.

use serde::{Deserialize, Serialize};

use crate::cpu::{FLAG_FLUID, FLAG_SOLID};
use crate::hierarchy::Patch;
use crate::lattice::{C, Q};
use crate::launch::LINK_WORDS;

/// A rigid, stationary body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "lowercase", deny_unknown_fields)]
pub enum Shape {
    Circle { center: [f64; 2], radius: f64 },
}

impl Shape {
    pub fn contains(&self, p: [f64; 2]) -> bool {
        match self {
            Shape::Circle { center, radius } => {
                let (dx, dy) = (p[0] - center[0], p[1] - center[1]);
                dx * dx + dy * dy <= radius * radius
            }
        }
    }

    pub fn center(&self) -> [f64; 2] {
        match self {
            Shape::Circle { center, .. } => *center,
        }
    }
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
/// solid cell.
pub fn rasterize(patch: &Patch, bodies: &[(usize, &Shape)]) -> (Vec<u8>, Vec<Option<usize>>) {
    let layout = patch.layout;
    let mut flags = vec![FLAG_FLUID; layout.plane_cells()];
    let mut owner = vec![None; layout.plane_cells()];
    for y in 0..layout.ny {
        for x in 0..layout.nx {
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

/// Link table of the fluid cells of the active region that have a solid
/// neighbour: the words of [`crate::launch::AccumulateExchange`], with the lever
/// arm from the owning body's centre to the link midpoint in the patch's lattice
/// units. `slot` maps a body index to its slot in the level's accumulator.
pub fn links(
    patch: &Patch,
    owner: &[Option<usize>],
    bodies: &[(usize, &Shape)],
    slot: impl Fn(usize) -> u32,
) -> Vec<u32> {
    let layout = patch.layout;
    let scale = 2f64.powi(patch.level as i32);
    let mut table = Vec::new();
    let a = patch.active;
    for y in a.y0..a.y1 {
        for x in a.x0..a.x1 {
            let index = layout.index(x, y);
            if owner[index].is_some() {
                continue;
            }
            for (i, c) in C.iter().enumerate().take(Q).skip(1) {
                let (nx, ny) = (x as i64 + c[0] as i64, y as i64 + c[1] as i64);
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
                let center = shape.center();
                let rx = ((p[0] - center[0]) * scale + 0.5 * c[0] as f64) as f32;
                let ry = ((p[1] - center[1]) * scale + 0.5 * c[1] as f64) as f32;
                table.extend([index as u32, i as u32 | (slot(body) << 4), rx.to_bits(), ry.to_bits()]);
            }
        }
    }
    debug_assert_eq!(table.len() % LINK_WORDS, 0);
    table
}
