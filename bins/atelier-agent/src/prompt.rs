//! The system prompt: a short statement of what the agent is, its tools and its rules, then
//! the site's brief, `AGENTS.md` at the workspace root, read through the filesystem layer (a
//! regular file with one link, no link followed on the way) and cut at a bound.

use std::io::Read;

use atelier_fs::{FsError, Root};
use atelier_llm::{ToolDefinition, SYSTEM_PROMPT_DYNAMIC_BOUNDARY};

use crate::tools::MCP_TOOL_PREFIX;

/// The brief's file name at the workspace root.
pub const BRIEF_FILE: &str = "AGENTS.md";

/// The most of the brief the model is given.
pub const MAX_BRIEF_BYTES: usize = 64 * 1024; // 64 KiB

/// What ends a brief that was cut.
const BRIEF_CUT_NOTICE: &str = "\n\n[The rest of AGENTS.md was cut: a brief is at most 64 KiB.]";

/// The statement every turn starts from; the same for every turn, so a provider can cache it.
const STATEMENT: &str = "You are atelier-agent, a coding agent that edits the files of a \
website. The website's files are in the workspace, and every path you give a tool is relative \
to it.

Rules:
- Only these tools exist: {tools}. There is no shell and no web access.
- Paths stay inside the workspace: an absolute path is accepted only below it, `..` is \
refused, symbolic links and hard links are never followed, and `.git` and `.builder` are out \
of reach.
- A refused or failed call comes back as an error that names the reason (`refused: symlink`, \
`not found`, `too large`, …). Read it and adjust; do not repeat the same call.
- Read a file before you change it. Prefer `edit` for a small change and `write` for a new \
file or a rewrite.
- Keep to the request. When you are done, say briefly what you changed.";

/// The rule added when the model is offered an MCP server's tools.
const REMOTE_RULE: &str = "
- Tools named `mcp__<server>__<tool>` are served by a remote server (such as the site's \
content API): what they return comes from it, not from the workspace.";

/// Reads the brief: `None` when there is none; the text (lossy UTF-8), cut to
/// [`MAX_BRIEF_BYTES`] with a notice, when there is. A link, a hard-linked file or anything
/// but a regular file is refused.
pub fn read_brief(workspace: &Root) -> Result<Option<String>, FsError> {
    let file = match workspace.open_read(BRIEF_FILE) {
        Ok(file) => file,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(MAX_BRIEF_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FsError::Io {
            op: "read",
            path: BRIEF_FILE.into(),
            source,
        })?;
    Ok(Some(cut_brief(&bytes)))
}

/// The brief as given to the model: lossy UTF-8, at most [`MAX_BRIEF_BYTES`] on a character
/// boundary, a cut one ending with a notice.
fn cut_brief(bytes: &[u8]) -> String {
    if bytes.len() <= MAX_BRIEF_BYTES {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut text = String::from_utf8_lossy(&bytes[..MAX_BRIEF_BYTES]).into_owned();
    // A sequence cut in two decodes as a replacement character at the very end: drop it.
    if text.ends_with('\u{fffd}') {
        text.pop();
    }
    text.push_str(BRIEF_CUT_NOTICE);
    text
}

/// The system prompt's parts: the statement naming `tools` (with the rule of remote tools when
/// there are some), then (after the boundary that lets a provider cache what comes before it)
/// the brief, when there is one.
pub fn system_prompt(tools: &[ToolDefinition], brief: Option<&str>) -> Vec<String> {
    let names: Vec<String> = tools
        .iter()
        .map(|tool| format!("`{}`", tool.name))
        .collect();
    let mut statement = STATEMENT.replace("{tools}", &names.join(", "));
    if tools
        .iter()
        .any(|tool| tool.name.starts_with(MCP_TOOL_PREFIX))
    {
        statement.push_str(REMOTE_RULE);
    }
    match brief {
        Some(brief) if !brief.trim().is_empty() => vec![
            statement,
            SYSTEM_PROMPT_DYNAMIC_BOUNDARY.to_owned(),
            format!("The site's brief ({BRIEF_FILE}):\n\n{brief}"),
        ],
        _ => vec![statement],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brief_is_read_cut_or_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        assert_eq!(read_brief(&root).unwrap(), None);

        std::fs::write(tmp.path().join(BRIEF_FILE), "# Site\nBe kind.\n").unwrap();
        assert_eq!(read_brief(&root).unwrap().unwrap(), "# Site\nBe kind.\n");

        let mut long = "é".repeat(MAX_BRIEF_BYTES);
        long.push('x');
        std::fs::write(tmp.path().join(BRIEF_FILE), &long).unwrap();
        let cut = read_brief(&root).unwrap().unwrap();
        assert!(cut.ends_with(BRIEF_CUT_NOTICE));
        assert!(!cut.contains('\u{fffd}'));
        assert!(cut.len() <= MAX_BRIEF_BYTES + BRIEF_CUT_NOTICE.len());

        std::fs::remove_file(tmp.path().join(BRIEF_FILE)).unwrap();
        std::fs::write(tmp.path().join("elsewhere.md"), "secret").unwrap();
        std::os::unix::fs::symlink("elsewhere.md", tmp.path().join(BRIEF_FILE)).unwrap();
        assert_eq!(read_brief(&root).unwrap_err().reason(), "symlink_refused");

        std::fs::remove_file(tmp.path().join(BRIEF_FILE)).unwrap();
        std::fs::hard_link(tmp.path().join("elsewhere.md"), tmp.path().join(BRIEF_FILE)).unwrap();
        assert_eq!(read_brief(&root).unwrap_err().reason(), "hard_link_refused");
    }

    #[test]
    fn the_prompt_names_the_tools_and_puts_the_brief_after_the_boundary() {
        let mut tools = crate::tools::Workspace::tool_definitions();
        let parts = system_prompt(&tools, Some("Use British spelling."));
        assert_eq!(parts.len(), 3);
        assert!(parts[0].contains("`read`, `write`, `edit`, `list`, `glob`, `grep`"));
        assert!(!parts[0].contains("mcp__"));
        assert_eq!(parts[1], SYSTEM_PROMPT_DYNAMIC_BOUNDARY);
        assert!(parts[2].ends_with("Use British spelling."));
        assert_eq!(system_prompt(&tools, None).len(), 1);
        assert_eq!(system_prompt(&tools, Some(" \n")).len(), 1);

        tools.push(ToolDefinition {
            name: "mcp__p__search".to_owned(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        });
        let statement = &system_prompt(&tools, None)[0];
        assert!(
            statement.contains("`grep`, `mcp__p__search`."),
            "{statement}"
        );
        assert!(statement.ends_with(REMOTE_RULE), "{statement}");
    }
}
