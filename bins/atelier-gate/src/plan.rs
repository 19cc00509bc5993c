//! A door's egress plan: the stamped JSON file the provisioner renders for each (site, door).

use std::path::Path;

use atelier_layout::files::{GatePlan, McpRelay};
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
    Ok(Plan {
        door: plan.door.as_str().to_owned(),
        socket_file: atelier_layout::names::gate_socket_file(plan.door),
        hosts: plan.hosts,
        mcp: plan.mcp,
    })
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
