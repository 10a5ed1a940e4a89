//! Tidy: project rules about `kernels/` that plain `cargo test` enforces.
//!
//! - The `__global__` functions of `kernels/*.cu` and `Kernel::ALL` name the same
//!   kernels, both ways, each once, each `extern "C"`.
//! - Each `__global__` parameter list is exactly the argument list of its typed
//!   launch constructor in `lbm_core::launch` (buffer -> pointer, U32 ->
//!   `unsigned int`, U64 -> `unsigned long long`, F32 -> `float`, F64 -> `double`).
//! - The embedded PTX has one entry per kernel with the same parameter types, so
//!   a stale `kernels/lbm.ptx` fails here without nvcc.
//! - `kernels/all.cu` includes every other `.cu` file, every `.cu`/`.cuh`
//!   file opens with a comment naming itself, and `kernels/host_emu.cpp` (the
//!   host build for `cargo xtask kernel-emu`) lists every kernel.
//!
//! The kernels directory is `$LBM_WORKSPACE_ROOT/kernels` when that is set (the
//! GPU pack sets it), else the one beside this crate. This parser knows just
//! enough C to read our own declarations; it is not a C parser.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lbm_core::hierarchy::{Layout, Rect};
use lbm_core::launch::{
    AccumulateExchange, AccumulateFineFlux, Amplitude, CorrectInterfaceMass, Edge, FillGhost, PatchSides,
    RestrictToParent, SideKinds, StreamCollide, UpdateBoundaryState,
};
use lbm_core::{Arg, BufferId, Kernel, Launch};

fn kernels_dir() -> PathBuf {
    match std::env::var_os("LBM_WORKSPACE_ROOT") {
        Some(root) => PathBuf::from(root).join("kernels"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../kernels"),
    }
}

/// Every `.cu` and `.cuh` file of `kernels/`, by file name.
fn sources() -> BTreeMap<String, String> {
    let dir = kernels_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut out = BTreeMap::new();
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".cu") || name.ends_with(".cuh") {
            out.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    assert!(!out.is_empty(), "no kernel sources in {}", dir.display());
    out
}

/// The source without `//` and `/* */` comments.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |end| &rest[b + end + 2..]);
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
}

/// The kind of one parameter or argument, as the tidy rules compare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pointer,
    U32,
    U64,
    F32,
    F64,
}

fn c_kind(param: &str) -> Kind {
    if param.contains('*') {
        return Kind::Pointer;
    }
    let words: Vec<&str> = param
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "__restrict__"))
        .collect();
    let (_name, ty) = words
        .split_last()
        .unwrap_or_else(|| panic!("empty parameter in `{param}`"));
    match ty.join(" ").as_str() {
        "unsigned int" => Kind::U32,
        "unsigned long long" => Kind::U64,
        "float" => Kind::F32,
        "double" => Kind::F64,
        other => panic!("parameter `{param}` has type `{other}`, which no launch argument maps to"),
    }
}

fn arg_kind(arg: &Arg) -> Kind {
    match arg {
        Arg::Buffer { .. } => Kind::Pointer,
        Arg::U32(_) => Kind::U32,
        Arg::U64(_) => Kind::U64,
        Arg::F32(_) => Kind::F32,
        Arg::F64(_) => Kind::F64,
    }
}

/// Every `__global__` function: file, name and parameter kinds.
fn globals() -> Vec<(String, String, Vec<Kind>)> {
    let mut out = Vec::new();
    for (file, source) in sources() {
        let code = strip_comments(&source);
        for (at, _) in code.match_indices("__global__") {
            assert!(
                code[..at].trim_end().ends_with("extern \"C\""),
                "{file}: a __global__ function is not extern \"C\", so its name would be mangled"
            );
            let open = at + code[at..].find('(').expect("a parameter list");
            let name = code[at + "__global__".len()..open]
                .split_whitespace()
                .last()
                .expect("a function name")
                .to_owned();
            let close = open + code[open..].find(')').expect("a closed parameter list");
            let params = code[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty() && *p != "void")
                .map(c_kind)
                .collect();
            out.push((file.clone(), name, params));
        }
    }
    out
}

/// A launch of `kernel` from its typed constructor; values are irrelevant.
fn sample(kernel: Kernel) -> Launch {
    let layout = Layout {
        nx: 16,
        ny: 16,
        tile: [4, 4],
    };
    let rect = Rect::new(4, 4, 12, 12);
    let (a, b, c, d) = (BufferId(0), BufferId(1), BufferId(2), BufferId(3));
    match kernel {
        Kernel::StreamCollide => StreamCollide {
            src: a,
            dst: b,
            flags: c,
            wall_distance: d,
            inlet_profile: d,
            boundary_state: d,
            layout,
            active: rect,
            edges: [Edge::Periodic; 4],
            wall_velocity: [[0.0; 2]; 4],
            omega_plus: 1.0,
            omega_minus: 1.0,
            force: [0.0; 2],
            interpolated_walls: false,
        }
        .launch(),
        Kernel::FillGhost => FillGhost {
            coarse_t: a,
            coarse_t1: b,
            fine_dst: c,
            coarse: layout,
            coarse_active: rect,
            fine: layout,
            active_offset: [4, 4],
            sides: PatchSides::INTERFACES,
            alpha: 0.0,
            tau_plus: 0.6,
            tau_minus: 0.7,
            coarse_force: [0.0; 2],
        }
        .launch(),
        Kernel::RestrictToParent => RestrictToParent {
            fine_src: a,
            coarse_dst: b,
            fine: layout,
            coarse: layout,
            covered: rect,
            fine_active_origin: 4,
            sides: PatchSides::INTERFACES,
            tau_plus: 0.6,
            tau_minus: 0.7,
            coarse_force: [0.0; 2],
        }
        .launch(),
        Kernel::AccumulateFineFlux => AccumulateFineFlux {
            fine: a,
            flux: b,
            layout,
            kinds: SideKinds::INTERFACES,
        }
        .launch(),
        Kernel::CorrectInterfaceMass => CorrectInterfaceMass {
            coarse_t: a,
            coarse_t1: b,
            flux: c,
            coarse: layout,
            covered: rect,
            kinds: SideKinds::INTERFACES,
        }
        .launch(),
        Kernel::AccumulateExchange => AccumulateExchange {
            f: a,
            plane_cells: 256,
            links: b,
            n_links: 1,
            interval: c,
            window: d,
            window_on: true,
        }
        .launch(),
        Kernel::UpdateBoundaryState => UpdateBoundaryState::new(a, b, &Amplitude::Constant).launch(),
    }
}

#[test]
fn every_global_has_a_kernel_variant_and_every_variant_a_global() {
    let mut in_sources = BTreeMap::new();
    for (file, name, _) in globals() {
        if let Some(first) = in_sources.insert(name.clone(), file.clone()) {
            panic!("__global__ {name} is defined in both {first} and {file}");
        }
    }
    for kernel in Kernel::ALL {
        assert!(
            in_sources.contains_key(kernel.cuda_name()),
            "Kernel::{kernel:?} has no __global__ {} in kernels/",
            kernel.cuda_name()
        );
    }
    for (name, file) in &in_sources {
        assert!(
            Kernel::ALL.iter().any(|k| k.cuda_name() == name),
            "__global__ {name} in kernels/{file} has no Kernel variant"
        );
    }
}

#[test]
fn every_global_takes_the_arguments_of_its_launch_constructor() {
    let globals = globals();
    for kernel in Kernel::ALL {
        let Some((file, _, params)) = globals.iter().find(|(_, name, _)| name == kernel.cuda_name()) else {
            continue; // reported by the test above
        };
        let args: Vec<Kind> = sample(kernel).args.iter().map(arg_kind).collect();
        assert_eq!(
            params,
            &args,
            "{file}: the parameters of {} differ from lbm_core::launch's arguments",
            kernel.cuda_name()
        );
    }
}

#[test]
fn the_embedded_ptx_has_every_kernel_with_its_parameters() {
    let mut entries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut rest = lbm_cuda::PTX;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let open = after.find('(').expect("an entry has parameters");
        let close = after.find(')').expect("an entry's parameters end");
        let params = after[open + 1..close]
            .split(',')
            .filter_map(|p| p.split_whitespace().nth(1).map(str::to_owned))
            .collect();
        entries.insert(after[..open].trim().to_owned(), params);
        rest = &after[close..];
    }
    let expected: BTreeMap<String, Vec<String>> = Kernel::ALL
        .iter()
        .map(|k| {
            let params = sample(*k)
                .args
                .iter()
                .map(|a| match arg_kind(a) {
                    Kind::Pointer | Kind::U64 => ".u64",
                    Kind::U32 => ".u32",
                    Kind::F32 => ".f32",
                    Kind::F64 => ".f64",
                })
                .map(str::to_owned)
                .collect();
            (k.cuda_name().to_owned(), params)
        })
        .collect();
    assert_eq!(
        entries, expected,
        "kernels/lbm.ptx does not match the kernels: run `cargo xtask ptx`"
    );
}

#[test]
fn all_cu_includes_every_kernel_family() {
    let sources = sources();
    let all = &sources["all.cu"];
    for name in sources.keys().filter(|n| n.ends_with(".cu") && *n != "all.cu") {
        assert!(
            all.contains(&format!("#include \"{name}\"")),
            "kernels/all.cu does not include {name}, so its kernels miss the PTX"
        );
    }
}

#[test]
fn the_host_emulation_knows_every_kernel() {
    let path = kernels_dir().join("host_emu.cpp");
    let emu = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for kernel in Kernel::ALL {
        let name = kernel.cuda_name();
        assert!(
            emu.contains(&format!("{{\"{name}\", [](void** p) {{ emu_call({name}, p); }}")),
            "kernels/host_emu.cpp has no EMU_KERNELS entry for {name}"
        );
    }
}

#[test]
fn every_kernel_source_opens_with_a_comment_naming_it() {
    for (name, source) in sources() {
        let first = source.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("// {name}:")),
            "kernels/{name} must open with `// {name}: what it is`, found `{first}`"
        );
    }
}
