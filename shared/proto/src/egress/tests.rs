//! Decisions-socket lines: wire shapes, round trips, closed key sets, caps checked before
//! parsing, the refused git door, and the human line of every verdict.

use super::*;
use proptest::prelude::*;

fn allowed() -> Decision {
    Decision::new(
        Door::Turn,
        "api.example.com",
        Some(443),
        Verdict::Allowed,
        "via 198.18.0.10:443",
    )
}

fn samples() -> Vec<Decision> {
    vec![
        allowed(),
        Decision::new(
            Door::Build,
            "pkgs.registry.test",
            Some(443),
            Verdict::Refused,
            "not_public: 10.1.2.3 private",
        ),
        Decision::new(
            Door::Turn,
            "unresolvable.example.com",
            Some(443),
            Verdict::Failed,
            "lookup_failed: no such host",
        ),
        Decision::new(
            Door::Turn,
            "api.example.com:80",
            None,
            Verdict::Refused,
            "port_not_allowed",
        ),
        Decision::new(
            Door::Turn,
            MCP_HOST,
            None,
            Verdict::Relayed,
            "POST /mcp 200",
        ),
        Decision::new(
            Door::Turn,
            MODEL_HOST,
            None,
            Verdict::Relayed,
            "POST /model/anthropic 200",
        ),
        Decision::new(
            Door::Turn,
            "\"quoted\\",
            None,
            Verdict::Refused,
            "malformed_request_line",
        ),
    ]
}

#[test]
fn lines_have_the_documented_wire_shapes() {
    assert_eq!(
        Subscribe::new(Door::Build).to_line().unwrap(),
        "{\"v\":1,\"door\":\"build\"}\n"
    );
    assert_eq!(
        allowed().to_line().unwrap(),
        "{\"door\":\"turn\",\"host\":\"api.example.com\",\"port\":443,\"verdict\":\"allowed\",\"reason\":\"via 198.18.0.10:443\"}\n"
    );
    let relayed = &samples()[4];
    let json: serde_json::Value =
        serde_json::from_str(relayed.to_line().unwrap().trim_end()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "door": "turn", "host": "mcp", "port": null, "verdict": "relayed",
            "reason": "POST /mcp 200"
        })
    );
    let names: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
    assert_eq!(names, ["allowed", "refused", "failed", "relayed", "closed"]);
    for verdict in Verdict::ALL {
        assert_eq!(
            serde_json::to_string(&verdict).unwrap(),
            format!("\"{verdict}\"")
        );
    }
}

#[test]
fn subscribe_and_decisions_round_trip() {
    for door in [Door::Turn, Door::Build] {
        let line = Subscribe::new(door).to_line().unwrap();
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        assert_eq!(
            Subscribe::parse_line(line.as_bytes()).unwrap(),
            Subscribe::new(door)
        );
        // The terminator is optional: a reader may have stripped it.
        assert_eq!(
            Subscribe::parse_line(line.trim_end().as_bytes()).unwrap(),
            Subscribe::new(door)
        );
    }
    for decision in samples() {
        let line = decision.to_line().unwrap();
        assert!(line.len() <= MAX_DECISION_LINE);
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert_eq!(Decision::parse_line(line.as_bytes()).unwrap(), decision);
    }
}

#[test]
fn the_longest_decision_fits_its_line() {
    // Every character escaped by JSON, in both texts, at the text cap.
    let worst = "\"".repeat(MAX_DECISION_TEXT);
    let decision = Decision::new(Door::Build, &worst, Some(u16::MAX), Verdict::Failed, &worst);
    let line = decision.to_line().unwrap();
    assert!(line.len() <= MAX_DECISION_LINE, "{}", line.len());
    assert_eq!(Decision::parse_line(line.as_bytes()).unwrap(), decision);
}

#[test]
fn new_makes_text_printable_bounded_and_never_empty() {
    let decision = Decision::new(
        Door::Turn,
        &format!("\u{1b}[31m{}", "a".repeat(500)),
        None,
        Verdict::Refused,
        "",
    );
    assert_eq!(decision.host.len(), MAX_DECISION_TEXT);
    assert!(decision.host.starts_with("?[31maaa"), "{}", decision.host);
    assert_eq!(decision.reason, "-");
    assert_eq!(printable("a\tb\u{7f}c\u{e9}"), "a?b?c?");
    decision.validate().unwrap();
}

#[test]
fn every_verdict_has_its_human_line() {
    let cases: Vec<(&str, Decision, &str)> = vec![
        (
            "allowed",
            allowed(),
            "[egress] CONNECT api.example.com:443 → 198.18.0.10:443 (allowed)",
        ),
        (
            "refused after the head parsed",
            Decision::new(
                Door::Turn,
                "other.example.com",
                Some(443),
                Verdict::Refused,
                "not_in_plan",
            ),
            "[egress] refused CONNECT other.example.com:443 — not_in_plan",
        ),
        (
            "refused before the head parsed",
            samples()[3].clone(),
            "[egress] refused CONNECT api.example.com:80 — port_not_allowed",
        ),
        (
            "failed",
            samples()[2].clone(),
            "[egress] CONNECT unresolvable.example.com:443 failed — lookup_failed: no such host",
        ),
        (
            "relayed",
            samples()[4].clone(),
            "[egress] MCP relay POST /mcp 200",
        ),
        (
            "closed after its first flight was refused",
            Decision::new(
                Door::Turn,
                "api.example.com",
                Some(443),
                Verdict::Closed,
                "server_name_mismatch; nothing was sent upstream",
            ),
            "[egress] closed the tunnel to api.example.com:443 — server_name_mismatch; nothing \
             was sent upstream",
        ),
        (
            "closed by the client before its first flight",
            Decision::new(
                Door::Build,
                "pkgs.registry.test",
                Some(443),
                Verdict::Closed,
                "client_closed; nothing was sent upstream",
            ),
            "[egress] closed the tunnel to pkgs.registry.test:443 — client_closed; nothing was \
             sent upstream",
        ),
        (
            "refused by the relay",
            Decision::new(
                Door::Turn,
                MCP_HOST,
                None,
                Verdict::Refused,
                "DELETE /mcp upstream_redirect",
            ),
            "[egress] refused MCP relay — DELETE /mcp upstream_redirect",
        ),
        (
            "relayed by the model relay",
            samples()[5].clone(),
            "[egress] model relay POST /model/anthropic 200",
        ),
        (
            "refused by the model relay",
            Decision::new(
                Door::Turn,
                MODEL_HOST,
                None,
                Verdict::Refused,
                "GET /model/openai bad_path",
            ),
            "[egress] refused model relay — GET /model/openai bad_path",
        ),
        (
            "a parsed target named like the model relay, with its port, is a CONNECT",
            Decision::new(
                Door::Turn,
                MODEL_HOST,
                Some(443),
                Verdict::Refused,
                "invalid_host",
            ),
            "[egress] refused CONNECT model:443 — invalid_host",
        ),
        (
            "refused before any target was read",
            Decision::new(
                Door::Turn,
                "",
                None,
                Verdict::Refused,
                "over_cap: this door already holds 128",
            ),
            "[egress] refused a connection — over_cap: this door already holds 128",
        ),
        (
            "allowed with a reason that is not an address",
            Decision::new(
                Door::Build,
                "pkgs.registry.test",
                Some(443),
                Verdict::Allowed,
                "pinned",
            ),
            "[egress] CONNECT pkgs.registry.test:443 → pinned (allowed)",
        ),
    ];
    for (what, decision, want) in cases {
        assert_eq!(decision.line(), want, "{what}");
    }
}

#[test]
fn bad_subscribe_lines_are_refused_by_name() {
    let too_long = format!(
        "{{\"v\":1,\"door\":\"turn\"}}{}\n",
        " ".repeat(MAX_SUBSCRIBE_LINE)
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "the git door",
            b"{\"v\":1,\"door\":\"git\"}\n".to_vec(),
            "git_door",
        ),
        (
            "an unknown key",
            b"{\"v\":1,\"door\":\"turn\",\"since\":0}\n".to_vec(),
            "malformed",
        ),
        (
            "an unknown door",
            b"{\"v\":1,\"door\":\"mcp\"}\n".to_vec(),
            "malformed",
        ),
        ("no door", b"{\"v\":1}\n".to_vec(), "malformed"),
        ("an array", b"[1,\"turn\"]\n".to_vec(), "malformed"),
        ("not JSON", b"turn\n".to_vec(), "malformed"),
        ("empty", b"\n".to_vec(), "malformed"),
        (
            "version 2",
            b"{\"v\":2,\"door\":\"turn\"}\n".to_vec(),
            "unsupported_version",
        ),
        (
            "two lines",
            b"{\"v\":1,\n\"door\":\"turn\"}\n".to_vec(),
            "not_one_line",
        ),
        ("over the cap", too_long.into_bytes(), "too_long"),
    ];
    for (what, line, name) in cases {
        let error = Subscribe::parse_line(&line).unwrap_err();
        assert_eq!(error.as_str(), name, "{what}: {error}");
    }
    assert_eq!(
        Subscribe::new(Door::Git).to_line().unwrap_err().as_str(),
        "git_door"
    );
    assert_eq!(
        EgressError::GitDoor.to_string(),
        "the git door has no way out, so it has no egress decisions"
    );
}

#[test]
fn the_cap_is_checked_before_parsing() {
    // A line of exactly the cap parses; one byte more is refused by its length, even though
    // the JSON itself would be fine.
    let body = "{\"v\":1,\"door\":\"turn\"}";
    let fits = format!(
        "{body}{}\n",
        " ".repeat(MAX_SUBSCRIBE_LINE - body.len() - 1)
    );
    assert_eq!(fits.len(), MAX_SUBSCRIBE_LINE);
    assert!(Subscribe::parse_line(fits.as_bytes()).is_ok());
    let over = format!("{body}{}\n", " ".repeat(MAX_SUBSCRIBE_LINE - body.len()));
    match Subscribe::parse_line(over.as_bytes()) {
        Err(EgressError::TooLong { message, len, cap }) => {
            assert_eq!(
                (message, len, cap),
                ("subscribe", MAX_SUBSCRIBE_LINE + 1, MAX_SUBSCRIBE_LINE)
            );
        }
        other => panic!("{other:?}"),
    }
    let garbage = vec![b'x'; MAX_DECISION_LINE + 1];
    assert_eq!(
        Decision::parse_line(&garbage).unwrap_err().as_str(),
        "too_long"
    );
}

#[test]
fn bad_decision_lines_are_refused_by_name() {
    let line = |json: serde_json::Value| format!("{json}\n").into_bytes();
    let good = serde_json::json!({
        "door": "turn", "host": "api.example.com", "port": 443, "verdict": "allowed",
        "reason": "via 198.18.0.10:443"
    });
    let with = |key: &str, value: serde_json::Value| {
        let mut json = good.clone();
        json[key] = value;
        line(json)
    };
    let without = |key: &str| {
        let mut json = good.clone();
        json.as_object_mut().unwrap().remove(key);
        line(json)
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("the git door", with("door", "git".into()), "git_door"),
        ("an unknown key", with("run", 7.into()), "malformed"),
        (
            "an unknown verdict",
            with("verdict", "blocked".into()),
            "malformed",
        ),
        (
            "a capitalised verdict",
            with("verdict", "Allowed".into()),
            "malformed",
        ),
        ("no port key", without("port"), "malformed"),
        ("no reason", without("reason"), "malformed"),
        ("a port over 65535", with("port", 65536.into()), "malformed"),
        ("an empty host", with("host", "".into()), "empty"),
        ("an empty reason", with("reason", "".into()), "empty"),
        (
            "a control character",
            with("host", "a\u{1b}b".into()),
            "not_printable",
        ),
        (
            "a non-ASCII character",
            with("reason", "caf\u{e9}".into()),
            "not_printable",
        ),
        (
            "a host over the text cap",
            with("host", "a".repeat(MAX_DECISION_TEXT + 1).into()),
            "text_too_long",
        ),
    ];
    for (what, line, name) in cases {
        let error = Decision::parse_line(&line).unwrap_err();
        assert_eq!(error.as_str(), name, "{what}: {error}");
    }
    assert!(Decision::parse_line(&line(good)).is_ok());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_either_parser(
        line in proptest::collection::vec(any::<u8>(), 0..3000),
    ) {
        let _ = Subscribe::parse_line(&line);
        let _ = Decision::parse_line(&line);
    }

    #[test]
    fn any_decision_the_gate_builds_round_trips_within_its_line(
        door in proptest::sample::select(vec![Door::Turn, Door::Build]),
        host in any::<String>(),
        port in any::<Option<u16>>(),
        verdict in proptest::sample::select(Verdict::ALL.to_vec()),
        reason in any::<String>(),
    ) {
        let decision = Decision::new(door, &host, port, verdict, &reason);
        let line = decision.to_line().unwrap();
        prop_assert!(line.len() <= MAX_DECISION_LINE);
        prop_assert_eq!(line.matches('\n').count(), 1);
        prop_assert_eq!(Decision::parse_line(line.as_bytes()).unwrap(), decision);
    }
}
