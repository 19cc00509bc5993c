//! Fuzzes the model relay's request mapping: a byte picks the plan's routes, the rest is the
//! request's method, a space and its target. No panic; an accepted request is a GET or POST of
//! one of its API's endpoints below its route's base path, mapped to the base's origin with its
//! path as given and its query kept, and what a URL parser (the WHATWG one the relay's client
//! uses) makes of it stays on the base's host and below the base's path; a refusal names why,
//! in the order the relay checks.
#![no_main]

use atelier_gate::model::{route_target, ModelApi, ModelRefusal, ModelRoute};
use libfuzzer_sys::fuzz_target;

const ANTHROPIC_BASE: &str = "https://api.anthropic.com";
/// A gateway telling accounts, gateways and providers apart by path.
const GATEWAY_BASE: &str = "https://gateway.example.com/v1/acct/gw/anthropic";
const OPENAI_BASE: &str = "http://127.0.0.1:8080/v1";
const OPENAI_ORIGIN_BASE: &str = "https://llm.example.org";

/// Bit 0: the Anthropic route, at Anthropic's API or (bit 2) at the gateway's base. Bit 1: the
/// OpenAI route, at a base with the path `/v1` or (bit 3) at an origin alone.
fn routes(pick: u8) -> Vec<ModelRoute> {
    let route = |api, upstream: &str| ModelRoute {
        api,
        upstream: upstream.to_owned(),
        credential: None,
        model: None,
    };
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

/// The endpoints relayed, written out here apart from the gate's table: `*` is one segment.
fn relayed(api: ModelApi, method: &str, endpoint: &str) -> bool {
    let segments: Vec<&str> = endpoint.split('/').collect();
    let id = |at: usize| segments.get(at).is_some_and(|s| !s.is_empty());
    let v1 = usize::from(segments.first() == Some(&"v1"));
    match (api, method) {
        (ModelApi::Anthropic, "POST") => {
            endpoint == "v1/messages" || endpoint == "v1/messages/count_tokens"
        }
        (ModelApi::Anthropic, "GET") => {
            endpoint == "v1/models"
                || (segments.len() == 3 && endpoint.starts_with("v1/models/") && id(2))
        }
        (ModelApi::Openai, "POST") => {
            endpoint == "chat/completions" || endpoint == "v1/chat/completions"
        }
        (ModelApi::Openai, "GET") => {
            segments.get(v1) == Some(&"models")
                && (segments.len() == v1 + 1 || (segments.len() == v1 + 2 && id(v1 + 1)))
        }
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, request)) = data.split_first() else {
        return;
    };
    // Request targets reach the relay as text (hyper's, visible ASCII only), and so do methods.
    let Ok(request) = std::str::from_utf8(request) else {
        return;
    };
    let Some((method, target)) = request.split_once(' ') else {
        return;
    };
    let routes = routes(pick);
    match route_target(method, target, &routes) {
        Ok((api, upstream)) => {
            let base = &routes
                .iter()
                .find(|route| route.api == api)
                .expect("the API of a route")
                .upstream;
            // The target's own path below /model/<api>, then its query, as given, on the
            // base's origin; that path is the base's, then `/` and an endpoint relayed.
            let below = format!("/model/{}/", api.as_str());
            let rest = target.strip_prefix(&below).expect("below its API");
            let base_url = url::Url::parse(base).expect("a base URL");
            let base_path = base_url.path().trim_end_matches('/');
            let origin = base.strip_suffix(base_path).expect("the base ends in its path");
            assert_eq!(upstream, format!("{origin}/{rest}"));
            let path = rest.split('?').next().unwrap_or(rest);
            let endpoint = format!("/{path}");
            let endpoint = endpoint
                .strip_prefix(base_path)
                .and_then(|endpoint| endpoint.strip_prefix('/'))
                .expect("below the base path");
            assert!(relayed(api, method, endpoint), "{method} {endpoint:?}");
            assert!(path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'#'));
            let parsed = url::Url::parse(&upstream).expect("an accepted target parses");
            assert_eq!(parsed.scheme(), base_url.scheme());
            assert_eq!(parsed.host_str(), base_url.host_str());
            assert_eq!(parsed.port_or_known_default(), base_url.port_or_known_default());
            let below_base = format!("{base_path}/");
            assert!(
                parsed.path().starts_with(&below_base),
                "{target:?} left {below_base}: {parsed}"
            );
            assert!(!parsed.path().split('/').any(|segment| segment == ".."));
        }
        Err(refusal) => {
            assert!(!refusal.as_str().is_empty());
            match refusal {
                ModelRefusal::NotFound | ModelRefusal::BadPath => {}
                // Checked once the path is below the base path.
                ModelRefusal::MethodNotAllowed => assert!(method != "GET" && method != "POST"),
                ModelRefusal::EndpointNotRelayed => assert!(method == "GET" || method == "POST"),
                other => panic!("{other:?} is not a refusal of the mapping"),
            }
        }
    }
});
