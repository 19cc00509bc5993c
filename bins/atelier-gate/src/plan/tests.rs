//! Plan files: the rendered examples load; every mismatch is refused by name.

use super::*;
use atelier_layout::stamp::{stamped, CommentStyle};

const EXAMPLES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/examples/rendered/etc/atelier/example/gate"
);

fn render(body: &str) -> Vec<u8> {
    stamped("example", PLAN_KIND, CommentStyle::Slashes, body.as_bytes())
}

#[test]
fn the_rendered_examples_load() {
    let turn = load_plan(
        &Path::new(EXAMPLES).join("s1-turn.json"),
        "example",
        1,
        "turn",
    )
    .unwrap();
    assert_eq!(turn.door, "turn");
    assert_eq!(turn.socket_file, "turn.sock");
    assert_eq!(turn.hosts, vec!["api.anthropic.com".to_owned()]);
    let relay = turn.mcp.unwrap();
    assert_eq!(
        relay.upstream,
        "http://127.0.0.1:3100/publication/server_api/v2/mcp"
    );
    assert_eq!(relay.credential.as_deref(), Some("PUBLICATION_API_KEY"));
    let build = load_plan(
        &Path::new(EXAMPLES).join("s2-build.json"),
        "example",
        2,
        "build",
    )
    .unwrap();
    assert!(build.hosts.is_empty());
    assert_eq!(build.mcp, None);
}

#[test]
fn a_plan_for_another_site_or_door_is_refused() {
    let path = Path::new(EXAMPLES).join("s1-turn.json");
    assert!(matches!(
        load_plan(&path, "example", 2, "turn"),
        Err(PlanError::Mismatch { field: "site", .. })
    ));
    assert!(matches!(
        load_plan(&path, "example", 1, "build"),
        Err(PlanError::Mismatch { field: "door", .. })
    ));
    assert!(matches!(
        load_plan(&path, "other", 1, "turn"),
        Err(PlanError::Stamp(StampError::Foreign(_)))
    ));
}

#[test]
fn an_edited_plan_is_refused() {
    let mut file = render(
        r#"{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":["a.example.com"],"mcp":null}"#,
    );
    assert!(parse_plan(&file, "example", 1, "turn").is_ok());
    let at = file.len() - 20;
    file[at] ^= 1;
    assert!(matches!(
        parse_plan(&file, "example", 1, "turn"),
        Err(PlanError::Stamp(StampError::Drift))
    ));
}

#[test]
fn bad_fields_are_refused() {
    let cases = [
        (
            r#"{"version":2,"instance":"example","site":1,"door":"turn","port":443,"hosts":[],"mcp":null}"#,
            "version",
        ),
        (
            r#"{"version":1,"instance":"example","site":1,"door":"turn","port":80,"hosts":[],"mcp":null}"#,
            "port",
        ),
        (
            r#"{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":["10.0.0.1"],"mcp":null}"#,
            "host",
        ),
        (
            r#"{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":["metadata.google.internal"],"mcp":null}"#,
            "host",
        ),
        (
            r#"{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":[],"mcp":null,"extra":1}"#,
            "json",
        ),
    ];
    for (body, want) in cases {
        let got = parse_plan(&render(body), "example", 1, "turn");
        let ok = match want {
            "version" => matches!(got, Err(PlanError::Version(2))),
            "port" => matches!(got, Err(PlanError::Port(80))),
            "host" => matches!(got, Err(PlanError::Host(_))),
            _ => matches!(got, Err(PlanError::Json(_))),
        };
        assert!(ok, "{body}: {got:?}");
    }
}

#[test]
fn a_bad_mcp_upstream_is_refused() {
    let body = |url: &str| {
        format!(
            r#"{{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":[],"mcp":{{"upstream":"{url}","credential":null}}}}"#
        )
    };
    for good in [
        "http://127.0.0.1:3100/publication/server_api/v2/mcp",
        "https://publication.example.org/mcp",
    ] {
        let plan = parse_plan(&render(&body(good)), "example", 1, "turn").unwrap();
        assert_eq!(plan.mcp.unwrap().upstream, good);
    }
    for (what, bad) in [
        ("another scheme", "ftp://publication.example.org/mcp"),
        ("no authority", "http:///mcp"),
        (
            "credentials in the URL",
            "http://user:pw@publication.example.org/mcp",
        ),
        ("not ending in /mcp", "http://publication.example.org/api"),
        ("a query", "http://publication.example.org/x?y=/mcp"),
        ("whitespace", "http://publication.example.org/a b/mcp"),
    ] {
        assert!(
            matches!(
                parse_plan(&render(&body(bad)), "example", 1, "turn"),
                Err(PlanError::McpUpstream(_))
            ),
            "{what}"
        );
    }
}
