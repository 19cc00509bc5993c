//! The CONNECT head parser: which host a client asks the gate to reach, or why it may not.
//!
//! Only `CONNECT <host>:443 HTTP/1.x` is served. The head ends at the first `\r\n\r\n` and is
//! at most [`MAX_HEAD`] bytes including that terminator; only the request line is interpreted,
//! and the bytes after the head are the start of the client's first flight.
//!
//! Host rules: the target splits at its last `:`; the port must be the exact text `443`; the
//! host, ASCII-lowercased, must be a plan host ([`atelier_layout::hosts`], the rule the
//! provisioner checked the plan with): an IP address is [`ConnectRefusal::IpLiteral`], a name
//! outside the plan grammar (a trailing dot among them: the gate compares the host with the
//! plan and with the ClientHello's server name as plain text, so each host has one spelling)
//! [`ConnectRefusal::InvalidHost`], a name under a special-use local suffix
//! [`ConnectRefusal::SpecialUseHost`].

use std::fmt;

use atelier_layout::hosts::{check_plan_host, NotPlanHost};

/// The most bytes a head may take, terminator included.
pub const MAX_HEAD: usize = 8 * 1024;

pub use atelier_layout::services::EGRESS_PORT;

/// The end of a head.
const TERMINATOR: &[u8] = b"\r\n\r\n";

/// A CONNECT destination that passed every check that needs no plan: a lowercase hostname
/// (never an IP literal) on port 443.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectTarget {
    host: String,
}

impl ConnectTarget {
    /// The lowercase hostname.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, always [`EGRESS_PORT`].
    pub fn port(&self) -> u16 {
        EGRESS_PORT
    }
}

impl fmt::Display for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, EGRESS_PORT)
    }
}

/// Why the gate refuses a CONNECT head; each maps to one HTTP status and one reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ConnectRefusal {
    /// No `\r\n\r\n` within [`MAX_HEAD`] bytes (431).
    #[error("the request head exceeds {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The head did not complete in time (408). Raised by the server, never by [`parse_head`].
    #[error("the request head did not arrive in time")]
    HeadTimeout,
    /// The request line is not `<method> <target> HTTP/1.x` in visible ASCII (400).
    #[error("the request line is malformed")]
    MalformedRequestLine,
    /// The method is not `CONNECT` (405).
    #[error("only CONNECT <host>:443 leaves this unit")]
    MethodNotAllowed,
    /// The port is missing or not exactly `443` (403).
    #[error("only port 443 leaves this unit")]
    PortNotAllowed,
    /// The host is an IP literal (403).
    #[error("an IP literal; egress is by hostname only")]
    IpLiteral,
    /// The host is not a DNS name in the plan grammar, e.g. a trailing dot (403).
    #[error("not a valid hostname")]
    InvalidHost,
    /// The host is under a special-use local suffix such as `.localhost` (403).
    #[error("a special-use local name")]
    SpecialUseHost,
    /// The host is not on this door's plan (403).
    #[error("not a host this run may reach")]
    NotInPlan,
}

impl ConnectRefusal {
    /// Every refusal, in declaration order.
    pub const ALL: [ConnectRefusal; 9] = [
        ConnectRefusal::HeadTooLarge,
        ConnectRefusal::HeadTimeout,
        ConnectRefusal::MalformedRequestLine,
        ConnectRefusal::MethodNotAllowed,
        ConnectRefusal::PortNotAllowed,
        ConnectRefusal::IpLiteral,
        ConnectRefusal::InvalidHost,
        ConnectRefusal::SpecialUseHost,
        ConnectRefusal::NotInPlan,
    ];

    /// The stable snake_case name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectRefusal::HeadTooLarge => "head_too_large",
            ConnectRefusal::HeadTimeout => "head_timeout",
            ConnectRefusal::MalformedRequestLine => "malformed_request_line",
            ConnectRefusal::MethodNotAllowed => "method_not_allowed",
            ConnectRefusal::PortNotAllowed => "port_not_allowed",
            ConnectRefusal::IpLiteral => "ip_literal",
            ConnectRefusal::InvalidHost => "invalid_host",
            ConnectRefusal::SpecialUseHost => "special_use_host",
            ConnectRefusal::NotInPlan => "not_in_plan",
        }
    }

    /// The HTTP status the client gets.
    pub fn status(self) -> u16 {
        match self {
            ConnectRefusal::HeadTooLarge => 431,
            ConnectRefusal::HeadTimeout => 408,
            ConnectRefusal::MalformedRequestLine => 400,
            ConnectRefusal::MethodNotAllowed => 405,
            ConnectRefusal::PortNotAllowed
            | ConnectRefusal::IpLiteral
            | ConnectRefusal::InvalidHost
            | ConnectRefusal::SpecialUseHost
            | ConnectRefusal::NotInPlan => 403,
        }
    }

    /// The status's standard reason phrase.
    pub fn status_text(self) -> &'static str {
        match self.status() {
            400 => "Bad Request",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            _ => "Forbidden",
        }
    }

    /// The exact reply: `HTTP/1.1 <code> <reason>\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`.
    pub fn reply(self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {} {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.status(),
            self.status_text()
        )
        .into_bytes()
    }
}

/// Parses a CONNECT head from the bytes received so far.
///
/// Returns `Ok(None)` while no terminator has arrived and fewer than [`MAX_HEAD`] bytes are
/// buffered; `Ok(Some((target, head_len)))` once a head parses, where `buf[head_len..]` is the
/// start of the first flight; or the refusal. Checks run in this order: size, method, request
/// line shape, port, IP literal, host grammar, special-use suffix. The plan is checked apart,
/// by [`check_plan`].
pub fn parse_head(buf: &[u8]) -> Result<Option<(ConnectTarget, usize)>, ConnectRefusal> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some(end) = find(window, TERMINATOR) else {
        return if buf.len() >= MAX_HEAD {
            Err(ConnectRefusal::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    let head_len = end + TERMINATOR.len();
    // The request line ends at the first CRLF, which is at or before the terminator.
    let line_end = find(&window[..head_len], b"\r\n").unwrap_or(end);
    let target = parse_request_line(&window[..line_end])?;
    Ok(Some((target, head_len)))
}

/// Returns false only when [`parse_head`] would answer `Ok(None)` for `buf`, given that its
/// first `seen` bytes were looked at before and held no terminator: only the bytes since (and
/// the three before them, where a terminator may have begun) are scanned. So a head trickled a
/// byte at a time is scanned once in all, not once per byte.
pub fn head_may_end(buf: &[u8], seen: usize) -> bool {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let from = seen.saturating_sub(TERMINATOR.len() - 1).min(window.len());
    buf.len() >= MAX_HEAD || find(&window[from..], TERMINATOR).is_some()
}

/// Refuses a target whose host is not in `plan_hosts` (compared ASCII-case-insensitively).
pub fn check_plan<S: AsRef<str>>(
    target: &ConnectTarget,
    plan_hosts: &[S],
) -> Result<(), ConnectRefusal> {
    if plan_hosts
        .iter()
        .any(|host| host.as_ref().eq_ignore_ascii_case(&target.host))
    {
        Ok(())
    } else {
        Err(ConnectRefusal::NotInPlan)
    }
}

fn parse_request_line(line: &[u8]) -> Result<ConnectTarget, ConnectRefusal> {
    let method_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    if &line[..method_end] != b"CONNECT" {
        return Err(ConnectRefusal::MethodNotAllowed);
    }
    if !line.iter().all(|&b| b.is_ascii_graphic() || b == b' ') {
        return Err(ConnectRefusal::MalformedRequestLine);
    }
    // Visible ASCII only, so this is valid UTF-8.
    let line = std::str::from_utf8(line).map_err(|_| ConnectRefusal::MalformedRequestLine)?;
    let mut parts = line.split(' ');
    let (Some(_method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ConnectRefusal::MalformedRequestLine);
    };
    if target.is_empty() || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(ConnectRefusal::MalformedRequestLine);
    }
    let (host, port) = target
        .rsplit_once(':')
        .ok_or(ConnectRefusal::PortNotAllowed)?;
    if port != "443" {
        return Err(ConnectRefusal::PortNotAllowed);
    }
    let host = host.to_ascii_lowercase();
    check_plan_host(&host).map_err(|refusal| match refusal {
        NotPlanHost::Address => ConnectRefusal::IpLiteral,
        NotPlanHost::NotHostname => ConnectRefusal::InvalidHost,
        NotPlanHost::SpecialUse => ConnectRefusal::SpecialUseHost,
    })?;
    Ok(ConnectTarget { host })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests;
