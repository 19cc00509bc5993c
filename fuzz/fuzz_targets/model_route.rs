//! Fuzzes the model relay's request target mapping: a byte picks the plan's routes, the rest is
//! the target. No panic; an accepted target maps below its route's base, its path as given and
//! its query kept, and what a URL parser (the WHATWG one the relay's client uses) makes of it
//! stays on the base's host and below the base's path; a refusal names why.
#![no_main]

use atelier_gate::model::{route_target, ModelApi, ModelRefusal, ModelRoute};
use libfuzzer_sys::fuzz_target;

const ANTHROPIC_BASE: &str = "https://api.anthropic.com";
const OPENAI_BASE: &str = "http://127.0.0.1:8080/v1";

fn routes(pick: u8) -> Vec<ModelRoute> {
    let route = |api, upstream: &str| ModelRoute {
        api,
        upstream: upstream.to_owned(),
        credential: None,
    };
    let mut routes = Vec::new();
    if pick & 1 != 0 {
        routes.push(route(ModelApi::Anthropic, ANTHROPIC_BASE));
    }
    if pick & 2 != 0 {
        routes.push(route(ModelApi::Openai, OPENAI_BASE));
    }
    routes
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, target)) = data.split_first() else {
        return;
    };
    // Request targets reach the relay as text (hyper's, visible ASCII only).
    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    let routes = routes(pick);
    match route_target(target, &routes) {
        Ok((api, upstream)) => {
            let base = &routes
                .iter()
                .find(|route| route.api == api)
                .expect("the API of a route")
                .upstream;
            // The target's own path below /model/<api>, then its query, as given.
            let below = format!("/model/{}/", api.as_str());
            let rest = target.strip_prefix(&below).expect("below its API");
            assert_eq!(upstream, format!("{base}/{rest}"));
            let path = rest.split('?').next().unwrap_or(rest);
            assert!(!path.is_empty());
            assert!(path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'#'));
            let base = url::Url::parse(base).expect("a base URL");
            let parsed = url::Url::parse(&upstream).expect("an accepted target parses");
            assert_eq!(parsed.scheme(), base.scheme());
            assert_eq!(parsed.host_str(), base.host_str());
            assert_eq!(parsed.port_or_known_default(), base.port_or_known_default());
            let base_path = format!("{}/", base.path().trim_end_matches('/'));
            assert!(
                parsed.path().starts_with(&base_path),
                "{target:?} left {base_path}: {parsed}"
            );
            assert!(!parsed.path().split('/').any(|segment| segment == ".."));
        }
        Err(refusal) => {
            assert!(matches!(
                refusal,
                ModelRefusal::NotFound | ModelRefusal::BadPath
            ));
            assert!(!refusal.as_str().is_empty());
        }
    }
});
