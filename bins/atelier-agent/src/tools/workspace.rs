//! The workspace's file tools: `read`, `write`, `edit` (replace an exact span), `list`, `glob`
//! and `grep`, each through a [`Root`] held on the workspace, so no path leaves it and no link
//! is followed.
//!
//! On top of what the filesystem layer refuses (symlinks at any level, hard-linked files on
//! read, non-regular files, lexical escapes), a write or an edit also refuses a target with
//! more than one hard link: the write would leave the other name holding the old bytes, which
//! may be a file outside the workspace the agent was never meant to see change.

use std::ffi::OsStr;
use std::path::Path;

use atelier_fs::{tree, FileKind, FsError, Outcome, Root};
use atelier_llm::ToolDefinition;
use serde_json::{json, Value};

use super::args::{
    self, Glob, ToolPath, WorkspaceCall, WorkspaceDir, DEFAULT_READ_LINES, MAX_WRITE_BYTES,
};
use super::ignore::IgnoreRules;
use super::walk::{Flow, Walk};
use super::{ChangeKind, FileChange, ToolError, ToolFuture, ToolOutput, ToolSource};

/// The largest file `read` and `edit` open.
pub const MAX_READ_BYTES: u64 = 1024 * 1024; // 1 MiB

/// The most text one `read` returns; the rest is for a later call with an offset.
const MAX_READ_OUTPUT_BYTES: usize = 256 * 1024; // 256 KiB

/// The longest line `read` returns whole, in characters (minified files have huge ones).
const MAX_LINE_CHARS: usize = 4000;

/// The most entries `list` returns.
const MAX_LIST_ENTRIES: usize = 1000;

/// The most paths `glob` returns.
const MAX_GLOB_RESULTS: usize = 500;

/// The most matching lines `grep` returns.
const MAX_SEARCH_MATCHES: usize = 200;

/// The largest file `grep` reads; bigger ones are skipped and counted.
const MAX_SEARCH_FILE_BYTES: u64 = 1024 * 1024; // 1 MiB

/// The longest matching line `grep` quotes, in characters.
const MAX_MATCH_CHARS: usize = 300;

/// How far into a file `grep` looks for a NUL byte to tell binary from text.
const BINARY_SNIFF_BYTES: usize = 8192;

/// The permission bits of a file the agent creates: what the door's `UMask=0007` leaves of
/// an ordinary create, so the service user's group can read and write it as before.
const NEW_FILE_MODE: u32 = 0o660;

/// The permission bits of a directory the agent creates (plus the set-group-ID bit when the
/// workspace has it, see [`Workspace::dir_mode`]).
const NEW_DIR_MODE: u32 = 0o770;

/// The set-group-ID bit, which keeps a shared workspace's group on what is made inside it.
const SET_GROUP_ID: u32 = 0o2000;

/// The workspace, held open, and its file tools.
#[derive(Debug)]
pub struct Workspace {
    root: Root,
    /// Where the workspace is, for the absolute paths a model gives; without it every
    /// absolute path is refused.
    dir: Option<WorkspaceDir>,
}

// === impl Workspace ===

impl Workspace {
    /// The file tools over `root`, which is at `dir` on the host.
    pub fn new(root: Root, dir: Option<WorkspaceDir>) -> Workspace {
        Workspace { root, dir }
    }

    /// The file tools over the directory at `path` (its last component may not be a link).
    pub fn open(path: impl AsRef<Path>) -> Result<Workspace, FsError> {
        let root = Root::open(&path)?;
        Ok(Workspace::new(root, located(path.as_ref())))
    }

    /// The workspace held open.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The workspace tools as the model sees them, in [`args::WORKSPACE_TOOLS`] order.
    pub fn tool_definitions() -> Vec<ToolDefinition> {
        definitions()
    }

    /// Runs a parsed call.
    pub fn run(&self, call: &WorkspaceCall) -> Result<ToolOutput, ToolError> {
        match call {
            WorkspaceCall::Read {
                path,
                offset,
                limit,
            } => self.read(path, *offset, *limit),
            WorkspaceCall::Write { path, content } => self.write(path, content),
            WorkspaceCall::Edit {
                path,
                old,
                new,
                all,
            } => self.edit(path, old, new, *all),
            WorkspaceCall::List { path } => self.list(path.as_ref()),
            WorkspaceCall::Glob { pattern, path } => self.glob(pattern, path.as_ref()),
            WorkspaceCall::Grep { regex, path, glob } => {
                self.grep(regex, path.as_ref(), glob.as_ref())
            }
        }
    }

    /// Parses and runs a call of the workspace tool `name`.
    pub fn call_tool(&self, name: &str, arguments: &Value) -> Result<ToolOutput, ToolError> {
        self.run(&args::parse_call(name, arguments, self.dir.as_ref())?)
    }

    fn read(&self, path: &ToolPath, offset: usize, limit: usize) -> Result<ToolOutput, ToolError> {
        let text = self.read_text(path)?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let total = lines.len();
        if offset > total.max(1) {
            return Err(ToolError::invalid(
                args::READ,
                format!(
                    "offset {offset} is past the end of {} ({total} lines)",
                    path.shown()
                ),
            ));
        }
        let mut content = String::new();
        let mut end = offset - 1;
        let mut cut = 0usize;
        for line in lines.iter().skip(offset - 1).take(limit) {
            if !content.is_empty() && content.len() + line.len() > MAX_READ_OUTPUT_BYTES {
                break;
            }
            match line.char_indices().nth(MAX_LINE_CHARS) {
                Some((at, _)) => {
                    cut += 1;
                    content.push_str(&line[..at]);
                    content.push_str(" [… line cut]\n");
                }
                None => content.push_str(line),
            }
            end += 1;
        }
        let mut data = json!({
            "path": path.shown(),
            "total_lines": total,
            "start_line": offset,
            "end_line": end,
            "content": content,
        });
        if end < total {
            data["next_offset"] = json!(end + 1);
        }
        if cut > 0 {
            data["lines_cut"] = json!(cut);
        }
        Ok(ToolOutput::data(data))
    }

    fn write(&self, path: &ToolPath, content: &str) -> Result<ToolOutput, ToolError> {
        let existing = self.existing_file(path)?;
        if existing.is_none() {
            if let Some(parent) = path.rel().parent() {
                self.root
                    .create_dir_all(parent.as_path(), self.dir_mode()?)?;
            }
        }
        let mode = existing.unwrap_or(NEW_FILE_MODE);
        let outcome = self
            .root
            .write_atomic(path.as_path(), content.as_bytes(), mode)?;
        let status = match (existing, outcome) {
            (_, Outcome::Unchanged) => "unchanged",
            (None, Outcome::Changed) => "created",
            (Some(_), Outcome::Changed) => "modified",
        };
        let mut output = ToolOutput::data(json!({
            "path": path.shown(),
            "bytes": content.len(),
            "status": status,
        }));
        if outcome.is_changed() {
            output.changes.push(FileChange {
                path: path.shown(),
                kind: if existing.is_some() {
                    ChangeKind::Modified
                } else {
                    ChangeKind::Created
                },
            });
        }
        Ok(output)
    }

    fn edit(
        &self,
        path: &ToolPath,
        old: &str,
        new: &str,
        all: bool,
    ) -> Result<ToolOutput, ToolError> {
        let mode = self
            .existing_file(path)?
            .ok_or_else(|| ToolError::NotFound { path: path.shown() })?;
        let text = self.read_text(path)?;
        let count = text.matches(old).count();
        match count {
            0 => return Err(ToolError::NoMatch { path: path.shown() }),
            1 => {}
            _ if all => {}
            _ => {
                return Err(ToolError::Ambiguous {
                    path: path.shown(),
                    count,
                })
            }
        }
        let replaced = if all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        if replaced.len() > MAX_WRITE_BYTES {
            return Err(ToolError::TooLarge {
                what: format!("{} after the replacement", path.shown()),
                limit: MAX_WRITE_BYTES as u64,
            });
        }
        self.root
            .write_atomic(path.as_path(), replaced.as_bytes(), mode)?;
        Ok(ToolOutput {
            data: json!({"path": path.shown(), "replacements": count}),
            changes: vec![FileChange {
                path: path.shown(),
                kind: ChangeKind::Modified,
            }],
        })
    }

    fn list(&self, path: Option<&ToolPath>) -> Result<ToolOutput, ToolError> {
        let (entries, truncated) = self.with_dir(path, |dir, _| {
            let mut entries = Vec::new();
            for (name, kind) in tree::list_dir(dir, None)? {
                if args::out_of_reach(&name).is_some() {
                    continue;
                }
                if entries.len() == MAX_LIST_ENTRIES {
                    return Ok((entries, true));
                }
                let mut entry = json!({"name": name.to_string_lossy(), "kind": kind_word(kind)});
                if kind == FileKind::File {
                    if let Ok(meta) = dir.metadata(&name) {
                        entry["size"] = json!(meta.len);
                    }
                }
                entries.push(entry);
            }
            Ok((entries, false))
        })?;
        let mut data = json!({"path": shown_dir(path), "entries": entries});
        if truncated {
            data["truncated"] = json!(true);
        }
        Ok(ToolOutput::data(data))
    }

    fn glob(&self, pattern: &Glob, path: Option<&ToolPath>) -> Result<ToolOutput, ToolError> {
        let mut files = Vec::new();
        let mut more = false;
        let rules = IgnoreRules::read(&self.root);
        let walked = self.with_dir(path, |dir, prefix| {
            let mut walk = Walk::new(&rules, prefix);
            walk.files(dir, &mut |_, _, rel| {
                if pattern.matches_path(rel) {
                    if files.len() == MAX_GLOB_RESULTS {
                        more = true;
                        return Flow::Enough;
                    }
                    files.push(prefix.join(rel).to_string_lossy().into_owned());
                }
                Flow::More
            })?;
            Ok(Walked::of(walk))
        })?;
        let mut data =
            json!({"pattern": pattern.as_str(), "path": shown_dir(path), "files": files});
        walked.note(&mut data, more);
        Ok(ToolOutput::data(data))
    }

    fn grep(
        &self,
        regex: &regex::Regex,
        path: Option<&ToolPath>,
        glob: Option<&Glob>,
    ) -> Result<ToolOutput, ToolError> {
        let mut found = Found::default();
        let mut walked = Walked::default();
        let single = match path {
            Some(path) => match self.root.metadata(path.as_path())?.kind {
                FileKind::File => true,
                FileKind::Dir => false,
                FileKind::Symlink => return Err(ToolError::Symlink { path: path.shown() }),
                FileKind::Other => return Err(ToolError::NotRegularFile { path: path.shown() }),
            },
            None => false,
        };
        if let (true, Some(path)) = (single, path) {
            let bytes = self
                .root
                .read_limited(path.as_path(), MAX_SEARCH_FILE_BYTES)?;
            found.scan(regex, &path.shown(), &bytes);
        } else {
            let rules = IgnoreRules::read(&self.root);
            walked = self.with_dir(path, |dir, prefix| {
                let mut walk = Walk::new(&rules, prefix);
                walk.files(dir, &mut |dir: &Root, name: &OsStr, rel: &Path| {
                    if glob.is_some_and(|glob| !glob.matches_file(rel)) {
                        return Flow::More;
                    }
                    match dir.read_limited(name, MAX_SEARCH_FILE_BYTES) {
                        Ok(bytes) => found.scan(regex, &prefix.join(rel).to_string_lossy(), &bytes),
                        Err(_) => {
                            found.skipped += 1;
                            Flow::More
                        }
                    }
                })?;
                Ok(Walked::of(walk))
            })?;
        }
        let mut data = json!({
            "pattern": regex.as_str(),
            "matches": found.matches,
            "files_searched": found.files,
        });
        if found.skipped > 0 {
            data["files_skipped"] = json!(found.skipped);
        }
        walked.note(&mut data, found.full);
        Ok(ToolOutput::data(data))
    }

    /// Runs `f` on the directory `path` (the workspace itself for `None`), opened without
    /// following a link, and the prefix that turns a path relative to it into the workspace's.
    fn with_dir<T>(
        &self,
        path: Option<&ToolPath>,
        f: impl FnOnce(&Root, &Path) -> Result<T, ToolError>,
    ) -> Result<T, ToolError> {
        match path {
            Some(path) => f(&self.root.open_dir(path.as_path())?, path.as_path()),
            None => f(&self.root, Path::new("")),
        }
    }

    /// The file at `path` as UTF-8 text, at most [`MAX_READ_BYTES`].
    fn read_text(&self, path: &ToolPath) -> Result<String, ToolError> {
        let bytes = self.root.read_limited(path.as_path(), MAX_READ_BYTES)?;
        String::from_utf8(bytes).map_err(|_| ToolError::NotText { path: path.shown() })
    }

    /// The permission bits of the regular file at `path`, or `None` when nothing is there;
    /// a link, a hard-linked file or anything but a regular file is refused.
    fn existing_file(&self, path: &ToolPath) -> Result<Option<u32>, ToolError> {
        match self.root.metadata(path.as_path()) {
            Ok(meta) => match meta.kind {
                FileKind::File if meta.links > 1 => Err(ToolError::HardLink {
                    path: path.shown(),
                    links: meta.links,
                }),
                FileKind::File => Ok(Some(meta.mode & 0o777)),
                FileKind::Symlink => Err(ToolError::Symlink { path: path.shown() }),
                FileKind::Dir | FileKind::Other => {
                    Err(ToolError::NotRegularFile { path: path.shown() })
                }
            },
            Err(FsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The mode of a directory the agent creates: [`NEW_DIR_MODE`], with the set-group-ID bit
    /// exactly when the workspace has it. A new directory inherits that bit from its parent
    /// anyway; asking for the same keeps the filesystem layer from clearing it, and never asks
    /// for it where a unit forbids setting it.
    fn dir_mode(&self) -> Result<u32, ToolError> {
        let stat = rustix::fs::fstat(&self.root).map_err(|errno| ToolError::Failed {
            detail: format!("stat the workspace: {errno}"),
        })?;
        Ok(NEW_DIR_MODE | (stat.st_mode & SET_GROUP_ID))
    }
}

impl ToolSource for Workspace {
    fn definitions(&self) -> Vec<ToolDefinition> {
        definitions()
    }

    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolFuture<'a> {
        // Local file work is short and the turn does nothing else meanwhile, so it runs inline.
        Box::pin(std::future::ready(self.call_tool(name, arguments)))
    }
}

/// What a finished walk tells the model beside its results.
#[derive(Default)]
struct Walked {
    truncated: bool,
    ignored: Vec<String>,
}

impl Walked {
    fn of(walk: Walk<'_>) -> Walked {
        Walked {
            truncated: walk.truncated,
            ignored: walk.ignored,
        }
    }

    /// Adds `truncated` (when the walk or the caller's own limit, `full`, cut the answer
    /// short) and `ignored` (the directories the ignore file kept out) to `data`.
    fn note(self, data: &mut Value, full: bool) {
        if full || self.truncated {
            data["truncated"] = json!(true);
        }
        if !self.ignored.is_empty() {
            data["ignored"] = json!(self.ignored);
        }
    }
}

/// What a search found so far.
#[derive(Default)]
struct Found {
    matches: Vec<Value>,
    files: usize,
    skipped: usize,
    /// The match limit was reached.
    full: bool,
}

impl Found {
    /// Adds the matching lines of the file `shown`; binary files are skipped.
    fn scan(&mut self, regex: &regex::Regex, shown: &str, bytes: &[u8]) -> Flow {
        if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
            self.skipped += 1;
            return Flow::More;
        }
        self.files += 1;
        let text = String::from_utf8_lossy(bytes);
        for (index, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            if self.matches.len() == MAX_SEARCH_MATCHES {
                self.full = true;
                return Flow::Enough;
            }
            let quoted: String = line.chars().take(MAX_MATCH_CHARS).collect();
            self.matches
                .push(json!({"path": shown, "line": index + 1, "text": quoted}));
        }
        Flow::More
    }
}

/// Where the directory at `path` is on the host, for [`WorkspaceDir`]: its canonical path, or
/// `None` when it has none (then absolute paths are refused).
fn located(path: &Path) -> Option<WorkspaceDir> {
    std::fs::canonicalize(path).ok().and_then(WorkspaceDir::new)
}

fn kind_word(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Other => "other",
    }
}

fn shown_dir(path: Option<&ToolPath>) -> String {
    path.map_or_else(|| ".".to_owned(), ToolPath::shown)
}

/// The workspace tools as the model sees them.
fn definitions() -> Vec<ToolDefinition> {
    let tool = |name: &str, description: &str, input_schema: Value| ToolDefinition {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
    };
    let path = json!({"type": "string", "description": "Relative to the workspace, e.g. `index.html` or `assets/site.css` (an absolute path is accepted below the workspace only)."});
    let dir = json!({"type": "string", "description": "A directory relative to the workspace; omit for the workspace itself."});
    vec![
        tool(
            args::READ,
            &format!(
                "Read a UTF-8 text file. Returns up to {DEFAULT_READ_LINES} lines from `offset` \
                 (1-based), and `next_offset` when more follow. Files over {MAX_READ_BYTES} \
                 bytes are refused."
            ),
            json!({
                "type": "object",
                "properties": {
                    "path": path,
                    "offset": {"type": "integer", "minimum": 1, "description": "The first line to return (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines at most (default and maximum 2000)."},
                },
                "required": ["path"],
                "additionalProperties": false,
            }),
        ),
        tool(
            args::WRITE,
            &format!(
                "Create a file, or replace a whole file, with `content`. Missing directories \
                 are created. At most {MAX_WRITE_BYTES} bytes."
            ),
            json!({
                "type": "object",
                "properties": {"path": path, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": false,
            }),
        ),
        tool(
            args::EDIT,
            "Edit a file by replacing an exact span: `old_string` must occur exactly once \
             (include enough surrounding text to make it unique), unless `replace_all` is true.",
            json!({
                "type": "object",
                "properties": {
                    "path": path,
                    "old_string": {"type": "string", "description": "The exact text to replace, whitespace included."},
                    "new_string": {"type": "string", "description": "The text to put in its place."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false,
            }),
        ),
        tool(
            args::LIST,
            "List a directory: each entry's name, kind (file, dir, symlink, other) and, for \
             files, size in bytes.",
            json!({
                "type": "object",
                "properties": {"path": dir},
                "additionalProperties": false,
            }),
        ),
        tool(
            args::GLOB,
            "Find files by glob pattern, matched against their path relative to `path`: `*` \
             and `?` stay within one name, `**/` spans directories (e.g. `**/*.html`), \
             `{a,b}` offers alternatives. What the workspace's .gitignore names (installed \
             packages, build output) is left out unless `path` is inside it; `ignored` lists \
             the directories left out.",
            json!({
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": dir},
                "required": ["pattern"],
                "additionalProperties": false,
            }),
        ),
        tool(
            args::GREP,
            "Search file contents with a regular expression (Rust regex syntax), line by \
             line. Returns each matching line with its path and line number. `path` may name \
             a file or a directory; `glob` keeps only the files it matches (a pattern without \
             `/` matches file names at any depth). What the workspace's .gitignore names is \
             left out unless `path` is inside it; `ignored` lists the directories left out.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "path": {"type": "string", "description": "A file or directory relative to the workspace; omit for the workspace itself."},
                    "glob": {"type": "string"},
                    "ignore_case": {"type": "boolean"},
                },
                "required": ["pattern"],
                "additionalProperties": false,
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definitions_name_every_workspace_tool_with_an_object_schema() {
        let names: Vec<String> = definitions().into_iter().map(|d| d.name).collect();
        assert_eq!(names, args::WORKSPACE_TOOLS);
        for definition in definitions() {
            assert_eq!(
                definition.input_schema["type"], "object",
                "{}",
                definition.name
            );
            assert_eq!(definition.input_schema["additionalProperties"], false);
        }
    }

    #[test]
    fn a_new_directory_keeps_the_workspace_group_bit() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
        let workspace = Workspace::open(tmp.path()).unwrap();
        workspace
            .call_tool(args::WRITE, &json!({"path": "a/b/c.txt", "content": "c"}))
            .unwrap();
        let mode = |rel: &str| {
            std::fs::metadata(tmp.path().join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("a"), 0o2770);
        assert_eq!(mode("a/b"), 0o2770);
        assert_eq!(mode("a/b/c.txt"), NEW_FILE_MODE);
    }
}
