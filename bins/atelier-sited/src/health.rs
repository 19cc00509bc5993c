//! The unauthenticated `GET /health` payload and the engine's pairing fingerprint.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The agent drivers the engine knows, in the order the contract lists them.
const DRIVER_IDS: [&str; 3] = ["claude_code", "opencode", "pi"];

/// `hex(sha256("dedalo-site-instance:" + instance + "\n" + token))`: lets the engine prove it
/// reached the instance it was paired with without either side revealing the token.
pub fn instance_fingerprint(instance: &str, token: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(b"dedalo-site-instance:");
    digest.update(instance.as_bytes());
    digest.update(b"\n");
    digest.update(token.as_bytes());
    hex::encode(digest.finalize())
}

/// The `/health` body, byte for byte the shape the engine parses.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    status: &'static str,
    service: &'static str,
    drivers: Vec<DriverAvailability>,
    instance_fingerprint: String,
}

/// One agent driver as `/health` and `/v1/capabilities` report it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DriverAvailability {
    id: &'static str,
    available: bool,
    version: Option<String>,
    is_default: bool,
}

impl Health {
    /// The drivers as `/health` reports them, which `/v1/capabilities` repeats.
    pub(crate) fn drivers(&self) -> &[DriverAvailability] {
        &self.drivers
    }

    /// The payload for an instance. Driver detection is not built yet, so every driver is
    /// reported unavailable rather than guessed at.
    pub fn new(instance_fingerprint: String, default_driver: &str) -> Self {
        let drivers = DRIVER_IDS
            .iter()
            .map(|&id| DriverAvailability {
                id,
                available: false,
                version: None,
                is_default: id == default_driver,
            })
            .collect();
        Self {
            status: "ok",
            service: crate::SERVICE_NAME,
            drivers,
            instance_fingerprint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_matches_the_contract_vectors() {
        assert_eq!(
            instance_fingerprint("test", "test-service-token-000000000000000000000000"),
            "2eca5043adb9e40a704c689d74e9fe6db3270c4559dde3920109fb378fccdc46"
        );
        assert_eq!(
            instance_fingerprint("example", &"x".repeat(32)),
            "59fec31fb346c03be9ebda43c134328833780832dff864d1578f819fcc7349cb"
        );
    }

    #[test]
    fn body_names_neither_instance_nor_token() {
        let token = "a-token-that-must-never-leak-000000000";
        let body = serde_json::to_string(&Health::new(
            instance_fingerprint("museum", token),
            "claude_code",
        ))
        .unwrap();
        assert!(!body.contains(token));
        assert!(!body.contains("museum"));
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["status"], "ok");
        assert_eq!(value["service"], "dedalo-site-builder");
        let ids: Vec<_> = value["drivers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["claude_code", "opencode", "pi"]);
        assert_eq!(value["drivers"][0]["is_default"], true);
        assert_eq!(value["drivers"][1]["is_default"], false);
    }
}
