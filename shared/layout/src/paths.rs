//! The one derivation of every path, owner, group and mode of an instance from its validated
//! declaration and its sites' ordinals. The mode matrix is a table ([`MODES`]), not literals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::declaration::{Declaration, Site, TlsMode, WebServer};
use crate::names::{self, Door, InstanceName, SiteOrdinal};

/// Where instances keep their declarations and generated configuration.
pub const CONFIG_BASE: &str = "/etc/atelier";
/// Where instances keep their state.
pub const STATE_BASE: &str = "/var/lib/atelier";
/// Where instances' sockets live. Never declared: every door unit masks `/run`, which is what
/// hides sited's socket and every other site's gate from a run.
pub const RUNTIME_BASE: &str = "/run/atelier";
/// Where the provisioner notes what an apply still owes the host, one file per instance. Below
/// `/run`: a boot pays every reload and restart anyway.
pub const PROVISION_OWED_BASE: &str = "/run/atelier-provision";
/// Where site webspaces live by default: `<SERVED_BASE>/<inst>/<domain>`.
pub const SERVED_BASE: &str = "/srv/atelier";
/// Where unit files are written by default.
pub const UNIT_DIR: &str = "/etc/systemd/system";
/// Where the polkit rule is written by default.
pub const POLKIT_RULES_DIR: &str = "/etc/polkit-1/rules.d";
/// Where the tmpfiles.d file is written by default.
pub const TMPFILES_DIR: &str = "/etc/tmpfiles.d";
/// Where Atelier's binaries are installed by default: where the Debian package puts them.
pub const BIN_DIR: &str = "/usr/bin";
/// Where the site templates (`templates/<id>/`) are installed by default: where the Debian
/// package puts them.
pub const TEMPLATES_DIR: &str = "/usr/share/atelier/templates";
/// systemctl, unless the declaration says otherwise.
pub const SYSTEMCTL_BIN: &str = "/usr/bin/systemctl";
/// Where a door unit sees its own gate socket (bound read-only from the site's egress dir).
pub const EGRESS_MOUNT: &str = "/run/atelier-egress";

/// The declaration's file name in the config dir.
pub const DECLARATION_FILE: &str = "instance.json";
/// sited's generated environment file.
pub const ENV_FILE: &str = "env";
/// The site table sited reads webspaces from.
pub const SITE_TABLE_FILE: &str = "sites.json";
/// The engine's pairing fragment (names the token's file, never the token).
pub const ENGINE_FRAGMENT_FILE: &str = "engine.env.fragment";
/// The folder of the gates' per-door plans.
pub const GATE_PLAN_DIR: &str = "gate";
/// The root-only folder of credential files, the sources of `LoadCredential=`.
pub const CREDENTIALS_DIR: &str = "credentials";
/// The generated preproduction password file.
pub const HTPASSWD_FILE: &str = "preprod.htpasswd";
/// The audit log inside the audit root.
pub const AUDIT_FILE: &str = "audit.jsonl";

/// The name of the audit log's segment number `n` (the file renamed once it reached its size;
/// numbers count up, so the highest is the newest).
pub fn audit_segment_file(n: u64) -> String {
    format!("{AUDIT_FILE}.{n}")
}

/// The segment number a file name in the audit root stands for, if it is a segment's.
pub fn audit_segment_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(AUDIT_FILE)?.strip_prefix('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
/// sited's socket inside the runtime dir.
pub const SITED_SOCKET_FILE: &str = "sited.sock";
/// The turn door's system gitconfig inside the agents root.
pub const TURN_GITCONFIG_FILE: &str = "turn.gitconfig";
/// The release stores' parent inside a webspace.
pub const RELEASES_DIR: &str = ".releases";
/// The marker naming the owning instance in every root Atelier creates.
pub const INSTANCE_MARKER_FILE: &str = ".atelier_instance";
/// certbot's folder: `live/<domain>/` holds each certificate it obtained, and it runs every
/// executable in `renewal-hooks/deploy/` after it obtains or renews one.
pub const LETSENCRYPT_DIR: &str = "/etc/letsencrypt";
/// The instance's ACME http-01 webroot inside its state dir (`certbot certonly --webroot -w`).
pub const ACME_WEBROOT_DIR: &str = "acme";
/// Where below a webroot (and below a domain's URL) ACME http-01 challenge files are served.
pub const ACME_CHALLENGE_PATH: &str = ".well-known/acme-challenge";

/// The service token sited and the engine share; always a credential.
pub const SERVICE_TOKEN: &str = "SERVICE_TOKEN";
/// The Publication API key's credential id, when `publication_api.key_path` is declared.
pub const PUBLICATION_API_KEY: &str = "PUBLICATION_API_KEY";
/// The Anthropic key, when the declaration names it: the turn door's gate adds it to each
/// relayed request to the Anthropic API (an unconfined development turn's child gets it).
pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
/// The OpenAI-compatible model's key, when the declaration names it: the turn door's gate adds
/// it to each relayed request to that API.
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// The keys the turn door's gate alone loads and adds, never sited (whose turns' agents could
/// read them) — see [`Layout::model_relay`].
pub const MODEL_KEYS: [&str; 2] = [ANTHROPIC_API_KEY, OPENAI_API_KEY];
/// opencode's provider credentials (`K=V,K=V`), for an unconfined development turn only.
pub const OPENCODE_ENV: &str = "OPENCODE_ENV";
/// pi's provider credentials (`K=V,K=V`), for an unconfined development turn only.
pub const PI_ENV: &str = "PI_ENV";
/// atelier-agent's provider key, for an unconfined development turn only.
pub const ATELIER_AGENT_API_KEY: &str = "ATELIER_AGENT_API_KEY";
/// The credentials sited would hand to an agent itself, which only an unconfined development
/// turn is given: a declaration (whose turns are confined) refuses them in `secrets`.
pub const AGENT_HELD_KEYS: [&str; 3] = [OPENCODE_ENV, PI_ENV, ATELIER_AGENT_API_KEY];

/// The token the CMS's web server shows chatd, minted by the provisioner.
pub const CHATD_SERVICE_TOKEN: &str = "CHATD_SERVICE_TOKEN";
/// chatd's master key's credential id (the file is declared as `chat.master_key`).
pub const CHATD_MASTER_KEY: &str = "CHATD_MASTER_KEY";
/// chatd's socket in the runtime dir.
pub const CHATD_SOCKET_FILE: &str = "chatd.sock";
/// The web server's include that shows chatd the service token (root's alone).
pub const CHAT_PROXY_AUTH_FILE: &str = "chat-proxy-auth.conf";

/// Every door run's memory cap (`MemoryMax=`).
pub const RUN_MEMORY_MAX: &str = "2G";
/// Every door run's CPU cap (`CPUQuota=`).
pub const RUN_CPU_QUOTA: &str = "200%";
/// Every door run's task cap (`TasksMax=`).
pub const RUN_TASKS_MAX: u32 = 512;
/// A turn's ceiling unless declared.
pub const TURN_TIMEOUT_MS: u64 = 1_200_000; // 20 minutes
/// An install's ceiling unless declared.
pub const INSTALL_TIMEOUT_MS: u64 = 300_000; // 5 minutes
/// A build's ceiling unless declared.
pub const BUILD_TIMEOUT_MS: u64 = 300_000; // 5 minutes
/// A git command's ceiling unless declared.
pub const GIT_TIMEOUT_MS: u64 = 30_000; // 30 seconds
/// The shortest ceiling a turn, an install, a build or a git command may be given: one under a
/// second is a typo for seconds, not a ceiling anyone means.
pub const MIN_TIMEOUT_MS: u64 = 1000;
/// The longest: a week. Far above any run anyone waits for; a larger number is a typo of
/// units, and past what systemd reads as a time span, a door's `RuntimeMaxSec=` derived from
/// it would be ignored (with a line in the journal), leaving the door without a ceiling.
pub const MAX_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;
/// The oldest PID 1 that loads every directive a door unit needs (`PrivateIPC=` is 248's).
pub const SYSTEMD_FLOOR: u32 = 248;
/// The first PID 1 that knows `PrivatePIDs=`, rendered only from this release on.
pub const PRIVATE_PIDS_SINCE: u32 = 257;
/// How long past a door's ceiling PID 1 lets a run live, for the shim to send its exit record.
pub const RUNTIME_GRACE_SECS: u64 = 15;
// A floor at or above the release that brings PrivatePIDs= would render it on every host.
const _: () = assert!(PRIVATE_PIDS_SINCE > SYSTEMD_FLOOR);

/// The instance's runtime dir: `/run/atelier/<inst>`.
pub fn runtime_dir(inst: &InstanceName) -> PathBuf {
    Path::new(RUNTIME_BASE).join(inst.as_str())
}

/// `/run/atelier-provision/<inst>.owed`: the follow-up steps an apply of `inst` still owes.
pub fn provision_owed_path(inst: &InstanceName) -> PathBuf {
    Path::new(PROVISION_OWED_BASE).join(format!("{inst}.owed"))
}

/// `/run/atelier-provision/<inst>.lock`: held by the one `apply` or `remove` of `inst` running.
pub fn provision_lock_path(inst: &InstanceName) -> PathBuf {
    Path::new(PROVISION_OWED_BASE).join(format!("{inst}.lock"))
}

/// sited's socket: `/run/atelier/<inst>/sited.sock`.
pub fn sited_socket_path(inst: &InstanceName) -> PathBuf {
    runtime_dir(inst).join(SITED_SOCKET_FILE)
}

/// The metrics sockets' dir: `/run/atelier/<inst>/metrics`.
pub fn metrics_dir(inst: &InstanceName) -> PathBuf {
    runtime_dir(inst).join("metrics")
}

/// Site `k`'s door socket: `/run/atelier/<inst>/s<k>-<door>.sock`.
pub fn door_socket_path(inst: &InstanceName, k: SiteOrdinal, door: Door) -> PathBuf {
    runtime_dir(inst).join(format!("s{k}-{door}.sock"))
}

/// Site `k`'s egress dir: `/run/atelier/<inst>/egress/s<k>`.
pub fn egress_dir(inst: &InstanceName, k: SiteOrdinal) -> PathBuf {
    runtime_dir(inst).join("egress").join(format!("s{k}"))
}

/// Site `k`'s gate socket for `door`, for a door with a way out:
/// `/run/atelier/<inst>/egress/s<k>/<door>.sock`.
pub fn gate_socket_path(inst: &InstanceName, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
    door.has_way_out()
        .then(|| egress_dir(inst, k).join(names::gate_socket_file(door)))
}

/// Site `k`'s gate decisions socket, outside the egress dir a run sees:
/// `/run/atelier/<inst>/gate-s<k>/decisions.sock`.
pub fn gate_decisions_socket_path(inst: &InstanceName, k: SiteOrdinal) -> PathBuf {
    runtime_dir(inst)
        .join(format!("gate-s{k}"))
        .join(names::GATE_DECISIONS_SOCKET_FILE)
}

/// Site `k`'s MCP relay socket, for a door with the relay (the turn door):
/// `/run/atelier/<inst>/egress/s<k>/mcp.sock`.
pub fn gate_mcp_socket_path(inst: &InstanceName, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
    door.has_mcp()
        .then(|| egress_dir(inst, k).join(names::GATE_MCP_SOCKET_FILE))
}

/// Where a door unit sees its gate socket: `/run/atelier-egress/<door>.sock`.
pub fn gate_socket_in_unit(door: Door) -> Option<PathBuf> {
    door.has_way_out()
        .then(|| Path::new(EGRESS_MOUNT).join(names::gate_socket_file(door)))
}

/// Where a door unit with the relay sees its socket: `/run/atelier-egress/mcp.sock`.
pub fn gate_mcp_socket_in_unit(door: Door) -> Option<PathBuf> {
    door.has_mcp()
        .then(|| Path::new(EGRESS_MOUNT).join(names::GATE_MCP_SOCKET_FILE))
}

/// Site `k`'s agent state dir below the agents root: `<agents root>/s<k>`.
pub fn agent_site_dir(agents_root: &Path, k: SiteOrdinal) -> PathBuf {
    agents_root.join(format!("s{k}"))
}

/// A door's HOME below the agents root, `<agents root>/s<k>/<door>`; the git door has none.
pub fn agent_home(agents_root: &Path, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
    match door {
        Door::Turn => Some(turn_home(agents_root, k)),
        Door::Build => Some(agent_site_dir(agents_root, k).join(door.as_str())),
        Door::Git => None,
    }
}

/// The turn door's HOME below the agents root: `<agents root>/s<k>/turn`.
pub fn turn_home(agents_root: &Path, k: SiteOrdinal) -> PathBuf {
    agent_site_dir(agents_root, k).join(Door::Turn.as_str())
}

/// The turn HOME's `stated/` below the agents root: `<agents root>/s<k>/turn/stated`, the one
/// directory there sited writes.
pub fn turn_stated_dir(agents_root: &Path, k: SiteOrdinal) -> PathBuf {
    turn_home(agents_root, k).join(TURN_HOME_STATED_DIR)
}

/// The turn door's system gitconfig below the agents root: `<agents root>/turn.gitconfig`.
pub fn turn_gitconfig_path(agents_root: &Path) -> PathBuf {
    agents_root.join(TURN_GITCONFIG_FILE)
}

/// The turn HOME's one writable directory, the identity's: the agent CLI's state (its session
/// transcripts, which a resumed turn reads back) and caches.
pub const TURN_HOME_STATE_DIR: &str = "state";
/// The turn HOME's configuration directory: root's, holding only [`TURN_HOME_OPENCODE_DIR`],
/// so nothing a turn writes is configuration a later turn reads.
pub const TURN_HOME_CONFIG_DIR: &str = ".config";
/// opencode's global configuration directory inside `.config/`: root's and empty. opencode
/// makes it at every start and cannot run where it cannot; made by the provisioner, it exists
/// and holds nothing opencode would load.
pub const TURN_HOME_OPENCODE_DIR: &str = "opencode";
/// The turn HOME's git configuration, root's (git reads `~/.gitconfig` as global).
pub const TURN_HOME_GITCONFIG: &str = ".gitconfig";
/// The daemon's statement of the agent CLI's configuration for the next turn (a models file, a
/// brief): written by sited (the service user) before each turn, readable by the site's
/// identity through its private group, writable by nobody else, so nothing a turn writes is
/// configuration a turn loads.
pub const TURN_HOME_STATED_DIR: &str = "stated";

/// Workspace directories the turn door masks when they exist (`InaccessiblePaths=-…`): an agent
/// CLI's project configuration that no switch of the CLI closes. opencode runs the plugins in
/// a project's `.opencode/` even when told to load no project configuration (measured on
/// 1.18.33), so a turn never sees the directory at all; a turn that makes one writes to it
/// unseen by every later turn.
pub const TURN_MASKED_WORKSPACE_DIRS: [&str; 1] = [".opencode"];

/// The host's system folders a door shows, read-only, in its own root (`RootDirectory=`):
/// programs and libraries, configuration, add-on software. Nothing else of the host is there
/// unless a door binds it in: a run sees what it is given, not the host minus what was masked.
/// `/opt` may be absent.
pub const DOOR_SYSTEM_DIRS: [(&str, bool); 3] = [("/usr", true), ("/etc", true), ("/opt", false)];

/// The links a door root holds beside the system folders, as a merged-`/usr` host has them:
/// `#!/bin/sh`, `/lib64`'s dynamic loader and every path a program has built in resolve.
pub const DOOR_ROOT_LINKS: [(&str, &str); 4] = [
    ("bin", "usr/bin"),
    ("sbin", "usr/sbin"),
    ("lib", "usr/lib"),
    ("lib64", "usr/lib64"),
];

/// The door root, beside the agents' state root in the instance's state dir: sited, which is
/// told the one, knows the other.
pub fn door_root_beside(agents_root: &Path) -> PathBuf {
    agents_root.with_file_name("door-root")
}

/// sysfs as a door sees it, which every door masks whole: it names the host's devices, its
/// interfaces and every unit's cgroup.
pub const SYSFS: &str = "/sys";

/// The folders of the system view every door masks (a host may lack any): where the host keeps
/// what names every site of every instance on it. A run of one site must learn no other's name
/// or domain, as the sites root shows it none; no run needs these. Atelier's configuration
/// (every instance's declaration copy is readable by all), the web servers' vhosts (a site's
/// domains and paths), certbot's certificates and renewal settings (named by domain), and
/// systemd's units (a door's unit holds its site's workspace). A declared vhost or unit folder
/// must be under one of them or out of the system view.
pub const DOOR_HIDDEN_SYSTEM_DIRS: [&str; 5] = [
    CONFIG_BASE,
    "/etc/nginx",
    "/etc/apache2",
    "/etc/letsencrypt",
    "/etc/systemd",
];

/// The folders `ProtectHome=yes` leaves nothing of in sited's, the gate's and chatd's units
/// (`units/*.service.in`): a tree one of them must reach cannot be below them.
pub const PROTECTED_HOME_DIRS: [&str; 3] = ["/home", "/root", "/run/user"];

/// The folder of [`PROTECTED_HOME_DIRS`] that `path` is or is below, if any.
pub fn protected_home_dir(path: &Path) -> Option<&'static str> {
    PROTECTED_HOME_DIRS
        .into_iter()
        .find(|dir| path.starts_with(dir))
}

/// Whether `path` is under a folder of [`DOOR_HIDDEN_SYSTEM_DIRS`], which no door shows.
pub fn door_hides(path: &Path) -> bool {
    DOOR_HIDDEN_SYSTEM_DIRS
        .iter()
        .any(|dir| path.starts_with(dir))
}

/// The host paths of what every door masks in `door_root`, for an instance whose configuration
/// is `config_dir`: [`DOOR_HIDDEN_SYSTEM_DIRS`], and the configuration when it is declared
/// outside them (when it is outside the system view too, the root does not hold it and the mask
/// does nothing). Any may be absent, so `InaccessiblePaths=` takes each with a `-`.
pub fn door_hidden_masks(door_root: &Path, config_dir: &Path) -> Vec<PathBuf> {
    let own_config = (!door_hides(config_dir)).then_some(config_dir);
    DOOR_HIDDEN_SYSTEM_DIRS
        .iter()
        .map(Path::new)
        .chain(own_config)
        .map(|dir| in_door_root(door_root, dir))
        .collect()
}

/// [`DOOR_SYSTEM_DIRS`] as `BindReadOnlyPaths=` takes them: `-` before one that may be absent.
pub fn door_system_binds() -> Vec<String> {
    DOOR_SYSTEM_DIRS
        .iter()
        .map(|(dir, required)| format!("{}{dir}", if *required { "" } else { "-" }))
        .collect()
}

/// The host's path of `inside` (absolute, as a door sees it) in `door_root`: what
/// `ReadOnlyPaths=` and `InaccessiblePaths=` name, since systemd reads them as host paths even
/// with `RootDirectory=` (and drops any outside the root).
pub fn in_door_root(door_root: &Path, inside: &Path) -> PathBuf {
    door_root.join(inside.strip_prefix("/").unwrap_or(inside))
}

/// Whether a door shows `path` through [`DOOR_SYSTEM_DIRS`]: an agent CLI must be installed
/// there for a turn to run it. A path with a `..` component is never shown (it may lead out).
pub fn in_door_system_view(path: &Path) -> bool {
    let climbs = path
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    !climbs
        && DOOR_SYSTEM_DIRS
            .iter()
            .any(|(dir, _)| path.starts_with(dir) && path != Path::new(dir))
}

/// The keys the turn unit fixes in its environment beside HOME, in [`turn_home_env`]'s order;
/// the shim lets no spec set them on the turn door.
pub const TURN_DOOR_FIXED_ENV_KEYS: [&str; 5] = [
    "XDG_CONFIG_HOME",
    "CLAUDE_CONFIG_DIR",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
];

/// The values of [`TURN_DOOR_FIXED_ENV_KEYS`] below the turn HOME `home`: configuration in the
/// empty root-owned directory, the CLI's own state and caches in the writable one.
pub fn turn_home_env(home: &Path) -> [(&'static str, PathBuf); 5] {
    let state = home.join(TURN_HOME_STATE_DIR);
    let values = [
        home.join(TURN_HOME_CONFIG_DIR),
        state.join("claude"),
        state.join("data"),
        state.join("state"),
        state.join("cache"),
    ];
    std::array::from_fn(|i| (TURN_DOOR_FIXED_ENV_KEYS[i], values[i].clone()))
}

/// A site's workspace below the sites root: `<sites root>/<slug>`.
pub fn site_workspace(sites_root: &Path, slug: &str) -> PathBuf {
    sites_root.join(slug)
}

/// The build door's ceiling: one run installs and then builds, each step within its own limit,
/// so the run may take both.
pub fn build_door_ceiling_ms(install_timeout_ms: u64, build_timeout_ms: u64) -> u64 {
    install_timeout_ms.saturating_add(build_timeout_ms)
}

/// The `RuntimeMaxSec=` of a door whose ceiling is `ceiling_ms`: the ceiling rounded up to
/// whole seconds, plus [`RUNTIME_GRACE_SECS`].
pub fn runtime_max_sec(ceiling_ms: u64) -> u64 {
    ceiling_ms.div_ceil(1000) + RUNTIME_GRACE_SECS
}

/// A served surface of a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// Preproduction, served at `<prefix>.<domain>`.
    Preprod,
    /// Production, served at the domain.
    Prod,
}

// === impl Surface ===

impl Surface {
    /// Both surfaces.
    pub const ALL: [Surface; 2] = [Surface::Preprod, Surface::Prod];

    /// The surface's directory name in a webspace: `pre` or `web`.
    pub fn dir_name(self) -> &'static str {
        match self {
            Surface::Preprod => "pre",
            Surface::Prod => "web",
        }
    }
}

/// Who owns an entry of the mode matrix, before it is resolved to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    /// `root`.
    Root,
    /// The service user `atelier-<inst>`.
    ServiceUser,
    /// The instance group `atelier-<inst>`.
    ServiceGroup,
    /// The engine's group.
    EngineGroup,
    /// The web server's group.
    WebGroup,
    /// The declared monitoring group; root when none is declared.
    MonitoringGroup,
    /// The entry's site identity `atelier-a-<inst>_<k>`.
    SiteIdentity,
    /// The entry's site private group (same name as the identity).
    SitePrivateGroup,
}

/// What an entry of the mode matrix is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A unix socket, created by PID 1 from a socket unit.
    Socket,
}

/// The role of a path in the instance's tree: the row of [`MODES`] that governs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// `/etc/atelier/<inst>`.
    ConfigDir,
    /// `/etc/atelier/<inst>/credentials`.
    CredentialsDir,
    /// A credential file inside the credentials dir.
    Credential,
    /// `instance.json`.
    DeclarationFile,
    /// sited's env file.
    EnvFile,
    /// `sites.json`.
    SiteTable,
    /// `engine.env.fragment`.
    EngineFragment,
    /// The gate plans' folder.
    GatePlanDir,
    /// One site door's gate plan.
    GatePlan,
    /// The preproduction password file.
    Htpasswd,
    /// `/var/lib/atelier/<inst>`.
    StateDir,
    /// The site workspaces' root.
    SitesRoot,
    /// The audit root.
    AuditRoot,
    /// The audit log.
    AuditFile,
    /// The agents' state root.
    AgentsRoot,
    /// The root directory every door of the instance runs in: the system folders' mount points
    /// and [`DOOR_ROOT_LINKS`].
    DoorRoot,
    /// One site's agent state dir.
    AgentSiteDir,
    /// One site door's HOME (the build door's: the identity's own).
    AgentHome,
    /// The turn door's HOME: root's, holding exactly the four entries below.
    TurnHome,
    /// The turn HOME's `state/`, the identity's.
    TurnHomeState,
    /// The turn HOME's `.config/`, root's, holding only `opencode/`.
    TurnHomeConfig,
    /// The turn HOME's `.config/opencode/`, root's and empty.
    TurnHomeOpencodeConfig,
    /// The turn HOME's `.gitconfig`, root's.
    TurnHomeGitconfig,
    /// The turn HOME's `stated/`: sited's, read by the site's identity through its private group.
    TurnHomeStated,
    /// The turn door's gitconfig.
    TurnGitconfig,
    /// Where removed sites' trees are archived.
    RetiredDir,
    /// `/run/atelier/<inst>`.
    RuntimeDir,
    /// sited's socket.
    SitedSocket,
    /// A site door's socket.
    DoorSocket,
    /// `/run/atelier/<inst>/egress`.
    EgressRoot,
    /// One site's egress dir.
    EgressSiteDir,
    /// A site door's gate socket.
    GateSocket,
    /// A site's gate decisions socket (sited subscribes to its runs' egress decisions).
    GateDecisionsSocket,
    /// A site's webspace.
    Webspace,
    /// A site's release store (and its parent).
    ReleaseStore,
    /// A unit file.
    UnitFile,
    /// The tmpfiles.d file.
    TmpfilesFile,
    /// The polkit rule.
    PolkitRule,
    /// A vhost file.
    Vhost,
    /// The ACME http-01 webroot (only with `tls.mode = letsencrypt`).
    AcmeWebroot,
    /// certbot's deploy hook that applies the declaration again (only with `letsencrypt`).
    RenewalHook,
    /// chatd's socket: the web server's group connects to it.
    ChatSocket,
    /// The web server's include carrying chatd's service token.
    ChatProxyAuth,
    /// `/run/atelier/<inst>/metrics`.
    MetricsDir,
    /// A daemon's metrics socket.
    MetricsSocket,
}

/// One row of the mode matrix: a role's owner, group, mode and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeRule {
    /// The role it governs.
    pub role: Role,
    /// Its owner.
    pub owner: Principal,
    /// Its group.
    pub group: Principal,
    /// Its permission bits, including setgid where stated.
    pub mode: u32,
    /// What it is.
    pub kind: EntryKind,
}

const fn rule(
    role: Role,
    owner: Principal,
    group: Principal,
    mode: u32,
    kind: EntryKind,
) -> ModeRule {
    ModeRule {
        role,
        owner,
        group,
        mode,
        kind,
    }
}

use EntryKind::{Directory as D, File as F, Socket as S};
use Principal::{
    EngineGroup, MonitoringGroup, Root, ServiceGroup, ServiceUser, SiteIdentity, SitePrivateGroup,
    WebGroup,
};

/// The mode matrix: every role's owner, group and mode. Everything else reads it.
pub const MODES: &[ModeRule] = &[
    rule(Role::ConfigDir, Root, Root, 0o755, D),
    rule(Role::CredentialsDir, Root, Root, 0o700, D),
    rule(Role::Credential, Root, Root, 0o600, F),
    rule(Role::DeclarationFile, Root, Root, 0o644, F),
    rule(Role::EnvFile, Root, ServiceGroup, 0o640, F),
    rule(Role::SiteTable, Root, Root, 0o644, F),
    rule(Role::EngineFragment, Root, EngineGroup, 0o640, F),
    rule(Role::GatePlanDir, Root, Root, 0o755, D),
    rule(Role::GatePlan, Root, Root, 0o644, F),
    rule(Role::Htpasswd, Root, WebGroup, 0o640, F),
    rule(Role::StateDir, Root, Root, 0o755, D),
    // setgid and group-shared: sited and every site identity work in the workspaces.
    rule(Role::SitesRoot, ServiceUser, ServiceGroup, 0o2770, D),
    // sited's own: it rotates the log by renaming it to a segment and starting a new one, which
    // takes write permission on the folder (it has no capability to write past a mode).
    rule(Role::AuditRoot, ServiceUser, ServiceGroup, 0o750, D),
    rule(Role::AuditFile, ServiceUser, ServiceGroup, 0o600, F),
    rule(Role::AgentsRoot, Root, Root, 0o755, D),
    // Root's and read-only to all: PID 1 mounts each door's view inside it.
    rule(Role::DoorRoot, Root, Root, 0o755, D),
    rule(Role::AgentSiteDir, Root, Root, 0o755, D),
    rule(Role::AgentHome, SiteIdentity, ServiceGroup, 0o700, D),
    rule(Role::TurnHome, Root, Root, 0o755, D),
    rule(Role::TurnHomeState, SiteIdentity, ServiceGroup, 0o700, D),
    rule(Role::TurnHomeConfig, Root, Root, 0o755, D),
    rule(Role::TurnHomeOpencodeConfig, Root, Root, 0o755, D),
    rule(Role::TurnHomeGitconfig, Root, Root, 0o644, F),
    // sited states the next turn's CLI configuration here; the turn may only read it.
    rule(
        Role::TurnHomeStated,
        ServiceUser,
        SitePrivateGroup,
        0o750,
        D,
    ),
    rule(Role::TurnGitconfig, Root, Root, 0o644, F),
    rule(Role::RetiredDir, Root, Root, 0o700, D),
    // Root's: PID 1 creates every socket in it, and the engine must traverse to sited.sock.
    rule(Role::RuntimeDir, Root, Root, 0o755, D),
    rule(Role::SitedSocket, ServiceUser, EngineGroup, 0o660, S),
    rule(Role::DoorSocket, ServiceUser, ServiceGroup, 0o600, S),
    rule(Role::EgressRoot, Root, Root, 0o755, D),
    // Only the site's identity (and the service user, a member) may even traverse to its gate.
    rule(Role::EgressSiteDir, Root, SitePrivateGroup, 0o750, D),
    rule(Role::GateSocket, SiteIdentity, SitePrivateGroup, 0o600, S),
    // sited's alone: a run must not read, or hold open, the decisions about itself.
    rule(
        Role::GateDecisionsSocket,
        ServiceUser,
        ServiceGroup,
        0o600,
        S,
    ),
    rule(Role::Webspace, ServiceUser, WebGroup, 0o2750, D),
    rule(Role::ReleaseStore, ServiceUser, WebGroup, 0o2750, D),
    rule(Role::UnitFile, Root, Root, 0o644, F),
    rule(Role::TmpfilesFile, Root, Root, 0o644, F),
    rule(Role::PolkitRule, Root, Root, 0o644, F),
    rule(Role::Vhost, Root, Root, 0o644, F),
    // certbot (root) writes challenge files here; the web server's user only reads them.
    rule(Role::AcmeWebroot, Root, Root, 0o755, D),
    // certbot runs it as root; nobody else may change what it runs.
    rule(Role::RenewalHook, Root, Root, 0o755, F),
    // chatd receives it from PID 1 and never opens the path; only the web server connects.
    rule(Role::ChatSocket, Root, WebGroup, 0o660, S),
    // The web server reads its configuration as root; nobody else may read the token.
    rule(Role::ChatProxyAuth, Root, Root, 0o600, F),
    // Traversable by all, like the runtime dir: each socket's own mode is the lock.
    rule(Role::MetricsDir, Root, Root, 0o755, D),
    // Counts of what the instance does, no content; still only the monitoring group's.
    rule(Role::MetricsSocket, Root, MonitoringGroup, 0o660, S),
];

/// The mode matrix's row for `role`.
pub fn mode_rule(role: Role) -> ModeRule {
    // Every role has exactly one row; the test `every_role_has_one_row` holds the table to it.
    MODES
        .iter()
        .copied()
        .find(|rule| rule.role == role)
        .unwrap_or(rule(role, Root, Root, 0o700, D))
}

/// Resolves a principal the instance name alone determines (everything but the engine's, the
/// web server's and the monitoring groups, which only the declaration names: `None`). A site principal
/// resolved without its site is root, the owner that grants nothing.
pub fn instance_principal_name(
    principal: Principal,
    inst: &InstanceName,
    k: Option<SiteOrdinal>,
) -> Option<String> {
    Some(match (principal, k) {
        (Principal::Root, _) => "root".to_owned(),
        (Principal::ServiceUser, _) => names::service_user(inst),
        (Principal::ServiceGroup, _) => names::service_group(inst),
        (Principal::EngineGroup | Principal::WebGroup | Principal::MonitoringGroup, _) => {
            return None
        }
        (Principal::SiteIdentity, Some(k)) => names::site_identity(inst, k),
        (Principal::SitePrivateGroup, Some(k)) => names::site_private_group(inst, k),
        (Principal::SiteIdentity | Principal::SitePrivateGroup, None) => "root".to_owned(),
    })
}

/// One daemon's metrics socket: a socket unit of its own whose `Service=` is the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSocket {
    /// The socket unit.
    pub unit: String,
    /// The daemon's service unit, which the socket is passed to.
    pub service: String,
    /// Where it listens.
    pub path: PathBuf,
    /// Whose metrics it serves.
    pub daemon: MetricsDaemon,
}

/// The daemon a metrics socket belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsDaemon {
    /// The instance's site daemon.
    Sited,
    /// The instance's chat runtime.
    Chatd,
    /// Site `k`'s gate.
    Gate(SiteOrdinal),
}

impl MetricsDaemon {
    /// The site whose gate it is; `None` for the instance's daemons.
    pub fn site(self) -> Option<SiteOrdinal> {
        match self {
            MetricsDaemon::Gate(k) => Some(k),
            MetricsDaemon::Sited | MetricsDaemon::Chatd => None,
        }
    }
}

/// One resolved entry of an instance's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModeEntry {
    /// Which row governs it.
    pub role: Role,
    /// Where it is.
    pub path: PathBuf,
    /// Its owner's name.
    pub owner: String,
    /// Its group's name.
    pub group: String,
    /// Its permission bits.
    pub mode: u32,
    /// What it is.
    pub kind: EntryKind,
}

/// Every derived fact about one instance, read off its validated declaration.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'d> {
    decl: &'d Declaration,
}

// === impl Layout ===

impl<'d> Layout<'d> {
    /// The layout of a validated declaration. Cannot fail: validation refused every declaration
    /// whose derivation would be unsafe (overlapping trees, colliding names).
    pub fn new(decl: &'d Declaration) -> Self {
        Self { decl }
    }

    /// The declaration it derives from.
    pub fn declaration(&self) -> &'d Declaration {
        self.decl
    }

    /// The instance name.
    pub fn instance(&self) -> &'d InstanceName {
        &self.decl.instance
    }

    /// `atelier-<inst>`.
    pub fn service_user(&self) -> String {
        names::service_user(self.instance())
    }

    /// `atelier-<inst>`.
    pub fn service_group(&self) -> String {
        names::service_group(self.instance())
    }

    /// `/etc/atelier/<inst>`.
    pub fn config_dir(&self) -> PathBuf {
        base(&self.decl.paths.config_base, CONFIG_BASE).join(self.instance().as_str())
    }

    /// `/etc/atelier/<inst>/credentials`.
    pub fn credentials_dir(&self) -> PathBuf {
        self.config_dir().join(CREDENTIALS_DIR)
    }

    /// `/etc/atelier/<inst>/instance.json`.
    pub fn declaration_path(&self) -> PathBuf {
        self.config_dir().join(DECLARATION_FILE)
    }

    /// `/etc/atelier/<inst>/env`.
    pub fn env_file(&self) -> PathBuf {
        self.config_dir().join(ENV_FILE)
    }

    /// `/etc/atelier/<inst>/sites.json`.
    pub fn site_table_path(&self) -> PathBuf {
        self.config_dir().join(SITE_TABLE_FILE)
    }

    /// `/etc/atelier/<inst>/engine.env.fragment`.
    pub fn engine_fragment_path(&self) -> PathBuf {
        self.config_dir().join(ENGINE_FRAGMENT_FILE)
    }

    /// `/etc/atelier/<inst>/gate`.
    pub fn gate_plan_dir(&self) -> PathBuf {
        self.config_dir().join(GATE_PLAN_DIR)
    }

    /// `/etc/atelier/<inst>/gate/s<k>-<door>.json`, for a door with a way out.
    pub fn gate_plan_path(&self, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
        door.has_way_out()
            .then(|| self.gate_plan_dir().join(format!("s{k}-{door}.json")))
    }

    /// The preproduction password file: declared, or `/etc/atelier/<inst>/preprod.htpasswd`.
    pub fn htpasswd_path(&self) -> PathBuf {
        self.decl
            .serving
            .preprod
            .auth
            .htpasswd
            .clone()
            .unwrap_or_else(|| self.config_dir().join(HTPASSWD_FILE))
    }

    /// `/var/lib/atelier/<inst>`.
    pub fn state_dir(&self) -> PathBuf {
        base(&self.decl.paths.state_base, STATE_BASE).join(self.instance().as_str())
    }

    /// The workspaces' root: declared, or `/var/lib/atelier/<inst>/sites`.
    pub fn sites_root(&self) -> PathBuf {
        self.decl
            .roots
            .sites
            .clone()
            .unwrap_or_else(|| self.state_dir().join("sites"))
    }

    /// The audit root: declared, or `/var/lib/atelier/<inst>/audit`.
    pub fn audit_root(&self) -> PathBuf {
        self.decl
            .roots
            .audit
            .clone()
            .unwrap_or_else(|| self.state_dir().join("audit"))
    }

    /// `<audit root>/audit.jsonl`.
    pub fn audit_file(&self) -> PathBuf {
        self.audit_root().join(AUDIT_FILE)
    }

    /// `/var/lib/atelier/<inst>/agents`, masked by every door unit.
    pub fn agents_root(&self) -> PathBuf {
        self.state_dir().join("agents")
    }

    /// `/var/lib/atelier/<inst>/agents/s<k>`.
    pub fn agent_site_dir(&self, k: SiteOrdinal) -> PathBuf {
        agent_site_dir(&self.agents_root(), k)
    }

    /// A door's HOME, `…/agents/s<k>/<door>`; the git door has none.
    pub fn agent_home(&self, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
        agent_home(&self.agents_root(), k, door)
    }

    /// The turn HOME's `stated/`, `…/agents/s<k>/turn/stated`: sited writes there before each
    /// turn, so it is one of sited's `ReadWritePaths=`.
    pub fn turn_stated_dir(&self, k: SiteOrdinal) -> PathBuf {
        turn_stated_dir(&self.agents_root(), k)
    }

    /// `/var/lib/atelier/<inst>/agents/turn.gitconfig`.
    pub fn turn_gitconfig_path(&self) -> PathBuf {
        turn_gitconfig_path(&self.agents_root())
    }

    /// `/var/lib/atelier/<inst>/acme`: the ACME http-01 webroot every letsencrypt site's
    /// port-80 vhost serves `/.well-known/acme-challenge/` from, before and after its TLS
    /// server exists.
    pub fn acme_webroot(&self) -> PathBuf {
        self.state_dir().join(ACME_WEBROOT_DIR)
    }

    /// Whether production is declared with certificates from certbot (`tls.mode = letsencrypt`).
    pub fn uses_letsencrypt(&self) -> bool {
        self.decl.serving.prod.tls.mode == TlsMode::Letsencrypt
    }

    /// Where certbot puts a site's certificate chain and key:
    /// `/etc/letsencrypt/live/<domain>/{fullchain,privkey}.pem`.
    pub fn letsencrypt_certificate(&self, site: &Site) -> LiveCertificate {
        self.letsencrypt_certificate_for(&site.domain)
    }

    /// Where certbot puts the certificate of any `domain` the instance serves (a site's, or the
    /// CMS's host).
    pub fn letsencrypt_certificate_for(&self, domain: &str) -> LiveCertificate {
        let live = Path::new(LETSENCRYPT_DIR).join("live").join(domain);
        LiveCertificate {
            fullchain: live.join("fullchain.pem"),
            privkey: live.join("privkey.pem"),
        }
    }

    /// certbot's deploy hook for the instance:
    /// `/etc/letsencrypt/renewal-hooks/deploy/atelier-<inst>`.
    pub fn renewal_hook_path(&self) -> PathBuf {
        Path::new(LETSENCRYPT_DIR)
            .join("renewal-hooks/deploy")
            .join(names::renewal_hook_file(self.instance()))
    }

    /// `/var/lib/atelier/<inst>/door-root`, the root directory of every door ([`Role::DoorRoot`]).
    pub fn door_root(&self) -> PathBuf {
        door_root_beside(&self.agents_root())
    }

    /// `/var/lib/atelier/<inst>/retired`, where `remove` archives by rename.
    pub fn retired_dir(&self) -> PathBuf {
        self.state_dir().join("retired")
    }

    /// `/run/atelier/<inst>`.
    pub fn runtime_dir(&self) -> PathBuf {
        runtime_dir(self.instance())
    }

    /// `/run/atelier/<inst>/gate-s<k>/decisions.sock`.
    pub fn gate_decisions_socket_path(&self, k: SiteOrdinal) -> PathBuf {
        gate_decisions_socket_path(self.instance(), k)
    }

    /// `/run/atelier/<inst>/metrics`.
    pub fn metrics_dir(&self) -> PathBuf {
        metrics_dir(self.instance())
    }

    /// Every daemon's metrics socket: sited's, chatd's with a chat block, and each site's
    /// gate's.
    pub fn metrics_sockets(&self, sites: &[(SiteOrdinal, &Site)]) -> Vec<MetricsSocket> {
        let inst = self.instance();
        let dir = self.metrics_dir();
        let mut out = vec![MetricsSocket {
            unit: names::sited_metrics_socket_unit(inst),
            service: names::sited_service_unit(inst),
            path: dir.join("sited.sock"),
            daemon: MetricsDaemon::Sited,
        }];
        if self.decl.chat.is_some() {
            out.push(MetricsSocket {
                unit: names::chatd_metrics_socket_unit(inst),
                service: names::chatd_service_unit(inst),
                path: dir.join("chatd.sock"),
                daemon: MetricsDaemon::Chatd,
            });
        }
        for &(k, _) in sites {
            out.push(self.gate_metrics_socket(k));
        }
        out
    }

    /// Site `k`'s gate's metrics socket: `/run/atelier/<inst>/metrics/s<k>-gate.sock`.
    pub fn gate_metrics_socket(&self, k: SiteOrdinal) -> MetricsSocket {
        let inst = self.instance();
        MetricsSocket {
            unit: names::gate_metrics_socket_unit(inst, k),
            service: names::gate_service_unit(inst, k),
            path: self.metrics_dir().join(format!("s{k}-gate.sock")),
            daemon: MetricsDaemon::Gate(k),
        }
    }

    /// `/run/atelier/<inst>/chatd.sock`.
    pub fn chatd_socket_path(&self) -> PathBuf {
        self.runtime_dir().join(CHATD_SOCKET_FILE)
    }

    /// `/etc/atelier/<inst>/chat-proxy-auth.conf`.
    pub fn chat_proxy_auth_path(&self) -> PathBuf {
        self.config_dir().join(CHAT_PROXY_AUTH_FILE)
    }

    /// chatd's credentials, id → source file, when a chat block is declared: its service
    /// token from the credentials dir and the declared master key. Never sited's.
    pub fn chatd_credential_sources(&self) -> BTreeMap<String, PathBuf> {
        let mut sources = BTreeMap::new();
        if let Some(chat) = &self.decl.chat {
            sources.insert(
                CHATD_SERVICE_TOKEN.to_owned(),
                self.credentials_dir().join(CHATD_SERVICE_TOKEN),
            );
            sources.insert(CHATD_MASTER_KEY.to_owned(), chat.master_key.clone());
        }
        sources
    }

    /// `/run/atelier/<inst>/sited.sock`.
    pub fn sited_socket_path(&self) -> PathBuf {
        sited_socket_path(self.instance())
    }

    /// `/run/atelier/<inst>/s<k>-<door>.sock`.
    pub fn door_socket_path(&self, k: SiteOrdinal, door: Door) -> PathBuf {
        door_socket_path(self.instance(), k, door)
    }

    /// `/run/atelier/<inst>/egress`.
    pub fn egress_root(&self) -> PathBuf {
        self.runtime_dir().join("egress")
    }

    /// `/run/atelier/<inst>/egress/s<k>`.
    pub fn egress_dir(&self, k: SiteOrdinal) -> PathBuf {
        egress_dir(self.instance(), k)
    }

    /// `/run/atelier/<inst>/egress/s<k>/<door>.sock`, for a door with a way out.
    pub fn gate_socket_path(&self, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
        gate_socket_path(self.instance(), k, door)
    }

    /// Where a door unit sees its gate socket: `/run/atelier-egress/<door>.sock`.
    pub fn gate_socket_in_unit(&self, door: Door) -> Option<PathBuf> {
        gate_socket_in_unit(door)
    }

    /// `/run/atelier/<inst>/egress/s<k>/mcp.sock`: the MCP relay's socket, for a door with
    /// the relay (the turn door).
    pub fn gate_mcp_socket_path(&self, k: SiteOrdinal, door: Door) -> Option<PathBuf> {
        gate_mcp_socket_path(self.instance(), k, door)
    }

    /// Where a door unit with the relay sees its socket: `/run/atelier-egress/mcp.sock`.
    pub fn gate_mcp_socket_in_unit(&self, door: Door) -> Option<PathBuf> {
        gate_mcp_socket_in_unit(door)
    }

    /// The webspace base: declared, or `/srv/atelier/<inst>`.
    pub fn webspace_base(&self) -> PathBuf {
        self.decl
            .webspace_base
            .clone()
            .unwrap_or_else(|| Path::new(SERVED_BASE).join(self.instance().as_str()))
    }

    /// A site's webspace: declared, or `<webspace base>/<domain>`.
    pub fn webspace(&self, site: &Site) -> PathBuf {
        site.webspace
            .clone()
            .unwrap_or_else(|| self.webspace_base().join(&site.domain))
    }

    /// `<webspace>/.releases/{pre,web}`.
    pub fn release_store(&self, site: &Site, surface: Surface) -> PathBuf {
        self.webspace(site)
            .join(RELEASES_DIR)
            .join(surface.dir_name())
    }

    /// `<webspace>/{pre,web}`: the symlink the web server serves through.
    pub fn served_link(&self, site: &Site, surface: Surface) -> PathBuf {
        self.webspace(site).join(surface.dir_name())
    }

    /// `<host_prefix>.<domain>`.
    pub fn preprod_domain(&self, site: &Site) -> String {
        format!("{}.{}", self.decl.serving.preprod.host_prefix, site.domain)
    }

    /// Where unit files go.
    pub fn unit_dir(&self) -> PathBuf {
        base(&self.decl.paths.unit_dir, UNIT_DIR)
    }

    /// `<unit dir>/<name>`.
    pub fn unit_path(&self, unit: &str) -> PathBuf {
        self.unit_dir().join(unit)
    }

    /// The web server's `sites-available` (or the declared dir).
    pub fn vhost_dir(&self) -> PathBuf {
        self.decl.paths.vhost_dir.clone().unwrap_or_else(|| {
            PathBuf::from(match self.decl.web.server {
                WebServer::Nginx => "/etc/nginx/sites-available",
                WebServer::Apache => "/etc/apache2/sites-available",
            })
        })
    }

    /// Where the CMS's vhost is, with a chat block or without.
    pub fn chat_vhost_path(&self) -> PathBuf {
        self.vhost_dir()
            .join(names::chat_vhost_file(self.instance()))
    }

    /// Whether the sites' vhosts of `surface` are rendered: production's always,
    /// preproduction's while it is enabled.
    pub fn renders_vhost(&self, surface: Surface) -> bool {
        match surface {
            Surface::Prod => true,
            Surface::Preprod => self.decl.serving.preprod.enabled,
        }
    }

    /// Where the vhost of `slug`'s `surface` is, rendered or not.
    pub fn site_vhost_path(&self, slug: &str, surface: Surface) -> PathBuf {
        let inst = self.instance();
        self.vhost_dir().join(match surface {
            Surface::Prod => names::prod_vhost_file(inst, slug),
            Surface::Preprod => names::preprod_vhost_file(inst, slug),
        })
    }

    /// The web server's `sites-enabled` (or the declared dir; equal to the vhost dir means no
    /// enabling links).
    pub fn vhost_enabled_dir(&self) -> PathBuf {
        self.decl
            .paths
            .vhost_enabled_dir
            .clone()
            .unwrap_or_else(|| {
                PathBuf::from(match self.decl.web.server {
                    WebServer::Nginx => "/etc/nginx/sites-enabled",
                    WebServer::Apache => "/etc/apache2/sites-enabled",
                })
            })
    }

    /// `<polkit dir>/49-atelier-<inst>.rules`.
    pub fn polkit_rule_path(&self) -> PathBuf {
        base(&self.decl.paths.polkit_rules_dir, POLKIT_RULES_DIR)
            .join(names::polkit_rule_file(self.instance()))
    }

    /// `<tmpfiles dir>/atelier-<inst>.conf`.
    pub fn tmpfiles_path(&self) -> PathBuf {
        base(&self.decl.paths.tmpfiles_dir, TMPFILES_DIR)
            .join(names::tmpfiles_file(self.instance()))
    }

    /// An Atelier binary, e.g. `bin_path("atelier-shim")` = `/usr/bin/atelier-shim`.
    pub fn bin_path(&self, name: &str) -> PathBuf {
        base(&self.decl.paths.bin_dir, BIN_DIR).join(name)
    }

    /// The site templates' directory: declared, or `/usr/share/atelier/templates`.
    pub fn templates_dir(&self) -> PathBuf {
        base(&self.decl.paths.templates_dir, TEMPLATES_DIR)
    }

    /// systemctl.
    pub fn systemctl_bin(&self) -> PathBuf {
        self.decl
            .agent
            .systemctl_bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(SYSTEMCTL_BIN))
    }

    /// sited's credentials, id → source file (`LoadCredential=` lines, sorted by id):
    /// `SERVICE_TOKEN` from the credentials dir, `PUBLICATION_API_KEY` from
    /// `publication_api.key_path` when declared, then every `secrets` entry (a declared id
    /// overrides the defaults).
    pub fn credential_sources(&self) -> BTreeMap<String, PathBuf> {
        let mut sources = BTreeMap::new();
        sources.insert(
            SERVICE_TOKEN.to_owned(),
            self.credentials_dir().join(SERVICE_TOKEN),
        );
        if let Some(key_path) = &self.decl.publication_api.key_path {
            sources.insert(PUBLICATION_API_KEY.to_owned(), key_path.clone());
        }
        for (id, path) in &self.decl.secrets {
            sources.insert(id.clone(), path.clone());
        }
        sources
    }

    /// The credentials sited loads: [`Layout::credential_sources`] but the model keys
    /// ([`MODEL_KEYS`]), which the gates alone hold.
    pub fn sited_credential_sources(&self) -> BTreeMap<String, PathBuf> {
        let mut sources = self.credential_sources();
        sources.retain(|id, _| !MODEL_KEYS.contains(&id.as_str()));
        sources
    }

    /// The credentials a site's gate loads: the Publication API key its MCP relay adds and the
    /// keys its model relay's routes add, those the declaration names.
    pub fn gate_credential_sources(&self) -> BTreeMap<String, PathBuf> {
        let routed: Vec<String> = self
            .model_relay()
            .map(|relay| {
                relay
                    .routes
                    .into_iter()
                    .filter_map(|r| r.credential)
                    .collect()
            })
            .unwrap_or_default();
        let mut sources = self.credential_sources();
        sources.retain(|id, _| id == PUBLICATION_API_KEY || routed.contains(id));
        sources
    }

    /// sited's `ReadWritePaths=`, sorted: the workspaces, the audit root, every webspace and
    /// every turn HOME's `stated/`. `sites` pairs each declared site with its ordinal from the
    /// ledger (a `stated/` is named by ordinal, not slug).
    pub fn sited_read_write_paths(&self, sites: &[(SiteOrdinal, &Site)]) -> Vec<PathBuf> {
        let mut paths = vec![self.sites_root(), self.audit_root()];
        for &(k, site) in sites {
            paths.push(self.webspace(site));
            paths.push(self.turn_stated_dir(k));
        }
        paths.sort();
        paths.dedup();
        paths
    }

    /// A door's ceiling: the declared limit, or the default.
    pub fn door_ceiling_ms(&self, door: Door) -> u64 {
        let limits = &self.decl.limits;
        match door {
            Door::Turn => limits.session_turn_timeout_ms.unwrap_or(TURN_TIMEOUT_MS),
            Door::Build => build_door_ceiling_ms(
                limits.install_timeout_ms.unwrap_or(INSTALL_TIMEOUT_MS),
                limits.build_timeout_ms.unwrap_or(BUILD_TIMEOUT_MS),
            ),
            Door::Git => limits.git_timeout_ms.unwrap_or(GIT_TIMEOUT_MS),
        }
    }

    /// Resolves a principal to its name; site principals need the site's ordinal.
    pub fn principal_name(&self, principal: Principal, k: Option<SiteOrdinal>) -> String {
        match principal {
            Principal::EngineGroup => self.decl.engine.group.clone(),
            Principal::WebGroup => self.decl.web.group.clone(),
            Principal::MonitoringGroup => self
                .decl
                .monitoring
                .as_ref()
                .map_or_else(|| "root".to_owned(), |m| m.group.clone()),
            _ => instance_principal_name(principal, self.instance(), k)
                .unwrap_or_else(|| "root".to_owned()),
        }
    }

    fn entry(&self, role: Role, path: PathBuf, k: Option<SiteOrdinal>) -> ModeEntry {
        let rule = mode_rule(role);
        ModeEntry {
            role,
            path,
            owner: self.principal_name(rule.owner, k),
            group: self.principal_name(rule.group, k),
            mode: rule.mode,
            kind: rule.kind,
        }
    }

    /// Whether preproduction is served behind the htpasswd file.
    fn uses_htpasswd(&self) -> bool {
        let preprod = &self.decl.serving.preprod;
        preprod.enabled && preprod.auth.mode == crate::declaration::AuthMode::Htpasswd
    }

    /// Every credential file the instance names, sorted: sited's and chatd's `LoadCredential=`
    /// sources and, when the htpasswd file is made from them, the preview passwords.
    pub fn credential_files(&self) -> Vec<PathBuf> {
        let mut credentials: Vec<PathBuf> = self.credential_sources().into_values().collect();
        credentials.extend(self.chatd_credential_sources().into_values());
        // The preview passwords the htpasswd file is made from are credentials too.
        if self.uses_htpasswd() {
            let users = &self.decl.serving.preprod.auth.users;
            credentials.extend(users.iter().map(|u| u.password_file.clone()));
        }
        credentials.sort();
        credentials.dedup();
        credentials
    }

    /// The credential files declared outside the credentials dir, sorted. The mode matrix
    /// leaves them out (where they stand, their owner and mode are the operator's), yet a
    /// unit still loads them: one missing keeps it from starting.
    pub fn outside_credentials(&self) -> Vec<PathBuf> {
        let dir = self.credentials_dir();
        self.credential_files()
            .into_iter()
            .filter(|path| !path.starts_with(&dir))
            .collect()
    }

    /// [`Layout::outside_credentials`] with the owner, group and mode a credential is made
    /// with, for the ones the provisioner mints.
    pub fn outside_credential_entries(&self) -> Vec<ModeEntry> {
        self.outside_credentials()
            .into_iter()
            .map(|path| self.entry(Role::Credential, path, None))
            .collect()
    }

    /// Every file, directory and socket of the instance with its owner, group and mode, parents
    /// before children. `sites` pairs each declared site with its ordinal from the ledger.
    pub fn mode_matrix(&self, sites: &[(SiteOrdinal, &Site)]) -> Vec<ModeEntry> {
        let inst = self.instance();
        let mut out = vec![
            self.entry(Role::ConfigDir, self.config_dir(), None),
            self.entry(Role::CredentialsDir, self.credentials_dir(), None),
        ];
        let htpasswd = self.uses_htpasswd();
        for path in self.credential_files() {
            // Only files in the credentials dir are the provisioner's to assert.
            if path.starts_with(self.credentials_dir()) {
                out.push(self.entry(Role::Credential, path, None));
            }
        }
        if self.decl.chat.is_some() {
            out.push(self.entry(Role::ChatProxyAuth, self.chat_proxy_auth_path(), None));
        }
        out.extend([
            self.entry(Role::DeclarationFile, self.declaration_path(), None),
            self.entry(Role::EnvFile, self.env_file(), None),
            self.entry(Role::SiteTable, self.site_table_path(), None),
            self.entry(Role::EngineFragment, self.engine_fragment_path(), None),
            self.entry(Role::GatePlanDir, self.gate_plan_dir(), None),
        ]);
        for &(k, _) in sites {
            for door in Door::with_way_out() {
                if let Some(path) = self.gate_plan_path(k, door) {
                    out.push(self.entry(Role::GatePlan, path, Some(k)));
                }
            }
        }
        if htpasswd {
            out.push(self.entry(Role::Htpasswd, self.htpasswd_path(), None));
        }
        out.extend([
            self.entry(Role::StateDir, self.state_dir(), None),
            self.entry(Role::SitesRoot, self.sites_root(), None),
            self.entry(Role::AuditRoot, self.audit_root(), None),
            self.entry(Role::AuditFile, self.audit_file(), None),
            self.entry(Role::AgentsRoot, self.agents_root(), None),
            self.entry(Role::DoorRoot, self.door_root(), None),
            self.entry(Role::TurnGitconfig, self.turn_gitconfig_path(), None),
            self.entry(Role::RetiredDir, self.retired_dir(), None),
        ]);
        if self.uses_letsencrypt() {
            out.push(self.entry(Role::AcmeWebroot, self.acme_webroot(), None));
        }
        for &(k, _) in sites {
            out.push(self.entry(Role::AgentSiteDir, self.agent_site_dir(k), Some(k)));
            for door in Door::ALL {
                let Some(home) = self.agent_home(k, door) else {
                    continue;
                };
                if door == Door::Turn {
                    out.push(self.entry(Role::TurnHome, home.clone(), Some(k)));
                    for (role, name) in [
                        (Role::TurnHomeState, TURN_HOME_STATE_DIR),
                        (Role::TurnHomeConfig, TURN_HOME_CONFIG_DIR),
                        (Role::TurnHomeGitconfig, TURN_HOME_GITCONFIG),
                        (Role::TurnHomeStated, TURN_HOME_STATED_DIR),
                    ] {
                        out.push(self.entry(role, home.join(name), Some(k)));
                    }
                    out.push(self.entry(
                        Role::TurnHomeOpencodeConfig,
                        home.join(TURN_HOME_CONFIG_DIR).join(TURN_HOME_OPENCODE_DIR),
                        Some(k),
                    ));
                } else {
                    out.push(self.entry(Role::AgentHome, home, Some(k)));
                }
            }
        }
        out.extend([
            self.entry(Role::RuntimeDir, self.runtime_dir(), None),
            self.entry(Role::SitedSocket, self.sited_socket_path(), None),
        ]);
        if self.decl.chat.is_some() {
            out.push(self.entry(Role::ChatSocket, self.chatd_socket_path(), None));
        }
        out.push(self.entry(Role::MetricsDir, self.metrics_dir(), None));
        for socket in self.metrics_sockets(sites) {
            out.push(self.entry(Role::MetricsSocket, socket.path, socket.daemon.site()));
        }
        for &(k, _) in sites {
            for door in Door::ALL {
                out.push(self.entry(Role::DoorSocket, self.door_socket_path(k, door), Some(k)));
            }
        }
        out.push(self.entry(Role::EgressRoot, self.egress_root(), None));
        for &(k, _) in sites {
            out.push(self.entry(Role::EgressSiteDir, self.egress_dir(k), Some(k)));
            for door in Door::with_way_out() {
                if let Some(path) = self.gate_socket_path(k, door) {
                    out.push(self.entry(Role::GateSocket, path, Some(k)));
                }
                if let Some(path) = self.gate_mcp_socket_path(k, door) {
                    out.push(self.entry(Role::GateSocket, path, Some(k)));
                }
            }
            out.push(self.entry(
                Role::GateDecisionsSocket,
                self.gate_decisions_socket_path(k),
                Some(k),
            ));
        }
        for &(k, site) in sites {
            out.push(self.entry(Role::Webspace, self.webspace(site), Some(k)));
            out.push(self.entry(
                Role::ReleaseStore,
                self.webspace(site).join(RELEASES_DIR),
                Some(k),
            ));
            for surface in Surface::ALL {
                out.push(self.entry(
                    Role::ReleaseStore,
                    self.release_store(site, surface),
                    Some(k),
                ));
            }
        }
        for unit in [
            names::sited_socket_unit(inst),
            names::sited_service_unit(inst),
        ] {
            out.push(self.entry(Role::UnitFile, self.unit_path(&unit), None));
        }
        if self.decl.chat.is_some() {
            for unit in [
                names::chatd_socket_unit(inst),
                names::chatd_service_unit(inst),
                names::chatd_purge_timer_unit(inst),
                names::chatd_purge_service_unit(inst),
            ] {
                out.push(self.entry(Role::UnitFile, self.unit_path(&unit), None));
            }
        }
        for &(k, _) in sites {
            for door in Door::ALL {
                for unit in names::door_unit_files(inst, k, door) {
                    out.push(self.entry(Role::UnitFile, self.unit_path(&unit), Some(k)));
                }
            }
            for unit in [
                names::gate_socket_unit(inst, k),
                names::gate_decisions_socket_unit(inst, k),
                names::gate_service_unit(inst, k),
            ] {
                out.push(self.entry(Role::UnitFile, self.unit_path(&unit), Some(k)));
            }
        }
        for socket in self.metrics_sockets(sites) {
            let k = socket.daemon.site();
            out.push(self.entry(Role::UnitFile, self.unit_path(&socket.unit), k));
        }
        out.push(self.entry(Role::TmpfilesFile, self.tmpfiles_path(), None));
        out.push(self.entry(Role::PolkitRule, self.polkit_rule_path(), None));
        for &(k, site) in sites {
            for surface in [Surface::Prod, Surface::Preprod] {
                if self.renders_vhost(surface) {
                    let path = self.site_vhost_path(&site.slug, surface);
                    out.push(self.entry(Role::Vhost, path, Some(k)));
                }
            }
        }
        if self.decl.chat.is_some() {
            out.push(self.entry(Role::Vhost, self.chat_vhost_path(), None));
        }
        if self.uses_letsencrypt() {
            out.push(self.entry(Role::RenewalHook, self.renewal_hook_path(), None));
        }
        out
    }
}

/// A certificate as certbot keeps it: the chain a server presents and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCertificate {
    /// The certificate and its intermediates.
    pub fullchain: PathBuf,
    /// The private key (never read by the provisioner; only its presence is observed).
    pub privkey: PathBuf,
}

fn base(declared: &Option<PathBuf>, default: &str) -> PathBuf {
    declared.clone().unwrap_or_else(|| PathBuf::from(default))
}

/// Returns true if and only if the two paths are the same or one is inside the other
/// (component-wise, so `/srv/a` and `/srv/ab` do not overlap).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}
