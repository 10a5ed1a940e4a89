//! Where an interval's time goes: each step of a case's hop plan replayed on
//! its own, many times back to back as one CUDA graph, against the whole
//! interval (`Stepper::step`) in the same process. A step alone runs as it
//! does on the interval's critical path (after the one before it, with the
//! launch gap between them); a group's members run side by side as in the
//! interval, and each member of a group is also timed alone. The sum of the
//! steps against the interval shows what the interval's own concurrency
//! hides. The fused batches of the ensemble bench (`gpu_lockstep`: 256
//! cavities, 64 DFG 2D-2) are measured the same way, each step of the fused
//! interval as the batch's driver runs it, against the batch's advance.
//! Prints a table; writes no records (a share is not a rate). Prints a skip
//! notice without a CUDA device.
//!
//! Run: `cargo xtask gpu-pack`, then on the GPU machine
//! `bash gpu-pack/run.sh benches gpu_interval`.

use std::time::Instant;

use lbm_core::case::Case;
use lbm_core::device::Action;
use lbm_core::member::Member;
use lbm_core::{Driver, ExecConfig, Stepper};
use lbm_cuda::CudaDriver;

mod dfg;
mod ensemble;

/// The cases: DFG 2D-1 with its three levels at 640 cells per diameter on
/// the finest and the same channel uniform at 640 (the two figures of
/// `gpu_dfg`), and the refined cavity.
fn cases() -> Vec<(&'static str, String)> {
    vec![
        ("dfg-2d1-three-levels-640", dfg::dfg_2d1(160, true)),
        ("dfg-2d1-uniform-640", dfg::dfg_2d1(640, false)),
        (
            "cavity-re100",
            include_str!("../../../cases/cavity-re100.toml").to_owned(),
        ),
    ]
}

/// The fused batches of `gpu_lockstep`: the case, its base resolution and
/// lattice velocity where the bench changes them, and the member count.
fn batches() -> Vec<(&'static str, &'static str, Option<f64>, usize)> {
    vec![
        (
            "fused-cavity-re100x256",
            include_str!("../../../cases/cavity-re100.toml"),
            None,
            256,
        ),
        (
            "fused-dfg-2d2-40x64",
            include_str!("../../../cases/dfg-2d2.toml"),
            Some(10.0),
            64,
        ),
    ]
}

/// Intervals per timed advance of a whole interval.
const INTERVALS: u64 = 100;

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
    // `cargo bench` passes `--bench` and perhaps a filter: part of this
    // bench's name (`run.sh benches gpu_interval` passes it to every bench),
    // which selects every case, or part of a case id.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |id: &str| {
        filter
            .as_ref()
            .is_none_or(|f| "gpu_interval".contains(f.as_str()) || id.contains(f.as_str()))
    };
    for (id, text) in cases() {
        if !wanted(id) {
            continue;
        }
        let resolved = Case::from_toml(&text).unwrap().resolve().unwrap();
        let exec = ExecConfig {
            tiles: resolved.tiles.clone(),
            observe_window_exchange: !resolved.lattice.bodies.is_empty(),
            ..ExecConfig::default()
        };
        let stepper = Stepper::new(CudaDriver::new(0).unwrap(), resolved.lattice, exec).unwrap();
        let interval = median(|| {
            let start = Instant::now();
            stepper.step(INTERVALS).unwrap();
            start.elapsed().as_secs_f64()
        }) / INTERVALS as f64;
        let plan = stepper.plan();
        // Level 0's even parity: every step of an interval once.
        let steps: Vec<(String, Action)> = plan
            .interval(0)
            .iter()
            .map(|s| (s.name.clone(), s.action.clone()))
            .collect();
        let settle: Vec<(String, Action)> = plan.settle[0]
            .iter()
            .map(|s| (s.name.clone(), s.action.clone()))
            .collect();
        let updates = stepper.hierarchy().cell_updates_per_interval();
        stepper
            .with_device(|driver: &mut CudaDriver, _| {
                // Graphs of several intervals: what the launch of one graph per
                // interval costs.
                for k in [2usize, 4, 8] {
                    let actions: Vec<Action> = (0..k).flat_map(|j| plan.actions(j as u64)).collect();
                    let many = driver.prepare("gpu_interval.intervals", &actions)?;
                    let t = median(|| {
                        driver.synchronize().unwrap();
                        let start = Instant::now();
                        for _ in 0..INTERVALS as usize / k {
                            driver.replay(many).unwrap();
                        }
                        driver.synchronize().unwrap();
                        start.elapsed().as_secs_f64()
                    }) / (INTERVALS as usize / k * k) as f64;
                    driver.release_plan(many)?;
                    println!(
                        "gpu_interval: {id}: {k} intervals per graph: {:.1} us per interval (one per graph: {:.1})",
                        t * 1e6,
                        interval * 1e6
                    );
                }
                report(driver, id, interval, updates, &steps, &settle);
                Ok::<(), lbm_core::Error>(())
            })
            .unwrap();
        stepper.close().unwrap();
    }
    for (id, text, resolution, n) in batches() {
        if !wanted(id) {
            continue;
        }
        let batch = lbm_core::fused::batch(
            CudaDriver::new(0).unwrap(),
            ensemble::members(text, resolution, n, INTERVALS),
        )
        .unwrap();
        let interval = median(|| {
            let start = Instant::now();
            lockstep::advance_together(&batch, INTERVALS).unwrap();
            start.elapsed().as_secs_f64()
        }) / INTERVALS as f64;
        let names: Vec<String> = batch[0].plan().interval(0).iter().map(|s| s.name.clone()).collect();
        let updates = batch[0].hierarchy().cell_updates_per_interval() * n as u64;
        batch[0]
            .with_device(|driver, _| {
                driver
                    .with_fused_plan(
                        lbm_core::stepper::INTERVAL_PLANS[0],
                        |device: &mut CudaDriver, fused| {
                            let steps: Vec<(String, Action)> =
                                fused.iter().map(|(k, a)| (names[*k].clone(), a.clone())).collect();
                            report(device, id, interval, updates, &steps, &[]);
                        },
                    )
                    .expect("every member prepared its intervals");
                Ok::<(), lbm_core::Error>(())
            })
            .unwrap();
        batch.iter().for_each(|m| Member::close(m).unwrap());
    }
}

/// Times each of `steps` alone on `driver` (and each member of a group alone)
/// and prints the table against the whole `interval` (seconds), then the
/// `settle` steps a read replays.
fn report(
    driver: &mut CudaDriver,
    id: &str,
    interval: f64,
    updates: u64,
    steps: &[(String, Action)],
    settle: &[(String, Action)],
) {
    let mut timed = |label: &str, action: &Action| -> f64 {
        let copies = vec![action.clone(); COPIES];
        let plan = driver.prepare(&format!("gpu_interval.{label}"), &copies).unwrap();
        let t = median(|| {
            driver.synchronize().unwrap();
            let start = Instant::now();
            driver.replay(plan).unwrap();
            driver.synchronize().unwrap();
            start.elapsed().as_secs_f64()
        }) / COPIES as f64;
        driver.release_plan(plan).unwrap();
        t
    };
    println!(
        "\ngpu_interval: {id}: interval {:.1} us ({:.3} G cell updates/s), {} steps",
        interval * 1e6,
        updates as f64 / interval / 1e9,
        steps.len()
    );
    println!("| step | launches | us alone | share of the interval |");
    println!("| --- | ---: | ---: | ---: |");
    let share = |t: f64| format!("{:.1} | {:.1}%", t * 1e6, 100.0 * t / interval);
    let mut sum = 0.0;
    for (name, action) in steps {
        let t = timed(name, action);
        sum += t;
        println!("| `{name}` | {} | {} |", action.launches().len(), share(t));
        let Action::Together(members) = action else {
            continue;
        };
        for member in members {
            let kernel = member.launches().first().map_or("?", |l| l.kernel.cuda_name());
            let t = timed(name, member);
            println!(
                "| &nbsp;&nbsp;{kernel} alone | {} | {} |",
                member.launches().len(),
                share(t)
            );
        }
    }
    println!("| all steps one after the other | | {} |", share(sum));
    // The settle plan, which a read after a step replays (not part of the interval).
    for (name, action) in settle {
        let t = timed(name, action);
        println!("| (read) `{name}` | {} | {} |", action.launches().len(), share(t));
    }
}
