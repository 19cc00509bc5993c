//! sited's settings: raw values from the command line and systemd, validated into [`Settings`].

use std::fmt;
use std::path::PathBuf;

use atelier_layout::names::InstanceName;

/// Where the engine mounts the daemon unless the instance says otherwise.
pub const DEFAULT_BASE_PATH: &str = "/publication/site_builder";

/// Mode of the socket sited binds itself outside socket activation: the service user and the
/// engine's group, as the `.socket` unit declares it.
pub(crate) const FALLBACK_SOCKET_MODE: u32 = 0o660;

/// The credential that holds the bearer token the engine presents.
pub const SERVICE_TOKEN_CREDENTIAL: &str = atelier_layout::paths::SERVICE_TOKEN;

/// A service token shorter than this is refused: it is the only thing between any local process
/// that can reach the socket and every site.
const MIN_TOKEN_LEN: usize = 32;

const DEFAULT_DRIVER: &str = "claude_code";

/// Settings as given, before validation.
#[derive(Debug, Default, Clone)]
pub struct RawSettings {
    /// The instance name (the unit's `%i`).
    pub instance: String,
    /// The service token, from `$CREDENTIALS_DIRECTORY` or a development token file.
    pub service_token: Option<String>,
    /// Where the engine mounts the daemon.
    pub base_path: Option<String>,
    /// The unix socket to bind when systemd passed none.
    pub listen: Option<PathBuf>,
}

/// Validated settings.
#[derive(Clone)]
pub struct Settings {
    /// The instance this daemon serves.
    pub instance: InstanceName,
    /// The bearer token; never printed.
    pub(crate) service_token: String,
    /// The mount prefix stripped from every request path.
    pub base_path: String,
    /// The unix socket to bind when not socket-activated.
    pub listen: Option<PathBuf>,
    /// The driver `/health` marks as the default.
    pub default_driver: &'static str,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("instance", &self.instance)
            .field("service_token", &"[redacted]")
            .field("base_path", &self.base_path)
            .field("listen", &self.listen)
            .finish()
    }
}

/// A setting that cannot be used; each names the setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// The instance name breaks the grammar.
    #[error("{0}")]
    BadInstance(#[from] atelier_layout::names::NameError),
    /// No service token was provided.
    #[error("no service token: provide the {SERVICE_TOKEN_CREDENTIAL} credential")]
    MissingToken,
    /// The service token is too short.
    #[error("the service token must be at least {MIN_TOKEN_LEN} characters")]
    ShortToken,
    /// The base path is not `/`-prefixed or ends with `/`.
    #[error("base path {0:?} must start with '/' and not end with '/'")]
    BadBasePath(String),
    /// The fallback socket path is relative.
    #[error("listen path {0:?} must be absolute")]
    RelativeListen(PathBuf),
}

impl RawSettings {
    /// Validates every setting, reporting the first that cannot be used.
    pub fn validate(self) -> Result<Settings, SettingsError> {
        let instance = InstanceName::new(&self.instance)?;
        let service_token = self.service_token.ok_or(SettingsError::MissingToken)?;
        if service_token.chars().count() < MIN_TOKEN_LEN {
            return Err(SettingsError::ShortToken);
        }
        let base_path = self
            .base_path
            .unwrap_or_else(|| DEFAULT_BASE_PATH.to_owned());
        if !base_path.starts_with('/') || (base_path.len() > 1 && base_path.ends_with('/')) {
            return Err(SettingsError::BadBasePath(base_path));
        }
        if let Some(path) = &self.listen {
            if !path.is_absolute() {
                return Err(SettingsError::RelativeListen(path.clone()));
            }
        }
        Ok(Settings {
            instance,
            service_token,
            base_path,
            listen: self.listen,
            default_driver: DEFAULT_DRIVER,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_instance(name: &str) -> SettingsError {
        atelier_layout::names::NameError::BadInstance(name.into()).into()
    }

    fn raw() -> RawSettings {
        RawSettings {
            instance: "museum".into(),
            service_token: Some("t".repeat(32)),
            base_path: None,
            listen: None,
        }
    }

    #[test]
    fn refusals_name_the_setting() {
        let cases: Vec<(&str, RawSettings, SettingsError)> = vec![
            (
                "uppercase instance",
                RawSettings {
                    instance: "Museum".into(),
                    ..raw()
                },
                bad_instance("Museum"),
            ),
            (
                "one-letter instance",
                RawSettings {
                    instance: "m".into(),
                    ..raw()
                },
                bad_instance("m"),
            ),
            (
                "instance too long",
                RawSettings {
                    instance: "a".repeat(20),
                    ..raw()
                },
                bad_instance(&"a".repeat(20)),
            ),
            (
                "instance with a slash",
                RawSettings {
                    instance: "a/b".into(),
                    ..raw()
                },
                bad_instance("a/b"),
            ),
            (
                "no token",
                RawSettings {
                    service_token: None,
                    ..raw()
                },
                SettingsError::MissingToken,
            ),
            (
                "short token",
                RawSettings {
                    service_token: Some("t".repeat(31)),
                    ..raw()
                },
                SettingsError::ShortToken,
            ),
            (
                "relative base path",
                RawSettings {
                    base_path: Some("site".into()),
                    ..raw()
                },
                SettingsError::BadBasePath("site".into()),
            ),
            (
                "trailing slash base path",
                RawSettings {
                    base_path: Some("/site/".into()),
                    ..raw()
                },
                SettingsError::BadBasePath("/site/".into()),
            ),
            (
                "relative listen path",
                RawSettings {
                    listen: Some("sited.sock".into()),
                    ..raw()
                },
                SettingsError::RelativeListen("sited.sock".into()),
            ),
        ];
        for (name, raw, expected) in cases {
            assert_eq!(raw.validate().unwrap_err(), expected, "case {name}");
        }
    }

    #[test]
    fn defaults_and_redaction() {
        let settings = raw().validate().unwrap();
        assert_eq!(settings.base_path, DEFAULT_BASE_PATH);
        assert!(!format!("{settings:?}").contains(&"t".repeat(32)));
    }
}
