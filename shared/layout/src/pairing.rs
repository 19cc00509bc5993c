//! The engine's pairing with an instance: the keys of its environment fragment and the
//! fingerprint `/health` carries, which both sides compute the same way.

use sha2::{Digest, Sha256};

/// The engine's key naming the instance it pairs with.
pub const ENGINE_INSTANCE_KEY: &str = "DEDALO_SITE_BUILDER_INSTANCE";
/// The engine's key naming sited's socket.
pub const ENGINE_SOCKET_KEY: &str = "DEDALO_SITE_BUILDER_SOCKET";
/// The engine's key holding the service token (never written by the provisioner).
pub const ENGINE_TOKEN_KEY: &str = "DEDALO_SITE_BUILDER_TOKEN";
/// The engine's key for an HTTP address instead of the socket.
pub const ENGINE_URL_KEY: &str = "DEDALO_SITE_BUILDER_URL";
/// The engine's per-call timeout key.
pub const ENGINE_TIMEOUT_KEY: &str = "DEDALO_SITE_BUILDER_TIMEOUT_MS";
/// The prefix of every key of the engine's pairing family.
pub const ENGINE_KEY_PREFIX: &str = "DEDALO_SITE_BUILDER_";

/// `hex(sha256("dedalo-site-instance:" + instance + "\n" + token))`, lowercase: lets the engine
/// prove it reached the instance it was paired with without either side revealing the token.
pub fn instance_fingerprint(instance: &str, token: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(b"dedalo-site-instance:");
    digest.update(instance.as_bytes());
    digest.update(b"\n");
    digest.update(token.as_bytes());
    hex::encode(digest.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_vectors_hold() {
        assert_eq!(
            instance_fingerprint("test", "test-service-token-000000000000000000000000"),
            "2eca5043adb9e40a704c689d74e9fe6db3270c4559dde3920109fb378fccdc46"
        );
        assert_eq!(
            instance_fingerprint("example", &"x".repeat(32)),
            "59fec31fb346c03be9ebda43c134328833780832dff864d1578f819fcc7349cb"
        );
    }
}
