//! The committed example declaration parses, and the derivation gives Atelier's names for it.
#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test]: a failure is the test failing"
)]

use std::path::{Path, PathBuf};

use atelier_layout::names::{self, MAX_INSTANCE_LEN, MAX_UNIX_NAME_LEN};
use atelier_layout::paths::{self, EntryKind, Principal, Role, Surface, MODES};
use atelier_layout::{Declaration, Door, InstanceName, Layout, SiteOrdinal};

fn example() -> Declaration {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json");
    Declaration::load(&path).unwrap()
}

fn k(n: u64) -> SiteOrdinal {
    SiteOrdinal::new(n).unwrap()
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

#[test]
fn the_example_parses() {
    let decl = example();
    assert_eq!(decl.instance.as_str(), "example");
    let slugs: Vec<&str> = decl.sites.iter().map(|s| s.slug.as_str()).collect();
    assert_eq!(slugs, ["collection", "archive"]);
}

#[test]
fn golden_names() {
    let decl = example();
    let inst = &decl.instance;
    assert_eq!(names::service_user(inst), "atelier-example");
    assert_eq!(names::service_group(inst), "atelier-example");
    assert_eq!(names::site_identity(inst, k(2)), "atelier-a-example_2");
    assert_eq!(
        names::sited_socket_unit(inst),
        "atelier-sited@example.socket"
    );
    assert_eq!(
        names::sited_service_unit(inst),
        "atelier-sited@example.service"
    );
    assert_eq!(
        names::door_socket_unit(inst, k(1), Door::Turn),
        "atelier-example-s1-turn.socket"
    );
    assert_eq!(
        names::door_target_unit(inst, k(1), Door::Build),
        "atelier-example-s1-build.target"
    );
    assert_eq!(
        names::door_service_template(inst, k(12), Door::Git),
        "atelier-example-s12-git@.service"
    );
    assert_eq!(
        names::door_service_instance_stem(inst, k(12), Door::Git),
        "atelier-example-s12-git@"
    );
    assert_eq!(
        names::gate_socket_unit(inst, k(3)),
        "atelier-example-s3-gate.socket"
    );
    assert_eq!(
        names::gate_service_unit(inst, k(3)),
        "atelier-example-s3-gate.service"
    );
    assert_eq!(names::polkit_rule_file(inst), "49-atelier-example.rules");
    assert_eq!(names::tmpfiles_file(inst), "atelier-example.conf");
    assert_eq!(
        names::prod_vhost_file(inst, "archive"),
        "atelier-example-archive.conf"
    );
    assert_eq!(
        names::preprod_vhost_file(inst, "archive"),
        "atelier-example-archive-pre.conf"
    );
}

#[test]
fn golden_paths() {
    let decl = example();
    let layout = Layout::new(&decl);
    let (collection, archive) = (&decl.sites[0], &decl.sites[1]);
    assert_eq!(layout.config_dir(), p("/etc/atelier/example"));
    assert_eq!(
        layout.credentials_dir(),
        p("/etc/atelier/example/credentials")
    );
    assert_eq!(
        layout.declaration_path(),
        p("/etc/atelier/example/instance.json")
    );
    assert_eq!(layout.env_file(), p("/etc/atelier/example/env"));
    assert_eq!(
        layout.site_table_path(),
        p("/etc/atelier/example/sites.json")
    );
    assert_eq!(
        layout.engine_fragment_path(),
        p("/etc/atelier/example/engine.env.fragment")
    );
    assert_eq!(
        layout.gate_plan_path(k(1), Door::Turn),
        Some(p("/etc/atelier/example/gate/s1-turn.json"))
    );
    assert_eq!(layout.gate_plan_path(k(1), Door::Git), None);
    assert_eq!(
        layout.htpasswd_path(),
        p("/etc/atelier/example/preprod.htpasswd")
    );
    assert_eq!(layout.state_dir(), p("/var/lib/atelier/example"));
    assert_eq!(layout.sites_root(), p("/var/lib/atelier/example/sites"));
    // Declared in the example.
    assert_eq!(layout.audit_root(), p("/srv/atelier_audit/example"));
    assert_eq!(
        layout.audit_file(),
        p("/srv/atelier_audit/example/audit.jsonl")
    );
    assert_eq!(layout.agents_root(), p("/var/lib/atelier/example/agents"));
    assert_eq!(
        layout.agent_home(k(2), Door::Build),
        Some(p("/var/lib/atelier/example/agents/s2/build"))
    );
    assert_eq!(layout.agent_home(k(2), Door::Git), None);
    assert_eq!(layout.runtime_dir(), p("/run/atelier/example"));
    assert_eq!(
        layout.sited_socket_path(),
        p("/run/atelier/example/sited.sock")
    );
    assert_eq!(
        paths::sited_socket_path(&InstanceName::new("example").unwrap()),
        p("/run/atelier/example/sited.sock")
    );
    assert_eq!(
        layout.door_socket_path(k(1), Door::Git),
        p("/run/atelier/example/s1-git.sock")
    );
    assert_eq!(layout.egress_dir(k(2)), p("/run/atelier/example/egress/s2"));
    assert_eq!(
        layout.gate_socket_path(k(2), Door::Build),
        Some(p("/run/atelier/example/egress/s2/build.sock"))
    );
    assert_eq!(layout.gate_socket_path(k(2), Door::Git), None);
    assert_eq!(
        layout.gate_mcp_socket_path(k(2), Door::Turn),
        Some(p("/run/atelier/example/egress/s2/mcp.sock"))
    );
    assert_eq!(layout.gate_mcp_socket_path(k(2), Door::Build), None);
    assert_eq!(layout.gate_mcp_socket_path(k(2), Door::Git), None);
    assert_eq!(
        layout.gate_mcp_socket_in_unit(Door::Turn),
        Some(p("/run/atelier-egress/mcp.sock"))
    );
    assert_eq!(layout.gate_mcp_socket_in_unit(Door::Build), None);
    assert_eq!(layout.webspace(collection), p("/srv/www/www.example.org"));
    assert_eq!(
        layout.webspace(archive),
        p("/srv/legacy-www/archive-example")
    );
    assert_eq!(
        layout.release_store(collection, Surface::Preprod),
        p("/srv/www/www.example.org/.releases/pre")
    );
    assert_eq!(
        layout.served_link(collection, Surface::Prod),
        p("/srv/www/www.example.org/web")
    );
    assert_eq!(layout.preprod_domain(collection), "pre.www.example.org");
    assert_eq!(
        layout.unit_path("atelier-sited@example.service"),
        p("/etc/systemd/system/atelier-sited@example.service")
    );
    assert_eq!(layout.vhost_dir(), p("/etc/nginx/sites-available"));
    assert_eq!(
        layout.polkit_rule_path(),
        p("/etc/polkit-1/rules.d/49-atelier-example.rules")
    );
    assert_eq!(
        layout.tmpfiles_path(),
        p("/etc/tmpfiles.d/atelier-example.conf")
    );
    assert_eq!(layout.bin_path("atelier-shim"), p("/usr/bin/atelier-shim"));
    assert_eq!(layout.templates_dir(), p("/usr/share/atelier/templates"));
    assert_eq!(layout.door_ceiling_ms(Door::Turn), 1_200_000);
    assert_eq!(layout.door_ceiling_ms(Door::Git), 30_000);
    // One build run installs and then builds: it may take both steps' limits.
    assert_eq!(layout.door_ceiling_ms(Door::Build), 600_000);
}

/// Where the binaries and the site templates are installed follows the declaration, for every
/// binary the layout names.
#[test]
fn declared_install_dirs_move_every_binary_and_the_templates() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let moved = text.replacen(
        "\"instance\": \"example\",",
        "\"instance\": \"example\",\n  \"paths\": { \"bin_dir\": \"/opt/atelier/bin\", \
         \"templates_dir\": \"/opt/atelier/templates\" },",
        1,
    );
    let decl = Declaration::parse(&moved).unwrap();
    let layout = Layout::new(&decl);
    for name in [
        atelier_layout::services::SITED_BINARY,
        atelier_layout::services::SHIM_BINARY,
        atelier_layout::services::GATE_BINARY,
        atelier_layout::services::BUILD_BINARY,
    ] {
        assert_eq!(
            layout.binary(name),
            Path::new("/opt/atelier/bin").join(name)
        );
    }
    assert_eq!(layout.templates_dir(), p("/opt/atelier/templates"));
}

#[test]
fn credentials_and_writable_paths() {
    let decl = example();
    let layout = Layout::new(&decl);
    let sources: Vec<(String, PathBuf)> = layout.credential_sources().into_iter().collect();
    assert_eq!(
        sources,
        [
            (
                "ANTHROPIC_API_KEY".to_owned(),
                p("/etc/atelier/example/credentials/ANTHROPIC_API_KEY")
            ),
            (
                "PUBLICATION_API_KEY".to_owned(),
                p("/etc/atelier/example/credentials/PUBLICATION_API_KEY")
            ),
            (
                "SERVICE_TOKEN".to_owned(),
                p("/etc/atelier/example/credentials/SERVICE_TOKEN")
            ),
        ]
    );
    let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
    assert_eq!(
        layout.sited_read_write_paths(&sites),
        [
            p("/srv/atelier_audit/example"),
            p("/srv/legacy-www/archive-example"),
            p("/srv/www/www.example.org"),
            p("/var/lib/atelier/example/agents/s1/turn/stated"),
            p("/var/lib/atelier/example/agents/s2/turn/stated"),
            p("/var/lib/atelier/example/sites"),
        ]
    );
    // Without sites, only the instance's own roots.
    assert_eq!(
        layout.sited_read_write_paths(&[]),
        [
            p("/srv/atelier_audit/example"),
            p("/var/lib/atelier/example/sites"),
        ]
    );
}

/// Each way of declaring a credential outside the credentials dir: left out of the mode matrix
/// (the file is the operator's where it stands) and listed for the provisioner to look at.
#[test]
fn credentials_outside_the_credentials_dir_are_listed_apart_from_the_matrix() {
    type Declare = fn(&mut Declaration, PathBuf);
    let cases: [(&str, Declare); 4] = [
        ("chat master key", |d, path| {
            d.chat.as_mut().unwrap().master_key = path;
        }),
        ("publication key", |d, path| {
            d.publication_api.key_path = Some(path);
        }),
        ("secret", |d, path| {
            d.secrets.insert("ANTHROPIC_API_KEY".into(), path);
        }),
        ("preview password", |d, path| {
            d.serving.preprod.auth.users[0].password_file = path;
        }),
    ];
    let outside = p("/root/keys/credential");
    for (name, declare) in cases {
        let mut decl = example();
        assert!(
            Layout::new(&decl).outside_credentials().is_empty(),
            "{name}"
        );
        declare(&mut decl, outside.clone());
        let layout = Layout::new(&decl);
        assert_eq!(
            layout.outside_credentials(),
            std::slice::from_ref(&outside),
            "{name}"
        );
        assert!(layout.credential_files().contains(&outside), "{name}");
        let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
        assert!(
            !layout.mode_matrix(&sites).iter().any(|e| e.path == outside),
            "{name}"
        );
    }
}

#[test]
fn every_role_has_one_row() {
    let decl = example();
    let layout = Layout::new(&decl);
    let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
    let matrix = layout.mode_matrix(&sites);
    for entry in &matrix {
        assert_eq!(
            MODES.iter().filter(|rule| rule.role == entry.role).count(),
            1,
            "{:?}",
            entry.role
        );
    }
    // Each row is used by the example's tree.
    for rule in MODES {
        assert!(
            matrix.iter().any(|entry| entry.role == rule.role),
            "{:?} unused",
            rule.role
        );
    }
}

#[test]
fn mode_matrix_golden_rows() {
    let decl = example();
    let layout = Layout::new(&decl);
    let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
    let matrix = layout.mode_matrix(&sites);
    let find = |path: &str| {
        let entries: Vec<_> = matrix.iter().filter(|e| e.path == p(path)).collect();
        assert_eq!(entries.len(), 1, "{path}: {entries:?}");
        let e = entries[0];
        (e.owner.as_str(), e.group.as_str(), e.mode, e.kind)
    };
    use EntryKind::{Directory as D, File as F, Socket as S};
    assert_eq!(
        find("/etc/atelier/example/credentials"),
        ("root", "root", 0o700, D)
    );
    assert_eq!(
        find("/etc/atelier/example/credentials/SERVICE_TOKEN"),
        ("root", "root", 0o600, F)
    );
    assert_eq!(
        find("/etc/atelier/example/env"),
        ("root", "atelier-example", 0o640, F)
    );
    assert_eq!(
        find("/etc/atelier/example/engine.env.fragment"),
        ("root", "dedalo-example", 0o640, F)
    );
    assert_eq!(
        find("/etc/atelier/example/preprod.htpasswd"),
        ("root", "www-data", 0o640, F)
    );
    assert_eq!(
        find("/var/lib/atelier/example/sites"),
        ("atelier-example", "atelier-example", 0o2770, D)
    );
    // sited's, so that it can rotate its log there (rename it, start a new one).
    assert_eq!(
        find("/srv/atelier_audit/example"),
        ("atelier-example", "atelier-example", 0o750, D)
    );
    // The turn HOME is root's skeleton; only its state/ is the identity's, and its stated/ is
    // sited's, readable by the identity through its private group. The build HOME is the
    // identity's own.
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn"),
        ("root", "root", 0o755, D)
    );
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn/state"),
        ("atelier-a-example_2", "atelier-example", 0o700, D)
    );
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn/.config"),
        ("root", "root", 0o755, D)
    );
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn/.gitconfig"),
        ("root", "root", 0o644, F)
    );
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn/stated"),
        ("atelier-example", "atelier-a-example_2", 0o750, D)
    );
    // The turn HOME holds exactly its four entries, each the matrix's.
    let home = p("/var/lib/atelier/example/agents/s2/turn");
    let mut inside: Vec<(String, Role)> = matrix
        .iter()
        .filter(|e| e.path.parent() == Some(home.as_path()))
        .map(|e| {
            (
                e.path.file_name().unwrap().to_string_lossy().into_owned(),
                e.role,
            )
        })
        .collect();
    inside.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        inside,
        [
            (paths::TURN_HOME_CONFIG_DIR.to_owned(), Role::TurnHomeConfig),
            (
                paths::TURN_HOME_GITCONFIG.to_owned(),
                Role::TurnHomeGitconfig
            ),
            (paths::TURN_HOME_STATE_DIR.to_owned(), Role::TurnHomeState),
            (paths::TURN_HOME_STATED_DIR.to_owned(), Role::TurnHomeStated),
        ]
    );
    for n in [1, 2] {
        assert!(matrix
            .iter()
            .any(|e| e.role == Role::TurnHomeStated && e.path == layout.turn_stated_dir(k(n))));
    }
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/turn/.config/opencode"),
        ("root", "root", 0o755, D)
    );
    assert_eq!(
        find("/var/lib/atelier/example/agents/s2/build"),
        ("atelier-a-example_2", "atelier-example", 0o700, D)
    );
    assert_eq!(
        find("/run/atelier/example/sited.sock"),
        ("atelier-example", "dedalo-example", 0o660, S)
    );
    assert_eq!(
        find("/run/atelier/example/s1-turn.sock"),
        ("atelier-example", "atelier-example", 0o600, S)
    );
    assert_eq!(
        find("/run/atelier/example/egress/s2"),
        ("root", "atelier-a-example_2", 0o750, D)
    );
    assert_eq!(
        find("/run/atelier/example/egress/s1/turn.sock"),
        ("atelier-a-example_1", "atelier-a-example_1", 0o600, S)
    );
    assert_eq!(
        find("/run/atelier/example/egress/s1/mcp.sock"),
        ("atelier-a-example_1", "atelier-a-example_1", 0o600, S)
    );
    assert_eq!(
        find("/srv/legacy-www/archive-example"),
        ("atelier-example", "www-data", 0o2750, D)
    );
    assert_eq!(
        find("/etc/systemd/system/atelier-example-s2-git@.service"),
        ("root", "root", 0o644, F)
    );
    assert_eq!(
        find("/etc/nginx/sites-available/atelier-example-collection-pre.conf"),
        ("root", "root", 0o644, F)
    );
    // No git gate socket, no git home, no git gate plan.
    assert!(!matrix
        .iter()
        .any(|e| e.path.ends_with("git.sock") && e.role == Role::GateSocket));
    // Parents come before children.
    for (i, entry) in matrix.iter().enumerate() {
        for later in &matrix[i + 1..] {
            assert!(
                !(entry.path != later.path && entry.path.starts_with(&later.path)),
                "{} is listed before its parent {}",
                entry.path.display(),
                later.path.display()
            );
        }
    }
    // 13 units per site (3 doors × socket, target, template + the gate's three sockets and its
    // service) + sited's 3 + chatd's socket, service, purge timer, purge service and metrics
    // socket.
    let units = matrix.iter().filter(|e| e.role == Role::UnitFile).count();
    assert_eq!(units, 3 + 2 * 13 + 5);
    // Every metrics socket is the declared monitoring group's alone, in a dir all may traverse.
    assert_eq!(
        find("/run/atelier/example/metrics"),
        ("root", "root", 0o755, D)
    );
    for socket in ["sited.sock", "chatd.sock", "s1-gate.sock", "s2-gate.sock"] {
        assert_eq!(
            find(&format!("/run/atelier/example/metrics/{socket}")),
            ("root", "prometheus", 0o660, S),
            "{socket}"
        );
    }
    // chatd: only the web server's group connects; its token and include are root's alone; the
    // declared master key is a credential like any other in the credentials dir.
    assert_eq!(
        find("/run/atelier/example/chatd.sock"),
        ("root", "www-data", 0o660, S)
    );
    assert_eq!(
        find("/etc/atelier/example/chat-proxy-auth.conf"),
        ("root", "root", 0o600, F)
    );
    for credential in ["CHATD_SERVICE_TOKEN", "CHATD_MASTER_KEY"] {
        assert_eq!(
            find(&format!("/etc/atelier/example/credentials/{credential}")),
            ("root", "root", 0o600, F)
        );
    }
    assert_eq!(
        find("/etc/nginx/sites-available/atelier-example.cms.conf"),
        ("root", "root", 0o644, F)
    );
    // sited is never given chatd's credentials.
    assert!(!layout
        .credential_sources()
        .keys()
        .any(|id| id.starts_with("CHATD")));
    assert_eq!(
        find("/run/atelier/example/gate-s1/decisions.sock"),
        ("atelier-example", "atelier-example", 0o600, S)
    );
    assert_eq!(
        paths::mode_rule(Role::AgentHome).owner,
        Principal::SiteIdentity
    );
}

#[test]
fn longest_instance_and_ordinal_fit_every_name() {
    let longest = InstanceName::new(&"z".repeat(MAX_INSTANCE_LEN)).unwrap();
    assert!(InstanceName::new(&"z".repeat(MAX_INSTANCE_LEN + 1)).is_err());
    for n in [1, 9, 10, 99, 100, 999] {
        let identity = names::site_identity(&longest, k(n));
        assert!(identity.len() <= MAX_UNIX_NAME_LEN, "{identity}");
    }
    assert_eq!(
        names::site_identity(&longest, k(999)).len(),
        MAX_UNIX_NAME_LEN
    );
    assert!(names::service_user(&longest).len() <= MAX_UNIX_NAME_LEN);
}

/// What sited derives from its env file (instance, sites root, agents root) without the
/// declaration must be what the provisioner derived from the declaration.
#[test]
fn declaration_free_derivations_agree_with_the_layout() {
    let decl = example();
    let layout = Layout::new(&decl);
    let inst = layout.instance();
    let agents = layout.agents_root();
    for n in [1, 2, 999] {
        for door in Door::ALL {
            assert_eq!(
                paths::door_socket_path(inst, k(n), door),
                layout.door_socket_path(k(n), door)
            );
            assert_eq!(
                paths::gate_socket_path(inst, k(n), door),
                layout.gate_socket_path(k(n), door)
            );
            assert_eq!(
                paths::gate_mcp_socket_path(inst, k(n), door),
                layout.gate_mcp_socket_path(k(n), door)
            );
            assert_eq!(
                paths::gate_socket_in_unit(door),
                layout.gate_socket_in_unit(door)
            );
            assert_eq!(
                paths::gate_mcp_socket_in_unit(door),
                layout.gate_mcp_socket_in_unit(door)
            );
            assert_eq!(
                paths::agent_home(&agents, k(n), door),
                layout.agent_home(k(n), door)
            );
        }
        assert_eq!(paths::egress_dir(inst, k(n)), layout.egress_dir(k(n)));
        assert_eq!(
            paths::agent_site_dir(&agents, k(n)),
            layout.agent_site_dir(k(n))
        );
        assert_eq!(
            paths::turn_stated_dir(&agents, k(n)),
            layout.turn_stated_dir(k(n))
        );
        assert_eq!(
            Some(paths::turn_home(&agents, k(n))),
            layout.agent_home(k(n), Door::Turn)
        );
    }
    assert_eq!(
        paths::turn_gitconfig_path(&agents),
        layout.turn_gitconfig_path()
    );
    assert_eq!(
        paths::turn_stated_dir(&agents, k(2)),
        p("/var/lib/atelier/example/agents/s2/turn/stated")
    );
    for site in &decl.sites {
        assert_eq!(
            paths::site_workspace(&layout.sites_root(), &site.slug),
            layout.workspace(site)
        );
    }
    assert_eq!(
        paths::gate_mcp_socket_path(inst, k(1), Door::Turn),
        Some(p("/run/atelier/example/egress/s1/mcp.sock"))
    );
    assert_eq!(paths::gate_socket_path(inst, k(1), Door::Git), None);
    assert_eq!(
        paths::agent_home(&agents, k(2), Door::Build),
        Some(p("/var/lib/atelier/example/agents/s2/build"))
    );
    assert_eq!(paths::agent_home(&agents, k(2), Door::Git), None);
}

#[test]
fn runtime_max_sec_rounds_the_ceiling_up_and_adds_the_grace() {
    for (ceiling_ms, expected) in [
        (paths::TURN_TIMEOUT_MS, 1215),
        (paths::BUILD_TIMEOUT_MS, 315),
        (paths::GIT_TIMEOUT_MS, 45),
        (1, 16),
        (1_001, 17),
        (0, 15),
    ] {
        assert_eq!(paths::runtime_max_sec(ceiling_ms), expected, "{ceiling_ms}");
    }
}

#[test]
fn principals_resolve_without_the_declaration_where_the_instance_decides() {
    let decl = example();
    let layout = Layout::new(&decl);
    let inst = layout.instance();
    for principal in [
        Principal::Root,
        Principal::ServiceUser,
        Principal::ServiceGroup,
        Principal::SiteIdentity,
        Principal::SitePrivateGroup,
    ] {
        for site in [None, Some(k(1)), Some(k(2))] {
            assert_eq!(
                paths::instance_principal_name(principal, inst, site),
                Some(layout.principal_name(principal, site)),
                "{principal:?} {site:?}"
            );
        }
    }
    for principal in [Principal::EngineGroup, Principal::WebGroup] {
        assert_eq!(
            paths::instance_principal_name(principal, inst, Some(k(1))),
            None
        );
    }
    assert_eq!(
        paths::instance_principal_name(Principal::SiteIdentity, inst, Some(k(2))).as_deref(),
        Some("atelier-a-example_2")
    );
}

#[test]
fn audit_segment_names_round_trip_and_nothing_else_is_one() {
    for n in [1, 2, 10, u64::MAX] {
        assert_eq!(
            paths::audit_segment_number(&paths::audit_segment_file(n)),
            Some(n)
        );
    }
    for name in [
        paths::AUDIT_FILE,
        "audit.jsonl.",
        "audit.jsonl.x",
        "audit.jsonl.+1",
        "audit.jsonl.1.tmp",
        "audit.jsonlx.1",
        "other.1",
    ] {
        assert_eq!(paths::audit_segment_number(name), None, "{name}");
    }
}

#[test]
fn the_door_system_view_holds_only_what_is_under_its_folders() {
    use atelier_layout::paths::in_door_system_view;
    let cases = [
        ("a CLI in /usr/local/bin", "/usr/local/bin/claude", true),
        ("a CLI under /opt", "/opt/claude/bin/claude", true),
        ("configuration", "/etc/atelier/example", true),
        ("the folder itself", "/usr", false),
        (
            "a sibling sharing the prefix",
            "/usrlocal/bin/claude",
            false,
        ),
        (
            "a cache under /var",
            "/var/cache/atelier/agents/x/bin/pi",
            false,
        ),
        ("a home folder", "/root/.local/bin/claude", false),
        ("a climb out", "/usr/../var/cache/claude", false),
        ("the state dir", "/var/lib/atelier/example", false),
    ];
    for (name, path, shown) in cases {
        assert_eq!(in_door_system_view(&p(path)), shown, "{name}: {path}");
    }
}

#[test]
fn the_doors_hide_the_folders_that_name_every_site() {
    use atelier_layout::paths::door_hides;
    let cases = [
        ("every instance's configuration", "/etc/atelier/other", true),
        ("nginx's vhosts", "/etc/nginx/sites-available", true),
        ("nginx's enabled links", "/etc/nginx/sites-enabled", true),
        ("nginx's folder itself", "/etc/nginx", true),
        ("apache's vhosts", "/etc/apache2/sites-available", true),
        (
            "apache's conf.d",
            "/etc/apache2/conf-enabled/atelier.conf",
            true,
        ),
        (
            "certbot's renewal settings",
            "/etc/letsencrypt/renewal",
            true,
        ),
        ("systemd's units", "/etc/systemd/system", true),
        (
            "a declared unit folder under them",
            "/etc/systemd/atelier",
            true,
        ),
        ("a sibling sharing the prefix", "/etc/nginx-vhosts", false),
        ("another folder of /etc", "/etc/atelier-vhosts", false),
        ("the TLS trust store", "/etc/ssl/certs", false),
        ("another unit folder", "/usr/lib/systemd/system", false),
    ];
    for (name, path, hidden) in cases {
        assert_eq!(door_hides(&p(path)), hidden, "{name}: {path}");
    }
}

#[test]
fn a_door_masks_its_instances_configuration_once() {
    use atelier_layout::paths::door_hidden_masks;
    let root = p("/var/lib/atelier/example/door-root");
    let hidden = [
        "/var/lib/atelier/example/door-root/etc/atelier",
        "/var/lib/atelier/example/door-root/etc/nginx",
        "/var/lib/atelier/example/door-root/etc/apache2",
        "/var/lib/atelier/example/door-root/etc/letsencrypt",
        "/var/lib/atelier/example/door-root/etc/systemd",
    ];
    // Under /etc/atelier, masked with it.
    assert_eq!(
        door_hidden_masks(&root, &p("/etc/atelier/example")),
        hidden.map(p)
    );
    // Declared elsewhere: a mask of its own.
    let mut elsewhere = hidden.map(p).to_vec();
    elsewhere.push(p(
        "/var/lib/atelier/example/door-root/etc/atelier-prod/example",
    ));
    assert_eq!(
        door_hidden_masks(&root, &p("/etc/atelier-prod/example")),
        elsewhere
    );
}
