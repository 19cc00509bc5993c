//! A door's egress plan: the stamped JSON file the provisioner renders for each (site, door).

use std::path::Path;

use std::collections::BTreeSet;

use atelier_layout::files::{GatePlan, McpRelay, ModelApi, ModelRelay};
use atelier_layout::hosts::check_plan_host;
use atelier_layout::stamp::{self, StampError};

use crate::connect::EGRESS_PORT;

/// The stamp kind of plan files.
pub use atelier_layout::files::GATE_PLAN_KIND as PLAN_KIND;

/// The plan format this gate reads.
pub use atelier_layout::files::FORMAT_VERSION as PLAN_VERSION;

/// What one door of one site may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The door (`turn` or `build`).
    pub door: String,
    /// The file name of the door's listener in the egress dir (`turn.sock`).
    pub socket_file: String,
    /// The hostnames a CONNECT may name, lowercase.
    pub hosts: Vec<String>,
    /// The MCP relay (turn door only): its upstream URL and the credential it adds.
    pub mcp: Option<McpRelay>,
    /// The model relay, beside the MCP relay on its listener: one route per API, each with its
    /// upstream base URL and the credential it adds.
    pub model: Option<ModelRelay>,
}

/// Why a plan file is not used.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file could not be read.
    #[error("reading the plan: {0}")]
    Read(#[from] std::io::Error),
    /// The stamp is missing, foreign, of another kind, or the body was edited.
    #[error("the plan's stamp: {0}")]
    Stamp(#[from] StampError),
    /// The body is not the plan JSON.
    #[error("the plan's JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The body is for another format version.
    #[error("plan version {0}; this gate reads version {PLAN_VERSION}")]
    Version(u32),
    /// The plan names another instance, site or door than the one it was given for.
    #[error("the plan is for {field} {found:?}, expected {expected:?}")]
    Mismatch {
        /// Which field disagrees.
        field: &'static str,
        /// What the command line says.
        expected: String,
        /// What the plan says.
        found: String,
    },
    /// The port is not 443.
    #[error("plan port {0}; only {EGRESS_PORT} leaves a unit")]
    Port(u16),
    /// A host is not a plan host (an address, outside the plan grammar, or a local name).
    #[error("plan host {0:?} is not a public hostname a plan may hold")]
    Host(String),
    /// The MCP relay's upstream is not an `http://` or `https://` URL ending in `/mcp`.
    #[error("plan MCP upstream {0:?} is not an http(s) URL ending in /mcp")]
    McpUpstream(String),
    /// The plan has a model relay but no MCP relay: the model relay is served on the MCP
    /// relay's listener, which only a door with the MCP relay (the turn door) is given.
    #[error("the plan has a model relay but no MCP relay, whose listener it is served on")]
    ModelWithoutMcp,
    /// A model route's upstream is not an `http://` or `https://` base URL with a host, and no
    /// query, fragment, credentials, whitespace, dot segment or trailing `/`.
    #[error(
        "plan model upstream {0:?} is not an http(s) base URL (a host, no query, fragment, \
         credentials or trailing /)"
    )]
    ModelUpstream(String),
    /// A model route's upstream host is an address or a name no plan may hold (a local or
    /// special-use one): the relay dials a host's public addresses only, which it learns by
    /// resolving the name, and an address in the URL is never resolved.
    #[error("plan model upstream host {0:?} is not a public hostname a plan may hold")]
    ModelUpstreamHost(String),
    /// Two model routes for the same API: which key goes where would be ambiguous.
    #[error("the plan has more than one model route for {}", .0.as_str())]
    ModelRouteRepeated(ModelApi),
    /// A model route's credential id is not `[A-Z][A-Z0-9_]{{0,63}}`.
    #[error("plan model credential {0:?} is not an id of [A-Z][A-Z0-9_]{{0,63}}")]
    ModelCredential(String),
}

/// Reads and checks the plan file at `path` for `door` of site `site` of `instance`.
pub fn load_plan(path: &Path, instance: &str, site: u32, door: &str) -> Result<Plan, PlanError> {
    let file = std::fs::read(path)?;
    parse_plan(&file, instance, site, door)
}

/// Checks a stamped plan file's bytes: stamp (kind [`PLAN_KIND`], this instance, unedited),
/// version, instance, site, door, port 443 and every host's grammar.
pub fn parse_plan(file: &[u8], instance: &str, site: u32, door: &str) -> Result<Plan, PlanError> {
    let body = stamp::verify(file, instance, PLAN_KIND)?;
    let plan: GatePlan = serde_json::from_slice(body)?;
    if plan.version != PLAN_VERSION {
        return Err(PlanError::Version(plan.version));
    }
    let mismatch = |field, expected: String, found: String| PlanError::Mismatch {
        field,
        expected,
        found,
    };
    if plan.instance != instance {
        return Err(mismatch("instance", instance.to_owned(), plan.instance));
    }
    if u32::from(plan.site) != site {
        return Err(mismatch("site", site.to_string(), plan.site.to_string()));
    }
    if plan.door.as_str() != door {
        return Err(mismatch(
            "door",
            door.to_owned(),
            plan.door.as_str().to_owned(),
        ));
    }
    if plan.port != EGRESS_PORT {
        return Err(PlanError::Port(plan.port));
    }
    if let Some(bad) = plan
        .hosts
        .iter()
        .find(|host| check_plan_host(host).is_err())
    {
        return Err(PlanError::Host(bad.clone()));
    }
    if let Some(relay) = &plan.mcp {
        if !is_mcp_upstream(&relay.upstream) {
            return Err(PlanError::McpUpstream(relay.upstream.clone()));
        }
    }
    if let Some(relay) = &plan.model {
        check_model_relay(relay, plan.mcp.is_some())?;
    }
    Ok(Plan {
        door: plan.door.as_str().to_owned(),
        socket_file: atelier_layout::names::gate_socket_file(plan.door),
        hosts: plan.hosts,
        mcp: plan.mcp,
        model: plan.model,
    })
}

/// Checks the model relay: served beside the MCP relay (`with_mcp`), one route per API, each
/// upstream a base URL the relay can append a path to whose host is a plan hostname (never an
/// address), each credential a plain id.
fn check_model_relay(relay: &ModelRelay, with_mcp: bool) -> Result<(), PlanError> {
    if !with_mcp {
        return Err(PlanError::ModelWithoutMcp);
    }
    let mut apis = BTreeSet::new();
    for route in &relay.routes {
        if !apis.insert(route.api) {
            return Err(PlanError::ModelRouteRepeated(route.api));
        }
        if !is_model_upstream(&route.upstream) {
            return Err(PlanError::ModelUpstream(route.upstream.clone()));
        }
        let host = reqwest::Url::parse(&route.upstream)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_default();
        if check_plan_host(&host).is_err() {
            return Err(PlanError::ModelUpstreamHost(host));
        }
        if let Some(credential) = &route.credential {
            if !is_credential_id(credential) {
                return Err(PlanError::ModelCredential(credential.clone()));
            }
        }
    }
    Ok(())
}

/// Returns true if and only if `url` is `http://` or `https://`, a host (with an optional
/// port), and a path that is empty or `/`-separated non-empty segments none of which is `.`
/// or `..`, with no query, fragment, credentials, percent sign, backslash or whitespace, and
/// no trailing `/`: the relay appends `/<endpoint>` to it, and what it appends to must already
/// stay where it points.
fn is_model_upstream(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = match authority.rsplit_once(':') {
        // Not a port separator when it sits inside an IPv6 literal's brackets.
        Some((host, port)) if !port.contains(']') => {
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            host
        }
        _ => authority,
    };
    let segments_ok = path.is_empty()
        || path
            .strip_prefix('/')
            .is_some_and(|path| path.split('/').all(|s| !matches!(s, "" | "." | "..")));
    !host.is_empty()
        && segments_ok
        && rest
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'@' | b'%' | b'\\'))
        && reqwest::Url::parse(url).is_ok_and(|parsed| parsed.host_str().is_some())
}

/// Returns true if and only if `id` matches `^[A-Z][A-Z0-9_]{0,63}$`, the credential ids the
/// provisioner renders into `LoadCredential=`.
fn is_credential_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && id.len() <= 64
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Returns true if and only if `url` is `http://` or `https://`, an authority, and a path
/// ending in `/mcp`, with no query, fragment, credentials or whitespace.
fn is_mcp_upstream(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    !authority.is_empty()
        && !authority.contains('@')
        && rest.ends_with("/mcp")
        && rest
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
}

#[cfg(test)]
mod tests;
