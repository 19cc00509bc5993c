//! Observing the host: its account databases, what stands at every path the plan cares about,
//! the systemd version and whether the web server is installed. Reads only; every write goes
//! through `apply`.
//!
//! Paths are host paths (`/etc/...`) read below a configurable root, `/` in production and a
//! temp dir in tests.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use atelier_layout::declaration::WebServer;
use atelier_layout::{names, InstanceName};
use serde::Serialize;

use crate::identities::{parse_group, parse_passwd, parse_shadow, Accounts};
use crate::owed::{self, Owed};

/// The largest file the observer reads; an artifact is a few kilobytes.
const MAX_OBSERVED_BYTES: u64 = 4 * 1024 * 1024;

/// Why the host could not be observed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// An account database could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// What stands at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservedKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A socket.
    Socket,
    /// Anything else.
    Other,
}

/// One observed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observed {
    /// What it is.
    pub kind: ObservedKind,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// For a directory: whether it is empty.
    pub empty: Option<bool>,
    /// For a symlink: its target.
    pub link_target: Option<PathBuf>,
    /// Where the path really leads when a link on the way or at its end takes it elsewhere
    /// (every link resolved, as a host path); `None` when it is where it says, or leads nowhere
    /// (or, below a test's root, out of it).
    pub resolved: Option<PathBuf>,
    /// For a file whose content was asked for: its bytes (never a credential's).
    #[serde(skip)]
    pub content: Option<Vec<u8>>,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// When the file last changed on this host, in nanoseconds since the epoch: the later of
    /// its modification and status-change times. A package installs its binaries with the
    /// modification time of its build (clamped to the commit's time), older than a daemon
    /// started since; dpkg's rename into place sets the change time.
    pub changed_ns: i128,
}

/// Everything the planner knows about the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostState {
    /// The account databases.
    pub accounts: Accounts,
    /// Every observed path that exists; a path absent from the map is absent from the host.
    pub entries: BTreeMap<PathBuf, Observed>,
    /// PID 1's version, if it could be read.
    pub systemd_version: Option<u32>,
    /// Whether the declared web server's binary is installed.
    pub web_server_present: bool,
    /// systemd's view of the instance's sockets, by unit name; a unit absent from the map was
    /// not looked at.
    pub units: BTreeMap<String, UnitState>,
    /// The daemons that read their inputs once, at start (sited, the gates), by unit name; a
    /// unit absent from the map is not running.
    pub services: BTreeMap<String, ServiceState>,
    /// systemd (PID 1 here) could not say which daemons run and since when: any may run with
    /// inputs older than what is declared, so none is taken for current.
    pub services_unknown: bool,
    /// The instance's door runs (turns, builds, git) running now, by unit name: a daemon
    /// restarted under them would cut them off.
    pub live_runs: Vec<String>,
    /// systemd could not say which runs are live: any of them may be, so no restart that
    /// would cut one off is made.
    pub live_runs_unknown: bool,
    /// The follow-up steps an earlier apply still owes.
    pub owed: Owed,
}

/// A running daemon as systemd and `/proc` show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServiceState {
    /// When its main process started, in nanoseconds since the epoch: an input changed later
    /// is one it has not read.
    pub started_ns: Option<i128>,
    /// Its main process's groups (`Groups:` of `/proc/<pid>/status`): a membership given
    /// since it started is not among them.
    pub groups: Option<BTreeSet<u32>>,
}

/// What systemd says about one unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UnitState {
    /// `UnitFileState=enabled`.
    pub enabled: bool,
    /// `ActiveState=active`.
    pub active: bool,
}

/// Asks systemd about `units` in one `systemctl show` call; an unknown unit is neither enabled
/// nor active. `None` when systemctl could not be run.
pub fn unit_states(units: &[String]) -> Option<BTreeMap<String, UnitState>> {
    if units.is_empty() {
        return Some(BTreeMap::new());
    }
    let out = Command::new("systemctl")
        .args(["show", "--property=Id,UnitFileState,ActiveState", "--"])
        .args(units)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| parse_unit_states(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses `systemctl show -p Id,UnitFileState,ActiveState` output: one block per unit.
pub fn parse_unit_states(text: &str) -> BTreeMap<String, UnitState> {
    let mut out = BTreeMap::new();
    for block in text.split("\n\n") {
        let mut id = None;
        let mut state = UnitState::default();
        for line in block.lines() {
            match line.split_once('=') {
                Some(("Id", v)) => id = Some(v.to_owned()),
                Some(("UnitFileState", v)) => state.enabled = v == "enabled",
                Some(("ActiveState", v)) => state.active = v == "active",
                _ => {}
            }
        }
        if let Some(id) = id {
            out.insert(id, state);
        }
    }
    out
}

/// The running ones of `units`, each with its start time and groups, from one `systemctl
/// show` call; `None` when systemctl could not be run.
pub fn service_states(units: &[String]) -> Option<BTreeMap<String, ServiceState>> {
    if units.is_empty() {
        return Some(BTreeMap::new());
    }
    let out = Command::new("systemctl")
        .args([
            "show",
            "--property=Id,ActiveState,MainPID,ExecMainStartTimestampMonotonic",
            "--",
        ])
        .args(units)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    // systemd gives the start on the monotonic clock; the inputs' mtimes are wall-clock.
    let now_real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let now_mono = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let now_mono = i128::from(now_mono.tv_sec) * 1_000_000_000 + i128::from(now_mono.tv_nsec);
    let clocks = Clocks {
        real_minus_mono_ns: i128::try_from(now_real).ok()? - now_mono,
    };
    Some(
        parse_service_states(&String::from_utf8_lossy(&out.stdout), clocks)
            .into_iter()
            .map(|(unit, (state, pid))| {
                let groups = pid.and_then(|pid| {
                    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                    parse_proc_groups(&status)
                });
                (unit, ServiceState { groups, ..state })
            })
            .collect(),
    )
}

/// The offset of the wall clock from the monotonic one, read once.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    /// Wall-clock nanoseconds minus monotonic nanoseconds.
    pub real_minus_mono_ns: i128,
}

/// Parses `systemctl show -p Id,ActiveState,MainPID,ExecMainStartTimestampMonotonic`: the
/// active units, each with its start on the wall clock and its main PID.
pub fn parse_service_states(
    text: &str,
    clocks: Clocks,
) -> BTreeMap<String, (ServiceState, Option<u32>)> {
    let mut out = BTreeMap::new();
    for block in text.split("\n\n") {
        let (mut id, mut active, mut pid, mut started_ns) = (None, false, None, None);
        for line in block.lines() {
            match line.split_once('=') {
                Some(("Id", v)) => id = Some(v.to_owned()),
                Some(("ActiveState", v)) => active = matches!(v, "active" | "reloading"),
                Some(("MainPID", v)) => pid = v.parse::<u32>().ok().filter(|&p| p != 0),
                Some(("ExecMainStartTimestampMonotonic", v)) => {
                    started_ns = v
                        .parse::<i128>()
                        .ok()
                        .filter(|&us| us != 0)
                        .map(|us| us * 1000 + clocks.real_minus_mono_ns);
                }
                _ => {}
            }
        }
        if let (Some(id), true) = (id, active) {
            let state = ServiceState {
                started_ns,
                groups: None,
            };
            out.insert(id, (state, pid));
        }
    }
    out
}

/// The `Groups:` line of a `/proc/<pid>/status`.
pub fn parse_proc_groups(status: &str) -> Option<BTreeSet<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace().map(|g| g.parse().ok()).collect()
}

/// The instance's door runs running now: the active runs of the doors named by `stems`
/// ([`names::door_unit_stem`]). `None` when systemctl could not be run.
pub fn live_runs(stems: &[String]) -> Option<Vec<String>> {
    if stems.is_empty() {
        return Some(Vec::new());
    }
    let out = Command::new("systemctl")
        .args([
            "list-units",
            "--plain",
            "--no-legend",
            "--state=active",
            "--",
        ])
        .args(stems.iter().map(|stem| names::door_run_pattern(stem)))
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|unit| stems.iter().any(|stem| names::is_door_run(unit, stem)))
            .map(str::to_owned)
            .collect()
    })
}

/// `host_path` (absolute) below `root`.
pub fn under_root(root: &Path, host_path: &Path) -> PathBuf {
    root.join(host_path.strip_prefix("/").unwrap_or(host_path))
}

/// The follow-up steps an earlier apply left owed for instance `inst` (below `root`): none when
/// it left no marker, every step when its marker cannot be read.
pub fn read_owed(root: &Path, inst: &InstanceName) -> Owed {
    let path = under_root(root, &atelier_layout::paths::provision_owed_path(inst));
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Owed::default(),
        Ok(meta) if meta.is_file() && meta.len() <= owed::MAX_OWED_BYTES => {
            match std::fs::read(&path).map(String::from_utf8) {
                Ok(Ok(text)) => Owed::parse(&text),
                _ => Owed::everything(),
            }
        }
        _ => Owed::everything(),
    }
}

/// Reads `etc/passwd`, `etc/group` and, when permitted, `etc/shadow` below `root`.
pub fn read_accounts(root: &Path) -> Result<Accounts, HostError> {
    let read = |name: &str| {
        let path = under_root(root, Path::new(name));
        std::fs::read_to_string(&path).map_err(|source| HostError::Read { path, source })
    };
    let passwd = parse_passwd(&read("/etc/passwd")?);
    let groups = parse_group(&read("/etc/group")?);
    let shadow = read("/etc/shadow").ok().map(|text| parse_shadow(&text));
    Ok(Accounts {
        passwd,
        groups,
        shadow,
    })
}

/// Observes each of `paths` below `root` without following a final link; reads the content of
/// those in `with_content` that are regular files.
pub fn observe_entries<'p>(
    root: &Path,
    paths: impl IntoIterator<Item = (&'p Path, bool)>,
) -> BTreeMap<PathBuf, Observed> {
    let mut out = BTreeMap::new();
    for (path, with_content) in paths {
        if let Some(observed) = observe(root, path, with_content) {
            out.insert(path.to_path_buf(), observed);
        }
    }
    out
}

fn observe(root: &Path, path: &Path, with_content: bool) -> Option<Observed> {
    let real = under_root(root, path);
    let meta = std::fs::symlink_metadata(&real).ok()?;
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        ObservedKind::File
    } else if ft.is_dir() {
        ObservedKind::Dir
    } else if ft.is_symlink() {
        ObservedKind::Symlink
    } else if ft.is_socket() {
        ObservedKind::Socket
    } else {
        ObservedKind::Other
    };
    let content = (with_content && kind == ObservedKind::File && meta.len() <= MAX_OBSERVED_BYTES)
        .then(|| std::fs::read(&real).ok())
        .flatten();
    let empty = (kind == ObservedKind::Dir).then(|| {
        std::fs::read_dir(&real)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false)
    });
    let link_target = (kind == ObservedKind::Symlink)
        .then(|| std::fs::read_link(&real).ok())
        .flatten();
    let resolved = std::fs::canonicalize(&real)
        .ok()
        .and_then(|c| {
            c.strip_prefix(root)
                .ok()
                .map(|rel| Path::new("/").join(rel))
        })
        .filter(|c| c != path);
    Some(Observed {
        kind,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        empty,
        link_target,
        resolved,
        content,
        mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
        changed_ns: nanos(meta.mtime(), meta.mtime_nsec())
            .max(nanos(meta.ctime(), meta.ctime_nsec())),
    })
}

fn nanos(seconds: i64, nanoseconds: i64) -> i128 {
    i128::from(seconds) * 1_000_000_000 + i128::from(nanoseconds)
}

/// PID 1's version from `systemctl --version` (`systemd 252 (…)`).
pub fn systemd_version() -> Option<u32> {
    let out = Command::new("systemctl").arg("--version").output().ok()?;
    parse_systemd_version(&String::from_utf8_lossy(&out.stdout))
}

/// Whether the host was booted with systemd as PID 1 (its runtime folder exists). On a host
/// that was not, nothing runs under systemd and a failed query of it says nothing is
/// running; on one that was, a failed query is an unknown.
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Parses the first line of `systemctl --version`.
pub fn parse_systemd_version(text: &str) -> Option<u32> {
    let mut words = text.lines().next()?.split_whitespace();
    (words.next()? == "systemd").then_some(())?;
    words.next()?.parse().ok()
}

/// The command that tests the web server's configuration.
pub fn web_configtest_argv(server: WebServer) -> Vec<String> {
    match server {
        WebServer::Nginx => vec!["nginx".into(), "-t".into()],
        WebServer::Apache => vec!["apache2ctl".into(), "configtest".into()],
    }
}

/// The web server's systemd unit.
pub fn web_unit(server: WebServer) -> &'static str {
    match server {
        WebServer::Nginx => "nginx.service",
        WebServer::Apache => "apache2.service",
    }
}

/// Whether the web server's config-test binary is installed below `root`.
pub fn web_server_present(root: &Path, server: WebServer) -> bool {
    let argv = web_configtest_argv(server);
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|dir| under_root(root, &Path::new(dir).join(&argv[0])).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unit_states() {
        let text = "Id=a.socket\nActiveState=active\nUnitFileState=enabled\n\nActiveState=inactive\nUnitFileState=\nId=b.socket\n";
        let states = parse_unit_states(text);
        assert_eq!(
            states["a.socket"],
            UnitState {
                enabled: true,
                active: true
            }
        );
        assert_eq!(states["b.socket"], UnitState::default());
    }

    #[test]
    fn reads_service_states_on_the_wall_clock_and_skips_what_is_not_running() {
        let text = "Id=atelier-sited@example.service\nActiveState=active\nMainPID=42\n\
                    ExecMainStartTimestampMonotonic=5000000\n\n\
                    Id=atelier-example-s1-gate.service\nActiveState=inactive\nMainPID=0\n\
                    ExecMainStartTimestampMonotonic=0\n";
        let clocks = Clocks {
            real_minus_mono_ns: 1_000_000_000_000,
        };
        let states = parse_service_states(text, clocks);
        assert_eq!(states.len(), 1);
        let (state, pid) = &states["atelier-sited@example.service"];
        assert_eq!(*pid, Some(42));
        assert_eq!(state.started_ns, Some(1_005_000_000_000));
    }

    #[test]
    fn reads_a_process_s_groups() {
        let status = "Name:\tatelier-sited\nGid:\t900\t900\t900\t900\nGroups:\t900 901 905 \n";
        assert_eq!(
            parse_proc_groups(status),
            Some([900, 901, 905].into_iter().collect())
        );
        assert_eq!(
            parse_proc_groups("Groups:\n"),
            Some(BTreeSet::new()),
            "no supplementary groups"
        );
        assert_eq!(parse_proc_groups("Name:\tx\n"), None);
    }

    #[test]
    fn reads_systemd_version() {
        assert_eq!(
            parse_systemd_version("systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT"),
            Some(252)
        );
        assert_eq!(parse_systemd_version("something else 1"), None);
    }

    #[test]
    fn observes_kinds_modes_and_content_below_a_root() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("etc/x")).unwrap();
        std::fs::write(tmp.path().join("etc/x/f"), b"body").unwrap();
        std::fs::set_permissions(
            tmp.path().join("etc/x/f"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        std::os::unix::fs::symlink("f", tmp.path().join("etc/x/l")).unwrap();
        let f = Path::new("/etc/x/f");
        let l = Path::new("/etc/x/l");
        let d = Path::new("/etc/x");
        let gone = Path::new("/etc/absent");
        // Canonical, as the host's root is: links are resolved against it.
        let root = tmp.path().canonicalize().unwrap();
        let seen = observe_entries(&root, [(f, true), (l, true), (d, false), (gone, true)]);
        assert_eq!(seen[f].kind, ObservedKind::File);
        assert_eq!(seen[f].mode, 0o640);
        assert_eq!(seen[f].content.as_deref(), Some(&b"body"[..]));
        assert_eq!(seen[l].kind, ObservedKind::Symlink);
        assert_eq!(seen[l].link_target.as_deref(), Some(Path::new("f")));
        assert_eq!(seen[l].resolved.as_deref(), Some(f), "the link leads to f");
        assert_eq!(seen[f].resolved, None, "f is where it says");
        assert_eq!(seen[d].empty, Some(false));
        assert!(!seen.contains_key(gone));
    }
}
