//! Where the client connects and with what credentials: flags, the provisioner's
//! `engine.env.fragment` (the engine's pairing keys), the root-only `SERVICE_TOKEN` file, and
//! the default actor (the calling user).

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_layout::InstanceName;

use crate::error::Invalid;
use crate::params::Actor;

pub use atelier_layout::pairing::{
    ENGINE_INSTANCE_KEY, ENGINE_KEY_PREFIX, ENGINE_SOCKET_KEY, ENGINE_TIMEOUT_KEY,
    ENGINE_TOKEN_KEY, ENGINE_URL_KEY,
};

/// Where the engine mounts sited, unless `--base-path` says otherwise.
pub const DEFAULT_BASE_PATH: &str = "/publication/site_builder";
/// A control call's deadline unless configured: long enough for a site's create (template
/// scaffold and the first git commit), short enough that a wedged daemon is noticed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

const ENGINE_KEYS: [&str; 5] = [
    ENGINE_INSTANCE_KEY,
    ENGINE_SOCKET_KEY,
    ENGINE_TOKEN_KEY,
    ENGINE_URL_KEY,
    ENGINE_TIMEOUT_KEY,
];
/// The largest env or token file read; both are a few lines.
const MAX_CONFIG_FILE_BYTES: u64 = 64 * 1024;
/// Readable by every user: a file holding the token must not be.
const WORLD_READABLE: u32 = 0o004;

/// Why the client's configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("reading {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a regular file of a sane size.
    #[error("{}: {why}", .path.display())]
    NotAConfigFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// A line of the env file is not `KEY=VALUE`.
    #[error("{}:{line}: {why}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// A `DEDALO_SITE_BUILDER_*` key the engine does not have: likely a typo, never ignored.
    #[error("{}:{line}: unknown key {key}; the engine's keys are {}", .path.display(), ENGINE_KEYS.join(", "))]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("{}:{line}: {key} is set a second time", .path.display())]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The key.
        key: String,
    },
    /// A key's value is not what it must be.
    #[error("{}: {key}: {why}", .path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A file holding the service token is readable by every user.
    #[error(
        "{} holds the service token but is readable by every user (mode {mode:04o}); \
         run chmod o-r on it", .path.display()
    )]
    TokenExposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token is empty, or holds what no Authorization header can carry.
    #[error("the service token from {source_name} {why}")]
    BadToken {
        /// Where it came from.
        source_name: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The engine file names only the TCP URL.
    #[error(
        "{}: {ENGINE_URL_KEY} is set but {ENGINE_SOCKET_KEY} is not; atelierctl connects only \
         to sited's unix socket (give --socket)", .path.display()
    )]
    UrlOnly {
        /// The file.
        path: PathBuf,
    },
    /// A required setting is missing.
    #[error("no {what}: {hint}")]
    Missing {
        /// What.
        what: &'static str,
        /// How to give it.
        hint: &'static str,
    },
    /// The instance name breaks the grammar.
    #[error("{0}")]
    BadInstance(#[from] atelier_layout::NameError),
    /// The base path is not a path prefix.
    #[error("base path {0:?} must be empty or start with '/', without '?', '#', spaces or control characters")]
    BadBasePath(String),
    /// The actor given or found is refused.
    #[error(transparent)]
    Actor(#[from] Invalid),
}

/// The mount prefix of sited's routes: `""` (the root) or `/a/b`, never ending in `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasePath(String);

impl BasePath {
    /// Checks `text` as a prefix; `/` and `""` mean the root.
    pub fn parse(text: &str) -> Result<BasePath, ConfigError> {
        let trimmed = text.trim_end_matches('/');
        let shaped = (trimmed.is_empty() || trimmed.starts_with('/'))
            && !trimmed
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '%'));
        if shaped && (text.is_empty() || text.starts_with('/')) {
            Ok(BasePath(trimmed.to_owned()))
        } else {
            Err(ConfigError::BadBasePath(text.to_owned()))
        }
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for BasePath {
    fn default() -> Self {
        BasePath(DEFAULT_BASE_PATH.to_owned())
    }
}

/// The shared service token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceToken(String);

impl ServiceToken {
    /// Checks a token read from `source_name`: trimmed of surrounding whitespace (a file's
    /// trailing newline), not empty, visible ASCII only (what a header can carry verbatim).
    pub fn new(text: &str, source_name: &str) -> Result<ServiceToken, ConfigError> {
        let token = text.trim();
        let bad = |why| ConfigError::BadToken {
            source_name: source_name.to_owned(),
            why,
        };
        if token.is_empty() {
            return Err(bad("is empty"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                "holds spaces, control or non-ASCII characters, which no Authorization header carries",
            ));
        }
        Ok(ServiceToken(token.to_owned()))
    }

    /// The token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceToken([redacted])")
    }
}

/// The daemon a client talks to, and the pairing it expects.
#[derive(Debug, Clone)]
pub struct Target {
    /// sited's unix socket.
    pub socket: PathBuf,
    /// The mount prefix of its routes.
    pub base_path: BasePath,
    /// The instance the token belongs to.
    pub instance: InstanceName,
    /// The shared service token.
    pub token: ServiceToken,
}

/// The engine's pairing keys as read from an env file. Its `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EngineEnv {
    /// `DEDALO_SITE_BUILDER_INSTANCE`.
    pub instance: Option<String>,
    /// `DEDALO_SITE_BUILDER_SOCKET`.
    pub socket: Option<PathBuf>,
    /// `DEDALO_SITE_BUILDER_TOKEN`.
    pub token: Option<String>,
    /// `DEDALO_SITE_BUILDER_URL` (only noticed, never used).
    pub url: Option<String>,
    /// `DEDALO_SITE_BUILDER_TIMEOUT_MS`.
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for EngineEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineEnv")
            .field("instance", &self.instance)
            .field("socket", &self.socket)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .finish()
    }
}

// === impl EngineEnv ===

impl EngineEnv {
    /// Reads an env file: refused when it holds the token and every user may read it.
    pub fn read(path: &Path) -> Result<EngineEnv, ConfigError> {
        let (text, mode) = read_small_file(path)?;
        let env = EngineEnv::parse(&text, path)?;
        if env.token.is_some() && mode & WORLD_READABLE != 0 {
            return Err(ConfigError::TokenExposed {
                path: path.to_owned(),
                mode,
            });
        }
        Ok(env)
    }

    /// Parses env-file text (`path` names it in refusals): `KEY=VALUE` lines, `#` comments,
    /// an optional `export `, values bare or in `"..."` (with `\\ \" \$ \``) or `'...'`. Keys
    /// outside the engine's family are ignored; an unknown `DEDALO_SITE_BUILDER_*` key, a key
    /// set twice or a malformed line is refused by name.
    pub fn parse(text: &str, path: &Path) -> Result<EngineEnv, ConfigError> {
        let mut env = EngineEnv::default();
        let mut seen: Vec<&str> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let syntax = |why: &str| ConfigError::Syntax {
                path: path.to_owned(),
                line,
                why: why.to_owned(),
            };
            let trimmed = raw.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let assignment = trimmed.strip_prefix("export ").unwrap_or(trimmed);
            let Some((key, rest)) = assignment.split_once('=') else {
                return Err(syntax("expected KEY=VALUE"));
            };
            if !is_env_key(key) {
                return Err(syntax(&format!("{key:?} is not a variable name")));
            }
            let value = env_value(rest).map_err(syntax)?;
            if !key.starts_with(ENGINE_KEY_PREFIX) {
                continue;
            }
            let Some(&known) = ENGINE_KEYS.iter().find(|k| **k == key) else {
                return Err(ConfigError::UnknownKey {
                    path: path.to_owned(),
                    line,
                    key: key.to_owned(),
                });
            };
            if seen.contains(&known) {
                return Err(ConfigError::DuplicateKey {
                    path: path.to_owned(),
                    line,
                    key: key.to_owned(),
                });
            }
            seen.push(known);
            let bad = |why: String| ConfigError::BadValue {
                path: path.to_owned(),
                key: known,
                why,
            };
            match known {
                ENGINE_INSTANCE_KEY => env.instance = Some(value),
                ENGINE_SOCKET_KEY => {
                    if !value.starts_with('/') {
                        return Err(bad(format!("{value:?} is not an absolute path")));
                    }
                    env.socket = Some(PathBuf::from(value));
                }
                ENGINE_TOKEN_KEY => env.token = Some(value),
                ENGINE_URL_KEY => env.url = Some(value),
                _ => {
                    let ms: u64 = value.parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                        bad(format!(
                            "{value:?} is not a positive number of milliseconds"
                        ))
                    })?;
                    env.timeout = Some(Duration::from_millis(ms));
                }
            }
        }
        Ok(env)
    }
}

/// Returns true if and only if `key` is `[A-Za-z_][A-Za-z0-9_]*`.
fn is_env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The value after `=`: quoted (then only a comment may follow) or bare (no spaces, quotes,
/// `$`, backticks or backslashes, whose meaning would depend on who reads the file).
fn env_value(rest: &str) -> Result<String, &'static str> {
    let (value, after) = if let Some(quoted) = rest.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                '\\' => match chars.next() {
                    Some((_, e @ ('\\' | '"' | '$' | '`'))) => value.push(e),
                    Some((_, other)) => {
                        value.push('\\');
                        value.push(other);
                    }
                    None => return Err("a backslash ends the line inside quotes"),
                },
                '$' | '`' => return Err("unescaped '$' or '`' inside double quotes"),
                c => value.push(c),
            }
        }
        let end = end.ok_or("the closing '\"' is missing")?;
        (value, &quoted[end..])
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        let end = quoted.find('\'').ok_or("the closing \"'\" is missing")?;
        (quoted[..end].to_owned(), &quoted[end + 1..])
    } else {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let value = &rest[..end];
        if value.contains(['"', '\'', '$', '`', '\\']) {
            return Err("a bare value may not hold quotes, '$', '`' or '\\'; quote it");
        }
        (value.to_owned(), &rest[end..])
    };
    let after = after.trim_start();
    if after.is_empty() || after.starts_with('#') {
        Ok(value)
    } else {
        Err("text after the value; quote a value holding spaces")
    }
}

/// Reads a small regular file, returning its text and permission bits.
fn read_small_file(path: &Path) -> Result<(String, u32), ConfigError> {
    let read = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(ConfigError::NotAConfigFile {
            path: path.to_owned(),
            why: "not a regular file",
        });
    }
    if meta.size() > MAX_CONFIG_FILE_BYTES {
        return Err(ConfigError::NotAConfigFile {
            path: path.to_owned(),
            why: "larger than 64 KiB, so not a credential or env file",
        });
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(read)?;
    Ok((text, meta.permissions().mode() & 0o7777))
}

/// Reads the root-only `SERVICE_TOKEN` file; refused when every user may read it.
pub fn read_token_file(path: &Path) -> Result<ServiceToken, ConfigError> {
    let (text, mode) = read_small_file(path)?;
    if mode & WORLD_READABLE != 0 {
        return Err(ConfigError::TokenExposed {
            path: path.to_owned(),
            mode,
        });
    }
    ServiceToken::new(&text, &path.display().to_string())
}

/// What the command line says about the target; unset fields come from the env file.
#[derive(Debug, Clone, Default)]
pub struct TargetOptions {
    /// `--socket`.
    pub socket: Option<PathBuf>,
    /// `--instance`.
    pub instance: Option<String>,
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `--engine-env`.
    pub engine_env: Option<PathBuf>,
    /// `--base-path`.
    pub base_path: Option<String>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
}

/// The target and the control-call deadline, from flags first, then the engine env file;
/// the socket defaults to the instance's (`/run/atelier/<inst>/sited.sock`).
pub fn resolve(options: &TargetOptions) -> Result<(Target, Duration), ConfigError> {
    let env = match &options.engine_env {
        Some(path) => EngineEnv::read(path)?,
        None => EngineEnv::default(),
    };
    let instance = options
        .instance
        .clone()
        .or_else(|| env.instance.clone())
        .ok_or(ConfigError::Missing {
            what: "instance",
            hint: "give --instance NAME, or --engine-env FILE with DEDALO_SITE_BUILDER_INSTANCE",
        })?;
    let instance = InstanceName::new(&instance)?;
    let socket = match (&options.socket, &env.socket, &env.url, &options.engine_env) {
        (Some(socket), _, _, _) => socket.clone(),
        (None, Some(socket), _, _) => socket.clone(),
        (None, None, Some(_), Some(path)) => {
            return Err(ConfigError::UrlOnly { path: path.clone() })
        }
        _ => atelier_layout::paths::sited_socket_path(&instance),
    };
    let token =
        match (&options.token_file, &env.token) {
            (Some(path), _) => read_token_file(path)?,
            (None, Some(token)) => ServiceToken::new(token, ENGINE_TOKEN_KEY)?,
            (None, None) => return Err(ConfigError::Missing {
                what: "service token",
                hint:
                    "give --token-file FILE (the instance's root-only SERVICE_TOKEN credential), \
                       or --engine-env FILE with DEDALO_SITE_BUILDER_TOKEN",
            }),
        };
    let base_path = match &options.base_path {
        Some(text) => BasePath::parse(text)?,
        None => BasePath::default(),
    };
    let timeout = options.timeout.or(env.timeout).unwrap_or(DEFAULT_TIMEOUT);
    Ok((
        Target {
            socket,
            base_path,
            instance,
            token,
        },
        timeout,
    ))
}

/// The actor: `user_id` and `username` as given, else the person calling: under sudo the one
/// who ran sudo (`SUDO_UID`, `SUDO_USER`), since the token file is root's and an audit of
/// nothing but root tells nobody who acted; otherwise the calling user's uid and login name
/// (its passwd entry; `user_<uid>`, the engine's form, when it has none).
pub fn actor(user_id: Option<i64>, username: Option<&str>) -> Result<Actor, Invalid> {
    let sudo_uid = std::env::var("SUDO_UID").ok();
    let sudo_user = std::env::var("SUDO_USER").ok();
    let (uid, name) = caller(
        rustix::process::getuid().as_raw(),
        sudo_uid.as_deref(),
        sudo_user.as_deref(),
    );
    let user_id = user_id.unwrap_or(i64::from(uid));
    let username = match username {
        Some(name) => name.to_owned(),
        None => name
            .or_else(|| login_name(uid))
            .unwrap_or_else(|| format!("user_{uid}")),
    };
    Actor::new(user_id, &username)
}

/// Who is calling: the sudo caller when sudo's uid and name are both there and valid, else
/// `uid` (its name looked up later).
fn caller(uid: u32, sudo_uid: Option<&str>, sudo_user: Option<&str>) -> (u32, Option<String>) {
    match (sudo_uid.and_then(|id| id.parse::<u32>().ok()), sudo_user) {
        (Some(id), Some(name)) if !name.is_empty() => (id, Some(name.to_owned())),
        _ => (uid, None),
    }
}

/// The name of `uid` as the system's user database (NSS, so LDAP too) has it.
fn login_name(uid: u32) -> Option<String> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
    Some(user.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn parse(text: &str) -> Result<EngineEnv, ConfigError> {
        EngineEnv::parse(text, Path::new("/etc/engine.env"))
    }

    #[test]
    fn the_actor_is_the_person_who_ran_sudo() {
        type Case<'a> = (
            &'a str,
            u32,
            Option<&'a str>,
            Option<&'a str>,
            (u32, Option<String>),
        );
        let ana = Some("ana".to_owned());
        let cases: [Case<'_>; 6] = [
            ("no sudo", 1000, None, None, (1000, None)),
            (
                "root by sudo",
                0,
                Some("1000"),
                Some("ana"),
                (1000, ana.clone()),
            ),
            (
                "another user by sudo",
                33,
                Some("1000"),
                Some("ana"),
                (1000, ana),
            ),
            (
                "a uid that is not one",
                0,
                Some("x"),
                Some("ana"),
                (0, None),
            ),
            ("no name", 0, Some("1000"), Some(""), (0, None)),
            ("a name without a uid", 0, None, Some("ana"), (0, None)),
        ];
        for (name, uid, sudo_uid, sudo_user, expected) in cases {
            assert_eq!(caller(uid, sudo_uid, sudo_user), expected, "{name}");
        }
    }

    #[test]
    fn the_provisioners_fragment_is_read() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/examples/rendered/etc/atelier/example/engine.env.fragment"
        ))
        .unwrap();
        let env = parse(&text).unwrap();
        assert_eq!(env.instance.as_deref(), Some("example"));
        assert_eq!(
            env.socket.as_deref(),
            Some(Path::new("/run/atelier/example/sited.sock"))
        );
        assert_eq!(env.token, None, "the fragment never carries the token");
    }

    #[test]
    fn an_env_files_token_never_shows_in_debug() {
        let env = parse("DEDALO_SITE_BUILDER_TOKEN=\"sekret-value\"").unwrap();
        assert_eq!(env.token.as_deref(), Some("sekret-value"));
        let shown = format!("{env:?}");
        assert!(!shown.contains("sekret-value"), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    #[test]
    fn env_file_lines_are_read_or_refused_by_name() {
        type Check = fn(&EngineEnv) -> bool;
        let ok: Vec<(&str, &str, Check)> = vec![
            ("bare", "DEDALO_SITE_BUILDER_INSTANCE=example", |e| {
                e.instance.as_deref() == Some("example")
            }),
            (
                "double quoted",
                "DEDALO_SITE_BUILDER_INSTANCE=\"example\"",
                |e| e.instance.as_deref() == Some("example"),
            ),
            ("single quoted", "DEDALO_SITE_BUILDER_TOKEN='a$b`c'", |e| {
                e.token.as_deref() == Some("a$b`c")
            }),
            (
                "escapes",
                r#"DEDALO_SITE_BUILDER_TOKEN="a\"b\\c\$d""#,
                |e| e.token.as_deref() == Some("a\"b\\c$d"),
            ),
            (
                "other backslash kept",
                r#"DEDALO_SITE_BUILDER_TOKEN="a\nb""#,
                |e| e.token.as_deref() == Some("a\\nb"),
            ),
            (
                "export",
                "export DEDALO_SITE_BUILDER_INSTANCE=example",
                |e| e.instance.as_deref() == Some("example"),
            ),
            (
                "comment after",
                "DEDALO_SITE_BUILDER_INSTANCE=\"example\"  # the museum",
                |e| e.instance.as_deref() == Some("example"),
            ),
            (
                "comments and blanks",
                "# c\n\n   \n  # d\nDEDALO_SITE_BUILDER_INSTANCE=x",
                |e| e.instance.as_deref() == Some("x"),
            ),
            (
                "other keys ignored",
                "DATABASE_URL=postgres://x\nDEDALO_OTHER=1\nPATH=/bin",
                |e| *e == EngineEnv::default(),
            ),
            ("CRLF", "DEDALO_SITE_BUILDER_INSTANCE=example\r\n", |e| {
                e.instance.as_deref() == Some("example")
            }),
            ("timeout", "DEDALO_SITE_BUILDER_TIMEOUT_MS=2500", |e| {
                e.timeout == Some(Duration::from_millis(2500))
            }),
            (
                "url noticed",
                "DEDALO_SITE_BUILDER_URL=http://127.0.0.1:3200",
                |e| e.url.is_some(),
            ),
            ("empty value", "DEDALO_SITE_BUILDER_TOKEN=", |e| {
                e.token.as_deref() == Some("")
            }),
        ];
        for (name, text, check) in ok {
            let env = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(check(&env), "{name}: {env:?}");
        }
        let refused: Vec<(&str, &str, &str)> = vec![
            (
                "unknown engine key",
                "DEDALO_SITE_BUILDER_SOCKETS=/run/x",
                "unknown key DEDALO_SITE_BUILDER_SOCKETS",
            ),
            (
                "unknown engine key, ignored-looking",
                "x=1\nDEDALO_SITE_BUILDER_=1",
                ":2: unknown key DEDALO_SITE_BUILDER_",
            ),
            (
                "duplicate",
                "DEDALO_SITE_BUILDER_INSTANCE=a\nDEDALO_SITE_BUILDER_INSTANCE=b",
                ":2: DEDALO_SITE_BUILDER_INSTANCE is set a second time",
            ),
            (
                "no equals",
                "DEDALO_SITE_BUILDER_INSTANCE",
                ":1: expected KEY=VALUE",
            ),
            ("bad key", "1KEY=x", "is not a variable name"),
            ("space in key", "MY KEY=x", "is not a variable name"),
            (
                "unclosed quote",
                "DEDALO_SITE_BUILDER_INSTANCE=\"example",
                "closing '\"' is missing",
            ),
            (
                "unclosed single quote",
                "DEDALO_SITE_BUILDER_INSTANCE='example",
                "is missing",
            ),
            (
                "expansion in quotes",
                "DEDALO_SITE_BUILDER_SOCKET=\"$RUNTIME/sited.sock\"",
                "unescaped '$'",
            ),
            (
                "bare with dollar",
                "DEDALO_SITE_BUILDER_SOCKET=$X",
                "quote it",
            ),
            (
                "text after value",
                "DEDALO_SITE_BUILDER_INSTANCE=exa mple",
                "text after the value",
            ),
            (
                "relative socket",
                "DEDALO_SITE_BUILDER_SOCKET=run/sited.sock",
                "is not an absolute path",
            ),
            (
                "bad timeout",
                "DEDALO_SITE_BUILDER_TIMEOUT_MS=soon",
                "positive number of milliseconds",
            ),
            (
                "zero timeout",
                "DEDALO_SITE_BUILDER_TIMEOUT_MS=0",
                "positive number of milliseconds",
            ),
            (
                "bad line in ignored key",
                "OTHER=\"unclosed",
                "closing '\"' is missing",
            ),
        ];
        for (name, text, want) in refused {
            let error = parse(text).map(|_| ()).unwrap_err().to_string();
            assert!(error.contains(want), "{name}: {error}");
            assert!(error.starts_with("/etc/engine.env"), "{name}: {error}");
        }
    }

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn token_files_are_trimmed_and_refused_when_exposed_or_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let token = read_token_file(&file(d, "ok", "sekret-token\n", 0o600)).unwrap();
        assert_eq!(token.expose(), "sekret-token");
        assert_eq!(format!("{token:?}"), "ServiceToken([redacted])");
        assert!(
            read_token_file(&file(d, "group", "t", 0o640)).is_ok(),
            "the engine's group may read it"
        );
        let cases: Vec<(&str, PathBuf, &str)> = vec![
            (
                "world readable",
                file(d, "world", "t", 0o644),
                "readable by every user (mode 0644)",
            ),
            ("empty", file(d, "empty", "\n", 0o600), "is empty"),
            (
                "inner space",
                file(d, "space", "a b", 0o600),
                "holds spaces",
            ),
            ("non-ascii", file(d, "utf8", "tökén", 0o600), "non-ASCII"),
            ("missing", d.join("missing"), "reading"),
            ("a directory", d.to_path_buf(), "not a regular file"),
            (
                "huge",
                file(d, "huge", &"a".repeat(70 * 1024), 0o600),
                "larger than 64 KiB",
            ),
        ];
        for (name, path, want) in cases {
            let error = read_token_file(&path).unwrap_err().to_string();
            assert!(error.contains(want), "{name}: {error}");
            assert!(!error.contains("tökén"), "{name}: the token is never shown");
        }
    }

    #[test]
    fn flags_win_over_the_env_file_and_the_socket_defaults_to_the_instances() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let token_file = file(d, "token", "flag-token\n", 0o600);
        let env = file(
            d,
            "engine.env",
            "DEDALO_SITE_BUILDER_INSTANCE=\"example\"\nDEDALO_SITE_BUILDER_SOCKET=\"/run/x/sited.sock\"\n\
             DEDALO_SITE_BUILDER_TOKEN=\"env-token\"\nDEDALO_SITE_BUILDER_TIMEOUT_MS=1500\n",
            0o600,
        );
        let (target, timeout) = resolve(&TargetOptions {
            engine_env: Some(env.clone()),
            ..TargetOptions::default()
        })
        .unwrap();
        assert_eq!(target.instance.as_str(), "example");
        assert_eq!(target.socket, Path::new("/run/x/sited.sock"));
        assert_eq!(target.token.expose(), "env-token");
        assert_eq!(target.base_path.as_str(), DEFAULT_BASE_PATH);
        assert_eq!(timeout, Duration::from_millis(1500));

        let (target, timeout) = resolve(&TargetOptions {
            engine_env: Some(env),
            instance: Some("museum".into()),
            socket: Some(d.join("s.sock")),
            token_file: Some(token_file.clone()),
            base_path: Some("/".into()),
            timeout: Some(Duration::from_secs(3)),
        })
        .unwrap();
        assert_eq!(target.instance.as_str(), "museum");
        assert_eq!(target.socket, d.join("s.sock"));
        assert_eq!(target.token.expose(), "flag-token");
        assert_eq!(target.base_path.as_str(), "");
        assert_eq!(timeout, Duration::from_secs(3));

        let (target, timeout) = resolve(&TargetOptions {
            instance: Some("example".into()),
            token_file: Some(token_file),
            ..TargetOptions::default()
        })
        .unwrap();
        assert_eq!(target.socket, Path::new("/run/atelier/example/sited.sock"));
        assert_eq!(timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_target_without_its_parts_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let token_file = file(d, "token", "t\n", 0o600);
        let url_only = file(
            d,
            "url.env",
            "DEDALO_SITE_BUILDER_INSTANCE=example\nDEDALO_SITE_BUILDER_URL=http://x\n",
            0o600,
        );
        let exposed = file(
            d,
            "exposed.env",
            "DEDALO_SITE_BUILDER_INSTANCE=example\nDEDALO_SITE_BUILDER_TOKEN=t\n",
            0o644,
        );
        let cases: Vec<(&str, TargetOptions, &str)> = vec![
            (
                "no instance",
                TargetOptions {
                    token_file: Some(token_file.clone()),
                    ..Default::default()
                },
                "no instance",
            ),
            (
                "bad instance",
                TargetOptions {
                    instance: Some("Ex ample".into()),
                    token_file: Some(token_file.clone()),
                    ..Default::default()
                },
                "instance name",
            ),
            (
                "no token",
                TargetOptions {
                    instance: Some("example".into()),
                    ..Default::default()
                },
                "no service token",
            ),
            (
                "url only",
                TargetOptions {
                    engine_env: Some(url_only),
                    token_file: Some(token_file.clone()),
                    ..Default::default()
                },
                "connects only to sited's unix socket",
            ),
            (
                "exposed env token",
                TargetOptions {
                    engine_env: Some(exposed),
                    ..Default::default()
                },
                "readable by every user",
            ),
            (
                "bad base path",
                TargetOptions {
                    instance: Some("example".into()),
                    token_file: Some(token_file.clone()),
                    base_path: Some("publication".into()),
                    ..Default::default()
                },
                "base path",
            ),
            (
                "base path with query",
                TargetOptions {
                    instance: Some("example".into()),
                    token_file: Some(token_file),
                    base_path: Some("/p?x=1".into()),
                    ..Default::default()
                },
                "base path",
            ),
        ];
        for (name, options, want) in cases {
            let error = resolve(&options).map(|_| ()).unwrap_err().to_string();
            assert!(error.contains(want), "{name}: {error}");
        }
    }

    #[test]
    fn base_paths_are_prefixes() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "default",
                "/publication/site_builder",
                Some("/publication/site_builder"),
            ),
            (
                "trailing slash",
                "/publication/site_builder/",
                Some("/publication/site_builder"),
            ),
            ("root", "/", Some("")),
            ("empty", "", Some("")),
            ("relative", "publication", None),
            ("query", "/a?b", None),
            ("fragment", "/a#b", None),
            ("space", "/a b", None),
            ("percent", "/a%2f", None),
            ("newline", "/a\n", None),
        ];
        for (name, text, want) in cases {
            let got = BasePath::parse(text).ok();
            assert_eq!(got.as_ref().map(BasePath::as_str), *want, "{name}");
        }
    }

    #[test]
    fn the_actor_defaults_to_the_calling_user() {
        let uid = rustix::process::getuid().as_raw();
        let actor = actor(None, None).unwrap();
        assert_eq!(actor.user_id(), i64::from(uid));
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let listed = passwd
            .lines()
            .find(|l| l.split(':').nth(2) == Some(&uid.to_string()))
            .and_then(|l| l.split(':').next())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("user_{uid}"));
        assert_eq!(actor.username(), listed);
        let given = super::actor(Some(7), Some("ana")).unwrap();
        assert_eq!((given.user_id(), given.username()), (7, "ana"));
        assert!(super::actor(Some(7), Some("")).is_err());
    }

    #[test]
    fn the_login_name_of_the_calling_uid_is_the_one_id_reports() {
        let uid = rustix::process::getuid().as_raw();
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        assert!(id.status.success(), "id -un failed: {id:?}");
        let reported = String::from_utf8(id.stdout).unwrap();
        assert_eq!(login_name(uid).as_deref(), Some(reported.trim_end()));
    }

    #[test]
    fn a_uid_without_an_entry_has_no_login_name() {
        assert_eq!(login_name(4_000_000_000), None);
    }
}
