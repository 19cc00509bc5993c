//! What Atelier requires PID 1 to have loaded for one door of one site: its socket, its target
//! and its service template, as data derived from the same layout facts the provisioner
//! renders from.
//!
//! Names, paths, identities, modes and caps come from `atelier_layout`; the values below are
//! the ones the unit templates (`units/atelier-door*.in`) write as literals, held to those
//! templates by the test that reads the committed rendered units.

use std::path::{Path, PathBuf};

use atelier_layout::declaration::Site;
use atelier_layout::names::{self, Door, InstanceName, SiteOrdinal};
use atelier_layout::paths::{self, mode_rule, Role};
use atelier_layout::services::{self, DOOR_ENV, GATE_SOCKET_ENV, MCP_SOCKET_ENV, WORKDIR_ENV};
use atelier_layout::workspace::{BUILDER_DIR, REPOSITORY_DIR};
use atelier_layout::Layout;

use futures_util::future::join_all;

use crate::client::Systemd;
use crate::error::Result;
use crate::property::{Expected, Property, UnitExpectations, UnitKind};
use crate::unit_file::{parse_cpu_quota, parse_size};
use crate::value::{ExecCommand, Value};

/// The instance of a door's service template whose properties are read: any instance loads
/// the template's file and every drop-in that applies to all of them.
pub const PROBE_INSTANCE: &str = "probe";

/// `TimeoutStopSec=` of every door run.
const STOP_TIMEOUT_USEC: u64 = 10_000_000; // 10 seconds
/// `TriggerLimitIntervalSec=` and `TriggerLimitBurst=` of every door socket.
const TRIGGER_LIMIT_INTERVAL_USEC: u64 = 2_000_000; // 2 seconds
const TRIGGER_LIMIT_BURST: u64 = 20;
/// Where the turn door sees its system gitconfig.
const TURN_GITCONFIG_IN_UNIT: &str = "/etc/gitconfig";
/// The tmpfs masks every door gets besides the sites root.
const TEMPORARY_MASKS: [(&str, &str); 2] = [("/run", "ro"), ("/dev/shm", "mode=1777,nosuid,nodev")];
/// The address families of a door with a way out (the shim's loopback forwards) and of one
/// without (the git door: unix sockets and netlink only).
const PROXY_FAMILIES: [&str; 4] = ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"];
const CLOSED_FAMILIES: [&str; 2] = ["AF_UNIX", "AF_NETLINK"];
/// `IPAddressDeny=any` and `IPAddressAllow=localhost`, as PID 1 expands them.
const DENY_ANY: [&str; 2] = ["0.0.0.0/0", "::/0"];
const ALLOW_LOCALHOST: [&str; 2] = ["127.0.0.0/8", "::1/128"];
/// `SystemCallErrorNumber=EPERM`.
const EPERM: i64 = 1;
/// What a door's syscall filter (`@system-service` without `@privileged @resources`) must never
/// allow: mounting, tracing, modules, rebooting, swap, raw I/O and the privileged and resource
/// calls; the groups as a unit file names them, the calls as PID 1 reports the expanded list.
const SYSCALLS_NEVER_ALLOWED: [&str; 35] = [
    "@mount",
    "@debug",
    "@module",
    "@reboot",
    "@swap",
    "@raw-io",
    "@privileged",
    "@resources",
    "@obsolete",
    "@cpu-emulation",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "ptrace",
    "perf_event_open",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "iopl",
    "ioperm",
    "bpf",
    "setuid",
    "setgroups",
    "capset",
    "sethostname",
    "open_by_handle_at",
    "setrlimit",
    "sched_setscheduler",
    "acct",
];

/// Service properties that must be empty: no other command, identity, namespace, credential,
/// environment source, directory, image or file descriptor than the ones Atelier renders.
/// (`OpenFile=` hands the run a file PID 1 opened as root; systemd before 253 has no such
/// property, which reads as empty.)
const EMPTY_SERVICE_PROPERTIES: [&str; 31] = [
    "ExecCondition",
    "ExecStartPre",
    "ExecStartPost",
    "ExecReload",
    "ExecStop",
    "ExecStopPost",
    "SupplementaryGroups",
    "NetworkNamespacePath",
    "IPCNamespacePath",
    "PAMName",
    "LoadCredential",
    "LoadCredentialEncrypted",
    "SetCredential",
    "SetCredentialEncrypted",
    "ImportCredential",
    "EnvironmentFiles",
    "PassEnvironment",
    "RuntimeDirectory",
    "StateDirectory",
    "CacheDirectory",
    "LogsDirectory",
    "ConfigurationDirectory",
    "RootImage",
    "MountImages",
    "ExtensionImages",
    "ExtensionDirectories",
    "BPFProgram",
    "IPIngressFilterPath",
    "IPEgressFilterPath",
    "LogNamespace",
    "OpenFile",
];

/// What sited knows about one door of one site: the instance, the site's ordinal and slug,
/// the door, and the paths of its env file (and of the shim it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorFacts {
    /// The instance.
    pub instance: InstanceName,
    /// The site's ordinal `k`.
    pub site: SiteOrdinal,
    /// The site's slug (its workspace's name).
    pub slug: String,
    /// The door.
    pub door: Door,
    /// `ATELIER_SITES_ROOT`.
    pub sites_root: PathBuf,
    /// `ATELIER_AGENT_STATE_ROOT`.
    pub agents_root: PathBuf,
    /// The instance's config dir, which every door masks.
    pub config_dir: PathBuf,
    /// The shim every door unit runs.
    pub shim: PathBuf,
    /// The door's ceiling in milliseconds (`RuntimeMaxSec=` is derived from it).
    pub ceiling_ms: u64,
    /// PID 1's release (`PrivatePIDs=` is required from 257 on).
    pub systemd_version: u32,
}

// === impl DoorFacts ===

impl DoorFacts {
    /// The facts the provisioner renders site `k`'s `door` from.
    pub fn from_layout(
        layout: &Layout<'_>,
        k: SiteOrdinal,
        site: &Site,
        door: Door,
        systemd_version: u32,
    ) -> Self {
        Self {
            instance: layout.instance().clone(),
            site: k,
            slug: site.slug.clone(),
            door,
            sites_root: layout.sites_root(),
            agents_root: layout.agents_root(),
            config_dir: layout.config_dir(),
            shim: layout.binary(services::SHIM_BINARY),
            ceiling_ms: layout.door_ceiling_ms(door),
            systemd_version,
        }
    }

    fn workspace(&self) -> PathBuf {
        paths::site_workspace(&self.sites_root, &self.slug)
    }
}

/// What PID 1 must have loaded for a door's socket, target and service, checked in that
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorExpectations {
    /// `atelier-<inst>-s<k>-<door>.socket`.
    pub socket: UnitExpectations,
    /// `atelier-<inst>-s<k>-<door>.target`.
    pub target: UnitExpectations,
    /// `atelier-<inst>-s<k>-<door>@probe.service`, an instance of the template.
    pub service: UnitExpectations,
}

// === impl DoorExpectations ===

impl DoorExpectations {
    /// The three units' expectations, socket first.
    pub fn units(&self) -> [&UnitExpectations; 3] {
        [&self.socket, &self.target, &self.service]
    }
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn is(value: Value) -> Expected {
    Expected::Is(value)
}

fn yes() -> Expected {
    Expected::Is(Value::Bool(true))
}

fn no() -> Expected {
    Expected::Is(Value::Bool(false))
}

fn word(text: &str) -> Expected {
    Expected::Is(Value::str(text))
}

fn includes<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Expected {
    Expected::Includes(items.into_iter().map(Into::into).collect())
}

/// Exactly these items in any order; none at all is [`Expected::Empty`], which a unit that
/// does not mention the directive meets too.
fn same_set<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Expected {
    let list = Value::list(items);
    if list.is_empty() {
        Expected::Empty
    } else {
        Expected::SameSet(list)
    }
}

/// A layout string cap in directive syntax (`2G`, `200%`), as PID 1 stores it; one that does
/// not parse expects a value no PID 1 reports, so the check refuses rather than passes.
fn cap(parsed: Option<u64>, directive: &str) -> Expected {
    is(parsed
        .map(Value::UInt)
        .unwrap_or_else(|| Value::Unsupported(format!("unparsable cap {directive:?}"))))
}

/// Everything Atelier requires of one door's three units.
pub fn door_expectations(facts: &DoorFacts) -> DoorExpectations {
    DoorExpectations {
        socket: socket_expectations(facts),
        target: target_expectations(facts),
        service: service_expectations(facts),
    }
}

fn socket_expectations(facts: &DoorFacts) -> UnitExpectations {
    let inst = &facts.instance;
    let k = facts.site;
    let rule = mode_rule(Role::DoorSocket);
    let principal = |p| paths::instance_principal_name(p, inst, Some(k)).unwrap_or_default();
    let socket = Property::socket;
    let mut expected = vec![
        (Property::unit("LoadState"), word("loaded")),
        (
            Property::unit("PartOf"),
            includes([names::sited_service_unit(inst)]),
        ),
        (
            socket("Listen"),
            is(Value::pairs([(
                "Stream",
                text(&paths::door_socket_path(inst, k, facts.door)),
            )])),
        ),
        (socket("Accept"), yes()),
        (socket("MaxConnections"), is(Value::UInt(1))),
        (socket("SocketUser"), is(Value::str(principal(rule.owner)))),
        (socket("SocketGroup"), is(Value::str(principal(rule.group)))),
        (socket("SocketMode"), is(Value::UInt(u64::from(rule.mode)))),
        (
            socket("DirectoryMode"),
            is(Value::UInt(u64::from(mode_rule(Role::RuntimeDir).mode))),
        ),
        (
            socket("TriggerLimitIntervalUSec"),
            is(Value::UInt(TRIGGER_LIMIT_INTERVAL_USEC)),
        ),
        (
            socket("TriggerLimitBurst"),
            is(Value::UInt(TRIGGER_LIMIT_BURST)),
        ),
    ];
    for name in [
        "ExecStartPre",
        "ExecStartPost",
        "ExecStopPre",
        "ExecStopPost",
    ] {
        expected.push((socket(name), Expected::Empty));
    }
    UnitExpectations {
        unit: names::door_socket_unit(inst, k, facts.door),
        kind: UnitKind::Socket,
        expected,
    }
}

fn target_expectations(facts: &DoorFacts) -> UnitExpectations {
    let inst = &facts.instance;
    let k = facts.site;
    let others: Vec<String> = Door::ALL
        .into_iter()
        .filter(|&other| other != facts.door)
        .map(|other| names::door_target_unit(inst, k, other))
        .collect();
    // A switch of doors stops the old one before the new one starts: later doors order after.
    let later: Vec<String> = Door::ALL
        .into_iter()
        .skip_while(|&other| other != facts.door)
        .skip(1)
        .map(|other| names::door_target_unit(inst, k, other))
        .collect();
    UnitExpectations {
        unit: names::door_target_unit(inst, k, facts.door),
        kind: UnitKind::Target,
        expected: vec![
            (Property::unit("LoadState"), word("loaded")),
            (Property::unit("Conflicts"), includes(others)),
            (Property::unit("After"), includes(later)),
            (Property::unit("StopWhenUnneeded"), yes()),
        ],
    }
}

fn service_expectations(facts: &DoorFacts) -> UnitExpectations {
    let inst = &facts.instance;
    let k = facts.site;
    let door = facts.door;
    let workspace = text(&facts.workspace());
    let target = names::door_target_unit(inst, k, door);
    let sited = names::sited_service_unit(inst);
    let gate = names::gate_socket_unit(inst, k);
    let unit = Property::unit;
    let service = Property::service;

    let mut after = vec![target.clone(), sited.clone()];
    let mut requires = Vec::new();
    if door.has_way_out() {
        after.push(gate.clone());
        requires.push(gate);
    }

    let mut environment = vec![
        format!("{DOOR_ENV}={door}"),
        format!("{WORKDIR_ENV}={workspace}"),
    ];
    let home = paths::agent_home(&facts.agents_root, k, door);
    match &home {
        Some(home) => {
            if door == Door::Turn {
                for (key, value) in paths::turn_home_env(home) {
                    environment.push(format!("{key}={}", text(&value)));
                }
            }
            environment.push(format!("HOME={}", text(home)));
        }
        None => environment.extend(
            services::GIT_DOOR_ENV
                .iter()
                .map(|(key, value)| format!("{key}={value}")),
        ),
    }
    let mut read_only_binds = Vec::new();
    for (outside, inside, key) in [
        (
            paths::gate_socket_path(inst, k, door),
            paths::gate_socket_in_unit(door),
            GATE_SOCKET_ENV,
        ),
        (
            paths::gate_mcp_socket_path(inst, k, door),
            paths::gate_mcp_socket_in_unit(door),
            MCP_SOCKET_ENV,
        ),
    ] {
        if let (Some(outside), Some(inside)) = (outside, inside) {
            environment.push(format!("{key}={}", text(&inside)));
            read_only_binds.push(format!("{}:{}", text(&outside), text(&inside)));
        }
    }

    // Masks and read-only places name the host's path of a place in the door's root.
    let door_root = paths::door_root_beside(&facts.agents_root);
    let in_root = |path: &str| text(&paths::in_door_root(&door_root, Path::new(path)));
    let mut inaccessible = vec![in_root(paths::SYSFS)];
    inaccessible.extend(
        paths::door_hidden_masks(&door_root, &facts.config_dir)
            .iter()
            .map(|mask| format!("-{}", text(mask))),
    );
    if door == Door::Turn {
        // The turn never sees the repository's metadata; its git reads root's gitconfig only.
        inaccessible.push(in_root(&format!("{workspace}/{REPOSITORY_DIR}")));
        inaccessible.extend(
            paths::TURN_MASKED_WORKSPACE_DIRS
                .iter()
                .map(|dir| format!("-{}", in_root(&format!("{workspace}/{dir}")))),
        );
        read_only_binds.push(format!(
            "{}:{TURN_GITCONFIG_IN_UNIT}",
            text(&paths::turn_gitconfig_path(&facts.agents_root))
        ));
    }
    // The host's system folders, read-only, each at its own place.
    read_only_binds.extend(
        paths::door_system_binds()
            .into_iter()
            .map(|bind| format!("{bind}:{}", bind.trim_start_matches('-'))),
    );
    // sited's state, which no run may rename away; the repository, which a build (running what
    // the turn wrote) reads and never rewrites.
    let mut read_only = vec![in_root(&format!("{workspace}/{BUILDER_DIR}"))];
    if door == Door::Build {
        read_only.push(in_root(&format!("{workspace}/{REPOSITORY_DIR}")));
    }
    let mut temporary = vec![(text(&facts.sites_root), "ro".to_owned())];
    temporary.extend(
        TEMPORARY_MASKS
            .iter()
            .map(|(path, options)| ((*path).to_owned(), (*options).to_owned())),
    );
    // The workspace alone of the sites root, and the door's HOME.
    let binds: Vec<String> = std::iter::once(workspace.clone())
        .chain(home.iter().map(|home| text(home)))
        .map(|path| format!("{path}:{path}"))
        .collect();

    let mut expected = vec![
        (unit("LoadState"), word("loaded")),
        (unit("BindsTo"), includes([target, sited])),
        (unit("After"), includes(after)),
        (unit("Requires"), includes(requires)),
        (unit("CollectMode"), word("inactive-or-failed")),
        (unit("JoinsNamespaceOf"), Expected::Empty),
        (service("Type"), word("exec")),
        (
            service("User"),
            is(Value::str(names::site_identity(inst, k))),
        ),
        (service("Group"), is(Value::str(names::service_group(inst)))),
        (service("DynamicUser"), no()),
        (service("PrivateUsers"), no()),
        (service("WorkingDirectory"), word("/")),
        (service("StandardInput"), word("socket")),
        (service("StandardOutput"), word("socket")),
        (service("StandardError"), word("journal")),
        (
            service("ExecStartEx"),
            is(Value::Commands(vec![ExecCommand::plain(&[&text(
                &facts.shim,
            )])])),
        ),
        (service("Environment"), same_set(environment)),
        (
            service("TimeoutStopUSec"),
            is(Value::UInt(STOP_TIMEOUT_USEC)),
        ),
        (service("KillMode"), word("control-group")),
        (service("KillSignal"), is(Value::Int(15))),
        (service("SendSIGKILL"), yes()),
        (service("FinalKillSignal"), is(Value::Int(9))),
        (service("UMask"), is(Value::UInt(0o007))),
        (
            service("MemoryMax"),
            cap(parse_size(paths::RUN_MEMORY_MAX), paths::RUN_MEMORY_MAX),
        ),
        (
            service("CPUQuotaPerSecUSec"),
            cap(parse_cpu_quota(paths::RUN_CPU_QUOTA), paths::RUN_CPU_QUOTA),
        ),
        (
            service("TasksMax"),
            is(Value::UInt(u64::from(paths::RUN_TASKS_MAX))),
        ),
        (
            service("RuntimeMaxUSec"),
            is(Value::UInt(
                paths::runtime_max_sec(facts.ceiling_ms).saturating_mul(1_000_000),
            )),
        ),
        (service("RootDirectory"), is(Value::str(text(&door_root)))),
        (service("ProtectSystem"), word("strict")),
        (service("ProtectHome"), word("no")),
        (service("ReadWritePaths"), Expected::Empty),
        (
            service("TemporaryFileSystem"),
            Expected::SameSet(Value::Pairs(temporary)),
        ),
        (service("BindPaths"), same_set(binds)),
        (service("InaccessiblePaths"), same_set(inaccessible)),
        (service("PrivateTmp"), yes()),
        (service("PrivateDevices"), yes()),
        (service("DevicePolicy"), word("closed")),
        (service("PrivateMounts"), yes()),
        (service("ProtectProc"), word("invisible")),
        (service("ProcSubset"), word("pid")),
        (service("ProtectKernelTunables"), no()),
        (service("ProtectKernelModules"), yes()),
        (service("ProtectKernelLogs"), yes()),
        (service("ProtectControlGroups"), yes()),
        (service("ProtectClock"), yes()),
        (service("ProtectHostname"), yes()),
        (service("NoNewPrivileges"), no()),
        (service("CapabilityBoundingSet"), is(Value::UInt(0))),
        (service("AmbientCapabilities"), is(Value::UInt(0))),
        (service("RestrictNamespaces"), is(Value::UInt(0))),
        (service("RestrictRealtime"), yes()),
        (service("RestrictSUIDSGID"), yes()),
        (service("LockPersonality"), yes()),
        (service("KeyringMode"), word("private")),
        (service("RemoveIPC"), yes()),
        (service("SystemCallArchitectures"), same_set(["native"])),
        (
            service("SystemCallFilter"),
            Expected::AllowListWithout(SYSCALLS_NEVER_ALLOWED.map(str::to_owned).to_vec()),
        ),
        (service("SystemCallErrorNumber"), is(Value::Int(EPERM))),
        (service("PrivateNetwork"), yes()),
        (service("PrivateIPC"), yes()),
    ];
    if facts.systemd_version >= paths::PRIVATE_PIDS_SINCE {
        expected.push((service("PrivatePIDs"), yes()));
    }
    expected.extend([
        (service("IPAddressDeny"), same_set(DENY_ANY)),
        (
            service("IPAddressAllow"),
            if door.has_way_out() {
                same_set(ALLOW_LOCALHOST)
            } else {
                Expected::Empty
            },
        ),
        (
            service("RestrictAddressFamilies"),
            if door.has_way_out() {
                same_set(PROXY_FAMILIES)
            } else {
                same_set(CLOSED_FAMILIES)
            },
        ),
        (service("BindReadOnlyPaths"), same_set(read_only_binds)),
        (service("ReadOnlyPaths"), same_set(read_only)),
    ]);
    for name in EMPTY_SERVICE_PROPERTIES {
        expected.push((service(name), Expected::Empty));
    }
    UnitExpectations {
        unit: format!(
            "{}{PROBE_INSTANCE}.service",
            names::door_service_instance_stem(inst, k, door)
        ),
        kind: UnitKind::Service,
        expected,
    }
}

// === impl Systemd (doors) ===

impl Systemd {
    /// Checks a door's socket, target and service, in that order; the first property PID 1
    /// loaded differently is [`crate::Error::Nonconformant`], naming its unit and property.
    ///
    /// The three are read at once and judged in order, so a refusal is the same whichever
    /// answer arrives first.
    pub async fn conform_door(&self, door: &DoorExpectations) -> Result<()> {
        let results = join_all(
            door.units()
                .map(|unit| self.conform(&unit.unit, &unit.expected)),
        )
        .await;
        results.into_iter().collect()
    }
}
