//! The results every bench of the workspace leaves behind: one JSON line per
//! figure, with the ceiling measured in the same run next to it, so that
//! `cargo xtask bench --report` can rebuild `docs/PERFORMANCE.md`'s tables from
//! what was measured instead of from what someone copied.
//!
//! A bench's `main` runs criterion as `criterion_main!` would, then hands the
//! groups it measured to [`Run::finish`]. That reads criterion's own output
//! (`<criterion home>/<group>/<function>/<value>/new/{benchmark,estimates}.json`,
//! written by this run only: older files are ignored), takes the median time
//! and the throughput of each figure and of its ceiling, and appends the
//! [`Record`]s to `<bench>.jsonl` in `$LBM_BENCH_RESULTS`, or in
//! `<target>/bench-results/` without it. A run that measured nothing (no GPU,
//! `--test`, a filter that matched nothing) writes nothing and says so.
//!
//! ```no_run
//! use std::process::ExitCode;
//!
//! use bench_record::{Group, Run};
//!
//! const GROUP: Group = Group {
//!     name: "cpu_uniform",
//!     figures: &["stream_collide"],
//!     ceiling: "copy_same_bytes",
//!     element_unit: "cells/s",
//! };
//!
//! fn main() -> ExitCode {
//!     let run = Run::start(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"));
//!     // ... criterion's groups run here ...
//!     run.finish(&bench_record::cpu_device(), &[GROUP])
//! }
//! ```
//!
//! The crate writes nothing but the results file and reads nothing but
//! criterion's files, `/proc/cpuinfo` and `cargo metadata` (the target
//! directory, found as criterion finds it).
#![forbid(unsafe_code)]

mod run;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use run::{Group, Run, append};

#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },

    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },

    /// A criterion file without what a record needs (`what`).
    #[error("{path}: {what}")]
    Criterion { path: PathBuf, what: String },

    /// A results line that is not a record.
    #[error("{path}, line {line}: {source}")]
    Record {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One figure of one run, against the ceiling measured in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The bench target, e.g. `stream_collide`.
    pub bench: String,
    /// Criterion's group, e.g. `cpu_uniform`.
    pub group: String,
    /// The figure's id within the group: function and parameter, e.g.
    /// `stream_collide/1024`.
    pub id: String,
    /// The CPU model and core count, or the CUDA device's name.
    pub device: String,
    /// When it was measured, UTC, ISO 8601 to the second.
    pub date: String,
    /// What reproduces it, e.g. `cargo bench -p lbm-core --bench stream_collide`.
    pub command: String,
    pub figure: Measure,
    pub ceiling: Measure,
    /// `figure.value / ceiling.value`.
    pub ratio: f64,
}

/// A throughput from criterion's median time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// Criterion's function name, e.g. `copy_same_bytes`.
    pub name: String,
    /// Units of throughput per second.
    pub value: f64,
    /// `cells/s`, `bytes/s`, ...
    pub unit: String,
    /// Criterion's median time of one iteration, in nanoseconds.
    pub median_ns: f64,
}

/// The records of a `.jsonl` file's text, blank lines skipped; `path` names
/// the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Record>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|source| Error::Record {
                path: path.to_path_buf(),
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// The CPU's model from `/proc/cpuinfo` and the number of cores this process
/// may use (logical ones: what rayon spreads over), e.g.
/// `Intel(R) Xeon(R) Processor, 2 cores`.
pub fn cpu_device() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_owned())
            })
        })
        .unwrap_or_else(|| format!("{} CPU", std::env::consts::ARCH));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}

/// `t` as UTC ISO 8601 to the second, e.g. `2026-12-01T09:30:00Z`.
pub fn iso8601(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A rate with a decimal prefix and three significant digits:
/// `48.8 M cells/s`, `2.18 TB/s`.
pub fn format_rate(value: f64, unit: &str) -> String {
    const PREFIXES: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    let mut scaled = value;
    let mut k = 0;
    while scaled.abs() >= 999.5 && k + 1 < PREFIXES.len() {
        scaled /= 1000.0;
        k += 1;
    }
    let prefix = PREFIXES[k];
    match unit {
        "bytes/s" => format!("{} {prefix}B/s", three_digits(scaled)),
        _ if prefix.is_empty() => format!("{} {unit}", three_digits(scaled)),
        _ => format!("{} {prefix} {unit}", three_digits(scaled)),
    }
}

/// A time in nanoseconds with three significant digits: `43.9 µs`.
pub fn format_ns(ns: f64) -> String {
    let (scaled, unit) = match ns {
        ns if ns >= 999.5e6 => (ns / 1e9, "s"),
        ns if ns >= 999.5e3 => (ns / 1e6, "ms"),
        ns if ns >= 999.5 => (ns / 1e3, "µs"),
        ns => (ns, "ns"),
    };
    format!("{} {unit}", three_digits(scaled))
}

/// A ratio as a percentage with three significant digits: `3.52%`.
pub fn format_ratio(ratio: f64) -> String {
    format!("{}%", three_digits(ratio * 100.0))
}

fn three_digits(x: f64) -> String {
    match x.abs() {
        a if a >= 99.95 => format!("{x:.0}"),
        a if a >= 9.995 => format!("{x:.1}"),
        _ => format!("{x:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn record() -> Record {
        Record {
            bench: "stream_collide".into(),
            group: "cpu_uniform".into(),
            id: "stream_collide/256".into(),
            device: "Some CPU, 2 cores".into(),
            date: "2026-12-01T09:30:00Z".into(),
            command: "cargo bench -p lbm-core --bench stream_collide".into(),
            figure: Measure {
                name: "stream_collide".into(),
                value: 4.88e7,
                unit: "cells/s".into(),
                median_ns: 1.343e6,
            },
            ceiling: Measure {
                name: "copy_same_bytes".into(),
                value: 1.401e9,
                unit: "cells/s".into(),
                median_ns: 46_776.0,
            },
            ratio: 4.88e7 / 1.401e9,
        }
    }

    #[test]
    fn a_record_is_one_line_that_parses_back_bit_for_bit() {
        let mut r = record();
        r.figure.value = 0.1 + 0.2;
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        for key in [
            "bench", "group", "id", "device", "date", "command", "figure", "ceiling", "ratio",
        ] {
            assert!(line.contains(&format!("\"{key}\":")), "{key} missing in {line}");
        }
        let text = format!("{line}\n\n{line}\n");
        let back = parse(Path::new("x.jsonl"), &text).unwrap();
        assert_eq!(back, vec![r.clone(), r]);
    }

    #[test]
    fn a_bad_line_is_refused_with_its_file_and_number() {
        let line = serde_json::to_string(&record()).unwrap();
        let text = format!("{line}\n{{\"bench\": 1}}\n");
        let err = parse(Path::new("docs/bench/x.jsonl"), &text).unwrap_err();
        assert!(matches!(err, Error::Record { line: 2, .. }), "{err:?}");
        assert!(err.to_string().starts_with("docs/bench/x.jsonl, line 2: "), "{err}");
    }

    #[test]
    fn dates_are_utc_iso_8601() {
        let at = |secs| iso8601(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_825_600), "2000-02-29T12:00:00Z");
        assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(at(1_798_761_600), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn rates_times_and_ratios_keep_three_digits() {
        assert_eq!(format_rate(4.88e7, "cells/s"), "48.8 M cells/s");
        assert_eq!(format_rate(1.401e9, "cells/s"), "1.40 G cells/s");
        assert_eq!(format_rate(2.18e12, "bytes/s"), "2.18 TB/s");
        assert_eq!(format_rate(999.6e9, "bytes/s"), "1.00 TB/s");
        assert_eq!(format_rate(12.0, "cells/s"), "12.0 cells/s");
        assert_eq!(format_ns(43_900.0), "43.9 µs");
        assert_eq!(format_ns(562_000.0), "562 µs");
        assert_eq!(format_ns(2.5e9), "2.50 s");
        assert_eq!(format_ns(7.0), "7.00 ns");
        assert_eq!(format_ratio(0.0348), "3.48%");
        assert_eq!(format_ratio(0.47), "47.0%");
    }

    #[test]
    fn the_cpu_is_named_with_its_cores() {
        let device = cpu_device();
        assert!(device.ends_with(" cores"), "{device}");
        assert!(!device.starts_with(','), "{device}");
    }
}
