//! Unit tests of the renderers: refusals, determinism, and the facts each artifact must state.

use std::path::Path;

use atelier_layout::{Declaration, Layout, SiteOrdinal};

use super::*;
use crate::artifact::parse_stamp;

const FACTS: RenderFacts = RenderFacts {
    systemd_version: 252,
};

fn example() -> Declaration {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json");
    Declaration::load(&path).unwrap()
}

fn k(n: u64) -> SiteOrdinal {
    SiteOrdinal::new(n).unwrap()
}

fn render(decl: &Declaration, facts: &RenderFacts) -> Result<Vec<Artifact>, RenderError> {
    let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
    render_all(decl, &Layout::new(decl), &sites, facts)
}

fn text_of<'a>(artifacts: &'a [Artifact], path: &str) -> &'a str {
    let artifact = artifacts
        .iter()
        .find(|a| a.path == Path::new(path))
        .unwrap_or_else(|| panic!("no artifact at {path}"));
    std::str::from_utf8(&artifact.bytes).unwrap()
}

#[test]
fn refuses_an_old_pid1_and_inconsistent_sites() {
    let decl = example();
    let layout = Layout::new(&decl);
    let old = RenderFacts {
        systemd_version: 247,
    };
    assert_eq!(
        render(&decl, &old).unwrap_err(),
        RenderError::SystemdTooOld {
            found: 247,
            floor: 248
        }
    );
    let (a, b) = (&decl.sites[0], &decl.sites[1]);
    let twice = [(k(1), a), (k(1), b)];
    assert!(matches!(
        render_all(&decl, &layout, &twice, &FACTS),
        Err(RenderError::DuplicateSite { .. })
    ));
    let same_site = [(k(1), a), (k(2), a)];
    assert!(matches!(
        render_all(&decl, &layout, &same_site, &FACTS),
        Err(RenderError::DuplicateSite { .. })
    ));
    let missing = [(k(1), a)];
    assert_eq!(
        render_all(&decl, &layout, &missing, &FACTS).unwrap_err(),
        RenderError::UnallocatedSite {
            slug: "archive".into()
        }
    );
    let mut stranger = a.clone();
    stranger.slug = "stranger".into();
    let undeclared = [(k(1), a), (k(2), b), (k(3), &stranger)];
    assert_eq!(
        render_all(&decl, &layout, &undeclared, &FACTS).unwrap_err(),
        RenderError::UndeclaredSite {
            slug: "stranger".into()
        }
    );
}

#[test]
fn rendering_is_deterministic_sorted_and_stamped() {
    let decl = example();
    let first = render(&decl, &FACTS).unwrap();
    // Ordinals given in another order render the same files.
    let reversed = [(k(2), &decl.sites[1]), (k(1), &decl.sites[0])];
    let second = render_all(&decl, &Layout::new(&decl), &reversed, &FACTS).unwrap();
    assert_eq!(first, second);
    assert!(first.windows(2).all(|w| w[0].path < w[1].path));
    for artifact in &first {
        let stamp = parse_stamp(&artifact.bytes).unwrap();
        assert_eq!(stamp.instance, "example");
        assert_eq!(stamp.kind, artifact.kind);
        assert!(artifact.path.is_absolute());
        let text = std::str::from_utf8(&artifact.bytes).unwrap();
        assert!(
            !text.contains("@INSTANCE@") && !text.contains("@SITE"),
            "{text}"
        );
    }
}

#[test]
fn private_pids_only_from_257() {
    let decl = example();
    let door = "/etc/systemd/system/atelier-example-s1-git@.service";
    let old = render(&decl, &FACTS).unwrap();
    assert!(!text_of(&old, door).contains("PrivatePIDs="));
    let new = render(
        &decl,
        &RenderFacts {
            systemd_version: 257,
        },
    )
    .unwrap();
    assert!(text_of(&new, door).contains("\nPrivatePIDs=yes\n"));
}

#[test]
fn door_units_state_their_profile() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let socket = text_of(&all, "/etc/systemd/system/atelier-example-s2-build.socket");
    for line in [
        "ListenStream=/run/atelier/example/s2-build.sock",
        "Accept=yes",
        "MaxConnections=1",
        "SocketUser=atelier-example",
        "SocketMode=0600",
        "PartOf=atelier-sited@example.service",
    ] {
        assert!(socket.lines().any(|l| l == line), "{line}\n{socket}");
    }
    let target = text_of(&all, "/etc/systemd/system/atelier-example-s2-build.target");
    assert!(target
        .lines()
        .any(|l| l == "Conflicts=atelier-example-s2-turn.target atelier-example-s2-git.target"));

    let git = text_of(&all, "/etc/systemd/system/atelier-example-s2-git@.service");
    assert!(git.lines().any(|l| l == "User=atelier-a-example_2"));
    assert!(git.lines().any(|l| l == "RuntimeMaxSec=45"));
    assert!(git
        .lines()
        .any(|l| l == "RestrictAddressFamilies=AF_UNIX AF_NETLINK"));
    assert!(!git.contains("egress"));
    // Every door: its own root, the host's system folders read-only, nothing else of the host.
    for door in [
        &git,
        &text_of(&all, "/etc/systemd/system/atelier-example-s2-turn@.service"),
    ] {
        assert!(door
            .lines()
            .any(|l| l == "RootDirectory=/var/lib/atelier/example/door-root"));
        assert!(door
            .lines()
            .any(|l| l == "BindReadOnlyPaths=/usr /etc -/opt"));
        for gone in ["ProtectHome=", "ProtectKernelTunables=", "NoNewPrivileges="] {
            assert!(!door.lines().any(|l| l.starts_with(gone)), "{gone}\n{door}");
        }
    }
    assert!(!git.contains("IPAddressAllow="));

    let turn = text_of(&all, "/etc/systemd/system/atelier-example-s2-turn@.service");
    assert!(turn.lines().any(|l| l == "RuntimeMaxSec=1215"));
    assert!(turn.lines().any(|l| l == "ExecStart=/usr/bin/atelier-shim"));
    let binds: Vec<&str> = turn
        .lines()
        .filter(|l| l.starts_with("BindReadOnlyPaths="))
        .collect();
    assert_eq!(
        binds,
        [
            "BindReadOnlyPaths=/usr /etc -/opt",
            "BindReadOnlyPaths=/run/atelier/example/egress/s2/turn.sock:/run/atelier-egress/turn.sock",
            "BindReadOnlyPaths=/run/atelier/example/egress/s2/mcp.sock:/run/atelier-egress/mcp.sock",
            "BindReadOnlyPaths=/var/lib/atelier/example/agents/turn.gitconfig:/etc/gitconfig",
        ]
    );
    assert!(turn
        .lines()
        .any(|l| l == "Environment=ATELIER_MCP_SOCKET=/run/atelier-egress/mcp.sock"));
    for line in [
        "PrivateNetwork=yes",
        "PrivateIPC=yes",
        "TemporaryFileSystem=/run:ro",
        "MemoryMax=2G",
        "CPUQuota=200%",
        "TasksMax=512",
    ] {
        assert!(turn.lines().any(|l| l == line), "{line}");
    }
    let build = text_of(
        &all,
        "/etc/systemd/system/atelier-example-s1-build@.service",
    );
    assert!(build.contains(
        "BindReadOnlyPaths=/run/atelier/example/egress/s1/build.sock:/run/atelier-egress/build.sock"
    ));
    assert!(!build.contains("turn.sock") && !build.contains("s2"));
    assert!(!build.contains("mcp"), "the relay is the turn door's alone");
}

#[test]
fn door_units_mask_what_names_every_site() {
    let root = "/var/lib/atelier/example/door-root";
    let hidden = format!(
        "InaccessiblePaths=-{root}/etc/atelier -{root}/etc/nginx -{root}/etc/apache2 \
         -{root}/etc/letsencrypt -{root}/etc/systemd"
    );
    let turn = "/etc/systemd/system/atelier-example-s1-turn@.service";
    let all = render(&example(), &FACTS).unwrap();
    let unit = text_of(&all, turn);
    assert!(unit.lines().any(|l| l == hidden), "{unit}");
    // The default configuration folder is under the masked /etc/atelier: no mask of its own.
    assert!(!unit.contains("etc/atelier/example"), "{unit}");

    let mut decl = example();
    decl.paths.config_base = Some("/etc/atelier-prod".into());
    let all = render(&decl, &FACTS).unwrap();
    let unit = text_of(&all, turn);
    let own = format!("{hidden} -{root}/etc/atelier-prod/example");
    assert!(unit.lines().any(|l| l == own), "{unit}");
}

#[test]
fn sited_loads_every_credential_but_the_models_and_writes_only_its_roots() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let loaded = |unit: &str| -> Vec<String> {
        text_of(&all, unit)
            .lines()
            .filter(|l| l.starts_with("LoadCredential="))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        loaded("/etc/systemd/system/atelier-sited@example.service"),
        [
            "LoadCredential=PUBLICATION_API_KEY:/etc/atelier/example/credentials/PUBLICATION_API_KEY",
            "LoadCredential=SERVICE_TOKEN:/etc/atelier/example/credentials/SERVICE_TOKEN",
        ],
        "the model's key is not sited's: its turns' agents could read it"
    );
    for k in 1..=2 {
        assert_eq!(
            loaded(&format!("/etc/systemd/system/atelier-example-s{k}-gate.service")),
            [
                "LoadCredential=ANTHROPIC_API_KEY:/etc/atelier/example/credentials/ANTHROPIC_API_KEY",
                "LoadCredential=PUBLICATION_API_KEY:/etc/atelier/example/credentials/PUBLICATION_API_KEY",
            ],
            "each gate adds the keys its relays send"
        );
    }
    let env = text_of(&all, "/etc/atelier/example/env");
    assert!(
        !env.contains("ANTHROPIC_API_KEY <-") && env.contains("(ANTHROPIC_API_KEY) goes to"),
        "{env}"
    );
    let sited = text_of(&all, "/etc/systemd/system/atelier-sited@example.service");
    let rw: Vec<&str> = sited
        .lines()
        .filter(|l| l.starts_with("ReadWritePaths="))
        .map(|l| &l["ReadWritePaths=".len()..])
        .collect();
    let sites = [(k(1), &decl.sites[0]), (k(2), &decl.sites[1])];
    let expected = Layout::new(&decl).sited_read_write_paths(&sites);
    let expected: Vec<String> = expected.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(rw, expected);
    // sited writes each turn's statement under ProtectSystem=strict: one line per site.
    for stated in [
        "/var/lib/atelier/example/agents/s1/turn/stated",
        "/var/lib/atelier/example/agents/s2/turn/stated",
    ] {
        assert!(rw.contains(&stated), "{stated} not in {rw:?}");
    }
    assert!(sited.lines().any(|l| l == "Type=notify"));
}

#[test]
fn the_gate_listens_once_per_door_with_a_way_out() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let socket = text_of(&all, "/etc/systemd/system/atelier-example-s1-gate.socket");
    let listeners: Vec<&str> = socket
        .lines()
        .filter_map(|l| l.strip_prefix("ListenStream="))
        .collect();
    assert_eq!(
        listeners,
        [
            "/run/atelier/example/egress/s1/turn.sock",
            "/run/atelier/example/egress/s1/mcp.sock",
            "/run/atelier/example/egress/s1/build.sock",
        ]
    );
    // systemd would give all three the same name: the gate goes by the bound path instead.
    assert!(!socket.contains("FileDescriptorName="));
    let service = text_of(&all, "/etc/systemd/system/atelier-example-s1-gate.service");
    assert!(service.lines().any(|l| {
        l
        == "LoadCredential=PUBLICATION_API_KEY:/etc/atelier/example/credentials/PUBLICATION_API_KEY"
    }));
    assert!(!service.contains("allow-benchmark-range"));
    let plan = text_of(&all, "/etc/atelier/example/gate/s1-build.json");
    let json: serde_json::Value = serde_json::from_str(plan.split_once('\n').unwrap().1).unwrap();
    assert_eq!(
        json["hosts"],
        serde_json::json!([]),
        "no registry unless declared"
    );
    assert_eq!(json["mcp"], serde_json::Value::Null);
    let plan = text_of(&all, "/etc/atelier/example/gate/s1-turn.json");
    let json: serde_json::Value = serde_json::from_str(plan.split_once('\n').unwrap().1).unwrap();
    assert_eq!(
        json["hosts"],
        serde_json::json!([]),
        "no tunnel from the turn: its model is the gate's relay"
    );
    assert_eq!(json["port"], 443);
    assert!(json["mcp"]["upstream"]
        .as_str()
        .unwrap()
        .ends_with("/server_api/v2/mcp"));
    assert!(!all
        .iter()
        .any(|a| a.path.ends_with("s1-git.json") || a.path.ends_with("s2-git.json")));
}

#[test]
fn the_polkit_rule_grants_stop_and_kill_of_enumerated_runs_only() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let rule = text_of(&all, "/etc/polkit-1/rules.d/49-atelier-example.rules");
    assert!(rule.starts_with("// atelier-provision: example agent_authorization "));
    assert!(rule.contains(
        "/^atelier-example-s(1|2)-(turn|build|git)@[0-9]+-[0-9]+-[0-9]+(?:_[0-9]+-[0-9]+|-[0-9]+)?\\.service$/"
    ));
    assert!(rule.contains("subject.user !== \"atelier-example\""));
    assert!(rule.contains("verb !== \"stop\" && verb !== \"kill\""));
    assert!(!rule.contains("\"start\""));
    assert_eq!(rule.matches("polkit.Result.YES").count(), 1);
}

#[test]
fn env_and_fragment_hold_no_credential() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let env = text_of(&all, "/etc/atelier/example/env");
    let keys: Vec<&str> = env
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once('=').unwrap().0)
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted: {keys:?}");
    for key in &keys {
        assert!(key.starts_with("ATELIER_"), "{key}");
        assert!(
            !atelier_layout::services::env::is_secret_looking(key),
            "{key}"
        );
    }
    assert!(env.contains("ATELIER_SITE_IDENTITIES=\"{\\\"archive\\\":2,\\\"collection\\\":1}\""));
    let fragment = text_of(&all, "/etc/atelier/example/engine.env.fragment");
    let set: Vec<&str> = fragment.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        set,
        [
            "DEDALO_SITE_BUILDER_INSTANCE=\"example\"",
            "DEDALO_SITE_BUILDER_SOCKET=\"/run/atelier/example/sited.sock\"",
        ]
    );
    assert!(fragment.contains("/etc/atelier/example/credentials/SERVICE_TOKEN"));
}

#[test]
fn env_values_refuse_expansion_and_secret_keys() {
    assert_eq!(
        config::env_value("ATELIER_X", "a\"b\\c").unwrap(),
        "\"a\\\"b\\\\c\""
    );
    for bad in ["$HOME", "a`b`", "a\nb"] {
        assert!(config::env_value("ATELIER_X", bad).is_err(), "{bad}");
    }
    assert!(config::env_value("ATELIER_SERVICE_TOKEN", "x").is_err());
}

#[test]
fn unsafe_paths_are_refused() {
    for bad in ["relative", "/a b", "/a%i", "/a\"b", "/a$b", "/a\nb", "/a;b"] {
        assert!(safe_path(Path::new(bad)).is_err(), "{bad:?}");
    }
    assert_eq!(
        safe_path(Path::new("/srv/www/a-b.c_d")).unwrap(),
        "/srv/www/a-b.c_d"
    );
}

#[test]
fn every_template_placeholder_is_filled_by_a_render() {
    // A render fills every placeholder it reaches; this asserts no template has one that no
    // renderer knows, by rendering and checking no `@NAME@` survives anywhere.
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    for t in template::ALL {
        for name in template::placeholders(t) {
            let marker = format!("@{name}@");
            assert!(
                !all.iter()
                    .any(|a| std::str::from_utf8(&a.bytes).unwrap().contains(&marker)),
                "{marker} of {} survived",
                t.name
            );
        }
    }
}

#[test]
fn vhosts_serve_the_release_link_deny_dotfiles_and_guard_preprod() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let prod = text_of(
        &all,
        "/etc/nginx/sites-available/atelier-example-collection.conf",
    );
    assert!(prod.contains("root \"/srv/www/www.example.org/web\";"));
    assert!(prod.contains("location ~ \"/\\.(?!well-known/)\""));
    assert!(
        prod.contains("server_name example.org;"),
        "the alias redirects"
    );
    assert!(!prod.contains("auth_basic"));
    assert!(prod.contains("disable_symlinks if_not_owner from=$realpath_root;"));
    assert!(prod.contains("open_file_cache off;"));
    let pre = text_of(
        &all,
        "/etc/nginx/sites-available/atelier-example-archive-pre.conf",
    );
    assert!(pre.contains("server_name pre.archive.example.net;"));
    assert!(pre.contains("root \"/srv/legacy-www/archive-example/pre\";"));
    assert!(pre.contains("auth_basic \"Example preprod\";"));
    assert!(pre.contains("auth_basic_user_file \"/etc/atelier/example/preprod.htpasswd\";"));
}

#[test]
fn runtime_ceilings_follow_the_declared_limits() {
    assert_eq!(units::runtime_max_sec(30_000), 45);
    assert_eq!(units::runtime_max_sec(1_500), 17);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap()
    .replace(
        "\"limits\": { \"max_sites\": 8,",
        "\"limits\": { \"install_timeout_ms\": 600000, \"git_timeout_ms\": 2000, \"max_sites\": 8,",
    );
    let decl = Declaration::parse(&text).unwrap();
    let all = render(&decl, &FACTS).unwrap();
    let build = text_of(
        &all,
        "/etc/systemd/system/atelier-example-s1-build@.service",
    );
    // Install (600 s) then build (the default 300 s) in one run, and the grace.
    assert!(build.lines().any(|l| l == "RuntimeMaxSec=915"), "{build}");
    let git = text_of(&all, "/etc/systemd/system/atelier-example-s1-git@.service");
    assert!(git.lines().any(|l| l == "RuntimeMaxSec=17"));
    let env = text_of(&all, "/etc/atelier/example/env");
    assert!(env.contains("\nATELIER_INSTALL_TIMEOUT_MS=\"600000\"\n"));
}

#[test]
fn an_instance_without_sites_grants_nothing() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let start = text.find("\"sites\": [").unwrap();
    let end = text[start..].find("],").unwrap() + start + 2;
    let text = format!("{}\"sites\": [],{}", &text[..start], &text[end..]).replace(
        "\"aliases\": { \"example.org\": \"collection\" }",
        "\"aliases\": {}",
    );
    let decl = Declaration::parse(&text).unwrap();
    assert!(decl.sites.is_empty());
    let all = render_all(&decl, &Layout::new(&decl), &[], &FACTS).unwrap();
    let rule = text_of(&all, "/etc/polkit-1/rules.d/49-atelier-example.rules");
    assert!(rule.contains("if (/^(?!)$/.test(unit))"), "{rule}");
    let sited = text_of(&all, "/etc/systemd/system/atelier-sited@example.service");
    // Of the sockets, sited wants only its metrics socket: no door, no gate.
    assert!(
        sited.contains("Wants=atelier-sited-metrics@example.socket\n"),
        "{sited}"
    );
    assert!(!all.iter().any(|a| a.kind == ArtifactKind::Gate));
}

#[test]
fn five_hundred_sites_render_every_unit() {
    let mut text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap()
    .replace("\"max_sites\": 8,", "");
    let start = text.find("\"sites\": [").unwrap();
    let end = text[start..].find("],").unwrap() + start + 2;
    let sites: Vec<String> = (1..=500)
        .map(|i| format!("{{ \"slug\": \"site-{i}\", \"domain\": \"s{i}.example.org\" }}"))
        .collect();
    text = format!(
        "{}\"sites\": [{}],{}",
        &text[..start],
        sites.join(", "),
        &text[end..]
    )
    .replace(
        "\"aliases\": { \"example.org\": \"collection\" }",
        "\"aliases\": {}",
    );
    let decl = Declaration::parse(&text).unwrap();
    let ordinals: Vec<(SiteOrdinal, &Site)> = decl
        .sites
        .iter()
        .enumerate()
        .map(|(i, s)| (k(i as u64 + 1), s))
        .collect();
    let started = std::time::Instant::now();
    let all = render_all(&decl, &Layout::new(&decl), &ordinals, &FACTS).unwrap();
    let took = started.elapsed();
    let units = all
        .iter()
        .filter(|a| a.path.starts_with("/etc/systemd/system"))
        .count();
    // sited's 3, 13 per site, chatd's 5 (each daemon's metrics socket among them).
    assert_eq!(units, 3 + 500 * 13 + 5);
    let rule = text_of(&all, "/etc/polkit-1/rules.d/49-atelier-example.rules");
    assert!(rule.contains("-s(1|2|3|") && rule.contains("|499|500)-("));
    eprintln!("rendered {} artifacts for 500 sites in {took:?}", all.len());
}

#[test]
fn every_env_key_is_one_sited_reads() {
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    let env = text_of(&all, "/etc/atelier/example/env");
    let keys: Vec<&str> = env
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(keys.len() > 5, "{env}");
    for key in keys {
        assert!(
            atelier_layout::services::env::ALL.contains(&key),
            "sited would refuse to boot on {key}"
        );
    }
}

#[test]
fn a_declared_openai_model_reaches_sited_env_whatever_the_driver() {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let claude = "\"driver\": \"claude_code\",\n    \"bins\": { \"claude_code\": \"/usr/local/bin/claude\" }";
    assert!(example.contains(claude), "the example's agent block moved");
    // (Claude Code's binary, when kept, still asks Anthropic's API.)
    let model = "\"provider_hosts\": [\"llm.example.org\", \"api.anthropic.com\"],\n    \
                 \"openai_base_url\": \"https://llm.example.org/v1\",\n    \
                 \"openai_model\": \"qwen3-coder-30b\"";
    // (name, the agent block, whether the two keys are rendered)
    let cases = [
        ("nothing declared", claude.to_owned(), false),
        (
            "pi with its model",
            format!(
                "\"driver\": \"pi\",\n    \"bins\": {{ \"pi\": \"/usr/local/bin/pi\" }},\n    {model}"
            ),
            true,
        ),
        (
            "claude_code keeping a model for a switch",
            format!("{claude},\n    {model}"),
            true,
        ),
    ];
    for (name, agent, rendered) in cases {
        let decl = Declaration::parse(&example.replace(claude, &agent))
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let all = render(&decl, &FACTS).unwrap();
        let env = text_of(&all, "/etc/atelier/example/env");
        for line in [
            "ATELIER_AGENT_OPENAI_BASE_URL=\"https://llm.example.org/v1\"",
            "ATELIER_AGENT_OPENAI_MODEL=\"qwen3-coder-30b\"",
        ] {
            assert_eq!(
                env.lines().any(|l| l == line),
                rendered,
                "{name}: {line}\n{env}"
            );
        }
        assert!(
            !env.contains("OPENAI") || rendered,
            "{name}: a key nobody declared\n{env}"
        );
    }
}

/// A declaration selecting the driver atelier with an Anthropic model renders what sited needs
/// to run it: the driver, atelier-agent's binary, the model, the plan's Anthropic route, and its
/// key as a credential PID 1 hands the gate, never a line of the env file nor sited's.
#[test]
fn the_atelier_driver_reaches_sited_env_and_its_key_the_gates_model_relay() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["agent"] = serde_json::json!({
        "driver": "atelier",
        "bins": { "atelier": "/usr/bin/atelier-agent" },
        "provider_hosts": ["api.anthropic.com"],
        "anthropic_model": "claude-sonnet-4-5",
    });
    doc["secrets"] = serde_json::json!({
        "ANTHROPIC_API_KEY": "/etc/atelier/example/credentials/ANTHROPIC_API_KEY",
    });
    let decl = Declaration::parse(&doc.to_string()).unwrap();
    let all = render(&decl, &FACTS).unwrap();
    let env = text_of(&all, "/etc/atelier/example/env");
    for line in [
        "ATELIER_AGENT_DRIVER=\"atelier\"",
        "ATELIER_ATELIER_AGENT_BIN=\"/usr/bin/atelier-agent\"",
        "ATELIER_AGENT_ANTHROPIC_MODEL=\"claude-sonnet-4-5\"",
    ] {
        assert!(env.lines().any(|l| l == line), "{line}\n{env}");
    }
    assert!(
        !env.contains("ANTHROPIC_API_KEY="),
        "the key is no setting\n{env}"
    );
    let key_line =
        "LoadCredential=ANTHROPIC_API_KEY:/etc/atelier/example/credentials/ANTHROPIC_API_KEY";
    let sited = text_of(&all, "/etc/systemd/system/atelier-sited@example.service");
    assert!(!sited.lines().any(|l| l == key_line), "{sited}");
    let gate = text_of(&all, "/etc/systemd/system/atelier-example-s1-gate.service");
    assert!(gate.lines().any(|l| l == key_line), "{gate}");
    let plan = text_of(&all, "/etc/atelier/example/gate/s1-turn.json");
    let plan: serde_json::Value = serde_json::from_str(plan.split_once('\n').unwrap().1).unwrap();
    assert_eq!(plan["hosts"], serde_json::json!([]));
    assert_eq!(
        plan["model"],
        serde_json::json!({"routes": [{
            "api": "anthropic",
            "upstream": "https://api.anthropic.com",
            "credential": "ANTHROPIC_API_KEY",
            "model": null,
        }]})
    );
    let build = text_of(&all, "/etc/atelier/example/gate/s1-build.json");
    assert!(
        !build.contains("\"model\""),
        "the build door relays no model: {build}"
    );
}

/// The binary and template paths are one derivation: by default where the Debian package
/// installs them, and a declared `paths.bin_dir` / `paths.templates_dir` reaches every unit's
/// `ExecStart=` and sited's env file (the shim it expects, the build binary it hands the build
/// door, the templates it scaffolds from), leaving no default behind.
#[test]
fn install_paths_reach_every_unit_and_sited_env() {
    let env_lines = |all: &[Artifact]| -> Vec<String> {
        text_of(all, "/etc/atelier/example/env")
            .lines()
            .filter(|l| {
                [
                    "ATELIER_SHIM_BIN=",
                    "ATELIER_BUILD_BIN=",
                    "ATELIER_TEMPLATES_DIR=",
                ]
                .iter()
                .any(|key| l.starts_with(key))
            })
            .map(str::to_owned)
            .collect()
    };
    let decl = example();
    let all = render(&decl, &FACTS).unwrap();
    assert_eq!(
        env_lines(&all),
        [
            "ATELIER_BUILD_BIN=\"/usr/bin/atelier-build\"",
            "ATELIER_SHIM_BIN=\"/usr/bin/atelier-shim\"",
            "ATELIER_TEMPLATES_DIR=\"/usr/share/atelier/templates\"",
        ]
    );

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
    let all = render(&decl, &FACTS).unwrap();
    assert_eq!(
        env_lines(&all),
        [
            "ATELIER_BUILD_BIN=\"/opt/atelier/bin/atelier-build\"",
            "ATELIER_SHIM_BIN=\"/opt/atelier/bin/atelier-shim\"",
            "ATELIER_TEMPLATES_DIR=\"/opt/atelier/templates\"",
        ]
    );
    let mut exec_starts = 0;
    for artifact in &all {
        let text = std::str::from_utf8(&artifact.bytes).unwrap();
        assert!(
            !text.contains("/usr/bin/atelier") && !text.contains("/usr/share/atelier"),
            "{} keeps a default install path\n{text}",
            artifact.path.display()
        );
        for line in text.lines().filter(|l| l.starts_with("ExecStart=")) {
            assert!(
                line.starts_with("ExecStart=/opt/atelier/bin/atelier-"),
                "{}: {line}",
                artifact.path.display()
            );
            exec_starts += 1;
        }
    }
    // sited, per site three doors and a gate, chatd and its purge.
    assert_eq!(exec_starts, 1 + 2 * 4 + 2);
}

/// A letsencrypt site's production vhost waits for its certificate: its stand-in serves only
/// the ACME challenge from the instance's webroot, and the vhost proper adds the TLS server
/// and redirects port 80 to it; certbot's deploy hook applies the declaration's copy again and
/// reloads the declared web server. Other TLS modes have neither stand-in nor hook.
/// With the operator's certificate files, production is served over TLS only, by both web
/// servers: every plain-HTTP server of the domain redirects to HTTPS and serves no release.
#[test]
fn production_with_certificate_files_is_served_over_tls_only() {
    let example_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let release = "\"/srv/www/www.example.org/web\"";
    for (server, vhosts, opening, [http, https]) in [
        (
            "nginx",
            "/etc/nginx/sites-available",
            "server {",
            ["listen 80;", "listen 443 "],
        ),
        (
            "apache",
            "/etc/apache2/sites-available",
            "<VirtualHost ",
            ["*:80>", "*:443>"],
        ),
    ] {
        let mut doc: serde_json::Value = serde_json::from_str(&example_text).unwrap();
        if server == "apache" {
            doc.as_object_mut().unwrap().remove("chat");
        }
        let text = doc
            .to_string()
            .replace("\"server\":\"nginx\"", &format!("\"server\":\"{server}\""))
            .replace(
                "\"tls\":{\"account_email\":\"ops@example.org\",\"mode\":\"letsencrypt\"}",
                "\"tls\":{\"mode\":\"files\",\"certificate\":\"/etc/ssl/site.pem\",\
                 \"key\":\"/etc/ssl/site.key\"}",
            );
        assert!(
            text.contains("/etc/ssl/site.pem"),
            "{server}: the variant applies"
        );
        let decl = Declaration::parse(&text).unwrap();
        let all = render(&decl, &FACTS).unwrap();
        let prod = text_of(&all, &format!("{vhosts}/atelier-example-collection.conf"));
        let servers: Vec<&str> = prod.split(opening).skip(1).collect();
        let of_domain = |port: &str| -> Vec<&str> {
            servers
                .iter()
                .copied()
                .filter(|s| s.contains(port) && s.contains(" www.example.org"))
                .collect()
        };
        let plain = of_domain(http);
        assert!(!plain.is_empty(), "{server}: a port-80 server\n{prod}");
        for block in &plain {
            assert!(
                !block.contains(release),
                "{server}: plain HTTP serves the release\n{block}"
            );
            assert!(
                block.contains("https://www.example.org"),
                "{server}: redirect\n{block}"
            );
        }
        assert!(
            of_domain(https).iter().any(|s| s.contains(release)),
            "{server}: the TLS server serves the release\n{prod}"
        );
    }
}

#[test]
fn letsencrypt_vhosts_wait_for_their_certificate_and_a_hook_applies_again() {
    let live = "/etc/letsencrypt/live/www.example.org";
    let hook_path = "/etc/letsencrypt/renewal-hooks/deploy/atelier-example";
    let example_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples/instance.json"),
    )
    .unwrap();
    let cases = [
        (
            "nginx",
            "/etc/nginx/sites-available",
            "nginx -t && systemctl try-reload-or-restart nginx.service",
        ),
        (
            "apache",
            "/etc/apache2/sites-available",
            "apache2ctl configtest && systemctl try-reload-or-restart apache2.service",
        ),
    ];
    for (server, vhosts, reload) in cases {
        // The CMS's vhost is nginx's only: Apache serves the example without its chat block.
        let mut doc: serde_json::Value = serde_json::from_str(&example_text).unwrap();
        if server == "apache" {
            doc.as_object_mut().unwrap().remove("chat");
        }
        let text = doc
            .to_string()
            .replace("\"server\":\"nginx\"", &format!("\"server\":\"{server}\""));
        let decl = Declaration::parse(&text).unwrap();
        let all = render(&decl, &FACTS).unwrap();
        let prod = all
            .iter()
            .find(|a| a.path == Path::new(vhosts).join("atelier-example-collection.conf"))
            .unwrap();
        let stand_in = prod
            .stand_in
            .as_ref()
            .expect("a letsencrypt vhost has a stand-in");
        assert_eq!(
            stand_in.requires,
            [
                Path::new(live).join("fullchain.pem"),
                Path::new(live).join("privkey.pem")
            ]
        );
        let stamp = parse_stamp(&stand_in.bytes).unwrap();
        assert_eq!(
            (stamp.instance.as_str(), stamp.kind),
            ("example", prod.kind)
        );
        let waiting = std::str::from_utf8(&stand_in.bytes).unwrap();
        let ready = std::str::from_utf8(&prod.bytes).unwrap();
        for text in [waiting, ready] {
            assert!(
                text.contains("certbot certonly --webroot -w /var/lib/atelier/example/acme -d www.example.org"),
                "{text}"
            );
            assert!(
                text.contains(&format!("--deploy-hook {hook_path}")),
                "{text}"
            );
        }
        assert!(waiting.contains("WAITING FOR THE CERTIFICATE"), "{waiting}");
        assert!(!waiting.contains("fullchain.pem\""), "{waiting}");
        match server {
            "nginx" => {
                let acme = "location ^~ /.well-known/acme-challenge/ {\n        root \"/var/lib/atelier/example/acme\";\n    }";
                assert!(
                    waiting.contains(acme) && ready.contains(acme),
                    "{waiting}\n{ready}"
                );
                assert!(waiting.contains("return 503;"), "{waiting}");
                assert!(!waiting.contains("listen 443"), "{waiting}");
                assert!(ready.contains("return 301 https://www.example.org$request_uri;"));
                assert!(ready.contains(&format!("ssl_certificate \"{live}/fullchain.pem\";")));
                assert!(ready.contains(&format!("ssl_certificate_key \"{live}/privkey.pem\";")));
            }
            _ => {
                let alias = "Alias \"/.well-known/acme-challenge/\" \"/var/lib/atelier/example/acme/.well-known/acme-challenge/\"";
                assert!(
                    waiting.contains(alias) && ready.contains(alias),
                    "{waiting}\n{ready}"
                );
                assert!(
                    waiting.contains("RedirectMatch 503 \"^/(?!\\.well-known/acme-challenge/)\""),
                    "{waiting}"
                );
                assert!(!waiting.contains("*:443"), "{waiting}");
                assert!(ready.contains("RedirectMatch permanent \"^/(?!\\.well-known/acme-challenge/)(.*)$\" \"https://www.example.org/$1\""), "{ready}");
                assert!(ready.contains("<VirtualHost *:443>"), "{ready}");
                assert!(ready.contains(&format!("SSLCertificateFile \"{live}/fullchain.pem\"")));
            }
        }
        let pre = all
            .iter()
            .find(|a| a.path == Path::new(vhosts).join("atelier-example-collection-pre.conf"))
            .unwrap();
        assert!(pre.stand_in.is_none(), "preproduction has no certificate");

        let hook = all.iter().find(|a| a.path == Path::new(hook_path)).unwrap();
        assert_eq!(hook.kind, ArtifactKind::RenewalHook);
        assert_eq!(
            (hook.owner.as_str(), hook.group.as_str(), hook.mode),
            ("root", "root", 0o755)
        );
        let body = std::str::from_utf8(hook.body()).unwrap();
        assert!(
            body.contains("/usr/bin/atelier-provision apply --declaration /etc/atelier/example/instance.json || status=$?\n"),
            "{body}"
        );
        assert!(
            body.contains(&format!("\n{reload} || status=$?\n")),
            "{body}"
        );
        assert!(hook
            .bytes
            .starts_with(b"# atelier-provision: example renewal_hook "));
        assert!(!body.lines().any(|l| l.starts_with("#!")), "{body}");
    }

    let files = example_text.replace(
        "\"tls\": { \"mode\": \"letsencrypt\", \"account_email\": \"ops@example.org\" }",
        "\"tls\": { \"mode\": \"files\", \"certificate\": \"/etc/ssl/site.pem\", \"key\": \"/etc/ssl/site.key\" }",
    );
    let none = example_text.replace(
        "\"tls\": { \"mode\": \"letsencrypt\", \"account_email\": \"ops@example.org\" }",
        "\"tls\": { \"mode\": \"none\" }",
    );
    for text in [files, none] {
        assert_ne!(text, example_text);
        let decl = Declaration::parse(&text).unwrap();
        let all = render(&decl, &FACTS).unwrap();
        assert!(all.iter().all(|a| a.stand_in.is_none()));
        assert!(!all.iter().any(|a| a.kind == ArtifactKind::RenewalHook));
        assert!(!all
            .iter()
            .any(|a| String::from_utf8_lossy(&a.bytes).contains("acme-challenge")));
    }
}

/// A declared provider idle timeout reaches chatd's environment; undeclared, chatd keeps its
/// own default. The CMS's vhost waits for a chat stream's next byte as long as chatd may wait
/// for a provider at most, so a slow model's turn ends at chatd with a message, never cut by
/// the web server.
#[test]
fn a_declared_provider_idle_timeout_reaches_chatd() {
    let service = "/etc/systemd/system/atelier-chatd@example.service";
    let variable = "CHATD_PROVIDER_IDLE_TIMEOUT_MS";
    let mut decl = example();
    let rendered = render(&decl, &FACTS).unwrap();
    assert!(!text_of(&rendered, service).contains(variable));
    let vhost = text_of(
        &rendered,
        "/etc/nginx/sites-available/atelier-example.cms.conf",
    );
    let end = atelier_layout::services::CHATD_PROVIDER_IDLE_TIMEOUT_MS.end() / 1000;
    assert!(
        vhost.contains(&format!("proxy_read_timeout {end}s;")),
        "{vhost}"
    );

    decl.chat.as_mut().unwrap().provider_idle_timeout_ms = Some(600_000);
    let rendered = render(&decl, &FACTS).unwrap();
    let unit = text_of(&rendered, service);
    let line = format!("\nEnvironment={variable}=600000\n");
    assert!(unit.contains(&line), "{unit}");
}

/// The declaration keeps every tree the daemons reach out of the home folders
/// (`protected_home_path`) because their units hide them whole: each daemon's unit says so.
#[test]
fn the_daemons_units_hide_the_home_folders_the_declaration_keeps_trees_out_of() {
    let rendered = render(&example(), &FACTS).unwrap();
    for (daemon, unit) in [
        ("sited", "/etc/systemd/system/atelier-sited@example.service"),
        (
            "a gate",
            "/etc/systemd/system/atelier-example-s1-gate.service",
        ),
        ("chatd", "/etc/systemd/system/atelier-chatd@example.service"),
    ] {
        let text = text_of(&rendered, unit);
        assert!(
            text.lines().any(|l| l == "ProtectHome=yes"),
            "{daemon}: {text}"
        );
    }
    assert_eq!(
        atelier_layout::paths::PROTECTED_HOME_DIRS,
        ["/home", "/root", "/run/user"],
        "what systemd.exec(5) says ProtectHome=yes hides"
    );
}
