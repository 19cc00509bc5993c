//! The plan: a pure function from the declaration, its rendered artifacts and the observed host
//! to the ordered list of actions that makes the host match, or the named reasons it must not
//! be touched. Nothing here reads or writes the host.
//!
//! Phases run in a fixed order: identity → tree → secret → artifact → service → web → retire,
//! so users exist before anything is given to them, a unit is written before the reload that
//! loads it, the web server's config is tested before any reload, and identities are locked
//! last (a failure earlier leaves the instance running).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use atelier_layout::declaration::{Declaration, Site};
use atelier_layout::paths::{
    door_hides, in_door_system_view, EntryKind, Layout, ModeEntry, Role, Surface,
    CHATD_SERVICE_TOKEN, DOOR_HIDDEN_SYSTEM_DIRS, DOOR_ROOT_LINKS, DOOR_SYSTEM_DIRS,
    INSTANCE_MARKER_FILE, RELEASES_DIR, SERVICE_TOKEN,
};
use atelier_layout::{names, services};
use atelier_layout::{Door, SiteOrdinal};
use serde::{Serialize, Serializer};

use crate::artifact::{classify, parse_stamp, Artifact, ArtifactKind, Drift};
use crate::host::{self, HostState, Observed, ObservedKind};
use crate::identities::{self, Allocation, IdentityError, LedgerIdentity, NOLOGIN};

mod restarts;

pub use restarts::{daemon_inputs, daemon_units, run_stems};

/// The systemd release the rendered units need at least.
pub use atelier_layout::paths::SYSTEMD_FLOOR as MIN_SYSTEMD;

/// How many random bytes a minted credential gets.
pub const MINTED_BYTES: usize = 32;

/// A step of the plan, in execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Groups, users and memberships.
    Identity,
    /// Directories, markers and the audit log.
    Tree,
    /// The served links of each webspace.
    Link,
    /// Credential files.
    Secret,
    /// Rendered files.
    Artifact,
    /// systemd: reload, tmpfiles.
    Service,
    /// Enabling links, config test, reload.
    Web,
    /// Locking removed sites' identities.
    Retire,
}

impl Phase {
    /// The phase as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Identity => "identity",
            Phase::Tree => "tree",
            Phase::Link => "link",
            Phase::Secret => "secret",
            Phase::Artifact => "artifact",
            Phase::Service => "service",
            Phase::Web => "web",
            Phase::Retire => "retire",
        }
    }
}

/// What an account command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountStep {
    /// `groupadd`.
    AddGroup,
    /// `useradd`.
    AddUser,
    /// `gpasswd -a`.
    AddMember,
    /// `usermod --lock --expiredate 1`: retire, never delete.
    Lock,
}

/// What a directory action changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DirChange {
    /// It does not exist.
    Create,
    /// Its owner or group is wrong.
    Owner,
    /// Its mode is wrong.
    Mode,
}

/// What a file action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Write a file that does not exist.
    Create,
    /// Replace a file whose bytes differ.
    Rewrite,
    /// Only fix owner, group or mode.
    Metadata,
    /// An operator-supplied file is missing; nothing is written.
    Awaiting,
}

/// The class of an awaited file that is a letsencrypt certificate: its site's vhost is written
/// in its waiting form (the ACME challenge only) until certbot puts the file in place.
pub const AWAITING_CERTIFICATE: &str = "awaiting_certificate";

/// Where a file's bytes come from. No variant ever carries a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// These bytes.
    Literal(Vec<u8>),
    /// `n` fresh random bytes, base64url, a newline: a minted credential.
    Random(usize),
    /// Only the operator can supply it.
    Operator,
    /// Whatever is there (a metadata-only action).
    Existing,
    /// A preproduction password file: each (login, password file) hashed with bcrypt at
    /// apply time; the passwords are read only then.
    Htpasswd(Vec<(String, PathBuf)>),
    /// The web server's include that shows chatd the service token held in this credential
    /// file, read only at apply time.
    ChatProxyAuth(PathBuf),
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Content::Literal(_) => "literal",
            Content::Random(_) => "random",
            Content::Operator => "operator",
            Content::Existing => "existing",
            Content::Htpasswd(_) => "htpasswd",
            Content::ChatProxyAuth(_) => "chat_proxy_auth",
        })
    }
}

/// A command step outside the account and file actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStep {
    /// `systemctl disable --now` a removed site's sockets, or a withdrawn chat's.
    DisableSockets,
    /// `systemctl stop` a removed site's runs, or a withdrawn chat's services.
    StopRuns,
    /// `systemctl daemon-reload`, because a unit file changed.
    DaemonReload,
    /// `systemd-tmpfiles --create <file>`.
    TmpfilesCreate,
    /// `systemctl enable --now` sockets not yet enabled.
    EnableSockets,
    /// `systemctl start` enabled sockets that are not listening.
    StartSockets,
    /// `systemctl restart` listening sockets whose unit file changed.
    RestartSockets,
    /// `systemctl try-restart` running daemons whose inputs changed since they started.
    RestartServices,
    /// The web server's configuration test.
    WebConfigtest,
    /// The web server's reload, only after a passing test.
    WebReload,
}

/// One planned change to the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// An account command.
    Account {
        /// What it does.
        step: AccountStep,
        /// The user or group it is about.
        name: String,
        /// The command.
        argv: Vec<String>,
    },
    /// A directory to create or reconcile.
    Dir {
        /// Host path.
        path: PathBuf,
        /// Owner name.
        owner: String,
        /// Group name.
        group: String,
        /// Mode.
        #[serde(serialize_with = "octal")]
        mode: u32,
        /// What is wrong with it now.
        changes: Vec<DirChange>,
    },
    /// A file to write or reconcile.
    File {
        /// The phase it belongs to.
        phase: Phase,
        /// Host path.
        path: PathBuf,
        /// What is done.
        disposition: Disposition,
        /// How the file on the host differs, for a rewrite.
        drift: Option<&'static str>,
        /// Where the bytes come from.
        content: Content,
        /// Owner name.
        owner: String,
        /// Group name.
        group: String,
        /// Mode.
        #[serde(serialize_with = "octal")]
        mode: u32,
    },
    /// A relative symlink to create (never replaced once it exists).
    Symlink {
        /// The phase it belongs to.
        phase: Phase,
        /// Host path of the link.
        path: PathBuf,
        /// Its target, as written.
        target: PathBuf,
        /// Owner name of the link itself.
        owner: String,
        /// Group name of the link itself.
        group: String,
    },
    /// A removed site's file, stamped for this instance, to unlink.
    Unlink {
        /// Host path.
        path: PathBuf,
    },
    /// A removed site's agent state, re-owned root:root 0700 and renamed into the retired dir.
    Archive {
        /// Host path.
        from: PathBuf,
        /// Where it goes.
        to: PathBuf,
    },
    /// A command.
    Exec {
        /// What it is for.
        step: ExecStep,
        /// The command.
        argv: Vec<String>,
    },
    /// A running daemon's restart, put off because runs it serves are live (or systemd could
    /// not say how it runs); nothing is done until an apply finds them ended.
    DeferRestart {
        /// The daemon's service unit.
        unit: String,
        /// What changed since it started.
        because: String,
        /// The live runs a restart would cut off (none when systemd could not say how the
        /// daemon runs).
        live: Vec<String>,
        /// Door units left as they are until this daemon restarts (sited's only): the running
        /// sited holds every run's door to the units it was built for.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        held: Vec<PathBuf>,
    },
}

fn octal<S: Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}

// === impl Action ===

impl Action {
    /// The phase the action runs in.
    pub fn phase(&self) -> Phase {
        match self {
            Action::Account {
                step: AccountStep::Lock,
                ..
            } => Phase::Retire,
            Action::Account { .. } => Phase::Identity,
            Action::Dir { .. } => Phase::Tree,
            Action::File { phase, .. } => *phase,
            Action::Symlink { phase, .. } => *phase,
            Action::Unlink { .. } => Phase::Artifact,
            Action::Archive { .. } => Phase::Retire,
            Action::Exec { step, .. } => match step {
                ExecStep::DisableSockets | ExecStep::StopRuns => Phase::Artifact,
                ExecStep::DaemonReload
                | ExecStep::TmpfilesCreate
                | ExecStep::EnableSockets
                | ExecStep::StartSockets
                | ExecStep::RestartSockets
                | ExecStep::RestartServices => Phase::Service,
                ExecStep::WebConfigtest | ExecStep::WebReload => Phase::Web,
            },
            Action::DeferRestart { .. } => Phase::Service,
        }
    }

    /// Whether executing it changes the host (an awaited operator file and a deferred restart
    /// do not).
    ///
    /// An awaited certificate counts as a change, so `apply` reports it and still succeeds: the
    /// host is as the declaration can make it before certbot runs (and certbot needs the ACME
    /// challenge it serves), whereas a missing operator file leaves the instance unable to run.
    pub fn changes_host(&self) -> bool {
        !matches!(
            self,
            Action::File {
                disposition: Disposition::Awaiting,
                ..
            } | Action::DeferRestart { .. }
        )
    }

    /// What this action leaves unmet once the plan ran, if anything. An awaited certificate
    /// leaves nothing: its site is served for the ACME challenge, the certificate comes from
    /// outside, and `check` names it.
    pub fn holdback(&self) -> Option<Holdback> {
        match self {
            Action::File {
                disposition: Disposition::Awaiting,
                drift: Some(AWAITING_CERTIFICATE),
                ..
            } => None,
            Action::File {
                disposition: Disposition::Awaiting,
                ..
            } => Some(Holdback::OperatorFile),
            Action::DeferRestart { .. } => Some(Holdback::DeferredRestart),
            _ => None,
        }
    }
}

/// The refusal of a host whose systemd version could not be read: nothing can be rendered
/// against it.
pub fn systemd_unknown() -> Refusal {
    Refusal {
        subject: "systemd".into(),
        reason: "systemd_unknown",
        message: "could not read PID 1's version from systemctl --version".into(),
    }
}

/// What keeps a plan that ran from meeting the declaration; `apply` exits 3 naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holdback {
    /// An operator file is still missing.
    OperatorFile,
    /// A running daemon's restart waits for the runs it serves.
    DeferredRestart,
}

impl fmt::Display for Action {
    /// One line, never a file's content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<9}", self.phase().as_str())?;
        match self {
            Action::Account { argv, .. } | Action::Exec { argv, .. } => {
                write!(f, "run {}", argv.join(" "))
            }
            Action::Dir {
                path,
                owner,
                group,
                mode,
                changes,
            } => {
                let what: Vec<&str> = changes
                    .iter()
                    .map(|c| match c {
                        DirChange::Create => "create",
                        DirChange::Owner => "owner",
                        DirChange::Mode => "mode",
                    })
                    .collect();
                write!(
                    f,
                    "dir {} {owner}:{group} {mode:04o} ({})",
                    path.display(),
                    what.join(", ")
                )
            }
            Action::File {
                path,
                disposition,
                drift,
                owner,
                group,
                mode,
                ..
            } => {
                if *disposition == Disposition::Awaiting && *drift == Some(AWAITING_CERTIFICATE) {
                    return write!(
                        f,
                        "awaiting certificate {} (its site serves only the ACME challenge until \
                         certbot puts it there)",
                        path.display()
                    );
                }
                let verb = match disposition {
                    Disposition::Create => "create",
                    Disposition::Rewrite => "rewrite",
                    Disposition::Metadata => "metadata",
                    Disposition::Awaiting => "awaiting operator file",
                };
                write!(f, "{verb} {} {owner}:{group} {mode:04o}", path.display())?;
                match drift {
                    Some(class) => write!(f, " (drift: {class})"),
                    None => Ok(()),
                }
            }
            Action::Unlink { path } => write!(f, "unlink {}", path.display()),
            Action::Archive { from, to } => {
                write!(f, "archive {} -> {}", from.display(), to.display())
            }
            Action::DeferRestart {
                unit,
                because,
                live,
                held,
            } => {
                write!(f, "restart {unit} deferred: {because}")?;
                if !live.is_empty() {
                    write!(f, "; live runs it serves: {}", live.join(", "))?;
                }
                if !held.is_empty() {
                    let held: Vec<String> = held.iter().map(|p| p.display().to_string()).collect();
                    write!(
                        f,
                        "; door units held back until it restarts: {}",
                        held.join(", ")
                    )?;
                }
                if live.is_empty() {
                    write!(f, "; apply again once systemd answers")
                } else {
                    write!(f, "; apply again once they end")
                }
            }
            Action::Symlink {
                path,
                target,
                owner,
                group,
                ..
            } => write!(
                f,
                "link {} -> {} {owner}:{group}",
                path.display(),
                target.display()
            ),
        }
    }
}

/// A named reason the plan refuses to touch the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The path or name it is about.
    pub subject: String,
    /// A stable reason code.
    pub reason: &'static str,
    /// A sentence for the operator.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.subject, self.reason, self.message)
    }
}

/// Why no plan was made; every problem is collected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused: {}", .refusals.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; "))]
pub struct PlanError {
    /// The problems.
    pub refusals: Vec<Refusal>,
}

impl From<IdentityError> for PlanError {
    fn from(e: IdentityError) -> Self {
        PlanError {
            refusals: vec![Refusal {
                subject: "ledger".into(),
                reason: "identity_ledger",
                message: e.to_string(),
            }],
        }
    }
}

/// Everything the planner looks at.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The instance's layout.
    pub layout: &'a Layout<'a>,
    /// The declared sites' ordinals and the identities to retire.
    pub allocation: &'a Allocation,
    /// What the renderer produced.
    pub artifacts: &'a [Artifact],
    /// The declaration's own bytes, copied to the config dir.
    pub declaration_bytes: Option<&'a [u8]>,
    /// The observed host.
    pub host: &'a HostState,
    /// This run's UTC instant, `YYYYMMDDTHHMMSSZ`, naming any archive it makes.
    pub now: &'a str,
}

// === impl PlanInput ===

impl PlanInput<'_> {
    /// The declared sites with their ordinals, in declaration order.
    pub fn sites(&self) -> Vec<(SiteOrdinal, &Site)> {
        sites_of(self.layout, self.allocation)
    }
}

/// The declared sites with their ordinals.
pub fn sites_of<'d>(layout: &Layout<'d>, allocation: &Allocation) -> Vec<(SiteOrdinal, &'d Site)> {
    let decl = layout.declaration();
    allocation
        .sites
        .iter()
        .filter_map(|&(k, i)| decl.sites.get(i).map(|site| (k, site)))
        .collect()
}

/// The units of the instance that must be enabled and active: sited's socket, per site its
/// doors' and its gate's sockets, with a chat block chatd's socket and its purge timer, and
/// every daemon's metrics socket.
pub fn socket_units(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Vec<String> {
    let inst = layout.instance();
    let mut units = vec![names::sited_socket_unit(inst)];
    for &(k, _) in sites {
        for door in Door::ALL {
            units.push(names::door_socket_unit(inst, k, door));
        }
        units.push(names::gate_socket_unit(inst, k));
        units.push(names::gate_decisions_socket_unit(inst, k));
    }
    if layout.declaration().chat.is_some() {
        units.push(names::chatd_socket_unit(inst));
        units.push(names::chatd_purge_timer_unit(inst));
    }
    units.extend(layout.metrics_sockets(sites).into_iter().map(|s| s.unit));
    units
}

/// Roles made at run time (by `systemd-tmpfiles` or PID 1), never by the plan's tree phase.
fn made_at_run_time(role: Role) -> bool {
    matches!(
        role,
        Role::RuntimeDir
            | Role::EgressRoot
            | Role::EgressSiteDir
            | Role::SitedSocket
            | Role::DoorSocket
            | Role::GateSocket
            | Role::GateDecisionsSocket
            | Role::ChatSocket
            | Role::MetricsDir
            | Role::MetricsSocket
    )
}

/// Roots that carry the instance marker.
fn is_marked_root(role: Role) -> bool {
    matches!(role, Role::SitesRoot | Role::AuditRoot | Role::Webspace)
}

/// The marker inside a marked root.
pub fn marker_path(root: &Path) -> PathBuf {
    root.join(INSTANCE_MARKER_FILE)
}

/// Every path the observer must look at, and whether to read its content (artifacts, markers
/// and the declaration; never a credential).
pub fn observed_paths(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    artifacts: &[Artifact],
    removed: &[LedgerIdentity],
) -> Vec<(PathBuf, bool)> {
    // A path may come from both the matrix and the artifacts: read it if either asks.
    let mut out: std::collections::BTreeMap<PathBuf, bool> = std::collections::BTreeMap::new();
    let mut add = |path: PathBuf, read: bool| *out.entry(path).or_default() |= read;
    for entry in layout.mode_matrix(sites) {
        let read = entry.role == Role::DeclarationFile;
        if is_marked_root(entry.role) {
            add(marker_path(&entry.path), true);
        }
        add(entry.path, read);
    }
    for (_, site) in sites {
        for surface in Surface::ALL {
            add(layout.served_link(site, surface), false);
        }
    }
    for (name, _) in DOOR_ROOT_LINKS {
        add(layout.door_root().join(name), false);
    }
    // Where each agent CLI, and each of Atelier's binaries a door runs, really is: a door must
    // show that place too.
    for bin in layout.declaration().agent.bins.values() {
        add(bin.clone(), false);
    }
    for name in DOOR_BINARIES {
        add(layout.binary(name), false);
    }
    // Login names are read from the password file; passwords only at apply time. An
    // operator's own file (no user declared) is never the plan's to compare, so never read.
    let users = &layout.declaration().serving.preprod.auth.users;
    add(layout.htpasswd_path(), !users.is_empty());
    for user in &layout.declaration().serving.preprod.auth.users {
        add(user.password_file.clone(), false);
    }
    // A credential outside the credentials dir: whether it is there and what it is, no more.
    for path in layout.outside_credentials() {
        add(path, false);
    }
    for artifact in artifacts {
        add(artifact.path.clone(), true);
        if let Some(link) = enabling_link(layout, artifact) {
            add(link.0, false);
        }
        // A letsencrypt certificate's files: only whether they exist, never a key's bytes.
        for path in artifact.stand_in.iter().flat_map(|s| &s.requires) {
            add(path.clone(), false);
        }
    }
    // A vhost the declaration no longer renders (preproduction turned off) is looked for too.
    for (_, site) in sites {
        for (vhost, link) in site_vhosts(layout, &site.slug) {
            add(vhost, true);
            if let Some(link) = link {
                add(link, false);
            }
        }
    }
    for id in removed {
        let paths = RetiredPaths::of(layout, id);
        for path in paths.units.into_iter().chain(paths.files) {
            add(path, true);
        }
        for (link, _) in paths.links {
            add(link, false);
        }
        add(layout.agent_site_dir(id.k), false);
    }
    // A chat block taken out: what it left is looked for.
    if layout.declaration().chat.is_none() {
        let chat = ChatPaths::of(layout);
        for unit in chat.listening.iter().chain(&chat.services) {
            add(layout.unit_path(unit), true);
        }
        add(chat.vhost, true);
        if let Some(link) = chat.link {
            add(link, false);
        }
        add(chat.include, false);
    }
    // When each daemon's inputs last changed (its binary among them: an upgraded package).
    for path in restarts::daemon_inputs(layout, sites) {
        add(path, false);
    }
    out.into_iter().collect()
}

/// The `sites-enabled` link of a vhost artifact and its target, when the web server uses them.
pub(crate) fn enabling_link(
    layout: &Layout<'_>,
    artifact: &Artifact,
) -> Option<(PathBuf, PathBuf)> {
    if !matches!(
        artifact.kind,
        ArtifactKind::NginxVhost | ArtifactKind::ApacheVhost
    ) {
        return None;
    }
    vhost_enabling_link(layout, &artifact.path)
}

/// The `sites-enabled` link of the vhost at `vhost` and its target, when the web server uses
/// them.
fn vhost_enabling_link(layout: &Layout<'_>, vhost: &Path) -> Option<(PathBuf, PathBuf)> {
    let enabled = layout.vhost_enabled_dir();
    let available = layout.vhost_dir();
    if enabled == available {
        return None;
    }
    let name = vhost.file_name()?;
    let target = match (enabled.parent(), available.parent(), available.file_name()) {
        (Some(a), Some(b), Some(dir)) if a == b => Path::new("..").join(dir).join(name),
        _ => vhost.to_path_buf(),
    };
    Some((enabled.join(name), target))
}

/// Where a removed site's files are: its units, gate plans and vhosts, and enabling links.
struct RetiredPaths {
    units: Vec<PathBuf>,
    /// Gate plans and vhosts.
    files: Vec<PathBuf>,
    vhosts: Vec<PathBuf>,
    /// (enabling link, the vhost it should point at).
    links: Vec<(PathBuf, PathBuf)>,
}

impl RetiredPaths {
    fn of(layout: &Layout<'_>, id: &LedgerIdentity) -> RetiredPaths {
        let inst = layout.instance();
        let k = id.k;
        let mut units = Vec::new();
        for door in Door::ALL {
            units.extend(
                names::door_unit_files(inst, k, door)
                    .iter()
                    .map(|unit| layout.unit_path(unit)),
            );
        }
        units.push(layout.unit_path(&names::gate_socket_unit(inst, k)));
        units.push(layout.unit_path(&names::gate_decisions_socket_unit(inst, k)));
        units.push(layout.unit_path(&layout.gate_metrics_socket(k).unit));
        units.push(layout.unit_path(&names::gate_service_unit(inst, k)));
        let mut files: Vec<PathBuf> = Door::ALL
            .into_iter()
            .filter_map(|door| layout.gate_plan_path(k, door))
            .collect();
        let mut vhosts = Vec::new();
        let mut links = Vec::new();
        if let Some(slug) = &id.slug {
            for (vhost, link) in site_vhosts(layout, slug) {
                links.extend(link.map(|link| (link, vhost.clone())));
                vhosts.push(vhost);
            }
        }
        files.extend(vhosts.iter().cloned());
        RetiredPaths {
            units,
            files,
            vhosts,
            links,
        }
    }
}

/// Whether `seen` is a symlink at `link` pointing at `target` (absolutely or relatively).
fn links_to(seen: Option<&Observed>, link: &Path, target: &Path) -> bool {
    seen.is_some_and(|s| {
        s.kind == ObservedKind::Symlink
            && s.link_target.as_ref().is_some_and(|t| {
                t == target
                    || link.parent().map(|d| normalize(&d.join(t))).as_deref() == Some(target)
            })
    })
}

/// Whether `seen` is a file stamped for instance `inst`.
fn stamped_ours(seen: Option<&Observed>, inst: &str) -> bool {
    seen.is_some_and(|s| {
        s.kind == ObservedKind::File
            && s.content
                .as_deref()
                .and_then(parse_stamp)
                .is_some_and(|stamp| stamp.instance == inst)
    })
}

/// What taking a site that is no longer declared off the host takes, as the host was
/// observed: what `apply` does for a site taken out of the declaration, and `remove` for one
/// taken out but never applied (its gate would go on running with the instance's keys).
pub(crate) struct RetiredSteps {
    /// Its socket units that have a file, to disable and stop.
    pub sockets: Vec<String>,
    /// What `systemctl stop` is given when any of its units has a file: every run of its
    /// doors' templates, by whole stem (a prefix glob could match another instance's units),
    /// and its gate.
    pub stop: Vec<String>,
    /// The enabling links of its vhosts that point at them.
    pub links: Vec<PathBuf>,
    /// Its units, gate plans and vhosts stamped for this instance.
    pub files: Vec<PathBuf>,
    /// Whether a vhost or its link goes: the web server is to be tested and reloaded.
    pub vhost_gone: bool,
}

impl RetiredSteps {
    /// The steps of `id`'s site over the observed `entries`. A removed site's vhost file may be
    /// one a declared site renders now (removed `shop`'s preproduction vhost is `shop-pre`'s
    /// production one): one of `artifacts` stays, with its link.
    pub(crate) fn of(
        layout: &Layout<'_>,
        id: &LedgerIdentity,
        entries: &BTreeMap<PathBuf, Observed>,
        artifacts: &[Artifact],
    ) -> RetiredSteps {
        let inst = layout.instance();
        let paths = RetiredPaths::of(layout, id);
        let present: Vec<&PathBuf> = paths
            .units
            .iter()
            .filter(|p| entries.contains_key(*p))
            .collect();
        let sockets = present
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "socket"))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        let mut stop = Vec::new();
        if !present.is_empty() {
            for door in Door::ALL {
                stop.push(format!(
                    "{}*.service",
                    names::door_service_instance_stem(inst, id.k, door)
                ));
            }
            stop.push(names::gate_service_unit(inst, id.k));
        }
        let rendered = |path: &PathBuf| artifacts.iter().any(|a| a.path == *path);
        let links: Vec<PathBuf> = paths
            .links
            .iter()
            .filter(|(link, vhost)| !rendered(vhost) && links_to(entries.get(link), link, vhost))
            .map(|(link, _)| link.clone())
            .collect();
        let files: Vec<PathBuf> = paths
            .units
            .iter()
            .chain(&paths.files)
            .filter(|path| !rendered(path) && stamped_ours(entries.get(*path), inst.as_str()))
            .cloned()
            .collect();
        let vhost_gone = !links.is_empty() || files.iter().any(|f| paths.vhosts.contains(f));
        RetiredSteps {
            sockets,
            stop,
            links,
            files,
            vhost_gone,
        }
    }
}

/// Where a chat block's files are, whether or not the declaration has one.
struct ChatPaths {
    /// The units that listen or wait: chatd's socket, its metrics socket, the purge's timer.
    listening: Vec<String>,
    /// The services they start: chatd's and the purge's.
    services: Vec<String>,
    /// The CMS's vhost.
    vhost: PathBuf,
    /// Its enabling link, when the web server keeps one.
    link: Option<PathBuf>,
    /// The web server's include carrying chatd's token.
    include: PathBuf,
}

impl ChatPaths {
    fn of(layout: &Layout<'_>) -> ChatPaths {
        let inst = layout.instance();
        let vhost = layout.chat_vhost_path();
        ChatPaths {
            listening: vec![
                names::chatd_socket_unit(inst),
                names::chatd_metrics_socket_unit(inst),
                names::chatd_purge_timer_unit(inst),
            ],
            services: vec![
                names::chatd_service_unit(inst),
                names::chatd_purge_service_unit(inst),
            ],
            link: vhost_enabling_link(layout, &vhost).map(|(link, _)| link),
            vhost,
            include: layout.chat_proxy_auth_path(),
        }
    }
}

/// Where a site's production and preproduction vhosts are, each with its enabling link when
/// the web server keeps one, whether or not the declaration renders them.
pub(crate) fn site_vhosts(layout: &Layout<'_>, slug: &str) -> [(PathBuf, Option<PathBuf>); 2] {
    [Surface::Prod, Surface::Preprod].map(|surface| {
        let vhost = layout.site_vhost_path(slug, surface);
        let link = vhost_enabling_link(layout, &vhost).map(|(link, _)| link);
        (vhost, link)
    })
}

/// Lexical normalization of a link target joined to its directory.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A whole file the plan wants on the host.
struct WantedFile {
    path: PathBuf,
    bytes: Vec<u8>,
    meta: (String, String, u32),
    /// Ours and stamped (an artifact), so drift can be classed.
    stamped: bool,
}

struct Planner<'a> {
    input: PlanInput<'a>,
    /// A removed site's vhost is planned to be unlinked: the web server must reload.
    vhost_unlinked: bool,
    /// Changed door units not written while sited's restart is deferred.
    held_door_units: Vec<PathBuf>,
    actions: Vec<Action>,
    refusals: Vec<Refusal>,
}

/// Plans the changes that make the host match the declaration, in phase order; an empty plan
/// means the host already matches.
pub fn plan(input: PlanInput<'_>) -> Result<Vec<Action>, PlanError> {
    let mut p = Planner {
        input,
        vhost_unlinked: false,
        held_door_units: Vec::new(),
        actions: Vec::new(),
        refusals: Vec::new(),
    };
    p.preconditions();
    p.identities();
    let matrix = input.layout.mode_matrix(&input.sites());
    p.tree(&matrix);
    p.served_links();
    p.door_root_links();
    p.secrets(&matrix);
    p.htpasswd(&matrix);
    p.chat_proxy_auth(&matrix);
    let mut written = p.artifacts(&matrix);
    // A minted or rewritten secret is an input of what reads it like any written file: the
    // daemons restart on it, the web server reloads on its include.
    written.extend(p.secret_writes());
    p.hold_back_door_units(&mut written);
    p.service(&written);
    p.sockets(&written);
    p.restarts(&written);
    p.web(&written);
    p.certificates();
    p.retire();
    if p.refusals.is_empty() {
        Ok(p.actions)
    } else {
        Err(PlanError {
            refusals: p.refusals,
        })
    }
}

/// Atelier's binaries a door runs: every door's shim, the build door's atelier-build.
const DOOR_BINARIES: [&str; 2] = [services::SHIM_BINARY, services::BUILD_BINARY];

/// Whether a door shows `path`: in its system folders, and below none of the folders every
/// door masks (the instance's configuration among them).
fn door_shows(layout: &Layout<'_>, path: &Path) -> bool {
    in_door_system_view(path) && !door_hides(path) && !path.starts_with(layout.config_dir())
}

/// The system folders a door shows, as a refusal names them.
fn door_system_dirs() -> String {
    let dirs: Vec<&str> = DOOR_SYSTEM_DIRS.iter().map(|(dir, _)| *dir).collect();
    dirs.join(", ")
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

impl Planner<'_> {
    fn refuse(&mut self, subject: impl fmt::Display, reason: &'static str, message: String) {
        self.refusals.push(Refusal {
            subject: subject.to_string(),
            reason,
            message,
        });
    }

    fn observed(&self, path: &Path) -> Option<&Observed> {
        self.input.host.entries.get(path)
    }

    /// Where `path`, or a link it takes, is outside every door's view, if it is. A link
    /// matters as much as the path (Claude Code's installer links into a home folder).
    fn outside_door_view(&self, path: &Path) -> Option<PathBuf> {
        let layout = self.input.layout;
        let resolved = self.observed(path).and_then(|seen| seen.resolved.clone());
        [Some(path.to_path_buf()), resolved]
            .into_iter()
            .flatten()
            .find(|p| !door_shows(layout, p))
    }

    fn owned_as(&self, seen: &Observed, owner: &str, group: &str) -> bool {
        let accounts = &self.input.host.accounts;
        accounts
            .user_by_uid(seen.uid)
            .is_some_and(|u| u.name == owner)
            && accounts
                .group_by_gid(seen.gid)
                .is_some_and(|g| g.name == group)
    }

    /// Refuses a site whose webspace would move (its domain, or the webspace base, changed
    /// while no `webspace` is declared for it) to a place that does not exist yet: the web
    /// server would serve the new, empty webspace while every release stayed in the old one.
    /// The previous declaration is the copy the last apply kept.
    fn moved_webspaces(&mut self) {
        let layout = self.input.layout;
        let Some(previous) = self
            .observed(&layout.declaration_path())
            .and_then(|seen| seen.content.as_deref())
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| Declaration::parse(text).ok())
        else {
            return;
        };
        let before = Layout::new(&previous);
        for site in &layout.declaration().sites {
            let Some(old) = previous.sites.iter().find(|old| old.slug == site.slug) else {
                continue;
            };
            let (from, to) = (before.webspace(old), layout.webspace(site));
            if from == to || self.observed(&to).is_some() {
                continue;
            }
            self.refuse(
                &site.slug,
                "webspace_moved",
                format!(
                    "its webspace would move from {} to {} (its domain or the webspace base \
                     changed), leaving every release in the old one: move the folder there \
                     first, or declare \"webspace\": \"{}\" for the site",
                    from.display(),
                    to.display(),
                    from.display()
                ),
            );
        }
    }

    fn preconditions(&mut self) {
        match self.input.host.systemd_version {
            Some(v) if v >= MIN_SYSTEMD => {}
            Some(v) => self.refuse(
                "systemd",
                "systemd_too_old",
                format!("PID 1 is systemd {v}; the rendered units need {MIN_SYSTEMD} or newer"),
            ),
            None => self.refusals.push(systemd_unknown()),
        }
        self.moved_webspaces();
        let layout = self.input.layout;
        let decl = layout.declaration();
        // A door shows the host's system folders and nothing else of it: an agent CLI must be
        // there to run, and the instance's own trees must not be, or every door would see them.
        for (driver, bin) in &decl.agent.bins {
            if let Some(outside) = self.outside_door_view(bin) {
                let via = if outside == *bin {
                    String::new()
                } else {
                    format!(" (it leads to {})", outside.display())
                };
                self.refuse(
                    bin.display(),
                    "agent_bin_outside_door_view",
                    format!(
                        "the {} binary{via} must be installed under {}: a door shows only those of the host",
                        driver.as_str(),
                        door_system_dirs()
                    ),
                );
            }
        }
        // Every door runs the shim from paths.bin_dir, and the build door atelier-build: the
        // folder is refused once, a binary whose link leads out by itself.
        let shim = layout.binary(services::SHIM_BINARY);
        if !door_shows(layout, &shim) {
            let bin_dir = shim.parent().unwrap_or(&shim);
            self.refuse(
                bin_dir.display(),
                "bin_dir_outside_door_view",
                format!(
                    "Atelier's binaries (paths.bin_dir) must be installed under {}, outside the \
                     folders every door masks: a door runs {} from there and shows only those \
                     of the host",
                    door_system_dirs(),
                    DOOR_BINARIES.join(" and ")
                ),
            );
        } else {
            for name in DOOR_BINARIES {
                let bin = layout.binary(name);
                if let Some(outside) = self.outside_door_view(&bin) {
                    self.refuse(
                        bin.display(),
                        "bin_dir_outside_door_view",
                        format!(
                            "it leads to {}, which no door shows: a door runs {name} from \
                             paths.bin_dir and shows only {} of the host",
                            outside.display(),
                            door_system_dirs()
                        ),
                    );
                }
            }
        }
        for (what, path) in [
            ("state dir", layout.state_dir()),
            ("sites root", layout.sites_root()),
            ("audit root", layout.audit_root()),
        ] {
            if in_door_system_view(&path) {
                self.refuse(
                    path.display(),
                    "instance_path_in_door_view",
                    format!(
                        "the {what} must not be under {}: every door shows those, read-only",
                        door_system_dirs()
                    ),
                );
            }
        }
        // What names every site must be where no door looks; a folder named twice is refused
        // once.
        let mut named = BTreeSet::new();
        for (what, path) in [
            ("vhost dir", layout.vhost_dir()),
            ("vhost enabled dir", layout.vhost_enabled_dir()),
            ("unit dir", layout.unit_dir()),
        ] {
            if in_door_system_view(&path) && !door_hides(&path) && named.insert(path.clone()) {
                self.refuse(
                    path.display(),
                    "site_files_in_door_view",
                    format!(
                        "the {what} names every site: it must be under {} (which every door \
                         masks) or outside {} (which every door shows)",
                        DOOR_HIDDEN_SYSTEM_DIRS.join(", "),
                        door_system_dirs()
                    ),
                );
            }
        }
        let accounts = &self.input.host.accounts;
        let monitoring = decl.monitoring.as_ref().map(|m| ("monitoring", &m.group));
        let groups = [("engine", &decl.engine.group), ("web", &decl.web.group)];
        for (what, group) in groups.into_iter().chain(monitoring) {
            if accounts.group(group).is_none() {
                self.refuse(
                    group,
                    "group_absent",
                    format!("the {what} group {group} does not exist; Atelier does not create it"),
                );
            }
        }
    }

    fn identities(&mut self) {
        let layout = self.input.layout;
        let accounts = &self.input.host.accounts;
        let svc = layout.service_user();
        let svc_group = layout.service_group();
        let inst = layout.instance();
        let mut acts = Vec::new();
        if accounts.group(&svc_group).is_none() {
            acts.push(Action::Account {
                step: AccountStep::AddGroup,
                name: svc_group.clone(),
                argv: argv(&["groupadd", "--system", &svc_group]),
            });
        }
        if accounts.user(&svc).is_none() {
            let comment = format!("Atelier instance {inst}");
            acts.push(Action::Account {
                step: AccountStep::AddUser,
                name: svc.clone(),
                argv: argv(&[
                    "useradd",
                    "--system",
                    "--gid",
                    &svc_group,
                    "--home-dir",
                    "/nonexistent",
                    "--no-create-home",
                    "--shell",
                    NOLOGIN,
                    "--comment",
                    &comment,
                    &svc,
                ]),
            });
        }
        for (k, site) in self.input.sites() {
            let id = names::site_identity(inst, k);
            let group = accounts.group(&id);
            if group.is_none() {
                acts.push(Action::Account {
                    step: AccountStep::AddGroup,
                    name: id.clone(),
                    argv: argv(&["groupadd", "--system", &id]),
                });
            }
            if accounts.user(&id).is_none() {
                let comment = identities::gecos(&site.slug);
                acts.push(Action::Account {
                    step: AccountStep::AddUser,
                    name: id.clone(),
                    argv: argv(&[
                        "useradd",
                        "--system",
                        "--gid",
                        &svc_group,
                        "--groups",
                        &id,
                        "--home-dir",
                        "/nonexistent",
                        "--no-create-home",
                        "--shell",
                        NOLOGIN,
                        "--comment",
                        &comment,
                        &id,
                    ]),
                });
            } else if !group.is_some_and(|g| g.members.contains(&id)) {
                acts.push(Action::Account {
                    step: AccountStep::AddMember,
                    name: id.clone(),
                    argv: argv(&["gpasswd", "-a", &id, &id]),
                });
            }
            if !group.is_some_and(|g| g.members.contains(&svc)) {
                acts.push(Action::Account {
                    step: AccountStep::AddMember,
                    name: id.clone(),
                    argv: argv(&["gpasswd", "-a", &svc, &id]),
                });
            }
        }
        self.actions.extend(acts);
    }

    fn tree(&mut self, matrix: &[ModeEntry]) {
        let inst = self.input.layout.instance().as_str().to_owned();
        for entry in matrix {
            if entry.kind != EntryKind::Directory || made_at_run_time(entry.role) {
                continue;
            }
            let seen = self.observed(&entry.path).cloned();
            let mut changes = Vec::new();
            match &seen {
                None => changes.push(DirChange::Create),
                Some(s) if s.kind != ObservedKind::Dir => {
                    self.refuse(
                        entry.path.display(),
                        "not_a_directory",
                        "something other than a directory stands where the instance needs one"
                            .into(),
                    );
                    continue;
                }
                Some(s) => {
                    if !self.owned_as(s, &entry.owner, &entry.group) {
                        changes.push(DirChange::Owner);
                    }
                    if s.mode != entry.mode {
                        changes.push(DirChange::Mode);
                    }
                }
            }
            if !changes.is_empty() {
                self.actions.push(Action::Dir {
                    path: entry.path.clone(),
                    owner: entry.owner.clone(),
                    group: entry.group.clone(),
                    mode: entry.mode,
                    changes,
                });
            }
            if is_marked_root(entry.role) {
                self.marker(&entry.path, seen.as_ref(), &inst);
            }
            if entry.role == Role::AuditRoot {
                if let Some(audit) = matrix.iter().find(|e| e.role == Role::AuditFile) {
                    self.audit_file(audit);
                }
            }
        }
    }

    /// Each webspace serves each surface through a link sited flips; the first one points at
    /// the empty store. An existing link is left whatever it points to (sited owns it).
    fn served_links(&mut self) {
        let layout = self.input.layout;
        let owner = layout.service_user();
        let group = layout.declaration().web.group.clone();
        let input = self.input;
        for (_, site) in input.sites() {
            for surface in Surface::ALL {
                let path = layout.served_link(site, surface);
                match self.observed(&path).map(|s| s.kind) {
                    None => self.actions.push(Action::Symlink {
                        phase: Phase::Link,
                        path,
                        target: Path::new(RELEASES_DIR).join(surface.dir_name()),
                        owner: owner.clone(),
                        group: group.clone(),
                    }),
                    Some(ObservedKind::Symlink) => {}
                    Some(_) => self.refuse(
                        path.display(),
                        "served_link_taken",
                        "something other than a symlink stands where a served link goes".into(),
                    ),
                }
            }
        }
    }

    /// The door root's links to the system folders (`/bin` to `usr/bin`, ...), as a merged-`/usr`
    /// host has them; a link already there to the same place is left alone.
    fn door_root_links(&mut self) {
        let root = self.input.layout.door_root();
        for (name, target) in DOOR_ROOT_LINKS {
            let path = root.join(name);
            match self.observed(&path) {
                None => self.actions.push(Action::Symlink {
                    phase: Phase::Link,
                    path,
                    target: PathBuf::from(target),
                    owner: "root".into(),
                    group: "root".into(),
                }),
                Some(s)
                    if s.kind == ObservedKind::Symlink
                        && s.link_target.as_deref() == Some(Path::new(target)) => {}
                Some(_) => self.refuse(
                    path.display(),
                    "door_root_link_taken",
                    format!("something other than a link to {target} stands there"),
                ),
            }
        }
    }

    /// The marker law: a root that exists, holds anything, and whose marker does not name this
    /// instance belongs to someone else.
    fn marker(&mut self, root: &Path, seen_root: Option<&Observed>, inst: &str) {
        let path = marker_path(root);
        let want = format!("{inst}\n").into_bytes();
        let marker = self.observed(&path).cloned();
        match marker {
            Some(m) if m.content.as_deref() == Some(&want[..]) => {
                if m.mode != 0o644 || !self.owned_as(&m, "root", "root") {
                    self.push_file(
                        Phase::Tree,
                        path,
                        Disposition::Metadata,
                        None,
                        Content::Existing,
                        ("root", "root", 0o644),
                    );
                }
            }
            Some(_) => self.refuse(
                root.display(),
                "foreign_root",
                format!("its {INSTANCE_MARKER_FILE} does not name instance {inst}"),
            ),
            None if seen_root.is_some_and(|r| r.empty == Some(false)) => self.refuse(
                root.display(),
                "unmarked_root",
                format!("it exists, is not empty and has no {INSTANCE_MARKER_FILE}"),
            ),
            None => self.push_file(
                Phase::Tree,
                path,
                Disposition::Create,
                None,
                Content::Literal(want),
                ("root", "root", 0o644),
            ),
        }
    }

    fn audit_file(&mut self, entry: &ModeEntry) {
        let meta = (entry.owner.as_str(), entry.group.as_str(), entry.mode);
        match self.observed(&entry.path).cloned() {
            None => self.push_file(
                Phase::Tree,
                entry.path.clone(),
                Disposition::Create,
                None,
                Content::Literal(Vec::new()),
                meta,
            ),
            Some(s) if s.kind != ObservedKind::File => self.refuse(
                entry.path.display(),
                "not_a_file",
                "the audit log is not a regular file".into(),
            ),
            // Never rewritten: it is sited's record.
            Some(s) => {
                if s.mode != entry.mode || !self.owned_as(&s, &entry.owner, &entry.group) {
                    self.push_file(
                        Phase::Tree,
                        entry.path.clone(),
                        Disposition::Metadata,
                        None,
                        Content::Existing,
                        meta,
                    );
                }
            }
        }
    }

    fn push_file(
        &mut self,
        phase: Phase,
        path: PathBuf,
        disposition: Disposition,
        drift: Option<Drift>,
        content: Content,
        (owner, group, mode): (&str, &str, u32),
    ) {
        self.actions.push(Action::File {
            phase,
            path,
            disposition,
            drift: drift.map(Drift::as_str),
            content,
            owner: owner.to_owned(),
            group: group.to_owned(),
            mode,
        });
    }

    /// The preproduction password file: written when absent, rewritten when its login names
    /// differ from the declared ones or a password file is newer than it; awaited while a
    /// password file is missing. A login on it that is no longer declared is revoked at once,
    /// though: the file is rewritten with the declared users whose password file is there, the
    /// others coming in once theirs is (their absence is reported as a credential's).
    ///
    /// With no user declared the file is the operator's own (`auth.htpasswd`; validation
    /// leaves no other way to serve preproduction behind basic auth without users): its
    /// logins are theirs, so it is awaited while absent and only re-owned once there.
    fn htpasswd(&mut self, matrix: &[ModeEntry]) {
        let Some(entry) = matrix.iter().find(|e| e.role == Role::Htpasswd) else {
            return;
        };
        let declared: Vec<(String, PathBuf)> = self
            .input
            .layout
            .declaration()
            .serving
            .preprod
            .auth
            .users
            .iter()
            .map(|u| (u.name.clone(), u.password_file.clone()))
            .collect();
        let meta = (entry.owner.as_str(), entry.group.as_str(), entry.mode);
        let path = entry.path.clone();
        let (users, passwords): (Vec<(String, PathBuf)>, Vec<Observed>) = declared
            .iter()
            .filter_map(|user| Some((user.clone(), self.observed(&user.1).cloned()?)))
            .unzip();
        let complete = !declared.is_empty() && users.len() == declared.len();
        let Some(seen) = self.observed(&path).cloned() else {
            let (disposition, content) = if complete {
                (Disposition::Create, Content::Htpasswd(users))
            } else {
                (Disposition::Awaiting, Content::Operator)
            };
            self.push_file(Phase::Secret, path, disposition, None, content, meta);
            return;
        };
        let metadata_drift =
            seen.mode != entry.mode || !self.owned_as(&seen, &entry.owner, &entry.group);
        if declared.is_empty() {
            if metadata_drift {
                let existing = Content::Existing;
                self.push_file(
                    Phase::Secret,
                    path,
                    Disposition::Metadata,
                    None,
                    existing,
                    meta,
                );
            }
            return;
        }
        let text =
            String::from_utf8_lossy(seen.content.as_deref().unwrap_or_default()).into_owned();
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once(':').map(|(name, _)| name))
            .collect();
        names.sort_unstable();
        let revoked = names
            .iter()
            .any(|name| !declared.iter().any(|(declared, _)| declared == name));
        if !complete && !revoked {
            return;
        }
        let mut wanted: Vec<&str> = users.iter().map(|(name, _)| name.as_str()).collect();
        wanted.sort_unstable();
        let newer = passwords.iter().any(|p| p.mtime_ns > seen.mtime_ns);
        if names != wanted || newer {
            self.push_file(
                Phase::Secret,
                path,
                Disposition::Rewrite,
                Some(Drift::Stale),
                Content::Htpasswd(users),
                meta,
            );
        } else if metadata_drift {
            self.push_file(
                Phase::Secret,
                path,
                Disposition::Metadata,
                None,
                Content::Existing,
                meta,
            );
        }
    }

    /// The web server's include carrying chatd's service token: written when absent,
    /// rewritten when the token is newer than it, re-owned when its owner or mode drifted.
    fn chat_proxy_auth(&mut self, matrix: &[ModeEntry]) {
        let Some(entry) = matrix.iter().find(|e| e.role == Role::ChatProxyAuth) else {
            return;
        };
        let token = self
            .input
            .layout
            .credentials_dir()
            .join(CHATD_SERVICE_TOKEN);
        let meta = (entry.owner.as_str(), entry.group.as_str(), entry.mode);
        let path = entry.path.clone();
        let content = Content::ChatProxyAuth(token.clone());
        let seen_token = self.observed(&token).map(|t| t.mtime_ns);
        // A token this plan mints (the operator deleted it) is newer than any include.
        let minting = self.secret_writes().contains(&token);
        let stale =
            |seen: &Observed| minting || seen_token.is_some_and(|mtime| mtime > seen.mtime_ns);
        match self.observed(&path).cloned() {
            None => self.push_file(
                Phase::Secret,
                path,
                Disposition::Create,
                None,
                content,
                meta,
            ),
            Some(seen) if stale(&seen) => self.push_file(
                Phase::Secret,
                path,
                Disposition::Rewrite,
                Some(Drift::Stale),
                content,
                meta,
            ),
            Some(seen) => {
                if seen.mode != entry.mode || !self.owned_as(&seen, &entry.owner, &entry.group) {
                    self.push_file(
                        Phase::Secret,
                        path,
                        Disposition::Metadata,
                        None,
                        Content::Existing,
                        meta,
                    );
                }
            }
        }
    }

    /// Credential files: a missing service token (sited's, chatd's) or chatd's master key is
    /// minted; any other missing one awaits the operator; an existing one is never read or
    /// rewritten, only re-owned, and only in the credentials dir (elsewhere it is the
    /// operator's file and stays as it is).
    fn secrets(&mut self, matrix: &[ModeEntry]) {
        let layout = self.input.layout;
        let mut minted = vec![layout.credentials_dir().join(SERVICE_TOKEN)];
        minted.extend(layout.chatd_credential_sources().into_values());
        let held = matrix
            .iter()
            .filter(|e| e.role == Role::Credential)
            .cloned();
        // One declared outside the credentials dir is still what a unit loads: missing, it
        // keeps the unit from starting, so it is minted or awaited like one held in the dir.
        let outside = layout.outside_credential_entries();
        let entries: Vec<(ModeEntry, bool)> = held
            .map(|e| (e, true))
            .chain(outside.into_iter().map(|e| (e, false)))
            .collect();
        for (entry, in_dir) in entries {
            let meta = (entry.owner.as_str(), entry.group.as_str(), entry.mode);
            match self.observed(&entry.path).cloned() {
                None if minted.contains(&entry.path) => self.push_file(
                    Phase::Secret,
                    entry.path.clone(),
                    Disposition::Create,
                    None,
                    Content::Random(MINTED_BYTES),
                    meta,
                ),
                None => self.push_file(
                    Phase::Secret,
                    entry.path.clone(),
                    Disposition::Awaiting,
                    None,
                    Content::Operator,
                    meta,
                ),
                Some(s) if s.kind != ObservedKind::File => self.refuse(
                    entry.path.display(),
                    "not_a_file",
                    "a credential source is not a regular file".into(),
                ),
                Some(s) => {
                    let drift =
                        s.mode != entry.mode || !self.owned_as(&s, &entry.owner, &entry.group);
                    if in_dir && drift {
                        self.push_file(
                            Phase::Secret,
                            entry.path.clone(),
                            Disposition::Metadata,
                            None,
                            Content::Existing,
                            meta,
                        );
                    }
                }
            }
        }
    }

    /// The secrets this plan writes so far (minted, or rewritten from what they are made of).
    fn secret_writes(&self) -> Vec<PathBuf> {
        self.actions
            .iter()
            .filter_map(|action| match action {
                Action::File {
                    phase: Phase::Secret,
                    disposition: Disposition::Create | Disposition::Rewrite,
                    path,
                    ..
                } => Some(path.clone()),
                _ => None,
            })
            .collect()
    }

    /// Rendered files and the declaration's copy; returns the paths that will be written.
    fn artifacts(&mut self, matrix: &[ModeEntry]) -> BTreeSet<PathBuf> {
        let mut written = BTreeSet::new();
        // `None` marks where removed sites' units go.
        let mut files: Vec<Option<WantedFile>> = Vec::new();
        // The polkit rule first: a narrowed grant is in force before anything it governs.
        let mut ordered: Vec<&Artifact> = self.input.artifacts.iter().collect();
        ordered.sort_by_key(|a| a.kind != ArtifactKind::AgentAuthorization);
        let polkit = ordered
            .iter()
            .take_while(|a| a.kind == ArtifactKind::AgentAuthorization)
            .count();
        for (i, a) in ordered.into_iter().enumerate() {
            if i == polkit {
                files.push(None);
            }
            files.push(Some(WantedFile {
                path: a.path.clone(),
                bytes: self.wanted_bytes(a).to_vec(),
                meta: (a.owner.clone(), a.group.clone(), a.mode),
                stamped: true,
            }));
        }
        if files.len() == polkit {
            files.push(None);
        }
        // The declaration's copy last: it records what the artifacts were rendered from.
        if let (Some(bytes), Some(entry)) = (
            self.input.declaration_bytes,
            matrix.iter().find(|e| e.role == Role::DeclarationFile),
        ) {
            files.push(Some(WantedFile {
                path: entry.path.clone(),
                bytes: bytes.to_vec(),
                meta: (entry.owner.clone(), entry.group.clone(), entry.mode),
                stamped: false,
            }));
        }
        let inst = self.input.layout.instance().as_str().to_owned();
        for wanted in files {
            let Some(WantedFile {
                path,
                bytes,
                meta: (owner, group, mode),
                stamped,
            }) = wanted
            else {
                self.removed_sites_units(&mut written);
                self.withdrawn_vhosts(&mut written);
                self.withdrawn_chat(&mut written);
                continue;
            };
            let meta = (owner.as_str(), group.as_str(), mode);
            match self.observed(&path).cloned() {
                None => {
                    written.insert(path.clone());
                    self.push_file(
                        Phase::Artifact,
                        path,
                        Disposition::Create,
                        None,
                        Content::Literal(bytes),
                        meta,
                    );
                }
                Some(s) if s.kind != ObservedKind::File => self.refuse(
                    path.display(),
                    "not_a_file",
                    "something other than a regular file stands where an artifact goes".into(),
                ),
                Some(s) => {
                    let existing = s.content.clone().unwrap_or_default();
                    if existing == bytes {
                        if s.mode != mode || !self.owned_as(&s, &owner, &group) {
                            self.push_file(
                                Phase::Artifact,
                                path,
                                Disposition::Metadata,
                                None,
                                Content::Existing,
                                meta,
                            );
                        }
                        continue;
                    }
                    let drift = if stamped {
                        classify(&existing, &bytes, &inst)
                    } else {
                        Drift::Stale
                    };
                    if drift == Drift::Foreign {
                        self.refuse(
                            path.display(),
                            "foreign",
                            "its stamp names another instance; it is left as it is".into(),
                        );
                        continue;
                    }
                    written.insert(path.clone());
                    self.push_file(
                        Phase::Artifact,
                        path,
                        Disposition::Rewrite,
                        Some(drift),
                        Content::Literal(bytes),
                        meta,
                    );
                }
            }
        }
        written
    }

    /// A removed site's units stop and go, with its gate plans and vhosts; only files stamped
    /// for this instance are unlinked. Unlinked paths join `written` so the reloads follow.
    fn removed_sites_units(&mut self, written: &mut BTreeSet<PathBuf>) {
        let input = self.input;
        for id in &input.allocation.removed {
            let steps = RetiredSteps::of(input.layout, id, &input.host.entries, input.artifacts);
            if !steps.sockets.is_empty() {
                let mut disable = argv(&["systemctl", "disable", "--now"]);
                disable.extend(steps.sockets);
                self.actions.push(Action::Exec {
                    step: ExecStep::DisableSockets,
                    argv: disable,
                });
            }
            if !steps.stop.is_empty() {
                let mut stop = argv(&["systemctl", "stop"]);
                stop.extend(steps.stop);
                self.actions.push(Action::Exec {
                    step: ExecStep::StopRuns,
                    argv: stop,
                });
            }
            self.vhost_unlinked |= steps.vhost_gone;
            for path in steps.links {
                self.actions.push(Action::Unlink { path });
            }
            for path in steps.files {
                written.insert(path.clone());
                self.actions.push(Action::Unlink { path });
            }
        }
    }

    /// A chat block taken out of the declaration takes chatd with it: its sockets and timer
    /// disabled, its services stopped, its unit files, the CMS's vhost (when they are ours) and
    /// the include with chatd's token gone, so the web server no longer serves the chat routes.
    /// chatd's database and credentials stay, as a removed site's workspace does.
    fn withdrawn_chat(&mut self, written: &mut BTreeSet<PathBuf>) {
        let layout = self.input.layout;
        if layout.declaration().chat.is_some() {
            return;
        }
        let inst = layout.instance().as_str().to_owned();
        let paths = ChatPaths::of(layout);
        let ours = |units: &[String]| -> Vec<String> {
            units
                .iter()
                .filter(|unit| self.stamped_ours(&layout.unit_path(unit), &inst))
                .cloned()
                .collect()
        };
        let (listening, services) = (ours(&paths.listening), ours(&paths.services));
        self.push_systemctl(
            ExecStep::DisableSockets,
            &["disable", "--now"],
            listening.clone(),
        );
        self.push_systemctl(ExecStep::StopRuns, &["stop"], services.clone());
        for unit in listening.iter().chain(&services) {
            let path = layout.unit_path(unit);
            written.insert(path.clone());
            self.actions.push(Action::Unlink { path });
        }
        if let Some(link) = paths.link.filter(|link| self.links_to(link, &paths.vhost)) {
            self.actions.push(Action::Unlink { path: link });
            self.vhost_unlinked = true;
        }
        if self.stamped_ours(&paths.vhost, &inst) {
            self.vhost_unlinked = true;
            written.insert(paths.vhost.clone());
            self.actions.push(Action::Unlink {
                path: paths.vhost.clone(),
            });
        }
        if self
            .observed(&paths.include)
            .is_some_and(|s| s.kind == ObservedKind::File)
        {
            written.insert(paths.include.clone());
            self.actions.push(Action::Unlink {
                path: paths.include.clone(),
            });
        }
    }

    /// A declared site's vhost that is no longer rendered (its preproduction turned off) goes,
    /// with its enabling link, when it is ours: left, the web server would go on serving it.
    fn withdrawn_vhosts(&mut self, written: &mut BTreeSet<PathBuf>) {
        let input = self.input;
        let inst = input.layout.instance().as_str().to_owned();
        for site in &input.layout.declaration().sites {
            for (vhost, link) in site_vhosts(input.layout, &site.slug) {
                if input.artifacts.iter().any(|a| a.path == vhost) {
                    continue;
                }
                if let Some(link) = link.filter(|link| self.links_to(link, &vhost)) {
                    self.actions.push(Action::Unlink { path: link });
                    self.vhost_unlinked = true;
                }
                if self.stamped_ours(&vhost, &inst) {
                    self.vhost_unlinked = true;
                    written.insert(vhost.clone());
                    self.actions.push(Action::Unlink { path: vhost });
                }
            }
        }
    }

    /// Whether a symlink stands at `link` pointing at `target` (absolutely or relatively).
    fn links_to(&self, link: &Path, target: &Path) -> bool {
        links_to(self.observed(link), link, target)
    }

    /// Whether a regular file at `path` carries the stamp of instance `inst`.
    fn stamped_ours(&self, path: &Path, inst: &str) -> bool {
        stamped_ours(self.observed(path), inst)
    }

    fn service(&mut self, written: &BTreeSet<PathBuf>) {
        let layout = self.input.layout;
        let owed = &self.input.host.owed;
        let unit_dir = layout.unit_dir();
        if owed.daemon_reload
            || written
                .iter()
                .any(|p| p.parent() == Some(unit_dir.as_path()))
        {
            self.actions.push(Action::Exec {
                step: ExecStep::DaemonReload,
                argv: argv(&["systemctl", "daemon-reload"]),
            });
        }
        let tmpfiles = layout.tmpfiles_path();
        let has_tmpfiles = self.input.artifacts.iter().any(|a| a.path == tmpfiles);
        let runtime_missing = self.observed(&layout.runtime_dir()).is_none();
        if has_tmpfiles && (written.contains(&tmpfiles) || runtime_missing || owed.tmpfiles) {
            let file = tmpfiles.display().to_string();
            self.actions.push(Action::Exec {
                step: ExecStep::TmpfilesCreate,
                argv: argv(&["systemd-tmpfiles", "--create", &file]),
            });
        }
    }

    /// Every declared socket listens: enabled (and started) if it is not, started if it is
    /// enabled but down, restarted if its unit file changed while it listened (in this plan, or
    /// in an apply that stopped before the restart).
    fn sockets(&mut self, written: &BTreeSet<PathBuf>) {
        let input = self.input;
        let (mut enable, mut start, mut restart) = (Vec::new(), Vec::new(), Vec::new());
        for unit in socket_units(input.layout, &input.sites()) {
            let state = input.host.units.get(&unit).copied().unwrap_or_default();
            let rewritten = (self.observed(&input.layout.unit_path(&unit)).is_some()
                && written.contains(&input.layout.unit_path(&unit)))
                || input.host.owed.sockets.contains(&unit);
            if !state.enabled {
                enable.push(unit);
            } else if !state.active {
                start.push(unit);
            } else if rewritten {
                restart.push(unit);
            }
        }
        self.push_systemctl(ExecStep::EnableSockets, &["enable", "--now"], enable);
        self.push_systemctl(ExecStep::StartSockets, &["start"], start);
        self.push_systemctl(ExecStep::RestartSockets, &["restart"], restart);
    }

    /// `systemctl <verb> <units>…` as `step`, unless there are no units.
    fn push_systemctl(&mut self, step: ExecStep, verb: &[&str], units: Vec<String>) {
        if units.is_empty() {
            return;
        }
        let mut command = argv(&["systemctl"]);
        command.extend(argv(verb));
        command.extend(units);
        self.actions.push(Action::Exec {
            step,
            argv: command,
        });
    }

    fn web(&mut self, written: &BTreeSet<PathBuf>) {
        let layout = self.input.layout;
        let mut changed = false;
        for a in self.input.artifacts {
            let Some((link, target)) = enabling_link(layout, a) else {
                continue;
            };
            if written.contains(&a.path) {
                changed = true;
            }
            match self.observed(&link).cloned() {
                None => {
                    changed = true;
                    self.actions.push(Action::Symlink {
                        phase: Phase::Web,
                        path: link,
                        target,
                        owner: "root".into(),
                        group: "root".into(),
                    });
                }
                Some(s)
                    if s.kind == ObservedKind::Symlink
                        && s.link_target.as_ref() == Some(&target) => {}
                Some(_) => self.refuse(
                    link.display(),
                    "enabling_link_taken",
                    format!(
                        "something other than a link to {} stands there",
                        target.display()
                    ),
                ),
            }
        }
        // The include carrying chatd's token is web server configuration too.
        let vhost_written = self.vhost_unlinked
            || written.contains(&layout.chat_proxy_auth_path())
            || self.input.artifacts.iter().any(|a| {
                matches!(a.kind, ArtifactKind::NginxVhost | ArtifactKind::ApacheVhost)
                    && written.contains(&a.path)
            });
        let owed = self.input.host.owed.web_reload;
        if (changed || vhost_written || owed) && self.input.host.web_server_present {
            let server = layout.declaration().web.server;
            self.actions.push(Action::Exec {
                step: ExecStep::WebConfigtest,
                argv: host::web_configtest_argv(server),
            });
            // try-: a web server that is not running is not started by provisioning.
            self.actions.push(Action::Exec {
                step: ExecStep::WebReload,
                argv: argv(&["systemctl", "try-reload-or-restart", host::web_unit(server)]),
            });
        }
    }

    /// The first file an artifact's stand-in waits for that is not on the host.
    fn awaited<'a>(&self, a: &'a Artifact) -> Option<&'a Path> {
        let stand_in = a.stand_in.as_ref()?;
        stand_in
            .requires
            .iter()
            .find(|path| self.observed(path).is_none())
            .map(PathBuf::as_path)
    }

    /// What is written for an artifact: its stand-in while a file it names is missing.
    fn wanted_bytes<'a>(&self, a: &'a Artifact) -> &'a [u8] {
        match (&a.stand_in, self.awaited(a)) {
            (Some(stand_in), Some(_)) => &stand_in.bytes,
            _ => &a.bytes,
        }
    }

    /// Each certificate a vhost is waiting for, by name, so `plan`, `apply` and `check` say
    /// which site serves only the ACME challenge.
    fn certificates(&mut self) {
        let awaited: Vec<PathBuf> = self
            .input
            .artifacts
            .iter()
            .filter_map(|a| self.awaited(a))
            .map(Path::to_path_buf)
            .collect();
        for path in awaited {
            self.actions.push(Action::File {
                phase: Phase::Web,
                path,
                disposition: Disposition::Awaiting,
                drift: Some(AWAITING_CERTIFICATE),
                content: Content::Operator,
                owner: "root".into(),
                group: "root".into(),
                mode: 0o644,
            });
        }
    }

    fn retire(&mut self) {
        let input = self.input;
        for id in &input.allocation.removed {
            let from = input.layout.agent_site_dir(id.k);
            if self
                .observed(&from)
                .is_some_and(|s| s.kind == ObservedKind::Dir)
            {
                let to = input
                    .layout
                    .retired_dir()
                    .join(format!("s{}.{}", id.k, input.now));
                self.actions.push(Action::Archive { from, to });
            }
        }
        for id in &self.input.allocation.removed {
            self.actions.push(Action::Account {
                step: AccountStep::Lock,
                name: id.name.clone(),
                argv: argv(&[
                    "usermod",
                    "--lock",
                    "--expiredate",
                    "1",
                    "--shell",
                    NOLOGIN,
                    &id.name,
                ]),
            });
        }
    }
}

/// Checks the invariants every plan must hold before anything runs: phases never go back, no
/// command deletes anything, a web reload only follows a config test, every path is absolute.
pub fn assert_coherent(actions: &[Action]) -> Result<(), PlanError> {
    let mut refusals = Vec::new();
    let mut last = Phase::Identity;
    let mut tested = false;
    for action in actions {
        let phase = action.phase();
        if phase < last {
            refusals.push(Refusal {
                subject: action.to_string(),
                reason: "phase_order",
                message: "runs in an earlier phase than the action before it".into(),
            });
        }
        last = phase;
        match action {
            Action::Account { argv, .. } | Action::Exec { argv, .. } => {
                let forbidden = [
                    "userdel", "groupdel", "deluser", "delgroup", "rm", "rmdir", "unlink", "shred",
                ];
                if argv
                    .first()
                    .is_some_and(|a| forbidden.contains(&a.as_str()))
                {
                    refusals.push(Refusal {
                        subject: argv.join(" "),
                        reason: "destructive_command",
                        message: "provisioning never deletes accounts or files by command".into(),
                    });
                }
            }
            Action::Dir { path, .. }
            | Action::File { path, .. }
            | Action::Symlink { path, .. }
            | Action::Unlink { path }
            | Action::Archive { from: path, .. } => {
                if !path.is_absolute() {
                    refusals.push(Refusal {
                        subject: path.display().to_string(),
                        reason: "relative_path",
                        message: "every planned path must be absolute".into(),
                    });
                }
            }
            Action::DeferRestart { .. } => {}
        }
        if let Action::Exec { step, argv } = action {
            match step {
                ExecStep::WebConfigtest => tested = true,
                ExecStep::WebReload if !tested => refusals.push(Refusal {
                    subject: argv.join(" "),
                    reason: "reload_untested",
                    message: "a web server reload must follow its config test".into(),
                }),
                _ => {}
            }
        }
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(PlanError { refusals })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use atelier_layout::Declaration;

    use super::*;
    use crate::artifact::CommentStyle;
    use crate::identities::{Accounts, GroupEntry, PasswdEntry, ShadowEntry};

    const INST: &str = "example";

    /// A declaration, hand-built artifacts standing in for the renderer, and an in-memory host
    /// that plans can be "applied" to.
    pub(super) struct Fixture {
        pub(super) decl: Declaration,
        pub(super) host: HostState,
        pub(super) extra_artifacts: Vec<Artifact>,
    }

    fn base_accounts() -> Accounts {
        let user = |name: &str, uid: u32| PasswdEntry {
            name: name.into(),
            uid,
            gid: uid,
            gecos: String::new(),
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        let group = |name: &str, gid: u32| GroupEntry {
            name: name.into(),
            gid,
            members: vec![],
        };
        Accounts {
            passwd: vec![user("root", 0), user("www-data", 33)],
            groups: vec![
                group("root", 0),
                group("www-data", 33),
                group("dedalo-example", 500),
                group("prometheus", 501),
            ],
            shadow: Some(vec![]),
        }
    }

    impl Fixture {
        pub(super) fn new(slugs: &[&str]) -> Fixture {
            Fixture {
                decl: crate::test_support::declaration(slugs),
                host: HostState {
                    accounts: base_accounts(),
                    entries: BTreeMap::new(),
                    systemd_version: Some(252),
                    web_server_present: true,
                    ..HostState::default()
                },
                extra_artifacts: vec![],
            }
        }

        pub(super) fn redeclare(&mut self, slugs: &[&str]) {
            self.decl = crate::test_support::declaration(slugs);
        }

        fn allocation(&self) -> Allocation {
            identities::allocate(&self.decl, &self.host.accounts).unwrap()
        }

        /// Whether the observer looks at `path` without reading its content.
        fn looks_at_unread(&self, path: &Path) -> bool {
            let allocation = self.allocation();
            let layout = Layout::new(&self.decl);
            let sites = sites_of(&layout, &allocation);
            observed_paths(&layout, &sites, &self.artifacts(&allocation), &[])
                .contains(&(path.to_path_buf(), false))
        }

        /// A sited unit, a door unit per site, the tmpfiles file and a vhost per site.
        fn artifacts(&self, allocation: &Allocation) -> Vec<Artifact> {
            let layout = Layout::new(&self.decl);
            let inst = layout.instance();
            let mut out = vec![
                hashed(
                    layout.unit_path(&names::sited_service_unit(inst)),
                    ArtifactKind::Unit,
                    "[Service]\nType=notify\n",
                ),
                hashed(
                    layout.tmpfiles_path(),
                    ArtifactKind::AgentUnits,
                    "d /run/atelier/example 0755 root root -\n",
                ),
                Artifact::new(
                    layout.polkit_rule_path(),
                    INST,
                    ArtifactKind::AgentAuthorization,
                    CommentStyle::Slashes,
                    ("root", "root", 0o644),
                    "polkit.addRule(function () {});\n",
                ),
            ];
            for (k, site) in sites_of(&layout, allocation) {
                let unit = names::door_socket_unit(inst, k, atelier_layout::Door::Turn);
                out.push(hashed(
                    layout.unit_path(&unit),
                    ArtifactKind::AgentUnits,
                    &format!("[Socket]\n# {}\n", site.slug),
                ));
                let preprod = self.decl.serving.preprod.enabled;
                for (file, prefix) in [
                    (names::prod_vhost_file(inst, &site.slug), Some("")),
                    (
                        names::preprod_vhost_file(inst, &site.slug),
                        preprod.then_some("pre."),
                    ),
                ] {
                    let Some(prefix) = prefix else { continue };
                    out.push(hashed(
                        layout.vhost_dir().join(file),
                        ArtifactKind::NginxVhost,
                        &format!("server {{ server_name {prefix}{}; }}\n", site.domain),
                    ));
                }
            }
            out.extend(self.extra_artifacts.iter().cloned());
            out
        }

        pub(super) fn plan(&self) -> Result<Vec<Action>, PlanError> {
            let allocation = self.allocation();
            let artifacts = self.artifacts(&allocation);
            let layout = Layout::new(&self.decl);
            let actions = plan(PlanInput {
                layout: &layout,
                allocation: &allocation,
                artifacts: &artifacts,
                declaration_bytes: Some(b"{}\n"),
                host: &self.host,
                now: "20261202T000000Z",
            })?;
            assert_coherent(&actions)?;
            Ok(actions)
        }

        fn uid(&self, name: &str) -> u32 {
            self.host.accounts.user(name).unwrap().uid
        }

        fn gid(&self, name: &str) -> u32 {
            self.host.accounts.group(name).unwrap().gid
        }

        /// Does to the in-memory host what `apply` would do to a real one.
        pub(super) fn simulate(&mut self, actions: &[Action]) {
            for action in actions {
                match action {
                    Action::Unlink { path } => {
                        self.host.entries.remove(path);
                    }
                    Action::Archive { from, to } => {
                        let moved: Vec<PathBuf> = self
                            .host
                            .entries
                            .keys()
                            .filter(|p| p.starts_with(from))
                            .cloned()
                            .collect();
                        for path in moved {
                            let seen = self.host.entries.remove(&path).unwrap();
                            let rest = path.strip_prefix(from).unwrap();
                            self.host.entries.insert(to.join(rest), seen);
                        }
                    }
                    Action::Account { step, name, argv } => {
                        self.simulate_account(*step, name, argv)
                    }
                    Action::Dir {
                        path,
                        owner,
                        group,
                        mode,
                        ..
                    } => {
                        let seen = self.observed(ObservedKind::Dir, owner, group, *mode, None);
                        self.host.entries.insert(path.clone(), seen);
                    }
                    Action::File {
                        path,
                        disposition,
                        content,
                        owner,
                        group,
                        mode,
                        ..
                    } => {
                        let bytes = match (disposition, content) {
                            (Disposition::Awaiting, _) => continue,
                            (_, Content::Literal(b)) => Some(b.clone()),
                            (_, Content::Random(_)) => Some(b"minted\n".to_vec()),
                            (_, Content::Htpasswd(users)) => Some(
                                users
                                    .iter()
                                    .map(|(name, _)| format!("{name}:$2y$12$hash\n"))
                                    .collect::<String>()
                                    .into_bytes(),
                            ),
                            (_, Content::ChatProxyAuth(_)) => Some(b"proxy_set_header\n".to_vec()),
                            _ => self.host.entries.get(path).and_then(|e| e.content.clone()),
                        };
                        let seen = self.observed(ObservedKind::File, owner, group, *mode, bytes);
                        self.host.entries.insert(path.clone(), seen);
                    }
                    Action::Symlink {
                        path,
                        target,
                        owner,
                        group,
                        ..
                    } => {
                        let mut seen =
                            self.observed(ObservedKind::Symlink, owner, group, 0o777, None);
                        seen.link_target = Some(target.clone());
                        self.host.entries.insert(path.clone(), seen);
                    }
                    Action::Exec {
                        step: ExecStep::TmpfilesCreate,
                        ..
                    } => {
                        let seen = self.observed(ObservedKind::Dir, "root", "root", 0o755, None);
                        let runtime = Layout::new(&self.decl).runtime_dir();
                        self.host.entries.insert(runtime, seen);
                    }
                    Action::Exec {
                        step: ExecStep::EnableSockets | ExecStep::StartSockets,
                        argv,
                    } => {
                        for unit in argv
                            .iter()
                            .filter(|a| a.ends_with(".socket") || a.ends_with(".timer"))
                        {
                            let state = crate::host::UnitState {
                                enabled: true,
                                active: true,
                            };
                            self.host.units.insert(unit.clone(), state);
                        }
                    }
                    Action::Exec { .. } | Action::DeferRestart { .. } => {}
                }
            }
        }

        fn simulate_account(&mut self, step: AccountStep, name: &str, argv: &[String]) {
            let accounts = &mut self.host.accounts;
            let next = 1000 + u32::try_from(accounts.passwd.len() + accounts.groups.len()).unwrap();
            let flag = |f: &str| {
                argv.iter()
                    .position(|a| a == f)
                    .map(|i| argv[i + 1].clone())
            };
            match step {
                AccountStep::AddGroup => accounts.groups.push(GroupEntry {
                    name: name.into(),
                    gid: next,
                    members: vec![],
                }),
                AccountStep::AddUser => {
                    let gid = accounts.group(&flag("--gid").unwrap()).unwrap().gid;
                    if let Some(extra) = flag("--groups") {
                        accounts
                            .groups
                            .iter_mut()
                            .find(|g| g.name == extra)
                            .unwrap()
                            .members
                            .push(name.into());
                    }
                    accounts.passwd.push(PasswdEntry {
                        name: name.into(),
                        uid: next,
                        gid,
                        gecos: flag("--comment").unwrap(),
                        home: "/nonexistent".into(),
                        shell: NOLOGIN.into(),
                    });
                    accounts.shadow.as_mut().unwrap().push(ShadowEntry {
                        name: name.into(),
                        expire: None,
                    });
                }
                AccountStep::AddMember => {
                    let (user, group) = (&argv[2], &argv[3]);
                    accounts
                        .groups
                        .iter_mut()
                        .find(|g| &g.name == group)
                        .unwrap()
                        .members
                        .push(user.clone());
                }
                AccountStep::Lock => {
                    for s in accounts
                        .shadow
                        .as_mut()
                        .unwrap()
                        .iter_mut()
                        .filter(|s| s.name == name)
                    {
                        s.expire = Some(identities::RETIRED_EXPIRY);
                    }
                }
            }
        }

        fn observed(
            &self,
            kind: ObservedKind,
            owner: &str,
            group: &str,
            mode: u32,
            content: Option<Vec<u8>>,
        ) -> Observed {
            Observed {
                kind,
                mode,
                uid: self.uid(owner),
                gid: self.gid(group),
                empty: (kind == ObservedKind::Dir).then_some(true),
                link_target: None,
                resolved: None,
                content,
                mtime_ns: 0,
                changed_ns: 0,
            }
        }

        /// Plants the operator's credentials and passwords, then plans and simulates.
        pub(super) fn converge(&mut self) {
            let layout = Layout::new(&self.decl);
            let mut operator: Vec<PathBuf> = layout
                .credential_sources()
                .into_iter()
                .filter(|(id, _)| id != SERVICE_TOKEN)
                .map(|(_, path)| path)
                .collect();
            operator.extend(
                self.decl
                    .serving
                    .preprod
                    .auth
                    .users
                    .iter()
                    .map(|u| u.password_file.clone()),
            );
            for path in operator {
                let seen = self.observed(ObservedKind::File, "root", "root", 0o600, None);
                self.host.entries.insert(path, seen);
            }
            let actions = self.plan().unwrap();
            self.simulate(&actions);
        }
    }

    /// An artifact of `body` at `path`, root's 0644, its stamp in `#` comments.
    fn hashed(path: PathBuf, kind: ArtifactKind, body: &str) -> Artifact {
        Artifact::new(
            path,
            INST,
            kind,
            CommentStyle::Hash,
            ("root", "root", 0o644),
            body,
        )
    }

    fn lines(actions: &[Action]) -> Vec<String> {
        actions.iter().map(ToString::to_string).collect()
    }

    pub(super) fn argvs(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Account { argv, .. } | Action::Exec { argv, .. } => Some(argv.join(" ")),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_fresh_host_gets_identities_tree_artifacts_reload_and_web_in_order() {
        let f = Fixture::new(&["blog", "shop"]);
        let actions = f.plan().unwrap();
        let argvs = argvs(&actions);
        assert_eq!(
            argvs[..8],
            [
                "groupadd --system atelier-example",
                "useradd --system --gid atelier-example --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin --comment Atelier instance example atelier-example",
                "groupadd --system atelier-a-example_1",
                "useradd --system --gid atelier-example --groups atelier-a-example_1 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin --comment atelier site blog atelier-a-example_1",
                "gpasswd -a atelier-example atelier-a-example_1",
                "groupadd --system atelier-a-example_2",
                "useradd --system --gid atelier-example --groups atelier-a-example_2 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin --comment atelier site shop atelier-a-example_2",
                "gpasswd -a atelier-example atelier-a-example_2",
            ]
        );
        assert_eq!(
            argvs[8..],
            [
                "systemctl daemon-reload",
                "systemd-tmpfiles --create /etc/tmpfiles.d/atelier-example.conf",
                "systemctl enable --now atelier-sited@example.socket atelier-example-s1-turn.socket atelier-example-s1-build.socket atelier-example-s1-git.socket atelier-example-s1-gate.socket atelier-example-s1-gate-decisions.socket atelier-example-s2-turn.socket atelier-example-s2-build.socket atelier-example-s2-git.socket atelier-example-s2-gate.socket atelier-example-s2-gate-decisions.socket atelier-chatd@example.socket atelier-chatd-purge@example.timer atelier-sited-metrics@example.socket atelier-chatd-metrics@example.socket atelier-example-s1-gate-metrics.socket atelier-example-s2-gate-metrics.socket",
                "nginx -t",
                "systemctl try-reload-or-restart nginx.service",
            ]
        );
        let text = lines(&actions).join("\n");
        for expected in [
            "dir /etc/atelier/example/credentials root:root 0700 (create)",
            "dir /var/lib/atelier/example/sites atelier-example:atelier-example 2770 (create)",
            "dir /srv/www/blog.example.org atelier-example:www-data 2750 (create)",
            "dir /srv/www/blog.example.org/.releases/web atelier-example:www-data 2750 (create)",
            "dir /var/lib/atelier/example/agents/s2/turn root:root 0755 (create)",
            "dir /var/lib/atelier/example/agents/s2/turn/state atelier-a-example_2:atelier-example 0700 (create)",
            "dir /var/lib/atelier/example/agents/s2/turn/.config root:root 0755 (create)",
            "dir /var/lib/atelier/example/agents/s2/turn/stated atelier-example:atelier-a-example_2 0750 (create)",
            "dir /var/lib/atelier/example/agents/s2/build atelier-a-example_2:atelier-example 0700 (create)",
            "create /srv/www/blog.example.org/.atelier_instance root:root 0644",
            "create /srv/atelier_audit/example/audit.jsonl atelier-example:atelier-example 0600",
            "create /etc/atelier/example/credentials/SERVICE_TOKEN root:root 0600",
            "awaiting operator file /etc/atelier/example/credentials/ANTHROPIC_API_KEY root:root 0600",
            "create /etc/systemd/system/atelier-sited@example.service root:root 0644",
            "link /etc/nginx/sites-enabled/atelier-example-blog.conf -> ../sites-available/atelier-example-blog.conf root:root",
            "link     link /srv/www/blog.example.org/web -> .releases/web atelier-example:www-data",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        // Runtime entries are tmpfiles' and PID 1's, never the tree phase's.
        assert!(!text.contains("dir /run/"), "{text}");
        // The polkit rule is the first artifact written.
        let first_artifact = actions
            .iter()
            .find(|a| a.phase() == Phase::Artifact)
            .unwrap();
        assert!(
            first_artifact
                .to_string()
                .contains("/etc/polkit-1/rules.d/"),
            "{first_artifact}"
        );
        // Nothing prints a file's content.
        assert!(!text.contains("Type=notify"), "{text}");
    }

    #[test]
    fn a_converged_host_plans_nothing() {
        let mut f = Fixture::new(&["blog", "shop"]);
        f.converge();
        let actions = f.plan().unwrap();
        assert!(actions.is_empty(), "{:#?}", lines(&actions));
    }

    #[test]
    fn drift_is_rewritten_with_its_class_and_reloads_only_what_it_touches() {
        let layout_decl = crate::test_support::declaration(&["blog"]);
        let unit = Layout::new(&layout_decl).unit_path("atelier-sited@example.service");
        let vhost = Layout::new(&layout_decl)
            .vhost_dir()
            .join("atelier-example-blog.conf");
        /// Name, edited path, its bytes on the host, expected drift class, expected commands.
        type Case = (
            &'static str,
            PathBuf,
            Vec<u8>,
            &'static str,
            &'static [&'static str],
        );
        let cases: [Case; 4] = [
            (
                "hand edit of a unit",
                unit.clone(),
                {
                    let mut bytes = f_bytes(&unit);
                    bytes.extend_from_slice(b"ExecStart=/bin/sh\n");
                    bytes
                },
                "hand_edited",
                &["systemctl daemon-reload"],
            ),
            (
                "stamp removed",
                unit.clone(),
                b"[Service]\nType=notify\n".to_vec(),
                "unstamped",
                &["systemctl daemon-reload"],
            ),
            (
                "old render",
                unit.clone(),
                atelier_layout::stamp::stamped(
                    INST,
                    ArtifactKind::Unit.as_str(),
                    CommentStyle::Hash,
                    b"[Service]\n",
                ),
                "stale",
                &["systemctl daemon-reload"],
            ),
            (
                "hand edit of a vhost",
                vhost.clone(),
                {
                    let mut bytes = f_bytes(&vhost);
                    bytes.extend_from_slice(b"# edited\n");
                    bytes
                },
                "hand_edited",
                &["nginx -t", "systemctl try-reload-or-restart nginx.service"],
            ),
        ];
        for (name, path, bytes, class, execs) in cases {
            let mut f = Fixture::new(&["blog"]);
            f.converge();
            f.host.entries.get_mut(&path).unwrap().content = Some(bytes);
            let actions = f.plan().unwrap();
            assert_eq!(
                actions.len(),
                1 + execs.len(),
                "{name}: {:#?}",
                lines(&actions)
            );
            match &actions[0] {
                Action::File {
                    path: p,
                    disposition,
                    drift,
                    ..
                } => {
                    assert_eq!(p, &path, "{name}");
                    assert_eq!(*disposition, Disposition::Rewrite, "{name}");
                    assert_eq!(*drift, Some(class), "{name}");
                }
                other => panic!("{name}: {other}"),
            }
            assert_eq!(argvs(&actions), execs, "{name}");
        }

        /// The bytes the fixture renders at `path` on a converged host.
        fn f_bytes(path: &Path) -> Vec<u8> {
            let mut f = Fixture::new(&["blog"]);
            f.converge();
            f.host.entries[path].content.clone().unwrap()
        }
    }

    #[test]
    fn wrong_modes_and_owners_are_reconciled_without_rewriting() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let layout = Layout::new(&f.decl);
        let sites = layout.sites_root();
        f.host.entries.get_mut(&sites).unwrap().mode = 0o755;
        let token = layout.credentials_dir().join(SERVICE_TOKEN);
        f.host.entries.get_mut(&token).unwrap().uid = 33;
        let actions = f.plan().unwrap();
        assert_eq!(
            lines(&actions),
            [
                "tree     dir /var/lib/atelier/example/sites atelier-example:atelier-example 2770 (mode)",
                "secret   metadata /etc/atelier/example/credentials/SERVICE_TOKEN root:root 0600",
            ]
        );
    }

    #[test]
    fn refusals_are_named_and_nothing_is_planned() {
        type Spoil = fn(&mut Fixture);
        let cases: [(&str, Spoil, &str); 17] = [
            (
                "foreign artifact",
                |f| {
                    let path = Layout::new(&f.decl).unit_path("atelier-sited@example.service");
                    f.host.entries.get_mut(&path).unwrap().content =
                        Some(atelier_layout::stamp::stamped(
                            "other",
                            ArtifactKind::Unit.as_str(),
                            CommentStyle::Hash,
                            b"x",
                        ));
                },
                "foreign",
            ),
            (
                "foreign marker",
                |f| {
                    let path = marker_path(&Layout::new(&f.decl).sites_root());
                    f.host.entries.get_mut(&path).unwrap().content = Some(b"other\n".to_vec());
                },
                "foreign_root",
            ),
            (
                "file where a dir goes",
                |f| {
                    let path = Layout::new(&f.decl).agents_root();
                    f.host.entries.get_mut(&path).unwrap().kind = ObservedKind::File;
                },
                "not_a_directory",
            ),
            (
                "engine group missing",
                |f| {
                    f.host
                        .accounts
                        .groups
                        .retain(|g| g.name != "dedalo-example")
                },
                "group_absent",
            ),
            (
                "old systemd",
                |f| f.host.systemd_version = Some(247),
                "systemd_too_old",
            ),
            (
                "enabling link taken",
                |f| {
                    let link = Layout::new(&f.decl)
                        .vhost_enabled_dir()
                        .join("atelier-example-blog.conf");
                    f.host.entries.get_mut(&link).unwrap().link_target = Some("/elsewhere".into());
                },
                "enabling_link_taken",
            ),
            (
                "agent outside the door's view",
                |f| {
                    f.decl.agent.bins.insert(
                        atelier_layout::declaration::AgentDriver::ClaudeCode,
                        "/srv/tools/claude".into(),
                    );
                },
                "agent_bin_outside_door_view",
            ),
            (
                "agent linked out of the door's view",
                |f| {
                    let bin = f.decl.agent.bins.values().next().unwrap().clone();
                    let mut seen = f.host.entries.values().next().unwrap().clone();
                    seen.kind = ObservedKind::Symlink;
                    seen.resolved = Some("/root/.local/share/claude/versions/2.1.328".into());
                    f.host.entries.insert(bin, seen);
                },
                "agent_bin_outside_door_view",
            ),
            (
                "agent in a folder every door masks",
                |f| {
                    f.decl.agent.bins.insert(
                        atelier_layout::declaration::AgentDriver::ClaudeCode,
                        "/etc/nginx/tools/claude".into(),
                    );
                },
                "agent_bin_outside_door_view",
            ),
            (
                "Atelier's binaries outside the door's view",
                |f| f.decl.paths.bin_dir = Some("/srv/atelier/bin".into()),
                "bin_dir_outside_door_view",
            ),
            (
                "Atelier's binaries in a folder every door masks",
                |f| f.decl.paths.bin_dir = Some("/etc/atelier/bin".into()),
                "bin_dir_outside_door_view",
            ),
            (
                "the shim linked out of the door's view",
                |f| {
                    let shim = Layout::new(&f.decl).binary(services::SHIM_BINARY);
                    let mut seen = f.host.entries.values().next().unwrap().clone();
                    seen.kind = ObservedKind::Symlink;
                    seen.resolved = Some("/srv/build/target/release/atelier-shim".into());
                    f.host.entries.insert(shim, seen);
                },
                "bin_dir_outside_door_view",
            ),
            (
                "audit root in the door's view",
                |f| f.decl.roots.audit = Some("/opt/atelier-audit".into()),
                "instance_path_in_door_view",
            ),
            (
                "vhost dir in the door's view",
                |f| {
                    // Without enabling links, so that no link of the old folder is in the way.
                    f.decl.paths.vhost_dir = Some("/etc/atelier-vhosts".into());
                    f.decl.paths.vhost_enabled_dir = Some("/etc/atelier-vhosts".into());
                },
                "site_files_in_door_view",
            ),
            (
                "vhost enabled dir in the door's view",
                |f| f.decl.paths.vhost_enabled_dir = Some("/opt/vhosts-enabled".into()),
                "site_files_in_door_view",
            ),
            (
                "unit dir in the door's view",
                |f| f.decl.paths.unit_dir = Some("/usr/local/lib/systemd/system".into()),
                "site_files_in_door_view",
            ),
            (
                "door root link taken",
                |f| {
                    let link = Layout::new(&f.decl).door_root().join("lib64");
                    f.host.entries.get_mut(&link).unwrap().link_target = Some("/lib".into());
                },
                "door_root_link_taken",
            ),
        ];
        for (name, spoil, reason) in cases {
            let mut f = Fixture::new(&["blog"]);
            f.converge();
            spoil(&mut f);
            let err = f.plan().unwrap_err();
            assert_eq!(
                err.refusals.iter().map(|r| r.reason).collect::<Vec<_>>(),
                [reason],
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn site_files_may_move_where_no_door_looks() {
        for (name, spoil) in [
            (
                "vhosts in a folder of nginx's",
                (|f| f.decl.paths.vhost_dir = Some("/etc/nginx/atelier".into()))
                    as fn(&mut Fixture),
            ),
            ("units at run time", |f| {
                f.decl.paths.unit_dir = Some("/run/systemd/system".into())
            }),
            ("vhosts outside the system view", |f| {
                f.decl.paths.vhost_dir = Some("/srv/vhosts".into())
            }),
        ] {
            let mut f = Fixture::new(&["blog"]);
            spoil(&mut f);
            if let Err(err) = f.plan() {
                assert!(
                    err.refusals
                        .iter()
                        .all(|r| r.reason != "site_files_in_door_view"),
                    "{name}: {err}"
                );
            }
        }
    }

    #[test]
    fn an_unmarked_non_empty_root_is_refused() {
        let mut f = Fixture::new(&["blog"]);
        let webspace = PathBuf::from("/srv/www/blog.example.org");
        let mut seen = f.observed(ObservedKind::Dir, "root", "root", 0o755, None);
        seen.empty = Some(false);
        f.host.entries.insert(webspace, seen);
        let err = f.plan().unwrap_err();
        assert_eq!(err.refusals[0].reason, "unmarked_root", "{err}");
    }

    #[test]
    fn a_new_site_gets_the_next_ordinal_and_only_its_own_actions() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        f.redeclare(&["blog", "shop"]);
        let actions = f.plan().unwrap();
        let text = lines(&actions).join("\n");
        assert!(
            text.contains("useradd --system --gid atelier-example --groups atelier-a-example_2"),
            "{text}"
        );
        assert!(
            !text.contains("atelier-a-example_1 "),
            "the live site is untouched:\n{text}"
        );
        assert!(
            text.contains("create /etc/systemd/system/atelier-example-s2-turn.socket"),
            "{text}"
        );
        assert!(argvs(&actions).contains(&"systemctl daemon-reload".to_owned()));
        f.simulate(&actions);
        assert!(f.plan().unwrap().is_empty());
    }

    #[test]
    fn a_removed_site_is_locked_last_and_its_ordinal_is_never_reused() {
        let mut f = Fixture::new(&["blog", "shop"]);
        f.converge();
        f.redeclare(&["blog"]);
        let actions = f.plan().unwrap();
        assert_eq!(
            lines(&actions),
            [
                "artifact run systemctl disable --now atelier-example-s2-turn.socket",
                "artifact run systemctl stop atelier-example-s2-turn@*.service atelier-example-s2-build@*.service atelier-example-s2-git@*.service atelier-example-s2-gate.service",
                "artifact unlink /etc/nginx/sites-enabled/atelier-example-shop.conf",
                "artifact unlink /etc/nginx/sites-enabled/atelier-example-shop-pre.conf",
                "artifact unlink /etc/systemd/system/atelier-example-s2-turn.socket",
                "artifact unlink /etc/nginx/sites-available/atelier-example-shop.conf",
                "artifact unlink /etc/nginx/sites-available/atelier-example-shop-pre.conf",
                "service  run systemctl daemon-reload",
                "web      run nginx -t",
                "web      run systemctl try-reload-or-restart nginx.service",
                "retire   archive /var/lib/atelier/example/agents/s2 -> /var/lib/atelier/example/retired/s2.20261202T000000Z",
                "retire   run usermod --lock --expiredate 1 --shell /usr/sbin/nologin atelier-a-example_2",
            ]
        );
        f.simulate(&actions);
        assert!(
            f.plan().unwrap().is_empty(),
            "a retired identity stays retired"
        );

        // The site comes back: a new ordinal, never 2 again.
        f.redeclare(&["blog", "shop"]);
        let actions = f.plan().unwrap();
        let text = lines(&actions).join("\n");
        assert!(
            text.contains("--comment atelier site shop atelier-a-example_3"),
            "{text}"
        );
        assert!(
            !text.contains("useradd --system --gid atelier-example --groups atelier-a-example_2"),
            "{text}"
        );
    }

    /// Preproduction turned off: its vhosts and enabling links go, the web server is tested and
    /// reloaded, and a second plan finds nothing to do. A file there that is not ours stays.
    #[test]
    fn a_withdrawn_preproduction_stops_being_served() {
        let mut f = Fixture::new(&["blog", "shop"]);
        f.converge();
        let layout = Layout::new(&f.decl);
        let vhost = |slug: &str| {
            let path = layout.site_vhost_path(slug, Surface::Preprod);
            (
                path.clone(),
                layout.vhost_enabled_dir().join(path.file_name().unwrap()),
            )
        };
        let (blog, blog_link) = vhost("blog");
        let (shop, shop_link) = vhost("shop");
        assert!(f.host.entries.contains_key(&blog) && f.host.entries.contains_key(&blog_link));
        f.host.entries.get_mut(&shop).unwrap().content = Some(b"server { }\n".to_vec());
        f.decl.serving.preprod.enabled = false;
        let actions = f.plan().unwrap();
        let unlinked = |path: &Path| format!("artifact unlink {}", path.display());
        let text = lines(&actions);
        assert_eq!(
            text.iter().take(3).cloned().collect::<Vec<_>>(),
            [unlinked(&blog_link), unlinked(&blog), unlinked(&shop_link)],
            "a file that is not ours stays: {text:?}"
        );
        let argvs = argvs(&actions);
        assert_eq!(
            argvs[argvs.len() - 2..],
            ["nginx -t", "systemctl try-reload-or-restart nginx.service"],
            "{argvs:?}"
        );
        f.simulate(&actions);
        let again = f.plan().unwrap();
        assert!(again.is_empty(), "{:?}", lines(&again));
    }

    #[test]
    fn without_the_web_server_vhosts_are_written_but_nothing_is_tested_or_reloaded() {
        let mut f = Fixture::new(&["blog"]);
        f.host.web_server_present = false;
        let argvs = argvs(&f.plan().unwrap());
        assert!(
            !argvs
                .iter()
                .any(|a| a.starts_with("nginx") || a.contains("reload-or-restart")),
            "{argvs:?}"
        );
    }

    #[test]
    fn the_observer_reads_every_artifact_and_marker_but_no_credential() {
        let f = Fixture::new(&["blog"]);
        let allocation = f.allocation();
        let artifacts = f.artifacts(&allocation);
        let layout = Layout::new(&f.decl);
        let paths = observed_paths(&layout, &sites_of(&layout, &allocation), &artifacts, &[]);
        let read = |p: &Path| paths.iter().find(|(q, _)| q == p).map(|(_, r)| *r);
        for a in &artifacts {
            assert_eq!(read(&a.path), Some(true), "{}", a.path.display());
        }
        assert_eq!(read(&marker_path(&layout.sites_root())), Some(true));
        for cred in layout.credential_sources().values() {
            assert_eq!(read(cred), Some(false), "{}", cred.display());
        }
    }

    #[test]
    fn sockets_are_started_when_down_and_restarted_when_their_unit_changed() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let layout = Layout::new(&f.decl);
        let socket = "atelier-example-s1-turn.socket".to_owned();
        f.host
            .units
            .get_mut("atelier-sited@example.socket")
            .unwrap()
            .active = false;
        let path = layout.unit_path(&socket);
        f.host.entries.get_mut(&path).unwrap().content = Some(b"# hand\n".to_vec());
        let argvs = argvs(&f.plan().unwrap());
        assert_eq!(
            argvs,
            [
                "systemctl daemon-reload",
                "systemctl start atelier-sited@example.socket",
                "systemctl restart atelier-example-s1-turn.socket",
            ]
        );
    }

    /// An apply that wrote its files and stopped before their reloads (a failed config test,
    /// a kill) left them owed: the next plan finds the files right and still takes the steps.
    #[test]
    fn steps_an_earlier_apply_still_owes_are_planned_though_nothing_is_written() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        assert!(f.plan().unwrap().is_empty());
        let socket = "atelier-example-s1-turn.socket".to_owned();
        f.host.owed = crate::owed::Owed {
            daemon_reload: true,
            tmpfiles: true,
            web_reload: true,
            sockets: [socket.clone(), "atelier-example-s9-gone.socket".to_owned()].into(),
        };
        let tmpfiles = Layout::new(&f.decl).tmpfiles_path();
        let has_tmpfiles = f
            .artifacts(&f.allocation())
            .iter()
            .any(|a| a.path == tmpfiles);
        let mut expected = vec!["systemctl daemon-reload".to_owned()];
        if has_tmpfiles {
            expected.push(format!("systemd-tmpfiles --create {}", tmpfiles.display()));
        }
        expected.extend([
            // A socket no longer declared is no longer owed a restart.
            format!("systemctl restart {socket}"),
            "nginx -t".to_owned(),
            "systemctl try-reload-or-restart nginx.service".to_owned(),
        ]);
        assert_eq!(argvs(&f.plan().unwrap()), expected);
        // Without a web server nothing can be reloaded: not planned.
        f.host.web_server_present = false;
        f.host.owed = crate::owed::Owed {
            web_reload: true,
            ..crate::owed::Owed::default()
        };
        assert!(f.plan().unwrap().is_empty());
    }

    /// Taking the chat block out of the declaration takes chatd down and the CMS's vhost and
    /// token include away; chatd's database and credentials stay.
    #[test]
    fn a_withdrawn_chat_block_takes_chatd_and_its_vhost_with_it() {
        let mut f = Fixture::new(&["blog"]);
        assert!(f.decl.chat.is_some());
        // What the renderer makes of a chat block: chatd's units and the CMS's vhost.
        let (chat, units) = {
            let layout = Layout::new(&f.decl);
            let chat = ChatPaths::of(&layout);
            let units: Vec<PathBuf> = chat
                .listening
                .iter()
                .chain(&chat.services)
                .map(|unit| layout.unit_path(unit))
                .collect();
            (chat, units)
        };
        let stub = |path, kind| hashed(path, kind, "# chat\n");
        f.extra_artifacts = units
            .into_iter()
            .map(|unit| stub(unit, ArtifactKind::Unit))
            .chain([stub(chat.vhost.clone(), ArtifactKind::NginxVhost)])
            .collect();
        f.converge();
        assert!(f.plan().unwrap().is_empty());
        f.decl.chat = None;
        f.extra_artifacts.clear();
        let plan = f.plan().unwrap();
        let text = lines(&plan);
        let inst = "example";
        let expected_commands = [
            format!(
                "systemctl disable --now atelier-chatd@{inst}.socket \
                 atelier-chatd-metrics@{inst}.socket atelier-chatd-purge@{inst}.timer"
            ),
            format!(
                "systemctl stop atelier-chatd@{inst}.service atelier-chatd-purge@{inst}.service"
            ),
            "systemctl daemon-reload".to_owned(),
            "nginx -t".to_owned(),
            "systemctl try-reload-or-restart nginx.service".to_owned(),
        ];
        assert_eq!(argvs(&plan), expected_commands, "{text:#?}");
        let unlinked: Vec<&str> = text
            .iter()
            .filter_map(|line| line.strip_prefix("artifact unlink "))
            .collect();
        for unit in [
            "atelier-chatd@example.socket",
            "atelier-chatd-metrics@example.socket",
            "atelier-chatd-purge@example.timer",
            "atelier-chatd@example.service",
            "atelier-chatd-purge@example.service",
        ] {
            assert!(
                unlinked.contains(&format!("/etc/systemd/system/{unit}").as_str()),
                "{unit}: {text:#?}"
            );
        }
        for path in [&chat.include, &chat.vhost, chat.link.as_ref().unwrap()] {
            assert!(unlinked.contains(&path.to_str().unwrap()), "{text:#?}");
        }
        // The credentials and chatd's data are left.
        assert!(
            !text.iter().any(|line| line.contains("credentials")),
            "{text:#?}"
        );
        // Done, nothing more is planned.
        f.simulate(&plan);
        assert!(f.plan().unwrap().is_empty());
    }

    /// A preview user taken out of the declaration loses access at the next apply, though the
    /// user who replaces them still has no password file: the file keeps whom it can.
    #[test]
    fn a_preview_login_no_longer_declared_is_revoked_while_another_is_awaited() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let htpasswd = Layout::new(&f.decl).htpasswd_path();
        assert_eq!(
            f.host.entries[&htpasswd].content.as_deref(),
            Some(&b"preview:$2y$12$hash\n"[..])
        );
        let editor = PathBuf::from("/etc/atelier/example/credentials/EDITOR_PASSWORD");
        f.decl.serving.preprod.auth.users[0] = atelier_layout::declaration::AuthUser {
            name: "editor".into(),
            password_file: editor.clone(),
        };
        let plan = f.plan().unwrap();
        let text = lines(&plan);
        assert!(
            text.contains(&format!(
                "secret   rewrite {} root:www-data 0640 (drift: stale)",
                htpasswd.display()
            )),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|l| l.contains(&format!("awaiting operator file {}", editor.display()))),
            "{text:#?}"
        );
        f.simulate(&plan);
        assert_eq!(f.host.entries[&htpasswd].content.as_deref(), Some(&b""[..]));
        // Nothing more until the editor's password file is there; then it comes in.
        let text = lines(&f.plan().unwrap()).join("\n");
        assert!(!text.contains("htpasswd"), "{text}");
        let seen = f.observed(ObservedKind::File, "root", "root", 0o600, None);
        f.host.entries.insert(
            editor,
            Observed {
                mtime_ns: 5,
                changed_ns: 5,
                ..seen
            },
        );
        let plan = f.plan().unwrap();
        f.simulate(&plan);
        assert_eq!(
            f.host.entries[&htpasswd].content.as_deref(),
            Some(&b"editor:$2y$12$hash\n"[..])
        );
    }

    /// With no user declared the password file is the operator's (`auth.htpasswd`): whatever
    /// logins it holds stay from the first apply on, the observer never reads it, and only its
    /// owner and mode are the plan's.
    #[test]
    fn an_operators_password_file_keeps_its_logins_when_no_user_is_declared() {
        let file = PathBuf::from("/etc/nginx/preview.htpasswd");
        let logins = b"alice:$apr1$salt$hash\nbob:$2y$05$hash\n".to_vec();
        let shown = file.display();
        let metadata = format!("secret   metadata {shown} root:www-data 0640");
        let awaited = format!("secret   awaiting operator file {shown} root:www-data 0640");
        type Case<'a> = (&'a str, Option<(&'a str, &'a str, u32)>, Vec<String>);
        let cases: [Case<'_>; 4] = [
            (
                "owned as the matrix says",
                Some(("root", "www-data", 0o640)),
                vec![],
            ),
            (
                "readable by everyone",
                Some(("root", "www-data", 0o644)),
                vec![metadata.clone()],
            ),
            (
                "out of the web server's group",
                Some(("root", "root", 0o600)),
                vec![metadata],
            ),
            ("not there yet", None, vec![awaited]),
        ];
        for (name, seen, expected) in cases {
            let mut f = Fixture::new(&["blog"]);
            f.decl.serving.preprod.auth.users.clear();
            f.decl.serving.preprod.auth.htpasswd = Some(file.clone());
            if let Some((owner, group, mode)) = seen {
                let seen = f.observed(ObservedKind::File, owner, group, mode, Some(logins.clone()));
                f.host.entries.insert(file.clone(), seen);
            }
            let plan = f.plan().unwrap();
            let about: Vec<String> = lines(&plan)
                .into_iter()
                .filter(|l| l.contains(&shown.to_string()))
                .collect();
            assert_eq!(about, expected, "{name}");
            assert!(
                !plan.iter().any(|a| matches!(
                    a,
                    Action::File {
                        content: Content::Htpasswd(_),
                        ..
                    }
                )),
                "{name}: {:#?}",
                lines(&plan)
            );
            f.simulate(&plan);
            if seen.is_some() {
                assert_eq!(
                    f.host.entries[&file].content.as_deref(),
                    Some(&logins[..]),
                    "{name}: the logins stay"
                );
                let again = lines(&f.plan().unwrap());
                assert!(
                    !again.iter().any(|l| l.contains(&shown.to_string())),
                    "{name}: a second apply: {again:#?}"
                );
            }
            assert!(f.looks_at_unread(&file), "{name}: looked at, never read");
        }
    }

    /// An audit root made by an earlier release is root's: the next apply gives it to the
    /// service user, which rotates its log there (a rename in the folder), then leaves it be.
    #[test]
    fn an_audit_root_of_roots_is_given_to_the_service_user() {
        for (name, owner, mode, changes) in [
            (
                "root's, as earlier releases made it",
                "root",
                0o750,
                "owner",
            ),
            ("root's and open to all", "root", 0o755, "owner, mode"),
            (
                "the service user's, open to all",
                "atelier-example",
                0o755,
                "mode",
            ),
        ] {
            let mut f = Fixture::new(&["blog"]);
            f.converge();
            let audit = Layout::new(&f.decl).audit_root();
            let uid = f.uid(owner);
            let seen = f.host.entries.get_mut(&audit).unwrap();
            (seen.uid, seen.mode) = (uid, mode);
            let plan = f.plan().unwrap();
            assert_eq!(
                lines(&plan),
                [format!(
                    "tree     dir {} atelier-example:atelier-example 0750 ({changes})",
                    audit.display()
                )],
                "{name}"
            );
            f.simulate(&plan);
            let plan = f.plan().unwrap();
            assert!(plan.is_empty(), "{name}: {:#?}", lines(&plan));
        }
    }

    /// A removed site's vhost file that a declared site renders now stays, with its enabling
    /// link: removed `shop`'s preproduction vhost is `shop-pre`'s production one, and removed
    /// `shop-pre`'s production vhost is `shop`'s preproduction one.
    #[test]
    fn a_removed_sites_vhost_that_a_declared_site_renders_stays() {
        for (name, before, after, gone, kept) in [
            (
                "shop removed, shop-pre declared",
                "shop",
                "shop-pre",
                "atelier-example-shop.conf",
                "atelier-example-shop-pre.conf",
            ),
            (
                "shop-pre removed, shop declared",
                "shop-pre",
                "shop",
                "atelier-example-shop-pre-pre.conf",
                "atelier-example-shop-pre.conf",
            ),
        ] {
            let mut f = Fixture::new(&[before]);
            f.converge();
            f.redeclare(&[after]);
            let plan = f.plan().unwrap();
            let text = lines(&plan);
            let layout = Layout::new(&f.decl);
            let dirs = [layout.vhost_dir(), layout.vhost_enabled_dir()];
            for dir in &dirs {
                let unlink = |file: &str| format!("artifact unlink {}", dir.join(file).display());
                assert!(text.contains(&unlink(gone)), "{name}: {text:#?}");
                assert!(!text.contains(&unlink(kept)), "{name}: {text:#?}");
            }
            f.simulate(&plan);
            let link = dirs[1].join(kept);
            assert!(f.host.entries.contains_key(&link), "{name}: {text:#?}");
            let plan = f.plan().unwrap();
            assert!(plan.is_empty(), "{name}: {:#?}", lines(&plan));
        }
    }

    /// A site's new domain would move its default webspace: refused by name while the new
    /// place does not exist, and planned once the operator moved it there or declared the old.
    #[test]
    fn a_domain_change_that_would_strand_production_is_refused() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let (copy, old, new) = {
            let layout = Layout::new(&f.decl);
            let site = &f.decl.sites[0];
            let mut moved = site.clone();
            moved.domain = "journal.example.org".into();
            (
                layout.declaration_path(),
                layout.webspace(site),
                layout.webspace(&moved),
            )
        };
        // What the last apply kept of the declaration.
        let previous = crate::test_support::declaration_json(&["blog"]).into_bytes();
        f.host.entries.get_mut(&copy).unwrap().content = Some(previous);
        // (The fixture's own copy differs, so the plan rewrites it; nothing is refused.)
        assert!(f.plan().is_ok());
        f.decl.sites[0].domain = "journal.example.org".into();
        let refusals = f.plan().unwrap_err().refusals;
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(
            (refusals[0].subject.as_str(), refusals[0].reason),
            ("blog", "webspace_moved")
        );
        assert!(
            refusals[0]
                .message
                .contains(&format!("declare \"webspace\": \"{}\"", old.display())),
            "{}",
            refusals[0].message
        );
        // The old webspace declared: nothing moves.
        f.decl.sites[0].webspace = Some(old.clone());
        assert!(f.plan().is_ok());
        // Or the operator moved it to the new place.
        f.decl.sites[0].webspace = None;
        let seen = f.host.entries[&old].clone();
        f.host.entries.insert(new, seen);
        assert!(f.plan().is_ok());
    }

    #[test]
    fn the_preprod_password_file_is_awaited_written_and_refreshed() {
        let mut f = Fixture::new(&["blog"]);
        let text = lines(&f.plan().unwrap()).join("\n");
        assert!(
            text.contains(
                "awaiting operator file /etc/atelier/example/preprod.htpasswd root:www-data 0640"
            ),
            "{text}"
        );
        f.converge();
        let layout = Layout::new(&f.decl);
        let htpasswd = layout.htpasswd_path();
        assert_eq!(
            f.host.entries[&htpasswd].content.as_deref(),
            Some(&b"preview:$2y$12$hash\n"[..])
        );
        let password = f.decl.serving.preprod.auth.users[0].password_file.clone();
        f.host.entries.get_mut(&password).unwrap().mtime_ns = 10;
        let actions = f.plan().unwrap();
        assert_eq!(
            lines(&actions),
            ["secret   rewrite /etc/atelier/example/preprod.htpasswd root:www-data 0640 (drift: stale)"]
        );
        // The plan names the password file, never its content.
        let json = serde_json::to_string(&actions).unwrap();
        assert!(json.contains(r#""content":"htpasswd""#), "{json}");
    }

    /// A preview password is a credential: re-owned root's 0600 when it is not, awaited when
    /// it goes, even while the htpasswd made from it stays.
    #[test]
    fn preprod_password_files_are_held_as_credentials() {
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let password = f.decl.serving.preprod.auth.users[0].password_file.clone();
        let shown = password.display().to_string();
        let seen = f.host.entries.get_mut(&password).unwrap();
        (seen.mode, seen.gid) = (0o644, 33);
        assert_eq!(
            lines(&f.plan().unwrap()),
            [format!("secret   metadata {shown} root:root 0600")]
        );
        f.host.entries.remove(&password);
        let text = lines(&f.plan().unwrap()).join("\n");
        assert!(
            text.contains(&format!("awaiting operator file {shown} root:root 0600")),
            "{text}"
        );
    }

    /// A credential declared outside the credentials dir is still what a unit loads: missing,
    /// it is minted (when it is one the provisioner mints) or awaited; there, it is the
    /// operator's file, looked at but never read nor re-owned.
    #[test]
    fn credentials_outside_the_credentials_dir_are_minted_awaited_or_left_alone() {
        let file = PathBuf::from("/root/keys/credential");
        let shown = file.display().to_string();
        let created = format!("secret   create {shown} root:root 0600");
        let awaited = format!("secret   awaiting operator file {shown} root:root 0600");
        type Declare = fn(&mut Declaration, PathBuf);
        let master_key: Declare = |d, path| d.chat.as_mut().unwrap().master_key = path;
        let publication_key: Declare = |d, path| d.publication_api.key_path = Some(path);
        let secret: Declare = |d, path| {
            d.secrets.insert("ANTHROPIC_API_KEY".into(), path);
        };
        type Case<'a> = (
            &'a str,
            Declare,
            Option<ObservedKind>,
            Result<Vec<String>, &'a str>,
        );
        let cases: [Case<'_>; 5] = [
            (
                "missing master key, which the provisioner mints",
                master_key,
                None,
                Ok(vec![created]),
            ),
            (
                "missing publication key, the operator's",
                publication_key,
                None,
                Ok(vec![awaited.clone()]),
            ),
            (
                "missing secret, the operator's",
                secret,
                None,
                Ok(vec![awaited]),
            ),
            (
                "existing secret owned as the operator left it",
                secret,
                Some(ObservedKind::File),
                Ok(vec![]),
            ),
            (
                "directory where the master key is declared",
                master_key,
                Some(ObservedKind::Dir),
                Err("not_a_file"),
            ),
        ];
        for (name, declare, seen, expected) in cases {
            let mut f = Fixture::new(&["blog"]);
            f.converge();
            declare(&mut f.decl, file.clone());
            if let Some(kind) = seen {
                // The web server's and readable by all: not how the matrix holds credentials.
                let seen = f.observed(kind, "www-data", "www-data", 0o644, None);
                f.host.entries.insert(file.clone(), seen);
            }
            let about = |plan: &[Action]| -> Vec<String> {
                lines(plan)
                    .into_iter()
                    .filter(|l| l.contains(&shown))
                    .collect()
            };
            let planned = f.plan();
            match (&planned, expected) {
                (Ok(plan), Ok(expected)) => assert_eq!(about(plan), expected, "{name}"),
                (Err(err), Err(reason)) => assert_eq!(
                    err.refusals.iter().map(|r| r.reason).collect::<Vec<_>>(),
                    [reason],
                    "{name}: {err}"
                ),
                (planned, expected) => panic!("{name}: {planned:?}, expected {expected:?}"),
            }
            assert!(f.looks_at_unread(&file), "{name}: looked at, never read");
            // Once applied, a minted or an existing one is left be; a missing one still waits.
            let Ok(plan) = planned else { continue };
            f.simulate(&plan);
            let again = about(&f.plan().unwrap());
            let still = about(&plan)
                .into_iter()
                .filter(|l| l.contains("awaiting"))
                .collect::<Vec<_>>();
            assert_eq!(again, still, "{name}: a second apply");
        }
    }

    #[test]
    fn chat_credentials_are_minted_once_and_the_web_server_include_follows_its_token() {
        let mut f = Fixture::new(&["blog"]);
        let actions = f.plan().unwrap();
        let text = lines(&actions);
        let at = |line: &str| {
            text.iter()
                .position(|l| l == line)
                .unwrap_or_else(|| panic!("{line} not planned: {text:#?}"))
        };
        let token = at(
            "secret   create /etc/atelier/example/credentials/CHATD_SERVICE_TOKEN root:root 0600",
        );
        let key =
            at("secret   create /etc/atelier/example/credentials/CHATD_MASTER_KEY root:root 0600");
        let include =
            at("secret   create /etc/atelier/example/chat-proxy-auth.conf root:root 0600");
        // The include is written from the token, so after it.
        assert!(token < include && key < include, "{text:#?}");
        f.converge();
        assert!(f.plan().unwrap().is_empty());
        // A new token (an apply minted it after the operator deleted it) rewrites the include,
        // which the web server then takes in, and leaves the key alone.
        let layout = Layout::new(&f.decl);
        let token = layout.credentials_dir().join(CHATD_SERVICE_TOKEN);
        let chatd = atelier_layout::names::chatd_service_unit(layout.instance());
        f.host.entries.get_mut(&token).unwrap().mtime_ns = i128::MAX / 2;
        let actions = f.plan().unwrap();
        let rewrite =
            "secret   rewrite /etc/atelier/example/chat-proxy-auth.conf root:root 0600 (drift: stale)";
        let reload = [
            "web      run nginx -t",
            "web      run systemctl try-reload-or-restart nginx.service",
        ];
        assert_eq!(lines(&actions), [&[rewrite][..], &reload[..]].concat());
        // The plan names where the token is, never the token.
        let json = serde_json::to_string(&actions).unwrap();
        assert!(json.contains(r#""content":"chat_proxy_auth""#), "{json}");
        assert!(!json.contains("minted"), "{json}");

        // The token deleted while chatd runs: one apply mints it, writes it into the include,
        // reloads the web server and restarts chatd, so both sides hold the same token.
        let mut f = Fixture::new(&["blog"]);
        f.converge();
        let running = crate::host::ServiceState {
            started_ns: Some(1),
            groups: None,
        };
        f.host.services.insert(chatd.clone(), running);
        assert!(f.plan().unwrap().is_empty());
        f.host.entries.remove(&token);
        assert_eq!(
            lines(&f.plan().unwrap()),
            [
                "secret   create /etc/atelier/example/credentials/CHATD_SERVICE_TOKEN root:root 0600",
                rewrite,
                &format!("service  run systemctl try-restart {chatd}"),
                reload[0],
                reload[1],
            ]
        );
    }

    #[test]
    fn incoherent_plans_are_refused() {
        let reload = Action::Exec {
            step: ExecStep::WebReload,
            argv: vec!["systemctl".into(), "reload".into(), "nginx".into()],
        };
        assert_eq!(
            assert_coherent(&[reload]).unwrap_err().refusals[0].reason,
            "reload_untested"
        );
        let backwards = [
            Action::Exec {
                step: ExecStep::DaemonReload,
                argv: vec!["systemctl".into()],
            },
            Action::Account {
                step: AccountStep::AddGroup,
                name: "g".into(),
                argv: vec!["groupadd".into()],
            },
        ];
        assert_eq!(
            assert_coherent(&backwards).unwrap_err().refusals[0].reason,
            "phase_order"
        );
        let delete = Action::Account {
            step: AccountStep::Lock,
            name: "u".into(),
            argv: vec!["userdel".into(), "u".into()],
        };
        assert_eq!(
            assert_coherent(&[delete]).unwrap_err().refusals[0].reason,
            "destructive_command"
        );
    }

    #[test]
    fn json_names_every_field_and_never_the_bytes() {
        let f = Fixture::new(&["blog"]);
        let json = serde_json::to_string(&f.plan().unwrap()).unwrap();
        assert!(json.contains(r#""action":"file""#), "{json}");
        assert!(json.contains(r#""content":"literal""#), "{json}");
        assert!(json.contains(r#""mode":"2750""#), "{json}");
        assert!(!json.contains("Type=notify"), "{json}");
    }

    /// A vhost with a stand-in (a letsencrypt site's) is written in its waiting form while its
    /// certificate is missing, the wait is named (and `check` classes it) without refusing
    /// apply, and the certificate's arrival brings the vhost proper and a tested reload.
    #[test]
    fn a_vhost_waits_for_its_certificate_then_takes_it_in() {
        let mut f = Fixture::new(&["blog"]);
        let vhost = Layout::new(&f.decl).vhost_dir().join("tls.conf");
        let cert = PathBuf::from("/etc/letsencrypt/live/blog.example.org/fullchain.pem");
        let key = PathBuf::from("/etc/letsencrypt/live/blog.example.org/privkey.pem");
        let ready = Artifact::new(
            vhost.clone(),
            INST,
            ArtifactKind::NginxVhost,
            CommentStyle::Hash,
            ("root", "root", 0o644),
            "server { listen 443 ssl; }\n",
        )
        .with_stand_in(
            INST,
            CommentStyle::Hash,
            vec![cert.clone(), key.clone()],
            "server { listen 80; }\n",
        );
        let waiting = ready.stand_in.clone().unwrap().bytes;
        f.extra_artifacts.push(ready.clone());
        let layout = Layout::new(&f.decl);
        let allocation = f.allocation();
        let observed = observed_paths(
            &layout,
            &sites_of(&layout, &allocation),
            std::slice::from_ref(&ready),
            &[],
        );
        assert!(
            observed.contains(&(key.clone(), false)),
            "a key is observed, never read"
        );

        f.converge();
        assert_eq!(
            f.host.entries[&vhost].content.as_deref(),
            Some(&waiting[..])
        );
        let actions = f.plan().unwrap();
        assert_eq!(
            lines(&actions),
            [format!(
                "web      awaiting certificate {} (its site serves only the ACME challenge until \
                 certbot puts it there)",
                cert.display()
            )]
        );
        assert!(!actions[0].changes_host());
        assert_eq!(
            actions[0].holdback(),
            None,
            "an awaited certificate does not refuse apply"
        );
        let report = crate::check::check(&actions);
        assert_eq!(report.items[0].class, AWAITING_CERTIFICATE);
        assert_eq!(report.items[0].subject, cert.display().to_string());

        for path in [&cert, &key] {
            let seen = f.observed(ObservedKind::Symlink, "root", "root", 0o777, None);
            f.host.entries.insert(path.clone(), seen);
        }
        let actions = f.plan().unwrap();
        assert_eq!(
            lines(&actions),
            [
                format!(
                    "artifact rewrite {} root:root 0644 (drift: stale)",
                    vhost.display()
                ),
                "web      run nginx -t".to_owned(),
                "web      run systemctl try-reload-or-restart nginx.service".to_owned(),
            ]
        );
        f.simulate(&actions);
        assert_eq!(
            f.host.entries[&vhost].content.as_deref(),
            Some(&ready.bytes[..])
        );
        assert!(f.plan().unwrap().is_empty());
    }
}
