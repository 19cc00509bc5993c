//! The inside of a site's workspace (`<sites root>/<slug>/`) and of the sites root: the names
//! and modes sited gives what it writes there. The tree is shared with the site's identity
//! through the instance group, so directories are setgid and group-writable, files
//! group-writable; sited's own state (`.builder`) is traverse-only for the group.

use std::path::{Path, PathBuf};

/// The site manifest.
pub const MANIFEST_FILE: &str = "site.json";
/// The agent brief.
pub const AGENTS_FILE: &str = "AGENTS.md";
/// The link Claude Code reads, pointing at [`AGENTS_FILE`].
pub const CLAUDE_FILE: &str = "CLAUDE.md";
/// sited's own state inside a workspace.
pub const BUILDER_DIR: &str = ".builder";
/// The workspace's repository metadata: hidden from the turn, read-only to the build.
pub const REPOSITORY_DIR: &str = ".git";
/// The session logs, below a workspace.
pub const SESSIONS_DIR: &str = ".builder/sessions";
/// `<sites root>/.driver_records/<slug>.json`: which agent a site's sessions use
/// ([`driver_record`]). Beside it, `<slug>.creating` marks a site whose create is not answered
/// yet ([`create_mark`]; sited removes such a site at its next boot).
pub const DRIVER_RECORDS_DIR: &str = ".driver_records";
/// How a create's mark is named after its slug.
const CREATE_MARK_SUFFIX: &str = ".creating";
/// `<sites root>/.deleted-<slug>-<n>`: a deleted workspace between its rename off the slug and
/// its removal; no slug starts with a dot, so nothing reads it as a site.
pub const DELETED_WORKSPACE_PREFIX: &str = ".deleted-";

/// The name a deleted workspace of `slug` is renamed to, `unique` telling deletes apart.
pub fn deleted_workspace_name(slug: &str, unique: u128) -> String {
    format!("{DELETED_WORKSPACE_PREFIX}{slug}-{unique}")
}

/// Whether `name` in the sites root is a deleted workspace's.
pub fn is_deleted_workspace(name: &str) -> bool {
    name.starts_with(DELETED_WORKSPACE_PREFIX)
}

/// Site `slug`'s driver record, below the sites root.
pub fn driver_record(slug: &str) -> PathBuf {
    Path::new(DRIVER_RECORDS_DIR).join(format!("{slug}.json"))
}

/// The mark of site `slug`'s create under way, below the sites root.
pub fn create_mark(slug: &str) -> PathBuf {
    Path::new(DRIVER_RECORDS_DIR).join(format!("{slug}{CREATE_MARK_SUFFIX}"))
}

/// The slug whose create `name`, an entry of [`DRIVER_RECORDS_DIR`], marks, if it is a mark.
pub fn marked_create(name: &str) -> Option<&str> {
    name.strip_suffix(CREATE_MARK_SUFFIX)
}

/// Claude Code's MCP configuration for one turn (it may carry the Publication API key under
/// `none`, so it exists only while the turn runs).
pub const MCP_CONFIG_FILE: &str = ".builder/mcp.json";
/// A planned file the agent reads during its turn (the MCP configuration, a brief).
pub const TURN_FILE_MODE: u32 = 0o640;

/// Every directory sited creates in a workspace: setgid (inherited), group-shared.
pub const WORKSPACE_DIR_MODE: u32 = 0o2770;
/// Every file sited writes into a workspace.
pub const WORKSPACE_FILE_MODE: u32 = 0o660;
/// `.builder`: the group may traverse, not list or write.
pub const BUILDER_DIR_MODE: u32 = 0o710;
/// Directories only sited reads: session logs, driver records.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Files only sited reads.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
