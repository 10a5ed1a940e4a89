//! `lbm sweep CASE --set KEY=V1,V2 ...`: an ensemble of one case over the
//! cartesian product of key values, each member a complete run with its own
//! outputs under `members/NNN/`, and one `sweep.csv` (a row per member: its
//! parameters, the final and time-averaged drag and lift coefficients of
//! every body, the Strouhal number when the lift oscillates, the last and
//! time-averaged values of every point probe) with a PNG plot of each
//! quantity against the first swept key.
//!
//! Every member is built and checked before any runs: a key the case does
//! not know, a value out of range, or a key that would change what must be
//! the same across the batch (`lbm_core::member::MemberIdentity`: the grids,
//! the boundary kinds, the bodies, the schedule, the save points) is refused
//! with the member and its parameters named, exit code 2, nothing written.
//! The members then advance in lockstep, each on its own driver: every
//! member runs to the same interval before any goes on; between those
//! boundaries each member's chunks are enqueued together and waited for
//! together (on a GPU the members' streams run side by side), and each
//! handles its own samples, save points, divergence checks and checkpoints
//! exactly as `lbm run` does, so a member's files are those of a plain run
//! of its case. A member that fails is reported and the others
//! go on.
//!
//! With `--fused` the members are one fused batch (`lbm_core::fused`) on one
//! driver: one launch per kernel per hop for all of them, each member a
//! stepper on its member driver, so everything else (samples, outputs,
//! checks) is as in lockstep, and so are the results, bit for bit. Before
//! anything is written every member is also built on the host and compared
//! with member 0 (`lbm_core::fused::check`), which also gives each buffer's
//! largest size: members whose bodies lie otherwise (an angle, a position)
//! have lists and links of their own lengths, each member launching its own;
//! members whose buffers or plans differ otherwise are refused, exit code 2,
//! naming the member; run those in lockstep. Every member's
//! chunk is the same length (the shortest any member asks for).
//!
//! `--shard K/N` runs members K, K + N, K + 2N, ... (K from 0), one task of a
//! job array each; `lbm sweep --merge OUT SHARD_DIR...` joins the shards'
//! results into one `sweep.csv` and its plots, refusing shards of another
//! sweep and members run twice.
//!
//! The whole batch's memory (every member's device buffers and host peak,
//! all resident at once) is admitted before anything is written, as `lbm
//! run` admits one case's.
//!
//! `sweep.json` is written before any member runs; `lbm resume DIR`
//! (`resume`) continues a sweep that reached its wall limit, was
//! interrupted or was killed. What it does not do: a pilot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lbm_core::case::{Case, Resolved};
use lbm_core::member::MemberIdentity;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::AppError;
use crate::backend::BackendChoice;
use crate::guard::{OnStall, Signals, Watchdog};
use crate::output::plot::{Series, render_with};
use crate::output::write_atomic;
use crate::plan::Plan;
use crate::progress::Progress;
use crate::run::{
    Chunk, Ending, Limits, Pace, Request, ResumePoint, Session, SessionInput, Summary, clear_run_files, exec,
    open_resumed, open_session, prepare_output, resume_point, write_json,
};

/// What `lbm resume` of a sweep does with a member that cannot continue.
const AGAIN: &str = "the sweep runs the member again from the start in its directory";

/// How the members advance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepMode {
    /// Every member on its own driver, in lockstep.
    #[default]
    Lockstep,
    /// One fused batch on one driver: one launch per kernel per hop for all
    /// members.
    Fused,
}

pub struct SweepOptions {
    pub case: PathBuf,
    /// Each `KEY=V1,V2,...`.
    pub sets: Vec<String>,
    pub mode: SweepMode,
    pub out: PathBuf,
    /// `K/N`.
    pub shard: Option<String>,
    pub backend: BackendChoice,
    pub device: Option<usize>,
    pub steps: Option<u64>,
    pub quiet: bool,
    pub limits: Limits,
}

/// One swept key and its values, as given and as TOML values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Sweep {
    key: String,
    values: Vec<String>,
}

/// One member's parameters: a value of every swept key, in `--set` order.
type Parameters = Vec<(String, String)>;

/// A member's results, in `sweep.json` and one row of `sweep.csv`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct MemberResult {
    index: usize,
    parameters: Parameters,
    ended: String,
    error: Option<String>,
    /// Each body's coefficients.
    bodies: Vec<BodyResult>,
    /// Each point probe's values (absent from records written before
    /// probes were in them).
    #[serde(default)]
    probes: Vec<ProbeResult>,
    mlups: f64,
    mass_drift: Option<f64>,
    /// The member's output directory, relative to the sweep's.
    out: String,
}

impl MemberResult {
    /// The result of a member that has not ended yet ("running"), as the
    /// record written before the members run holds it.
    fn running(member: &Member, count: usize) -> MemberResult {
        MemberResult {
            index: member.index,
            parameters: member.parameters.clone(),
            ended: "running".into(),
            error: None,
            bodies: Vec::new(),
            probes: Vec::new(),
            mlups: 0.0,
            mass_drift: None,
            out: member_dir(member.index, count),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct BodyResult {
    cd: f64,
    cl: f64,
    /// Means over the second half of the run's samples.
    cd_mean: f64,
    cl_mean: f64,
    strouhal: Option<f64>,
}

/// A point probe's last sample and its means over the second half of the
/// samples, Pa and m/s; `None` where the probe read no fluid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ProbeResult {
    name: String,
    /// p, ux, uy.
    last: [Option<f64>; 3],
    mean: [Option<f64>; 3],
}

impl ProbeResult {
    /// The results of probe `k` from a run's samples.
    fn of(name: &str, k: usize, history: &[(u64, Vec<Option<[f64; 3]>>)]) -> ProbeResult {
        let value = |sample: &(u64, Vec<Option<[f64; 3]>>), c: usize| {
            sample
                .1
                .get(k)
                .copied()
                .flatten()
                .map(|v| v[c])
                .filter(|v| v.is_finite())
        };
        let half = &history[history.len() / 2..];
        ProbeResult {
            name: name.to_owned(),
            last: std::array::from_fn(|c| history.last().and_then(|s| value(s, c))),
            // A mean over samples that all read fluid, or none.
            mean: std::array::from_fn(|c| {
                let values: Option<Vec<f64>> = half.iter().map(|s| value(s, c)).collect();
                values
                    .filter(|v| !v.is_empty())
                    .map(|v| v.iter().sum::<f64>() / v.len() as f64)
            }),
        }
    }
}

/// A probe's quantities, named as the columns of its `probes/NAME.csv`.
const PROBE_COLUMNS: [&str; 3] = ["p_pa", "ux_m_s", "uy_m_s"];

/// `sweep.json`: what the sweep was and what this directory holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SweepRecord {
    /// sha256 of the case text, the swept keys and values and the run length:
    /// the shards of one sweep share it.
    sweep_sha256: String,
    case: String,
    /// The case's text, which `lbm resume` builds the members from again
    /// (absent from merges and from records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    case_text: Option<String>,
    /// Absent from records written before it existed, all of them lockstep.
    #[serde(default)]
    mode: SweepMode,
    sweeps: Vec<Sweep>,
    steps: Option<u64>,
    members: usize,
    /// `[K, N]` of the shard this directory ran; absent for a whole sweep or
    /// a merge.
    shard: Option<[usize; 2]>,
    /// The case's bodies and point probes, which give sweep.csv its columns
    /// however the members ended (absent from records written before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bodies: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probes: Option<Vec<String>>,
    results: Vec<MemberResult>,
}

/// The most characters of a `--set` argument an error shows, and of its key.
const MAX_SHOWN: usize = 200;

fn flag(value: &str, accepted: &str) -> AppError {
    let shown = match value.chars().count() {
        n if n > MAX_SHOWN => format!(
            "{}… ({n} characters)",
            value.chars().take(MAX_SHOWN).collect::<String>()
        ),
        _ => value.to_owned(),
    };
    AppError::Flag {
        flag: "--set",
        value: shown,
        accepted: accepted.to_owned(),
    }
}

/// The most members one sweep takes: each is read, resolved and checked
/// before any work (about a millisecond each on two cores), and the
/// sweep's record and table hold them all.
const MAX_MEMBERS: usize = 10_000;

/// `s` split at commas outside brackets, braces and TOML strings (basic,
/// where a backslash escapes the next character, and literal).
fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut current, mut depth) = (Vec::new(), String::new(), 0i32);
    // The quote of the string the scan is in, and whether the last
    // character was an escaping backslash.
    let (mut quote, mut escaped): (Option<char>, bool) = (None, false);
    for c in s.chars() {
        match (quote, c) {
            (Some('"'), _) if escaped => escaped = false,
            (Some('"'), '\\') => escaped = true,
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut current).trim().to_owned());
                continue;
            }
            (None, _) => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_owned());
    out
}

fn parse_set(arg: &str) -> Result<Sweep, AppError> {
    let accepted = "KEY=V1,V2,... with a dotted case key (e.g. fluid.viscosity) and TOML values";
    let (key, values) = arg.split_once('=').ok_or_else(|| flag(arg, accepted))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(flag(arg, accepted));
    }
    if key.chars().count() > MAX_SHOWN {
        return Err(flag(
            arg,
            &format!("a case key (docs/CASES.md) of at most {MAX_SHOWN} characters"),
        ));
    }
    // An array index in one spelling, so that two spellings of one key
    // (`bodies.0` and `bodies.00`) cannot be swept as two keys.
    for segment in key.split('.') {
        let numeric = segment.trim_start_matches(['+', '-']);
        if !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()) {
            let canonical = segment.parse::<usize>().ok().map(|n| n.to_string());
            if canonical.as_deref() != Some(segment) {
                return Err(flag(
                    arg,
                    &format!(
                        "an array index written as a whole number from 0 without sign or leading zeros (`{segment}`)"
                    ),
                ));
            }
        }
    }
    let values = split_values(values);
    if values.iter().any(String::is_empty) {
        return Err(flag(arg, "every value non-empty, separated by commas"));
    }
    let mut parsed: Vec<toml::Value> = Vec::with_capacity(values.len());
    for v in &values {
        let value = toml_value(v).ok_or_else(|| {
            flag(
                arg,
                &format!("`{v}` is not a TOML value (quote strings; no comment or newline)"),
            )
        })?;
        if value.is_datetime() {
            return Err(flag(
                arg,
                &format!("`{v}` is a TOML date or time, which no case key takes"),
            ));
        }
        // The same value twice would run the same member twice; 1 and 1.0
        // are the same number to the case.
        let value = as_floats(value);
        if let Some(k) = parsed.iter().position(|p| *p == value) {
            return Err(flag(arg, &format!("each value once (`{v}` repeats `{}`)", values[k])));
        }
        parsed.push(value);
    }
    Ok(Sweep {
        key: key.to_owned(),
        values,
    })
}

/// `value` with every integer in it as a float: the value a case reads.
fn as_floats(value: toml::Value) -> toml::Value {
    match value {
        toml::Value::Integer(i) => toml::Value::Float(i as f64),
        toml::Value::Array(items) => toml::Value::Array(items.into_iter().map(as_floats).collect()),
        toml::Value::Table(table) => toml::Value::Table(table.into_iter().map(|(k, v)| (k, as_floats(v))).collect()),
        other => other,
    }
}

/// Refuses a key swept twice, or inside another swept key (`bodies.0` and
/// `bodies.0.radius`): one would overwrite the other in every member.
fn check_keys_apart(sweeps: &[Sweep]) -> Result<(), AppError> {
    let within = |inner: &str, outer: &str| inner.starts_with(&format!("{outer}."));
    for (k, later) in sweeps.iter().enumerate() {
        for earlier in &sweeps[..k] {
            let (a, b) = (earlier.key.as_str(), later.key.as_str());
            let why = if a == b {
                format!("each key in one --set only (`{a}` is swept twice)")
            } else if let Some((inner, outer)) = [(a, b), (b, a)].into_iter().find(|(i, o)| within(i, o)) {
                format!("keys apart from each other (`{inner}` lies within `{outer}`)")
            } else {
                continue;
            };
            return Err(flag(&format!("{b}=..."), &why));
        }
    }
    Ok(())
}

/// One TOML value, without a comment (which would reach the member's label
/// and sweep.csv verbatim) or a line break: read as an array's one element,
/// whose closing bracket a comment would hide.
fn toml_value(text: &str) -> Option<toml::Value> {
    if text.contains(['\n', '\r']) {
        return None;
    }
    let table: toml::Table = toml::from_str(&format!("v = [{text}]")).ok()?;
    match table["v"].as_array()?.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// Sets dotted `key` of `table` to `value`; a numeric segment indexes an
/// array (`bodies.0.radius`), and missing tables are created.
fn set_key(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let segments: Vec<&str> = key.split('.').collect();
    let mut node = table;
    for (k, segment) in segments.iter().enumerate() {
        let last = k + 1 == segments.len();
        let next = segments.get(k + 1);
        let entry = node
            .entry(segment.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let mut target = entry;
        if let Some(index) = next.and_then(|n| n.parse::<usize>().ok()) {
            let toml::Value::Array(items) = target else {
                return Err(format!("`{segment}` is not an array, so `{key}` cannot index it"));
            };
            let len = items.len();
            target = items
                .get_mut(index)
                .ok_or_else(|| format!("`{key}` indexes entry {index} of `{segment}`, which has {len}"))?;
            if k + 2 == segments.len() {
                *target = value;
                return Ok(());
            }
            let toml::Value::Table(t) = target else {
                return Err(format!("entry {index} of `{segment}` is not a table"));
            };
            return set_key(t, &segments[k + 2..].join("."), value);
        }
        if last {
            *target = value;
            return Ok(());
        }
        match target {
            toml::Value::Table(t) => node = t,
            toml::Value::Array(_) => {
                return Err(format!(
                    "`{segment}` is an array: index its entries with a whole number from 0 (`{segment}.0`), not `{}`",
                    next.unwrap_or(&"")
                ));
            }
            _ => return Err(format!("`{segment}` is a value, not a table, so `{key}` cannot be set")),
        }
    }
    Ok(())
}

/// A member ready to run: its case as written and resolved, and its plan.
struct Member {
    index: usize,
    parameters: Parameters,
    text: String,
    case: Case,
    resolved: Resolved,
    plan: Plan,
}

fn describe(parameters: &Parameters) -> String {
    parameters
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters of member `index` of the cartesian product of `sweeps`
/// (the first key varies slowest).
fn parameters_of(sweeps: &[Sweep], index: usize) -> Parameters {
    let mut rest = index;
    let mut picks = vec![0; sweeps.len()];
    for (k, s) in sweeps.iter().enumerate().rev() {
        picks[k] = rest % s.values.len();
        rest /= s.values.len();
    }
    sweeps
        .iter()
        .zip(&picks)
        .map(|(s, &p)| (s.key.clone(), s.values[p].clone()))
        .collect()
}

/// Every member of the cartesian product (the first key varies slowest),
/// each read, resolved and compared with member 0, or the first refusal.
fn members(base: &str, sweeps: &[Sweep], steps: Option<u64>) -> Result<Vec<Member>, AppError> {
    // The caller has read the case itself, so it is TOML.
    let table: toml::Table = toml::from_str(base).expect("the swept case was read");
    let total: usize = sweeps.iter().map(|s| s.values.len()).product();
    let mut out: Vec<Member> = Vec::with_capacity(total);
    let mut first_identity: Option<(MemberIdentity, Vec<u64>, u64)> = None;
    for index in 0..total {
        let parameters = parameters_of(sweeps, index);
        let refuse = |reason: String| AppError::SweepMember {
            member: index,
            parameters: describe(&parameters),
            reason,
        };
        let mut member_table = table.clone();
        for (key, value) in &parameters {
            let value = toml_value(value).expect("checked when parsed");
            set_key(&mut member_table, key, value).map_err(&refuse)?;
        }
        let text = toml::to_string(&member_table).map_err(|e| refuse(e.to_string()))?;
        // Lines and columns would be of the member's generated text, which
        // the user never sees: the key says where.
        let mut case = Case::from_toml(&text).map_err(|e| match e {
            lbm_core::Error::CaseSyntax { key, message, .. } => refuse(
                lbm_core::Error::CaseSyntax {
                    line: None,
                    column: None,
                    key,
                    message,
                }
                .to_string(),
            ),
            e => refuse(e.to_string()),
        })?;
        if let Some(steps) = steps {
            case.run.steps = steps;
        }
        let resolved = case.resolve().map_err(|e| refuse(e.to_string()))?;
        let plan = Plan::of("run", &resolved).map_err(|e| refuse(e.to_string()))?;
        let identity = MemberIdentity::of(&resolved.lattice, &exec(&resolved));
        let sampled = (resolved.output.save_points.clone(), resolved.output.forces_every);
        match &first_identity {
            None => first_identity = Some((identity, sampled.0, sampled.1)),
            Some((first, saves, every)) => {
                if let Some((what, mine, theirs)) = identity.difference(first) {
                    return Err(refuse(format!(
                        "its {what} differs from member 0's ({mine} against {theirs}); a sweep may vary \
                         physical parameters, not what sets the grids, bodies or schedule"
                    )));
                }
                let first = &out[0].resolved;
                // The members' samples are compared at the same times, and
                // sweep.csv has one column per probe for every member. A
                // time step of its own would also change the run's length
                // in intervals: that is the cause to name.
                if resolved.units.dt != first.units.dt {
                    return Err(refuse(format!(
                        "its time step is {} s where member 0's is {} s (flow.reference_velocity, \
                         flow.lattice_velocity and domain.resolution set it): a sweep's members share it",
                        resolved.units.dt, first.units.dt
                    )));
                }
                if resolved.steps != first.steps || sampled.0 != *saves || sampled.1 != *every {
                    return Err(refuse(
                        "its run length, save points or sample period differ from member 0's".into(),
                    ));
                }
                let names = |r: &Resolved| -> Vec<String> {
                    let output = &r.output;
                    let probes = output.probes.iter().map(|p| p.name.clone());
                    probes.chain(output.lines.iter().map(|l| l.name.clone())).collect()
                };
                if names(&resolved) != names(first) {
                    return Err(refuse(format!(
                        "its probes and lines are named {:?} where member 0's are {:?}: the sweep's table \
                         has one set of columns for every member",
                        names(&resolved),
                        names(first)
                    )));
                }
            }
        }
        out.push(Member {
            index,
            parameters,
            text,
            case,
            resolved,
            plan,
        });
    }
    Ok(out)
}

fn parse_shard(text: &str, members: usize) -> Result<[usize; 2], AppError> {
    let bad = |accepted: String| AppError::Flag {
        flag: "--shard",
        value: text.to_owned(),
        accepted,
    };
    let (k, n) = text
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse::<usize>().ok()?, n.trim().parse::<usize>().ok()?)))
        .ok_or_else(|| bad("K/N with 0 <= K < N (the task's index and the number of tasks)".into()))?;
    if n == 0 || k >= n {
        return Err(bad("K/N with 0 <= K < N".into()));
    }
    if n > members {
        return Err(bad(format!("at most {members} shards, one per member")));
    }
    Ok([k, n])
}

fn sweep_sha256(case: &str, sweeps: &[Sweep], steps: Option<u64>) -> String {
    let value = serde_json::json!({ "case": case, "sweeps": sweeps, "steps": steps });
    crate::plan::hex(&Sha256::digest(value.to_string().as_bytes()))
}

/// The member's output directory name.
fn member_dir(index: usize, members: usize) -> String {
    let width = members.saturating_sub(1).to_string().len().max(3);
    format!("members/{index:0width$}")
}

/// The Strouhal number `f L / U` of the lift over the second half of
/// `series` (time s, cd, cl), when it oscillates as a wake sheds: at least
/// three upward crossings of its mean; a swing above 1e-3 and above 1% of
/// the mean drag; at the lift's own frequency (over the whole periods
/// between its first and last crossing) a larger amplitude in the lift
/// than in the drag (shedding moves the drag at twice its frequency; the
/// pressure waves of an impulsive start, ringing in the domain, move both
/// at theirs, the drag more); and the last quarter's swing at least half
/// the third quarter's (a ringing that decays is no shedding). Comparing
/// amplitudes at one frequency, not whole swings, keeps a shedding whose
/// drag also rings (a short ramp) from being taken for ringing alone. The
/// frequency is that of the last two periods.
fn strouhal(series: &[(f64, f64, f64)], length: f64, velocity: f64) -> Option<f64> {
    let half = &series[series.len() / 2..];
    if half.len() < 8 {
        return None;
    }
    let lift = |p: &(f64, f64, f64)| p.2;
    let drag = |p: &(f64, f64, f64)| p.1;
    let mean = half.iter().map(lift).sum::<f64>() / half.len() as f64;
    let drag_mean = half.iter().map(drag).sum::<f64>() / half.len() as f64;
    let swing = |s: &[(f64, f64, f64)], value: fn(&(f64, f64, f64)) -> f64| {
        let (lo, hi) = s
            .iter()
            .map(value)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        hi - lo
    };
    let q = half.len() / 2;
    let (third, last) = (swing(&half[..q], lift), swing(&half[q..], lift));
    let whole = swing(half, lift);
    if !(whole > 1e-3_f64.max(0.01 * drag_mean.abs()) && last >= 0.5 * third) {
        return None;
    }
    let crossings: Vec<f64> = half
        .windows(2)
        .filter(|w| w[0].2 < mean && w[1].2 >= mean)
        .map(|w| {
            let f = (mean - w[0].2) / (w[1].2 - w[0].2);
            w[0].0 + f * (w[1].0 - w[0].0)
        })
        .collect();
    if crossings.len() < 3 {
        return None;
    }
    let n = crossings.len();
    let (start, end) = (crossings[0], crossings[n - 1]);
    let window: Vec<&(f64, f64, f64)> = half.iter().filter(|p| p.0 >= start && p.0 < end).collect();
    let omega = 2.0 * std::f64::consts::PI * (n - 1) as f64 / (end - start);
    let amplitude = |value: fn(&(f64, f64, f64)) -> f64| {
        let mean = window.iter().map(|p| value(p)).sum::<f64>() / window.len() as f64;
        let (c, s) = window.iter().fold((0.0, 0.0), |(c, s), p| {
            let v = value(p) - mean;
            (c + v * (omega * p.0).cos(), s + v * (omega * p.0).sin())
        });
        2.0 * c.hypot(s) / window.len() as f64
    };
    if amplitude(lift) <= amplitude(drag) {
        return None;
    }
    // The last two periods: while the shedding grows its period shortens,
    // and the settled one is the newest.
    let period = (crossings[n - 1] - crossings[n - 3]) / 2.0;
    Some(length / (period * velocity))
}

/// Runs the sweep; see the module documentation.
pub fn sweep(options: &SweepOptions) -> Result<Ending, AppError> {
    if options.sets.is_empty() {
        return Err(flag("(none)", "at least one --set KEY=V1,V2,..."));
    }
    options.limits.check()?;
    let sweeps = options
        .sets
        .iter()
        .map(|s| parse_set(s))
        .collect::<Result<Vec<_>, _>>()?;
    check_keys_apart(&sweeps)?;
    let total = sweeps.iter().try_fold(1usize, |n, s| n.checked_mul(s.values.len()));
    if total.is_none_or(|n| n > MAX_MEMBERS) {
        let lengths: Vec<String> = sweeps.iter().map(|s| s.values.len().to_string()).collect();
        return Err(flag(
            &format!(
                "{} values ({} members)",
                lengths.join(" x "),
                total.map_or("too many".into(), |n| n.to_string())
            ),
            &format!(
                "lists whose product is at most {MAX_MEMBERS} members: every member is checked before any work, and \
                 one sweep holds them all; split a larger study into sweeps of fewer values"
            ),
        ));
    }
    if let Some(n) = total.filter(|n| *n > 1000 && !options.quiet) {
        tell!("checking the {n} members before any work");
    }
    // Members step together, so they share one schedule: refused here by
    // name, before a member's comparison would call it a difference.
    if let Some(swept) = sweeps.iter().find(|s| s.key == "run.steps") {
        return Err(AppError::Flag {
            flag: "--set",
            value: format!("run.steps={}", swept.values.join(",")),
            accepted: "a key other than run.steps: a sweep's members step together and share their run length \
                       (set it in the case, or with --steps)"
                .into(),
        });
    }
    // The case as written first, its errors naming the file and the key.
    let (base, _, _) = crate::check::read_case(&options.case, options.steps)?;
    let all = members(&base, &sweeps, options.steps)?;
    let count = all.len();
    let shard = options.shard.as_deref().map(|s| parse_shard(s, count)).transpose()?;
    let chosen: Vec<&Member> = all
        .iter()
        .filter(|m| shard.is_none_or(|[k, n]| m.index % n == k))
        .collect();
    let drivers = open_drivers(&chosen, options.mode, options.backend, options.device)?;
    // A writer thread a member, the watchdog's and the stop signals'.
    crate::guard::check_thread_room(chosen.len() + 2)?;
    prepare_output(&options.out)?;
    // The warning lbm run gives, once, with the members it concerns.
    let held: Vec<(usize, String)> = chosen
        .iter()
        .filter_map(|m| crate::check::held_by_bodies(&m.resolved).map(|w| (m.index, w)))
        .collect();
    if let Some((_, warning)) = held.first() {
        let which: Vec<String> = held.iter().map(|(k, _)| k.to_string()).collect();
        let members = match which.len() {
            1 => format!("member {}", which[0]),
            _ => format!("members {} (the figures member {}'s)", which.join(", "), which[0]),
        };
        tell!("warning: {members}: {warning}");
    }
    let _lock = crate::run::lock_directory(&options.out).map_err(|reason| AppError::OutputDir {
        path: options.out.display().to_string(),
        reason,
    })?;
    let mut record = SweepRecord {
        sweep_sha256: sweep_sha256(&base, &sweeps, options.steps),
        case: options.case.display().to_string(),
        case_text: Some(base.clone()),
        mode: options.mode,
        sweeps: sweeps.clone(),
        steps: options.steps,
        members: count,
        shard,
        bodies: Some(all[0].resolved.lattice.bodies.len()),
        probes: Some(all[0].resolved.output.probes.iter().map(|p| p.name.clone()).collect()),
        results: chosen.iter().map(|m| MemberResult::running(m, count)).collect(),
    };
    // Written before any member runs: a sweep that is killed can be resumed.
    write_json(&options.out.join("sweep.json"), &record)?;
    let runs = chosen.iter().map(|&m| (m, None)).collect();
    let settings = Settings {
        mode: options.mode,
        count,
        steps: options.steps,
        limits: options.limits,
        quiet: options.quiet,
    };
    let results = run_members(&options.out, &record, runs, drivers, &settings)?;
    record.results = results.results;
    finish(&options.out, &record)?;
    Ok(results.ending)
}

/// `lbm resume DIR` of a sweep's directory: every member of the record that
/// has not ended continues from its newest checkpoint (or, with none, from
/// the start), in the sweep's mode, and the results are written again. A
/// fused sweep whose members stopped at different intervals continues in
/// lockstep, which gives the same bits.
pub fn resume(
    dir: &Path,
    backend: BackendChoice,
    device: Option<usize>,
    quiet: bool,
    limits: Limits,
) -> Result<Ending, AppError> {
    limits.check()?;
    let refuse = |reason: String| AppError::Resume {
        dir: dir.display().to_string(),
        reason,
    };
    let _lock = crate::run::lock_directory(dir).map_err(refuse)?;
    crate::run::check_writable(dir).map_err(|reason| {
        refuse(format!(
            "{reason}: copy the directory somewhere writable and resume the copy"
        ))
    })?;
    let path = dir.join("sweep.json");
    let text = std::fs::read_to_string(&path).map_err(|e| refuse(format!("cannot read {} ({e})", path.display())))?;
    let mut record: SweepRecord =
        serde_json::from_str(&text).map_err(|e| refuse(format!("{} is not a sweep record ({e})", path.display())))?;
    let Some(base) = record.case_text.clone() else {
        return Err(refuse(match is_merge(&record) {
            // A merge's members live in its shards.
            true => "it is a merge of shards (`lbm sweep --merge`), which holds no members to continue: resume \
                         each shard that did not end, then merge them again"
                .into(),
            false => "its sweep.json holds no case text (a sweep of an older lbm): run the sweep again".into(),
        }));
    };
    if sweep_sha256(&base, &record.sweeps, record.steps) != record.sweep_sha256 {
        return Err(refuse(
            "its sweep.json is damaged: the case and keys do not give its sweep_sha256".into(),
        ));
    }
    let all = members(&base, &record.sweeps, record.steps)?;
    let count = all.len();
    if count != record.members {
        return Err(refuse(format!(
            "its sweep.json counts {} members where its case and keys make {count}",
            record.members
        )));
    }
    check_rows(&record).map_err(refuse)?;
    // Each member of the record: its result kept, or how it goes on.
    let mut kept: Vec<MemberResult> = Vec::new();
    let mut runs: Vec<(&Member, Option<ResumePoint>)> = Vec::new();
    // Emptied only once every driver has opened and admitted the batch: a
    // resume refused for want of memory leaves the members as they were.
    let mut restart: Vec<PathBuf> = Vec::new();
    for previous in &record.results {
        let member = all
            .get(previous.index)
            .ok_or_else(|| refuse(format!("its sweep.json names member {} of {count}", previous.index)))?;
        let out = dir.join(member_dir(member.index, count));
        // A member that failed (a write error, a lost device) goes on from
        // its checkpoint, as a plain run that failed does; one resumed on
        // its own since brings its result into the record.
        let retry = previous.ended == "failed" && can_retry(&out);
        if ENDED.contains(&previous.ended.as_str()) && !retry {
            let since = (previous.ended == "failed")
                .then(|| ended_on_disk(member, &out, count))
                .flatten();
            kept.push(since.unwrap_or_else(|| previous.clone()));
            continue;
        }
        // The member goes on as the sweep made it; a case.toml edited since
        // would no longer say what it ran.
        if let Ok(text) = std::fs::read_to_string(out.join("case.toml"))
            && text != member.text
        {
            return Err(refuse(format!(
                "{}/case.toml is not the case the sweep wrote for member {} (edited since?): restore it, or \
                 run the edited case on its own",
                member_dir(member.index, count),
                member.index
            )));
        }
        match (!retry).then(|| ended_on_disk(member, &out, count)).flatten() {
            Some(result) => kept.push(result),
            None => {
                let point = match crate::run::read_manifest(&out)
                    .and_then(|manifest| resume_point(&out, manifest, &member.plan, AGAIN))
                {
                    Ok(Some(point)) => Some(point),
                    Ok(None) => {
                        tell!("member {}: no checkpoint to continue from; {AGAIN}", member.index);
                        None
                    }
                    Err(e) => {
                        // A refusal of the checkpoints already ends in what
                        // happens next.
                        let e = e.to_string();
                        match e.ends_with(AGAIN) {
                            true => tell!("member {}: {e}", member.index),
                            false => tell!("member {}: {e}; {AGAIN}", member.index),
                        }
                        None
                    }
                };
                if point.is_none() {
                    restart.push(out);
                }
                runs.push((member, point));
            }
        }
    }
    if runs.is_empty() {
        if kept == record.results && outputs_written(dir, &record) {
            return Err(refuse("every member has ended; there is nothing to resume".into()));
        }
        record.results = kept;
        finish(dir, &record)?;
        return Ok(Ending::Completed);
    }
    // A writer thread a member going on, the watchdog's and the signals'.
    crate::guard::check_thread_room(runs.len() + 2)?;
    let mut mode = record.mode;
    if mode == SweepMode::Fused {
        let at: Vec<u64> = runs
            .iter()
            .map(|(_, p)| p.as_ref().map_or(0, ResumePoint::done))
            .collect();
        if at.iter().any(|&d| d != at[0]) {
            tell!(
                "note: the fused members stopped at different intervals ({}); they go on in lockstep, \
                 which gives the same bits",
                at.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            );
            mode = SweepMode::Lockstep;
        }
    }
    // A member resumed on its own meanwhile is refused here, before any
    // other member runs (its session would fail on the lock, as a member
    // that failed).
    for (member, _) in &runs {
        let name = member_dir(member.index, count);
        let out = dir.join(&name);
        if out.is_dir() {
            crate::run::lock_directory(&out).map_err(|reason| refuse(format!("{name}: {reason}")))?;
        }
    }
    let chosen: Vec<&Member> = runs.iter().map(|(m, _)| *m).collect();
    let drivers = open_drivers(&chosen, mode, backend, device)?;
    for out in &restart {
        clear_run_files(out)?;
    }
    let settings = Settings {
        mode,
        count,
        steps: record.steps,
        limits,
        quiet,
    };
    let template = SweepRecord {
        results: kept.clone(),
        ..record.clone()
    };
    let ran = run_members(dir, &template, runs, drivers, &settings)?;
    kept.extend(ran.results);
    kept.sort_by_key(|r| r.index);
    record.results = kept;
    finish(dir, &record)?;
    Ok(ran.ending)
}

/// How a member that has ended ended: a resume keeps its result, but for
/// one that failed and can go on ([`can_retry`]).
const ENDED: [&str; 3] = ["completed", "failed", "diverged"];

/// Whether the member run in `out` failed and its summary says `lbm resume`
/// continues it (a diverged run would diverge again, and says not).
fn can_retry(out: &Path) -> bool {
    std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|summary| summary["ended"] == "failed" && summary["resume"].is_string())
}

/// Whether member `r` of `record` in `dir` is one `lbm resume DIR` goes on
/// with: stopped early, or failed and can go on.
fn goes_on(dir: &Path, record: &SweepRecord, r: &MemberResult) -> bool {
    !ENDED.contains(&r.ended.as_str())
        || (r.ended == "failed" && can_retry(&dir.join(member_dir(r.index, record.members))))
}

/// Whether `dir` holds a sweep that `lbm resume` can continue: a record
/// with its case text and a member that [`goes_on`].
pub(crate) fn is_unfinished(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("sweep.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<SweepRecord>(&text).ok())
        .is_some_and(|record| record.case_text.is_some() && record.results.iter().any(|r| goes_on(dir, &record, r)))
}

/// The result of a member whose own directory says it has ended (its
/// summary completed, failed or diverged) though the sweep's record does
/// not: the sweep was stopped after it ended.
fn ended_on_disk(member: &Member, out: &Path, count: usize) -> Option<MemberResult> {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).ok()?).ok()?;
    let ended = summary["ended"].as_str()?.to_owned();
    let error = summary["error"].as_str().map(str::to_owned);
    match ended.as_str() {
        "failed" | "diverged" => Some(MemberResult {
            ended,
            error,
            mlups: summary["mlups"].as_f64().unwrap_or(0.0),
            ..MemberResult::running(member, count)
        }),
        "completed" => {
            let coefficients: Vec<[f64; 2]> = serde_json::from_value(summary["coefficients"].clone()).ok()?;
            let (history, probe_history) = crate::run::checkpointed_histories(out)?;
            Some(member_result(
                member,
                count,
                Ended {
                    ended,
                    error,
                    coefficients: &coefficients,
                    mlups: summary["mlups"].as_f64().unwrap_or(0.0),
                    mass_drift: summary["mass_drift"].as_f64(),
                },
                &history,
                &probe_history,
            ))
        }
        _ => None,
    }
}

/// A driver for each member: one fused batch on one driver, or one driver
/// each; every driver opened, and the whole batch's memory admitted, before
/// anything is written. A fused batch's members are checked against the
/// driver that runs them.
fn open_drivers(
    chosen: &[&Member],
    mode: SweepMode,
    backend: BackendChoice,
    device: Option<usize>,
) -> Result<Vec<crate::backend::Opened>, AppError> {
    let mut drivers: Vec<crate::backend::Opened> = Vec::with_capacity(chosen.len());
    if mode == SweepMode::Fused {
        let (driver, device) = backend.open(device)?;
        let configs: Vec<_> = chosen
            .iter()
            .map(|m| (m.resolved.lattice.clone(), exec(&m.resolved)))
            .collect();
        let sizes = lbm_core::fused::check(&configs, driver.split_min_cells()).map_err(|e| {
            let k = match &e {
                lbm_core::Error::FusedShape { member, .. } | lbm_core::Error::FusedMember { member, .. } => *member,
                _ => 0,
            };
            AppError::SweepMember {
                member: chosen[k].index,
                parameters: describe(&chosen[k].parameters),
                reason: format!("{e} (--fused)"),
            }
        })?;
        for member in lbm_core::fused::member_drivers(driver, chosen.len(), &sizes) {
            drivers.push((Box::new(member), device.clone()));
        }
    } else {
        for _ in chosen {
            drivers.push(backend.open(device)?);
        }
    }
    let needs = chosen
        .iter()
        .map(|m| crate::check::memory_need(&m.resolved, None))
        .collect::<Result<Vec<_>, _>>()?;
    let levels = chosen[0].resolved.lattice.hierarchy.levels.len() + 1;
    crate::check::check_batch_memory(&needs, levels, &drivers[0].0)?;
    crate::check::check_open_files(chosen.iter().map(|m| &m.resolved))?;
    Ok(drivers)
}

/// How a run of members goes.
struct Settings {
    mode: SweepMode,
    /// Members in the whole sweep.
    count: usize,
    /// `--steps`.
    steps: Option<u64>,
    limits: Limits,
    quiet: bool,
}

/// What a run of members gave: each member's result, and how the run ended.
struct Ran {
    results: Vec<MemberResult>,
    ending: Ending,
}

/// Runs `runs` (each member, from the start or from a checkpoint) on
/// `drivers` to the end together; see the module documentation.
fn run_members(
    out: &Path,
    template: &SweepRecord,
    runs: Vec<(&Member, Option<ResumePoint>)>,
    drivers: Vec<crate::backend::Opened>,
    settings: &Settings,
) -> Result<Ran, AppError> {
    let &Settings {
        mode,
        count,
        steps,
        limits,
        quiet,
    } = settings;
    let fused = mode == SweepMode::Fused;
    let chosen: Vec<&Member> = runs.iter().map(|(m, _)| *m).collect();
    let dirs: Vec<PathBuf> = chosen.iter().map(|m| out.join(member_dir(m.index, count))).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).map_err(|source| AppError::Write {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let inputs: Vec<SessionInput> = chosen
        .iter()
        .zip(&dirs)
        .map(|(m, dir)| SessionInput {
            text: &m.text,
            case: &m.case,
            resolved: &m.resolved,
            plan: &m.plan,
            out: dir,
        })
        .collect();
    let started = Instant::now();
    let request = Request {
        steps,
        picture_width: None,
        devices: None,
        device_list: None,
    };
    let mut results: Vec<Option<MemberResult>> = vec![None; chosen.len()];
    // A member that failed before it stepped has no summary.
    let failed_result = |m: &Member, e: &AppError, summary: Option<&Summary>| MemberResult {
        ended: match e.cause() {
            AppError::Diverged { .. } => "diverged".into(),
            _ => "failed".into(),
        },
        error: Some(e.to_string()),
        mlups: summary.map_or(0.0, |s| s.mlups),
        ..MemberResult::running(m, count)
    };
    let mut sessions = Vec::with_capacity(chosen.len());
    for (((k, input), opened), (_, point)) in inputs.iter().enumerate().zip(drivers).zip(runs) {
        let session = match point {
            None => open_session(input, vec![opened], None, &request, started, None),
            Some(point) => open_resumed(input, point, vec![opened], &request, started, None),
        };
        match session {
            Ok(s) => sessions.push(Some(s)),
            Err(e) => {
                results[k] = Some(failed_result(chosen[k], &e, None));
                sessions.push(None);
            }
        }
    }
    let stop = chosen[0].resolved.steps;
    let signals = Signals::install();
    // One watchdog thread for the members: a stall is the loop's, and it
    // writes every member that has not ended as stalled, then the sweep's
    // record with them, so that `lbm resume` continues them.
    let period = Duration::from_secs_f64(limits.watchdog_seconds);
    let watched: Vec<usize> = (0..sessions.len()).filter(|&k| sessions[k].is_some()).collect();
    let book = Arc::new(Mutex::new(results.clone()));
    let on_stall: OnStall = {
        let book = book.clone();
        let out = out.to_owned();
        let running: Vec<MemberResult> = chosen.iter().map(|m| MemberResult::running(m, count)).collect();
        let mut record = template.clone();
        Box::new(move |stalled: &[(usize, Summary)]| {
            let book = book.lock().unwrap_or_else(|p| p.into_inner());
            let mut names = Vec::new();
            for (k, running) in running.iter().enumerate() {
                let stall = stalled.iter().find(|(j, _)| *j == k);
                let result = match (&book[k], stall) {
                    (Some(ended), _) => ended.clone(),
                    (None, Some((_, summary))) => {
                        names.push(running.index.to_string());
                        MemberResult {
                            ended: "stalled".into(),
                            error: summary.error.clone(),
                            mlups: summary.mlups,
                            ..running.clone()
                        }
                    }
                    (None, None) => running.clone(),
                };
                match record.results.iter_mut().find(|r| r.index == result.index) {
                    Some(slot) => *slot = result,
                    None => record.results.push(result),
                }
            }
            record.results.sort_by_key(|r| r.index);
            let written = match write_results(&out, &record) {
                Ok(()) => format!("sweep.csv in {} says so", out.display()),
                Err(e) => format!("the sweep's record could not be written ({e})"),
            };
            format!(
                "the sweep stalled: member(s) {} made no progress for {} s (--watchdog-seconds); the device or the \
                 file system may be hung; {written}; continue with: {}",
                names.join(", "),
                period.as_secs_f64(),
                crate::run::resume_command(&out)
            )
        })
    };
    let group = Watchdog::group(
        watched
            .iter()
            .map(|&k| {
                (
                    k,
                    dirs[k].clone(),
                    sessions[k].as_ref().expect("watched").stalled_summary(),
                )
            })
            .collect(),
        period,
        Some(on_stall),
    )?;
    let mut watchdogs: Vec<Option<Watchdog>> = (0..sessions.len()).map(|_| None).collect();
    for (k, watchdog) in watched.iter().zip(group) {
        watchdogs[*k] = Some(watchdog);
    }
    // A member that fails is watched no longer, and the stall's record has it.
    let note_failure = |k: usize, result: &MemberResult| {
        if let Some(w) = &watchdogs[k] {
            w.end();
        }
        book.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(result.clone());
    };
    let updates = sessions
        .iter()
        .flatten()
        .map(|s| s.updates_per_interval())
        .next()
        .unwrap_or(0);
    let done_now = |sessions: &[Option<Session<'_, Box<dyn lbm_core::Driver>>>]| -> u64 {
        sessions.iter().map(|s| s.as_ref().map_or(stop, |s| s.done())).sum()
    };
    // Counted in member-intervals; the time shown is the members' own.
    let mut progress = Progress::new(
        done_now(&sessions),
        stop * chosen.len() as u64,
        chosen[0].resolved.units.dt / chosen.len() as f64,
        updates,
        quiet,
    );
    // Each member's own progress is silent; the sweep's counts members x intervals.
    let mut silent = Progress::new(0, stop, chosen[0].resolved.units.dt, updates, true);
    // Lockstep: up to each boundary, every member's chunk is planned, all are
    // enqueued, then all are waited for (their work runs side by side on a
    // GPU), then each handles its own samples, saves and checks. Members
    // that continue from checkpoints of different intervals join as the
    // boundaries reach them.
    let boundary_every = stop.div_ceil(100).max(1);
    let mut paces: Vec<Pace> = sessions.iter().map(|_| Pace::new()).collect();
    let mut ending = Ending::Completed;
    let mut reached = 0;
    'run: while reached < stop {
        reached = (reached + boundary_every).min(stop);
        loop {
            let mut chunks: Vec<Option<u64>> = vec![None; sessions.len()];
            // A fused batch's members advance by the same intervals, so
            // their chunks end at each sample; lockstep members take the
            // samples inside their chunks where they can.
            let inside: Vec<bool> = sessions
                .iter()
                .map(|s| !fused && s.as_ref().is_some_and(|s| s.samples_in_chunks()))
                .collect();
            for (k, slot) in sessions.iter_mut().enumerate() {
                let Some(session) = slot else { continue };
                session.set_stop(reached);
                if session.done() < reached {
                    match session.plan_chunk(&limits, &paces[k], inside[k]) {
                        Ok(Some(n)) => chunks[k] = Some(n),
                        Ok(None) => {
                            ending = Ending::WallLimit;
                            break 'run;
                        }
                        Err(e) => {
                            let (e, summary) = session.fail(e);
                            let result = failed_result(chosen[k], &e, Some(&summary));
                            note_failure(k, &result);
                            results[k] = Some(result);
                            *slot = None;
                        }
                    }
                }
            }
            if chunks.iter().all(Option::is_none) {
                break;
            }
            if fused {
                // A fused batch advances as a whole: every member by the same intervals.
                let shortest = chunks.iter().flatten().min().copied();
                chunks
                    .iter_mut()
                    .flatten()
                    .for_each(|n| *n = shortest.expect("some member has a chunk"));
            }
            let mut failed = |k: usize, slot: &mut Option<Session<'_, Box<dyn lbm_core::Driver>>>, e: AppError| {
                let session = slot.as_mut().expect("a member with a chunk is open");
                let (e, summary) = session.fail(e);
                let result = failed_result(chosen[k], &e, Some(&summary));
                note_failure(k, &result);
                results[k] = Some(result);
                *slot = None;
            };
            let start = Instant::now();
            for (k, slot) in sessions.iter_mut().enumerate() {
                if let (Some(n), Some(session)) = (chunks[k], slot.as_mut())
                    && let Err(e) = session.begin_chunk(n, inside[k])
                {
                    chunks[k] = None;
                    failed(k, slot, e);
                }
            }
            let mut ended: Vec<Option<Chunk>> = (0..sessions.len()).map(|_| None).collect();
            for (k, slot) in sessions.iter_mut().enumerate() {
                if let (Some(n), Some(session)) = (chunks[k], slot.as_mut()) {
                    match session.end_chunk(n, inside[k]) {
                        Ok(chunk) => ended[k] = Some(chunk),
                        Err(e) => failed(k, slot, e),
                    }
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            for (k, slot) in sessions.iter_mut().enumerate() {
                let (Some(chunk), Some(session)) = (ended[k].take(), slot.as_mut()) else {
                    continue;
                };
                let watchdog = watchdogs[k].as_ref().expect("a watchdog per open session");
                match session.finish_chunk(chunk, seconds, &mut paces[k], &signals, watchdog, &mut silent) {
                    Ok(None) => {}
                    Ok(Some(other)) => ending = other,
                    Err(e) => failed(k, slot, e),
                }
            }
            if ending != Ending::Completed {
                break 'run;
            }
        }
        progress.update(done_now(&sessions), &[]);
    }
    progress.finish();
    for (k, slot) in sessions.iter_mut().enumerate() {
        let Some(session) = slot else { continue };
        let member = chosen[k];
        let history = session.coefficient_history();
        let probe_history = session.probe_history().to_vec();
        results[k] = Some(match session.end_cleanly(ending) {
            Ok(summary) => member_result(
                member,
                count,
                Ended {
                    ended: serde_json::to_value(summary.ended)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    error: summary.error.clone(),
                    coefficients: &summary.coefficients,
                    mlups: summary.mlups,
                    mass_drift: summary.mass_drift,
                },
                &history,
                &probe_history,
            ),
            Err(e) => {
                let (e, summary) = session.fail(e);
                failed_result(member, &e, Some(&summary))
            }
        });
    }
    drop(watchdogs);
    Ok(Ran {
        results: results.into_iter().map(|r| r.expect("every member ended")).collect(),
        ending,
    })
}

/// How a member's run ended, from its summary.
struct Ended<'a> {
    ended: String,
    error: Option<String>,
    /// Each body's last (cd, cl).
    coefficients: &'a [[f64; 2]],
    mlups: f64,
    mass_drift: Option<f64>,
}

/// A member's results from how it ended and its histories.
fn member_result(
    member: &Member,
    count: usize,
    ended: Ended<'_>,
    history: &[(u64, Vec<[f64; 2]>)],
    probe_history: &[(u64, Vec<Option<[f64; 3]>>)],
) -> MemberResult {
    let dt = member.resolved.units.dt;
    let half = &history[history.len() / 2..];
    let bodies = (0..ended.coefficients.len())
        .map(|b| {
            let mean = |c: usize| half.iter().map(|(_, v)| v[b][c]).sum::<f64>() / half.len().max(1) as f64;
            let series: Vec<(f64, f64, f64)> = history
                .iter()
                .map(|(s, v)| (*s as f64 * dt, v[b][0], v[b][1]))
                .collect();
            BodyResult {
                cd: ended.coefficients[b][0],
                cl: ended.coefficients[b][1],
                cd_mean: mean(0),
                cl_mean: mean(1),
                strouhal: strouhal(
                    &series,
                    member.resolved.output.reference_length,
                    member.resolved.output.reference_velocity,
                ),
            }
        })
        .collect();
    let probes = member
        .resolved
        .output
        .probes
        .iter()
        .enumerate()
        .map(|(k, probe)| ProbeResult::of(&probe.name, k, probe_history))
        .collect();
    MemberResult {
        ended: ended.ended,
        error: ended.error,
        bodies,
        probes,
        mlups: ended.mlups,
        mass_drift: ended.mass_drift,
        ..MemberResult::running(member, count)
    }
}

/// Writes the results and fails the sweep, after they are written, when a
/// member failed or diverged.
fn finish(out: &Path, record: &SweepRecord) -> Result<(), AppError> {
    write_results(out, record)?;
    let failed: Vec<&MemberResult> = record
        .results
        .iter()
        .filter(|r| r.error.is_some() && r.ended != "interrupted" && r.ended != "wall limit")
        .collect();
    if !failed.is_empty() {
        let others = match failed.len() == record.results.len() {
            true => "",
            false => ", with the others' results",
        };
        let rest = match record.results.iter().any(|r| goes_on(out, record, r)) {
            true => format!(
                "{others}; those that stopped early or failed and can go on continue with: {}",
                crate::run::resume_command(out)
            ),
            false => others.to_owned(),
        };
        return Err(AppError::SweepFailed {
            failed: failed.len(),
            members: record.results.len(),
            list: failed
                .iter()
                .map(|r| match &r.error {
                    // The cause (a full disk names its file), as the
                    // member's summary.json gives it.
                    Some(error) => format!("member {}: {} ({})", r.index, r.ended, error),
                    None => format!("member {}: {}", r.index, r.ended),
                })
                .collect::<Vec<_>>()
                .join(", "),
            out: out.display().to_string(),
            rest,
        });
    }
    Ok(())
}

/// `sweep.json`, `sweep.csv` and the plots of `record` in `out`.
/// The record last: a sweep stopped while it writes the rest still reads
/// as unfinished, or `lbm resume` finds what is missing
/// ([`outputs_written`]).
fn write_results(out: &Path, record: &SweepRecord) -> Result<(), AppError> {
    write_atomic(&out.join("sweep.csv"), csv(record).as_bytes())?;
    let plots = out.join("plots");
    let drawn = plots_of(record);
    for (name, image) in &drawn {
        std::fs::create_dir_all(&plots).map_err(|source| AppError::Write {
            path: plots.display().to_string(),
            source,
        })?;
        write_atomic(&plots.join(format!("{name}.png")), &image.png())?;
    }
    // A plot drawn from results that have since changed (a sweep stopped
    // and resumed: a quantity some member had before and none has now)
    // would show values sweep.csv no longer holds. Only the sweep's own
    // quantities' plots go; any other file stays.
    for (name, _) in quantities(record) {
        if !drawn.iter().any(|(plot, _)| *plot == name) {
            let stale = plots.join(format!("{name}.png"));
            if stale.is_file() {
                let _ = std::fs::remove_file(stale);
            }
        }
    }
    write_json(&out.join("sweep.json"), record)
}

/// Whether `sweep.csv` and every plot of `record` are in `dir`.
fn outputs_written(dir: &Path, record: &SweepRecord) -> bool {
    dir.join("sweep.csv").exists()
        && plotted(record)
            .iter()
            .all(|(name, _)| dir.join("plots").join(format!("{name}.png")).exists())
}

/// The quantities that get a plot: those some member has a value of.
fn plotted(record: &SweepRecord) -> Vec<(String, Read)> {
    quantities(record)
        .into_iter()
        .filter(|(_, get)| record.results.iter().any(|r| get(r).is_some()))
        .collect()
}

/// How a quantity is read from a member's results.
type Read = Box<dyn Fn(&MemberResult) -> Option<f64>>;

/// The quantities of the record's members: each body's coefficients, then
/// each point probe's values (the probes of the first member that has any;
/// every member of a sweep has the same), column name and how to read it.
fn quantities(record: &SweepRecord) -> Vec<(String, Read)> {
    type BodyRead = fn(&BodyResult) -> Option<f64>;
    let body_columns: [(&str, BodyRead); 5] = [
        ("cd", |b| Some(b.cd)),
        ("cl", |b| Some(b.cl)),
        ("cd_mean", |b| Some(b.cd_mean)),
        ("cl_mean", |b| Some(b.cl_mean)),
        ("strouhal", |b| b.strouhal),
    ];
    let bodies = record
        .bodies
        .unwrap_or_else(|| record.results.iter().map(|r| r.bodies.len()).max().unwrap_or(0));
    let mut out: Vec<(String, Read)> = Vec::new();
    for b in 0..bodies {
        for (name, get) in body_columns {
            out.push((
                format!("body{b}_{name}"),
                Box::new(move |r: &MemberResult| r.bodies.get(b).and_then(get)),
            ));
        }
    }
    let probes: Vec<String> = record.probes.clone().unwrap_or_else(|| {
        record
            .results
            .iter()
            .find(|r| !r.probes.is_empty())
            .map(|r| r.probes.iter().map(|p| p.name.clone()).collect())
            .unwrap_or_default()
    });
    for (k, name) in probes.into_iter().enumerate() {
        for (c, column) in PROBE_COLUMNS.iter().enumerate() {
            for mean in [false, true] {
                let suffix = if mean { "_mean" } else { "" };
                out.push((
                    format!("probe_{name}_{column}{suffix}"),
                    Box::new(move |r: &MemberResult| {
                        let p = r.probes.get(k)?;
                        if mean { p.mean[c] } else { p.last[c] }
                    }),
                ));
            }
        }
    }
    out
}

/// A swept value as a CSV reader should see it: a TOML string without its
/// quotes (`constant`, not `"constant"`), anything else as written.
fn unquoted(value: &str) -> String {
    match toml_value(value) {
        Some(toml::Value::String(text)) => text,
        _ => value.to_owned(),
    }
}

fn csv_field(text: &str) -> String {
    match text.contains([',', '"', '\n']) {
        true => format!("\"{}\"", text.replace('"', "\"\"")),
        false => text.to_owned(),
    }
}

fn csv(record: &SweepRecord) -> String {
    let quantities = quantities(record);
    let mut header: Vec<String> = vec!["member".into()];
    header.extend(record.sweeps.iter().map(|s| csv_field(&s.key)));
    header.extend(["ended".into(), "mlups".into(), "mass_drift".into()]);
    header.extend(quantities.iter().map(|(name, _)| csv_field(name)));
    header.push("out".into());
    let mut text = header.join(",") + "\n";
    for r in &record.results {
        let mut row: Vec<String> = vec![r.index.to_string()];
        row.extend(r.parameters.iter().map(|(_, v)| csv_field(&unquoted(v))));
        row.push(csv_field(&r.ended));
        row.push(format!("{}", r.mlups));
        row.push(r.mass_drift.map(|d| format!("{d:e}")).unwrap_or_default());
        for (_, get) in &quantities {
            row.push(get(r).map(|v| format!("{v}")).unwrap_or_default());
        }
        row.push(csv_field(&r.out));
        text += &(row.join(",") + "\n");
    }
    text
}

/// One plot per quantity against the first swept key (its values' order
/// when they are not numbers), one panel per combination of the other keys.
fn plots_of(record: &SweepRecord) -> Vec<(String, crate::output::picture::Image)> {
    let Some(first) = record.sweeps.first() else {
        return Vec::new();
    };
    // Values that are not all numbers are categories: placed in their
    // order and named under the axis.
    let numeric = first.values.iter().all(|v| v.parse::<f64>().is_ok());
    let x_of = |r: &MemberResult| {
        let v = &r.parameters[0].1;
        match numeric {
            true => v.parse::<f64>().unwrap_or(f64::NAN),
            false => first.values.iter().position(|x| x == v).unwrap_or(0) as f64,
        }
    };
    let categories = (!numeric).then_some(&first.values[..]);
    let mut out = Vec::new();
    for (name, get) in plotted(record) {
        let panels = panels(&record.results, |r| get(r).map(|y| [x_of(r), y]));
        let series: Vec<Series> = panels
            .into_iter()
            .map(|(rest, mut points)| {
                points.sort_by(|a, b| a[0].total_cmp(&b[0]));
                Series {
                    title: match rest.is_empty() {
                        true => name.clone(),
                        false => format!("{name} ({rest})"),
                    },
                    points,
                    markers: true,
                }
            })
            .collect();
        out.push((name.clone(), render_with(&series, &axis_title(&first.key), categories)));
    }
    out
}

/// A swept key as its plot's axis names it: the key and, for a key of a
/// physical quantity, its unit as docs/CASES.md gives it (in ASCII: the
/// plots' font has no superscripts).
fn axis_title(key: &str) -> String {
    let name = key
        .rsplit('.')
        .find(|part| part.parse::<usize>().is_err())
        .unwrap_or(key);
    let unit = match name {
        "size" | "reference_length" | "center" | "radius" | "min" | "max" | "pivot" | "patches" | "span" => "m",
        // A polygon's corners; an inlet table's points are times and factors.
        "points" if key.starts_with("bodies") => "m",
        "viscosity" => "m^2/s",
        "density" => "kg/m^3",
        "velocity" | "reference_velocity" | "moving_wall" => "m/s",
        // `initial.pressure`, the only numeric key of that name.
        "pressure" => "Pa",
        "acceleration" => "m/s^2",
        "rotation" => "degrees",
        "duration" | "period" | "every" | "forces_every" => "s",
        "lattice_velocity" => "lattice units",
        "resolution" => "cells per reference length",
        "steps" | "every_intervals" => "base intervals",
        _ => return key.to_owned(),
    };
    format!("{key} [{unit}]")
}

/// The members' points (`point` of each, where it has one) grouped by the
/// values of every swept key but the first: one panel each, named by them,
/// in the members' order, which takes those values in the order the --set
/// lists give them (text order put 10 before 9).
fn panels(results: &[MemberResult], point: impl Fn(&MemberResult) -> Option<[f64; 2]>) -> Vec<(String, Vec<[f64; 2]>)> {
    let mut sorted: Vec<&MemberResult> = results.iter().collect();
    sorted.sort_by_key(|r| r.index);
    let mut panels: Vec<(String, Vec<[f64; 2]>)> = Vec::new();
    for r in sorted {
        let rest = describe(&r.parameters[1..].to_vec());
        if let Some(p) = point(r) {
            match panels.iter_mut().find(|(name, _)| *name == rest) {
                Some((_, points)) => points.push(p),
                None => panels.push((rest, vec![p])),
            }
        }
    }
    panels
}

/// `lbm sweep --merge OUT SHARD_DIR...`: the shards' results in one
/// `sweep.csv`, `sweep.json` and plots in `out`.
/// Whether `record` is what `--merge` wrote: no case text, no shard, and
/// its members in the shards' directories rather than its own.
/// What a shard's (or a whole sweep's) `sweep.json` must hold, whatever was
/// edited in it: a shard `[K, N]` of its members, a row for each of the
/// members that shard runs and no other, and each row's ending one a run
/// writes (or "running").
fn check_rows(record: &SweepRecord) -> Result<(), String> {
    let members = record.members;
    if let Some([k, n]) = record.shard
        && !(k < n && n <= members)
    {
        return Err(format!(
            "its sweep.json says it is shard {k}/{n} of {members} members, which no `--shard` makes (edited?)"
        ));
    }
    let mut rows: Vec<usize> = record.results.iter().map(|r| r.index).collect();
    rows.sort_unstable();
    let runs: Vec<usize> = (0..members)
        .filter(|i| record.shard.is_none_or(|[k, n]| i % n == k))
        .collect();
    if rows != runs {
        return Err(format!(
            "its sweep.json has rows for {} member(s) where its {} runs {} (edited?)",
            rows.len(),
            record
                .shard
                .map_or("sweep".to_owned(), |[k, n]| format!("shard {k}/{n}")),
            runs.len()
        ));
    }
    if let Some(r) = record
        .results
        .iter()
        .find(|r| r.ended != "running" && Ending::ALL.iter().all(|e| e.name() != r.ended))
    {
        return Err(format!(
            "its sweep.json says member {} ended `{}`, which no run writes (edited?)",
            r.index, r.ended
        ));
    }
    Ok(())
}

fn is_merge(record: &SweepRecord) -> bool {
    record.case_text.is_none()
        && record.shard.is_none()
        && record
            .results
            .iter()
            .any(|r| r.out != member_dir(r.index, record.members))
}

pub fn merge(out: &Path, shards: &[PathBuf]) -> Result<(), AppError> {
    if shards.is_empty() {
        return Err(AppError::Flag {
            flag: "--merge",
            value: out.display().to_string(),
            accepted: "OUT followed by at least one shard directory".into(),
        });
    }
    let mut merged: Option<SweepRecord> = None;
    let mut seen: BTreeMap<usize, String> = BTreeMap::new();
    for dir in shards {
        let refuse = |reason: String| AppError::SweepMerge {
            shard: dir.display().to_string(),
            reason,
        };
        let path = dir.join("sweep.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| refuse(format!("cannot read {} ({e})", path.display())))?;
        let mut record: SweepRecord = serde_json::from_str(&text)
            .map_err(|e| refuse(format!("{} is not a sweep record ({e})", path.display())))?;
        if let Some(m) = &merged
            && m.sweep_sha256 != record.sweep_sha256
        {
            return Err(refuse(format!(
                "it is another sweep (sweep_sha256 {} against {} of the first shard)",
                record.sweep_sha256, m.sweep_sha256
            )));
        }
        if is_merge(&record) {
            return Err(refuse(
                "it is a merge already (`lbm sweep --merge` wrote it): merge the shards themselves".into(),
            ));
        }
        // A shard's record holds its case: its hash says the keys and
        // values are the ones it ran.
        if let Some(base) = &record.case_text
            && sweep_sha256(base, &record.sweeps, record.steps) != record.sweep_sha256
        {
            return Err(refuse(
                "its sweep.json is damaged: the case and keys do not give its sweep_sha256 (edited?)".into(),
            ));
        }
        // The hash covers the sweep, not each member's row: a row is what
        // the sweep made it, or the shard was edited.
        let members: usize = record.sweeps.iter().map(|s| s.values.len()).product();
        if record.members != members {
            return Err(refuse(format!(
                "its sweep.json says {} members where its sweeps make {members}",
                record.members
            )));
        }
        check_rows(&record).map_err(refuse)?;
        for r in &record.results {
            if r.index >= members || r.parameters != parameters_of(&record.sweeps, r.index) {
                return Err(refuse(format!(
                    "its sweep.json's row of member {} ({}) is not a member of its sweep (edited?)",
                    r.index,
                    describe(&r.parameters)
                )));
            }
            if r.out != member_dir(r.index, members) {
                return Err(refuse(format!(
                    "its sweep.json puts member {} in {} where the sweep wrote {} (edited?)",
                    r.index,
                    r.out,
                    member_dir(r.index, members)
                )));
            }
            if ["running", "wall limit", "interrupted", "stalled"].contains(&r.ended.as_str()) {
                return Err(refuse(format!(
                    "its member {} has not ended ({}): `{}` first",
                    r.index,
                    r.ended,
                    crate::run::resume_command(dir)
                )));
            }
            // A failure a resume gets past (a full disk, a lost device), as
            // the shard's own sweep says.
            if r.ended == "failed" && can_retry(&dir.join(&r.out)) {
                return Err(refuse(format!(
                    "its member {} failed and can go on: `{}` first",
                    r.index,
                    crate::run::resume_command(dir)
                )));
            }
            if let Some(other) = seen.insert(r.index, dir.display().to_string()) {
                return Err(refuse(format!("member {} is also in shard {other}", r.index)));
            }
        }
        for r in &mut record.results {
            r.out = dir.join(&r.out).display().to_string();
        }
        match &mut merged {
            // A merge holds no members' directories to resume.
            None => {
                merged = Some(SweepRecord {
                    shard: None,
                    case_text: None,
                    ..record
                })
            }
            Some(m) => m.results.extend(record.results),
        }
    }
    let mut merged = merged.expect("at least one shard");
    merged.results.sort_by_key(|r| r.index);
    // A job-array task that never ran, or a member's directory gone, is
    // refused: a merge with exit 0 is the whole sweep.
    let missing: Vec<String> = (0..merged.members)
        .filter(|k| !seen.contains_key(k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(AppError::SweepMerge {
            shard: shards
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            reason: format!(
                "member(s) {} of the sweep's {} are in none of these shards: merge every shard (--shard K/N for \
                 each K), or run the missing ones",
                missing.join(", "),
                merged.members
            ),
        });
    }
    if let Some(r) = merged.results.iter().find(|r| !Path::new(&r.out).is_dir()) {
        return Err(AppError::SweepMerge {
            shard: r.out.clone(),
            reason: format!("member {}'s directory is missing", r.index),
        });
    }
    // The merge's OUT is no --out.
    let accepted = |why: String| {
        format!("an OUT directory that is new or empty ({why}), for the merged sweep.csv, sweep.json and plots")
    };
    prepare_output(out).map_err(|e| match e {
        AppError::OutputNotEmpty { path, .. } => AppError::Flag {
            flag: "--merge",
            value: path,
            accepted: accepted("it holds files".into()),
        },
        AppError::OutputDir { path, reason } => AppError::Flag {
            flag: "--merge",
            value: path,
            accepted: accepted(reason),
        },
        e => e,
    })?;
    // Each member's directory stays in its shard: named from the merge's
    // directory, so that the tree moves whole.
    for r in &mut merged.results {
        r.out = relative_path(out, Path::new(&r.out));
    }
    // A member that failed or diverged fails the merge, after the results
    // are written, as it fails the sweep.
    finish(out, &merged)
}

/// `target` as seen from the directory `from` (both existing): through
/// `..` where they part, or absolute where they share no root.
fn relative_path(from: &Path, target: &Path) -> String {
    let (Ok(from), Ok(to)) = (from.canonicalize(), target.canonicalize()) else {
        return target.display().to_string();
    };
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    if common == 0 {
        return to.display().to_string();
    }
    let mut path = PathBuf::new();
    for _ in from.components().skip(common) {
        path.push("..");
    }
    path.extend(to.components().skip(common));
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commas inside strings, escaped quotes and literal strings do not
    /// split a list of values.
    #[test]
    fn values_split_at_commas_outside_strings_and_brackets() {
        assert_eq!(
            split_values(r#""it\"s, here","x", 'a,b' , [1, 2],{ r = 1, s = 2 }"#),
            [r#""it\"s, here""#, r#""x""#, "'a,b'", "[1, 2]", "{ r = 1, s = 2 }"]
        );
        assert_eq!(split_values(r#""a\\",b"#), [r#""a\\""#, "b"]);
    }

    /// A CSV reader gets a swept string as the string (pandas read
    /// `"constant"` with its quotes before), other values as written.
    #[test]
    fn swept_strings_reach_the_csv_without_their_toml_quotes() {
        assert_eq!(unquoted("\"constant\""), "constant");
        assert_eq!(unquoted("'parabolic'"), "parabolic");
        assert_eq!(unquoted("1e-3"), "1e-3");
        let table = "{ ramp = { duration = 0.05 } }";
        assert_eq!(unquoted(table), table);
        assert_eq!(csv_field(&unquoted("\"a, \\\"b\\\"\"")), "\"a, \"\"b\"\"\"");
    }

    #[test]
    fn plot_panels_follow_the_lists_order_not_the_texts() {
        let member = |index: usize, a: &str, b: &str| MemberResult {
            index,
            parameters: vec![("fluid.viscosity".into(), a.into()), ("fluid.density".into(), b.into())],
            ended: "completed".into(),
            error: None,
            bodies: Vec::new(),
            probes: Vec::new(),
            mlups: 0.0,
            mass_drift: None,
            out: String::new(),
        };
        // --set fluid.viscosity=1,2 --set fluid.density=9,10, the record's
        // rows in another order (a merge's).
        let results = [
            member(3, "2", "10"),
            member(0, "1", "9"),
            member(2, "2", "9"),
            member(1, "1", "10"),
        ];
        let panels = panels(&results, |r| Some([r.parameters[0].1.parse().unwrap(), r.index as f64]));
        let names: Vec<&str> = panels.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["fluid.density = 9", "fluid.density = 10"]);
        assert_eq!(panels[1].1, [[1.0, 1.0], [2.0, 3.0]]);
    }

    #[test]
    fn a_plots_axis_gives_the_swept_keys_unit() {
        for (key, title) in [
            ("fluid.viscosity", "fluid.viscosity [m^2/s]"),
            (
                "boundaries.x_min.inlet.velocity",
                "boundaries.x_min.inlet.velocity [m/s]",
            ),
            ("bodies.0.rotation", "bodies.0.rotation [degrees]"),
            ("bodies.1.center.1", "bodies.1.center.1 [m]"),
            ("bodies.0.points", "bodies.0.points [m]"),
            (
                "boundaries.x_min.inlet.amplitude.table.points",
                "boundaries.x_min.inlet.amplitude.table.points",
            ),
            ("flow.collision.magic", "flow.collision.magic"),
            ("domain.resolution", "domain.resolution [cells per reference length]"),
            ("initial.pressure", "initial.pressure [Pa]"),
            ("initial.velocity.0", "initial.velocity.0 [m/s]"),
            ("boundaries.x_min.inlet.span.1", "boundaries.x_min.inlet.span.1 [m]"),
        ] {
            assert_eq!(axis_title(key), title);
        }
    }

    #[test]
    fn values_split_at_top_level_commas_only() {
        assert_eq!(split_values("1e-3, 2e-3,3e-3"), vec!["1e-3", "2e-3", "3e-3"]);
        assert_eq!(
            split_values("{ ramp = { duration = 1.0 } }, \"a,b\", [1, 2]"),
            vec!["{ ramp = { duration = 1.0 } }", "\"a,b\"", "[1, 2]"]
        );
    }

    #[test]
    fn a_key_swept_twice_or_within_another_and_a_repeated_value_are_refused() {
        let sweeps = |args: &[&str]| args.iter().map(|a| parse_set(a).unwrap()).collect::<Vec<_>>();
        let refused = |args: &[&str]| check_keys_apart(&sweeps(args)).unwrap_err().to_string();
        let e = refused(&[
            "fluid.viscosity=1e-3",
            "flow.lattice_velocity=0.05",
            "fluid.viscosity=2e-3",
        ]);
        assert!(e.contains("`fluid.viscosity` is swept twice"), "{e}");
        let e = refused(&["bodies.0.radius=0.05,0.06", "bodies.0={ radius = 0.1 }"]);
        assert!(e.contains("`bodies.0.radius` lies within `bodies.0`"), "{e}");
        let e = refused(&["bodies.0={ radius = 0.1 }", "bodies.0.radius=0.05"]);
        assert!(e.contains("`bodies.0.radius` lies within `bodies.0`"), "{e}");
        // An array index has one spelling, so two spellings of one key
        // cannot pass as two keys.
        for set in ["bodies.00.radius=0.1", "bodies.+0.radius=0.1", "bodies.-1.radius=0.1"] {
            let e = parse_set(set).unwrap_err().to_string();
            assert!(
                e.contains("an array index written as a whole number from 0"),
                "{set}: {e}"
            );
        }
        // A shared prefix of characters is not a shared table.
        check_keys_apart(&sweeps(&[
            "fluid.visc=1",
            "fluid.viscosity=1,2",
            "bodies.1.x=1",
            "bodies.10.x=1",
        ]))
        .unwrap();
        for set in [
            "bodies.0.rotation=0,0.0",
            "bodies.0.rotation=1,2,1.0",
            "bodies.0.center=[1, 2],[1.0, 2]",
        ] {
            let e = parse_set(set).unwrap_err().to_string();
            assert!(e.contains("each value once"), "{set}: {e}");
        }
        let e = parse_set("fluid.viscosity=1e-3,2e-3,0.001").unwrap_err().to_string();
        assert!(
            e.contains("each value once") && e.contains("`0.001` repeats `1e-3`"),
            "{e}"
        );
    }

    #[test]
    fn keys_set_nested_tables_and_array_entries() {
        let mut t: toml::Table = toml::from_str("[fluid]\nviscosity = 1.0\n[[bodies]]\nradius = 1.0\n").unwrap();
        set_key(&mut t, "fluid.viscosity", toml::Value::Float(2.0)).unwrap();
        set_key(&mut t, "bodies.0.radius", toml::Value::Float(3.0)).unwrap();
        set_key(&mut t, "flow.lattice_velocity", toml::Value::Float(0.1)).unwrap();
        assert_eq!(t["fluid"]["viscosity"].as_float(), Some(2.0));
        assert_eq!(t["bodies"][0]["radius"].as_float(), Some(3.0));
        assert_eq!(t["flow"]["lattice_velocity"].as_float(), Some(0.1));
        let e = set_key(&mut t, "bodies.3.radius", toml::Value::Float(1.0)).unwrap_err();
        assert!(e.contains("entry 3") && e.contains("has 1"), "{e}");
        let e = set_key(&mut t, "fluid.viscosity.x", toml::Value::Float(1.0)).unwrap_err();
        assert!(e.contains("not a table"), "{e}");
    }

    #[test]
    fn the_strouhal_number_needs_a_sustained_oscillation() {
        let f = 2.0;
        let tau = 2.0 * std::f64::consts::PI;
        // Drag of mean `drag` swinging by `drag_swing` at twice the lift's frequency.
        let series = |decay: f64, drag: f64, drag_swing: f64| -> Vec<(f64, f64, f64)> {
            (0..400)
                .map(|i| {
                    let t = i as f64 * 0.01;
                    let cd = drag + 0.5 * drag_swing * (tau * 2.0 * f * t).cos();
                    (t, cd, 0.3 * (-decay * t).exp() * (tau * f * t).sin())
                })
                .collect()
        };
        let st = strouhal(&series(0.0, 3.0, 0.05), 0.1, 0.2).unwrap();
        assert!((st - f * 0.1 / 0.2).abs() < 1e-3, "{st}");
        // A shedding that settles from a longer period gives the settled one.
        let settling: Vec<(f64, f64, f64)> = (0..400)
            .map(|i| {
                let t = i as f64 * 0.01;
                // Phase of a frequency rising from 0.8 f to f by t = 3, then
                // f: the second half (t from 2) starts slower.
                let phase = if t < 3.0 {
                    f * (0.8 * t + t * t / 30.0)
                } else {
                    f * (t - 0.3)
                };
                (t, 3.0, 0.3 * (tau * phase).sin())
            })
            .collect();
        let st = strouhal(&settling, 0.1, 0.2).unwrap();
        assert!((st - f * 0.1 / 0.2).abs() < 2e-3, "{st}");
        assert_eq!(
            strouhal(&series(3.0, 3.0, 0.05), 0.1, 0.2),
            None,
            "a decaying ringing is not shedding"
        );
        assert_eq!(
            strouhal(&series(0.0, 100.0, 0.05), 0.1, 0.2),
            None,
            "a swing of 0.6 against a drag of 100 is noise"
        );
        // A drag swinging more than the lift at twice its frequency is a
        // wake's: shedding.
        let st = strouhal(&series(0.0, 3.0, 0.7), 0.1, 0.2).unwrap();
        assert!((st - f * 0.1 / 0.2).abs() < 1e-3, "{st}");
        // A start's ringing moves the drag more than the lift at its own
        // frequency: no shedding.
        let ringing: Vec<(f64, f64, f64)> = (0..400)
            .map(|i| {
                let t = i as f64 * 0.01;
                (t, 3.0 + 0.35 * (tau * f * t).cos(), 0.3 * (tau * f * t).sin())
            })
            .collect();
        assert_eq!(strouhal(&ringing, 0.1, 0.2), None, "a ringing, not shedding");
        // Shedding whose drag also rings, more than the lift swings, at
        // another frequency (a short ramp): the shedding's number.
        let both: Vec<(f64, f64, f64)> = (0..400)
            .map(|i| {
                let t = i as f64 * 0.01;
                let cd = 3.0 + 0.35 * (tau * 1.37 * f * t).cos() + 0.02 * (tau * 2.0 * f * t).cos();
                (t, cd, 0.2 * (tau * f * t).sin())
            })
            .collect();
        let st = strouhal(&both, 0.1, 0.2).unwrap();
        assert!((st - f * 0.1 / 0.2).abs() < 1e-3, "{st}");
        let steady: Vec<(f64, f64, f64)> = (0..400).map(|i| (i as f64, 3.0, 0.01)).collect();
        assert_eq!(strouhal(&steady, 0.1, 0.2), None);
    }

    #[test]
    fn shards_are_k_of_n() {
        assert_eq!(parse_shard("1/4", 10).unwrap(), [1, 4]);
        for bad in ["4/4", "1/0", "x/2", "1", "1/20"] {
            let e = parse_shard(bad, 10).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains("--shard"), "{e}");
        }
    }
}
