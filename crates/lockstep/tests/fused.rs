//! A fused batch (`lbm_core::fused`) under the lockstep runner: the same
//! results as the lockstep baseline bit for bit on a refined channel with a
//! body, one launch per kernel per hop for every member together, the
//! runner's refusals and per-member ledgers, and members of different shapes
//! refused naming the member.

mod common;

use lbm_core::domain::geometry::Shape;
use lbm_core::fused::FusedMember;
use lbm_core::member::{FieldQuantity, FixedSchedule, Member, Statistic, StatsSpec};
use lbm_core::{CpuDriver, Driver, Error, ExecConfig, Kernel, LatticeConfig, Stepper};
use lockstep::{LockstepError, LockstepRunner};
use mock_driver::{Event, EventKind, MockDriver};

/// A channel with an inflow ramp and a refined patch around a cylinder at
/// `center_x`; `tau` and `velocity` are what the sweep varies.
fn channel(tau: f64, velocity: f64, center_x: f64) -> LatticeConfig {
    let cylinder = Shape::Circle {
        center: [center_x, 12.3],
        radius: 3.2,
    };
    common::refined_channel(tau, velocity, 5.0, cylinder)
}

/// The common statistics and the base's density.
fn stats_spec() -> StatsSpec {
    let mut spec = common::stats_spec();
    spec.statistics.push(Statistic::Field {
        level: 0,
        patch: 0,
        quantity: FieldQuantity::DeltaRho,
    });
    spec
}

fn exec() -> ExecConfig {
    let schedule = FixedSchedule::new(40, 20).unwrap().with_diagnostics_every(10).unwrap();
    common::exec(schedule, stats_spec())
}

/// Viscosity and inflow differ; the geometry is one.
const PARAMETERS: [(f64, f64); 3] = [(0.6, 0.04), (0.7, 0.05), (0.8, 0.03)];

fn configs() -> Vec<(LatticeConfig, ExecConfig)> {
    PARAMETERS
        .iter()
        .map(|&(tau, u)| (channel(tau, u, 20.0), exec()))
        .collect()
}

fn fused<D: Driver>(driver: D) -> Vec<FusedMember<D>> {
    lbm_core::fused::batch(driver, configs()).unwrap()
}

fn lockstep() -> LockstepRunner<Stepper<CpuDriver>> {
    let members = configs()
        .into_iter()
        .map(|(l, e)| Stepper::new(CpuDriver::new(), l, e).unwrap())
        .collect();
    LockstepRunner::new(members).unwrap()
}

#[test]
fn a_fused_batch_reproduces_the_lockstep_runner_bit_for_bit() {
    let mut baseline = lockstep();
    let mut batch = LockstepRunner::new(fused(CpuDriver::new())).unwrap();
    baseline.run().unwrap();
    batch.run().unwrap();
    assert_eq!(batch.position(), 40);
    // Every member's own norms, to the bit, and not all alike.
    assert_eq!(batch.norms(), baseline.norms());
    assert_eq!(batch.norms()[0].len(), 4);
    assert_ne!(
        batch.norms()[0],
        batch.norms()[1],
        "members differ in viscosity and inflow"
    );
    let (ours, theirs) = (batch.observe_members().unwrap(), baseline.observe_members().unwrap());
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a.observation, b.observation, "member {}: mass and windows", a.index);
        assert_eq!(a.rows, b.rows, "member {}: statistics at each save point", a.index);
        assert!(
            a.observation.windows[0].force[0] != 0.0,
            "the body feels the flow: {:?}",
            a.observation.windows
        );
    }
    let spec = stats_spec();
    let (a, b) = (batch.stats(&spec).unwrap(), baseline.stats(&spec).unwrap());
    for (name, values) in &a {
        assert_eq!(values.shape()[0], 3, "{name}: a leading batch axis");
        let same = values
            .iter()
            .zip(b[name].iter())
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{name}: fused and lockstep differ");
    }
    // A member's own plans (here the health check, its memset on the
    // member's copy) run per member.
    for m in batch.members() {
        assert_eq!(m.check_health(0.5).unwrap(), None);
        assert!(m.check_health(1e-9).unwrap().is_some(), "a tiny limit finds a cell");
    }
    batch.close().unwrap();
    baseline.close().unwrap();
}

#[test]
fn a_fused_batch_launches_each_kernel_once_per_hop_for_every_member() {
    let driver = MockDriver::executing();
    let log = driver.handle();
    // One member alone, to count its launches per interval.
    let alone = MockDriver::new();
    let alone_log = alone.handle();
    let (lattice, exec) = configs().remove(0);
    let single = Stepper::new(alone, lattice, exec).unwrap();
    alone_log.clear_log();
    single.step(10).unwrap();
    let per_member = alone_log.launch_kernels();
    let settle: Vec<Kernel> = single.plan().settle[0]
        .iter()
        .flat_map(|s| s.action.launches())
        .map(|l| l.kernel)
        .collect();
    assert!(!settle.is_empty(), "the member's restriction leaves a hole");

    let members = fused(driver);
    log.clear_log();
    let mut runner = LockstepRunner::new(members).unwrap();
    // The first stop: a diagnostic point at interval 10, as two advances
    // (nine intervals, then the one the norm covers).
    assert_eq!(runner.advance().unwrap(), Some(10));
    let events = log.log();
    // The kernels of the batch launches (`true`) or of the plain ones.
    let launched = |batched: bool| -> Vec<Kernel> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::BatchLaunch { kernel, .. } if batched => Some(*kernel),
                Event::Launch { kernel, .. } if !batched => Some(*kernel),
                _ => None,
            })
            .collect()
    };
    let kernels = launched(true);
    assert_eq!(
        kernels, per_member,
        "the batch launches what one member launches, once for all three"
    );
    assert!(kernels.contains(&Kernel::RestrictToParent) && kernels.contains(&Kernel::AccumulateExchange));
    // The norm reads each member's refined base grid before and after the
    // interval it covers; each read settles that member on its own copy.
    assert_eq!(
        launched(false),
        settle.repeat(2 * 3),
        "two settles of each of the three members"
    );
    assert_eq!(
        log.count(EventKind::Replay),
        10 + 2 * 3,
        "one replay per interval, one per member's settle"
    );
    assert!(alone_log.count(EventKind::Together) > 0);
    assert_eq!(
        log.count(EventKind::Together),
        alone_log.count(EventKind::Together),
        "each group of a member's launches is a group of batches"
    );
    let rendered = log.render();
    assert!(
        rendered
            .lines()
            .filter(|l| l.contains("launch ") && !l.contains("launch restrict_to_parent "))
            .all(|l| l.contains("_batch x3")),
        "every launch but the settles' is a batch of the three members"
    );
    let first_interval: String = rendered
        .lines()
        .skip_while(|l| !l.starts_with("replay"))
        .skip(1)
        .take_while(|l| !l.starts_with("replay"))
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("fused_interval", first_interval);
    runner.close().unwrap();
}

#[test]
fn the_runner_refuses_fused_members_as_it_refuses_steppers() {
    let mut configs = configs();
    configs[2].1.schedule = Some(FixedSchedule::new(40, 10).unwrap().with_diagnostics_every(2).unwrap());
    let members = lbm_core::fused::batch(CpuDriver::new(), configs).unwrap();
    let message = LockstepRunner::new(members).err().expect("refused").to_string();
    assert!(
        message.contains("member 2") && message.contains("save points"),
        "{message}"
    );

    // A member advanced before it joins the runner.
    let members = fused(CpuDriver::new());
    members.iter().for_each(|m| m.begin_advance(1).unwrap());
    members.iter().for_each(|m| m.finish_advance().unwrap());
    assert!(matches!(
        LockstepRunner::new(members),
        Err(LockstepError::Advanced {
            index: 0,
            step_count: 1
        })
    ));
}

/// Members whose bodies lie otherwise (moved, larger, turned: the sweeps of
/// an aerofoil's polar) have lists, links and wall tables of their own
/// lengths: the batch lays each such buffer out at the largest member's size
/// and launches the list kernel with the largest member's grid, and every
/// member computes what it computes in lockstep, bit for bit.
#[test]
fn members_whose_bodies_lie_otherwise_run_fused_with_the_lockstep_bits() {
    let square = |turn: f64| {
        let (s, c) = turn.to_radians().sin_cos();
        let corners = [[-3.0, -3.0], [3.0, -3.0], [3.0, 3.0], [-3.0, 3.0]];
        Shape::Polygon {
            points: corners
                .iter()
                .map(|[x, y]| [20.5 + c * x - s * y, 12.3 + s * x + c * y])
                .collect(),
        }
    };
    let moved = match square(10.0) {
        Shape::Polygon { points } => Shape::Polygon {
            points: points.iter().map(|[x, y]| [x + 2.6, y - 0.4]).collect(),
        },
        _ => unreachable!(),
    };
    let bodies = [square(0.0), square(20.0), square(37.0), moved];
    let members: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(k, body)| {
            let mut lattice = channel(0.6 + 0.05 * k as f64, 0.04, 20.0);
            lattice.bodies[0].shape = body;
            (lattice, exec())
        })
        .collect();
    let mut baseline = lockstep_of(&members);
    baseline.run().unwrap();
    // The host splits each member's update (a list around the body), the
    // mock updates it whole.
    let mock = MockDriver::executing();
    let log = mock.handle();
    let mut lists_differ = Vec::new();
    for driver in [Box::new(CpuDriver::new()) as Box<dyn Driver>, Box::new(mock)] {
        let sizes = lbm_core::fused::check(&members, driver.split_min_cells()).unwrap();
        let batch = lbm_core::fused::batch(driver, members.clone()).unwrap();
        // Their body links differ in number: each member's copy is as long
        // as its own, the allocation's stride the largest.
        let links: Vec<usize> = batch
            .iter()
            .map(|m| m.memory_ledger().entries["L1.p0.links"] as usize)
            .collect();
        assert!(links.iter().any(|l| *l != links[0]), "{links:?}");
        assert_eq!(sizes.0["L1.p0.links"], *links.iter().max().unwrap());
        let list_grids: Vec<Vec<[u32; 3]>> = batch
            .iter()
            .map(|m| {
                m.plan()
                    .actions(0)
                    .iter()
                    .flat_map(|a| a.launches())
                    .filter(|l| l.kernel == Kernel::StreamCollide)
                    .map(|l| l.grid)
                    .collect()
            })
            .collect();
        let mut fused = LockstepRunner::new(batch).unwrap();
        fused.run().unwrap();
        assert_eq!(fused.norms(), baseline.norms());
        let (a, b) = (fused.observe_members().unwrap(), baseline.observe_members().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.observation, y.observation, "member {}: mass and windows", x.index);
            assert_eq!(x.rows, y.rows, "member {}: statistics at each save point", x.index);
        }
        fused.close().unwrap();
        lists_differ.push(list_grids.iter().any(|g| *g != list_grids[0]));
        if lists_differ.len() == 1 {
            continue;
        }
        // Updated whole, the launches are one grid a kernel; one launch a
        // kernel for all four, the exchange among them.
        let batched: Vec<Kernel> = log
            .log()
            .iter()
            .filter_map(|e| match e {
                Event::BatchLaunch { kernel, members, .. } if *members == 4 => Some(*kernel),
                _ => None,
            })
            .collect();
        assert!(batched.contains(&Kernel::AccumulateExchange), "{batched:?}");
    }
    assert_eq!(
        lists_differ,
        [true, false],
        "the host's lists differ in length; the mock has none"
    );
    baseline.close().unwrap();
}

#[test]
fn members_of_another_shape_are_refused_naming_the_member() {
    let mut configs = configs();
    // A larger refinement patch: other launches over it.
    configs[1].0.hierarchy.levels = vec![vec![lbm_core::domain::hierarchy::Rect::new(8, 0, 36, 24)]];
    let refused = lbm_core::fused::batch(CpuDriver::new(), configs.clone())
        .err()
        .expect("refused");
    let message = refused.to_string();
    assert!(matches!(refused, Error::FusedShape { member: 1, .. }), "{message}");
    assert!(
        message.contains("its step") && message.contains("lockstep"),
        "{message}"
    );

    // A bad member is named too.
    let mut configs = self::configs();
    configs[2].0.tau = 0.5;
    let refused = lbm_core::fused::batch(CpuDriver::new(), configs)
        .err()
        .expect("refused");
    assert!(matches!(refused, Error::FusedMember { member: 2, .. }), "{refused}");
}

#[test]
fn a_fused_batch_advances_only_as_a_whole() {
    let members = fused(CpuDriver::new());
    members.iter().for_each(|m| m.begin_advance(2).unwrap());
    assert!(members.iter().all(|m| m.finish_advance().is_ok()));
    assert!(members.iter().all(|m| m.step_count() == 2));
    assert!(members[1].velocity().is_ok());
    // A member that waits before the others began: its intervals are still
    // queued, and it fails saying why.
    members[0].begin_advance(1).unwrap();
    let early = members[0].finish_advance().unwrap_err();
    assert!(
        early.to_string().contains("every member of the fused batch has begun"),
        "{early}"
    );
    assert!(matches!(members[0].velocity(), Err(Error::Failed { .. })));
}

#[test]
fn a_member_that_closes_leaves_the_batch_and_the_others_go_on() {
    let members = fused(CpuDriver::new());
    let alone: Vec<Stepper<CpuDriver>> = configs()
        .into_iter()
        .map(|(l, e)| Stepper::new(CpuDriver::new(), l, e).unwrap())
        .collect();
    members.iter().for_each(|m| m.begin_advance(2).unwrap());
    members.iter().for_each(|m| m.finish_advance().unwrap());
    members[1].close().unwrap();
    for k in [0, 2] {
        members[k].begin_advance(3).unwrap();
    }
    for k in [0, 2] {
        members[k].finish_advance().unwrap();
        alone[k].step(5).unwrap();
        let spec = stats_spec();
        assert_eq!(
            members[k].stats(&spec).unwrap(),
            Member::stats(&alone[k], &spec).unwrap(),
            "member {k}"
        );
    }
    assert!(matches!(members[1].velocity(), Err(Error::Closed { .. })));
}

#[test]
fn each_member_holds_its_share_of_one_allocation_per_buffer() {
    let driver = MockDriver::new();
    let log = driver.handle();
    let members = fused(driver);
    let one = members[0].memory_ledger();
    assert!(one.entries.contains_key("L1.p0.f.a"));
    // One device buffer for each of a member's, holding all three copies.
    assert_eq!(log.live_buffers().len(), one.entries.len());
    let runner = LockstepRunner::new(members).unwrap();
    let ledger = runner.memory_ledger();
    assert_eq!(ledger.entries.len(), 3 * one.entries.len());
    for (name, bytes) in &one.entries {
        for i in 0..3 {
            assert_eq!(ledger.entries[&format!("member/{i}/{name}")], *bytes);
        }
    }
}

/// Member `k` of a uniform `size` channel with the cylinder at `center_x`,
/// for `intervals` intervals (a norm at every half).
fn uniform_member(k: usize, size: [u32; 2], center_x: f64, intervals: u64) -> (LatticeConfig, ExecConfig) {
    let mut lattice = channel(0.6 + 0.01 * k as f64, 0.04, center_x);
    lattice.hierarchy.base = size;
    lattice.hierarchy.levels.clear();
    lattice.bodies[0].level = 0;
    let half = intervals / 2;
    let exec = ExecConfig {
        schedule: Some(
            FixedSchedule::new(intervals, half)
                .unwrap()
                .with_diagnostics_every(half)
                .unwrap(),
        ),
        stats: StatsSpec {
            statistics: vec![
                Statistic::Mass,
                Statistic::Field {
                    level: 0,
                    patch: 0,
                    quantity: FieldQuantity::Ux,
                },
            ],
        },
        ..ExecConfig::default()
    };
    (lattice, exec)
}

/// `members` in lockstep, each on its own CPU driver: the baseline.
fn lockstep_of(members: &[(LatticeConfig, ExecConfig)]) -> LockstepRunner<Stepper<CpuDriver>> {
    LockstepRunner::new(
        members
            .iter()
            .map(|(l, e)| Stepper::new(CpuDriver::new(), l.clone(), e.clone()).unwrap())
            .collect(),
    )
    .unwrap()
}

/// `members` fused on an executing mock against the same in lockstep: the
/// bulk kernel among the fused launches, and the same bits.
fn split_and_compare(members: Vec<(LatticeConfig, ExecConfig)>) {
    let driver = MockDriver::executing();
    let log = driver.handle();
    let mut baseline = lockstep_of(&members);
    let mut fused = LockstepRunner::new(lbm_core::fused::batch(driver, members).unwrap()).unwrap();
    fused.run().unwrap();
    baseline.run().unwrap();
    assert!(log.launch_kernels().iter().any(|k| k.is_bulk()), "the members split");
    assert_eq!(fused.norms(), baseline.norms());
    let (a, b) = (fused.observe_members().unwrap(), baseline.observe_members().unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.rows, y.rows, "member {}", x.index);
    }
}

#[test]
fn a_batch_large_enough_splits_its_update_and_keeps_the_bits() {
    // 16 members of a 96 x 48 channel: each member's interior is too small
    // for the split, the batch's is not (the bulk kernel in blocks of short
    // rows).
    let (lattice, exec) = uniform_member(0, [96, 48], 40.0, 10);
    let alone = Stepper::new(CpuDriver::new(), lattice, exec).unwrap();
    let plain: Vec<String> = alone.plan().interval(0).iter().map(|s| s.name.clone()).collect();
    assert!(!plain.iter().any(|n| n.ends_with("stream_collide_bulk")), "{plain:?}");
    split_and_compare((0..16).map(|k| uniform_member(k, [96, 48], 40.0, 10)).collect());
}

#[test]
fn members_that_split_their_update_keep_the_bits() {
    // Members of a 300 x 240 channel: each splits its update into the bulk
    // kernel and the general one over its boundary cells.
    split_and_compare((0..4).map(|k| uniform_member(k, [300, 240], 60.0, 6)).collect());
}
