//! The D2Q9 lattice: velocities, weights, equilibrium, moments and the BGK/TRT
//! collision operators with Guo forcing.
//!
//! Populations are stored minus their lattice weights (`f_i - w_i`) so that f32
//! keeps the small deviations from rest that carry the flow; every function here
//! takes and returns populations in that shifted form. The equilibrium is He and
//! Luo's incompressible one (1997): the density deviation carries the pressure
//! only, and momentum is `ρ0 u` with `ρ0 = 1`, so the density rise that drives a
//! channel flow does not bias velocities and forces by the Mach number squared.
//! This module knows nothing of grids, storage layout or devices.

use serde::{Deserialize, Serialize};

/// Number of discrete velocities.
pub const Q: usize = 9;

/// Lattice velocities `c_i`: rest, the four axis directions, then the diagonals.
pub const C: [[i32; 2]; Q] = [
    [0, 0],
    [1, 0],
    [0, 1],
    [-1, 0],
    [0, -1],
    [1, 1],
    [-1, 1],
    [-1, -1],
    [1, -1],
];

/// Lattice weights `w_i`.
pub const W: [f32; Q] = [
    4.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
];

/// Index of the opposite velocity, `c_opp(i) = -c_i`.
pub const OPP: [usize; Q] = [0, 3, 4, 1, 2, 7, 8, 5, 6];

/// Squared lattice speed of sound.
pub const CS2: f32 = 1.0 / 3.0;

/// Its inverse, exactly 3: the coupling's non-equilibrium parts and the wall
/// rule multiply by it rather than divide by [`CS2`] (the f32 nearest 1/3),
/// as the kernels do, where each division was a correctly rounded division
/// on the GPU's dependent chain.
pub const INV_CS2: f32 = 3.0;

/// Default TRT magic parameter Λ = (τ⁺ − ½)(τ⁻ − ½); 3/16 puts half-way
/// bounce-back walls exactly half-way between nodes for Poiseuille flow.
pub const TRT_MAGIC: f64 = 3.0 / 16.0;

/// Density, velocity and the symmetric strain rate of one cell, in lattice units.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    /// Density minus one, kept apart for the same precision reason as `f_i - w_i`.
    pub delta_rho: f32,
    pub ux: f32,
    pub uy: f32,
}

/// Collision model, chosen per case and applied on every level.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum Collision {
    /// Single relaxation time. A struct variant: a unit one would take
    /// any other key (`magic`) in silence.
    Bgk {},
    /// Two relaxation times; the odd rate follows from the magic parameter.
    Trt {
        #[serde(default = "default_magic")]
        magic: f64,
    },
}

fn default_magic() -> f64 {
    TRT_MAGIC
}

impl Default for Collision {
    fn default() -> Self {
        Collision::Trt { magic: TRT_MAGIC }
    }
}

/// Relaxation rates of one level: ω⁺ acts on the even (viscous) part, ω⁻ on the
/// odd part. BGK has ω⁻ = ω⁺.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Relaxation {
    pub tau_plus: f64,
    pub tau_minus: f64,
}

impl Relaxation {
    pub fn new(collision: Collision, tau_plus: f64) -> Self {
        let tau_minus = match collision {
            Collision::Bgk {} => tau_plus,
            Collision::Trt { magic } => 0.5 + magic / (tau_plus - 0.5),
        };
        Relaxation { tau_plus, tau_minus }
    }

    pub fn omega_plus(&self) -> f32 {
        (1.0 / self.tau_plus) as f32
    }

    pub fn omega_minus(&self) -> f32 {
        (1.0 / self.tau_minus) as f32
    }
}

/// Density and velocity from shifted populations (`u = j / ρ0`); `force` is the
/// body-force density whose half step Guo forcing adds to the momentum.
#[inline(always)]
pub fn moments(f: &[f32; Q], force: [f32; 2]) -> Moments {
    let mut delta_rho = 0.0f32;
    let mut jx = 0.0f32;
    let mut jy = 0.0f32;
    for i in 0..Q {
        delta_rho += f[i];
        jx += f[i] * C[i][0] as f32;
        jy += f[i] * C[i][1] as f32;
    }
    Moments {
        delta_rho,
        ux: jx + 0.5 * force[0],
        uy: jy + 0.5 * force[1],
    }
}

/// Shifted incompressible equilibrium `f_i^eq - w_i = w_i [δρ + 3 c·u + 4.5 (c·u)²
/// - 1.5 u²]`.
#[inline(always)]
pub fn equilibrium(m: Moments) -> [f32; Q] {
    let usq = m.ux * m.ux + m.uy * m.uy;
    let mut feq = [0.0f32; Q];
    for i in 0..Q {
        let cu = C[i][0] as f32 * m.ux + C[i][1] as f32 * m.uy;
        feq[i] = W[i] * (m.delta_rho + (3.0 * cu + 4.5 * cu * cu - 1.5 * usq));
    }
    feq
}

/// First-order even non-equilibrium part of a *pre*-collision population for a
/// strain rate `[sxx, syy, sxy]` (lattice units of the level), from the
/// Chapman–Enskog expansion: `-w_i ρ0 τ / c_s² · Q_i : S`.
#[inline]
pub fn non_equilibrium(tau: f32, strain: [f32; 3]) -> [f32; Q] {
    let mut fneq = [0.0f32; Q];
    for i in 0..Q {
        let cx = C[i][0] as f32;
        let cy = C[i][1] as f32;
        let q_s = (cx * cx - CS2) * strain[0] + (cy * cy - CS2) * strain[1] + 2.0 * cx * cy * strain[2];
        fneq[i] = -W[i] * tau * INV_CS2 * q_s;
    }
    fneq
}

/// First-order odd non-equilibrium part of a *pre*-collision population,
/// `-τ⁻ w_i [ -c_iα ∂_β P_αβ / c_s² + Q_iαβ c_iγ ∂_γ P_αβ / (2 c_s⁴) ]` with
/// `P = ρ0 u u`. `grad_p[γ]` holds `∂_γ` of `[P_xx, P_yy, P_xy]`. It is second
/// order in the Mach number, so it matters for fast flows and is what keeps a
/// shear flow linear across a refinement interface.
#[inline]
pub fn non_equilibrium_odd(tau_minus: f32, grad_p: [[f32; 3]; 2]) -> [f32; Q] {
    let [dx, dy] = grad_p;
    let div = [dx[0] + dy[2], dx[2] + dy[1]];
    let mut fneq = [0.0f32; Q];
    for i in 0..Q {
        let cx = C[i][0] as f32;
        let cy = C[i][1] as f32;
        let q = [cx * cx - CS2, cy * cy - CS2, cx * cy];
        let along = |g: [f32; 3]| q[0] * g[0] + q[1] * g[1] + 2.0 * q[2] * g[2];
        let q_c_grad = cx * along(dx) + cy * along(dy);
        let c_div = cx * div[0] + cy * div[1];
        fneq[i] = -tau_minus * W[i] * (-c_div * INV_CS2 + q_c_grad * (0.5 * INV_CS2 * INV_CS2));
    }
    fneq
}

/// Second-order odd non-equilibrium part of a *pre*-collision population,
/// `τ⁻ Λ⁺ w_i ρ0 [c_iα c_iβ c_iγ ∂_α∂_β u_γ / c_s² - c_iγ ∇²u_γ - 2 c_iγ ∂_γ(∇·u)]`
/// with `Λ⁺ = τ⁺ - ½`: the curvature of the velocity seen by the odd moments,
/// from the Taylor expansion of the lattice Boltzmann equation (the viscous part
/// of `∂_t(ρu)` folded in). The last term vanishes for a divergence-free field;
/// it is kept so that discrete second differences, which are not exactly
/// divergence-free, add no momentum. `d2u[γ]` holds `[∂xx, ∂yy, ∂xy]` of `u_γ`.
/// Relative to the strain part it is of order `Λ⁻ k`, large for TRT at small τ⁺.
#[inline]
pub fn non_equilibrium_odd_curvature(tau_plus: f32, tau_minus: f32, d2u: [[f32; 3]; 2]) -> [f32; Q] {
    let scale = tau_minus * (tau_plus - 0.5);
    let [ux, uy] = d2u;
    let laplacian = [ux[0] + ux[1], uy[0] + uy[1]];
    let grad_div = [ux[0] + uy[2], ux[2] + uy[1]];
    let mut fneq = [0.0f32; Q];
    for i in 0..Q {
        let cx = C[i][0] as f32;
        let cy = C[i][1] as f32;
        let along = |d: [f32; 3]| cx * cx * d[0] + cy * cy * d[1] + 2.0 * cx * cy * d[2];
        let third = cx * along(ux) + cy * along(uy);
        let linear = cx * (laplacian[0] + 2.0 * grad_div[0]) + cy * (laplacian[1] + 2.0 * grad_div[1]);
        fneq[i] = scale * W[i] * (third * INV_CS2 - linear);
    }
    fneq
}

/// One TRT collision (BGK when ω⁻ = ω⁺) with Guo forcing, in place on shifted
/// populations; `force` is the body-force density in lattice units. Always
/// inlined, with what it calls, so that the CPU's row loop
/// (`kernels::lbm::vector`) vectorises it across cells.
#[inline(always)]
pub fn collide(f: &mut [f32; Q], omega_plus: f32, omega_minus: f32, force: [f32; 2]) {
    let m = moments(f, force);
    let feq = equilibrium(m);
    let source = guo_source(m, force);
    let pre = *f;
    for i in 0..Q {
        let o = OPP[i];
        let even_neq = 0.5 * ((pre[i] - feq[i]) + (pre[o] - feq[o]));
        let odd_neq = 0.5 * ((pre[i] - feq[i]) - (pre[o] - feq[o]));
        let even_src = 0.5 * (source[i] + source[o]);
        let odd_src = 0.5 * (source[i] - source[o]);
        f[i] = pre[i] - omega_plus * even_neq - omega_minus * odd_neq
            + (1.0 - 0.5 * omega_plus) * even_src
            + (1.0 - 0.5 * omega_minus) * odd_src;
    }
}

/// Guo's forcing term before its relaxation factor.
#[inline(always)]
fn guo_source(m: Moments, force: [f32; 2]) -> [f32; Q] {
    let mut s = [0.0f32; Q];
    if force == [0.0, 0.0] {
        return s;
    }
    for i in 0..Q {
        let cx = C[i][0] as f32;
        let cy = C[i][1] as f32;
        let cu = cx * m.ux + cy * m.uy;
        let term_x = 3.0 * (cx - m.ux) + 9.0 * cu * cx;
        let term_y = 3.0 * (cy - m.uy) + 9.0 * cu * cy;
        s[i] = W[i] * (term_x * force[0] + term_y * force[1]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equilibrium_reproduces_its_moments() {
        let m = Moments {
            delta_rho: 0.013,
            ux: 0.04,
            uy: -0.025,
        };
        let back = moments(&equilibrium(m), [0.0, 0.0]);
        assert!((back.delta_rho - m.delta_rho).abs() < 1e-7);
        assert!((back.ux - m.ux).abs() < 1e-6);
        assert!((back.uy - m.uy).abs() < 1e-6);
    }

    #[test]
    fn collision_conserves_mass_and_momentum_without_force() {
        let mut f = [0.0f32; Q];
        for (i, v) in f.iter_mut().enumerate() {
            *v = 0.01 * (i as f32 * 0.7).sin();
        }
        let before = moments(&f, [0.0, 0.0]);
        collide(&mut f, 1.3, 1.7, [0.0, 0.0]);
        let after = moments(&f, [0.0, 0.0]);
        assert!((before.delta_rho - after.delta_rho).abs() < 1e-7);
        assert!((before.ux - after.ux).abs() < 1e-6);
        assert!((before.uy - after.uy).abs() < 1e-6);
    }

    #[test]
    fn guo_forcing_adds_the_force_to_the_momentum() {
        let mut f = equilibrium(Moments {
            delta_rho: 0.0,
            ux: 0.01,
            uy: 0.0,
        });
        let force = [1e-4f32, -2e-4];
        collide(&mut f, 1.0 / 0.8, 1.0 / 0.9, force);
        let (mut jx, mut jy) = (0.0f32, 0.0f32);
        for i in 0..Q {
            jx += f[i] * C[i][0] as f32;
            jy += f[i] * C[i][1] as f32;
        }
        // Post-collision momentum is ρu + F/2 with u the velocity that includes
        // the first half step, so the jump over one step is the whole force.
        assert!((jx - (0.01 + 0.5 * force[0] + 0.5 * force[0])).abs() < 1e-6);
        assert!((jy - (force[1])).abs() < 1e-6);
    }

    #[test]
    fn non_equilibrium_carries_no_mass_or_momentum() {
        let fneq = non_equilibrium(0.7, [1e-3, -4e-4, 2e-4]);
        let mass: f32 = fneq.iter().sum();
        let jx: f32 = (0..Q).map(|i| fneq[i] * C[i][0] as f32).sum();
        assert!(mass.abs() < 1e-9 && jx.abs() < 1e-9);
    }

    #[test]
    fn curvature_non_equilibrium_carries_no_mass_or_momentum() {
        let fneq = non_equilibrium_odd_curvature(0.65, 1.75, [[2e-4, -1e-4, 3e-5], [-5e-5, 7e-5, 1e-4]]);
        let mass: f32 = fneq.iter().sum();
        let jx: f32 = (0..Q).map(|i| fneq[i] * C[i][0] as f32).sum();
        let jy: f32 = (0..Q).map(|i| fneq[i] * C[i][1] as f32).sum();
        assert!(
            mass.abs() < 1e-10 && jx.abs() < 1e-10 && jy.abs() < 1e-10,
            "{mass} {jx} {jy}"
        );
    }

    #[test]
    fn opposite_directions_are_opposite() {
        for i in 0..Q {
            assert_eq!(C[OPP[i]], [-C[i][0], -C[i][1]]);
        }
    }
}
