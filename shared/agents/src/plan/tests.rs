//! Table tests of turn plans: each driver's argv, exact environment, planned files, and every refusal by name.

use super::*;

const WORKSPACE: &str = "/var/lib/atelier/m/sites/alpha";
const MCP_JSON: &str = "/var/lib/atelier/m/sites/alpha/.builder/mcp.json";

fn request<'a>(
    driver: DriverId,
    mcp: &'a McpAttachment,
    credentials: &'a DriverCredentials,
    brief: Option<&'a [u8]>,
    resume: Option<&'a str>,
) -> TurnRequest<'a> {
    TurnRequest {
        driver,
        bin: Path::new("/usr/local/bin/agent"),
        workspace: Path::new(WORKSPACE),
        prompt: "Make a page",
        resume_token: resume,
        brief,
        mcp,
        mcp_config_path: Path::new(MCP_JSON),
        path_env: "/usr/bin:/bin",
        credentials,
        proxied: false,
        endpoint: &ENDPOINT,
        stated_dir: Path::new(STATED),
        state_dir: Path::new(STATE),
    }
}

/// The daemon's statement directory and the CLI's state, as the child sees them.
const STATED: &str = "/var/lib/atelier/m/agents/s1/turn/stated";
const STATE: &str = "/var/lib/atelier/m/agents/s1/turn/state";

/// Claude Code's own default endpoint; an OpenAI-compatible model for pi.
static ENDPOINT: std::sync::LazyLock<ModelEndpoint> = std::sync::LazyLock::new(|| ModelEndpoint {
    openai: Some(OpenAiModel {
        base_url: "https://llm.example.org/v1".into(),
        model: "coder-7b".into(),
    }),
    ..ModelEndpoint::default()
});

/// Every credential set, each with a canary value that must reach its own driver only.
fn credentials() -> DriverCredentials {
    DriverCredentials {
        anthropic_api_key: Some("sk-ant-canary".into()),
        opencode_env: vec![
            ("OPENAI_API_KEY".into(), "sk-openai-canary".into()),
            (
                "OPENCODE_AUTH_CONTENT".into(),
                r#"{"openai":{"type":"api","key":"auth-canary"}}"#.into(),
            ),
        ],
        pi_env: vec![("OPENAI_API_KEY".into(), "pi-canary".into())],
        atelier_api_key: Some("atelier-canary".into()),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn claude_argv_states_every_source_and_tool() {
    let mcp = McpAttachment::confined();
    let creds = credentials();
    let plan = plan_turn(&request(
        DriverId::ClaudeCode,
        &mcp,
        &creds,
        Some(b"# Brief"),
        Some("0b6c5a38-2f8e-4d6a-9a51-3d1f0c2b7e44"),
    ))
    .unwrap();
    let want = strings(&[
        "/usr/local/bin/agent",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--max-turns",
        "50",
        "--setting-sources",
        "",
        "--settings",
        r#"{"disableAllHooks":true,"enableAllProjectMcpServers":false,"autoMemoryEnabled":false}"#,
        "--strict-mcp-config",
        "--mcp-config",
        MCP_JSON,
        "--disable-slash-commands",
        "--tools",
        "Read,Write,Edit,Glob,Grep",
        "--allowedTools",
        "Read,Write,Edit,Glob,Grep,mcp__dedalo_publication",
        "--disallowedTools",
        "Bash,WebFetch,WebSearch",
        "--append-system-prompt",
        "# Brief",
        "--resume",
        "0b6c5a38-2f8e-4d6a-9a51-3d1f0c2b7e44",
        "--",
        "Make a page",
    ]);
    assert_eq!(plan.argv, want);
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.files[0].path, Path::new(".builder/mcp.json"));
    assert_eq!(plan.files[0].mode, 0o640);
    assert_eq!(
        plan.files[0].contents,
        b"{\"mcpServers\":{\"dedalo_publication\":{\"type\":\"http\",\"url\":\"http://127.0.0.1:3129/mcp\"}}}\n"
    );
}

#[test]
fn a_prompt_that_looks_like_an_option_stays_the_prompt() {
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    for driver in [DriverId::ClaudeCode, DriverId::Opencode, DriverId::Atelier] {
        let mut req = request(driver, &mcp, &creds, None, None);
        req.prompt = "--dangerously-skip-permissions";
        let plan = plan_turn(&req).unwrap();
        if driver != DriverId::ClaudeCode {
            // opencode and atelier-agent read their prompt on stdin: nothing of it is on the argv.
            assert_eq!(plan.stdin.as_deref(), Some(req.prompt));
            assert!(!plan.argv.iter().any(|arg| arg == req.prompt));
            continue;
        }
        let n = plan.argv.len();
        assert_eq!(
            plan.argv[n - 2..],
            strings(&["--", "--dangerously-skip-permissions"])
        );
        assert_eq!(plan.stdin, None);
    }
}

/// The secrets boundary: each driver's child gets exactly these keys, whatever is configured.
#[test]
fn child_environment_is_an_exact_allowlist() {
    let mcp = McpAttachment::confined();
    let all = credentials();
    let none = DriverCredentials::default();
    let opencode_keys = [
        "OPENCODE_AUTH_CONTENT",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_DB",
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_CLAUDE_CODE",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_PROJECT_CONFIG",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_PERMISSION",
        "OPENCODE_PURE",
        "PATH",
    ];
    let pi_keys = [
        "PATH",
        "PI_CODING_AGENT_DIR",
        "PI_OFFLINE",
        "PI_SKIP_VERSION_CHECK",
        "PI_TELEMETRY",
    ];
    let with_openai: Vec<&str> = {
        let mut keys = opencode_keys.to_vec();
        keys.insert(0, "OPENAI_API_KEY");
        keys
    };
    type Case<'a> = (
        &'static str,
        DriverId,
        &'a DriverCredentials,
        Vec<&'static str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "claude with a key",
            DriverId::ClaudeCode,
            &all,
            vec![
                "ANTHROPIC_API_KEY",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "DISABLE_AUTOUPDATER",
                "PATH",
            ],
        ),
        (
            "claude without a key",
            DriverId::ClaudeCode,
            &none,
            vec![
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "DISABLE_AUTOUPDATER",
                "PATH",
            ],
        ),
        (
            "opencode with provider pairs",
            DriverId::Opencode,
            &all,
            with_openai,
        ),
        (
            "opencode without pairs",
            DriverId::Opencode,
            &none,
            opencode_keys.to_vec(),
        ),
        (
            "pi with its key",
            DriverId::Pi,
            &all,
            [&["OPENAI_API_KEY"], &pi_keys[..]].concat(),
        ),
        ("pi without a key", DriverId::Pi, &none, pi_keys.to_vec()),
        (
            "atelier with its key",
            DriverId::Atelier,
            &all,
            vec!["AGENT_API_KEY", "PATH"],
        ),
        (
            "atelier without a key",
            DriverId::Atelier,
            &none,
            vec!["PATH"],
        ),
    ];
    for (name, driver, creds, keys) in cases {
        let plan = plan_turn(&request(driver, &mcp, creds, Some(b"brief"), None)).unwrap();
        assert_eq!(
            plan.env.keys().map(String::as_str).collect::<Vec<_>>(),
            keys,
            "{name}"
        );
        assert_eq!(plan.env["PATH"], "/usr/bin:/bin", "{name}");
        // The shim refuses a spec that sets one of the names it keeps, so every run would be.
        for key in plan.env.keys() {
            assert!(
                atelier_proto::is_valid_env_key(key) && !atelier_proto::is_fixed_env_key(key),
                "{name}: the shim would refuse {key}"
            );
        }
        let everything = format!("{:?}{:?}", plan.argv, plan.env.values().collect::<Vec<_>>());
        for foreign in [
            "HOME",
            "SERVICE_TOKEN",
            "CREDENTIALS_DIRECTORY",
            "PUBLICATION_API_KEY",
        ] {
            assert!(!everything.contains(foreign), "{name}: {foreign}");
        }
        // Each driver's credentials reach that driver only.
        for (owner, canary) in [
            (DriverId::ClaudeCode, "sk-ant-canary"),
            (DriverId::Opencode, "sk-openai-canary"),
            (DriverId::Pi, "pi-canary"),
            (DriverId::Atelier, "atelier-canary"),
        ] {
            if owner != driver {
                assert!(!everything.contains(canary), "{name}: {canary}");
            }
        }
    }
    let plan = plan_turn(&request(DriverId::ClaudeCode, &mcp, &all, None, None)).unwrap();
    assert_eq!(plan.env["ANTHROPIC_API_KEY"], "sk-ant-canary");
    let plan = plan_turn(&request(DriverId::Opencode, &mcp, &all, None, None)).unwrap();
    assert_eq!(plan.env["OPENAI_API_KEY"], "sk-openai-canary");
    assert_eq!(
        plan.env["OPENCODE_AUTH_CONTENT"], r#"{"openai":{"type":"api","key":"auth-canary"}}"#,
        "the operator's store replaces the empty one"
    );
    let plan = plan_turn(&request(DriverId::Opencode, &mcp, &none, None, None)).unwrap();
    assert_eq!(plan.env["OPENCODE_AUTH_CONTENT"], "{}");
    let plan = plan_turn(&request(DriverId::Atelier, &mcp, &all, None, None)).unwrap();
    assert_eq!(plan.env["AGENT_API_KEY"], "atelier-canary");
    assert!(
        !plan.argv.iter().any(|arg| arg.contains("atelier-canary")),
        "the key is never an argument"
    );
}

#[test]
fn mcp_json_per_attachment() {
    let creds = DriverCredentials::default();
    let cases = [
        (
            "confined: the gate's relay, no key",
            McpAttachment::confined(),
            json!({"mcpServers": {"dedalo_publication": {"type": "http", "url": "http://127.0.0.1:3129/mcp"}}}),
        ),
        (
            "unconfined with a key",
            McpAttachment::unconfined("https://api.example.org/v2/", Some("pub-key")),
            json!({"mcpServers": {"dedalo_publication": {"type": "http", "url": "https://api.example.org/v2/mcp", "headers": {"X-API-Key": "pub-key"}}}}),
        ),
        (
            "unconfined, empty key",
            McpAttachment::unconfined("https://api.example.org/v2", Some("")),
            json!({"mcpServers": {"dedalo_publication": {"type": "http", "url": "https://api.example.org/v2/mcp"}}}),
        ),
        (
            "unconfined, no key",
            McpAttachment::unconfined("http://127.0.0.1:3100/api", None),
            json!({"mcpServers": {"dedalo_publication": {"type": "http", "url": "http://127.0.0.1:3100/api/mcp"}}}),
        ),
    ];
    for (name, mcp, want) in cases {
        let plan = plan_turn(&request(DriverId::ClaudeCode, &mcp, &creds, None, None)).unwrap();
        let config: Value = serde_json::from_slice(&plan.files[0].contents).unwrap();
        assert_eq!(config, want, "{name}");
        let opencode = plan_turn(&request(DriverId::Opencode, &mcp, &creds, None, None)).unwrap();
        let config: Value = serde_json::from_str(&opencode.env["OPENCODE_CONFIG_CONTENT"]).unwrap();
        let mut server = want["mcpServers"]["dedalo_publication"].clone();
        server["type"] = json!("remote");
        assert_eq!(
            config["mcp"]["dedalo_publication"], server,
            "{name} (opencode)"
        );
        assert!(
            !format!("{mcp:?}{plan:?}").contains("pub-key"),
            "{name}: Debug shows no key"
        );
    }
}

#[test]
fn opencode_gets_its_whole_configuration_from_the_daemon() {
    let mcp = McpAttachment::confined();
    let creds = credentials();
    let plan = plan_turn(&request(
        DriverId::Opencode,
        &mcp,
        &creds,
        Some(b"brief"),
        Some("ses_3b11bfdcdffeITCXse4fCuIRnU"),
    ))
    .unwrap();
    assert_eq!(
        plan.argv,
        strings(&[
            "/usr/local/bin/agent",
            "run",
            "--pure",
            "--format",
            "json",
            "--session",
            "ses_3b11bfdcdffeITCXse4fCuIRnU",
        ])
    );
    // The prompt is opencode's stdin, exactly: on the argv it would be quoted (or, all digits,
    // taken for a number).
    assert_eq!(plan.stdin.as_deref(), Some("Make a page"));
    let config: Value = serde_json::from_str(&plan.env["OPENCODE_CONFIG_CONTENT"]).unwrap();
    let permission = json!({
        "bash": "deny", "webfetch": "deny", "websearch": "deny", "codesearch": "deny",
        "skill": "deny", "task": "deny", "external_directory": "deny", "edit": "allow",
    });
    assert_eq!(config["permission"], permission);
    let env_permission: Value = serde_json::from_str(&plan.env["OPENCODE_PERMISSION"]).unwrap();
    assert_eq!(
        env_permission, permission,
        "the override key states the same"
    );
    assert_eq!(config["share"], "disabled");
    assert_eq!(config["autoupdate"], false);
    assert_eq!(
        config["instructions"],
        json!([format!("{STATED}/opencode/brief.md")])
    );
    assert!(
        plan.files.is_empty(),
        "nothing is written into the workspace"
    );
    assert_eq!(
        plan.stated,
        [PlannedFile {
            path: PathBuf::from("opencode/brief.md"),
            contents: b"brief".to_vec(),
            mode: 0o640
        }]
    );
    assert_eq!(plan.env["OPENCODE_DB"], format!("{STATE}/opencode.db"));
    // The stated model: an OpenAI-compatible provider whose key is the operator's credential.
    assert_eq!(
        config["provider"]["atelier"],
        json!({
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": "https://llm.example.org/v1", "apiKey": "{env:OPENAI_API_KEY}"},
            "models": {"coder-7b": {}},
        })
    );
    assert_eq!(config["model"], "atelier/coder-7b");
    for switch in [
        "OPENCODE_PURE",
        "OPENCODE_DISABLE_PROJECT_CONFIG",
        "OPENCODE_DISABLE_CLAUDE_CODE",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS",
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_SHARE",
    ] {
        assert_eq!(plan.env[switch], "true", "{switch}");
    }
    let briefless = plan_turn(&request(DriverId::Opencode, &mcp, &creds, None, None)).unwrap();
    assert!(briefless.files.is_empty());
    let config: Value = serde_json::from_str(&briefless.env["OPENCODE_CONFIG_CONTENT"]).unwrap();
    assert!(config.get("instructions").is_none());
    assert!(!briefless.argv.contains(&"--session".to_owned()));
}

#[test]
fn refusals_table() {
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    let bad_env = DriverCredentials {
        opencode_env: vec![("NODE_OPTIONS".into(), "--require /tmp/x.js".into())],
        ..DriverCredentials::default()
    };
    let bad_pi_env = DriverCredentials {
        pi_env: vec![("PI_CODING_AGENT_DIR".into(), "/tmp/planted".into())],
        ..DriverCredentials::default()
    };
    let no_model = ModelEndpoint::default();
    let base = request(DriverId::ClaudeCode, &mcp, &creds, None, None);
    type Case<'a> = (&'static str, TurnRequest<'a>, PlanError);
    let cases: Vec<Case<'_>> = vec![
        (
            "pi without a model",
            TurnRequest {
                driver: DriverId::Pi,
                endpoint: &no_model,
                ..base
            },
            PlanError::NoModel(DriverId::Pi),
        ),
        (
            "atelier without a model",
            TurnRequest {
                driver: DriverId::Atelier,
                endpoint: &no_model,
                ..base
            },
            PlanError::NoAtelierModel,
        ),
        (
            "atelier resume token that is an option",
            TurnRequest {
                driver: DriverId::Atelier,
                resume_token: Some("--state-dir"),
                ..base
            },
            PlanError::BadResumeToken,
        ),
        (
            "atelier relative binary",
            TurnRequest {
                driver: DriverId::Atelier,
                bin: Path::new("atelier-agent"),
                ..base
            },
            PlanError::BinNotAbsolute(PathBuf::from("atelier-agent")),
        ),
        (
            "pi env that is not a credential",
            TurnRequest {
                driver: DriverId::Pi,
                credentials: &bad_pi_env,
                ..base
            },
            PlanError::PiEnvKey("PI_CODING_AGENT_DIR".into()),
        ),
        (
            "brief with a NUL",
            TurnRequest {
                brief: Some(b"a\0b"),
                ..base
            },
            PlanError::BriefHasNul,
        ),
        (
            "opencode brief with a NUL",
            TurnRequest {
                driver: DriverId::Opencode,
                brief: Some(b"\0"),
                ..base
            },
            PlanError::BriefHasNul,
        ),
        (
            "prompt with a NUL",
            TurnRequest {
                prompt: "x\0y",
                ..base
            },
            PlanError::PromptHasNul,
        ),
        (
            "mcp.json outside the workspace",
            TurnRequest {
                mcp_config_path: Path::new("/tmp/mcp.json"),
                ..base
            },
            PlanError::McpPathOutside(PathBuf::from("/tmp/mcp.json")),
        ),
        (
            "mcp.json in a sibling workspace",
            TurnRequest {
                mcp_config_path: Path::new("/var/lib/atelier/m/sites/alphabet/.builder/mcp.json"),
                ..base
            },
            PlanError::McpPathOutside(PathBuf::from(
                "/var/lib/atelier/m/sites/alphabet/.builder/mcp.json",
            )),
        ),
        (
            "mcp.json escaping with ..",
            TurnRequest {
                mcp_config_path: Path::new("/var/lib/atelier/m/sites/alpha/../beta/mcp.json"),
                ..base
            },
            PlanError::McpPathOutside(PathBuf::from(
                "/var/lib/atelier/m/sites/alpha/../beta/mcp.json",
            )),
        ),
        (
            "mcp.json is the workspace itself",
            TurnRequest {
                mcp_config_path: Path::new(WORKSPACE),
                ..base
            },
            PlanError::McpPathOutside(PathBuf::from(WORKSPACE)),
        ),
        (
            "relative binary",
            TurnRequest {
                bin: Path::new("claude"),
                ..base
            },
            PlanError::BinNotAbsolute(PathBuf::from("claude")),
        ),
        (
            "resume token that is an option",
            TurnRequest {
                resume_token: Some("--dangerously-skip-permissions"),
                ..base
            },
            PlanError::BadResumeToken,
        ),
        (
            "opencode session that is an option",
            TurnRequest {
                driver: DriverId::Opencode,
                resume_token: Some("-x"),
                ..base
            },
            PlanError::BadResumeToken,
        ),
        (
            "opencode env that is not a credential",
            TurnRequest {
                driver: DriverId::Opencode,
                credentials: &bad_env,
                ..base
            },
            PlanError::OpencodeEnvKey("NODE_OPTIONS".into()),
        ),
    ];
    for (name, req, want) in cases {
        assert_eq!(want.reason(), "turn_setup_failed", "{name}");
        assert_eq!(plan_turn(&req), Err(want), "{name}");
    }
}

#[test]
fn resume_token_table() {
    let long = "a".repeat(129);
    let cases: [(&str, &str, bool); 11] = [
        ("claude uuid", "0b6c5a38-2f8e-4d6a-9a51-3d1f0c2b7e44", true),
        ("opencode session", "ses_494719016ffe85dkDMj0FPRbHK", true),
        ("128 bytes", &long[..128], true),
        ("129 bytes", &long, false),
        ("empty", "", false),
        ("leading dash", "-r", false),
        ("an option", "--settings", false),
        ("space", "a b", false),
        ("equals", "a=b", false),
        ("slash", "../x", false),
        ("non-ascii", "sesión", false),
    ];
    for (name, token, ok) in cases {
        assert_eq!(is_resume_token(token), ok, "{name}");
    }
}

#[test]
fn brief_bounds() {
    const NOTICE: &str = BRIEF_CUT_NOTICE;
    type Check = Box<dyn Fn(&str) -> bool>;
    let cases: Vec<(&str, Vec<u8>, Check)> = vec![
        (
            "short passes as is",
            b"short".to_vec(),
            Box::new(|b: &str| b == "short"),
        ),
        ("empty passes", Vec::new(), Box::new(|b: &str| b.is_empty())),
        (
            "exactly the bound passes",
            vec![b'a'; MAX_BRIEF_BYTES],
            Box::new(|b: &str| b.len() == MAX_BRIEF_BYTES && !b.ends_with(NOTICE)),
        ),
        (
            "one over is cut with the notice",
            vec![b'a'; MAX_BRIEF_BYTES + 1],
            Box::new(|b: &str| {
                b.len() == MAX_BRIEF_BYTES && b.ends_with(NOTICE) && b.starts_with("aaaa")
            }),
        ),
        (
            "multibyte cut on a char boundary",
            "é".repeat(MAX_BRIEF_BYTES).into_bytes(),
            Box::new(|b: &str| {
                b.len() <= MAX_BRIEF_BYTES
                    && b.len() > MAX_BRIEF_BYTES - NOTICE.len() - 4
                    && b.ends_with(NOTICE)
                    && b.trim_end_matches(NOTICE).chars().all(|c| c == 'é')
            }),
        ),
        (
            "four-byte chars cut on a char boundary",
            "🦀".repeat(MAX_BRIEF_BYTES / 3).into_bytes(),
            Box::new(|b: &str| {
                b.len() <= MAX_BRIEF_BYTES && b.trim_end_matches(NOTICE).chars().all(|c| c == '🦀')
            }),
        ),
        (
            "invalid utf-8 is replaced",
            b"\xff ok".to_vec(),
            Box::new(|b: &str| b == "\u{fffd} ok"),
        ),
    ];
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    for (name, brief, check) in cases {
        let plan = plan_turn(&request(
            DriverId::ClaudeCode,
            &mcp,
            &creds,
            Some(&brief),
            None,
        ))
        .unwrap();
        let at = plan
            .argv
            .iter()
            .position(|a| a == "--append-system-prompt")
            .unwrap();
        assert!(check(&plan.argv[at + 1]), "{name}");
        let opencode = plan_turn(&request(
            DriverId::Opencode,
            &mcp,
            &creds,
            Some(&brief),
            None,
        ))
        .unwrap();
        assert_eq!(
            opencode.stated[0].contents,
            plan.argv[at + 1].as_bytes(),
            "{name}: both drivers get the same brief"
        );
    }
}

#[test]
fn opencode_env_table() {
    let cases: [(&str, &str, &str, Result<(), PlanError>); 20] = [
        ("openai key", "OPENAI_API_KEY", "v", Ok(())),
        ("anthropic key", "ANTHROPIC_API_KEY", "v", Ok(())),
        ("opencode zen key", "OPENCODE_API_KEY", "v", Ok(())),
        ("aws access key id", "AWS_ACCESS_KEY_ID", "v", Ok(())),
        ("aws secret", "AWS_SECRET_ACCESS_KEY", "v", Ok(())),
        ("aws session token", "AWS_SESSION_TOKEN", "v", Ok(())),
        ("auth token", "GITHUB_AUTH_TOKEN", "v", Ok(())),
        (
            "auth store of api and oauth entries",
            "OPENCODE_AUTH_CONTENT",
            r#"{"openai":{"type":"api","key":"k"},"anthropic":{"type":"oauth","refresh":"r","access":"a","expires":1}}"#,
            Ok(()),
        ),
        ("empty auth store", "OPENCODE_AUTH_CONTENT", "{}", Ok(())),
        (
            "auth store with a wellknown entry",
            "OPENCODE_AUTH_CONTENT",
            r#"{"corp":{"type":"wellknown","key":"k","token":"t"}}"#,
            Err(PlanError::OpencodeAuthContent),
        ),
        (
            "auth store not json",
            "OPENCODE_AUTH_CONTENT",
            "api",
            Err(PlanError::OpencodeAuthContent),
        ),
        (
            "auth store an array",
            "OPENCODE_AUTH_CONTENT",
            "[]",
            Err(PlanError::OpencodeAuthContent),
        ),
        (
            "PATH",
            "PATH",
            "/tmp",
            Err(PlanError::OpencodeEnvKey("PATH".into())),
        ),
        (
            "HOME",
            "HOME",
            "/tmp",
            Err(PlanError::OpencodeEnvKey("HOME".into())),
        ),
        (
            "a restriction switch",
            "OPENCODE_DISABLE_PROJECT_CONFIG",
            "false",
            Err(PlanError::OpencodeEnvKey(
                "OPENCODE_DISABLE_PROJECT_CONFIG".into(),
            )),
        ),
        (
            "the configuration",
            "OPENCODE_CONFIG_CONTENT",
            "{}",
            Err(PlanError::OpencodeEnvKey("OPENCODE_CONFIG_CONTENT".into())),
        ),
        (
            "suffix alone",
            "_API_KEY",
            "v",
            Err(PlanError::OpencodeEnvKey("_API_KEY".into())),
        ),
        (
            "lowercase",
            "openai_api_key",
            "v",
            Err(PlanError::OpencodeEnvKey("openai_api_key".into())),
        ),
        // Names the shim keeps: a run given one would be refused, every turn.
        (
            "a name the shim keeps",
            "ATELIER_X_API_KEY",
            "v",
            Err(PlanError::OpencodeEnvKey("ATELIER_X_API_KEY".into())),
        ),
        (
            "the original's prefix",
            "DEDALO_X_API_KEY",
            "v",
            Err(PlanError::OpencodeEnvKey("DEDALO_X_API_KEY".into())),
        ),
    ];
    for (name, key, value, want) in cases {
        assert_eq!(
            validate_opencode_env(&[(key.to_owned(), value.to_owned())]),
            want,
            "{name}"
        );
    }
    let first_bad_is_named = [
        ("OPENAI_API_KEY".to_owned(), "v".to_owned()),
        ("LD_PRELOAD".to_owned(), "/x.so".to_owned()),
        ("NODE_OPTIONS".to_owned(), "x".to_owned()),
    ];
    assert_eq!(
        validate_opencode_env(&first_bad_is_named),
        Err(PlanError::OpencodeEnvKey("LD_PRELOAD".into()))
    );
    let shown = PlanError::OpencodeEnvKey("LD_PRELOAD".into()).to_string();
    assert!(shown.contains("LD_PRELOAD") && !shown.contains("/x.so"));
}

#[test]
fn debug_output_names_no_secret() {
    let creds = credentials();
    let mcp = McpAttachment::unconfined("https://a.example", Some("pub-key"));
    let claude = plan_turn(&request(DriverId::ClaudeCode, &mcp, &creds, None, None)).unwrap();
    let opencode = plan_turn(&request(DriverId::Opencode, &mcp, &creds, None, None)).unwrap();
    let atelier = plan_turn(&request(DriverId::Atelier, &mcp, &creds, None, None)).unwrap();
    let shown = format!("{creds:?} {mcp:?} {claude:?} {opencode:?} {atelier:?}");
    for secret in [
        "sk-ant-canary",
        "sk-openai-canary",
        "pi-canary",
        "atelier-canary",
        "auth-canary",
        "pub-key",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.contains("ANTHROPIC_API_KEY"),
        "keys are named: {shown}"
    );
}

#[test]
fn egress_environment_per_door_and_driver() {
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    let proxy_keys = [
        ("HTTPS_PROXY", "http://127.0.0.1:3128"),
        ("https_proxy", "http://127.0.0.1:3128"),
        ("HTTP_PROXY", "http://127.0.0.1:3128"),
        ("http_proxy", "http://127.0.0.1:3128"),
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
        ("NODE_USE_ENV_PROXY", "1"),
    ];
    let quiet = [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
    ];
    let lab = ModelEndpoint {
        anthropic_base_url: Some("https://model.lab.example".into()),
        extra_ca_certs: Some(PathBuf::from("/etc/atelier-lab/ca.pem")),
        ..ENDPOINT.clone()
    };
    // (name, driver, proxied, endpoint, keys that must be there, keys that must not)
    type Case<'a> = (
        &'static str,
        DriverId,
        bool,
        &'a ModelEndpoint,
        Vec<(&'static str, &'static str)>,
        Vec<&'static str>,
    );
    let cases: Vec<Case<'_>> =
        vec![
        (
            "confined claude: the proxy, the quiet switches, the model relay",
            DriverId::ClaudeCode,
            true,
            &ENDPOINT,
            proxy_keys
                .iter()
                .chain(&quiet)
                .copied()
                .chain([("ANTHROPIC_BASE_URL", "http://127.0.0.1:3129/model/anthropic")])
                .collect(),
            vec!["NODE_EXTRA_CA_CERTS"],
        ),
        (
            "unconfined claude: Anthropic's own API, no base URL",
            DriverId::ClaudeCode,
            false,
            &ENDPOINT,
            vec![],
            vec!["ANTHROPIC_BASE_URL"],
        ),
        (
            "unconfined claude: no gate behind loopback, so no proxy; still quiet",
            DriverId::ClaudeCode,
            false,
            &ENDPOINT,
            quiet.to_vec(),
            proxy_keys.iter().map(|(k, _)| *k).collect(),
        ),
        (
            "confined opencode: the proxy, no claude switch",
            DriverId::Opencode,
            true,
            &ENDPOINT,
            proxy_keys.to_vec(),
            vec![
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "DISABLE_AUTOUPDATER",
            ],
        ),
        (
            "confined claude with a gateway and a lab CA: the gateway is the relay's",
            DriverId::ClaudeCode,
            true,
            &lab,
            vec![
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:3129/model/anthropic"),
                ("NODE_EXTRA_CA_CERTS", "/etc/atelier-lab/ca.pem"),
            ],
            vec![],
        ),
        (
            "confined pi: the proxy and its own quiet switches, no claude switch",
            DriverId::Pi,
            true,
            &lab,
            proxy_keys
                .iter()
                .copied()
                .chain([
                    ("PI_OFFLINE", "1"),
                    ("PI_TELEMETRY", "0"),
                    ("PI_SKIP_VERSION_CHECK", "1"),
                    ("NODE_EXTRA_CA_CERTS", "/etc/atelier-lab/ca.pem"),
                ])
                .collect(),
            vec!["ANTHROPIC_BASE_URL", "DISABLE_AUTOUPDATER"],
        ),
        (
            "confined atelier: the proxy, the lab CA as its only roots, no Node or claude switch",
            DriverId::Atelier,
            true,
            &lab,
            proxy_keys
                .iter()
                .copied()
                .chain([("SSL_CERT_FILE", "/etc/atelier-lab/ca.pem")])
                .collect(),
            vec![
                "NODE_EXTRA_CA_CERTS",
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "HOME",
            ],
        ),
        (
            "unconfined atelier: no proxy",
            DriverId::Atelier,
            false,
            &ENDPOINT,
            vec![("PATH", "/usr/bin:/bin")],
            proxy_keys
                .iter()
                .map(|(k, _)| *k)
                .chain(["SSL_CERT_FILE"])
                .collect(),
        ),
        (
            "opencode never gets claude's base URL",
            DriverId::Opencode,
            true,
            &lab,
            vec![("NODE_EXTRA_CA_CERTS", "/etc/atelier-lab/ca.pem")],
            vec!["ANTHROPIC_BASE_URL"],
        ),
    ];
    for (name, driver, proxied, endpoint, present, absent) in cases {
        let plan = plan_turn(&TurnRequest {
            proxied,
            endpoint,
            ..request(driver, &mcp, &creds, None, None)
        })
        .unwrap();
        for (key, value) in present {
            assert_eq!(
                plan.env.get(key).map(String::as_str),
                Some(value),
                "{name}: {key}"
            );
        }
        for key in absent {
            assert!(!plan.env.contains_key(key), "{name}: {key} must be absent");
        }
    }
    assert_eq!(
        proxy_env().len(),
        proxy_keys.len(),
        "proxy_env is exactly these keys"
    );
}

#[test]
fn pi_states_its_model_tools_and_prompts_and_discovers_nothing() {
    let mcp = McpAttachment::confined();
    let creds = credentials();
    let plan = plan_turn(&request(
        DriverId::Pi,
        &mcp,
        &creds,
        Some(b"# Brief\nUse plain HTML.\n"),
        Some("01a23c28-4509-718b-a52a-005e5c4b4409"),
    ))
    .unwrap();
    let brief_path = format!("{STATED}/pi/brief.md");
    let sessions = format!("{STATE}/pi-sessions");
    assert_eq!(
        plan.argv,
        strings(&[
            "/usr/local/bin/agent",
            "--mode",
            "json",
            "--print",
            "--provider",
            "atelier",
            "--model",
            "coder-7b",
            "--tools",
            "read,write,edit,grep,find,ls",
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-themes",
            "--no-context-files",
            "--system-prompt",
            PI_SYSTEM_PROMPT,
            "--append-system-prompt",
            &brief_path,
            "--session-dir",
            &sessions,
            "--session",
            "01a23c28-4509-718b-a52a-005e5c4b4409",
        ])
    );
    assert_eq!(plan.stdin.as_deref(), Some("Make a page"));
    assert_eq!(plan.env["PI_CODING_AGENT_DIR"], format!("{STATED}/pi"));
    assert!(
        plan.files.is_empty(),
        "pi writes nothing into the workspace"
    );
    let stated: BTreeMap<String, String> = plan
        .stated
        .iter()
        .map(|f| {
            assert_eq!(f.mode, 0o640);
            (
                f.path.to_string_lossy().into_owned(),
                String::from_utf8(f.contents.clone()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        stated.keys().collect::<Vec<_>>(),
        ["pi/brief.md", "pi/models.json", "pi/settings.json"]
    );
    assert_eq!(stated["pi/brief.md"], "# Brief\nUse plain HTML.\n");
    let models: Value = serde_json::from_str(&stated["pi/models.json"]).unwrap();
    assert_eq!(
        models,
        json!({"providers": {"atelier": {
            "baseUrl": "https://llm.example.org/v1",
            "api": "openai-completions",
            "apiKey": "OPENAI_API_KEY",
            "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
            "models": [{"id": "coder-7b"}],
        }}})
    );
    let settings: Value = serde_json::from_str(&stated["pi/settings.json"]).unwrap();
    assert_eq!(settings["enableInstallTelemetry"], false);

    // No brief: the appended prompt is stated empty, so no `.pi/APPEND_SYSTEM.md` is read;
    // no key: the models file carries a literal, never the name of a variable pi lacks.
    let none = DriverCredentials::default();
    let bare = plan_turn(&request(DriverId::Pi, &mcp, &none, None, None)).unwrap();
    let at = bare
        .argv
        .iter()
        .position(|a| a == "--append-system-prompt")
        .unwrap();
    assert_eq!(bare.argv[at + 1], "");
    assert!(!bare.argv.contains(&"--session".to_owned()));
    assert_eq!(bare.stated.len(), 2);
    let models: Value = serde_json::from_slice(&bare.stated[0].contents).unwrap();
    assert_eq!(models["providers"]["atelier"]["apiKey"], "no-key");
}

/// pi has no `--`, and atelier-agent takes `-` alone as "read stdin": both get the prompt on
/// stdin, exactly, so nothing of it can be an option, a file to attach or that word.
#[test]
fn a_prompt_is_never_an_option_a_file_or_stdin() {
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    for driver in [DriverId::Pi, DriverId::Atelier] {
        for prompt in [
            "Make a page",
            "--version",
            "-p",
            "-",
            "--",
            "@/etc/passwd",
            "---",
            " -spaced",
            "3",
        ] {
            let plan = plan_turn(&TurnRequest {
                prompt,
                ..request(driver, &mcp, &creds, None, None)
            })
            .unwrap();
            assert_eq!(plan.stdin.as_deref(), Some(prompt), "{driver}: {prompt:?}");
            let after_options = match driver {
                // pi: no `--`, and no argument after its options.
                DriverId::Pi => 0,
                // atelier-agent: `--` then `-`, its stdin.
                _ => 2,
            };
            let n = plan.argv.len();
            assert!(
                driver == DriverId::Pi || plan.argv[n - 2..] == strings(&["--", "-"]),
                "{driver}: {:?}",
                plan.argv
            );
            assert!(
                !plan.argv[..n - after_options]
                    .iter()
                    .any(|arg| arg.trim_start() == prompt.trim_start()),
                "{driver}: {prompt:?} is on the argv: {:?}",
                plan.argv
            );
        }
    }
}

#[test]
fn atelier_states_its_provider_model_and_state_and_nothing_else() {
    let mcp = McpAttachment::confined();
    let creds = credentials();
    let token = "5d1f0c2b7e440b6c5a382f8e4d6a9a51";
    // The OpenAI-compatible model, resumed; the brief is not passed (the agent reads AGENTS.md
    // itself), so one no argv could carry refuses nothing.
    let plan = plan_turn(&request(
        DriverId::Atelier,
        &mcp,
        &creds,
        Some(b"# Brief\0with a NUL"),
        Some(token),
    ))
    .unwrap();
    assert_eq!(
        plan.argv,
        strings(&[
            "/usr/local/bin/agent",
            "--provider",
            "openai-compatible",
            "--model",
            "coder-7b",
            "--base-url",
            "https://llm.example.org/v1",
            "--max-turns",
            "50",
            "--state-dir",
            STATE,
            "--mcp-url",
            "http://127.0.0.1:3129/mcp",
            "--mcp-name",
            "dedalo_publication",
            "--resume",
            token,
            "--",
            "-",
        ])
    );
    assert_eq!(plan.stdin.as_deref(), Some("Make a page"));
    assert!(
        plan.files.is_empty(),
        "nothing is written into the workspace"
    );
    assert!(
        plan.stated.is_empty(),
        "nothing is stated: it reads no configuration"
    );

    // An Anthropic model wins over the OpenAI-compatible one kept for a switch; its base URL
    // is the declared gateway, else the agent's own default (Anthropic's API).
    type Case = (&'static str, ModelEndpoint, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "anthropic through a gateway",
            ModelEndpoint {
                anthropic_model: Some("claude-sonnet-4-5".into()),
                anthropic_base_url: Some("https://gateway.example.org/anthropic".into()),
                ..ENDPOINT.clone()
            },
            vec![
                "--provider",
                "anthropic",
                "--model",
                "claude-sonnet-4-5",
                "--base-url",
                "https://gateway.example.org/anthropic",
            ],
        ),
        (
            "anthropic's own API",
            ModelEndpoint {
                anthropic_model: Some("claude-sonnet-4-5".into()),
                ..ModelEndpoint::default()
            },
            vec!["--provider", "anthropic", "--model", "claude-sonnet-4-5"],
        ),
        (
            "an anthropic gateway without an anthropic model is Claude Code's only",
            ModelEndpoint {
                anthropic_base_url: Some("https://gateway.example.org/anthropic".into()),
                ..ENDPOINT.clone()
            },
            vec![
                "--provider",
                "openai-compatible",
                "--model",
                "coder-7b",
                "--base-url",
                "https://llm.example.org/v1",
            ],
        ),
    ];
    for (name, endpoint, head) in cases {
        let plan = plan_turn(&TurnRequest {
            endpoint: &endpoint,
            ..request(DriverId::Atelier, &mcp, &creds, None, None)
        })
        .unwrap();
        let mut want = vec!["/usr/local/bin/agent"];
        want.extend(head);
        want.extend([
            "--max-turns",
            "50",
            "--state-dir",
            STATE,
            "--mcp-url",
            CONFINED_MCP_URL,
            "--mcp-name",
            MCP_SERVER_NAME,
            "--",
            "-",
        ]);
        assert_eq!(plan.argv, strings(&want), "{name}");
        assert_eq!(
            plan.env.keys().map(String::as_str).collect::<Vec<_>>(),
            ["AGENT_API_KEY", "PATH"],
            "{name}"
        );
    }
}

/// atelier-agent reaches its MCP server directly and sends it no header: the relay's loopback
/// port under confinement, the Publication API itself under `none` when it needs no key, and
/// no server when it does (the key never reaches the agent, so every request would fail).
#[test]
fn atelier_is_offered_the_mcp_server_it_can_reach_without_a_key() {
    let creds = DriverCredentials::default();
    let mcp_flags = |mcp: &McpAttachment| -> Vec<String> {
        let plan = plan_turn(&request(DriverId::Atelier, mcp, &creds, None, None)).unwrap();
        let mut flags = Vec::new();
        for (at, arg) in plan.argv.iter().enumerate() {
            if arg == "--mcp-url" || arg == "--mcp-name" {
                flags.extend([arg.clone(), plan.argv[at + 1].clone()]);
            }
        }
        let everything = format!("{:?}{:?}", plan.argv, plan.env.values().collect::<Vec<_>>());
        assert!(
            !everything.contains("pub-key"),
            "the Publication API key never reaches the agent"
        );
        flags
    };
    let cases = [
        (
            "confined: the gate's relay",
            McpAttachment::confined(),
            strings(&[
                "--mcp-url",
                "http://127.0.0.1:3129/mcp",
                "--mcp-name",
                "dedalo_publication",
            ]),
        ),
        (
            "unconfined, no key: the API itself",
            McpAttachment::unconfined("http://127.0.0.1:3100/api", None),
            strings(&[
                "--mcp-url",
                "http://127.0.0.1:3100/api/mcp",
                "--mcp-name",
                "dedalo_publication",
            ]),
        ),
        (
            "unconfined with a key: none",
            McpAttachment::unconfined("https://api.example.org/v2", Some("pub-key")),
            Vec::new(),
        ),
    ];
    for (name, mcp, want) in cases {
        assert_eq!(mcp_flags(&mcp), want, "{name}");
    }
}

#[test]
fn pi_env_takes_only_provider_credentials_a_run_may_be_given() {
    let cases = [
        ("a provider key", "OPENAI_API_KEY", true),
        ("a cloud secret", "AWS_SECRET_ACCESS_KEY", true),
        ("pi's own", "PI_API_KEY", false),
        ("a name the shim keeps", "ATELIER_X_API_KEY", false),
        ("the original's prefix", "DEDALO_X_API_KEY", false),
        ("not a credential", "NODE_OPTIONS", false),
    ];
    for (name, key, accepted) in cases {
        let want = if accepted {
            Ok(())
        } else {
            Err(PlanError::PiEnvKey(key.to_owned()))
        };
        assert_eq!(
            validate_pi_env(&[(key.to_owned(), "v".to_owned())]),
            want,
            "{name}"
        );
    }
}

/// A confined turn of every driver holds no provider credential: none of the canaries the
/// daemon was given is in its environment, argv, stdin or any file written for it; its model
/// is the turn door's relay; only the CLIs that insist on a key get the placeholder. An
/// unconfined (development) turn still gets its own driver's key.
#[test]
fn a_confined_turn_holds_no_provider_key_and_reaches_its_model_through_the_relay() {
    let mcp = McpAttachment::confined();
    let creds = credentials();
    let canaries = [
        "sk-ant-canary",
        "sk-openai-canary",
        "auth-canary",
        "pi-canary",
        "atelier-canary",
    ];
    let both = ENDPOINT.clone();
    let anthropic_atelier = ModelEndpoint {
        anthropic_model: Some("claude-sonnet-4-5".into()),
        ..ENDPOINT.clone()
    };
    let cases = [
        (
            "claude code",
            DriverId::ClaudeCode,
            &both,
            "http://127.0.0.1:3129/model/anthropic",
        ),
        (
            "opencode",
            DriverId::Opencode,
            &both,
            "http://127.0.0.1:3129/model/openai/v1",
        ),
        (
            "pi",
            DriverId::Pi,
            &both,
            "http://127.0.0.1:3129/model/openai/v1",
        ),
        (
            "atelier, openai",
            DriverId::Atelier,
            &both,
            "http://127.0.0.1:3129/model/openai/v1",
        ),
        (
            "atelier, anthropic",
            DriverId::Atelier,
            &anthropic_atelier,
            "http://127.0.0.1:3129/model/anthropic",
        ),
    ];
    for (name, driver, endpoint, relay) in cases {
        let plan = plan_turn(&TurnRequest {
            proxied: true,
            endpoint,
            ..request(driver, &mcp, &creds, Some(b"# Brief"), None)
        })
        .unwrap();
        let mut seen: Vec<String> = plan.argv.clone();
        seen.extend(plan.env.iter().map(|(k, v)| format!("{k}={v}")));
        seen.extend(plan.stdin.clone());
        for file in plan.files.iter().chain(&plan.stated) {
            seen.push(String::from_utf8_lossy(&file.contents).into_owned());
        }
        let everything = seen.join("\n");
        for canary in canaries {
            assert!(
                !everything.contains(canary),
                "{name}: {canary} reached the turn"
            );
        }
        assert!(everything.contains(relay), "{name}: its model is {relay}");
        assert!(
            !everything.contains("llm.example.org") && !everything.contains("api.anthropic.com"),
            "{name}: no upstream is named to the agent"
        );
        match driver {
            DriverId::ClaudeCode | DriverId::Atelier => {
                let key = match driver {
                    DriverId::ClaudeCode => "ANTHROPIC_API_KEY",
                    _ => ATELIER_API_KEY_ENV,
                };
                assert_eq!(
                    plan.env.get(key).map(String::as_str),
                    Some(RELAYED_KEY_PLACEHOLDER),
                    "{name}: the CLI insists on a key"
                );
            }
            DriverId::Opencode | DriverId::Pi => assert!(
                !everything.contains(RELAYED_KEY_PLACEHOLDER),
                "{name}: no key at all"
            ),
        }
    }
    let unconfined = plan_turn(&request(DriverId::ClaudeCode, &mcp, &creds, None, None)).unwrap();
    assert_eq!(unconfined.env["ANTHROPIC_API_KEY"], "sk-ant-canary");
}
