//! The writer thread: a run's files are written on a thread of their own
//! while the next intervals run.
//!
//! The run drains the output ring, judges what came out (a non-finite force
//! or field stops it, at the same interval on every machine) and hands the
//! writing to this thread in order, over a bounded queue. A full queue makes
//! the run wait, and each wait is counted. The thread writes in the order it
//! was given, so the files are the bytes the run would write itself; a
//! checkpoint takes the writer's state only once everything before it is on
//! disk ([`WriterThread::state`]). The first error stops the writing, and is
//! reported by the next call that hands the thread anything, so the run
//! stops within a few samples of it rather than at its next checkpoint.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use lbm_core::ledger::ExchangeRecord;

use super::fields::PatchFields;
use super::{Writer, WriterState, Written};
use crate::AppError;

/// Writer threads in the middle of a job now.
pub static WRITING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Jobs and files the writer threads have finished: the watchdog takes a
/// change for progress (a save point's many files, a large picture, while
/// the run waits for them), and a job in flight that finishes nothing for
/// its period for a writer hung in the file system.
pub static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// Jobs the run may queue ahead of the thread.
const QUEUE: usize = 4;

enum Job {
    Forces(f64, Vec<ExchangeRecord>),
    Probes(f64, Vec<Option<[f64; 3]>>),
    Save(u64, Arc<Vec<PatchFields>>),
    State(mpsc::Sender<Result<WriterState, AppError>>),
    /// Replied to once everything queued before it is written (or skipped).
    Wait(mpsc::Sender<()>),
    Finish(mpsc::Sender<Result<Written, AppError>>),
}

/// A [`Writer`] on its own thread; see the module documentation.
pub struct WriterThread {
    jobs: SyncSender<Job>,
    handle: Option<JoinHandle<()>>,
    /// How long the thread took over its last save point, ns.
    save_nanos: Arc<AtomicU64>,
    /// Save points the thread has written, and those queued with the time
    /// the last was: a save still being written is time a wall limit must
    /// hold back.
    saves_done: Arc<AtomicU64>,
    saves_queued: u64,
    last_queued: Option<Instant>,
    waits: u64,
    /// Set by the thread at its first error.
    failed: Arc<AtomicBool>,
}

fn gone() -> AppError {
    AppError::WriterGone
}

impl WriterThread {
    pub fn spawn(writer: Writer) -> Result<WriterThread, AppError> {
        let (jobs, queue) = sync_channel(QUEUE);
        let save_nanos = Arc::new(AtomicU64::new(0));
        let saves_done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let (timing, done, failing) = (save_nanos.clone(), saves_done.clone(), failed.clone());
        let handle = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || work(writer, queue, &timing, &done, &failing))
            .map_err(|source| AppError::Threads {
                what: "the output writer's thread",
                source,
            })?;
        Ok(WriterThread {
            jobs,
            handle: Some(handle),
            save_nanos,
            saves_done,
            saves_queued: 0,
            last_queued: None,
            waits: 0,
            failed,
        })
    }

    fn send(&mut self, job: Job) -> Result<(), AppError> {
        if self.failed.load(Ordering::Acquire) {
            // The thread's error, which it hands over once.
            let (reply, answer) = mpsc::channel();
            self.jobs.send(Job::State(reply)).map_err(|_| gone())?;
            if let Ok(Err(e)) = answer.recv() {
                return Err(e);
            }
        }
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => {
                self.waits += 1;
                self.jobs.send(job).map_err(|_| gone())
            }
            Err(TrySendError::Disconnected(_)) => Err(gone()),
        }
    }

    /// A row of `forces.csv`.
    pub fn forces(&mut self, time: f64, records: Vec<ExchangeRecord>) -> Result<(), AppError> {
        self.send(Job::Forces(time, records))
    }

    /// A row of each point probe's CSV.
    pub fn probes(&mut self, time: f64, values: Vec<Option<[f64; 3]>>) -> Result<(), AppError> {
        self.send(Job::Probes(time, values))
    }

    /// Waits until every save point queued is written, so that the fields
    /// of the next one are gathered beside none of them: the queue would
    /// otherwise hold several save points' fields at once, which
    /// `check::MemoryNeed` counts once.
    pub fn wait_saves(&mut self) -> Result<(), AppError> {
        match self.saves_done.load(Ordering::Acquire) < self.saves_queued {
            true => self.wait(),
            false => Ok(()),
        }
    }

    /// The fields of a save point.
    pub fn save(&mut self, step: u64, patches: Arc<Vec<PatchFields>>) -> Result<(), AppError> {
        self.send(Job::Save(step, patches))?;
        self.saves_queued += 1;
        self.last_queued = Some(Instant::now());
        Ok(())
    }

    /// Waits until everything queued is written, and returns the writer's
    /// state, or the first error the thread met.
    pub fn state(&mut self) -> Result<WriterState, AppError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::State(reply))?;
        answer.recv().map_err(|_| gone())?
    }

    /// Waits until everything queued is written (an error stays for the
    /// next [`WriterThread::state`] or [`WriterThread::finish`]).
    pub fn wait(&mut self) -> Result<(), AppError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Wait(reply))?;
        answer.recv().map_err(|_| gone())
    }

    /// Writes what is queued and the plots, and ends the thread.
    pub fn finish(&mut self) -> Result<Written, AppError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Finish(reply))?;
        let written = answer.recv().map_err(|_| gone())?;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
        written
    }

    /// Whether [`WriterThread::finish`] has not been called yet.
    pub fn is_running(&self) -> bool {
        self.handle.is_some()
    }

    /// Times the run waited for the thread.
    pub fn waits(&self) -> u64 {
        self.waits
    }

    /// Seconds the thread took over its last save point; `None` until one
    /// has been written.
    pub fn save_seconds(&self) -> Option<f64> {
        let nanos = self.save_nanos.load(Ordering::Relaxed);
        (nanos > 0).then_some(nanos as f64 * 1e-9)
    }

    /// Save points queued and not yet written (or skipped after an error).
    pub fn saves_pending(&self) -> u64 {
        self.saves_queued
            .saturating_sub(self.saves_done.load(Ordering::Acquire))
    }

    /// Seconds the save points still queued may take, by what the last
    /// timed save took, less the time since the newest was queued; none
    /// before a save has been timed (its cost is unknown until one ends:
    /// [`WriterThread::wait`] for it).
    pub fn save_left_seconds(&self) -> f64 {
        match (self.save_seconds(), self.last_queued) {
            (Some(save), Some(queued)) if self.saves_pending() > 0 => {
                (self.saves_pending() as f64 * save - queued.elapsed().as_secs_f64()).max(0.0)
            }
            _ => 0.0,
        }
    }
}

fn work(
    mut writer: Writer,
    queue: Receiver<Job>,
    save_nanos: &AtomicU64,
    saves_done: &AtomicU64,
    failing: &AtomicBool,
) {
    let mut failed: Option<AppError> = None;
    for job in queue {
        // Written or, after an error, skipped: no longer pending either way.
        let save = matches!(job, Job::Save(..));
        WRITING.fetch_add(1, Ordering::AcqRel);
        let result = match job {
            _ if failed.is_some() && !matches!(job, Job::State(_) | Job::Wait(_) | Job::Finish(_)) => Ok(()),
            Job::Forces(time, records) => writer.forces(time, &records),
            Job::Probes(time, values) => writer.probes(time, &values),
            Job::Save(step, patches) => {
                let start = Instant::now();
                let saved = writer.save(step, &patches);
                save_nanos.store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                drop(patches);
                lbm_core::cpu::return_freed_memory();
                saved
            }
            Job::State(reply) => {
                let _ = reply.send(match failed.take() {
                    Some(e) => Err(e),
                    None => Ok(writer.state()),
                });
                Ok(())
            }
            Job::Wait(reply) => {
                let _ = reply.send(());
                Ok(())
            }
            Job::Finish(reply) => {
                let finished = match failed.take() {
                    Some(e) => Err(e),
                    None => writer.finish(),
                };
                WRITING.fetch_sub(1, Ordering::AcqRel);
                let _ = reply.send(finished);
                return;
            }
        };
        WRITING.fetch_sub(1, Ordering::AcqRel);
        WRITTEN.fetch_add(1, Ordering::AcqRel);
        if save {
            saves_done.fetch_add(1, Ordering::Release);
        }
        if let Err(e) = result {
            failed.get_or_insert(e);
            failing.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbm_core::case::Case;

    fn writer(name: &str) -> (std::path::PathBuf, Writer) {
        let out = std::env::temp_dir().join(format!("lbm-writer-thread-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let case = Case::from_toml(include_str!("../../cases/dfg-2d1.toml")).unwrap();
        let resolved = case.resolve().unwrap();
        let writer = Writer::create(&out, &case, &resolved, None).unwrap();
        (out, writer)
    }

    fn record(end: u64) -> ExchangeRecord {
        ExchangeRecord {
            body: 0,
            level: 2,
            time_start: end - 1,
            time_end: end,
            sample_count: 4,
            force: [1e-3, -2e-5],
            torque: 1e-7,
        }
    }

    /// One patch of `n` x `n` cells whose fields vary from cell to cell.
    fn patch(n: usize) -> PatchFields {
        let field = |k: f32| ndarray::Array2::from_shape_fn((n, n), |(j, i)| k + (7 * i + 13 * j) as f32 * 1e-4);
        PatchFields {
            level: 0,
            patch: 0,
            size: [n, n],
            origin: [0.0, 0.0],
            spacing: 0.4 / n as f64,
            first_cell: [0, 0],
            pressure: field(1.0),
            density: field(2.0),
            ux: field(0.1),
            uy: field(-0.1),
            solid: ndarray::Array2::from_elem((n, n), false),
            covered: ndarray::Array2::from_elem((n, n), false),
            on_boundary: [true; 4],
            wraps: [false; 2],
        }
    }

    /// A wait returns only once the save queued before it is on disk (a
    /// wall limit waits so for the first save point's cost), and a save
    /// still pending holds back at most what the last one took.
    #[test]
    fn a_wait_returns_once_the_save_queued_before_it_is_written() {
        let (out, writer) = writer("wait");
        let mut thread = WriterThread::spawn(writer).unwrap();
        let fields = Arc::new(vec![patch(160)]);
        thread.save(60, fields.clone()).unwrap();
        assert_eq!(thread.saves_pending(), 1);
        assert_eq!(thread.save_left_seconds(), 0.0, "no save timed yet");
        thread.wait().unwrap();
        assert_eq!(thread.saves_pending(), 0);
        let took = thread.save_seconds().expect("a written save is timed");
        let saved = out.join("fields").join("t000000060");
        assert!(saved.read_dir().unwrap().count() > 0, "nothing in {}", saved.display());
        thread.save(120, fields).unwrap();
        let left = thread.save_left_seconds();
        assert!(left > 0.0 && left <= took, "{left} s left of a save that took {took} s");
        thread.wait().unwrap();
        assert_eq!((thread.saves_pending(), thread.save_left_seconds()), (0, 0.0));
        thread.finish().unwrap();
        std::fs::remove_dir_all(out).unwrap();
    }

    /// A flush returns only once every queued row is in the file, in order,
    /// however far the run got ahead of the thread.
    #[test]
    fn a_flush_waits_for_every_row_queued_before_it() {
        let (out, writer) = writer("flush");
        let mut thread = WriterThread::spawn(writer).unwrap();
        for k in 1..=50 {
            thread.forces(k as f64 * 0.01, vec![record(k)]).unwrap();
        }
        let state = thread.state().unwrap();
        let text = std::fs::read_to_string(out.join("forces.csv")).unwrap();
        assert_eq!(text.lines().count(), 51, "a header and fifty rows");
        assert_eq!(state.csv_lengths[0], text.len() as u64);
        let times: Vec<f64> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "in the order given");
        thread.finish().unwrap();
        assert!(!thread.is_running());
        std::fs::remove_dir_all(out).unwrap();
    }

    /// A write that fails stops the writing and is reported at the next
    /// flush, naming the file.
    #[test]
    fn a_failed_write_is_reported_at_the_next_flush() {
        let (out, writer) = writer("failed");
        let mut thread = WriterThread::spawn(writer).unwrap();
        std::fs::remove_dir_all(out.join("fields")).unwrap();
        std::fs::write(out.join("fields"), b"in the way").unwrap();
        thread.save(60, Arc::new(Vec::new())).unwrap();
        // The row is refused if the thread has failed already, else skipped.
        let error = thread
            .forces(0.1, vec![record(60)])
            .err()
            .or_else(|| thread.state().err())
            .expect("the save could not write");
        assert!(error.to_string().contains("fields"), "{error}");
        let rows = std::fs::read_to_string(out.join("forces.csv")).unwrap().lines().count();
        assert_eq!(rows, 1, "nothing is written after the failure");
        std::fs::remove_dir_all(out).unwrap();
    }

    /// A run learns of a failed write at its next sample, not at the next
    /// checkpoint, which may be the end.
    #[test]
    fn a_failed_write_is_reported_to_the_next_job_handed_over() {
        let (out, writer) = writer("failed-next");
        let mut thread = WriterThread::spawn(writer).unwrap();
        std::fs::remove_dir_all(out.join("fields")).unwrap();
        std::fs::write(out.join("fields"), b"in the way").unwrap();
        thread.save(60, Arc::new(Vec::new())).unwrap();
        // Once the save has been tried, whichever job comes next hears of it.
        let error = thread
            .wait()
            .err()
            .or_else(|| thread.forces(0.1, vec![record(60)]).err())
            .expect("the save could not write");
        assert!(error.to_string().contains("fields"), "{error}");
        std::fs::remove_dir_all(out).unwrap();
    }
}
