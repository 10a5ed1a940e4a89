//! `cargo xtask bench --report [--check] [DIR...]`: the tables of
//! `docs/PERFORMANCE.md` rebuilt from the bench records, so the page shows
//! what was measured and nothing else.
//!
//! The records are every `*.jsonl` of `docs/bench/` (the committed ones), then
//! of each DIR (e.g. `target/bench-results`, or a GPU run's
//! `$OUT/bench-results`, to preview them). Each group `G` of the records has
//! its table between `<!-- bench:G -->` and `<!-- /bench:G -->` on the page:
//! one row per device and figure, the latest measurement of it (a later line
//! wins a tie). Only the text between the markers changes; a group with
//! markers and no records says so there, and records of a group without
//! markers are an error. `--check` changes nothing and fails if the page is
//! not what the records give.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bench_record::{Record, format_ns, format_rate, format_ratio};

use crate::{Result, workspace_root};

const OPEN: &str = "<!-- bench:";
const CLOSE: &str = "<!-- /bench:";
const END: &str = " -->";

pub fn run(args: &[String]) -> Result<()> {
    let mut check = false;
    let mut dirs = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            option if option.starts_with('-') => {
                return Err(format!(
                    "unknown option `{option}` (accepted: --check, then directories)"
                ));
            }
            dir => dirs.push(PathBuf::from(dir)),
        }
    }
    let page = Page::read(&workspace_root(), &dirs)?;
    let path = page.path.display();
    if page.is_current() {
        eprintln!("xtask bench --report: {path} is up to date ({} records)", page.records);
    } else if check {
        return Err(format!(
            "{path} is not what the records give: run `cargo xtask bench --report`"
        ));
    } else {
        std::fs::write(&page.path, &page.generated).map_err(|e| format!("cannot write {path}: {e}"))?;
        eprintln!("xtask bench --report: {path} regenerated from {} records", page.records);
    }
    Ok(())
}

/// `docs/PERFORMANCE.md` as it is and as the records give it.
struct Page {
    path: PathBuf,
    text: String,
    generated: String,
    records: usize,
}

impl Page {
    /// The page under `root`, from the records of `root/docs/bench` and `extra`.
    fn read(root: &Path, extra: &[PathBuf]) -> Result<Page> {
        let mut dirs = vec![root.join("docs").join("bench")];
        dirs.extend_from_slice(extra);
        let records = read_records(&dirs)?;
        let path = root.join("docs").join("PERFORMANCE.md");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let generated = render(&text, &records)?;
        Ok(Page {
            path,
            text,
            generated,
            records: records.len(),
        })
    }

    fn is_current(&self) -> bool {
        self.generated == self.text
    }
}

/// The records of every `*.jsonl` in `dirs`, directory by directory, files by
/// name, lines in order. A directory without any is refused: it is more
/// likely the folder above the results than a run that recorded nothing.
fn read_records(dirs: &[PathBuf]) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        if files.is_empty() {
            return Err(format!("no *.jsonl in {}", dir.display()));
        }
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            records.extend(bench_record::parse(&file, &text).map_err(|e| e.to_string())?);
        }
    }
    Ok(records)
}

/// A marker pair: the group and the byte range between the markers.
#[derive(Debug, PartialEq)]
struct Section<'a> {
    group: &'a str,
    start: usize,
    end: usize,
}

/// Every marker pair of `page`, in order; refuses markers that do not pair.
fn sections(page: &str) -> Result<Vec<Section<'_>>> {
    let mut found: Vec<Section> = Vec::new();
    let mut pos = 0;
    while let Some(at) = page[pos..].find(OPEN) {
        let name_start = pos + at + OPEN.len();
        let group = page[name_start..]
            .find(END)
            .map(|n| &page[name_start..name_start + n])
            .filter(|g| !g.is_empty() && g.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .ok_or_else(|| format!("a `{OPEN}` marker without a group name and `{END}`"))?;
        let start = name_start + group.len() + END.len();
        let close = format!("{CLOSE}{group}{END}");
        let end = page[start..]
            .find(&close)
            .map(|n| start + n)
            .ok_or_else(|| format!("`{OPEN}{group}{END}` without its `{close}`"))?;
        if page[start..end].contains(OPEN) || page[start..end].contains(CLOSE) {
            return Err(format!("another marker inside `{OPEN}{group}{END}`"));
        }
        if found.iter().any(|s| s.group == group) {
            return Err(format!("`{OPEN}{group}{END}` twice"));
        }
        found.push(Section { group, start, end });
        pos = end + close.len();
    }
    if page.matches(CLOSE).count() != found.len() {
        return Err(format!("a `{CLOSE}` marker without its opening one"));
    }
    Ok(found)
}

/// `page` with the text between each marker pair replaced by its group's table.
fn render(page: &str, records: &[Record]) -> Result<String> {
    let sections = sections(page)?;
    if let Some(r) = records.iter().find(|r| !sections.iter().any(|s| s.group == r.group)) {
        return Err(format!(
            "records of group `{}` ({}) but no `{OPEN}{}{END}` in docs/PERFORMANCE.md",
            r.group, r.bench, r.group
        ));
    }
    let mut out = String::with_capacity(page.len());
    let mut pos = 0;
    for s in &sections {
        out += &page[pos..s.start];
        out += "\n\n";
        out += &table(&latest(records, s.group));
        out += "\n";
        pos = s.end;
    }
    out += &page[pos..];
    Ok(out)
}

/// The latest record of each (device, id) of `group`, by device, then by
/// parameter (numerically where it is a number), then by id.
fn latest<'a>(records: &'a [Record], group: &str) -> Vec<&'a Record> {
    let mut by_key: BTreeMap<(&str, Option<u64>, &str), &Record> = BTreeMap::new();
    for r in records.iter().filter(|r| r.group == group) {
        let parameter = r.id.rsplit_once('/').and_then(|(_, p)| p.parse().ok());
        let key = (r.device.as_str(), parameter, r.id.as_str());
        if by_key.get(&key).is_none_or(|old| r.date >= old.date) {
            by_key.insert(key, r);
        }
    }
    by_key.into_values().collect()
}

fn table(records: &[&Record]) -> String {
    if records.is_empty() {
        return "No records yet: run the bench, append its `.jsonl` to `docs/bench/` and run \
                `cargo xtask bench --report`.\n"
            .to_owned();
    }
    let mut out = String::from(
        "| id | figure | ceiling (same run) | ratio | device | date | command |\n\
         | --- | ---: | ---: | ---: | --- | --- | --- |\n",
    );
    for r in records {
        let cells = [
            format!("`{}`", r.id),
            format!(
                "{} ({})",
                format_rate(r.figure.value, &r.figure.unit),
                format_ns(r.figure.median_ns)
            ),
            format!(
                "`{}`: {} ({})",
                r.ceiling.name,
                format_rate(r.ceiling.value, &r.ceiling.unit),
                format_ns(r.ceiling.median_ns)
            ),
            format_ratio(r.ratio),
            r.device.clone(),
            r.date.split('T').next().unwrap_or_default().to_owned(),
            format!("`{}`", r.command),
        ];
        out += "|";
        for cell in cells {
            out += &format!(" {} |", cell.replace('|', "\\|"));
        }
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use bench_record::Measure;

    use super::*;

    fn record(device: &str, id: &str, date: &str, value: f64) -> Record {
        let (name, _) = id.split_once('/').unwrap();
        Record {
            bench: "stream_collide".into(),
            group: "cpu_uniform".into(),
            id: id.into(),
            device: device.into(),
            date: date.into(),
            command: "cargo bench -p lbm-core --bench stream_collide".into(),
            figure: Measure {
                name: name.into(),
                value,
                unit: "cells/s".into(),
                median_ns: 1.0e6,
            },
            ceiling: Measure {
                name: "copy_same_bytes".into(),
                value: 1.0e9,
                unit: "cells/s".into(),
                median_ns: 5.0e4,
            },
            ratio: value / 1.0e9,
        }
    }

    const PAGE: &str = "# Perf\r\n\r\nBefore, with a CRLF and `<!-- not a marker -->`.\n\
        <!-- bench:cpu_uniform -->\nstale table\n<!-- /bench:cpu_uniform -->\n\
        Between.\n<!-- bench:gpu_uniform --><!-- /bench:gpu_uniform -->\ttrailing, no newline";

    #[test]
    fn the_latest_record_of_each_device_and_id_is_shown_in_parameter_order() {
        let records = vec![
            record("cpu B", "stream_collide/1024", "2026-12-01T10:00:00Z", 1.0),
            record("cpu A", "stream_collide/1024", "2026-12-02T10:00:00Z", 2.0),
            record("cpu A", "stream_collide/256", "2026-12-01T10:00:00Z", 3.0),
            record("cpu A", "stream_collide/1024", "2026-12-01T10:00:00Z", 4.0),
            record("cpu A", "stream_collide/256", "2026-12-01T10:00:00Z", 5.0),
        ];
        let shown: Vec<(&str, &str, f64)> = latest(&records, "cpu_uniform")
            .iter()
            .map(|r| (r.device.as_str(), r.id.as_str(), r.figure.value))
            .collect();
        // The later date wins whatever the order of the lines; on a tie, the later line.
        assert_eq!(
            shown,
            [
                ("cpu A", "stream_collide/256", 5.0),
                ("cpu A", "stream_collide/1024", 2.0),
                ("cpu B", "stream_collide/1024", 1.0)
            ]
        );
        assert!(latest(&records, "gpu_uniform").is_empty());
    }

    #[test]
    fn only_the_text_between_the_markers_changes() {
        let records = vec![record("cpu A", "stream_collide/256", "2026-12-01T10:00:00Z", 4.88e7)];
        let out = render(PAGE, &records).unwrap();
        let open = "<!-- bench:cpu_uniform -->";
        let (before, rest) = out.split_at(out.find(open).unwrap() + open.len());
        assert_eq!(before, &PAGE[..PAGE.find(open).unwrap() + open.len()]);
        let (table, after) = rest.split_at(rest.find("<!-- /bench:cpu_uniform -->").unwrap());
        assert_eq!(
            table,
            "\n\n| id | figure | ceiling (same run) | ratio | device | date | command |\n\
             | --- | ---: | ---: | ---: | --- | --- | --- |\n\
             | `stream_collide/256` | 48.8 M cells/s (1.00 ms) | `copy_same_bytes`: 1.00 G cells/s (50.0 µs) \
             | 4.88% | cpu A | 2026-12-01 | `cargo bench -p lbm-core --bench stream_collide` |\n\n"
        );
        assert_eq!(
            after,
            "<!-- /bench:cpu_uniform -->\nBetween.\n<!-- bench:gpu_uniform -->\n\nNo records yet: run the bench, \
             append its `.jsonl` to `docs/bench/` and run `cargo xtask bench --report`.\n\n\
             <!-- /bench:gpu_uniform -->\ttrailing, no newline"
        );
        // Rendering what it rendered changes nothing.
        assert_eq!(render(&out, &records).unwrap(), out);
    }

    #[test]
    fn check_finds_a_page_that_drifted_from_the_records() {
        let records = vec![record("cpu A", "stream_collide/256", "2026-12-01T10:00:00Z", 4.88e7)];
        let page = render(PAGE, &records).unwrap();
        let root = std::env::temp_dir().join(format!("xtask-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs").join("bench")).unwrap();
        bench_record::append(&root.join("docs").join("bench"), "stream_collide", &records).unwrap();
        std::fs::write(root.join("docs").join("PERFORMANCE.md"), &page).unwrap();
        assert!(Page::read(&root, &[]).unwrap().is_current());

        std::fs::write(
            root.join("docs").join("PERFORMANCE.md"),
            page.replace("48.8 M", "50.0 M"),
        )
        .unwrap();
        assert!(!Page::read(&root, &[]).unwrap().is_current());

        std::fs::write(root.join("docs").join("PERFORMANCE.md"), &page).unwrap();
        let err = Page::read(&root, &[root.join("docs")]).err().unwrap();
        assert!(err.starts_with("no *.jsonl in "), "{err}");
        let newer = record("cpu A", "stream_collide/256", "2026-12-03T10:00:00Z", 5.0e7);
        bench_record::append(&root.join("docs").join("bench"), "stream_collide", &[newer]).unwrap();
        assert!(!Page::read(&root, &[]).unwrap().is_current());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn markers_that_do_not_pair_and_records_without_markers_are_refused() {
        let records = vec![record("cpu A", "stream_collide/256", "2026-12-01T10:00:00Z", 1.0)];
        for page in [
            "<!-- bench:cpu_uniform -->\n",
            "<!-- bench:cpu_uniform -->\n<!-- /bench:gpu_uniform -->\n",
            "<!-- bench:cpu_uniform -->\n<!-- bench:gpu_uniform -->\n<!-- /bench:cpu_uniform -->\n",
            "<!-- bench:cpu_uniform --><!-- /bench:cpu_uniform --><!-- bench:cpu_uniform --><!-- /bench:cpu_uniform -->",
            "<!-- bench:cpu_uniform --><!-- /bench:cpu_uniform --><!-- /bench:cpu_uniform -->",
            "<!-- bench: -->",
        ] {
            assert!(render(page, &records).is_err(), "{page}");
        }
        let err = render("<!-- bench:gpu_uniform --><!-- /bench:gpu_uniform -->", &records).unwrap_err();
        assert!(err.contains("group `cpu_uniform`"), "{err}");
    }

    #[test]
    fn the_committed_page_is_what_docs_bench_gives() {
        assert!(
            Page::read(&workspace_root(), &[]).unwrap().is_current(),
            "docs/PERFORMANCE.md differs from docs/bench/*.jsonl: run `cargo xtask bench --report`"
        );
    }
}
