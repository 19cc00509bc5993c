//! The build plan: what sited read and validated from the site manifest, handed to
//! atelier-build as one `--plan` argument, so the program never reads the agent-writable
//! `site.json` itself.

use serde::{Deserialize, Serialize};

/// The flag that carries the plan's JSON on atelier-build's command line.
pub const PLAN_FLAG: &str = "--plan";

/// The install and build steps of one build, and where its output must appear.
///
/// Wire form (the value of `--plan`), every key required:
/// `{"install":["bun","install"],"build":["bun","run","build"],"output":"dist",
/// "install_timeout_ms":300000,"build_timeout_ms":300000,"lifecycle_scripts":false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildPlan {
    /// The install step's program and arguments; empty means the site has no install step.
    pub install: Vec<String>,
    /// The build step's program and arguments; empty means the site has no build step.
    pub build: Vec<String>,
    /// The output directory, relative to the workspace (the manifest's `build.output`).
    pub output: String,
    /// The install step's deadline, in milliseconds (`INSTALL_TIMEOUT_MS`); at least 1.
    pub install_timeout_ms: u64,
    /// The build step's deadline, in milliseconds (`BUILD_TIMEOUT_MS`); at least 1.
    pub build_timeout_ms: u64,
    /// Whether package managers may run npm-style lifecycle scripts (`preinstall`,
    /// `postinstall`, `prepare`, `prebuild`, …). Off unless the manifest names them;
    /// atelier-build decides exactly what "off" adds to each step.
    pub lifecycle_scripts: bool,
}

/// Why a plan was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The `--plan` value is not JSON of the plan's shape (a key missing, unknown or of the
    /// wrong type); the source says which.
    #[error("the build plan is malformed: {0}")]
    Json(#[from] serde_json::Error),
    /// A step's program is an empty string.
    #[error("the {step} step's program is empty")]
    EmptyProgram {
        /// `install` or `build`.
        step: &'static str,
    },
    /// A step's argument holds a NUL byte, which no process can receive.
    #[error("the {step} step's argv[{index}] contains a NUL byte")]
    NulInArgv {
        /// `install` or `build`.
        step: &'static str,
        /// The argument's index.
        index: usize,
    },
    /// The output directory is empty.
    #[error("the output directory is empty")]
    EmptyOutput,
    /// The output directory holds a NUL byte.
    #[error("the output directory contains a NUL byte")]
    NulInOutput,
    /// A deadline of zero would kill the step before it starts.
    #[error("the {step} step's timeout is 0 ms")]
    ZeroTimeout {
        /// `install` or `build`.
        step: &'static str,
    },
}

// === impl BuildPlan ===

impl BuildPlan {
    /// The plan for the manifest's `build` strings: each command split on whitespace into
    /// argv ([`split_command`]), as the contract states, with the given deadlines.
    pub fn from_manifest(
        install: &str,
        build: &str,
        output: &str,
        install_timeout_ms: u64,
        build_timeout_ms: u64,
        lifecycle_scripts: bool,
    ) -> Result<BuildPlan, PlanError> {
        let plan = BuildPlan {
            install: split_command(install),
            build: split_command(build),
            output: output.to_owned(),
            install_timeout_ms,
            build_timeout_ms,
            lifecycle_scripts,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Parses and validates the JSON value of `--plan`.
    pub fn from_json(json: &str) -> Result<BuildPlan, PlanError> {
        let plan: BuildPlan = serde_json::from_str(json)?;
        plan.validate()?;
        Ok(plan)
    }

    /// The plan as the JSON value of `--plan`.
    pub fn to_json(&self) -> String {
        // A struct of strings, integers and booleans always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The argv that runs this plan: `[program, "--plan", <json>]`, where `program` is the
    /// path of atelier-build as the door sees it (e.g. `/usr/local/bin/atelier-build`).
    pub fn to_argv(&self, program: impl Into<String>) -> Vec<String> {
        vec![program.into(), PLAN_FLAG.to_owned(), self.to_json()]
    }

    /// Checks what serde cannot: programs not empty, no NUL byte anywhere, an output named,
    /// deadlines above zero. Whether the output stays inside the workspace is a question about
    /// the tree, answered by atelier-build after the build.
    pub fn validate(&self) -> Result<(), PlanError> {
        check_argv("install", &self.install)?;
        check_argv("build", &self.build)?;
        if self.output.is_empty() {
            return Err(PlanError::EmptyOutput);
        }
        if self.output.contains('\0') {
            return Err(PlanError::NulInOutput);
        }
        if self.install_timeout_ms == 0 {
            return Err(PlanError::ZeroTimeout { step: "install" });
        }
        if self.build_timeout_ms == 0 {
            return Err(PlanError::ZeroTimeout { step: "build" });
        }
        Ok(())
    }
}

/// Splits a manifest command on whitespace into argv, the contract's rule (no shell, no
/// quoting): `"bun run build"` → `["bun", "run", "build"]`, `""` → `[]` (no step).
pub fn split_command(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_owned).collect()
}

fn check_argv(step: &'static str, argv: &[String]) -> Result<(), PlanError> {
    if argv.first().is_some_and(String::is_empty) {
        return Err(PlanError::EmptyProgram { step });
    }
    match argv.iter().position(|arg| arg.contains('\0')) {
        Some(index) => Err(PlanError::NulInArgv { step, index }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> BuildPlan {
        BuildPlan::from_manifest("bun install", "bun run build", "dist", 1000, 2000, false).unwrap()
    }

    #[test]
    fn manifest_commands_split_on_any_whitespace() {
        let cases: [(&str, &str, &[&str]); 6] = [
            ("default install", "bun install", &["bun", "install"]),
            (
                "tabs and runs",
                "  npm\t run  build \n",
                &["npm", "run", "build"],
            ),
            ("empty is no step", "", &[]),
            ("blank is no step", " \t\n", &[]),
            ("no shell quoting", "sh -c 'a b'", &["sh", "-c", "'a", "b'"]),
            ("one word", "make", &["make"]),
        ];
        for (name, command, want) in cases {
            assert_eq!(split_command(command), want, "case {name}");
        }
    }

    #[test]
    fn argv_round_trips_through_json() {
        let plan = plan();
        let argv = plan.to_argv("/usr/local/bin/atelier-build");
        assert_eq!(argv[0], "/usr/local/bin/atelier-build");
        assert_eq!(argv[1], PLAN_FLAG);
        assert_eq!(BuildPlan::from_json(&argv[2]).unwrap(), plan);
        assert_eq!(
            argv[2],
            r#"{"install":["bun","install"],"build":["bun","run","build"],"output":"dist","install_timeout_ms":1000,"build_timeout_ms":2000,"lifecycle_scripts":false}"#
        );
    }

    #[test]
    fn bad_plans_are_refused_by_name() {
        let ok = plan().to_json();
        let cases: Vec<(&str, String, &str)> = vec![
            ("not json", "bun install".into(), "malformed"),
            (
                "unknown key",
                ok.replace("\"output\"", "\"extra\":1,\"output\""),
                "unknown field",
            ),
            (
                "missing key",
                ok.replace(",\"lifecycle_scripts\":false", ""),
                "missing field",
            ),
            (
                "empty program",
                ok.replace("[\"bun\",\"install\"]", "[\"\"]"),
                "program is empty",
            ),
            (
                "nul in argv",
                ok.replace("\"install\"]", "\"in\\u0000stall\"]"),
                "NUL byte",
            ),
            (
                "empty output",
                ok.replace("\"dist\"", "\"\""),
                "output directory is empty",
            ),
            (
                "nul in output",
                ok.replace("\"dist\"", "\"di\\u0000st\""),
                "output directory contains",
            ),
            (
                "zero timeout",
                ok.replace("\"build_timeout_ms\":2000", "\"build_timeout_ms\":0"),
                "timeout is 0",
            ),
            (
                "string timeout",
                ok.replace("2000", "\"2000\""),
                "malformed",
            ),
        ];
        for (name, json, want) in cases {
            let err = BuildPlan::from_json(&json).unwrap_err();
            assert!(err.to_string().contains(want), "case {name}: {err}");
        }
    }

    #[test]
    fn empty_steps_are_allowed() {
        let plan = BuildPlan::from_manifest("", "sh build.sh", "dist", 1, 1, false).unwrap();
        assert!(plan.install.is_empty());
        assert_eq!(plan.build, ["sh", "build.sh"]);
    }
}
