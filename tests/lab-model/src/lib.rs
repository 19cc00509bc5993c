//! TEST FIXTURE, not a model: a scripted stand-in for a model provider on the internet, for the
//! tests that run a real agent CLI (Claude Code) confined under systemd and reaching the
//! provider through the egress gate. Only the model is scripted; the agent is real. The same
//! server is also a minimal npm registry ([`registry`]), so a site's build can run a real
//! `npm install` through the gate against a lab hostname instead of the internet.
//!
//! It serves HTTPS (HTTP/1.1 only) with a certificate for `--host`, signed by a CA made at
//! start and written to `--ca-out` once the listener is bound (the file appearing is the
//! ready signal). Every request is appended to `--record` as one JSON line, credentials
//! redacted. The answers are decided from each request alone ([`script`]): until the last
//! message carries a tool result the model calls its write tool with `--write-path` and
//! `--write-content`; after it, the model says `--final-text` and ends its turn. Each
//! `--package NAME@VERSION` is a tiny package the registry makes at start and serves at
//! `GET /NAME` (its packument) and `GET /NAME/-/NAME-VERSION.tgz` (its tarball).
//!
//! With `--upstream http://127.0.0.1:PORT` ([`upstream`]) the model is real instead: the lab
//! keeps its TLS name, CA and record, and forwards `POST /v1/chat/completions` (and
//! `GET /v1/models`) to a plain-HTTP OpenAI-compatible server on loopback, such as
//! `scripts/local-model serve PORT`, streaming its answer back as it arrives. The body goes
//! unchanged (the model name too), the client's credentials do not; an upstream that cannot be
//! reached is a 502 in OpenAI's error shape. Only a loopback IP literal with a port is
//! accepted, so the fixture never forwards off the machine. `--write-path` and
//! `--write-content` are then optional; without them the Anthropic route has no script and
//! answers not found. The npm registry is unchanged.
//!
//! Parts: [`tls`] (the CA and the server configuration), [`record`] (the request log),
//! [`script`] (the stateless decision), [`anthropic`] and [`openai`] (the two wires),
//! [`upstream`] (the forwarding to a real model), [`registry`] (the npm packages and their
//! documents), [`server`] (routing and serving until SIGTERM).
//!
//! With `--mcp` the same server answers `/mcp` as a minimal MCP server ([`mcp`]) with one tool,
//! the Publication API's stand-in; each of those requests is recorded with the SHA-256 of the
//! key headers it carried. With `--call-mcp-tool SUFFIX` the script (either wire) first calls
//! the offered tool whose name ends with SUFFIX, then writes, then says its final text. With
//! `--replace-path`, `--replace-old` and `--replace-new` the OpenAI script follows its write
//! with an exact replace through the offered `edit` tool. Each request is recorded with the
//! instant it was received, so a benchmark in the same box can time it.
//!
//! Beside the model, [`cms`] is a stand-in for the CMS's session check, its content read routes
//! and its tool-result route, served on plain HTTP on loopback by its own binary,
//! `atelier-lab-cms`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

pub mod anthropic;
pub mod cms;
pub mod mcp;
pub mod openai;
pub mod record;
pub mod registry;
pub mod script;
pub mod server;
pub mod tls;
pub mod upstream;

/// What the model says once the tool result is back, unless `--final-text` says otherwise.
pub const DEFAULT_FINAL_TEXT: &str = "Done: the home page is written.";

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "atelier-lab-model",
    about = "TEST FIXTURE: a scripted model provider over HTTPS (Anthropic Messages, OpenAI chat \
             completions), and a minimal npm registry on the same server. The model writes one \
             file through the agent's write tool, then says its final text; the registry serves \
             a tiny package made at start for each --package. With --upstream, OpenAI chat \
             completions go to a real model on loopback instead (plain HTTP, streamed back \
             under the lab's TLS name). With --mcp, /mcp is also a minimal MCP server with one \
             tool."
)]
pub struct Cli {
    /// The address to listen on, e.g. 198.18.7.2:443.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// A name the server certificate carries (repeatable); the lab hostname. An IP address
    /// (e.g. 127.0.0.1) is carried as an IP address, for clients that dial one.
    #[arg(long = "host", value_name = "NAME", required = true)]
    pub hosts: Vec<String>,
    /// Where the test CA certificate (PEM) is written, atomically, once the listener is bound.
    #[arg(long, value_name = "PATH")]
    pub ca_out: PathBuf,
    /// Appends one JSON line per request received (credentials redacted).
    #[arg(long, value_name = "PATH")]
    pub record: Option<PathBuf>,
    /// The absolute path the scripted tool call writes (required unless --upstream; given,
    /// --write-content is too).
    #[arg(
        long,
        value_name = "PATH",
        value_parser = absolute,
        required_unless_present = "upstream",
        requires = "write_content"
    )]
    pub write_path: Option<String>,
    /// The content the scripted tool call writes (required unless --upstream; given,
    /// --write-path is too).
    #[arg(
        long,
        value_name = "TEXT",
        required_unless_present = "upstream",
        requires = "write_path"
    )]
    pub write_content: Option<String>,
    /// What the model says once the tool result is back.
    #[arg(long, value_name = "TEXT", default_value = DEFAULT_FINAL_TEXT)]
    pub final_text: String,
    /// A package the npm registry serves (repeatable), e.g. escape-html@1.0.3: an unscoped
    /// name and a plain MAJOR.MINOR.PATCH version. It is made at start for the test: for
    /// escape-html a working HTML escaper, for any other name a function returning where it
    /// came from.
    #[arg(long = "package", value_name = "NAME@VERSION")]
    pub packages: Vec<registry::PackageSpec>,
    /// Also serve /mcp: a minimal MCP server (streamable HTTP) with one tool,
    /// publication_search, answering a fixed record; the record file gets the SHA-256 of the
    /// key headers (x-api-key, authorization) each of its requests carried.
    #[arg(long)]
    pub mcp: bool,
    /// Before its write, the script (either wire) calls the offered tool whose name ends with
    /// this (e.g. publication_search, the MCP stand-in's tool as an agent offers it), with a
    /// fixed query; the write follows that tool's result. A request offering no such tool is
    /// answered as without it.
    #[arg(long, value_name = "SUFFIX")]
    pub call_mcp_tool: Option<String>,
    /// After its write, the OpenAI script replaces --replace-old with --replace-new in this
    /// file (absolute; all three or none) with the offered tool named `edit`; the final
    /// text follows that tool's result. A request offering no `edit` is answered as without
    /// it; the Anthropic script ignores it.
    #[arg(
        long,
        value_name = "PATH",
        value_parser = absolute,
        requires_all = ["replace_old", "replace_new"]
    )]
    pub replace_path: Option<String>,
    /// The exact span the replace looks for (with --replace-path).
    #[arg(long, value_name = "TEXT", requires = "replace_path")]
    pub replace_old: Option<String>,
    /// What the span becomes (with --replace-path).
    #[arg(long, value_name = "TEXT", requires = "replace_path")]
    pub replace_new: Option<String>,
    /// A real OpenAI-compatible model to forward chat completions to, e.g.
    /// http://127.0.0.1:8081 (`scripts/local-model serve 8081`): http:// with a loopback IP
    /// address (127.0.0.0/8 or ::1) and a port, nothing else, so nothing leaves the machine.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<upstream::Upstream>,
}

impl Cli {
    /// The script, if `--write-path` and `--write-content` were given (clap sees to both or
    /// neither, and to both without `--upstream`).
    pub fn script(&self) -> Option<script::Script> {
        match (&self.write_path, &self.write_content) {
            (Some(write_path), Some(write_content)) => Some(script::Script {
                write_path: write_path.clone(),
                write_content: write_content.clone(),
                final_text: self.final_text.clone(),
                replace: self.replace(),
            }),
            _ => None,
        }
    }

    /// The opt-in replace, if `--replace-path` was given (clap sees to all three or none).
    fn replace(&self) -> Option<script::Replace> {
        match (&self.replace_path, &self.replace_old, &self.replace_new) {
            (Some(path), Some(old), Some(new)) => Some(script::Replace {
                path: path.clone(),
                old: old.clone(),
                new: new.clone(),
            }),
            _ => None,
        }
    }
}

/// Why the lab model could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The certificates could not be made.
    #[error("cannot make the lab certificates: {0}")]
    Tls(#[from] tls::TlsError),
    /// The registry's packages could not be made.
    #[error("cannot make the registry's packages: {0}")]
    Registry(#[from] registry::RegistryError),
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
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A scripted lab model's command line, nothing optional.
    const SCRIPTED: [&str; 11] = [
        "atelier-lab-model",
        "--listen",
        "127.0.0.1:8443",
        "--host",
        "registry.lab.example",
        "--ca-out",
        "/tmp/ca.pem",
        "--write-path",
        "/a",
        "--write-content",
        "hi",
    ];

    #[test]
    fn the_replace_takes_all_three_options_and_an_absolute_path() {
        let with = |extra: &[&'static str]| Cli::try_parse_from(SCRIPTED.iter().chain(extra));
        let full = [
            "--replace-path",
            "/srv/a.css",
            "--replace-old",
            "48rem",
            "--replace-new",
            "60rem",
        ];
        let replace = with(&full).unwrap().script().unwrap().replace.unwrap();
        assert_eq!(
            (
                replace.path.as_str(),
                replace.old.as_str(),
                replace.new.as_str()
            ),
            ("/srv/a.css", "48rem", "60rem")
        );
        assert_eq!(with(&[]).unwrap().script().unwrap().replace, None);
        for (name, args) in [
            ("no new", &full[..4]),
            ("only the path", &full[..2]),
            ("no path", &full[2..]),
            (
                "relative path",
                &[
                    "--replace-path",
                    "a.css",
                    "--replace-old",
                    "a",
                    "--replace-new",
                    "b",
                ][..],
            ),
        ] {
            assert!(with(args).is_err(), "{name}");
        }
    }

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
    fn packages_are_repeatable_and_checked_at_parse() {
        let base = SCRIPTED;
        let cli = Cli::try_parse_from(base).unwrap();
        assert!(cli.packages.is_empty());
        let cli = Cli::try_parse_from(base.iter().copied().chain([
            "--package",
            "escape-html@1.0.3",
            "--package",
            "left-pad@0.1.0",
        ]))
        .unwrap();
        let packages: Vec<String> = cli.packages.iter().map(ToString::to_string).collect();
        assert_eq!(packages, ["escape-html@1.0.3", "left-pad@0.1.0"]);
        let scoped = Cli::try_parse_from(
            base.iter()
                .copied()
                .chain(["--package", "@lab/escape-html@1.0.3"]),
        )
        .unwrap_err();
        assert!(
            scoped.to_string().contains("scoped package names"),
            "{scoped}"
        );
    }

    #[test]
    fn the_registry_role_keeps_the_model_s_arguments_required() {
        let cli = Cli::try_parse_from([
            "atelier-lab-model",
            "--listen",
            "127.0.0.1:8443",
            "--host",
            "registry.lab.example",
            "--ca-out",
            "/tmp/ca.pem",
            "--package",
            "escape-html@1.0.3",
        ]);
        assert!(cli.is_err());
    }

    #[test]
    fn upstream_makes_the_script_optional_but_whole() {
        let base = [
            "atelier-lab-model",
            "--listen",
            "127.0.0.1:8443",
            "--host",
            "model.lab.test",
            "--ca-out",
            "/tmp/ca.pem",
        ];
        for (name, extra, script) in [
            (
                "upstream alone",
                &["--upstream", "http://127.0.0.1:8081"][..],
                Some(false),
            ),
            (
                "upstream and a script",
                &[
                    "--upstream",
                    "http://127.0.0.1:8081",
                    "--write-path",
                    "/a",
                    "--write-content",
                    "hi",
                ][..],
                Some(true),
            ),
            ("neither", &[][..], None),
            (
                "a path without content",
                &["--upstream", "http://127.0.0.1:8081", "--write-path", "/a"][..],
                None,
            ),
            (
                "content without a path",
                &[
                    "--upstream",
                    "http://127.0.0.1:8081",
                    "--write-content",
                    "hi",
                ][..],
                None,
            ),
        ] {
            let cli = Cli::try_parse_from(base.iter().chain(extra));
            match script {
                Some(scripted) => {
                    let cli = cli.unwrap_or_else(|error| panic!("{name}: {error}"));
                    assert_eq!(cli.script().is_some(), scripted, "{name}");
                    assert_eq!(
                        cli.upstream.map(|upstream| upstream.to_string()).as_deref(),
                        Some("http://127.0.0.1:8081"),
                        "{name}"
                    );
                }
                None => assert!(cli.is_err(), "{name}"),
            }
        }
    }

    #[test]
    fn the_mcp_tool_to_call_first_is_opt_in() {
        let base = SCRIPTED;
        assert_eq!(Cli::try_parse_from(base).unwrap().call_mcp_tool, None);
        let cli = Cli::try_parse_from(base.iter().copied().chain([
            "--mcp",
            "--call-mcp-tool",
            "publication_search",
        ]))
        .unwrap();
        assert_eq!(cli.call_mcp_tool.as_deref(), Some("publication_search"));
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
