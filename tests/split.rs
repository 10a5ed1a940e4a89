//! A run split over several devices as the drivers see it: the mock's
//! launch log of each slab's interval and halo exchange (snapshot), and the
//! `lbm run --devices` command line.

use lbm_core::config::{Amplitude, InletSpec, Profile};
use lbm_core::domain::geometry::{Body, Shape};
use lbm_core::split::Split;
use lbm_core::{Boundary, ExecConfig, Kernel, LatticeConfig};
use mock_driver::{EventKind, MockDriver};

mod common;

use common::runs::{assert_identical, backend, resume, setup, spawn_run, straight, summary, wall_limit};
use common::{lbm, scratch, stderr, workspace};

fn channel() -> LatticeConfig {
    let mut lattice = LatticeConfig::uniform(
        48,
        16,
        0.62,
        [Boundary::Inlet, Boundary::Outflow, Boundary::Wall, Boundary::Wall],
    );
    lattice.inlet = Some(InletSpec {
        profile: Profile::Parabolic,
        velocity: 0.05,
        amplitude: Amplitude::Constant,
        span: None,
    });
    lattice.bodies = vec![Body {
        shape: Shape::Circle {
            center: [12.0, 8.2],
            radius: 2.5,
        },
        level: 0,
    }];
    lattice
}

#[test]
fn each_slab_logs_its_interval_then_packs_sends_receives_and_unpacks() {
    let drivers: Vec<MockDriver> = (0..3).map(|_| MockDriver::executing()).collect();
    let logs: Vec<_> = drivers.iter().map(MockDriver::handle).collect();
    let mut split = Split::new(drivers, channel(), ExecConfig::default()).unwrap();
    for log in &logs {
        log.clear_log();
    }
    split.step(1).unwrap();
    let mut rendered = String::new();
    for (k, log) in logs.iter().enumerate() {
        // The middle slab has two cuts, the outer ones one each.
        let cuts = if k == 1 { 2 } else { 1 };
        assert_eq!(log.count(EventKind::Replay), 3, "slab {k}: interval, packs, unpacks");
        assert_eq!(log.count(EventKind::Download), cuts, "slab {k}: one send per cut");
        assert_eq!(log.count(EventKind::Upload), cuts, "slab {k}: one receive per cut");
        let kernels = log.launch_kernels();
        let count = |kernel| kernels.iter().filter(|k| **k == kernel).count();
        assert_eq!(count(Kernel::PackHalo), cuts, "slab {k}");
        assert_eq!(count(Kernel::UnpackHalo), cuts, "slab {k}");
        rendered += &format!("# slab {k}\n{}\n", log.render());
    }
    insta::assert_snapshot!("split_interval", rendered);
    split.close().unwrap();
    for (k, log) in logs.iter().enumerate() {
        assert!(log.live_buffers().is_empty(), "slab {k} freed everything");
    }
}

/// A collective that counts the groups it is given.
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl lbm_core::device::Collective for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn transfer(&mut self, _: &[lbm_core::device::Transfer]) -> lbm_core::Result<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn a_collective_is_refused_where_halos_move_through_the_host() {
    let groups = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let drivers: Vec<MockDriver> = (0..2).map(|_| MockDriver::executing()).collect();
    let mut split = Split::new(drivers, channel(), ExecConfig::default()).unwrap();
    let refused = split.use_collective(Box::new(Counting(groups.clone()))).unwrap_err();
    assert!(
        refused.to_string().contains("halos through counting") && refused.to_string().contains("through the host"),
        "{refused}"
    );
    assert_eq!(split.transport(), "host", "the split is unchanged");
    split.step(2).unwrap();
    assert_eq!(groups.load(std::sync::atomic::Ordering::Relaxed), 0);
    split.close().unwrap();
}

#[test]
fn a_slab_that_fails_is_named_the_others_are_waited_for_and_close_frees_all() {
    let drivers: Vec<MockDriver> = (0..3).map(|_| MockDriver::executing()).collect();
    let logs: Vec<_> = drivers.iter().map(MockDriver::handle).collect();
    let mut split = Split::new(drivers, channel(), ExecConfig::default()).unwrap();
    split.step(2).unwrap();
    logs[1].fail_synchronize(2);
    let e = split.step(3).unwrap_err();
    let message = e.to_string();
    assert!(message.starts_with("slab 1 of the split run"), "{message}");
    assert!(matches!(e, lbm_core::Error::Slab { slab: 1, .. }), "{e:?}");
    assert_eq!(
        split.slabs()[0].status(),
        lbm_core::Status::Ready,
        "slab 0 was waited for"
    );
    assert_eq!(
        split.slabs()[2].status(),
        lbm_core::Status::Ready,
        "slab 2 was waited for"
    );
    assert!(split.step(1).is_err(), "a failed slab fails the split");
    // Close frees what every slab holds, the failed one's too.
    let _ = split.close();
    for (k, log) in logs.iter().enumerate() {
        assert!(log.live_buffers().is_empty(), "slab {k}: {:?}", log.live_buffers());
    }
}

#[test]
fn a_split_that_cannot_run_is_refused_before_anything_is_written() {
    let cavity = workspace().join("cases/cavity-re100.toml").display().to_string();
    let out = scratch("split-refused");
    let out_text = out.display().to_string();
    for (flags, expect) in [
        (vec!["--devices", "0"], vec!["--devices", "1 to 7 for this layout"]),
        (vec!["--devices", "40"], vec!["--devices", "1 to 7 for this layout"]),
        (
            vec!["--devices", "8"],
            vec!["--devices", "1 to 7 for this layout", "patch L1.p0"],
        ),
        (
            vec!["--device-list", "0,1"],
            vec!["--device-list", "the CPU backend takes --devices G"],
        ),
        (
            vec!["--devices", "2", "--device", "0"],
            vec!["--device", "--device-list names each slab"],
        ),
        (
            vec!["--devices", "2", "--device-list", "0"],
            vec!["--device-list", "2 ordinals"],
        ),
    ] {
        let mut args = vec![
            "run",
            &cavity,
            "--backend",
            "cpu",
            "--steps",
            "10",
            "--quiet",
            "--out",
            &out_text,
        ];
        args.extend(&flags);
        let output = lbm(&args);
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {said}");
        for part in expect {
            assert!(said.contains(part), "{flags:?}: `{said}` lacks `{part}`");
        }
        assert!(!out.exists(), "{flags:?}: nothing written");
    }
}

/// The split flags for `devices` slabs: `--devices G` on the CPU (host
/// slabs), every slab on device 0 on a GPU, which may be the only one.
fn split_flags(devices: usize) -> Vec<String> {
    match backend().as_str() {
        "cpu" => vec!["--devices".into(), devices.to_string()],
        _ => vec!["--device-list".into(), vec!["0"; devices].join(",")],
    }
}

#[test]
fn a_split_run_writes_what_one_device_writes_and_resumes_split() {
    let (root, case, out) = setup("split");
    let flags = split_flags(2);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let output = spawn_run(&case, &out, &flags).wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_identical(straight(), &out);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["devices"].as_array().unwrap().len(), 2, "{manifest}");
    // The CPU's slabs move halos through the host; CUDA's through NCCL, or
    // by copies where the library is missing.
    let transports: &[&str] = match backend().as_str() {
        "cpu" => &["host"],
        _ => &["nccl", "device"],
    };
    assert!(
        transports.iter().any(|t| manifest["halo_transport"] == *t),
        "{manifest}"
    );
    // Three slabs stopped at the wall limit, resumed split until complete.
    let (_, _, walled) = setup("split-wall");
    let limit = wall_limit().to_string();
    let mut flags = split_flags(3);
    flags.extend(["--max-wall-seconds".into(), limit.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let output = spawn_run(&case, &walled, &flags).wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(summary(&walled)["ended"], "wall limit", "{}", summary(&walled));
    let mut rounds = 0;
    while summary(&walled)["ended"] != "completed" {
        let resumed = resume(&walled, &["--max-wall-seconds", &limit]);
        assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
        rounds += 1;
        assert!(rounds < 40, "no progress");
    }
    assert_identical(straight(), &walled);
    let read = |dir: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
    };
    let walled_manifest = read(&walled);
    let resumes = walled_manifest["resumes"].as_array().unwrap();
    assert!(
        resumes
            .iter()
            .all(|r| r["halo_transport"] == manifest["halo_transport"]),
        "{walled_manifest}"
    );
    let one = read(straight());
    assert!(one.get("halo_transport").is_none(), "one device moves no halos: {one}");
    std::fs::remove_dir_all(root).unwrap();
    let _ = std::fs::remove_dir_all(walled.parent().unwrap());
}
