//! Request body limits shared by more than one route: the chat body and the browser's tool
//! results (which carry screenshots) are read under the same bound.

/// The chat body's byte limit: eight 2 MB images plus 16 MiB of everything else.
pub const CHAT_MAX_REQUEST_BYTES: usize = 8 * 2_000_000 + 16 * 1024 * 1024;
