//! The mock's own contract: rendering, refusals, faults, execution and the
//! seam's streams, events, staging and plans.

use super::*;
use lbm_core::fixtures::benchmark_physics;
use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::lbm::StreamCollide;
use lbm_core::lattice::Q;

fn stream_collide(src: BufferId, dst: BufferId, flags: BufferId) -> Launch {
    // The rendering test pins these relaxation rates and this force.
    StreamCollide {
        omega_plus: 1.25,
        omega_minus: 1.5,
        force: [1e-5, 0.0],
        ..StreamCollide::periodic(src.into(), dst.into(), flags.into(), [4, 4], benchmark_physics())
    }
    .launch()
}

/// A driver with a 4x4 patch allocated: (driver, handle, [a, b, flags]).
fn setup(driver: MockDriver) -> (MockDriver, MockHandle, [BufferId; 3]) {
    let handle = driver.handle();
    let mut driver = driver;
    let f_bytes = Q * 16 * 4;
    let ids = [
        driver.alloc("p.f.a", f_bytes).unwrap(),
        driver.alloc("p.f.b", f_bytes).unwrap(),
        driver.alloc("p.flags", 16).unwrap(),
    ];
    (driver, handle, ids)
}

#[test]
fn the_log_names_buffers_and_renders_one_line_per_call() {
    let (mut driver, handle, [a, b, flags]) = setup(MockDriver::new());
    driver.upload(flags, 0, &[0; 16]).unwrap();
    driver.memset_async(a, 4, 8, 0xff).unwrap();
    driver.copy_async(a, 0, b, 0, 16).unwrap();
    driver.launch(&stream_collide(a, b, flags)).unwrap();
    driver.synchronize().unwrap();
    let mut out = [7u8; 4];
    driver.download(b, 0, &mut out).unwrap();
    driver.free(flags).unwrap();
    let text = handle.render();
    let expect = [
        "alloc buf#0 \"p.f.a\" 576 bytes",
        "alloc buf#1 \"p.f.b\" 576 bytes",
        "alloc buf#2 \"p.flags\" 16 bytes",
        "upload buf#2 \"p.flags\" [0, 16) fnv1a64 ",
        "memset buf#0 \"p.f.a\" [4, 12) = 0xff",
        "copy buf#0 \"p.f.a\" [0, 16) -> buf#1 \"p.f.b\" [0, 16)",
        "launch stream_collide grid [1, 1, 1] block [32, 9, 1] (src = buf#0 \"p.f.a\", dst = buf#1 \"p.f.b\", \
         flags = buf#2 \"p.flags\", wall_distance = none, inlet_profile = none, boundary_state = none, \
         cells = none, n_cells = 0u32, nx = 4u32, ny = 4u32, tile_x = 4u32, tile_y = 4u32, x0 = 0u32, y0 = 0u32, x1 = 4u32, y1 = 4u32, \
         boundary_x_min = 0u32, boundary_x_max = 0u32, boundary_y_min = 0u32, boundary_y_max = 0u32, \
         wall_x_min_ux = 0.0f32, wall_x_min_uy = 0.0f32, wall_x_max_ux = 0.0f32, wall_x_max_uy = 0.0f32, \
         wall_y_min_ux = 0.0f32, wall_y_min_uy = 0.0f32, wall_y_max_ux = 0.0f32, wall_y_max_uy = 0.0f32, \
         omega_plus = 1.25f32, omega_minus = 1.5f32, force_x = 1e-5f32, force_y = 0.0f32, \
         n_wall_cells = 0u32)",
        "synchronize",
        "download buf#1 \"p.f.b\" [0, 4)",
        "free buf#2 \"p.flags\"",
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), expect.len(), "{text}");
    for (line, want) in lines.iter().zip(expect) {
        assert!(line.starts_with(want), "`{line}` does not start with `{want}`");
    }
    assert_eq!(out, [0; 4], "a non-executing download returns the fill byte");
    assert_eq!(handle.count(EventKind::Alloc), 3);
    assert_eq!(handle.launch_kernels(), vec![Kernel::StreamCollide]);
    let json = serde_json::to_string(&handle.log()[3]).unwrap();
    assert!(
        json.starts_with(r#"{"kind":"upload","buffer":"buf#2 \"p.flags\"""#),
        "{json}"
    );
    assert_eq!(handle.live_buffers().len(), 2);
}

/// Runs `call` on a fresh driver and checks it is refused with a message
/// holding every part of `expect`, logged as an error after the call.
fn check_refused(call: impl FnOnce(&mut MockDriver, [BufferId; 3]) -> Result<()>, expect: &[&str]) {
    let (mut driver, handle, ids) = setup(MockDriver::new());
    handle.clear_log();
    let message = call(&mut driver, ids).unwrap_err().to_string();
    for part in expect {
        assert!(message.contains(part), "`{message}` lacks `{part}`");
    }
    let log = handle.log();
    assert_eq!(log.last().map(Event::kind), Some(EventKind::Error), "{log:?}");
}

#[test]
fn bad_calls_are_refused_and_logged() {
    check_refused(
        |d, _| d.upload(BufferId(9), 0, &[1]),
        &["unknown buffer buf#9 on the mock backend"],
    );
    check_refused(
        |d, [_, _, f]| d.upload(f, 8, &[0; 9]),
        &["upload", "[8, 17)", "16 bytes", "p.flags"],
    );
    check_refused(|d, [a, ..]| d.download(a, 576, &mut [0]), &["download", "[576, 577)"]);
    check_refused(|d, [a, ..]| d.memset_async(a, usize::MAX, 2, 0), &["memset", "outside"]);
    check_refused(|d, [a, _, f]| d.copy_async(a, 0, f, 0, 17), &["copy destination"]);
    check_refused(
        |d, [_, _, f]| {
            d.free(f)?;
            d.free(f)
        },
        &["unknown buffer buf#2"],
    );
    check_refused(
        |d, _| d.alloc("huge", 2 << 30).map(|_| ()),
        &["`huge`", "2147483648 bytes", "only"],
    );
    check_refused(
        |d, [a, b, f]| d.launch(&stream_collide(a, f, b)),
        &[
            "stream_collide",
            "`dst` (buf#2) holds 16 bytes after offset 0, the launch needs 576",
        ],
    );
}

/// Every spoiled fixture sample is refused, logged as its launch followed by
/// the error (the messages themselves are the CPU's: tests/launch_check.rs).
#[test]
fn spoiled_fixture_launches_are_refused_and_logged() {
    let mut driver = MockDriver::new();
    let handle = driver.handle();
    let samples = lbm_core::fixtures::allocate_samples(&mut driver).unwrap();
    let mut refused = 0;
    for (launch, _) in &samples {
        for (what, bad) in lbm_core::fixtures::spoiled_launches(launch) {
            handle.clear_log();
            let message = driver.launch(&bad).unwrap_err().to_string();
            let log = handle.log();
            assert!(
                matches!(&log[..], [Event::Launch { kernel, .. }, Event::Error { call: EventKind::Launch, message: m }]
                    if *kernel == launch.kernel && *m == message),
                "{what}: {log:?}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 7 * lbm_core::Kernel::ALL.len(), "{refused} spoiled launches");
}

/// Arms a fault `k` calls ahead and checks which call of `calls` fails.
fn check_fault(kind: EventKind, k: u64, calls: usize, expect_failing: Option<usize>) {
    let (mut driver, handle, [a, b, f]) = setup(MockDriver::new());
    match kind {
        EventKind::Launch => handle.fail_launch(k),
        _ => handle.fail_synchronize(k),
    }
    let results: Vec<bool> = (0..calls)
        .map(|_| match kind {
            EventKind::Launch => driver.launch(&stream_collide(a, b, f)).is_ok(),
            _ => driver.synchronize().is_ok(),
        })
        .collect();
    let failing: Vec<usize> = (0..calls).filter(|i| !results[*i]).collect();
    assert_eq!(failing, expect_failing.into_iter().collect::<Vec<_>>(), "{kind} k={k}");
    assert_eq!(handle.count(EventKind::Error), failing.len());
}

#[test]
fn faults_fire_once_at_the_kth_call_after_arming() {
    check_fault(EventKind::Launch, 1, 3, Some(0));
    check_fault(EventKind::Launch, 3, 5, Some(2));
    check_fault(EventKind::Launch, 4, 3, None);
    check_fault(EventKind::Synchronize, 1, 2, Some(0));
    check_fault(EventKind::Synchronize, 2, 4, Some(1));
    let (mut driver, handle, _) = setup(MockDriver::new());
    handle.fail_synchronize(1);
    handle.disarm();
    assert!(driver.synchronize().is_ok());
    handle.fail_synchronize(1);
    let message = driver.synchronize().unwrap_err().to_string();
    assert!(message.contains("mock synchronize #2 failed as injected"), "{message}");
}

#[test]
fn executing_drivers_compute_and_log_the_same() {
    let run = |driver: MockDriver| {
        let (mut driver, handle, [a, b, f]) = setup(driver);
        let ones: Vec<u8> = (0..Q * 16).flat_map(|i| (i as f32 * 1e-3).to_le_bytes()).collect();
        driver.upload(a, 0, &ones).unwrap();
        driver.launch(&stream_collide(a, b, f)).unwrap();
        driver.synchronize().unwrap();
        let mut out = vec![0u8; Q * 16 * 4];
        driver.download(b, 0, &mut out).unwrap();
        (handle.render(), out)
    };
    let (log_exec, out_exec) = run(MockDriver::executing());
    let (log_mock, out_mock) = run(MockDriver::new());
    assert_eq!(log_exec, log_mock);
    assert!(out_mock.iter().all(|b| *b == 0));
    assert!(out_exec.iter().any(|b| *b != 0), "the CPU backend streamed the data");
}

#[test]
fn streams_events_staging_and_plans_are_logged_and_executed_in_order() {
    let (mut driver, handle, [a, b, f]) = setup(MockDriver::executing());
    let data: Vec<u8> = (0..Q * 16).flat_map(|i| (i as f32 * 1e-3).to_le_bytes()).collect();
    driver.upload(a, 0, &data).unwrap();
    handle.clear_log();
    let plan = driver
        .prepare(
            "pingpong",
            &[
                Action::Launch(stream_collide(a, b, f)),
                Action::Memset {
                    buffer: a,
                    byte_offset: 0,
                    bytes: 4,
                    value: 0xAB,
                },
            ],
        )
        .unwrap();
    let copy = driver.create_stream().unwrap();
    let done = driver.create_event().unwrap();
    let staging = driver.alloc_staging("out", 16).unwrap();
    driver.replay(plan).unwrap();
    driver.record_event(done, StreamId::MAIN).unwrap();
    driver.wait_event(copy, done).unwrap();
    driver.download_async(copy, b, 0, staging, 0, 16).unwrap();
    driver.synchronize_event(done).unwrap();
    let mut staged = [0u8; 16];
    driver.read_staging(staging, 0, &mut staged).unwrap();
    let mut direct = [0u8; 16];
    driver.download(b, 0, &mut direct).unwrap();
    assert_eq!(staged, direct, "the staged bytes are the buffer's after the replay");
    assert!(direct.iter().any(|v| *v != 0));
    driver.release_plan(plan).unwrap();
    let kinds: Vec<EventKind> = handle.log().iter().map(Event::kind).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [
            Prepare,
            CreateStream,
            CreateEvent,
            AllocStaging,
            Replay,
            Launch,
            Memset,
            RecordEvent,
            WaitEvent,
            DownloadAsync,
            SynchronizeEvent,
            ReadStaging,
            Download,
            ReleasePlan
        ]
    );
    let mut memset = [0u8; 4];
    driver.download(a, 0, &mut memset).unwrap();
    assert_eq!(memset, [0xAB; 4], "a replayed memset sets its value");
    let text = handle.render();
    assert!(text.contains("prepare plan#0 \"pingpong\" 2 actions"), "{text}");
    assert!(text.contains("memset buf#0 \"p.f.a\" [0, 4) = 0xab"), "{text}");
    assert!(
        text.contains("download_async on stream#1 buf#1 \"p.f.b\" [0, 16) -> staging#0 [0, 16)"),
        "{text}"
    );
    // A replay after a buffer it names is freed is refused.
    let plan = driver
        .prepare(
            "again",
            &[Action::Memset {
                buffer: f,
                byte_offset: 0,
                bytes: 4,
                value: 0,
            }],
        )
        .unwrap();
    driver.free(f).unwrap();
    let message = driver.replay(plan).unwrap_err().to_string();
    assert!(message.contains("freed since it was prepared"), "{message}");
    // Unknown handles are refused by name.
    let message = driver.wait_event(StreamId(7), done).unwrap_err().to_string();
    assert!(message.contains("unknown stream 7"), "{message}");
}

#[test]
fn prepare_refuses_a_plan_with_a_bad_launch_before_anything_runs() {
    let (mut driver, handle, [a, b, f]) = setup(MockDriver::new());
    let bad = stream_collide(a, f, b);
    let message = driver
        .prepare("bad", &[Action::Launch(stream_collide(a, b, f)), Action::Launch(bad)])
        .unwrap_err()
        .to_string();
    assert!(message.contains("`dst` (buf#2) holds 16 bytes"), "{message}");
    assert_eq!(handle.count(EventKind::Launch), 0);
}
