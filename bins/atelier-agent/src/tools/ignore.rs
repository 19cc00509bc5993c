//! The workspace's `.gitignore`, as `glob` and `grep` read it: what a site keeps out of its
//! history (installed packages, build output) is what a search of the site should not wade
//! through, and a walk that enters `node_modules` first spends its entry bound there.
//!
//! Only the file at the workspace's root is read, and of git's syntax what a site's ignore file
//! uses: `#` comments, `!` to re-include, a trailing `/` for directories only, a leading or inner
//! `/` anchoring a pattern to the root (otherwise it matches a name at any depth), and globs
//! (`*` and `?` within one name, `[...]`, `**` across directories). A line that is no valid
//! glob is skipped; a file that cannot be read (missing, a link, too large) ignores nothing, as
//! a search is no reason to fail a turn.

use std::path::Path;

use atelier_fs::Root;
use globset::{GlobBuilder, GlobMatcher};

/// The ignore file, at the workspace's root.
pub(crate) const IGNORE_FILE: &str = ".gitignore";

/// The largest ignore file read.
const MAX_IGNORE_FILE_BYTES: u64 = 64 * 1024;

/// The rules of one ignore file, in its order: the last that matches a path decides.
#[derive(Debug, Default)]
pub(crate) struct IgnoreRules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    matcher: GlobMatcher,
    /// A `!` line: it re-includes what it matches.
    negated: bool,
    /// A line ending in `/`: it matches directories only.
    dir_only: bool,
}

// === impl IgnoreRules ===

impl IgnoreRules {
    /// The rules of `root`'s ignore file; none when it cannot be read.
    pub(crate) fn read(root: &Root) -> IgnoreRules {
        match root.read_limited(IGNORE_FILE, MAX_IGNORE_FILE_BYTES) {
            Ok(bytes) => IgnoreRules::parse(&String::from_utf8_lossy(&bytes)),
            Err(_) => IgnoreRules::default(),
        }
    }

    /// The rules of an ignore file's `text`.
    pub(crate) fn parse(text: &str) -> IgnoreRules {
        IgnoreRules {
            rules: text.lines().filter_map(Rule::parse).collect(),
        }
    }

    /// Whether `path` (relative to the workspace's root; `dir` when it is a directory) is
    /// ignored.
    pub(crate) fn ignores(&self, path: &Path, dir: bool) -> bool {
        self.rules
            .iter()
            .rev()
            .find(|rule| (!rule.dir_only || dir) && rule.matcher.is_match(path))
            .is_some_and(|rule| !rule.negated)
    }
}

// === impl Rule ===

impl Rule {
    fn parse(line: &str) -> Option<Rule> {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let (negated, line) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        // `\#` and `\!` start a pattern with the character itself.
        let line = line
            .strip_prefix('\\')
            .filter(|rest| rest.starts_with(['#', '!']))
            .unwrap_or(line);
        let (dir_only, pattern) = match line.strip_suffix('/') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let anchored = pattern.contains('/');
        let pattern = pattern.strip_prefix('/').unwrap_or(pattern);
        if pattern.is_empty() {
            return None;
        }
        let glob = if anchored {
            pattern.to_owned()
        } else {
            format!("**/{pattern}")
        };
        let matcher = GlobBuilder::new(&glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .ok()?
            .compile_matcher();
        Some(Rule {
            matcher,
            negated,
            dir_only,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_table() {
        let site = "/dist/\n/node_modules/\n";
        let cases: [(&str, &str, &str, bool, bool); 24] = [
            ("anchored dir", site, "dist", true, true),
            (
                "anchored dir, a file of that name",
                site,
                "dist",
                false,
                false,
            ),
            ("anchored dir, deeper", site, "src/dist", true, false),
            (
                "anchored dir, inside it",
                site,
                "dist/index.html",
                false,
                false,
            ),
            ("second rule", site, "node_modules", true, true),
            ("not named", site, "src", true, false),
            (
                "any depth",
                "node_modules/\n",
                "a/b/node_modules",
                true,
                true,
            ),
            (
                "any depth, at the root",
                "node_modules/\n",
                "node_modules",
                true,
                true,
            ),
            ("name glob", "*.log\n", "logs/debug.log", false, true),
            (
                "name glob stays in one name",
                "*.log\n",
                "a.log/x",
                false,
                false,
            ),
            ("inner slash anchors", "src/gen\n", "src/gen", true, true),
            (
                "inner slash anchors, deeper",
                "src/gen\n",
                "x/src/gen",
                true,
                false,
            ),
            ("double star", "**/cache\n", "a/b/cache", true, true),
            ("below a dir", "build/**\n", "build/a/b.js", false, true),
            (
                "negation re-includes",
                "*.html\n!keep.html\n",
                "keep.html",
                false,
                false,
            ),
            (
                "the last rule decides",
                "!keep.html\n*.html\n",
                "keep.html",
                false,
                true,
            ),
            ("comment", "# dist\n", "dist", true, false),
            ("escaped hash", "\\#notes\n", "#notes", false, true),
            ("escaped bang", "\\!important\n", "!important", false, true),
            ("trailing blanks", "dist   \n", "dist", true, true),
            ("crlf", "dist\r\n", "dist", true, true),
            ("blank lines only", "\n\n", "dist", true, false),
            ("a slash alone", "/\n", "dist", true, false),
            (
                "an invalid glob is skipped",
                "[\ndist\n",
                "dist",
                true,
                true,
            ),
        ];
        for (name, text, path, dir, ignored) in cases {
            let rules = IgnoreRules::parse(text);
            assert_eq!(rules.ignores(Path::new(path), dir), ignored, "{name}");
        }
    }

    #[test]
    fn a_linked_or_missing_file_ignores_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        assert!(!IgnoreRules::read(&root).ignores(Path::new("dist"), true));
        std::fs::write(tmp.path().join("elsewhere"), "dist/\n").unwrap();
        std::os::unix::fs::symlink("elsewhere", tmp.path().join(IGNORE_FILE)).unwrap();
        assert!(!IgnoreRules::read(&root).ignores(Path::new("dist"), true));
        std::fs::remove_file(tmp.path().join(IGNORE_FILE)).unwrap();
        std::fs::write(tmp.path().join(IGNORE_FILE), "dist/\n").unwrap();
        assert!(IgnoreRules::read(&root).ignores(Path::new("dist"), true));
    }
}
