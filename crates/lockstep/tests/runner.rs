//! The lockstep runner's contract (DESIGN.md §6) on the CPU backend and the
//! recording mock: members equal to plain runs bit for bit, one launch per
//! member per kernel per hop, every refusal naming the member and what
//! differs, the invalid norm of a diverged member, statistics on a batch
//! axis, per-member observations and ledgers, and a close that releases
//! every member when one fails.

mod common;

use std::collections::BTreeMap;

use lbm_core::domain::geometry::Shape;
use lbm_core::domain::hierarchy::{HierarchySpec, Rect};
use lbm_core::lattice::Moments;
use lbm_core::ledger::MemoryLedger;
use lbm_core::member::{FixedSchedule, Member, MemberIdentity, MemberObservation, Statistic, StatsSpec};
use lbm_core::{Boundary, CpuDriver, Driver, Error, ExecConfig, Kernel, LatticeConfig, Status, Stepper};
use lockstep::{LockstepError, LockstepRunner};
use mock_driver::{EventKind, MockDriver};
use ndarray::ArrayD;

/// A channel with an inflow, a refined patch around a cylinder of radius
/// `radius`, and the given base τ and inflow velocity: what a sweep varies.
fn channel(tau: f64, velocity: f64, angle: f64) -> LatticeConfig {
    // A square turned by `angle` (base units): a body whose angle a polar
    // would sweep.
    let (s, c) = angle.sin_cos();
    let corner = |x: f64, y: f64| [20.0 + 3.0 * (c * x - s * y), 12.0 + 3.0 * (s * x + c * y)];
    let square = Shape::Polygon {
        points: vec![
            corner(-1.0, -1.0),
            corner(1.0, -1.0),
            corner(1.0, 1.0),
            corner(-1.0, 1.0),
        ],
    };
    common::refined_channel(tau, velocity, 20.0, square)
}

fn stats_spec() -> StatsSpec {
    common::stats_spec()
}

fn exec(schedule: FixedSchedule) -> ExecConfig {
    common::exec(schedule, stats_spec())
}

fn schedule() -> FixedSchedule {
    FixedSchedule::new(6, 3).unwrap().with_diagnostics_every(2).unwrap()
}

/// The parameters of the three members of most tests: viscosity, inflow
/// and the body's angle differ.
const PARAMETERS: [(f64, f64, f64); 3] = [(0.6, 0.04, 0.0), (0.7, 0.05, 0.3), (0.8, 0.03, 0.6)];

fn member<D: Driver>(driver: D, (tau, velocity, angle): (f64, f64, f64)) -> Stepper<D> {
    Stepper::new(driver, channel(tau, velocity, angle), exec(schedule())).unwrap()
}

fn refusal<M: Member>(members: Vec<M>) -> String {
    match LockstepRunner::new(members) {
        Ok(_) => panic!("the batch was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn members_match_plain_runs_bit_for_bit_and_keep_their_own_norms() {
    let members: Vec<_> = PARAMETERS.iter().map(|p| member(CpuDriver::new(), *p)).collect();
    let mut runner = LockstepRunner::new(members).unwrap();
    let mut stops = Vec::new();
    while let Some(stop) = runner.advance().unwrap() {
        stops.push(stop);
    }
    assert_eq!(
        stops,
        vec![2, 3, 4, 6],
        "every save point and diagnostic point, in order"
    );
    assert_eq!(runner.position(), 6);

    let reports = runner.observe_members().unwrap();
    for (i, parameters) in PARAMETERS.iter().enumerate() {
        // The same member alone, stepped with the interval count of the schedule.
        let alone = member(CpuDriver::new(), *parameters);
        alone.start_exchange_window().unwrap();
        alone.step(6).unwrap();
        let report = &reports[i];
        assert_eq!(report.index, i);
        for (level, patches) in alone.hierarchy().levels.iter().enumerate() {
            for p in 0..patches.len() {
                let (batched, own) = (
                    runner.members()[i].download(level, p).unwrap(),
                    alone.download(level, p).unwrap(),
                );
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&batched), bits(&own), "member {i}, populations of L{level}.p{p}");
            }
        }
        assert_eq!(report.observation.step_count, 6);
        assert_eq!(
            report.observation.mass.to_bits(),
            alone.total_mass().unwrap().to_bits(),
            "member {i}"
        );
        let window = alone.read_exchange_window(0).unwrap();
        assert_eq!(report.observation.windows, vec![window], "member {i}");
        let steps: Vec<u64> = report.norms.iter().map(|r| r.step).collect();
        assert_eq!(steps, vec![2, 4, 6], "member {i}'s own diagnostic points");
        assert!(report.norms.iter().all(|r| r.norm > 0.0 && r.norm.is_finite()));
        assert_eq!(report.rows.iter().map(|r| r.step).collect::<Vec<_>>(), vec![3, 6]);
        let last = &report.rows[1].values;
        let own = alone.stats(&stats_spec()).unwrap();
        assert_eq!(last, &own, "member {i}'s save-point statistics are its own");
    }
    // Each history is the member's own: the members differ, so do their norms.
    assert_ne!(reports[0].norms[2].norm, reports[1].norms[2].norm);
    let latest: Vec<f64> = reports.iter().map(|r| r.norms[2].norm).collect();
    assert_eq!(runner.max_norm(), latest.iter().copied().reduce(f64::max));
    runner.close().unwrap();
}

#[test]
fn stats_concatenate_members_on_a_leading_batch_axis() {
    let members: Vec<_> = PARAMETERS.iter().map(|p| member(CpuDriver::new(), *p)).collect();
    let mut runner = LockstepRunner::new(members).unwrap();
    runner.advance().unwrap();
    let batch = runner.stats(&stats_spec()).unwrap();
    let reports = runner.observe_members().unwrap();
    assert_eq!(batch["mass"].shape(), &[3, 1]);
    assert_eq!(batch["body0.exchange"].shape(), &[3, 3]);
    let field = &batch["L1.p0.ux"];
    assert_eq!(field.shape()[0], 3);
    assert_eq!(
        field.shape()[1..],
        [24 * 2, 24 * 2],
        "the patch's active region at level 1"
    );
    for (i, report) in reports.iter().enumerate() {
        assert_eq!(batch["mass"][[i, 0]].to_bits(), report.observation.mass.to_bits());
    }
    assert!(matches!(runner.observe(), Err(LockstepError::ObserveRefused)));
    let message = runner.observe().unwrap_err().to_string();
    assert!(message.contains("observe_members"), "{message}");
    runner.close().unwrap();
}

#[test]
fn lockstep_launches_once_per_member_per_kernel_per_hop() {
    let handles: Vec<_> = (0..3).map(|_| MockDriver::new()).map(|d| (d.handle(), d)).collect();
    let members: Vec<_> = handles
        .into_iter()
        .zip(PARAMETERS)
        .map(|((handle, driver), p)| (handle, member(driver, p)))
        .collect();
    // The hops of one interval: one stream_collide launch per patch per hop.
    let plan = members[0].1.plan();
    let hops = |kernels: &[Kernel]| kernels.iter().filter(|k| **k == Kernel::StreamCollide).count();
    let planned: Vec<Kernel> = plan
        .interval(0)
        .iter()
        .flat_map(|s| s.action.launches())
        .map(|l| l.kernel)
        .collect();
    let handles: Vec<_> = members.iter().map(|(h, _)| h.clone()).collect();
    handles.iter().for_each(|h| h.clear_log());
    let mut runner = LockstepRunner::new(members.into_iter().map(|(_, m)| m).collect()).unwrap();
    let settle = plan.settle[0].iter().flat_map(|s| s.action.launches()).count();
    assert!(settle > 0, "the member's restriction leaves a hole");
    // Up to the first stop (a diagnostic point at interval 2): one plain
    // interval and the one the norm covers, one replay each, and the settle
    // before each of the norm's two reads.
    assert_eq!(runner.advance().unwrap(), Some(2));
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(
            h.count(EventKind::Replay),
            2 + 2,
            "member {i}: one replay per interval and per settle on its own driver"
        );
        let kernels = h.launch_kernels();
        assert_eq!(
            hops(&kernels),
            2 * hops(&planned),
            "member {i}: one stream_collide per patch per hop of each interval, on its own driver"
        );
        for kernel in [Kernel::FillGhost, Kernel::RestrictToParent, Kernel::AccumulateExchange] {
            let count = |k: &[Kernel]| k.iter().filter(|x| **x == kernel).count();
            let settled = match kernel {
                Kernel::RestrictToParent => 2 * settle,
                _ => 0,
            };
            assert_eq!(count(&kernels), 2 * count(&planned) + settled, "member {i}: {kernel:?}");
        }
    }
    runner.close().unwrap();
}

#[test]
fn an_empty_batch_and_mixed_backends_are_refused() {
    let none: Vec<Stepper<CpuDriver>> = Vec::new();
    assert!(matches!(LockstepRunner::new(none), Err(LockstepError::Empty)));
    let boxed = |d: Box<dyn Driver>| member(d, PARAMETERS[0]);
    let message = refusal(vec![
        boxed(Box::new(CpuDriver::new())),
        boxed(Box::new(MockDriver::new())),
    ]);
    assert!(
        message.contains("mixed backends") && message.contains("member 1") && message.contains("mock"),
        "{message}"
    );
}

#[test]
fn an_advanced_member_or_one_without_a_schedule_is_refused() {
    let advanced = member(CpuDriver::new(), PARAMETERS[1]);
    advanced.step(1).unwrap();
    let message = refusal(vec![member(CpuDriver::new(), PARAMETERS[0]), advanced]);
    assert!(
        message.contains("member 1") && message.contains("already advanced"),
        "{message}"
    );

    let plain = Stepper::new(CpuDriver::new(), channel(0.6, 0.04, 0.0), ExecConfig::default()).unwrap();
    let message = refusal(vec![member(CpuDriver::new(), PARAMETERS[0]), plain]);
    assert!(
        message.contains("member 1") && message.contains("schedule"),
        "{message}"
    );
}

#[test]
fn every_difference_in_what_must_agree_is_refused_naming_it() {
    let base = || (channel(0.6, 0.04, 0.0), exec(schedule()));
    let mut cases: Vec<(&str, LatticeConfig, ExecConfig)> = Vec::new();
    let (mut lattice, e) = base();
    lattice.hierarchy.levels = vec![vec![Rect::new(8, 0, 36, 24)]];
    cases.push(("hierarchy", lattice, e));
    let (mut lattice, e) = base();
    lattice.hierarchy = HierarchySpec {
        base: [56, 24],
        levels: lattice.hierarchy.levels.clone(),
    };
    cases.push(("hierarchy", lattice, e));
    let (lattice, mut e) = base();
    e.tiles = vec![Some([8, 8]); 2];
    cases.push(("storage tile shape", lattice, e));
    let (mut lattice, e) = base();
    lattice.boundaries[3] = Boundary::FreeSlip;
    cases.push(("boundary kinds", lattice, e));
    let (mut lattice, e) = base();
    lattice.bodies[0].shape = Shape::Circle {
        center: [24.0, 12.0],
        radius: 4.0,
    };
    cases.push(("bodies", lattice, e));
    let (lattice, mut e) = base();
    e.observe_window_exchange = false;
    cases.push(("observables", lattice, e));
    let (lattice, mut e) = base();
    e.schedule = Some(FixedSchedule::new(8, 3).unwrap().with_diagnostics_every(2).unwrap());
    cases.push(("schedule", lattice, e));
    let (lattice, mut e) = base();
    e.schedule = Some(FixedSchedule::new(6, 2).unwrap());
    cases.push(("save points", lattice, e));
    let (lattice, mut e) = base();
    e.schedule = Some(FixedSchedule::new(6, 3).unwrap());
    cases.push(("diagnostics period", lattice, e));
    let (lattice, mut e) = base();
    e.stats = StatsSpec {
        statistics: vec![Statistic::Mass],
    };
    cases.push(("statistics request", lattice, e));
    for (what, lattice, e) in cases {
        let odd = Stepper::new(CpuDriver::new(), lattice, e).unwrap();
        let members = vec![
            member(CpuDriver::new(), PARAMETERS[0]),
            member(CpuDriver::new(), PARAMETERS[1]),
            odd,
        ];
        let message = refusal(members);
        assert!(
            message.contains("member 2")
                && message.contains("differs from member 0")
                && message.contains(what)
                && !message.contains("Some("),
            "{what}: {message}"
        );
    }
    // Physical parameters may differ: viscosity, inflow, the body's angle.
    let members: Vec<_> = PARAMETERS.iter().map(|p| member(CpuDriver::new(), *p)).collect();
    LockstepRunner::new(members).unwrap().close().unwrap();
}

#[test]
fn a_diverged_member_is_named_with_its_invalid_norm() {
    let members: Vec<_> = PARAMETERS.iter().map(|p| member(CpuDriver::new(), *p)).collect();
    // Member 1 starts with one poisoned cell, which spreads.
    members[1]
        .initialize(|level, x, y| match (level, x < 2.0 && y < 2.0) {
            (0, true) => Moments {
                delta_rho: f32::NAN,
                ..Moments::default()
            },
            _ => Moments::default(),
        })
        .unwrap();
    let mut runner = LockstepRunner::new(members).unwrap();
    let error = runner.advance().unwrap_err();
    let message = error.to_string();
    match error {
        LockstepError::InvalidNorm { index, value, step } => {
            assert_eq!((index, step), (1, 2));
            assert!(value.is_nan(), "{value}");
        }
        other => panic!("expected the invalid norm of member 1, got {other:?}"),
    }
    assert!(message.contains("member 1") && message.contains("NaN"), "{message}");
    // The refused stop records no norm for any member.
    assert!(runner.norms().iter().all(Vec::is_empty), "{:?}", runner.norms());
    runner.close().unwrap();
}

/// On recording drivers of different capacities, so that the free memory
/// (each one's capacity less what it holds, steady, unlike a host's) names
/// the member it came from.
#[test]
fn the_memory_ledger_keys_each_member_and_free_memory_comes_from_the_first() {
    let members: Vec<_> = PARAMETERS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let driver = MockDriver::new();
            driver.handle().set_capacity((1 + i as u64) << 30);
            member(driver, *p)
        })
        .collect();
    let own: Vec<MemoryLedger> = members.iter().map(|m| m.memory_ledger()).collect();
    let free = members[0].free_device_memory().unwrap();
    assert_eq!(free, (1 << 30) - own[0].total());
    let mut runner = LockstepRunner::new(members).unwrap();
    let ledger = runner.memory_ledger();
    assert_eq!(ledger.total(), own.iter().map(MemoryLedger::total).sum::<u64>());
    for (i, ledger_i) in own.iter().enumerate() {
        for (name, bytes) in &ledger_i.entries {
            assert_eq!(ledger.entries[&format!("member/{i}/{name}")], *bytes);
        }
    }
    assert_eq!(runner.available_device_memory().unwrap(), free);
    runner.close().unwrap();
    assert!(matches!(runner.available_device_memory(), Err(LockstepError::Closed)));
}

/// A member whose release fails, around a real stepper.
struct FailingClose {
    stepper: Stepper<CpuDriver>,
    fail: bool,
}

impl Member for FailingClose {
    fn backend(&self) -> &'static str {
        Member::backend(&self.stepper)
    }
    fn step_count(&self) -> u64 {
        Member::step_count(&self.stepper)
    }
    fn identity(&self) -> MemberIdentity {
        self.stepper.identity()
    }
    fn open_window(&self) -> lbm_core::Result<()> {
        self.stepper.open_window()
    }
    fn begin_advance(&self, intervals: u64) -> lbm_core::Result<()> {
        self.stepper.begin_advance(intervals)
    }
    fn finish_advance(&self) -> lbm_core::Result<()> {
        self.stepper.finish_advance()
    }
    fn velocity(&self) -> lbm_core::Result<Vec<f32>> {
        self.stepper.velocity()
    }
    fn stats(&self, spec: &StatsSpec) -> lbm_core::Result<BTreeMap<String, ArrayD<f64>>> {
        Member::stats(&self.stepper, spec)
    }
    fn observe(&self) -> lbm_core::Result<MemberObservation> {
        self.stepper.observe()
    }
    fn memory_ledger(&self) -> MemoryLedger {
        Member::memory_ledger(&self.stepper)
    }
    fn available_device_memory(&self) -> lbm_core::Result<u64> {
        self.stepper.available_device_memory()
    }
    fn close(&self) -> lbm_core::Result<()> {
        Member::close(&self.stepper)?;
        match self.fail {
            true => Err(Error::parameter("close", "member", "a release that succeeds")),
            false => Ok(()),
        }
    }
}

#[test]
fn close_releases_every_member_and_reports_every_failure() {
    let members: Vec<_> = PARAMETERS
        .iter()
        .zip([false, true, true])
        .map(|(p, fail)| FailingClose {
            stepper: member(CpuDriver::new(), *p),
            fail,
        })
        .collect();
    let mut runner = LockstepRunner::new(members).unwrap();
    runner.advance().unwrap();
    match runner.close() {
        Err(LockstepError::Close { failures }) => {
            assert_eq!(failures.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2]);
        }
        other => panic!("expected the failures of members 1 and 2, got {other:?}"),
    }
    // Every member was released, those after the first failure too.
    for (i, m) in runner.members().iter().enumerate() {
        assert_eq!(m.stepper.status(), Status::Closed, "member {i}");
    }
    assert!(matches!(runner.close(), Err(LockstepError::Closed)));
    assert!(matches!(runner.advance(), Err(LockstepError::Closed)));
    assert!(matches!(runner.observe_members(), Err(LockstepError::Closed)));
}
