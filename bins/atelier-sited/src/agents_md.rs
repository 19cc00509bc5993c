//! The per-site agent brief `AGENTS.md`, and `CLAUDE.md` as a relative link to it.
//!
//! The original also fetched a best-effort schema summary from the Publication API at create
//! time. sited makes no network request at create: the brief always carries the documented
//! fallback note pointing the agent at `<api>/databases` and the MCP `get_schema` tool.

use atelier_fs::Root;

use crate::manifest::{SiteManifest, WORKSPACE_FILE_MODE};
use atelier_fs::tree;

pub use atelier_layout::workspace::{AGENTS_FILE, CLAUDE_FILE};

/// The Publication API's MCP tools, as the original brief lists them.
const MCP_TOOLS: [&str; 9] = [
    "list_databases",
    "get_schema",
    "search_records",
    "get_record",
    "count_records",
    "fulltext_search",
    "get_text_fragment",
    "get_av_fragment",
    "get_av_indexation_fragment",
];

/// The brief for a site.
pub fn render(manifest: &SiteManifest, api_url: &str) -> String {
    let api = api_url.trim_end_matches('/');
    let tools = MCP_TOOLS
        .iter()
        .map(|t| format!("- `{t}`"))
        .collect::<Vec<_>>()
        .join("\n");
    let build = &manifest.build;
    format!(
        "# {name}\n\
\n\
You are building a public website over published Dédalo data. Any framework is fine as long \
as the result is static files.\n\
\n\
- Site name: {name}\n\
- Slug: `{slug}`\n\
\n\
## Data source (READ-ONLY)\n\
\n\
- Base URL: {api}\n\
- Documentation: {api}/docs\n\
- OpenAPI: {api}/openapi.yaml\n\
- MCP tools:\n\
{tools}\n\
\n\
Keep data access in one module (for example `src/lib/dedalo.ts` or `src/lib/dedalo.js`).\n\
\n\
## Schema summary\n\
\n\
Not fetched when this site was created. List the databases at {api}/databases and use the \
MCP `get_schema` tool for their tables and fields.\n\
\n\
## Rules\n\
\n\
- Static output only: the build (`{build_cmd}`) writes the site into `{output}/`.\n\
- No secrets in the source: everything here is published.\n\
- Do not edit `site.json`, `AGENTS.md`, `CLAUDE.md` or anything under `.builder/`.\n\
- Fetch data client-side, paginated, and keep the page usable when the API fails.\n",
        name = manifest.name,
        slug = manifest.slug,
        build_cmd = build.build,
        output = build.output,
    )
}

/// Writes `AGENTS.md` and the relative link `CLAUDE.md -> AGENTS.md` into a new workspace.
pub fn write_brief(
    workspace: &Root,
    manifest: &SiteManifest,
    api_url: &str,
) -> Result<(), atelier_fs::FsError> {
    workspace.write_atomic(
        AGENTS_FILE,
        render(manifest, api_url).as_bytes(),
        WORKSPACE_FILE_MODE,
    )?;
    tree::symlink(workspace, CLAUDE_FILE, AGENTS_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{BuildSpec, Driver};

    #[test]
    fn the_brief_names_the_site_the_api_the_tools_and_the_rules() {
        let manifest = SiteManifest {
            slug: "museum".into(),
            name: "The Museum".into(),
            domain: "museum.example.org".into(),
            owner_user_id: 1,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            driver: Driver::ClaudeCode,
            template: "basic".into(),
            build: BuildSpec {
                install: String::new(),
                build: "sh build.sh".into(),
                output: "dist".into(),
            },
            published: None,
        };
        let brief = render(&manifest, "https://api.example.org/v2/");
        assert!(brief.starts_with("# The Museum\n"));
        for want in [
            "Slug: `museum`",
            "Base URL: https://api.example.org/v2\n",
            "https://api.example.org/v2/openapi.yaml",
            "`get_av_indexation_fragment`",
            "https://api.example.org/v2/databases",
            "`sh build.sh`",
            "`dist/`",
            "Do not edit `site.json`, `AGENTS.md`, `CLAUDE.md`",
        ] {
            assert!(brief.contains(want), "{want} missing from:\n{brief}");
        }
        for tool in MCP_TOOLS {
            assert!(brief.contains(&format!("- `{tool}`")), "{tool}");
        }
    }
}
