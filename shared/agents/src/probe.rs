//! Probing a driver's binary: what to ask it (`--version`, its help) and how to judge the
//! answers. A binary whose version is not one the argv was written for, or whose help lacks a
//! flag the argv passes, is refused before any turn runs rather than failing mid-turn.

use std::collections::BTreeMap;
use std::path::Path;

use crate::plan::turn_flags;
use crate::DriverId;

/// Why a binary is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeRefusal {
    /// `--version` printed no `X.Y.Z` version.
    #[error("the {driver} CLI printed no version")]
    NoVersion {
        /// The driver.
        driver: DriverId,
    },
    /// The version's major is not one this argv was written for.
    #[error("the {driver} CLI is version {version}; supported majors are {supported}")]
    UnsupportedVersion {
        /// The driver.
        driver: DriverId,
        /// What it printed.
        version: String,
        /// What is supported.
        supported: &'static str,
    },
    /// opencode's database holds a console account (or another stored credential): an
    /// account's organisation configuration is fetched and merged after the daemon's on every
    /// start, which no switch closes.
    #[error("the turn's opencode database holds {count} console account(s) or stored credential(s), whose remote configuration opencode would load; log them out (opencode account logout) or remove the database")]
    ConsoleAccount {
        /// Accounts and credentials found.
        count: u64,
    },
    /// A canary planted in `source` surfaced under the turn's restriction: the switches do not
    /// close it for this binary.
    #[error("the {driver} CLI loads {planted_in} even under a turn's switches (its canary surfaced)", driver = DriverId::Opencode)]
    CanarySurfaced {
        /// The source.
        planted_in: crate::canary::Source,
    },
    /// The control did not see the canary in `source`: the probe proves nothing about it, and
    /// a binary that reads its sources elsewhere is not one the switches were written for.
    #[error("the {driver} CLI's probe could not see {planted_in} in its control run, so it proves nothing about it", driver = DriverId::Opencode)]
    CanaryUnseen {
        /// The source.
        planted_in: crate::canary::Source,
    },
    /// The canary probe did not answer (asked again next time).
    #[error("the canary probe did not finish: {0}")]
    CanaryUnproved(String),
    /// opencode's database could not be read, so it cannot be proved free of an account.
    #[error("the turn's opencode database could not be read ({0}), so it cannot be proved free of a console account")]
    UnreadableDatabase(String),
    /// The help lists no option line for flags the argv passes.
    #[error("the {driver} CLI lacks {}", .missing.join(", "))]
    MissingFlags {
        /// The driver.
        driver: DriverId,
        /// The flags not found.
        missing: Vec<String>,
    },
}

impl ProbeRefusal {
    /// The stable machine reason: every refusal of a binary is the contract's
    /// `confinement.agent_cli_unsupported` (503).
    pub fn reason(&self) -> &'static str {
        "confinement.agent_cli_unsupported"
    }
}

/// The one flag Claude Code's help may leave out: some versions accept `--max-turns` without
/// listing it.
const UNLISTED_CLAUDE_FLAG: &str = "--max-turns";

/// How deep an option line may be indented; deeper lines are prose. Claude Code's help
/// (commander) indents options by 2; opencode's (yargs) and atelier-agent's (clap) align a
/// long-only option under the long name of one with a short alias, at 6.
fn max_option_indent(driver: DriverId) -> usize {
    match driver {
        DriverId::Opencode | DriverId::Atelier => 6,
        DriverId::ClaudeCode | DriverId::Pi => 4,
    }
}

/// What a probe question's environment adds to `PATH`, `state_dir` being the CLI's writable
/// state as the child sees it: opencode gets a turn's restriction and its database; pi opens its session store
/// even to print its help, so it gets a place of its own there (never what a turn loads), and
/// its quiet switches. Claude Code and atelier-agent answer with nothing more.
pub fn probe_env(driver: DriverId, state_dir: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if driver == DriverId::Opencode {
        // Every question runs as restricted as a turn: opencode loads a project's plugins,
        // and runs them, for any command it is asked.
        env.extend(crate::plan::opencode_restriction());
        env.insert(
            "OPENCODE_DB".to_owned(),
            crate::plan::opencode_db(state_dir)
                .to_string_lossy()
                .into_owned(),
        );
    }
    if driver == DriverId::Pi {
        let dir = state_dir.join("pi-probe");
        env.insert(
            "PI_CODING_AGENT_SESSION_DIR".to_owned(),
            dir.join("sessions").to_string_lossy().into_owned(),
        );
        env.insert(
            "PI_CODING_AGENT_DIR".to_owned(),
            dir.to_string_lossy().into_owned(),
        );
        env.extend(crate::plan::pi_quiet_env());
    }
    env
}

/// The query counting what in opencode's database would load a configuration the daemon did
/// not state: console accounts (current and legacy tables) and stored credentials.
const OPENCODE_ACCOUNTS_QUERY: &str = "select (select count(*) from account) + (select count(*) from control_account) + (select count(*) from credential) as n";

/// The argv asking opencode's database, at the turn's `OPENCODE_DB`, what it holds; asked
/// before every opencode turn (the database is the turn's own state and may change).
pub fn opencode_accounts_argv(bin: &Path) -> Vec<String> {
    [
        &*bin.to_string_lossy(),
        "db",
        "--pure",
        "--format",
        "json",
        OPENCODE_ACCOUNTS_QUERY,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Accepts the answer to [`opencode_accounts_argv`] when it says there is nothing.
pub fn judge_opencode_accounts(stdout: &str) -> Result<(), ProbeRefusal> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(stdout.trim())
        .map_err(|e| ProbeRefusal::UnreadableDatabase(format!("its answer is not JSON: {e}")))?;
    let count = match rows.as_slice() {
        [row] => row.get("n").and_then(serde_json::Value::as_u64),
        _ => None,
    }
    .ok_or_else(|| ProbeRefusal::UnreadableDatabase("its answer is not one count".to_owned()))?;
    if count == 0 {
        Ok(())
    } else {
        Err(ProbeRefusal::ConsoleAccount { count })
    }
}

/// The argv asking `bin` its version.
pub fn version_argv(_driver: DriverId, bin: &Path) -> Vec<String> {
    vec![bin.to_string_lossy().into_owned(), "--version".to_owned()]
}

/// The argv asking `bin` for the help that documents the turn's flags.
pub fn help_argv(driver: DriverId, bin: &Path) -> Vec<String> {
    let bin = bin.to_string_lossy().into_owned();
    match driver {
        DriverId::Opencode => vec![bin, "run".to_owned(), "--help".to_owned()],
        DriverId::ClaudeCode | DriverId::Pi | DriverId::Atelier => vec![bin, "--help".to_owned()],
    }
}

/// The version `--version` printed, if `driver` supports it.
pub fn judge_version(driver: DriverId, output: &str) -> Result<String, ProbeRefusal> {
    let version = output
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .map(|word| word.trim_start_matches('v'))
        .find(|word| is_semver(word))
        .ok_or(ProbeRefusal::NoVersion { driver })?
        .to_owned();
    let major: u64 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(u64::MAX);
    match driver {
        DriverId::ClaudeCode if !(1..=2).contains(&major) => {
            Err(ProbeRefusal::UnsupportedVersion {
                driver,
                version,
                supported: "1 and 2",
            })
        }
        _ => Ok(version),
    }
}

fn is_semver(word: &str) -> bool {
    let core = word.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Accepts `help` when it lists every flag `driver`'s argv passes on an option line.
pub fn judge_help(driver: DriverId, help: &str) -> Result<(), ProbeRefusal> {
    let max_indent = max_option_indent(driver);
    let listed: Vec<&str> = help
        .lines()
        .filter_map(|line| {
            let line = line.trim_end_matches('\r');
            let text = line.trim_start_matches(' ');
            let indent = line.len() - text.len();
            (indent <= max_indent && text.starts_with('-')).then_some(text)
        })
        .flat_map(option_names)
        .collect();
    let missing: Vec<String> = turn_flags(driver)
        .into_iter()
        .filter(|flag| flag != UNLISTED_CLAUDE_FLAG && !listed.contains(&flag.as_str()))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ProbeRefusal::MissingFlags { driver, missing })
    }
}

/// The option names an option line declares: `-p, --print`, `--format <fmt>`, `--x=<y>`.
fn option_names(line: &str) -> impl Iterator<Item = &str> {
    line.split([' ', ',', '\t'])
        .map_while(|word| (word.is_empty() || word.starts_with('-')).then_some(word))
        .filter(|word| !word.is_empty())
        .map(|word| word.split(['=', '[', '<']).next().unwrap_or(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pi 0.73.1's help, as it prints it.
    const PI_HELP: &str = include_str!("../tests/fixtures/pi/help.txt");

    /// atelier-agent's `--help`, as it prints it (clap's long help).
    const ATELIER_HELP: &str = include_str!("../tests/fixtures/atelier/help.txt");

    /// Claude Code 2.x's help, abridged to the shape commander prints.
    const CLAUDE_HELP: &str = "\
Usage: claude [options] [command] [prompt]

Claude Code - starts an interactive session by default, use -p/--print for
non-interactive output

Arguments:
  prompt                                            Your prompt

Options:
  -d, --debug [filter]                              Enable debug mode
  --verbose                                         Override verbose mode setting from config
  -p, --print                                       Print response and exit (useful for pipes)
  --output-format <format>                          Output format (only works with --print)
  --allowedTools, --allowed-tools <tools...>        Comma or space-separated list of tool names to allow
  --disallowedTools, --disallowed-tools <tools...>  Comma or space-separated list of tool names to deny
  --mcp-config <configs...>                         Load MCP servers from JSON files or strings
  --append-system-prompt <prompt>                   Append a system prompt to the default system prompt
  --permission-mode <mode>                          Permission mode to use for the session
  -r, --resume [sessionId]                          Resume a conversation
  --settings <file-or-json>                         Path to a settings JSON file or a JSON string
  --setting-sources <sources>                       Comma-separated list of setting sources to load
  --strict-mcp-config                               Only use MCP servers from --mcp-config
  --disable-slash-commands                          Disable all skills and commands
  --tools <tools...>                                Built-in tools to make available
  -h, --help                                        Display help for command
";

    /// opencode's `run --help`, abridged to the shape yargs prints.
    const OPENCODE_HELP: &str = "\
opencode run [message..]

run opencode with a message

Positionals:
  message  message to send                                           [array] [default: []]

Options:
  -h, --help        show help                                                    [boolean]
      --pure        run without external plugins                                 [boolean]
  -s, --session     session id to continue                                        [string]
      --format      format: default (formatted) or json (raw JSON events)
                                          [string] [choices: \"default\", \"json\"] [default: \"default\"]
";

    fn without(help: &str, line_starting: &str) -> String {
        help.lines()
            .filter(|l| !l.trim_start().starts_with(line_starting))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn version_table() {
        type Case = (
            &'static str,
            DriverId,
            &'static str,
            Result<&'static str, &'static str>,
        );
        let cases: [Case; 16] = [
            (
                "good semver",
                DriverId::ClaudeCode,
                "2.1.4 (Claude Code)\n",
                Ok("2.1.4"),
            ),
            (
                "major 1",
                DriverId::ClaudeCode,
                "1.0.128 (Claude Code)",
                Ok("1.0.128"),
            ),
            (
                "major 3",
                DriverId::ClaudeCode,
                "3.0.0 (Claude Code)",
                Err("unsupported"),
            ),
            (
                "major 0",
                DriverId::ClaudeCode,
                "0.2.9 (Claude Code)",
                Err("unsupported"),
            ),
            (
                "garbage",
                DriverId::ClaudeCode,
                "command not found",
                Err("none"),
            ),
            ("empty", DriverId::ClaudeCode, "", Err("none")),
            (
                "two parts only",
                DriverId::ClaudeCode,
                "2.1 (Claude Code)",
                Err("none"),
            ),
            ("four parts", DriverId::ClaudeCode, "2.1.4.5", Err("none")),
            (
                "letters in a part",
                DriverId::ClaudeCode,
                "2.x.4",
                Err("none"),
            ),
            (
                "prerelease",
                DriverId::ClaudeCode,
                "2.0.0-beta.1",
                Ok("2.0.0-beta.1"),
            ),
            (
                "after a banner line",
                DriverId::ClaudeCode,
                "Claude Code\n2.0.5",
                Ok("2.0.5"),
            ),
            (
                "opencode any major",
                DriverId::Opencode,
                "0.18.32\n",
                Ok("0.18.32"),
            ),
            ("v prefix", DriverId::Opencode, "v1.2.3", Ok("1.2.3")),
            ("pi semver", DriverId::Pi, "pi 0.4.1", Ok("0.4.1")),
            (
                "atelier-agent's clap version",
                DriverId::Atelier,
                "atelier-agent 0.1.0\n",
                Ok("0.1.0"),
            ),
            (
                "atelier-agent without one",
                DriverId::Atelier,
                "atelier-agent\n",
                Err("none"),
            ),
        ];
        for (name, driver, output, want) in cases {
            let got = judge_version(driver, output);
            let got = match &got {
                Ok(version) => Ok(version.as_str()),
                Err(ProbeRefusal::NoVersion { .. }) => Err("none"),
                Err(ProbeRefusal::UnsupportedVersion { .. }) => Err("unsupported"),
                Err(other) => panic!("{name}: {other:?}"),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn help_table() {
        let missing = |flags: &[&str]| -> Result<(), Vec<String>> {
            Err(flags.iter().map(|f| (*f).to_owned()).collect())
        };
        let prose = without(CLAUDE_HELP, "--strict-mcp-config")
            + "\nUse --strict-mcp-config to ignore every other MCP configuration.\n";
        let deep = without(CLAUDE_HELP, "--strict-mcp-config")
            + "        --strict-mcp-config   (an example, indented as prose)\n";
        let kebab_only = CLAUDE_HELP.replace("--allowedTools, ", "");
        let crlf = CLAUDE_HELP.replace('\n', "\r\n");
        let equals = CLAUDE_HELP.replace("--settings <file-or-json>", "--settings=<json>");
        let tab = without(CLAUDE_HELP, "--verbose") + "\t--verbose   tab-indented\n";
        let opencode_deep = OPENCODE_HELP.replace("      --pure", "        --pure");
        type Case = (&'static str, DriverId, String, Result<(), Vec<String>>);
        let cases: Vec<Case> = vec![
            (
                "claude's help",
                DriverId::ClaudeCode,
                CLAUDE_HELP.to_owned(),
                Ok(()),
            ),
            (
                "lacks --strict-mcp-config",
                DriverId::ClaudeCode,
                without(CLAUDE_HELP, "--strict-mcp-config"),
                missing(&["--strict-mcp-config"]),
            ),
            (
                "flag only in prose",
                DriverId::ClaudeCode,
                prose,
                missing(&["--strict-mcp-config"]),
            ),
            (
                "flag on a prose-deep line",
                DriverId::ClaudeCode,
                deep,
                missing(&["--strict-mcp-config"]),
            ),
            (
                "only the kebab alias",
                DriverId::ClaudeCode,
                kebab_only,
                missing(&["--allowedTools"]),
            ),
            (
                "lacks --tools (offers every built-in tool)",
                DriverId::ClaudeCode,
                without(CLAUDE_HELP, "--tools"),
                missing(&["--tools"]),
            ),
            (
                "lacks --disable-slash-commands (a prompt could run a command)",
                DriverId::ClaudeCode,
                without(CLAUDE_HELP, "--disable-slash-commands"),
                missing(&["--disable-slash-commands"]),
            ),
            (
                "lacks -p and --resume",
                DriverId::ClaudeCode,
                without(&without(CLAUDE_HELP, "-p, --print"), "-r, --resume"),
                missing(&["-p", "--resume"]),
            ),
            (
                "no --max-turns is fine",
                DriverId::ClaudeCode,
                CLAUDE_HELP.to_owned(),
                Ok(()),
            ),
            ("crlf lines", DriverId::ClaudeCode, crlf, Ok(())),
            ("--flag=<value> form", DriverId::ClaudeCode, equals, Ok(())),
            (
                "a tab is not an indent",
                DriverId::ClaudeCode,
                tab,
                missing(&["--verbose"]),
            ),
            (
                "empty help",
                DriverId::ClaudeCode,
                String::new(),
                Err(turn_flags(DriverId::ClaudeCode)
                    .into_iter()
                    .filter(|f| f != "--max-turns")
                    .collect()),
            ),
            (
                "opencode's yargs help",
                DriverId::Opencode,
                OPENCODE_HELP.to_owned(),
                Ok(()),
            ),
            (
                "opencode lacks --pure",
                DriverId::Opencode,
                without(OPENCODE_HELP, "--pure"),
                missing(&["--pure"]),
            ),
            (
                "opencode prose-deep --pure",
                DriverId::Opencode,
                opencode_deep,
                missing(&["--pure"]),
            ),
            (
                "claude's help is not opencode's",
                DriverId::Opencode,
                CLAUDE_HELP.to_owned(),
                missing(&["--pure", "--format", "--session"]),
            ),
        ];
        for (name, driver, help, want) in cases {
            let got = judge_help(driver, &help).map_err(|refusal| match refusal {
                ProbeRefusal::MissingFlags { missing, .. } => missing,
                other => panic!("{name}: {other:?}"),
            });
            assert_eq!(got, want, "{name}");
        }
        // atelier-agent's help lists every flag its argv passes, long-only options at clap's
        // indent of 6; the possible values below an option are prose, deeper still.
        assert_eq!(judge_help(DriverId::Atelier, ATELIER_HELP), Ok(()));
        assert_eq!(
            judge_help(DriverId::Atelier, &without(ATELIER_HELP, "--state-dir")),
            Err(ProbeRefusal::MissingFlags {
                driver: DriverId::Atelier,
                missing: vec!["--state-dir".into()],
            })
        );
        assert_eq!(
            judge_help(
                DriverId::Atelier,
                &ATELIER_HELP.replace("      --resume", "          --resume")
            ),
            Err(ProbeRefusal::MissingFlags {
                driver: DriverId::Atelier,
                missing: vec!["--resume".into()],
            }),
            "an option indented as prose is not listed"
        );
        assert!(matches!(
            judge_help(DriverId::Atelier, PI_HELP),
            Err(ProbeRefusal::MissingFlags { .. })
        ));
        // pi's help (0.73) lists every flag its argv passes; Claude Code's lacks most of them.
        assert_eq!(judge_help(DriverId::Pi, PI_HELP), Ok(()));
        assert!(matches!(
            judge_help(DriverId::Pi, CLAUDE_HELP),
            Err(ProbeRefusal::MissingFlags { .. })
        ));
    }

    #[test]
    fn probe_questions_run_in_each_drivers_turn_restriction() {
        let state = Path::new("/h/state");
        assert!(probe_env(DriverId::ClaudeCode, state).is_empty());
        let opencode = probe_env(DriverId::Opencode, state);
        assert_eq!(opencode["OPENCODE_DB"], "/h/state/opencode.db");
        for switch in [
            "OPENCODE_DISABLE_PROJECT_CONFIG",
            "OPENCODE_PURE",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        ] {
            assert_eq!(opencode[switch], "true", "{switch}");
        }
        assert_eq!(opencode["OPENCODE_AUTH_CONTENT"], "{}");
        let pi = probe_env(DriverId::Pi, state);
        assert_eq!(pi["PI_CODING_AGENT_DIR"], "/h/state/pi-probe");
        assert_eq!(
            pi["PI_CODING_AGENT_SESSION_DIR"],
            "/h/state/pi-probe/sessions"
        );
        assert_eq!(pi["PI_OFFLINE"], "1");
        assert!(
            probe_env(DriverId::Atelier, state).is_empty(),
            "atelier-agent reads nothing a probe would need to restrict"
        );
    }

    #[test]
    fn opencode_accounts_table() {
        for (name, answer, want) in [
            ("none", "[{\"n\": 0}]", Ok(())),
            (
                "an account",
                "[\n  {\n    \"n\": 2\n  }\n]\n",
                Err(ProbeRefusal::ConsoleAccount { count: 2 }),
            ),
            (
                "not JSON (a database that would not open)",
                "Error: database is locked",
                Err(ProbeRefusal::UnreadableDatabase(String::new())),
            ),
            (
                "two rows",
                "[{\"n\": 0}, {\"n\": 0}]",
                Err(ProbeRefusal::UnreadableDatabase(String::new())),
            ),
        ] {
            let got = judge_opencode_accounts(answer).map_err(|refusal| match refusal {
                ProbeRefusal::UnreadableDatabase(_) => {
                    ProbeRefusal::UnreadableDatabase(String::new())
                }
                other => other,
            });
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(
            opencode_accounts_argv(Path::new("/b/opencode"))[..4],
            ["/b/opencode", "db", "--pure", "--format"]
        );
    }

    #[test]
    fn the_probe_asks_about_what_the_argv_passes() {
        let claude = turn_flags(DriverId::ClaudeCode);
        for flag in [
            "-p",
            "--strict-mcp-config",
            "--append-system-prompt",
            "--resume",
            "--max-turns",
        ] {
            assert!(claude.iter().any(|f| f == flag), "{flag} in {claude:?}");
        }
        assert_eq!(
            turn_flags(DriverId::Opencode),
            ["--pure", "--format", "--session"]
        );
        let pi = turn_flags(DriverId::Pi);
        for flag in ["--mode", "--no-extensions", "--system-prompt", "--session"] {
            assert!(pi.iter().any(|f| f == flag), "{flag} in {pi:?}");
        }
        assert!(
            pi.iter().all(|f| f.starts_with("--")),
            "values are not flags: {pi:?}"
        );
        for (driver, bin, help) in [
            (
                DriverId::ClaudeCode,
                "/opt/claude/bin/claude",
                &["--help"][..],
            ),
            (DriverId::Opencode, "/b/opencode", &["run", "--help"][..]),
            (DriverId::Atelier, "/usr/bin/atelier-agent", &["--help"][..]),
        ] {
            assert_eq!(
                version_argv(driver, Path::new(bin)),
                [bin, "--version"],
                "{driver}"
            );
            let mut want = vec![bin];
            want.extend(help);
            assert_eq!(help_argv(driver, Path::new(bin)), want, "{driver}");
        }
        assert_eq!(
            turn_flags(DriverId::Atelier),
            [
                "--provider",
                "--model",
                "--base-url",
                "--max-turns",
                "--state-dir",
                "--mcp-url",
                "--mcp-name",
                "--resume"
            ]
        );
    }
}
