//! The command line, `atelier-provision <render DIR|plan|apply|check|verify|remove>
//! --declaration PATH [--json]`, with the shared exit codes (0 ok, 1 drift, 2 usage,
//! 3 refused, 4 failed).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use atelier_layout::Declaration;
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::verbs::{self, Exit, Renderer, VerbError};

/// Renders and applies a whole Atelier instance from one declaration.
#[derive(Debug, Parser)]
#[command(name = "atelier-provision", version)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub verb: Verb,
    /// The instance declaration (`instance.json`).
    #[arg(long, global = true)]
    pub declaration: Option<PathBuf>,
    /// Print JSON instead of lines.
    #[arg(long, global = true)]
    pub json: bool,
    /// The host root every host path is read and written below (tests only).
    #[arg(long, global = true, hide = true, default_value = "/")]
    pub root: PathBuf,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Write every rendered artifact below DIR for review.
    Render {
        /// Where to write.
        dir: PathBuf,
    },
    /// Print the actions `apply` would take.
    Plan,
    /// Make the host match the declaration.
    Apply,
    /// Report drift without writing; exit 1 on drift.
    Check,
    /// Prove every site's served links resolve to a release holding bytes.
    Verify,
    /// Decommission: unlink what is stamped ours, archive marked trees, lock identities.
    Remove,
}

/// Runs the command line `args` (program name first), printing to `out` and `err`.
pub fn run(
    args: impl IntoIterator<Item = OsString>,
    render: Renderer<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = if usage {
                write!(err, "{e}")
            } else {
                write!(out, "{e}")
            };
            return if usage { Exit::Usage } else { Exit::Ok };
        }
    };
    let mutates = matches!(cli.verb, Verb::Apply | Verb::Remove);
    if mutates && cli.root != Path::new("/") {
        // Their commands (useradd, systemctl) act on the real host whatever the root.
        let _ = writeln!(err, "atelier-provision: --root is for read-only verbs");
        return Exit::Usage;
    }
    let Some(path) = cli.declaration.clone() else {
        let _ = writeln!(err, "atelier-provision: --declaration PATH is required");
        return Exit::Usage;
    };
    let (decl, bytes) = match load(&path) {
        Ok(loaded) => loaded,
        Err(message) => {
            let _ = writeln!(err, "atelier-provision: {message}");
            return Exit::Refused;
        }
    };
    // Everything is printed only after the secret guard has read it.
    let mut buffer = Vec::new();
    let result = execute(&cli, &decl, &bytes, render, &mut buffer);
    let text = String::from_utf8_lossy(&buffer);
    if let Some(line) = text.lines().position(looks_like_a_secret) {
        let _ = writeln!(
            err,
            "atelier-provision: output line {} looks like it carries a credential; nothing printed",
            line + 1
        );
        return Exit::Failed;
    }
    let _ = out.write_all(&buffer);
    match result {
        Ok(exit) => exit,
        Err(e) => {
            if cli.json {
                let refusals = match &e {
                    VerbError::Refused(p) => serde_json::to_value(&p.refusals).unwrap_or_default(),
                    VerbError::Failed(_) => json!([]),
                };
                let _ = writeln!(
                    out,
                    "{}",
                    json!({ "exit": e.exit(), "error": e.to_string(), "refusals": refusals })
                );
            }
            let _ = writeln!(err, "atelier-provision: {e}");
            e.exit()
        }
    }
}

fn load(path: &Path) -> Result<(Declaration, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let decl = Declaration::parse(text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((decl, bytes))
}

fn execute(
    cli: &Cli,
    decl: &Declaration,
    bytes: &[u8],
    render: Renderer<'_>,
    out: &mut dyn Write,
) -> Result<Exit, VerbError> {
    let root = cli.root.as_path();
    let io = |e: std::io::Error| VerbError::Failed(format!("writing output: {e}"));
    match &cli.verb {
        Verb::Render { dir } => {
            let written = verbs::render_verb(decl, root, dir, render)?;
            if cli.json {
                writeln!(out, "{}", json!({ "verb": "render", "written": written })).map_err(io)?;
            } else {
                for path in &written {
                    writeln!(out, "{}", path.display()).map_err(io)?;
                }
            }
            Ok(Exit::Ok)
        }
        Verb::Plan => {
            let actions = verbs::plan_verb(decl, Some(bytes), root, render)?;
            if cli.json {
                writeln!(out, "{}", json!({ "verb": "plan", "actions": actions })).map_err(io)?;
            } else {
                writeln!(out, "{} actions", actions.len()).map_err(io)?;
                for action in &actions {
                    writeln!(out, "{action}").map_err(io)?;
                }
            }
            Ok(Exit::Ok)
        }
        Verb::Check => {
            let (report, exit) = verbs::check_verb(decl, Some(bytes), root, render)?;
            if cli.json {
                writeln!(
                    out,
                    "{}",
                    json!({ "verb": "check", "exit": exit, "drift": report.items })
                )
                .map_err(io)?;
            } else {
                writeln!(out, "{} drifted", report.items.len()).map_err(io)?;
                for item in &report.items {
                    writeln!(out, "{:<12} {}", item.class, item.subject).map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Verify => {
            let (proofs, exit) = verbs::verify_verb(decl, root);
            if cli.json {
                writeln!(
                    out,
                    "{}",
                    json!({ "verb": "verify", "exit": exit, "surfaces": proofs })
                )
                .map_err(io)?;
            } else {
                for p in &proofs {
                    let state = match (&p.problem, &p.release) {
                        (Some(problem), _) => format!("FAILED {problem}"),
                        (None, Some(release)) => format!("serving {release}"),
                        (None, None) => "unpublished".to_owned(),
                    };
                    writeln!(out, "{} {} {state}", p.slug, p.surface.dir_name()).map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Remove => {
            let (removed, exit) = verbs::remove_verb(decl, root, render)?;
            if cli.json {
                writeln!(out, "{}", json!({ "verb": "remove", "exit": exit, "actions": removed.actions, "outcomes": removed.outcomes }))
                    .map_err(io)?;
            } else {
                for o in &removed.outcomes {
                    let status = serde_json::to_value(o.status).unwrap_or_default();
                    let status = status.as_str().unwrap_or("?");
                    match &o.error {
                        Some(e) => writeln!(out, "{status:<10} {} -- {e}", o.action),
                        None => writeln!(out, "{status:<10} {}", o.action),
                    }
                    .map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Apply => {
            let (applied, exit) = verbs::apply_verb(decl, Some(bytes), root, render)?;
            if cli.json {
                writeln!(
                    out,
                    "{}",
                    json!({ "verb": "apply", "exit": exit, "actions": applied.actions, "outcomes": applied.report.outcomes })
                )
                .map_err(io)?;
            } else {
                writeln!(out, "{} actions", applied.actions.len()).map_err(io)?;
                if applied.report.outcomes.is_empty() {
                    for action in &applied.actions {
                        writeln!(out, "{:<10} {action}", "awaiting").map_err(io)?;
                    }
                }
                for o in &applied.report.outcomes {
                    let status = serde_json::to_value(o.status).unwrap_or_default();
                    let status = status.as_str().unwrap_or("?");
                    match &o.error {
                        Some(e) => writeln!(out, "{status:<10} {} -- {e}", o.action),
                        None => writeln!(out, "{status:<10} {}", o.action),
                    }
                    .map_err(io)?;
                }
            }
            Ok(exit)
        }
    }
}

/// Whether `line` holds `NAME=value` (or `"NAME":"value"`) where NAME names a key, token,
/// secret or password and the value could be one: 8 or more characters, no whitespace, not a
/// path. Provisioning never prints a credential; this catches a mistake before it is printed.
pub fn looks_like_a_secret(line: &str) -> bool {
    for (i, _) in line.match_indices(['=', ':']) {
        let name: String = line[..i]
            .trim_end_matches('"')
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let upper = name.to_ascii_uppercase();
        if !["KEY", "TOKEN", "SECRET", "PASSWORD"]
            .iter()
            .any(|w| upper.contains(w))
        {
            continue;
        }
        let rest = &line[i + 1..];
        let rest = rest.trim_start_matches('"');
        let value: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '"' && *c != ',')
            .collect();
        if value.len() >= 8 && !value.starts_with('/') {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::looks_like_a_secret;

    #[test]
    fn the_secret_guard_catches_values_not_names_or_paths() {
        for line in [
            "SERVICE_TOKEN=abcdefgh12345",
            r#"{"ANTHROPIC_API_KEY":"sk-ant-0123456789"}"#,
            r#"env PASSWORD="hunter2hunter2""#,
        ] {
            assert!(looks_like_a_secret(line), "{line}");
        }
        for line in [
            "secret   create /etc/atelier/example/credentials/SERVICE_TOKEN root:root 0600",
            "SERVICE_TOKEN_FILE=/etc/atelier/example/credentials/SERVICE_TOKEN",
            "API_KEY=short",
            "awaiting operator file /etc/atelier/example/credentials/ANTHROPIC_API_KEY root:root 0600",
            r#"{"path":"/etc/atelier/example/credentials/PUBLICATION_API_KEY","action":"file"}"#,
        ] {
            assert!(!looks_like_a_secret(line), "{line}");
        }
    }
}
