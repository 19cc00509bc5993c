//! The renderers: one validated declaration, its sites' ordinals and a few host facts become
//! every host artifact, stamped, in a deterministic order. Pure: nothing here reads or writes
//! the host.
//!
//! Parts: [`template`] (the `@NAME@` filler over the templates in `units/`, `tmpfiles/`,
//! `polkit/`), [`units`] (sited, doors, gate), [`host`] (tmpfiles.d, polkit rule, turn
//! gitconfig), [`config`] (env file, `sites.json`, engine fragment, gate plans), [`vhosts`]
//! (nginx and Apache), [`chat`] (the CMS's vhost with its chat runtime).

use std::collections::BTreeSet;
use std::path::Path;

use atelier_layout::declaration::Site;
use atelier_layout::paths::{mode_rule, Role};
use atelier_layout::{Declaration, Layout, SiteOrdinal};

use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

pub mod chat;
pub mod config;
pub mod host;
pub mod template;
pub mod units;
pub mod vhosts;

pub use atelier_layout::paths::{PRIVATE_PIDS_SINCE, SYSTEMD_FLOOR};

/// Facts read off the host that the artifacts depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderFacts {
    /// PID 1's version (`systemctl --version`, first line).
    pub systemd_version: u32,
}

/// Why nothing was rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// PID 1 is too old for the door units' confinement.
    #[error("systemd {found} is older than {floor}, the oldest that confines a door run")]
    SystemdTooOld {
        /// The version found.
        found: u32,
        /// The oldest accepted.
        floor: u32,
    },
    /// An ordinal was given for a slug the declaration does not hold.
    #[error("site {slug:?} has an ordinal but is not declared")]
    UndeclaredSite {
        /// The slug.
        slug: String,
    },
    /// A declared site was given no ordinal.
    #[error("declared site {slug:?} has no allocated ordinal")]
    UnallocatedSite {
        /// The slug.
        slug: String,
    },
    /// Two sites were given one ordinal, or one site two.
    #[error("ordinal {ordinal} or site {slug:?} is given twice")]
    DuplicateSite {
        /// The repeated ordinal.
        ordinal: SiteOrdinal,
        /// The site it was given with.
        slug: String,
    },
    /// A value cannot be written into its file format safely.
    #[error("{what} cannot be rendered: {why}")]
    UnsafeValue {
        /// Which value (a key or a path, never a credential).
        what: String,
        /// The rule it breaks.
        why: &'static str,
    },
    /// A template names a placeholder the renderer does not fill.
    #[error("template {template} has no value for @{name}@")]
    UnfilledPlaceholder {
        /// The template's name.
        template: &'static str,
        /// The placeholder.
        name: String,
    },
}

/// Renders every artifact of the instance, sorted by path.
///
/// `sites` pairs every declared site with its allocated ordinal (the ledger's answer); a
/// declared site without one, an ordinal for an undeclared site, or a repeated ordinal is
/// refused, as is a PID 1 older than [`SYSTEMD_FLOOR`].
pub fn render_all(
    decl: &Declaration,
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    facts: &RenderFacts,
) -> Result<Vec<Artifact>, RenderError> {
    if facts.systemd_version < SYSTEMD_FLOOR {
        return Err(RenderError::SystemdTooOld {
            found: facts.systemd_version,
            floor: SYSTEMD_FLOOR,
        });
    }
    let sites = check_sites(decl, sites)?;
    let mut out = Vec::new();
    units::render(layout, &sites, facts, &mut out)?;
    host::render(layout, &sites, &mut out)?;
    config::render(layout, &sites, &mut out)?;
    vhosts::render(layout, &sites, &mut out)?;
    chat::render(layout, &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The sites, checked against the declaration and sorted by ordinal.
fn check_sites<'s>(
    decl: &Declaration,
    sites: &[(SiteOrdinal, &'s Site)],
) -> Result<Vec<(SiteOrdinal, &'s Site)>, RenderError> {
    let mut ordinals = BTreeSet::new();
    let mut slugs = BTreeSet::new();
    for &(k, site) in sites {
        if !decl.sites.iter().any(|declared| declared == site) {
            return Err(RenderError::UndeclaredSite {
                slug: site.slug.clone(),
            });
        }
        if !ordinals.insert(k) || !slugs.insert(site.slug.as_str()) {
            return Err(RenderError::DuplicateSite {
                ordinal: k,
                slug: site.slug.clone(),
            });
        }
    }
    if let Some(missing) = decl.sites.iter().find(|s| !slugs.contains(s.slug.as_str())) {
        return Err(RenderError::UnallocatedSite {
            slug: missing.slug.clone(),
        });
    }
    let mut sorted = sites.to_vec();
    sorted.sort_by_key(|&(k, _)| k);
    Ok(sorted)
}

/// An artifact whose owner, group and mode come from the mode matrix's row for `role`.
fn artifact(
    layout: &Layout<'_>,
    path: impl AsRef<Path>,
    role: Role,
    kind: ArtifactKind,
    style: CommentStyle,
    body: &str,
) -> Artifact {
    let rule = mode_rule(role);
    let owner = layout.principal_name(rule.owner, None);
    let group = layout.principal_name(rule.group, None);
    Artifact::new(
        path.as_ref(),
        layout.instance().as_str(),
        kind,
        style,
        (&owner, &group, rule.mode),
        body,
    )
}

/// A path as text fit for a unit, tmpfiles.d or a vhost: no whitespace, quote, backslash,
/// `%`, `$`, `@`, `;`, brace or control character (validation refused them in the declaration;
/// this holds every renderer to it again).
fn safe_path(path: &Path) -> Result<String, RenderError> {
    let text = path.to_str().ok_or_else(|| RenderError::UnsafeValue {
        what: path.to_string_lossy().into_owned(),
        why: "a path must be UTF-8",
    })?;
    let bad = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '"' | '\'' | '\\' | '%' | '$' | '@' | ';' | '{' | '}' | '`'
            )
    };
    if !text.starts_with('/') || text.chars().any(bad) {
        return Err(RenderError::UnsafeValue {
            what: text.to_owned(),
            why: "a rendered path must be absolute, without whitespace, quotes, '%', '$', '@', ';', braces or control characters",
        });
    }
    Ok(text.to_owned())
}

/// An origin as text fit for a unit's `Environment=` or a `proxy_pass`: the declaration's
/// grammars allow only `http(s)://`, host characters, `:`, digits and IPv6 brackets; held again
/// wherever one is rendered.
fn safe_origin(value: &str) -> Result<String, RenderError> {
    let ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '/' | '.' | '-' | '[' | ']'));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(RenderError::UnsafeValue {
            what: format!("origin {value:?}"),
            why: "an origin is a scheme, a host and a port, nothing else",
        })
    }
}

#[cfg(test)]
mod tests;
