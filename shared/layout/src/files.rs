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
    /// The model relay, on the turn door only, beside the MCP relay on its listener. Absent
    /// from a plan rendered before there was one, which relays no model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRelay>,
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

/// The gate's model relay: a confined agent sends its model requests in plain HTTP to
/// `http://127.0.0.1:<relay port>/model/<api>/…` ([`crate::services::model_relay_url`]) with no
/// key; the gate sends them on to the route's upstream with the key added, so the provider's
/// key never enters the agent's process (whose own environment and files it can read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRelay {
    /// One route per API the instance's agents speak, at most one per [`ModelApi`].
    pub routes: Vec<ModelRoute>,
}

/// One API a confined agent's model requests are relayed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRoute {
    /// Which API, which is also the route's path segment and how the key is sent.
    pub api: ModelApi,
    /// The declared base URL (`https://host[/path]`, no trailing `/`). A request to
    /// `/model/<api>/<rest>`, where `<rest>` is the base's path, then `/` and one of the API's
    /// endpoints, goes to `<the base's origin>/<rest>`: the agent is given the route's root
    /// followed by the base's path
    /// ([`relayed_base_url`](crate::services::relayed_base_url)).
    pub upstream: String,
    /// The credential (`LoadCredential=` id) the gate sends as the key, when one is declared.
    pub credential: Option<String>,
    /// The one model a request to this route may name, when the declaration pins it
    /// (`agent.openai_model`, for the OpenAI-compatible route): a gateway's model name alone
    /// can switch on its provider's own web search (a search model, an `:online` suffix), so a
    /// request naming another model is refused.
    #[serde(default)]
    pub model: Option<String>,
}

/// The model APIs the relay speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// Anthropic's Messages API: the key goes upstream as `x-api-key`.
    Anthropic,
    /// An OpenAI-compatible API: the key goes upstream as `Authorization: Bearer <key>`.
    Openai,
}

impl ModelApi {
    /// Every API, in route order.
    pub const ALL: [ModelApi; 2] = [ModelApi::Anthropic, ModelApi::Openai];

    /// The route's path segment below `/model/`, as the plan spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "anthropic",
            ModelApi::Openai => "openai",
        }
    }
}
