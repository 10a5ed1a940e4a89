//! Tidy: project rules about `kernels/` that plain `cargo test` enforces.
//!
//! - The kernels of `kernels/*.cu` (each `LBM_KERNEL(name)(...)` or `LBM_BOUNDED_KERNEL(name, blocks)(...)`, which
//!   all.cu makes `extern "C" __global__`) and `Kernel::ALL` name the same
//!   kernels, both ways, each once; only all.cu and batch.cuh spell
//!   `__global__`, always `extern "C"`; all.cu's batch pass holds exactly the
//!   families and `_batch` entries of the kernels `Kernel::batches` names.
//! - Each kernel's parameter list is exactly the argument list of its
//!   family's launch struct in `lbm_core::kernels`, kinds and names (buffer ->
//!   pointer, U32 -> `unsigned int`, U64 -> `unsigned long long`, F32 ->
//!   `float`, F64 -> `double`; names as `Kernel::params` gives them).
//! - `kernels/constants.cuh` is what `lbm_core::kernels::cuda_constants`
//!   generates from the Rust constants (`cargo xtask ptx` writes it).
//! - The embedded PTX has one entry per kernel with the same parameter types
//!   (and each `_batch` entry with its one table pointer), so
//!   a stale `kernels/lbm.ptx` fails here without nvcc.
//! - `kernels/all.cu` includes every other `.cu` file, every `.cu`/`.cuh`
//!   file opens with a comment naming itself, and `kernels/host_emu.cpp` (the
//!   host build for `cargo xtask kernel-emu`) lists every kernel.
//! - Every entry of the PTX lets its dependents be scheduled and waits for
//!   its prerequisites before it touches global memory (the driver launches
//!   every kernel with programmatic stream serialization).
//!
//! The kernels directory is `$LBM_WORKSPACE_ROOT/kernels` when that is set (the
//! GPU pack sets it), else the one beside this crate. This parser knows just
//! enough C to read our own declarations; it is not a C parser.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lbm_core::fixtures::sample_launches;
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

fn c_name(param: &str) -> String {
    param
        .rsplit(|c: char| c.is_whitespace() || c == '*')
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn arg_kind(arg: &Arg) -> Kind {
    match arg {
        Arg::Buffer { .. } | Arg::NoBuffer => Kind::Pointer,
        Arg::U32(_) => Kind::U32,
        Arg::U64(_) => Kind::U64,
        Arg::F32(_) => Kind::F32,
        Arg::F64(_) => Kind::F64,
    }
}

/// A `__global__` function: file, name and parameter kinds and names.
type Global = (String, String, Vec<(Kind, String)>);

/// Every kernel: each family defines its kernels as `LBM_KERNEL(name)(...)`
/// (or `LBM_BOUNDED_KERNEL(name, blocks)(...)`, with a register cap),
/// which all.cu makes an `extern "C" __global__` function (and, for the
/// families a batch runs, a device function behind its `_batch` entry). Only
/// all.cu and batch.cuh, which define those, may spell `__global__`.
fn globals() -> Vec<Global> {
    let mut out = Vec::new();
    for (file, source) in sources() {
        let code = strip_comments(&source);
        if file == "all.cu" || file == "batch.cuh" {
            for (at, _) in code.match_indices("__global__") {
                assert!(
                    code[..at].trim_end().ends_with("extern \"C\""),
                    "{file}: a __global__ function is not extern \"C\", so its name would be mangled"
                );
            }
            continue;
        }
        assert!(
            !code.contains("__global__"),
            "kernels/{file}: define kernels with LBM_KERNEL(name)(...), which all.cu makes global"
        );
        let opens = code
            .match_indices("LBM_KERNEL(")
            .chain(code.match_indices("LBM_BOUNDED_KERNEL("));
        for (at, macro_open) in opens {
            let start = at + macro_open.len();
            let name_end = start + code[start..].find(')').expect("a kernel name");
            // LBM_BOUNDED_KERNEL(name, blocks): the name before the comma.
            let name = code[start..name_end]
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            let open = name_end + 1 + code[name_end + 1..].find('(').expect("a parameter list");
            let close = open + code[open..].find(')').expect("a closed parameter list");
            let params = code[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty() && *p != "void")
                .map(|p| (c_kind(p), c_name(p)))
                .collect();
            out.push((file.clone(), name, params));
        }
    }
    out
}

/// A launch of `kernel` from the fixtures; values are irrelevant.
fn sample(kernel: Kernel) -> Launch {
    let index = Kernel::ALL.iter().position(|k| *k == kernel).expect("listed");
    sample_launches(|k| BufferId(k).into()).swap_remove(index)
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
        let args: Vec<(Kind, String)> = sample(kernel)
            .args
            .iter()
            .map(arg_kind)
            .zip(kernel.params().iter().map(|p| p.to_string()))
            .collect();
        assert_eq!(
            params,
            &args,
            "{file}: the parameters of {} differ from its launch struct's arguments and names",
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
        .chain(
            Kernel::ALL
                .iter()
                .filter(|k| k.batches())
                .map(|k| (format!("{}_batch", k.cuda_name()), vec![".u64".to_owned()])),
        )
        .collect();
    // `stream_collide` in its own shape runs an entry of the same parameters.
    let mut expected = expected;
    let spread = expected[Kernel::StreamCollide.cuda_name()].clone();
    expected.insert(lbm_core::device::SPREAD_ENTRY.to_owned(), spread);
    assert_eq!(
        entries, expected,
        "kernels/lbm.ptx does not match the kernels: run `cargo xtask ptx`"
    );
}

/// lbm_cuda launches every kernel with programmatic stream serialization,
/// so a kernel may start while the one before it still runs: each entry
/// must let its dependents be scheduled and then wait for its prerequisites
/// (common.cuh's `lbm_prologue`) before any access to memory that another
/// kernel writes. Read in the PTX itself, where a compiler's reordering
/// would show.
#[test]
fn every_entry_waits_for_the_kernel_before_it_ahead_of_any_global_access() {
    let mut rest = lbm_cuda::PTX;
    let mut entries = 0;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let name = after[..after.find('(').expect("an entry has parameters")].trim();
        let end = after[1..].find(".entry ").map_or(after.len(), |e| e + 1);
        let body = &after[..end];
        let wait = body
            .find("griddepcontrol.wait;")
            .unwrap_or_else(|| panic!("kernels/lbm.ptx: {name} never waits for its prerequisites (LBM_PROLOGUE)"));
        assert!(
            body[..wait].contains("griddepcontrol.launch_dependents;"),
            "kernels/lbm.ptx: {name} does not let its dependents be scheduled before it waits (LBM_PROLOGUE)"
        );
        let early = body[..wait].lines().map(str::trim).find(|line| {
            let instruction = line
                .split_whitespace()
                .find(|w| !w.starts_with('@'))
                .unwrap_or_default();
            ["ld.", "st.", "atom.", "red.", "prefetch", "cp."]
                .iter()
                .any(|op| instruction.starts_with(op))
                && !["ld.param", "ld.local", "st.local", "ld.shared", "st.shared"]
                    .iter()
                    .any(|own| instruction.starts_with(own))
        });
        assert_eq!(
            early, None,
            "kernels/lbm.ptx: {name} touches memory before it waits for the kernel before it"
        );
        entries += 1;
        rest = &after[end..];
    }
    assert!(entries >= Kernel::ALL.len(), "kernels/lbm.ptx has {entries} entries");
}

/// The embedded PTX was compiled from the kernel sources beside it: its first
/// line names their sha256 (`cargo xtask ptx` writes it). The emulator
/// compiles the sources, so without this an edit of a kernel whose PTX was
/// not rebuilt passes every test here and fails only on the GPU.
#[test]
fn the_embedded_ptx_was_compiled_from_the_kernel_sources() {
    let expected = lbm_core::kernels::ptx_sources_line(&kernels_dir()).expect("the kernel sources");
    let first = lbm_cuda::PTX.lines().next().unwrap_or_default();
    assert_eq!(
        first, expected,
        "kernels/lbm.ptx was compiled from other kernel sources than kernels/ holds: run `cargo xtask ptx` and commit the result"
    );
}

#[test]
fn the_constants_header_is_generated_from_the_rust_constants() {
    let path = kernels_dir().join("constants.cuh");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert_eq!(
        on_disk,
        lbm_core::kernels::cuda_constants(),
        "kernels/constants.cuh is stale: run `cargo xtask ptx`"
    );
    let sources = sources();
    for (name, source) in &sources {
        if name == "constants.cuh" {
            continue;
        }
        for line in strip_comments(source).lines() {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("#define ") {
                let macro_name = rest.split_whitespace().next().unwrap_or_default();
                assert!(
                    !on_disk.contains(&format!("#define {macro_name} ")),
                    "kernels/{name} defines {macro_name} again; it comes from constants.cuh"
                );
            }
        }
    }
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
    // The batch pass: every family with a batchable kernel inside namespace
    // lbm_batch, and each batchable kernel's entry.
    let batch_pass = &all[all.find("namespace lbm_batch {").expect("all.cu has the batch pass")..];
    let batches = |name: &str| Kernel::ALL.iter().any(|k| k.cuda_name() == name && k.batches());
    let globals = globals();
    for (file, name, _) in &globals {
        let in_pass = globals.iter().any(|(f, n, _)| f == file && batches(n));
        assert_eq!(
            batch_pass.contains(&format!("#include \"{file}\"")),
            in_pass,
            "kernels/all.cu: {file} belongs in the batch pass exactly when one of its kernels has a `_batch` entry"
        );
        let entry = batch_pass.contains(&format!("LBM_BATCH_ENTRY({name})"))
            || batch_pass.contains(&format!("LBM_BOUNDED_BATCH_ENTRY({name},"));
        assert_eq!(
            entry,
            batches(name),
            "kernels/all.cu: LBM_BATCH_ENTRY({name}) or LBM_BOUNDED_BATCH_ENTRY({name}, ..) exactly when Kernel::batches says so"
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
        assert_eq!(
            emu.contains(&format!(
                "{{\"{name}_batch\", [](void** p) {{ emu_call({name}_batch, p); }}"
            )),
            kernel.batches(),
            "kernels/host_emu.cpp lists {name}_batch exactly when the kernel has a `_batch` entry"
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
