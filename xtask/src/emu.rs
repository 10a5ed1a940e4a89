//! `cargo xtask kernel-emu`: checks the kernels against the CPU reference on a
//! machine without a GPU.
//!
//! It compiles `kernels/host_emu.cpp` (every kernel of `all.cu` plus a small
//! host shim for the CUDA built-ins) with g++ into a shared library under
//! `target/kernel-emu/`, then runs lbm-cuda's GPU tests with `LBM_KERNEL_EMU`
//! naming that library, so the very kernel source runs against `CpuDriver`.
//! Without FMA contraction on either side the comparisons print bit-identical
//! counts; a mismatch means the CUDA source and the Rust reference disagree.
//!
//! What it does not check: anything specific to the GPU (PTX, the driver,
//! atomics order, memory model); that is what the GPU pack is for.

use std::process::Command;

use crate::{Result, cargo, run_status, target_dir, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let out = target_dir(&root).join("kernel-emu");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let library = out.join("liblbm_kernel_emu.so");
    let cxx = std::env::var_os("CXX").unwrap_or_else(|| "g++".into());
    run_status(
        Command::new(cxx)
            .args(["-std=c++20", "-O2", "-shared", "-fPIC", "-pthread"])
            // Round every f32 operation on its own, as the PTX (-fmad=false) and Rust do.
            .args(["-ffp-contract=off", "-fno-fast-math"])
            .args(["-Wall", "-Wno-unknown-pragmas", "-Werror"])
            .arg(root.join("kernels").join("host_emu.cpp"))
            .arg("-o")
            .arg(&library),
    )
    .map_err(|e| format!("{e}; the host build of the kernels needs g++ with C++20"))?;
    run_status(
        cargo()
            .current_dir(&root)
            .env("LBM_KERNEL_EMU", &library)
            .args([
                "test",
                "-p",
                "lbm-cuda",
                "--features",
                "emu",
                "--test",
                "gpu",
                "--test",
                "backends",
                "--",
                "--include-ignored",
            ])
            .args(args),
    )
}
