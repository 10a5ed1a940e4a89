//! Ledgers the stepper publishes: the raw momentum exchange of the last interval,
//! the exchange window since it was opened, and the memory ledger.
//!
//! Times are counted in base intervals. Force integrals are the sum over the
//! body level's hops of the per-hop momentum exchange times the hop's length
//! (`2^-level` base intervals), in lattice force units of the body's level, so
//! `force[k] / (time_end - time_start)` is the mean force over the span.

use std::collections::BTreeMap;

use serde::Serialize;

/// Momentum exchange on one body over a span of base intervals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExchangeRecord {
    pub body: usize,
    pub level: usize,
    pub time_start: u64,
    pub time_end: u64,
    /// Hops of the body's level that contributed.
    pub sample_count: u64,
    /// Time integral of (Fx, Fy).
    pub force: [f64; 2],
    /// Time integral of the torque about the body centre.
    pub torque: f64,
}

impl ExchangeRecord {
    /// Adds the force and torque of another part of the same body over the
    /// same span: what a split run's slabs each hold of it (zero on the
    /// slabs without its links, so the sum is one device's value).
    pub fn add_part(&mut self, part: &ExchangeRecord) {
        debug_assert_eq!(
            (self.body, self.time_start, self.time_end),
            (part.body, part.time_start, part.time_end)
        );
        self.force = [self.force[0] + part.force[0], self.force[1] + part.force[1]];
        self.torque += part.torque;
    }

    /// The mean force over the span, in lattice units of the body's level.
    pub fn mean_force(&self) -> [f64; 2] {
        let span = (self.time_end - self.time_start) as f64;
        [self.force[0] / span, self.force[1] / span]
    }
}

/// Whether the buffer labelled `label` is one the plan writes as the run
/// advances (populations, the exchange ledgers, interface fluxes, the inlet's
/// clock), which a snapshot holds; the rest are built from the case.
pub fn is_state_label(label: &str) -> bool {
    label == "boundary.state"
        || [
            ".f.a",
            ".f.b",
            ".interface_flux",
            ".exchange.interval",
            ".exchange.window",
        ]
        .iter()
        .any(|suffix| label.ends_with(suffix))
}

/// Device bytes by buffer name.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryLedger {
    pub entries: BTreeMap<String, u64>,
}

impl MemoryLedger {
    pub fn add(&mut self, name: impl Into<String>, bytes: u64) {
        *self.entries.entry(name.into()).or_default() += bytes;
    }
    pub fn total(&self) -> u64 {
        self.entries.values().sum()
    }
    /// Bytes of the state buffers (see [`is_state_label`]): what a
    /// snapshot downloads.
    pub fn state(&self) -> u64 {
        self.entries
            .iter()
            .filter(|(name, _)| is_state_label(name))
            .map(|(_, bytes)| bytes)
            .sum()
    }
    /// Bytes of the buffers of `level` (labels `L{level}.…`).
    pub fn level(&self, level: usize) -> u64 {
        let prefix = format!("L{level}.");
        self.entries
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(_, bytes)| bytes)
            .sum()
    }
}
