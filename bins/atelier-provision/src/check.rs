//! `check`: the drift report. The plan is made as for `apply` and nothing is executed; every
//! action that would change the host is drift, classed by what is wrong.

use std::path::Path;

use serde::Serialize;

use crate::plan::{AccountStep, Action, DirChange, Disposition, ExecStep};

/// One thing on the host that does not match the declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftItem {
    /// The path or account it is about.
    pub subject: String,
    /// The class: `missing`, `owner`, `mode`, `metadata`, `unstamped`, `foreign`,
    /// `hand_edited`, `stale`, `identity`, `retire`, `awaiting`, `awaiting_certificate` (a
    /// letsencrypt site serves only the ACME challenge until its certificate, the subject,
    /// exists), `pending`, `restart_pending` (a running daemon has not read what changed since
    /// it started).
    pub class: &'static str,
    /// The action `apply` would take, in one line.
    pub action: String,
}

/// What `check` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    /// Every drifted thing, in plan order.
    pub items: Vec<DriftItem>,
}

// === impl DriftReport ===

impl DriftReport {
    /// Whether the host matches the declaration.
    pub fn is_clean(&self) -> bool {
        self.items.is_empty()
    }
}

/// Classes every action of a plan as drift.
pub fn check(actions: &[Action]) -> DriftReport {
    let items = actions
        .iter()
        .map(|action| {
            let (subject, class) = match action {
                Action::Account { step, name, .. } => (
                    name.clone(),
                    if *step == AccountStep::Lock {
                        "retire"
                    } else {
                        "identity"
                    },
                ),
                Action::Dir { path, changes, .. } => (
                    display(path),
                    match changes.first() {
                        Some(DirChange::Create) => "missing",
                        Some(DirChange::Owner) => "owner",
                        _ => "mode",
                    },
                ),
                Action::File {
                    path,
                    disposition,
                    drift,
                    ..
                } => (
                    display(path),
                    match disposition {
                        Disposition::Create => "missing",
                        Disposition::Metadata => "metadata",
                        // A site waiting for its certificate is drift like any awaited file, so
                        // `check` exits 1 until certbot has run: production is declared over
                        // TLS and is not served, which whoever watches `check` must see, even
                        // though `apply` (which cannot fetch it) succeeds.
                        Disposition::Awaiting => drift.unwrap_or("awaiting"),
                        Disposition::Rewrite => drift.unwrap_or("stale"),
                    },
                ),
                Action::Symlink { path, .. } => (display(path), "missing"),
                Action::Unlink { path } | Action::Archive { from: path, .. } => {
                    (display(path), "retire")
                }
                Action::Exec {
                    step: ExecStep::RestartServices,
                    argv,
                } => (argv.join(" "), "restart_pending"),
                Action::Exec { argv, .. } => (argv.join(" "), "pending"),
                Action::DeferRestart { unit, .. } => (unit.clone(), "restart_pending"),
            };
            DriftItem {
                subject,
                class,
                action: action.to_string(),
            }
        })
        .collect();
    DriftReport { items }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}
