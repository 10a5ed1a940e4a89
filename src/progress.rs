//! Progress of a run on stderr: a bar with the percentage, simulated time,
//! intervals per second, MLUPS, ETA and the latest force coefficients on a
//! terminal; a plain line every tenth of the run otherwise (logs, CI); nothing
//! with `--quiet`.
//!
//! It reports; it never changes what the run does.

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    plain: bool,
    total: u64,
    /// Intervals already done when this process started (a resumed run).
    first: u64,
    dt: f64,
    updates_per_interval: u64,
    start: Instant,
    next_line: u64,
}

impl Progress {
    /// Progress from `first` to `total` base intervals of `dt` seconds, each
    /// `updates_per_interval` cell updates.
    pub fn new(first: u64, total: u64, dt: f64, updates_per_interval: u64, quiet: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            let bar = ProgressBar::new(total);
            bar.set_position(first);
            bar.set_style(
                ProgressStyle::with_template("{bar:30.cyan/blue} {percent:>3}% {msg} ETA {eta}")
                    .expect("a valid template"),
            );
            bar
        });
        Progress {
            bar,
            plain: !quiet && !terminal,
            total,
            first,
            dt,
            updates_per_interval,
            start: Instant::now(),
            next_line: first + total.div_ceil(10).max(1),
        }
    }

    /// `done` intervals are complete; `coefficients` are each body's latest
    /// (cd, cl).
    pub fn update(&mut self, done: u64, coefficients: &[[f64; 2]]) {
        let elapsed = self.start.elapsed().as_secs_f64().max(1e-9);
        let rate = done.saturating_sub(self.first) as f64 / elapsed;
        let mut message = format!(
            "t = {:.4} s, {:.0} intervals/s, {:.1} MLUPS",
            done as f64 * self.dt,
            rate,
            rate * self.updates_per_interval as f64 / 1e6
        );
        for (b, [cd, cl]) in coefficients.iter().enumerate() {
            message.push_str(&format!(", body {b} cd {cd:.4} cl {cl:.4}"));
        }
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(message);
        } else if self.plain && (done >= self.next_line || done == self.total) {
            let eta = (self.total - done) as f64 / rate.max(1e-9);
            tell!(
                "{:>3}% {message}, ETA {eta:.0} s",
                (100 * done).checked_div(self.total).unwrap_or(100)
            );
            self.next_line = done + self.total.div_ceil(10).max(1);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
