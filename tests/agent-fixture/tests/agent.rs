//! The test agent run as a real process, its stdout read by the real Claude Code parser: each
//! directive gives the events and file effects the end-to-end tests rely on.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::{Command, Output};

use atelier_agents::{line_parser, AgentEvent, DriverId, LineSplitter};

fn agent(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_atelier-test-agent"))
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SHOWN", "yes")
        .output()
        .unwrap()
}

fn turn(cwd: &Path, prompt: &str, resume: Option<&str>) -> (Output, Vec<AgentEvent>) {
    let mut args = vec![
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--max-turns",
        "50",
        "--setting-sources",
        "",
    ];
    if let Some(token) = resume {
        args.extend(["--resume", token]);
    }
    args.extend(["--", prompt]);
    let out = agent(cwd, &args);
    let mut splitter = LineSplitter::new(1 << 20);
    let mut parser = line_parser(DriverId::ClaudeCode);
    let mut events = Vec::new();
    for line in splitter.push(&out.stdout) {
        events.extend(parser.parse_line(&line));
    }
    (out, events)
}

#[test]
fn version_and_help_satisfy_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let version = agent(dir.path(), &["--version"]);
    assert_eq!(
        atelier_agents::judge_version(
            DriverId::ClaudeCode,
            &String::from_utf8_lossy(&version.stdout)
        )
        .unwrap(),
        "2.1.4"
    );
    let help = agent(dir.path(), &["--help"]);
    assert_eq!(
        atelier_agents::judge_help(DriverId::ClaudeCode, &String::from_utf8_lossy(&help.stdout)),
        Ok(())
    );
}

#[test]
fn directives_give_events_and_file_effects() {
    let dir = tempfile::tempdir().unwrap();
    let (out, events) = turn(
        dir.path(),
        "Hello there\nwrite site/index.html <h1>Hi</h1>\nappend site/index.html <p>more</p>\nenv SHOWN\nenv HOME\nspam 2\nstderr a warning",
        None,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("site/index.html")).unwrap(),
        "<h1>Hi</h1>\n<p>more</p>\n"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "a warning\n");
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        ["Hello there", "SHOWN=yes", "HOME unset", "spam 0", "spam 1"]
    );
    let tools: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Tool { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(tools, ["Write", "Edit"]);
    let AgentEvent::Result {
        resume_token: Some(token),
        ..
    } = events.last().unwrap()
    else {
        panic!("{events:?}")
    };
    // A resumed turn keeps the session id.
    let (_, again) = turn(dir.path(), "more", Some(token));
    assert!(
        matches!(again.last(), Some(AgentEvent::Result { resume_token: Some(t), .. }) if t == token)
    );
    assert!(
        std::fs::read_to_string(dir.path().join("notes.md"))
            .unwrap()
            .contains("more"),
        "no directive: notes.md"
    );
}

#[test]
fn exits_signals_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let (out, events) = turn(dir.path(), "stderr boom\nexit 3", None);
    assert_eq!(out.status.code(), Some(3));
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::Result { .. })));
    let (out, _) = turn(dir.path(), "kill-self", None);
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(out.status.signal(), Some(9));
    let (out, events) = turn(dir.path(), "raw {broken\nraw []", None);
    assert!(out.status.success());
    assert_eq!(events.len(), 1, "junk lines map to nothing: {events:?}");
    let unknown = agent(
        dir.path(),
        &[
            "-p",
            "--output-format",
            "stream-json",
            "--dangerously-skip-permissions",
            "--",
            "x",
        ],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown option"));
    let text_format = agent(dir.path(), &["-p", "--output-format", "text", "--", "x"]);
    assert_eq!(text_format.status.code(), Some(1));
}
