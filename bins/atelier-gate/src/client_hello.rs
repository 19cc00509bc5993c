//! The first-flight walker: is what the client sends first a TLS ClientHello with exactly one
//! server name, and which?
//!
//! The gate buffers the client's first bytes after `200 Connection Established` and asks a
//! [`FirstFlightReader`] after every read. Nothing goes upstream until it answers
//! [`FirstFlight::Accept`]; then the buffered bytes go upstream verbatim, so the upstream parses
//! the very ClientHello judged here. The reader keeps the records it walked between reads, so
//! each byte is walked once however the client splits its writes (a flight sent a byte at a
//! time would otherwise be walked again from its start at every byte);
//! [`inspect_first_flight`] is the same walk over a whole buffer.
//!
//! What is walked:
//! - TLS records: content type 0x16 (handshake), major version byte 3, length
//!   1..=[`MAX_RECORD_LEN`]. Handshake fragments are concatenated across records (a
//!   post-quantum ClientHello spans several); only whole records are read.
//! - The first handshake message must be a ClientHello (type 1) of at most [`MAX_HELLO_LEN`]
//!   bytes; the whole flight is bounded at [`MAX_FIRST_FLIGHT`] bytes.
//! - The ClientHello: legacy_version and random, session_id (at most 32 bytes), cipher_suites
//!   (non-empty, even), compression_methods (non-empty), then extensions whose lengths must add
//!   up exactly. Encrypted Client Hello (0xfe0d, and the draft ESNI 0xffce) is refused.
//! - server_name (0): exactly one extension holding exactly one `host_name` entry, every length
//!   consistent (any length lie is [`HelloRefusal::Malformed`]); the name must be visible ASCII
//!   and is lowercased.
//!
//! Refusals are decided as soon as the bytes that decide them have arrived: a first flight of
//! `G` is refused without waiting for `ET / HTTP/1.1`.

/// The most bytes of first flight the gate buffers.
pub const MAX_FIRST_FLIGHT: usize = 64 * 1024;

/// The largest TLS record length accepted: 2^14 + 2048, the most any TLS version lets a record
/// carry, so no record a client may lawfully send is refused.
pub const MAX_RECORD_LEN: usize = 18_432;

/// The largest ClientHello message body accepted.
pub const MAX_HELLO_LEN: usize = 64 * 1024;

const RECORD_HEADER_LEN: usize = 5;
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_TYPE_HANDSHAKE: u8 = 0x16;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
const EXT_ENCRYPTED_SERVER_NAME_DRAFT: u16 = 0xffce;
const NAME_TYPE_HOST_NAME: u8 = 0;
const MAX_SESSION_ID_LEN: usize = 32;

/// What to do with the first flight buffered so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstFlight {
    /// Not decided yet: read more (within the deadline and [`MAX_FIRST_FLIGHT`]).
    NeedMore,
    /// A well-formed ClientHello naming one server; `sni` is lowercase.
    Accept {
        /// The server name, lowercased.
        sni: String,
    },
    /// Close the tunnel; nothing may go upstream.
    Refuse(HelloRefusal),
}

/// Why a first flight is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum HelloRefusal {
    /// A record that is not a handshake record (e.g. plain HTTP, SSLv2, application data).
    #[error("not a TLS handshake")]
    NotTlsHandshake,
    /// A record whose major version byte is not 3.
    #[error("a TLS record with a bad version")]
    BadRecordVersion,
    /// A record of length 0 or more than [`MAX_RECORD_LEN`].
    #[error("a TLS record with a bad length")]
    BadRecordLength,
    /// The first handshake message is not a ClientHello.
    #[error("the first handshake message is not a ClientHello")]
    NotClientHello,
    /// The ClientHello or the flight carrying it exceeds its bound.
    #[error("the ClientHello exceeds {MAX_FIRST_FLIGHT} bytes")]
    TooLarge,
    /// A length inside the ClientHello disagrees with the bytes it covers.
    #[error("a malformed ClientHello")]
    Malformed,
    /// The ClientHello offers Encrypted Client Hello, which hides the real server name.
    #[error("Encrypted Client Hello is refused")]
    EncryptedClientHello,
    /// More than one server_name extension.
    #[error("more than one server name")]
    DuplicateServerName,
    /// No server_name extension.
    #[error("no server name")]
    NoServerName,
    /// A server name with bytes outside visible ASCII.
    #[error("a server name that is not a hostname")]
    InvalidServerName,
    /// The server name is not the CONNECT host. Raised by [`check_server_name`].
    #[error("the server name is not the CONNECT host")]
    ServerNameMismatch,
    /// The first flight did not arrive in time. Raised by the server, never by the walker.
    #[error("the ClientHello did not arrive in time")]
    Timeout,
}

impl HelloRefusal {
    /// Every refusal, in declaration order.
    pub const ALL: [HelloRefusal; 12] = [
        HelloRefusal::NotTlsHandshake,
        HelloRefusal::BadRecordVersion,
        HelloRefusal::BadRecordLength,
        HelloRefusal::NotClientHello,
        HelloRefusal::TooLarge,
        HelloRefusal::Malformed,
        HelloRefusal::EncryptedClientHello,
        HelloRefusal::DuplicateServerName,
        HelloRefusal::NoServerName,
        HelloRefusal::InvalidServerName,
        HelloRefusal::ServerNameMismatch,
        HelloRefusal::Timeout,
    ];

    /// The stable snake_case name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            HelloRefusal::NotTlsHandshake => "not_tls_handshake",
            HelloRefusal::BadRecordVersion => "bad_record_version",
            HelloRefusal::BadRecordLength => "bad_record_length",
            HelloRefusal::NotClientHello => "not_client_hello",
            HelloRefusal::TooLarge => "too_large",
            HelloRefusal::Malformed => "malformed",
            HelloRefusal::EncryptedClientHello => "encrypted_client_hello",
            HelloRefusal::DuplicateServerName => "duplicate_server_name",
            HelloRefusal::NoServerName => "no_server_name",
            HelloRefusal::InvalidServerName => "invalid_server_name",
            HelloRefusal::ServerNameMismatch => "server_name_mismatch",
            HelloRefusal::Timeout => "timeout",
        }
    }
}

/// Inspects the first flight buffered so far; see the module documentation.
pub fn inspect_first_flight(buf: &[u8]) -> FirstFlight {
    FirstFlightReader::default().inspect(buf)
}

/// The walk of one tunnel's first flight, kept between its reads: the whole records walked
/// and their handshake fragments.
#[derive(Debug, Default)]
pub struct FirstFlightReader {
    /// The bytes of the buffer that are whole records, walked.
    walked: usize,
    /// The handshake fragments of those records, concatenated.
    handshake: Vec<u8>,
}

impl FirstFlightReader {
    /// Inspects the first flight buffered so far: `buf` is the buffer given before (if any)
    /// with what was read since appended. Answers as [`inspect_first_flight`] of `buf` does.
    pub fn inspect(&mut self, buf: &[u8]) -> FirstFlight {
        let window = &buf[..buf.len().min(MAX_FIRST_FLIGHT)];
        match self.reassemble(window) {
            Reassembly::Complete(hello) => match walk(&hello) {
                Ok(sni) => FirstFlight::Accept { sni },
                Err(refusal) => FirstFlight::Refuse(refusal),
            },
            Reassembly::Refused(refusal) => FirstFlight::Refuse(refusal),
            Reassembly::Incomplete if buf.len() >= MAX_FIRST_FLIGHT => {
                FirstFlight::Refuse(HelloRefusal::TooLarge)
            }
            Reassembly::Incomplete => FirstFlight::NeedMore,
        }
    }

    fn reassemble(&mut self, window: &[u8]) -> Reassembly {
        loop {
            let rest = window.get(self.walked..).unwrap_or_default();
            // Check each header byte as soon as it is there.
            let Some(&content_type) = rest.first() else {
                return Reassembly::Incomplete;
            };
            if content_type != CONTENT_TYPE_HANDSHAKE {
                return Reassembly::Refused(HelloRefusal::NotTlsHandshake);
            }
            let Some(&major) = rest.get(1) else {
                return Reassembly::Incomplete;
            };
            if major != 3 {
                return Reassembly::Refused(HelloRefusal::BadRecordVersion);
            }
            let Some(header) = rest.get(..RECORD_HEADER_LEN) else {
                return Reassembly::Incomplete;
            };
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            if len == 0 || len > MAX_RECORD_LEN {
                return Reassembly::Refused(HelloRefusal::BadRecordLength);
            }
            let body = &rest[RECORD_HEADER_LEN..];
            let Some(fragment) = body.get(..len) else {
                // Judge the handshake header from what is already here, whole record or not;
                // once the whole records hold all of it, it was judged with them.
                if self.handshake.len() < HANDSHAKE_HEADER_LEN {
                    let mut probe = self.handshake.clone();
                    probe.extend(body.iter().take(HANDSHAKE_HEADER_LEN));
                    if let Err(refusal) = check_handshake_header(&probe) {
                        return Reassembly::Refused(refusal);
                    }
                }
                return Reassembly::Incomplete;
            };
            self.handshake.extend_from_slice(fragment);
            self.walked += RECORD_HEADER_LEN + len;
            match check_handshake_header(&self.handshake) {
                Err(refusal) => return Reassembly::Refused(refusal),
                Ok(Some(hello_len)) => {
                    let end = HANDSHAKE_HEADER_LEN + hello_len;
                    if let Some(hello) = self.handshake.get(HANDSHAKE_HEADER_LEN..end) {
                        return Reassembly::Complete(hello.to_vec());
                    }
                }
                Ok(None) => {}
            }
        }
    }
}

/// Refuses a server name that is not the CONNECT host (both lowercase; compared exactly).
pub fn check_server_name(connect_host: &str, sni: &str) -> Result<(), HelloRefusal> {
    if connect_host == sni {
        Ok(())
    } else {
        Err(HelloRefusal::ServerNameMismatch)
    }
}

enum Reassembly {
    Incomplete,
    /// The ClientHello body, without its handshake header.
    Complete(Vec<u8>),
    Refused(HelloRefusal),
}

/// Checks the handshake header bytes present; returns the ClientHello length once known.
fn check_handshake_header(handshake: &[u8]) -> Result<Option<usize>, HelloRefusal> {
    if let Some(&msg_type) = handshake.first() {
        if msg_type != HANDSHAKE_CLIENT_HELLO {
            return Err(HelloRefusal::NotClientHello);
        }
    }
    let Some(len) = handshake.get(1..HANDSHAKE_HEADER_LEN) else {
        return Ok(None);
    };
    let hello_len = (usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]);
    // Refuse at once what could not fit the flight even in the fewest, largest records.
    let message_len = HANDSHAKE_HEADER_LEN + hello_len;
    let fewest_records = message_len.div_ceil(MAX_RECORD_LEN);
    if hello_len > MAX_HELLO_LEN
        || message_len + fewest_records * RECORD_HEADER_LEN > MAX_FIRST_FLIGHT
    {
        return Err(HelloRefusal::TooLarge);
    }
    Ok(Some(hello_len))
}

/// Bounds-checked reads over the ClientHello body; running past the end is [`HelloRefusal::Malformed`].
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloRefusal> {
        if n > self.bytes.len() {
            return Err(HelloRefusal::Malformed);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, HelloRefusal> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn be16(&mut self) -> Result<u16, HelloRefusal> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u16(&mut self) -> Result<usize, HelloRefusal> {
        self.be16().map(usize::from)
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn walk(hello: &[u8]) -> Result<String, HelloRefusal> {
    let mut r = Reader { bytes: hello };
    r.take(2 + 32)?; // legacy_version, random
    let session_id_len = r.u8()?;
    if session_id_len > MAX_SESSION_ID_LEN {
        return Err(HelloRefusal::Malformed);
    }
    r.take(session_id_len)?;
    let suites_len = r.u16()?;
    if suites_len == 0 || suites_len % 2 != 0 {
        return Err(HelloRefusal::Malformed);
    }
    r.take(suites_len)?;
    let compression_len = r.u8()?;
    if compression_len == 0 {
        return Err(HelloRefusal::Malformed);
    }
    r.take(compression_len)?;
    if r.is_empty() {
        return Err(HelloRefusal::NoServerName);
    }
    let extensions_len = r.u16()?;
    if extensions_len != r.bytes.len() {
        return Err(HelloRefusal::Malformed);
    }
    let mut server_name: Option<Result<String, HelloRefusal>> = None;
    let mut duplicate = false;
    let mut ech = false;
    while !r.is_empty() {
        let ext_type = r.be16()?;
        let ext_len = r.u16()?;
        let data = r.take(ext_len)?;
        match ext_type {
            EXT_ENCRYPTED_CLIENT_HELLO | EXT_ENCRYPTED_SERVER_NAME_DRAFT => ech = true,
            EXT_SERVER_NAME => {
                let parsed = parse_server_name(data);
                if let Err(HelloRefusal::Malformed) = parsed {
                    return Err(HelloRefusal::Malformed);
                }
                duplicate |= server_name.is_some();
                server_name = Some(parsed);
            }
            _ => {}
        }
    }
    if ech {
        return Err(HelloRefusal::EncryptedClientHello);
    }
    if duplicate {
        return Err(HelloRefusal::DuplicateServerName);
    }
    server_name.unwrap_or(Err(HelloRefusal::NoServerName))
}

/// Parses server_name extension data holding exactly one `host_name` entry.
fn parse_server_name(data: &[u8]) -> Result<String, HelloRefusal> {
    let mut r = Reader { bytes: data };
    let list_len = r.u16()?;
    let name_type = r.u8()?;
    let name_len = r.u16()?;
    if list_len + 2 != data.len()
        || name_type != usize::from(NAME_TYPE_HOST_NAME)
        || name_len == 0
        || 5 + name_len != data.len()
    {
        return Err(HelloRefusal::Malformed);
    }
    let name = r.take(name_len)?;
    if !name.iter().all(u8::is_ascii_graphic) {
        return Err(HelloRefusal::InvalidServerName);
    }
    Ok(name
        .iter()
        .map(|b| char::from(b.to_ascii_lowercase()))
        .collect())
}

#[cfg(test)]
pub(crate) mod tests;
