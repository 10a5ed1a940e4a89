//! The fixed schedule that every member of an ensemble shares: how many base
//! intervals to advance and at which intervals to save.
//!
//! Members run in lockstep only if they agree on this schedule, so it is a value
//! type compared as a whole. The runner that takes ownership of members and
//! advances them (DESIGN.md §6) is not here yet.
//!
//! ```
//! use lockstep::FixedSchedule;
//!
//! let schedule = FixedSchedule::new(10, 4)?;
//! assert_eq!(schedule.save_points(), &[4, 8, 10]);
//! # Ok::<(), lockstep::LockstepError>(())
//! ```
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LockstepError {
    #[error("schedule `{key}` = {value}: {accepted}")]
    Schedule {
        key: &'static str,
        value: u64,
        accepted: String,
    },
}

/// Intervals to advance and the save points, in base intervals since the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedSchedule {
    intervals: u64,
    save_points: Vec<u64>,
}

impl FixedSchedule {
    /// `intervals` base intervals with a save every `save_every` intervals and
    /// always at the end.
    pub fn new(intervals: u64, save_every: u64) -> Result<Self, LockstepError> {
        if intervals == 0 {
            return Err(LockstepError::Schedule {
                key: "intervals",
                value: intervals,
                accepted: "at least 1".into(),
            });
        }
        if save_every == 0 || save_every > intervals {
            return Err(LockstepError::Schedule {
                key: "save_every",
                value: save_every,
                accepted: format!("1..={intervals} (the schedule's intervals)"),
            });
        }
        let mut save_points: Vec<u64> = (1..=intervals / save_every).map(|k| k * save_every).collect();
        if save_points.last() != Some(&intervals) {
            save_points.push(intervals);
        }
        Ok(FixedSchedule { intervals, save_points })
    }

    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    pub fn save_points(&self) -> &[u64] {
        &self.save_points
    }

    /// The runs of intervals between consecutive save points, in order; each is
    /// one `step(n)` call with one wait.
    pub fn segments(&self) -> impl Iterator<Item = u64> + '_ {
        let starts = std::iter::once(0).chain(self.save_points.iter().copied());
        starts.zip(self.save_points.iter()).map(|(a, b)| b - a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_points_land_on_multiples_and_the_end() {
        let s = FixedSchedule::new(10, 4).unwrap();
        assert_eq!(s.save_points(), &[4, 8, 10]);
        assert_eq!(s.segments().collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!(s.segments().sum::<u64>(), s.intervals());
        assert_eq!(FixedSchedule::new(6, 3).unwrap().save_points(), &[3, 6]);
    }

    #[test]
    fn empty_or_inconsistent_schedules_are_refused() {
        assert!(FixedSchedule::new(0, 1).unwrap_err().to_string().contains("intervals"));
        let e = FixedSchedule::new(5, 6).unwrap_err().to_string();
        assert!(e.contains("save_every") && e.contains("1..=5"), "{e}");
    }
}
