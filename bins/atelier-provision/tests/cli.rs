//! The command line's verbs and exit codes, run in process against a host root in a temp dir
//! (read-only verbs only: `apply` and `remove` act on the real host and refuse a root).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step must fail the test"
)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use atelier_provision::cli;
use atelier_provision::verbs::{self, Exit};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/examples/instance.json"
);

/// A host root with account files naming the groups the example needs (or not).
fn host(with_engine_group: bool) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
    std::fs::write(
        tmp.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n",
    )
    .unwrap();
    let mut groups = String::from("root:x:0:\nwww-data:x:33:\n");
    if with_engine_group {
        groups.push_str("dedalo-example:x:590:\n");
    }
    std::fs::write(tmp.path().join("etc/group"), groups).unwrap();
    std::fs::write(tmp.path().join("etc/shadow"), "root:*:20000:0:99999:7:::\n").unwrap();
    tmp
}

fn run(args: &[&str], root: Option<&Path>) -> (Exit, String, String) {
    let mut argv: Vec<OsString> = vec!["atelier-provision".into()];
    argv.extend(args.iter().map(OsString::from));
    if let Some(root) = root {
        argv.push("--root".into());
        argv.push(root.into());
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli::run(argv, &verbs::render_artifacts, &mut out, &mut err);
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&[], None).0, Exit::Usage);
    assert_eq!(
        run(&["frobnicate", "--declaration", EXAMPLE], None).0,
        Exit::Usage
    );
    assert_eq!(run(&["plan"], None).0, Exit::Usage, "no declaration");
    let tmp = host(true);
    let (exit, _, err) = run(&["apply", "--declaration", EXAMPLE], Some(tmp.path()));
    assert_eq!(exit, Exit::Usage);
    assert!(err.contains("--root is for read-only verbs"), "{err}");
    assert_eq!(
        run(&["remove", "--declaration", EXAMPLE], Some(tmp.path())).0,
        Exit::Usage
    );
}

#[test]
fn an_unreadable_or_bad_declaration_is_refused() {
    let tmp = host(true);
    let missing = tmp.path().join("absent.json");
    let (exit, _, err) = run(
        &["plan", "--declaration", missing.to_str().unwrap()],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Refused, "{err}");
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"instance":"x"}"#).unwrap();
    assert_eq!(
        run(
            &["plan", "--declaration", bad.to_str().unwrap()],
            Some(tmp.path())
        )
        .0,
        Exit::Refused
    );
}

#[test]
fn plan_prints_the_actions_and_json_names_them() {
    let tmp = host(true);
    let (exit, out, err) = run(&["plan", "--declaration", EXAMPLE], Some(tmp.path()));
    assert_eq!(exit, Exit::Ok, "{err}");
    let first = out.lines().next().unwrap();
    assert!(first.ends_with(" actions"), "{out}");
    assert!(
        out.contains("identity run groupadd --system atelier-example"),
        "{out}"
    );
    assert!(
        out.contains("artifact create /etc/systemd/system/atelier-sited@example.service"),
        "{out}"
    );

    let (exit, out, _) = run(
        &["plan", "--declaration", EXAMPLE, "--json"],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Ok);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let actions = json["actions"].as_array().unwrap();
    assert!(
        actions
            .iter()
            .any(|a| a["action"] == "dir" && a["mode"] == "2770"),
        "{out}"
    );
    // Nothing was written by planning.
    assert!(!tmp.path().join("etc/atelier").exists());
}

#[test]
fn a_missing_engine_group_refuses_with_its_reason() {
    let tmp = host(false);
    let (exit, out, _) = run(
        &["plan", "--declaration", EXAMPLE, "--json"],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Refused);
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(json["refusals"][0]["reason"], "group_absent", "{out}");
}

#[test]
fn check_reports_drift_with_exit_1_and_writes_nothing() {
    let tmp = host(true);
    let (exit, out, _) = run(&["check", "--declaration", EXAMPLE], Some(tmp.path()));
    assert_eq!(exit, Exit::Drift, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("missing") && l.contains("/etc/atelier/example")),
        "{out}"
    );
    let entries: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries, [tmp.path().join("etc")]);
}

#[test]
fn verify_fails_when_nothing_is_served() {
    let tmp = host(true);
    let (exit, out, _) = run(&["verify", "--declaration", EXAMPLE], Some(tmp.path()));
    assert_eq!(exit, Exit::Failed, "{out}");
    assert!(
        out.contains("collection web FAILED the served link is missing"),
        "{out}"
    );
}

#[test]
fn render_writes_every_artifact_below_the_folder() {
    let tmp = host(true);
    let dir = tmp.path().join("review");
    let (exit, out, err) = run(
        &["render", dir.to_str().unwrap(), "--declaration", EXAMPLE],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Ok, "{err}");
    assert!(
        dir.join("etc/systemd/system/atelier-sited@example.service")
            .is_file(),
        "{out}"
    );
    assert!(out.lines().count() > 10, "{out}");
}
