//! The shapes of the generated JSON files one binary writes and another reads: the site table
//! `sites.json` (the provisioner writes, sited reads) and a door's gate plan (the provisioner
//! writes, the gate reads). One definition each, so writer and reader cannot drift apart; both
//! refuse unknown keys.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::names::Door;

/// The version of both shapes; a reader refuses a newer one.
pub const FORMAT_VERSION: u32 = 1;

/// The stamp kind of the site table.
pub const SITE_TABLE_KIND: &str = "sites";

/// The stamp kind of a gate plan.
pub const GATE_PLAN_KIND: &str = "gate";

/// `sites.json`: where every declared site lives and is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteTable {
    /// [`FORMAT_VERSION`] when written.
    pub version: u32,
    /// The instance the table belongs to.
    pub instance: String,
    /// The default parent of the webspaces.
    pub webspace_base: PathBuf,
    /// The sites, sorted by slug.
    pub sites: Vec<SiteRow>,
}

/// One declared site in the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteRow {
    /// Its slug.
    pub slug: String,
    /// Its domain.
    pub domain: String,
    /// Its webspace directory.
    pub webspace: PathBuf,
    /// Its two surfaces.
    pub surfaces: Surfaces,
}

/// A site's preproduction and production surfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Surfaces {
    /// Preproduction.
    pub preprod: SurfacePaths,
    /// Production.
    pub prod: SurfacePaths,
}

/// A surface's paths inside the webspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurfacePaths {
    /// The release store.
    pub store_dir: PathBuf,
    /// The link the web server serves through.
    pub link_path: PathBuf,
}

/// What one door of one site may reach through its gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatePlan {
    /// [`FORMAT_VERSION`] when written.
    pub version: u32,
    /// The instance.
    pub instance: String,
    /// The site's ordinal.
    pub site: u16,
    /// The door.
    pub door: Door,
    /// The only port a tunnel may reach.
    pub port: u16,
    /// The hostnames a tunnel may reach.
    pub hosts: Vec<String>,
    /// The MCP relay, on the turn door only.
    pub mcp: Option<McpRelay>,
}

/// The gate's MCP relay settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpRelay {
    /// The upstream `…/mcp` URL.
    pub upstream: String,
    /// The credential the gate adds as `X-API-Key`, when the instance declares one.
    pub credential: Option<String>,
}
