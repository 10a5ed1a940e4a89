//! Host contract of `Stepper::step(n)` (DESIGN.md §4), checked on the recording
//! `MockDriver`: one wait per call, `step(n)` enqueues exactly what n calls of
//! `step(1)` enqueue, the raw-exchange ledger and the exchange window publish
//! only after the wait, and any failure leaves the stepper refusing everything.
//! Snapshots of the step(1) log pin the launch plan so every change to it shows
//! in review.
//!
//! These tests look only at what the host enqueues and publishes; the numbers the
//! kernels compute are the CPU physics tests' business (`tests/physics.rs`),
//! except that the executing mock must match `CpuDriver` bit for bit.

use lbm_core::Boundary;
use lbm_core::config::Amplitude;
use lbm_core::config::{InletSpec, Profile};
use lbm_core::device::Action;
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::domain::hierarchy::{HierarchySpec, Rect};
use lbm_core::lattice::{Collision, Moments};
use lbm_core::{
    CpuDriver, DIVERGED_MACH, Driver, Error, ExecConfig, HealthProblem, Kernel, LatticeConfig, Status, Stepper,
    Unhealthy,
};
use mock_driver::{Event, EventKind, LoggedArg, MockDriver, MockHandle, render};

/// Index of the only body of every fixture.
const BODY: usize = 0;

/// The divergence limit of `check_health`: the lattice speed of sound.
const DIVERGED: f64 = DIVERGED_MACH * 0.577_350_269_189_625_8;

/// A refined box with one circular body on its finest level.
#[derive(Clone, Copy, Debug)]
struct Fixture {
    name: &'static str,
    base: [u32; 2],
    /// Patches of levels 1, 2, …, one per level, each in its parent level's
    /// global coordinates.
    patches: &'static [Rect],
    /// Circle centre and radius in base lattice units, on the finest level.
    body: ([f64; 2], f64),
    /// Every level's storage tile; `None`: row-major, so large patches take
    /// the split update (bulk kernel, then the boundary cells).
    tile: Option<[u32; 2]>,
}

/// 48x48 base and three nested patches; level 3 covers base cells 14..18.
const FOUR_LEVEL: Fixture = Fixture {
    name: "four_level",
    base: [48, 48],
    patches: &[
        Rect::new(6, 6, 26, 26),
        Rect::new(20, 20, 44, 44),
        Rect::new(56, 56, 72, 72),
    ],
    body: ([16.0, 16.0], 0.6),
    tile: Some([4, 4]),
};

/// 32x32 base and one patch covering base cells 8..24.
const TWO_LEVEL: Fixture = Fixture {
    name: "two_level",
    base: [32, 32],
    patches: &[Rect::new(8, 8, 24, 24)],
    body: ([16.0, 16.0], 1.5),
    tile: Some([4, 4]),
};

/// Row-major storage and both levels large enough for the split update:
/// 300x300 base, a patch over base cells 40..260 with the body.
const SPLIT: Fixture = Fixture {
    name: "split",
    base: [300, 300],
    patches: &[Rect::new(40, 40, 260, 260)],
    body: ([150.0, 150.0], 6.0),
    tile: None,
};

impl Fixture {
    fn n_levels(&self) -> usize {
        self.patches.len() + 1
    }

    fn body_level(&self) -> usize {
        self.patches.len()
    }

    /// Hops of the body's level per base interval.
    fn hops(&self) -> u64 {
        1 << self.body_level()
    }

    fn lattice(&self) -> LatticeConfig {
        let (center, radius) = self.body;
        LatticeConfig {
            hierarchy: HierarchySpec {
                base: self.base,
                levels: self.patches.iter().map(|r| vec![*r]).collect(),
            },
            collision: Collision::default(),
            tau: 0.6,
            force: [0.0, 0.0],
            boundaries: [Boundary::Wall; 4],
            wall_velocity: [[0.0; 2]; 4],
            inlet: None,
            bodies: vec![Body {
                shape: Shape::Circle { center, radius },
                level: self.body_level(),
            }],
        }
    }

    fn exec(&self, window: bool) -> ExecConfig {
        ExecConfig {
            tiles: vec![self.tile; self.n_levels()],
            observe_raw_exchange: true,
            observe_window_exchange: window,
            ..ExecConfig::default()
        }
    }

    fn stepper_on<D: Driver>(&self, driver: D, window: bool) -> Stepper<D> {
        Stepper::new(driver, self.lattice(), self.exec(window))
            .unwrap_or_else(|e| panic!("{}: the fixture is valid: {e}", self.name))
    }

    /// A stepper on a non-executing mock, its log cleared of construction.
    fn build(&self, window: bool) -> (Stepper<MockDriver>, MockHandle) {
        let driver = MockDriver::new();
        let handle = driver.handle();
        let stepper = self.stepper_on(driver, window);
        handle.clear_log();
        (stepper, handle)
    }
}

fn step(stepper: &Stepper<MockDriver>, n: u64) {
    stepper.step(n).unwrap_or_else(|e| panic!("step({n}): {e}"));
}

fn raw(stepper: &Stepper<MockDriver>) -> (u64, u64, u64) {
    let r = stepper
        .read_raw_exchange(BODY)
        .expect("raw exchange after a completed step");
    (r.time_start, r.time_end, r.sample_count)
}

fn window(stepper: &Stepper<MockDriver>) -> (u64, u64, u64) {
    let r = stepper.read_exchange_window(BODY).expect("an open exchange window");
    (r.time_start, r.time_end, r.sample_count)
}

fn without_synchronize(events: Vec<Event>) -> Vec<Event> {
    events
        .into_iter()
        .filter(|e| e.kind() != EventKind::Synchronize)
        .collect()
}

/// The label of the first buffer argument of a launch (its source populations).
fn first_buffer(event: &Event) -> Option<String> {
    match event {
        Event::Launch { args, .. } => args.iter().find_map(|a| match &a.value {
            LoggedArg::Buffer { buffer, .. } => buffer.label.clone(),
            _ => None,
        }),
        _ => None,
    }
}

/// `stream_collide` launches in `events` per level, from the source buffer's
/// `L{level}.` label prefix.
fn stream_collides_per_level(events: &[Event], n_levels: usize) -> Vec<usize> {
    (0..n_levels)
        .map(|level| {
            let prefix = format!("L{level}.");
            events
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        Event::Launch {
                            kernel: Kernel::StreamCollide,
                            ..
                        }
                    )
                })
                .filter(|e| first_buffer(e).is_some_and(|l| l.starts_with(&prefix)))
                .count()
        })
        .collect()
}

/// Checks the log of one `step(1)`: the interval integral is zeroed first, level
/// l stream-collides 2^l times, the body level exchanges once per hop, nothing
/// updates an inlet that is not there, and the one wait is the last event.
fn check_step1(fixture: Fixture, window_on: bool) {
    let context = format!("{} window {window_on}", fixture.name);
    let (stepper, handle) = fixture.build(window_on);
    step(&stepper, 1);
    let log = handle.log();
    assert_eq!(handle.count(EventKind::Synchronize), 1, "{context}");
    assert_eq!(log.last(), Some(&Event::Synchronize), "{context}");
    let interval = format!("L{}.exchange.interval", fixture.body_level());
    assert!(
        matches!(&log[0], Event::Replay { .. }),
        "{context}: the interval is a replay, got {}",
        log[0]
    );
    assert!(
        matches!(&log[1], Event::Memset { buffer, value: 0, .. } if buffer.label.as_deref() == Some(interval.as_str())),
        "{context}: the replay's first action zeroes the interval integral, got {}",
        log[1]
    );
    assert_eq!(handle.count(EventKind::Memset), 1, "{context}");
    assert_eq!(handle.count(EventKind::Error), 0, "{context}");
    let per_level: Vec<usize> = (0..fixture.n_levels()).map(|l| 1 << l).collect();
    assert_eq!(
        stream_collides_per_level(&log, fixture.n_levels()),
        per_level,
        "{context}"
    );
    let kernels = handle.launch_kernels();
    let count = |k: Kernel| kernels.iter().filter(|x| **x == k).count();
    assert_eq!(
        count(Kernel::StreamCollide),
        per_level.iter().sum::<usize>(),
        "{context}"
    );
    assert_eq!(count(Kernel::AccumulateExchange) as u64, fixture.hops(), "{context}");
    assert_eq!(count(Kernel::UpdateBoundaryState), 0, "{context}: no inlet, no update");
    assert_eq!(
        (stepper.step_count(), stepper.status()),
        (1, Status::Ready),
        "{context}"
    );
}

#[test]
fn step1_zeroes_the_integral_first_and_waits_once_last() {
    check_step1(FOUR_LEVEL, false);
    check_step1(FOUR_LEVEL, true);
    check_step1(TWO_LEVEL, false);
}

/// Checks that `step(n)` logs the launches of n `step(1)` calls on an identical
/// stepper, in the same order on the same ping-pong buffers, with one wait.
fn check_batched(fixture: Fixture, n: u64, window_on: bool) {
    let context = format!("{} step({n}) window {window_on}", fixture.name);
    let (single, single_log) = fixture.build(window_on);
    let mut expect = Vec::new();
    for _ in 0..n {
        step(&single, 1);
        expect.extend(without_synchronize(single_log.take_log()));
    }
    let (batched, batched_log) = fixture.build(window_on);
    step(&batched, n);
    let got = batched_log.log();
    assert_eq!(got.last(), Some(&Event::Synchronize), "{context}");
    assert_eq!(batched_log.count(EventKind::Synchronize), 1, "{context}");
    assert_eq!(
        batched_log.count(EventKind::Memset) as u64,
        n,
        "{context}: one zeroing per interval"
    );
    // Compare the renderings: a difference then shows as readable lines.
    assert_eq!(render(&got[..got.len() - 1]), render(&expect), "{context}");
    // Level 0 alternates its ping-pong pair from one interval to the next.
    let base_sources: Vec<String> = got
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Launch {
                    kernel: Kernel::StreamCollide,
                    ..
                }
            )
        })
        .filter_map(first_buffer)
        .filter(|l| l.starts_with("L0."))
        .collect();
    let pair = ["L0.p0.f.a", "L0.p0.f.b"];
    let alternating: Vec<String> = (0..n as usize).map(|k| pair[k % 2].to_owned()).collect();
    assert_eq!(base_sources, alternating, "{context}");
    assert_eq!(batched.step_count(), single.step_count(), "{context}");
    assert_eq!(raw(&batched), raw(&single), "{context}");
    // Both end on the same `current` buffer of every level: downloads read the same ids.
    let current = |stepper: &Stepper<MockDriver>, handle: &MockHandle| {
        handle.clear_log();
        for level in 0..fixture.n_levels() {
            stepper.download(level, 0).expect("download");
        }
        handle.render()
    };
    assert_eq!(
        current(&batched, &batched_log),
        current(&single, &single_log),
        "{context}"
    );
}

#[test]
fn step_n_enqueues_n_step1_launches_with_one_wait() {
    check_batched(FOUR_LEVEL, 3, false);
    check_batched(FOUR_LEVEL, 3, true);
    check_batched(FOUR_LEVEL, 2, false);
    check_batched(TWO_LEVEL, 4, false);
}

/// Checks that `step(0)` after `before` steps logs nothing, keeps the step count
/// and leaves the raw-exchange ledger as it was (`expect`: its times, or a part
/// of the refusal message).
/// `begin_step(n)` then `finish_step()` is `step(n)`, launch for launch and
/// wait for wait; in between the stepper refuses reads and steps as in
/// flight, and a second `finish_step` is refused.
#[test]
fn begin_then_finish_step_is_step_n() {
    for fixture in [TWO_LEVEL, FOUR_LEVEL] {
        let context = fixture.name;
        let (whole, whole_log) = fixture.build(true);
        step(&whole, 3);
        let (split, split_log) = fixture.build(true);
        split.begin_step(3).unwrap();
        assert_eq!(
            split_log.count(EventKind::Synchronize),
            0,
            "{context}: begin_step waits for nothing"
        );
        assert_eq!(split.status(), Status::Advancing, "{context}");
        for refused in [split.download(0, 0).map(|_| ()), split.step(1), split.begin_step(1)] {
            let e = refused.unwrap_err().to_string();
            assert!(e.contains("in flight") && e.contains("finish_step"), "{context}: {e}");
        }
        split.finish_step().unwrap();
        assert_eq!(split.status(), Status::Ready, "{context}");
        assert_eq!(split.step_count(), 3, "{context}");
        assert_eq!(split_log.render(), whole_log.render(), "{context}");
        assert_eq!(raw(&split), raw(&whole), "{context}");
        assert!(split.finish_step().is_err(), "{context}: nothing is in flight");
    }
}

fn check_step0(before: u64, expect: Result<(u64, u64), &str>) {
    let (stepper, handle) = FOUR_LEVEL.build(false);
    if before > 0 {
        step(&stepper, before);
    }
    handle.clear_log();
    step(&stepper, 0);
    assert_eq!(handle.log(), Vec::new(), "step(0) after step({before})");
    assert_eq!(stepper.step_count(), before);
    let got = stepper.read_raw_exchange(BODY).map(|r| (r.time_start, r.time_end));
    match (got, expect) {
        (Ok(times), Ok(want)) => assert_eq!(times, want, "after step({before})"),
        (Err(e), Err(part)) => assert!(e.to_string().contains(part), "`{e}` lacks `{part}`"),
        (got, want) => panic!("after step({before}): got {got:?}, want {want:?}"),
    }
}

#[test]
fn step0_launches_and_waits_for_nothing() {
    check_step0(2, Ok((1, 2)));
    check_step0(0, Err("no interval has completed"));
}

#[test]
fn raw_exchange_holds_the_final_interval_only() {
    for fixture in [FOUR_LEVEL, TWO_LEVEL] {
        let (stepper, _) = fixture.build(false);
        let message = stepper.read_raw_exchange(BODY).unwrap_err().to_string();
        assert!(message.contains("no interval has completed"), "{message}");
        assert!(matches!(
            stepper.read_raw_exchange(BODY),
            Err(Error::NotCompleted { .. })
        ));
        step(&stepper, 3);
        assert_eq!(raw(&stepper), (2, 3, fixture.hops()), "{}", fixture.name);
        step(&stepper, 2);
        assert_eq!(raw(&stepper), (4, 5, fixture.hops()), "{}", fixture.name);
    }
}

#[test]
fn window_is_the_same_however_the_steps_are_batched() {
    let hops = FOUR_LEVEL.hops();
    let mut windows = Vec::new();
    let mut launch_logs = Vec::new();
    for calls in [&[1, 3][..], &[4], &[1, 1, 1, 1]] {
        let (stepper, handle) = FOUR_LEVEL.build(true);
        step(&stepper, 1);
        stepper.start_exchange_window().expect("the window is observed");
        handle.clear_log();
        for n in calls {
            step(&stepper, *n);
        }
        assert_eq!(handle.count(EventKind::Synchronize), calls.len(), "{calls:?}");
        let exchanges = handle
            .launch_kernels()
            .iter()
            .filter(|k| **k == Kernel::AccumulateExchange)
            .count();
        assert_eq!(exchanges as u64, 4 * hops, "{calls:?}");
        windows.push(window(&stepper));
        launch_logs.push(render(&without_synchronize(handle.take_log())));
    }
    assert_eq!(windows, vec![(1, 5, 4 * hops); 3]);
    assert!(
        launch_logs.windows(2).all(|w| w[0] == w[1]),
        "batching changed the launches"
    );
}

/// Checks that a failed stepper refuses every read and step with a "failed"
/// error, without a single driver call.
fn check_refuses_everything(stepper: &Stepper<MockDriver>, handle: &MockHandle, context: &str) {
    let body_level = stepper.hierarchy().n_levels() - 1;
    let before = handle.log().len();
    let refusals: [(&str, Result<(), Error>); 10] = [
        ("read_raw_exchange", stepper.read_raw_exchange(BODY).map(drop)),
        ("read_exchange_window", stepper.read_exchange_window(BODY).map(drop)),
        ("download", stepper.download(body_level, 0).map(drop)),
        ("fields", stepper.fields(0, 0).map(drop)),
        ("total_mass", stepper.total_mass().map(drop)),
        ("check_health", stepper.check_health(DIVERGED).map(drop)),
        ("start_exchange_window", stepper.start_exchange_window()),
        ("initialize", stepper.initialize(|_, _, _| Moments::default())),
        ("step(1)", stepper.step(1)),
        ("step(0)", stepper.step(0)),
    ];
    for (call, result) in refusals {
        match result {
            Err(e @ Error::Failed { .. }) => {
                let message = e.to_string();
                assert!(message.contains("failed"), "{context}: {call}: `{message}`");
            }
            other => panic!("{context}: {call} after a failure gave {other:?}"),
        }
    }
    assert_eq!(handle.log().len(), before, "{context}: a refusal reached the driver");
    assert_eq!(stepper.status(), Status::Failed, "{context}");
}

#[test]
fn a_failing_wait_publishes_nothing() {
    let (stepper, handle) = FOUR_LEVEL.build(true);
    step(&stepper, 2);
    stepper.start_exchange_window().expect("the window is observed");
    handle.clear_log();
    handle.fail_synchronize(1);
    let message = stepper.step(3).unwrap_err().to_string();
    assert!(
        message.contains("mock synchronize") && message.contains("failed as injected"),
        "{message}"
    );
    let log = handle.log();
    // The error surfaced at the one wait, after all three intervals were enqueued.
    assert_eq!(handle.count(EventKind::Synchronize), 1);
    assert_eq!(log[log.len() - 2], Event::Synchronize);
    assert_eq!(log.last().map(Event::kind), Some(EventKind::Error));
    assert_eq!(handle.count(EventKind::Memset), 3);
    assert_eq!(stepper.step_count(), 2, "step_count keeps its value from entry");
    assert_eq!(stepper.status(), Status::Failed);
    check_refuses_everything(&stepper, &handle, "failed wait");
}

/// Arms a launch fault at launch `position` (counted from the start of a
/// `step(3)` that follows a `step(1)`), expecting it in interval `interval`
/// (0-based), and checks that the call fails there without waiting.
fn check_launch_failure(position: usize, interval: usize) {
    let context = format!("launch {position}");
    let (stepper, handle) = FOUR_LEVEL.build(false);
    step(&stepper, 1);
    let per_interval = handle.count(EventKind::Launch);
    assert_eq!((position - 1) / per_interval, interval, "{context}: fixture arithmetic");
    handle.clear_log();
    handle.fail_launch(position as u64);
    let message = stepper.step(3).unwrap_err().to_string();
    assert!(
        message.contains("mock launch") && message.contains("failed as injected"),
        "{context}: {message}"
    );
    assert_eq!(
        handle.count(EventKind::Synchronize),
        0,
        "{context}: no wait after a failed launch"
    );
    assert_eq!(
        handle.count(EventKind::Launch),
        position,
        "{context}: nothing enqueued after it"
    );
    assert_eq!(
        handle.log().last().map(Event::kind),
        Some(EventKind::Error),
        "{context}"
    );
    assert_eq!(
        stepper.step_count(),
        1,
        "{context}: step_count keeps its value from entry"
    );
    check_refuses_everything(&stepper, &handle, &context);
}

#[test]
fn a_launch_failure_mid_batch_skips_the_wait() {
    let (probe, handle) = FOUR_LEVEL.build(false);
    step(&probe, 1);
    let per_interval = handle.count(EventKind::Launch);
    check_launch_failure(per_interval + 1, 1);
    check_launch_failure(per_interval + per_interval / 2, 1);
    check_launch_failure(2 * per_interval, 1);
    check_launch_failure(1, 0);
}

#[test]
fn close_frees_every_buffer_and_then_refuses() {
    let driver = MockDriver::new();
    let handle = driver.handle();
    let stepper = FOUR_LEVEL.stepper_on(driver, true);
    handle.set_download_fill(0xFF);
    stepper.check_health(DIVERGED).expect("a check prepares its plans");
    let allocated = handle.count(EventKind::Alloc);
    let prepared = handle.count(EventKind::Prepare);
    assert_eq!(prepared, 6, "two intervals, two settles and two health checks");
    handle.clear_log();
    stepper.close().expect("close");
    assert_eq!(handle.count(EventKind::Free), allocated);
    assert_eq!(handle.count(EventKind::ReleasePlan), prepared);
    assert_eq!(handle.live_buffers(), Vec::new());
    let message = stepper.step(1).unwrap_err().to_string();
    assert!(message.contains("closed"), "{message}");
    assert_eq!(stepper.status(), Status::Closed);
}

/// The label of the buffer of the first download in `events`.
fn downloaded(events: &[Event]) -> String {
    events
        .iter()
        .find_map(|e| match e {
            Event::Download { buffer, .. } => buffer.label.clone(),
            _ => None,
        })
        .expect("a download")
}

/// `check_health` after 0, 1, 2 and 3 steps: its plans are prepared on the
/// first check only; each check after a step first settles (one
/// `restrict_to_parent` per refined patch), resets every result to 0xFF
/// bytes, checks every patch on the buffer `download` reads, waits once and
/// downloads the results once. A finding (all-zero results: cell 0 of the
/// base is not finite) leaves the stepper `Ready`.
#[test]
fn a_health_check_reads_the_current_buffers_and_waits_once() {
    let fixture = FOUR_LEVEL;
    let (stepper, handle) = fixture.build(false);
    handle.set_download_fill(0xFF);
    for n in 0..4u64 {
        let context = format!("after {n} steps");
        assert_eq!(stepper.check_health(DIVERGED).unwrap(), None, "{context}");
        let log = handle.take_log();
        let prepares = if n == 0 { 2 } else { 0 };
        assert_eq!(
            log.iter().filter(|e| e.kind() == EventKind::Prepare).count(),
            prepares,
            "{context}"
        );
        let n_patches = fixture.n_levels();
        let settle = match n {
            0 => 0,
            _ => n_patches,
        };
        let restrictions = log[prepares..prepares + settle]
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::Launch {
                        kernel: Kernel::RestrictToParent,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(restrictions, settle.saturating_sub(1), "{context}: the settle");
        let log = &log[prepares + settle..];
        let kinds: Vec<EventKind> = log.iter().map(Event::kind).collect();
        let mut want = vec![EventKind::Replay, EventKind::Memset];
        want.extend(std::iter::repeat_n(EventKind::Launch, n_patches));
        want.extend([EventKind::Synchronize, EventKind::Download]);
        assert_eq!(kinds, want, "{context}");
        assert!(
            matches!(&log[1], Event::Memset { buffer, byte_offset: 0, bytes, value: 0xFF }
                if buffer.label.as_deref() == Some("health.results") && *bytes == 8 * n_patches),
            "{context}: {}",
            log[1]
        );
        assert_eq!(downloaded(log), "health.results", "{context}");
        for (level, launch) in log[2..2 + n_patches].iter().enumerate() {
            let Event::Launch { kernel, args, .. } = launch else {
                unreachable!("checked above")
            };
            assert_eq!(*kernel, Kernel::CheckHealth, "{context}");
            assert!(
                matches!(&args[2].value, LoggedArg::Buffer { byte_offset, .. } if *byte_offset == 8 * level as u64),
                "{context}: level {level}'s result slot: {launch}"
            );
            stepper.download(level, 0).unwrap();
            let current = downloaded(&handle.take_log());
            assert_eq!(first_buffer(launch), Some(current), "{context}: level {level}");
        }
        step(&stepper, 1);
        handle.clear_log();
    }
    handle.set_download_fill(0);
    // Every patch reads as bad: the finest level's first names it.
    let found = stepper.check_health(DIVERGED).unwrap();
    let finest = stepper.hierarchy().levels.len() - 1;
    let patch = stepper.hierarchy().levels[finest][0].clone();
    let want = Unhealthy {
        level: finest,
        patch: 0,
        cell: [0, 0],
        position: lbm_core::domain::geometry::cell_center(&patch, patch.active.x0, patch.active.y0),
        problem: HealthProblem::NonFinite,
    };
    assert_eq!(found, Some(want));
    assert_eq!(stepper.status(), Status::Ready);
}

#[test]
fn a_failing_health_check_fails_the_stepper() {
    let (stepper, handle) = FOUR_LEVEL.build(false);
    step(&stepper, 1);
    handle.fail_synchronize(1);
    let message = stepper.check_health(DIVERGED).unwrap_err().to_string();
    assert!(message.contains("failed as injected"), "{message}");
    assert_eq!(
        handle.count(EventKind::Download),
        0,
        "nothing is read after the failed wait"
    );
    check_refuses_everything(&stepper, &handle, "failed health check");
}

/// The log of a health check after one step of `fixture`: its plans
/// prepared, then the odd interval's check.
fn health_after_step1(fixture: Fixture) -> String {
    let (stepper, handle) = fixture.build(true);
    step(&stepper, 1);
    handle.clear_log();
    handle.set_download_fill(0xFF);
    assert_eq!(stepper.check_health(DIVERGED).unwrap(), None);
    handle.render()
}

#[test]
fn an_executing_mock_matches_the_cpu_backend_bit_for_bit() {
    let fixture = TWO_LEVEL;
    let init = |_: usize, x: f64, y: f64| Moments {
        delta_rho: 0.0,
        ux: (0.01 * (y / 8.0).sin()) as f32,
        uy: (0.01 * (x / 8.0).cos()) as f32,
    };
    let run = |driver: MockDriver| {
        let handle = driver.handle();
        let stepper = fixture.stepper_on(driver, true);
        stepper.initialize(init).expect("initialize");
        stepper.start_exchange_window().expect("window");
        step(&stepper, 3);
        let levels: Vec<Vec<f32>> = (0..fixture.n_levels())
            .map(|l| stepper.download(l, 0).unwrap())
            .collect();
        let exchange = stepper.read_exchange_window(BODY).unwrap();
        (handle.render(), levels, exchange.force)
    };
    let (exec_log, exec_f, exec_force) = run(MockDriver::executing());
    let (mock_log, mock_f, mock_force) = run(MockDriver::new());
    assert_eq!(exec_log, mock_log, "executing does not change the log");
    assert!(mock_f.iter().flatten().all(|v| *v == 0.0));
    assert_eq!(mock_force, [0.0, 0.0]);

    let cpu = fixture.stepper_on(CpuDriver::new(), true);
    cpu.initialize(init).expect("initialize");
    cpu.start_exchange_window().expect("window");
    cpu.step(3).expect("cpu step");
    for (level, f) in exec_f.iter().enumerate() {
        let want = cpu.download(level, 0).unwrap();
        assert!(
            f.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
            "level {level}"
        );
        assert!(f.iter().any(|v| *v != 0.0), "level {level} holds data");
    }
    assert_eq!(exec_force, cpu.read_exchange_window(BODY).unwrap().force);
}

/// `TWO_LEVEL` as a channel: a ramped parabolic inlet on x-min and an outflow
/// on x-max.
fn inlet_channel() -> LatticeConfig {
    let mut lattice = TWO_LEVEL.lattice();
    lattice.boundaries = [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall];
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: 0.05,
        amplitude: Amplitude::Ramp { duration: 10.0 },
        span: None,
    });
    lattice
}

#[test]
fn an_inlet_updates_its_state_once_per_interval_right_after_the_zeroing() {
    let driver = MockDriver::new();
    let handle = driver.handle();
    let stepper = Stepper::new(driver, inlet_channel(), TWO_LEVEL.exec(false)).expect("a valid channel");
    handle.clear_log();
    step(&stepper, 3);
    let log = handle.log();
    let interval = format!("L{}.exchange.interval", TWO_LEVEL.body_level());
    let mut updates = 0;
    for (k, event) in log.iter().enumerate() {
        match event {
            Event::Memset { buffer, .. } => {
                assert_eq!(buffer.label.as_deref(), Some(interval.as_str()), "{event}");
                assert!(
                    matches!(
                        &log[k + 1],
                        Event::Launch {
                            kernel: Kernel::UpdateBoundaryState,
                            ..
                        }
                    ),
                    "the update follows the zeroing, got {}",
                    log[k + 1]
                );
            }
            Event::Launch {
                kernel: Kernel::UpdateBoundaryState,
                args,
                ..
            } => {
                updates += 1;
                let labels: Vec<String> = args.iter().map(ToString::to_string).collect();
                assert!(labels[0].contains("\"boundary.state\""), "{event}");
                assert_eq!(labels[1], "table = none", "a ramp reads no table: {event}");
            }
            Event::Launch {
                kernel: Kernel::StreamCollide,
                args,
                ..
            } => {
                // Only a patch with an inlet side reads the inlet's buffers.
                let labels: Vec<String> = args.iter().map(ToString::to_string).collect();
                if labels[16] == "boundary_x_min = 3u32" {
                    assert!(labels[4].contains("\"boundary.inlet_profile\""), "{event}");
                    assert!(labels[5].contains("\"boundary.state\""), "{event}");
                } else {
                    assert_eq!(
                        [&labels[4], &labels[5]],
                        ["inlet_profile = none", "boundary_state = none"]
                    );
                }
            }
            _ => {}
        }
    }
    assert!(
        matches!((&log[0], &log[1]), (Event::Replay { .. }, Event::Memset { .. })),
        "the zeroing comes first in the interval's replay: {} {}",
        log[0],
        log[1]
    );
    assert_eq!(updates, 3, "one update per interval");
    assert_eq!(handle.count(EventKind::Memset), 3);

    // Executing the same run gives the CPU backend's populations bit for bit.
    let executing = Stepper::new(MockDriver::executing(), inlet_channel(), TWO_LEVEL.exec(false)).unwrap();
    let cpu = Stepper::new(CpuDriver::new(), inlet_channel(), TWO_LEVEL.exec(false)).unwrap();
    run_from_rest(&executing, 3);
    run_from_rest(&cpu, 3);
    for level in 0..TWO_LEVEL.n_levels() {
        let (got, want) = (executing.download(level, 0).unwrap(), cpu.download(level, 0).unwrap());
        assert!(
            got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
            "level {level}"
        );
    }
    let inflow = cpu.fields(0, 0).unwrap().ux;
    assert!(inflow.iter().any(|u| *u > 0.0), "the inlet drives a flow");
}

/// Starts `stepper` at rest and steps `n` intervals.
fn run_from_rest<D: Driver>(stepper: &Stepper<D>, n: u64) {
    stepper.initialize(|_, _, _| Moments::default()).expect("initialize");
    stepper.step(n).expect("step");
}

/// The step(1) log of `fixture`, each line prefixed with the name of the plan
/// step that produced it, after checking the log replays the plan one to one.
fn annotated_step1(fixture: Fixture) -> String {
    let (stepper, handle) = fixture.build(true);
    step(&stepper, 1);
    let log = handle.log();
    let plan = stepper.plan();
    let steps = plan.interval(0);
    // A group logs itself, then each of its launches.
    let kinds = |action: &Action| match action {
        Action::Launch(_) | Action::Batch(_) => vec![EventKind::Launch],
        Action::Memset { .. } => vec![EventKind::Memset],
        Action::Together(members) => std::iter::once(EventKind::Together)
            .chain(members.iter().map(|_| EventKind::Launch))
            .collect(),
    };
    let events: usize = steps.iter().map(|s| kinds(&s.action).len()).sum();
    assert_eq!(
        log.len(),
        events + 2,
        "{}: the replay, the events of each plan step, then the wait",
        fixture.name
    );
    assert!(matches!(log[0], Event::Replay { .. }), "{}: {}", fixture.name, log[0]);
    let mut text = format!("(replay): {}\n", log[0]);
    let mut log = log[1..].iter();
    for plan_step in steps {
        for kind in kinds(&plan_step.action) {
            let event = log.next().expect("counted above");
            assert_eq!(event.kind(), kind, "{}: {}", fixture.name, plan_step.name);
            text.push_str(&format!("{}: {event}\n", plan_step.name));
        }
    }
    text.push_str(&format!("(wait): {}\n", log.next().expect("the wait")));
    text
}

/// The construction log of `fixture`: every allocation and upload.
fn construction(fixture: Fixture) -> String {
    let driver = MockDriver::new();
    let handle = driver.handle();
    let _stepper = fixture.stepper_on(driver, true);
    handle.render()
}

/// The step(1) log of a uniform 300x300 grid with sides `boundaries`, no
/// body, row-major: the bulk kernel wraps each periodic axis and bounces
/// back from walls, so a grid periodic on every side is that one launch,
/// and one with free-slip x sides and walls along y leaves the general
/// kernel only the two free-slip columns.
fn uniform_step1(boundaries: [Boundary; 4]) -> String {
    let driver = MockDriver::new();
    let handle = driver.handle();
    let lattice = LatticeConfig::uniform(300, 300, 0.6, boundaries);
    let exec = ExecConfig {
        tiles: vec![None],
        ..ExecConfig::default()
    };
    let stepper = Stepper::new(driver, lattice, exec).expect("a valid uniform grid");
    handle.clear_log();
    step(&stepper, 1);
    handle.render()
}

#[test]
fn launch_plan_snapshots() {
    insta::assert_snapshot!("periodic_step1", uniform_step1([Boundary::Periodic; 4]));
    insta::assert_snapshot!(
        "channel_step1",
        uniform_step1([Boundary::FreeSlip, Boundary::FreeSlip, Boundary::Wall, Boundary::Wall])
    );
    insta::assert_snapshot!("two_level_step1", annotated_step1(TWO_LEVEL));
    insta::assert_snapshot!("four_level_step1", annotated_step1(FOUR_LEVEL));
    insta::assert_snapshot!("split_step1", annotated_step1(SPLIT));
    insta::assert_snapshot!("two_level_construction", construction(TWO_LEVEL));
    insta::assert_snapshot!("two_level_health_after_step1", health_after_step1(TWO_LEVEL));
}
