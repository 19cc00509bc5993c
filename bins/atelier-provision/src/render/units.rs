//! The unit files: sited's socket and service; per site and door the socket, the target and
//! the run template; per site the gate's socket and service; every daemon's metrics socket.

use std::fmt::Write as _;
use std::path::Path;

use atelier_layout::declaration::{Chat, Site};
use atelier_layout::names::{self, Door, METRICS_SOCKET_NAME};
use atelier_layout::paths::{
    self, mode_rule, MetricsDaemon, MetricsSocket, Role, RUN_CPU_QUOTA, RUN_MEMORY_MAX,
    RUN_TASKS_MAX,
};
use atelier_layout::services::{self, env, CHATD_DATABASE_FILE, DOOR_ENV, WORKDIR_ENV};
use atelier_layout::workspace::{BUILDER_DIR, REPOSITORY_DIR};
use atelier_layout::{Layout, SiteOrdinal};

use super::template::{self, fill};
use super::{artifact, safe_origin, safe_path, RenderError, RenderFacts, PRIVATE_PIDS_SINCE};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

// The in-unit environment of the git door, which reads no configuration of anyone's.
use atelier_layout::services::GIT_DOOR_ENV;

/// The gate's memory cap: it pumps bytes, nothing more.
const GATE_MEMORY_MAX: &str = "256M";

pub use atelier_layout::services::{GATE_SOCKET_ENV, MCP_SOCKET_ENV};

/// Owner, group and mode of a socket or directory PID 1 creates, from the mode matrix.
fn owned(layout: &Layout<'_>, role: Role, k: Option<SiteOrdinal>) -> (String, String, String) {
    let rule = mode_rule(role);
    (
        layout.principal_name(rule.owner, k),
        layout.principal_name(rule.group, k),
        format!("{:04o}", rule.mode),
    )
}

fn mode_of(role: Role) -> String {
    format!("{:04o}", mode_rule(role).mode)
}

/// Appends every unit of the instance.
pub(super) fn render(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    facts: &RenderFacts,
    out: &mut Vec<Artifact>,
) -> Result<(), RenderError> {
    let inst = layout.instance();
    let unit = |name: &str, kind: ArtifactKind, body: &str| {
        artifact(
            layout,
            layout.unit_path(name),
            Role::UnitFile,
            kind,
            CommentStyle::Hash,
            body,
        )
    };
    out.push(unit(
        &names::sited_socket_unit(inst),
        ArtifactKind::Unit,
        &sited_socket(layout)?,
    ));
    out.push(unit(
        &names::sited_service_unit(inst),
        ArtifactKind::Unit,
        &sited_service(layout, sites)?,
    ));
    for &(k, site) in sites {
        for door in Door::ALL {
            out.push(unit(
                &names::door_socket_unit(inst, k, door),
                ArtifactKind::AgentUnits,
                &door_socket(layout, k, door)?,
            ));
            out.push(unit(
                &names::door_target_unit(inst, k, door),
                ArtifactKind::AgentUnits,
                &door_target(layout, k, door)?,
            ));
            out.push(unit(
                &names::door_service_template(inst, k, door),
                ArtifactKind::AgentUnits,
                &door_service(layout, k, site, door, facts)?,
            ));
        }
        out.push(unit(
            &names::gate_socket_unit(inst, k),
            ArtifactKind::Gate,
            &gate_socket(layout, k)?,
        ));
        out.push(unit(
            &names::gate_decisions_socket_unit(inst, k),
            ArtifactKind::Gate,
            &gate_decisions_socket(layout, k)?,
        ));
        out.push(unit(
            &names::gate_service_unit(inst, k),
            ArtifactKind::Gate,
            &gate_service(layout, k)?,
        ));
    }
    for socket in layout.metrics_sockets(sites) {
        let kind = match socket.daemon {
            MetricsDaemon::Sited => ArtifactKind::Unit,
            MetricsDaemon::Chatd => ArtifactKind::Chat,
            MetricsDaemon::Gate(_) => ArtifactKind::Gate,
        };
        out.push(unit(&socket.unit, kind, &metrics_socket(layout, &socket)?));
    }
    if let Some(chat) = &layout.declaration().chat {
        for (name, body) in [
            (names::chatd_socket_unit(inst), chatd_socket(layout)?),
            (
                names::chatd_service_unit(inst),
                chatd_service(layout, chat)?,
            ),
            (
                names::chatd_purge_timer_unit(inst),
                fill(
                    template::CHATD_PURGE_TIMER,
                    &[("INSTANCE", inst.to_string())],
                )?,
            ),
            (
                names::chatd_purge_service_unit(inst),
                chatd_purge_service(layout)?,
            ),
        ] {
            out.push(unit(&name, ArtifactKind::Chat, &body));
        }
    }
    Ok(())
}

fn metrics_socket(layout: &Layout<'_>, socket: &MetricsSocket) -> Result<String, RenderError> {
    let (user, group, mode) = owned(layout, Role::MetricsSocket, socket.daemon.site());
    fill(
        template::METRICS_SOCKET,
        &[
            ("SERVICE_UNIT", socket.service.clone()),
            ("METRICS_SOCKET_PATH", safe_path(&socket.path)?),
            ("FD_NAME", METRICS_SOCKET_NAME.to_owned()),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::MetricsDir)),
        ],
    )
}

fn chatd_socket(layout: &Layout<'_>) -> Result<String, RenderError> {
    let (user, group, mode) = owned(layout, Role::ChatSocket, None);
    fill(
        template::CHATD_SOCKET,
        &[
            ("INSTANCE", layout.instance().to_string()),
            ("CHATD_SOCKET_PATH", safe_path(&layout.chatd_socket_path())?),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::RuntimeDir)),
        ],
    )
}

/// The values chatd's service and its purge share: who they run as, which database, and the
/// instance trees hidden from both.
fn chatd_common(layout: &Layout<'_>) -> Result<Vec<(&'static str, String)>, RenderError> {
    let inst = layout.instance();
    let user = names::chatd_user(inst);
    Ok(vec![
        ("INSTANCE", inst.to_string()),
        (
            "CHATD_BIN",
            safe_path(&layout.binary(services::CHATD_BINARY))?,
        ),
        ("DATABASE", format!("/var/lib/{user}/{CHATD_DATABASE_FILE}")),
        ("CHATD_USER", user),
        ("STATE_DIR", safe_path(&layout.state_dir())?),
        ("CONFIG_DIR", safe_path(&layout.config_dir())?),
    ])
}

fn chatd_service(layout: &Layout<'_>, chat: &Chat) -> Result<String, RenderError> {
    let inst = layout.instance();
    let mut credentials = String::new();
    for (id, source) in layout.chatd_credential_sources() {
        check_credential_id(&id)?;
        writeln!(credentials, "LoadCredential={id}:{}", safe_path(&source)?).ok();
    }
    let mut values = chatd_common(layout)?;
    values.extend([
        ("CHATD_SOCKET_UNIT", names::chatd_socket_unit(inst)),
        (
            "CHATD_METRICS_SOCKET_UNIT",
            names::chatd_metrics_socket_unit(inst),
        ),
        ("PUBLIC_ORIGIN", safe_origin(&chat.public_origin)?),
        ("CMS_ORIGIN", safe_origin(&chat.cms_origin)?),
        (
            "PROVIDER_IDLE_TIMEOUT",
            chat.provider_idle_timeout_ms
                .map(|ms| format!("Environment=CHATD_PROVIDER_IDLE_TIMEOUT_MS={ms}\n"))
                .unwrap_or_default(),
        ),
        ("LOAD_CREDENTIALS", credentials),
    ]);
    fill(template::CHATD_SERVICE, &values)
}

fn chatd_purge_service(layout: &Layout<'_>) -> Result<String, RenderError> {
    fill(template::CHATD_PURGE_SERVICE, &chatd_common(layout)?)
}

fn sited_socket(layout: &Layout<'_>) -> Result<String, RenderError> {
    let (user, group, mode) = owned(layout, Role::SitedSocket, None);
    fill(
        template::SITED_SOCKET,
        &[
            ("INSTANCE", layout.instance().to_string()),
            ("SITED_SOCKET_PATH", safe_path(&layout.sited_socket_path())?),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::RuntimeDir)),
        ],
    )
}

fn sited_service(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
) -> Result<String, RenderError> {
    let inst = layout.instance();
    let decl = layout.declaration();
    let mut sockets = vec![names::sited_metrics_socket_unit(inst)];
    for &(k, _) in sites {
        for door in Door::ALL {
            sockets.push(names::door_socket_unit(inst, k, door));
        }
        sockets.push(names::gate_socket_unit(inst, k));
        sockets.push(names::gate_decisions_socket_unit(inst, k));
    }
    let list = sockets.join(" ");
    let socket_dependencies = format!("Wants={list}\nAfter={list}\n");
    let mut credentials = String::new();
    for (id, source) in layout.sited_credential_sources() {
        check_credential_id(&id)?;
        writeln!(credentials, "LoadCredential={id}:{}", safe_path(&source)?).ok();
    }
    let mut read_write = String::new();
    for path in layout.sited_read_write_paths(sites) {
        writeln!(read_write, "ReadWritePaths={}", safe_path(&path)?).ok();
    }
    let mut resources = String::new();
    let declared = &decl.resources;
    for (key, value) in [
        ("MemoryMax", declared.memory_max.clone()),
        ("MemoryHigh", declared.memory_high.clone()),
        ("CPUQuota", declared.cpu_quota.clone()),
        ("TasksMax", declared.tasks_max.map(|n| n.to_string())),
    ] {
        if let Some(value) = value {
            writeln!(resources, "{key}={value}").ok();
        }
    }
    fill(
        template::SITED_SERVICE,
        &[
            ("INSTANCE", inst.to_string()),
            ("DECLARATION_PATH", safe_path(&layout.declaration_path())?),
            ("SITED_SOCKET_UNIT", names::sited_socket_unit(inst)),
            ("SOCKET_DEPENDENCIES", socket_dependencies),
            (
                "SITED_BIN",
                safe_path(&layout.binary(services::SITED_BINARY))?,
            ),
            ("SERVICE_USER", layout.service_user()),
            ("SERVICE_GROUP", layout.service_group()),
            ("ENV_FILE", safe_path(&layout.env_file())?),
            ("INSTANCE_ENV", env::INSTANCE.to_owned()),
            ("LOAD_CREDENTIALS", credentials),
            ("RESOURCES", resources),
            ("READ_WRITE_PATHS", read_write),
        ],
    )
}

/// A `LoadCredential=` id: the declaration's grammar, held again where it becomes a unit line.
fn check_credential_id(id: &str) -> Result<(), RenderError> {
    let mut chars = id.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(RenderError::UnsafeValue {
            what: format!("credential id {id:?}"),
            why: "a credential id is uppercase letters, digits and '_'",
        })
    }
}

fn door_socket(layout: &Layout<'_>, k: SiteOrdinal, door: Door) -> Result<String, RenderError> {
    let (user, group, mode) = owned(layout, Role::DoorSocket, Some(k));
    fill(
        template::DOOR_SOCKET,
        &[
            ("INSTANCE", layout.instance().to_string()),
            ("ORDINAL", k.to_string()),
            ("DOOR", door.to_string()),
            (
                "SITED_SERVICE_UNIT",
                names::sited_service_unit(layout.instance()),
            ),
            (
                "DOOR_SOCKET_PATH",
                safe_path(&layout.door_socket_path(k, door))?,
            ),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::RuntimeDir)),
        ],
    )
}

fn door_target(layout: &Layout<'_>, k: SiteOrdinal, door: Door) -> Result<String, RenderError> {
    let inst = layout.instance();
    let others: Vec<String> = Door::ALL
        .into_iter()
        .filter(|&other| other != door)
        .map(|other| names::door_target_unit(inst, k, other))
        .collect();
    // Doors later in the list are ordered before earlier ones, as the original ordered them;
    // with Conflicts= this makes a switch stop the old door before starting the new one.
    let later: Vec<String> = Door::ALL
        .into_iter()
        .skip_while(|&other| other != door)
        .skip(1)
        .map(|other| names::door_target_unit(inst, k, other))
        .collect();
    let after = if later.is_empty() {
        String::new()
    } else {
        format!("After={}\n", later.join(" "))
    };
    fill(
        template::DOOR_TARGET,
        &[
            ("INSTANCE", inst.to_string()),
            ("ORDINAL", k.to_string()),
            ("DOOR", door.to_string()),
            ("OTHER_TARGETS", others.join(" ")),
            ("AFTER_TARGETS", after),
        ],
    )
}

pub use atelier_layout::paths::runtime_max_sec;

fn door_service(
    layout: &Layout<'_>,
    k: SiteOrdinal,
    site: &Site,
    door: Door,
    facts: &RenderFacts,
) -> Result<String, RenderError> {
    let inst = layout.instance();
    let workspace = safe_path(&layout.workspace(site))?;
    let door_root = layout.door_root();
    // A place in the door's root as ReadOnlyPaths= and InaccessiblePaths= name it.
    let in_root = |inside: &Path| safe_path(&paths::in_door_root(&door_root, inside));
    let workspace_in_root = in_root(&layout.workspace(site))?;
    let mut environment =
        format!("Environment={DOOR_ENV}={door}\nEnvironment={WORKDIR_ENV}={workspace}\n");
    let mut home_bind = String::new();
    match layout.agent_home(k, door) {
        Some(home) => {
            // The unit, not the spec, says where the agent's configuration and state live.
            if door == Door::Turn {
                for (key, value) in atelier_layout::paths::turn_home_env(&home) {
                    writeln!(environment, "Environment={key}={}", safe_path(&value)?).ok();
                }
            }
            let home = safe_path(&home)?;
            writeln!(environment, "Environment=HOME={home}").ok();
            writeln!(home_bind, "BindPaths={home}").ok();
        }
        None => {
            for (key, value) in GIT_DOOR_ENV {
                writeln!(environment, "Environment={key}={value}").ok();
            }
        }
    }
    let mut gate_dependencies = String::new();
    let network_tail = match (
        layout.gate_socket_path(k, door),
        layout.gate_socket_in_unit(door),
    ) {
        (Some(outside), Some(inside)) => {
            let (outside, inside) = (safe_path(&outside)?, safe_path(&inside)?);
            writeln!(environment, "Environment={GATE_SOCKET_ENV}={inside}").ok();
            let gate = names::gate_socket_unit(inst, k);
            gate_dependencies = format!("Requires={gate}\nAfter={gate}\n");
            let mut tail = format!(
                "IPAddressAllow=localhost\n\
                 BindReadOnlyPaths={outside}:{inside}\n\
                 RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"
            );
            if let (Some(outside), Some(inside)) = (
                layout.gate_mcp_socket_path(k, door),
                layout.gate_mcp_socket_in_unit(door),
            ) {
                // The MCP relay: its own socket, which the shim forwards MCP_PORT to.
                let (outside, inside) = (safe_path(&outside)?, safe_path(&inside)?);
                writeln!(environment, "Environment={MCP_SOCKET_ENV}={inside}").ok();
                write!(tail, "\nBindReadOnlyPaths={outside}:{inside}").ok();
            }
            if door == Door::Turn {
                // The turn never sees the repository's metadata, and its git refuses a bare
                // repository it did not ask for.
                let gitconfig = safe_path(&layout.turn_gitconfig_path())?;
                write!(
                    tail,
                    "\nInaccessiblePaths={workspace_in_root}/{REPOSITORY_DIR}\n\
                     BindReadOnlyPaths={gitconfig}:/etc/gitconfig"
                )
                .ok();
                // A CLI's project configuration that no switch of the CLI closes.
                for dir in atelier_layout::paths::TURN_MASKED_WORKSPACE_DIRS {
                    write!(tail, "\nInaccessiblePaths=-{workspace_in_root}/{dir}").ok();
                }
            }
            if door == Door::Build {
                // A build runs what the turn wrote (its steps, its scripts): it may read the
                // history, never rewrite it or plant a config the git door would run.
                write!(tail, "\nReadOnlyPaths={workspace_in_root}/{REPOSITORY_DIR}").ok();
            }
            tail
        }
        _ => "RestrictAddressFamilies=AF_UNIX AF_NETLINK".to_owned(),
    };
    let hidden_system_dirs = paths::door_hidden_masks(&door_root, &layout.config_dir())
        .iter()
        .map(|mask| Ok(format!("-{}", safe_path(mask)?)))
        .collect::<Result<Vec<_>, RenderError>>()?;
    let private_pids = if facts.systemd_version >= PRIVATE_PIDS_SINCE {
        "PrivatePIDs=yes\n"
    } else {
        ""
    };
    fill(
        template::DOOR_SERVICE,
        &[
            ("INSTANCE", inst.to_string()),
            ("ORDINAL", k.to_string()),
            ("DOOR", door.to_string()),
            ("DOOR_TARGET_UNIT", names::door_target_unit(inst, k, door)),
            ("SITED_SERVICE_UNIT", names::sited_service_unit(inst)),
            ("GATE_DEPENDENCIES", gate_dependencies),
            ("SITE_IDENTITY", names::site_identity(inst, k)),
            ("SERVICE_GROUP", layout.service_group()),
            (
                "SHIM_BIN",
                safe_path(&layout.binary(services::SHIM_BINARY))?,
            ),
            ("ENVIRONMENT", environment),
            ("MEMORY_MAX", RUN_MEMORY_MAX.to_owned()),
            ("CPU_QUOTA", RUN_CPU_QUOTA.to_owned()),
            ("TASKS_MAX", RUN_TASKS_MAX.to_string()),
            (
                "RUNTIME_MAX_SEC",
                runtime_max_sec(layout.door_ceiling_ms(door)).to_string(),
            ),
            ("DOOR_ROOT", safe_path(&door_root)?),
            ("SYSTEM_VIEW", system_view()),
            ("WORKSPACE", workspace.clone()),
            (
                "WORKSPACE_STATE",
                format!("{workspace_in_root}/{BUILDER_DIR}"),
            ),
            ("SITES_ROOT", safe_path(&layout.sites_root())?),
            ("HOME_BIND", home_bind),
            ("HIDDEN_SYSTEM_DIRS", hidden_system_dirs.join(" ")),
            ("SYSFS", in_root(Path::new(paths::SYSFS))?),
            ("PRIVATE_PIDS", private_pids.to_owned()),
            ("NETWORK_TAIL", network_tail),
        ],
    )
}

/// `BindReadOnlyPaths=` of the host's system folders a door shows, each at its own place.
fn system_view() -> String {
    let binds = atelier_layout::paths::door_system_binds();
    format!("BindReadOnlyPaths={}\n", binds.join(" "))
}

fn gate_socket(layout: &Layout<'_>, k: SiteOrdinal) -> Result<String, RenderError> {
    let (user, group, mode) = owned(layout, Role::GateSocket, Some(k));
    let mut listeners = String::new();
    // No FileDescriptorName=: it names every descriptor of the unit alike, so the gate tells
    // its listeners apart by the path each is bound to.
    for door in Door::with_way_out() {
        for path in [
            layout.gate_socket_path(k, door),
            layout.gate_mcp_socket_path(k, door),
        ]
        .into_iter()
        .flatten()
        {
            writeln!(listeners, "ListenStream={}", safe_path(&path)?).ok();
        }
    }
    fill(
        template::GATE_SOCKET,
        &[
            ("INSTANCE", layout.instance().to_string()),
            ("ORDINAL", k.to_string()),
            (
                "SITED_SERVICE_UNIT",
                names::sited_service_unit(layout.instance()),
            ),
            ("LISTENERS", listeners),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::EgressSiteDir)),
        ],
    )
}

fn gate_decisions_socket(layout: &Layout<'_>, k: SiteOrdinal) -> Result<String, RenderError> {
    let inst = layout.instance();
    let (user, group, mode) = owned(layout, Role::GateDecisionsSocket, Some(k));
    fill(
        template::GATE_DECISIONS_SOCKET,
        &[
            ("INSTANCE", inst.to_string()),
            ("ORDINAL", k.to_string()),
            ("SITED_SERVICE_UNIT", names::sited_service_unit(inst)),
            (
                "DECISIONS_SOCKET",
                safe_path(&layout.gate_decisions_socket_path(k))?,
            ),
            ("GATE_SERVICE_UNIT", names::gate_service_unit(inst, k)),
            ("SOCKET_USER", user),
            ("SOCKET_GROUP", group),
            ("SOCKET_MODE", mode),
            ("DIRECTORY_MODE", mode_of(Role::RuntimeDir)),
        ],
    )
}

fn gate_service(layout: &Layout<'_>, k: SiteOrdinal) -> Result<String, RenderError> {
    let inst = layout.instance();
    let mut plan_args = Vec::new();
    let mut mcp = false;
    for door in Door::with_way_out() {
        if let Some(path) = layout.gate_plan_path(k, door) {
            plan_args.push(format!("--plan {door}={}", safe_path(&path)?));
        }
        mcp |= door.has_mcp();
    }
    // The relays add the keys: the MCP relay the Publication API's, the model relay the
    // provider's. The gate is their one consumer; the turn door's agent never holds them.
    let mut credentials = String::new();
    if mcp {
        for (id, source) in layout.gate_credential_sources() {
            check_credential_id(&id)?;
            writeln!(credentials, "LoadCredential={id}:{}", safe_path(&source)?).ok();
        }
    }
    fill(
        template::GATE_SERVICE,
        &[
            ("INSTANCE", inst.to_string()),
            ("ORDINAL", k.to_string()),
            (
                "GATE_SOCKET_UNITS",
                format!(
                    "{} {} {}",
                    names::gate_socket_unit(inst, k),
                    names::gate_decisions_socket_unit(inst, k),
                    layout.gate_metrics_socket(k).unit,
                ),
            ),
            (
                "GATE_BIN",
                safe_path(&layout.binary(services::GATE_BINARY))?,
            ),
            ("PLAN_ARGS", plan_args.join(" ")),
            ("LOAD_CREDENTIALS", credentials),
            ("MEMORY_MAX", GATE_MEMORY_MAX.to_owned()),
            ("TASKS_MAX", services::GATE_TASKS_MAX.to_string()),
            ("STATE_DIR", safe_path(&layout.state_dir())?),
            ("SITES_ROOT", safe_path(&layout.sites_root())?),
            ("AUDIT_ROOT", safe_path(&layout.audit_root())?),
            ("RUNTIME_DIR", safe_path(&layout.runtime_dir())?),
            (
                "CONFIG_CREDENTIALS_DIR",
                safe_path(&layout.credentials_dir())?,
            ),
        ],
    )
}
