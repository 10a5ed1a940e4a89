//! What the lockstep tests share: the refined channel their members run and
//! what they observe of it.

use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::member::{FieldQuantity, FixedSchedule, Statistic, StatsSpec};
use lbm_core::{Boundary, ExecConfig, LatticeConfig};

/// A 48 x 24 channel with a parabolic inflow ramped up over `ramp`
/// intervals, an outflow, walls, one refined patch over x in [8, 32) and
/// `body` on it; `tau` and `velocity` are what a sweep varies.
pub fn refined_channel(tau: f64, velocity: f64, ramp: f64, body: Shape) -> LatticeConfig {
    let mut lattice = LatticeConfig::uniform(
        48,
        24,
        tau,
        [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
    );
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity,
        amplitude: Amplitude::Ramp { duration: ramp },
        span: None,
    });
    lattice.hierarchy.levels = vec![vec![Rect::new(8, 0, 32, 24)]];
    lattice.bodies = vec![Body { shape: body, level: 1 }];
    lattice
}

/// The statistics most tests ask for: the mass, the patch's x velocity and
/// the body's raw exchange.
pub fn stats_spec() -> StatsSpec {
    StatsSpec {
        statistics: vec![
            Statistic::Mass,
            Statistic::Field {
                level: 1,
                patch: 0,
                quantity: FieldQuantity::Ux,
            },
            Statistic::Exchange { body: 0 },
        ],
    }
}

/// Observing the raw exchange and its window, on `schedule`, asking `stats`.
pub fn exec(schedule: FixedSchedule, stats: StatsSpec) -> ExecConfig {
    ExecConfig {
        observe_raw_exchange: true,
        observe_window_exchange: true,
        schedule: Some(schedule),
        stats,
        ..ExecConfig::default()
    }
}
