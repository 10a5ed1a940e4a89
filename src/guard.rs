//! What watches a run from outside its loop: SIGINT, SIGTERM, SIGHUP and
//! SIGXCPU, the watchdog that ends a run whose intervals stop completing,
//! and the room for the threads that do both (`check_thread_room`).
//!
//! A first SIGINT, SIGTERM or SIGHUP only raises a flag: the run finishes the chunk
//! in flight, checkpoints and ends "interrupted". A second one, from half a
//! second after the first, exits at once with 130, leaving the last
//! checkpoint; one sooner is the first's copy (`timeout` signals the process
//! and then its group, a terminal's Ctrl-C the whole foreground group). A
//! signal ignored when the program started (`nohup`'s SIGHUP, a script's
//! background job's SIGINT) stays ignored; SIGXCPU, a CPU-time limit's soft
//! end, is a first stop, its repeats never a second. The watchdog is a thread that, when
//! no interval has completed for its period, writes the summary it was last
//! given with `"ended": "stalled"` and exits with 3: a hung device cannot be
//! checkpointed, so the run resumes from its last checkpoint.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::AppError;
use crate::output::thread::{WRITING, WRITTEN};
use crate::run::{Ending, Summary, write_json};

/// The exit code of an interrupted run, as shells report a SIGINT.
pub const EXIT_INTERRUPTED: u8 = 130;
/// The exit code of a run that failed after it started.
pub const EXIT_FAILED: u8 = 3;

/// Whether SIGINT, SIGTERM or SIGHUP arrived since [`Signals::install`].
#[derive(Clone)]
pub struct Signals {
    raised: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers once per process (later calls return the same
    /// flag); a second signal exits the process with 130 ([`SECOND_SIGNAL`]
    /// after the first or later). Installed when a
    /// command starts, so that a signal during set-up ends the run at its
    /// first chunk, with its summary and a checkpoint, rather than at once
    /// with neither. SIGHUP (a closed terminal) counts as SIGTERM, SIGXCPU (a
    /// CPU-time limit's soft end) as a first stop and never as a second. SIGXFSZ (a
    /// file-size limit reached) is caught and nothing more, so that the write
    /// fails with EFBIG and the run ends "failed", naming the file, instead
    /// of being killed without a word.
    pub fn install() -> Signals {
        static INSTALLED: std::sync::OnceLock<Signals> = std::sync::OnceLock::new();
        INSTALLED
            .get_or_init(|| {
                use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGXCPU, SIGXFSZ};
                let raised = Arc::new(AtomicBool::new(false));
                // A thread takes the signals as they come, so that it can
                // tell a second stop from the first's copy by the clock.
                // One ignored when the program started stays ignored, as
                // `nohup` (SIGHUP) and a shell's background job (SIGINT) ask.
                let stops = [SIGINT, SIGTERM, SIGHUP, SIGXCPU]
                    .into_iter()
                    .filter(|s| !lbm_core::cpu::signal_ignored(*s));
                if let Ok(mut stops) = signal_hook::iterator::Signals::new(stops) {
                    let raised = raised.clone();
                    let taking = std::thread::Builder::new().name("signals".into()).spawn(move || {
                        let mut first: Option<Instant> = None;
                        for signal in stops.forever() {
                            // A CPU-time limit's soft end: the kernel repeats
                            // it each CPU second until the hard end, which
                            // the stop's checkpoint must come before.
                            if signal == SIGXCPU {
                                first.get_or_insert_with(Instant::now);
                                raised.store(true, Ordering::SeqCst);
                                continue;
                            }
                            match first {
                                None => {
                                    first = Some(Instant::now());
                                    raised.store(true, Ordering::SeqCst);
                                }
                                Some(at) if at.elapsed() >= SECOND_SIGNAL => {
                                    eprintln!(
                                        "error: a second stop signal: exiting at once, with no summary.json and \
                                         no checkpoint of this chunk; the newest whole checkpoint stays, and \
                                         `lbm resume` continues from it"
                                    );
                                    std::process::exit(EXIT_INTERRUPTED as i32)
                                }
                                Some(_) => {}
                            }
                        }
                    });
                    if let Err(e) = taking {
                        eprintln!(
                            "warning: no thread for the stop signals ({e}): a stop signal will not checkpoint the run"
                        );
                    }
                }
                let _ = signal_hook::flag::register(SIGXFSZ, Arc::new(AtomicBool::new(false)));
                Signals { raised }
            })
            .clone()
    }

    pub fn raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }
}

/// Refuses, before anything is written, a process that may not start the
/// `threads` more threads a command needs beside its workers (each run's
/// writer, the watchdog, the stop signals'): they are started and held
/// together, then let go.
pub fn check_thread_room(threads: usize) -> Result<(), AppError> {
    let (hold, wait) = std::sync::mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    let mut started = Vec::new();
    let mut refused = None;
    for _ in 0..threads {
        let wait = wait.clone();
        match std::thread::Builder::new().spawn(move || {
            let _ = wait.lock().map(|w| w.recv());
        }) {
            Ok(handle) => started.push(handle),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    drop(hold);
    for handle in started {
        let _ = handle.join();
    }
    match refused {
        Some(source) => Err(AppError::Threads {
            what: "the program's threads",
            source,
        }),
        None => Ok(()),
    }
}

/// How long after the first stop signal another one ends the process at
/// once; sooner, it is the same stop delivered twice.
pub const SECOND_SIGNAL: Duration = Duration::from_millis(500);

struct Watch {
    /// What a stall reports it by ([`Watchdog::group`]).
    key: usize,
    out: PathBuf,
    last_progress: Instant,
    /// The summary a stall writes, as of `summary_at`; its interval count
    /// and checkpoint are brought up to date from the beats.
    summary: Summary,
    summary_at: Instant,
    completed_intervals: u64,
    checkpoint: Option<String>,
    done: bool,
}

/// How often a beat rebuilds the summary a stall would write: the summary
/// walks the run's force history, too much for every chunk of a small case.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// What a stall of a group of runs does once each one's summary is written
/// (given those that had not ended, by the keys the group was started
/// with): the group's own records, and the message to print.
pub type OnStall = Box<dyn FnOnce(&[(usize, Summary)]) -> String + Send>;

/// The watchdog of one run among those a thread watches; see the module
/// documentation.
pub struct Watchdog {
    watch: Arc<Mutex<Watch>>,
}

impl Watchdog {
    /// Starts watching: `summary` is what is written if the run stalls
    /// before the first [`Watchdog::beat`].
    pub fn start(out: PathBuf, period: Duration, summary: Summary) -> Result<Watchdog, AppError> {
        let mut one = Watchdog::group(vec![(0, out, summary)], period, None)?;
        Ok(one.pop().expect("one run, one watchdog"))
    }

    /// Watches runs advanced together (a sweep's members), one thread for
    /// all: when one that has not ended stalls, the loop that advances
    /// them all has, and every one that has not ended is written as
    /// stalled; `on_stall` then writes the group's records and says what to
    /// print (a lone run prints its own error), and the process exits 3.
    /// Each run comes with a key its stall is reported by.
    pub fn group(
        runs: Vec<(usize, PathBuf, Summary)>,
        period: Duration,
        on_stall: Option<OnStall>,
    ) -> Result<Vec<Watchdog>, AppError> {
        let watches: Vec<Arc<Mutex<Watch>>> = runs
            .into_iter()
            .map(|(key, out, summary)| {
                Arc::new(Mutex::new(Watch {
                    key,
                    out,
                    last_progress: Instant::now(),
                    completed_intervals: summary.completed_intervals,
                    checkpoint: summary.checkpoint.clone(),
                    summary,
                    summary_at: Instant::now(),
                    done: false,
                }))
            })
            .collect();
        let shared = watches.clone();
        let poll = (period / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let watching = std::thread::Builder::new().name("watchdog".into()).spawn(move || {
            let mut written = WRITTEN.load(Ordering::Acquire);
            let mut on_stall = on_stall;
            loop {
                std::thread::sleep(poll);
                let mut locked: Vec<_> = shared
                    .iter()
                    .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()))
                    .collect();
                if locked.iter().all(|w| w.done) {
                    return;
                }
                // The writer finishing files is progress too: the runs may
                // be waiting for it.
                let now_written = WRITTEN.load(Ordering::Acquire);
                if now_written != written {
                    written = now_written;
                    locked.iter_mut().for_each(|w| w.last_progress = Instant::now());
                    continue;
                }
                if !locked.iter().any(|w| !w.done && w.last_progress.elapsed() >= period) {
                    continue;
                }
                let cause = match WRITING.load(Ordering::Acquire) {
                    0 => "no interval completed",
                    _ => {
                        "the thread writing the run's files finished nothing (a file system that does not \
                         answer?), and no interval completed"
                    }
                };
                let mut stalled = Vec::new();
                for watch in locked.iter().filter(|w| !w.done) {
                    let (summary, error) = stalled_summary(watch, cause, period);
                    if let Err(e) = write_json(&watch.out.join("summary.json"), &summary) {
                        tell!("error: {e}");
                    }
                    stalled.push((watch.key, summary, error));
                }
                let message = match on_stall.take() {
                    Some(f) => f(&stalled.iter().map(|(k, s, _)| (*k, s.clone())).collect::<Vec<_>>()),
                    None => stalled.first().map(|(_, _, e)| e.clone()).unwrap_or_default(),
                };
                tell!("error: {message}");
                std::process::exit(EXIT_FAILED as i32);
            }
        });
        watching.map_err(|source| AppError::Threads {
            what: "the watchdog's thread",
            source,
        })?;
        Ok(watches.into_iter().map(|watch| Watchdog { watch }).collect())
    }

    /// `completed_intervals` are done and the newest checkpoint is
    /// `checkpoint`: the stall clock restarts. `summary` (called at most once
    /// a second) is what a stall from now on would report.
    pub fn beat(&self, completed_intervals: u64, checkpoint: Option<&String>, summary: impl FnOnce() -> Summary) {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        watch.last_progress = Instant::now();
        watch.completed_intervals = completed_intervals;
        watch.checkpoint = checkpoint.cloned();
        if watch.summary_at.elapsed() >= SUMMARY_EVERY {
            watch.summary = summary();
            watch.summary_at = Instant::now();
        }
    }
}

/// The summary a stalled run writes, and its error.
fn stalled_summary(watch: &Watch, cause: &str, period: Duration) -> (Summary, String) {
    let mut summary = watch.summary.clone();
    summary.ended = Ending::Stalled;
    summary.completed_intervals = watch.completed_intervals;
    summary.checkpoint = watch.checkpoint.clone();
    // From its checkpoint, or from the start without one.
    let out = std::path::absolute(&watch.out).unwrap_or_else(|_| watch.out.clone());
    summary.resume = Some(crate::run::resume_command(&out));
    let last = summary.completed_intervals;
    let error = format!(
        "the run stalled: {cause} for {} s after interval {last} (--watchdog-seconds); the device or the file \
         system may be hung. The last checkpoint is {}",
        period.as_secs_f64(),
        summary
            .checkpoint
            .as_deref()
            .unwrap_or("none: `lbm resume` runs it again from the start")
    );
    summary.error = Some(error.clone());
    (summary, error)
}

impl Watchdog {
    /// The run ended (a sweep's member that failed while the others go
    /// on): it is watched no longer.
    pub fn end(&self) {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).done = true;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).done = true;
    }
}
