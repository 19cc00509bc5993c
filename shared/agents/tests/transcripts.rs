//! Recorded-format transcripts through the real splitter and parsers: every chunking of a
//! transcript gives exactly its golden events (`tests/fixtures/README.md`); and opencode's
//! canary probe run against the real opencode (`scripts/agents install`).

#![expect(clippy::unwrap_used, reason = "test helpers fail the test")]

use std::path::{Path, PathBuf};

use atelier_agents::{line_parser, DriverId, LineSplitter, SessionEvent};
use serde_json::Value;

const MAX_LINE: usize = 1 << 20;

fn events_of(driver: DriverId, bytes: &[u8], chunk: usize) -> (Vec<SessionEvent>, u64) {
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut parser = line_parser(driver);
    let mut events = Vec::new();
    for piece in bytes.chunks(chunk) {
        for line in splitter.push(piece) {
            events.extend(parser.parse_line(&line));
        }
    }
    if let Some(line) = splitter.finish() {
        events.extend(parser.parse_line(&line));
    }
    events.extend(parser.finish());
    (events, splitter.dropped())
}

fn transcripts(driver: DriverId) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(driver.as_str());
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    found.sort();
    found
}

fn check(driver: DriverId, at_least: usize) {
    let found = transcripts(driver);
    assert!(found.len() >= at_least, "{found:?}");
    for transcript in found {
        let bytes = std::fs::read(&transcript).unwrap();
        let golden = transcript.with_extension("events.json");
        let want: Value = serde_json::from_slice(&std::fs::read(&golden).unwrap()).unwrap();
        for chunk in [bytes.len().max(1), 1, 2, 7, 64, 4096] {
            let (events, dropped) = events_of(driver, &bytes, chunk);
            let got = Value::Array(
                events
                    .iter()
                    .map(|event| serde_json::to_value(event).unwrap())
                    .collect(),
            );
            assert_eq!(got, want, "{} in chunks of {chunk}", transcript.display());
            assert_eq!(dropped, 0);
        }
    }
}

#[test]
fn claude_code_transcripts() {
    check(DriverId::ClaudeCode, 4);
}

#[test]
fn opencode_transcripts() {
    check(DriverId::Opencode, 3);
}

#[test]
fn pi_transcripts() {
    check(DriverId::Pi, 2);
}

#[test]
fn atelier_transcripts() {
    check(DriverId::Atelier, 4);
}

/// A turn the agent failed names its failure and gives no result; a good one gives its result
/// with its lines, so nothing waits for the end of the run. pi exits 0 after a turn whose model
/// call failed, so its parser's failure is what ends that turn with an error instead of a
/// made-up success; atelier-agent writes an `error` line, then exits 1.
#[test]
fn a_failed_turn_is_a_failure_not_a_result() {
    let cases = [
        (DriverId::Pi, "provider_error", Some("Connection error."), 0),
        (DriverId::Pi, "site_edit", None, 1),
        (
            DriverId::Atelier,
            "provider_error",
            Some("Custom Provider request failed: error sending request"),
            0,
        ),
        (DriverId::Atelier, "lab_turn", None, 1),
        (DriverId::Atelier, "site_edit", None, 1),
        (DriverId::Atelier, "max_turns", None, 1),
    ];
    for (driver, name, failure, results) in cases {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(driver.as_str())
            .join(format!("{name}.jsonl"));
        let bytes = std::fs::read(path).unwrap();
        let mut splitter = LineSplitter::new(MAX_LINE);
        let mut parser = line_parser(driver);
        let seen = splitter
            .push(&bytes)
            .iter()
            .flat_map(|line| parser.parse_line(line))
            .filter(|e| matches!(e, SessionEvent::Result { .. }))
            .count();
        assert_eq!(seen, results, "{driver} {name}");
        assert_eq!(parser.failure(), failure, "{driver} {name}");
        assert!(parser.finish().is_empty(), "{driver} {name}");
    }
}

/// A run cut short after its first line (stopped, timed out, failed before its result) keeps
/// the session that line named, so the next message resumes it rather than starting afresh.
#[test]
fn a_run_cut_after_its_first_line_keeps_the_session_it_named() {
    let cases = [
        (
            DriverId::ClaudeCode,
            "api_error",
            "7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b",
        ),
        (
            DriverId::Opencode,
            "site_edit",
            "ses_494719016ffe85dkDMj0FPRbHK",
        ),
        (
            DriverId::Pi,
            "provider_error",
            "01a23c2b-2ba5-7788-8ad0-6101696bb17c",
        ),
        (
            DriverId::Atelier,
            "site_edit",
            "5d1f0c2b7e440b6c5a382f8e4d6a9a51",
        ),
    ];
    for (driver, name, session) in cases {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(driver.as_str())
            .join(format!("{name}.jsonl"));
        let text = std::fs::read_to_string(path).unwrap();
        let mut parser = line_parser(driver);
        assert_eq!(parser.kept_after_failure(), None, "{driver}: nothing yet");
        parser.parse_line(text.lines().next().unwrap());
        assert_eq!(
            parser.kept_after_failure(),
            Some(session),
            "{driver} {name}"
        );
    }
}

/// Without `finish` (a run that did not exit cleanly) an opencode run without a `done` line
/// reports no result: the daemon's own fault stands alone.
#[test]
fn an_opencode_result_needs_the_end_of_a_clean_run() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/opencode/no_done_line.jsonl");
    let bytes = std::fs::read(path).unwrap();
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut parser = line_parser(DriverId::Opencode);
    let events: Vec<SessionEvent> = splitter
        .push(&bytes)
        .iter()
        .flat_map(|line| parser.parse_line(line))
        .collect();
    assert!(!events
        .iter()
        .any(|e| matches!(e, SessionEvent::Result { .. })));
    assert_eq!(parser.finish().len(), 1);
    assert!(parser.finish().is_empty(), "one result per run");
    assert!(line_parser(DriverId::ClaudeCode).finish().is_empty());
}

/// Truncating a transcript anywhere never panics and never invents a result the truncated
/// text does not contain.
#[test]
fn every_prefix_of_a_transcript_parses() {
    for driver in [DriverId::ClaudeCode, DriverId::Opencode, DriverId::Atelier] {
        for transcript in transcripts(driver) {
            let bytes = std::fs::read(&transcript).unwrap();
            for cut in (0..bytes.len()).step_by(97) {
                let mut splitter = LineSplitter::new(MAX_LINE);
                let mut parser = line_parser(driver);
                let mut results = 0;
                for line in splitter
                    .push(&bytes[..cut])
                    .into_iter()
                    .chain(splitter.finish())
                {
                    results += parser
                        .parse_line(&line)
                        .iter()
                        .filter(|e| matches!(e, SessionEvent::Result { .. }))
                        .count();
                }
                assert!(results <= 1, "{}: {cut}", transcript.display());
            }
        }
    }
}

/// The real opencode that `scripts/agents install` put in its cache; a missing install fails.
fn real_opencode() -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/agents"))
        .args(["path", "opencode"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the real opencode is not installed; run: bash scripts/agents install"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Runs the canary probe of the real opencode as a turn door would, with `drop` taken out of
/// the turn's restriction, in a HOME shaped like the turn HOME.
fn run_canary_probe(drop: &[&str]) -> Result<(), atelier_agents::ProbeRefusal> {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join(".config");
    std::fs::create_dir_all(config.join("opencode")).unwrap();
    let state = home.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mut env = atelier_agents::probe_env(DriverId::Opencode, &state);
    for key in drop {
        env.remove(*key);
    }
    let tokens = std::array::from_fn(|i| format!("canary{i}x{}", std::process::id()));
    let probe = atelier_agents::CanaryProbe::new(tokens);
    let argv = probe.argv(&real_opencode(), &state.join("probe"));
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(&env)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", &config)
        .env("XDG_DATA_HOME", state.join("data"))
        .env("XDG_STATE_HOME", state.join("state"))
        .env("XDG_CACHE_HOME", state.join("cache"))
        .current_dir("/")
        .output()
        .unwrap();
    assert!(
        !state.join("probe").exists(),
        "the probe removes its scratch tree"
    );
    probe.judge(&String::from_utf8_lossy(&out.stdout))
}

/// Every source's canary surfaces in the control and none under a turn's restriction; with a
/// switch left out, the source it closes is named.
#[test]
fn the_real_opencode_passes_the_canary_probe_and_a_missing_switch_is_named() {
    use atelier_agents::canary::Source;
    use atelier_agents::ProbeRefusal;
    assert_eq!(run_canary_probe(&[]), Ok(()));
    for (switches, source) in [
        (
            &["OPENCODE_DISABLE_PROJECT_CONFIG"][..],
            Source::ProjectConfig,
        ),
        // Either switch closes the skill trees; without both they load.
        (
            &[
                "OPENCODE_DISABLE_CLAUDE_CODE",
                "OPENCODE_DISABLE_EXTERNAL_SKILLS",
            ][..],
            Source::ClaudeSkills,
        ),
    ] {
        assert_eq!(
            run_canary_probe(switches),
            Err(ProbeRefusal::CanarySurfaced { planted_in: source }),
            "{switches:?}"
        );
    }
}
