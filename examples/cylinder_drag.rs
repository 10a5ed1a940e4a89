//! The engine as a library: a cylinder in a channel driven by an inflow, with
//! the cylinder on a refined patch, advanced on the best backend present, and
//! the drag and lift coefficients read from the exchange window every few
//! hundred intervals. The inflow's start rings the channel's acoustic
//! resonance (docs/ARCHITECTURE.md, the outflow), so the coefficient swings
//! between windows before it settles.
//!
//! Run: `cargo run --release --example cylinder_drag` (CUDA when a device is
//! present, else the CPU; about 10 s on two cores).

use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::Rect;
use lbm_core::{Boundary, CpuDriver, Driver, ExecConfig, LatticeConfig, Stepper};

fn main() -> Result<(), lbm_core::Error> {
    // A 160 x 40 channel in base lattice units: parabolic inflow at x-min,
    // a pressure outlet at x-max, walls at y-min and y-max.
    let (nx, ny, u_peak) = (160, 40, 0.05);
    let mut lattice = LatticeConfig::uniform(
        nx,
        ny,
        0.56,
        [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
    );
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: u_peak,
        amplitude: Amplitude::Ramp { duration: 500.0 },
        span: None,
    });
    // One refinement level around the cylinder, spanning the channel.
    lattice.hierarchy.levels = vec![vec![Rect::new(20, 0, 80, ny)]];
    let radius = 4.0;
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [40.0, 20.0],
            radius,
        },
        level: 1,
    }];
    let driver: Box<dyn Driver> = match lbm_cuda::CudaDriver::new(0) {
        Ok(cuda) => Box::new(cuda),
        Err(_) => Box::new(CpuDriver::new()),
    };
    println!("backend: {}", driver.backend());
    let exec = ExecConfig {
        observe_window_exchange: true,
        ..ExecConfig::default()
    };
    let stepper = Stepper::new(driver, lattice, exec)?;
    // Coefficients from the mean force over each window. The ledger gives it
    // in lattice units of the body's level; with half the spacing and half the
    // time step, a level-1 force is twice the base-unit force (per unit depth
    // a force scales as dx³/dt²), so it is halved before dividing by the
    // base-unit ½ U² D.
    let (u_mean, diameter) = (2.0 / 3.0 * u_peak, 2.0 * radius);
    let coefficient = |force: f64| 2.0 * (force / 2.0) / (u_mean * u_mean * diameter);
    println!("{:>9} {:>9} {:>9}", "interval", "cd", "cl");
    for _ in 0..6 {
        stepper.start_exchange_window()?;
        stepper.step(500)?;
        let window = stepper.read_exchange_window(0)?;
        let [fx, fy] = window.mean_force();
        println!(
            "{:>9} {:>9.4} {:>9.4}",
            stepper.step_count(),
            coefficient(fx),
            coefficient(fy)
        );
    }
    println!("mass in base cells: {:.6}", stepper.total_mass()?);
    stepper.close()
}
