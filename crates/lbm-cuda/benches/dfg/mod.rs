//! The DFG 2D-1 channels the GPU benches share.

/// `cases/dfg-2d1.toml` at `resolution` base cells per diameter, lattice
/// velocity 0.025 and no probes or lines (the figures of
/// docs/PERFORMANCE.md's DFG channels); without its refinement when
/// `refined` is false, a uniform channel.
pub fn dfg_2d1(resolution: u32, refined: bool) -> String {
    include_str!("../../../../cases/dfg-2d1.toml")
        .lines()
        .filter(|l| !l.starts_with("probes =") && !l.starts_with("lines ="))
        .filter(|l| refined || !(l.starts_with("[[refinement]]") || l.starts_with("patches =")))
        .map(|l| match l {
            l if l.starts_with("resolution =") => format!("resolution = {resolution}"),
            l if l.starts_with("lattice_velocity =") => "lattice_velocity = 0.025".to_owned(),
            l => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
