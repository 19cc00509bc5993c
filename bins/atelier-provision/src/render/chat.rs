//! The CMS's vhost when the instance serves its AI chat runtime: the CMS's public host, served
//! under production's TLS like a site, proxies the editor's chat routes (`/admin/api/ai/`) to
//! chatd's socket and everything else — the CMS's own `mcp/` and `editor-bridge` routes under
//! the same prefix among it — to the CMS on loopback. Only nginx is rendered (the declaration
//! refuses a chat block with another server).
//!
//! chatd trusts a request only with the service token, which the web server adds from a
//! root-only include the provisioner writes from the credential at apply time: the vhost
//! itself never holds a secret.

use std::fmt::Write as _;

use atelier_layout::declaration::Chat;
use atelier_layout::paths::Role;
use atelier_layout::services;
use atelier_layout::Layout;

use super::vhosts::{letsencrypt_comment, nginx_servers, Certificate, Tls};
use super::{artifact, safe_origin, safe_path, RenderError};
use crate::artifact::{Artifact, ArtifactKind, CommentStyle};

/// The chat routes' prefix, chatd's.
pub const CHAT_PREFIX: &str = "/admin/api/ai/";
/// The CMS's own MCP connector routes below the chat prefix.
pub const CMS_MCP_PREFIX: &str = "/admin/api/ai/mcp/";
/// The CMS's own editor-bridge stream below the chat prefix.
pub const CMS_EDITOR_BRIDGE: &str = "/admin/api/ai/editor-bridge";

/// How long nginx waits for a chat stream's next byte, in seconds: a streamed chat turn or
/// editor-bridge stream may stay quiet far longer than nginx's default minute, and chatd waits
/// for a silent provider at most this long.
const STREAM_READ_TIMEOUT_SECS: u64 = *services::CHATD_PROVIDER_IDLE_TIMEOUT_MS.end() / 1000;
/// A chat message may carry images.
const CHAT_BODY_MAX: &str = "32m";
/// What the editor reads when nginx cannot reach chatd (its socket is gone, it failed).
const CHATD_UNAVAILABLE: &str = "The AI service is not available right now. Try again shortly.";

/// Appends the CMS's vhost, when a chat block is declared.
pub(super) fn render(layout: &Layout<'_>, out: &mut Vec<Artifact>) -> Result<(), RenderError> {
    let Some(chat) = &layout.declaration().chat else {
        return Ok(());
    };
    let view = CmsView::new(layout, chat)?;
    let path = layout.chat_vhost_path();
    let mut vhost = artifact(
        layout,
        path,
        Role::Vhost,
        ArtifactKind::NginxVhost,
        CommentStyle::Hash,
        &view.nginx(Certificate::Present),
    );
    if let Tls::Letsencrypt { .. } = view.tls {
        let live = layout.letsencrypt_certificate_for(&chat.host);
        vhost = vhost.with_stand_in(
            layout.instance().as_str(),
            CommentStyle::Hash,
            vec![live.fullchain, live.privkey],
            &view.nginx(Certificate::Awaited),
        );
    }
    out.push(vhost);
    Ok(())
}

/// Everything the CMS's vhost says, checked once.
struct CmsView {
    instance: String,
    host: String,
    cms: String,
    chatd_socket: String,
    proxy_auth: String,
    tls: Tls,
}

impl CmsView {
    fn new(layout: &Layout<'_>, chat: &Chat) -> Result<Self, RenderError> {
        Ok(Self {
            instance: layout.instance().to_string(),
            host: chat.host.clone(),
            cms: safe_origin(&chat.cms_origin)?,
            chatd_socket: safe_path(&layout.chatd_socket_path())?,
            proxy_auth: safe_path(&layout.chat_proxy_auth_path())?,
            tls: Tls::of(layout, &chat.host)?,
        })
    }

    fn nginx(&self, certificate: Certificate) -> String {
        let mut out = format!(
            "# The CMS of instance {inst} at {host}, with its AI chat runtime.\n\
             # Rendered by atelier-provision from the declaration; edit that, not this file.\n",
            inst = self.instance,
            host = self.host,
        );
        letsencrypt_comment(&mut out, &self.host, &self.tls, certificate);
        nginx_servers(&mut out, &self.host, &self.tls, certificate, &|out| {
            self.nginx_locations(out)
        });
        out
    }

    /// The CMS's locations; `proxy_set_header` is written whole in each, as nginx drops every
    /// inherited one from a location that sets any.
    fn nginx_locations(&self, out: &mut String) {
        let cms = &self.cms;
        let forwarded = "        proxy_set_header Host $host;\n\
                         \x20       proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
                         \x20       proxy_set_header X-Forwarded-Proto $scheme;\n";
        let streaming = format!(
            "        proxy_http_version 1.1;\n\
             \x20       proxy_set_header Connection \"\";\n\
             \x20       proxy_buffering off;\n\
             \x20       proxy_read_timeout {STREAM_READ_TIMEOUT_SECS}s;\n"
        );
        write!(
            out,
            "    # The chat runtime: NDJSON turns stream through unbuffered; the include adds the\n\
             \x20   # service token chatd requires (and replaces any Authorization a client sent).\n\
             \x20   location ^~ {CHAT_PREFIX} {{\n\
             \x20       proxy_pass http://unix:{socket}:;\n\
             {forwarded}{streaming}\
             \x20       proxy_request_buffering off;\n\
             \x20       client_max_body_size {CHAT_BODY_MAX};\n\
             \x20       include \"{auth}\";\n\
             \x20       # nginx's own refusals as JSON the editor shows, never nginx's HTML: a\n\
             \x20       # body over the limit gets chatd's own 413, an unreachable chatd a 502.\n\
             \x20       error_page 413 = @chatd_too_large;\n\
             \x20       error_page 502 503 504 = @chatd_unavailable;\n\
             \x20   }}\n\
             \x20   location @chatd_too_large {{\n\
             \x20       default_type application/json;\n\
             \x20       return 413 '{{\"error\":\"Chat request is too large.\"}}';\n\
             \x20   }}\n\
             \x20   location @chatd_unavailable {{\n\
             \x20       default_type application/json;\n\
             \x20       return 502 '{{\"error\":\"{CHATD_UNAVAILABLE}\"}}';\n\
             \x20   }}\n\
             \x20   # The CMS's own routes below the chat prefix.\n\
             \x20   location ^~ {CMS_MCP_PREFIX} {{\n\
             \x20       proxy_pass {cms};\n\
             {forwarded}\
             \x20   }}\n\
             \x20   location = {CMS_EDITOR_BRIDGE} {{\n\
             \x20       proxy_pass {cms};\n\
             {forwarded}{streaming}\
             \x20   }}\n\
             \x20   # The CMS sets its own upload limits, as it did behind its own proxy.\n\
             \x20   location / {{\n\
             \x20       proxy_pass {cms};\n\
             {forwarded}\
             \x20       client_max_body_size 0;\n\
             \x20   }}\n",
            socket = self.chatd_socket,
            auth = self.proxy_auth,
        )
        .ok();
    }
}

/// The include's text: the directive that shows chatd the service token `token` (read from
/// its credential at apply time; base64url, so nothing in it needs quoting).
pub fn proxy_auth_include(token: &str) -> String {
    format!("proxy_set_header Authorization \"Bearer {token}\";\n")
}
