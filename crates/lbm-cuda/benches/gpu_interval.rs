//! Where an interval's time goes: each step of a case's hop plan replayed on
//! its own, many times back to back as one CUDA graph, against the whole
//! interval (`Stepper::step`) in the same process. A step alone runs as it
//! does on the interval's critical path (after the one before it, with the
//! launch gap between them); a group's members run side by side as in the
//! interval, and each member of a group is also timed alone. The sum of the
//! steps against the interval shows what the interval's own concurrency
//! hides. Prints a table; writes no records (a
//! share is not a rate). Prints a skip notice without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_interval`.

use std::time::Instant;

use lbm_core::case::Case;
use lbm_core::device::Action;
use lbm_core::{Driver, ExecConfig, Stepper};
use lbm_cuda::CudaDriver;

/// The cases: DFG 2D-1 with its three levels at 640 cells per diameter on
/// the finest (the three-level figure of docs/PERFORMANCE.md), and the
/// refined cavity.
fn cases() -> Vec<(&'static str, String)> {
    let dfg = include_str!("../../../cases/dfg-2d1.toml")
        .lines()
        .filter(|l| !l.starts_with("probes =") && !l.starts_with("lines ="))
        .map(|l| match l {
            l if l.starts_with("resolution =") => "resolution = 160",
            l if l.starts_with("lattice_velocity =") => "lattice_velocity = 0.025",
            l => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    vec![
        ("dfg-2d1-three-levels-640", dfg),
        (
            "cavity-re100",
            include_str!("../../../cases/cavity-re100.toml").to_owned(),
        ),
    ]
}

/// Copies of a step per timed replay, and timed replays per figure (the median).
const COPIES: usize = 40;
const SAMPLES: usize = 7;

/// The median of `SAMPLES` timings of `run`, in seconds.
fn median(mut run: impl FnMut() -> f64) -> f64 {
    run();
    let mut t: Vec<f64> = (0..SAMPLES).map(|_| run()).collect();
    t.sort_by(f64::total_cmp);
    t[SAMPLES / 2]
}

fn main() {
    if !lbm_cuda::device_available() {
        eprintln!("gpu_interval: no CUDA device, nothing measured");
        return;
    }
    // `cargo bench` passes `--bench` and perhaps a filter: a case id part.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    for (id, text) in cases() {
        if filter.as_ref().is_some_and(|f| !id.contains(f.as_str())) {
            continue;
        }
        let resolved = Case::from_toml(&text).unwrap().resolve().unwrap();
        let exec = ExecConfig {
            tiles: resolved.tiles.clone(),
            observe_window_exchange: !resolved.lattice.bodies.is_empty(),
            ..ExecConfig::default()
        };
        let stepper = Stepper::new(CudaDriver::new(0).unwrap(), resolved.lattice, exec).unwrap();
        let intervals = 100;
        let interval = median(|| {
            let start = Instant::now();
            stepper.step(intervals).unwrap();
            start.elapsed().as_secs_f64()
        }) / intervals as f64;
        let plan = stepper.plan();
        // Level 0's even parity: every step of an interval once.
        let steps = plan.interval(0).to_vec();
        // Each step, and each member of a group alone.
        let timed = |driver: &mut CudaDriver, label: &str, action: &Action| -> lbm_core::Result<f64> {
            let copies = vec![action.clone(); COPIES];
            let plan = driver.prepare(&format!("gpu_interval.{label}"), &copies)?;
            let t = median(|| {
                driver.synchronize().unwrap();
                let start = Instant::now();
                driver.replay(plan).unwrap();
                driver.synchronize().unwrap();
                start.elapsed().as_secs_f64()
            }) / COPIES as f64;
            driver.release_plan(plan)?;
            Ok(t)
        };
        let times: Vec<(f64, Vec<f64>)> = stepper
            .with_device(|driver: &mut CudaDriver, _| {
                steps
                    .iter()
                    .map(|step| {
                        let members = match &step.action {
                            Action::Together(members) => members
                                .iter()
                                .map(|m| timed(driver, &step.name, m))
                                .collect::<lbm_core::Result<Vec<f64>>>()?,
                            _ => Vec::new(),
                        };
                        Ok((timed(driver, &step.name, &step.action)?, members))
                    })
                    .collect::<lbm_core::Result<Vec<_>>>()
            })
            .unwrap();
        let updates = stepper.hierarchy().cell_updates_per_interval();
        println!(
            "\ngpu_interval: {id}: interval {:.1} us ({:.3} G cell updates/s), {} steps",
            interval * 1e6,
            updates as f64 / interval / 1e9,
            steps.len()
        );
        println!("| step | launches | us alone | share of the interval |");
        println!("| --- | ---: | ---: | ---: |");
        for (step, (t, members)) in steps.iter().zip(&times) {
            println!(
                "| `{}` | {} | {:.1} | {:.1}% |",
                step.name,
                step.action.launches().len(),
                t * 1e6,
                100.0 * t / interval
            );
            let Action::Together(actions) = &step.action else {
                continue;
            };
            for (action, t) in actions.iter().zip(members) {
                let kernel = action.launches().first().map_or("?", |l| l.kernel.cuda_name());
                println!(
                    "| &nbsp;&nbsp;{kernel} alone | 1 | {:.1} | {:.1}% |",
                    t * 1e6,
                    100.0 * t / interval
                );
            }
        }
        let sum: f64 = times.iter().map(|(t, _)| t).sum();
        println!(
            "| all steps one after the other | | {:.1} | {:.1}% |",
            sum * 1e6,
            100.0 * sum / interval
        );
        // The settle plan, which a read after a step replays (not part of the interval).
        for step in &plan.settle[0] {
            let t = stepper
                .with_device(|driver: &mut CudaDriver, _| timed(driver, &step.name, &step.action))
                .unwrap();
            println!(
                "| (read) `{}` | 1 | {:.1} | {:.1}% |",
                step.name,
                t * 1e6,
                100.0 * t / interval
            );
        }
        stepper.close().unwrap();
    }
}
