//! opencode's canary probe: proof, per binary, that the switches a turn states close the
//! configuration sources opencode would otherwise read from a workspace or a configuration
//! directory.
//!
//! The probe is one shell script run as the site's identity in the turn door, in a scratch
//! tree under the CLI's state directory: it plants one canary per source, each with its own
//! random token, then asks `opencode debug config` and `opencode debug skill` twice — as a
//! CONTROL without the switches that close the sources (where every canary must surface: a
//! probe that cannot see a source proves nothing about it), and in the turn's restriction
//! (where none may). The script's output is the two answers under fixed markers; [`judge`]
//! reads it. A project's `.opencode/` is not among the sources: no switch closes it (its
//! plugins run whatever opencode is told), so the turn unit masks it instead.
//!
//! atelier-agent has no canary probe: it reads no configuration source a switch would have to
//! close (no settings file, no project or home directory it searches, no plugins or skills),
//! only its argv, its key variable, the proxy and CA variables, the workspace's `AGENTS.md` as
//! the brief and its own conversations under `--state-dir`; a canary would have nowhere to be
//! planted. Its help is still judged like every driver's.

use std::fmt;
use std::path::Path;

use crate::probe::ProbeRefusal;

/// A configuration source the probe plants a canary in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The workspace's `opencode.json`.
    ProjectConfig,
    /// The global configuration directory's `opencode.json` (for the turn, the turn HOME's
    /// root-owned, empty `.config/opencode/`).
    GlobalConfig,
    /// A skill in the workspace's `.claude/skills/`.
    ClaudeSkills,
    /// A skill in the workspace's `.agents/skills/`.
    AgentsSkills,
}

impl Source {
    /// Every source, in the order the script takes their tokens.
    pub const ALL: [Source; 4] = [
        Source::ProjectConfig,
        Source::GlobalConfig,
        Source::ClaudeSkills,
        Source::AgentsSkills,
    ];

    /// What the source is, for a refusal and the log.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::ProjectConfig => "the workspace's opencode.json",
            Source::GlobalConfig => "the global configuration directory",
            Source::ClaudeSkills => "the workspace's .claude/skills",
            Source::AgentsSkills => "the workspace's .agents/skills",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The marker before the control's answers.
const CONTROL_MARKER: &str = "== atelier canary probe: control";
/// The marker before the turn restriction's answers.
const TURN_MARKER: &str = "== atelier canary probe: turn";

/// The script: `$1` the binary, `$2` the scratch directory (made and removed by the script),
/// `$3`..`$6` the tokens in [`Source::ALL`]'s order. The control keeps the switches that stop
/// opencode's own traffic and drops those that close sources; it reads its global
/// configuration from the scratch tree.
const SCRIPT: &str = r#"set -u
bin=$1 scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch/ws/.claude/skills/canary-claude" "$scratch/ws/.agents/skills/canary-agents" "$scratch/config/opencode" || exit 90
printf '{"instructions":["%s.md"]}\n' "$3" > "$scratch/ws/opencode.json"
printf '{"instructions":["%s.md"]}\n' "$4" > "$scratch/config/opencode/opencode.json"
printf -- '---\nname: canary-claude\ndescription: %s\n---\ncanary\n' "$5" > "$scratch/ws/.claude/skills/canary-claude/SKILL.md"
printf -- '---\nname: canary-agents\ndescription: %s\n---\ncanary\n' "$6" > "$scratch/ws/.agents/skills/canary-agents/SKILL.md"
cd "$scratch/ws" || exit 90
control() {
  env -u OPENCODE_DISABLE_PROJECT_CONFIG -u OPENCODE_PURE -u OPENCODE_DISABLE_CLAUDE_CODE \
    -u OPENCODE_DISABLE_EXTERNAL_SKILLS -u OPENCODE_CONFIG_CONTENT -u OPENCODE_PERMISSION \
    XDG_CONFIG_HOME="$scratch/config" "$bin" "$@"
}
echo "== atelier canary probe: control"
control debug config; echo "== atelier canary probe: exit $?"
control debug skill; echo "== atelier canary probe: exit $?"
echo "== atelier canary probe: turn"
"$bin" debug config --pure; echo "== atelier canary probe: exit $?"
"$bin" debug skill --pure; echo "== atelier canary probe: exit $?"
cd / && rm -rf "$scratch"
"#;

/// How the script reports a question's exit status; a control question that failed proves
/// nothing (it could not ASK), so the probe is unproved rather than a refusal.
const EXIT_MARKER: &str = "== atelier canary probe: exit ";

/// One run of the probe: a token per source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryProbe {
    tokens: [String; 4],
}

impl CanaryProbe {
    /// A probe whose canaries carry `tokens`, in [`Source::ALL`]'s order: random and distinct,
    /// so nothing but the planted file can make one surface.
    pub fn new(tokens: [String; 4]) -> CanaryProbe {
        CanaryProbe { tokens }
    }

    /// The argv running the probe of `bin` in `scratch` (a directory the probe may make and
    /// remove, inside the CLI's writable state). Its environment is the turn's restriction
    /// ([`crate::probe_env`]).
    pub fn argv(&self, bin: &Path, scratch: &Path) -> Vec<String> {
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            SCRIPT.to_owned(),
            "atelier-canary-probe".to_owned(),
            bin.to_string_lossy().into_owned(),
            scratch.to_string_lossy().into_owned(),
        ];
        argv.extend(self.tokens.iter().cloned());
        argv
    }

    /// Accepts the probe's output (stdout) when the control saw every canary and the turn's
    /// restriction saw none.
    pub fn judge(&self, output: &str) -> Result<(), ProbeRefusal> {
        let unproved = |why: &str| ProbeRefusal::CanaryUnproved(why.to_owned());
        let (_, rest) = output
            .split_once(CONTROL_MARKER)
            .ok_or_else(|| unproved("the control never answered"))?;
        let (control, turn) = rest
            .split_once(TURN_MARKER)
            .ok_or_else(|| unproved("the turn's restriction never answered"))?;
        let failed = |answers: &str| {
            answers
                .lines()
                .filter_map(|line| line.strip_prefix(EXIT_MARKER))
                .any(|code| code.trim() != "0")
        };
        if failed(control) || failed(turn) {
            return Err(unproved("an opencode question failed"));
        }
        for (source, token) in Source::ALL.into_iter().zip(&self.tokens) {
            if !control.contains(token.as_str()) {
                return Err(ProbeRefusal::CanaryUnseen { planted_in: source });
            }
            if turn.contains(token.as_str()) {
                return Err(ProbeRefusal::CanarySurfaced { planted_in: source });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> CanaryProbe {
        CanaryProbe::new([
            "tok1aaaa".into(),
            "tok2bbbb".into(),
            "tok3cccc".into(),
            "tok4dddd".into(),
        ])
    }

    #[test]
    fn judging_table() {
        let control_all = "{\"instructions\":[\"tok1aaaa.md\",\"tok2bbbb.md\"]}\n== atelier canary probe: exit 0\ncanary-claude tok3cccc\ncanary-agents tok4dddd\n== atelier canary probe: exit 0\n";
        let cases: Vec<(&str, String, Result<(), ProbeRefusal>)> = vec![
            (
                "closed",
                format!("{CONTROL_MARKER}\n{control_all}{TURN_MARKER}\n{{}}\n"),
                Ok(()),
            ),
            (
                "the project's configuration surfaces in the turn",
                format!("{CONTROL_MARKER}\n{control_all}{TURN_MARKER}\n[\"tok1aaaa.md\"]\n"),
                Err(ProbeRefusal::CanarySurfaced {
                    planted_in: Source::ProjectConfig,
                }),
            ),
            (
                "a skill surfaces in the turn",
                format!("{CONTROL_MARKER}\n{control_all}{TURN_MARKER}\ncanary-agents tok4dddd\n"),
                Err(ProbeRefusal::CanarySurfaced {
                    planted_in: Source::AgentsSkills,
                }),
            ),
            (
                "the control cannot see the global directory",
                format!("{CONTROL_MARKER}\ntok1aaaa tok3cccc tok4dddd\n{TURN_MARKER}\n"),
                Err(ProbeRefusal::CanaryUnseen {
                    planted_in: Source::GlobalConfig,
                }),
            ),
            (
                "a control question failed (it could not ask: unproved, not refused)",
                format!(
                    "{CONTROL_MARKER}\nError: database is locked\n{EXIT_MARKER}1\n{TURN_MARKER}\n"
                ),
                Err(ProbeRefusal::CanaryUnproved(
                    "an opencode question failed".into(),
                )),
            ),
            (
                "no markers (the script never ran)",
                "sh: not found".to_owned(),
                Err(ProbeRefusal::CanaryUnproved(
                    "the control never answered".into(),
                )),
            ),
            (
                "cut off after the control",
                format!("{CONTROL_MARKER}\n{control_all}"),
                Err(ProbeRefusal::CanaryUnproved(
                    "the turn's restriction never answered".into(),
                )),
            ),
        ];
        for (name, output, want) in cases {
            assert_eq!(probe().judge(&output), want, "{name}");
        }
    }

    #[test]
    fn the_argv_carries_the_script_the_binary_the_scratch_and_the_tokens() {
        let argv = probe().argv(Path::new("/opt/opencode"), Path::new("/s/probe"));
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            argv[3..],
            [
                "atelier-canary-probe",
                "/opt/opencode",
                "/s/probe",
                "tok1aaaa",
                "tok2bbbb",
                "tok3cccc",
                "tok4dddd"
            ]
        );
        // The script takes every value as an argument, never inside its text.
        assert!(!argv[2].contains("tok1aaaa") && !argv[2].contains("/s/probe"));
    }
}
