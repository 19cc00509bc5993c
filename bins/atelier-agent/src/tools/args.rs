//! The one parser of what the model sends the workspace tools: a tool name and its argument
//! JSON become a typed [`WorkspaceCall`], or a named [`ToolError`] the model reads.
//!
//! Everything that can be judged without touching the disk is judged here: the schema (no
//! unknown field, no missing one), the paths (relative, or absolute below the workspace's own
//! path; no `..`, no NUL, `.git` and `.builder` out of reach at any depth), the sizes of what
//! is to be written, and the patterns (compiled, with a bound on the compiled size). The disk
//! decides the rest (links, kinds, sizes of what is there).

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use atelier_fs::RelPath;
use serde::Deserialize;
use serde_json::Value;

use super::ToolError;

/// `read`: a text file, or a window of its lines.
pub const READ: &str = "read";
/// `write`: create or replace a whole file.
pub const WRITE: &str = "write";
/// `edit`: replace an exact span of a file.
pub const EDIT: &str = "edit";
/// `list`: the entries of a directory.
pub const LIST: &str = "list";
/// `glob`: the files whose path matches a glob pattern.
pub const GLOB: &str = "glob";
/// `grep`: the lines of files that match a regular expression.
pub const GREP: &str = "grep";

/// Every workspace tool, in the order they are offered.
pub const WORKSPACE_TOOLS: [&str; 6] = [READ, WRITE, EDIT, LIST, GLOB, GREP];

/// The directory names no tool reaches, at any depth.
pub const OUT_OF_REACH: [&str; 2] = [".git", ".builder"];

/// The most bytes a `write` content or an `edit` string may hold.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024; // 1 MiB

/// The longest glob or regular expression accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// The largest compiled regular expression, in bytes: the regex engine is linear in the input,
/// but a pattern such as `\w{1000}` compiles large, so its size is bounded too.
const MAX_REGEX_COMPILED_BYTES: usize = 1024 * 1024; // 1 MiB

/// How many lines `read` returns when the model does not say.
pub const DEFAULT_READ_LINES: usize = 2000;

/// Where the workspace is on the host. Models are used to file tools that take absolute
/// paths (and a scripted model may only know those), so an absolute path below this one is
/// taken as the relative path under it: cut lexically, then judged like any other. Every other
/// absolute path is an escape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceDir {
    path: PathBuf,
}

// === impl WorkspaceDir ===

impl WorkspaceDir {
    /// `path`, if it is absolute and made of plain names only, as a canonical path is.
    pub fn new(path: impl Into<PathBuf>) -> Option<WorkspaceDir> {
        let path = path.into();
        let mut components = path.components();
        let plain = components.next() == Some(Component::RootDir)
            && components.all(|component| matches!(component, Component::Normal(_)));
        plain.then_some(WorkspaceDir { path })
    }

    /// The absolute path.
    pub fn as_path(&self) -> &Path {
        &self.path
    }

    /// What `given` names below the workspace, when it is an absolute path at or below it.
    fn below<'a>(&self, given: &'a str) -> Option<&'a str> {
        // The part left is a slice of `given` cut at a `/`, so it is UTF-8 like the rest.
        Path::new(given).strip_prefix(&self.path).ok()?.to_str()
    }
}

/// A path below the workspace, checked lexically: plain names only, none of them out of reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPath {
    rel: RelPath,
}

// === impl ToolPath ===

impl ToolPath {
    /// Validates `given` into a path naming an entry below the workspace; an absolute path is
    /// accepted only below `dir`.
    pub fn parse(given: &str, dir: Option<&WorkspaceDir>) -> Result<ToolPath, ToolError> {
        let below = dir.and_then(|dir| dir.below(given));
        let rel = RelPath::new(below.unwrap_or(given)).map_err(|error| {
            match (below, ToolError::from(error)) {
                // `..` after the workspace's own path: name the path as the model gave it.
                (Some(_), ToolError::Escape { .. }) => ToolError::Escape {
                    path: given.to_owned(),
                },
                (_, error) => error,
            }
        })?;
        if let Some(name) = rel.names().find_map(out_of_reach) {
            return Err(ToolError::OutOfReach {
                name,
                path: given.to_owned(),
            });
        }
        Ok(ToolPath { rel })
    }

    /// A directory argument: absent, empty, `.` or the workspace's own path is the workspace
    /// itself (`None`).
    pub fn parse_dir(
        given: Option<&str>,
        dir: Option<&WorkspaceDir>,
    ) -> Result<Option<ToolPath>, ToolError> {
        let Some(given) = given else {
            return Ok(None);
        };
        let relative = dir.and_then(|dir| dir.below(given)).unwrap_or(given);
        if !relative.starts_with('/')
            && relative
                .split('/')
                .all(|part| part.is_empty() || part == ".")
        {
            return Ok(None);
        }
        ToolPath::parse(given, dir).map(Some)
    }

    /// The normalised relative path.
    pub fn as_path(&self) -> &Path {
        self.rel.as_path()
    }

    /// The path as the model is shown it.
    pub fn shown(&self) -> String {
        self.rel.as_path().to_string_lossy().into_owned()
    }

    /// The path as validated by the filesystem layer.
    pub fn rel(&self) -> &RelPath {
        &self.rel
    }
}

/// The out-of-reach name `name` is, if it is one (compared without case: the name must not be
/// reachable under another spelling on a filesystem that folds case).
pub fn out_of_reach(name: &OsStr) -> Option<&'static str> {
    OUT_OF_REACH.into_iter().find(|reserved| {
        name.as_encoded_bytes()
            .eq_ignore_ascii_case(reserved.as_bytes())
    })
}

/// A compiled glob and the pattern it came from.
#[derive(Debug, Clone)]
pub struct Glob {
    source: String,
    matcher: globset::GlobMatcher,
    /// Whether the pattern names a path (has a `/`) rather than a file name.
    has_separator: bool,
}

// === impl Glob ===

impl Glob {
    /// Compiles `pattern`: `*` and `?` stay within one name, `**` crosses directories.
    pub fn parse(pattern: &str) -> Result<Glob, ToolError> {
        check_pattern_size(pattern)?;
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| ToolError::InvalidPattern {
                detail: e.kind().to_string(),
            })?;
        Ok(Glob {
            source: pattern.to_owned(),
            matcher: glob.compile_matcher(),
            has_separator: pattern.contains('/'),
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `rel` (relative to where the search starts) matches the whole pattern.
    pub fn matches_path(&self, rel: &Path) -> bool {
        self.matcher.is_match(rel)
    }

    /// As a file filter: a pattern without `/` names files by their name at any depth
    /// (`*.css`), one with `/` names them by their path.
    pub fn matches_file(&self, rel: &Path) -> bool {
        if self.has_separator {
            return self.matcher.is_match(rel);
        }
        rel.file_name()
            .is_some_and(|name| self.matcher.is_match(Path::new(name)))
    }
}

/// One call of a workspace tool, with every argument checked.
#[derive(Debug, Clone)]
pub enum WorkspaceCall {
    /// Read lines `offset..offset+limit` (1-based) of a text file.
    Read {
        /// The file.
        path: ToolPath,
        /// The first line to return, from 1.
        offset: usize,
        /// How many lines at most.
        limit: usize,
    },
    /// Create or replace a file with `content`.
    Write {
        /// The file.
        path: ToolPath,
        /// Its new content.
        content: String,
    },
    /// Replace `old` with `new` in a file: exactly once, or every occurrence with `all`.
    Edit {
        /// The file.
        path: ToolPath,
        /// The exact text to find (not empty).
        old: String,
        /// What replaces it (different from `old`).
        new: String,
        /// Replace every occurrence instead of requiring exactly one.
        all: bool,
    },
    /// List a directory (`None`: the workspace).
    List {
        /// The directory.
        path: Option<ToolPath>,
    },
    /// Find files by glob below a directory.
    Glob {
        /// The pattern, matched against paths relative to `path`.
        pattern: Glob,
        /// Where to look (`None`: the workspace).
        path: Option<ToolPath>,
    },
    /// Search file contents by regular expression.
    Grep {
        /// The compiled expression.
        regex: regex::Regex,
        /// A file or a directory to search (`None`: the workspace).
        path: Option<ToolPath>,
        /// Only the files this glob matches.
        glob: Option<Glob>,
    },
}

// === impl WorkspaceCall ===

impl WorkspaceCall {
    /// The tool's name.
    pub fn tool(&self) -> &'static str {
        match self {
            WorkspaceCall::Read { .. } => READ,
            WorkspaceCall::Write { .. } => WRITE,
            WorkspaceCall::Edit { .. } => EDIT,
            WorkspaceCall::List { .. } => LIST,
            WorkspaceCall::Glob { .. } => GLOB,
            WorkspaceCall::Grep { .. } => GREP,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    replace_all: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    ignore_case: Option<bool>,
}

/// Parses the raw argument text of a call of `name`, as the provider streamed it: blank or
/// malformed JSON counts as `{}`, so the schema check names what is missing.
pub fn parse_raw_call(
    name: &str,
    raw_arguments: &str,
    dir: Option<&WorkspaceDir>,
) -> Result<WorkspaceCall, ToolError> {
    parse_call(name, &atelier_llm::parse_tool_arguments(raw_arguments), dir)
}

/// Parses a call of the workspace tool `name` with `arguments`; absolute paths are accepted
/// below `dir` only.
pub fn parse_call(
    name: &str,
    arguments: &Value,
    dir: Option<&WorkspaceDir>,
) -> Result<WorkspaceCall, ToolError> {
    let tool = WORKSPACE_TOOLS
        .into_iter()
        .find(|tool| *tool == name)
        .ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
        })?;
    if !arguments.is_object() {
        return Err(ToolError::invalid(
            tool,
            "the arguments must be a JSON object",
        ));
    }
    match tool {
        READ => {
            let args: ReadArgs = schema(tool, arguments)?;
            Ok(WorkspaceCall::Read {
                path: ToolPath::parse(&args.path, dir)?,
                offset: count(args.offset.unwrap_or(1)).max(1),
                limit: args
                    .limit
                    .map_or(DEFAULT_READ_LINES, count)
                    .clamp(1, DEFAULT_READ_LINES),
            })
        }
        WRITE => {
            let args: WriteArgs = schema(tool, arguments)?;
            let path = ToolPath::parse(&args.path, dir)?;
            check_size("content", &args.content)?;
            Ok(WorkspaceCall::Write {
                path,
                content: args.content,
            })
        }
        EDIT => {
            let args: EditArgs = schema(tool, arguments)?;
            let path = ToolPath::parse(&args.path, dir)?;
            check_size("old_string", &args.old_string)?;
            check_size("new_string", &args.new_string)?;
            if args.old_string.is_empty() {
                return Err(ToolError::invalid(tool, "old_string is empty"));
            }
            if args.old_string == args.new_string {
                return Err(ToolError::invalid(
                    tool,
                    "old_string and new_string are the same",
                ));
            }
            Ok(WorkspaceCall::Edit {
                path,
                old: args.old_string,
                new: args.new_string,
                all: args.replace_all.unwrap_or(false),
            })
        }
        LIST => {
            let args: ListArgs = schema(tool, arguments)?;
            Ok(WorkspaceCall::List {
                path: ToolPath::parse_dir(args.path.as_deref(), dir)?,
            })
        }
        GLOB => {
            let args: GlobArgs = schema(tool, arguments)?;
            Ok(WorkspaceCall::Glob {
                pattern: Glob::parse(&args.pattern)?,
                path: ToolPath::parse_dir(args.path.as_deref(), dir)?,
            })
        }
        _ => {
            let args: GrepArgs = schema(tool, arguments)?;
            check_pattern_size(&args.pattern)?;
            let regex = regex::RegexBuilder::new(&args.pattern)
                .case_insensitive(args.ignore_case.unwrap_or(false))
                .size_limit(MAX_REGEX_COMPILED_BYTES)
                .dfa_size_limit(MAX_REGEX_COMPILED_BYTES)
                .build()
                .map_err(|e| ToolError::InvalidPattern {
                    detail: e.to_string(),
                })?;
            Ok(WorkspaceCall::Grep {
                regex,
                path: ToolPath::parse_dir(args.path.as_deref(), dir)?,
                glob: args.glob.as_deref().map(Glob::parse).transpose()?,
            })
        }
    }
}

/// Deserializes `arguments` as the tool's schema, naming the first problem.
fn schema<'a, T: Deserialize<'a>>(tool: &str, arguments: &'a Value) -> Result<T, ToolError> {
    T::deserialize(arguments).map_err(|e| ToolError::invalid(tool, e.to_string()))
}

/// A count from the model, saturated to what this machine can index.
fn count(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn check_size(what: &str, text: &str) -> Result<(), ToolError> {
    if text.len() > MAX_WRITE_BYTES {
        return Err(ToolError::TooLarge {
            what: what.to_owned(),
            limit: MAX_WRITE_BYTES as u64,
        });
    }
    Ok(())
}

fn check_pattern_size(pattern: &str) -> Result<(), ToolError> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(ToolError::TooLarge {
            what: "pattern".to_owned(),
            limit: MAX_PATTERN_BYTES as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The workspace's own path in the tables.
    const WS: &str = "/srv/sites/demo";

    /// What a call parses to, in a form a table can name.
    fn outcome(name: &str, arguments: Value) -> Result<String, &'static str> {
        let dir = WorkspaceDir::new(WS).unwrap();
        match parse_call(name, &arguments, Some(&dir)) {
            Ok(WorkspaceCall::Read {
                path,
                offset,
                limit,
            }) => Ok(format!("read {} {offset} {limit}", path.shown())),
            Ok(WorkspaceCall::Write { path, content }) => {
                Ok(format!("write {} {}", path.shown(), content.len()))
            }
            Ok(WorkspaceCall::Edit { path, all, .. }) => Ok(format!("edit {} {all}", path.shown())),
            Ok(WorkspaceCall::List { path }) => Ok(format!(
                "list {}",
                path.map_or_else(|| ".".to_owned(), |p| p.shown())
            )),
            Ok(WorkspaceCall::Glob { pattern, path }) => Ok(format!(
                "glob {} {}",
                pattern.as_str(),
                path.map_or_else(|| ".".to_owned(), |p| p.shown())
            )),
            Ok(WorkspaceCall::Grep { regex, glob, .. }) => Ok(format!(
                "grep {} {}",
                regex.as_str(),
                glob.map_or_else(|| "-".to_owned(), |g| g.source)
            )),
            Err(e) => Err(e.reason()),
        }
    }

    #[test]
    fn argument_table() {
        let big = "x".repeat(MAX_WRITE_BYTES + 1);
        let cases: Vec<(&str, &str, Value, Result<&str, &str>)> = vec![
            (
                "read with defaults",
                READ,
                json!({"path": "a.html"}),
                Ok("read a.html 1 2000"),
            ),
            (
                "read a window",
                READ,
                json!({"path": "./a/b.css", "offset": 10, "limit": 5}),
                Ok("read a/b.css 10 5"),
            ),
            (
                "offset zero is the first line",
                READ,
                json!({"path": "a", "offset": 0}),
                Ok("read a 1 2000"),
            ),
            (
                "limit is capped",
                READ,
                json!({"path": "a", "limit": 1_000_000}),
                Ok("read a 1 2000"),
            ),
            (
                "null optionals",
                READ,
                json!({"path": "a", "offset": null}),
                Ok("read a 1 2000"),
            ),
            (
                "negative offset",
                READ,
                json!({"path": "a", "offset": -1}),
                Err("invalid_arguments"),
            ),
            ("missing path", READ, json!({}), Err("invalid_arguments")),
            (
                "unknown field",
                READ,
                json!({"path": "a", "file_path": "b"}),
                Err("invalid_arguments"),
            ),
            ("not an object", READ, json!("a"), Err("invalid_arguments")),
            (
                "absolute path",
                READ,
                json!({"path": "/etc/passwd"}),
                Err("escape"),
            ),
            (
                "absolute below the workspace",
                WRITE,
                json!({"path": "/srv/sites/demo/src/index.html", "content": "x"}),
                Ok("write src/index.html 1"),
            ),
            (
                "absolute below the workspace, spelled loosely",
                READ,
                json!({"path": "//srv/./sites/demo//a.css"}),
                Ok("read a.css 1 2000"),
            ),
            (
                "absolute: the workspace itself is no file",
                WRITE,
                json!({"path": "/srv/sites/demo", "content": "x"}),
                Err("empty_path"),
            ),
            (
                "absolute: a sibling with the same prefix",
                READ,
                json!({"path": "/srv/sites/demo2/a.css"}),
                Err("escape"),
            ),
            (
                "absolute: out again with ..",
                WRITE,
                json!({"path": "/srv/sites/demo/../other/x", "content": ""}),
                Err("escape"),
            ),
            (
                "absolute: .git below the workspace",
                READ,
                json!({"path": "/srv/sites/demo/.git/config"}),
                Err("out_of_reach"),
            ),
            (
                "parent component",
                WRITE,
                json!({"path": "a/../../x", "content": ""}),
                Err("escape"),
            ),
            (
                "empty path",
                WRITE,
                json!({"path": "", "content": ""}),
                Err("empty_path"),
            ),
            (
                "nul byte",
                WRITE,
                json!({"path": "a\u{0}b", "content": ""}),
                Err("nul_byte"),
            ),
            (
                ".git at the top",
                WRITE,
                json!({"path": ".git/config", "content": ""}),
                Err("out_of_reach"),
            ),
            (
                ".git deep down",
                READ,
                json!({"path": "a/b/.git/HEAD"}),
                Err("out_of_reach"),
            ),
            (
                ".builder",
                READ,
                json!({"path": ".builder/mcp.json"}),
                Err("out_of_reach"),
            ),
            (
                ".GIT in another case",
                READ,
                json!({"path": "x/.GIT/config"}),
                Err("out_of_reach"),
            ),
            (
                ".gitignore is reachable",
                READ,
                json!({"path": ".gitignore"}),
                Ok("read .gitignore 1 2000"),
            ),
            (
                "write",
                WRITE,
                json!({"path": "p/index.html", "content": "hi"}),
                Ok("write p/index.html 2"),
            ),
            (
                "write too large",
                WRITE,
                json!({"path": "a", "content": big}),
                Err("too_large"),
            ),
            (
                "write content not a string",
                WRITE,
                json!({"path": "a", "content": 3}),
                Err("invalid_arguments"),
            ),
            (
                "replace once",
                EDIT,
                json!({"path": "a", "old_string": "x", "new_string": "y"}),
                Ok("edit a false"),
            ),
            (
                "replace all",
                EDIT,
                json!({"path": "a", "old_string": "x", "new_string": "y", "replace_all": true}),
                Ok("edit a true"),
            ),
            (
                "replace nothing",
                EDIT,
                json!({"path": "a", "old_string": "", "new_string": "y"}),
                Err("invalid_arguments"),
            ),
            (
                "replace with itself",
                EDIT,
                json!({"path": "a", "old_string": "x", "new_string": "x"}),
                Err("invalid_arguments"),
            ),
            ("list the workspace", LIST, json!({}), Ok("list .")),
            ("list dot", LIST, json!({"path": "."}), Ok("list .")),
            ("list dot slash", LIST, json!({"path": "./"}), Ok("list .")),
            (
                "list a directory",
                LIST,
                json!({"path": "assets/"}),
                Ok("list assets"),
            ),
            (
                "list .builder",
                LIST,
                json!({"path": ".builder"}),
                Err("out_of_reach"),
            ),
            ("list above", LIST, json!({"path": ".."}), Err("escape")),
            (
                "list the workspace by its own path",
                LIST,
                json!({"path": "/srv/sites/demo/"}),
                Ok("list ."),
            ),
            (
                "list below the workspace by absolute path",
                LIST,
                json!({"path": "/srv/sites/demo/assets"}),
                Ok("list assets"),
            ),
            (
                "list above the workspace by absolute path",
                LIST,
                json!({"path": "/srv/sites"}),
                Err("escape"),
            ),
            (
                "list the root of the host",
                LIST,
                json!({"path": "/"}),
                Err("escape"),
            ),
            (
                "glob",
                GLOB,
                json!({"pattern": "**/*.html"}),
                Ok("glob **/*.html ."),
            ),
            (
                "glob below",
                GLOB,
                json!({"pattern": "*.css", "path": "assets"}),
                Ok("glob *.css assets"),
            ),
            (
                "glob unclosed",
                GLOB,
                json!({"pattern": "a[b"}),
                Err("invalid_pattern"),
            ),
            (
                "glob too long",
                GLOB,
                json!({"pattern": "a".repeat(MAX_PATTERN_BYTES + 1)}),
                Err("too_large"),
            ),
            (
                "search",
                GREP,
                json!({"pattern": "h[1-6]", "glob": "*.html"}),
                Ok("grep h[1-6] *.html"),
            ),
            (
                "search bad regex",
                GREP,
                json!({"pattern": "("}),
                Err("invalid_pattern"),
            ),
            (
                "search regex compiles too large",
                GREP,
                json!({"pattern": "\\w{1000}\\w{1000}\\w{1000}"}),
                Err("invalid_pattern"),
            ),
            (
                "search in .git",
                GREP,
                json!({"pattern": "x", "path": ".git"}),
                Err("out_of_reach"),
            ),
            (
                "unknown tool",
                "bash",
                json!({"command": "ls"}),
                Err("unknown_tool"),
            ),
        ];
        for (name, tool, arguments, want) in cases {
            assert_eq!(
                outcome(tool, arguments),
                want.map(str::to_owned),
                "case {name}"
            );
        }
    }

    #[test]
    fn raw_text_that_is_not_json_reads_as_no_arguments() {
        let error = parse_raw_call(WRITE, "{\"path\": \"a", None).unwrap_err();
        assert_eq!(error.reason(), "invalid_arguments");
        assert!(
            error.to_string().contains("missing field `path`"),
            "{error}"
        );
    }

    #[test]
    fn without_the_workspace_s_path_every_absolute_path_escapes() {
        for given in [WS, "/srv/sites/demo/a.html", "/etc/passwd"] {
            let error = ToolPath::parse(given, None).unwrap_err();
            assert_eq!(error.reason(), "escape", "{given}");
            let error = ToolPath::parse_dir(Some(given), None).unwrap_err();
            assert_eq!(error.reason(), "escape", "{given}");
        }
        let error =
            ToolPath::parse("/srv/sites/demo/../x", WorkspaceDir::new(WS).as_ref()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "refused: path escapes the workspace (/srv/sites/demo/../x)"
        );
    }

    #[test]
    fn a_workspace_path_is_absolute_and_plain() {
        for (path, ok) in [
            ("/srv/sites/demo", true),
            ("/", true),
            ("srv/sites", false),
            ("/srv/../etc", false),
            ("/srv/./x", true),
        ] {
            assert_eq!(WorkspaceDir::new(path).is_some(), ok, "{path}");
        }
    }

    #[test]
    fn globs_match_names_or_paths() {
        let by_name = Glob::parse("*.css").unwrap();
        assert!(by_name.matches_file(Path::new("a/b/site.css")));
        assert!(!by_name.matches_path(Path::new("a/b/site.css")));
        assert!(by_name.matches_path(Path::new("site.css")));
        let by_path = Glob::parse("a/**/*.css").unwrap();
        assert!(by_path.matches_file(Path::new("a/b/site.css")));
        assert!(!by_path.matches_file(Path::new("b/site.css")));
    }

    proptest::proptest! {
        /// Whatever the model sends, the parse answers with a call or a named refusal, and an
        /// accepted path is plain names, none of them out of reach.
        #[test]
        fn any_arguments_parse_or_are_refused_by_name(
            pick in 0usize..=WORKSPACE_TOOLS.len(),
            raw in "\\PC{0,64}",
            path in proptest::sample::select(vec!["a", "./b/c", "", ".", "..", "/x", "a/.git/b", ".Builder", "x/../y", "a\u{0}", "d/", "/w", "/w/a", "/w/../x", "/w/.git", "/wx/a"]),
            field in proptest::sample::select(vec!["path", "content", "old_string", "pattern", "offset", "glob", "x"]),
        ) {
            let name = WORKSPACE_TOOLS.get(pick).copied().unwrap_or("shell");
            let shaped = format!("{{\"path\":{path:?},\"{field}\":{raw:?},\"new_string\":\"n\",\"pattern\":{raw:?}}}");
            for text in [raw.as_str(), shaped.as_str()] {
                match parse_raw_call(name, text, WorkspaceDir::new("/w").as_ref()) {
                    Ok(call) => {
                        proptest::prop_assert_eq!(call.tool(), name);
                        let path = match &call {
                            WorkspaceCall::Read { path, .. }
                            | WorkspaceCall::Write { path, .. }
                            | WorkspaceCall::Edit { path, .. } => Some(path),
                            WorkspaceCall::List { path }
                            | WorkspaceCall::Glob { path, .. }
                            | WorkspaceCall::Grep { path, .. } => path.as_ref(),
                        };
                        if let Some(path) = path {
                            for component in path.as_path().components() {
                                let std::path::Component::Normal(name) = component else {
                                    return Err(proptest::test_runner::TestCaseError::fail(format!("{path:?}")));
                                };
                                proptest::prop_assert!(out_of_reach(name).is_none());
                            }
                        }
                    }
                    Err(error) => proptest::prop_assert!(!error.reason().is_empty()),
                }
            }
        }
    }
}
