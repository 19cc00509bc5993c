//! chatd's settings: raw values from the command line, `CHATD_*` variables and systemd,
//! validated into [`Settings`].

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use atelier_daemon::problems::Problems;
use atelier_layout::services::CHATD_PROVIDER_IDLE_TIMEOUT_MS;

use crate::auth::normalize_origin;
use crate::cms::{CmsOrigin, CmsOriginError};
use crate::master_key::MasterKey;
use crate::providers::ProviderUrls;

/// The systemd credential that holds the bearer token the CMS's reverse proxy presents.
pub const SERVICE_TOKEN_CREDENTIAL: &str = "CHATD_SERVICE_TOKEN";

/// Where the database lives under `StateDirectory=atelier-chatd` unless `--database` says
/// otherwise.
pub const DEFAULT_DATABASE: &str = "/var/lib/atelier-chatd/chat.sqlite3";

/// Mode of the socket chatd binds itself outside socket activation, as the `.socket` unit
/// declares it: the service user and the proxy's group.
pub(crate) const FALLBACK_SOCKET_MODE: u32 = 0o660;

/// A service token shorter than this is refused: it is the only thing between any local process
/// that can reach the socket and every user's conversations.
const MIN_TOKEN_LEN: usize = 32;

/// The environment variables chatd reads; any other `CHATD_` variable is refused by name, so a
/// typo cannot silently leave a setting at its default.
const KNOWN_VARIABLES: &[&str] = &[
    "CHATD_DATABASE",
    "CHATD_PUBLIC_ORIGIN",
    "CHATD_ANTHROPIC_URL",
    "CHATD_OPENAI_URL",
    "CHATD_OPENROUTER_URL",
    "CHATD_CMS_ORIGIN",
    "CHATD_PROVIDER_IDLE_TIMEOUT_MS",
];

/// Settings as given, before validation.
#[derive(Debug, Default, Clone)]
pub struct RawSettings {
    /// The SQLite database file.
    pub database: Option<PathBuf>,
    /// The unix socket to bind when systemd passed none.
    pub listen: Option<PathBuf>,
    /// The origins the editor is served from (`scheme://host[:port]`); state-changing requests
    /// carrying another `Origin` are refused.
    pub public_origins: Vec<String>,
    /// The service token, from `$CREDENTIALS_DIRECTORY` or a development token file.
    pub service_token: Option<String>,
    /// The master key's credential text (base64 of 32 bytes); without one, provider secrets
    /// cannot be stored or used.
    pub master_key: Option<String>,
    /// Anthropic's base URL, when not the production one.
    pub anthropic_url: Option<String>,
    /// OpenAI's base URL, when not the production one.
    pub openai_url: Option<String>,
    /// OpenRouter's base URL (`…/api`), when not the production one; the pricing catalogue
    /// is read from it too.
    pub openrouter_url: Option<String>,
    /// Where the CMS listens on loopback (`http://127.0.0.1:3001`); chatd asks it whose each
    /// session cookie is.
    pub cms_origin: Option<String>,
    /// Milliseconds a provider may stay silent (before its answer's head, or between two
    /// reads of its stream) before the turn fails, as given (`CHATD_PROVIDER_IDLE_TIMEOUT_MS`).
    pub provider_idle_timeout_ms: Option<String>,
}

/// Validated settings.
#[derive(Clone)]
pub struct Settings {
    /// The SQLite database file.
    pub database: PathBuf,
    /// The unix socket to bind when not socket-activated.
    pub listen: Option<PathBuf>,
    /// The allowed origins, normalised; never empty.
    pub public_origins: Vec<String>,
    /// The bearer token; never printed.
    pub(crate) service_token: String,
    /// The master key that seals provider secrets; never printed.
    pub master_key: Option<Arc<MasterKey>>,
    /// Where hosted providers are reached.
    pub provider_urls: ProviderUrls,
    /// Where the CMS listens.
    pub cms_origin: CmsOrigin,
    /// How long a provider may stay silent before the turn fails.
    pub provider_idle_timeout: Duration,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("database", &self.database)
            .field("listen", &self.listen)
            .field("public_origins", &self.public_origins)
            .field("service_token", &"[redacted]")
            .field(
                "master_key",
                &self.master_key.as_ref().map(|key| key.fingerprint()),
            )
            .field("provider_urls", &self.provider_urls)
            .field("cms_origin", &self.cms_origin)
            .field("provider_idle_timeout", &self.provider_idle_timeout)
            .finish()
    }
}

/// A setting that cannot be used; each names the setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// A `CHATD_` variable chatd does not know.
    #[error("unknown setting {0}; known: CHATD_DATABASE, CHATD_PUBLIC_ORIGIN, CHATD_ANTHROPIC_URL, CHATD_OPENAI_URL, CHATD_OPENROUTER_URL, CHATD_CMS_ORIGIN, CHATD_PROVIDER_IDLE_TIMEOUT_MS")]
    UnknownKey(String),
    /// No service token was provided.
    #[error("no service token: provide the {SERVICE_TOKEN_CREDENTIAL} credential")]
    MissingToken,
    /// The service token is too short.
    #[error("the service token must be at least {MIN_TOKEN_LEN} characters")]
    ShortToken,
    /// No public origin was configured.
    #[error("no public origin: give --public-origin or CHATD_PUBLIC_ORIGIN")]
    MissingPublicOrigin,
    /// A public origin is not an `http(s)://host[:port]` URL.
    #[error("public origin {0:?} must be an http or https URL")]
    BadPublicOrigin(String),
    /// The master key is not base64 of exactly 32 bytes.
    #[error("the CHATD_MASTER_KEY credential must be base64 of exactly 32 bytes")]
    BadMasterKey,
    /// A provider URL is not an `http(s)://` URL.
    #[error("{setting} {url:?} must be an http or https URL")]
    BadProviderUrl {
        /// Which setting.
        setting: &'static str,
        /// The value given.
        url: String,
    },
    /// No CMS origin was configured: without it no session can be checked.
    #[error("no CMS origin: set CHATD_CMS_ORIGIN (e.g. http://127.0.0.1:3001)")]
    MissingCmsOrigin,
    /// The CMS origin is not `http://` with a loopback address and a port.
    #[error("CHATD_CMS_ORIGIN {value:?} {reason}")]
    BadCmsOrigin {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: CmsOriginError,
    },
    /// The provider idle timeout is not a whole number of milliseconds in range.
    #[error("CHATD_PROVIDER_IDLE_TIMEOUT_MS {0:?} must be a whole number of milliseconds from 1000 (a second) to 3600000 (an hour, the CMS vhost's wait for a stream's next byte)")]
    BadProviderIdleTimeout(String),
    /// A path setting is relative.
    #[error("{setting} path {path:?} must be absolute")]
    RelativePath {
        /// Which setting.
        setting: &'static str,
        /// The path given.
        path: PathBuf,
    },
}

impl RawSettings {
    /// Validates every setting, reporting every one that cannot be used.
    pub fn validate(self) -> Result<Settings, Problems<SettingsError>> {
        self.validate_with_variables(std::iter::empty::<(&str, &str)>())
    }

    /// Applies `CHATD_*` variables (the process environment, passed in) under what the command
    /// line already set (the command line wins), then validates every setting. Variables without
    /// the `CHATD_` prefix are ignored; unknown ones with it are refused by name. Every problem
    /// found is reported, not only the first.
    pub fn validate_with_variables<I, K, V>(
        mut self,
        variables: I,
    ) -> Result<Settings, Problems<SettingsError>>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut problems = Problems::new();
        for (key, value) in variables {
            let (key, value) = (key.as_ref(), value.as_ref());
            if !key.starts_with("CHATD_") {
                continue;
            }
            match key {
                "CHATD_DATABASE" if self.database.is_none() => {
                    self.database = Some(PathBuf::from(value));
                }
                "CHATD_PUBLIC_ORIGIN" if self.public_origins.is_empty() => {
                    self.public_origins = value
                        .split(',')
                        .map(str::trim)
                        .filter(|o| !o.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
                "CHATD_ANTHROPIC_URL" if self.anthropic_url.is_none() => {
                    self.anthropic_url = Some(value.to_owned());
                }
                "CHATD_OPENAI_URL" if self.openai_url.is_none() => {
                    self.openai_url = Some(value.to_owned());
                }
                "CHATD_CMS_ORIGIN" if self.cms_origin.is_none() => {
                    self.cms_origin = Some(value.to_owned());
                }
                "CHATD_OPENROUTER_URL" if self.openrouter_url.is_none() => {
                    self.openrouter_url = Some(value.to_owned());
                }
                "CHATD_PROVIDER_IDLE_TIMEOUT_MS" if self.provider_idle_timeout_ms.is_none() => {
                    self.provider_idle_timeout_ms = Some(value.to_owned());
                }
                known if KNOWN_VARIABLES.contains(&known) => {}
                unknown => problems.push(SettingsError::UnknownKey(unknown.to_owned())),
            }
        }
        self.settle(problems)
    }

    /// Checks each setting in turn, recording a problem and going on to the next.
    fn settle(
        self,
        mut problems: Problems<SettingsError>,
    ) -> Result<Settings, Problems<SettingsError>> {
        let service_token = problems.take(match self.service_token {
            None => Err(SettingsError::MissingToken),
            Some(token) if token.chars().count() < MIN_TOKEN_LEN => Err(SettingsError::ShortToken),
            Some(token) => Ok(token),
        });
        if self.public_origins.is_empty() {
            problems.push(SettingsError::MissingPublicOrigin);
        }
        let public_origins: Vec<String> = self
            .public_origins
            .iter()
            .filter_map(|origin| {
                problems.take(
                    normalize_origin(origin)
                        .ok_or_else(|| SettingsError::BadPublicOrigin(origin.clone())),
                )
            })
            .collect();
        let cms_origin = problems.take(match self.cms_origin {
            None => Err(SettingsError::MissingCmsOrigin),
            Some(value) => value
                .parse::<CmsOrigin>()
                .map_err(|reason| SettingsError::BadCmsOrigin { value, reason }),
        });
        let database = self
            .database
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATABASE));
        for (setting, path) in [
            ("database", Some(&database)),
            ("listen", self.listen.as_ref()),
        ] {
            if let Some(path) = path.filter(|p| !p.is_absolute()) {
                problems.push(SettingsError::RelativePath {
                    setting,
                    path: path.clone(),
                });
            }
        }
        let master_key = problems.take(
            self.master_key
                .as_deref()
                .map(|text| MasterKey::from_base64(text).map(Arc::new))
                .transpose()
                .map_err(|_| SettingsError::BadMasterKey),
        );
        let mut provider_urls = ProviderUrls::default();
        for (setting, value, slot) in [
            (
                "CHATD_ANTHROPIC_URL",
                self.anthropic_url,
                &mut provider_urls.anthropic,
            ),
            (
                "CHATD_OPENAI_URL",
                self.openai_url,
                &mut provider_urls.openai,
            ),
            (
                "CHATD_OPENROUTER_URL",
                self.openrouter_url,
                &mut provider_urls.openrouter,
            ),
        ] {
            match value {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    *slot = url.trim_end_matches('/').to_owned();
                }
                Some(url) => problems.push(SettingsError::BadProviderUrl { setting, url }),
                None => {}
            }
        }
        let provider_idle_timeout = problems.take(match self.provider_idle_timeout_ms {
            None => Ok(atelier_llm::DEFAULT_IDLE_TIMEOUT),
            Some(given) => match given.trim().parse::<u64>() {
                Ok(ms) if CHATD_PROVIDER_IDLE_TIMEOUT_MS.contains(&ms) => {
                    Ok(Duration::from_millis(ms))
                }
                _ => Err(SettingsError::BadProviderIdleTimeout(given)),
            },
        });
        // Every `None` here comes with its recorded problem.
        let (Some(service_token), Some(cms_origin), Some(master_key), Some(provider_idle_timeout)) =
            (service_token, cms_origin, master_key, provider_idle_timeout)
        else {
            return Err(problems);
        };
        problems.into_result()?;
        Ok(Settings {
            database,
            listen: self.listen,
            public_origins,
            service_token,
            master_key,
            provider_urls,
            cms_origin,
            provider_idle_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawSettings {
        RawSettings {
            service_token: Some("t".repeat(32)),
            public_origins: vec!["https://cms.example".into()],
            cms_origin: Some("http://127.0.0.1:3001".into()),
            ..RawSettings::default()
        }
    }

    #[test]
    fn refusals_name_the_setting() {
        let cases: Vec<(&str, RawSettings, SettingsError)> = vec![
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
                "no origin",
                RawSettings {
                    public_origins: vec![],
                    ..raw()
                },
                SettingsError::MissingPublicOrigin,
            ),
            (
                "ftp origin",
                RawSettings {
                    public_origins: vec!["ftp://cms.example".into()],
                    ..raw()
                },
                SettingsError::BadPublicOrigin("ftp://cms.example".into()),
            ),
            (
                "relative database",
                RawSettings {
                    database: Some("chat.sqlite3".into()),
                    ..raw()
                },
                SettingsError::RelativePath {
                    setting: "database",
                    path: "chat.sqlite3".into(),
                },
            ),
            (
                "relative listen",
                RawSettings {
                    listen: Some("chatd.sock".into()),
                    ..raw()
                },
                SettingsError::RelativePath {
                    setting: "listen",
                    path: "chatd.sock".into(),
                },
            ),
        ];
        for (name, raw, expected) in cases {
            assert_eq!(
                raw.validate().unwrap_err().as_slice(),
                [expected],
                "case {name}"
            );
        }
    }

    #[test]
    fn the_cms_origin_is_required_and_must_be_loopback() {
        let cases: Vec<(&str, Option<&str>, Result<&str, SettingsError>)> = vec![
            (
                "ipv4",
                Some("http://127.0.0.1:3001"),
                Ok("http://127.0.0.1:3001"),
            ),
            ("ipv6", Some("http://[::1]:3001/"), Ok("http://[::1]:3001")),
            ("missing", None, Err(SettingsError::MissingCmsOrigin)),
            (
                "a host name",
                Some("http://cms.example:3001"),
                Err(SettingsError::BadCmsOrigin {
                    value: "http://cms.example:3001".into(),
                    reason: CmsOriginError::NotAddressAndPort,
                }),
            ),
            (
                "off the machine",
                Some("http://192.0.2.1:3001"),
                Err(SettingsError::BadCmsOrigin {
                    value: "http://192.0.2.1:3001".into(),
                    reason: CmsOriginError::NotLoopback,
                }),
            ),
            (
                "https",
                Some("https://127.0.0.1:3001"),
                Err(SettingsError::BadCmsOrigin {
                    value: "https://127.0.0.1:3001".into(),
                    reason: CmsOriginError::NotHttp,
                }),
            ),
        ];
        for (name, value, expected) in cases {
            let got = RawSettings {
                cms_origin: None,
                ..raw()
            }
            .validate_with_variables(value.map(|v| ("CHATD_CMS_ORIGIN", v)))
            .map(|s| s.cms_origin.to_string())
            .map_err(Problems::into_vec);
            assert_eq!(
                got,
                expected.map(str::to_owned).map_err(|e| vec![e]),
                "{name}"
            );
        }
        let error = RawSettings {
            cms_origin: Some("http://10.0.0.1:3001".into()),
            ..raw()
        }
        .validate()
        .unwrap_err();
        assert!(error.to_string().contains("CHATD_CMS_ORIGIN"), "{error}");
    }

    #[test]
    fn variables_fill_gaps_and_unknown_ones_are_refused_by_name() {
        let settings = RawSettings {
            public_origins: vec![],
            ..raw()
        }
        .validate_with_variables([
            ("PATH", "/usr/bin"),
            ("CHATD_DATABASE", "/srv/chat.db"),
            (
                "CHATD_PUBLIC_ORIGIN",
                "https://A.example:443/x, http://b.example:8080",
            ),
        ])
        .unwrap();
        assert_eq!(settings.database, PathBuf::from("/srv/chat.db"));
        assert_eq!(
            settings.public_origins,
            ["https://a.example", "http://b.example:8080"]
        );

        let cli_wins = raw()
            .validate_with_variables([("CHATD_PUBLIC_ORIGIN", "https://other.example")])
            .unwrap();
        assert_eq!(cli_wins.public_origins, ["https://cms.example"]);

        assert_eq!(
            raw()
                .validate_with_variables([("CHATD_PUBLIC_ORIGN", "https://x.example")])
                .unwrap_err()
                .as_slice(),
            [SettingsError::UnknownKey("CHATD_PUBLIC_ORIGN".into())]
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let problems = RawSettings {
            service_token: Some("short".into()),
            public_origins: vec!["https://ok.example".into(), "ftp://a".into(), "null".into()],
            database: Some("chat.sqlite3".into()),
            master_key: Some("not base64".into()),
            ..raw()
        }
        .validate_with_variables([
            ("CHATD_CMS_ORIGN", "http://127.0.0.1:3001"),
            ("CHATD_OPENAI_URL", "api.openai.test"),
            ("CHATD_PROVIDER_IDLE_TIMEOUT_MS", "600"),
        ])
        .unwrap_err();
        assert_eq!(
            problems.as_slice(),
            [
                SettingsError::UnknownKey("CHATD_CMS_ORIGN".into()),
                SettingsError::ShortToken,
                SettingsError::BadPublicOrigin("ftp://a".into()),
                SettingsError::BadPublicOrigin("null".into()),
                SettingsError::RelativePath {
                    setting: "database",
                    path: "chat.sqlite3".into(),
                },
                SettingsError::BadMasterKey,
                SettingsError::BadProviderUrl {
                    setting: "CHATD_OPENAI_URL",
                    url: "api.openai.test".into(),
                },
                SettingsError::BadProviderIdleTimeout("600".into()),
            ]
        );
        let line = problems.to_string();
        assert!(
            line.starts_with("8 problems: unknown setting CHATD_CMS_ORIGN"),
            "{line}"
        );
        assert!(
            line.contains("; CHATD_PROVIDER_IDLE_TIMEOUT_MS \"600\""),
            "{line}"
        );
    }

    #[test]
    fn origins_normalise_like_the_original() {
        let cases = [
            ("https://CMS.Example", Some("https://cms.example")),
            (
                "https://cms.example:443/admin?x#y",
                Some("https://cms.example"),
            ),
            ("http://cms.example:80", Some("http://cms.example")),
            ("http://cms.example:443", Some("http://cms.example:443")),
            (
                "http://user:pw@cms.example:5173",
                Some("http://cms.example:5173"),
            ),
            ("http://[::1]:8080/", Some("http://[::1]:8080")),
            ("http://[::1]", Some("http://[::1]")),
            ("null", None),
            ("javascript://x", None),
            ("https://", None),
            ("https://cms.example:99999", None),
            ("https://cms example", None),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_origin(input).as_deref(), expected, "{input}");
        }
    }

    #[test]
    fn the_provider_idle_timeout_is_whole_milliseconds_from_a_second_to_an_hour() {
        let cases: Vec<(&str, Option<&str>, Result<u128, SettingsError>)> = vec![
            (
                "unset",
                None,
                Ok(atelier_llm::DEFAULT_IDLE_TIMEOUT.as_millis()),
            ),
            ("ten minutes", Some("600000"), Ok(600_000)),
            ("spaces around", Some(" 1500 "), Ok(1_500)),
            ("a second", Some("1000"), Ok(1_000)),
            ("an hour", Some("3600000"), Ok(3_600_000)),
            ("seconds meant", Some("600"), Err(bad("600"))),
            ("zero", Some("0"), Err(bad("0"))),
            ("past an hour", Some("3600001"), Err(bad("3600001"))),
            ("negative", Some("-5000"), Err(bad("-5000"))),
            ("a fraction", Some("1500.5"), Err(bad("1500.5"))),
            ("a unit", Some("10min"), Err(bad("10min"))),
            ("empty", Some(""), Err(bad(""))),
        ];
        fn bad(value: &str) -> SettingsError {
            SettingsError::BadProviderIdleTimeout(value.to_owned())
        }
        for (name, value, expected) in cases {
            let got = raw()
                .validate_with_variables(value.map(|v| ("CHATD_PROVIDER_IDLE_TIMEOUT_MS", v)))
                .map(|s| s.provider_idle_timeout.as_millis())
                .map_err(Problems::into_vec);
            assert_eq!(got, expected.map_err(|e| vec![e]), "{name}");
        }
        let refusal = bad("0").to_string();
        assert!(
            refusal.contains("CHATD_PROVIDER_IDLE_TIMEOUT_MS"),
            "{refusal}"
        );
    }

    #[test]
    fn debug_redacts_the_token() {
        let settings = raw().validate().unwrap();
        assert!(!format!("{settings:?}").contains(&"t".repeat(32)));
        assert_eq!(settings.database, PathBuf::from(DEFAULT_DATABASE));
    }
}
