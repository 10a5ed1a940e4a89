//! `kernels/boundary.cu`: `update_boundary_state`, once per base interval
//! before any streaming when a side is an inlet: it advances the interval
//! counter and stores the inlet's amplitude factor for the interval's end
//! time. Launch struct and CPU reference.
//!
//! What it does not do: apply the inlet (that is `stream_collide`'s side rule).

use crate::config::Amplitude;
use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::error::{LaunchProblem, Result};

use super::{ArgReader, BufferUse, HostViews, KernelArgs};

/// The amplitude factor at time `t` (base intervals) for the kernel's encoding:
/// `kind` 0 constant, 1 ramp over `parameter`, 2 sine of period `parameter`,
/// 3 table of `(t, factor)` pairs.
pub fn amplitude_factor(kind: u32, parameter: f32, table: &[f32], t: f32) -> f32 {
    match kind {
        1 if parameter > 0.0 => (t / parameter).min(1.0),
        2 => (2.0 * std::f32::consts::PI * t / parameter).sin(),
        3 if table.len() >= 2 => {
            let points = table.len() / 2;
            if t <= table[0] {
                return table[1];
            }
            for k in 1..points {
                let (t0, f0, t1, f1) = (table[2 * k - 2], table[2 * k - 1], table[2 * k], table[2 * k + 1]);
                if t <= t1 {
                    return f0 + (f1 - f0) * ((t - t0) / (t1 - t0));
                }
            }
            table[2 * points - 1]
        }
        _ => 1.0,
    }
}

/// `update_boundary_state`: one thread. Advances the interval counter in
/// `state` and stores the inlet factor for the interval's end time.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateBoundaryState {
    /// `[u32 interval, f32 inlet factor]`.
    pub state: BufferRef,
    /// `(t, factor)` pairs as f32, present exactly for a table amplitude.
    pub table: Option<BufferRef>,
    pub table_points: u32,
    pub kind: u32,
    pub parameter: f32,
}

impl UpdateBoundaryState {
    /// The update of `state` for `amplitude`, whose table (when it is one)
    /// lies in `table`.
    pub fn new(state: BufferRef, table: Option<BufferRef>, amplitude: &Amplitude) -> Self {
        let table_points = match amplitude {
            Amplitude::Table { points } => points.len() as u32,
            _ => 0,
        };
        UpdateBoundaryState {
            state,
            table,
            table_points,
            kind: amplitude.code(),
            parameter: amplitude.parameter(),
        }
    }
}

impl KernelArgs for UpdateBoundaryState {
    const KERNEL: Kernel = Kernel::UpdateBoundaryState;
    const PARAMS: &'static [&'static str] = &["state", "table", "table_points", "kind", "parameter"];

    fn launch(&self) -> Launch {
        let args = vec![
            self.state.into(),
            self.table.into(),
            Arg::U32(self.table_points),
            Arg::U32(self.kind),
            Arg::F32(self.parameter),
        ];
        Launch::linear(Kernel::UpdateBoundaryState, 1, args)
    }

    fn decode(launch: &Launch) -> Result<Self> {
        let mut r = ArgReader::new(launch, Self::KERNEL, Self::PARAMS)?;
        Ok(UpdateBoundaryState {
            state: r.buffer()?,
            table: r.optional_buffer()?,
            table_points: r.u32()?,
            kind: r.u32()?,
            parameter: r.f32()?,
        })
    }

    fn work_items(&self) -> usize {
        1
    }

    fn check_shape(&self) -> std::result::Result<(), LaunchProblem> {
        if self.kind > 3 {
            return Err(LaunchProblem::ArgValue {
                param: "kind",
                value: self.kind,
                accepted: "an amplitude code 0..=3",
            });
        }
        match (self.kind == 3, self.table) {
            (true, None) => Err(LaunchProblem::MissingBuffer {
                param: "table",
                why: "the amplitude is a table",
            }),
            (false, Some(_)) => Err(LaunchProblem::UnexpectedBuffer {
                param: "table",
                why: "only a table amplitude reads it",
            }),
            _ => Ok(()),
        }
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let mut uses = vec![BufferUse::read_write("state", self.state, 8, 4)];
        if let Some(table) = self.table {
            uses.push(BufferUse::read("table", table, 2 * self.table_points as usize * 4, 4));
        }
        uses
    }

    fn run_on_host(&self, views: &mut HostViews) {
        let table = match self.table {
            Some(_) => &views.reads.get::<f32>("table")[..2 * self.table_points as usize],
            None => &[],
        };
        update_boundary_state(self, table, views.writes.get("state"));
    }
}

/// Advances the interval counter of `state` (`[u32 interval, f32 factor]`) and
/// stores the inlet factor for the end of the new interval.
pub fn update_boundary_state(k: &UpdateBoundaryState, table: &[f32], state: &mut [f32]) {
    let interval = state[0].to_bits() + 1;
    state[0] = f32::from_bits(interval);
    state[1] = amplitude_factor(k.kind, k.parameter, table, interval as f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amplitude_factors_follow_their_definitions() {
        let table = [0.0f32, 0.0, 10.0, 1.0, 20.0, 0.5];
        for (kind, parameter, t, want) in [
            (0, 0.0, 7.0, 1.0),
            (1, 100.0, 25.0, 0.25),
            (1, 100.0, 250.0, 1.0),
            (2, 400.0, 100.0, 1.0),
            (3, 0.0, 5.0, 0.5),
            (3, 0.0, 15.0, 0.75),
            (3, 0.0, 99.0, 0.5),
            (3, 0.0, -1.0, 0.0),
        ] {
            let got = amplitude_factor(kind, parameter, &table, t);
            assert!((got - want).abs() < 1e-6, "kind {kind} at t {t}: {got} vs {want}");
        }
    }
}
