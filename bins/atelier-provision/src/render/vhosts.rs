//! The web server's virtual hosts: per site, production at its domain (and its aliases) and,
//! when enabled, preproduction at `<prefix>.<domain>`. Each serves through the surface's
//! release symlink, denies dotfiles, and preproduction asks for basic auth when declared.

use std::fmt::Write as _;

use atelier_layout::declaration::{AuthMode, Site, TlsMode, WebServer};
use atelier_layout::names;
use atelier_layout::paths::{Role, Surface};
use atelier_layout::{Layout, SiteOrdinal};

use super::{artifact, safe_path, RenderError};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

/// Where certbot keeps a domain's live certificate.
pub const LETSENCRYPT_LIVE: &str = "/etc/letsencrypt/live";

/// Appends every vhost of the declared web server.
pub(super) fn render(
    layout: &Layout<'_>,
    sites: &[(SiteOrdinal, &Site)],
    out: &mut Vec<Artifact>,
) -> Result<(), RenderError> {
    let decl = layout.declaration();
    let inst = layout.instance();
    let kind = match decl.web.server {
        WebServer::Nginx => ArtifactKind::NginxVhost,
        WebServer::Apache => ArtifactKind::ApacheVhost,
    };
    for &(_, site) in sites {
        let site_view = SiteView::new(layout, site)?;
        let prod = match decl.web.server {
            WebServer::Nginx => nginx_prod(&site_view),
            WebServer::Apache => apache_prod(&site_view),
        };
        out.push(artifact(
            layout,
            layout
                .vhost_dir()
                .join(names::prod_vhost_file(inst, &site.slug)),
            Role::Vhost,
            kind,
            CommentStyle::Hash,
            &prod,
        ));
        if decl.serving.preprod.enabled {
            let pre = match decl.web.server {
                WebServer::Nginx => nginx_preprod(&site_view),
                WebServer::Apache => apache_preprod(&site_view),
            };
            out.push(artifact(
                layout,
                layout
                    .vhost_dir()
                    .join(names::preprod_vhost_file(inst, &site.slug)),
                Role::Vhost,
                kind,
                CommentStyle::Hash,
                &pre,
            ));
        }
    }
    Ok(())
}

/// Everything a vhost says about one site, checked once.
struct SiteView {
    instance: String,
    slug: String,
    domain: String,
    preprod_domain: String,
    aliases: Vec<String>,
    webspace: String,
    prod_root: String,
    preprod_root: String,
    tls: Tls,
    auth: Option<(String, String)>,
}

enum Tls {
    Letsencrypt { account: String },
    Files { certificate: String, key: String },
    None,
}

impl SiteView {
    fn new(layout: &Layout<'_>, site: &Site) -> Result<Self, RenderError> {
        let decl = layout.declaration();
        let tls_decl = &decl.serving.prod.tls;
        let tls = match tls_decl.mode {
            TlsMode::Letsencrypt => Tls::Letsencrypt {
                account: tls_decl.account_email.clone().unwrap_or_default(),
            },
            TlsMode::Files => match (&tls_decl.certificate, &tls_decl.key) {
                (Some(certificate), Some(key)) => Tls::Files {
                    certificate: safe_path(certificate)?,
                    key: safe_path(key)?,
                },
                _ => Tls::None,
            },
            TlsMode::None => Tls::None,
        };
        let auth_decl = &decl.serving.preprod.auth;
        let auth = match auth_decl.mode {
            AuthMode::Htpasswd => Some((
                realm(&auth_decl.realm)?,
                safe_path(&layout.htpasswd_path())?,
            )),
            AuthMode::None => None,
        };
        Ok(Self {
            instance: layout.instance().to_string(),
            slug: site.slug.clone(),
            domain: site.domain.clone(),
            preprod_domain: layout.preprod_domain(site),
            aliases: decl
                .serving
                .aliases
                .iter()
                .filter(|(_, slug)| **slug == site.slug)
                .map(|(alias, _)| alias.clone())
                .collect(),
            webspace: safe_path(&layout.webspace(site))?,
            prod_root: safe_path(&layout.served_link(site, Surface::Prod))?,
            preprod_root: safe_path(&layout.served_link(site, Surface::Preprod))?,
            tls,
            auth,
        })
    }

    fn prod_scheme(&self) -> &'static str {
        match self.tls {
            Tls::None => "http",
            Tls::Letsencrypt { .. } | Tls::Files { .. } => "https",
        }
    }

    fn header(&self, surface: &str, host: &str) -> String {
        format!(
            "# {surface} of site {slug} (instance {inst}) at {host}.\n\
             # Rendered by atelier-provision from the declaration; edit that, not this file.\n",
            slug = self.slug,
            inst = self.instance,
        )
    }
}

/// The realm grammar forbids quotes and backslashes already; held again where it is quoted.
fn realm(realm: &str) -> Result<String, RenderError> {
    if realm
        .chars()
        .any(|c| c.is_control() || matches!(c, '"' | '\\' | '$' | '{' | '}' | ';'))
    {
        return Err(RenderError::UnsafeValue {
            what: "serving.preprod.auth.realm".to_owned(),
            why: "a realm may not hold quotes, backslashes, '$', braces, ';' or control characters",
        });
    }
    Ok(realm.to_owned())
}

/// The serving body shared by nginx servers: the release root, no stale cache, no dotfiles.
fn nginx_serving(out: &mut String, root: &str) {
    write!(
        out,
        "    root \"{root}\";\n\
         \x20   index index.html;\n\
         \x20   # The root is the release symlink sited flips by rename(2): resolve it on every\n\
         \x20   # request, and follow a symlink on the way only if it and its target have one\n\
         \x20   # owner. No request path starts with $realpath_root, so the whole path is checked.\n\
         \x20   open_file_cache off;\n\
         \x20   disable_symlinks if_not_owner from=$realpath_root;\n\
         \x20   location ~ \"/\\.(?!well-known/)\" {{\n\
         \x20       deny all;\n\
         \x20   }}\n\
         \x20   location / {{\n\
         \x20       try_files $uri $uri/ =404;\n\
         \x20   }}\n"
    )
    .ok();
}

fn nginx_prod(site: &SiteView) -> String {
    let domain = &site.domain;
    let mut out = site.header("Production", domain);
    match &site.tls {
        Tls::Letsencrypt { account } => {
            writeln!(out, "# Certificates: ACME account {account}.").ok();
        }
        Tls::Files { .. } | Tls::None => {}
    }
    let scheme = site.prod_scheme();
    match &site.tls {
        Tls::None => {
            write!(
                out,
                "server {{\n\
                 \x20   listen 80;\n\
                 \x20   listen [::]:80;\n\
                 \x20   server_name {domain};\n"
            )
            .ok();
            nginx_serving(&mut out, &site.prod_root);
            out.push_str("}\n");
        }
        Tls::Letsencrypt { .. } | Tls::Files { .. } => {
            let (certificate, key) = match &site.tls {
                Tls::Files { certificate, key } => (certificate.clone(), key.clone()),
                _ => (
                    format!("{LETSENCRYPT_LIVE}/{domain}/fullchain.pem"),
                    format!("{LETSENCRYPT_LIVE}/{domain}/privkey.pem"),
                ),
            };
            write!(
                out,
                "server {{\n\
                 \x20   listen 80;\n\
                 \x20   listen [::]:80;\n\
                 \x20   server_name {domain};\n"
            )
            .ok();
            if matches!(site.tls, Tls::Letsencrypt { .. }) {
                write!(
                    out,
                    "    location ^~ /.well-known/acme-challenge/ {{\n\
                     \x20       root \"{webspace}\";\n\
                     \x20   }}\n",
                    webspace = site.webspace
                )
                .ok();
            }
            write!(
                out,
                "    location / {{\n\
                 \x20       return 301 https://{domain}$request_uri;\n\
                 \x20   }}\n\
                 }}\n\
                 server {{\n\
                 \x20   listen 443 ssl;\n\
                 \x20   listen [::]:443 ssl;\n\
                 \x20   server_name {domain};\n\
                 \x20   ssl_certificate \"{certificate}\";\n\
                 \x20   ssl_certificate_key \"{key}\";\n\
                 \x20   ssl_protocols TLSv1.2 TLSv1.3;\n\
                 \x20   ssl_session_timeout 1d;\n"
            )
            .ok();
            nginx_serving(&mut out, &site.prod_root);
            out.push_str("}\n");
        }
    }
    for alias in &site.aliases {
        write!(
            out,
            "server {{\n\
             \x20   listen 80;\n\
             \x20   listen [::]:80;\n\
             \x20   server_name {alias};\n\
             \x20   return 301 {scheme}://{domain}$request_uri;\n\
             }}\n"
        )
        .ok();
    }
    out
}

fn nginx_preprod(site: &SiteView) -> String {
    let host = &site.preprod_domain;
    let mut out = site.header("Preproduction", host);
    write!(
        out,
        "server {{\n\
         \x20   listen 80;\n\
         \x20   listen [::]:80;\n\
         \x20   server_name {host};\n\
         \x20   add_header X-Robots-Tag \"noindex, nofollow\" always;\n"
    )
    .ok();
    if let Some((realm, htpasswd)) = &site.auth {
        write!(
            out,
            "    auth_basic \"{realm}\";\n\
             \x20   auth_basic_user_file \"{htpasswd}\";\n"
        )
        .ok();
    }
    nginx_serving(&mut out, &site.preprod_root);
    out.push_str("}\n");
    out
}

/// The `<Directory>` opening shared by Apache vhosts: symlinks only if their owner matches
/// (the release link and its target belong to the service user), no indexes, no overrides.
fn apache_directory(out: &mut String, webspace: &str) {
    write!(
        out,
        "    <Directory \"{webspace}\">\n\
         \x20       Options -Indexes -Includes -ExecCGI -FollowSymLinks +SymLinksIfOwnerMatch\n\
         \x20       AllowOverride None\n\
         \x20       DirectoryIndex index.html\n"
    )
    .ok();
}

fn apache_dotfiles(out: &mut String) {
    out.push_str(
        "    <DirectoryMatch \"/\\.(?!well-known/)\">\n\
         \x20       Require all denied\n\
         \x20   </DirectoryMatch>\n\
         \x20   <FilesMatch \"^\\.\">\n\
         \x20       Require all denied\n\
         \x20   </FilesMatch>\n",
    );
}

fn apache_prod(site: &SiteView) -> String {
    let domain = &site.domain;
    let mut out = site.header("Production", domain);
    let ports: &[(u16, bool)] = match site.tls {
        // certbot writes the HTTPS companion of this file itself.
        Tls::Letsencrypt { .. } => &[(80, false)],
        Tls::Files { .. } => &[(80, false), (443, true)],
        Tls::None => &[(80, false)],
    };
    if let Tls::Letsencrypt { account } = &site.tls {
        writeln!(
            out,
            "# Certificates: ACME account {account} (certbot --apache)."
        )
        .ok();
    }
    for &(port, ssl) in ports {
        write!(
            out,
            "<VirtualHost *:{port}>\n\
             \x20   ServerName {domain}\n\
             \x20   DocumentRoot \"{root}\"\n",
            root = site.prod_root
        )
        .ok();
        if ssl {
            if let Tls::Files { certificate, key } = &site.tls {
                write!(
                    out,
                    "    SSLEngine on\n\
                     \x20   SSLCertificateFile \"{certificate}\"\n\
                     \x20   SSLCertificateKeyFile \"{key}\"\n"
                )
                .ok();
            }
        }
        apache_directory(&mut out, &site.webspace);
        out.push_str("        Require all granted\n    </Directory>\n");
        apache_dotfiles(&mut out);
        out.push_str("</VirtualHost>\n");
    }
    let scheme = site.prod_scheme();
    for alias in &site.aliases {
        write!(
            out,
            "<VirtualHost *:80>\n\
             \x20   ServerName {alias}\n\
             \x20   Redirect permanent \"/\" \"{scheme}://{domain}/\"\n\
             </VirtualHost>\n"
        )
        .ok();
    }
    out
}

fn apache_preprod(site: &SiteView) -> String {
    let host = &site.preprod_domain;
    let mut out = site.header("Preproduction", host);
    write!(
        out,
        "<VirtualHost *:80>\n\
         \x20   ServerName {host}\n\
         \x20   DocumentRoot \"{root}\"\n\
         \x20   Header always set X-Robots-Tag \"noindex, nofollow, noarchive\"\n",
        root = site.preprod_root
    )
    .ok();
    apache_directory(&mut out, &site.webspace);
    match &site.auth {
        Some((realm, htpasswd)) => {
            // One Require on purpose: a second would be OR-ed with it.
            write!(
                out,
                "        AuthType Basic\n\
                 \x20       AuthBasicProvider file\n\
                 \x20       AuthName \"{realm}\"\n\
                 \x20       AuthUserFile \"{htpasswd}\"\n\
                 \x20       Require valid-user\n"
            )
            .ok();
        }
        None => out.push_str("        Require all granted\n"),
    }
    out.push_str("    </Directory>\n");
    apache_dotfiles(&mut out);
    out.push_str("</VirtualHost>\n");
    out
}
