//! A turn's plan: the argv each driver runs, its complete environment (an allowlist: never
//! HOME, never the daemon's own environment, each credential only for its own driver, and for
//! a confined turn no provider key at all: its model is the gate's relay, which adds the key)
//! and the files the daemon writes before the run and removes after it.
//!
//! Each driver STATES what it loads and which tools it has rather than inheriting either from
//! the workspace or HOME, both of which the agent can write.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use atelier_layout::files::ModelApi;
use atelier_layout::services::{model_relay_url, relayed_base_url};

use crate::DriverId;

/// The MCP server's name in every driver's configuration.
pub const MCP_SERVER_NAME: &str = "dedalo_publication";
/// The MCP URL a confined turn reaches: the shim forwards this loopback port to the gate,
/// which adds the Publication API key upstream.
pub const CONFINED_MCP_URL: &str = "http://127.0.0.1:3129/mcp";
/// The longest brief passed on the command line, in bytes.
pub const MAX_BRIEF_BYTES: usize = 96 * 1024;
/// The most model rounds a turn may take, for the drivers that take a cap (Claude Code's
/// `--max-turns`, atelier-agent's).
const MAX_TURNS: &str = "50";
/// The built-in tools a Claude Code turn is offered (`--tools`): without it the model is also
/// offered subagents, skills, workflows and scheduled wake-ups, which `--allowedTools` (a
/// permission list) does not take away.
const CLAUDE_TOOLS: &str = "Read,Write,Edit,Glob,Grep";
/// The tools a Claude Code turn may never use.
const CLAUDE_DISALLOWED_TOOLS: &str = "Bash,WebFetch,WebSearch";
/// Claude Code's settings: no hooks, no project MCP servers, no auto-memory (notes the CLI
/// keeps under its own directory, which the turn writes, and loads into every later turn).
const CLAUDE_SETTINGS: &str =
    r#"{"disableAllHooks":true,"enableAllProjectMcpServers":false,"autoMemoryEnabled":false}"#;
/// opencode's directory below the stated directory: the brief it is told to read.
const OPENCODE_STATED_DIR: &str = "opencode";
/// The brief's file there.
const OPENCODE_BRIEF_FILE: &str = "brief.md";
/// opencode's database below the CLI's state directory: named, so the admission reads the very
/// file a turn opens (a console account in it is configuration no switch closes).
pub const OPENCODE_DB_FILE: &str = "opencode.db";
/// The provider name opencode's stated configuration gives an OpenAI-compatible model.
const OPENCODE_PROVIDER: &str = "atelier";
/// The AI SDK package opencode speaks an OpenAI-compatible API with (bundled in the CLI).
const OPENCODE_OPENAI_SDK: &str = "@ai-sdk/openai-compatible";
/// The mode of a file the agent reads during its turn.
const TURN_FILE_MODE: u32 = 0o640;
/// The notice that ends a brief cut to [`MAX_BRIEF_BYTES`].
const BRIEF_CUT_NOTICE: &str =
    "\n\n[The rest of AGENTS.md was cut: the brief passed to a turn is at most 96 KiB.]\n";

/// The switches that make opencode load only what the daemon states, and send nothing the
/// turn did not ask for (updates, the models catalogue, LSP downloads, shares).
const OPENCODE_SWITCHES: [(&str, &str); 9] = [
    ("OPENCODE_DISABLE_PROJECT_CONFIG", "true"),
    ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "true"),
    ("OPENCODE_PURE", "true"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "true"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "true"),
    ("OPENCODE_DISABLE_AUTOUPDATE", "true"),
    ("OPENCODE_DISABLE_MODELS_FETCH", "true"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "true"),
    ("OPENCODE_DISABLE_SHARE", "true"),
];

/// The keys that tell a child of a door with a way out (turn, build) where it is: the shim's
/// loopback forward to the site's gate, for every HTTP client that honours the standard proxy
/// variables (Node's own `fetch` only with `NODE_USE_ENV_PROXY`). Loopback itself is not
/// proxied: the MCP relay is a plain forward on another port. The git door gets none of them.
pub fn proxy_env() -> BTreeMap<String, String> {
    let proxy = format!("http://127.0.0.1:{}", atelier_layout::services::PROXY_PORT);
    let mut env = BTreeMap::new();
    for key in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        env.insert(key.to_owned(), proxy.clone());
    }
    for key in ["NO_PROXY", "no_proxy"] {
        env.insert(key.to_owned(), "127.0.0.1,localhost".to_owned());
    }
    env.insert("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned());
    env
}

/// Claude Code's switches for the traffic a turn did not ask for (telemetry, error reports,
/// update checks) and for its self-updater, which would write a new binary.
const CLAUDE_QUIET_ENV: [(&str, &str); 2] = [
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
];

/// Where a turn's model is, beyond the driver's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelEndpoint {
    /// Claude Code's `ANTHROPIC_BASE_URL` (an LLM gateway); its host one of
    /// `agent.provider_hosts` (a confined turn is given the gate's model relay instead).
    pub anthropic_base_url: Option<String>,
    /// The OpenAI-compatible model a pi turn talks to; pi has no default of its own.
    pub openai: Option<OpenAiModel>,
    /// The model an atelier turn asks Anthropic's Messages API for (at
    /// [`ModelEndpoint::anthropic_base_url`], else Anthropic's own API). When set, an atelier
    /// turn speaks Anthropic; otherwise it speaks to [`ModelEndpoint::openai`].
    pub anthropic_model: Option<String>,
    /// Development only: extra certificate authorities the agent trusts, e.g. a lab model
    /// server's test CA (`NODE_EXTRA_CA_CERTS` for the Node CLIs; for atelier-agent
    /// `SSL_CERT_FILE`, which then is the only file of authorities it trusts).
    pub extra_ca_certs: Option<PathBuf>,
}

/// The key a confined turn's CLI is given where it insists on one: the turn door's model
/// relay drops it and adds the declared key, which the agent never holds.
pub const RELAYED_KEY_PLACEHOLDER: &str = "atelier-gate-adds-the-key";

impl ModelEndpoint {
    /// The same models as a confined turn reaches them: every API at the turn door's model
    /// relay on loopback, each base URL's path kept ([`relayed_base_url`]); the relay sends
    /// the requests on to the declared origins with their keys.
    pub fn relayed(&self) -> ModelEndpoint {
        let anthropic = match &self.anthropic_base_url {
            Some(declared) => relayed_base_url(ModelApi::Anthropic, declared),
            None => model_relay_url(ModelApi::Anthropic),
        };
        ModelEndpoint {
            anthropic_base_url: Some(anthropic),
            openai: self.openai.as_ref().map(|model| OpenAiModel {
                base_url: relayed_base_url(ModelApi::Openai, &model.base_url),
                model: model.model.clone(),
            }),
            anthropic_model: self.anthropic_model.clone(),
            extra_ca_certs: self.extra_ca_certs.clone(),
        }
    }
}

/// An OpenAI-compatible chat-completions model: where it is and which one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiModel {
    /// The API's base URL, the part before `/chat/completions` (`https://<host>[/path]`; its
    /// host one of `agent.provider_hosts`; a confined turn is given the gate's model relay).
    pub base_url: String,
    /// The model id the requests name.
    pub model: String,
}

/// Where the MCP server of a turn is and what it is told.
#[derive(Clone, PartialEq, Eq)]
pub struct McpAttachment {
    /// The server's name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Headers sent with every request (a secret under `none`: the API key).
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for McpAttachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("McpAttachment")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &names)
            .finish()
    }
}

impl McpAttachment {
    /// Under systemd confinement: the gate's relay on loopback, no key in the unit.
    pub fn confined() -> McpAttachment {
        McpAttachment {
            name: MCP_SERVER_NAME.to_owned(),
            url: CONFINED_MCP_URL.to_owned(),
            headers: Vec::new(),
        }
    }

    /// Under `none`: the Publication API's own `/mcp`, with its key when one is configured.
    pub fn unconfined(publication_api_url: &str, api_key: Option<&str>) -> McpAttachment {
        McpAttachment {
            name: MCP_SERVER_NAME.to_owned(),
            url: format!("{}/mcp", publication_api_url.trim_end_matches('/')),
            headers: api_key
                .filter(|k| !k.is_empty())
                .map(|k| vec![("X-API-Key".to_owned(), k.to_owned())])
                .unwrap_or_default(),
        }
    }

    fn headers_json(&self) -> Option<Value> {
        (!self.headers.is_empty()).then(|| {
            Value::Object(
                self.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )
        })
    }
}

/// The credentials each driver's child may get; each reaches only its own driver.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DriverCredentials {
    /// Claude Code's `ANTHROPIC_API_KEY`.
    pub anthropic_api_key: Option<String>,
    /// opencode's provider credentials (`OPENCODE_ENV`).
    pub opencode_env: Vec<(String, String)>,
    /// pi's (`PI_ENV`).
    pub pi_env: Vec<(String, String)>,
    /// atelier-agent's provider key, its child's [`ATELIER_API_KEY_ENV`].
    pub atelier_api_key: Option<String>,
}

impl DriverCredentials {
    /// What a confined turn's child gets: no provider credential, only
    /// [`RELAYED_KEY_PLACEHOLDER`] for the CLIs that will not start without a key (Claude
    /// Code, atelier-agent). The model relay adds the real key.
    pub fn relayed() -> DriverCredentials {
        DriverCredentials {
            anthropic_api_key: Some(RELAYED_KEY_PLACEHOLDER.to_owned()),
            opencode_env: Vec::new(),
            pi_env: Vec::new(),
            atelier_api_key: Some(RELAYED_KEY_PLACEHOLDER.to_owned()),
        }
    }
}

/// A secret as `Debug` shows it: whether there is one, never its value.
pub fn redacted(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| "[redacted]")
}

impl fmt::Debug for DriverCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(k, _)| k.clone()).collect()
        };
        f.debug_struct("DriverCredentials")
            .field("anthropic_api_key", &redacted(&self.anthropic_api_key))
            .field("opencode_env", &names(&self.opencode_env))
            .field("pi_env", &names(&self.pi_env))
            .field("atelier_api_key", &redacted(&self.atelier_api_key))
            .finish()
    }
}

/// What a turn needs to be planned.
#[derive(Debug, Clone, Copy)]
pub struct TurnRequest<'a> {
    /// The driver.
    pub driver: DriverId,
    /// Its binary.
    pub bin: &'a Path,
    /// The workspace, the run's working directory.
    pub workspace: &'a Path,
    /// The prompt or follow-up message.
    pub prompt: &'a str,
    /// The CLI session to resume.
    pub resume_token: Option<&'a str>,
    /// `AGENTS.md` as read, if there is one.
    pub brief: Option<&'a [u8]>,
    /// The MCP server.
    pub mcp: &'a McpAttachment,
    /// The absolute path Claude Code's MCP configuration will be at (the daemon writes the
    /// planned file there).
    pub mcp_config_path: &'a Path,
    /// The `PATH` the child gets.
    pub path_env: &'a str,
    /// The credentials.
    pub credentials: &'a DriverCredentials,
    /// Whether the run's door has a gate behind the shim's loopback forward (every confined
    /// turn); its child then gets [`proxy_env`], reaches its model through the gate's model
    /// relay ([`ModelEndpoint::relayed`]) and holds no provider key
    /// ([`DriverCredentials::relayed`]): [`TurnRequest::endpoint`] and
    /// [`TurnRequest::credentials`] are then what the relay is told, not the child.
    pub proxied: bool,
    /// Where the model is.
    pub endpoint: &'a ModelEndpoint,
    /// The directory the daemon writes the driver's configuration into before the run
    /// ([`TurnPlan::stated`]), as the child sees it: readable by the turn, writable only by the
    /// daemon, so nothing the agent writes is configuration it or a later turn loads.
    pub stated_dir: &'a Path,
    /// The CLI's own writable state (its sessions, which a resumed turn reads back), as the
    /// child sees it.
    pub state_dir: &'a Path,
}

/// The planned run. `Debug` shows the environment's keys only: its values include keys.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnPlan {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Files to write before the run and remove after it.
    pub files: Vec<PlannedFile>,
    /// The driver's configuration, relative to [`TurnRequest::stated_dir`]: the directory is
    /// emptied and these written before the run.
    pub stated: Vec<PlannedFile>,
    /// What the program reads on stdin (else nothing): the prompt, for a CLI whose argv parser
    /// would not pass it on as it is.
    pub stdin: Option<String>,
}

impl fmt::Debug for TurnPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnPlan")
            .field("argv", &self.argv)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("files", &self.files)
            .field("stated", &self.stated)
            .finish()
    }
}

/// A file a turn reads, written by the daemon (relative to the workspace, or for
/// [`TurnPlan::stated`] to the stated directory).
#[derive(Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Relative to its directory.
    pub path: PathBuf,
    /// Its bytes (they may carry the Publication API key: never logged).
    pub contents: Vec<u8>,
    /// Its mode.
    pub mode: u32,
}

impl fmt::Debug for PlannedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlannedFile")
            .field("path", &self.path)
            .field("bytes", &self.contents.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// Why a turn cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `AGENTS.md` holds a NUL byte, which no argv can carry.
    #[error("AGENTS.md contains a NUL byte")]
    BriefHasNul,
    /// The prompt holds a NUL byte.
    #[error("the prompt contains a NUL byte")]
    PromptHasNul,
    /// The MCP configuration path is not a file lexically inside the workspace.
    #[error("the MCP configuration path {0} is not inside the workspace")]
    McpPathOutside(PathBuf),
    /// An `OPENCODE_ENV` key is not a provider credential opencode may get.
    #[error("OPENCODE_ENV may not set {0}: only provider credentials (…_API_KEY, …_AUTH_TOKEN, …_ACCESS_KEY_ID, …_SECRET_ACCESS_KEY, …_SESSION_TOKEN, OPENCODE_API_KEY, OPENCODE_AUTH_CONTENT)")]
    OpencodeEnvKey(String),
    /// `OPENCODE_AUTH_CONTENT` is not a JSON object of `api`/`oauth` entries (a `wellknown`
    /// entry would make opencode fetch and merge a remote configuration on every turn).
    #[error(
        "OPENCODE_AUTH_CONTENT must be a JSON object whose entries are all of type api or oauth"
    )]
    OpencodeAuthContent,
    /// The resume token is not one a CLI mints (it came back from the agent's own output, and
    /// one starting with `-` would be read as an option).
    #[error("the resume token is not a CLI session id")]
    BadResumeToken,
    /// The driver speaks to an OpenAI-compatible model and none is configured.
    #[error("the {0} driver needs an OpenAI-compatible model (agent.openai_base_url and agent.openai_model in the declaration)")]
    NoModel(DriverId),
    /// The atelier driver has neither an Anthropic model nor an OpenAI-compatible one.
    #[error("the atelier driver needs a model: agent.anthropic_model, or agent.openai_base_url and agent.openai_model in the declaration")]
    NoAtelierModel,
    /// A `PI_ENV` key is not a provider credential pi may get.
    #[error("PI_ENV may not set {0}: only provider credentials (…_API_KEY, …_AUTH_TOKEN, …_ACCESS_KEY_ID, …_SECRET_ACCESS_KEY, …_SESSION_TOKEN)")]
    PiEnvKey(String),
    /// The binary is not an absolute path (a bare name would be resolved through a search
    /// path another principal may write).
    #[error("the agent binary {0} is not an absolute path")]
    BinNotAbsolute(PathBuf),
}

impl PlanError {
    /// The stable machine reason of the turn's error event: every plan that cannot
    /// be made is a failed setup (a driver refused by its confinement or its probe is refused
    /// at admission, before any plan).
    pub fn reason(&self) -> &'static str {
        "turn_setup_failed"
    }
}

/// The longest resume token a CLI mints that is accepted, in bytes.
const MAX_RESUME_TOKEN: usize = 128;

/// Whether `token` can be a CLI's session id: ASCII letters, digits, `_` and `-`, not starting
/// with `-`, at most 128 bytes (a Claude Code UUID, an opencode `ses_…`). The token comes back
/// from the agent's own stdout, so it is checked before it reaches an argv.
pub fn is_resume_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_RESUME_TOKEN
        && !token.starts_with('-')
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Plans one turn of `request.driver`.
pub fn plan_turn(request: &TurnRequest<'_>) -> Result<TurnPlan, PlanError> {
    if !request.bin.is_absolute() {
        return Err(PlanError::BinNotAbsolute(request.bin.to_path_buf()));
    }
    if request.prompt.contains('\0') {
        return Err(PlanError::PromptHasNul);
    }
    if request.resume_token.is_some_and(|t| !is_resume_token(t)) {
        return Err(PlanError::BadResumeToken);
    }
    // A confined agent can read its own environment and files: its model is the gate's relay,
    // which alone holds the key.
    let (relayed_endpoint, relayed_credentials);
    let mut request = *request;
    if request.proxied {
        relayed_endpoint = request.endpoint.relayed();
        relayed_credentials = DriverCredentials::relayed();
        request.endpoint = &relayed_endpoint;
        request.credentials = &relayed_credentials;
    }
    let request = &request;
    // atelier-agent reads AGENTS.md itself, through its own link-refusing reader.
    let brief = match request.driver {
        DriverId::Atelier => None,
        _ => request.brief.map(prepare_brief).transpose()?,
    };
    let mut plan = match request.driver {
        DriverId::ClaudeCode => plan_claude(request, brief),
        DriverId::Opencode => plan_opencode(request, brief),
        DriverId::Pi => plan_pi(request, brief),
        DriverId::Atelier => plan_atelier(request),
    }?;
    if request.proxied {
        plan.env.extend(proxy_env());
    }
    if let Some(ca) = &request.endpoint.extra_ca_certs {
        // The Node CLIs add these to their roots; atelier-agent's TLS reads its roots from
        // SSL_CERT_FILE instead of the system's.
        let key = match request.driver {
            DriverId::Atelier => "SSL_CERT_FILE",
            DriverId::ClaudeCode | DriverId::Opencode | DriverId::Pi => "NODE_EXTRA_CA_CERTS",
        };
        plan.env
            .insert(key.to_owned(), ca.to_string_lossy().into_owned());
    }
    Ok(plan)
}

/// Every option a turn of `driver` can pass (a turn with a brief and a resume token), in argv
/// order: what the binary's help must list. Empty for a driver that runs no turn.
pub fn turn_flags(driver: DriverId) -> Vec<String> {
    let mcp = McpAttachment::confined();
    let credentials = DriverCredentials::default();
    let request = TurnRequest {
        driver,
        bin: Path::new("/probe/agent"),
        workspace: Path::new("/probe"),
        prompt: "probe",
        resume_token: Some("probe"),
        brief: Some(b"probe"),
        mcp: &mcp,
        mcp_config_path: Path::new("/probe/.builder/mcp.json"),
        path_env: "/usr/bin:/bin",
        credentials: &credentials,
        proxied: true,
        endpoint: &ModelEndpoint {
            openai: Some(OpenAiModel {
                base_url: "https://probe.example/v1".to_owned(),
                model: "probe".to_owned(),
            }),
            ..ModelEndpoint::default()
        },
        stated_dir: Path::new("/probe/stated"),
        state_dir: Path::new("/probe/state"),
    };
    let Ok(plan) = plan_turn(&request) else {
        return Vec::new();
    };
    plan.argv
        .into_iter()
        .skip(1)
        .take_while(|arg| arg != "--")
        .filter(|arg| arg.starts_with('-'))
        .collect()
}

/// The brief as passed on: UTF-8 (lossy), no NUL, at most [`MAX_BRIEF_BYTES`] cut on a char
/// boundary with a stated notice.
fn prepare_brief(bytes: &[u8]) -> Result<String, PlanError> {
    if bytes.contains(&0) {
        return Err(PlanError::BriefHasNul);
    }
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= MAX_BRIEF_BYTES {
        return Ok(text.into_owned());
    }
    let mut cut = MAX_BRIEF_BYTES - BRIEF_CUT_NOTICE.len();
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Ok(format!("{}{BRIEF_CUT_NOTICE}", &text[..cut]))
}

fn base_env(request: &TurnRequest<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([("PATH".to_owned(), request.path_env.to_owned())])
}

fn plan_claude(request: &TurnRequest<'_>, brief: Option<String>) -> Result<TurnPlan, PlanError> {
    let outside = || PlanError::McpPathOutside(request.mcp_config_path.to_path_buf());
    let relative = request
        .mcp_config_path
        .strip_prefix(request.workspace)
        .map_err(|_| outside())?
        .to_path_buf();
    // Lexically inside: `..` or an empty rest would point the file elsewhere.
    if relative.as_os_str().is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(outside());
    }
    let mut server = json!({"type": "http", "url": request.mcp.url});
    if let Some(headers) = request.mcp.headers_json() {
        server["headers"] = headers;
    }
    let config = json!({"mcpServers": {request.mcp.name.clone(): server}});
    // What the turn may use without asking: the offered tools and the MCP server's (Claude Code
    // names them `mcp__<server>`).
    let allowed = format!("{CLAUDE_TOOLS},mcp__{}", request.mcp.name);
    let mut argv: Vec<String> = [
        &request.bin.to_string_lossy(),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--max-turns",
        MAX_TURNS,
        "--setting-sources",
        "",
        "--settings",
        CLAUDE_SETTINGS,
        "--strict-mcp-config",
        "--mcp-config",
        &request.mcp_config_path.to_string_lossy(),
        // The prompt is the editor's words for the model, never one of the CLI's own commands
        // or skills (which would run in the turn without the model, or with its own prompt).
        "--disable-slash-commands",
        "--tools",
        CLAUDE_TOOLS,
        "--allowedTools",
        &allowed,
        "--disallowedTools",
        CLAUDE_DISALLOWED_TOOLS,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(brief) = brief {
        argv.extend(["--append-system-prompt".to_owned(), brief]);
    }
    if let Some(token) = request.resume_token {
        argv.extend(["--resume".to_owned(), token.to_owned()]);
    }
    argv.extend(["--".to_owned(), request.prompt.to_owned()]);
    let mut env = base_env(request);
    for (key, value) in CLAUDE_QUIET_ENV {
        env.insert(key.to_owned(), value.to_owned());
    }
    if let Some(key) = &request.credentials.anthropic_api_key {
        env.insert("ANTHROPIC_API_KEY".to_owned(), key.clone());
    }
    if let Some(url) = &request.endpoint.anthropic_base_url {
        env.insert("ANTHROPIC_BASE_URL".to_owned(), url.clone());
    }
    Ok(TurnPlan {
        argv,
        env,
        files: vec![PlannedFile {
            path: relative,
            contents: format!("{config}\n").into_bytes(),
            mode: TURN_FILE_MODE,
        }],
        stated: Vec::new(),
        stdin: None,
    })
}

/// opencode's permission block: nothing but edits.
fn opencode_permission() -> Value {
    json!({
        "bash": "deny",
        "webfetch": "deny",
        "websearch": "deny",
        "codesearch": "deny",
        "skill": "deny",
        "task": "deny",
        "external_directory": "deny",
        "edit": "allow",
    })
}

fn plan_opencode(request: &TurnRequest<'_>, brief: Option<String>) -> Result<TurnPlan, PlanError> {
    validate_opencode_env(&request.credentials.opencode_env)?;
    let mut server = json!({"type": "remote", "url": request.mcp.url});
    if let Some(headers) = request.mcp.headers_json() {
        server["headers"] = headers;
    }
    let mut config = json!({
        "mcp": {request.mcp.name.clone(): server},
        "permission": opencode_permission(),
        "share": "disabled",
        "autoupdate": false,
    });
    if let Some(model) = &request.endpoint.openai {
        let mut options = json!({"baseURL": model.base_url});
        if has_credential(&request.credentials.opencode_env, OPENAI_API_KEY_ENV) {
            options["apiKey"] = json!(format!("{{env:{OPENAI_API_KEY_ENV}}}"));
        }
        config["provider"] = json!({OPENCODE_PROVIDER: {
            "npm": OPENCODE_OPENAI_SDK,
            "options": options,
            "models": {model.model.clone(): {}},
        }});
        config["model"] = json!(format!("{OPENCODE_PROVIDER}/{}", model.model));
    }
    let mut stated = Vec::new();
    if let Some(brief) = brief {
        // Absolute: a relative instruction is searched for upwards from the working directory.
        let path = request
            .stated_dir
            .join(OPENCODE_STATED_DIR)
            .join(OPENCODE_BRIEF_FILE);
        config["instructions"] = json!([path.to_string_lossy()]);
        stated.push(PlannedFile {
            path: Path::new(OPENCODE_STATED_DIR).join(OPENCODE_BRIEF_FILE),
            contents: brief.into_bytes(),
            mode: TURN_FILE_MODE,
        });
    }
    let mut argv: Vec<String> = vec![
        request.bin.to_string_lossy().into_owned(),
        "run".into(),
        "--pure".into(),
        "--format".into(),
        "json".into(),
    ];
    if let Some(token) = request.resume_token {
        argv.extend(["--session".to_owned(), token.to_owned()]);
    }
    let mut env = base_env(request);
    env.extend(opencode_restriction());
    env.insert("OPENCODE_CONFIG_CONTENT".to_owned(), config.to_string());
    env.insert(
        "OPENCODE_DB".to_owned(),
        opencode_db(request.state_dir)
            .to_string_lossy()
            .into_owned(),
    );
    for (key, value) in &request.credentials.opencode_env {
        env.insert(key.clone(), value.clone());
    }
    // The prompt goes on stdin: `opencode run` rejoins its message arguments quoting each that
    // holds a space (the model saw `"Write the page"`, inner quotes escaped) and takes a
    // number-only argument for a number, failing the run.
    Ok(TurnPlan {
        argv,
        env,
        files: Vec::new(),
        stated,
        stdin: Some(request.prompt.to_owned()),
    })
}

/// The provider name pi's stated models file gives the turn's model.
const PI_PROVIDER: &str = "atelier";
/// The tools a pi turn may use: files only, no bash.
const PI_TOOLS: &str = "read,write,edit,grep,find,ls";
/// The credential an OpenAI-compatible provider's key is read from (pi's `PI_ENV`, opencode's
/// `OPENCODE_ENV`), when the driver's credentials have it.
const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";
/// pi's key when `PI_ENV` has none (a local server that asks for no key).
const PI_NO_API_KEY: &str = "no-key";
/// Where pi's configuration directory is below the stated directory.
const PI_AGENT_DIR: &str = "pi";
/// The brief's file in pi's configuration directory.
const PI_BRIEF_FILE: &str = "brief.md";
/// Where pi keeps its sessions below the CLI's state directory.
const PI_SESSIONS_DIR: &str = "pi-sessions";
/// pi's switches for the traffic a turn did not ask for: startup network work (update and
/// package checks) and the install telemetry.
const PI_QUIET_ENV: [(&str, &str); 3] = [
    ("PI_OFFLINE", "1"),
    ("PI_TELEMETRY", "0"),
    ("PI_SKIP_VERSION_CHECK", "1"),
];
/// [`PI_QUIET_ENV`] as environment entries.
pub(crate) fn pi_quiet_env() -> impl Iterator<Item = (String, String)> {
    PI_QUIET_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
}

/// pi's system prompt, stated: otherwise a `.pi/SYSTEM.md` in the workspace would be it.
const PI_SYSTEM_PROMPT: &str = "You are a coding agent editing a website. The website's files are in the current working directory; read, write and edit them with your tools, keep to the request, and say briefly what you changed when you are done.";
/// pi's global settings, stated: no install telemetry, a quiet start.
const PI_SETTINGS: &str = r#"{"enableInstallTelemetry":false,"quietStartup":true}"#;

/// pi (`pi --mode json --print`): every source it would discover is switched off on the argv
/// (extensions, skills, prompt templates, themes, context files) or stated (the system
/// prompt, the appended prompt, the provider, the model and the tools); its configuration
/// directory, holding the models file that names the model, is the daemon's stated
/// directory. The brief is a stated file whose path is the appended prompt (pi reads a value
/// naming an existing file as that file, so the brief's text itself could name another);
/// without one the appended prompt is stated empty. pi has no `--`: a prompt starting with
/// `-` or `@` would be an option or a file to attach, so it is given a leading space.
fn plan_pi(request: &TurnRequest<'_>, brief: Option<String>) -> Result<TurnPlan, PlanError> {
    validate_pi_env(&request.credentials.pi_env)?;
    let model = request
        .endpoint
        .openai
        .as_ref()
        .ok_or(PlanError::NoModel(DriverId::Pi))?;
    let has_key = has_credential(&request.credentials.pi_env, OPENAI_API_KEY_ENV);
    let models = json!({
        "providers": {
            PI_PROVIDER: {
                "baseUrl": model.base_url,
                "api": "openai-completions",
                // The name of the variable holding the key, or the literal when there is none.
                "apiKey": if has_key { OPENAI_API_KEY_ENV } else { PI_NO_API_KEY },
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                "models": [{"id": model.model}],
            }
        }
    });
    let agent_dir = request.stated_dir.join(PI_AGENT_DIR);
    let mut stated = vec![
        ("models.json", models.to_string() + "\n"),
        ("settings.json", format!("{PI_SETTINGS}\n")),
    ];
    let append = match brief {
        Some(brief) => {
            stated.push((PI_BRIEF_FILE, brief));
            agent_dir.join(PI_BRIEF_FILE).to_string_lossy().into_owned()
        }
        None => String::new(),
    };
    let mut argv: Vec<String> = [
        &*request.bin.to_string_lossy(),
        "--mode",
        "json",
        "--print",
        "--provider",
        PI_PROVIDER,
        "--model",
        &model.model,
        "--tools",
        PI_TOOLS,
        "--no-extensions",
        "--no-skills",
        "--no-prompt-templates",
        "--no-themes",
        "--no-context-files",
        "--system-prompt",
        PI_SYSTEM_PROMPT,
        "--append-system-prompt",
        &append,
        "--session-dir",
        &request.state_dir.join(PI_SESSIONS_DIR).to_string_lossy(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(token) = request.resume_token {
        argv.extend(["--session".to_owned(), token.to_owned()]);
    }
    let mut env = base_env(request);
    env.extend(pi_quiet_env());
    env.insert(
        "PI_CODING_AGENT_DIR".to_owned(),
        agent_dir.to_string_lossy().into_owned(),
    );
    for (key, value) in &request.credentials.pi_env {
        env.insert(key.clone(), value.clone());
    }
    let stated = stated
        .into_iter()
        .map(|(name, text)| PlannedFile {
            path: Path::new(PI_AGENT_DIR).join(name),
            contents: text.into_bytes(),
            mode: TURN_FILE_MODE,
        })
        .collect();
    Ok(TurnPlan {
        argv,
        env,
        files: Vec::new(),
        stated,
        // pi has no `--`: on the argv a prompt starting with `-` or `@` would be an option or
        // a file to attach. It reads a piped stdin as the prompt, byte for byte.
        stdin: Some(request.prompt.to_owned()),
    })
}

/// atelier-agent's `--provider` for Anthropic's Messages API.
const ATELIER_ANTHROPIC: &str = "anthropic";
/// atelier-agent's `--provider` for an OpenAI-compatible chat-completions API.
const ATELIER_OPENAI_COMPATIBLE: &str = "openai-compatible";
/// The variable atelier-agent reads its provider's key from (never an argument). Outside the
/// `ATELIER_` names a run's spec may not set (the shim keeps them for the units' own settings).
pub const ATELIER_API_KEY_ENV: &str = "AGENT_API_KEY";
/// The daemon's credential that holds atelier-agent's provider key; an atelier turn's child gets
/// it as [`ATELIER_API_KEY_ENV`].
pub const ATELIER_API_KEY_CREDENTIAL: &str = atelier_layout::paths::ATELIER_AGENT_API_KEY;

/// atelier-agent (`atelier-agent --provider P --model M … -- -`, the prompt on stdin). It reads no
/// configuration source of its own (no settings file, no project directory, no plugins or
/// skills), so all it is told is on this argv: the provider and model — Anthropic's Messages
/// API when an Anthropic model is declared (at the declared base URL, else Anthropic's own),
/// else the OpenAI-compatible model —, the round limit, the CLI's state directory, where it
/// keeps the conversation its result's resume token names, and the MCP server. It reads the
/// brief, AGENTS.md, itself through its link-refusing reader, and its key only from
/// [`ATELIER_API_KEY_ENV`]. It sends an MCP server no header, so an attachment that needs one
/// (the Publication API's key, under `none`) is not offered: every request would be refused.
fn plan_atelier(request: &TurnRequest<'_>) -> Result<TurnPlan, PlanError> {
    let endpoint = request.endpoint;
    let (provider, model, base_url) = match (&endpoint.anthropic_model, &endpoint.openai) {
        (Some(model), _) => (
            ATELIER_ANTHROPIC,
            model.as_str(),
            endpoint.anthropic_base_url.as_deref(),
        ),
        (None, Some(openai)) => (
            ATELIER_OPENAI_COMPATIBLE,
            openai.model.as_str(),
            Some(openai.base_url.as_str()),
        ),
        (None, None) => return Err(PlanError::NoAtelierModel),
    };
    let mut argv: Vec<String> = vec![
        request.bin.to_string_lossy().into_owned(),
        "--provider".into(),
        provider.into(),
        "--model".into(),
        model.into(),
    ];
    if let Some(url) = base_url {
        argv.extend(["--base-url".to_owned(), url.to_owned()]);
    }
    argv.extend([
        "--max-turns".to_owned(),
        MAX_TURNS.to_owned(),
        "--state-dir".to_owned(),
        request.state_dir.to_string_lossy().into_owned(),
    ]);
    if request.mcp.headers.is_empty() {
        argv.extend([
            "--mcp-url".to_owned(),
            request.mcp.url.clone(),
            "--mcp-name".to_owned(),
            request.mcp.name.clone(),
        ]);
    }
    if let Some(token) = request.resume_token {
        argv.extend(["--resume".to_owned(), token.to_owned()]);
    }
    // `-` reads the prompt from stdin, exactly: on the argv a prompt of `-` alone would be
    // that word rather than the editor's.
    argv.extend(["--".to_owned(), "-".to_owned()]);
    let mut env = base_env(request);
    if let Some(key) = &request.credentials.atelier_api_key {
        env.insert(ATELIER_API_KEY_ENV.to_owned(), key.clone());
    }
    Ok(TurnPlan {
        argv,
        env,
        files: Vec::new(),
        stated: Vec::new(),
        stdin: Some(request.prompt.to_owned()),
    })
}

/// What makes opencode load only what the daemon states, for a turn and for every question
/// asked of the binary: the switches, the permission override and the credential store — a
/// configuration source too, stated empty (a turn's `OPENCODE_ENV` may replace it with the
/// operator's).
pub(crate) fn opencode_restriction() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = OPENCODE_SWITCHES
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.insert(
        "OPENCODE_PERMISSION".to_owned(),
        opencode_permission().to_string(),
    );
    env.insert("OPENCODE_AUTH_CONTENT".to_owned(), "{}".to_owned());
    env
}

/// The database opencode opens, below the CLI's state directory `state_dir`.
pub fn opencode_db(state_dir: &Path) -> PathBuf {
    state_dir.join(OPENCODE_DB_FILE)
}

/// Whether `pairs` sets `key`.
fn has_credential(pairs: &[(String, String)], key: &str) -> bool {
    pairs.iter().any(|(k, _)| k == key)
}

/// Refuses `OPENCODE_ENV` unless every key is a provider credential a run may be given (naming
/// the first that is not) and `OPENCODE_AUTH_CONTENT`, when given, holds `api`/`oauth` entries
/// only. Meant for config parsing, so a bad value stops the daemon at boot; [`plan_turn`] asks
/// again.
pub fn validate_opencode_env(pairs: &[(String, String)]) -> Result<(), PlanError> {
    for (key, value) in pairs {
        let named = key == "OPENCODE_API_KEY" || key == "OPENCODE_AUTH_CONTENT";
        let credential = is_provider_credential(key)
            && !key.starts_with("OPENCODE_")
            && !atelier_proto::is_fixed_env_key(key);
        if !(named || credential) {
            return Err(PlanError::OpencodeEnvKey(key.clone()));
        }
        if key == "OPENCODE_AUTH_CONTENT" && !is_plain_auth_store(value) {
            return Err(PlanError::OpencodeAuthContent);
        }
    }
    Ok(())
}

/// Refuses `PI_ENV` unless every key is a provider credential a run may be given (naming the
/// first that is not): anything else (`NODE_OPTIONS`, `PI_CODING_AGENT_DIR`) would change what pi loads. Meant for
/// config parsing; [`plan_turn`] asks again.
pub fn validate_pi_env(pairs: &[(String, String)]) -> Result<(), PlanError> {
    match pairs.iter().find(|(key, _)| {
        !is_provider_credential(key)
            || key.starts_with("PI_")
            || atelier_proto::is_fixed_env_key(key)
    }) {
        Some((key, _)) => Err(PlanError::PiEnvKey(key.clone())),
        None => Ok(()),
    }
}

/// A provider's credential by its name: `…_API_KEY`, `…_AUTH_TOKEN`, `…_ACCESS_KEY_ID`,
/// `…_SECRET_ACCESS_KEY` or `…_SESSION_TOKEN`.
fn is_provider_credential(key: &str) -> bool {
    const SUFFIXES: [&str; 5] = [
        "_API_KEY",
        "_AUTH_TOKEN",
        "_ACCESS_KEY_ID",
        "_SECRET_ACCESS_KEY",
        "_SESSION_TOKEN",
    ];
    is_env_name(key)
        && SUFFIXES
            .iter()
            .any(|s| key.len() > s.len() && key.ends_with(s))
}

/// `[A-Z][A-Z0-9_]*`: what a provider's key is called.
fn is_env_name(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// An opencode credential store holding only `api` and `oauth` entries.
fn is_plain_auth_store(text: &str) -> bool {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(entries)) => entries.values().all(|entry| {
            matches!(
                entry.get("type").and_then(Value::as_str),
                Some("api" | "oauth")
            )
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
