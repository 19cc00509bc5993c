//! atelier-sited's entry point: parse arguments, read the service token, call the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use atelier_sd::credentials::CredentialError;
use atelier_sited::{AgentCredentials, RawSettings, Settings, DEFAULT_BASE_PATH};
use clap::{CommandFactory as _, Parser};

/// The site daemon of one Atelier instance. systemd starts it from `atelier-sited@<inst>.socket`
/// with the provisioner's env file (`ATELIER_*` keys) in its environment; for development,
/// `--listen` binds a unix socket instead, and each flag overrides its `ATELIER_*` key.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The instance this daemon serves (the unit's `%i`; else ATELIER_INSTANCE).
    #[arg(long, default_value = "")]
    instance: String,
    /// Unix socket to bind when systemd passed none.
    #[arg(long)]
    listen: Option<PathBuf>,
    /// Path prefix the engine mounts the daemon under.
    #[arg(long, default_value = DEFAULT_BASE_PATH)]
    base_path: String,
    /// Development only: read the service token from this file when no systemd credential
    /// named SERVICE_TOKEN is present. A credential always wins.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The workspaces' root.
    #[arg(long)]
    sites_root: Option<PathBuf>,
    /// The audit directory.
    #[arg(long)]
    audit_dir: Option<PathBuf>,
    /// The provisioner's site table (sites.json).
    #[arg(long)]
    site_table_file: Option<PathBuf>,
    /// The Publication API's base URL.
    #[arg(long)]
    publication_api_url: Option<String>,
    /// The site templates' directory (else ATELIER_TEMPLATES_DIR; default
    /// /usr/share/atelier/templates).
    #[arg(long)]
    templates_dir: Option<PathBuf>,
    /// The most sites this instance may have (default 20).
    #[arg(long)]
    max_sites: Option<u32>,
    /// The most turns running at once across sites (default 2).
    #[arg(long)]
    max_concurrent_sessions: Option<u32>,
    /// A site's disk quota in MiB (default 1024).
    #[arg(long)]
    site_disk_quota_mb: Option<u64>,
    /// The agent driver sites get by default: claude_code, opencode, pi or atelier.
    #[arg(long)]
    default_driver: Option<String>,
    /// The label before a site's domain on preproduction (default pre).
    #[arg(long)]
    preprod_host_prefix: Option<String>,
    /// How runs are confined: systemd_scope (door units, the default) or none (sited spawns
    /// the shim itself; development only).
    #[arg(long)]
    agent_confinement: Option<String>,
    /// production (the default) or development; only development allows --agent-confinement
    /// none.
    #[arg(long)]
    deployment: Option<String>,
    /// The agents' state root (unconfined door HOMEs live under it).
    #[arg(long)]
    agent_state_root: Option<PathBuf>,
    /// The shim every door unit runs, and that sited spawns under --agent-confinement none
    /// (else ATELIER_SHIM_BIN; default /usr/bin/atelier-shim).
    #[arg(long)]
    shim_bin: Option<PathBuf>,
    /// Claude Code's binary (absolute path).
    #[arg(long)]
    claude_code_bin: Option<PathBuf>,
    /// Where Claude Code sends its model requests (an https:// LLM gateway), when not
    /// Anthropic's own API; a confined turn reaches it through the gate's model relay.
    #[arg(long)]
    anthropic_base_url: Option<String>,
    /// The OpenAI-compatible API a pi or opencode turn talks to (https://<host>[/path], the
    /// part before /chat/completions); a confined turn reaches it through the model relay.
    #[arg(long, requires = "openai_model")]
    openai_base_url: Option<String>,
    /// The model id a pi turn names.
    #[arg(long, requires = "openai_base_url")]
    openai_model: Option<String>,
    /// The model id an atelier turn asks Anthropic's Messages API for (at
    /// --anthropic-base-url, else Anthropic's own API); set, atelier speaks Anthropic rather
    /// than the OpenAI-compatible model.
    #[arg(long)]
    anthropic_model: Option<String>,
    /// Development only: a PEM file of extra certificate authorities a turn's agent trusts
    /// (a lab model server's test CA); refused unless --deployment development.
    #[arg(long)]
    agent_extra_ca_certs: Option<PathBuf>,
    /// A turn's wall-clock limit in milliseconds (default 20 minutes).
    #[arg(long)]
    session_turn_timeout_ms: Option<u64>,
    /// atelier-build as the build door runs it (else ATELIER_BUILD_BIN; default
    /// /usr/bin/atelier-build).
    #[arg(long)]
    build_bin: Option<PathBuf>,
    /// Releases kept per surface besides the served one (default 5).
    #[arg(long)]
    releases_retained: Option<u64>,
}

/// The exit status of a configuration sited cannot run with (sysexits' `EX_CONFIG`): its unit
/// does not restart on it (`RestartPreventExitStatus=`), as only an operator's change helps.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    if let Some(done) =
        atelier_clidocs::generate_if_asked(Args::command, atelier_clidocs::Docs::Manual)
    {
        return atelier_clidocs::exit_code(done);
    }
    let args = Args::parse();
    if let Err(error) = atelier_sd::logging::init("info") {
        eprintln!("atelier-sited: starting logging: {error:#}");
        return ExitCode::FAILURE;
    }
    // Logged at error priority (`journalctl -p err`), not only printed to stderr.
    let settings = match settings(args) {
        Ok(settings) => settings,
        Err(error) => {
            tracing::error!("invalid configuration; nothing was started: {error:#}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match serve(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("atelier-sited failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The settings from the flags, the environment and the credentials, validated.
fn settings(args: Args) -> anyhow::Result<Settings> {
    let settings = RawSettings {
        instance: args.instance,
        service_token: service_token(args.token_file.as_deref())?,
        base_path: Some(args.base_path),
        listen: args.listen,
        sites_root: args.sites_root,
        audit_dir: args.audit_dir,
        site_table_file: args.site_table_file,
        publication_api_url: args.publication_api_url,
        templates_dir: args.templates_dir,
        max_sites: args.max_sites,
        max_concurrent_sessions: args.max_concurrent_sessions,
        site_disk_quota_mb: args.site_disk_quota_mb,
        default_driver: args.default_driver,
        preprod_host_prefix: args.preprod_host_prefix,
        git_timeout_ms: None,
        agent_confinement: args.agent_confinement,
        deployment: args.deployment,
        agent_state_root: args.agent_state_root,
        shim_bin: args.shim_bin,
        claude_code_bin: args.claude_code_bin,
        anthropic_base_url: args.anthropic_base_url,
        agent_extra_ca_certs: args.agent_extra_ca_certs,
        openai_base_url: args.openai_base_url,
        openai_model: args.openai_model,
        anthropic_model: args.anthropic_model,
        opencode_bin: None,
        pi_bin: None,
        atelier_bin: None,
        session_turn_timeout_ms: args.session_turn_timeout_ms,
        site_identities: None,
        runtime_dir: None,
        identity_epoch: None,
        releases_retained: args.releases_retained,
        prod_url_scheme: None,
        install_timeout_ms: None,
        build_timeout_ms: None,
        build_bin: args.build_bin,
        credentials: AgentCredentials {
            anthropic_api_key: optional_credential(atelier_layout::paths::ANTHROPIC_API_KEY)?,
            publication_api_key: optional_credential(atelier_layout::paths::PUBLICATION_API_KEY)?,
            opencode_env: optional_credential(atelier_layout::paths::OPENCODE_ENV)?,
            pi_env: optional_credential(atelier_layout::paths::PI_ENV)?,
            atelier_api_key: optional_credential(atelier_agents::ATELIER_API_KEY_CREDENTIAL)?,
        },
    }
    .validate_with_environment(std::env::vars())?;
    Ok(settings)
}

/// Runs the daemon until it is told to stop.
fn serve(settings: Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let notifier = atelier_sd::notify::Notifier::from_env();
    runtime
        .block_on(atelier_sited::run(settings, notifier))
        .context("atelier-sited failed")
}

fn service_token(token_file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let token = atelier_sd::credentials::read_credential_string_or_file(
        atelier_sited::SERVICE_TOKEN_CREDENTIAL,
        token_file,
    )
    .context("reading the SERVICE_TOKEN credential")?;
    Ok(token.map(|t| t.expose().to_owned()))
}

/// A credential the unit may or may not pass; only `$CREDENTIALS_DIRECTORY` is read.
fn optional_credential(name: &str) -> anyhow::Result<Option<String>> {
    match atelier_sd::credentials::read_credential_string_or_file(name, None) {
        Ok(value) => Ok(value.map(|v| v.into_exposed())),
        Err(CredentialError::Missing { .. }) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading the {name} credential")),
    }
}
