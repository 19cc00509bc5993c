//! Turning npm-style lifecycle scripts off: what a step's argv and environment get when the
//! plan says `lifecycle_scripts: false`.
//!
//! A package's `preinstall`/`install`/`postinstall`/`prepare` scripts, and a project's
//! `pre<name>`/`post<name>` around `npm run <name>`, run arbitrary commands that no manifest
//! line names. With lifecycle scripts off, atelier-build does exactly this:
//!
//! - **Every step's environment** gets [`SCRIPT_ENV`]:
//!   - `npm_config_ignore_scripts=true`: npm's `ignore-scripts` setting, read by npm and pnpm
//!     (and yarn 1 through npm's configuration). `npm run build` still runs `build` itself but
//!     not `prebuild`/`postbuild`; an install runs no package's or project's scripts.
//!   - `YARN_ENABLE_SCRIPTS=false`: yarn 2+'s `enableScripts` setting.
//! - **An install-like argv** of npm, pnpm or bun (`install`, `i`, `ci`, `add`) gets
//!   `--ignore-scripts` appended unless it is already there. bun ignores npm's environment and
//!   runs the project's own `{pre,post}install` scripts unless given the flag. yarn gets no
//!   flag: yarn 2+ refuses `--ignore-scripts` as an unknown option, and the environment covers
//!   it.
//!
//! The program is recognised by its file name (`/usr/bin/npm` is npm). Verified here against a
//! real npm (the crate's tests); the bun, pnpm and yarn spellings are from their documentation.
//! With lifecycle scripts on, nothing is added.

use std::path::Path;

/// The environment every step gets while lifecycle scripts are off.
pub const SCRIPT_ENV: [(&str, &str); 2] = [
    ("npm_config_ignore_scripts", "true"),
    ("YARN_ENABLE_SCRIPTS", "false"),
];

/// The flag appended to an install-like argv of npm, pnpm and bun.
pub const IGNORE_SCRIPTS_FLAG: &str = "--ignore-scripts";

/// Package managers that take [`IGNORE_SCRIPTS_FLAG`] on their install subcommands.
const FLAG_TAKING_MANAGERS: [&str; 3] = ["npm", "pnpm", "bun"];

/// Subcommands that install packages, and so run their scripts.
const INSTALL_SUBCOMMANDS: [&str; 4] = ["install", "i", "ci", "add"];

/// The argv a step runs: `argv` itself, or with [`IGNORE_SCRIPTS_FLAG`] appended when scripts
/// are off and `argv` is an install of npm, pnpm or bun.
pub fn step_argv(argv: &[String], lifecycle_scripts: bool) -> Vec<String> {
    let mut effective = argv.to_vec();
    if !lifecycle_scripts && takes_ignore_flag(argv) {
        effective.push(IGNORE_SCRIPTS_FLAG.to_owned());
    }
    effective
}

/// The environment added to every step: [`SCRIPT_ENV`] when scripts are off, else nothing.
pub fn step_env(lifecycle_scripts: bool) -> &'static [(&'static str, &'static str)] {
    if lifecycle_scripts {
        &[]
    } else {
        &SCRIPT_ENV
    }
}

fn takes_ignore_flag(argv: &[String]) -> bool {
    let Some((program, args)) = argv.split_first() else {
        return false;
    };
    let name = Path::new(program)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    FLAG_TAKING_MANAGERS.contains(&name)
        && args
            .first()
            .is_some_and(|sub| INSTALL_SUBCOMMANDS.contains(&sub.as_str()))
        && !args.iter().any(|arg| arg == IGNORE_SCRIPTS_FLAG)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn install_argv_table() {
        let cases: [(&str, &[&str], bool, &[&str]); 10] = [
            (
                "bun install",
                &["bun", "install"],
                false,
                &["bun", "install", "--ignore-scripts"],
            ),
            (
                "npm ci by path",
                &["/usr/bin/npm", "ci"],
                false,
                &["/usr/bin/npm", "ci", "--ignore-scripts"],
            ),
            (
                "pnpm i",
                &["pnpm", "i", "--frozen-lockfile"],
                false,
                &["pnpm", "i", "--frozen-lockfile", "--ignore-scripts"],
            ),
            (
                "bun add",
                &["bun", "add", "x"],
                false,
                &["bun", "add", "x", "--ignore-scripts"],
            ),
            (
                "already there",
                &["npm", "install", "--ignore-scripts"],
                false,
                &["npm", "install", "--ignore-scripts"],
            ),
            ("scripts on", &["bun", "install"], true, &["bun", "install"]),
            (
                "run is not an install",
                &["bun", "run", "build"],
                false,
                &["bun", "run", "build"],
            ),
            (
                "yarn takes env only",
                &["yarn", "install"],
                false,
                &["yarn", "install"],
            ),
            (
                "other program",
                &["make", "install"],
                false,
                &["make", "install"],
            ),
            (
                "a manager's name inside another",
                &["npmx", "install"],
                false,
                &["npmx", "install"],
            ),
        ];
        for (name, given, scripts, want) in cases {
            assert_eq!(step_argv(&argv(given), scripts), argv(want), "case {name}");
        }
    }

    #[test]
    fn env_only_when_scripts_are_off() {
        assert_eq!(step_env(false), &SCRIPT_ENV);
        assert!(step_env(true).is_empty());
    }
}
