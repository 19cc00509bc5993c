//! The verbs' shared pipeline: read the ledger, allocate ordinals, render, observe the host,
//! plan. Each verb then prints, executes or only reports the plan.

use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_layout::declaration::Site;
use atelier_layout::{Declaration, Layout, SiteOrdinal};
use serde::Serialize;

use crate::apply::{self, ActionOutcome, Report};
use crate::artifact::Artifact;
use crate::check::{self, DriftReport};
use crate::host::{self, HostError, HostState};
use crate::identities::{self, Allocation};
use crate::owed;
use crate::plan::{self, Action, Holdback, PlanError, PlanInput, Refusal};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// Done, or nothing to do.
    Ok = 0,
    /// `check` found drift.
    Drift = 1,
    /// The command line was wrong.
    Usage = 2,
    /// The declaration or the host state forbids acting (nothing was written), an operator
    /// file is still awaited, or a daemon's restart waits for live runs.
    Refused = 3,
    /// Observation or execution failed.
    Failed = 4,
}

// === impl Exit ===

impl Exit {
    /// Every exit code, in numeric order.
    pub const ALL: [Exit; 5] = [
        Exit::Ok,
        Exit::Drift,
        Exit::Usage,
        Exit::Refused,
        Exit::Failed,
    ];

    /// The numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Its name, as `--json` prints it and `--help` lists it.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Ok => "ok",
            Exit::Drift => "drift",
            Exit::Usage => "usage",
            Exit::Refused => "refused",
            Exit::Failed => "failed",
        }
    }

    /// What it means, in a few words for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "done, or nothing to do",
            Exit::Drift => "check found drift",
            Exit::Usage => "the command line was wrong; nothing was read or written",
            Exit::Refused => {
                "the declaration or host forbids acting, an operator file is awaited, or a \
                 restart waits for live runs"
            }
            Exit::Failed => "observing or acting failed, or a surface is not provably served",
        }
    }
}

/// `--json` names an exit as [`Exit::name`] does.
impl Serialize for Exit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Why a verb stopped before acting.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// Refused with named reasons; nothing was written.
    #[error(transparent)]
    Refused(#[from] PlanError),
    /// The host's account files could not be read.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A rendered artifact could not be written below the review folder.
    #[error("{}: {source}", .path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The verb's own output could not be written.
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
}

// === impl VerbError ===

impl VerbError {
    /// The exit code it maps to.
    pub fn exit(&self) -> Exit {
        match self {
            VerbError::Refused(_) => Exit::Refused,
            VerbError::Host(_) | VerbError::Write { .. } | VerbError::Output(_) => Exit::Failed,
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
    let accounts = host::read_accounts(root)?;
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
    let live_runs = host::live_runs(&plan::run_stems(&layout, &sites));
    let services = host::service_states(&plan::daemon_units(&layout, &sites));
    // Without systemd as PID 1 nothing of the instance runs, and every query fails.
    let booted = host::systemd_booted();
    let host = HostState {
        accounts,
        entries,
        systemd_version,
        web_server_present: host::web_server_present(root, decl.web.server),
        units: host::unit_states(&plan::socket_units(&layout, &sites)).unwrap_or_default(),
        services_unknown: services.is_none() && booted,
        services: services.unwrap_or_default(),
        live_runs_unknown: live_runs.is_none() && booted,
        live_runs: live_runs.unwrap_or_default(),
        owed: host::read_owed(root, layout.instance()),
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
    /// What the plan left unmet, the most pressing first.
    #[serde(skip)]
    pub held: Option<Holdback>,
}

/// What `apply` tells as it goes: the plan once it is made, then each action's outcome as it
/// completes.
pub trait Progress {
    /// The plan, before anything runs.
    fn planned(&mut self, actions: &[Action]);
    /// One action's outcome, as soon as it is known.
    fn completed(&mut self, outcome: &ActionOutcome);
    /// How often to be told about an action that makes the operator wait, if at all.
    fn pace(&self) -> Option<Duration> {
        None
    }
    /// An action that makes the operator wait has been running for `elapsed`.
    fn waiting(&mut self, _action: &Action, _elapsed: Duration) {}
}

/// Hands the executor's news to a [`Progress`].
pub struct Watching<'p>(pub &'p mut dyn Progress);

impl apply::Watch for Watching<'_> {
    fn completed(&mut self, outcome: &ActionOutcome) {
        self.0.completed(outcome);
    }

    fn pace(&self) -> Option<Duration> {
        self.0.pace()
    }

    fn waiting(&mut self, action: &Action, elapsed: Duration) {
        self.0.waiting(action, elapsed);
    }
}

/// Tells nothing (the `--json` report is printed whole at the end).
impl Progress for () {
    fn planned(&mut self, _: &[Action]) {}
    fn completed(&mut self, _: &ActionOutcome) {}
}

/// `apply`: plans and executes, telling `progress` as it goes. A plan that changes nothing
/// executes nothing.
pub fn apply_verb(
    decl: &Declaration,
    declaration_bytes: Option<&[u8]>,
    root: &Path,
    render: Renderer<'_>,
    progress: &mut dyn Progress,
) -> Result<(Applied, Exit), VerbError> {
    let actions = plan_verb(decl, declaration_bytes, root, render)?;
    progress.planned(&actions);
    let report = if actions.iter().any(Action::changes_host) {
        let inst = Layout::new(decl).instance();
        owed::apply_owing(&actions, root, inst, &mut Watching(progress))
            .map_err(|e| marker_unwritable(inst, e))?
    } else {
        Report::default()
    };
    let held = actions.iter().filter_map(Action::holdback).min();
    let exit = if report.failed() {
        Exit::Failed
    } else if held.is_some() {
        Exit::Refused
    } else {
        Exit::Ok
    };
    Ok((
        Applied {
            actions,
            report,
            held,
        },
        exit,
    ))
}

/// `render DIR`: writes every artifact below `dir` at its host path, for review.
pub fn render_verb(
    decl: &Declaration,
    root: &Path,
    dir: &Path,
    render: Renderer<'_>,
) -> Result<Vec<PathBuf>, VerbError> {
    let prepared = prepare(decl, root, render)?;
    // Without a version nothing was rendered: an empty folder is no review.
    if prepared.host.systemd_version.is_none() {
        return Err(VerbError::Refused(PlanError {
            refusals: vec![plan::systemd_unknown()],
        }));
    }
    let mut written = Vec::new();
    for artifact in &prepared.artifacts {
        let path = host::under_root(dir, &artifact.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| VerbError::Write {
                path: parent.to_owned(),
                source,
            })?;
        }
        std::fs::write(&path, &artifact.bytes).map_err(|source| VerbError::Write {
            path: path.clone(),
            source,
        })?;
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
/// every identity. Refused, with nothing touched, while production may serve a site, unless
/// `purge_published`.
pub fn remove_verb(
    decl: &Declaration,
    root: &Path,
    render: Renderer<'_>,
    purge_published: bool,
) -> Result<(Removed, Exit), VerbError> {
    let actions = removal_plan_verb(decl, root, render, purge_published)?;
    let inst = Layout::new(decl).instance();
    remove::owed_by(&actions)
        .record(root, inst)
        .map_err(|e| marker_unwritable(inst, e))?;
    let outcomes = remove::apply_removal(&actions, root);
    // A tolerated failure let the removal go on, but the instance is not fully removed (a
    // unit still enabled, an identity not locked): the exit says so.
    let incomplete = outcomes.iter().any(|o| {
        matches!(
            o.status,
            crate::apply::Status::Failed | crate::apply::Status::Skipped
        )
    });
    let exit = if incomplete {
        // What it owed stays owed: the next run takes it, whatever is left to unlink.
        Exit::Failed
    } else {
        // Nothing is owed to an instance that is gone.
        owed::Owed::default()
            .record(root, inst)
            .map_err(|e| marker_unwritable(inst, e))?;
        Exit::Ok
    };
    Ok((Removed { actions, outcomes }, exit))
}

/// Why the marker of what an apply owes could not be written.
fn marker_unwritable(inst: &atelier_layout::InstanceName, e: atelier_fs::FsError) -> VerbError {
    VerbError::Write {
        path: atelier_layout::paths::provision_owed_path(inst),
        source: std::io::Error::other(e),
    }
}

/// `remove --dry-run`, and the first half of `remove`: the steps of the removal, in order,
/// with nothing changed; refused as `remove` is while production may serve a site, unless
/// `purge_published`.
pub fn removal_plan_verb(
    decl: &Declaration,
    root: &Path,
    render: Renderer<'_>,
    purge_published: bool,
) -> Result<Vec<RemoveAction>, VerbError> {
    let layout = Layout::new(decl);
    if !purge_published {
        let refusals = remove::published_refusals(&verify::verify(&layout, root));
        if !refusals.is_empty() {
            return Err(VerbError::Refused(PlanError { refusals }));
        }
    }
    let prepared = prepare(decl, root, render)?;
    remove::removal_plan(
        &layout,
        &prepared.artifacts,
        &prepared.allocation.removed,
        &prepared.host,
        &remove::utc_stamp(unix_now()),
    )
    .map_err(|refusal| {
        VerbError::Refused(PlanError {
            refusals: vec![refusal],
        })
    })
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
