//! Physical units (m, s, kg/m^3, m^2/s) to lattice units and back.
//!
//! The base level's cell size follows from a resolution (cells per reference
//! length) and its time step from a chosen lattice velocity (the reference
//! velocity in lattice units). Finer levels halve both (acoustic scaling), which
//! doubles the lattice viscosity per level; see [`crate::LatticeConfig::tau_at`].

use serde::Serialize;

use crate::error::{Error, Result};

/// Conversion factors of the base level.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct UnitSystem {
    /// Base cell size, m.
    pub dx: f64,
    /// Base time step, s.
    pub dt: f64,
    /// Reference density, kg/m^3.
    pub density: f64,
}

/// The smallest and largest speed (m/s) and pressure (Pa) scales a case
/// may have: fields are f32, which holds 1e-38 to 3e38, and the lattice
/// values the scales multiply stay within a few decades of 1.
const MIN_SCALE: f64 = 1e-30;
const MAX_SCALE: f64 = 1e30;

/// The lattice's speed of sound, 1/√3.
const SOUND_SPEED: f64 = 0.577_350_269_189_625_8;

impl UnitSystem {
    /// `cells_per_length` base cells span `reference_length`; `reference_velocity`
    /// (m/s) becomes `lattice_velocity` in lattice units.
    pub fn new(
        reference_length: f64,
        cells_per_length: f64,
        reference_velocity: f64,
        lattice_velocity: f64,
        density: f64,
    ) -> Result<Self> {
        // The keys are the case file's: a case is what builds a unit system.
        positive("domain.reference_length", reference_length)?;
        positive("domain.resolution", cells_per_length)?;
        positive("flow.reference_velocity", reference_velocity)?;
        // Its upper bound is the Mach number's, checked with every other
        // speed; beyond the lattice's speed of sound it is no flow at all,
        // and the scales below would blame another key.
        positive("flow.lattice_velocity", lattice_velocity)?;
        if lattice_velocity > SOUND_SPEED {
            return Err(Error::parameter(
                "flow.lattice_velocity",
                lattice_velocity,
                "a lattice speed above 0 and below the lattice's speed of sound, 0.5774 (at most 0.1732, Mach 0.3, \
                 for a flow the method resolves)",
            ));
        }
        positive("fluid.density", density)?;
        // Fields are written as f32: a speed or pressure scale beyond what
        // f32 holds overflows the files (a "divergence" that is not one).
        let speed = reference_velocity / lattice_velocity;
        let pressure = density * speed * speed;
        // The key far from its usual values is the one to name.
        let (velocity_key, velocity) = match lattice_velocity < 1e-4 && (1e-6..=1e6).contains(&reference_velocity) {
            true => ("flow.lattice_velocity", lattice_velocity),
            false => ("flow.reference_velocity", reference_velocity),
        };
        if !(MIN_SCALE..=MAX_SCALE).contains(&speed) {
            return Err(Error::parameter(
                velocity_key,
                velocity,
                &format!(
                    "a velocity whose lattice speed scale, flow.reference_velocity / flow.lattice_velocity = \
                     {speed:e} m/s, lies within {MIN_SCALE:e} to {MAX_SCALE:e}, which f32 fields hold"
                ),
            ));
        }
        if !(MIN_SCALE..=MAX_SCALE).contains(&pressure) {
            let (key, value) = match (1e-6..=1e6).contains(&density) {
                true => (velocity_key, velocity),
                false => ("fluid.density", density),
            };
            return Err(Error::parameter(
                key,
                value,
                &format!(
                    "a value whose pressure scale, fluid.density x (flow.reference_velocity / \
                     flow.lattice_velocity)^2 = {pressure:e} Pa, lies within {MIN_SCALE:e} to {MAX_SCALE:e}, \
                     which f32 fields hold"
                ),
            ));
        }
        let dx = reference_length / cells_per_length;
        Ok(UnitSystem {
            dx,
            dt: lattice_velocity * dx / reference_velocity,
            density,
        })
    }

    /// Lattice kinematic viscosity on the base level.
    pub fn viscosity_to_lattice(&self, nu: f64) -> f64 {
        nu * self.dt / (self.dx * self.dx)
    }

    /// τ of the base level for kinematic viscosity `nu` (m^2/s).
    pub fn tau(&self, nu: f64) -> f64 {
        3.0 * self.viscosity_to_lattice(nu) + 0.5
    }

    /// A velocity in lattice units (the same on every level).
    pub fn velocity_to_lattice(&self, u: f64) -> f64 {
        u * self.dt / self.dx
    }

    /// A body acceleration (m/s^2) as a base-level lattice force density at rest density.
    pub fn acceleration_to_lattice(&self, g: f64) -> f64 {
        g * self.dt * self.dt / self.dx
    }

    /// A lattice force on `level` in N per metre of depth: a lattice cell has
    /// mass ρ dx³, so a lattice force is ρ dx⁴/dt² on one cell of depth dx.
    pub fn force_to_physical(&self, level: usize, force: f64) -> f64 {
        let scale = 0.5f64.powi(level as i32);
        let (dx, dt) = (self.dx * scale, self.dt * scale);
        force * self.density * dx * dx * dx / (dt * dt)
    }

    /// A lattice density deviation as a pressure deviation in Pa (p = c_s² ρ).
    pub fn pressure_to_physical(&self, delta_rho: f64) -> f64 {
        let c = self.dx / self.dt;
        delta_rho / 3.0 * self.density * c * c
    }

    /// A length in base lattice units.
    pub fn length_to_lattice(&self, length: f64) -> f64 {
        length / self.dx
    }
}

fn positive(key: &str, value: f64) -> Result<()> {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(Error::parameter(key, value, "a finite number above 0"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_beyond_what_f32_fields_hold_are_refused_naming_the_key() {
        let e = UnitSystem::new(0.1, 20.0, 1.0, 0.05, 1e39).unwrap_err().to_string();
        assert!(
            e.contains("`fluid.density` = 1e39:") && e.contains("pressure scale"),
            "{e}"
        );
        let e = UnitSystem::new(0.1, 20.0, 1e35, 0.05, 1.0).unwrap_err().to_string();
        assert!(
            e.contains("`flow.reference_velocity`") && e.contains("speed scale"),
            "{e}"
        );
        // An ordinary density with a speed that makes the pressure scale
        // overflow names the speed, not the density.
        let e = UnitSystem::new(0.1, 20.0, 9.2e18, 0.1, 1.0).unwrap_err().to_string();
        assert!(e.contains("`flow.reference_velocity` = 9200000000000000000"), "{e}");
        // A lattice velocity past the speed of sound is named itself (it
        // made a speed scale below 1e-30 that blamed the reference velocity).
        let e = UnitSystem::new(0.1, 20.0, 1.0, 1e308, 1.0).unwrap_err().to_string();
        assert!(
            e.contains("`flow.lattice_velocity` = 1e308") && e.contains("speed of sound"),
            "{e}"
        );
        // A lattice velocity far below any a case takes is named, not the
        // reference velocity it divides.
        for lattice_velocity in [1e-30, 1e-50] {
            let e = UnitSystem::new(0.1, 20.0, 1.0, lattice_velocity, 1.0)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("`flow.lattice_velocity` = {lattice_velocity:e}")),
                "{e}"
            );
        }
        // Water and a slow micro-channel flow are well inside.
        UnitSystem::new(1e-4, 20.0, 1e-6, 0.05, 1000.0).unwrap();
    }

    #[test]
    fn dfg_like_scaling_round_trips() {
        let units = UnitSystem::new(0.1, 20.0, 1.0, 0.05, 1.0).unwrap();
        assert!((units.dx - 0.005).abs() < 1e-15);
        assert!((units.velocity_to_lattice(1.0) - 0.05).abs() < 1e-15);
        // nu = 1e-3 m^2/s: nu_lat = 1e-3 * dt / dx^2 with dt = 2.5e-4.
        assert!((units.viscosity_to_lattice(1e-3) - 0.01).abs() < 1e-12);
        assert!((units.tau(1e-3) - 0.53).abs() < 1e-12);
    }

    #[test]
    fn forces_scale_with_the_dynamic_pressure_and_length() {
        let units = UnitSystem::new(0.1, 40.0, 0.3, 0.1, 1.0).unwrap();
        // A lattice drag coefficient is the physical one: F = cd ρ U² D / 2 in
        // both unit systems, with D = 40 cells and U = 0.1.
        let lattice = 5.58 * 0.5 * 0.1 * 0.1 * 40.0;
        let physical = 5.58 * 0.5 * 0.3 * 0.3 * 0.1;
        assert!((units.force_to_physical(0, lattice) / physical - 1.0).abs() < 1e-12);
        // Two levels finer: D is 160 cells, the force in lattice units 4x larger.
        assert!((units.force_to_physical(2, 4.0 * lattice) / physical - 1.0).abs() < 1e-12);
    }

    #[test]
    fn bad_units_name_the_key() {
        let e = UnitSystem::new(0.1, 20.0, 1.0, 0.0, 1.0).unwrap_err().to_string();
        assert!(
            e.contains("`flow.lattice_velocity` = 0: a finite number above 0"),
            "{e}"
        );
        let e = UnitSystem::new(0.1, -3.0, 1.0, 0.05, 1.0).unwrap_err().to_string();
        assert!(e.contains("`domain.resolution` = -3"), "{e}");
    }
}
