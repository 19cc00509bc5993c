//! Generated configuration: sited's env file, the site table `sites.json`, the engine's
//! pairing fragment and each site door's gate plan. None of them ever holds a credential:
//! credentials reach sited through `LoadCredential=` and the engine copies its token by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use atelier_layout::declaration::{Site, TlsMode, WebServer};
use atelier_layout::files::{
    GatePlan, McpRelay, SiteRow, SiteTable, SurfacePaths, Surfaces, FORMAT_VERSION,
};
use atelier_layout::names::{self, Door};
use atelier_layout::pairing::{ENGINE_INSTANCE_KEY, ENGINE_SOCKET_KEY, ENGINE_TOKEN_KEY};
use atelier_layout::paths::{Role, Surface, PUBLICATION_API_KEY, SERVICE_TOKEN};
use atelier_layout::services::{self, env, EGRESS_PORT};
use atelier_layout::{Layout, SiteOrdinal};
use serde::Serialize;

use super::{artifact, safe_path, RenderError};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

/// Appends the env file, `sites.json`, the engine fragment and the gate plans.
pub(super) fn render(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    out: &mut Vec<Artifact>,
) -> Result<(), RenderError> {
    out.push(artifact(
        layout,
        layout.env_file(),
        Role::EnvFile,
        ArtifactKind::Env,
        CommentStyle::Hash,
        &env_file(layout, sites)?,
    ));
    out.push(artifact(
        layout,
        layout.site_table_path(),
        Role::SiteTable,
        ArtifactKind::Sites,
        CommentStyle::Slashes,
        &site_table(layout, sites)?,
    ));
    out.push(artifact(
        layout,
        layout.engine_fragment_path(),
        Role::EngineFragment,
        ArtifactKind::EngineFragment,
        CommentStyle::Hash,
        &engine_fragment(layout)?,
    ));
    for &(k, _) in sites {
        for door in Door::with_way_out() {
            if let (Some(path), Some(body)) =
                (layout.gate_plan_path(k, door), gate_plan(layout, k, door)?)
            {
                out.push(artifact(
                    layout,
                    path,
                    Role::GatePlan,
                    ArtifactKind::Gate,
                    CommentStyle::Slashes,
                    &body,
                ));
            }
        }
    }
    Ok(())
}

fn path_value(path: &std::path::Path) -> Result<String, RenderError> {
    safe_path(path)
}

/// sited's settings, one `KEY="value"` per line, sorted by key.
fn env_file(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Result<String, RenderError> {
    let decl = layout.declaration();
    let mut keys: BTreeMap<&'static str, String> = BTreeMap::new();
    keys.insert(env::INSTANCE, layout.instance().to_string());
    keys.insert(
        env::WEB_SERVER,
        match decl.web.server {
            WebServer::Nginx => "nginx",
            WebServer::Apache => "apache",
        }
        .to_owned(),
    );
    keys.insert(env::SITES_ROOT, path_value(&layout.sites_root())?);
    keys.insert(env::AUDIT_DIR, path_value(&layout.audit_root())?);
    keys.insert(env::WEBSPACE_BASE, path_value(&layout.webspace_base())?);
    keys.insert(env::SITE_TABLE_FILE, path_value(&layout.site_table_path())?);
    keys.insert(
        env::PREPROD_HOST_PREFIX,
        decl.serving.preprod.host_prefix.clone(),
    );
    keys.insert(
        env::PROD_URL_SCHEME,
        match decl.serving.prod.tls.mode {
            TlsMode::None => "http",
            TlsMode::Letsencrypt | TlsMode::Files => "https",
        }
        .to_owned(),
    );
    keys.insert(env::PUBLICATION_API_URL, decl.publication_api.url.clone());
    keys.insert(env::AGENT_DRIVER, decl.agent.driver.as_str().to_owned());
    keys.insert(env::AGENT_CONFINEMENT, "systemd_scope".to_owned());
    keys.insert(
        env::SITE_UNIT_PREFIX,
        names::site_unit_prefix(layout.instance()),
    );
    keys.insert(
        env::SITE_IDENTITIES,
        services::render_site_identities(sites.iter().map(|(k, site)| (site.slug.as_str(), *k))),
    );
    keys.insert(env::RUNTIME_DIR, path_value(&layout.runtime_dir())?);
    keys.insert(env::AGENT_STATE_ROOT, path_value(&layout.agents_root())?);
    // Where the binaries and templates are installed, from the same derivation as the units'
    // ExecStart=: sited expects the shim a door unit runs and hands the build door its
    // atelier-build, so a moved install reaches it here rather than through its defaults.
    keys.insert(
        env::SHIM_BIN,
        path_value(&layout.binary(services::SHIM_BINARY))?,
    );
    keys.insert(
        env::BUILD_BIN,
        path_value(&layout.binary(services::BUILD_BINARY))?,
    );
    keys.insert(env::TEMPLATES_DIR, path_value(&layout.templates_dir())?);
    if let Some(systemctl) = &decl.agent.systemctl_bin {
        keys.insert(env::SYSTEMCTL_BIN, path_value(systemctl)?);
    }
    // Each declared model setting is rendered whatever the driver: switching the driver is then
    // one change to the declaration, not two.
    for (key, value) in [
        (
            env::AGENT_ANTHROPIC_BASE_URL,
            &decl.agent.anthropic_base_url,
        ),
        (env::AGENT_OPENAI_BASE_URL, &decl.agent.openai_base_url),
        (env::AGENT_OPENAI_MODEL, &decl.agent.openai_model),
        (env::AGENT_ANTHROPIC_MODEL, &decl.agent.anthropic_model),
    ] {
        if let Some(value) = value {
            keys.insert(key, value.clone());
        }
    }
    for (driver, bin) in &decl.agent.bins {
        keys.insert(services::driver_bin_env(*driver), path_value(bin)?);
    }
    let limits = &decl.limits;
    for (key, value) in [
        (env::MAX_SITES, limits.max_sites),
        (env::MAX_CONCURRENT_SESSIONS, limits.max_concurrent_sessions),
        (env::SITE_DISK_QUOTA_MB, limits.site_disk_quota_mb),
        (env::RELEASES_RETAINED, limits.releases_retained),
        (env::SESSION_TURN_TIMEOUT_MS, limits.session_turn_timeout_ms),
        (env::INSTALL_TIMEOUT_MS, limits.install_timeout_ms),
        (env::BUILD_TIMEOUT_MS, limits.build_timeout_ms),
        (env::GIT_TIMEOUT_MS, limits.git_timeout_ms),
    ] {
        if let Some(value) = value {
            keys.insert(key, value.to_string());
        }
    }

    let mut body = format!(
        "# sited's settings for instance {}. No credential is written here: PID 1 hands each\n\
         # one to sited through LoadCredential= (id <- root-only source file):\n",
        layout.instance()
    );
    for (id, source) in layout.sited_credential_sources() {
        writeln!(body, "#   {id} <- {}", safe_path(&source)?).ok();
    }
    let model_keys: Vec<String> = layout
        .gate_credential_sources()
        .into_keys()
        .filter(|id| atelier_layout::paths::MODEL_KEYS.contains(&id.as_str()))
        .collect();
    if !model_keys.is_empty() {
        writeln!(
            body,
            "# The model's key ({}) goes to each site's gate instead, which adds it to the\n\
             # agent's relayed model requests: no agent holds it.",
            model_keys.join(", ")
        )
        .ok();
    }
    for (key, value) in keys {
        writeln!(body, "{key}={}", env_value(key, &value)?).ok();
    }
    Ok(body)
}

/// A value double-quoted for an env file; refuses what a reader could expand or mis-split,
/// and any key that looks like it names a credential.
pub fn env_value(key: &str, value: &str) -> Result<String, RenderError> {
    if env::is_secret_looking(key) {
        return Err(RenderError::UnsafeValue {
            what: key.to_owned(),
            why: "an env file never carries a credential-looking key",
        });
    }
    if value
        .chars()
        .any(|c| c.is_control() || c == '$' || c == '`')
    {
        return Err(RenderError::UnsafeValue {
            what: key.to_owned(),
            why: "an env value may not hold control characters, '$' or '`'",
        });
    }
    Ok(format!(
        "\"{}\"",
        value.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

fn surface_row(
    layout: &Layout<'_>,
    site: &Site,
    surface: Surface,
) -> Result<SurfacePaths, RenderError> {
    Ok(SurfacePaths {
        store_dir: safe_path(&layout.release_store(site, surface))?.into(),
        link_path: safe_path(&layout.served_link(site, surface))?.into(),
    })
}

fn to_json(value: &impl Serialize) -> String {
    // Serializing these plain structs of strings and numbers cannot fail.
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// The site table: every site's placement, sorted by slug.
fn site_table(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Result<String, RenderError> {
    let mut rows = Vec::new();
    for &(_, site) in sites {
        rows.push(SiteRow {
            slug: site.slug.clone(),
            domain: site.domain.clone(),
            webspace: safe_path(&layout.webspace(site))?.into(),
            surfaces: Surfaces {
                preprod: surface_row(layout, site, Surface::Preprod)?,
                prod: surface_row(layout, site, Surface::Prod)?,
            },
        });
    }
    rows.sort_by(|a, b| a.slug.cmp(&b.slug));
    Ok(to_json(&SiteTable {
        version: FORMAT_VERSION,
        instance: layout.instance().to_string(),
        webspace_base: safe_path(&layout.webspace_base())?.into(),
        sites: rows,
    }))
}

/// The engine's pairing keys. The token is named by the file that holds it, never written.
fn engine_fragment(layout: &Layout<'_>) -> Result<String, RenderError> {
    let token_file = layout.credentials_dir().join(SERVICE_TOKEN);
    Ok(format!(
        "# The engine's side of the pairing with Atelier instance {inst}. Copy these keys into the\n\
         # engine's private environment. The token is deliberately not here: set\n\
         # {ENGINE_TOKEN_KEY} to the content of the root-only file\n\
         #   {token}\n\
         # and keep it out of any file a web server or a site can read.\n\
         {ENGINE_INSTANCE_KEY}={instance_value}\n\
         {ENGINE_SOCKET_KEY}={socket_value}\n",
        inst = layout.instance(),
        token = safe_path(&token_file)?,
        instance_value = env_value(ENGINE_INSTANCE_KEY, layout.instance().as_str())?,
        socket_value = env_value(
            ENGINE_SOCKET_KEY,
            &safe_path(&layout.sited_socket_path())?
        )?,
    ))
}

/// What a site door may reach through its gate; `None` for a door with no way out.
fn gate_plan(
    layout: &Layout<'_>,
    k: SiteOrdinal,
    door: Door,
) -> Result<Option<String>, RenderError> {
    let Some(plan) = layout.egress_plan(door) else {
        return Ok(None);
    };
    let decl = layout.declaration();
    let mcp = plan.mcp.then(|| McpRelay {
        upstream: format!("{}/mcp", decl.publication_api.url.trim_end_matches('/')),
        credential: layout
            .credential_sources()
            .contains_key(PUBLICATION_API_KEY)
            .then(|| PUBLICATION_API_KEY.to_owned()),
    });
    Ok(Some(to_json(&GatePlan {
        version: FORMAT_VERSION,
        instance: layout.instance().to_string(),
        site: k.get(),
        door,
        port: EGRESS_PORT,
        hosts: plan.hosts,
        mcp,
        model: plan.model,
    })))
}
