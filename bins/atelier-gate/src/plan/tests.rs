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
    // The model is reached through the model relay alone: no tunnel to its host.
    assert!(turn.hosts.is_empty(), "{:?}", turn.hosts);
    let relay = turn.mcp.unwrap();
    assert_eq!(
        relay.upstream,
        "http://127.0.0.1:3100/publication/server_api/v2/mcp"
    );
    assert_eq!(relay.credential.as_deref(), Some("PUBLICATION_API_KEY"));
    let model = turn.model.unwrap();
    assert_eq!(model.routes.len(), 1);
    assert_eq!(model.routes[0].api, ModelApi::Anthropic);
    assert_eq!(model.routes[0].upstream, "https://api.anthropic.com");
    assert_eq!(
        model.routes[0].credential.as_deref(),
        Some("ANTHROPIC_API_KEY")
    );
    let build = load_plan(
        &Path::new(EXAMPLES).join("s2-build.json"),
        "example",
        2,
        "build",
    )
    .unwrap();
    assert!(build.hosts.is_empty());
    assert_eq!(build.mcp, None);
    assert_eq!(build.model, None);
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

/// A turn plan with the MCP relay (when `with_mcp`) and `model` as its model relay's JSON.
fn with_model(model: &str, with_mcp: bool) -> Vec<u8> {
    let mcp = if with_mcp {
        r#"{"upstream":"http://127.0.0.1:3100/mcp","credential":null}"#
    } else {
        "null"
    };
    render(&format!(
        r#"{{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":[],"mcp":{mcp},"model":{model}}}"#
    ))
}

const ANTHROPIC: &str = "https://api.anthropic.com";

fn one_route(api: &str, upstream: &str, credential: &str) -> String {
    let route = format!(r#"{{"api":"{api}","upstream":"{upstream}","credential":{credential}}}"#);
    format!(r#"{{"routes":[{route}]}}"#)
}

#[test]
fn a_model_relay_is_carried_into_the_plan() {
    let model = r#"{"routes":[
        {"api":"anthropic","upstream":"https://api.anthropic.com",
         "credential":"ANTHROPIC_API_KEY"},
        {"api":"openai","upstream":"http://llm.example.org:8080/v1","credential":null}
    ]}"#;
    let plan = parse_plan(&with_model(model, true), "example", 1, "turn").unwrap();
    let relay = plan.model.unwrap();
    assert_eq!(relay.routes.len(), 2);
    assert_eq!(relay.routes[0].api, ModelApi::Anthropic);
    assert_eq!(relay.routes[0].upstream, "https://api.anthropic.com");
    assert_eq!(
        relay.routes[0].credential.as_deref(),
        Some("ANTHROPIC_API_KEY")
    );
    assert_eq!(relay.routes[1].api, ModelApi::Openai);
    assert_eq!(relay.routes[1].credential, None);
    // A plan rendered before the model relay existed has none.
    let plan = parse_plan(
        &render(
            r#"{"version":1,"instance":"example","site":1,"door":"turn","port":443,"hosts":[],"mcp":null}"#,
        ),
        "example",
        1,
        "turn",
    )
    .unwrap();
    assert_eq!(plan.model, None);
}

#[test]
fn good_model_upstreams_and_credentials_load() {
    let cases = [
        ("https, no path", "https://api.anthropic.com", "null"),
        (
            "http with a port and a path",
            "http://llm.example.org:8080/v1",
            "null",
        ),
        (
            "a deeper path",
            "https://openrouter.ai/api/v1",
            r#""OPENROUTER_API_KEY""#,
        ),
        (
            "a one-letter credential",
            "https://api.openai.com/v1",
            r#""K""#,
        ),
        (
            "a credential of 64 characters",
            "https://api.openai.com/v1",
            &format!(r#""A{}""#, "_9".repeat(31) + "Z"),
        ),
    ];
    for (what, upstream, credential) in cases {
        let body = with_model(&one_route("openai", upstream, credential), true);
        let got = parse_plan(&body, "example", 1, "turn");
        assert!(got.is_ok(), "{what}: {got:?}");
    }
}

#[test]
fn a_bad_model_relay_is_refused_by_name() {
    let long = format!(r#""A{}""#, "B".repeat(64));
    let twice = r#"{"routes":[
        {"api":"openai","upstream":"https://api.openai.com/v1","credential":null},
        {"api":"openai","upstream":"https://openrouter.ai/api/v1","credential":null}
    ]}"#;
    let route = |upstream: &str| one_route("anthropic", upstream, "null");
    let key = |credential: &str| one_route("anthropic", ANTHROPIC, credential);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no MCP relay",
            with_model(&route("https://api.anthropic.com"), false),
            "without_mcp",
        ),
        (
            "two routes for one api",
            with_model(twice, true),
            "repeated",
        ),
        (
            "an unknown api",
            with_model(&one_route("gemini", "https://x.example", "null"), true),
            "json",
        ),
        (
            "another scheme",
            with_model(&route("ftp://api.anthropic.com"), true),
            "upstream",
        ),
        (
            "no scheme",
            with_model(&route("api.anthropic.com"), true),
            "upstream",
        ),
        (
            "no host",
            with_model(&route("https:///v1"), true),
            "upstream",
        ),
        (
            "a port and no host",
            with_model(&route("https://:443/v1"), true),
            "upstream",
        ),
        (
            "an empty port",
            with_model(&route("https://api.anthropic.com:/v1"), true),
            "upstream",
        ),
        (
            "a port that is not a number",
            with_model(&route("https://a.example:x/v1"), true),
            "upstream",
        ),
        (
            "a trailing slash",
            with_model(&route("https://api.anthropic.com/"), true),
            "upstream",
        ),
        (
            "a trailing slash after a path",
            with_model(&route("https://a.example/v1/"), true),
            "upstream",
        ),
        (
            "a query",
            with_model(&route("https://api.anthropic.com/v1?x=1"), true),
            "upstream",
        ),
        (
            "a fragment",
            with_model(&route("https://api.anthropic.com/v1#x"), true),
            "upstream",
        ),
        (
            "userinfo",
            with_model(&route("https://user:pw@api.anthropic.com"), true),
            "upstream",
        ),
        (
            "whitespace",
            with_model(&route("https://api.anthropic.com/a b"), true),
            "upstream",
        ),
        (
            "a dot-dot segment",
            with_model(&route("https://a.example/v1/../admin"), true),
            "upstream",
        ),
        (
            "an empty segment",
            with_model(&route("https://a.example//v1"), true),
            "upstream",
        ),
        (
            "a percent-encoding",
            with_model(&route("https://a.example/%2e%2e"), true),
            "upstream",
        ),
        (
            "a backslash",
            with_model(&route("https://a.example/v1\\\\x"), true),
            "upstream",
        ),
        (
            "an IPv4 address: never resolved, so never checked as public",
            with_model(&route("http://127.0.0.1:8080/v1"), true),
            "host",
        ),
        (
            "an IPv6 literal",
            with_model(&route("http://[::1]:8080/v1"), true),
            "host",
        ),
        (
            "a public IPv4 address",
            with_model(&route("https://198.51.100.7/v1"), true),
            "host",
        ),
        (
            "a local name",
            with_model(&route("http://localhost:8080/v1"), true),
            "host",
        ),
        (
            "a name with no dot",
            with_model(&route("https://llm/v1"), true),
            "host",
        ),
        (
            "a lowercase credential",
            with_model(&key(r#""anthropic_key""#), true),
            "credential",
        ),
        (
            "a credential starting with a digit",
            with_model(&key(r#""1KEY""#), true),
            "credential",
        ),
        (
            "a credential with a dash",
            with_model(&key(r#""API-KEY""#), true),
            "credential",
        ),
        (
            "an empty credential",
            with_model(&key(r#""""#), true),
            "credential",
        ),
        (
            "a credential of 65 characters",
            with_model(&key(&long), true),
            "credential",
        ),
        (
            "a credential path",
            with_model(&key(r#""../KEY""#), true),
            "credential",
        ),
    ];
    for (what, body, want) in cases {
        let got = parse_plan(&body, "example", 1, "turn");
        let ok = match want {
            "host" => matches!(got, Err(PlanError::ModelUpstreamHost(_))),
            "without_mcp" => matches!(got, Err(PlanError::ModelWithoutMcp)),
            "repeated" => matches!(got, Err(PlanError::ModelRouteRepeated(ModelApi::Openai))),
            "json" => matches!(got, Err(PlanError::Json(_))),
            "upstream" => matches!(got, Err(PlanError::ModelUpstream(_))),
            _ => matches!(got, Err(PlanError::ModelCredential(_))),
        };
        assert!(ok, "{what}: {got:?}");
    }
}
