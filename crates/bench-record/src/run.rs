//! One bench process: what reproduces it, when it started, and the records
//! read back from criterion's files once its groups have run.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::SystemTime;

use serde_json::Value;

use crate::{Error, Measure, Record, Result, format_rate, format_ratio, iso8601};

/// A criterion group whose figures are measured against a ceiling in the same
/// run: every `figures` function with parameter P is recorded against the
/// `ceiling` function with the same P.
#[derive(Clone, Copy, Debug)]
pub struct Group {
    pub name: &'static str,
    pub figures: &'static [&'static str],
    pub ceiling: &'static str,
    /// What criterion's `Throughput::Elements` count per second, e.g. `cells/s`.
    pub element_unit: &'static str,
}

/// A bench process, from before its first measurement.
#[derive(Debug)]
pub struct Run {
    bench: String,
    command: String,
    /// Criterion files older than this are another run's.
    started: SystemTime,
}

impl Run {
    /// `package` and `bench` are the bench's `CARGO_PKG_NAME` and
    /// `CARGO_CRATE_NAME`. The command that reproduces the run is `cargo bench`
    /// under cargo (which sets `CARGO`), else the GPU pack's `run.sh`, with the
    /// process's arguments but cargo's `--bench`.
    pub fn start(package: &str, bench: &str) -> Run {
        let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
        let command = if std::env::var_os("CARGO").is_some() {
            let base = format!("cargo bench -p {package} --bench {bench}");
            if args.is_empty() {
                base
            } else {
                format!("{base} -- {}", shell_words(&args))
            }
        } else {
            let mut words = vec!["bash".to_owned(), "gpu-pack/run.sh".to_owned(), "benches".to_owned()];
            words.extend(args);
            shell_words(&words)
        };
        Run {
            bench: bench.to_owned(),
            command,
            started: SystemTime::now(),
        }
    }

    /// Records what `groups` measured on `device` in this run and says where
    /// they went, or that nothing was measured; fails if they cannot be written.
    pub fn finish(self, device: &str, groups: &[Group]) -> ExitCode {
        match self.write(device, groups) {
            Ok(Some(path)) => {
                eprintln!("{}: records appended to {}", self.bench, path.display());
                ExitCode::SUCCESS
            }
            Ok(None) => {
                eprintln!("{}: nothing measured, no records written", self.bench);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: cannot record the results: {e}", self.bench);
                ExitCode::FAILURE
            }
        }
    }

    fn write(&self, device: &str, groups: &[Group]) -> Result<Option<PathBuf>> {
        let cell = std::cell::OnceCell::new();
        let target = || cell.get_or_init(cargo_target_dir).clone();
        let criterion = std::env::var_os("CRITERION_HOME").map_or_else(|| target().join("criterion"), PathBuf::from);
        let date = iso8601(SystemTime::now());
        let mut records = Vec::new();
        for group in groups {
            records.extend(self.records(&criterion, device, group, &date)?);
        }
        if records.is_empty() {
            return Ok(None);
        }
        for r in &records {
            eprintln!(
                "{}: {}/{}: {} against {} ({}): {}",
                self.bench,
                r.group,
                r.id,
                format_rate(r.figure.value, &r.figure.unit),
                format_rate(r.ceiling.value, &r.ceiling.unit),
                r.ceiling.name,
                format_ratio(r.ratio)
            );
        }
        let dir = std::env::var_os("LBM_BENCH_RESULTS").map_or_else(|| target().join("bench-results"), PathBuf::from);
        append(&dir, &self.bench, &records).map(Some)
    }

    /// The records of `group` from the criterion files under `criterion` that
    /// this run wrote, in the order of `group.figures`, then by parameter.
    fn records(&self, criterion: &Path, device: &str, group: &Group, date: &str) -> Result<Vec<Record>> {
        let measured = self.measured(&criterion.join(group.name), group)?;
        let mut out = Vec::new();
        for figure in group.figures {
            for ((function, value), measure) in &measured {
                if function != figure {
                    continue;
                }
                let Some(ceiling) = measured.get(&(group.ceiling.to_owned(), value.clone())) else {
                    eprintln!(
                        "{}: {}/{function}/{}: no `{}` with the same parameter in this run, not recorded",
                        self.bench, group.name, value.text, group.ceiling
                    );
                    continue;
                };
                out.push(Record {
                    bench: self.bench.clone(),
                    group: group.name.to_owned(),
                    id: if value.text.is_empty() {
                        function.clone()
                    } else {
                        format!("{function}/{}", value.text)
                    },
                    device: device.to_owned(),
                    date: date.to_owned(),
                    command: self.command.clone(),
                    figure: measure.clone(),
                    ceiling: ceiling.clone(),
                    ratio: measure.value / ceiling.value,
                });
            }
        }
        Ok(out)
    }

    /// Every benchmark of the group directory `dir` that this run measured,
    /// by function and parameter.
    fn measured(&self, dir: &Path, group: &Group) -> Result<BTreeMap<(String, Parameter), Measure>> {
        let mut found = BTreeMap::new();
        for new in new_dirs(dir) {
            let benchmark = new.join("benchmark.json");
            let estimates = new.join("estimates.json");
            if !written_since(&benchmark, self.started) || !written_since(&estimates, self.started) {
                continue;
            }
            let id = read_json(&benchmark)?;
            if id["group_id"] != group.name {
                continue;
            }
            let missing = |what: &str| Error::Criterion {
                path: benchmark.clone(),
                what: format!("no {what}"),
            };
            let function = id["function_id"].as_str().ok_or_else(|| missing("function_id"))?;
            let value = id["value_str"].as_str().unwrap_or_default();
            let (amount, unit) =
                throughput(&id["throughput"], group.element_unit).ok_or_else(|| missing("throughput"))?;
            let median_ns = read_json(&estimates)?["median"]["point_estimate"]
                .as_f64()
                .ok_or_else(|| Error::Criterion {
                    path: estimates.clone(),
                    what: "no median.point_estimate".into(),
                })?;
            found.insert(
                (function.to_owned(), Parameter::new(value)),
                Measure {
                    name: function.to_owned(),
                    value: amount / (median_ns * 1e-9),
                    unit: unit.to_owned(),
                    median_ns,
                },
            );
        }
        Ok(found)
    }
}

/// Appends `records` to `<dir>/<bench>.jsonl`, one line each, creating both
/// as needed; returns the file.
pub fn append(dir: &Path, bench: &str, records: &[Record]) -> Result<PathBuf> {
    let path = dir.join(format!("{bench}.jsonl"));
    let write_error = |source| Error::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut text = String::new();
    for r in records {
        text += &serde_json::to_string(r).expect("a record always serialises");
        text.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(write_error)?;
    Ok(path)
}

/// A benchmark's parameter, ordered by number when it is one (256 before
/// 1024), else by text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Parameter {
    number: Option<u64>,
    text: String,
}

impl Parameter {
    fn new(text: &str) -> Parameter {
        Parameter {
            number: text.parse().ok(),
            text: text.to_owned(),
        }
    }
}

/// Criterion's serialised `Throughput` as an amount per iteration and the unit
/// of that amount per second.
fn throughput(value: &Value, element_unit: &'static str) -> Option<(f64, &'static str)> {
    let (kind, amount) = value.as_object()?.iter().next()?;
    let (amount, unit) = match kind.as_str() {
        "Bytes" | "BytesDecimal" => (amount, "bytes/s"),
        "Bits" => (amount, "bits/s"),
        "Elements" => (amount, element_unit),
        "ElementsAndBytes" => (&amount["elements"], element_unit),
        _ => return None,
    };
    Some((amount.as_f64()?, unit))
}

/// Every `new` folder below `dir` (criterion's `<function>/<value>/new`),
/// sorted; none if `dir` does not exist.
fn new_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name() == "new" {
                found.push(path);
            } else {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

fn written_since(path: &Path, since: SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since)
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Criterion {
        path: path.to_path_buf(),
        what: format!("not JSON: {e}"),
    })
}

/// Cargo's target directory as criterion finds it, so that its files are
/// found where it wrote them: `CARGO_TARGET_DIR`, else `cargo metadata`'s under
/// cargo, else `target` (a GPU pack, run from its package directory).
fn cargo_target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return dir.into();
    }
    std::env::var_os("CARGO")
        .and_then(|cargo| {
            let output = Command::new(cargo)
                .args(["metadata", "--format-version", "1", "--no-deps"])
                .output()
                .ok()?;
            let metadata: Value = serde_json::from_slice(&output.stdout).ok()?;
            metadata["target_directory"].as_str().map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// `words` as one shell command line, quoting those the shell would split or
/// expand.
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
            if plain {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::parse;

    const GROUP: Group = Group {
        name: "cpu_uniform",
        figures: &["stream_collide"],
        ceiling: "copy_same_bytes",
        element_unit: "cells/s",
    };

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bench-record-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes what criterion writes for one benchmark (the fields read here).
    fn criterion_files(root: &Path, group: &str, function: &str, value: &str, throughput: Value, median_ns: f64) {
        let new = root.join(group).join(function).join(value).join("new");
        std::fs::create_dir_all(&new).unwrap();
        let id = serde_json::json!({
            "group_id": group,
            "function_id": function,
            "value_str": value,
            "throughput": throughput,
            "full_id": format!("{group}/{function}/{value}"),
            "directory_name": format!("{group}/{function}/{value}"),
            "title": format!("{group}/{function}/{value}"),
        });
        let estimate = |x: f64| {
            serde_json::json!({"point_estimate": x, "standard_error": 1.0,
            "confidence_interval": {"confidence_level": 0.95, "lower_bound": x, "upper_bound": x}})
        };
        let estimates = serde_json::json!({
            "mean": estimate(median_ns * 1.1),
            "median": estimate(median_ns),
            "median_abs_dev": estimate(1.0),
            "slope": estimate(median_ns * 0.9),
            "std_dev": estimate(2.0),
        });
        std::fs::write(new.join("benchmark.json"), id.to_string()).unwrap();
        std::fs::write(new.join("estimates.json"), estimates.to_string()).unwrap();
    }

    fn run(started: SystemTime) -> Run {
        Run {
            bench: "stream_collide".into(),
            command: "cargo bench -p lbm-core --bench stream_collide".into(),
            started,
        }
    }

    #[test]
    fn figures_come_from_criterions_median_against_the_ceiling_of_the_same_parameter() {
        let root = scratch("median");
        let started = SystemTime::now() - Duration::from_secs(1);
        let cells = |n: u64| serde_json::json!({"Elements": n * n});
        criterion_files(&root, "cpu_uniform", "stream_collide", "1024", cells(1024), 26.2e6);
        criterion_files(&root, "cpu_uniform", "copy_same_bytes", "1024", cells(1024), 1.61e6);
        criterion_files(&root, "cpu_uniform", "stream_collide", "256", cells(256), 1.343e6);
        criterion_files(&root, "cpu_uniform", "copy_same_bytes", "256", cells(256), 46_776.0);
        // Another group under the same home is not this one's.
        criterion_files(&root, "gpu_uniform", "stream_collide", "256", cells(256), 1.0);

        let records = run(started)
            .records(&root, "Some CPU, 2 cores", &GROUP, "2026-12-01T09:30:00Z")
            .unwrap();
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["stream_collide/256", "stream_collide/1024"]);
        let r = &records[1];
        assert_eq!((r.bench.as_str(), r.group.as_str()), ("stream_collide", "cpu_uniform"));
        assert_eq!(r.figure.median_ns, 26.2e6);
        assert_eq!(r.figure.value, (1024.0 * 1024.0) / 26.2e-3);
        assert_eq!(r.ceiling.value, (1024.0 * 1024.0) / 1.61e-3);
        assert_eq!(
            (r.figure.unit.as_str(), r.ceiling.name.as_str()),
            ("cells/s", "copy_same_bytes")
        );
        assert_eq!(r.ratio, r.figure.value / r.ceiling.value);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn bytes_are_bytes_per_second_and_every_figure_gets_its_own_record() {
        let root = scratch("bytes");
        let started = SystemTime::now() - Duration::from_secs(1);
        let group = Group {
            name: "gpu_ring_static",
            figures: &["scaled_grid", "legacy_tiers"],
            ceiling: "copy_same_bytes",
            element_unit: "cells/s",
        };
        for (function, ns) in [
            ("scaled_grid", 5300.0),
            ("legacy_tiers", 6300.0),
            ("copy_same_bytes", 5000.0),
        ] {
            criterion_files(
                &root,
                group.name,
                function,
                "65536",
                serde_json::json!({"BytesDecimal": 65536}),
                ns,
            );
        }
        let records = run(started).records(&root, "NVIDIA H200", &group, "d").unwrap();
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["scaled_grid/65536", "legacy_tiers/65536"]);
        assert!(
            records
                .iter()
                .all(|r| r.figure.unit == "bytes/s" && r.ceiling.median_ns == 5000.0)
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn another_runs_files_and_a_figure_without_its_ceiling_are_not_recorded() {
        let root = scratch("stale");
        let cells = serde_json::json!({"Elements": 65536});
        criterion_files(&root, "cpu_uniform", "stream_collide", "256", cells.clone(), 1.0e6);
        criterion_files(&root, "cpu_uniform", "copy_same_bytes", "256", cells.clone(), 5.0e4);
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(run(later).records(&root, "cpu", &GROUP, "d").unwrap().is_empty());

        let started = SystemTime::now() - Duration::from_secs(1);
        criterion_files(&root, "cpu_uniform", "stream_collide", "1024", cells, 1.0e6);
        std::fs::remove_dir_all(root.join("cpu_uniform/copy_same_bytes")).unwrap();
        assert!(run(started).records(&root, "cpu", &GROUP, "d").unwrap().is_empty());
        assert!(
            run(started)
                .records(&root.join("nowhere"), "cpu", &GROUP, "d")
                .unwrap()
                .is_empty()
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_benchmark_without_throughput_is_an_error_that_names_its_file() {
        let root = scratch("throughput");
        let started = SystemTime::now() - Duration::from_secs(1);
        criterion_files(&root, "cpu_uniform", "stream_collide", "256", Value::Null, 1.0e6);
        let err = run(started).records(&root, "cpu", &GROUP, "d").unwrap_err();
        assert!(
            matches!(&err, Error::Criterion { path, .. } if path.ends_with("stream_collide/256/new/benchmark.json")),
            "{err:?}"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn records_are_appended_one_line_each() {
        let root = scratch("append");
        let started = SystemTime::now() - Duration::from_secs(1);
        let cells = serde_json::json!({"Elements": 65536});
        criterion_files(&root, "cpu_uniform", "stream_collide", "256", cells.clone(), 1.0e6);
        criterion_files(&root, "cpu_uniform", "copy_same_bytes", "256", cells, 5.0e4);
        let records = run(started).records(&root, "cpu", &GROUP, "d").unwrap();
        let dir = root.join("results");
        let path = append(&dir, "stream_collide", &records).unwrap();
        assert_eq!(path, dir.join("stream_collide.jsonl"));
        append(&dir, "stream_collide", &records).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert_eq!(parse(&path, &text).unwrap(), [records.clone(), records].concat());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn commands_quote_what_the_shell_would_split() {
        let words = |w: &[&str]| shell_words(&w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            words(&["bash", "gpu-pack/run.sh", "benches", "gpu_uniform"]),
            "bash gpu-pack/run.sh benches gpu_uniform"
        );
        assert_eq!(
            words(&["--measurement-time", "2", "a b", "it's", ""]),
            r"--measurement-time 2 'a b' 'it'\''s' ''"
        );
    }
}
