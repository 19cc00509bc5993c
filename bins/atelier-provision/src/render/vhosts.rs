//! The web server's virtual hosts: per site, production at its domain (and its aliases) and,
//! when enabled, preproduction at `<prefix>.<domain>`. Each serves through the surface's
//! release symlink, denies dotfiles, and preproduction asks for basic auth when declared.
//!
//! With `tls.mode = letsencrypt` the production vhost has two forms. Its port-80 server always
//! serves `/.well-known/acme-challenge/` from the instance's ACME webroot, so certbot's http-01
//! challenge works on a fresh host. Until certbot has put the certificate in place, that server
//! is all there is (everything else answers 503): a server told to load a missing certificate
//! refuses its whole configuration, every other site with it. Once the certificate exists the
//! TLS server is rendered and port 80 redirects to it. The renderer cannot see the host, so the
//! waiting form rides along as the artifact's stand-in and the plan picks one by observing the
//! certificate's files.

use std::fmt::Write as _;

use atelier_layout::declaration::{AuthMode, Site, TlsMode, WebServer};
use atelier_layout::paths::{Role, Surface, ACME_CHALLENGE_PATH};
use atelier_layout::{Layout, SiteOrdinal};

use super::{artifact, safe_path, RenderError};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

/// Whether a letsencrypt site's certificate is rendered as present (the TLS server exists) or
/// awaited (only the ACME challenge is served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Certificate {
    Present,
    Awaited,
}

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
        let prod = |certificate| match decl.web.server {
            WebServer::Nginx => nginx_prod(&site_view, certificate),
            WebServer::Apache => apache_prod(&site_view, certificate),
        };
        let mut vhost = artifact(
            layout,
            layout.site_vhost_path(&site.slug, Surface::Prod),
            Role::Vhost,
            kind,
            CommentStyle::Hash,
            &prod(Certificate::Present),
        );
        if let Tls::Letsencrypt { .. } = site_view.tls {
            let live = layout.letsencrypt_certificate(site);
            vhost = vhost.with_stand_in(
                inst.as_str(),
                CommentStyle::Hash,
                vec![live.fullchain, live.privkey],
                &prod(Certificate::Awaited),
            );
        }
        out.push(vhost);
        if layout.renders_vhost(Surface::Preprod) {
            let pre = match decl.web.server {
                WebServer::Nginx => nginx_preprod(&site_view),
                WebServer::Apache => apache_preprod(&site_view),
            };
            out.push(artifact(
                layout,
                layout.site_vhost_path(&site.slug, Surface::Preprod),
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

/// How a production host is served over TLS, as declared.
pub(super) enum Tls {
    Letsencrypt {
        account: String,
        certificate: String,
        key: String,
        /// The ACME http-01 webroot.
        webroot: String,
        /// certbot's deploy hook for the instance.
        hook: String,
    },
    Files {
        certificate: String,
        key: String,
    },
    None,
}

impl Tls {
    /// How production's TLS, as declared, serves `domain` (a site's, or the CMS's host).
    pub(super) fn of(layout: &Layout<'_>, domain: &str) -> Result<Tls, RenderError> {
        let tls_decl = &layout.declaration().serving.prod.tls;
        Ok(match tls_decl.mode {
            TlsMode::Letsencrypt => {
                let live = layout.letsencrypt_certificate_for(domain);
                Tls::Letsencrypt {
                    account: tls_decl.account_email.clone().unwrap_or_default(),
                    certificate: safe_path(&live.fullchain)?,
                    key: safe_path(&live.privkey)?,
                    webroot: safe_path(&layout.acme_webroot())?,
                    hook: safe_path(&layout.renewal_hook_path())?,
                }
            }
            TlsMode::Files => match (&tls_decl.certificate, &tls_decl.key) {
                (Some(certificate), Some(key)) => Tls::Files {
                    certificate: safe_path(certificate)?,
                    key: safe_path(key)?,
                },
                _ => Tls::None,
            },
            TlsMode::None => Tls::None,
        })
    }
}

impl SiteView {
    fn new(layout: &Layout<'_>, site: &Site) -> Result<Self, RenderError> {
        let decl = layout.declaration();
        let tls = Tls::of(layout, &site.domain)?;
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

/// A production header's lines about a letsencrypt certificate: how it is obtained and, while
/// it is awaited, what this file is.
pub(super) fn letsencrypt_comment(
    out: &mut String,
    domain: &str,
    tls: &Tls,
    certificate: Certificate,
) {
    let Tls::Letsencrypt {
        account,
        certificate: chain,
        key,
        webroot,
        hook,
    } = tls
    else {
        return;
    };
    write!(
        out,
        "# Certificate: ACME account {account}, obtained with\n\
         #   certbot certonly --webroot -w {webroot} -d {domain} -m {account} \\\n\
         #     --deploy-hook {hook}\n\
         # and not with certbot's nginx or apache installer, which would edit this file: the\n\
         # hook applies the declaration again, which renders the TLS server once the\n\
         # certificate exists, and reloads the web server after each renewal.\n"
    )
    .ok();
    if certificate == Certificate::Awaited {
        write!(
            out,
            "# WAITING FOR THE CERTIFICATE: {chain} and {key} do not exist yet, so this\n\
             # serves only the ACME challenge; the next apply renders the TLS server.\n"
        )
        .ok();
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

/// The location every letsencrypt port-80 server has: the challenge files certbot writes
/// below the webroot, before and after the TLS server exists.
fn nginx_acme(out: &mut String, webroot: &str) {
    write!(
        out,
        "    location ^~ /{ACME_CHALLENGE_PATH}/ {{\n\
         \x20       root \"{webroot}\";\n\
         \x20   }}\n"
    )
    .ok();
}

/// A production host's nginx servers under `tls`: port 80 (the ACME challenge with letsencrypt,
/// then a redirect once there is a TLS server) and, with a certificate, the TLS server. `serve`
/// writes what the host serves: a site's release, or the CMS and its chat runtime.
pub(super) fn nginx_servers(
    out: &mut String,
    domain: &str,
    tls: &Tls,
    certificate: Certificate,
    serve: &dyn Fn(&mut String),
) {
    let plain = format!(
        "server {{\n\
         \x20   listen 80;\n\
         \x20   listen [::]:80;\n\
         \x20   server_name {domain};\n"
    );
    // The certificate and key of the TLS server, when there is one.
    let tls = match (tls, certificate) {
        (Tls::None, _) => {
            out.push_str(&plain);
            serve(out);
            out.push_str("}\n");
            None
        }
        (Tls::Letsencrypt { webroot, .. }, Certificate::Awaited) => {
            out.push_str(&plain);
            nginx_acme(out, webroot);
            // Production is declared over TLS only: nothing else is served in plain HTTP, and
            // a redirect would point at a server that does not exist yet.
            out.push_str(
                "    location / {\n\
                 \x20       return 503;\n\
                 \x20   }\n\
                 }\n",
            );
            None
        }
        (
            Tls::Letsencrypt {
                certificate: chain,
                key,
                webroot,
                ..
            },
            Certificate::Present,
        ) => {
            out.push_str(&plain);
            nginx_acme(out, webroot);
            Some((chain, key))
        }
        (Tls::Files { certificate, key }, _) => {
            out.push_str(&plain);
            Some((certificate, key))
        }
    };
    // HTTP/2 on TLS: a page's long streams (a CMS editor's chat turns and bridges) share one
    // connection instead of holding the browser's few per host.
    if let Some((chain, key)) = tls {
        write!(
            out,
            "    location / {{\n\
             \x20       return 301 https://{domain}$request_uri;\n\
             \x20   }}\n\
             }}\n\
             server {{\n\
             \x20   listen 443 ssl http2;\n\
             \x20   listen [::]:443 ssl http2;\n\
             \x20   server_name {domain};\n\
             \x20   ssl_certificate \"{chain}\";\n\
             \x20   ssl_certificate_key \"{key}\";\n\
             \x20   ssl_protocols TLSv1.2 TLSv1.3;\n\
             \x20   ssl_session_timeout 1d;\n"
        )
        .ok();
        serve(out);
        out.push_str("}\n");
    }
}

fn nginx_prod(site: &SiteView, certificate: Certificate) -> String {
    let domain = &site.domain;
    let mut out = site.header("Production", domain);
    letsencrypt_comment(&mut out, domain, &site.tls, certificate);
    let scheme = site.prod_scheme();
    nginx_servers(&mut out, domain, &site.tls, certificate, &|out| {
        nginx_serving(out, &site.prod_root)
    });
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

/// The production `<VirtualHost>` that serves the release, in plain HTTP or over TLS.
fn apache_serving(out: &mut String, site: &SiteView, port: u16, tls: Option<(&str, &str)>) {
    write!(
        out,
        "<VirtualHost *:{port}>\n\
         \x20   ServerName {domain}\n\
         \x20   DocumentRoot \"{root}\"\n",
        domain = site.domain,
        root = site.prod_root
    )
    .ok();
    if let Some((certificate, key)) = tls {
        write!(
            out,
            "    SSLEngine on\n\
             \x20   SSLCertificateFile \"{certificate}\"\n\
             \x20   SSLCertificateKeyFile \"{key}\"\n"
        )
        .ok();
    }
    apache_directory(out, &site.webspace);
    out.push_str("        Require all granted\n    </Directory>\n");
    apache_dotfiles(out);
    out.push_str("</VirtualHost>\n");
}

/// A letsencrypt site's port-80 `<VirtualHost>`: the challenge files certbot writes below the
/// webroot, and everything else redirected to the TLS server (503 while it does not exist).
/// mod_alias applies redirects before aliases, so the redirect leaves the challenge path out.
fn apache_acme(out: &mut String, site: &SiteView, webroot: &str, certificate: Certificate) {
    let challenges = format!("{webroot}/{ACME_CHALLENGE_PATH}");
    write!(
        out,
        "<VirtualHost *:80>\n\
         \x20   ServerName {domain}\n\
         \x20   Alias \"/{ACME_CHALLENGE_PATH}/\" \"{challenges}/\"\n\
         \x20   <Directory \"{challenges}\">\n\
         \x20       Options None\n\
         \x20       AllowOverride None\n\
         \x20       Require all granted\n\
         \x20   </Directory>\n",
        domain = site.domain
    )
    .ok();
    // Every path but the challenges'.
    let rest = format!("^/(?!{}/)", ACME_CHALLENGE_PATH.replace('.', "\\."));
    match certificate {
        Certificate::Present => writeln!(
            out,
            "    RedirectMatch permanent \"{rest}(.*)$\" \"https://{domain}/$1\"",
            domain = site.domain
        ),
        Certificate::Awaited => writeln!(out, "    RedirectMatch 503 \"{rest}\""),
    }
    .ok();
    out.push_str("</VirtualHost>\n");
}

fn apache_prod(site: &SiteView, certificate: Certificate) -> String {
    let domain = &site.domain;
    let mut out = site.header("Production", domain);
    letsencrypt_comment(&mut out, &site.domain, &site.tls, certificate);
    match &site.tls {
        Tls::None => apache_serving(&mut out, site, 80, None),
        Tls::Files { certificate, key } => {
            // Production is declared over TLS: port 80 only sends browsers there, as nginx's
            // plain server does.
            write!(
                out,
                "<VirtualHost *:80>\n\
                 \x20   ServerName {domain}\n\
                 \x20   Redirect permanent \"/\" \"https://{domain}/\"\n\
                 </VirtualHost>\n"
            )
            .ok();
            apache_serving(&mut out, site, 443, Some((certificate, key)));
        }
        Tls::Letsencrypt {
            certificate: chain,
            key,
            webroot,
            ..
        } => {
            apache_acme(&mut out, site, webroot, certificate);
            if certificate == Certificate::Present {
                apache_serving(&mut out, site, 443, Some((chain, key)));
            }
        }
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
