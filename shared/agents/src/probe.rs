//! Probing a driver's binary: what to ask it (`--version`, its help) and how to judge the
//! answers. A binary whose version is not one the argv was written for, or whose help lacks a
//! flag the argv passes, is refused before any turn runs rather than failing mid-turn.

use std::path::Path;

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
    /// The help lists no option line for flags the argv passes.
    #[error("the {driver} CLI lacks {}", .missing.join(", "))]
    MissingFlags {
        /// The driver.
        driver: DriverId,
        /// The flags not found.
        missing: Vec<&'static str>,
    },
    /// The driver runs no turn.
    #[error("the {driver} driver does not run turns")]
    Unsupported {
        /// The driver.
        driver: DriverId,
    },
}

/// Every flag Claude Code's turn argv passes that its help must list (`--max-turns` is
/// missing from some versions' help while still accepted, so it is not asked about).
const CLAUDE_FLAGS: [&str; 12] = [
    "--print",
    "--output-format",
    "--verbose",
    "--permission-mode",
    "--setting-sources",
    "--settings",
    "--strict-mcp-config",
    "--mcp-config",
    "--allowedTools",
    "--disallowedTools",
    "--append-system-prompt",
    "--resume",
];

/// Every flag opencode's `run` argv passes.
const OPENCODE_FLAGS: [&str; 3] = ["--pure", "--format", "--session"];

/// An option line is indented at most this much; deeper lines are prose.
const MAX_OPTION_INDENT: usize = 4;

/// The argv asking `bin` its version.
pub fn version_argv(_driver: DriverId, bin: &Path) -> Vec<String> {
    vec![bin.to_string_lossy().into_owned(), "--version".to_owned()]
}

/// The argv asking `bin` for the help that documents the turn's flags.
pub fn help_argv(driver: DriverId, bin: &Path) -> Vec<String> {
    let bin = bin.to_string_lossy().into_owned();
    match driver {
        DriverId::Opencode => vec![bin, "run".to_owned(), "--help".to_owned()],
        DriverId::ClaudeCode | DriverId::Pi => vec![bin, "--help".to_owned()],
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
    let flags: &[&'static str] = match driver {
        DriverId::ClaudeCode => &CLAUDE_FLAGS,
        DriverId::Opencode => &OPENCODE_FLAGS,
        DriverId::Pi => return Err(ProbeRefusal::Unsupported { driver }),
    };
    let listed: Vec<&str> = help
        .lines()
        .filter_map(|line| {
            let indent = line.len() - line.trim_start().len();
            let line = line.trim_start();
            (indent <= MAX_OPTION_INDENT && line.starts_with('-')).then_some(line)
        })
        .flat_map(option_names)
        .collect();
    let missing: Vec<&'static str> = flags
        .iter()
        .copied()
        .filter(|flag| !listed.contains(flag))
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

    const GOOD_HELP: &str = "Usage: claude [options] [prompt]\n\nOptions:\n  -p, --print                 Print response and exit\n  --output-format <format>    Output format\n  --verbose                   Verbose\n  --permission-mode <mode>    Mode\n  --setting-sources <s>       Sources\n  --settings <file-or-json>   Settings\n  --strict-mcp-config         Only --mcp-config\n  --mcp-config <configs...>   MCP\n  --allowedTools, --allowed-tools <tools...>  Allowed\n  --disallowedTools <tools...>  Disallowed\n  --append-system-prompt <prompt>  Append\n  -r, --resume [sessionId]    Resume\n";

    #[test]
    fn versions() {
        let cases: [(&str, DriverId, Result<&str, ()>); 8] = [
            ("good claude", DriverId::ClaudeCode, Ok("2.1.4")),
            ("claude v1", DriverId::ClaudeCode, Ok("1.0.3")),
            ("claude major 3", DriverId::ClaudeCode, Err(())),
            ("garbage", DriverId::ClaudeCode, Err(())),
            ("two parts only", DriverId::ClaudeCode, Err(())),
            ("opencode any major", DriverId::Opencode, Ok("0.18.32")),
            ("prerelease", DriverId::ClaudeCode, Ok("2.0.0-beta.1")),
            ("v prefix", DriverId::Opencode, Ok("1.2.3")),
        ];
        let outputs = [
            "2.1.4 (Claude Code)\n",
            "1.0.3 (Claude Code)",
            "3.0.0 (Claude Code)",
            "command not found",
            "2.1 (Claude Code)",
            "opencode 0.18.32",
            "2.0.0-beta.1",
            "v1.2.3",
        ];
        for ((name, driver, want), output) in cases.into_iter().zip(outputs) {
            let got = judge_version(driver, output);
            assert_eq!(got.as_deref().map_err(|_| ()), want, "{name}");
        }
    }

    #[test]
    fn helps() {
        assert_eq!(judge_help(DriverId::ClaudeCode, GOOD_HELP), Ok(()));
        let no_strict = GOOD_HELP.replace("  --strict-mcp-config         Only --mcp-config\n", "");
        assert_eq!(
            judge_help(DriverId::ClaudeCode, &no_strict),
            Err(ProbeRefusal::MissingFlags {
                driver: DriverId::ClaudeCode,
                missing: vec!["--strict-mcp-config"]
            })
        );
        // A flag only mentioned in prose, or on a deeply indented line, does not count.
        let prose = no_strict
            + "\nUse --strict-mcp-config to ignore others.\n        --strict-mcp-config   (deep)\n";
        assert!(judge_help(DriverId::ClaudeCode, &prose).is_err());
        assert!(judge_help(DriverId::Pi, GOOD_HELP).is_err());
        let opencode = "opencode run [message..]\n\nOptions:\n  --pure     no plugins\n  --format   json\n  -s, --session  session id\n";
        assert_eq!(judge_help(DriverId::Opencode, opencode), Ok(()));
        assert!(judge_help(DriverId::Opencode, "--pure\n").is_err());
        assert_eq!(help_argv(DriverId::Opencode, Path::new("/b"))[1], "run");
    }
}
