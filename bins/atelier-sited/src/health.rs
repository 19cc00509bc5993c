//! The unauthenticated `GET /health` payload and the engine's pairing fingerprint.

use atelier_site_api::{DriverAvailability, Health as HealthBody, SERVICE_NAME};

use crate::drivers::Drivers;

pub use atelier_layout::pairing::instance_fingerprint;

/// The `/health` endpoint: the fingerprint, and the drivers as they are now.
#[derive(Debug, Clone)]
pub struct Health {
    instance_fingerprint: String,
    drivers: Drivers,
}

impl Health {
    /// The endpoint for an instance whose fingerprint is `instance_fingerprint`.
    pub fn new(instance_fingerprint: String, drivers: Drivers) -> Self {
        Self {
            instance_fingerprint,
            drivers,
        }
    }

    /// The drivers as `/health` reports them, which `/v1/capabilities` repeats.
    pub(crate) fn drivers(&self) -> Vec<DriverAvailability> {
        self.drivers.availability()
    }

    /// The payload.
    pub fn body(&self) -> HealthBody {
        HealthBody {
            status: "ok".to_owned(),
            service: SERVICE_NAME.to_owned(),
            drivers: self.drivers(),
            instance_fingerprint: self.instance_fingerprint.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_names_neither_instance_nor_token() {
        let token = "a-token-that-must-never-leak-000000000";
        let drivers = Drivers::new([], atelier_agents::DriverId::ClaudeCode);
        let health = Health::new(instance_fingerprint("museum", token), drivers);
        let body = serde_json::to_string(&health.body()).unwrap();
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
        assert_eq!(ids, ["claude_code", "opencode", "pi", "atelier"]);
        assert_eq!(value["drivers"][0]["is_default"], true);
        assert_eq!(value["drivers"][1]["is_default"], false);
        assert_eq!(
            value["drivers"][0]["available"], false,
            "no binary configured"
        );
    }
}
