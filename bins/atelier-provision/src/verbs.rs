//! The verbs' shared pipeline: read the ledger, allocate ordinals, render, observe the host,
//! plan. Each verb then prints, executes or only reports the plan.

use std::path::{Path, PathBuf};

use atelier_layout::declaration::Site;
use atelier_layout::{Declaration, Layout, SiteOrdinal};
use serde::Serialize;

use crate::apply::{self, Report};
use crate::artifact::Artifact;
use crate::check::{self, DriftReport};
use crate::host::{self, HostState};
use crate::identities::{self, Allocation};
use crate::plan::{self, Action, PlanError, PlanInput, Refusal};
use crate::remove::{self, RemoveAction, RemoveOutcome};
use crate::render::{render_all, RenderFacts};
use crate::verify::{self, SurfaceProof};

/// Renders every artifact of an instance, given its sites' ordinals and PID 1's version.
pub type Renderer<'r> = &'r dyn Fn(
    &Declaration,
    &Layout<'_>,
    &[(SiteOrdinal, &Site)],
    u32,
) -> Result<Vec<Artifact>, String>;

/// The production renderer: [`render_all`] with PID 1's version as its only host fact.
pub fn render_artifacts(
    decl: &Declaration,
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    systemd_version: u32,
) -> Result<Vec<Artifact>, String> {
    render_all(decl, layout, sites, &RenderFacts { systemd_version }).map_err(|e| e.to_string())
}

/// The process exit codes every verb shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Done, or nothing to do.
    Ok = 0,
    /// `check` found drift.
    Drift = 1,
    /// The command line was wrong.
    Usage = 2,
    /// The declaration or the host state forbids acting (nothing was written), or an operator
    /// file is still awaited.
    Refused = 3,
    /// Observation or execution failed.
    Failed = 4,
}

// === impl Exit ===

impl Exit {
    /// The numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Why a verb stopped before acting.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// Refused with named reasons; nothing was written.
    #[error(transparent)]
    Refused(#[from] PlanError),
    /// The host could not be observed or the artifacts rendered.
    #[error("{0}")]
    Failed(String),
}

// === impl VerbError ===

impl VerbError {
    /// The exit code it maps to.
    pub fn exit(&self) -> Exit {
        match self {
            VerbError::Refused(_) => Exit::Refused,
            VerbError::Failed(_) => Exit::Failed,
        }
    }
}

/// Everything observed and derived before planning.
#[derive(Debug)]
pub struct Prepared {
    /// The declared sites' ordinals.
    pub allocation: Allocation,
    /// The rendered artifacts.
    pub artifacts: Vec<Artifact>,
    /// The observed host.
    pub host: HostState,
}

/// Reads the ledger and the host below `root`, allocates ordinals and renders.
pub fn prepare(
    decl: &Declaration,
    root: &Path,
    render: Renderer<'_>,
) -> Result<Prepared, VerbError> {
    let layout = Layout::new(decl);
    let accounts = host::read_accounts(root).map_err(|e| VerbError::Failed(e.to_string()))?;
    let allocation = identities::allocate(decl, &accounts).map_err(PlanError::from)?;
    let sites = plan::sites_of(&layout, &allocation);
    let systemd_version = host::systemd_version();
    let artifacts = match systemd_version {
        Some(v) => render(decl, &layout, &sites, v).map_err(|message| {
            VerbError::Refused(PlanError {
                refusals: vec![Refusal {
                    subject: "render".into(),
                    reason: "render_refused",
                    message,
                }],
            })
        })?,
        // The plan refuses by name below; nothing to render against.
        None => Vec::new(),
    };
    let paths = plan::observed_paths(&layout, &sites, &artifacts, &allocation.removed);
    let entries = host::observe_entries(root, paths.iter().map(|(p, read)| (p.as_path(), *read)));
    let host = HostState {
        accounts,
        entries,
        systemd_version,
        web_server_present: host::web_server_present(root, decl.web.server),
        units: host::unit_states(&plan::socket_units(&layout, &sites)).unwrap_or_default(),
    };
    Ok(Prepared {
        allocation,
        artifacts,
        host,
    })
}

/// Plans from a prepared observation and checks the plan's invariants.
pub fn plan_of(
    decl: &Declaration,
    declaration_bytes: Option<&[u8]>,
    prepared: &Prepared,
) -> Result<Vec<Action>, VerbError> {
    let layout = Layout::new(decl);
    let now = remove::utc_stamp(unix_now());
    let actions = plan::plan(PlanInput {
        layout: &layout,
        allocation: &prepared.allocation,
        artifacts: &prepared.artifacts,
        declaration_bytes,
        host: &prepared.host,
        now: &now,
    })?;
    plan::assert_coherent(&actions)?;
    Ok(actions)
}

/// `plan`: the actions `apply` would take.
pub fn plan_verb(
    decl: &Declaration,
    declaration_bytes: Option<&[u8]>,
    root: &Path,
    render: Renderer<'_>,
) -> Result<Vec<Action>, VerbError> {
    let prepared = prepare(decl, root, render)?;
    plan_of(decl, declaration_bytes, &prepared)
}

/// `check`: the drift report; `Exit::Drift` unless the host matches.
pub fn check_verb(
    decl: &Declaration,
    declaration_bytes: Option<&[u8]>,
    root: &Path,
    render: Renderer<'_>,
) -> Result<(DriftReport, Exit), VerbError> {
    let actions = plan_verb(decl, declaration_bytes, root, render)?;
    let report = check::check(&actions);
    let exit = if report.is_clean() {
        Exit::Ok
    } else {
        Exit::Drift
    };
    Ok((report, exit))
}

/// What `apply` did.
#[derive(Debug, Serialize)]
pub struct Applied {
    /// The plan it executed.
    pub actions: Vec<Action>,
    /// Each action's outcome.
    pub report: Report,
}

/// `apply`: plans and executes. A plan that changes nothing executes nothing.
pub fn apply_verb(
    decl: &Declaration,
    declaration_bytes: Option<&[u8]>,
    root: &Path,
    render: Renderer<'_>,
) -> Result<(Applied, Exit), VerbError> {
    let actions = plan_verb(decl, declaration_bytes, root, render)?;
    let report = if actions.iter().any(Action::changes_host) {
        apply::apply(&actions, root)
    } else {
        Report::default()
    };
    let exit = if report.failed() {
        Exit::Failed
    } else if actions.iter().any(|a| !a.changes_host()) {
        Exit::Refused
    } else {
        Exit::Ok
    };
    Ok((Applied { actions, report }, exit))
}

/// `render DIR`: writes every artifact below `dir` at its host path, for review.
pub fn render_verb(
    decl: &Declaration,
    root: &Path,
    dir: &Path,
    render: Renderer<'_>,
) -> Result<Vec<PathBuf>, VerbError> {
    let prepared = prepare(decl, root, render)?;
    let mut written = Vec::new();
    for artifact in &prepared.artifacts {
        let path = host::under_root(dir, &artifact.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| VerbError::Failed(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&path, &artifact.bytes)
            .map_err(|e| VerbError::Failed(format!("{}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

/// What `remove` did.
#[derive(Debug, Serialize)]
pub struct Removed {
    /// The removal plan.
    pub actions: Vec<RemoveAction>,
    /// Each step's outcome.
    pub outcomes: Vec<RemoveOutcome>,
}

/// `remove`: stops the instance, unlinks what is stamped ours, archives marked trees and locks
/// every identity.
pub fn remove_verb(
    decl: &Declaration,
    root: &Path,
    render: Renderer<'_>,
) -> Result<(Removed, Exit), VerbError> {
    let prepared = prepare(decl, root, render)?;
    let layout = Layout::new(decl);
    let actions = remove::removal_plan(
        &layout,
        &prepared.artifacts,
        &prepared.host,
        &remove::utc_stamp(unix_now()),
    )
    .map_err(|refusal| {
        VerbError::Refused(PlanError {
            refusals: vec![refusal],
        })
    })?;
    let outcomes = remove::apply_removal(&actions, root);
    let stopped = outcomes
        .iter()
        .any(|o| o.status == crate::apply::Status::Skipped);
    let exit = if stopped { Exit::Failed } else { Exit::Ok };
    Ok((Removed { actions, outcomes }, exit))
}

/// `verify`: the serving proof; `Exit::Failed` when a surface is not provably served.
pub fn verify_verb(decl: &Declaration, root: &Path) -> (Vec<SurfaceProof>, Exit) {
    let proofs = verify::verify(&Layout::new(decl), root);
    let exit = if proofs.iter().any(|p| p.problem.is_some()) {
        Exit::Failed
    } else {
        Exit::Ok
    };
    (proofs, exit)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
