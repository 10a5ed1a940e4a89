//! Checkpoints: the complete state of a run at an interval boundary, in
//! `checkpoints/` of its output directory, from which `lbm resume` continues
//! bit for bit.
//!
//! One file per checkpoint, `step_{step:012}.lbmck`, little-endian:
//!
//! | bytes | what |
//! | --- | --- |
//! | 8 | magic `LBMCKPT\n` |
//! | 4 | format version, [`FORMAT_VERSION`] |
//! | 32 | the plan's sha256, raw |
//! | 8 | the step (base intervals completed) |
//! | 8 | the length of the JSON part, `J` |
//! | 8 | the length of the binary part, `B` |
//! | `J` | JSON: the run's own state and the state buffers' labels and sizes |
//! | `B` | the state buffers' contents, in order |
//! | 32 | sha256 of every byte before it |
//!
//! A file is written under a temporary name and renamed, and only the last
//! two are kept: a crash while writing leaves the previous one whole, and a
//! damaged newest one falls back to the one before.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use lbm_core::Snapshot;

use crate::AppError;
use crate::output::write_atomic;
use crate::plan::Plan;

pub const FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"LBMCKPT\n";
const HEADER: usize = 8 + 4 + 32 + 8 + 8 + 8;
/// Checkpoints kept in a run directory.
const KEPT: usize = 2;

/// The JSON part: what the runner needs besides the stepper's buffers.
#[derive(Serialize, Deserialize)]
struct Meta<S> {
    plan: Plan,
    window_start: Option<u64>,
    /// Label and size of each state buffer, in the order of the binary part.
    buffers: Vec<(String, u64)>,
    run: S,
}

/// A checkpoint as read back.
pub struct Checkpoint<S> {
    pub path: PathBuf,
    pub plan: Plan,
    pub snapshot: Snapshot,
    pub run: S,
}

pub fn dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

fn file_name(step: u64) -> String {
    format!("step_{step:012}.lbmck")
}

fn unhex(hex: &str) -> [u8; 32] {
    let mut raw = [0u8; 32];
    for (k, byte) in raw.iter_mut().enumerate() {
        *byte = hex
            .get(2 * k..2 * k + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    raw
}

/// Writes the checkpoint of `snapshot` and `run`, then removes all but the
/// newest two; returns its path.
pub fn write<S: Serialize>(out: &Path, plan: &Plan, snapshot: &Snapshot, run: &S) -> Result<PathBuf, AppError> {
    let meta = Meta {
        plan: plan.clone(),
        window_start: snapshot.window_start,
        buffers: snapshot
            .buffers
            .iter()
            .map(|(l, b)| (l.clone(), b.len() as u64))
            .collect(),
        run,
    };
    let json = serde_json::to_vec(&meta).expect("plain data serialises");
    let binary: u64 = snapshot.buffers.iter().map(|(_, b)| b.len() as u64).sum();
    let mut bytes = Vec::with_capacity(HEADER + json.len() + binary as usize + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&unhex(&plan.sha256));
    bytes.extend_from_slice(&snapshot.step_count.to_le_bytes());
    bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&binary.to_le_bytes());
    bytes.extend_from_slice(&json);
    for (_, b) in &snapshot.buffers {
        bytes.extend_from_slice(b);
    }
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    let dir = dir(out);
    std::fs::create_dir_all(&dir).map_err(|source| AppError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    let path = dir.join(file_name(snapshot.step_count));
    write_atomic(&path, &bytes)?;
    let mut all = list(out);
    all.retain(|p| *p != path);
    for old in all.iter().skip(KEPT - 1) {
        // An old checkpoint that cannot be removed costs disk, not correctness.
        let _ = std::fs::remove_file(old);
    }
    Ok(path)
}

/// Every checkpoint file in `out`, newest first.
pub fn list(out: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir(out))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "lbmck"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.reverse();
    files
}

/// Reads and checks one checkpoint file; the error says what is wrong with it.
pub fn read<S: for<'de> Deserialize<'de>>(path: &Path) -> Result<Checkpoint<S>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("it cannot be read ({e})"))?;
    if bytes.len() < HEADER + 32 {
        return Err(format!(
            "it is truncated: {} bytes, shorter than the header",
            bytes.len()
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err("it is not an lbm checkpoint (wrong magic bytes)".into());
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "its format version is {version}; this lbm reads version {FORMAT_VERSION}"
        ));
    }
    let step = word(44);
    let (json_len, binary_len) = (word(52), word(60));
    let expected = (HEADER as u64)
        .checked_add(json_len)
        .and_then(|n| n.checked_add(binary_len))
        .and_then(|n| n.checked_add(32));
    if expected != Some(bytes.len() as u64) {
        return Err(format!(
            "it is truncated or padded: {} bytes where its header says {}",
            bytes.len(),
            expected.map_or("more than 2^64".into(), |n| n.to_string())
        ));
    }
    let body = bytes.len() - 32;
    if Sha256::digest(&bytes[..body]).as_slice() != &bytes[body..] {
        return Err("its checksum does not match: the file is damaged".into());
    }
    let json_end = HEADER + json_len as usize;
    let meta: Meta<S> = serde_json::from_slice(&bytes[HEADER..json_end])
        .map_err(|e| format!("its state record is unreadable ({e})"))?;
    if unhex(&meta.plan.sha256) != bytes[12..44] {
        return Err("its header and its state record name different plans".into());
    }
    let mut at = json_end;
    let mut buffers = Vec::with_capacity(meta.buffers.len());
    for (label, len) in &meta.buffers {
        let end = at + *len as usize;
        if end > body {
            return Err(format!("its buffer `{label}` runs past the end of the file"));
        }
        buffers.push((label.clone(), bytes[at..end].to_vec()));
        at = end;
    }
    if at != body {
        return Err("its buffers do not fill its binary part".into());
    }
    Ok(Checkpoint {
        path: path.to_owned(),
        plan: meta.plan,
        snapshot: Snapshot {
            step_count: step,
            window_start: meta.window_start,
            buffers,
        },
        run: meta.run,
    })
}

/// The newest checkpoint in `out` that reads back whole, with the reasons
/// the newer ones were passed over.
pub fn latest<S: for<'de> Deserialize<'de>>(out: &Path) -> (Option<Checkpoint<S>>, Vec<String>) {
    let mut refused = Vec::new();
    for path in list(out) {
        match read(&path) {
            Ok(checkpoint) => return (Some(checkpoint), refused),
            Err(reason) => refused.push(format!("{} is refused: {reason}", path.display())),
        }
    }
    (None, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lbm-ckpt-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn plan() -> Plan {
        Plan {
            sha256: "ab".repeat(32),
            case_sha256: "cd".repeat(32),
            code_version: "0.1.0".into(),
            ptx_sha256: "ef".repeat(32),
        }
    }

    fn snapshot(step: u64) -> Snapshot {
        Snapshot {
            step_count: step,
            window_start: Some(step / 2),
            buffers: vec![
                ("L0_p0.f.a".into(), (0..=255).collect()),
                ("boundary.state".into(), vec![7; 8]),
            ],
        }
    }

    #[test]
    fn a_checkpoint_reads_back_as_written_and_two_are_kept() {
        let out = scratch("round-trip");
        for step in [10, 20, 30] {
            write(&out, &plan(), &snapshot(step), &format!("state at {step}")).unwrap();
        }
        let names: Vec<String> = list(&out)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["step_000000000030.lbmck", "step_000000000020.lbmck"]);
        let (found, refused) = latest::<String>(&out);
        let found = found.unwrap();
        assert!(refused.is_empty());
        assert_eq!(found.snapshot, snapshot(30));
        assert_eq!(found.plan, plan());
        assert_eq!(found.run, "state at 30");
        std::fs::remove_dir_all(out).unwrap();
    }

    /// The runner's state goes through JSON: every f64 must come back with
    /// its bits (serde_json's default parser is off by an ulp now and then,
    /// which turned a resumed run's `time_s` from 0.9500000000000001 to 0.95).
    #[test]
    fn floats_come_back_with_their_bits() {
        let out = scratch("floats");
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let values: Vec<f64> = (0..20_000)
            .map(|k| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match k % 2 {
                    0 => f64::from_bits(x >> 2),
                    _ => (k as f64) * 1.6666666666666666e-3,
                }
            })
            .filter(|v| v.is_finite())
            .collect();
        write(&out, &plan(), &snapshot(1), &values).unwrap();
        let (found, _) = latest::<Vec<f64>>(&out);
        let back = found.unwrap().run;
        let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        std::fs::remove_dir_all(out).unwrap();
    }

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_previous_one() {
        let out = scratch("damaged");
        write(&out, &plan(), &snapshot(10), &1u32).unwrap();
        let newest = write(&out, &plan(), &snapshot(20), &2u32).unwrap();
        let good = std::fs::read(&newest).unwrap();
        for (damage, reason) in [
            (good[..good.len() - 100].to_vec(), "truncated"),
            (good[..20].to_vec(), "shorter than the header"),
            (
                {
                    let mut b = good.clone();
                    b[HEADER + 3] ^= 1;
                    b
                },
                "checksum",
            ),
            (
                {
                    let mut b = good.clone();
                    b[8] = 9;
                    b
                },
                "format version is 9",
            ),
            (
                b"not a checkpoint at all, just some text to fill a header out".repeat(3),
                "magic",
            ),
        ] {
            std::fs::write(&newest, &damage).unwrap();
            let (found, refused) = latest::<u32>(&out);
            assert_eq!(found.expect("the older one").run, 1, "{reason}");
            assert_eq!(refused.len(), 1);
            assert!(refused[0].contains(reason), "{reason}: {}", refused[0]);
        }
        std::fs::remove_dir_all(out).unwrap();
    }
}
