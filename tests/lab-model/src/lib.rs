//! TEST FIXTURE, not a model: a scripted stand-in for a model provider on the internet, for the
//! tests that run a real agent CLI (Claude Code) confined under systemd and reaching the
//! provider through the egress gate. Only the model is scripted; the agent is real.
//!
//! It serves HTTPS (HTTP/1.1 only) with a certificate for `--host`, signed by a CA made at
//! start and written to `--ca-out` once the listener is bound (the file appearing is the
//! ready signal). Every request is appended to `--record` as one JSON line, credentials
//! redacted. The answers are decided from each request alone ([`script`]): until the last
//! message carries a tool result the model calls its write tool with `--write-path` and
//! `--write-content`; after it, the model says `--final-text` and ends its turn.
//!
//! Parts: [`tls`] (the CA and the server configuration), [`record`] (the request log),
//! [`script`] (the stateless decision), [`anthropic`] and [`openai`] (the two wires),
//! [`server`] (routing and serving until SIGTERM).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

pub mod anthropic;
pub mod openai;
pub mod record;
pub mod script;
pub mod server;
pub mod tls;

/// What the model says once the tool result is back, unless `--final-text` says otherwise.
pub const DEFAULT_FINAL_TEXT: &str = "Done: the home page is written.";

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "atelier-lab-model",
    about = "TEST FIXTURE: a scripted model provider over HTTPS (Anthropic Messages, OpenAI chat \
             completions). It writes one file through the agent's write tool, then says its \
             final text."
)]
pub struct Cli {
    /// The address to listen on, e.g. 198.18.7.2:443.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// A name the server certificate carries (repeatable); the lab hostname.
    #[arg(long = "host", value_name = "NAME", required = true)]
    pub hosts: Vec<String>,
    /// Where the test CA certificate (PEM) is written, atomically, once the listener is bound.
    #[arg(long, value_name = "PATH")]
    pub ca_out: PathBuf,
    /// Appends one JSON line per request received (credentials redacted).
    #[arg(long, value_name = "PATH")]
    pub record: Option<PathBuf>,
    /// The absolute path the scripted tool call writes.
    #[arg(long, value_name = "PATH", value_parser = absolute)]
    pub write_path: String,
    /// The content the scripted tool call writes.
    #[arg(long, value_name = "TEXT")]
    pub write_content: String,
    /// What the model says once the tool result is back.
    #[arg(long, value_name = "TEXT", default_value = DEFAULT_FINAL_TEXT)]
    pub final_text: String,
}

/// Why the lab model could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The certificates could not be made.
    #[error("cannot make the lab certificates: {0}")]
    Tls(#[from] tls::TlsError),
    /// The record file could not be opened.
    #[error("cannot open the record file {path}: {source}")]
    Record {
        /// The `--record` path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The `--listen` address.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// The CA certificate could not be written.
    #[error("cannot write the CA certificate to {path}: {source}")]
    CaOut {
        /// The `--ca-out` path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The runtime or the signal handlers could not be set up.
    #[error("cannot set up the runtime: {0}")]
    Runtime(std::io::Error),
}

/// Serves until SIGTERM (or SIGINT), on a single-threaded runtime.
pub fn run(cli: Cli) -> Result<(), LabError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::Runtime)?;
    runtime.block_on(server::serve(cli))
}

fn absolute(path: &str) -> Result<String, String> {
    if std::path::Path::new(path).is_absolute() {
        Ok(path.to_owned())
    } else {
        Err(format!(
            "{path} is not absolute (the agent's write tool wants one)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_path_must_be_absolute() {
        let base = [
            "atelier-lab-model",
            "--listen",
            "127.0.0.1:8443",
            "--host",
            "lab.test",
            "--ca-out",
            "/tmp/ca.pem",
            "--write-content",
            "hi",
            "--write-path",
        ];
        let relative = Cli::try_parse_from(base.iter().copied().chain(["src/index.html"]));
        assert!(relative.is_err());
        let cli = Cli::try_parse_from(base.iter().copied().chain(["/srv/site/index.html"]));
        assert!(cli.is_ok_and(|cli| cli.final_text == DEFAULT_FINAL_TEXT));
    }

    #[test]
    fn a_host_is_required() {
        let cli = Cli::try_parse_from([
            "atelier-lab-model",
            "--listen",
            "127.0.0.1:8443",
            "--ca-out",
            "/tmp/ca.pem",
            "--write-path",
            "/a",
            "--write-content",
            "hi",
        ]);
        assert!(cli.is_err());
    }
}
