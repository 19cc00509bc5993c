use super::*;

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
        workspace: Path::new("/var/lib/atelier/m/sites/alpha"),
        prompt: "Make a page",
        resume_token: resume,
        brief,
        mcp,
        mcp_config_path: Path::new("/var/lib/atelier/m/sites/alpha/.builder/mcp.json"),
        path_env: "/usr/bin:/bin",
        credentials,
    }
}

fn credentials() -> DriverCredentials {
    DriverCredentials {
        anthropic_api_key: Some("sk-ant-canary".into()),
        opencode_env: vec![("OPENAI_API_KEY".into(), "sk-openai-canary".into())],
        pi_env: vec![("PI_TOKEN".into(), "pi-canary".into())],
    }
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
        Some("sess-1"),
    ))
    .unwrap();
    let want: Vec<String> = [
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
        r#"{"disableAllHooks":true,"enableAllProjectMcpServers":false}"#,
        "--strict-mcp-config",
        "--mcp-config",
        "/var/lib/atelier/m/sites/alpha/.builder/mcp.json",
        "--allowedTools",
        "Read,Write,Edit,Glob,Grep,TodoWrite,mcp__dedalo_publication",
        "--disallowedTools",
        "Bash,WebFetch,WebSearch",
        "--append-system-prompt",
        "# Brief",
        "--resume",
        "sess-1",
        "--",
        "Make a page",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(plan.argv, want);
    assert_eq!(
        plan.env,
        BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("ANTHROPIC_API_KEY".to_owned(), "sk-ant-canary".to_owned()),
        ])
    );
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.files[0].path, Path::new(".builder/mcp.json"));
    assert_eq!(plan.files[0].mode, 0o640);
    let config: Value = serde_json::from_slice(&plan.files[0].contents).unwrap();
    assert_eq!(
        config,
        json!({"mcpServers": {"dedalo_publication": {"type": "http", "url": "http://127.0.0.1:3129/mcp"}}})
    );
}

#[test]
fn unconfined_mcp_carries_the_key_only_when_configured() {
    let creds = DriverCredentials::default();
    let keyed = McpAttachment::unconfined("https://api.example.org/v2/", Some("pub-key"));
    let plan = plan_turn(&request(DriverId::ClaudeCode, &keyed, &creds, None, None)).unwrap();
    let config: Value = serde_json::from_slice(&plan.files[0].contents).unwrap();
    assert_eq!(
        config["mcpServers"]["dedalo_publication"],
        json!({"type": "http", "url": "https://api.example.org/v2/mcp", "headers": {"X-API-Key": "pub-key"}})
    );
    assert!(!plan.argv.contains(&"--append-system-prompt".to_owned()));
    assert!(!plan.argv.contains(&"--resume".to_owned()));
    assert_eq!(
        plan.env.keys().collect::<Vec<_>>(),
        ["PATH"],
        "no key configured"
    );
    let keyless = McpAttachment::unconfined("https://api.example.org/v2", Some(""));
    assert!(keyless.headers.is_empty());
    assert!(!format!("{keyed:?}").contains("pub-key"));
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
        Some("ses_1"),
    ))
    .unwrap();
    assert_eq!(
        plan.argv,
        [
            "/usr/local/bin/agent",
            "run",
            "--pure",
            "--format",
            "json",
            "--session",
            "ses_1",
            "--",
            "Make a page"
        ]
    );
    let config: Value = serde_json::from_str(&plan.env["OPENCODE_CONFIG_CONTENT"]).unwrap();
    assert_eq!(config["permission"]["bash"], "deny");
    assert_eq!(config["permission"]["edit"], "allow");
    for tool in [
        "webfetch",
        "websearch",
        "codesearch",
        "skill",
        "task",
        "external_directory",
    ] {
        assert_eq!(config["permission"][tool], "deny", "{tool}");
    }
    assert_eq!(config["mcp"]["dedalo_publication"]["type"], "remote");
    assert_eq!(config["instructions"], json!([OPENCODE_BRIEF_FILE]));
    assert_eq!(plan.files[0].path, Path::new(OPENCODE_BRIEF_FILE));
    assert_eq!(plan.env["OPENCODE_AUTH_CONTENT"], "{}");
    assert_eq!(plan.env["OPENAI_API_KEY"], "sk-openai-canary");
    assert_eq!(plan.env["OPENCODE_PURE"], "true");
    assert!(
        !plan.env.contains_key("ANTHROPIC_API_KEY"),
        "claude's key stays claude's"
    );
    assert!(!plan.env.contains_key("PI_TOKEN"));
    assert!(!plan.env.contains_key("HOME"));
}

#[test]
fn pi_and_bad_input_are_refused() {
    let mcp = McpAttachment::confined();
    let creds = DriverCredentials::default();
    assert_eq!(
        plan_turn(&request(DriverId::Pi, &mcp, &creds, None, None)),
        Err(PlanError::Unsupported(DriverId::Pi))
    );
    assert_eq!(
        plan_turn(&request(
            DriverId::ClaudeCode,
            &mcp,
            &creds,
            Some(b"a\0b"),
            None
        )),
        Err(PlanError::BriefHasNul)
    );
    let mut bad_prompt = request(DriverId::ClaudeCode, &mcp, &creds, None, None);
    bad_prompt.prompt = "x\0y";
    assert_eq!(plan_turn(&bad_prompt), Err(PlanError::PromptHasNul));
    let mut outside = request(DriverId::ClaudeCode, &mcp, &creds, None, None);
    outside.mcp_config_path = Path::new("/tmp/mcp.json");
    assert!(matches!(
        plan_turn(&outside),
        Err(PlanError::McpPathOutside(_))
    ));
}

#[test]
fn a_long_brief_is_cut_on_a_char_boundary_with_a_notice() {
    let brief = "é".repeat(MAX_BRIEF_BYTES);
    let cut = prepare_brief(brief.as_bytes()).unwrap();
    assert!(cut.len() <= MAX_BRIEF_BYTES);
    assert!(cut.ends_with(BRIEF_CUT_NOTICE));
    let short = prepare_brief(b"short").unwrap();
    assert_eq!(short, "short");
    let exact = "a".repeat(MAX_BRIEF_BYTES);
    assert_eq!(prepare_brief(exact.as_bytes()).unwrap(), exact);
    assert_eq!(prepare_brief(b"\xff ok").unwrap(), "\u{fffd} ok");
}

#[test]
fn opencode_env_allows_provider_credentials_only() {
    let pairs = |keys: &[&str]| -> Vec<(String, String)> {
        keys.iter()
            .map(|k| ((*k).to_owned(), "v".to_owned()))
            .collect()
    };
    let good = [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENCODE_API_KEY",
        "OPENCODE_AUTH_CONTENT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GITHUB_AUTH_TOKEN",
    ];
    assert_eq!(validate_opencode_env(&pairs(&good)), Ok(()));
    for bad in [
        "PATH",
        "HOME",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_PERMISSION",
        "OPENCODE_DISABLE_PROJECT_CONFIG",
        "_API_KEY",
        "LD_PRELOAD",
        "NODE_OPTIONS",
    ] {
        assert_eq!(
            validate_opencode_env(&pairs(&[bad])),
            Err(PlanError::OpencodeEnvKey(bad.to_owned())),
            "{bad}"
        );
    }
}

#[test]
fn debug_output_names_no_secret() {
    let creds = credentials();
    let shown = format!("{creds:?}");
    for secret in ["sk-ant-canary", "sk-openai-canary", "pi-canary"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    let mcp = McpAttachment::unconfined("https://a.example", Some("pub-key"));
    let plan = plan_turn(&request(DriverId::ClaudeCode, &mcp, &creds, None, None)).unwrap();
    assert!(!format!("{:?}", plan.files).contains("pub-key"));
}
