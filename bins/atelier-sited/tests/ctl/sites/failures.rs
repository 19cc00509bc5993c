//! Every failure the binary can end in, under `--json`, is one JSON object on stdout with its
//! exit status's name, a stable `reason` and a `message`; sited's problems pass their reason
//! (else their type) through with the HTTP status. Without `--json` stdout stays empty.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::Value;

use crate::ctl::support;

/// The one JSON line a failed run printed, after checking its exit status.
fn failure(out: &support::Ctl, code: i32) -> Value {
    assert_eq!(out.code, code, "{out:?}");
    assert_eq!(out.stdout.matches('\n').count(), 1, "one line: {out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    let json: Value = serde_json::from_str(out.stdout.trim_end()).unwrap();
    assert!(
        json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{json}"
    );
    json
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sited_refusals_pass_their_reason_and_status_through() {
    let instance = support::instance().await;

    let missing = instance.ctl(&["--json", "sites", "show", "nosuch"]).await;
    let json = failure(&missing, 1);
    assert_eq!(json["exit"], "refused");
    assert_eq!(json["reason"], "not_found", "its type names it: {json}");
    assert_eq!(json["status"], 404);
    assert_eq!(
        json["type"],
        "https://dedalo.dev/site-builder/problems/not-found"
    );

    let create = [
        "--json",
        "sites",
        "create",
        "alpha",
        "--name",
        "A",
        "--domain",
        "alpha.example.org",
    ];
    assert_eq!(instance.ctl(&create).await.code, 0);
    let json = failure(&instance.ctl(&create).await, 1);
    assert_eq!(json["reason"], "slug_exists", "sited's own reason: {json}");
    assert_eq!(json["status"], 409);
    assert!(
        !json["message"].as_str().unwrap().starts_with("slug_exists"),
        "{json}"
    );

    // Without --json, the same refusal leaves stdout empty.
    let plain = instance.ctl(&["sites", "show", "nosuch"]).await;
    assert_eq!((plain.code, plain.stdout.as_str()), (1, ""), "{plain:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_sited_does_not_accept_is_unauthorized() {
    let instance =
        support::instance_with(support::TOKEN, "rotated-token-00000000000000000000000000").await;
    let json = failure(&instance.ctl(&["sites", "list", "--json"]).await, 1);
    assert_eq!(json["reason"], "unauthorized", "{json}");
    assert_eq!(json["status"], 401);
    assert_eq!(json["message"], "Invalid bearer token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_and_transport_failures_name_their_reason() {
    let instance = support::instance().await;
    let token = instance.token_file.display().to_string();
    let socket = instance.socket.display().to_string();
    let absent = instance.root.join("absent.sock").display().to_string();
    let cases: [(&str, Vec<&str>, &str); 2] = [
        (
            "unreachable socket",
            vec!["--socket", &absent, "--instance", "test"],
            "unreachable",
        ),
        (
            "another instance's token",
            vec!["--socket", &socket, "--instance", "museum"],
            "instance_mismatch",
        ),
    ];
    for (name, flags, reason) in cases {
        let mut argv: Vec<String> = flags.iter().map(|a| (*a).to_owned()).collect();
        argv.extend(["--token-file", &token, "--json", "health"].map(str::to_owned));
        let json = failure(&support::ctl(argv).await, 3);
        assert_eq!(json["exit"], "transport", "{name}");
        assert_eq!(json["reason"], reason, "{name}: {json}");
        assert!(json.get("status").is_none(), "{name}: {json}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_configuration_and_local_refusals_name_their_reason() {
    let instance = support::instance().await;
    let socket = instance.socket.display().to_string();
    let exposed = instance.root.join("exposed-token");
    std::fs::write(&exposed, format!("{}\n", support::TOKEN)).unwrap();
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exposed = exposed.display().to_string();
    let before = instance.seen().len();

    for (name, args, reason) in [
        ("unknown command", vec!["sites", "frobnicate"], "usage"),
        ("bad slug", vec!["sites", "show", "../x"], "invalid_slug"),
        (
            "publish unconfirmed",
            vec!["publish", "alpha"],
            "confirmation_required",
        ),
        (
            "unreadable prompt file",
            vec![
                "session",
                "start",
                "alpha",
                "--prompt-file",
                "/nonexistent/prompt",
            ],
            "input_unreadable",
        ),
    ] {
        let mut argv = vec!["--json"];
        argv.extend(args);
        let json = failure(&instance.ctl(&argv).await, 2);
        assert_eq!(json["exit"], "usage", "{name}");
        assert_eq!(json["reason"], reason, "{name}: {json}");
    }
    for (name, flags, reason) in [
        (
            "no token",
            vec!["--socket", &socket, "--instance", "test"],
            "setting_missing",
        ),
        (
            "world-readable token",
            vec![
                "--socket",
                &socket,
                "--instance",
                "test",
                "--token-file",
                &exposed,
            ],
            "token_exposed",
        ),
        (
            "bad instance name",
            vec!["--socket", &socket, "--instance", "Bad Name"],
            "invalid_instance",
        ),
    ] {
        let mut argv: Vec<String> = flags.iter().map(|a| (*a).to_owned()).collect();
        argv.extend(["health", "--json"].map(str::to_owned));
        let json = failure(&support::ctl(argv).await, 2);
        assert_eq!(json["reason"], reason, "{name}: {json}");
    }
    assert_eq!(instance.seen().len(), before, "nothing was sent");
}
