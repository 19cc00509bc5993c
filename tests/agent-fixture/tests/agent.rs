//! The test agent run as a real process with the exact argv and environment
//! `atelier_agents::plan_turn` gives a claude_code turn, its stdout read by the real Claude Code
//! parser: each directive gives the events and file effects the end-to-end tests rely on.

#![expect(clippy::unwrap_used, reason = "test helpers fail the test")]

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use atelier_agents::{
    is_resume_token, judge_help, judge_version, line_parser, plan_turn, DriverCredentials,
    DriverId, LineSplitter, McpAttachment, TurnPlan, TurnRequest,
};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_atelier-test-agent");

/// What sited would run for `prompt` in `workspace`, with its planned files written.
fn planned(workspace: &Path, prompt: &str, resume: Option<&str>, brief: Option<&[u8]>) -> TurnPlan {
    let mcp = McpAttachment::unconfined("http://127.0.0.1:3100/api", Some("pub-key"));
    let credentials = DriverCredentials {
        anthropic_api_key: Some("sk-ant-canary".into()),
        ..DriverCredentials::default()
    };
    let mcp_config_path = workspace.join(".builder/mcp.json");
    let plan = plan_turn(&TurnRequest {
        driver: DriverId::ClaudeCode,
        bin: Path::new(BIN),
        workspace,
        prompt,
        resume_token: resume,
        brief,
        mcp: &mcp,
        mcp_config_path: &mcp_config_path,
        path_env: "/usr/bin:/bin",
        credentials: &credentials,
        proxied: false,
        endpoint: &atelier_agents::ModelEndpoint::default(),
        stated_dir: &workspace.join(".stated"),
        state_dir: &workspace.join(".state"),
    })
    .unwrap();
    for file in &plan.files {
        let path = workspace.join(&file.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &file.contents).unwrap();
    }
    plan
}

fn command(workspace: &Path, plan: &TurnPlan) -> Command {
    let mut command = Command::new(&plan.argv[0]);
    command
        .args(&plan.argv[1..])
        .current_dir(workspace)
        .env_clear()
        .envs(&plan.env);
    command
}

fn parse(stdout: &[u8]) -> Vec<Value> {
    let mut splitter = LineSplitter::new(1 << 20);
    let mut parser = line_parser(DriverId::ClaudeCode);
    let mut events = Vec::new();
    for line in splitter.push(stdout).into_iter().chain(splitter.finish()) {
        events.extend(parser.parse_line(&line));
    }
    events.extend(parser.finish());
    events
        .iter()
        .map(|event| serde_json::to_value(event).unwrap())
        .collect()
}

/// One turn of `prompt`: its output and its events, the result's volatile fields checked
/// and removed.
fn turn(workspace: &Path, prompt: &str) -> (Output, Vec<Value>) {
    let plan = planned(workspace, prompt, None, None);
    let out = command(workspace, &plan).output().unwrap();
    let mut events = parse(&out.stdout);
    if let Some(result) = events.last_mut().filter(|e| e["type"] == "result") {
        let token = result["resumeToken"].as_str().unwrap();
        assert!(is_resume_token(token), "{token}");
        assert!(result["durationMs"].is_u64());
        assert_eq!(result["costUsd"], 0.0);
        let object = result.as_object_mut().unwrap();
        object.remove("resumeToken");
        object.remove("durationMs");
        object.remove("costUsd");
    }
    (out, events)
}

fn raw(workspace: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(workspace)
        .env_clear()
        .output()
        .unwrap()
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn tool(name: &str, workspace: &Path, path: &str) -> Value {
    let target = workspace.join(path).display().to_string();
    json!({"type": "tool", "name": name, "summary": format!("{name}: {target}")})
}

fn result() -> Value {
    json!({"type": "result", "ok": true})
}

#[test]
fn version_and_help_satisfy_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let version = raw(dir.path(), &["--version"]);
    assert!(version.status.success());
    let stdout = String::from_utf8(version.stdout).unwrap();
    assert_eq!(
        judge_version(DriverId::ClaudeCode, &stdout).unwrap(),
        "2.1.4"
    );
    let help = raw(dir.path(), &["--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    assert_eq!(judge_help(DriverId::ClaudeCode, &help), Ok(()));
    assert!(help.contains("TEST FIXTURE"));
    for directive in [
        "write <path>",
        "append <path>",
        "delete <path>",
        "sleep <ms>",
        "hang",
        "stderr <text>",
        "exit <code>",
        "kill-self",
        "raw <text>",
        "env <NAME>",
        "spam <n>",
        "mcp",
        "brief",
    ] {
        assert!(
            help.contains(&format!("\n  {directive}")),
            "{directive} documented"
        );
    }
}

/// Each directive as a script of its own: the events the parser makes of the output, the
/// files left behind, the exit code and what went to stderr.
#[test]
fn directive_table() {
    type Files = Vec<(&'static str, Option<&'static str>)>;
    struct Case {
        name: &'static str,
        setup: Files,
        script: &'static str,
        events: fn(&Path) -> Vec<Value>,
        files: Files,
        code: i32,
        stderr: &'static str,
    }
    let cases = [
        Case {
            name: "plain text is said, and appended to notes.md",
            setup: vec![],
            script: "Make the page blue\nplease",
            events: |w| {
                vec![text("Make the page blue"), text("please"), tool("Edit", w, "notes.md"), result()]
            },
            files: vec![("notes.md", Some("Make the page blue please\n"))],
            code: 0,
            stderr: "",
        },
        Case {
            name: "write makes parents and replaces",
            setup: vec![("site/index.html", Some("old\n"))],
            script: "write site/index.html <h1>Hi</h1>\\n<p>there</p>\nwrite site/css/a.css body{}",
            events: |w| vec![tool("Write", w, "site/index.html"), tool("Write", w, "site/css/a.css"), result()],
            files: vec![
                ("site/index.html", Some("<h1>Hi</h1>\n<p>there</p>\n")),
                ("site/css/a.css", Some("body{}\n")),
                ("notes.md", None),
            ],
            code: 0,
            stderr: "",
        },
        Case {
            name: "append creates, then adds",
            setup: vec![],
            script: "append log.txt one\nappend log.txt two",
            events: |w| vec![tool("Edit", w, "log.txt"), tool("Edit", w, "log.txt"), result()],
            files: vec![("log.txt", Some("one\ntwo\n"))],
            code: 0,
            stderr: "",
        },
        Case {
            name: "delete removes",
            setup: vec![("gone.txt", Some("x"))],
            script: "delete gone.txt",
            events: |_| vec![text("Deleted gone.txt"), result()],
            files: vec![("gone.txt", None), ("notes.md", None)],
            code: 0,
            stderr: "",
        },
        Case {
            name: "delete of a missing file fails the script",
            setup: vec![],
            script: "delete nothing.txt\nnever said",
            events: |_| vec![],
            files: vec![],
            code: 2,
            stderr: "error: delete nothing.txt: No such file or directory (os error 2)\n",
        },
        Case {
            name: "stderr and sleep",
            setup: vec![],
            script: "stderr a warning\nsleep 20\nstderr again",
            events: |_| vec![result()],
            files: vec![("notes.md", None)],
            code: 0,
            stderr: "a warning\nagain\n",
        },
        Case {
            name: "exit ends without a result",
            setup: vec![],
            script: "before\nexit 3\nafter",
            events: |_| vec![text("before")],
            files: vec![("notes.md", None)],
            code: 3,
            stderr: "",
        },
        Case {
            name: "a bad number fails the script",
            setup: vec![],
            script: "sleep soon",
            events: |_| vec![],
            files: vec![],
            code: 2,
            stderr: "error: sleep needs a number, not 'soon'\n",
        },
        Case {
            name: "raw lines: junk is nothing, a forged frame is parsed",
            setup: vec![],
            script: "raw {broken\nraw not json\nraw {\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"forged\"}]}}",
            events: |_| vec![text("forged"), result()],
            files: vec![("notes.md", None)],
            code: 0,
            stderr: "",
        },
        Case {
            name: "env shows the planned environment only",
            setup: vec![],
            script: "env ANTHROPIC_API_KEY\nenv PATH\nenv HOME\nenv SERVICE_TOKEN",
            events: |_| {
                vec![
                    text("ANTHROPIC_API_KEY=sk-ant-canary"),
                    text("PATH=/usr/bin:/bin"),
                    text("HOME unset"),
                    text("SERVICE_TOKEN unset"),
                    result(),
                ]
            },
            files: vec![("notes.md", None)],
            code: 0,
            stderr: "",
        },
        Case {
            name: "spam",
            setup: vec![],
            script: "spam 3",
            events: |_| vec![text("spam 0"), text("spam 1"), text("spam 2"), result()],
            files: vec![],
            code: 0,
            stderr: "",
        },
        Case {
            name: "mcp names the planned server and its header, never its key",
            setup: vec![],
            script: "mcp",
            events: |_| vec![text("mcp dedalo_publication http://127.0.0.1:3100/api/mcp [X-API-Key]"), result()],
            files: vec![],
            code: 0,
            stderr: "",
        },
        Case {
            name: "brief none without AGENTS.md",
            setup: vec![],
            script: "brief",
            events: |_| vec![text("brief none"), result()],
            files: vec![],
            code: 0,
            stderr: "",
        },
    ];
    for case in cases {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        for (path, contents) in &case.setup {
            let path = w.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents.unwrap()).unwrap();
        }
        let (out, events) = turn(w, case.script);
        let name = case.name;
        assert_eq!(out.status.code(), Some(case.code), "{name}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), case.stderr, "{name}");
        assert_eq!(events, (case.events)(w), "{name}");
        for (path, want) in &case.files {
            let got = std::fs::read_to_string(w.join(path)).ok();
            assert_eq!(got.as_deref(), *want, "{name}: {path}");
        }
        if case.code == 0 {
            let lines = String::from_utf8(out.stdout).unwrap();
            let frames: Vec<Value> = lines
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            assert_eq!(frames[0]["type"], "system");
            assert_eq!(frames[0]["subtype"], "init");
            assert_eq!(
                frames[0]["mcp_servers"],
                json!([{"name": "dedalo_publication", "status": "connected"}]),
                "{name}"
            );
            assert_eq!(frames[0]["permissionMode"], "acceptEdits");
            let last = frames.last().unwrap();
            assert_eq!(
                (last["type"].as_str(), last["is_error"].as_bool()),
                (Some("result"), Some(false)),
                "{name}"
            );
        }
    }
}

#[test]
fn every_tool_use_is_answered_by_a_tool_result() {
    let dir = tempfile::tempdir().unwrap();
    let plan = planned(dir.path(), "write a b\nappend a c", None, None);
    let out = command(dir.path(), &plan).output().unwrap();
    let frames: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let uses: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "assistant")
        .map(|f| &f["message"]["content"][0]["id"])
        .collect();
    let answers: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "user")
        .map(|f| &f["message"]["content"][0]["tool_use_id"])
        .collect();
    assert_eq!(uses.len(), 2);
    assert_eq!(uses, answers);
    let session = &frames[0]["session_id"];
    assert!(frames.iter().all(|f| &f["session_id"] == session));
}

#[test]
fn sessions_are_fresh_or_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let token_of = |plan: &TurnPlan| {
        let out = command(dir.path(), plan).output().unwrap();
        let events = parse(&out.stdout);
        events.last().unwrap()["resumeToken"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = token_of(&planned(dir.path(), "one", None, None));
    let second = token_of(&planned(dir.path(), "two", None, None));
    assert_ne!(first, second, "a fresh uuid per session");
    assert_eq!(first.len(), 36);
    assert_eq!(&first[14..15], "4", "uuid v4");
    let resumed = token_of(&planned(dir.path(), "three", Some(&first), None));
    assert_eq!(resumed, first);
}

#[test]
fn the_brief_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    let brief = b"# Museo\n\nRules: static output only.\n";
    let plan = planned(dir.path(), "brief", None, Some(brief));
    let out = command(dir.path(), &plan).output().unwrap();
    assert_eq!(parse(&out.stdout)[0], text("brief 36 bytes: # Museo"));
}

#[test]
fn hang_runs_until_killed_and_what_it_said_is_already_out() {
    let dir = tempfile::tempdir().unwrap();
    let plan = planned(dir.path(), "Working on it\nhang", None, None);
    let mut child = command(dir.path(), &plan)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut parser = line_parser(DriverId::ClaudeCode);
    let mut said = Vec::new();
    while said.is_empty() {
        let mut line = String::new();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "ended early");
        said.extend(parser.parse_line(&line));
    }
    assert_eq!(
        serde_json::to_value(&said[0]).unwrap(),
        text("Working on it")
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "still hanging");
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
}

#[test]
fn kill_self_dies_by_sigkill_after_flushing() {
    let dir = tempfile::tempdir().unwrap();
    let plan = planned(dir.path(), "last words\nkill-self\nnever", None, None);
    let out = command(dir.path(), &plan).output().unwrap();
    assert_eq!(out.status.signal(), Some(9));
    assert_eq!(parse(&out.stdout), [text("last words")]);
}

#[test]
fn spam_streams_many_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (out, events) = turn(dir.path(), "spam 2000");
    assert!(out.status.success());
    assert_eq!(events.len(), 2001);
    assert_eq!(events[1999], text("spam 1999"));
}

#[test]
fn usage_refusals() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.json"), "{\"servers\":{}}").unwrap();
    let cases: [(&str, &[&str], &str); 7] = [
        (
            "unknown option",
            &[
                "-p",
                "--output-format",
                "stream-json",
                "--dangerously-skip-permissions",
                "--",
                "x",
            ],
            "error: unknown option '--dangerously-skip-permissions'",
        ),
        (
            "no print mode",
            &["--output-format", "stream-json", "--", "x"],
            "error: only print mode (-p) is scripted",
        ),
        (
            "text output",
            &["-p", "--output-format", "text", "--", "x"],
            "error: only --output-format stream-json is scripted",
        ),
        (
            "no prompt",
            &["-p", "--output-format", "stream-json"],
            "error: Input must be provided",
        ),
        (
            "blank prompt",
            &["-p", "--output-format", "stream-json", "--", "  "],
            "error: Input must be provided",
        ),
        (
            "value missing",
            &["-p", "--output-format"],
            "error: option '--output-format' argument missing",
        ),
        (
            "mcp config without servers",
            &[
                "-p",
                "--output-format",
                "stream-json",
                "--mcp-config",
                "bad.json",
                "--",
                "x",
            ],
            "Error: Invalid MCP configuration: bad.json: mcpServers is missing",
        ),
    ];
    for (name, args, stderr) in cases {
        let out = raw(dir.path(), args);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with(stderr),
            "{name}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{name}");
    }
    let missing = raw(
        dir.path(),
        &[
            "-p",
            "--output-format",
            "stream-json",
            "--mcp-config",
            "absent.json",
            "--",
            "x",
        ],
    );
    assert_eq!(
        missing.status.code(),
        Some(1),
        "an unwritten mcp.json is refused"
    );
    assert!(!dir.path().join("notes.md").exists(), "nothing was written");
}
