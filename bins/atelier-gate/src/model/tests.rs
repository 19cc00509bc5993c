//! The model relay: request targets mapped under each route's base or refused by name (named
//! cases, the fuzz seeds, and generated paths held to the URL parser the client uses), the key
//! header of each API, the resolver's answers kept only when public, and, over a real unix
//! socket against a provider stand-in on loopback, what the socket tests of the MCP relay do
//! not already show for this one: the 405, the bearer key, the status and header allowlist, an
//! unreachable upstream, a host resolving to loopback never dialled, and the bodies held.

use super::*;
use crate::mcp::McpDoor;
use crate::relay::{serve, Relays};
use atelier_proto::Door as DoorName;
use proptest::prelude::*;
use std::path::PathBuf;
use tokio::net::UnixListener;

// `upstream` finds the MCP stand-in's parts as its sibling `mcp`, as in the integration tests.
use crate::mcp::tests::support as mcp;
#[path = "../../tests/support/model.rs"]
mod upstream;

use mcp::send;
use upstream::{ModelUpstream, PASSED_BACK};

const ANTHROPIC_BASE: &str = "https://api.anthropic.com";
const OPENAI_BASE: &str = "http://127.0.0.1:8080/v1";
const KEY: &str = "sk-model-key-77d2";

fn route(api: ModelApi, upstream: &str) -> ModelRoute {
    ModelRoute {
        api,
        upstream: upstream.to_owned(),
        credential: None,
    }
}

/// The routes the fuzz target picks from with its first byte: bit 0 the Anthropic route, bit 1
/// the OpenAI one (whose base has a path).
fn fuzz_routes(pick: u8) -> Vec<ModelRoute> {
    let mut routes = Vec::new();
    if pick & 1 != 0 {
        routes.push(route(ModelApi::Anthropic, ANTHROPIC_BASE));
    }
    if pick & 2 != 0 {
        routes.push(route(ModelApi::Openai, OPENAI_BASE));
    }
    routes
}

/// What a case is, which routes the plan has, the target, and what it maps to.
type Case<'a> = (
    &'a str,
    &'a [ModelRoute],
    &'a str,
    Result<(ModelApi, String), ModelRefusal>,
);

#[test]
fn request_targets_map_under_the_base_or_are_refused_by_name() {
    use ModelApi::{Anthropic, Openai};
    use ModelRefusal::{BadPath, NotFound};
    let both = fuzz_routes(3);
    let anthropic_only = fuzz_routes(1);
    let ok = |api, url: &str| Ok((api, url.to_owned()));
    let cases: Vec<Case<'_>> = vec![
        (
            "messages",
            &both,
            "/model/anthropic/v1/messages",
            ok(Anthropic, "https://api.anthropic.com/v1/messages"),
        ),
        (
            "a base with a path",
            &both,
            "/model/openai/chat/completions",
            ok(Openai, "http://127.0.0.1:8080/v1/chat/completions"),
        ),
        (
            "the query kept as it is",
            &both,
            "/model/openai/models?limit=10&after=a%2Fb",
            ok(
                Openai,
                "http://127.0.0.1:8080/v1/models?limit=10&after=a%2Fb",
            ),
        ),
        (
            "dots in the query are the query's",
            &both,
            "/model/anthropic/v1/models?next=../../admin",
            ok(
                Anthropic,
                "https://api.anthropic.com/v1/models?next=../../admin",
            ),
        ),
        (
            "an empty query kept",
            &both,
            "/model/openai/models?",
            ok(Openai, "http://127.0.0.1:8080/v1/models?"),
        ),
        (
            "a trailing slash kept",
            &both,
            "/model/openai/models/",
            ok(Openai, "http://127.0.0.1:8080/v1/models/"),
        ),
        (
            "dots inside a segment",
            &both,
            "/model/openai/models/gpt-4.1-mini...",
            ok(Openai, "http://127.0.0.1:8080/v1/models/gpt-4.1-mini..."),
        ),
        (
            "other percent-encodings kept",
            &both,
            "/model/anthropic/v1/a%20b",
            ok(Anthropic, "https://api.anthropic.com/v1/a%20b"),
        ),
        (
            "traversal",
            &both,
            "/model/anthropic/v1/../../admin",
            Err(BadPath),
        ),
        (
            "traversal at the end",
            &both,
            "/model/openai/..",
            Err(BadPath),
        ),
        (
            "a dot segment",
            &both,
            "/model/anthropic/./v1/messages",
            Err(BadPath),
        ),
        (
            "encoded traversal",
            &both,
            "/model/openai/%2e%2e/admin",
            Err(BadPath),
        ),
        (
            "encoded traversal, upper case",
            &both,
            "/model/openai/%2E%2E/admin",
            Err(BadPath),
        ),
        (
            "half-encoded traversal",
            &both,
            "/model/openai/.%2e/admin",
            Err(BadPath),
        ),
        (
            "an encoded dot inside a segment",
            &both,
            "/model/openai/a%2Eb",
            Err(BadPath),
        ),
        (
            "an encoded slash",
            &both,
            "/model/openai/a%2F..%2Fadmin",
            Err(BadPath),
        ),
        (
            "an encoded slash, lower case",
            &both,
            "/model/openai/a%2fb",
            Err(BadPath),
        ),
        (
            "an encoded backslash",
            &both,
            "/model/openai/..%5Cadmin",
            Err(BadPath),
        ),
        (
            "an encoded backslash, lower case",
            &both,
            "/model/openai/..%5cadmin",
            Err(BadPath),
        ),
        (
            "a backslash",
            &both,
            "/model/openai/..\\admin",
            Err(BadPath),
        ),
        (
            "an empty segment",
            &both,
            "/model/openai//admin",
            Err(BadPath),
        ),
        ("an empty rest", &both, "/model/openai/", Err(BadPath)),
        ("no rest", &both, "/model/openai", Err(BadPath)),
        (
            "no rest, a query",
            &both,
            "/model/anthropic?x=1",
            Err(BadPath),
        ),
        ("a space", &both, "/model/anthropic/v1/a b", Err(BadPath)),
        (
            "a tab that would join two dots",
            &both,
            "/model/anthropic/.\t./x",
            Err(BadPath),
        ),
        (
            "a control byte in the query",
            &both,
            "/model/anthropic/v1?\u{1b}",
            Err(BadPath),
        ),
        (
            "a non-ASCII character",
            &both,
            "/model/anthropic/v1/caf\u{e9}",
            Err(BadPath),
        ),
        (
            "a fragment",
            &both,
            "/model/anthropic/v1/messages#x",
            Err(BadPath),
        ),
        (
            "an unknown api",
            &both,
            "/model/gemini/v1/models",
            Err(NotFound),
        ),
        (
            "an api in upper case",
            &both,
            "/model/Anthropic/v1/messages",
            Err(NotFound),
        ),
        (
            "an encoded api",
            &both,
            "/model/%61nthropic/v1/messages",
            Err(NotFound),
        ),
        (
            "a route not in the plan",
            &anthropic_only,
            "/model/openai/models",
            Err(NotFound),
        ),
        (
            "a traversal of a route not in the plan",
            &anthropic_only,
            "/model/openai/..",
            Err(NotFound),
        ),
        ("no api", &both, "/model/", Err(NotFound)),
        ("the prefix alone", &both, "/model", Err(NotFound)),
        (
            "an empty api segment",
            &both,
            "/model//anthropic/v1",
            Err(NotFound),
        ),
        (
            "a longer first segment",
            &both,
            "/models/anthropic/v1",
            Err(NotFound),
        ),
        ("the MCP path", &both, "/mcp", Err(NotFound)),
        (
            "no routes",
            &[],
            "/model/anthropic/v1/messages",
            Err(NotFound),
        ),
    ];
    for (what, routes, target, want) in cases {
        assert_eq!(route_target(target, routes), want, "{what}: {target:?}");
    }
}

#[test]
fn the_api_named_is_read_from_the_first_segment_alone() {
    let cases = [
        ("/model/anthropic/v1/messages", Some(ModelApi::Anthropic)),
        ("/model/openai", Some(ModelApi::Openai)),
        ("/model/openai?x=1", Some(ModelApi::Openai)),
        ("/model/openai/../x", Some(ModelApi::Openai)),
        ("/model/gemini/v1", None),
        ("/model/", None),
        ("/model", None),
        ("/modelx/openai", None),
        ("/mcp", None),
    ];
    for (path, want) in cases {
        assert_eq!(named_api(path), want, "{path}");
    }
}

#[test]
fn every_refusal_has_its_name_and_status() {
    let names: Vec<(&str, u16)> = ModelRefusal::ALL
        .iter()
        .map(|refusal| (refusal.as_str(), refusal.status().as_u16()))
        .collect();
    assert_eq!(
        names,
        [
            ("not_found", 404),
            ("bad_path", 400),
            ("method_not_allowed", 405),
            ("body_too_large", 413),
            ("body_unreadable", 400),
            ("upstream_redirect", 502),
            ("upstream_unreachable", 502),
        ]
    );
}

#[test]
fn each_api_carries_its_key_in_its_own_header_marked_sensitive() {
    let key = Secret::new(KEY.to_owned());
    let (name, value) = key_header(ModelApi::Anthropic, &key).unwrap();
    assert_eq!((name.as_str(), value.to_str().unwrap()), ("x-api-key", KEY));
    assert!(value.is_sensitive());
    let (name, value) = key_header(ModelApi::Openai, &key).unwrap();
    assert_eq!(name, AUTHORIZATION);
    assert_eq!(value.to_str().unwrap(), format!("Bearer {KEY}"));
    assert!(value.is_sensitive());
}

#[test]
fn a_key_no_header_can_carry_or_a_repeated_route_is_refused_without_showing_the_key() {
    for api in ModelApi::ALL {
        let routes = vec![(
            route(api, ANTHROPIC_BASE),
            Some(Secret::new("line\nbreak".to_owned())),
        )];
        let error = ModelDoor::new(routes, turn_log(), Policy::default()).unwrap_err();
        assert!(matches!(error, ModelError::BadKey(got) if got == api));
        assert!(!error.to_string().contains("line"), "{error}");
    }
    let routes = vec![
        (route(ModelApi::Openai, OPENAI_BASE), None),
        (route(ModelApi::Openai, ANTHROPIC_BASE), None),
    ];
    assert!(matches!(
        ModelDoor::new(routes, turn_log(), Policy::default()),
        Err(ModelError::RouteRepeated(ModelApi::Openai))
    ));
    let routes = vec![(
        route(ModelApi::Anthropic, ANTHROPIC_BASE),
        Some(Secret::new(KEY.to_owned())),
    )];
    let door = ModelDoor::new(routes, turn_log(), Policy::default()).unwrap();
    let shown = format!("{door:?}");
    assert!(
        !shown.contains(KEY) && shown.contains("anthropic"),
        "{shown}"
    );
}

/// What a case is, the policy, the resolver's answers (each on port 443), and the addresses
/// kept, in order, or what the refusal says in its parentheses.
type Answers<'a> = (
    &'a str,
    Policy,
    &'a [&'a str],
    Result<&'a [&'a str], &'a str>,
);

#[test]
fn only_public_answers_are_kept_in_order_and_a_refusal_names_its_reasons() {
    let default = Policy::default();
    let lab = Policy {
        allow_benchmark_range: true,
    };
    let cases: Vec<Answers<'_>> = vec![
        (
            "loopback v4",
            default,
            &["127.0.0.1"],
            Err("1 refused: loopback"),
        ),
        ("loopback v6", default, &["::1"], Err("1 refused: loopback")),
        (
            "loopback v4 and v6, the reason named once",
            default,
            &["127.0.0.1", "::1"],
            Err("2 refused: loopback"),
        ),
        (
            "IPv4-mapped loopback",
            default,
            &["::ffff:127.0.0.1"],
            Err("1 refused: loopback"),
        ),
        (
            "a private 10/8 address",
            default,
            &["10.0.0.7"],
            Err("1 refused: private"),
        ),
        (
            "private and loopback, both named",
            default,
            &["10.0.0.7", "127.0.0.1"],
            Err("2 refused: loopback, private"),
        ),
        (
            "a mix keeps only the public ones, in order",
            default,
            &[
                "10.0.0.7",
                "93.184.216.34",
                "::1",
                "2606:4700::1111",
                "127.0.0.1",
                "1.1.1.1",
            ],
            Ok(&["93.184.216.34", "2606:4700::1111", "1.1.1.1"]),
        ),
        (
            "the benchmark range under the default policy",
            default,
            &["198.18.0.10"],
            Err("1 refused: benchmarking"),
        ),
        (
            "the benchmark range allowed",
            lab,
            &["198.18.0.10", "198.19.255.1"],
            Ok(&["198.18.0.10", "198.19.255.1"]),
        ),
        (
            "the benchmark range allowed, loopback still refused",
            lab,
            &["127.0.0.1", "198.18.0.10"],
            Ok(&["198.18.0.10"]),
        ),
        (
            "loopback alone with the benchmark range allowed",
            lab,
            &["127.0.0.1"],
            Err("1 refused: loopback"),
        ),
        ("no answer at all", default, &[], Err("it has none at all")),
    ];
    let at = |text: &&str| SocketAddr::new(text.parse().unwrap(), 443);
    for (what, policy, answers, want) in cases {
        let got = PublicOnly { policy }.keep_public("llm.example.com", answers.iter().map(at));
        match (got, want) {
            (Ok(kept), Ok(want)) => {
                assert_eq!(kept, want.iter().map(at).collect::<Vec<_>>(), "{what}")
            }
            (Err(refusal), Err(want)) => assert_eq!(
                refusal.to_string(),
                format!("llm.example.com has no public address ({want})"),
                "{what}"
            ),
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_fuzz_seeds_decide_as_their_names_say() {
    for (name, seed) in crate::fuzz_seeds("model_route") {
        let (pick, target) = seed.split_first().expect("a routes byte");
        let target = std::str::from_utf8(target).expect("a UTF-8 seed");
        let routes = fuzz_routes(*pick);
        let decided = route_target(target, &routes);
        if name.starts_with("ok-") {
            let (api, url) = decided.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let base = &routes.iter().find(|r| r.api == api).unwrap().upstream;
            assert!(url.starts_with(&format!("{base}/")), "{name}: {url}");
        } else if name.starts_with("not-found-") {
            assert_eq!(decided, Err(ModelRefusal::NotFound), "{name}");
        } else if name.starts_with("bad-path-") {
            assert_eq!(decided, Err(ModelRefusal::BadPath), "{name}");
        } else {
            panic!("a seed with no expectation: {name}");
        }
    }
}

/// Path pieces that matter to a URL parser, and plain ones.
fn piece() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(vec![
        "", ".", "..", "...", ".a", "a.", "%2e", "%2E", "%2e%2e", ".%2e", "%2f", "%2F", "%5c",
        "%5C", "%252e", "%", "%2", "\\", "/", "?", "#", "\t", "\n", " ", "\u{e9}", "v1",
        "messages", "a", ";", "@", ":", "x=..",
    ])
}

proptest! {
    /// Whatever is accepted stays below the route's base path once parsed as the client parses
    /// it (reqwest's URL is the WHATWG parser, which resolves dot segments, encoded dots and
    /// backslashes), on the route's own host and port.
    #[test]
    fn an_accepted_target_stays_below_the_base_path(
        api in proptest::sample::select(vec!["anthropic", "openai"]),
        pieces in proptest::collection::vec(piece(), 0..8),
    ) {
        let target = format!("/model/{api}/{}", pieces.concat());
        let routes = fuzz_routes(3);
        if let Ok((api, url)) = route_target(&target, &routes) {
            let base = &routes.iter().find(|r| r.api == api).unwrap().upstream;
            let base = reqwest::Url::parse(base).unwrap();
            let parsed = reqwest::Url::parse(&url).unwrap();
            prop_assert_eq!(parsed.host_str(), base.host_str());
            prop_assert_eq!(parsed.port_or_known_default(), base.port_or_known_default());
            let below = format!("{}/", base.path().trim_end_matches('/'));
            prop_assert!(parsed.path().starts_with(&below), "{} -> {}", target, parsed);
            prop_assert!(!parsed.path().split('/').any(|s| s == ".."), "{}", parsed);
        }
    }
}

// === Over the socket ===

struct Relay {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    door: Arc<ModelDoor>,
}

fn turn_log() -> Arc<DecisionLog> {
    Arc::new(DecisionLog::new(DoorName::Turn))
}

/// Both relays on one socket, as the service serves them: the MCP relay's upstream is nowhere
/// (nothing here goes to it), the model relay's routes are `routes`, each with its key.
fn start(routes: Vec<(ModelRoute, Option<&str>)>) -> Relay {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mcp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = turn_log();
    let mcp = Arc::new(McpDoor::new("http://127.0.0.1:9/mcp", None, Arc::clone(&log)).unwrap());
    let routes = routes
        .into_iter()
        .map(|(route, key)| (route, key.map(|key| Secret::new(key.to_owned()))))
        .collect();
    let door = Arc::new(ModelDoor::new(routes, log, Policy::default()).unwrap());
    let relays = Relays {
        mcp,
        model: Some(Arc::clone(&door)),
    };
    tokio::spawn(serve(listener, relays));
    Relay {
        _dir: dir,
        socket,
        door,
    }
}

/// A provider stand-in, and both relays with one route to it: `api` below `base` (`""` or
/// `/v1`), with `key` when there is one.
async fn one_route(api: ModelApi, base: &str, key: Option<&str>) -> (ModelUpstream, Relay) {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = start(vec![(route(api, &upstream.base(base)), key)]);
    (upstream, relay)
}

fn lines(door: &ModelDoor) -> Vec<String> {
    door.log.lines()
}

#[tokio::test]
async fn only_get_and_post_are_relayed_and_nothing_else_goes_upstream() {
    let (upstream, relay) = one_route(ModelApi::Openai, "/v1", Some(KEY)).await;
    for method in ["PUT", "DELETE", "PATCH", "OPTIONS"] {
        let response = send(&relay.socket, method, "/model/openai/models", &[], b"").await;
        assert_eq!(response.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(response.header("allow"), ["GET, POST"]);
        let text = response.text().await;
        assert!(text.contains(r#""reason":"method_not_allowed""#), "{text}");
    }
    assert!(upstream.seen().is_empty());
    assert!(lines(&relay.door).contains(
        &"door=turn host=model verdict=refused reason=PUT /model/openai method_not_allowed"
            .to_owned()
    ));
}

#[tokio::test]
async fn an_openai_route_gets_a_bearer_key_and_a_get_carries_no_body() {
    let (upstream, relay) = one_route(ModelApi::Openai, "/v1", Some(KEY)).await;
    let response = send(
        &relay.socket,
        "GET",
        "/model/openai/models?limit=5",
        &[
            ("authorization", "Bearer placeholder"),
            ("user-agent", "opencode/1.0"),
            ("openai-organization", "org-agent"),
        ],
        b"ignored",
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let text = response.text().await;
    assert!(!text.contains(KEY), "{text}");
    let seen = &upstream.seen()[0];
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("GET", "/v1/models?limit=5")
    );
    assert_eq!(
        seen.header("authorization"),
        [format!("Bearer {KEY}").as_str()]
    );
    assert!(seen.header("x-api-key").is_empty());
    assert!(seen.header("openai-organization").is_empty());
    assert_eq!(seen.header("user-agent"), ["opencode/1.0"]);
    assert!(seen.body.is_empty());
    assert_eq!(
        lines(&relay.door),
        ["door=turn host=model verdict=relayed reason=GET /model/openai 200"]
    );
}

#[tokio::test]
async fn the_status_and_the_allowed_response_headers_pass_through() {
    let (_upstream, relay) = one_route(ModelApi::Anthropic, "", Some(KEY)).await;
    let response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/status/429",
        &[("content-type", "application/json")],
        b"{}",
    )
    .await;
    assert_eq!(response.status, StatusCode::TOO_MANY_REQUESTS);
    let mut names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    names.retain(|n| !matches!(*n, "date" | "transfer-encoding" | "content-length"));
    names.sort();
    assert_eq!(names, PASSED_BACK);
    assert_eq!(response.header("retry-after"), ["1"]);
    assert!(lines(&relay.door).contains(
        &"door=turn host=model verdict=relayed reason=POST /model/anthropic 429".to_owned()
    ));
}

#[tokio::test]
async fn a_route_without_a_credential_adds_no_key() {
    let (upstream, relay) = one_route(ModelApi::Anthropic, "", None).await;
    let response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/messages",
        &[("x-api-key", "placeholder")],
        b"{}",
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let seen = &upstream.seen()[0];
    assert!(seen.header("x-api-key").is_empty());
    assert!(seen.header("authorization").is_empty());
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_bad_gateway() {
    let addr = mcp::closed_port();
    let relay = start(vec![(
        route(ModelApi::Openai, &format!("http://{addr}/v1")),
        Some(KEY),
    )]);
    assert_unreachable(&relay, "/model/openai/chat/completions", "openai").await;
}

/// A POST to `path` is answered 502 `upstream_unreachable`, the one decision a refusal of
/// `api`'s route.
async fn assert_unreachable(relay: &Relay, path: &str, api: &str) {
    let response = send(&relay.socket, "POST", path, &[], b"{}").await;
    assert_eq!(response.status, StatusCode::BAD_GATEWAY);
    let text = response.text().await;
    assert!(
        text.contains(r#""reason":"upstream_unreachable""#),
        "{text}"
    );
    assert_eq!(
        lines(&relay.door),
        [format!(
            "door=turn host=model verdict=refused reason=POST /model/{api} upstream_unreachable"
        )]
    );
}

/// A route whose host resolves to loopback alone (`localhost`, which no plan may hold but the
/// resolver is the relay's own guard): the stand-in listening there, reached at once were it
/// dialled, sees nothing; the agent gets a 502, recorded as a refusal; and the client's error,
/// as the relay logs it, says why, without the query.
#[tokio::test]
async fn a_host_resolving_to_loopback_alone_is_never_dialled() {
    let upstream = ModelUpstream::on_loopback().await;
    let base = format!("http://localhost:{}", upstream.addr.port());
    let relay = start(vec![(route(ModelApi::Anthropic, &base), Some(KEY))]);
    assert_unreachable(&relay, "/model/anthropic/v1/messages", "anthropic").await;
    let error = relay
        .door
        .client
        .get(format!("{base}/v1/models?k=secret"))
        .send()
        .await
        .unwrap_err();
    let logged = relay::failure(error);
    assert!(
        logged.contains("localhost has no public address (") && logged.contains("loopback)"),
        "{logged}"
    );
    assert!(!logged.contains("secret"), "{logged}");
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
}

#[tokio::test]
async fn a_path_naming_no_known_api_is_recorded_without_it() {
    let (upstream, relay) = one_route(ModelApi::Anthropic, "", Some(KEY)).await;
    let response = send(
        &relay.socket,
        "GET",
        "/model/x%0a-injected/v1?k=secret",
        &[],
        b"",
    )
    .await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    let response = send(&relay.socket, "GET", "/model/openai/v1/models", &[], b"").await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(
        lines(&relay.door),
        [
            "door=turn host=model verdict=refused reason=GET /model not_found",
            "door=turn host=model verdict=refused reason=GET /model/openai not_found",
        ]
    );
    assert!(upstream.seen().is_empty());
}

/// A run that opens many large POSTs and stalls them holds at most [`MAX_BODIES_HELD`] bodies:
/// the next POST waits for a permit instead of growing the gate, and goes through once a
/// stalled one is gone.
#[tokio::test]
async fn stalled_bodies_are_held_a_few_at_a_time() {
    let (upstream, relay) = one_route(ModelApi::Anthropic, "", Some(KEY)).await;
    mcp::check_bodies_held(
        &relay.socket,
        "/model/anthropic/v1/messages",
        MAX_REQUEST_BODY,
        MAX_BODIES_HELD,
        || relay.door.bodies.available_permits(),
        || upstream.seen().len(),
    )
    .await;
}
