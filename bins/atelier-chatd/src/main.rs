//! atelier-chatd's entry point: parse arguments, read the service token, call the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use atelier_chatd::RawSettings;
use clap::{CommandFactory as _, Parser, Subcommand};

/// The CMS editor's AI chat runtime. systemd starts an instance's from
/// `atelier-chatd@<instance>.socket`, whose unit passes `--database`; for development,
/// `--listen` binds a unix socket instead.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The SQLite database (default: /var/lib/atelier-chatd/chat.sqlite3; or CHATD_DATABASE).
    /// An instance's unit passes /var/lib/atelier-chatd-<instance>/chat.sqlite3.
    #[arg(long, global = true)]
    database: Option<PathBuf>,
    /// Unix socket to bind when systemd passed none.
    #[arg(long)]
    listen: Option<PathBuf>,
    /// An origin the editor is served from; repeat for several (or CHATD_PUBLIC_ORIGIN,
    /// comma-separated).
    #[arg(long = "public-origin")]
    public_origins: Vec<String>,
    /// Development only: read the service token from this file when no systemd credential
    /// named CHATD_SERVICE_TOKEN is present. A credential always wins.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Development only: read the master key (base64 of 32 bytes) from this file when the
    /// process was given no systemd credentials. The file must have no write permission bit:
    /// chatd never reads its key from a file it could be made to write.
    #[arg(long)]
    master_key_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hard-delete the conversations deleted more than the given days ago, with their
    /// messages and images, in one transaction; safe while chatd serves the same database.
    /// Prints how many were removed.
    Purge {
        /// How many days a deleted conversation is kept.
        #[arg(long, default_value_t = atelier_chatd::store::purge::DEFAULT_RETENTION_DAYS)]
        older_than_days: u32,
    },
}

/// The exit status of settings chatd must not run with (sysexits' `EX_CONFIG`): its unit does
/// not restart on it, as only an operator's change helps.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    if let Some(done) =
        atelier_clidocs::generate_if_asked(Args::command, atelier_clidocs::Docs::Manual)
    {
        return atelier_clidocs::exit_code(done);
    }
    let args = Args::parse();
    if let Err(error) = atelier_sd::logging::init("info") {
        eprintln!("atelier-chatd: starting logging: {error:#}");
        return ExitCode::FAILURE;
    }
    if let Some(Command::Purge { older_than_days }) = &args.command {
        return subcommand_exit(purge(&args, *older_than_days));
    }
    // Logged at error priority (`journalctl -p err`), not only printed to stderr.
    let settings = match settings(args) {
        Ok(settings) => settings,
        Err(error) => {
            tracing::error!("{error:#}; nothing was started");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| {
            let notifier = atelier_sd::notify::Notifier::from_env();
            Ok(runtime.block_on(atelier_chatd::run(settings, notifier))?)
        });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("atelier-chatd failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// A subcommand's exit status; its failure logged at error priority.
fn subcommand_exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The database a subcommand works on: `--database`, else CHATD_DATABASE, else the default.
fn database(args: &Args) -> PathBuf {
    args.database
        .clone()
        .or_else(|| std::env::var_os("CHATD_DATABASE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(atelier_chatd::DEFAULT_DATABASE))
}

/// `purge`: one transaction, by the system clock.
fn purge(args: &Args, older_than_days: u32) -> anyhow::Result<()> {
    let database = database(args);
    let purged = atelier_chatd::store::purge::purge_database(&database, older_than_days)
        .with_context(|| format!("purging {}; nothing was removed", database.display()))?;
    println!("{}", serde_json::to_string(&purged)?);
    Ok(())
}

/// The validated settings: the arguments, the environment and the credentials.
fn settings(args: Args) -> anyhow::Result<atelier_chatd::Settings> {
    RawSettings {
        database: args.database,
        listen: args.listen,
        public_origins: args.public_origins,
        service_token: service_token(args.token_file.as_deref())?,
        master_key: master_key(args.master_key_file.as_deref())?,
        ..RawSettings::default()
    }
    .validate_with_variables(std::env::vars())
    .context("invalid configuration")
}

fn service_token(token_file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let token = atelier_sd::credentials::read_credential_string_or_file(
        atelier_chatd::SERVICE_TOKEN_CREDENTIAL,
        token_file,
    )
    .context("reading the CHATD_SERVICE_TOKEN credential")?;
    Ok(token.map(|t| t.expose().to_owned()))
}

fn master_key(key_file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(file) = key_file {
        let mode = std::fs::metadata(file)
            .with_context(|| format!("reading the master key file {}", file.display()))?
            .permissions()
            .mode();
        if mode & 0o222 != 0 {
            anyhow::bail!(
                "the master key file {} is writable (mode {:o}); make it read-only",
                file.display(),
                mode & 0o7777
            );
        }
    }
    let key = atelier_sd::credentials::read_credential_string_or_file(
        atelier_chatd::master_key::MASTER_KEY_CREDENTIAL,
        key_file,
    )
    .context("reading the CHATD_MASTER_KEY credential")?;
    Ok(key.map(|k| k.expose().to_owned()))
}
