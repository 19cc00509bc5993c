//! The connection to PID 1 and every question sited asks it: the release, unit states, stop,
//! kill, waiting for a unit to be gone, and the properties PID 1 loaded.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::{names::InterfaceName, proxy::CacheProperties};

use crate::error::{Error, Result};
use crate::names::{
    check_pattern, check_unit_name, parse_version, unit_object_path, NameError, Signal,
};
use crate::property::{check, Expected, Interface, LoadedUnit, Property, UnitKind};
use crate::value;

/// PID 1's bus name.
const SYSTEMD_SERVICE: &str = "org.freedesktop.systemd1";
/// The system bus, as the D-Bus specification names its default address.
const SYSTEM_BUS_ADDRESS: &str = "unix:path=/var/run/dbus/system_bus_socket";
/// How long one call may take: the D-Bus reference implementation's default. A PID 1 that
/// does not answer in that time is treated as unreachable, not waited on forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(25);
/// The first and the longest pause between two looks at a unit that is going away.
const WAIT_FIRST_POLL: Duration = Duration::from_millis(10);
const WAIT_MAX_POLL: Duration = Duration::from_millis(200);

const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";
const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
const INTERACTIVE_AUTH: &str = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";

/// One row of `ListUnitsByPatterns`/`ListUnitsByNames`: name, description, load state, active
/// state, sub state, following, object path, job id, job type, job path.
type ListedUnit = (
    String,
    String,
    String,
    String,
    String,
    String,
    OwnedObjectPath,
    u32,
    String,
    OwnedObjectPath,
);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;

    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    fn list_units_by_patterns(
        &self,
        states: &[&str],
        patterns: &[&str],
    ) -> zbus::Result<Vec<ListedUnit>>;

    fn list_units_by_names(&self, names: &[&str]) -> zbus::Result<Vec<ListedUnit>>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;

    fn get_unit_processes(&self, name: &str) -> zbus::Result<Vec<(String, u32, String)>>;
}

/// A unit's state as PID 1 reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStatus {
    /// The unit's name.
    pub name: String,
    /// `loaded`, `not-found`, `bad-setting`, `error` or `masked`.
    pub load_state: String,
    /// `active`, `reloading`, `inactive`, `failed`, `activating` or `deactivating`.
    pub active_state: String,
    /// The type-specific state, e.g. `running`, `stop-sigterm`, `dead`, `listening`.
    pub sub_state: String,
}

// === impl UnitStatus ===

impl UnitStatus {
    /// Returns true if and only if PID 1 reports the unit as not running: `inactive` or
    /// `failed`. (Processes may still be left in its cgroup; see [`Systemd::wait_gone`].)
    pub fn is_stopped(&self) -> bool {
        matches!(self.active_state.as_str(), "inactive" | "failed")
    }

    fn from_listed(row: ListedUnit) -> Self {
        Self {
            name: row.0,
            load_state: row.2,
            active_state: row.3,
            sub_state: row.4,
        }
    }
}

/// What became of a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// PID 1 queued a stop job (or found the unit already stopped).
    Queued {
        /// The job's object path.
        job: String,
    },
    /// PID 1 has no such unit loaded: nothing to stop.
    NotLoaded,
}

/// What became of a kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    /// PID 1 sent the signal to every process of the unit.
    Signalled,
    /// PID 1 has no such unit loaded: nothing to signal.
    NotLoaded,
}

/// A connection to PID 1 over D-Bus.
#[derive(Debug, Clone)]
pub struct Systemd {
    connection: zbus::Connection,
    manager: ManagerProxy<'static>,
    address: String,
}

// === impl Systemd ===

impl Systemd {
    /// Connects to PID 1 through the system bus.
    pub async fn system() -> Result<Self> {
        let unavailable = |source| Error::BusUnavailable {
            address: SYSTEM_BUS_ADDRESS.to_owned(),
            source,
        };
        let connection = zbus::connection::Builder::system()
            .map_err(unavailable)?
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await
            .map_err(unavailable)?;
        Self::over(connection, SYSTEM_BUS_ADDRESS.to_owned()).await
    }

    /// Connects to PID 1 through the bus at `address` (e.g. `unix:path=/run/dbus/…`).
    pub async fn at(address: &str) -> Result<Self> {
        let unavailable = |source| Error::BusUnavailable {
            address: address.to_owned(),
            source,
        };
        let connection = zbus::connection::Builder::address(address)
            .map_err(unavailable)?
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await
            .map_err(unavailable)?;
        Self::over(connection, address.to_owned()).await
    }

    async fn over(connection: zbus::Connection, address: String) -> Result<Self> {
        let manager = ManagerProxy::builder(&connection)
            // Every read asks PID 1 afresh: a cached value is an answer PID 1 no longer gives.
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|source| Error::BusUnavailable {
                address: address.clone(),
                source,
            })?;
        Ok(Self {
            connection,
            manager,
            address,
        })
    }

    /// The bus connection, for a caller that needs a call this crate does not make.
    pub fn connection(&self) -> &zbus::Connection {
        &self.connection
    }

    /// The bus address connected to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// PID 1's release, read off its `Version` (`252.39-1~deb12u2` is 252).
    pub async fn version(&self) -> Result<u32> {
        let version = self
            .manager
            .version()
            .await
            .map_err(|source| Error::Unreadable {
                unit: "Manager".to_owned(),
                what: "Version",
                source,
            })?;
        parse_version(&version).ok_or(Error::VersionUnreadable { version })
    }

    /// PID 1's release, refused when older than `min`.
    pub async fn require_version(&self, min: u32) -> Result<u32> {
        let found = self.version().await?;
        if found < min {
            return Err(Error::TooOld { found, min });
        }
        Ok(found)
    }

    /// Every unit PID 1 has loaded whose name matches one of `patterns` (globs), in any state.
    pub async fn units_matching(&self, patterns: &[&str]) -> Result<Vec<UnitStatus>> {
        // PID 1 reads no pattern as every unit it has: never what a caller means.
        if patterns.is_empty() {
            return Err(NameError::BadPattern {
                pattern: String::new(),
                why: "no pattern was given",
            }
            .into());
        }
        for pattern in patterns {
            check_pattern(pattern)?;
        }
        let rows = self
            .manager
            .list_units_by_patterns(&[], patterns)
            .await
            .map_err(|source| Error::Unreadable {
                unit: patterns.join(" "),
                what: "the unit list",
                source,
            })?;
        Ok(rows.into_iter().map(UnitStatus::from_listed).collect())
    }

    /// The units matching `patterns` that still hold a run: not stopped, or stopped with
    /// processes left in their cgroup (one that outlived its unit's main process under a
    /// `KillMode=` other than `control-group`, or one no signal reached yet).
    pub async fn live_units(&self, patterns: &[&str]) -> Result<Vec<UnitStatus>> {
        let mut live = Vec::new();
        for unit in self.units_matching(patterns).await? {
            if !unit.is_stopped() || self.processes_left(&unit.name).await?.unwrap_or(0) > 0 {
                live.push(unit);
            }
        }
        Ok(live)
    }

    /// One unit's state. A unit PID 1 does not have reads as `not-found`, `inactive`.
    pub async fn unit_state(&self, unit: &str) -> Result<UnitStatus> {
        check_unit_name(unit)?;
        let rows = self
            .manager
            .list_units_by_names(&[unit])
            .await
            .map_err(|source| Error::Unreadable {
                unit: unit.to_owned(),
                what: "its state",
                source,
            })?;
        rows.into_iter()
            .next()
            .map(UnitStatus::from_listed)
            .ok_or_else(|| Error::Unreadable {
                unit: unit.to_owned(),
                what: "its state",
                source: zbus::Error::Failure("PID 1 listed no row for it".to_owned()),
            })
    }

    /// The number of connections a socket unit holds open (`NConnections`): with
    /// `MaxConnections=1`, a door is free only at 0.
    pub async fn socket_connections(&self, socket: &str) -> Result<u32> {
        check_kind(socket, UnitKind::Socket)?;
        let path = object_path(socket)?;
        match self
            .get(&path, Interface::Socket, "NConnections", socket)
            .await?
        {
            value::Value::UInt(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => Err(Error::Unreadable {
                unit: socket.to_owned(),
                what: "NConnections",
                source: zbus::Error::Failure("not an unsigned integer".to_owned()),
            }),
        }
    }

    /// Asks PID 1 to stop `unit` (`StopUnit`, mode `replace`). Returns once the job is queued;
    /// [`Systemd::wait_gone`] waits for the result.
    pub async fn stop(&self, unit: &str) -> Result<Stopped> {
        check_unit_name(unit)?;
        match self.manager.stop_unit(unit, "replace").await {
            Ok(job) => Ok(Stopped::Queued {
                job: job.as_str().to_owned(),
            }),
            Err(error) => match refusal("StopUnit", unit, error) {
                Refusal::NoSuchUnit => Ok(Stopped::NotLoaded),
                Refusal::Error(error) => Err(error),
            },
        }
    }

    /// Sends `signal` to every process of `unit` (`KillUnit`, whom `all`).
    pub async fn kill(&self, unit: &str, signal: Signal) -> Result<Killed> {
        check_unit_name(unit)?;
        match self.manager.kill_unit(unit, "all", signal.number()).await {
            Ok(()) => Ok(Killed::Signalled),
            Err(error) => match refusal("KillUnit", unit, error) {
                Refusal::NoSuchUnit => Ok(Killed::NotLoaded),
                Refusal::Error(error) => Err(error),
            },
        }
    }

    /// Returns once PID 1 reports `unit` gone — not loaded, or `inactive`/`failed` with no
    /// process left in its cgroup — and [`Error::StillAlive`] if it is not by `deadline`.
    ///
    /// It polls, every 10 ms at first and then at most every 200 ms, rather than waiting for
    /// signals: what is left in the cgroup after the main process died emits no change
    /// signal, a signal can pass between subscribing and the first look, and one state read is
    /// a single round trip on a local socket.
    pub async fn wait_gone(&self, unit: &str, deadline: Instant) -> Result<()> {
        check_unit_name(unit)?;
        let mut pause = WAIT_FIRST_POLL;
        loop {
            let status = self.unit_state(unit).await?;
            let processes = if status.is_stopped() {
                self.processes_left(unit).await?
            } else {
                None
            };
            if status.is_stopped() && processes.unwrap_or(0) == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::StillAlive {
                    unit: unit.to_owned(),
                    active_state: status.active_state,
                    sub_state: status.sub_state,
                    processes,
                });
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(WAIT_MAX_POLL);
        }
    }

    /// How many processes are in the cgroup of a unit PID 1 still has (`GetUnitProcesses`,
    /// which any cgroup setup answers; `TasksCurrent` needs the pids controller, which a
    /// container may lack); `None` for a unit it does not have.
    async fn processes_left(&self, unit: &str) -> Result<Option<u64>> {
        match self.manager.get_unit_processes(unit).await {
            Ok(processes) => Ok(Some(processes.len() as u64)),
            Err(error) => match refusal("GetUnitProcesses", unit, error) {
                Refusal::NoSuchUnit => Ok(None),
                Refusal::Error(error) => Err(error),
            },
        }
    }

    /// Every property PID 1 has loaded for `unit` on the interfaces of `kind`, normalized.
    /// A unit PID 1 cannot find still reads, with `LoadState` `not-found`.
    pub async fn properties(&self, unit: &str, kind: UnitKind) -> Result<LoadedUnit> {
        check_kind(unit, kind)?;
        self.read(unit, kind, kind.interfaces()).await
    }

    /// Checks `unit` against `expected`: the first property PID 1 loaded differently is
    /// [`Error::Nonconformant`], naming it.
    pub async fn conform(&self, unit: &str, expected: &[(Property, Expected)]) -> Result<()> {
        check_unit_name(unit)?;
        let kind = UnitKind::of(unit).ok_or_else(|| NameError::BadUnitName {
            name: unit.to_owned(),
            why: "it is not a service, socket or target",
        })?;
        let interfaces: BTreeSet<Interface> = expected.iter().map(|(p, _)| p.interface).collect();
        let interfaces: Vec<Interface> = interfaces.into_iter().collect();
        // One GetAll per interface: measured in the box, asking each expected property with its
        // own Get (all sent at once) took about eight times longer than the full answers.
        let loaded = self.read(unit, kind, &interfaces).await?;
        check(&loaded, expected)?;
        Ok(())
    }

    async fn read(
        &self,
        unit: &str,
        kind: UnitKind,
        interfaces: &[Interface],
    ) -> Result<LoadedUnit> {
        let path = object_path(unit)?;
        let properties = self.properties_proxy(&path, unit).await?;
        let mut loaded = LoadedUnit::new(unit, kind);
        // The interfaces are asked at once: one connection carries them all, so the answers
        // cost one round trip rather than one each.
        let answers = try_join_all(interfaces.iter().map(|&interface| {
            let properties = &properties;
            async move {
                let name = InterfaceName::from_static_str_unchecked(interface.dbus_name());
                properties
                    .get_all(name)
                    .await
                    .map(|all| (interface, all))
                    .map_err(|source| Error::Unreadable {
                        unit: unit.to_owned(),
                        what: "its properties",
                        source: source.into(),
                    })
            }
        }))
        .await?;
        for (interface, all) in answers {
            for (property, value) in all {
                let normalized = value::from_dbus(&property, &value);
                loaded.properties.insert((interface, property), normalized);
            }
        }
        Ok(loaded)
    }

    async fn properties_proxy(
        &self,
        path: &OwnedObjectPath,
        unit: &str,
    ) -> Result<zbus::fdo::PropertiesProxy<'static>> {
        let unreadable = |source| Error::Unreadable {
            unit: unit.to_owned(),
            what: "its properties",
            source,
        };
        zbus::fdo::PropertiesProxy::builder(&self.connection)
            .destination(SYSTEMD_SERVICE)
            .map_err(unreadable)?
            .path(path.clone())
            .map_err(unreadable)?
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(unreadable)
    }

    async fn get(
        &self,
        path: &OwnedObjectPath,
        interface: Interface,
        name: &'static str,
        unit: &str,
    ) -> Result<value::Value> {
        let properties = self.properties_proxy(path, unit).await?;
        let value: OwnedValue = properties
            .get(
                InterfaceName::from_static_str_unchecked(interface.dbus_name()),
                name,
            )
            .await
            .map_err(|source| Error::Unreadable {
                unit: unit.to_owned(),
                what: name,
                source: source.into(),
            })?;
        Ok(value::from_dbus(name, &value))
    }
}

/// [`unit_object_path`] as a D-Bus object path.
fn object_path(unit: &str) -> Result<OwnedObjectPath> {
    OwnedObjectPath::try_from(unit_object_path(unit)).map_err(|source| Error::Unreadable {
        unit: unit.to_owned(),
        what: "its object",
        source: source.into(),
    })
}

fn check_kind(unit: &str, kind: UnitKind) -> Result<(), NameError> {
    check_unit_name(unit)?;
    if UnitKind::of(unit) == Some(kind) {
        Ok(())
    } else {
        Err(NameError::BadUnitName {
            name: unit.to_owned(),
            why: match kind {
                UnitKind::Service => "it is not a service unit",
                UnitKind::Socket => "it is not a socket unit",
                UnitKind::Target => "it is not a target unit",
            },
        })
    }
}

enum Refusal {
    NoSuchUnit,
    Error(Error),
}

/// Sorts a failed call: no such unit, not authorized, or another refusal.
fn refusal(method: &'static str, unit: &str, error: zbus::Error) -> Refusal {
    let (name, message) = match &error {
        zbus::Error::MethodError(name, message, _) => (
            name.as_str().to_owned(),
            message.clone().unwrap_or_default(),
        ),
        zbus::Error::FDO(fdo) => match fdo.as_ref() {
            zbus::fdo::Error::AccessDenied(message) => (ACCESS_DENIED.to_owned(), message.clone()),
            zbus::fdo::Error::InteractiveAuthorizationRequired(message) => {
                (INTERACTIVE_AUTH.to_owned(), message.clone())
            }
            other => (String::new(), other.to_string()),
        },
        _ => {
            return Refusal::Error(Error::Unreadable {
                unit: unit.to_owned(),
                what: method,
                source: error,
            })
        }
    };
    match name.as_str() {
        NO_SUCH_UNIT => Refusal::NoSuchUnit,
        ACCESS_DENIED | INTERACTIVE_AUTH => Refusal::Error(Error::Denied {
            method,
            unit: unit.to_owned(),
            message,
        }),
        _ => Refusal::Error(Error::Refused {
            method,
            unit: unit.to_owned(),
            name,
            message,
        }),
    }
}
