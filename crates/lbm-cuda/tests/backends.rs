//! Contracts of the device seam that hold on every backend, one body each,
//! run on the CPU and on the device under test by `backend_tests!`:
//!
//! - every spoiled sample launch (`lbm_core::fixtures::spoiled_launches`) is
//!   refused, by `launch` and by `prepare`, with the CPU's error;
//! - a prepared plan replays exactly what the same launches do, a download
//!   on a second stream after an event lands those bytes in staging, and a
//!   plan is refused once a buffer it names is freed;
//! - launch arguments at byte offsets address inside their buffers.

use lbm_core::device::{Action, StreamId};
use lbm_core::fixtures::{PeriodicBenchmark, allocate_samples, benchmark_physics, spoiled_launches};
use lbm_core::kernels::KernelArgs;
use lbm_core::kernels::lbm::StreamCollide;
use lbm_core::{BufferRef, CpuDriver, Driver, Kernel};

/// (kernel, spoiling, error text) of every spoiled sample on `driver`.
fn verdicts(driver: &mut dyn Driver) -> Vec<(Kernel, &'static str, String)> {
    let samples = allocate_samples(driver).expect("the samples allocate");
    let mut out = Vec::new();
    for (launch, _) in &samples {
        driver.launch(launch).expect("the valid sample is accepted");
        driver
            .prepare("sample", &[Action::Launch(launch.clone())])
            .expect("the valid sample is accepted by prepare");
        for (what, bad) in spoiled_launches(launch) {
            let refused = driver
                .launch(&bad)
                .expect_err(&format!("{what} of {} is accepted", launch.kernel));
            let prepared = driver
                .prepare("bad", &[Action::Launch(bad)])
                .expect_err(&format!("prepare accepts {what} of {}", launch.kernel));
            assert_eq!(
                refused.to_string(),
                prepared.to_string(),
                "launch and prepare refuse alike"
            );
            out.push((launch.kernel, what, refused.to_string()));
        }
    }
    out
}

fn refuses_bad_launches_like_the_cpu(mut driver: Box<dyn Driver>) {
    let here = verdicts(&mut *driver);
    assert_eq!(
        here,
        verdicts(&mut CpuDriver::new()),
        "{} refuses differently",
        driver.backend()
    );
    for (kernel, what, message) in &here {
        assert!(message.starts_with(&format!("{kernel} launch: ")), "{what}: {message}");
    }
}

fn prepared_plans_replay_what_their_launches_do(mut d: Box<dyn Driver>) {
    let n = 48;
    let direct = PeriodicBenchmark::allocate(&mut d, n, benchmark_physics()).unwrap();
    let replayed = PeriodicBenchmark::allocate(&mut d, n, benchmark_physics()).unwrap();
    let bytes = direct.population_bytes;
    for _ in 0..3 {
        for launch in direct.launches.iter().flatten() {
            d.launch(launch).unwrap();
        }
    }
    let actions: Vec<Action> = replayed
        .launches
        .iter()
        .flatten()
        .cloned()
        .map(Action::Launch)
        .collect();
    let plan = d.prepare("pingpong", &actions).unwrap();
    for _ in 0..3 {
        d.replay(plan).unwrap();
    }
    d.synchronize().unwrap();
    let mut want = vec![0u8; bytes];
    d.download(direct.src, 0, &mut want).unwrap();
    // The staged copy of the replayed populations, on a second stream.
    let copy = d.create_stream().unwrap();
    let [computed, landed] = [d.create_event().unwrap(), d.create_event().unwrap()];
    let staging = d.alloc_staging("populations", bytes).unwrap();
    d.record_event(computed, StreamId::MAIN).unwrap();
    d.wait_event(copy, computed).unwrap();
    d.download_async(copy, replayed.src, 0, staging, 0, bytes).unwrap();
    d.record_event(landed, copy).unwrap();
    d.synchronize_event(landed).unwrap();
    let mut staged = vec![0u8; bytes];
    d.read_staging(staging, 0, &mut staged).unwrap();
    assert!(want == staged, "{}: the replays differ from the launches", d.backend());
    assert!(want.iter().any(|b| *b != 0));
    let message = d.read_staging(staging, bytes - 2, &mut [0; 4]).unwrap_err().to_string();
    assert!(message.contains("outside"), "{message}");
    d.free_staging(staging).unwrap();
    d.free(replayed.dst).unwrap();
    let message = d.replay(plan).unwrap_err().to_string();
    assert!(message.contains("freed since it was prepared"), "{message}");
    d.release_plan(plan).unwrap();
    let message = d.replay(plan).unwrap_err().to_string();
    assert!(message.contains("unknown plan"), "{message}");
}

/// A launch whose buffers start at byte offsets inside larger buffers
/// computes what the same launch on whole buffers does.
fn byte_offsets_address_inside_a_buffer(mut d: Box<dyn Driver>) {
    let n = 32;
    let whole = PeriodicBenchmark::allocate(&mut d, n, benchmark_physics()).unwrap();
    let bytes = whole.population_bytes;
    let (src_at, dst_at) = (256usize, 1024usize);
    let src = d.alloc("offset.src", src_at + bytes).unwrap();
    let dst = d.alloc("offset.dst", dst_at + bytes).unwrap();
    let mut populations = vec![0u8; bytes];
    d.download(whole.src, 0, &mut populations).unwrap();
    d.upload(src, src_at, &populations).unwrap();
    let at = |id, byte_offset: usize| BufferRef {
        id,
        byte_offset: byte_offset as u64,
    };
    let launch = StreamCollide::periodic(
        at(src, src_at),
        at(dst, dst_at),
        whole.flags.into(),
        [n, n],
        benchmark_physics(),
    )
    .launch();
    d.launch(&launch).unwrap();
    d.launch(&whole.whole[0]).unwrap();
    d.synchronize().unwrap();
    let (mut want, mut got) = (vec![0u8; bytes], vec![0u8; bytes]);
    d.download(whole.dst, 0, &mut want).unwrap();
    d.download(dst, dst_at, &mut got).unwrap();
    assert!(want == got, "{}: the offset launch differs", d.backend());
    let mut before = vec![1u8; dst_at];
    d.download(dst, 0, &mut before).unwrap();
    assert!(before.iter().all(|b| *b == 0), "nothing is written before the offset");
}

lbm_cuda::backend_tests! {
    bad_launches => refuses_bad_launches_like_the_cpu,
    prepared_plans => prepared_plans_replay_what_their_launches_do,
    byte_offsets => byte_offsets_address_inside_a_buffer,
}
