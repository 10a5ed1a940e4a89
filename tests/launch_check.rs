//! The bad-launch table: every driver refuses the same bad launches with the
//! same error, because they all run lbm-core's one launch check. Each row
//! spoils a valid sample launch of a kernel family (from
//! `lbm_core::fixtures`) in one way; the CPU and mock backends always run the
//! table, CUDA when a device is present. The valid samples themselves are
//! accepted everywhere, so a refusal is the spoiling's doing.

use lbm_core::device::{Action, BLOCK_THREADS};
use lbm_core::fixtures::allocate_samples;
use lbm_core::{Arg, BufferId, BufferRef, CpuDriver, Driver, Kernel, Launch};
use mock_driver::MockDriver;

/// One way to spoil a launch: its name, and the spoiled launch (or `None`
/// where it does not apply to this kernel).
type Spoil = fn(&Launch) -> Option<Launch>;

fn with(launch: &Launch, edit: impl FnOnce(&mut Launch)) -> Option<Launch> {
    let mut l = launch.clone();
    edit(&mut l);
    Some(l)
}

/// Index of the `n`-th buffer argument.
fn buffer_arg(launch: &Launch, n: usize) -> Option<usize> {
    launch
        .args
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, Arg::Buffer { .. }))
        .nth(n)
        .map(|(i, _)| i)
}

const TABLE: &[(&str, Spoil)] = &[
    ("a zero grid", |l| with(l, |l| l.grid = [0, 1, 1])),
    ("a block over 1024 threads", |l| with(l, |l| l.block = [2048, 1, 1])),
    ("a grid short of the work", |l| {
        // Only kernels with more than one block of work can be short.
        (l.threads() > u64::from(BLOCK_THREADS) && l.kernel != Kernel::CorrectInterfaceMass)
            .then(|| with(l, |l| l.grid[0] -= 1))
            .flatten()
    }),
    ("one argument too few", |l| {
        with(l, |l| {
            l.args.pop();
        })
    }),
    ("a scalar where a buffer goes", |l| with(l, |l| l.args[0] = Arg::U32(0))),
    ("an unknown buffer", |l| {
        let at = buffer_arg(l, 0)?;
        with(l, |l| l.args[at] = Arg::from(BufferRef::from(BufferId(9999))))
    }),
    ("a misaligned offset", |l| {
        let at = buffer_arg(l, 0)?;
        with(l, |l| {
            if let Arg::Buffer { byte_offset, .. } = &mut l.args[at] {
                *byte_offset = 2;
            }
        })
    }),
    ("an offset past what the launch needs", |l| {
        let at = buffer_arg(l, 0)?;
        with(l, |l| {
            if let Arg::Buffer { byte_offset, .. } = &mut l.args[at] {
                *byte_offset = 64;
            }
        })
    }),
    ("a written buffer also read", |l| {
        // The first buffer is read and some later one written in every family;
        // naming the first everywhere aliases them.
        let first = buffer_arg(l, 0)?;
        let Arg::Buffer { id, .. } = l.args[first] else {
            unreachable!()
        };
        with(l, |l| {
            for a in &mut l.args {
                if let Arg::Buffer { id: other, .. } = a {
                    *other = id;
                }
            }
        })
    }),
    ("a required optional buffer absent", |l| match l.kernel {
        // The sample has an inlet side; its profile is required.
        Kernel::StreamCollide => with(l, |l| l.args[4] = Arg::NoBuffer),
        Kernel::UpdateBoundaryState => with(l, |l| l.args[1] = Arg::NoBuffer),
        _ => None,
    }),
    ("a presence flag that contradicts its buffer", |l| match l.kernel {
        Kernel::StreamCollide | Kernel::AccumulateExchange => with(l, |l| *l.args.last_mut().unwrap() = Arg::U32(0)),
        _ => None,
    }),
];

/// Every row's verdict on `driver`: (kernel, row, error text).
fn verdicts<D: Driver>(mut driver: D) -> Vec<(Kernel, &'static str, String)> {
    let samples = allocate_samples(&mut driver).expect("the samples allocate");
    let mut out = Vec::new();
    for (launch, _) in &samples {
        driver
            .launch(launch)
            .unwrap_or_else(|e| panic!("{}: the valid sample is refused: {e}", driver.backend()));
        driver
            .prepare("sample", &[Action::Launch(launch.clone())])
            .unwrap_or_else(|e| panic!("{}: the valid sample is refused by prepare: {e}", driver.backend()));
        for (row, spoil) in TABLE {
            let Some(bad) = spoil(launch) else { continue };
            let refused = driver.launch(&bad).expect_err(&format!(
                "{}: {} of {} is accepted",
                driver.backend(),
                row,
                launch.kernel
            ));
            let prepared = driver.prepare("bad", &[Action::Launch(bad)]).expect_err(&format!(
                "{}: prepare accepts {row} of {}",
                driver.backend(),
                launch.kernel
            ));
            assert_eq!(
                refused.to_string(),
                prepared.to_string(),
                "launch and prepare refuse alike"
            );
            out.push((launch.kernel, *row, refused.to_string()));
        }
    }
    out
}

#[test]
fn every_driver_refuses_each_bad_launch_with_the_same_error() {
    let cpu = verdicts(CpuDriver::new());
    let mock = verdicts(MockDriver::new());
    assert_eq!(cpu, mock, "the CPU and mock drivers disagree");
    // Every kernel has rows, and every row refuses some kernel.
    for kernel in Kernel::ALL {
        assert!(
            cpu.iter().filter(|v| v.0 == kernel).count() >= 7,
            "{kernel} has few rows"
        );
    }
    for (row, _) in TABLE {
        assert!(cpu.iter().any(|v| v.1 == *row), "row `{row}` refused nothing");
    }
    // The message names the kernel and what is wrong.
    for (kernel, row, message) in &cpu {
        assert!(message.starts_with(&format!("{kernel} launch: ")), "{row}: {message}");
    }
    if lbm_cuda::device_available() {
        let cuda = verdicts(lbm_cuda::CudaDriver::new(0).expect("a device is available"));
        assert_eq!(cpu, cuda, "the CPU and CUDA drivers disagree");
    }
}
