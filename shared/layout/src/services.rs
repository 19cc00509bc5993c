//! What the rendered services are told: Atelier's binary names, the keys of sited's env file,
//! each site's workspace, and each door's egress plan (hosts and relay).

use std::path::PathBuf;

use crate::declaration::{AgentDriver, Site};
use crate::files::{ModelApi, ModelRelay, ModelRoute};
use crate::names::{Door, SiteOrdinal};
use crate::paths::Layout;

/// The site daemon's binary name.
pub const SITED_BINARY: &str = "atelier-sited";
/// The binary every door unit runs.
pub const SHIM_BINARY: &str = "atelier-shim";
/// The binary every gate unit runs.
pub const GATE_BINARY: &str = "atelier-gate";
/// The program a build door runs: a site's install and build steps.
pub const BUILD_BINARY: &str = "atelier-build";
/// The CMS editor's AI chat runtime.
pub const CHATD_BINARY: &str = "atelier-chatd";
/// chatd's SQLite database, in its state directory.
pub const CHATD_DATABASE_FILE: &str = "chat.sqlite3";
/// The provider idle timeouts chatd takes (`chat.provider_idle_timeout_ms`, its
/// `CHATD_PROVIDER_IDLE_TIMEOUT_MS`), in milliseconds: under a second is a typo for seconds,
/// and the CMS's vhost waits an hour at most for a chat stream's next byte, so a longer wait
/// would end at the web server instead, as a cut stream.
pub const CHATD_PROVIDER_IDLE_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1_000..=3_600_000;
/// The provisioner, as certbot's deploy hook runs it.
pub const PROVISION_BINARY: &str = "atelier-provision";

/// The most tasks a site's gate unit may hold (`TasksMax=`): it pumps bytes, nothing more.
pub const GATE_TASKS_MAX: u32 = 64;
/// The gate's async workers at most, whatever the host's CPU count: a site's gate pumps a
/// handful of tunnels, and a worker per CPU of a large host would pass [`GATE_TASKS_MAX`].
pub const GATE_WORKER_THREADS_MAX: usize = 4;
/// The gate's blocking threads at most (each system lookup takes one while it waits).
pub const GATE_BLOCKING_THREADS_MAX: usize = 16;
// The main thread, the workers and the blocking pool fit the unit's cap with room to spare.
const _: () =
    assert!(1 + GATE_WORKER_THREADS_MAX + GATE_BLOCKING_THREADS_MAX < GATE_TASKS_MAX as usize);

/// The only port a door's plan lets a tunnel reach.
pub const EGRESS_PORT: u16 = 443;
/// The loopback port the shim forwards to the door's gate socket for CONNECT tunnels.
pub const PROXY_PORT: u16 = 3128;
/// The loopback port the shim forwards to the turn door's gate socket for the MCP and model
/// relays.
pub const MCP_PORT: u16 = 3129;
/// The path below which the turn door's relay (on [`MCP_PORT`]) relays model requests, one
/// route per [`ModelApi`](crate::files::ModelApi).
pub const MODEL_RELAY_PATH: &str = "/model";

/// The root of `api`'s route on the turn door's relay, as a confined agent reaches it on
/// loopback: the relay sends `<root>/<rest>` to `<the route's upstream origin>/<rest>` with the
/// provider's key (the agent is given none).
pub fn model_relay_url(api: crate::files::ModelApi) -> String {
    format!(
        "http://127.0.0.1:{MCP_PORT}{MODEL_RELAY_PATH}/{}",
        api.as_str()
    )
}

/// The base URL a confined agent is given for the declared base URL `declared` of `api`: the
/// route's root followed by the declared path, so each CLI builds its request paths exactly
/// as it would against the declared base (pi's `<base>/chat/completions`, atelier-agent's
/// `/v1` rule), and the relay swaps only the origin. `declared` is a URL the declaration
/// accepted (`https://host[:port][/path]`).
pub fn relayed_base_url(api: crate::files::ModelApi, declared: &str) -> String {
    let (_, path) = split_origin(declared);
    format!("{}{}", model_relay_url(api), path.trim_end_matches('/'))
}

/// A base URL as its origin (`scheme://host[:port]`) and its path (empty, or starting with
/// `/`).
pub fn split_origin(url: &str) -> (&str, &str) {
    let authority_at = url.find("://").map_or(0, |at| at + 3);
    match url[authority_at..].find('/') {
        Some(at) => url.split_at(authority_at + at),
        None => (url, ""),
    }
}

/// The send buffer each end of a door's unix connection to its gate asks for (the shim's
/// forward and the gate's tunnel): a unix socket's buffer does not grow as TCP's does, and at
/// the usual default (208 KiB) it, not the copy, bounds a bulk tunnel. The kernel caps the
/// request at `net.core.wmem_max`.
pub const GATE_LEG_SEND_BUFFER: usize = 1024 * 1024;
/// The model API Claude Code reaches.
pub const ANTHROPIC_API_HOST: &str = "api.anthropic.com";

/// The door a unit serves, in the unit's own environment.
pub const DOOR_ENV: &str = "ATELIER_DOOR";
/// The run's working directory (the site's workspace), in the unit's own environment.
pub const WORKDIR_ENV: &str = "ATELIER_UNIT_WORKDIR";
/// The gate's CONNECT socket as bound into a door unit, in the unit's own environment; the
/// shim forwards [`PROXY_PORT`] to it.
pub const GATE_SOCKET_ENV: &str = "ATELIER_GATE_SOCKET";
/// The gate's MCP relay socket as bound into the turn unit, in the unit's own environment; the
/// shim forwards [`MCP_PORT`] to it.
pub const MCP_SOCKET_ENV: &str = "ATELIER_MCP_SOCKET";

/// What the git door's unit fixes in its environment: no HOME to read configuration from, no
/// global or system configuration.
pub const GIT_DOOR_ENV: [(&str, &str); 3] = [
    ("HOME", "/nonexistent"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
];

/// Keys of sited's env file. Every key is Atelier's own (`ATELIER_*`); none names a credential,
/// which arrive only through `LoadCredential=`.
pub mod env {
    /// The instance name.
    pub const INSTANCE: &str = "ATELIER_INSTANCE";
    /// The web server that serves the sites: `nginx` or `apache`.
    pub const WEB_SERVER: &str = "ATELIER_WEB_SERVER";
    /// The workspaces' root.
    pub const SITES_ROOT: &str = "ATELIER_SITES_ROOT";
    /// The audit root.
    pub const AUDIT_DIR: &str = "ATELIER_AUDIT_DIR";
    /// The webspace base.
    pub const WEBSPACE_BASE: &str = "ATELIER_WEBSPACE_BASE";
    /// `sites.json`.
    pub const SITE_TABLE_FILE: &str = "ATELIER_SITE_TABLE_FILE";
    /// The label before a site's domain on preproduction.
    pub const PREPROD_HOST_PREFIX: &str = "ATELIER_PREPROD_HOST_PREFIX";
    /// `http` when production has no TLS, else `https`.
    pub const PROD_URL_SCHEME: &str = "ATELIER_PROD_URL_SCHEME";
    /// The Publication API's base URL (its key is a credential).
    pub const PUBLICATION_API_URL: &str = "ATELIER_PUBLICATION_API_URL";
    /// The coding agent a turn runs.
    pub const AGENT_DRIVER: &str = "ATELIER_AGENT_DRIVER";
    /// `systemd_scope` (runs are door units) or `none` (laptop/CI).
    pub const AGENT_CONFINEMENT: &str = "ATELIER_AGENT_CONFINEMENT";
    /// The prefix of every per-site unit: `atelier-<inst>-s`.
    pub const SITE_UNIT_PREFIX: &str = "ATELIER_SITE_UNIT_PREFIX";
    /// JSON object slug → ordinal of the declared sites.
    pub const SITE_IDENTITIES: &str = "ATELIER_SITE_IDENTITIES";
    /// The runtime dir holding the door sockets.
    pub const RUNTIME_DIR: &str = "ATELIER_RUNTIME_DIR";
    /// The agents' state root.
    pub const AGENT_STATE_ROOT: &str = "ATELIER_AGENT_STATE_ROOT";
    /// systemctl, when declared.
    pub const SYSTEMCTL_BIN: &str = "ATELIER_SYSTEMCTL_BIN";
    /// Claude Code's binary, when declared.
    pub const CLAUDE_CODE_BIN: &str = "ATELIER_CLAUDE_CODE_BIN";
    /// opencode's binary, when declared.
    pub const OPENCODE_BIN: &str = "ATELIER_OPENCODE_BIN";
    /// pi's binary, when declared.
    pub const PI_BIN: &str = "ATELIER_PI_BIN";
    /// atelier-agent's binary (the driver atelier), when declared.
    pub const ATELIER_AGENT_BIN: &str = "ATELIER_ATELIER_AGENT_BIN";
    /// Where Claude Code (and an atelier turn's Anthropic model) sends its model requests, when
    /// declared (`agent.anthropic_base_url`).
    pub const AGENT_ANTHROPIC_BASE_URL: &str = "ATELIER_AGENT_ANTHROPIC_BASE_URL";
    /// The OpenAI-compatible API a pi or atelier turn talks to, the part before
    /// `/chat/completions`, when declared (`agent.openai_base_url`).
    pub const AGENT_OPENAI_BASE_URL: &str = "ATELIER_AGENT_OPENAI_BASE_URL";
    /// The model id a pi or atelier turn asks that API for, when declared
    /// (`agent.openai_model`).
    pub const AGENT_OPENAI_MODEL: &str = "ATELIER_AGENT_OPENAI_MODEL";
    /// The model id an atelier turn asks Anthropic's Messages API for, when declared
    /// (`agent.anthropic_model`).
    pub const AGENT_ANTHROPIC_MODEL: &str = "ATELIER_AGENT_ANTHROPIC_MODEL";
    /// Development only, never rendered: a PEM file of extra certificate authorities a turn's
    /// agent trusts (a lab model server's test CA).
    pub const AGENT_EXTRA_CA_CERTS: &str = "ATELIER_AGENT_EXTRA_CA_CERTS";
    /// Each declared limit, named after its declaration key.
    pub const MAX_SITES: &str = "ATELIER_MAX_SITES";
    /// See [`MAX_SITES`].
    pub const MAX_CONCURRENT_SESSIONS: &str = "ATELIER_MAX_CONCURRENT_SESSIONS";
    /// See [`MAX_SITES`].
    pub const SITE_DISK_QUOTA_MB: &str = "ATELIER_SITE_DISK_QUOTA_MB";
    /// See [`MAX_SITES`].
    pub const RELEASES_RETAINED: &str = "ATELIER_RELEASES_RETAINED";
    /// See [`MAX_SITES`].
    pub const SESSION_TURN_TIMEOUT_MS: &str = "ATELIER_SESSION_TURN_TIMEOUT_MS";
    /// See [`MAX_SITES`].
    pub const INSTALL_TIMEOUT_MS: &str = "ATELIER_INSTALL_TIMEOUT_MS";
    /// See [`MAX_SITES`].
    pub const BUILD_TIMEOUT_MS: &str = "ATELIER_BUILD_TIMEOUT_MS";
    /// See [`MAX_SITES`].
    pub const GIT_TIMEOUT_MS: &str = "ATELIER_GIT_TIMEOUT_MS";
    /// Where the site templates are installed (the layout's `templates_dir`).
    pub const TEMPLATES_DIR: &str = "ATELIER_TEMPLATES_DIR";
    /// The shim every door unit runs (the layout's `atelier-shim`): the `ExecStart=` sited
    /// expects of a loaded door, and what it spawns under `none` confinement.
    pub const SHIM_BIN: &str = "ATELIER_SHIM_BIN";
    /// `atelier-build` as the build door runs it (the layout's `atelier-build`).
    pub const BUILD_BIN: &str = "ATELIER_BUILD_BIN";
    /// The agent identity epoch: a resume token minted under another epoch is not replayed.
    pub const AGENT_IDENTITY_EPOCH: &str = "ATELIER_AGENT_IDENTITY_EPOCH";
    /// `production` (the default, and all the provisioner renders) or `development`, which
    /// alone allows `none` confinement.
    pub const DEPLOYMENT: &str = "ATELIER_DEPLOYMENT";

    /// Every key sited's environment may carry; any other `ATELIER_*` key is refused by name.
    pub const ALL: &[&str] = &[
        INSTANCE,
        WEB_SERVER,
        SITES_ROOT,
        AUDIT_DIR,
        WEBSPACE_BASE,
        SITE_TABLE_FILE,
        PREPROD_HOST_PREFIX,
        PROD_URL_SCHEME,
        PUBLICATION_API_URL,
        AGENT_DRIVER,
        AGENT_CONFINEMENT,
        SITE_UNIT_PREFIX,
        SITE_IDENTITIES,
        RUNTIME_DIR,
        AGENT_STATE_ROOT,
        SYSTEMCTL_BIN,
        CLAUDE_CODE_BIN,
        OPENCODE_BIN,
        PI_BIN,
        ATELIER_AGENT_BIN,
        AGENT_ANTHROPIC_BASE_URL,
        AGENT_OPENAI_BASE_URL,
        AGENT_OPENAI_MODEL,
        AGENT_ANTHROPIC_MODEL,
        AGENT_EXTRA_CA_CERTS,
        MAX_SITES,
        MAX_CONCURRENT_SESSIONS,
        SITE_DISK_QUOTA_MB,
        RELEASES_RETAINED,
        SESSION_TURN_TIMEOUT_MS,
        INSTALL_TIMEOUT_MS,
        BUILD_TIMEOUT_MS,
        GIT_TIMEOUT_MS,
        TEMPLATES_DIR,
        SHIM_BIN,
        BUILD_BIN,
        DEPLOYMENT,
        AGENT_IDENTITY_EPOCH,
    ];

    /// Returns true if and only if `key` looks like it names a credential, which an env file
    /// must never carry.
    pub fn is_secret_looking(key: &str) -> bool {
        [
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSPHRASE",
            "CREDENTIAL",
            "_KEY",
        ]
        .iter()
        .any(|tail| key.ends_with(tail))
    }
}

/// Why `ATELIER_SITE_IDENTITIES` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentitiesError {
    /// Not a JSON object of slug → ordinal.
    #[error("the site identities are not a JSON object of slug to ordinal: {0}")]
    Malformed(String),
    /// A key is not a slug.
    #[error("the site identities name {0:?}, which is not a slug")]
    BadSlug(String),
    /// An ordinal is out of range.
    #[error(transparent)]
    BadOrdinal(#[from] crate::names::NameError),
    /// Two sites share an ordinal, so they would share an identity.
    #[error("the site identities give ordinal {0} to two sites")]
    DuplicateOrdinal(u16),
}

/// `ATELIER_SITE_IDENTITIES`'s value: the declared sites' ordinals as a JSON object.
pub fn render_site_identities<'a>(
    sites: impl IntoIterator<Item = (&'a str, SiteOrdinal)>,
) -> String {
    let map: std::collections::BTreeMap<&str, u16> =
        sites.into_iter().map(|(slug, k)| (slug, k.get())).collect();
    serde_json::to_string(&map).unwrap_or_default()
}

/// Reads `ATELIER_SITE_IDENTITIES`, refusing a non-slug, an ordinal out of range or a shared
/// ordinal.
pub fn parse_site_identities(
    text: &str,
) -> Result<std::collections::BTreeMap<String, SiteOrdinal>, IdentitiesError> {
    let raw: std::collections::BTreeMap<String, u64> =
        serde_json::from_str(text).map_err(|e| IdentitiesError::Malformed(e.to_string()))?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = std::collections::BTreeMap::new();
    for (slug, k) in raw {
        if !crate::names::is_slug(&slug) {
            return Err(IdentitiesError::BadSlug(slug));
        }
        let k = SiteOrdinal::new(k)?;
        if !seen.insert(k.get()) {
            return Err(IdentitiesError::DuplicateOrdinal(k.get()));
        }
        out.insert(slug, k);
    }
    Ok(out)
}

/// The env key naming a driver's binary.
pub fn driver_bin_env(driver: AgentDriver) -> &'static str {
    match driver {
        AgentDriver::ClaudeCode => env::CLAUDE_CODE_BIN,
        AgentDriver::Opencode => env::OPENCODE_BIN,
        AgentDriver::Pi => env::PI_BIN,
        AgentDriver::Atelier => env::ATELIER_AGENT_BIN,
    }
}

/// What one door of a site may reach through its gate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EgressPlan {
    /// The hostnames CONNECT may name (port [`EGRESS_PORT`] only), sorted and unique.
    pub hosts: Vec<String>,
    /// Whether the gate relays MCP to the Publication API on this door.
    pub mcp: bool,
    /// The model relay on this door (the turn door's, when the agent has a model the relay
    /// speaks): each route with the credential the gate adds.
    pub model: Option<ModelRelay>,
}

// === impl Layout (services) ===

impl Layout<'_> {
    /// A site's workspace: `<sites root>/<slug>`.
    pub fn workspace(&self, site: &Site) -> PathBuf {
        crate::paths::site_workspace(&self.sites_root(), &site.slug)
    }

    /// An Atelier binary by its name constant, e.g. [`SHIM_BINARY`].
    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin_path(name)
    }

    /// A door's egress plan; `None` for a door with no way out (git).
    pub fn egress_plan(&self, door: Door) -> Option<EgressPlan> {
        let agent = &self.declaration().agent;
        let mut hosts: Vec<String> = match door {
            Door::Git => return None,
            // A build reaches only the package registries the operator declares: the shipped
            // templates build without the network, and no registry is trusted by default.
            Door::Build => agent.registry_hosts.clone().unwrap_or_default(),
            // The turn's model is the gate's model relay (every valid declaration has a route),
            // which reaches the provider itself: a tunnel to it would let the agent use a key
            // of its own there, and the model's server-side tools with it.
            Door::Turn => Vec::new(),
        };
        hosts.sort();
        hosts.dedup();
        Some(EgressPlan {
            hosts,
            mcp: door.has_mcp(),
            model: door.has_mcp().then(|| self.model_relay()).flatten(),
        })
    }

    /// The hosts the agent's model is at (`agent.provider_hosts`; for Claude Code by default
    /// Anthropic's API): each declared model base URL must name one of them.
    pub fn provider_hosts(&self) -> Vec<String> {
        let agent = &self.declaration().agent;
        match agent.driver {
            AgentDriver::ClaudeCode => agent
                .provider_hosts
                .clone()
                .unwrap_or_else(|| vec![ANTHROPIC_API_HOST.to_owned()]),
            AgentDriver::Opencode | AgentDriver::Pi | AgentDriver::Atelier => {
                agent.provider_hosts.clone().unwrap_or_default()
            }
        }
    }

    /// The turn door's model relay: an Anthropic route for Claude Code (whenever its binary
    /// is declared) and for an atelier turn's Anthropic model, at the declared gateway or
    /// Anthropic's own API; an OpenAI route for the declared OpenAI-compatible model. Each
    /// route's key is the declared [`ANTHROPIC_API_KEY`](crate::paths::ANTHROPIC_API_KEY) or
    /// [`OPENAI_API_KEY`](crate::paths::OPENAI_API_KEY) secret, when there is one (a local
    /// model may ask for none). `None` when the agent has no model the relay speaks.
    pub fn model_relay(&self) -> Option<ModelRelay> {
        let decl = self.declaration();
        let agent = &decl.agent;
        let credential = |id: &str| decl.secrets.contains_key(id).then(|| id.to_owned());
        let mut routes = Vec::new();
        if agent.bins.contains_key(&AgentDriver::ClaudeCode) || agent.anthropic_model.is_some() {
            let default = format!("https://{ANTHROPIC_API_HOST}");
            let declared = agent.anthropic_base_url.as_deref().unwrap_or(&default);
            routes.push(ModelRoute {
                api: ModelApi::Anthropic,
                upstream: declared.trim_end_matches('/').to_owned(),
                credential: credential(crate::paths::ANTHROPIC_API_KEY),
                // Claude Code asks for more than one model (a small one for its side tasks).
                model: None,
            });
        }
        if let Some(url) = &agent.openai_base_url {
            routes.push(ModelRoute {
                api: ModelApi::Openai,
                upstream: url.trim_end_matches('/').to_owned(),
                credential: credential(crate::paths::OPENAI_API_KEY),
                model: agent.openai_model.clone(),
            });
        }
        (!routes.is_empty()).then_some(ModelRelay { routes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Declaration;

    fn example(patch: impl Fn(String) -> String) -> Declaration {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/examples/instance.json");
        Declaration::parse(&patch(std::fs::read_to_string(path).unwrap())).unwrap()
    }

    #[test]
    fn egress_plans_per_door() {
        let decl = example(|t| t);
        let layout = Layout::new(&decl);
        assert_eq!(layout.egress_plan(Door::Git), None);
        assert_eq!(
            layout.egress_plan(Door::Turn),
            Some(EgressPlan {
                hosts: vec![],
                mcp: true,
                model: Some(ModelRelay {
                    routes: vec![ModelRoute {
                        api: ModelApi::Anthropic,
                        upstream: "https://api.anthropic.com".to_owned(),
                        credential: Some("ANTHROPIC_API_KEY".to_owned()),
                        model: None,
                    }]
                }),
            })
        );
        assert_eq!(
            layout.egress_plan(Door::Build),
            Some(EgressPlan {
                hosts: vec![],
                mcp: false,
                model: None,
            })
        );
        assert_eq!(
            layout.workspace(&decl.sites[0]),
            std::path::Path::new("/var/lib/atelier/example/sites/collection")
        );
        let declared = example(|t| {
            t.replace(
                "\"driver\": \"claude_code\",",
                "\"driver\": \"claude_code\", \"registry_hosts\": [\"b.example.org\", \"a.example.org\", \"b.example.org\"],",
            )
        });
        let plan = Layout::new(&declared).egress_plan(Door::Build).unwrap();
        assert_eq!(plan.hosts, ["a.example.org", "b.example.org"]);
    }

    #[test]
    fn the_atelier_driver_reaches_its_provider_hosts_only() {
        let decl = example(|text| {
            let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            doc["agent"] = serde_json::json!({
                "driver": "atelier",
                "bins": { "atelier": "/usr/bin/atelier-agent" },
                "provider_hosts": ["llm.example.org"],
                "openai_base_url": "https://llm.example.org/v1",
                "openai_model": "qwen3-coder-30b",
            });
            doc.to_string()
        });
        assert_eq!(
            Layout::new(&decl).egress_plan(Door::Turn),
            Some(EgressPlan {
                hosts: vec![],
                mcp: true,
                model: Some(ModelRelay {
                    routes: vec![ModelRoute {
                        api: ModelApi::Openai,
                        upstream: "https://llm.example.org/v1".to_owned(),
                        credential: None,
                        model: Some("qwen3-coder-30b".to_owned()),
                    }]
                }),
            }),
            "no Anthropic route and no tunnel: the model relayed keyless"
        );
        assert_eq!(
            Layout::new(&decl).provider_hosts(),
            ["llm.example.org"],
            "no Anthropic default: the declared hosts alone"
        );
    }

    /// Each route the turn door's relay gets, by what the agent declares: Claude Code's
    /// Anthropic (at its gateway), atelier's Anthropic model, the OpenAI-compatible model, and
    /// the key of each only when the declaration names it.
    #[test]
    fn the_model_relay_routes_what_the_agent_declares_with_its_declared_keys() {
        let routes = |agent: serde_json::Value, secrets: serde_json::Value| {
            let decl = example(|text| {
                let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
                doc["agent"] = agent.clone();
                doc["secrets"] = secrets.clone();
                doc.to_string()
            });
            Layout::new(&decl)
                .model_relay()
                .map(|relay| {
                    relay
                        .routes
                        .into_iter()
                        .map(|r| (r.api, r.upstream, r.credential))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let key = |id: &str| Some(id.to_owned());
        let cases = [
            (
                "claude code at a gateway, its trailing slash dropped",
                serde_json::json!({
                    "driver": "claude_code",
                    "bins": { "claude_code": "/usr/local/bin/claude" },
                    "provider_hosts": ["gw.example.org"],
                    "anthropic_base_url": "https://gw.example.org/anthropic/",
                }),
                serde_json::json!({ "ANTHROPIC_API_KEY": "/etc/k/a" }),
                vec![(
                    ModelApi::Anthropic,
                    "https://gw.example.org/anthropic".to_owned(),
                    key("ANTHROPIC_API_KEY"),
                )],
            ),
            (
                "pi with a keyed OpenAI-compatible model",
                serde_json::json!({
                    "driver": "pi",
                    "bins": { "pi": "/usr/local/bin/pi" },
                    "provider_hosts": ["llm.example.org"],
                    "openai_base_url": "https://llm.example.org/v1",
                    "openai_model": "m",
                }),
                serde_json::json!({ "OPENAI_API_KEY": "/etc/k/o" }),
                vec![(
                    ModelApi::Openai,
                    "https://llm.example.org/v1".to_owned(),
                    key("OPENAI_API_KEY"),
                )],
            ),
            (
                "atelier with an Anthropic model and an OpenAI one, no keys",
                serde_json::json!({
                    "driver": "atelier",
                    "bins": { "atelier": "/usr/bin/atelier-agent" },
                    "provider_hosts": ["api.anthropic.com", "llm.example.org"],
                    "anthropic_model": "claude-sonnet-4-5",
                    "openai_base_url": "https://llm.example.org/v1",
                    "openai_model": "m",
                }),
                serde_json::json!({}),
                vec![
                    (
                        ModelApi::Anthropic,
                        "https://api.anthropic.com".to_owned(),
                        None,
                    ),
                    (
                        ModelApi::Openai,
                        "https://llm.example.org/v1".to_owned(),
                        None,
                    ),
                ],
            ),
        ];
        for (name, agent, secrets, expected) in cases {
            assert_eq!(routes(agent, secrets), expected, "{name}");
        }
    }

    /// The agent's base URL is the route's root and the declared path (the relay sends what is
    /// below it to the declared origin); `split_origin` cuts a base into those two.
    #[test]
    fn a_relayed_base_keeps_the_declared_path() {
        let cases = [
            (
                "a /v1 base",
                ModelApi::Openai,
                "https://llm.example.org/v1",
                "/v1",
            ),
            (
                "a trailing slash",
                ModelApi::Openai,
                "https://llm.example.org/v1/",
                "/v1",
            ),
            (
                "no path",
                ModelApi::Anthropic,
                "https://api.anthropic.com",
                "",
            ),
            (
                "a port",
                ModelApi::Anthropic,
                "https://gw.example.org:8443/a/b",
                "/a/b",
            ),
        ];
        for (name, api, declared, path) in cases {
            let relayed = relayed_base_url(api, declared);
            assert_eq!(relayed, format!("{}{path}", model_relay_url(api)), "{name}");
        }
        let splits = [
            (
                "https://api.anthropic.com",
                ("https://api.anthropic.com", ""),
            ),
            (
                "https://llm.example.org/v1",
                ("https://llm.example.org", "/v1"),
            ),
            (
                "https://gw.example.org:8443/a/b",
                ("https://gw.example.org:8443", "/a/b"),
            ),
        ];
        for (url, parts) in splits {
            assert_eq!(split_origin(url), parts, "{url}");
        }
    }

    #[test]
    fn every_driver_has_its_own_bin_key() {
        let drivers = [
            AgentDriver::ClaudeCode,
            AgentDriver::Opencode,
            AgentDriver::Pi,
            AgentDriver::Atelier,
        ];
        let keys: std::collections::BTreeSet<&str> =
            drivers.iter().map(|d| driver_bin_env(*d)).collect();
        assert_eq!(keys.len(), drivers.len());
        for key in keys {
            assert!(env::ALL.contains(&key), "{key}");
            assert!(!env::is_secret_looking(key), "{key}");
        }
        assert_eq!(
            driver_bin_env(AgentDriver::Atelier),
            "ATELIER_ATELIER_AGENT_BIN"
        );
    }

    #[test]
    fn site_identities_round_trip_and_refusals() {
        let k = |n| SiteOrdinal::new(n).unwrap();
        let text = render_site_identities([("collection", k(1)), ("archive", k(2))]);
        assert_eq!(text, r#"{"archive":2,"collection":1}"#);
        let parsed = parse_site_identities(&text).unwrap();
        assert_eq!(parsed["archive"], k(2));
        let cases = [
            ("not json", "[1]"),
            ("a bad slug", r#"{"Bad":1}"#),
            ("ordinal zero", r#"{"a1":0}"#),
            ("ordinal too big", r#"{"a1":1000}"#),
            ("shared ordinal", r#"{"a1":3,"b1":3}"#),
        ];
        for (name, text) in cases {
            assert!(parse_site_identities(text).is_err(), "{name}");
        }
        assert!(parse_site_identities("{}").unwrap().is_empty());
    }

    #[test]
    fn secret_looking_keys() {
        for key in ["SERVICE_TOKEN", "API_KEY", "DB_PASSWORD", "X_SECRET"] {
            assert!(env::is_secret_looking(key), "{key}");
        }
        for key in [env::INSTANCE, env::SITES_ROOT, env::PUBLICATION_API_URL] {
            assert!(!env::is_secret_looking(key), "{key}");
        }
    }
}
