//! The command line's verbs and exit codes, run in process against a host root in a temp dir
//! (read-only verbs only: `apply` and `remove` act on the real host and refuse a root; `remove
//! --dry-run` reads only); the built binary where a run needs another user or `PATH`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
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
    let mut groups = String::from("root:x:0:\nwww-data:x:33:\nprometheus:x:591:\n");
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

/// The built binary and the example declaration, copied where any user may read them (the
/// target folder and the checkout may be private).
fn binary_for_anyone() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("atelier-provision");
    std::fs::copy(env!("CARGO_BIN_EXE_atelier-provision"), &bin).unwrap();
    let declaration = dir.path().join("instance.json");
    std::fs::copy(EXAMPLE, &declaration).unwrap();
    (dir, bin, declaration)
}

/// Run by a user other than root, each verb that reads the real host refuses at once by name
/// (what only root may read would look absent, and so drift); `render` and a review root
/// are anyone's.
#[test]
fn a_verb_reading_the_host_refuses_a_user_other_than_root() {
    let (_dir, bin, declaration) = binary_for_anyone();
    let as_nobody = || {
        let mut command = std::process::Command::new("setpriv");
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        command.arg(&bin);
        command
    };
    for verb in ["plan", "check", "verify", "apply", "remove"] {
        let out = as_nobody()
            .args([verb, "--json", "--declaration"])
            .arg(&declaration)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{verb}: {out:?}");
        let json = json_of(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(json["reason"], "not_root", "{verb}");
        assert_eq!(
            json["message"],
            format!(
                "{verb} reads the instance's credentials and state, which only root may read: \
                 run it as root"
            )
        );
    }
    let tmp = host(true);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_nobody()
        .args(["plan", "--json", "--declaration"])
        .arg(&declaration)
        .arg("--root")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Without `systemctl --version` nothing can be rendered: `render` refuses by name and writes
/// nothing, as `plan` does, rather than leave an empty folder and exit 0.
#[test]
fn render_refuses_a_host_whose_systemd_is_unknown() {
    let tmp = host(true);
    let review = tmp.path().join("review");
    let no_tools = tempfile::tempdir().unwrap();
    for verb in [vec!["render", review.to_str().unwrap()], vec!["plan"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_atelier-provision"))
            .env("PATH", no_tools.path())
            .args(&verb)
            .args(["--json", "--declaration", EXAMPLE, "--root"])
            .arg(tmp.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{verb:?}: {out:?}");
        let json = json_of(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(json["reason"], "refused", "{verb:?}");
        assert_eq!(json["refusals"][0]["reason"], "systemd_unknown", "{verb:?}");
    }
    assert!(!review.exists(), "nothing written");
}

/// Every path below `root` with its size, to tell that nothing was written or removed.
fn tree(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            }
            found.push((entry.path(), meta.len()));
        }
    }
    found.sort();
    found
}

#[test]
fn a_removal_dry_run_lists_the_steps_and_changes_nothing() {
    let tmp = host(true);
    // Of the instance's units only sited's socket is on this host.
    let units = tmp.path().join("etc/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::write(units.join("atelier-sited@example.socket"), "[Socket]\n").unwrap();
    let before = tree(tmp.path());
    let args = ["remove", "--dry-run", "--declaration", EXAMPLE];
    let (exit, out, err) = run(&args, Some(tmp.path()));
    assert_eq!(exit, Exit::Ok, "{err}");
    let mut lines = out.lines();
    let head = lines.next().unwrap();
    let count: usize = head
        .strip_suffix(" actions (dry run: nothing was changed)")
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    let steps: Vec<&str> = lines.collect();
    assert_eq!(steps.len(), count, "{out}");
    // Stopping comes first, so nothing runs while its files go; only units on the host are
    // named (systemctl would refuse the whole command for one it has no file of).
    assert_eq!(
        steps[0], "run systemctl disable --now atelier-sited@example.socket (failure tolerated)",
        "{out}"
    );
    assert_eq!(
        tree(tmp.path()),
        before,
        "the dry run changed the host root"
    );

    let (exit, out, err) = run(&[&args[..], &["--json"]].concat(), Some(tmp.path()));
    assert_eq!(exit, Exit::Ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["verb"], "remove");
    assert_eq!(json["dry_run"], true);
    assert_eq!(json["actions"].as_array().unwrap().len(), count, "{out}");
    assert_eq!(json["outcomes"], serde_json::json!([]));
    assert_eq!(tree(tmp.path()), before);
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

/// The one JSON object a `--json` run printed on stdout.
fn json_of(out: &str) -> serde_json::Value {
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    serde_json::from_str(out.trim_end()).unwrap()
}

#[test]
fn every_failure_names_its_reason_under_json() {
    let tmp = host(true);
    let root = tmp.path().to_str().unwrap();
    let missing = tmp.path().join("absent.json");
    let not_utf8 = tmp.path().join("latin1.json");
    std::fs::write(&not_utf8, b"{\"instance\": \"caf\xe9\"}").unwrap();
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"instance":"x"}"#).unwrap();
    let blocked = tmp.path().join("a-file");
    std::fs::write(&blocked, "").unwrap();
    let no_accounts = tempfile::tempdir().unwrap();
    let no_engine_group = host(false);

    let cases: &[(&str, Vec<&str>, Exit, &str)] = &[
        (
            "unknown verb",
            vec!["frobnicate", "--json"],
            Exit::Usage,
            "usage",
        ),
        (
            "unknown flag",
            vec!["plan", "--json", "--frob", "--declaration", EXAMPLE],
            Exit::Usage,
            "usage",
        ),
        (
            "no declaration",
            vec!["plan", "--json", "--root", root],
            Exit::Usage,
            "declaration_required",
        ),
        (
            "root for apply",
            vec!["apply", "--json", "--declaration", EXAMPLE, "--root", root],
            Exit::Usage,
            "root_not_allowed",
        ),
        (
            "root for remove",
            vec!["remove", "--json", "--declaration", EXAMPLE, "--root", root],
            Exit::Usage,
            "root_not_allowed",
        ),
        (
            "missing declaration file",
            vec![
                "plan",
                "--json",
                "--root",
                root,
                "--declaration",
                missing.to_str().unwrap(),
            ],
            Exit::Refused,
            "declaration_unreadable",
        ),
        (
            "declaration not UTF-8",
            vec![
                "plan",
                "--json",
                "--root",
                root,
                "--declaration",
                not_utf8.to_str().unwrap(),
            ],
            Exit::Refused,
            "declaration_unreadable",
        ),
        (
            "invalid declaration",
            vec![
                "check",
                "--json",
                "--root",
                root,
                "--declaration",
                bad.to_str().unwrap(),
            ],
            Exit::Refused,
            "declaration_invalid",
        ),
        (
            "plan refused",
            vec![
                "plan",
                "--json",
                "--root",
                no_engine_group.path().to_str().unwrap(),
                "--declaration",
                EXAMPLE,
            ],
            Exit::Refused,
            "refused",
        ),
        (
            "account files unreadable",
            vec![
                "plan",
                "--json",
                "--root",
                no_accounts.path().to_str().unwrap(),
                "--declaration",
                EXAMPLE,
            ],
            Exit::Failed,
            "host_unreadable",
        ),
        (
            "review folder blocked",
            vec![
                "render",
                blocked.to_str().unwrap(),
                "--json",
                "--root",
                root,
                "--declaration",
                EXAMPLE,
            ],
            Exit::Failed,
            "write_failed",
        ),
        (
            "drift",
            vec!["check", "--json", "--root", root, "--declaration", EXAMPLE],
            Exit::Drift,
            "drift",
        ),
        (
            "nothing served",
            vec!["verify", "--json", "--root", root, "--declaration", EXAMPLE],
            Exit::Failed,
            "not_served",
        ),
    ];
    for (name, args, exit, reason) in cases {
        let (got, out, err) = run(args, None);
        assert_eq!(got, *exit, "{name}: {out} {err}");
        let json = json_of(&out);
        assert_eq!(json["reason"], *reason, "{name}: {out}");
        assert_eq!(json["exit"], exit_name(*exit), "{name}: {out}");
        // A verb's report ends in its reason too; a failure also tells a person on stderr.
        let is_report = ["drift", "not_served"].contains(reason);
        if !is_report {
            assert!(!err.is_empty(), "{name}: a person still reads why");
            assert!(
                json["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{name}: {out}"
            );
        }
    }
}

fn exit_name(exit: Exit) -> String {
    serde_json::to_value(exit)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_refused_declaration_lists_each_problem_with_its_path_and_reason() {
    let tmp = host(true);
    let text = std::fs::read_to_string(EXAMPLE).unwrap().replacen(
        "\"instance\": \"example\"",
        "\"instance\": \"Bad Name\"",
        1,
    );
    let decl = tmp.path().join("instance.json");
    std::fs::write(&decl, &text).unwrap();
    let (exit, out, _) = run(
        &["plan", "--json", "--declaration", decl.to_str().unwrap()],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Refused, "{out}");
    let json = json_of(&out);
    assert_eq!(json["reason"], "declaration_invalid");
    assert_eq!(json["verb"], "plan");
    let problems = json["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["path"] == "instance" && p["reason"] == "bad_instance_name"),
        "{out}"
    );
    for p in problems {
        assert!(p["message"].as_str().is_some_and(|m| !m.is_empty()), "{p}");
    }
}

#[test]
fn a_refused_plan_lists_each_refusal_with_its_reason() {
    let tmp = host(false);
    let (_, out, _) = run(
        &["plan", "--declaration", EXAMPLE, "--json"],
        Some(tmp.path()),
    );
    let json = json_of(&out);
    assert_eq!(json["reason"], "refused");
    let refusals = json["refusals"].as_array().unwrap();
    assert!(!refusals.is_empty(), "{out}");
    for r in refusals {
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert!(r["subject"].is_string() && r["message"].is_string(), "{r}");
    }
}

#[test]
fn reports_that_do_not_exit_0_name_their_reason_and_surfaces_theirs() {
    let tmp = host(true);
    let (_, out, _) = run(
        &["verify", "--json", "--declaration", EXAMPLE],
        Some(tmp.path()),
    );
    let json = json_of(&out);
    assert_eq!(json["reason"], "not_served");
    assert_eq!(
        json["surfaces"][0]["problem"],
        serde_json::json!({"reason": "link_missing", "message": "the served link is missing"}),
        "{out}"
    );
    let (exit, out, _) = run(
        &["plan", "--json", "--declaration", EXAMPLE],
        Some(tmp.path()),
    );
    assert_eq!(exit, Exit::Ok);
    assert!(json_of(&out).get("reason").is_none(), "{out}");
    // The verbs that act on the real host are mapped as the rest.
    use atelier_provision::plan::Holdback;
    use cli::{unfinished, Reason, Verb};
    for (verb, exit, held, want) in [
        (
            Verb::Apply,
            Exit::Refused,
            Some(Holdback::OperatorFile),
            Some(Reason::AwaitingOperatorFile),
        ),
        (
            Verb::Apply,
            Exit::Refused,
            Some(Holdback::DeferredRestart),
            Some(Reason::RestartDeferred),
        ),
        (Verb::Apply, Exit::Failed, None, Some(Reason::ActionFailed)),
        (Verb::Apply, Exit::Ok, None, None),
        (
            Verb::Remove {
                purge_published: false,
                dry_run: false,
            },
            Exit::Failed,
            None,
            Some(Reason::RemovalStopped),
        ),
        (Verb::Check, Exit::Drift, None, Some(Reason::Drift)),
        (Verb::Verify, Exit::Failed, None, Some(Reason::NotServed)),
    ] {
        assert_eq!(unfinished(&verb, exit, held), want, "{verb:?} {exit:?}");
        if let Some(reason) = want {
            assert_eq!(reason.exit(), exit, "{reason:?}");
        }
    }
}

#[test]
fn output_that_looks_like_a_credential_is_withheld_with_its_reason() {
    use atelier_layout::stamp::CommentStyle;
    use atelier_provision::artifact::{Artifact, ArtifactKind};
    let leaky: verbs::Renderer<'_> = &|_, _, _, _| {
        Ok(vec![Artifact::new(
            "/etc/atelier/example/SERVICE_TOKEN=abcdefgh12345",
            "example",
            ArtifactKind::Unit,
            CommentStyle::Hash,
            ("root", "root", 0o600),
            "x",
        )])
    };
    let tmp = host(true);
    let dir = tmp.path().join("review");
    let argv: Vec<OsString> = [
        "atelier-provision",
        "render",
        dir.to_str().unwrap(),
        "--json",
        "--declaration",
        EXAMPLE,
        "--root",
        tmp.path().to_str().unwrap(),
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli::run(argv, leaky, &mut out, &mut err);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(exit, Exit::Failed, "{out}");
    let json = json_of(&out);
    assert_eq!(json["reason"], "output_withheld");
    assert!(!out.contains("abcdefgh12345"), "{out}");
}

#[test]
fn without_json_failures_print_nothing_on_stdout() {
    let tmp = host(false);
    let (exit, out, err) = run(&["plan", "--declaration", EXAMPLE], Some(tmp.path()));
    assert_eq!(exit, Exit::Refused);
    assert_eq!(out, "");
    assert!(err.contains("group_absent"), "{err}");
}

#[test]
fn the_long_help_lists_every_exit_code_its_reasons_and_examples() {
    let (exit, help, _) = run(&["--help"], None);
    assert_eq!(exit, Exit::Ok);
    for exit in Exit::ALL {
        let line = format!("  {}  {:<8} {}", exit.code(), exit.name(), exit.meaning());
        assert!(help.contains(&line), "{line:?} in\n{help}");
    }
    for reason in cli::Reason::ALL {
        assert!(help.contains(reason.as_str()), "{reason:?} in\n{help}");
    }
    for verb in ["render", "plan", "apply", "check", "verify", "remove"] {
        assert!(
            help.contains(&format!("atelier-provision {verb} ")),
            "an example of {verb} in\n{help}"
        );
    }
    let (_, short, _) = run(&["-h"], None);
    assert!(short.contains("--help' for exit codes"), "{short}");
}

#[test]
fn every_exit_code_and_reason_is_listed_once() {
    // A new variant fails to compile here until it is added to its ALL.
    let position = |exit: Exit| match exit {
        Exit::Ok => 0,
        Exit::Drift => 1,
        Exit::Usage => 2,
        Exit::Refused => 3,
        Exit::Failed => 4,
    };
    for (i, exit) in Exit::ALL.into_iter().enumerate() {
        assert_eq!(position(exit), i);
        assert_eq!(usize::from(exit.code()), i);
        assert_eq!(exit.name(), exit_name(exit));
    }
    use cli::Reason;
    let listed = |reason: Reason| match reason {
        Reason::Drift
        | Reason::Usage
        | Reason::RootNotAllowed
        | Reason::NotRoot
        | Reason::DeclarationRequired
        | Reason::DeclarationUnreadable
        | Reason::DeclarationInvalid
        | Reason::Refused
        | Reason::AwaitingOperatorFile
        | Reason::RestartDeferred
        | Reason::HostUnreadable
        | Reason::WriteFailed
        | Reason::OutputFailed
        | Reason::OutputWithheld
        | Reason::ActionFailed
        | Reason::NotServed
        | Reason::RemovalStopped
        | Reason::LockFailed => Reason::ALL.contains(&reason),
    };
    let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    for reason in Reason::ALL {
        assert!(listed(reason));
        assert_ne!(reason.exit(), Exit::Ok, "{reason:?}");
        assert!(
            reason
                .as_str()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_'),
            "{reason:?}"
        );
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Reason::ALL.len(), "reasons are unique");
}
