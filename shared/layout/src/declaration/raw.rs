//! The raw layer of `instance.json`: serde structs that refuse unknown keys, every field optional
//! so that a missing value is reported by validation together with everything else.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole document as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeclaration {
    pub instance: Option<String>,
    pub description: Option<String>,
    pub engine: Option<RawEngine>,
    pub web: Option<RawWeb>,
    pub publication_api: Option<RawPublicationApi>,
    pub paths: Option<RawPaths>,
    pub roots: Option<RawRoots>,
    pub webspace_base: Option<String>,
    pub sites: Option<Vec<RawSite>>,
    pub serving: Option<RawServing>,
    pub agent: Option<RawAgent>,
    pub secrets: Option<BTreeMap<String, String>>,
    pub limits: Option<RawLimits>,
    pub resources: Option<RawResources>,
    pub chat: Option<RawChat>,
    pub monitoring: Option<RawMonitoring>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMonitoring {
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChat {
    pub cms_origin: Option<String>,
    pub public_origin: Option<String>,
    pub master_key: Option<String>,
    pub provider_idle_timeout_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEngine {
    pub private_dir: Option<String>,
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWeb {
    pub server: Option<String>,
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPublicationApi {
    pub url: Option<String>,
    pub key_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPaths {
    pub config_base: Option<String>,
    pub state_base: Option<String>,
    pub unit_dir: Option<String>,
    pub vhost_dir: Option<String>,
    pub vhost_enabled_dir: Option<String>,
    pub polkit_rules_dir: Option<String>,
    pub tmpfiles_dir: Option<String>,
    pub bin_dir: Option<String>,
    pub templates_dir: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoots {
    pub sites: Option<String>,
    pub audit: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSite {
    pub slug: Option<String>,
    pub domain: Option<String>,
    pub webspace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServing {
    pub preprod: Option<RawPreprod>,
    pub prod: Option<RawProd>,
    pub aliases: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPreprod {
    pub enabled: Option<bool>,
    pub host_prefix: Option<String>,
    pub auth: Option<RawAuth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    pub mode: Option<String>,
    pub realm: Option<String>,
    pub htpasswd: Option<String>,
    pub users: Option<Vec<RawAuthUser>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuthUser {
    pub name: Option<String>,
    pub password_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProd {
    pub tls: Option<RawTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub mode: Option<String>,
    pub certificate: Option<String>,
    pub key: Option<String>,
    pub account_email: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub driver: Option<String>,
    pub bins: Option<BTreeMap<String, String>>,
    pub provider_hosts: Option<Vec<String>>,
    pub registry_hosts: Option<Vec<String>>,
    pub anthropic_base_url: Option<String>,
    pub openai_base_url: Option<String>,
    pub openai_model: Option<String>,
    pub anthropic_model: Option<String>,
    pub systemctl_bin: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub max_sites: Option<i64>,
    pub max_concurrent_sessions: Option<i64>,
    pub site_disk_quota_mb: Option<i64>,
    pub releases_retained: Option<i64>,
    pub session_turn_timeout_ms: Option<i64>,
    pub install_timeout_ms: Option<i64>,
    pub build_timeout_ms: Option<i64>,
    pub git_timeout_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResources {
    pub memory_max: Option<String>,
    pub memory_high: Option<String>,
    pub cpu_quota: Option<String>,
    pub tasks_max: Option<i64>,
}
