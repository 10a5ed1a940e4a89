//! `cargo xtask ptx`: compiles every kernel in `kernels/` into one PTX module,
//! `kernels/lbm.ptx`, which is checked in so that building `lbm-cuda` never needs
//! nvcc.
//!
//! The compiler is an nvcc of CUDA 13.0 found on this machine (`$NVCC`, `PATH`,
//! `$CUDA_HOME`, `/usr/local/cuda`) or, failing that, the pinned pip wheels
//! installed once into `target/cuda-toolchain/`. The pins matter: a newer NVVM
//! emits a PTX ISA version that the target's driver (CUDA 13.0, r580) rejects.
//! The wheels unpack into one tree, `nvidia/cu13/{bin,include,lib,nvvm}`, so
//! nvcc's own `nvcc.profile` finds `cicc` and libdevice relative to itself; we
//! still pass that tree's `include/` (where the crt headers land) explicitly.
//!
//! Flags: `sm_90` (H200), `-O3`, no fast math, and FMA contraction off, so that
//! every f32 operation rounds exactly as the CPU reference's does. This module
//! does not load or test the PTX (lbm-cuda's tests do), and never edits kernels.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, run_status, target_dir, workspace_root};

/// The wheels of the toolchain, pinned; see the module documentation.
pub const PINS: [&str; 4] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-crt==13.0.88",
];

/// The CUDA release whose nvcc we accept from the machine.
const RELEASE: &str = "release 13.0";

const ARCH: &str = "sm_90";

pub fn run(args: &[String]) -> Result<()> {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            other => return Err(format!("unknown option `{other}` (accepted: --check)")),
        }
    }
    let root = workspace_root();
    let header = root.join("kernels").join("constants.cuh");
    let constants = lbm_core::kernels::cuda_constants();
    if check {
        if read(&header)? != constants {
            return Err(format!("{} is stale: run `cargo xtask ptx`", header.display()));
        }
    } else {
        std::fs::write(&header, &constants).map_err(|e| format!("cannot write {}: {e}", header.display()))?;
        eprintln!("xtask ptx: wrote {}", header.display());
    }
    let toolchain = find_or_install(&root)?;
    let work = target_dir(&root).join("xtask-ptx");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let fresh = work.join("lbm.ptx");
    compile(&toolchain, &root.join("kernels"), &fresh)?;
    if let Some(resources) = assemble(&toolchain, &fresh, &work.join("lbm.cubin"))? {
        let path = root.join("docs").join("PERFORMANCE.md");
        let page = read(&path)?;
        let new = with_table(&page, &table(&resources))
            .ok_or_else(|| format!("{} has no {BEGIN} ... {END} markers", path.display()))?;
        match (check, new == page) {
            (_, true) => {}
            (true, false) => {
                return Err(format!(
                    "{}'s resource table is stale: run `cargo xtask ptx`",
                    path.display()
                ));
            }
            (false, false) => {
                std::fs::write(&path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                eprintln!("xtask ptx: wrote the resource table of {}", path.display());
            }
        }
    }
    let committed = root.join("kernels").join("lbm.ptx");
    let sources = lbm_core::kernels::ptx_sources_line(&root.join("kernels"))
        .map_err(|e| format!("cannot read the kernel sources: {e}"))?;
    let text = format!("{sources}\n{}", read(&fresh)?);
    if check {
        let old = std::fs::read_to_string(&committed).unwrap_or_default();
        if strip_comments(&old) != strip_comments(&text) || old.lines().next() != Some(sources.as_str()) {
            return Err(format!(
                "{} is stale: the kernels compile to different PTX; run `cargo xtask ptx` and commit the result",
                committed.display()
            ));
        }
        eprintln!("xtask ptx: {} is up to date", committed.display());
    } else {
        std::fs::write(&committed, &text).map_err(|e| format!("cannot write {}: {e}", committed.display()))?;
        eprintln!("xtask ptx: wrote {} ({} bytes)", committed.display(), text.len());
    }
    Ok(())
}

/// PTX without its comment lines: the header names the compiler build, which
/// may differ between two 13.0 nvcc installs that emit identical code.
fn strip_comments(ptx: &str) -> Vec<&str> {
    ptx.lines().filter(|l| !l.trim_start().starts_with("//")).collect()
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// An nvcc and the include directory it needs beyond its defaults, if any.
struct Toolchain {
    nvcc: PathBuf,
    include: Option<PathBuf>,
}

fn find_or_install(root: &Path) -> Result<Toolchain> {
    if let Some(nvcc) = std::env::var_os("NVCC") {
        let nvcc = PathBuf::from(nvcc);
        let version = nvcc_version(&nvcc).ok_or_else(|| format!("$NVCC={} does not run", nvcc.display()))?;
        if !version.contains(RELEASE) {
            eprintln!("xtask ptx: warning: $NVCC is not CUDA 13.0 ({version}); the PTX may not load on driver r580");
        }
        return Ok(Toolchain { nvcc, include: None });
    }
    for candidate in machine_candidates() {
        match nvcc_version(&candidate) {
            Some(version) if version.contains(RELEASE) => {
                eprintln!("xtask ptx: using {} ({version})", candidate.display());
                return Ok(Toolchain {
                    nvcc: candidate,
                    include: None,
                });
            }
            Some(version) => eprintln!("xtask ptx: skipping {} ({version}): not {RELEASE}", candidate.display()),
            None => {}
        }
    }
    install_wheels(root)
}

/// nvcc on `PATH`, then the usual install locations.
fn machine_candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("nvcc")).collect())
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(dir) = std::env::var_os(var) {
            out.push(PathBuf::from(dir).join("bin").join("nvcc"));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    out.retain(|p| p.is_file());
    out
}

/// The `release X.Y, VX.Y.Z` line of `nvcc --version`, or `None` if it does not run.
fn nvcc_version(nvcc: &Path) -> Option<String> {
    let output = Command::new(nvcc).arg("--version").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let line = text.lines().find(|l| l.contains("release "))?;
    Some(line[line.find("release ")?..].trim().to_owned())
}

/// Installs the pinned wheels into `target/cuda-toolchain/site` (once; a
/// `PINS` file records what is there) and returns the nvcc inside.
fn install_wheels(root: &Path) -> Result<Toolchain> {
    let base = target_dir(root).join("cuda-toolchain");
    let site = base.join("site");
    let marker = base.join("PINS");
    let tree = site.join("nvidia").join("cu13");
    let toolchain = Toolchain {
        nvcc: tree.join("bin").join("nvcc"),
        include: Some(tree.join("include")),
    };
    let wanted = PINS.join("\n") + "\n";
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) && toolchain.nvcc.is_file() {
        eprintln!("xtask ptx: using pinned wheels in {}", site.display());
        return Ok(toolchain);
    }
    eprintln!(
        "xtask ptx: no CUDA 13.0 nvcc found; installing pinned wheels into {}",
        site.display()
    );
    let staging = base.join("site.partial");
    for dir in [&staging, &site] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(&base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    // --no-deps: the wheels' own requirements are unpinned and would pull a newer NVVM.
    run_status(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
            ])
            .arg(&staging)
            .args(PINS),
    )
    .map_err(|e| format!("{e}; installing the nvcc wheels needs python3 with pip and access to PyPI"))?;
    std::fs::rename(&staging, &site).map_err(|e| format!("cannot move {} into place: {e}", staging.display()))?;
    if !toolchain.nvcc.is_file() {
        return Err(format!(
            "the wheels installed, but {} is missing: their layout changed",
            toolchain.nvcc.display()
        ));
    }
    std::fs::write(&marker, wanted).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    Ok(toolchain)
}

/// One translation unit, `kernels/all.cu`, into `out`.
fn compile(toolchain: &Toolchain, kernels: &Path, out: &Path) -> Result<()> {
    let mut command = Command::new(&toolchain.nvcc);
    command
        .arg("-ptx")
        .arg(format!("-arch={ARCH}"))
        .args(["-O3", "-std=c++17"])
        // Exact IEEE f32 as on the CPU: no fast math, no FMA contraction.
        .args(["-fmad=false", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"])
        .args(["--Werror", "all-warnings"])
        .arg("-I")
        .arg(kernels);
    if let Some(include) = &toolchain.include {
        command.arg("-I").arg(include);
    }
    command.arg("-o").arg(out).arg(kernels.join("all.cu"));
    run_status(&mut command).map_err(|e| format!("{e}; nvcc also needs a host C++ compiler (g++) on PATH"))
}

/// Assembles the PTX for the target with ptxas (beside nvcc), so that a PTX the
/// driver's JIT would refuse fails here, and returns each entry's resources
/// (`None` without ptxas); an entry that spills is an error.
fn assemble(toolchain: &Toolchain, ptx: &Path, cubin: &Path) -> Result<Option<Vec<Resources>>> {
    let ptxas = toolchain.nvcc.with_file_name("ptxas");
    if !ptxas.is_file() {
        eprintln!("xtask ptx: no ptxas beside nvcc; skipping the assembly check");
        return Ok(None);
    }
    let mut command = Command::new(ptxas);
    command
        .arg(format!("-arch={ARCH}"))
        .args(["-v", "--warn-on-spills"])
        .arg(ptx)
        .arg("-o")
        .arg(cubin);
    eprintln!("xtask: running {command:?}");
    let output = command
        .output()
        .map_err(|e| format!("could not start {:?}: {e}", command.get_program()))?;
    let log = String::from_utf8_lossy(&output.stderr);
    eprint!("{log}");
    if !output.status.success() {
        return Err(format!("{:?} failed with {}", command.get_program(), output.status));
    }
    let resources = parse_ptxas(&log);
    if let Some(r) = resources.iter().find(|r| r.spill_stores + r.spill_loads > 0) {
        return Err(format!(
            "{} spills ({} bytes stored, {} loaded): every kernel must fit its registers",
            r.entry, r.spill_stores, r.spill_loads
        ));
    }
    Ok(Some(resources))
}

/// One entry's resources as ptxas reports them.
#[derive(Debug, PartialEq)]
struct Resources {
    entry: String,
    registers: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    shared: u32,
}

/// The entries of `ptxas -v`'s log, sorted by name.
fn parse_ptxas(log: &str) -> Vec<Resources> {
    let number_before = |line: &str, unit: &str| -> u32 {
        line.split(',')
            .find_map(|part| part.trim().strip_suffix(unit))
            .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let mut out: Vec<Resources> = Vec::new();
    for line in log.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("ptxas info    : Compiling entry function '") {
            let entry = rest.split('\'').next().unwrap_or_default().to_owned();
            out.push(Resources {
                entry,
                registers: 0,
                stack: 0,
                spill_stores: 0,
                spill_loads: 0,
                shared: 0,
            });
        } else if let Some(r) = out.last_mut() {
            if line.contains("bytes stack frame") {
                r.stack = number_before(line, "bytes stack frame");
                r.spill_stores = number_before(line, "bytes spill stores");
                r.spill_loads = number_before(line, "bytes spill loads");
            } else if let Some(used) = line.strip_prefix("ptxas info    : Used ") {
                r.registers = used.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                r.shared = number_before(line, "bytes smem");
            }
        }
    }
    out.sort_by(|a, b| a.entry.cmp(&b.entry));
    out
}

/// Threads per block the table's occupancy assumes (`lbm_core::device::BLOCK_THREADS`).
const TABLE_BLOCK: u32 = 256;

/// Theoretical occupancy on an sm_90 SM (65536 registers allocated per warp
/// in units of 256, 64 warps, 32 blocks, 228 KiB of shared memory with 1 KiB
/// reserved per block) of blocks of [`TABLE_BLOCK`] threads: the fraction
/// of the SM's warps that can be resident.
fn occupancy(registers: u32, shared: u32) -> f64 {
    let warps_per_block = TABLE_BLOCK / 32;
    let per_warp = (registers.max(1) * 32).div_ceil(256) * 256;
    let by_registers = (65536 / per_warp) / warps_per_block;
    let by_shared = (228 * 1024) / (shared + 1024);
    let by_threads = 2048 / TABLE_BLOCK;
    let blocks = by_registers.min(by_shared).min(by_threads).min(32);
    (blocks * warps_per_block) as f64 / 64.0
}

/// The resource table of docs/PERFORMANCE.md: every entry's registers,
/// stack, spills, static shared memory and theoretical occupancy.
fn table(resources: &[Resources]) -> String {
    let mut t = format!(
        "| entry | registers | stack (bytes) | spills (bytes) | shared (bytes) | occupancy at {TABLE_BLOCK} threads |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for r in resources {
        t.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {:.0}% |\n",
            r.entry,
            r.registers,
            r.stack,
            r.spill_stores + r.spill_loads,
            r.shared,
            100.0 * occupancy(r.registers, r.shared)
        ));
    }
    t
}

const BEGIN: &str = "<!-- ptx:resources -->";
const END: &str = "<!-- /ptx:resources -->";

/// `page` with the text between the resource table's markers replaced by
/// `table`, or `None` where the markers are missing.
fn with_table(page: &str, table: &str) -> Option<String> {
    let start = page.find(BEGIN)? + BEGIN.len();
    let end = start + page[start..].find(END)?;
    Some(format!("{}\n\n{table}\n{}", &page[..start], &page[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'stream_collide_bulk' for 'sm_90'
ptxas info    : Function properties for stream_collide_bulk
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compiling entry function 'fill_ghost' for 'sm_90'
ptxas info    : Function properties for fill_ghost
    24 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 2592 bytes smem
";

    #[test]
    fn the_ptxas_log_gives_each_entrys_resources_sorted() {
        let r = parse_ptxas(LOG);
        assert_eq!(
            r,
            [
                Resources {
                    entry: "fill_ghost".into(),
                    registers: 72,
                    stack: 24,
                    spill_stores: 8,
                    spill_loads: 4,
                    shared: 2592,
                },
                Resources {
                    entry: "stream_collide_bulk".into(),
                    registers: 32,
                    stack: 0,
                    spill_stores: 0,
                    spill_loads: 0,
                    shared: 0,
                },
            ]
        );
        let t = table(&r);
        assert!(t.contains("| `fill_ghost` | 72 | 24 | 12 | 2592 | 38% |"), "{t}");
        assert!(t.contains("| `stream_collide_bulk` | 32 | 0 | 0 | 0 | 100% |"), "{t}");
    }

    /// The occupancy the issue and Nsight Compute reported: 56 registers
    /// cap a 256-thread block at half the SM, 40 at three quarters.
    #[test]
    fn occupancy_follows_the_register_file_and_shared_memory() {
        assert_eq!(occupancy(32, 0), 1.0);
        assert_eq!(occupancy(40, 0), 0.75);
        assert_eq!(occupancy(56, 0), 0.5);
        assert_eq!(occupancy(255, 0), 0.125);
        // Shared memory: 100 KiB per block leaves room for two.
        assert_eq!(occupancy(32, 100 * 1024), 0.25);
    }

    #[test]
    fn the_table_goes_between_its_markers() {
        let page = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        let new = with_table(&page, "| t |\n").unwrap();
        assert_eq!(new, format!("a\n{BEGIN}\n\n| t |\n\n{END}\nb\n"));
        assert_eq!(with_table(&new, "| t |\n").unwrap(), new);
        assert!(with_table("no markers", "| t |\n").is_none());
    }
}
