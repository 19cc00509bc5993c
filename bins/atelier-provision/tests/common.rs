//! Shared by the render tests: the committed example declaration, rendered with fixed facts.

use std::path::{Path, PathBuf};

use atelier_layout::{Declaration, Layout, SiteOrdinal};
use atelier_provision::artifact::Artifact;
use atelier_provision::render::{render_all, RenderFacts};

/// The facts every committed example is rendered with: Debian 12's PID 1.
pub const FACTS: RenderFacts = RenderFacts {
    systemd_version: 252,
};

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The committed example declaration's text.
pub fn example_text() -> String {
    std::fs::read_to_string(repo_root().join("deploy/examples/instance.json")).unwrap()
}

/// The example declaration served by Apache instead of nginx.
pub fn apache_text() -> String {
    let text = without_chat(&example_text());
    let apache = text.replace("\"server\": \"nginx\"", "\"server\": \"apache\"");
    assert_ne!(text, apache, "the example names nginx as its web server");
    apache
}

/// The example declaration without its chat block (whose CMS vhost is rendered for nginx
/// only), in the example's own formatting.
pub fn without_chat(text: &str) -> String {
    let start = text
        .find("  \"chat\": {")
        .expect("the example declares a chat block");
    let end = start + text[start..].find("\n  },\n").expect("the chat block ends") + 5;
    text[..start].to_owned() + &text[end..]
}

/// Renders a declaration's text with ordinals 1, 2, … in declaration order.
pub fn render_text(text: &str) -> Vec<Artifact> {
    let decl = Declaration::parse(text).unwrap();
    render_decl(&decl)
}

/// Renders a parsed declaration with ordinals 1, 2, … in declaration order.
pub fn render_decl(decl: &Declaration) -> Vec<Artifact> {
    let layout = Layout::new(decl);
    let sites: Vec<_> = decl
        .sites
        .iter()
        .enumerate()
        .map(|(i, site)| (SiteOrdinal::new(i as u64 + 1).unwrap(), site))
        .collect();
    render_all(decl, &layout, &sites, &FACTS).unwrap()
}

/// Where an artifact lands under a review folder: its absolute path without the leading `/`.
pub fn relative(artifact: &Artifact) -> PathBuf {
    artifact.path.strip_prefix("/").unwrap().to_owned()
}

/// The example declaration with `paths` moved under `dir`: units into `dir/units`, binaries
/// from `dir/bin` (so `systemd-analyze verify` finds executables), vhosts into `dir/vhosts`.
pub fn relocated_text(text: &str, dir: &Path) -> String {
    let dir = dir.display();
    let paths = format!(
        "\"paths\": {{ \"bin_dir\": \"{dir}/bin\", \"unit_dir\": \"{dir}/units\", \
         \"vhost_dir\": \"{dir}/vhosts\", \"vhost_enabled_dir\": \"{dir}/vhosts\" }},\n  \
         \"webspace_base\":"
    );
    let out = text.replacen("\"webspace_base\":", &paths, 1);
    assert_ne!(out, text, "the example declares webspace_base");
    out
}
