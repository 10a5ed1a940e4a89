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

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use lbm_core::Snapshot;

use crate::AppError;
use crate::output::write_atomic_with;
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

/// A reader or writer that hashes what passes through it.
struct Hashed<'a, W> {
    file: &'a mut W,
    sum: Sha256,
}

impl<R: Read> Read for Hashed<'_, R> {
    fn read(&mut self, bytes: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(bytes)?;
        self.sum.update(&bytes[..n]);
        Ok(n)
    }
}

impl<W: Write> Write for Hashed<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(bytes)?;
        self.sum.update(&bytes[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
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
    let dir = dir(out);
    crate::output::create_dir(&dir)?;
    let path = dir.join(file_name(snapshot.step_count));
    // Streamed through the hash: the state is as large as the device's
    // populations, and a second copy of it would double the host's peak.
    write_atomic_with(&path, |file| {
        let mut hashed = Hashed {
            file,
            sum: Sha256::new(),
        };
        hashed.write_all(MAGIC)?;
        hashed.write_all(&FORMAT_VERSION.to_le_bytes())?;
        hashed.write_all(&unhex(&plan.sha256))?;
        hashed.write_all(&snapshot.step_count.to_le_bytes())?;
        hashed.write_all(&(json.len() as u64).to_le_bytes())?;
        hashed.write_all(&binary.to_le_bytes())?;
        hashed.write_all(&json)?;
        for (_, b) in &snapshot.buffers {
            hashed.write_all(b)?;
        }
        let sum = hashed.sum.finalize();
        hashed.file.write_all(&sum)
    })?;
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
/// Each state buffer is read straight into its own vector, so the host holds
/// the state once, as when it was written.
pub fn read<S: for<'de> Deserialize<'de>>(path: &Path) -> Result<Checkpoint<S>, String> {
    let unreadable = |e: std::io::Error| format!("it cannot be read ({e})");
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let len = file.metadata().map_err(unreadable)?.len();
    if len < (HEADER + 32) as u64 {
        return Err(format!("it is truncated: {len} bytes, shorter than the header"));
    }
    let mut reader = std::io::BufReader::new(file);
    let mut hashed = Hashed {
        file: &mut reader,
        sum: Sha256::new(),
    };
    let mut header = [0u8; HEADER];
    hashed.read_exact(&mut header).map_err(unreadable)?;
    if &header[..8] != MAGIC {
        return Err("it is not an lbm checkpoint (wrong magic bytes)".into());
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
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
    if expected != Some(len) {
        return Err(format!(
            "it is truncated, padded or its header is damaged: {len} bytes where its header says {}",
            expected.map_or("more than 2^64".into(), |n| n.to_string())
        ));
    }
    let mut json = vec![0u8; json_len as usize];
    hashed.read_exact(&mut json).map_err(unreadable)?;
    // The record is judged only after the checksum, so that a damaged file
    // is called damaged whichever byte was hit.
    let meta = serde_json::from_slice::<Meta<S>>(&json);
    let sizes = meta
        .as_ref()
        .ok()
        .map(|m| m.buffers.iter().map(|(_, n)| *n).collect::<Vec<_>>())
        .filter(|sizes| sizes.iter().try_fold(0u64, |sum, n| sum.checked_add(*n)) == Some(binary_len));
    let mut buffers = Vec::new();
    match &sizes {
        Some(sizes) => {
            for n in sizes {
                let mut bytes = vec![0u8; *n as usize];
                hashed.read_exact(&mut bytes).map_err(unreadable)?;
                buffers.push(bytes);
            }
        }
        None => {
            std::io::copy(&mut (&mut hashed).take(binary_len), &mut std::io::sink()).map_err(unreadable)?;
        }
    }
    let sum = hashed.sum.finalize();
    let mut stored = [0u8; 32];
    reader.read_exact(&mut stored).map_err(unreadable)?;
    if sum.as_slice() != stored {
        return Err("its checksum does not match: the file is damaged".into());
    }
    let meta = meta.map_err(|e| format!("its state record is unreadable ({e})"))?;
    if unhex(&meta.plan.sha256) != header[12..44] {
        return Err("its header and its state record name different plans".into());
    }
    if sizes.is_none() {
        return Err(format!(
            "its buffers' sizes do not add up to its binary part of {binary_len} bytes"
        ));
    }
    Ok(Checkpoint {
        path: path.to_owned(),
        plan: meta.plan,
        snapshot: Snapshot {
            step_count: step,
            window_start: meta.window_start,
            buffers: meta.buffers.into_iter().map(|(label, _)| label).zip(buffers).collect(),
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
