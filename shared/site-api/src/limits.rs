//! The limits the daemon enforces and a client checks before it sends, so both refuse the same
//! input.

/// The largest request body sited reads.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The longest prompt or message, in UTF-16 code units (how the engine counts a string).
pub const MAX_PROMPT_UNITS: usize = 32 * 1024;

/// The longest site name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// The longest actor username, in characters.
pub const MAX_USERNAME_CHARS: usize = 200;

/// How much of a publish note is kept, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// How many audit entries `GET /v1/audit` answers without a `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

/// The most audit entries one `GET /v1/audit` answers.
pub const MAX_AUDIT_LIMIT: usize = 1000;
