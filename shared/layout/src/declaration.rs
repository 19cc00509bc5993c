//! `instance.json`: the operator's one declaration of an instance, parsed strictly into
//! [`Declaration`] with every problem collected and named.
//!
//! Parsing has three phases, and all their issues are returned together:
//! 1. a walk over the raw JSON that refuses any inlined credential (`credential_walk`);
//! 2. the raw serde layer, which refuses unknown keys and wrong types (`raw`);
//! 3. validation into typed settings: value grammars (`grammar`), then the checks across fields
//!    (`semantic`), which use the same derivation as everything else ([`crate::paths::Layout`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::names::InstanceName;

mod credential_walk;
mod grammar;
mod raw;
mod semantic;
mod unique;
mod validate;

#[cfg(test)]
mod tests;

/// Checks a model provider's base URL as `agent.anthropic_base_url` and `agent.openai_base_url`
/// must be (`https://`, port 443 implied, a hostname a gate plan can hold, an optional path);
/// why not, when not. For a reader of the rendered value (sited) to hold it to the declaration's
/// own rule.
pub fn check_provider_url(value: &str) -> Result<(), (Reason, String)> {
    grammar::provider_url(value).map(|_| ())
}

/// Checks a model id as `agent.openai_model` and `agent.anthropic_model` must be (1-200
/// characters, no control character, no whitespace at either end, neither `$` nor `` ` ``); why
/// not, when not. For a reader of the rendered value (sited) to hold it to the declaration's
/// own rule.
pub fn check_model_id(value: &str) -> Result<(), (Reason, String)> {
    grammar::model_id(value).map(|_| ())
}

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident => $code:literal, )*) => {
        /// Why a declaration was refused: a stable machine name, one per rule.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Reason {
            $( $(#[$doc])* $variant, )*
        }

        // === impl Reason ===

        impl Reason {
            /// Every reason.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The reason's stable snake_case name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Reason::$variant => $code, )*
                }
            }
        }
    };
}

reasons! {
    /// The document is not JSON.
    MalformedJson => "malformed_json",
    /// An object names one key twice (JSON readers disagree on which one counts).
    DuplicateKey => "duplicate_key",
    /// A value has the wrong JSON type (a string where an object belongs, …).
    WrongType => "wrong_type",
    /// A key the schema does not know.
    UnknownKey => "unknown_key",
    /// A required key is absent.
    MissingKey => "missing_key",
    /// A credential-looking key holds something other than an absolute file path.
    InlineCredential => "inline_credential",
    /// A path that does not start with `/`.
    RelativePath => "relative_path",
    /// A path with a `..` component.
    ParentComponent => "parent_component",
    /// A path that is `/` itself.
    RootPath => "root_path",
    /// A path with whitespace, a quote, `%`, a control character or anything else unsafe.
    UnsafePathCharacter => "unsafe_path_character",
    /// The instance name breaks its grammar (which bounds identities to 32 characters).
    BadInstanceName => "bad_instance_name",
    /// The description is empty, too long or holds control characters.
    BadDescription => "bad_description",
    /// Not a unix user or group name.
    BadUnixName => "bad_unix_name",
    /// The Publication API URL breaks its grammar.
    BadUrl => "bad_url",
    /// A site slug breaks its grammar.
    BadSlug => "bad_slug",
    /// A domain is not a lowercase hostname.
    BadDomain => "bad_domain",
    /// An egress host is an address, a wildcard, a local name or not a hostname.
    BadHost => "bad_host",
    /// The preproduction host prefix is not one DNS label.
    BadHostPrefix => "bad_host_prefix",
    /// The basic-auth realm breaks its grammar.
    BadRealm => "bad_realm",
    /// A basic-auth user name breaks its grammar.
    BadAuthUser => "bad_auth_user",
    /// The ACME account address is not an email address.
    BadEmail => "bad_email",
    /// A `secrets` key is not a credential name.
    BadCredentialName => "bad_credential_name",
    /// A value outside its enumeration (web server, driver, auth or TLS mode).
    BadValue => "bad_value",
    /// A memory size that is not digits + K/M/G.
    BadSize => "bad_size",
    /// A CPU quota that is not digits + %.
    BadCpuQuota => "bad_cpu_quota",
    /// A number below its minimum.
    OutOfRange => "out_of_range",
    /// More sites, or a larger site limit, than ordinals 1..=999 can name.
    OrdinalOverflow => "ordinal_overflow",
    /// More sites than `limits.max_sites`.
    TooManySites => "too_many_sites",
    /// Two sites with one slug.
    DuplicateSlug => "duplicate_slug",
    /// Two sites with one domain.
    DuplicateDomain => "duplicate_domain",
    /// Two basic-auth users with one name.
    DuplicateAuthUser => "duplicate_auth_user",
    /// An alias that targets no declared slug.
    AliasUnknownSite => "alias_unknown_site",
    /// An alias equal to a site's canonical domain.
    AliasIsCanonical => "alias_is_canonical",
    /// A hostname two vhosts would answer: a site's domain or preproduction host that is
    /// another site's domain or preproduction host, or an alias that is a preproduction host.
    HostCollision => "host_collision",
    /// Two sites' vhosts would be one file: a slug that is another's followed by `-pre` names
    /// that site's preproduction vhost while preproduction is served.
    VhostCollision => "vhost_collision",
    /// Two trees that must be disjoint are the same or nested.
    OverlappingRoots => "overlapping_roots",
    /// A site's webspace equals or contains the webspace base.
    WebspaceContainsBase => "webspace_contains_base",
    /// A tree the daemons must reach lies below a folder their units' `ProtectHome=yes` hides
    /// (`/home`, `/root`, `/run/user`).
    ProtectedHomePath => "protected_home_path",
    /// A credential file inside a tree a web server serves or a site identity can read.
    ExposedCredential => "exposed_credential",
    /// A group equal to the instance's own group or one of its site identities.
    GroupCollision => "group_collision",
    /// The declared agent driver has no binary in `agent.bins`.
    MissingAgentBin => "missing_agent_bin",
    /// A driver other than claude_code with no provider host to reach.
    MissingProviderHosts => "missing_provider_hosts",
    /// `secrets` names a credential sited would hand to the agent itself (`PI_ENV`,
    /// `OPENCODE_ENV`, `ATELIER_AGENT_API_KEY`): a confined agent holds no model key, the turn
    /// door's gate adds `ANTHROPIC_API_KEY` or `OPENAI_API_KEY` to its relayed requests.
    AgentHeldCredential => "agent_held_credential",
    /// `agent.anthropic_base_url` or `agent.openai_base_url` names a host `agent.provider_hosts`
    /// does not hold, or `agent.anthropic_model` would be asked of Anthropic's own API while
    /// the list does not hold it.
    UnplannedProviderUrl => "unplanned_provider_url",
    /// `agent.openai_model` or `agent.anthropic_model` is empty, longer than 200 characters, has
    /// whitespace at an end or holds a character sited's env file cannot carry.
    BadModelId => "bad_model_id",
    /// Half of an OpenAI-compatible model (`agent.openai_base_url` without
    /// `agent.openai_model`, or the reverse), or neither for the driver pi, which has no default
    /// model, for the driver opencode, whose own providers' keys would be the agent's, nor for
    /// the driver atelier without `agent.anthropic_model`.
    MissingOpenaiModel => "missing_openai_model",
    /// Preproduction basic auth with no user and no password file: nobody could log in.
    EmptyPasswordFile => "empty_password_file",
    /// Basic-auth users declared while auth is off.
    UsersWithoutHtpasswd => "users_without_htpasswd",
    /// `tls.mode = files` without both a certificate and a key.
    TlsFilesIncomplete => "tls_files_incomplete",
    /// A certificate or key declared for a TLS mode that does not use files.
    TlsPathsForbidden => "tls_paths_forbidden",
    /// `tls.mode = letsencrypt` without an account address.
    TlsEmailRequired => "tls_email_required",
    /// `chat.cms_origin` is not `http://` + a loopback address + a port.
    BadCmsOrigin => "bad_cms_origin",
    /// `chat.public_origin` is not `http(s)://` + a lowercase hostname, with nothing after it.
    BadPublicOrigin => "bad_public_origin",
    /// The CMS's host is also a site's domain, preproduction host or alias.
    ChatHostCollision => "chat_host_collision",
    /// `chat.public_origin` is `http://` while production is served over TLS (every plain
    /// request would be redirected to an origin the editor's browser does not use).
    ChatOriginScheme => "chat_origin_scheme",
    /// A chat block with a web server whose vhost for the CMS Atelier does not render.
    ChatWebServer => "chat_web_server",
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem with a declaration: where, which rule, and words for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The JSON path of the offending value, e.g. `sites[1].domain` or
    /// `serving.aliases['museum-a.org']`; empty for the document itself.
    pub path: String,
    /// The rule that refused it.
    pub reason: Reason,
    /// What is wrong, for a human. Never holds a credential-looking value.
    pub message: String,
}

// === impl Issue ===

impl Issue {
    pub(crate) fn new(path: &JsonPath, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            path: path.render(),
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "<document>"
        } else {
            &self.path
        };
        write!(f, "{path}: {} ({})", self.message, self.reason)
    }
}

/// A declaration refused, with every issue found (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DeclarationError {
    /// The issues, in the order they were found; one per path at most.
    pub issues: Vec<Issue>,
}

impl fmt::Display for DeclarationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.issues.len();
        write!(
            f,
            "invalid instance declaration ({n} problem{})",
            if n == 1 { "" } else { "s" }
        )?;
        for issue in &self.issues {
            write!(f, "\n  - {issue}")?;
        }
        Ok(())
    }
}

/// Reading a declaration file failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read the declaration {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file was read and refused.
    #[error("the declaration {path} is refused")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every issue.
        #[source]
        source: DeclarationError,
    },
}

/// A location in the JSON document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JsonPath(Vec<Step>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

// === impl JsonPath ===

impl JsonPath {
    pub(crate) fn key(&self, key: &str) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Key(key.to_owned()));
        Self(steps)
    }

    pub(crate) fn index(&self, index: usize) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Index(index));
        Self(steps)
    }

    /// Returns true if and only if the path is exactly these keys.
    pub(crate) fn is(&self, keys: &[&str]) -> bool {
        self.0.len() == keys.len()
            && self
                .0
                .iter()
                .zip(keys)
                .all(|(step, key)| matches!(step, Step::Key(k) if k == key))
    }

    /// `a.b[2].c`, with a key that is not an identifier as `['key']`.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for step in &self.0 {
            match step {
                Step::Index(i) => out.push_str(&format!("[{i}]")),
                Step::Key(k) if is_identifier(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Step::Key(k) => out.push_str(&format!("['{}']", k.replace('\'', "\\'"))),
            }
        }
        out
    }

    fn pointer(&self) -> String {
        self.0
            .iter()
            .map(|step| match step {
                Step::Index(i) => format!("/{i}"),
                Step::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
            })
            .collect()
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The web server that serves the sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WebServer {
    /// nginx (the default).
    Nginx,
    /// Apache httpd.
    Apache,
}

/// The coding agent a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentDriver {
    /// Claude Code.
    ClaudeCode,
    /// opencode.
    Opencode,
    /// pi.
    Pi,
    /// Atelier's own coding agent, `atelier-agent`.
    Atelier,
}

// === impl AgentDriver ===

impl AgentDriver {
    /// The driver's name in the declaration.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentDriver::ClaudeCode => "claude_code",
            AgentDriver::Opencode => "opencode",
            AgentDriver::Pi => "pi",
            AgentDriver::Atelier => "atelier",
        }
    }
}

/// How preproduction is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// Basic auth against a password file.
    Htpasswd,
    /// Open.
    None,
}

/// Where production's certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// ACME, with `account_email`.
    Letsencrypt,
    /// Declared certificate and key files.
    Files,
    /// No TLS (behind a terminating proxy).
    None,
}

/// A validated declaration: every value has passed its grammar and every cross-field rule.
/// Defaults that belong to the layout stay `None` here; [`crate::paths::Layout`] applies them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Declaration {
    /// The instance's name.
    pub instance: InstanceName,
    /// Free text for operators (empty when not declared).
    pub description: String,
    /// The CMS engine paired with the instance.
    pub engine: Engine,
    /// The web server.
    pub web: Web,
    /// The Publication API sites call.
    pub publication_api: PublicationApi,
    /// Host directories, when not the defaults.
    pub paths: DeclaredPaths,
    /// The instance's private roots, when not the defaults.
    pub roots: DeclaredRoots,
    /// Where site webspaces live by default (`/srv/atelier/<inst>` when `None`).
    pub webspace_base: Option<PathBuf>,
    /// The declared sites, in declaration order.
    pub sites: Vec<Site>,
    /// How sites are served.
    pub serving: Serving,
    /// The coding agent.
    pub agent: Agent,
    /// Extra credentials: `LoadCredential=` id → absolute source file.
    pub secrets: BTreeMap<String, PathBuf>,
    /// Operational limits, when declared.
    pub limits: Limits,
    /// sited's resource caps, when declared.
    pub resources: Resources,
    /// The CMS's AI chat runtime, when the instance serves one.
    pub chat: Option<Chat>,
    /// Who may read the daemons' metrics sockets, when declared (root alone otherwise).
    pub monitoring: Option<Monitoring>,
}

/// Who reads the daemons' metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Monitoring {
    /// The group that may connect to every metrics socket of the instance (a Prometheus
    /// exporter's or agent's group); Atelier does not create it.
    pub group: String,
}

/// The CMS engine paired with the instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Engine {
    /// The engine's private directory (never inside any tree Atelier writes or serves).
    pub private_dir: PathBuf,
    /// The engine's group: it may connect to sited's socket and read the pairing fragment.
    pub group: String,
}

/// The web server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Web {
    /// Which server renders vhosts.
    pub server: WebServer,
    /// The group the server reads webspaces as.
    pub group: String,
}

/// The Publication API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PublicationApi {
    /// Its base URL.
    pub url: String,
    /// The file holding its key, if it needs one.
    pub key_path: Option<PathBuf>,
}

/// Host directories the operator moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeclaredPaths {
    /// Replaces `/etc/atelier`.
    pub config_base: Option<PathBuf>,
    /// Replaces `/var/lib/atelier`.
    pub state_base: Option<PathBuf>,
    /// Replaces `/etc/systemd/system`.
    pub unit_dir: Option<PathBuf>,
    /// Replaces the web server's `sites-available`.
    pub vhost_dir: Option<PathBuf>,
    /// Replaces the web server's `sites-enabled`.
    pub vhost_enabled_dir: Option<PathBuf>,
    /// Replaces `/etc/polkit-1/rules.d`.
    pub polkit_rules_dir: Option<PathBuf>,
    /// Replaces `/etc/tmpfiles.d`.
    pub tmpfiles_dir: Option<PathBuf>,
    /// Replaces `/usr/bin`, where Atelier's binaries are installed.
    pub bin_dir: Option<PathBuf>,
    /// Replaces `/usr/share/atelier/templates`, where the site templates are installed.
    pub templates_dir: Option<PathBuf>,
}

/// The instance's private roots the operator moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeclaredRoots {
    /// Replaces `/var/lib/atelier/<inst>/sites` (the site workspaces).
    pub sites: Option<PathBuf>,
    /// Replaces `/var/lib/atelier/<inst>/audit`.
    pub audit: Option<PathBuf>,
}

/// One declared site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    /// Its stable short name.
    pub slug: String,
    /// Its canonical production domain.
    pub domain: String,
    /// Its webspace, when not `<webspace_base>/<domain>`.
    pub webspace: Option<PathBuf>,
}

/// How sites are served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Serving {
    /// The preproduction surface.
    pub preprod: Preprod,
    /// The production surface.
    pub prod: Prod,
    /// Extra production hostnames → the slug they serve.
    pub aliases: BTreeMap<String, String>,
}

/// The preproduction surface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preprod {
    /// Whether preproduction vhosts exist.
    pub enabled: bool,
    /// The label before a site's domain (`pre` by default).
    pub host_prefix: String,
    /// Its protection.
    pub auth: PreprodAuth,
}

/// Preproduction's protection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreprodAuth {
    /// Basic auth or open.
    pub mode: AuthMode,
    /// The basic-auth realm (`Atelier preprod` by default).
    pub realm: String,
    /// An existing password file, when not the generated one.
    pub htpasswd: Option<PathBuf>,
    /// Users to generate the password file from.
    pub users: Vec<AuthUser>,
}

/// A preproduction basic-auth user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthUser {
    /// The login.
    pub name: String,
    /// The root-only file holding the password.
    pub password_file: PathBuf,
}

/// The production surface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prod {
    /// Its TLS.
    pub tls: Tls,
}

/// Production TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tls {
    /// Where certificates come from.
    pub mode: TlsMode,
    /// The certificate file (mode `files` only).
    pub certificate: Option<PathBuf>,
    /// The key file (mode `files` only).
    pub key: Option<PathBuf>,
    /// The ACME account (mode `letsencrypt`).
    pub account_email: Option<String>,
}

/// The coding agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Agent {
    /// Which agent a turn runs.
    pub driver: AgentDriver,
    /// Each driver's absolute binary (the declared driver's is required).
    pub bins: BTreeMap<AgentDriver, PathBuf>,
    /// The hosts the model may be at, which its base URLs must name (required for drivers
    /// other than claude_code, whose default is Anthropic's API).
    pub provider_hosts: Option<Vec<String>>,
    /// The package registry hosts a build may reach.
    pub registry_hosts: Option<Vec<String>>,
    /// Where Claude Code (and an atelier turn with [`Agent::anthropic_model`]) sends its model
    /// requests, when not Anthropic's own API (an LLM gateway): `https://<host>[/path]`, its
    /// host one of the provider hosts.
    pub anthropic_base_url: Option<String>,
    /// The OpenAI-compatible API a pi turn (or an atelier turn without
    /// [`Agent::anthropic_model`]) talks to, the part before `/chat/completions`
    /// (`https://<host>[/path]`, e.g. `https://llm.example.org/v1`), its host one of the
    /// provider hosts. Declared with [`Agent::openai_model`] or not at all; required for the
    /// drivers pi and opencode, kept (and rendered) for the others so a switch needs no other
    /// change.
    pub openai_base_url: Option<String>,
    /// The model id a pi turn asks [`Agent::openai_base_url`] for (pi has no default model).
    pub openai_model: Option<String>,
    /// The model id an atelier turn asks Anthropic's Messages API for, at
    /// [`Agent::anthropic_base_url`] or else Anthropic's own API (then one of the provider
    /// hosts). Declared, it is the atelier driver's model; otherwise that driver speaks to the
    /// OpenAI-compatible model. Claude Code chooses its own model and ignores it.
    pub anthropic_model: Option<String>,
    /// systemctl, when not `/usr/bin/systemctl`.
    pub systemctl_bin: Option<PathBuf>,
}

/// The CMS editor's AI chat runtime (`atelier-chatd`), served on the CMS's own host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chat {
    /// Where the CMS listens on this machine: `http://<loopback address>:<port>`. chatd asks it
    /// who a session cookie belongs to and reads content through it; the CMS's vhost proxies
    /// everything but the chat routes to it.
    pub cms_origin: String,
    /// The origin the editor's browser uses: `http(s)://<host>`.
    pub public_origin: String,
    /// The host of [`Chat::public_origin`]: the CMS's vhost answers it.
    pub host: String,
    /// The root-only file holding chatd's master key (base64 of 32 bytes), minted by apply
    /// when absent and never rewritten.
    pub master_key: PathBuf,
    /// How long a model provider may stay silent before chatd fails the turn, when not
    /// chatd's default (two minutes); a CPU-only local model may read a long prompt for
    /// longer than that before its first byte.
    pub provider_idle_timeout_ms: Option<u64>,
}

/// Operational limits; each is absent unless declared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// The most sites the instance may declare (≤ 999).
    pub max_sites: Option<u64>,
    /// The most concurrent agent sessions.
    pub max_concurrent_sessions: Option<u64>,
    /// Each site's disk quota, in MiB.
    pub site_disk_quota_mb: Option<u64>,
    /// Releases kept per surface.
    pub releases_retained: Option<u64>,
    /// A turn's ceiling, in ms (≥ 1000).
    pub session_turn_timeout_ms: Option<u64>,
    /// An install's ceiling, in ms (≥ 1000).
    pub install_timeout_ms: Option<u64>,
    /// A build's ceiling, in ms (≥ 1000).
    pub build_timeout_ms: Option<u64>,
    /// A git command's ceiling, in ms (≥ 1000).
    pub git_timeout_ms: Option<u64>,
}

/// sited's resource caps; each is absent unless declared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    /// `MemoryMax=`.
    pub memory_max: Option<String>,
    /// `MemoryHigh=`.
    pub memory_high: Option<String>,
    /// `CPUQuota=`.
    pub cpu_quota: Option<String>,
    /// `TasksMax=`.
    pub tasks_max: Option<u64>,
}

// === impl Declaration ===

impl Declaration {
    /// Parses and validates the text of an `instance.json`, returning every issue at once.
    pub fn parse(text: &str) -> Result<Self, DeclarationError> {
        let document: Value = match unique::parse(text) {
            Ok(document) => document,
            Err(unreadable) => {
                // serde_json's message names a line and column, never the offending text; a
                // key is a name, not a value.
                let (reason, why) = match unreadable {
                    unique::Unreadable::Malformed(err) => {
                        (Reason::MalformedJson, format!("is not JSON: {err}"))
                    }
                    unique::Unreadable::DuplicateKey { key, error } => (
                        Reason::DuplicateKey,
                        format!(
                            "names the key {key:?} twice ({error}); keep one, as a JSON reader \
                             may read either"
                        ),
                    ),
                };
                return Err(DeclarationError {
                    issues: vec![Issue::new(&JsonPath::default(), reason, why)],
                });
            }
        };
        let mut issues = Vec::new();
        credential_walk::refuse_inline_credentials(&document, &mut issues);
        let declaration = validate::schema(document, &mut issues)
            .and_then(|raw| validate::validate(raw, &mut issues))
            .inspect(|declaration| semantic::check(declaration, &mut issues));
        dedupe_by_path(&mut issues);
        match declaration {
            Some(declaration) if issues.is_empty() => Ok(declaration),
            _ => Err(DeclarationError { issues }),
        }
    }

    /// Reads and parses a declaration file.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| LoadError::Invalid {
            path: path.to_owned(),
            source,
        })
    }
}

/// Keeps the first issue at each path: a value gets one message, and an inlined credential's
/// refusal is not followed by a path grammar's for the same value.
fn dedupe_by_path(issues: &mut Vec<Issue>) {
    let mut seen = std::collections::HashSet::new();
    issues.retain(|issue| seen.insert(issue.path.clone()));
}
