//! Ensembles advanced in lockstep: [`LockstepRunner`] takes ownership of N
//! freshly built members (anything implementing [`lbm_core::member::Member`],
//! a `Stepper` on any backend) and advances them on the fixed schedule they
//! share, each on its own driver. It is the correctness baseline for a fused
//! batch stepper, not a performance claim: every member runs its own launches.
//!
//! Construction refuses an empty batch, mixed backends, a member without a
//! schedule or already advanced, and any difference in what must agree
//! ([`lbm_core::member::MemberIdentity`]: hierarchy and tiles, boundary kinds
//! and bodies, observables, schedule, save points, diagnostics period,
//! statistics request), naming the member and the difference. Members may
//! differ in physical parameters.
//!
//! At each diagnostic point every member takes its own diagnostic norm (the
//! relative L2 change of its velocity over the last interval) into its own
//! history; the batch maximum is for display only and steers nothing. A
//! non-finite or negative norm stops the run with the member's index and
//! value. At each save point every member's statistics request is evaluated
//! into its own rows.
//!
//! ```
//! use lbm_core::member::FixedSchedule;
//! use lbm_core::{Boundary, CpuDriver, ExecConfig, LatticeConfig, Stepper};
//! use lockstep::LockstepRunner;
//!
//! let member = |tau: f64| {
//!     let lattice = LatticeConfig::uniform(16, 16, tau, [Boundary::Periodic; 4]);
//!     let exec = ExecConfig { schedule: Some(FixedSchedule::new(4, 2)?), ..ExecConfig::default() };
//!     Stepper::new(CpuDriver::new(), lattice, exec)
//! };
//! let mut runner = LockstepRunner::new(vec![member(0.6)?, member(0.8)?])?;
//! runner.run()?;
//! assert_eq!(runner.observe_members()?.len(), 2);
//! runner.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use lbm_core::ledger::MemoryLedger;
use lbm_core::member::{FixedSchedule, Member, MemberObservation, StatsSpec, relative_change};
use ndarray::{ArrayD, Axis};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LockstepError {
    #[error("a lockstep batch needs at least one member")]
    Empty,
    #[error("lockstep refuses mixed backends: member {index} runs on `{backend}`, member 0 on `{first}`")]
    MixedBackends {
        index: usize,
        backend: &'static str,
        first: &'static str,
    },
    #[error("lockstep member {index} was already advanced ({step_count} intervals); members must be freshly built")]
    Advanced { index: usize, step_count: u64 },
    #[error("lockstep member {index} has no fixed schedule (ExecConfig::schedule); a batch needs one")]
    NoSchedule { index: usize },
    #[error("lockstep member {index} differs from member 0 in its {what}: {member} against {first}")]
    Differs {
        index: usize,
        what: &'static str,
        member: String,
        first: String,
    },
    #[error(
        "lockstep member {index} returned an invalid diagnostic norm {value} after interval {step}: \
         a norm must be finite and non-negative (the member has diverged)"
    )]
    InvalidNorm { index: usize, value: f64, step: u64 },
    #[error("lockstep member {index}: {source}")]
    Member {
        index: usize,
        #[source]
        source: lbm_core::Error,
    },
    #[error("members returned different statistics: member {index} gave {names:?}, member 0 {first:?}")]
    StatsNames {
        index: usize,
        names: Vec<String>,
        first: Vec<String>,
    },
    #[error("member {index}'s statistic `{name}` has shape {shape:?}, member 0's {first:?}")]
    StatsShape {
        index: usize,
        name: String,
        shape: Vec<usize>,
        first: Vec<usize>,
    },
    #[error(
        "a lockstep batch has no single observation: use observe_members, which keeps each member's own \
         diagnostic history"
    )]
    ObserveRefused,
    #[error("the lockstep batch has been closed")]
    Closed,
    #[error("closing the batch failed for {} member(s): {}", failures.len(), describe(failures))]
    Close { failures: Vec<(usize, lbm_core::Error)> },
}

fn describe(failures: &[(usize, lbm_core::Error)]) -> String {
    failures
        .iter()
        .map(|(i, e)| format!("member {i}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One diagnostic norm of one member.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct NormRecord {
    /// The interval the norm ends at.
    pub step: u64,
    pub norm: f64,
}

/// One save point's statistics of one member.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsRow {
    pub step: u64,
    pub values: BTreeMap<String, ArrayD<f64>>,
}

/// One member's observation with what the runner kept for it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberReport {
    pub index: usize,
    pub observation: MemberObservation,
    /// The member's own diagnostic norms, in order.
    pub norms: Vec<NormRecord>,
    /// The member's statistics at each save point reached.
    pub rows: Vec<StatsRow>,
}

/// Every member advances `intervals`: all are enqueued first, each on its
/// own driver, then each is waited for, so their work runs side by side
/// (and a fused batch's launches go out once every member has begun).
/// Every member that began is waited for even when another fails; the
/// first failure is reported. What [`LockstepRunner::advance`] does between
/// its stops, and what the ensemble benches time.
pub fn advance_together<M: Member>(members: &[M], intervals: u64) -> Result<(), LockstepError> {
    if intervals == 0 {
        return Ok(());
    }
    let began: Vec<lbm_core::Result<()>> = members.iter().map(|m| m.begin_advance(intervals)).collect();
    let finished: Vec<lbm_core::Result<()>> = members
        .iter()
        .zip(began)
        .map(|(m, b)| b.and_then(|()| m.finish_advance()))
        .collect();
    match finished
        .into_iter()
        .enumerate()
        .find_map(|(index, r)| r.err().map(|e| (index, e)))
    {
        Some((index, source)) => Err(LockstepError::Member { index, source }),
        None => Ok(()),
    }
}

/// Advances members on their shared [`FixedSchedule`]; see the crate
/// documentation.
pub struct LockstepRunner<M: Member> {
    members: Vec<M>,
    schedule: FixedSchedule,
    stats: StatsSpec,
    /// Base intervals every member has advanced.
    position: u64,
    norms: Vec<Vec<NormRecord>>,
    rows: Vec<Vec<StatsRow>>,
    closed: bool,
}

impl<M: Member> LockstepRunner<M> {
    /// Takes ownership of `members` once they agree; see the crate
    /// documentation for what is refused.
    pub fn new(members: Vec<M>) -> Result<Self, LockstepError> {
        let first = members.first().ok_or(LockstepError::Empty)?;
        let (backend, identity) = (first.backend(), first.identity());
        for (index, member) in members.iter().enumerate() {
            if member.backend() != backend {
                return Err(LockstepError::MixedBackends {
                    index,
                    backend: member.backend(),
                    first: backend,
                });
            }
            if member.step_count() != 0 {
                return Err(LockstepError::Advanced {
                    index,
                    step_count: member.step_count(),
                });
            }
            let own = member.identity();
            if own.schedule.is_none() {
                return Err(LockstepError::NoSchedule { index });
            }
            if let Some((what, mine, theirs)) = own.difference(&identity) {
                return Err(LockstepError::Differs {
                    index,
                    what,
                    member: mine,
                    first: theirs,
                });
            }
        }
        let schedule = identity.schedule.expect("checked for every member");
        let n = members.len();
        Ok(LockstepRunner {
            members,
            schedule,
            stats: identity.stats,
            position: 0,
            norms: vec![Vec::new(); n],
            rows: vec![Vec::new(); n],
            closed: false,
        })
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, in batch order.
    pub fn members(&self) -> &[M] {
        &self.members
    }

    pub fn schedule(&self) -> &FixedSchedule {
        &self.schedule
    }

    /// Base intervals every member has advanced.
    pub fn position(&self) -> u64 {
        self.position
    }

    fn require_open(&self) -> Result<(), LockstepError> {
        match self.closed {
            true => Err(LockstepError::Closed),
            false => Ok(()),
        }
    }

    /// Advances every member to the next stop of the schedule (a save point
    /// or a diagnostic point) and returns it, or `None` at the end.
    pub fn advance(&mut self) -> Result<Option<u64>, LockstepError> {
        self.require_open()?;
        let Some(stop) = self.schedule.stops().into_iter().find(|s| *s > self.position) else {
            return Ok(None);
        };
        let diagnostic = self.schedule.diagnostic_points().contains(&stop);
        // The last interval before a diagnostic point is the one its norm covers.
        let plain = stop - self.position - u64::from(diagnostic);
        if self.position == 0 {
            for (index, member) in self.members.iter().enumerate() {
                // The windows span the batch's run.
                member
                    .open_window()
                    .map_err(|source| LockstepError::Member { index, source })?;
            }
        }
        advance_together(&self.members, plain)?;
        let mut norms = Vec::new();
        if diagnostic {
            let before = self.velocities()?;
            advance_together(&self.members, 1)?;
            let after = self.velocities()?;
            norms = before.iter().zip(&after).map(|(b, a)| relative_change(b, a)).collect();
        }
        self.position = stop;
        // Every norm is checked before any is kept, so a refused stop leaves
        // no member's history ahead of the others'.
        if let Some((index, &value)) = norms.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
            return Err(LockstepError::InvalidNorm {
                index,
                value,
                step: stop,
            });
        }
        for (history, &norm) in self.norms.iter_mut().zip(&norms) {
            history.push(NormRecord { step: stop, norm });
        }
        if self.schedule.save_points().contains(&stop) && !self.stats.statistics.is_empty() {
            for (index, member) in self.members.iter().enumerate() {
                let values = member
                    .stats(&self.stats)
                    .map_err(|source| LockstepError::Member { index, source })?;
                self.rows[index].push(StatsRow { step: stop, values });
            }
        }
        Ok(Some(stop))
    }

    fn velocities(&self) -> Result<Vec<Vec<f32>>, LockstepError> {
        self.members
            .iter()
            .enumerate()
            .map(|(index, m)| m.velocity().map_err(|source| LockstepError::Member { index, source }))
            .collect()
    }

    /// Advances to the end of the schedule.
    pub fn run(&mut self) -> Result<(), LockstepError> {
        while self.advance()?.is_some() {}
        Ok(())
    }

    /// The largest of the members' latest norms: a diagnostic for display,
    /// which changes nothing in any member's schedule.
    pub fn max_norm(&self) -> Option<f64> {
        self.norms
            .iter()
            .filter_map(|h| h.last().map(|r| r.norm))
            .reduce(f64::max)
    }

    /// Each member's diagnostic history, in member order.
    pub fn norms(&self) -> &[Vec<NormRecord>] {
        &self.norms
    }

    /// `spec` evaluated on every member now, each statistic with a leading
    /// batch axis (member order).
    pub fn stats(&self, spec: &StatsSpec) -> Result<BTreeMap<String, ArrayD<f64>>, LockstepError> {
        self.require_open()?;
        let values = self
            .members
            .iter()
            .enumerate()
            .map(|(index, m)| m.stats(spec).map_err(|source| LockstepError::Member { index, source }))
            .collect::<Result<Vec<_>, _>>()?;
        let names = |v: &BTreeMap<String, ArrayD<f64>>| v.keys().cloned().collect::<Vec<_>>();
        let first = names(&values[0]);
        if let Some((index, v)) = values.iter().enumerate().find(|(_, v)| names(v) != first) {
            return Err(LockstepError::StatsNames {
                index,
                names: names(v),
                first,
            });
        }
        let mut out = BTreeMap::new();
        for name in first {
            let shape = values[0][&name].shape().to_vec();
            if let Some((index, v)) = values.iter().enumerate().find(|(_, v)| v[&name].shape() != shape) {
                return Err(LockstepError::StatsShape {
                    index,
                    shape: v[&name].shape().to_vec(),
                    name,
                    first: shape,
                });
            }
            let views: Vec<_> = values.iter().map(|v| v[&name].view().insert_axis(Axis(0))).collect();
            let stacked = ndarray::concatenate(Axis(0), &views).expect("every member's shape is the first's");
            out.insert(name, stacked);
        }
        Ok(out)
    }

    /// Every member's observation, with its own diagnostic history and rows.
    pub fn observe_members(&self) -> Result<Vec<MemberReport>, LockstepError> {
        self.require_open()?;
        self.members
            .iter()
            .enumerate()
            .map(|(index, m)| {
                Ok(MemberReport {
                    index,
                    observation: m.observe().map_err(|source| LockstepError::Member { index, source })?,
                    norms: self.norms[index].clone(),
                    rows: self.rows[index].clone(),
                })
            })
            .collect()
    }

    /// Refused: a batch's single observation would stand one history in for
    /// every member's; see [`LockstepRunner::observe_members`].
    pub fn observe(&self) -> Result<MemberReport, LockstepError> {
        Err(LockstepError::ObserveRefused)
    }

    /// Every member's device buffers, keyed `member/{i}/{name}`.
    pub fn memory_ledger(&self) -> MemoryLedger {
        let mut ledger = MemoryLedger::default();
        for (index, member) in self.members.iter().enumerate() {
            for (name, bytes) in member.memory_ledger().entries {
                ledger.add(format!("member/{index}/{name}"), bytes);
            }
        }
        ledger
    }

    /// Free device memory, through the first member.
    pub fn available_device_memory(&self) -> Result<u64, LockstepError> {
        self.require_open()?;
        self.members[0]
            .available_device_memory()
            .map_err(|source| LockstepError::Member { index: 0, source })
    }

    /// Releases every member, even when an earlier one fails, then reports
    /// every failure. The batch refuses everything afterwards.
    pub fn close(&mut self) -> Result<(), LockstepError> {
        self.require_open()?;
        self.closed = true;
        let failures: Vec<(usize, lbm_core::Error)> = self
            .members
            .iter()
            .enumerate()
            .filter_map(|(index, m)| m.close().err().map(|e| (index, e)))
            .collect();
        match failures.is_empty() {
            true => Ok(()),
            false => Err(LockstepError::Close { failures }),
        }
    }
}
