//! Issue 12's CPU report: an ensemble of the refined cavity
//! (`cases/cavity-re100.toml`, each member's viscosity its own) as one fused
//! batch (`lbm_core::fused`, one launch per kernel per hop for all members on
//! one `CpuDriver`) against the lockstep runner's way (each member a
//! `Stepper` on its own `CpuDriver`, all begun, then all finished), in cell
//! updates per second over all members, measured in the same run (group
//! `cpu_fused`). Records go where `bench_record` puts them.
//!
//! Run: `cargo bench -p lockstep --bench ensemble`.

use std::process::ExitCode;
use std::time::Instant;

use bench_record::{Group, Run};
use criterion::{BenchmarkId, Criterion, Throughput};
use lbm_core::case::Case;

use lbm_core::member::{FixedSchedule, Member};
use lbm_core::{CpuDriver, ExecConfig, LatticeConfig, Stepper};

const CPU_FUSED: Group = Group {
    name: "cpu_fused",
    figures: &["fused"],
    ceiling: "lockstep",
    element_unit: "cell updates/s",
};

/// Intervals per timed advance.
const INTERVALS: u64 = 10;

/// Members in the batch.
const MEMBERS: usize = 16;

fn advance<M: Member>(members: &[M], iters: u64) -> std::time::Duration {
    let start = Instant::now();
    for _ in 0..iters {
        lockstep::advance_together(members, INTERVALS).unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let resolved = Case::from_toml(include_str!("../../../cases/cavity-re100.toml"))
        .unwrap()
        .resolve()
        .unwrap();
    let configs: Vec<(LatticeConfig, ExecConfig)> = (0..MEMBERS)
        .map(|k| {
            let mut lattice = resolved.lattice.clone();
            lattice.tau += 1e-3 * k as f64;
            let exec = ExecConfig {
                tiles: resolved.tiles.clone(),
                schedule: Some(FixedSchedule::new(INTERVALS, INTERVALS).unwrap()),
                ..ExecConfig::default()
            };
            (lattice, exec)
        })
        .collect();
    let lockstep: Vec<Stepper<CpuDriver>> = configs
        .iter()
        .map(|(l, e)| Stepper::new(CpuDriver::new(), l.clone(), e.clone()).unwrap())
        .collect();
    let fused = lbm_core::fused::batch(CpuDriver::new(), configs).unwrap();
    let updates = lockstep[0].hierarchy().cell_updates_per_interval() * INTERVALS * MEMBERS as u64;
    let mut group = c.benchmark_group(CPU_FUSED.name);
    group.sample_size(10);
    group.throughput(Throughput::Elements(updates));
    let param = format!("cavity-re100x{MEMBERS}");
    group.bench_function(BenchmarkId::new("fused", &param), |b| {
        b.iter_custom(|iters| advance(&fused, iters))
    });
    group.bench_function(BenchmarkId::new("lockstep", &param), |b| {
        b.iter_custom(|iters| advance(&lockstep, iters))
    });
    group.finish();
}

/// The benchmark, then the records of what it measured.
fn main() -> ExitCode {
    let run = Run::start(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"));
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    run.finish(&bench_record::cpu_device(), &[CPU_FUSED])
}
