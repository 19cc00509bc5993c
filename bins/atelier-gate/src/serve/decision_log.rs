//! The door's decision log: one canonical line per decision, deduplicated and bounded.

use std::collections::HashSet;
use std::sync::Mutex;

/// Distinct lines a door logs; later new lines are dropped (after one line saying so).
pub const MAX_LOG_LINES: usize = 200;

/// The most characters of agent-supplied text a line carries.
pub const MAX_LOG_TEXT: usize = 200;

/// Lines already logged by one door.
#[derive(Debug, Default)]
pub struct DecisionLog {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    lines: Vec<String>,
    set: HashSet<String>,
    full: bool,
}

impl DecisionLog {
    /// An empty log.
    pub fn new() -> DecisionLog {
        DecisionLog::default()
    }

    /// Logs `door=<door> destination=<destination> verdict=<verdict> reason=<reason>` unless
    /// the same line was logged before. `destination` and `reason` are made printable and
    /// bounded, as either may carry agent-supplied text.
    pub fn record(&self, door: &str, destination: &str, verdict: &str, reason: &str) {
        let line = format!(
            "door={door} destination={} verdict={verdict} reason={}",
            printable(destination),
            printable(reason)
        );
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.set.contains(&line) {
            return;
        }
        if seen.lines.len() >= MAX_LOG_LINES {
            if !seen.full {
                seen.full = true;
                tracing::warn!("door={door} logged {MAX_LOG_LINES} distinct decisions; later ones are not logged");
            }
            return;
        }
        tracing::info!("{line}");
        seen.set.insert(line.clone());
        seen.lines.push(line);
    }

    /// Every line logged so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.seen
            .lock()
            .map(|seen| seen.lines.clone())
            .unwrap_or_default()
    }
}

/// `text` with every character outside `\x20..=\x7e` replaced by `?`, cut to
/// [`MAX_LOG_TEXT`] characters.
pub fn printable(text: &str) -> String {
    text.chars()
        .take(MAX_LOG_TEXT)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}
