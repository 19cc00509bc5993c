//! The model relay: request targets mapped below each route's base path or refused by name
//! (named cases, every endpoint of each API, the fuzz seeds, and generated paths held to the
//! URL parser the client uses), the key header of each API, the resolver's answers kept only
//! when public, and, over a real unix socket against a provider stand-in on loopback, what the
//! socket tests of the MCP relay do not already show for this one: the 405 and the one
//! decision of any other method, an endpoint not relayed, the bearer key, the status and
//! header allowlist, an unreachable upstream, a host resolving to loopback never dialled, and
//! the bodies held.

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
/// A gateway telling accounts, gateways and providers apart by path (Cloudflare AI Gateway's
/// shape).
const GATEWAY_BASE: &str = "https://gateway.example.com/v1/acct/gw/anthropic";
const OPENAI_BASE: &str = "http://127.0.0.1:8080/v1";
/// An OpenAI-compatible base without a path (a LiteLLM proxy's, say).
const OPENAI_ORIGIN_BASE: &str = "https://llm.example.org";
const KEY: &str = "sk-model-key-77d2";

fn route(api: ModelApi, upstream: &str) -> ModelRoute {
    ModelRoute {
        api,
        upstream: upstream.to_owned(),
        credential: None,
        model: None,
    }
}

/// The routes the fuzz target picks from with its first byte: bit 0 the Anthropic route, at
/// Anthropic's API or, with bit 2, at a gateway's base with a path; bit 1 the OpenAI one, at a
/// base with the path `/v1` or, with bit 3, at an origin alone.
fn fuzz_routes(pick: u8) -> Vec<ModelRoute> {
    let mut routes = Vec::new();
    if pick & 1 != 0 {
        let base = if pick & 4 != 0 {
            GATEWAY_BASE
        } else {
            ANTHROPIC_BASE
        };
        routes.push(route(ModelApi::Anthropic, base));
    }
    if pick & 2 != 0 {
        let base = if pick & 8 != 0 {
            OPENAI_ORIGIN_BASE
        } else {
            OPENAI_BASE
        };
        routes.push(route(ModelApi::Openai, base));
    }
    routes
}

/// What a case is, which routes the plan has, the request's method and target, and what it
/// maps to.
type Case<'a> = (
    &'a str,
    &'a [ModelRoute],
    &'a str,
    &'a str,
    Result<(ModelApi, String), ModelRefusal>,
);

#[test]
fn request_targets_map_below_the_base_path_or_are_refused_by_name() {
    use ModelApi::{Anthropic, Openai};
    use ModelRefusal::{BadPath, EndpointNotRelayed, MethodNotAllowed, NotFound};
    // Anthropic at its API, OpenAI below `/v1`.
    let both = fuzz_routes(3);
    let anthropic_only = fuzz_routes(1);
    // Anthropic at the gateway, OpenAI at an origin alone.
    let gateway = fuzz_routes(1 | 2 | 4 | 8);
    let ok = |api, url: &str| Ok((api, url.to_owned()));
    let cases: Vec<Case<'_>> = vec![
        // Each endpoint relayed.
        (
            "messages",
            &both,
            "POST",
            "/model/anthropic/v1/messages",
            ok(Anthropic, "https://api.anthropic.com/v1/messages"),
        ),
        (
            "messages with Claude Code's query",
            &both,
            "POST",
            "/model/anthropic/v1/messages?beta=true",
            ok(Anthropic, "https://api.anthropic.com/v1/messages?beta=true"),
        ),
        (
            "token counts",
            &both,
            "POST",
            "/model/anthropic/v1/messages/count_tokens?beta=true",
            ok(
                Anthropic,
                "https://api.anthropic.com/v1/messages/count_tokens?beta=true",
            ),
        ),
        (
            "Anthropic's models",
            &both,
            "GET",
            "/model/anthropic/v1/models",
            ok(Anthropic, "https://api.anthropic.com/v1/models"),
        ),
        (
            "one of Anthropic's models",
            &both,
            "GET",
            "/model/anthropic/v1/models/claude-sonnet-4-5",
            ok(
                Anthropic,
                "https://api.anthropic.com/v1/models/claude-sonnet-4-5",
            ),
        ),
        (
            "chat completions below the base path",
            &both,
            "POST",
            "/model/openai/v1/chat/completions",
            ok(Openai, "http://127.0.0.1:8080/v1/chat/completions"),
        ),
        (
            "v1 chat completions below the base path",
            &both,
            "POST",
            "/model/openai/v1/v1/chat/completions",
            ok(Openai, "http://127.0.0.1:8080/v1/v1/chat/completions"),
        ),
        (
            "chat completions at an origin",
            &gateway,
            "POST",
            "/model/openai/chat/completions",
            ok(Openai, "https://llm.example.org/chat/completions"),
        ),
        (
            "atelier-agent's v1 chat completions at an origin",
            &gateway,
            "POST",
            "/model/openai/v1/chat/completions",
            ok(Openai, "https://llm.example.org/v1/chat/completions"),
        ),
        (
            "OpenAI's models below the base path",
            &both,
            "GET",
            "/model/openai/v1/models",
            ok(Openai, "http://127.0.0.1:8080/v1/models"),
        ),
        (
            "v1 models at an origin",
            &gateway,
            "GET",
            "/model/openai/v1/models",
            ok(Openai, "https://llm.example.org/v1/models"),
        ),
        (
            "one of OpenAI's models below the base path",
            &both,
            "GET",
            "/model/openai/v1/models/gpt-4.1-mini",
            ok(Openai, "http://127.0.0.1:8080/v1/models/gpt-4.1-mini"),
        ),
        (
            "one of the v1 models at an origin",
            &gateway,
            "GET",
            "/model/openai/v1/models/gpt-4.1-mini",
            ok(Openai, "https://llm.example.org/v1/models/gpt-4.1-mini"),
        ),
        (
            "the gateway's own route",
            &gateway,
            "POST",
            "/model/anthropic/v1/acct/gw/anthropic/v1/messages?beta=true",
            ok(
                Anthropic,
                "https://gateway.example.com/v1/acct/gw/anthropic/v1/messages?beta=true",
            ),
        ),
        (
            "the query kept as it is",
            &both,
            "GET",
            "/model/openai/v1/models?limit=10&after=a%2Fb",
            ok(
                Openai,
                "http://127.0.0.1:8080/v1/models?limit=10&after=a%2Fb",
            ),
        ),
        (
            "dots in the query are the query's",
            &both,
            "GET",
            "/model/anthropic/v1/models?next=../../admin",
            ok(
                Anthropic,
                "https://api.anthropic.com/v1/models?next=../../admin",
            ),
        ),
        (
            "an empty query kept",
            &both,
            "GET",
            "/model/openai/v1/models?",
            ok(Openai, "http://127.0.0.1:8080/v1/models?"),
        ),
        (
            "dots inside a segment",
            &both,
            "GET",
            "/model/openai/v1/models/gpt-4.1-mini...",
            ok(Openai, "http://127.0.0.1:8080/v1/models/gpt-4.1-mini..."),
        ),
        (
            "other percent-encodings kept",
            &both,
            "GET",
            "/model/anthropic/v1/models/a%20b",
            ok(Anthropic, "https://api.anthropic.com/v1/models/a%20b"),
        ),
        // The base path.
        (
            "outside the base path",
            &both,
            "POST",
            "/model/openai/chat/completions",
            Err(BadPath),
        ),
        (
            "a prefix of a segment is not the base path",
            &both,
            "GET",
            "/model/openai/v1x/models",
            Err(BadPath),
        ),
        (
            "the base path alone",
            &both,
            "GET",
            "/model/openai/v1",
            Err(BadPath),
        ),
        (
            "the base path and a slash",
            &both,
            "GET",
            "/model/openai/v1/",
            Err(BadPath),
        ),
        (
            "the base path in another case",
            &both,
            "GET",
            "/model/openai/V1/models",
            Err(BadPath),
        ),
        (
            "the base path percent-encoded",
            &both,
            "GET",
            "/model/openai/%761/models",
            Err(BadPath),
        ),
        (
            "a key-minting endpoint outside the base path",
            &both,
            "POST",
            "/model/openai/key/generate",
            Err(BadPath),
        ),
        (
            "another account on the gateway",
            &gateway,
            "POST",
            "/model/anthropic/v1/other/gw/anthropic/v1/messages",
            Err(BadPath),
        ),
        (
            "another provider on the gateway",
            &gateway,
            "POST",
            "/model/anthropic/v1/acct/gw/openai/chat/completions",
            Err(BadPath),
        ),
        (
            "the gateway's base path cut short",
            &gateway,
            "POST",
            "/model/anthropic/v1/acct/gw/v1/messages",
            Err(BadPath),
        ),
        (
            "the gateway's origin",
            &gateway,
            "POST",
            "/model/anthropic/v1/messages",
            Err(BadPath),
        ),
        // Endpoints not relayed.
        (
            "message batches",
            &both,
            "POST",
            "/model/anthropic/v1/messages/batches",
            Err(EndpointNotRelayed),
        ),
        (
            "a batch's results",
            &both,
            "GET",
            "/model/anthropic/v1/messages/batches/msgbatch_01/results",
            Err(EndpointNotRelayed),
        ),
        (
            "files",
            &both,
            "POST",
            "/model/anthropic/v1/files",
            Err(EndpointNotRelayed),
        ),
        (
            "the files listed",
            &both,
            "GET",
            "/model/anthropic/v1/files",
            Err(EndpointNotRelayed),
        ),
        (
            "the legacy completions",
            &both,
            "POST",
            "/model/anthropic/v1/complete",
            Err(EndpointNotRelayed),
        ),
        (
            "a GET of messages",
            &both,
            "GET",
            "/model/anthropic/v1/messages",
            Err(EndpointNotRelayed),
        ),
        (
            "a POST of models",
            &both,
            "POST",
            "/model/anthropic/v1/models",
            Err(EndpointNotRelayed),
        ),
        (
            "Anthropic's models without v1",
            &both,
            "GET",
            "/model/anthropic/models",
            Err(EndpointNotRelayed),
        ),
        (
            "OpenAI's chat completions on the Anthropic route",
            &both,
            "POST",
            "/model/anthropic/v1/chat/completions",
            Err(EndpointNotRelayed),
        ),
        (
            "a gateway's key minting",
            &gateway,
            "POST",
            "/model/openai/key/generate",
            Err(EndpointNotRelayed),
        ),
        (
            "a gateway's key minting below the base path",
            &both,
            "POST",
            "/model/openai/v1/key/generate",
            Err(EndpointNotRelayed),
        ),
        (
            "OpenAI's batches",
            &both,
            "POST",
            "/model/openai/v1/batches",
            Err(EndpointNotRelayed),
        ),
        (
            "OpenAI's files",
            &gateway,
            "POST",
            "/model/openai/v1/files",
            Err(EndpointNotRelayed),
        ),
        (
            "OpenAI's responses",
            &both,
            "POST",
            "/model/openai/v1/responses",
            Err(EndpointNotRelayed),
        ),
        (
            "Anthropic's messages on the OpenAI route",
            &gateway,
            "POST",
            "/model/openai/v1/messages",
            Err(EndpointNotRelayed),
        ),
        (
            "a model id of two segments",
            &both,
            "GET",
            "/model/openai/v1/models/org/model",
            Err(EndpointNotRelayed),
        ),
        (
            "models with a trailing slash",
            &both,
            "GET",
            "/model/openai/v1/models/",
            Err(EndpointNotRelayed),
        ),
        (
            "a model deleted",
            &both,
            "DELETE",
            "/model/openai/v1/models/ft-1",
            Err(MethodNotAllowed),
        ),
        // Methods, after the path.
        (
            "PUT",
            &both,
            "PUT",
            "/model/anthropic/v1/messages",
            Err(MethodNotAllowed),
        ),
        (
            "a lower-case post",
            &both,
            "post",
            "/model/anthropic/v1/messages",
            Err(MethodNotAllowed),
        ),
        (
            "an extension method",
            &both,
            "BREW",
            "/model/anthropic/v1/messages",
            Err(MethodNotAllowed),
        ),
        (
            "an extension method on an endpoint not relayed",
            &both,
            "BREW",
            "/model/anthropic/v1/files",
            Err(MethodNotAllowed),
        ),
        (
            "PUT outside the base path",
            &both,
            "PUT",
            "/model/openai/models",
            Err(BadPath),
        ),
        (
            "PUT of an unknown api",
            &both,
            "PUT",
            "/model/gemini/v1/models",
            Err(NotFound),
        ),
        // Paths that could leave the base path.
        (
            "traversal",
            &both,
            "POST",
            "/model/anthropic/v1/../../admin",
            Err(BadPath),
        ),
        (
            "traversal out of the base path and back",
            &both,
            "POST",
            "/model/openai/v1/../v1/chat/completions",
            Err(BadPath),
        ),
        (
            "traversal at the end",
            &both,
            "GET",
            "/model/openai/..",
            Err(BadPath),
        ),
        (
            "a dot segment",
            &both,
            "POST",
            "/model/anthropic/./v1/messages",
            Err(BadPath),
        ),
        (
            "encoded traversal",
            &both,
            "GET",
            "/model/openai/v1/%2e%2e/admin",
            Err(BadPath),
        ),
        (
            "encoded traversal, upper case",
            &both,
            "GET",
            "/model/openai/v1/%2E%2E/admin",
            Err(BadPath),
        ),
        (
            "half-encoded traversal",
            &both,
            "GET",
            "/model/openai/v1/.%2e/admin",
            Err(BadPath),
        ),
        (
            "an encoded dot inside a segment",
            &both,
            "GET",
            "/model/openai/v1/models/a%2Eb",
            Err(BadPath),
        ),
        (
            "an encoded slash",
            &both,
            "GET",
            "/model/openai/v1/models/a%2F..%2Fadmin",
            Err(BadPath),
        ),
        (
            "an encoded slash, lower case",
            &both,
            "GET",
            "/model/openai/v1/models/a%2fb",
            Err(BadPath),
        ),
        (
            "an encoded backslash",
            &both,
            "GET",
            "/model/openai/v1/..%5Cadmin",
            Err(BadPath),
        ),
        (
            "an encoded backslash, lower case",
            &both,
            "GET",
            "/model/openai/v1/..%5cadmin",
            Err(BadPath),
        ),
        (
            "a backslash",
            &both,
            "GET",
            "/model/openai/v1/..\\admin",
            Err(BadPath),
        ),
        (
            "an empty segment",
            &both,
            "GET",
            "/model/openai/v1//models",
            Err(BadPath),
        ),
        (
            "an empty rest",
            &both,
            "GET",
            "/model/openai/",
            Err(BadPath),
        ),
        ("no rest", &both, "GET", "/model/openai", Err(BadPath)),
        (
            "no rest, a query",
            &both,
            "POST",
            "/model/anthropic?x=1",
            Err(BadPath),
        ),
        (
            "a space",
            &both,
            "GET",
            "/model/anthropic/v1/models/a b",
            Err(BadPath),
        ),
        (
            "a tab that would join two dots",
            &both,
            "GET",
            "/model/anthropic/.\t./x",
            Err(BadPath),
        ),
        (
            "a control byte in the query",
            &both,
            "GET",
            "/model/anthropic/v1/models?\u{1b}",
            Err(BadPath),
        ),
        (
            "a non-ASCII character",
            &both,
            "GET",
            "/model/anthropic/v1/models/caf\u{e9}",
            Err(BadPath),
        ),
        (
            "a fragment",
            &both,
            "POST",
            "/model/anthropic/v1/messages#x",
            Err(BadPath),
        ),
        // No route.
        (
            "an unknown api",
            &both,
            "GET",
            "/model/gemini/v1/models",
            Err(NotFound),
        ),
        (
            "an api in upper case",
            &both,
            "POST",
            "/model/Anthropic/v1/messages",
            Err(NotFound),
        ),
        (
            "an encoded api",
            &both,
            "POST",
            "/model/%61nthropic/v1/messages",
            Err(NotFound),
        ),
        (
            "a route not in the plan",
            &anthropic_only,
            "GET",
            "/model/openai/v1/models",
            Err(NotFound),
        ),
        (
            "a traversal of a route not in the plan",
            &anthropic_only,
            "GET",
            "/model/openai/..",
            Err(NotFound),
        ),
        ("no api", &both, "GET", "/model/", Err(NotFound)),
        ("the prefix alone", &both, "GET", "/model", Err(NotFound)),
        (
            "an empty api segment",
            &both,
            "GET",
            "/model//anthropic/v1/models",
            Err(NotFound),
        ),
        (
            "a longer first segment",
            &both,
            "GET",
            "/models/anthropic/v1/models",
            Err(NotFound),
        ),
        ("the MCP path", &both, "POST", "/mcp", Err(NotFound)),
        (
            "no routes",
            &[],
            "POST",
            "/model/anthropic/v1/messages",
            Err(NotFound),
        ),
    ];
    for (what, routes, method, target, want) in cases {
        assert_eq!(
            route_target(method, target, routes),
            want,
            "{what}: {method} {target:?}"
        );
    }
}

/// Every endpoint of each API is relayed with its own method, below each base the routes may
/// have, and refused with the other method, or with anything appended.
#[test]
fn each_endpoint_is_relayed_with_its_method_alone() {
    for pick in [3, 1 | 2 | 4 | 8] {
        let routes = fuzz_routes(pick);
        for route in &routes {
            let api = route.api;
            let (_, base_path) = split_origin(&route.upstream);
            for &(method, pattern) in endpoints(api) {
                let endpoint = pattern.replace('*', "model-1");
                let target = format!("/model/{}{base_path}/{endpoint}", api.as_str());
                let want = format!("{}/{endpoint}", route.upstream);
                assert_eq!(
                    route_target(method, &target, &routes),
                    Ok((api, want)),
                    "{method} {target}"
                );
                let other = if method == "GET" { "POST" } else { "GET" };
                assert_eq!(
                    route_target(other, &target, &routes),
                    Err(ModelRefusal::EndpointNotRelayed),
                    "{other} {target}"
                );
                // A longer last segment is still one model id.
                let longer = (!pattern.ends_with('*')).then_some("x");
                for extra in ["/", "/x/y"].into_iter().chain(longer) {
                    let target = format!("{target}{extra}");
                    assert_eq!(
                        route_target(method, &target, &routes),
                        Err(ModelRefusal::EndpointNotRelayed),
                        "{method} {target}"
                    );
                }
            }
        }
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
fn the_betas_of_server_side_features_are_dropped() {
    let cases: [(&str, &str, Option<&str>); 6] = [
        ("client betas pass", "claude-code-20250219,interleaved-thinking-2025-05-14", Some("claude-code-20250219, interleaved-thinking-2025-05-14")),
        (
            "server features dropped, the rest in order",
            "mcp-client-2025-04-04, fine-grained-tool-streaming-2025-05-14,code-execution-2025-08-25,web-fetch-2025-09-10,files-api-2025-04-14,skills-2025-10-02,web-search-2025-03-05,context-1m-2025-08-07",
            Some("fine-grained-tool-streaming-2025-05-14, context-1m-2025-08-07"),
        ),
        ("in another case", "MCP-Client-2025-11-20", None),
        ("nothing left", "files-api-2025-04-14", None),
        ("empty entries", " , ,", None),
        ("not visible ASCII", "caf\u{e9}-beta", None),
    ];
    for (what, value, want) in cases {
        let value = match HeaderValue::from_str(value) {
            Ok(value) => value,
            Err(_) => HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        };
        let kept = kept_betas(&value);
        assert_eq!(kept.as_ref().map(|v| v.to_str().unwrap()), want, "{what}");
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
            ("endpoint_not_relayed", 404),
            ("body_too_large", 413),
            ("body_unreadable", 400),
            ("body_not_json", 400),
            ("provider_tool", 403),
            ("provider_fetch", 403),
            ("model_not_declared", 403),
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

/// The resolver keeps a CONNECT's rule ([`Policy::vet`], whose table is the address module's):
/// the answers pass whole and in order, or the host is refused with its non-public answers
/// named.
#[test]
fn the_resolver_passes_all_answers_in_order_or_refuses_the_host() {
    let at = |text: &str| SocketAddr::new(text.parse().unwrap(), 443);
    let only = PublicOnly {
        policy: Policy::default(),
    };
    let public = ["93.184.216.34", "2606:4700::1111", "1.1.1.1"].map(at);
    assert_eq!(only.vet("llm.example.com", public).unwrap(), public);
    let mixed = ["93.184.216.34", "10.0.0.7", "::1"].map(at);
    assert_eq!(
        only.vet("llm.example.com", mixed).unwrap_err().to_string(),
        "llm.example.com: it resolves to an address that is not public: 10.0.0.7 private, ::1 \
         loopback"
    );
    assert_eq!(
        only.vet("llm.example.com", []).unwrap_err().to_string(),
        "llm.example.com: it resolves to no address"
    );
    let lab = PublicOnly {
        policy: Policy {
            allow_benchmark_range: true,
        },
    };
    let benchmark = [at("198.18.0.10")];
    assert_eq!(lab.vet("llm.lab", benchmark).unwrap(), benchmark);
    assert!(only.vet("llm.lab", benchmark).is_err());
}

/// Each seed is the routes byte, then `<method> <target>`.
#[test]
fn the_fuzz_seeds_decide_as_their_names_say() {
    let refusals = [
        ("not-found-", ModelRefusal::NotFound),
        ("bad-path-", ModelRefusal::BadPath),
        ("method-not-allowed-", ModelRefusal::MethodNotAllowed),
        ("endpoint-not-relayed-", ModelRefusal::EndpointNotRelayed),
    ];
    for (name, seed) in crate::fuzz_seeds("model_route") {
        let (pick, request) = seed.split_first().expect("a routes byte");
        let request = std::str::from_utf8(request).expect("a UTF-8 seed");
        let (method, target) = request.split_once(' ').expect("a method and a target");
        let routes = fuzz_routes(*pick);
        let decided = route_target(method, target, &routes);
        if name.starts_with("ok-") {
            let (api, url) = decided.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let base = &routes.iter().find(|r| r.api == api).unwrap().upstream;
            assert!(url.starts_with(&format!("{base}/")), "{name}: {url}");
        } else if let Some((_, refusal)) =
            refusals.iter().find(|(prefix, _)| name.starts_with(prefix))
        {
            assert_eq!(decided, Err(*refusal), "{name}");
        } else {
            panic!("a seed with no expectation: {name}");
        }
    }
}

/// Path pieces that matter to a URL parser, plain ones, and endpoints.
fn piece() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(vec![
        "",
        ".",
        "..",
        "...",
        ".a",
        "a.",
        "%2e",
        "%2E",
        "%2e%2e",
        ".%2e",
        "%2f",
        "%2F",
        "%5c",
        "%5C",
        "%252e",
        "%",
        "%2",
        "\\",
        "/",
        "?",
        "#",
        "\t",
        "\n",
        " ",
        "\u{e9}",
        "v1",
        "messages",
        "a",
        ";",
        "@",
        ":",
        "x=..",
        "v1/",
        "v1/messages",
        "v1/models/",
        "models",
        "chat/completions",
        "count_tokens",
    ])
}

proptest! {
    /// Whatever is accepted stays below the route's base path once parsed as the client parses
    /// it (reqwest's URL is the WHATWG parser, which resolves dot segments, encoded dots and
    /// backslashes), on the route's own host and port.
    #[test]
    fn an_accepted_target_stays_below_the_base_path(
        pick in proptest::sample::select(vec![3u8, 15]),
        method in proptest::sample::select(vec!["GET", "POST"]),
        api in proptest::sample::select(vec!["anthropic", "openai"]),
        base in proptest::sample::select(vec!["", "/v1", "/v1x", "/v1/acct/gw/anthropic"]),
        pieces in proptest::collection::vec(piece(), 0..8),
    ) {
        let target = format!("/model/{api}{base}/{}", pieces.concat());
        let routes = fuzz_routes(pick);
        if let Ok((api, url)) = route_target(method, &target, &routes) {
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

/// Any other method is a 405, and one decision however many the agent makes up: each
/// distinct decision is kept once, and a run keeps only so many.
#[tokio::test]
async fn only_get_and_post_are_relayed_and_any_other_method_is_one_decision() {
    let (upstream, relay) = one_route(ModelApi::Openai, "/v1", Some(KEY)).await;
    let methods = [
        "PUT",
        "DELETE",
        "PATCH",
        "OPTIONS",
        "HEAD",
        "BREW",
        "X-AGENT-1",
        "X-AGENT-2",
    ];
    for method in methods {
        let response = send(&relay.socket, method, "/model/openai/v1/models", &[], b"").await;
        assert_eq!(response.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(response.header("allow"), ["GET, POST"]);
        if method != "HEAD" {
            let text = response.text().await;
            assert!(text.contains(r#""reason":"method_not_allowed""#), "{text}");
        }
    }
    assert!(upstream.seen().is_empty());
    assert_eq!(
        lines(&relay.door),
        ["door=turn host=model verdict=refused reason=OTHER /model/openai method_not_allowed"]
    );
}

/// The endpoints of the API alone get the key: a batch, a file, a gateway's key minting, a GET
/// of messages are refused by name, with nothing upstream.
#[tokio::test]
async fn an_endpoint_not_relayed_is_refused_and_nothing_goes_upstream() {
    let (upstream, relay) = one_route(ModelApi::Anthropic, "", Some(KEY)).await;
    let refused = [
        ("POST", "/model/anthropic/v1/messages/batches"),
        ("POST", "/model/anthropic/v1/files"),
        ("POST", "/model/anthropic/key/generate"),
        ("GET", "/model/anthropic/v1/messages"),
    ];
    for (method, target) in refused {
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status, StatusCode::NOT_FOUND, "{target}");
        let text = response.text().await;
        assert!(
            text.contains(r#""reason":"endpoint_not_relayed""#)
                && text.contains("only the model API's own endpoints are relayed"),
            "{text}"
        );
    }
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
    assert_eq!(
        lines(&relay.door),
        [
            "door=turn host=model verdict=refused reason=POST /model/anthropic \
             endpoint_not_relayed",
            "door=turn host=model verdict=refused reason=GET /model/anthropic \
             endpoint_not_relayed",
        ]
    );
}

#[tokio::test]
async fn an_openai_route_gets_a_bearer_key_and_a_get_carries_no_body() {
    let (upstream, relay) = one_route(ModelApi::Openai, "/v1", Some(KEY)).await;
    let response = send(
        &relay.socket,
        "GET",
        "/model/openai/v1/models?limit=5",
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
        "/model/anthropic/v1/messages?answer=429",
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

/// A body asking the provider to run a tool of its own or to fetch a URL, or one that cannot
/// be vetted, is refused by name with nothing upstream; one whose tools the agent runs itself
/// goes up byte for byte.
#[tokio::test]
async fn a_body_reaching_past_the_provider_is_refused_and_nothing_goes_upstream() {
    let (upstream, relay) = one_route(ModelApi::Anthropic, "", Some(KEY)).await;
    let refused: [(&str, &[u8], u16, &str); 3] = [
        (
            "/model/anthropic/v1/messages",
            br#"{"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}"#,
            403,
            "provider_tool",
        ),
        (
            "/model/anthropic/v1/messages/count_tokens",
            br#"{"messages":[{"role":"user","content":[{"type":"image",
                "source":{"type":"url","url":"https://example.com/a.png"}}]}]}"#,
            403,
            "provider_fetch",
        ),
        (
            "/model/anthropic/v1/messages",
            b"model=m",
            400,
            "body_not_json",
        ),
    ];
    for (target, body, status, reason) in refused {
        let response = send(&relay.socket, "POST", target, &[], body).await;
        assert_eq!(response.status.as_u16(), status, "{reason}");
        let text = response.text().await;
        assert!(text.contains(&format!(r#""reason":"{reason}""#)), "{text}");
    }
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
    assert_eq!(
        lines(&relay.door),
        [
            "door=turn host=model verdict=refused reason=POST /model/anthropic provider_tool",
            "door=turn host=model verdict=refused reason=POST /model/anthropic provider_fetch",
            "door=turn host=model verdict=refused reason=POST /model/anthropic body_not_json",
        ]
    );
    let body = br#"{"tools":[{"name":"Read","input_schema":{"type":"object"}},
        {"type":"bash_20250124","name":"bash"}]}"#;
    let response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/messages",
        &[],
        body,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(upstream.seen()[0].body, body);
}

/// A route pinning its model (the declared `agent.openai_model`) relays that model alone.
#[tokio::test]
async fn a_route_pinning_its_model_refuses_another() {
    let upstream = ModelUpstream::on_loopback().await;
    let pinned = ModelRoute {
        model: Some("qwen3".to_owned()),
        ..route(ModelApi::Openai, &upstream.base("/v1"))
    };
    let relay = start(vec![(pinned, Some(KEY))]);
    let target = "/model/openai/v1/chat/completions";
    let response = send(
        &relay.socket,
        "POST",
        target,
        &[],
        br#"{"model":"qwen3:online"}"#,
    )
    .await;
    assert_eq!(response.status, StatusCode::FORBIDDEN);
    let text = response.text().await;
    assert!(text.contains(r#""reason":"model_not_declared""#), "{text}");
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
    let body = br#"{"model":"qwen3","messages":[]}"#;
    let response = send(&relay.socket, "POST", target, &[], body).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(upstream.seen()[0].body, body);
    assert_eq!(
        lines(&relay.door),
        [
            "door=turn host=model verdict=refused reason=POST /model/openai model_not_declared",
            "door=turn host=model verdict=relayed reason=POST /model/openai 200",
        ]
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_bad_gateway() {
    let addr = mcp::closed_port();
    let relay = start(vec![(
        route(ModelApi::Openai, &format!("http://{addr}/v1")),
        Some(KEY),
    )]);
    assert_unreachable(&relay, "/model/openai/v1/chat/completions", "openai").await;
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
        logged.contains("localhost: it resolves to an address that is not public: ")
            && logged.contains("loopback"),
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
