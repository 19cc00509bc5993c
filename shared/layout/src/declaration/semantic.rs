//! Phase 3b: the rules across fields, checked on the typed declaration through the same
//! [`Layout`] that renders the host, so a default is never derived twice.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::{AgentDriver, AuthMode, Declaration, Issue, JsonPath, Reason, TlsMode, WebServer};
use crate::names::{self, parse_site_identity};
use crate::paths::{overlaps, protected_home_dir, Layout, Surface};
use crate::services::ANTHROPIC_API_HOST;

/// Adds an issue for every cross-field rule the declaration breaks.
pub(crate) fn check(decl: &Declaration, issues: &mut Vec<Issue>) {
    let root = JsonPath::default();
    let mut refuse = |path: &JsonPath, reason: Reason, message: String| {
        issues.push(Issue::new(path, reason, message));
    };

    // Sites: unique slugs, within the declared limit (hostnames: `hostnames`).
    let mut slugs = HashMap::new();
    for (index, site) in decl.sites.iter().enumerate() {
        let at = root.key("sites").index(index);
        if let Some(first) = slugs.insert(site.slug.as_str(), index) {
            refuse(
                &at.key("slug"),
                Reason::DuplicateSlug,
                format!("{:?} is already the slug of sites[{first}]", site.slug),
            );
        }
    }
    if let Some(max) = decl.limits.max_sites {
        if decl.sites.len() as u64 > max {
            refuse(
                &root.key("sites"),
                Reason::TooManySites,
                format!(
                    "declares {} sites; limits.max_sites is {max}",
                    decl.sites.len()
                ),
            );
        }
    }

    // Aliases serve a declared site under another name.
    for (host, slug) in &decl.serving.aliases {
        if !slugs.contains_key(slug.as_str()) {
            refuse(
                &root.key("serving").key("aliases").key(host),
                Reason::AliasUnknownSite,
                format!("targets {slug:?}, which is not a declared slug"),
            );
        }
    }

    // Groups: neither the engine's, the web server's nor the monitoring one may be one Atelier
    // creates.
    let service_group = names::service_group(&decl.instance);
    let monitoring = decl.monitoring.as_ref().map(|m| ("monitoring", &m.group));
    let groups = [("engine", &decl.engine.group), ("web", &decl.web.group)];
    for (key, group) in groups.into_iter().chain(monitoring) {
        let is_identity = parse_site_identity(group).is_some_and(|(inst, _)| inst == decl.instance);
        if *group == service_group || is_identity {
            refuse(
                &root.key(key).key("group"),
                Reason::GroupCollision,
                format!("{group:?} is a group the instance itself owns"),
            );
        }
    }

    // The agent.
    let agent_at = root.key("agent");
    if !decl.agent.bins.contains_key(&decl.agent.driver) {
        refuse(
            &agent_at.key("bins"),
            Reason::MissingAgentBin,
            format!(
                "names no binary for the driver {}",
                decl.agent.driver.as_str()
            ),
        );
    }
    let no_providers = decl
        .agent
        .provider_hosts
        .as_ref()
        .is_none_or(|hosts| hosts.is_empty());
    if decl.agent.driver != AgentDriver::ClaudeCode && no_providers {
        refuse(
            &agent_at.key("provider_hosts"),
            Reason::MissingProviderHosts,
            format!(
                "is required for the driver {}: a turn would have no model to reach",
                decl.agent.driver.as_str()
            ),
        );
    }

    for id in decl.secrets.keys() {
        if crate::paths::AGENT_HELD_KEYS.contains(&id.as_str()) {
            refuse(
                &root.key("secrets").key(id),
                Reason::AgentHeldCredential,
                "would be handed to the agent, which can read its own environment and files: \
                 declare the model's key as secrets.ANTHROPIC_API_KEY or secrets.OPENAI_API_KEY, \
                 which the turn door's gate adds to each relayed model request"
                    .to_owned(),
            );
        }
    }

    // A model URL names one of the model's declared hosts (the operator's list of where the
    // model may be), read off the same derivation the provisioner uses.
    let provider_hosts = Layout::new(decl).provider_hosts();
    for (key, url) in [
        ("anthropic_base_url", &decl.agent.anthropic_base_url),
        ("openai_base_url", &decl.agent.openai_base_url),
    ] {
        let Some(url) = url else { continue };
        let host = super::grammar::url_host(url);
        if !provider_hosts.iter().any(|h| h == host) {
            refuse(
                &agent_at.key(key),
                Reason::UnplannedProviderUrl,
                format!("names {host}, which is not in agent.provider_hosts, the hosts the model may be at"),
            );
        }
    }
    // An Anthropic model without a gateway is asked of Anthropic's own API.
    // (Claude Code's too, whenever its binary is declared: the relay routes it.)
    let anthropic_api_planned = provider_hosts.iter().any(|h| h == ANTHROPIC_API_HOST);
    let claude_code = decl.agent.bins.contains_key(&AgentDriver::ClaudeCode);
    if (decl.agent.anthropic_model.is_some() || claude_code)
        && decl.agent.anthropic_base_url.is_none()
        && !anthropic_api_planned
    {
        let (key, what) = if decl.agent.anthropic_model.is_some() {
            ("anthropic_model", "is asked of")
        } else {
            (
                "anthropic_base_url",
                "is absent, so Claude Code's model is asked of",
            )
        };
        refuse(
            &agent_at.key(key),
            Reason::UnplannedProviderUrl,
            format!("{what} {ANTHROPIC_API_HOST}, which is not in agent.provider_hosts, the hosts the model may be at"),
        );
    }

    // An OpenAI-compatible model is a base URL and a model id together: half of one names no
    // model a turn could ask for. pi has no default model, so it needs both; so does atelier,
    // unless it speaks to an Anthropic model.
    let has_url = decl.agent.openai_base_url.is_some();
    let has_model = decl.agent.openai_model.is_some();
    let needs_openai = match decl.agent.driver {
        AgentDriver::Pi => Some(
            "is required for the driver pi: pi has no default model and needs \
             agent.openai_base_url and agent.openai_model",
        ),
        AgentDriver::Atelier if decl.agent.anthropic_model.is_none() => Some(
            "is required for the driver atelier without agent.anthropic_model: its model is \
             agent.openai_base_url and agent.openai_model, or agent.anthropic_model",
        ),
        // Its own providers' keys would be the agent's (`OPENCODE_ENV`); a provisioned turn's
        // model is the gate's relay, which speaks the OpenAI-compatible one.
        AgentDriver::Opencode => Some(
            "is required for the driver opencode: its model is reached through the gate's model \
             relay, which adds the key, as agent.openai_base_url and agent.openai_model",
        ),
        AgentDriver::Atelier | AgentDriver::ClaudeCode => None,
    };
    for (key, declared, other, other_declared) in [
        ("openai_base_url", has_url, "openai_model", has_model),
        ("openai_model", has_model, "openai_base_url", has_url),
    ] {
        if declared {
            continue;
        }
        if let Some(why) = needs_openai {
            refuse(
                &agent_at.key(key),
                Reason::MissingOpenaiModel,
                why.to_owned(),
            );
        } else if other_declared {
            refuse(
                &agent_at.key(key),
                Reason::MissingOpenaiModel,
                format!(
                    "is required with agent.{other}: an OpenAI-compatible model is a base URL \
                     and a model id together"
                ),
            );
        }
    }

    // Preproduction auth.
    let auth = &decl.serving.preprod.auth;
    let auth_at = root.key("serving").key("preprod").key("auth");
    match auth.mode {
        AuthMode::Htpasswd => {
            if decl.serving.preprod.enabled && auth.users.is_empty() && auth.htpasswd.is_none() {
                refuse(
                    &auth_at.key("users"),
                    Reason::EmptyPasswordFile,
                    "is empty and no htpasswd file is declared: nobody could log in".to_owned(),
                );
            }
        }
        AuthMode::None => {
            if !auth.users.is_empty() {
                refuse(
                    &auth_at.key("users"),
                    Reason::UsersWithoutHtpasswd,
                    "declares users while auth.mode is none".to_owned(),
                );
            }
        }
    }
    let mut seen_users = BTreeSet::new();
    for (index, user) in auth.users.iter().enumerate() {
        if !seen_users.insert(user.name.as_str()) {
            refuse(
                &auth_at.key("users").index(index).key("name"),
                Reason::DuplicateAuthUser,
                format!("{:?} is declared twice", user.name),
            );
        }
    }

    // Production TLS.
    let tls = &decl.serving.prod.tls;
    let tls_at = root.key("serving").key("prod").key("tls");
    match tls.mode {
        TlsMode::Files => {
            if tls.certificate.is_none() || tls.key.is_none() {
                refuse(
                    &tls_at,
                    Reason::TlsFilesIncomplete,
                    "mode files needs both certificate and key".to_owned(),
                );
            }
        }
        TlsMode::Letsencrypt | TlsMode::None => {
            for (key, value) in [("certificate", &tls.certificate), ("key", &tls.key)] {
                if value.is_some() {
                    refuse(
                        &tls_at.key(key),
                        Reason::TlsPathsForbidden,
                        "is only for mode files".to_owned(),
                    );
                }
            }
            if tls.mode == TlsMode::Letsencrypt && tls.account_email.is_none() {
                refuse(
                    &tls_at.key("account_email"),
                    Reason::TlsEmailRequired,
                    "is required for mode letsencrypt".to_owned(),
                );
            }
        }
    }

    hostnames(decl, issues);
    vhost_files(decl, issues);
    chat(decl, issues);
    protected_home(decl, issues);
    trees(decl, issues);
}

/// Who answers a hostname: a site's production vhost (its domain), its preproduction vhost, or
/// a production vhost under an alias.
#[derive(Clone, Copy)]
enum HostClaim {
    Domain(usize),
    Preprod(usize),
    Alias,
}

/// Every hostname the web server answers for the sites is one vhost's: a site's domain, its
/// preproduction host while preproduction is served, an alias. A name two vhosts claim is
/// served by whichever the web server reads first, so a request could reach the wrong site or
/// the wrong surface (production in preproduction's place, without its basic auth).
fn hostnames(decl: &Declaration, issues: &mut Vec<Issue>) {
    let layout = Layout::new(decl);
    let root = JsonPath::default();
    let mut claims: Vec<(String, HostClaim)> = Vec::new();
    for (index, site) in decl.sites.iter().enumerate() {
        claims.push((site.domain.clone(), HostClaim::Domain(index)));
        if layout.renders_vhost(Surface::Preprod) {
            claims.push((layout.preprod_domain(site), HostClaim::Preprod(index)));
        }
    }
    for host in decl.serving.aliases.keys() {
        claims.push((host.clone(), HostClaim::Alias));
    }
    let describe = |claim: HostClaim| match claim {
        HostClaim::Domain(i) => format!("the domain of sites[{i}] ({:?})", decl.sites[i].slug),
        HostClaim::Preprod(i) => format!(
            "the preproduction host of sites[{i}] ({:?})",
            decl.sites[i].slug
        ),
        HostClaim::Alias => "an alias".to_owned(),
    };
    let mut first: HashMap<&str, HostClaim> = HashMap::new();
    for (host, claim) in &claims {
        let Some(&taken) = first.get(host.as_str()) else {
            first.insert(host, *claim);
            continue;
        };
        let sites = root.key("sites");
        let (at, reason, message) = match (*claim, taken) {
            (HostClaim::Domain(i), HostClaim::Domain(j)) => (
                sites.index(i).key("domain"),
                Reason::DuplicateDomain,
                format!("{host:?} is already the domain of sites[{j}]"),
            ),
            (HostClaim::Alias, HostClaim::Domain(_)) => (
                root.key("serving").key("aliases").key(host),
                Reason::AliasIsCanonical,
                "is already a site's canonical domain".to_owned(),
            ),
            (HostClaim::Domain(i), _) => (
                sites.index(i).key("domain"),
                Reason::HostCollision,
                format!("{host} is already {}", describe(taken)),
            ),
            // A preproduction host is the domain's, under serving.preprod.host_prefix.
            (HostClaim::Preprod(i), _) => (
                sites.index(i).key("domain"),
                Reason::HostCollision,
                format!(
                    "its preproduction host {host} is already {}",
                    describe(taken)
                ),
            ),
            (HostClaim::Alias, _) => (
                root.key("serving").key("aliases").key(host),
                Reason::HostCollision,
                format!("is already {}", describe(taken)),
            ),
        };
        issues.push(Issue::new(&at, reason, message));
    }
}

/// Each rendered vhost is a file of its own site's: site `shop`'s preproduction vhost and site
/// `shop-pre`'s production vhost have one name, and one render would write over the other.
fn vhost_files(decl: &Declaration, issues: &mut Vec<Issue>) {
    let layout = Layout::new(decl);
    let mut files: HashMap<PathBuf, (usize, Surface)> = HashMap::new();
    for (index, site) in decl.sites.iter().enumerate() {
        for surface in [Surface::Prod, Surface::Preprod] {
            if !layout.renders_vhost(surface) {
                continue;
            }
            let path = layout.site_vhost_path(&site.slug, surface);
            let Some(&(first, first_surface)) = files.get(&path) else {
                files.insert(path, (index, surface));
                continue;
            };
            let other = &decl.sites[first].slug;
            // One slug twice is refused as such.
            if *other == site.slug {
                continue;
            }
            let file = path.file_name().unwrap_or_default().to_string_lossy();
            issues.push(Issue::new(
                &JsonPath::default().key("sites").index(index).key("slug"),
                Reason::VhostCollision,
                format!(
                    "{:?}'s {} vhost {file} is also {other:?}'s (sites[{first}]) {} vhost: \
                     rename one of the two slugs",
                    site.slug,
                    surface_name(surface),
                    surface_name(first_surface),
                ),
            ));
        }
    }
}

fn surface_name(surface: Surface) -> &'static str {
    match surface {
        Surface::Prod => "production",
        Surface::Preprod => "preproduction",
    }
}

/// The declared trees the daemons reach: sited works in the webspaces, the workspaces, the
/// audit root and the state dir, reads its configuration (the gate its plans there too) and the
/// templates, and each runs from the binaries' folder. Their units hide the home folders whole
/// (`ProtectHome=yes`), so a tree below one would be missing to them.
fn protected_home(decl: &Declaration, issues: &mut Vec<Issue>) {
    let root = JsonPath::default();
    let paths = root.key("paths");
    let mut declared: Vec<(JsonPath, &PathBuf)> = [
        (root.key("webspace_base"), decl.webspace_base.as_ref()),
        (root.key("roots").key("sites"), decl.roots.sites.as_ref()),
        (root.key("roots").key("audit"), decl.roots.audit.as_ref()),
        (paths.key("state_base"), decl.paths.state_base.as_ref()),
        (paths.key("config_base"), decl.paths.config_base.as_ref()),
        (
            paths.key("templates_dir"),
            decl.paths.templates_dir.as_ref(),
        ),
        (paths.key("bin_dir"), decl.paths.bin_dir.as_ref()),
    ]
    .into_iter()
    .filter_map(|(at, path)| Some((at, path?)))
    .collect();
    for (index, site) in decl.sites.iter().enumerate() {
        if let Some(webspace) = &site.webspace {
            declared.push((root.key("sites").index(index).key("webspace"), webspace));
        }
    }
    for (at, path) in declared {
        if let Some(dir) = protected_home_dir(path) {
            issues.push(Issue::new(
                &at,
                Reason::ProtectedHomePath,
                format!(
                    "{} is in {dir}, which the daemons' units hide (ProtectHome=yes): sited and \
                     the gate could not reach it",
                    path.display(),
                ),
            ));
        }
    }
}

/// The chat block: the CMS's host is its own (no site answers it), its scheme matches how the
/// vhost serves it, and its vhost is one Atelier renders.
fn chat(decl: &Declaration, issues: &mut Vec<Issue>) {
    let Some(chat) = &decl.chat else { return };
    let at = JsonPath::default().key("chat");
    let layout = Layout::new(decl);
    let taken = decl.sites.iter().find_map(|site| {
        let preprod = decl
            .serving
            .preprod
            .enabled
            .then(|| layout.preprod_domain(site));
        (site.domain == chat.host || preprod.as_deref() == Some(chat.host.as_str()))
            .then(|| format!("site {:?}", site.slug))
    });
    let taken = taken.or_else(|| {
        decl.serving
            .aliases
            .contains_key(&chat.host)
            .then(|| "an alias".to_owned())
    });
    if let Some(owner) = taken {
        issues.push(Issue::new(
            &at.key("public_origin"),
            Reason::ChatHostCollision,
            format!("{} is already served for {owner}", chat.host),
        ));
    }
    if decl.serving.prod.tls.mode != TlsMode::None && chat.public_origin.starts_with("http://") {
        issues.push(Issue::new(
            &at.key("public_origin"),
            Reason::ChatOriginScheme,
            "must be https:// while serving.prod.tls serves over TLS: the CMS's vhost \
             redirects plain HTTP there"
                .to_owned(),
        ));
    }
    if decl.web.server != WebServer::Nginx {
        issues.push(Issue::new(
            &at,
            Reason::ChatWebServer,
            "needs web.server nginx: the CMS's vhost is rendered for nginx only".to_owned(),
        ));
    }
}

/// A tree that must be kept apart from others, and the key that placed it.
struct Tree {
    at: JsonPath,
    path: PathBuf,
    /// Returns true if and only if the operator wrote this path (a refusal names the key they
    /// can change; a derived tree is named only when nothing declared is involved).
    declared: bool,
}

fn tree(at: JsonPath, path: PathBuf, declared: bool) -> Tree {
    Tree { at, path, declared }
}

/// The trees: private roots, served trees and credential files.
fn trees(decl: &Declaration, issues: &mut Vec<Issue>) {
    let layout = Layout::new(decl);
    let root = JsonPath::default();
    let state_base = root.key("paths").key("state_base");
    let state_declared = decl.paths.state_base.is_some();

    let mut private = vec![
        tree(
            root.key("engine").key("private_dir"),
            decl.engine.private_dir.clone(),
            true,
        ),
        tree(
            root.key("roots").key("sites"),
            layout.sites_root(),
            decl.roots.sites.is_some(),
        ),
        tree(
            root.key("roots").key("audit"),
            layout.audit_root(),
            decl.roots.audit.is_some(),
        ),
        tree(state_base.clone(), layout.agents_root(), state_declared),
        // The doors' own root folder, which every door sees as `/`, beside the agents' homes.
        tree(state_base.clone(), layout.door_root(), state_declared),
        tree(state_base.clone(), layout.retired_dir(), state_declared),
        tree(
            root.key("paths").key("config_base"),
            layout.config_dir(),
            decl.paths.config_base.is_some(),
        ),
        tree(root.key("instance"), layout.runtime_dir(), false),
    ];
    if layout.uses_letsencrypt() {
        // certbot's webroot: root's, served to the ACME challenge.
        private.push(tree(state_base, layout.acme_webroot(), state_declared));
    }
    let base = tree(
        root.key("webspace_base"),
        layout.webspace_base(),
        decl.webspace_base.is_some(),
    );
    let webspaces: Vec<Tree> = decl
        .sites
        .iter()
        .enumerate()
        .map(|(index, site)| {
            let at = root.key("sites").index(index);
            match site.webspace {
                Some(_) => tree(at.key("webspace"), layout.webspace(site), true),
                None => tree(at.key("domain"), layout.webspace(site), false),
            }
        })
        .collect();

    for (i, a) in private.iter().enumerate() {
        for b in &private[i + 1..] {
            overlap(a, b, issues);
        }
        overlap(a, &base, issues);
        for webspace in &webspaces {
            overlap(a, webspace, issues);
        }
    }
    for (i, a) in webspaces.iter().enumerate() {
        for b in &webspaces[i + 1..] {
            overlap(a, b, issues);
        }
        // Inside the base is the default placement; equal to it or around it is not.
        if base.path.starts_with(&a.path) {
            issues.push(Issue::new(
                &a.at,
                Reason::WebspaceContainsBase,
                format!(
                    "{} equals or contains the webspace base {}",
                    a.path.display(),
                    base.path.display()
                ),
            ));
        }
    }

    // A credential file where a web server serves or a site identity reads is published.
    // Every site identity's primary group is the instance group, which reads both roots.
    let site_readable = [layout.sites_root(), layout.audit_root()];
    let exposing: Vec<&Path> = std::iter::once(base.path.as_path())
        .chain(webspaces.iter().map(|w| w.path.as_path()))
        .chain(site_readable.iter().map(PathBuf::as_path))
        .collect();
    for (at, path) in credential_files(decl, &layout) {
        if exposing.iter().any(|tree| path.starts_with(tree)) {
            issues.push(Issue::new(
                &at,
                Reason::ExposedCredential,
                format!(
                    "{} is inside a served or site-readable tree",
                    path.display()
                ),
            ));
        }
    }
}

/// Refuses two trees that are the same or nested, naming the declared one.
fn overlap(a: &Tree, b: &Tree, issues: &mut Vec<Issue>) {
    if overlaps(&a.path, &b.path) {
        let (named, other) = if b.declared || !a.declared {
            (b, a)
        } else {
            (a, b)
        };
        issues.push(Issue::new(
            &named.at,
            Reason::OverlappingRoots,
            format!(
                "{} overlaps {} (from {}); the two trees must be disjoint",
                named.path.display(),
                other.path.display(),
                describe(&other.at),
            ),
        ));
    }
}

/// Every credential file the declaration names, with its key.
fn credential_files(decl: &Declaration, layout: &Layout<'_>) -> Vec<(JsonPath, PathBuf)> {
    let root = JsonPath::default();
    let mut files = Vec::new();
    if let Some(key_path) = &decl.publication_api.key_path {
        files.push((
            root.key("publication_api").key("key_path"),
            key_path.clone(),
        ));
    }
    for (id, path) in &decl.secrets {
        files.push((root.key("secrets").key(id), path.clone()));
    }
    let auth_at = root.key("serving").key("preprod").key("auth");
    if decl.serving.preprod.auth.htpasswd.is_some() {
        files.push((auth_at.key("htpasswd"), layout.htpasswd_path()));
    }
    for (index, user) in decl.serving.preprod.auth.users.iter().enumerate() {
        files.push((
            auth_at.key("users").index(index).key("password_file"),
            user.password_file.clone(),
        ));
    }
    if let Some(chat) = &decl.chat {
        files.push((root.key("chat").key("master_key"), chat.master_key.clone()));
    }
    if let Some(key) = &decl.serving.prod.tls.key {
        files.push((
            root.key("serving").key("prod").key("tls").key("key"),
            key.clone(),
        ));
    }
    files
}

fn describe(at: &JsonPath) -> String {
    let rendered = at.render();
    if rendered.is_empty() {
        "the document".to_owned()
    } else {
        rendered
    }
}
