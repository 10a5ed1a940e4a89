//! `lbm validate dfg-2d1|dfg-2d2`: the DFG "flow around a cylinder" benchmarks
//! (Schäfer & Turek 1996) run to the criterion each defines, compared with the
//! published reference values and intervals, written as `report.json` and
//! `report.md`.
//!
//! 2D-1 is steady: the forces are averaged over windows one acoustic period of
//! the channel long (the velocity inlet and pressure outlet make it a
//! quarter-wave resonator that rings after the start), and the run stops when
//! two consecutive windows agree. 2D-2 is periodic: after the start-up the
//! lift is sampled until its period repeats, and the maxima, the Strouhal number
//! and the pressure difference half a period after the lift maximum are taken
//! over the last whole period. The series behind them goes to `series.csv`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::ValueEnum;
use serde::Serialize;

use lbm_core::case::{BodyTable, BoundarySpec, Case, Resolved, significant};
use lbm_core::config::{Amplitude, Profile};
use lbm_core::domain::geometry::Shape;
use lbm_core::units::UnitSystem;
use lbm_core::{Driver, ExecConfig, Stepper};

use crate::AppError;
use crate::backend::BackendChoice;
use crate::guard::Signals;
use crate::output::write_atomic;
use crate::plan::{PilotChoice, PilotRecord, Plan, check_pilot, pilot_intervals};
use crate::progress::Progress;
use crate::run::{Ending, prepare_output, write_json};

/// Cells per diameter on the finest level when `--resolution` is not given:
/// the coarsest at which every quantity of both benchmarks lies inside its
/// interval (2D-1's cl is 5.5% low at 40), which for 2D-2 also keeps its
/// coarsest level clear of τ = 1/2.
pub const DEFAULT_RESOLUTION: u32 = 80;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
pub enum Benchmark {
    #[value(name = "dfg-2d1")]
    #[serde(rename = "dfg-2d1")]
    Dfg2d1,
    #[value(name = "dfg-2d2")]
    #[serde(rename = "dfg-2d2")]
    Dfg2d2,
}

impl Benchmark {
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Dfg2d1 => "dfg-2d1",
            Benchmark::Dfg2d2 => "dfg-2d2",
        }
    }

    /// The simulated time after which the run stops whether or not its
    /// criterion was met, s.
    fn time_limit(self) -> f64 {
        match self {
            Benchmark::Dfg2d1 => 60.0,
            Benchmark::Dfg2d2 => 30.0,
        }
    }
}

pub struct ValidateOptions {
    pub benchmark: Benchmark,
    /// Cells per diameter on the finest level.
    pub resolution: Option<u32>,
    /// Refinement levels of the case file to keep (all of them when `None`);
    /// the base grid then has `resolution / 2^levels` cells per diameter.
    pub levels: Option<u32>,
    /// A variant of the benchmark's case file (other patches, collision,
    /// lattice velocity...) in place of the built-in one; its channel and
    /// cylinder must be the benchmark's.
    pub case: Option<PathBuf>,
    /// The inflow peak in lattice units, overriding the case file's: lower
    /// means a smaller Mach number and more steps for the same physical time.
    pub lattice_velocity: Option<f64>,
    pub backend: BackendChoice,
    /// CUDA device ordinal.
    pub device: Option<usize>,
    pub out: PathBuf,
    pub pilot: PilotChoice,
    /// No progress on stderr.
    pub quiet: bool,
}

impl ValidateOptions {
    /// Whether this is the benchmark's documented validation: its built-in
    /// case at the default resolution, levels and lattice velocity.
    fn is_the_default(&self) -> bool {
        self.case.is_none()
            && self.resolution.is_none_or(|r| r == DEFAULT_RESOLUTION)
            && self.levels.is_none()
            && self.lattice_velocity.is_none()
    }
}

/// A measured quantity against its reference and interval, as
/// `report.json` and `report.md` give it.
#[derive(Debug, Serialize)]
pub struct Quantity {
    pub name: &'static str,
    pub value: f64,
    pub reference: f64,
    pub low: f64,
    pub high: f64,
    pub within: bool,
    /// The value's difference from the reference, relative to it.
    pub relative_to_reference: f64,
    /// How far outside its interval the value lies, relative to the
    /// reference; absent within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub case: Benchmark,
    pub quantities: Vec<Quantity>,
    /// Cells per diameter on the finest level.
    pub resolution: u32,
    /// Refinement levels used.
    pub levels: u32,
    pub steps: u64,
    pub wall_seconds: f64,
    pub backend: String,
    /// Whether the stopping criterion was met before the time limit.
    pub converged: bool,
    /// What makes a variant differ from the built-in benchmark: the case
    /// file given with `--case` (none for the built-in one), the plan's
    /// sha256 (the resolved case, the code), the inflow peak in lattice
    /// units, the collision model.
    pub case_file: Option<String>,
    pub plan_sha256: String,
    pub lattice_velocity: f64,
    pub collision: lbm_core::lattice::Collision,
    /// The `lbm` that measured it.
    pub version: &'static str,
}

const DIAMETER: f64 = 0.1;
const CENTER: [f64; 2] = [0.2, 0.2];

fn quantity(name: &'static str, value: f64, reference: f64, low: f64, high: f64) -> Quantity {
    let within = (low..=high).contains(&value);
    let outside = match (within, value.is_finite(), value > high) {
        (true, ..) => None,
        (false, false, _) => Some("not finite".to_owned()),
        (false, true, above) => {
            let (gap, side) = match above {
                true => (value - high, "above its upper end"),
                false => (low - value, "below its lower end"),
            };
            Some(format!("{:.3}% of the reference {side}", 100.0 * gap / reference.abs()))
        }
    };
    Quantity {
        name,
        value,
        reference,
        low,
        high,
        within,
        relative_to_reference: (value - reference) / reference.abs(),
        outside,
    }
}

/// What `lbm validate` did: measured the benchmark, or ran its pilot.
pub enum Validated {
    Report(Report),
    Pilot(PilotSummary),
}

/// The `summary.json` of a validation's pilot, what `--after-pilot` reads.
#[derive(Debug, Serialize)]
pub struct PilotSummary {
    pub case: Benchmark,
    pub ended: Ending,
    pub plan: Plan,
    pub pilot: PilotRecord,
    pub backend: String,
    pub wall_seconds: f64,
}

pub fn validate(options: &ValidateOptions) -> Result<Validated, AppError> {
    let setup = resolve(options)?;
    let plan = Plan::of(options.benchmark.name(), &setup.resolved)?;
    let max_steps = (options.benchmark.time_limit() / setup.resolved.units.dt).ceil() as u64;
    let pilot = match options.pilot {
        PilotChoice::Run { intervals } => {
            let n = intervals.unwrap_or_else(|| pilot_intervals(max_steps, None));
            if !(1..=max_steps).contains(&n) {
                return Err(AppError::Flag {
                    flag: "--pilot-intervals",
                    value: n.to_string(),
                    accepted: format!("1 to {max_steps}, the benchmark's longest run"),
                });
            }
            Some(n)
        }
        _ => None,
    };
    let (driver, device) = options.backend.open(options.device)?;
    crate::check::check_memory(&setup.resolved, &driver, None)?;
    match &options.pilot {
        PilotChoice::After(dir) => check_pilot(dir, &plan)?,
        // The documented validation (the built-in case, every flag at its
        // default) is known to run: a pilot guards the variants.
        PilotChoice::Default if options.is_the_default() => {}
        PilotChoice::Default => {
            let levels = setup.resolved.levels()?;
            let cuda = device.backend == "cuda";
            // The built-in benchmark has no case file to edit.
            let waiver = match options.case {
                Some(_) => "run.require_pilot = false in the case waives that",
                None => "a --case file with run.require_pilot = false waives that",
            };
            let sampling = crate::check::probe_seconds(&setup.resolved, cuda);
            if let Some(reason) =
                crate::check::pilot_required_for(setup.require_pilot, &levels, max_steps, cuda, sampling, waiver)?
            {
                return Err(AppError::PilotRequired {
                    reason,
                    command: crate::run::given_command(),
                });
            }
        }
        PilotChoice::Run { .. } | PilotChoice::Skip => {}
    }
    prepare_output(&options.out)?;
    match pilot {
        Some(intervals) => pilot_run(driver, options, &setup, plan, intervals).map(Validated::Pilot),
        None => measure(driver, options, &setup).map(Validated::Report),
    }
}

/// The benchmark's first `intervals` intervals; complete when its fields are
/// finite at the end.
fn pilot_run<D: Driver>(
    driver: D,
    options: &ValidateOptions,
    setup: &Setup,
    plan: Plan,
    intervals: u64,
) -> Result<PilotSummary, AppError> {
    let start = Instant::now();
    let backend = driver.backend().to_owned();
    let stepper = Stepper::new(driver, setup.resolved.lattice.clone(), exec())?;
    stepper.step(intervals)?;
    if let Some(found) = stepper.check_health(lbm_core::DIVERGED_MACH / 3f64.sqrt())? {
        return Err(AppError::Diverged {
            step: intervals,
            time: intervals as f64 * setup.resolved.units.dt,
            what: found.to_string(),
            advice: crate::run::divergence_advice(&setup.resolved),
            out: options.out.display().to_string(),
        });
    }
    stepper.close()?;
    let summary = PilotSummary {
        case: options.benchmark,
        ended: Ending::Completed,
        plan,
        pilot: PilotRecord { intervals },
        backend,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    write_json(&options.out.join("summary.json"), &summary)?;
    Ok(summary)
}

fn exec() -> ExecConfig {
    ExecConfig {
        observe_raw_exchange: true,
        observe_window_exchange: true,
        ..ExecConfig::default()
    }
}

/// The case as the options make it, before any work.
struct Setup {
    resolved: Resolved,
    lattice_velocity: f64,
    resolution: u32,
    levels: u32,
    /// The case's `run.require_pilot`.
    require_pilot: Option<bool>,
}

fn resolve(options: &ValidateOptions) -> Result<Setup, AppError> {
    let resolution = options.resolution.unwrap_or(DEFAULT_RESOLUTION);
    let mut case = match &options.case {
        Some(path) => {
            let text = crate::check::read_case_text(path)?;
            let case = Case::from_toml(&text).map_err(|source| AppError::Case {
                path: path.display().to_string(),
                source,
            })?;
            check_benchmark_case(&case, options.benchmark)?;
            case
        }
        None => {
            let text = match options.benchmark {
                Benchmark::Dfg2d1 => include_str!("../cases/dfg-2d1.toml"),
                Benchmark::Dfg2d2 => include_str!("../cases/dfg-2d2.toml"),
            };
            Case::from_toml(text)?
        }
    };
    let available = case.refinement.len() as u32;
    let levels = options.levels.unwrap_or(available);
    if levels > available {
        return Err(AppError::Flag {
            flag: "--levels",
            value: levels.to_string(),
            accepted: format!("0 to {available}, the refinement levels of the case"),
        });
    }
    case.refinement.truncate(levels as usize);
    let velocity_ok = options.lattice_velocity.is_none_or(|v| v > 0.0 && v.is_finite());
    // A velocity out of its range is refused below; the case keeps its own
    // meanwhile, so that the resolution's range is still found.
    if let Some(velocity) = options.lattice_velocity
        && velocity_ok
    {
        case.flow.lattice_velocity = velocity;
    }
    // The base grid must fit the 0.41 m channel exactly: 10 cells per diameter
    // at the least, in steps of 10.
    let step = 10 << levels;
    let multiple = resolution > 0 && resolution.is_multiple_of(step);
    case.domain.resolution = (resolution >> levels) as f64;
    let refused = match multiple && velocity_ok {
        true => match case.resolve() {
            Ok(resolved) => {
                return Ok(Setup {
                    resolved,
                    lattice_velocity: case.flow.lattice_velocity,
                    resolution,
                    levels,
                    require_pilot: case.run.require_pilot,
                });
            }
            Err(e) => Some(e),
        },
        false => None,
    };
    // The flag out of its range is named with the whole range the case
    // accepts for it, the other flags as given.
    if !multiple {
        return Err(resolution_error(&case, resolution, levels, None));
    }
    if let Some(velocity) = options.lattice_velocity {
        let range = case.lattice_velocity_range();
        if !velocity_ok || range.is_some_and(|[lo, hi]| !(lo..=hi).contains(&velocity)) {
            let within = match range {
                Some([lo, hi]) => format!(
                    "from {} to {} for this case at {resolution} cells per diameter (the relaxation time's \
                     limits and Mach {})",
                    significant(lo, true),
                    significant(hi, false),
                    lbm_core::config::MAX_MACH
                ),
                None => format!("but none resolves for this case at {resolution} cells per diameter"),
            };
            return Err(AppError::Flag {
                flag: "--lattice-velocity",
                value: velocity.to_string(),
                accepted: format!("above 0, {within}{}", cause(&refused)),
            });
        }
    }
    // Where no resolution at all resolves, the fault is another key's (a run
    // of 0 steps, a viscosity out of every reach): its own error says so.
    let outside = case
        .resolution_range()
        .is_some_and(|[lo, hi]| !(lo..=hi).contains(&case.domain.resolution));
    match refused {
        Some(e) if !outside => Err(e.into()),
        refused => Err(resolution_error(&case, resolution, levels, refused)),
    }
}

/// What the case's resolution said, for a flag's error.
fn cause(refused: &Option<lbm_core::Error>) -> String {
    refused.as_ref().map_or(String::new(), |e| format!("; at it, {e}"))
}

/// `--resolution` out of its range: a multiple of `10 2^levels` whose base
/// resolution (a multiple of 10) the case accepts with the other flags.
fn resolution_error(case: &Case, resolution: u32, levels: u32, refused: Option<lbm_core::Error>) -> AppError {
    let step = 10u32 << levels;
    let within = match case.resolution_range() {
        Some([lo, hi]) if (lo / 10.0).ceil() <= (hi / 10.0).floor() => format!(
            ", from {} to {} for this case",
            (lo / 10.0).ceil().max(1.0) as u32 * step,
            (hi / 10.0).floor() as u32 * step
        ),
        _ => ", but none resolves for this case".into(),
    };
    AppError::Flag {
        flag: "--resolution",
        value: resolution.to_string(),
        accepted: format!(
            "a multiple of {step} cells per diameter on the finest level with {}{within}{}",
            crate::check::plural(levels as usize, "refinement level"),
            cause(&refused)
        ),
    }
}

/// What is measured on the cylinder at one instant or over a window.
#[derive(Clone, Copy, Debug)]
struct Sample {
    time: f64,
    cd: f64,
    cl: f64,
    delta_p: f64,
}

struct Probe<'a, D: Driver> {
    stepper: &'a Stepper<D>,
    /// Up to the benchmark's time limit: the criterion usually ends the
    /// run well before.
    progress: std::cell::RefCell<Progress>,
    /// SIGINT, SIGTERM or SIGHUP end the run between chunks, its series written.
    signals: Signals,
    units: UnitSystem,
    level: usize,
    /// Mean inflow velocity, m/s: two thirds of the parabola's peak.
    u_mean: f64,
}

impl<D: Driver> Probe<'_, D> {
    fn coefficients(&self, force: [f64; 2]) -> [f64; 2] {
        let scale = 2.0 / (self.units.density * self.u_mean * self.u_mean * DIAMETER);
        force.map(|f| scale * self.units.force_to_physical(self.level, f))
    }

    /// p(front) - p(back) on the cylinder's horizontal diameter, Pa.
    fn delta_p(&self) -> Result<f64, AppError> {
        let at = |x: f64| [self.units.length_to_lattice(x), self.units.length_to_lattice(CENTER[1])];
        let r = 0.5 * DIAMETER;
        let front = self.stepper.surface_density(at(CENTER[0] - r), [-1, 0])?;
        let back = self.stepper.surface_density(at(CENTER[0] + r), [1, 0])?;
        Ok(self.units.pressure_to_physical(front - back))
    }

    /// Progress at the stepper's interval with the latest measured cd and
    /// cl; the end of the run where a signal arrived.
    fn report(&self, latest: Option<&Sample>) -> Result<(), AppError> {
        let coefficients: Vec<[f64; 2]> = latest.map(|s| [s.cd, s.cl]).into_iter().collect();
        let step = self.stepper.step_count();
        self.progress.borrow_mut().update(step, &coefficients);
        match self.signals.raised() {
            true => Err(AppError::Signalled {
                time: step as f64 * self.units.dt,
            }),
            false => Ok(()),
        }
    }

    fn instant(&self) -> Result<Sample, AppError> {
        let record = self.stepper.read_raw_exchange(0)?;
        let [cd, cl] = self.coefficients(record.mean_force());
        Ok(Sample {
            time: self.stepper.step_count() as f64 * self.units.dt,
            cd,
            cl,
            delta_p: self.delta_p()?,
        })
    }
}

fn measure<D: Driver>(driver: D, options: &ValidateOptions, setup: &Setup) -> Result<Report, AppError> {
    let resolved = &setup.resolved;
    let backend = driver.backend().to_owned();
    let stepper = Stepper::new(driver, resolved.lattice.clone(), exec())?;
    let units = resolved.units;
    let inlet_peak = resolved.lattice.inlet.as_ref().map_or(0.0, |i| i.velocity) * units.dx / units.dt;
    let limit = (options.benchmark.time_limit() / units.dt).ceil() as u64;
    let updates = stepper.hierarchy().cell_updates_per_interval();
    let probe = Probe {
        progress: Progress::new(0, limit, units.dt, updates, options.quiet).into(),
        signals: Signals::install(),
        stepper: &stepper,
        units,
        level: resolved.lattice.bodies[0].level,
        u_mean: 2.0 / 3.0 * inlet_peak,
    };
    let start = Instant::now();
    let mut series = Vec::new();
    let measured = match options.benchmark {
        Benchmark::Dfg2d1 => steady(&probe, &mut series),
        Benchmark::Dfg2d2 => periodic(&probe, &mut series),
    };
    probe.progress.borrow().finish();
    // What was measured goes to disk whether or not the criterion was met.
    write_series(&options.out, &series)?;
    let measured = measured.map_err(|source| AppError::Interrupted {
        source: Box::new(source),
        kept: options.out.join("series.csv").display().to_string(),
    })?;
    let report = Report {
        case: options.benchmark,
        quantities: measured.quantities,
        resolution: setup.resolution,
        levels: setup.levels,
        steps: stepper.step_count(),
        wall_seconds: start.elapsed().as_secs_f64(),
        backend,
        converged: measured.converged,
        case_file: options.case.as_ref().map(|p| p.display().to_string()),
        plan_sha256: Plan::of(options.benchmark.name(), &setup.resolved)?.sha256,
        lattice_velocity: setup.lattice_velocity,
        collision: setup.resolved.lattice.collision,
        version: env!("CARGO_PKG_VERSION"),
    };
    stepper.close()?;
    write_report(&options.out, &report)?;
    Ok(report)
}

/// The benchmark's quantities and whether its criterion was met.
struct Measured {
    quantities: Vec<Quantity>,
    converged: bool,
}

/// 2D-1: averages over windows of one acoustic period until two agree; each
/// window's mean goes to `series`.
fn steady<D: Driver>(probe: &Probe<D>, series: &mut Vec<Sample>) -> Result<Measured, AppError> {
    let units = probe.units;
    let channel_length = 2.2;
    let sound = units.dx / units.dt / 3f64.sqrt();
    let window = (4.0 * channel_length / sound / units.dt).round() as u64;
    let samples_per_window = 16;
    let chunk = (window / samples_per_window).max(1);
    let time_limit = 60.0;
    loop {
        probe.stepper.start_exchange_window()?;
        let mut delta_p = 0.0;
        for _ in 0..samples_per_window {
            probe.stepper.step(chunk)?;
            probe.report(series.last())?;
            delta_p += probe.delta_p()?;
        }
        let record = probe.stepper.read_exchange_window(0)?;
        let [cd, cl] = probe.coefficients(record.mean_force());
        let mean = Sample {
            time: probe.stepper.step_count() as f64 * units.dt,
            cd,
            cl,
            delta_p: delta_p / samples_per_window as f64,
        };
        let settled = series.last().is_some_and(|p| {
            (mean.cd - p.cd).abs() < 1e-4 * mean.cd
                && (mean.cl - p.cl).abs() < 1e-4
                && (mean.delta_p - p.delta_p).abs() < 1e-4 * mean.delta_p.abs()
        });
        series.push(mean);
        if settled || mean.time > time_limit {
            let quantities = vec![
                quantity("cd", mean.cd, 5.57953523384, 5.57, 5.59),
                quantity("cl", mean.cl, 0.010618948146, 0.0104, 0.0110),
                quantity("delta_p", mean.delta_p, 0.11752016697, 0.1172, 0.1176),
            ];
            return Ok(Measured {
                quantities,
                converged: settled,
            });
        }
    }
}

/// 2D-2: samples after the start-up until the lift period repeats, each
/// going to `series`.
fn periodic<D: Driver>(probe: &Probe<D>, series: &mut Vec<Sample>) -> Result<Measured, AppError> {
    let units = probe.units;
    let startup = 8.0;
    let time_limit = 30.0;
    // About a hundred samples per shedding period (Strouhal 0.3 at U = 1 m/s).
    let chunk = ((DIAMETER / (0.3 * probe.u_mean) / 100.0) / units.dt).round().max(1.0) as u64;
    // The start-up in the sampling's chunks, so that progress shows
    // through it and a signal is seen within one (a hundred of them took
    // half a minute on two cores).
    let mut left = (startup / units.dt).round() as u64;
    while left > 0 {
        let n = left.min(chunk);
        probe.stepper.step(n)?;
        probe.report(None)?;
        left -= n;
    }
    loop {
        probe.stepper.step(chunk)?;
        series.push(probe.instant()?);
        probe.report(series.last())?;
        let crossings = upward_crossings(series);
        let periods: Vec<f64> = crossings.windows(2).map(|w| w[1] - w[0]).collect();
        let repeating = periods.len() >= 3 && {
            let [a, b] = [periods[periods.len() - 2], periods[periods.len() - 1]];
            (a - b).abs() < 0.01 * b
        };
        let time = series.last().expect("just pushed").time;
        if repeating || time > time_limit {
            if crossings.len() < 2 {
                return Err(AppError::NoShedding { time_limit });
            }
            let (t_start, t_end) = (crossings[crossings.len() - 2], crossings[crossings.len() - 1]);
            let period: Vec<&Sample> = series.iter().filter(|s| s.time >= t_start && s.time <= t_end).collect();
            let cd_max = period.iter().map(|s| s.cd).fold(f64::MIN, f64::max);
            let top = period
                .iter()
                .max_by(|a, b| a.cl.total_cmp(&b.cl))
                .expect("a period has samples");
            let strouhal = DIAMETER / (t_end - t_start) / probe.u_mean;
            let half = top.time + 0.5 * (t_end - t_start);
            let delta_p = interpolate(series, half, |s| s.delta_p);
            let quantities = vec![
                quantity("cd_max", cd_max, 3.23, 3.22, 3.24),
                quantity("cl_max", top.cl, 1.0, 0.99, 1.01),
                quantity("strouhal", strouhal, 0.3, 0.295, 0.305),
                quantity("delta_p", delta_p, 2.48, 2.46, 2.50),
            ];
            return Ok(Measured {
                quantities,
                converged: repeating,
            });
        }
    }
}

/// Times at which the lift crosses its running mean upwards, interpolated.
fn upward_crossings(series: &[Sample]) -> Vec<f64> {
    if series.len() < 3 {
        return Vec::new();
    }
    let mean = series.iter().map(|s| s.cl).sum::<f64>() / series.len() as f64;
    series
        .windows(2)
        .filter(|w| w[0].cl < mean && w[1].cl >= mean)
        .map(|w| w[0].time + (mean - w[0].cl) / (w[1].cl - w[0].cl) * (w[1].time - w[0].time))
        .collect()
}

fn interpolate(series: &[Sample], time: f64, value: impl Fn(&Sample) -> f64) -> f64 {
    series
        .windows(2)
        .find(|w| w[0].time <= time && w[1].time >= time)
        .map_or_else(
            || series.last().map_or(f64::NAN, &value),
            |w| value(&w[0]) + (value(&w[1]) - value(&w[0])) * (time - w[0].time) / (w[1].time - w[0].time),
        )
}

/// The reference values are those of the benchmark's flow: its channel and
/// cylinder, fluid, sides and inflow (a ramp to it or none, whose start
/// the criterion waits out). A case file for `--case` may change how it is
/// computed (patches, collision, lattice velocity, outputs), nothing else.
fn check_benchmark_case(case: &Case, benchmark: Benchmark) -> Result<(), AppError> {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-12);
    let refuse = |key: &str, value: String, accepted: String| AppError::Flag {
        flag: "--case",
        value: format!("{key} = {value}"),
        accepted: format!("{accepted}: the benchmark's flow, which its reference values are of"),
    };
    // --resolution replaces the file's, which is still checked as `lbm run`
    // checks it: a case file that no run takes is no benchmark's either.
    let domain = &case.domain;
    let cells_per_m = domain.resolution / domain.reference_length;
    let cells = (domain.size[0] * cells_per_m).round() * (domain.size[1] * cells_per_m).round();
    if !(domain.resolution > 0.0 && domain.resolution.is_finite() && cells <= lbm_core::case::MAX_BASE_CELLS) {
        return Err(refuse(
            "domain.resolution",
            domain.resolution.to_string(),
            format!(
                "a finite number above 0 that gives domain.size at most {:e} base cells, as `lbm run` takes \
                 (--resolution replaces it)",
                lbm_core::case::MAX_BASE_CELLS
            ),
        ));
    }
    if !close(case.fluid.viscosity, 1e-3) {
        return Err(refuse(
            "fluid.viscosity",
            case.fluid.viscosity.to_string(),
            "1e-3 m^2/s".into(),
        ));
    }
    if !close(case.fluid.density, 1.0) {
        return Err(refuse(
            "fluid.density",
            case.fluid.density.to_string(),
            "1 kg/m^3".into(),
        ));
    }
    // The benchmark's fluid starts at rest and nothing but the inflow drives it.
    if let Some(initial) = &case.initial {
        let written = toml::to_string(initial).unwrap_or_default();
        return Err(refuse(
            "initial",
            format!("{{ {} }}", written.trim().replace('\n', ", ")),
            "no [initial] table (the fluid at rest)".into(),
        ));
    }
    if case.flow.acceleration != [0.0, 0.0] {
        return Err(refuse(
            "flow.acceleration",
            format!("{:?}", case.flow.acceleration),
            "[0.0, 0.0]".into(),
        ));
    }
    let peak = match benchmark {
        Benchmark::Dfg2d1 => 0.3,
        Benchmark::Dfg2d2 => 1.5,
    };
    match &case.boundaries.x_min {
        BoundarySpec::Inlet(inlet)
            if inlet.profile == Profile::Parabolic
                && inlet.span.is_none()
                && close(inlet.velocity, peak)
                && matches!(inlet.amplitude, Amplitude::Constant | Amplitude::Ramp { .. }) => {}
        other => {
            return Err(refuse(
                "boundaries.x_min",
                as_toml(other),
                format!(
                    "a parabolic inlet of peak velocity {peak} m/s, constant or ramped up (`{{ inlet = {{ \
                     profile = \"parabolic\", velocity = {peak}, amplitude = {{ ramp = {{ duration = 1.0 }} }} }} }}`)"
                ),
            ));
        }
    }
    let b = &case.boundaries;
    for (key, side, expected) in [
        ("boundaries.x_max", &b.x_max, BoundarySpec::Outflow),
        ("boundaries.y_min", &b.y_min, BoundarySpec::Wall),
        ("boundaries.y_max", &b.y_max, BoundarySpec::Wall),
    ] {
        if *side != expected {
            return Err(refuse(key, as_toml(side), as_toml(&expected)));
        }
    }
    check_benchmark_geometry(case)
}

/// A side as the case file writes it.
fn as_toml(side: &BoundarySpec) -> String {
    toml::Value::try_from(side).map_or_else(|_| format!("{side:?}"), |v| v.to_string())
}

/// The probes and reference values assume the benchmark's channel and
/// cylinder.
fn check_benchmark_geometry(case: &Case) -> Result<(), AppError> {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    if !(close(case.domain.size[0], 2.2) && close(case.domain.size[1], 0.41)) {
        return Err(AppError::Flag {
            flag: "--case domain.size",
            value: format!("{:?}", case.domain.size),
            accepted: "the benchmark's channel, [2.2, 0.41]".into(),
        });
    }
    match case.bodies.as_slice() {
        [
            BodyTable {
                shape: Shape::Circle { center, radius },
                rotation: None,
                ..
            },
        ] if close(center[0], CENTER[0]) && close(center[1], CENTER[1]) && close(*radius, 0.5 * DIAMETER) => Ok(()),
        other => Err(AppError::Flag {
            flag: "--case bodies",
            value: match other {
                [] => "no body".into(),
                [body] => match &body.shape {
                    Shape::Circle { center, radius } => format!(
                        "a circle of radius {radius} m at {center:?} m{}",
                        if body.rotation.is_some() { ", rotated" } else { "" }
                    ),
                    Shape::Rectangle { .. } => "a rectangle".into(),
                    Shape::Polygon { .. } => "a polygon".into(),
                },
                more => format!("{} bodies", more.len()),
            },
            accepted: format!(
                "exactly the benchmark's cylinder, a circle of radius {} m at {CENTER:?} m, unrotated",
                0.5 * DIAMETER
            ),
        }),
    }
}

fn write_series(out: &Path, series: &[Sample]) -> Result<(), AppError> {
    let mut csv = String::from("time_s,cd,cl,delta_p_pa\n");
    for s in series {
        csv += &format!("{},{},{},{}\n", s.time, s.cd, s.cl, s.delta_p);
    }
    write_atomic(&out.join("series.csv"), csv.as_bytes())
}

fn write_report(out: &Path, report: &Report) -> Result<(), AppError> {
    write_json(&out.join("report.json"), report)?;
    let mut md = format!(
        "# {} at {} cells per diameter ({})\n\n{} base intervals, {:.1} s on {}, {}.\n\n{}\n\n\
         | quantity | value | reference | relative to the reference | interval | within |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        match report.case {
            Benchmark::Dfg2d1 => "DFG 2D-1",
            Benchmark::Dfg2d2 => "DFG 2D-2",
        },
        report.resolution,
        crate::check::plural(report.levels as usize, "refinement level"),
        report.steps,
        report.wall_seconds,
        report.backend,
        if report.converged {
            "criterion met"
        } else {
            "stopped at the time limit before the criterion was met"
        },
        format_args!(
            "Case: {}; lattice velocity {}; collision {}; plan {}; lbm {}.",
            report.case_file.as_deref().unwrap_or("the built-in one"),
            report.lattice_velocity,
            match report.collision {
                lbm_core::lattice::Collision::Bgk {} => "BGK".to_owned(),
                lbm_core::lattice::Collision::Trt { magic } => format!("TRT (magic {magic})"),
            },
            report.plan_sha256,
            report.version
        )
    );
    for q in &report.quantities {
        md += &format!(
            "| {} | {:.6} | {} | {:+.3}% | {} – {} | {} |\n",
            q.name,
            q.value,
            q.reference,
            100.0 * q.relative_to_reference,
            q.low,
            q.high,
            q.outside.as_ref().map_or("yes".to_owned(), |by| format!("no: {by}"))
        );
    }
    write_atomic(&out.join("report.md"), md.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendChoice;
    use mock_driver::MockDriver;

    #[test]
    fn a_quantity_outside_its_interval_says_by_how_much() {
        let q = |value: f64| quantity("cd", value, 5.58, 5.57, 5.59);
        assert_eq!(q(5.58).outside, None);
        assert_eq!(
            q(5.6458).outside.unwrap(),
            "1.000% of the reference above its upper end"
        );
        assert_eq!(
            q(5.5142).outside.unwrap(),
            "1.000% of the reference below its lower end"
        );
        assert_eq!(q(f64::NAN).outside.unwrap(), "not finite");
        assert!((q(5.6358).relative_to_reference - 0.01).abs() < 1e-12);
        // report.json carries both.
        let json = serde_json::to_value(q(5.6458)).unwrap();
        let relative = json["relative_to_reference"].as_f64().unwrap();
        assert!((relative - (5.6458 - 5.58) / 5.58).abs() < 1e-12, "{json}");
        assert_eq!(json["outside"], "1.000% of the reference above its upper end");
        assert!(serde_json::to_value(q(5.58)).unwrap().get("outside").is_none());
    }

    #[test]
    fn a_case_variant_keeps_the_benchmarks_flow() {
        let text = include_str!("../cases/dfg-2d1.toml");
        let case = |t: &str| Case::from_toml(t).unwrap();
        check_benchmark_case(&case(text), Benchmark::Dfg2d1).unwrap();
        check_benchmark_case(&case(include_str!("../cases/dfg-2d2.toml")), Benchmark::Dfg2d2).unwrap();
        // What it is computed with may change.
        let finer = text.replace("lattice_velocity = 0.05", "lattice_velocity = 0.03");
        assert_ne!(finer, text);
        check_benchmark_case(&case(&finer), Benchmark::Dfg2d1).unwrap();
        for (from, to, key) in [
            ("viscosity = 1e-3", "viscosity = 2e-3", "fluid.viscosity"),
            ("velocity = 0.3,", "velocity = 0.4,", "boundaries.x_min"),
            ("x_max = \"outflow\"", "x_max = \"wall\"", "boundaries.x_max"),
            ("y_max = \"wall\"", "y_max = \"free_slip\"", "boundaries.y_max"),
            // Replaced by --resolution, but no run takes these.
            ("resolution = 10 ", "resolution = 0 ", "domain.resolution"),
            ("resolution = 10 ", "resolution = -5 ", "domain.resolution"),
            ("resolution = 10 ", "resolution = 1e308 ", "domain.resolution"),
        ] {
            let changed = text.replace(from, to);
            assert_ne!(changed, text, "{from}");
            let e = check_benchmark_case(&case(&changed), Benchmark::Dfg2d1)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("--case"), "{e}");
            assert_eq!(
                check_benchmark_case(&case(&changed), Benchmark::Dfg2d1)
                    .unwrap_err()
                    .exit_code(),
                2
            );
        }
        // The other benchmark's case is the other benchmark's flow.
        let e = check_benchmark_case(&case(include_str!("../cases/dfg-2d2.toml")), Benchmark::Dfg2d1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("boundaries.x_min") && e.contains("0.3 m/s"), "{e}");
    }

    #[test]
    fn only_the_documented_validation_goes_without_a_pilot() {
        let options = |resolution, levels, case: Option<&str>| ValidateOptions {
            benchmark: Benchmark::Dfg2d2,
            resolution,
            levels,
            lattice_velocity: None,
            case: case.map(PathBuf::from),
            backend: BackendChoice::Cpu,
            device: None,
            out: PathBuf::from("unused"),
            pilot: PilotChoice::Default,
            quiet: true,
        };
        assert!(options(None, None, None).is_the_default());
        assert!(options(Some(DEFAULT_RESOLUTION), None, None).is_the_default());
        assert!(!options(Some(160), None, None).is_the_default());
        assert!(!options(None, Some(1), None).is_the_default());
        assert!(!options(None, None, Some("variant.toml")).is_the_default());
        let faster = ValidateOptions {
            lattice_velocity: Some(0.02),
            ..options(None, None, None)
        };
        assert!(!faster.is_the_default());
    }

    /// A run that fails part-way keeps what it measured and says where.
    #[test]
    fn an_interrupted_run_keeps_its_series_and_says_where() {
        let out = std::env::temp_dir().join(format!("lbm-validate-interrupted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let options = ValidateOptions {
            benchmark: Benchmark::Dfg2d1,
            resolution: Some(10),
            levels: Some(0),
            lattice_velocity: None,
            case: None,
            backend: BackendChoice::Cpu,
            device: None,
            out: out.clone(),
            pilot: PilotChoice::Skip,
            quiet: true,
        };
        let setup = resolve(&options).unwrap();
        prepare_output(&out).unwrap();
        let driver = MockDriver::executing();
        // Three launches per interval and 1524 intervals per window at this
        // resolution: the fault comes in the third window.
        driver.handle().fail_launch(10_000);
        let message = measure(driver, &options, &setup).unwrap_err().to_string();
        let series = out.join("series.csv");
        assert!(message.contains(&series.display().to_string()), "{message}");
        let rows = std::fs::read_to_string(&series).unwrap();
        assert_eq!(rows.lines().count(), 3, "a header and two windows:\n{rows}");
        assert!(!out.join("report.json").exists());
        std::fs::remove_dir_all(out).unwrap();
    }
}
