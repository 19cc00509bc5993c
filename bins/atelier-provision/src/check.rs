//! `check`: the drift report. The plan is made as for `apply` and nothing is executed; every
//! action that would change the host is drift, classed by what is wrong.

use std::path::Path;

use serde::Serialize;

use crate::plan::{AccountStep, Action, DirChange, Disposition};

/// One thing on the host that does not match the declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftItem {
    /// The path or account it is about.
    pub subject: String,
    /// The class: `missing`, `owner`, `mode`, `metadata`, `unstamped`, `foreign`,
    /// `hand_edited`, `stale`, `identity`, `retire`, `awaiting`, `pending`.
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
                        Disposition::Awaiting => "awaiting",
                        Disposition::Rewrite => drift.unwrap_or("stale"),
                    },
                ),
                Action::Symlink { path, .. } => (display(path), "missing"),
                Action::Unlink { path } | Action::Archive { from: path, .. } => {
                    (display(path), "retire")
                }
                Action::Exec { argv, .. } => (argv.join(" "), "pending"),
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
