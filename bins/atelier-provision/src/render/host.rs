//! Host files beside the units: tmpfiles.d (the runtime tree), the polkit rule (stop and kill
//! of the instance's own runs), the turn door's system gitconfig and, with letsencrypt
//! certificates, certbot's deploy hook.

use atelier_layout::declaration::Site;
use atelier_layout::names::{self, Door};
use atelier_layout::paths::{mode_rule, Role};
use atelier_layout::services::PROVISION_BINARY;
use atelier_layout::{Layout, SiteOrdinal};

use super::template::{self, fill};
use super::{artifact, safe_path, RenderError};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

/// The run instance names PID 1 gives an `Accept=yes` connection: `nr-pid-uid` up to
/// systemd 257, `nr-cookie-pid_pidfdid-uid` or `nr-cookie-pid-uid` since 258.
pub const RUN_INSTANCE_PATTERN: &str = "[0-9]+-[0-9]+-[0-9]+(?:_[0-9]+-[0-9]+|-[0-9]+)?";

/// The turn door's system gitconfig body: only a bare repository asked for by name is used.
const TURN_GITCONFIG: &str =
    "# The turn door's system git configuration, bound over /etc/gitconfig: git inside a turn\n\
# never discovers a bare repository it was not pointed at.\n\
[safe]\n\tbareRepository = explicit\n";

/// Appends the tmpfiles.d file, the polkit rule, the turn gitconfig and the renewal hook.
pub(super) fn render(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    out: &mut Vec<Artifact>,
) -> Result<(), RenderError> {
    out.push(artifact(
        layout,
        layout.tmpfiles_path(),
        Role::TmpfilesFile,
        ArtifactKind::AgentUnits,
        CommentStyle::Hash,
        &tmpfiles(layout, sites)?,
    ));
    out.push(artifact(
        layout,
        layout.polkit_rule_path(),
        Role::PolkitRule,
        ArtifactKind::AgentAuthorization,
        CommentStyle::Slashes,
        &polkit_rule(layout, sites)?,
    ));
    out.push(artifact(
        layout,
        layout.turn_gitconfig_path(),
        Role::TurnGitconfig,
        ArtifactKind::AgentUnits,
        CommentStyle::Hash,
        TURN_GITCONFIG,
    ));
    // Each turn HOME's global git configuration: root's, the same directives.
    for &(k, _) in sites {
        if let Some(home) = layout.agent_home(k, Door::Turn) {
            out.push(artifact(
                layout,
                home.join(atelier_layout::paths::TURN_HOME_GITCONFIG),
                Role::TurnHomeGitconfig,
                ArtifactKind::AgentUnits,
                CommentStyle::Hash,
                TURN_GITCONFIG,
            ));
        }
    }
    if layout.uses_letsencrypt() {
        out.push(artifact(
            layout,
            layout.renewal_hook_path(),
            Role::RenewalHook,
            ArtifactKind::RenewalHook,
            CommentStyle::Hash,
            &renewal_hook(layout)?,
        ));
    }
    Ok(())
}

/// certbot's deploy hook: apply the declaration's copy again (a site waiting for its
/// certificate gets its TLS server), then test and reload the web server, which a renewal
/// needs even when nothing was rendered differently. The reload is tried whatever apply
/// answered, so a renewed certificate is served even while apply refuses for another reason.
fn renewal_hook(layout: &Layout<'_>) -> Result<String, RenderError> {
    let server = layout.declaration().web.server;
    let provision = safe_path(&layout.binary(PROVISION_BINARY))?;
    let declaration = safe_path(&layout.declaration_path())?;
    let configtest = crate::host::web_configtest_argv(server).join(" ");
    let unit = crate::host::web_unit(server);
    Ok(format!(
        "# certbot's deploy hook for Atelier instance {inst}: certbot runs it as root after\n\
         # `certbot renew` renews a certificate, and after `certbot certonly` obtains one when\n\
         # given as --deploy-hook. No \"#!\" line, since the stamp above must be the first:\n\
         # certbot runs hooks through a shell, and a shell runs a file it cannot execute as a\n\
         # shell script.\n\
         status=0\n\
         {provision} apply --declaration {declaration} || status=$?\n\
         {configtest} && systemctl try-reload-or-restart {unit} || status=$?\n\
         exit \"$status\"\n",
        inst = layout.instance()
    ))
}

fn tmpfiles_line(
    layout: &Layout<'_>,
    role: Role,
    path: &std::path::Path,
    k: Option<SiteOrdinal>,
) -> Result<String, RenderError> {
    let rule = mode_rule(role);
    Ok(format!(
        "d {} {:04o} {} {} -",
        safe_path(path)?,
        rule.mode,
        layout.principal_name(rule.owner, k),
        layout.principal_name(rule.group, k)
    ))
}

fn tmpfiles(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Result<String, RenderError> {
    let mut lines = vec![
        tmpfiles_line(layout, Role::RuntimeDir, &layout.runtime_dir(), None)?,
        tmpfiles_line(layout, Role::EgressRoot, &layout.egress_root(), None)?,
    ];
    for &(k, _) in sites {
        lines.push(tmpfiles_line(
            layout,
            Role::EgressSiteDir,
            &layout.egress_dir(k),
            Some(k),
        )?);
    }
    fill(template::TMPFILES, &[("LINES", lines.join("\n"))])
}

/// The anchored pattern of every run instance of the declared sites' doors, ordinals
/// enumerated: a prefix alone would also match another instance's units.
pub fn run_unit_pattern(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> String {
    let inst = layout.instance();
    let ordinals: Vec<String> = sites.iter().map(|(k, _)| k.to_string()).collect();
    let doors: Vec<&str> = Door::ALL.iter().map(|d| d.as_str()).collect();
    // The instance grammar is [a-z0-9-]: nothing in the prefix is a regex metacharacter.
    format!(
        "^{}({})-({})@{RUN_INSTANCE_PATTERN}\\.service$",
        names::site_unit_prefix(inst),
        ordinals.join("|"),
        doors.join("|")
    )
}

fn polkit_rule(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Result<String, RenderError> {
    // With no declared site the rule must match nothing at all.
    let pattern = if sites.is_empty() {
        "^(?!)$".to_owned()
    } else {
        run_unit_pattern(layout, sites)
    };
    fill(
        template::POLKIT_RULE,
        &[
            ("SERVICE_USER", layout.service_user()),
            ("UNIT_PATTERN", pattern),
        ],
    )
}
