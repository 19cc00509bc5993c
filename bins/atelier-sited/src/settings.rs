//! sited's settings: raw values from the command line and systemd, validated into [`Settings`].

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use atelier_daemon::problems::Problems;
use atelier_layout::names::InstanceName;

use crate::manifest::Driver;
use crate::sites::SitesConfig;

/// Where the engine mounts the daemon unless the instance says otherwise.
pub const DEFAULT_BASE_PATH: &str = "/publication/site_builder";

/// Mode of the socket sited binds itself outside socket activation: the service user and the
/// engine's group, as the `.socket` unit declares it.
pub(crate) const FALLBACK_SOCKET_MODE: u32 = 0o660;

/// The credential that holds the bearer token the engine presents.
pub const SERVICE_TOKEN_CREDENTIAL: &str = atelier_layout::paths::SERVICE_TOKEN;

/// A service token shorter than this is refused: it is the only thing between any local process
/// that can reach the socket and every site.
const MIN_TOKEN_LEN: usize = 32;

const DEFAULT_DRIVER: Driver = Driver::ClaudeCode;
const DEFAULT_MAX_SITES: u32 = 20;
const DEFAULT_MAX_CONCURRENT_SESSIONS: u32 = 2;
const DEFAULT_SITE_DISK_QUOTA_MB: u64 = 1024;
const DEFAULT_PREPROD_HOST_PREFIX: &str = "pre";
const DEFAULT_RELEASES_RETAINED: u64 = 5;

/// Settings as given, before validation.
#[derive(Debug, Default, Clone)]
pub struct RawSettings {
    /// The instance name (the unit's `%i`).
    pub instance: String,
    /// The service token, from `$CREDENTIALS_DIRECTORY` or a development token file.
    pub service_token: Option<String>,
    /// Where the engine mounts the daemon.
    pub base_path: Option<String>,
    /// The unix socket to bind when systemd passed none.
    pub listen: Option<PathBuf>,
    /// The workspaces' root (required).
    pub sites_root: Option<PathBuf>,
    /// The audit directory (required).
    pub audit_dir: Option<PathBuf>,
    /// The provisioner's `sites.json` (required).
    pub site_table_file: Option<PathBuf>,
    /// The Publication API's base URL (required).
    pub publication_api_url: Option<String>,
    /// The site templates' directory (required).
    pub templates_dir: Option<PathBuf>,
    /// The most sites the instance may have.
    pub max_sites: Option<u32>,
    /// The most turns running at once across sites.
    pub max_concurrent_sessions: Option<u32>,
    /// A site's disk quota in MiB.
    pub site_disk_quota_mb: Option<u64>,
    /// The driver a site gets when its create names none.
    pub default_driver: Option<String>,
    /// The label before a site's domain on preproduction.
    pub preprod_host_prefix: Option<String>,
    /// Per-command git timeout in milliseconds.
    pub git_timeout_ms: Option<u64>,
    /// `systemd_scope` (the default) or `none`.
    pub agent_confinement: Option<String>,
    /// `production` (the default) or `development`; `none` confinement needs `development`.
    pub deployment: Option<String>,
    /// Where unconfined door HOMEs and the agents' state live.
    pub agent_state_root: Option<PathBuf>,
    /// The shim door units run and sited spawns under `none` (`ATELIER_SHIM_BIN`; default: the
    /// layout's default install of `atelier-shim`).
    pub shim_bin: Option<PathBuf>,
    /// Claude Code's binary; absent means the driver is unavailable.
    pub claude_code_bin: Option<PathBuf>,
    /// Claude Code's model endpoint, when not Anthropic's own.
    pub anthropic_base_url: Option<String>,
    /// Development only: extra certificate authorities a turn's agent trusts.
    pub agent_extra_ca_certs: Option<PathBuf>,
    /// The OpenAI-compatible API a pi turn talks to.
    pub openai_base_url: Option<String>,
    /// The model a pi turn names.
    pub openai_model: Option<String>,
    /// The Anthropic model an atelier turn names; set, atelier speaks Anthropic.
    pub anthropic_model: Option<String>,
    /// opencode's binary.
    pub opencode_bin: Option<PathBuf>,
    /// pi's binary.
    pub pi_bin: Option<PathBuf>,
    /// atelier-agent's binary.
    pub atelier_bin: Option<PathBuf>,
    /// A turn's wall-clock limit in milliseconds.
    pub session_turn_timeout_ms: Option<u64>,
    /// `ATELIER_SITE_IDENTITIES`: the declared sites' ordinals as JSON.
    pub site_identities: Option<String>,
    /// The agent identity epoch (`ATELIER_AGENT_IDENTITY_EPOCH`, default 0).
    pub identity_epoch: Option<i64>,
    /// `ATELIER_RUNTIME_DIR`, which must be the instance's (door sockets are named from it).
    pub runtime_dir: Option<PathBuf>,
    /// Releases kept per surface besides the served one.
    pub releases_retained: Option<u64>,
    /// `http` or `https` (the default): production's URL scheme.
    pub prod_url_scheme: Option<String>,
    /// The install step's deadline in milliseconds.
    pub install_timeout_ms: Option<u64>,
    /// The build step's deadline in milliseconds.
    pub build_timeout_ms: Option<u64>,
    /// `atelier-build` as the build door runs it (`ATELIER_BUILD_BIN`; default: the layout's
    /// default install).
    pub build_bin: Option<PathBuf>,
    /// Credentials from `$CREDENTIALS_DIRECTORY`, for the one child each is meant for.
    pub credentials: AgentCredentials,
}

/// The credentials sited hands on: each reaches only the child it is meant for, never a log.
#[derive(Default, Clone, PartialEq, Eq)]
pub struct AgentCredentials {
    /// Claude Code's API key (`ANTHROPIC_API_KEY`), for claude_code turns only.
    pub anthropic_api_key: Option<String>,
    /// The Publication API key: under `none`, the MCP attachment's header.
    pub publication_api_key: Option<String>,
    /// `OPENCODE_ENV`: `K=V,K=V` pairs for opencode turns only.
    pub opencode_env: Option<String>,
    /// `PI_ENV`: `K=V,K=V` pairs for pi turns only.
    pub pi_env: Option<String>,
    /// atelier-agent's provider key (the `ATELIER_AGENT_API_KEY` credential), for atelier turns
    /// only.
    pub atelier_api_key: Option<String>,
}

impl fmt::Debug for AgentCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use atelier_agents::redacted as shown;
        f.debug_struct("AgentCredentials")
            .field("anthropic_api_key", &shown(&self.anthropic_api_key))
            .field("publication_api_key", &shown(&self.publication_api_key))
            .field("opencode_env", &shown(&self.opencode_env))
            .field("pi_env", &shown(&self.pi_env))
            .field("atelier_api_key", &shown(&self.atelier_api_key))
            .finish()
    }
}

impl AgentSettings {
    /// The credentials as the drivers take them (the pairs were checked at validation).
    pub fn driver_credentials(&self) -> atelier_agents::DriverCredentials {
        let pairs = |text: &Option<String>| {
            text.as_deref()
                .map(|t| parse_pairs(t).unwrap_or_default())
                .unwrap_or_default()
        };
        atelier_agents::DriverCredentials {
            anthropic_api_key: self.credentials.anthropic_api_key.clone(),
            opencode_env: pairs(&self.credentials.opencode_env),
            pi_env: pairs(&self.credentials.pi_env),
            atelier_api_key: self.credentials.atelier_api_key.clone(),
        }
    }
}

/// How runs are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// Every run is a door unit that PID 1 starts (a provisioned host).
    SystemdScope,
    /// sited spawns the shim itself: the declared laptop/CI mode.
    None,
}

/// What sited needs to run agent turns.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// How runs are confined.
    pub confinement: Confinement,
    /// The agents' state root.
    pub state_root: PathBuf,
    /// The shim spawned under `none`.
    pub shim_bin: PathBuf,
    /// Each driver's binary, when configured.
    pub bins: Vec<(Driver, PathBuf)>,
    /// A turn's wall-clock limit.
    pub turn_timeout: Duration,
    /// The credentials.
    pub credentials: AgentCredentials,
    /// The declared sites' ordinals: each one's identity and door sockets.
    pub site_identities: std::collections::BTreeMap<String, atelier_layout::names::SiteOrdinal>,
    /// The identity epoch resume tokens are stamped with.
    pub identity_epoch: i64,
    /// Where the model is, beyond the driver's default.
    pub endpoint: atelier_agents::ModelEndpoint,
}

/// Validated settings.
#[derive(Clone)]
pub struct Settings {
    /// The instance this daemon serves.
    pub instance: InstanceName,
    /// The bearer token; never printed.
    pub(crate) service_token: String,
    /// The mount prefix stripped from every request path.
    pub base_path: String,
    /// The unix socket to bind when not socket-activated.
    pub listen: Option<PathBuf>,
    /// The driver `/health` marks as the default.
    pub default_driver: &'static str,
    /// The audit directory.
    pub audit_dir: PathBuf,
    /// The most turns running at once across sites.
    pub max_concurrent_sessions: u32,
    /// What the site service works with.
    pub sites: SitesConfig,
    /// What agent turns run with.
    pub agents: AgentSettings,
    /// What builds run with.
    pub builds: crate::builds::BuildSettings,
    /// A development host (`ATELIER_DEPLOYMENT=development`): unconfined runs and a root
    /// daemon are allowed.
    pub development: bool,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("instance", &self.instance)
            .field("service_token", &"[redacted]")
            .field("base_path", &self.base_path)
            .field("listen", &self.listen)
            .field("audit_dir", &self.audit_dir)
            .field("sites", &self.sites)
            .field("agents", &self.agents)
            .finish()
    }
}

/// A setting that cannot be used; each names the setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// The instance name breaks the grammar.
    #[error("{0}")]
    BadInstance(#[from] atelier_layout::names::NameError),
    /// No service token was provided.
    #[error("no service token: provide the {SERVICE_TOKEN_CREDENTIAL} credential")]
    MissingToken,
    /// The service token is too short.
    #[error("the service token must be at least {MIN_TOKEN_LEN} characters")]
    ShortToken,
    /// The base path is not `/`-prefixed or ends with `/`.
    #[error("base path {0:?} must start with '/' and not end with '/'")]
    BadBasePath(String),
    /// The fallback socket path is relative.
    #[error("listen path {0:?} must be absolute")]
    RelativeListen(PathBuf),
    /// A required setting is missing.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A path setting is not a clean absolute path.
    #[error("{0} must be an absolute path without '..': {1:?}")]
    BadPath(&'static str, PathBuf),
    /// A number setting is below its minimum.
    #[error("{0} must be at least {1}")]
    TooSmall(&'static str, u64),
    /// A number setting is above its maximum.
    #[error("{0} must be at most {1}")]
    TooLarge(&'static str, u64),
    /// The default driver is not one the contract knows.
    #[error("unknown agent driver {0:?}: expected claude_code, opencode, pi or atelier")]
    UnknownDriver(String),
    /// The preproduction host prefix is not one DNS label.
    #[error("preprod host prefix {0:?} must be one DNS label")]
    BadHostPrefix(String),
    /// The Publication API URL is empty.
    #[error("the Publication API URL must not be empty")]
    EmptyApiUrl,
    /// The environment carries an `ATELIER_*` key sited does not know (a typo, or a key from
    /// another version).
    #[error("unknown setting {0} in the environment")]
    UnknownKey(String),
    /// A credential-looking key in the environment: credentials come only through systemd.
    #[error("{0} looks like a credential; pass it with LoadCredential=, never in the env file")]
    CredentialInEnvironment(String),
    /// A number setting is not a number.
    #[error("{0} must be a whole number: {1:?}")]
    NotANumber(&'static str, String),
    /// The confinement mode is not one sited knows.
    #[error("unknown agent confinement {0:?}: expected systemd_scope or none")]
    UnknownConfinement(String),
    /// The deployment is not one sited knows.
    #[error("unknown deployment {0:?}: expected production or development")]
    UnknownDeployment(String),
    /// Extra certificate authorities for agents were configured on a production host.
    #[error("ATELIER_AGENT_EXTRA_CA_CERTS makes agents trust another certificate authority and is for lab tests only; it is refused unless ATELIER_DEPLOYMENT=development")]
    ExtraCaInProduction,
    /// The Anthropic base URL is not one the declaration allows.
    #[error("ATELIER_AGENT_ANTHROPIC_BASE_URL {0:?} is not https://<a public hostname>[/path] (the gate tunnels TLS to hostnames on port 443 only)")]
    BadAnthropicBaseUrl(String),
    /// The OpenAI-compatible base URL is not one the declaration allows.
    #[error("ATELIER_AGENT_OPENAI_BASE_URL {0:?} is not https://<a public hostname>[/path] (the gate tunnels TLS to hostnames on port 443 only)")]
    BadOpenAiBaseUrl(String),
    /// The Anthropic model is not one the declaration allows.
    #[error("ATELIER_AGENT_ANTHROPIC_MODEL {0:?} is not a model id (1-200 characters, no control character, no whitespace at either end, neither '$' nor '`')")]
    BadAnthropicModel(String),
    /// Only one of the OpenAI-compatible base URL and model is set, or the model is empty.
    #[error("ATELIER_AGENT_OPENAI_BASE_URL and ATELIER_AGENT_OPENAI_MODEL go together, and the model is not empty")]
    IncompleteOpenAiModel,
    /// `none` confinement was asked for a production deployment.
    #[error("agent confinement 'none' runs agents unconfined and is refused in production; declare the deployment 'development' to use it")]
    UnconfinedInProduction,
    /// The env file's runtime dir is not the one the instance's door sockets live in.
    #[error("the runtime dir {given:?} is not the instance's {derived:?}")]
    RuntimeDirMismatch {
        /// What the environment says.
        given: PathBuf,
        /// What the layout derives.
        derived: PathBuf,
    },
    /// The production URL scheme is neither http nor https.
    #[error("prod URL scheme {0:?} must be http or https")]
    BadScheme(String),
    /// `ATELIER_SITE_IDENTITIES` is unreadable.
    #[error(transparent)]
    BadIdentities(#[from] atelier_layout::services::IdentitiesError),
    /// A credential's value is unusable.
    #[error("the {0} credential is unusable: {1}")]
    BadCredential(&'static str, String),
    /// The command line and the environment name different instances.
    #[error("--instance {flag} differs from ATELIER_INSTANCE={env}")]
    InstanceMismatch {
        /// The command line's instance.
        flag: String,
        /// The environment's instance.
        env: String,
    },
}

fn required_path(value: Option<PathBuf>, name: &'static str) -> Result<PathBuf, SettingsError> {
    let path = value.ok_or(SettingsError::Missing(name))?;
    let clean = path.is_absolute()
        && path.components().all(|c| {
            matches!(
                c,
                Component::RootDir | Component::Normal(_) | Component::CurDir
            )
        });
    if clean {
        Ok(path)
    } else {
        Err(SettingsError::BadPath(name, path))
    }
}

fn number<T: std::str::FromStr>(value: &str, name: &'static str) -> Result<T, SettingsError> {
    value
        .parse()
        .map_err(|_| SettingsError::NotANumber(name, value.to_owned()))
}

fn at_least<T: Into<u64> + Copy>(
    value: T,
    min: u64,
    name: &'static str,
) -> Result<T, SettingsError> {
    if value.into() < min {
        Err(SettingsError::TooSmall(name, min))
    } else {
        Ok(value)
    }
}

/// A run's ceiling in ms, between the layout's shortest and longest (see
/// [`atelier_layout::paths::MAX_TIMEOUT_MS`]).
fn timeout_ms(value: u64, name: &'static str) -> Result<u64, SettingsError> {
    let value = at_least(value, atelier_layout::paths::MIN_TIMEOUT_MS, name)?;
    if value > atelier_layout::paths::MAX_TIMEOUT_MS {
        return Err(SettingsError::TooLarge(
            name,
            atelier_layout::paths::MAX_TIMEOUT_MS,
        ));
    }
    Ok(value)
}

/// Sets `slot` to `value` unless it holds one already (a command-line flag wins).
fn fill<T>(slot: &mut Option<T>, value: Option<T>) {
    if slot.is_none() {
        *slot = value;
    }
}

impl RawSettings {
    /// Validates every setting, reporting every one that cannot be used.
    pub fn validate(self) -> Result<Settings, Problems<SettingsError>> {
        self.validate_with_environment(std::iter::empty())
    }

    /// Fills the settings the provisioner's env file carries from `variables` (the process
    /// environment, where `EnvironmentFile=` put them), then validates every setting. Only
    /// `ATELIER_*` keys are read; an unknown or credential-looking one is refused by name. Values
    /// already set (from the command line) win, except that the instance must agree. Every
    /// problem found is reported, not only the first.
    pub fn validate_with_environment(
        mut self,
        variables: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, Problems<SettingsError>> {
        let mut problems = Problems::new();
        self.read_environment(variables, &mut problems);
        self.settle(problems)
    }

    fn read_environment(
        &mut self,
        variables: impl IntoIterator<Item = (String, String)>,
        problems: &mut Problems<SettingsError>,
    ) {
        use atelier_layout::services::env;
        for (key, value) in variables {
            if !key.starts_with("ATELIER_") {
                continue;
            }
            if env::is_secret_looking(&key) {
                problems.push(SettingsError::CredentialInEnvironment(key));
                continue;
            }
            if !env::ALL.contains(&key.as_str()) {
                problems.push(SettingsError::UnknownKey(key));
                continue;
            }
            let path = Some(PathBuf::from(&value));
            let text = Some(value.clone());
            match key.as_str() {
                env::INSTANCE if self.instance.is_empty() => self.instance = value,
                env::INSTANCE if self.instance != value => {
                    problems.push(SettingsError::InstanceMismatch {
                        flag: self.instance.clone(),
                        env: value,
                    })
                }
                env::SITES_ROOT => fill(&mut self.sites_root, path),
                env::AUDIT_DIR => fill(&mut self.audit_dir, path),
                env::SITE_TABLE_FILE => fill(&mut self.site_table_file, path),
                env::TEMPLATES_DIR => fill(&mut self.templates_dir, path),
                env::SHIM_BIN => fill(&mut self.shim_bin, path),
                env::BUILD_BIN => fill(&mut self.build_bin, path),
                env::PUBLICATION_API_URL => fill(&mut self.publication_api_url, text),
                env::AGENT_DRIVER => fill(&mut self.default_driver, text),
                env::PREPROD_HOST_PREFIX => fill(&mut self.preprod_host_prefix, text),
                env::MAX_SITES => fill(
                    &mut self.max_sites,
                    problems.take(number(&value, "max_sites")),
                ),
                env::MAX_CONCURRENT_SESSIONS => fill(
                    &mut self.max_concurrent_sessions,
                    problems.take(number(&value, "max_concurrent_sessions")),
                ),
                env::SITE_DISK_QUOTA_MB => fill(
                    &mut self.site_disk_quota_mb,
                    problems.take(number(&value, "site_disk_quota_mb")),
                ),
                env::GIT_TIMEOUT_MS => fill(
                    &mut self.git_timeout_ms,
                    problems.take(number(&value, "git_timeout_ms")),
                ),
                env::SESSION_TURN_TIMEOUT_MS => fill(
                    &mut self.session_turn_timeout_ms,
                    problems.take(number(&value, "session_turn_timeout_ms")),
                ),
                env::AGENT_CONFINEMENT => fill(&mut self.agent_confinement, text),
                env::DEPLOYMENT => fill(&mut self.deployment, text),
                env::AGENT_STATE_ROOT => fill(&mut self.agent_state_root, path),
                env::CLAUDE_CODE_BIN => fill(&mut self.claude_code_bin, path),
                env::AGENT_ANTHROPIC_BASE_URL => fill(&mut self.anthropic_base_url, text),
                env::AGENT_EXTRA_CA_CERTS => fill(&mut self.agent_extra_ca_certs, path),
                env::AGENT_OPENAI_BASE_URL => fill(&mut self.openai_base_url, text),
                env::AGENT_OPENAI_MODEL => fill(&mut self.openai_model, text),
                env::AGENT_ANTHROPIC_MODEL => fill(&mut self.anthropic_model, text),
                env::OPENCODE_BIN => fill(&mut self.opencode_bin, path),
                env::PI_BIN => fill(&mut self.pi_bin, path),
                env::ATELIER_AGENT_BIN => fill(&mut self.atelier_bin, path),
                env::SITE_IDENTITIES => fill(&mut self.site_identities, text),
                env::RUNTIME_DIR => fill(&mut self.runtime_dir, path),
                env::AGENT_IDENTITY_EPOCH => fill(
                    &mut self.identity_epoch,
                    problems.take(number(&value, "agent_identity_epoch")),
                ),
                env::RELEASES_RETAINED => fill(
                    &mut self.releases_retained,
                    problems.take(number(&value, "releases_retained")),
                ),
                env::PROD_URL_SCHEME => fill(&mut self.prod_url_scheme, text),
                env::INSTALL_TIMEOUT_MS => fill(
                    &mut self.install_timeout_ms,
                    problems.take(number(&value, "install_timeout_ms")),
                ),
                env::BUILD_TIMEOUT_MS => fill(
                    &mut self.build_timeout_ms,
                    problems.take(number(&value, "build_timeout_ms")),
                ),
                // The provisioner's own facts (web server, webspace base, unit prefix, systemctl):
                // sited derives or reads them elsewhere, so they are accepted and unused.
                _ => {}
            }
        }
    }

    /// Checks each setting in turn, recording a problem and going on to the next.
    fn settle(
        self,
        mut problems: Problems<SettingsError>,
    ) -> Result<Settings, Problems<SettingsError>> {
        let instance = problems.take(InstanceName::new(&self.instance));
        if let (Some(dir), Some(instance)) = (&self.runtime_dir, &instance) {
            let derived = atelier_layout::paths::runtime_dir(instance);
            if dir != &derived {
                problems.push(SettingsError::RuntimeDirMismatch {
                    given: dir.clone(),
                    derived,
                });
            }
        }
        let agents = self.agent_settings(&mut problems);
        let builds = self.build_settings(&mut problems);
        let development = self.deployment.as_deref() == Some("development");
        let releases_retained = problems.take(at_least(
            self.releases_retained.unwrap_or(DEFAULT_RELEASES_RETAINED),
            1,
            "releases_retained",
        ));
        let prod_url_scheme = problems.take(match self.prod_url_scheme.as_deref() {
            None | Some("https") => Ok("https"),
            Some("http") => Ok("http"),
            Some(other) => Err(SettingsError::BadScheme(other.to_owned())),
        });
        let service_token = problems.take(match self.service_token {
            None => Err(SettingsError::MissingToken),
            Some(token) if token.chars().count() < MIN_TOKEN_LEN => Err(SettingsError::ShortToken),
            Some(token) => Ok(token),
        });
        let base_path = self
            .base_path
            .unwrap_or_else(|| DEFAULT_BASE_PATH.to_owned());
        if !base_path.starts_with('/') || (base_path.len() > 1 && base_path.ends_with('/')) {
            problems.push(SettingsError::BadBasePath(base_path.clone()));
        }
        if let Some(path) = self.listen.as_ref().filter(|path| !path.is_absolute()) {
            problems.push(SettingsError::RelativeListen(path.clone()));
        }
        let sites_root = problems.take(required_path(self.sites_root, "sites_root"));
        let audit_dir = problems.take(required_path(self.audit_dir, "audit_dir"));
        let site_table_file = problems.take(required_path(self.site_table_file, "site_table_file"));
        let templates_dir = problems.take(required_path(
            Some(
                self.templates_dir
                    .unwrap_or_else(|| atelier_layout::paths::TEMPLATES_DIR.into()),
            ),
            "templates_dir",
        ));
        let publication_api_url = problems.take(match self.publication_api_url {
            None => Err(SettingsError::Missing("publication_api_url")),
            Some(url) if url.trim().is_empty() => Err(SettingsError::EmptyApiUrl),
            Some(url) => Ok(url),
        });
        let max_sites = problems.take(at_least(
            self.max_sites.unwrap_or(DEFAULT_MAX_SITES),
            1,
            "max_sites",
        ));
        let max_concurrent_sessions = problems.take(at_least(
            self.max_concurrent_sessions
                .unwrap_or(DEFAULT_MAX_CONCURRENT_SESSIONS),
            1,
            "max_concurrent_sessions",
        ));
        let site_disk_quota_mb = problems.take(at_least(
            self.site_disk_quota_mb
                .unwrap_or(DEFAULT_SITE_DISK_QUOTA_MB),
            1,
            "site_disk_quota_mb",
        ));
        let git_timeout_ms = problems.take(timeout_ms(
            self.git_timeout_ms
                .unwrap_or(atelier_layout::paths::GIT_TIMEOUT_MS),
            "git_timeout_ms",
        ));
        let default_driver = problems.take(match self.default_driver {
            None => Ok(DEFAULT_DRIVER),
            Some(id) => Driver::parse(&id).ok_or(SettingsError::UnknownDriver(id)),
        });
        let preprod_host_prefix = self
            .preprod_host_prefix
            .unwrap_or_else(|| DEFAULT_PREPROD_HOST_PREFIX.to_owned());
        if !atelier_layout::names::is_dns_label(&preprod_host_prefix) {
            problems.push(SettingsError::BadHostPrefix(preprod_host_prefix.clone()));
        }
        // Every `None` here comes with its recorded problem.
        let (
            Some(instance),
            Some(agents),
            Some(builds),
            Some(releases_retained),
            Some(prod_url_scheme),
            Some(service_token),
            Some(sites_root),
            Some(audit_dir),
            Some(site_table_file),
            Some(templates_dir),
            Some(publication_api_url),
            Some(max_sites),
            Some(max_concurrent_sessions),
            Some(site_disk_quota_mb),
            Some(git_timeout_ms),
            Some(default_driver),
        ) = (
            instance,
            agents,
            builds,
            releases_retained,
            prod_url_scheme,
            service_token,
            sites_root,
            audit_dir,
            site_table_file,
            templates_dir,
            publication_api_url,
            max_sites,
            max_concurrent_sessions,
            site_disk_quota_mb,
            git_timeout_ms,
            default_driver,
        )
        else {
            return Err(problems);
        };
        problems.into_result()?;
        let builds = crate::builds::BuildSettings {
            // A build's package manager trusts what a turn's agent trusts (development only).
            extra_ca_certs: agents.endpoint.extra_ca_certs.clone(),
            ..builds
        };
        Ok(Settings {
            agents,
            builds,
            development,
            sites: SitesConfig {
                instance: instance.as_str().to_owned(),
                sites_root,
                site_table_file,
                publication_api_url,
                templates_dir,
                max_sites,
                site_disk_quota_mb,
                default_driver,
                preprod_host_prefix,
                git_timeout: Duration::from_millis(git_timeout_ms),
                releases_retained: usize::try_from(releases_retained).unwrap_or(usize::MAX),
                prod_url_scheme: prod_url_scheme.to_owned(),
            },
            instance,
            service_token,
            base_path,
            listen: self.listen,
            default_driver: default_driver.as_str(),
            audit_dir,
            max_concurrent_sessions,
        })
    }

    fn build_settings(
        &self,
        problems: &mut Problems<SettingsError>,
    ) -> Option<crate::builds::BuildSettings> {
        let build_bin = problems.take(required_path(
            Some(self.build_bin.clone().unwrap_or_else(|| {
                Path::new(atelier_layout::paths::BIN_DIR)
                    .join(atelier_layout::services::BUILD_BINARY)
            })),
            "build_bin",
        ));
        let mut step = |value: Option<u64>, default: u64, name: &'static str| {
            problems.take(timeout_ms(value.unwrap_or(default), name))
        };
        let install_timeout_ms = step(
            self.install_timeout_ms,
            atelier_layout::paths::INSTALL_TIMEOUT_MS,
            "install_timeout_ms",
        );
        let build_timeout_ms = step(
            self.build_timeout_ms,
            atelier_layout::paths::BUILD_TIMEOUT_MS,
            "build_timeout_ms",
        );
        Some(crate::builds::BuildSettings {
            build_bin: build_bin?,
            install_timeout_ms: install_timeout_ms?,
            build_timeout_ms: build_timeout_ms?,
            releases_retained: usize::try_from(
                self.releases_retained.unwrap_or(DEFAULT_RELEASES_RETAINED),
            )
            .unwrap_or(usize::MAX),
            extra_ca_certs: None,
        })
    }

    fn agent_settings(&self, problems: &mut Problems<SettingsError>) -> Option<AgentSettings> {
        let confinement = problems.take(match self.agent_confinement.as_deref() {
            None | Some("systemd_scope") => Ok(Confinement::SystemdScope),
            Some("none") => Ok(Confinement::None),
            Some(other) => Err(SettingsError::UnknownConfinement(other.to_owned())),
        });
        let development = problems.take(match self.deployment.as_deref() {
            None | Some("production") => Ok(false),
            Some("development") => Ok(true),
            Some(other) => Err(SettingsError::UnknownDeployment(other.to_owned())),
        });
        if confinement == Some(Confinement::None) && development == Some(false) {
            problems.push(SettingsError::UnconfinedInProduction);
        }
        if self.agent_extra_ca_certs.is_some() && development == Some(false) {
            problems.push(SettingsError::ExtraCaInProduction);
        }
        let extra_ca_certs = match &self.agent_extra_ca_certs {
            Some(path) => {
                Some(problems.take(required_path(Some(path.clone()), "agent_extra_ca_certs"))?)
            }
            None => None,
        };
        if let Some(url) = &self.anthropic_base_url {
            problems.take(
                atelier_layout::declaration::check_provider_url(url)
                    .map_err(|_| SettingsError::BadAnthropicBaseUrl(url.clone())),
            );
        }
        let openai = match (&self.openai_base_url, &self.openai_model) {
            (None, None) => None,
            (Some(url), Some(model)) if !model.trim().is_empty() => {
                problems.take(
                    atelier_layout::declaration::check_provider_url(url)
                        .map_err(|_| SettingsError::BadOpenAiBaseUrl(url.clone())),
                );
                Some(atelier_agents::OpenAiModel {
                    base_url: url.clone(),
                    model: model.clone(),
                })
            }
            _ => {
                problems.push(SettingsError::IncompleteOpenAiModel);
                None
            }
        };
        if let Some(model) = &self.anthropic_model {
            problems.take(
                atelier_layout::declaration::check_model_id(model)
                    .map_err(|_| SettingsError::BadAnthropicModel(model.clone())),
            );
        }
        let state_root = problems.take(required_path(
            self.agent_state_root.clone(),
            "agent_state_root",
        ));
        let shim_bin = problems.take(required_path(
            Some(self.shim_bin.clone().unwrap_or_else(|| {
                Path::new(atelier_layout::paths::BIN_DIR)
                    .join(atelier_layout::services::SHIM_BINARY)
            })),
            "shim_bin",
        ));
        let mut bins = Vec::new();
        for (driver, bin, name) in [
            (Driver::ClaudeCode, &self.claude_code_bin, "claude_code_bin"),
            (Driver::Opencode, &self.opencode_bin, "opencode_bin"),
            (Driver::Pi, &self.pi_bin, "pi_bin"),
            (Driver::Atelier, &self.atelier_bin, "atelier_bin"),
        ] {
            // An empty value means "not installed", as the original's `''` did.
            if let Some(bin) = bin.clone().filter(|b| !b.as_os_str().is_empty()) {
                if let Some(bin) = problems.take(required_path(Some(bin), name)) {
                    bins.push((driver, bin));
                }
            }
        }
        let turn_timeout_ms = problems.take(timeout_ms(
            self.session_turn_timeout_ms
                .unwrap_or(atelier_layout::paths::TURN_TIMEOUT_MS),
            "session_turn_timeout_ms",
        ));
        // Each `K=V,K=V` credential with the check of what its agent may be given.
        type Check = fn(&[(String, String)]) -> Result<(), atelier_agents::PlanError>;
        let pair_credentials: [(&'static str, &Option<String>, Check); 2] = [
            (
                atelier_layout::paths::OPENCODE_ENV,
                &self.credentials.opencode_env,
                atelier_agents::validate_opencode_env,
            ),
            (
                atelier_layout::paths::PI_ENV,
                &self.credentials.pi_env,
                atelier_agents::validate_pi_env,
            ),
        ];
        for (name, pairs, check) in pair_credentials {
            if let Some(pairs) = pairs {
                let checked =
                    parse_pairs(pairs).and_then(|parsed| check(&parsed).map_err(|e| e.to_string()));
                problems.take(checked.map_err(|why| SettingsError::BadCredential(name, why)));
            }
        }
        let site_identities = problems.take(match &self.site_identities {
            Some(text) => atelier_layout::services::parse_site_identities(text),
            None => Ok(Default::default()),
        });
        if self.identity_epoch.is_some_and(|e| e < 0) {
            problems.push(SettingsError::TooSmall("agent_identity_epoch", 0));
        }
        Some(AgentSettings {
            identity_epoch: self.identity_epoch.unwrap_or(0),
            site_identities: site_identities?,
            confinement: confinement?,
            state_root: state_root?,
            shim_bin: shim_bin?,
            bins,
            turn_timeout: Duration::from_millis(turn_timeout_ms?),
            credentials: self.credentials.clone(),
            endpoint: atelier_agents::ModelEndpoint {
                anthropic_base_url: self.anthropic_base_url.clone(),
                openai,
                anthropic_model: self.anthropic_model.clone(),
                extra_ca_certs,
            },
        })
    }
}

/// Parses `K=V,K=V` (the format of `OPENCODE_ENV` and `PI_ENV`); names must be environment
/// names. A comma starts a new pair only when `NAME=` follows it, so a value may hold commas
/// (a JSON `OPENCODE_AUTH_CONTENT`). The values are secrets: an error names the item, never a
/// value.
pub fn parse_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let starts_pair = |rest: &str| {
        rest.split_once('=')
            .is_some_and(|(name, _)| atelier_proto::is_valid_env_key(name.trim()))
    };
    let mut items: Vec<String> = Vec::new();
    for part in text.split(',') {
        match items.last_mut() {
            Some(last) if !starts_pair(part) => {
                last.push(',');
                last.push_str(part);
            }
            _ => items.push(part.to_owned()),
        }
    }
    let mut pairs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("item {} has no '='", i + 1));
        };
        let key = key.trim();
        if !atelier_proto::is_valid_env_key(key) {
            return Err(format!("item {} has an invalid name", i + 1));
        }
        pairs.push((key.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_instance(name: &str) -> SettingsError {
        atelier_layout::names::NameError::BadInstance(name.into()).into()
    }

    fn raw() -> RawSettings {
        RawSettings {
            instance: "museum".into(),
            service_token: Some("t".repeat(32)),
            sites_root: Some("/var/lib/atelier/museum/sites".into()),
            audit_dir: Some("/var/lib/atelier/museum/audit".into()),
            site_table_file: Some("/etc/atelier/museum/sites.json".into()),
            publication_api_url: Some("http://127.0.0.1:3100/api".into()),
            templates_dir: Some("/usr/share/atelier/templates".into()),
            agent_state_root: Some("/var/lib/atelier/museum/agents".into()),
            ..RawSettings::default()
        }
    }

    #[test]
    fn refusals_name_the_setting() {
        let cases: Vec<(&str, RawSettings, SettingsError)> = vec![
            (
                "uppercase instance",
                RawSettings {
                    instance: "Museum".into(),
                    ..raw()
                },
                bad_instance("Museum"),
            ),
            (
                "one-letter instance",
                RawSettings {
                    instance: "m".into(),
                    ..raw()
                },
                bad_instance("m"),
            ),
            (
                "instance too long",
                RawSettings {
                    instance: "a".repeat(20),
                    ..raw()
                },
                bad_instance(&"a".repeat(20)),
            ),
            (
                "instance with a slash",
                RawSettings {
                    instance: "a/b".into(),
                    ..raw()
                },
                bad_instance("a/b"),
            ),
            (
                "no token",
                RawSettings {
                    service_token: None,
                    ..raw()
                },
                SettingsError::MissingToken,
            ),
            (
                "short token",
                RawSettings {
                    service_token: Some("t".repeat(31)),
                    ..raw()
                },
                SettingsError::ShortToken,
            ),
            (
                "relative base path",
                RawSettings {
                    base_path: Some("site".into()),
                    ..raw()
                },
                SettingsError::BadBasePath("site".into()),
            ),
            (
                "trailing slash base path",
                RawSettings {
                    base_path: Some("/site/".into()),
                    ..raw()
                },
                SettingsError::BadBasePath("/site/".into()),
            ),
            (
                "relative listen path",
                RawSettings {
                    listen: Some("sited.sock".into()),
                    ..raw()
                },
                SettingsError::RelativeListen("sited.sock".into()),
            ),
            (
                "no sites root",
                RawSettings {
                    sites_root: None,
                    ..raw()
                },
                SettingsError::Missing("sites_root"),
            ),
            (
                "relative templates dir",
                RawSettings {
                    templates_dir: Some("templates".into()),
                    ..raw()
                },
                SettingsError::BadPath("templates_dir", "templates".into()),
            ),
            (
                "site table with ..",
                RawSettings {
                    site_table_file: Some("/etc/../sites.json".into()),
                    ..raw()
                },
                SettingsError::BadPath("site_table_file", "/etc/../sites.json".into()),
            ),
            (
                "no api url",
                RawSettings {
                    publication_api_url: None,
                    ..raw()
                },
                SettingsError::Missing("publication_api_url"),
            ),
            (
                "zero max sites",
                RawSettings {
                    max_sites: Some(0),
                    ..raw()
                },
                SettingsError::TooSmall("max_sites", 1),
            ),
            (
                "zero quota",
                RawSettings {
                    site_disk_quota_mb: Some(0),
                    ..raw()
                },
                SettingsError::TooSmall("site_disk_quota_mb", 1),
            ),
            (
                "unknown driver",
                RawSettings {
                    default_driver: Some("gpt".into()),
                    ..raw()
                },
                SettingsError::UnknownDriver("gpt".into()),
            ),
            (
                "host prefix with a dot",
                RawSettings {
                    preprod_host_prefix: Some("pre.view".into()),
                    ..raw()
                },
                SettingsError::BadHostPrefix("pre.view".into()),
            ),
            (
                "runtime dir of another instance",
                RawSettings {
                    runtime_dir: Some("/run/atelier/other".into()),
                    ..raw()
                },
                SettingsError::RuntimeDirMismatch {
                    given: "/run/atelier/other".into(),
                    derived: "/run/atelier/museum".into(),
                },
            ),
            (
                "unknown confinement",
                RawSettings {
                    agent_confinement: Some("docker".into()),
                    ..raw()
                },
                SettingsError::UnknownConfinement("docker".into()),
            ),
            (
                "unconfined in production",
                RawSettings {
                    agent_confinement: Some("none".into()),
                    ..raw()
                },
                SettingsError::UnconfinedInProduction,
            ),
            (
                "an agent CA outside development",
                RawSettings {
                    agent_extra_ca_certs: Some("/etc/atelier-lab/ca.pem".into()),
                    ..raw()
                },
                SettingsError::ExtraCaInProduction,
            ),
            (
                "an agent CA that is not an absolute path",
                RawSettings {
                    agent_extra_ca_certs: Some("ca.pem".into()),
                    deployment: Some("development".into()),
                    ..raw()
                },
                SettingsError::BadPath("agent_extra_ca_certs", "ca.pem".into()),
            ),
            (
                "a model URL over plain http",
                RawSettings {
                    anthropic_base_url: Some("http://api.anthropic.com".into()),
                    ..raw()
                },
                SettingsError::BadAnthropicBaseUrl("http://api.anthropic.com".into()),
            ),
            (
                "an OpenAI-compatible URL on a port the gate does not tunnel",
                RawSettings {
                    openai_base_url: Some("https://llm.example.org:8443/v1".into()),
                    openai_model: Some("coder".into()),
                    ..raw()
                },
                SettingsError::BadOpenAiBaseUrl("https://llm.example.org:8443/v1".into()),
            ),
            (
                "an OpenAI-compatible URL without a model",
                RawSettings {
                    openai_base_url: Some("https://llm.example.org/v1".into()),
                    ..raw()
                },
                SettingsError::IncompleteOpenAiModel,
            ),
            (
                "an empty model",
                RawSettings {
                    openai_base_url: Some("https://llm.example.org/v1".into()),
                    openai_model: Some(" ".into()),
                    ..raw()
                },
                SettingsError::IncompleteOpenAiModel,
            ),
            (
                "an Anthropic model the env file could not carry",
                RawSettings {
                    anthropic_model: Some("claude`id`".into()),
                    ..raw()
                },
                SettingsError::BadAnthropicModel("claude`id`".into()),
            ),
            (
                "an empty Anthropic model",
                RawSettings {
                    anthropic_model: Some(String::new()),
                    ..raw()
                },
                SettingsError::BadAnthropicModel(String::new()),
            ),
            (
                "relative atelier-agent binary",
                RawSettings {
                    atelier_bin: Some("atelier-agent".into()),
                    ..raw()
                },
                SettingsError::BadPath("atelier_bin", "atelier-agent".into()),
            ),
            (
                "PI_ENV setting what pi loads",
                RawSettings {
                    credentials: AgentCredentials {
                        pi_env: Some("PI_CODING_AGENT_DIR=/tmp/x".into()),
                        ..AgentCredentials::default()
                    },
                    ..raw()
                },
                SettingsError::BadCredential(
                    "PI_ENV",
                    "PI_ENV may not set PI_CODING_AGENT_DIR: only provider credentials (…_API_KEY, …_AUTH_TOKEN, …_ACCESS_KEY_ID, …_SECRET_ACCESS_KEY, …_SESSION_TOKEN)".into(),
                ),
            ),
            (
                "unconfined in a deployment nobody knows",
                RawSettings {
                    agent_confinement: Some("none".into()),
                    deployment: Some("staging".into()),
                    ..raw()
                },
                SettingsError::UnknownDeployment("staging".into()),
            ),
            (
                "no agent state root",
                RawSettings {
                    agent_state_root: None,
                    ..raw()
                },
                SettingsError::Missing("agent_state_root"),
            ),
            (
                "relative claude binary",
                RawSettings {
                    claude_code_bin: Some("claude".into()),
                    ..raw()
                },
                SettingsError::BadPath("claude_code_bin", "claude".into()),
            ),
            (
                "turn timeout under a second",
                RawSettings {
                    session_turn_timeout_ms: Some(999),
                    ..raw()
                },
                SettingsError::TooSmall("session_turn_timeout_ms", 1000),
            ),
            (
                // A typo of units, or a ceiling that systemd's RuntimeMaxSec= cannot hold.
                "turn timeout past a week",
                RawSettings {
                    session_turn_timeout_ms: Some(u64::MAX / 2),
                    ..raw()
                },
                SettingsError::TooLarge(
                    "session_turn_timeout_ms",
                    atelier_layout::paths::MAX_TIMEOUT_MS,
                ),
            ),
            (
                "build timeout past a week",
                RawSettings {
                    build_timeout_ms: Some(atelier_layout::paths::MAX_TIMEOUT_MS + 1),
                    ..raw()
                },
                SettingsError::TooLarge(
                    "build_timeout_ms",
                    atelier_layout::paths::MAX_TIMEOUT_MS,
                ),
            ),
            (
                "OPENCODE_ENV item without '='",
                RawSettings {
                    credentials: AgentCredentials {
                        opencode_env: Some("OPENAI_API_KEY".into()),
                        ..AgentCredentials::default()
                    },
                    ..raw()
                },
                SettingsError::BadCredential("OPENCODE_ENV", "item 1 has no '='".into()),
            ),
            (
                "OPENCODE_ENV naming a key opencode may not get",
                RawSettings {
                    credentials: AgentCredentials {
                        opencode_env: Some("NODE_OPTIONS=--require x".into()),
                        ..AgentCredentials::default()
                    },
                    ..raw()
                },
                SettingsError::BadCredential(
                    "OPENCODE_ENV",
                    atelier_agents::validate_opencode_env(&[(
                        "NODE_OPTIONS".into(),
                        String::new(),
                    )])
                    .unwrap_err()
                    .to_string(),
                ),
            ),
            (
                "PI_ENV with a bad name",
                RawSettings {
                    credentials: AgentCredentials {
                        pi_env: Some("9X=secret,A=1".into()),
                        ..AgentCredentials::default()
                    },
                    ..raw()
                },
                SettingsError::BadCredential("PI_ENV", "item 1 has an invalid name".into()),
            ),
        ];
        for (name, raw, expected) in cases {
            assert_eq!(
                raw.validate().unwrap_err().as_slice(),
                [expected],
                "case {name}"
            );
        }
    }

    #[test]
    fn pairs_split_only_where_a_name_follows() {
        let parsed =
            parse_pairs(r#"OPENAI_API_KEY=sk-1,OPENCODE_AUTH_CONTENT={"a":1,"b":2}, X_API_KEY=v"#)
                .unwrap();
        assert_eq!(
            parsed,
            [
                ("OPENAI_API_KEY".to_owned(), "sk-1".to_owned()),
                (
                    "OPENCODE_AUTH_CONTENT".to_owned(),
                    r#"{"a":1,"b":2}"#.to_owned()
                ),
                ("X_API_KEY".to_owned(), "v".to_owned()),
            ]
        );
        assert_eq!(parse_pairs("").unwrap(), []);
        assert!(parse_pairs("novalue").is_err());
    }

    #[test]
    fn defaults_and_redaction() {
        let settings = raw().validate().unwrap();
        assert_eq!(settings.base_path, DEFAULT_BASE_PATH);
        assert_eq!(settings.sites.max_sites, 20);
        assert_eq!(settings.sites.site_disk_quota_mb, 1024);
        assert_eq!(settings.default_driver, "claude_code");
        let atelier = RawSettings {
            default_driver: Some("atelier".into()),
            ..raw()
        }
        .validate()
        .unwrap();
        assert_eq!(atelier.default_driver, "atelier");
        assert_eq!(atelier.sites.default_driver, Driver::Atelier);
        assert_eq!(settings.sites.preprod_host_prefix, "pre");
        assert!(!format!("{settings:?}").contains(&"t".repeat(32)));
        assert_eq!(settings.agents.confinement, Confinement::SystemdScope);
        assert!(!settings.development);
        // Without the env file's paths, the layout's default install (the Debian package's).
        assert_eq!(
            settings.agents.shim_bin,
            PathBuf::from("/usr/bin/atelier-shim")
        );
        assert_eq!(
            settings.builds.build_bin,
            PathBuf::from("/usr/bin/atelier-build")
        );
        let no_templates = RawSettings {
            templates_dir: None,
            ..raw()
        }
        .validate()
        .unwrap();
        assert_eq!(
            no_templates.sites.templates_dir,
            PathBuf::from("/usr/share/atelier/templates")
        );
        assert_eq!(settings.agents.turn_timeout, Duration::from_secs(1200));
        let unconfined = RawSettings {
            agent_confinement: Some("none".into()),
            deployment: Some("development".into()),
            claude_code_bin: Some("/opt/claude".into()),
            opencode_bin: Some("".into()),
            credentials: AgentCredentials {
                anthropic_api_key: Some("sk-ant-secret".into()),
                opencode_env: Some("OPENAI_API_KEY=sk-openai-secret".into()),
                atelier_api_key: Some("sk-atelier-secret".into()),
                ..AgentCredentials::default()
            },
            ..raw()
        }
        .validate()
        .unwrap();
        assert_eq!(unconfined.agents.confinement, Confinement::None);
        assert!(unconfined.development);
        assert_eq!(
            unconfined.agents.bins,
            [(Driver::ClaudeCode, PathBuf::from("/opt/claude"))],
            "an empty binary means not installed"
        );
        let shown = format!("{unconfined:?}");
        assert!(
            !shown.contains("sk-ant-secret")
                && !shown.contains("sk-openai-secret")
                && !shown.contains("sk-atelier-secret"),
            "{shown}"
        );
        let credentials = unconfined.agents.driver_credentials();
        assert_eq!(
            credentials.atelier_api_key.as_deref(),
            Some("sk-atelier-secret"),
            "the key reaches the atelier driver's credentials, for its child alone"
        );
        assert!(!format!("{credentials:?}").contains("sk-atelier-secret"));
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_env_file_fills_settings_and_flags_win() {
        let settings = RawSettings {
            service_token: Some("t".repeat(32)),
            ..RawSettings::default()
        }
        .validate_with_environment(vars(&[
            ("ATELIER_INSTANCE", "museum"),
            ("ATELIER_SITES_ROOT", "/var/lib/atelier/museum/sites"),
            ("ATELIER_AUDIT_DIR", "/var/lib/atelier/museum/audit"),
            ("ATELIER_SITE_TABLE_FILE", "/etc/atelier/museum/sites.json"),
            ("ATELIER_PUBLICATION_API_URL", "http://127.0.0.1:3100/api"),
            ("ATELIER_MAX_SITES", "8"),
            ("ATELIER_AGENT_CONFINEMENT", "systemd_scope"),
            ("ATELIER_AGENT_STATE_ROOT", "/var/lib/atelier/museum/agents"),
            ("ATELIER_CLAUDE_CODE_BIN", "/usr/local/bin/claude"),
            ("ATELIER_SESSION_TURN_TIMEOUT_MS", "60000"),
            ("ATELIER_RELEASES_RETAINED", "2"),
            ("ATELIER_PROD_URL_SCHEME", "http"),
            ("ATELIER_INSTALL_TIMEOUT_MS", "2000"),
            ("ATELIER_BUILD_TIMEOUT_MS", "3000"),
            ("ATELIER_RUNTIME_DIR", "/run/atelier/museum"),
            ("ATELIER_AGENT_IDENTITY_EPOCH", "3"),
            ("ATELIER_SHIM_BIN", "/opt/atelier/bin/atelier-shim"),
            ("ATELIER_BUILD_BIN", "/opt/atelier/bin/atelier-build"),
            ("ATELIER_TEMPLATES_DIR", "/opt/atelier/templates"),
            ("ATELIER_ATELIER_AGENT_BIN", "/usr/bin/atelier-agent"),
            ("ATELIER_AGENT_ANTHROPIC_MODEL", "claude-sonnet-4-5"),
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
        ]))
        .unwrap();
        assert_eq!(settings.instance.as_str(), "museum");
        assert_eq!(settings.sites.max_sites, 8);
        assert_eq!(
            settings.agents.bins,
            [
                (Driver::ClaudeCode, PathBuf::from("/usr/local/bin/claude")),
                (Driver::Atelier, PathBuf::from("/usr/bin/atelier-agent")),
            ]
        );
        assert_eq!(
            settings.agents.endpoint.anthropic_model.as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(settings.agents.turn_timeout, Duration::from_secs(60));
        assert_eq!(settings.sites.releases_retained, 2);
        assert_eq!(settings.builds.releases_retained, 2);
        assert_eq!(settings.sites.prod_url_scheme, "http");
        assert_eq!(settings.builds.install_timeout_ms, 2000);
        assert_eq!(settings.builds.build_timeout_ms, 3000);
        assert_eq!(settings.agents.identity_epoch, 3);
        assert_eq!(settings.agents.confinement, Confinement::SystemdScope);
        // A moved install reaches every consumer: the shim a door runs (and the one spawned
        // under `none`), the build door's binary and the templates.
        assert_eq!(
            settings.agents.shim_bin,
            PathBuf::from("/opt/atelier/bin/atelier-shim")
        );
        assert_eq!(
            settings.builds.build_bin,
            PathBuf::from("/opt/atelier/bin/atelier-build")
        );
        assert_eq!(
            settings.sites.templates_dir,
            PathBuf::from("/opt/atelier/templates")
        );

        let flagged = RawSettings {
            max_sites: Some(3),
            ..raw()
        }
        .validate_with_environment(vars(&[
            ("ATELIER_MAX_SITES", "8"),
            ("ATELIER_INSTANCE", "museum"),
        ]))
        .unwrap();
        assert_eq!(flagged.sites.max_sites, 3, "a flag wins over the env file");
    }

    #[test]
    fn the_environment_is_refused_by_name() {
        type Variables = Vec<(String, String)>;
        let cases: Vec<(&str, Variables, SettingsError)> = vec![
            (
                "unknown key",
                vars(&[("ATELIER_MAX_SITE", "8")]),
                SettingsError::UnknownKey("ATELIER_MAX_SITE".into()),
            ),
            (
                "credential in the env file",
                vars(&[("ATELIER_SERVICE_TOKEN", "x")]),
                SettingsError::CredentialInEnvironment("ATELIER_SERVICE_TOKEN".into()),
            ),
            (
                "instance disagreeing with the flag",
                vars(&[("ATELIER_INSTANCE", "other")]),
                SettingsError::InstanceMismatch {
                    flag: "museum".into(),
                    env: "other".into(),
                },
            ),
            (
                "number that is not one",
                vars(&[("ATELIER_SITE_DISK_QUOTA_MB", "1G")]),
                SettingsError::NotANumber("site_disk_quota_mb", "1G".into()),
            ),
        ];
        for (name, variables, expected) in cases {
            let raw = RawSettings {
                site_disk_quota_mb: None,
                ..raw()
            };
            assert_eq!(
                raw.validate_with_environment(variables)
                    .unwrap_err()
                    .as_slice(),
                [expected],
                "case {name}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let problems = RawSettings {
            service_token: Some("short".into()),
            sites_root: None,
            max_sites: Some(0),
            agent_confinement: Some("none".into()),
            claude_code_bin: Some("claude".into()),
            ..raw()
        }
        .validate_with_environment(vars(&[
            ("ATELIER_MAX_SITE", "8"),
            ("ATELIER_SITE_DISK_QUOTA_MB", "1G"),
            ("ATELIER_PREPROD_HOST_PREFIX", "pre.view"),
        ]))
        .unwrap_err();
        assert_eq!(
            problems.as_slice(),
            [
                SettingsError::UnknownKey("ATELIER_MAX_SITE".into()),
                SettingsError::NotANumber("site_disk_quota_mb", "1G".into()),
                SettingsError::UnconfinedInProduction,
                SettingsError::BadPath("claude_code_bin", "claude".into()),
                SettingsError::ShortToken,
                SettingsError::Missing("sites_root"),
                SettingsError::TooSmall("max_sites", 1),
                SettingsError::BadHostPrefix("pre.view".into()),
            ]
        );
        let line = problems.to_string();
        assert!(
            line.starts_with("8 problems: unknown setting ATELIER_MAX_SITE"),
            "{line}"
        );
    }
}
