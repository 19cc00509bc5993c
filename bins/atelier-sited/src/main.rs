//! atelier-sited's entry point: parse arguments, read the service token, call the library.

use std::path::PathBuf;

use anyhow::Context as _;
use atelier_sited::{RawSettings, DEFAULT_BASE_PATH};
use clap::Parser;

/// The site daemon of one Atelier instance. systemd starts it from `atelier-sited@<inst>.socket`;
/// for development, `--listen` binds a unix socket instead.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The instance this daemon serves (the unit's `%i`).
    #[arg(long)]
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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    atelier_sd::logging::init("info").context("starting logging")?;
    let settings = RawSettings {
        instance: args.instance,
        service_token: service_token(args.token_file.as_deref())?,
        base_path: Some(args.base_path),
        listen: args.listen,
    }
    .validate()
    .context("invalid configuration; nothing was started")?;

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
    use atelier_sd::credentials::{read_credential_string, CredentialError};
    match read_credential_string(atelier_sited::SERVICE_TOKEN_CREDENTIAL) {
        Ok(token) => return Ok(Some(token.expose().to_owned())),
        Err(CredentialError::NotProvided) => {}
        Err(e) => return Err(e).context("reading the SERVICE_TOKEN credential"),
    }
    let Some(path) = token_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    Ok(Some(text.trim_end_matches('\n').to_owned()))
}
