//! The value grammars of the declaration: paths, names, hosts, sizes. Each check refuses with
//! one reason and a message that names the rule, never more than one per value.

use std::path::PathBuf;

use super::Reason;
use crate::hosts::{check_plan_host, NotPlanHost};
use crate::names::{is_dns_label, is_domain, is_slug};

/// A refusal of one value.
pub(crate) type Refusal = (Reason, String);

/// The characters a declared path may hold. Everything else would need quoting or escaping
/// in some artifact a path lands in (unit files, tmpfiles.d, nginx and apache configs, the
/// polkit rule), and no artifact here quotes.
fn is_safe_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@')
}

/// An absolute, `..`-free path of safe characters, returned normalised (no empty or `.`
/// components, no trailing `/`); `/` itself is refused as a tree of its own.
pub(crate) fn absolute_path(value: &str) -> Result<PathBuf, Refusal> {
    if let Some(bad) = value.chars().find(|c| !is_safe_path_char(*c)) {
        let what = if bad.is_control() {
            "a control character".to_owned()
        } else if bad.is_whitespace() {
            "whitespace".to_owned()
        } else {
            format!("the character {bad:?}")
        };
        return Err((
            Reason::UnsafePathCharacter,
            format!(
                "holds {what}; a path may hold only letters, digits and / . _ - + @ \
                 (anything else would break a unit file, tmpfiles.d or a vhost)"
            ),
        ));
    }
    if !value.starts_with('/') {
        return Err((
            Reason::RelativePath,
            format!("{value:?} must be an absolute path"),
        ));
    }
    let mut normal = PathBuf::from("/");
    for component in value.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                return Err((
                    Reason::ParentComponent,
                    format!("{value:?} must not contain a '..' component"),
                ))
            }
            name => normal.push(name),
        }
    }
    if normal.as_os_str() == "/" {
        return Err((
            Reason::RootPath,
            "must name a directory or file below '/', not '/' itself".to_owned(),
        ));
    }
    Ok(normal)
}

/// A site's domain: a lowercase hostname of at least two labels, not a URL, no port.
pub(crate) fn domain(value: &str) -> Result<String, Refusal> {
    let refuse = |why: &str| Err((Reason::BadDomain, format!("{value:?} {why}")));
    if value.contains("://") || value.contains('/') {
        return refuse("is a URL or a path; declare a HOSTNAME such as www.example.org");
    }
    if value.contains(':') {
        return refuse("must not carry a port");
    }
    if value.chars().any(|c| c.is_ascii_uppercase()) {
        return refuse("must be lowercase");
    }
    if !is_domain(value) {
        return refuse("is not a hostname of dot-separated labels (a-z, 0-9, '-')");
    }
    Ok(value.to_owned())
}

/// A host on an egress plan: a public DNS name, never an address, a wildcard or a local name
/// (the rule the gate holds every CONNECT to, [`check_plan_host`]).
pub(crate) fn egress_host(value: &str) -> Result<String, Refusal> {
    let why = match check_plan_host(value) {
        Ok(()) => return Ok(value.to_owned()),
        Err(NotPlanHost::Address) => "is an IP address; the gate allows hostnames only",
        Err(NotPlanHost::NotHostname) if value == "any" || value.contains('*') => "is a wildcard",
        Err(NotPlanHost::NotHostname) => "is not a public hostname",
        Err(NotPlanHost::SpecialUse) => "is a local special-use name",
    };
    Err((Reason::BadHost, format!("{value:?} {why}")))
}

/// A site slug: `^[a-z][a-z0-9-]{1,39}$`.
pub(crate) fn slug(value: &str) -> Result<String, Refusal> {
    if is_slug(value) {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadSlug,
            format!(
                "{value:?} must be 2-40 characters of a-z, 0-9 and '-', starting with a letter"
            ),
        ))
    }
}

/// A unix user or group name: `^[a-z_][a-z0-9_-]{0,31}$`.
pub(crate) fn unix_name(value: &str) -> Result<String, Refusal> {
    let bytes = value.as_bytes();
    let ok = (1..=32).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadUnixName,
            format!("{value:?} is not a unix user or group name"),
        ))
    }
}

/// The Publication API's base URL: `^https?://[a-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~-]+)*/?$`.
pub(crate) fn url(value: &str) -> Result<String, Refusal> {
    let refuse = || {
        Err((
            Reason::BadUrl,
            format!("{value:?} must be http(s)://host[:port][/path] with no query or credentials"),
        ))
    };
    let Some(rest) = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"))
    else {
        return refuse();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    let port_ok =
        port.is_none_or(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    let path = path.strip_suffix('/').unwrap_or(path);
    let path_ok = path.is_empty()
        || path.strip_prefix('/').is_some_and(|p| {
            p.split('/').all(|seg| {
                !seg.is_empty()
                    && seg.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
                    })
            })
        });
    if host_ok && port_ok && path_ok {
        Ok(value.to_owned())
    } else {
        refuse()
    }
}

/// A model provider's base URL as the gate's model relay dials it: `https://` on port 443
/// (implied), a hostname a plan could hold, an optional path without `.` or `..` segments.
pub(crate) fn provider_url(value: &str) -> Result<String, Refusal> {
    let refuse = |why: &str| Err((Reason::BadUrl, format!("{value:?} {why}")));
    let Some(rest) = value.strip_prefix("https://") else {
        return refuse("must be an https:// URL: the gate's model relay dials TLS on port 443");
    };
    url(value)?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains(':') {
        return refuse("must not name a port: the gate's model relay dials port 443 only");
    }
    egress_host(authority)?;
    // The gate's relay sends to the host its URL parser (the WHATWG one, with IDNA) reads here:
    // a host it reads otherwise, or not at all (a label `xn--` that is no punycode), would
    // stop the gate at its plan check instead of being refused now.
    let parsed = ::url::Url::parse(value);
    if parsed.as_ref().ok().and_then(|url| url.host_str()) != Some(authority) {
        return refuse("has a host the gate's URL parser does not read as written");
    }
    // The agent is given this path below the gate's model relay, which sends requests under it
    // only: a `.` or `..` segment would be resolved away by the agent before the relay sees it.
    let path = rest.split_once('/').map_or("", |(_, path)| path);
    if path.split('/').any(|segment| matches!(segment, "." | "..")) {
        return refuse("must not have a . or .. path segment");
    }
    Ok(value.to_owned())
}

/// Where the CMS listens on this machine: `http://` + a loopback IP address + `:` + a port, and
/// nothing else. chatd sends browsers' session cookies there, so it must never be a host name a
/// resolver could point elsewhere.
pub(crate) fn cms_origin(value: &str) -> Result<String, Refusal> {
    let refuse = || {
        Err((
            Reason::BadCmsOrigin,
            format!(
                "{value:?} must be http://<loopback address>:<port>, e.g. http://127.0.0.1:3001"
            ),
        ))
    };
    let Some(authority) = value.strip_prefix("http://") else {
        return refuse();
    };
    match authority.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_loopback() && addr.port() != 0 => Ok(value.to_owned()),
        _ => refuse(),
    }
}

/// The origin an editor's browser uses for the CMS: `https://<host>` or `http://<host>`, the
/// host a lowercase hostname, no port, path or trailing slash (the browser's `Origin` header
/// has none).
pub(crate) fn public_origin(value: &str) -> Result<String, Refusal> {
    let host = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match host.map(domain) {
        Some(Ok(_)) => Ok(value.to_owned()),
        _ => Err((
            Reason::BadPublicOrigin,
            format!("{value:?} must be https://<host> (or http://<host>) with no port or path"),
        )),
    }
}

/// The host of a URL [`provider_url`] accepted.
pub(crate) fn url_host(value: &str) -> &str {
    let rest = value.split_once("://").map_or(value, |(_, rest)| rest);
    rest.split(['/', ':']).next().unwrap_or_default()
}

/// A model id as an OpenAI-compatible API names it (`gpt-4o`, `org/model:tag`): 1-200
/// characters, no control character, no whitespace at either end (a model id is matched
/// exactly, so a stray space would name another model), and neither `$` nor `` ` ``, which
/// sited's env file refuses to carry: a declaration that validates must render.
pub(crate) fn model_id(value: &str) -> Result<String, Refusal> {
    let refuse = |why: &str| Err((Reason::BadModelId, why.to_owned()));
    let count = value.chars().count();
    if !(1..=200).contains(&count) {
        return refuse("must be 1-200 characters");
    }
    if value.chars().any(char::is_control) {
        return refuse("must not hold a control character");
    }
    if value.trim() != value {
        return refuse("must not begin or end with whitespace");
    }
    if value.contains(['$', '`']) {
        return refuse("must not hold '$' or '`', which an env file cannot carry");
    }
    Ok(value.to_owned())
}

/// The operator's free text: 1-200 characters after trimming, no control characters.
pub(crate) fn description(value: &str) -> Result<String, Refusal> {
    let trimmed = value.trim();
    let count = trimmed.chars().count();
    if (1..=200).contains(&count) && !trimmed.chars().any(char::is_control) {
        Ok(trimmed.to_owned())
    } else {
        Err((
            Reason::BadDescription,
            "must be 1-200 characters with no control characters".to_owned(),
        ))
    }
}

/// The preproduction host prefix: one DNS label.
pub(crate) fn host_prefix(value: &str) -> Result<String, Refusal> {
    if is_dns_label(value) {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadHostPrefix,
            format!("{value:?} must be one DNS label"),
        ))
    }
}

/// The basic-auth realm: `^[A-Za-z0-9 ._:,()/-]{1,64}$`.
pub(crate) fn realm(value: &str) -> Result<String, Refusal> {
    let ok = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" ._:,()/-".contains(&b));
    if ok {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadRealm,
            "must be 1-64 characters of letters, digits and ' ._:,()/-'".to_owned(),
        ))
    }
}

/// A preproduction basic-auth user: `^[a-z][a-z0-9._-]{0,31}$`.
pub(crate) fn auth_user(value: &str) -> Result<String, Refusal> {
    let bytes = value.as_bytes();
    let ok = (1..=32).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if ok {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadAuthUser,
            format!("{value:?} must be 1-32 characters of a-z, 0-9, '.', '_', '-'"),
        ))
    }
}

/// The ACME account address: `local@domain.tld`, 3-254 characters.
pub(crate) fn email(value: &str) -> Result<String, Refusal> {
    let ok = (3..=254).contains(&value.len())
        && value.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && local
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._%+-".contains(&b))
                && domain.split('.').count() >= 2
                && domain.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        });
    if ok {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadEmail,
            format!("{value:?} is not an email address"),
        ))
    }
}

/// A credential's name, which becomes its `LoadCredential=` id: `^[A-Z][A-Z0-9_]{0,63}$`.
pub(crate) fn credential_name(value: &str) -> Result<String, Refusal> {
    let bytes = value.as_bytes();
    let ok = (1..=64).contains(&bytes.len())
        && bytes[0].is_ascii_uppercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_');
    if ok {
        Ok(value.to_owned())
    } else {
        Err((
            Reason::BadCredentialName,
            format!(
                "{value:?} must be 1-64 characters of A-Z, 0-9 and '_', starting with a letter"
            ),
        ))
    }
}

/// A systemd memory size: `^\d+[KMG]$`, at least one unit and at most 2^63 bytes. systemd
/// ignores a size it cannot hold (with a line in the journal), which would leave the cap off;
/// a size of 0 would kill the daemon at its first page.
pub(crate) fn memory_size(value: &str) -> Result<String, Refusal> {
    let bytes = [("K", 10), ("M", 20), ("G", 30)]
        .into_iter()
        .find_map(|(unit, shift)| digits(value.strip_suffix(unit)?)?.checked_mul(1_u64 << shift));
    match bytes {
        Some(bytes) if bytes > 0 && bytes <= 1 << 63 => Ok(value.to_owned()),
        _ => Err((
            Reason::BadSize,
            format!("{value:?} must be digits followed by K, M or G, above 0 and at most 8E"),
        )),
    }
}

/// A systemd CPU quota: `^\d+%$`, from 1% to 100000% (a thousand CPUs).
pub(crate) fn cpu_quota(value: &str) -> Result<String, Refusal> {
    let percent: Option<u64> = value.strip_suffix('%').and_then(digits);
    match percent {
        Some(1..=100_000) => Ok(value.to_owned()),
        _ => Err((
            Reason::BadCpuQuota,
            format!("{value:?} must be digits followed by %, from 1% to 100000%"),
        )),
    }
}

/// ASCII digits alone, as a number that fits.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised() {
        assert_eq!(
            absolute_path("/srv//www/./a/").unwrap(),
            PathBuf::from("/srv/www/a")
        );
        assert_eq!(absolute_path("/").unwrap_err().0, Reason::RootPath);
        assert_eq!(absolute_path("//./").unwrap_err().0, Reason::RootPath);
        assert_eq!(absolute_path("a/b").unwrap_err().0, Reason::RelativePath);
        assert_eq!(absolute_path("").unwrap_err().0, Reason::RelativePath);
        assert_eq!(
            absolute_path("/a/../b").unwrap_err().0,
            Reason::ParentComponent
        );
        assert_eq!(
            absolute_path("/a/..").unwrap_err().0,
            Reason::ParentComponent
        );
        // A name that merely starts with two dots is a name.
        assert!(absolute_path("/a/..b").is_ok());
        for bad in [
            "/a b", "/a\tb", "/a\"b", "/a'b", "/a%ib", "/a\u{7}b", "/a;b", "/a$b", "/a\\b",
        ] {
            assert_eq!(
                absolute_path(bad).unwrap_err().0,
                Reason::UnsafePathCharacter,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn domains() {
        assert!(domain("www.example.org").is_ok());
        assert!(domain("a-b.c0.example").is_ok());
        for bad in [
            "example",
            "https://example.org",
            "example.org/x",
            "example.org:443",
            "Example.org",
            "-a.example.org",
            "a..example.org",
            "a_b.example.org",
        ] {
            assert_eq!(domain(bad).unwrap_err().0, Reason::BadDomain, "{bad}");
        }
    }

    #[test]
    fn egress_hosts() {
        assert!(egress_host("api.anthropic.com").is_ok());
        for bad in [
            "10.0.0.1",
            "[::1]",
            "any",
            "*.example.org",
            "localhost",
            "svc.internal",
            "printer.local",
            "example.123",
        ] {
            assert_eq!(egress_host(bad).unwrap_err().0, Reason::BadHost, "{bad}");
        }
    }

    #[test]
    fn urls() {
        for good in [
            "http://127.0.0.1:3100/publication/server_api/v2",
            "https://api.example.org",
            "https://api.example.org/",
        ] {
            assert!(url(good).is_ok(), "{good}");
        }
        for bad in [
            "ftp://a.org",
            "https://user:pw@a.org",
            "https://a.org/?q=1",
            "https://A.org",
            "https://a.org:123456",
            "https://",
            "https://a.org//x",
        ] {
            assert_eq!(url(bad).unwrap_err().0, Reason::BadUrl, "{bad}");
        }
    }

    #[test]
    fn small_grammars() {
        assert!(slug("collection").is_ok());
        assert!(slug("a").is_err() && slug("1ab").is_err() && slug(&"a".repeat(41)).is_err());
        assert!(unix_name("www-data").is_ok() && unix_name("_x").is_ok());
        assert!(unix_name("WWW").is_err() && unix_name(&"a".repeat(33)).is_err());
        assert!(
            memory_size("4G").is_ok() && memory_size("4").is_err() && memory_size("G").is_err()
        );
        for (size, ok) in [
            ("1K", true),
            ("8589934592G", true),
            ("0K", false),
            ("0G", false),
            ("8589934593G", false),
            ("99999999999999999999G", false),
            ("+4G", false),
            ("4\u{e9}", false),
        ] {
            assert_eq!(memory_size(size).is_ok(), ok, "{size}");
        }
        assert!(cpu_quota("150%").is_ok() && cpu_quota("150").is_err());
        for (quota, ok) in [
            ("1%", true),
            ("100000%", true),
            ("0%", false),
            ("100001%", false),
            ("99999999999999999999%", false),
        ] {
            assert_eq!(cpu_quota(quota).is_ok(), ok, "{quota}");
        }
        assert!(
            credential_name("ANTHROPIC_API_KEY").is_ok() && credential_name("api_key").is_err()
        );
        assert!(email("ops@example.org").is_ok() && email("ops@example").is_err());
        assert!(realm("Example preprod").is_ok() && realm("a\"b").is_err());
        assert!(auth_user("preview").is_ok() && auth_user("Preview").is_err());
        assert!(host_prefix("pre").is_ok() && host_prefix("pre.x").is_err());
        assert!(description("  A museum  ").is_ok_and(|d| d == "A museum"));
        assert!(description("a\nb").is_err() && description("   ").is_err());
    }
}
