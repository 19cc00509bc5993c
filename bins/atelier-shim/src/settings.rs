//! What the unit's environment states: the door, the workdir, the keys the unit fixes for the
//! program, and the gate sockets to forward to.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use atelier_layout::services::{
    DOOR_ENV, GATE_SOCKET_ENV, MCP_PORT, MCP_SOCKET_ENV, PROXY_PORT, WORKDIR_ENV,
};
use atelier_proto::{is_fixed_env_key, Door, FIXED_ENV_KEYS, FIXED_ENV_KEY_PREFIXES};

use crate::{procfs, ShimError};

/// Keys the turn unit fixes on top of [`FIXED_ENV_KEYS`]: where the agent CLI keeps its
/// configuration and state (derived in layout, with their values). A spec setting one could
/// point the agent at a configuration the site wrote.
pub use atelier_layout::paths::TURN_DOOR_FIXED_ENV_KEYS;

/// The unit name sent in the hello when the shim runs unconfined or outside a service.
pub const UNCONFINED_UNIT: &str = "unconfined";

/// Between SIGTERM and SIGKILL of the program's process group when the daemon hangs up.
pub const KILL_GRACE: Duration = Duration::from_secs(5); // the reference's death grace

/// How long the daemon has to send the spec after the hello. sited sends it at once; a daemon
/// that has not after this holds the site's door for nothing.
pub const SPEC_TIMEOUT: Duration = Duration::from_secs(30); // the reference daemon's hello timeout

/// Returns true if and only if the unit fixes `key` on `door`, so a spec may not set it:
/// `atelier-proto`'s fixed keys and prefixes, plus [`TURN_DOOR_FIXED_ENV_KEYS`] on the turn
/// door.
pub fn is_door_fixed_env_key(door: Door, key: &str) -> bool {
    is_fixed_env_key(key) || (door == Door::Turn && TURN_DOOR_FIXED_ENV_KEYS.contains(&key))
}

/// One loopback forward: TCP connections to `listen` are relayed to the unix socket `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// `proxy` or `mcp`, for messages.
    pub name: &'static str,
    /// The loopback address to listen on.
    pub listen: SocketAddr,
    /// The gate's socket, as bound into the unit.
    pub target: PathBuf,
}

/// Whether the shim proves confinement and forwards ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// A door unit: prove the private network namespace, then open these forwards.
    Confined {
        /// The forwards the unit's environment names, in order.
        forwards: Vec<Forward>,
    },
    /// `--unconfined` (sited's `none` mode): no proof, no forwards.
    Unconfined,
}

/// Everything the shim knows before the daemon says anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The door the unit serves.
    pub door: Door,
    /// Where the program runs (the site's workspace).
    pub workdir: PathBuf,
    /// The unit name for the hello.
    pub unit: String,
    /// The keys the unit fixes for the program, with the unit's values, in environment order.
    pub unit_env: Vec<(OsString, OsString)>,
    /// Whether to prove and forward.
    pub confinement: Confinement,
    /// Between SIGTERM and SIGKILL after a hang-up.
    pub kill_grace: Duration,
    /// How long to wait for the spec.
    pub spec_timeout: Duration,
}

// === impl Settings ===

impl Settings {
    /// Settings from the process's own environment and `/proc/self/cgroup`.
    pub fn load(unconfined: bool) -> Result<Settings, ShimError> {
        let cgroup = if unconfined {
            None
        } else {
            // Unreadable means no service to name; the hello then says `unconfined` and sited's
            // check of the unit name refuses the run.
            std::fs::read_to_string("/proc/self/cgroup").ok()
        };
        Settings::from_env(std::env::vars_os(), unconfined, cgroup.as_deref())
    }

    /// Settings from `vars` (the unit's environment) and the text of `/proc/self/cgroup`.
    ///
    /// A missing or unknown `ATELIER_DOOR`, or a missing or relative `ATELIER_UNIT_WORKDIR`,
    /// is [`ShimError::NoDoor`].
    pub fn from_env<I>(
        vars: I,
        unconfined: bool,
        cgroup: Option<&str>,
    ) -> Result<Settings, ShimError>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
        let get = |key: &str| {
            vars.iter()
                .find(|(k, _)| k.as_os_str() == key)
                .map(|(_, v)| v.clone())
        };

        let door = match get(DOOR_ENV) {
            None => return Err(ShimError::NoDoor(format!("{DOOR_ENV} is not set"))),
            Some(raw) => {
                let text = raw.to_string_lossy();
                text.parse::<Door>().map_err(|_| {
                    ShimError::NoDoor(format!("{DOOR_ENV}={text:?} is not turn, build or git"))
                })?
            }
        };
        let workdir = match get(WORKDIR_ENV).map(PathBuf::from) {
            None => return Err(ShimError::NoDoor(format!("{WORKDIR_ENV} is not set"))),
            Some(dir) if !dir.is_absolute() => {
                return Err(ShimError::NoDoor(format!(
                    "{WORKDIR_ENV}={:?} is not an absolute path",
                    dir.display()
                )))
            }
            Some(dir) => dir,
        };

        let unit_env = vars
            .iter()
            .filter(|(key, _)| {
                key.to_str()
                    .is_some_and(|key| is_passed_unit_key(door, key))
            })
            .cloned()
            .collect();

        let (confinement, unit) = if unconfined {
            (Confinement::Unconfined, UNCONFINED_UNIT.to_owned())
        } else {
            let mut forwards = Vec::new();
            if door_forwards_proxy(door) {
                if let Some(target) = get(GATE_SOCKET_ENV) {
                    forwards.push(Forward {
                        name: "proxy",
                        listen: loopback(PROXY_PORT),
                        target: target.into(),
                    });
                }
            }
            if door == Door::Turn {
                if let Some(target) = get(MCP_SOCKET_ENV) {
                    forwards.push(Forward {
                        name: "mcp",
                        listen: loopback(MCP_PORT),
                        target: target.into(),
                    });
                }
            }
            let unit = cgroup
                .and_then(procfs::unit_from_cgroup)
                .unwrap_or_else(|| UNCONFINED_UNIT.to_owned());
            (Confinement::Confined { forwards }, unit)
        };

        Ok(Settings {
            door,
            workdir,
            unit,
            unit_env,
            confinement,
            kill_grace: KILL_GRACE,
            spec_timeout: SPEC_TIMEOUT,
        })
    }
}

/// Returns true if and only if the unit's value of `key` is handed to the program: a key the
/// unit fixes for it (HOME, git's configuration, the transpiler cache, the turn door's
/// configuration directories), never the unit's own `ATELIER_*`/`DEDALO_*` settings.
fn is_passed_unit_key(door: Door, key: &str) -> bool {
    let unit_setting = FIXED_ENV_KEY_PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix));
    !unit_setting
        && (FIXED_ENV_KEYS.contains(&key)
            || (door == Door::Turn && TURN_DOOR_FIXED_ENV_KEYS.contains(&key)))
}

/// Returns true if and only if `door` has a way out through the gate: git has none at all.
fn door_forwards_proxy(door: Door) -> bool {
    matches!(door, Door::Turn | Door::Build)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

#[cfg(test)]
mod tests;
