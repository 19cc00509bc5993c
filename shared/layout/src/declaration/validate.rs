//! Phases 2 and 3a: the raw serde layer (collecting every unknown key and wrong type), then
//! each value through its grammar into the typed [`Declaration`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::grammar::{self, Refusal};
use super::raw::{
    RawAgent, RawAuth, RawChat, RawDeclaration, RawEngine, RawLimits, RawMonitoring, RawPaths,
    RawPreprod, RawPublicationApi, RawResources, RawRoots, RawServing, RawSite, RawTls, RawWeb,
};
use super::{
    Agent, AgentDriver, AuthMode, AuthUser, Chat, Declaration, DeclaredPaths, DeclaredRoots,
    Engine, Issue, JsonPath, Limits, Monitoring, Preprod, PreprodAuth, Prod, PublicationApi,
    Reason, Resources, Serving, Site, Tls, TlsMode, Web, WebServer,
};
use crate::names::{InstanceName, MAX_ORDINAL};
use crate::paths::{MAX_TIMEOUT_MS, MIN_TIMEOUT_MS};

/// serde stops at its first error; each round removes the offending key and tries again, so
/// every unknown key and wrong type is reported. The bound only stops a pathological document.
const MAX_SCHEMA_ROUNDS: usize = 256;

/// Runs the raw serde layer, collecting an issue per unknown key or wrong type.
pub(crate) fn schema(mut document: Value, issues: &mut Vec<Issue>) -> Option<RawDeclaration> {
    if !document.is_object() {
        issues.push(Issue::new(
            &JsonPath::default(),
            Reason::WrongType,
            "must be a JSON object",
        ));
        return None;
    }
    for _ in 0..MAX_SCHEMA_ROUNDS {
        let err = match serde_path_to_error::deserialize::<_, RawDeclaration>(&document) {
            Ok(raw) => return Some(raw),
            Err(err) => err,
        };
        let mut at = JsonPath::default();
        for segment in err.path().iter() {
            at = match segment {
                serde_path_to_error::Segment::Seq { index } => at.index(*index),
                serde_path_to_error::Segment::Map { key } => at.key(key),
                serde_path_to_error::Segment::Enum { variant } => at.key(variant),
                serde_path_to_error::Segment::Unknown => return None,
            };
        }
        let message = err.inner().to_string();
        let (parent, key, issue) = match unknown_field(&message) {
            Some(key) => {
                // The path may or may not end at the unknown key itself.
                let parent = match at.0.last() {
                    Some(super::Step::Key(last)) if last == key => {
                        JsonPath(at.0[..at.0.len() - 1].to_vec())
                    }
                    _ => at.clone(),
                };
                let path = parent.key(key);
                let issue = Issue::new(&path, Reason::UnknownKey, "is not a key of the schema");
                (parent, key.to_owned(), issue)
            }
            None => {
                // serde's message would quote the value, which may be a credential; keep only
                // what was expected.
                let expected = message
                    .split_once(", expected ")
                    .map(|(_, expected)| format!("has the wrong type: expected {expected}"))
                    .unwrap_or_else(|| "has the wrong type".to_owned());
                let issue = Issue::new(&at, Reason::WrongType, expected);
                let Some(super::Step::Key(key)) = at.0.last().cloned() else {
                    // An array element cannot be removed without renumbering its siblings.
                    issues.push(issue);
                    return None;
                };
                (JsonPath(at.0[..at.0.len() - 1].to_vec()), key, issue)
            }
        };
        issues.push(issue);
        // A key that cannot be removed would fail the same way forever.
        document
            .pointer_mut(&parent.pointer())
            .and_then(Value::as_object_mut)
            .and_then(|object| object.remove(&key))?;
    }
    None
}

/// The key named by serde's "unknown field `x`, expected …".
fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// Collects issues while building typed values.
struct Validator<'a> {
    issues: &'a mut Vec<Issue>,
}

impl Validator<'_> {
    fn refuse(&mut self, path: &JsonPath, reason: Reason, message: impl Into<String>) {
        self.issues.push(Issue::new(path, reason, message));
    }

    fn require<T>(&mut self, value: Option<T>, path: &JsonPath) -> Option<T> {
        if value.is_none() {
            self.refuse(path, Reason::MissingKey, "is required");
        }
        value
    }

    fn check<T>(&mut self, path: &JsonPath, result: Result<T, Refusal>) -> Option<T> {
        result
            .map_err(|(reason, message)| self.refuse(path, reason, message))
            .ok()
    }

    /// An optional value through its grammar: `Some(None)` when absent, `None` when refused.
    fn optional<T>(
        &mut self,
        value: Option<String>,
        path: &JsonPath,
        grammar: impl Fn(&str) -> Result<T, Refusal>,
    ) -> Option<Option<T>> {
        match value {
            None => Some(None),
            Some(value) => self.check(path, grammar(&value)).map(Some),
        }
    }

    fn required<T>(
        &mut self,
        value: Option<String>,
        path: &JsonPath,
        grammar: impl Fn(&str) -> Result<T, Refusal>,
    ) -> Option<T> {
        let value = self.require(value, path)?;
        self.check(path, grammar(&value))
    }

    fn choice<T: Copy>(
        &mut self,
        value: Option<String>,
        path: &JsonPath,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let value = self.require(value, path)?;
        let found = choices.iter().find(|(name, _)| *name == value);
        if found.is_none() {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            self.refuse(
                path,
                Reason::BadValue,
                format!("{value:?} is not one of {}", names.join(", ")),
            );
        }
        found.map(|(_, choice)| *choice)
    }

    /// A run's ceiling in ms, between [`MIN_TIMEOUT_MS`] and [`MAX_TIMEOUT_MS`].
    fn timeout(&mut self, value: Option<i64>, path: &JsonPath) -> Option<Option<u64>> {
        let ms = self.number(value, path, MIN_TIMEOUT_MS)?;
        if let Some(ms) = ms.filter(|ms| *ms > MAX_TIMEOUT_MS) {
            self.refuse(
                path,
                Reason::OutOfRange,
                format!("{ms} is above the maximum {MAX_TIMEOUT_MS} (a week)"),
            );
            return None;
        }
        Some(ms)
    }

    fn number(&mut self, value: Option<i64>, path: &JsonPath, min: u64) -> Option<Option<u64>> {
        match value {
            None => Some(None),
            Some(n) => match u64::try_from(n) {
                Ok(n) if n >= min => Some(Some(n)),
                _ => {
                    self.refuse(
                        path,
                        Reason::OutOfRange,
                        format!("{n} is below the minimum {min}"),
                    );
                    None
                }
            },
        }
    }
}

const DRIVERS: [(&str, AgentDriver); 4] = [
    ("claude_code", AgentDriver::ClaudeCode),
    ("opencode", AgentDriver::Opencode),
    ("pi", AgentDriver::Pi),
    ("atelier", AgentDriver::Atelier),
];

/// Builds the typed declaration; `None` when any value was refused (the issues say why).
pub(crate) fn validate(raw: RawDeclaration, issues: &mut Vec<Issue>) -> Option<Declaration> {
    let v = &mut Validator { issues };
    let root = JsonPath::default();

    let instance = v.required(raw.instance, &root.key("instance"), |name| {
        let instance =
            InstanceName::new(name).map_err(|err| (Reason::BadInstanceName, err.to_string()))?;
        match crate::names::service_user_taken(name) {
            Some(whose) => Err((
                Reason::BadInstanceName,
                format!(
                    "instance name {name:?} would give its site daemon the user of {whose}, \
                     so one host could not hold both"
                ),
            )),
            None => Ok(instance),
        }
    });
    let description = v.optional(
        raw.description,
        &root.key("description"),
        grammar::description,
    );
    let engine = v
        .require(raw.engine, &root.key("engine"))
        .and_then(|raw| engine(v, raw, &root.key("engine")));
    let web = v
        .require(raw.web, &root.key("web"))
        .and_then(|raw| web(v, raw, &root.key("web")));
    let publication_api = v
        .require(raw.publication_api, &root.key("publication_api"))
        .and_then(|raw| publication_api(v, raw, &root.key("publication_api")));
    let paths = paths(v, raw.paths.unwrap_or_default(), &root.key("paths"));
    let roots = roots(v, raw.roots.unwrap_or_default(), &root.key("roots"));
    let webspace_base = v.optional(
        raw.webspace_base,
        &root.key("webspace_base"),
        grammar::absolute_path,
    );
    let sites = sites(v, raw.sites.unwrap_or_default(), &root.key("sites"));
    let serving = v
        .require(raw.serving, &root.key("serving"))
        .and_then(|raw| serving(v, raw, &root.key("serving")));
    let agent = v
        .require(raw.agent, &root.key("agent"))
        .and_then(|raw| agent(v, raw, &root.key("agent")));
    let secrets = secrets(v, raw.secrets.unwrap_or_default(), &root.key("secrets"));
    let limits = limits(v, raw.limits.unwrap_or_default(), &root.key("limits"));
    let resources = resources(v, raw.resources.unwrap_or_default(), &root.key("resources"));
    let chat = match raw.chat {
        None => Some(None),
        Some(raw) => chat(v, raw, &root.key("chat")).map(Some),
    };
    let monitoring = match raw.monitoring {
        None => Some(None),
        Some(raw) => monitoring(v, raw, &root.key("monitoring")).map(Some),
    };

    Some(Declaration {
        instance: instance?,
        description: description?.unwrap_or_default(),
        engine: engine?,
        web: web?,
        publication_api: publication_api?,
        paths: paths?,
        roots: roots?,
        webspace_base: webspace_base?,
        sites: sites?,
        serving: serving?,
        agent: agent?,
        secrets: secrets?,
        limits: limits?,
        resources: resources?,
        chat: chat?,
        monitoring: monitoring?,
    })
}

fn chat(v: &mut Validator<'_>, raw: RawChat, at: &JsonPath) -> Option<Chat> {
    let cms_origin = v.required(raw.cms_origin, &at.key("cms_origin"), grammar::cms_origin);
    let public_origin = v.required(
        raw.public_origin,
        &at.key("public_origin"),
        grammar::public_origin,
    );
    let master_key = v.required(
        raw.master_key,
        &at.key("master_key"),
        grammar::absolute_path,
    );
    let timeout_at = at.key("provider_idle_timeout_ms");
    let bounds = crate::services::CHATD_PROVIDER_IDLE_TIMEOUT_MS;
    let provider_idle_timeout_ms =
        v.number(raw.provider_idle_timeout_ms, &timeout_at, *bounds.start());
    if let Some(Some(ms)) = provider_idle_timeout_ms {
        if ms > *bounds.end() {
            v.refuse(
                &timeout_at,
                Reason::OutOfRange,
                format!(
                    "{ms} is above the maximum {}: the CMS's vhost waits an hour at most for a \
                     chat stream's next byte",
                    bounds.end()
                ),
            );
        }
    }
    let public_origin = public_origin?;
    Some(Chat {
        cms_origin: cms_origin?,
        host: grammar::url_host(&public_origin).to_owned(),
        public_origin,
        master_key: master_key?,
        provider_idle_timeout_ms: provider_idle_timeout_ms?,
    })
}

fn monitoring(v: &mut Validator<'_>, raw: RawMonitoring, at: &JsonPath) -> Option<Monitoring> {
    let group = v.required(raw.group, &at.key("group"), grammar::unix_name);
    Some(Monitoring { group: group? })
}

fn engine(v: &mut Validator<'_>, raw: RawEngine, at: &JsonPath) -> Option<Engine> {
    let private_dir = v.required(
        raw.private_dir,
        &at.key("private_dir"),
        grammar::absolute_path,
    );
    let group = v.required(raw.group, &at.key("group"), grammar::unix_name);
    Some(Engine {
        private_dir: private_dir?,
        group: group?,
    })
}

fn web(v: &mut Validator<'_>, raw: RawWeb, at: &JsonPath) -> Option<Web> {
    let server = match raw.server {
        None => Some(WebServer::Nginx),
        server => v.choice(
            server,
            &at.key("server"),
            &[("nginx", WebServer::Nginx), ("apache", WebServer::Apache)],
        ),
    };
    let group = v.required(raw.group, &at.key("group"), grammar::unix_name);
    Some(Web {
        server: server?,
        group: group?,
    })
}

fn publication_api(
    v: &mut Validator<'_>,
    raw: RawPublicationApi,
    at: &JsonPath,
) -> Option<PublicationApi> {
    let url = v.required(raw.url, &at.key("url"), grammar::url);
    let key_path = v.optional(raw.key_path, &at.key("key_path"), grammar::absolute_path);
    Some(PublicationApi {
        url: url?,
        key_path: key_path?,
    })
}

fn paths(v: &mut Validator<'_>, raw: RawPaths, at: &JsonPath) -> Option<DeclaredPaths> {
    let mut path =
        |value: Option<String>, key: &str| v.optional(value, &at.key(key), grammar::absolute_path);
    let config_base = path(raw.config_base, "config_base");
    let state_base = path(raw.state_base, "state_base");
    let unit_dir = path(raw.unit_dir, "unit_dir");
    let vhost_dir = path(raw.vhost_dir, "vhost_dir");
    let vhost_enabled_dir = path(raw.vhost_enabled_dir, "vhost_enabled_dir");
    let polkit_rules_dir = path(raw.polkit_rules_dir, "polkit_rules_dir");
    let tmpfiles_dir = path(raw.tmpfiles_dir, "tmpfiles_dir");
    let bin_dir = path(raw.bin_dir, "bin_dir");
    let templates_dir = path(raw.templates_dir, "templates_dir");
    Some(DeclaredPaths {
        config_base: config_base?,
        state_base: state_base?,
        unit_dir: unit_dir?,
        vhost_dir: vhost_dir?,
        vhost_enabled_dir: vhost_enabled_dir?,
        polkit_rules_dir: polkit_rules_dir?,
        tmpfiles_dir: tmpfiles_dir?,
        bin_dir: bin_dir?,
        templates_dir: templates_dir?,
    })
}

fn roots(v: &mut Validator<'_>, raw: RawRoots, at: &JsonPath) -> Option<DeclaredRoots> {
    let sites = v.optional(raw.sites, &at.key("sites"), grammar::absolute_path);
    let audit = v.optional(raw.audit, &at.key("audit"), grammar::absolute_path);
    Some(DeclaredRoots {
        sites: sites?,
        audit: audit?,
    })
}

fn sites(v: &mut Validator<'_>, raw: Vec<RawSite>, at: &JsonPath) -> Option<Vec<Site>> {
    if raw.len() > usize::from(MAX_ORDINAL) {
        v.refuse(
            at,
            Reason::OrdinalOverflow,
            format!(
                "declares {} sites; ordinals 1..={MAX_ORDINAL} name at most {MAX_ORDINAL}",
                raw.len()
            ),
        );
    }
    let mut sites = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (index, site) in raw.into_iter().enumerate() {
        let at = at.index(index);
        let slug = v.required(site.slug, &at.key("slug"), grammar::slug);
        let domain = v.required(site.domain, &at.key("domain"), grammar::domain);
        let webspace = v.optional(site.webspace, &at.key("webspace"), grammar::absolute_path);
        match (slug, domain, webspace) {
            (Some(slug), Some(domain), Some(webspace)) => sites.push(Site {
                slug,
                domain,
                webspace,
            }),
            _ => ok = false,
        }
    }
    ok.then_some(sites)
}

fn serving(v: &mut Validator<'_>, raw: RawServing, at: &JsonPath) -> Option<Serving> {
    let preprod = v
        .require(raw.preprod, &at.key("preprod"))
        .and_then(|raw| preprod(v, raw, &at.key("preprod")));
    let prod = v
        .require(raw.prod, &at.key("prod"))
        .and_then(|raw| prod(v, raw, &at.key("prod")));
    let mut aliases = Some(BTreeMap::new());
    for (host, slug) in raw.aliases.unwrap_or_default() {
        let host_at = at.key("aliases").key(&host);
        let checked_host = v.check(&host_at, grammar::domain(&host));
        let checked_slug = v.check(&host_at, grammar::slug(&slug));
        match (checked_host, checked_slug, aliases.as_mut()) {
            (Some(host), Some(slug), Some(map)) => {
                map.insert(host, slug);
            }
            _ => aliases = None,
        }
    }
    Some(Serving {
        preprod: preprod?,
        prod: prod?,
        aliases: aliases?,
    })
}

fn preprod(v: &mut Validator<'_>, raw: RawPreprod, at: &JsonPath) -> Option<Preprod> {
    let enabled = v.require(raw.enabled, &at.key("enabled"));
    let host_prefix = v.optional(
        raw.host_prefix,
        &at.key("host_prefix"),
        grammar::host_prefix,
    );
    let auth = v
        .require(raw.auth, &at.key("auth"))
        .and_then(|raw| auth(v, raw, &at.key("auth")));
    Some(Preprod {
        enabled: enabled?,
        host_prefix: host_prefix?.unwrap_or_else(|| "pre".to_owned()),
        auth: auth?,
    })
}

fn auth(v: &mut Validator<'_>, raw: RawAuth, at: &JsonPath) -> Option<PreprodAuth> {
    let mode = v.choice(
        raw.mode,
        &at.key("mode"),
        &[("htpasswd", AuthMode::Htpasswd), ("none", AuthMode::None)],
    );
    let realm = v.optional(raw.realm, &at.key("realm"), grammar::realm);
    let htpasswd = v.optional(raw.htpasswd, &at.key("htpasswd"), grammar::absolute_path);
    let mut users = Some(Vec::new());
    for (index, user) in raw.users.unwrap_or_default().into_iter().enumerate() {
        let user_at = at.key("users").index(index);
        let name = v.required(user.name, &user_at.key("name"), grammar::auth_user);
        let password_file = v.required(
            user.password_file,
            &user_at.key("password_file"),
            grammar::absolute_path,
        );
        match (name, password_file, users.as_mut()) {
            (Some(name), Some(password_file), Some(list)) => list.push(AuthUser {
                name,
                password_file,
            }),
            _ => users = None,
        }
    }
    Some(PreprodAuth {
        mode: mode?,
        realm: realm?.unwrap_or_else(|| "Atelier preprod".to_owned()),
        htpasswd: htpasswd?,
        users: users?,
    })
}

fn prod(v: &mut Validator<'_>, raw: super::raw::RawProd, at: &JsonPath) -> Option<Prod> {
    let tls = v
        .require(raw.tls, &at.key("tls"))
        .and_then(|raw| tls(v, raw, &at.key("tls")));
    Some(Prod { tls: tls? })
}

fn tls(v: &mut Validator<'_>, raw: RawTls, at: &JsonPath) -> Option<Tls> {
    let mode = v.choice(
        raw.mode,
        &at.key("mode"),
        &[
            ("letsencrypt", TlsMode::Letsencrypt),
            ("files", TlsMode::Files),
            ("none", TlsMode::None),
        ],
    );
    let certificate = v.optional(
        raw.certificate,
        &at.key("certificate"),
        grammar::absolute_path,
    );
    let key = v.optional(raw.key, &at.key("key"), grammar::absolute_path);
    let account_email = v.optional(raw.account_email, &at.key("account_email"), grammar::email);
    Some(Tls {
        mode: mode?,
        certificate: certificate?,
        key: key?,
        account_email: account_email?,
    })
}

fn agent(v: &mut Validator<'_>, raw: RawAgent, at: &JsonPath) -> Option<Agent> {
    let driver = v.choice(raw.driver, &at.key("driver"), &DRIVERS);
    let mut bins = Some(BTreeMap::new());
    for (name, bin) in raw.bins.unwrap_or_default() {
        let bin_at = at.key("bins").key(&name);
        let Some((_, driver)) = DRIVERS.iter().find(|(known, _)| *known == name) else {
            v.refuse(&bin_at, Reason::UnknownKey, "is not an agent driver");
            bins = None;
            continue;
        };
        match (
            v.check(&bin_at, grammar::absolute_path(&bin)),
            bins.as_mut(),
        ) {
            (Some(path), Some(map)) => {
                map.insert(*driver, path);
            }
            _ => bins = None,
        }
    }
    let provider_hosts = hosts(v, raw.provider_hosts, &at.key("provider_hosts"));
    let registry_hosts = hosts(v, raw.registry_hosts, &at.key("registry_hosts"));
    let anthropic_base_url = v.optional(
        raw.anthropic_base_url,
        &at.key("anthropic_base_url"),
        grammar::provider_url,
    );
    let openai_base_url = v.optional(
        raw.openai_base_url,
        &at.key("openai_base_url"),
        grammar::provider_url,
    );
    let openai_model = v.optional(raw.openai_model, &at.key("openai_model"), grammar::model_id);
    let anthropic_model = v.optional(
        raw.anthropic_model,
        &at.key("anthropic_model"),
        grammar::model_id,
    );
    let systemctl_bin = v.optional(
        raw.systemctl_bin,
        &at.key("systemctl_bin"),
        grammar::absolute_path,
    );
    Some(Agent {
        driver: driver?,
        bins: bins?,
        provider_hosts: provider_hosts?,
        registry_hosts: registry_hosts?,
        anthropic_base_url: anthropic_base_url?,
        openai_base_url: openai_base_url?,
        openai_model: openai_model?,
        anthropic_model: anthropic_model?,
        systemctl_bin: systemctl_bin?,
    })
}

fn hosts(
    v: &mut Validator<'_>,
    raw: Option<Vec<String>>,
    at: &JsonPath,
) -> Option<Option<Vec<String>>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let mut hosts: Option<Vec<String>> = Some(Vec::new());
    for (index, host) in raw.iter().enumerate() {
        match (
            v.check(&at.index(index), grammar::egress_host(host)),
            hosts.as_mut(),
        ) {
            (Some(host), Some(list)) if !list.contains(&host) => list.push(host),
            (Some(_), Some(_)) => {}
            _ => hosts = None,
        }
    }
    hosts.map(Some)
}

fn secrets(
    v: &mut Validator<'_>,
    raw: BTreeMap<String, String>,
    at: &JsonPath,
) -> Option<BTreeMap<String, PathBuf>> {
    let mut secrets = Some(BTreeMap::new());
    for (name, path) in raw {
        let entry_at = at.key(&name);
        let name = v.check(&entry_at, grammar::credential_name(&name));
        let path = v.check(&entry_at, grammar::absolute_path(&path));
        match (name, path, secrets.as_mut()) {
            (Some(name), Some(path), Some(map)) => {
                map.insert(name, path);
            }
            _ => secrets = None,
        }
    }
    secrets
}

fn limits(v: &mut Validator<'_>, raw: RawLimits, at: &JsonPath) -> Option<Limits> {
    let max_sites = v.number(raw.max_sites, &at.key("max_sites"), 1);
    if let Some(Some(max)) = max_sites {
        if max > u64::from(MAX_ORDINAL) {
            v.refuse(
                &at.key("max_sites"),
                Reason::OrdinalOverflow,
                format!("{max} sites cannot be named by ordinals 1..={MAX_ORDINAL}"),
            );
        }
    }
    let max_concurrent_sessions = v.number(
        raw.max_concurrent_sessions,
        &at.key("max_concurrent_sessions"),
        1,
    );
    let site_disk_quota_mb = v.number(raw.site_disk_quota_mb, &at.key("site_disk_quota_mb"), 1);
    let releases_retained = v.number(raw.releases_retained, &at.key("releases_retained"), 1);
    let session_turn_timeout_ms = v.timeout(
        raw.session_turn_timeout_ms,
        &at.key("session_turn_timeout_ms"),
    );
    let install_timeout_ms = v.timeout(raw.install_timeout_ms, &at.key("install_timeout_ms"));
    let build_timeout_ms = v.timeout(raw.build_timeout_ms, &at.key("build_timeout_ms"));
    let git_timeout_ms = v.timeout(raw.git_timeout_ms, &at.key("git_timeout_ms"));
    Some(Limits {
        max_sites: max_sites?,
        max_concurrent_sessions: max_concurrent_sessions?,
        site_disk_quota_mb: site_disk_quota_mb?,
        releases_retained: releases_retained?,
        session_turn_timeout_ms: session_turn_timeout_ms?,
        install_timeout_ms: install_timeout_ms?,
        build_timeout_ms: build_timeout_ms?,
        git_timeout_ms: git_timeout_ms?,
    })
}

fn resources(v: &mut Validator<'_>, raw: RawResources, at: &JsonPath) -> Option<Resources> {
    let memory_max = v.optional(raw.memory_max, &at.key("memory_max"), grammar::memory_size);
    let memory_high = v.optional(
        raw.memory_high,
        &at.key("memory_high"),
        grammar::memory_size,
    );
    let cpu_quota = v.optional(raw.cpu_quota, &at.key("cpu_quota"), grammar::cpu_quota);
    let tasks_max = v.number(raw.tasks_max, &at.key("tasks_max"), 1);
    Some(Resources {
        memory_max: memory_max?,
        memory_high: memory_high?,
        cpu_quota: cpu_quota?,
        tasks_max: tasks_max?,
    })
}
