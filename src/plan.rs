//! The plan of a run: what it computes, hashed, so that a pilot, a checkpoint
//! and the run they vouch for can be told to be the same computation.
//!
//! The hash covers the case as resolved (every lattice parameter per level,
//! tiles, the run length, the output plan), the code version and the sha256
//! of the embedded PTX. Policy that does not change a result (checkpoint
//! periods, whether a pilot is required, progress, the backend) is outside it.
//! The serialisation is canonical: JSON with sorted keys, floats in their
//! shortest round-trip form.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use lbm_core::case::Resolved;

use crate::AppError;
use crate::backend::ptx_sha256;

/// A plan's hash and the three parts it is made of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// sha256 over the three parts below.
    pub sha256: String,
    /// sha256 of the canonical serialisation of the resolved case.
    pub case_sha256: String,
    pub code_version: String,
    pub ptx_sha256: String,
}

/// `bytes` as lower-case hex, as every digest the program writes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Plan {
    /// The plan of `resolved` as `purpose` runs it (`run`, or a validation
    /// benchmark's name: the same case validated and run is two plans).
    pub fn of(purpose: &str, resolved: &Resolved) -> Result<Plan, AppError> {
        let levels = resolved.levels()?;
        let value = serde_json::to_value((purpose, resolved, levels)).expect("plain data serialises");
        // serde_json's map is ordered by key: the text is canonical.
        let case_sha256 = hex(&Sha256::digest(value.to_string().as_bytes()));
        Ok(Plan::from_parts(
            case_sha256,
            env!("CARGO_PKG_VERSION").to_owned(),
            ptx_sha256(),
        ))
    }

    fn from_parts(case_sha256: String, code_version: String, ptx_sha256: String) -> Plan {
        let mut hasher = Sha256::new();
        for part in [&case_sha256, &code_version, &ptx_sha256] {
            hasher.update(part.as_bytes());
            hasher.update(b"\n");
        }
        Plan {
            sha256: hex(&hasher.finalize()),
            case_sha256,
            code_version,
            ptx_sha256,
        }
    }

    /// What differs between `self` (this run) and `other`, in words, or
    /// `None` when they are the same plan.
    pub fn differences(&self, other: &Plan) -> Option<String> {
        let mut parts = Vec::new();
        if self.case_sha256 != other.case_sha256 {
            parts.push(format!(
                "the case differs (case hash {} here, {} there: a key, the run length or the output plan changed)",
                short(&self.case_sha256),
                short(&other.case_sha256)
            ));
        }
        if self.code_version != other.code_version {
            parts.push(format!(
                "the code differs (lbm {} here, {} there)",
                self.code_version, other.code_version
            ));
        }
        if self.ptx_sha256 != other.ptx_sha256 {
            parts.push(format!(
                "the PTX differs (sha256 {} here, {} there)",
                short(&self.ptx_sha256),
                short(&other.ptx_sha256)
            ));
        }
        if parts.is_empty() && self.sha256 != other.sha256 {
            parts.push("the plan hashes differ though their parts agree (a damaged record)".into());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// How a full run relates to its pilot.
#[derive(Clone, Debug, PartialEq)]
pub enum PilotChoice {
    /// `--pilot`: run the plan's first intervals only (`None`: the default
    /// count, [`pilot_intervals`]).
    Run { intervals: Option<u64> },
    /// `--after-pilot DIR`: the full run, vouched for by the pilot in DIR.
    After(std::path::PathBuf),
    /// `--no-pilot`: the full run without one, whatever the case says.
    Skip,
    /// No flag: the full run, refused if the case requires a pilot.
    Default,
}

/// What a pilot records in its `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PilotRecord {
    pub intervals: u64,
}

/// The default pilot length: enough to reach the first save point, at most
/// 1% of the run, at least one interval.
pub fn pilot_intervals(steps: u64, first_save: Option<u64>) -> u64 {
    let one_percent = steps.div_ceil(100).max(1);
    first_save.unwrap_or(one_percent).clamp(1, one_percent)
}

/// Refuses unless `dir` holds a pilot of `plan` that completed, naming what
/// differs otherwise.
pub fn check_pilot(dir: &Path, plan: &Plan) -> Result<(), AppError> {
    let refuse = |reason: String| AppError::Pilot {
        dir: dir.display().to_string(),
        reason,
    };
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        refuse(format!(
            "it has no readable summary.json ({e}); a pilot that did not end writes none"
        ))
    })?;
    let summary: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| refuse(format!("its summary.json is not valid JSON ({e})")))?;
    if summary.get("pilot").is_none_or(|p| p.is_null()) {
        return Err(refuse(
            "it is a full run, not a pilot (made with lbm run --pilot)".into(),
        ));
    }
    let ended = summary.get("ended").and_then(|e| e.as_str()).unwrap_or("unknown");
    if ended != "completed" {
        return Err(refuse(format!("the pilot ended {ended:?}, not \"completed\"")));
    }
    let theirs: Plan = summary
        .get("plan")
        .cloned()
        .and_then(|p| serde_json::from_value(p).ok())
        .ok_or_else(|| refuse("its summary.json records no plan".into()))?;
    match plan.differences(&theirs) {
        None => Ok(()),
        Some(what) => Err(refuse(format!(
            "it is a pilot of another plan ({} there, {} here): {what}",
            short(&theirs.sha256),
            short(&plan.sha256)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(case: &str, code: &str, ptx: &str) -> Plan {
        Plan::from_parts(case.into(), code.into(), ptx.into())
    }

    #[test]
    fn each_differing_part_is_named() {
        let ours = plan("aaaa", "0.1.0", "pppp");
        assert_eq!(ours.differences(&ours.clone()), None);
        let case = ours.differences(&plan("bbbb", "0.1.0", "pppp")).unwrap();
        assert!(case.contains("the case differs") && !case.contains("code"), "{case}");
        let code = ours.differences(&plan("aaaa", "0.2.0", "pppp")).unwrap();
        assert!(code.contains("lbm 0.1.0 here, 0.2.0 there"), "{code}");
        let ptx = ours.differences(&plan("aaaa", "0.1.0", "qqqq")).unwrap();
        assert!(ptx.contains("the PTX differs"), "{ptx}");
        let mut damaged = ours.clone();
        damaged.sha256 = "0".repeat(64);
        assert!(ours.differences(&damaged).unwrap().contains("damaged"));
    }

    #[test]
    fn the_hash_follows_every_resolved_value_and_the_purpose() {
        let case = lbm_core::case::Case::from_toml(include_str!("../cases/cavity-re100.toml")).unwrap();
        let resolved = case.resolve().unwrap();
        let base = Plan::of("run", &resolved).unwrap();
        assert_eq!(base, Plan::of("run", &resolved).unwrap(), "the hash is reproducible");
        assert_ne!(base.sha256, Plan::of("dfg-2d1", &resolved).unwrap().sha256);
        let mut longer = resolved.clone();
        longer.steps += 1;
        assert_ne!(base.case_sha256, Plan::of("run", &longer).unwrap().case_sha256);
        let mut viscous = resolved.clone();
        viscous.lattice.tau += 1e-12;
        assert_ne!(base.case_sha256, Plan::of("run", &viscous).unwrap().case_sha256);
        assert_eq!(base.sha256.len(), 64);
    }

    #[test]
    fn the_default_pilot_reaches_the_first_save_within_one_percent() {
        assert_eq!(pilot_intervals(10_000, Some(50)), 50);
        assert_eq!(pilot_intervals(10_000, Some(5_000)), 100);
        assert_eq!(pilot_intervals(10_000, None), 100);
        assert_eq!(pilot_intervals(30, Some(30)), 1);
        assert_eq!(pilot_intervals(1, None), 1);
    }
}
