//! Secrets systemd hands us as credentials (`LoadCredential=`, `SetCredential=`, …) in
//! `$CREDENTIALS_DIRECTORY`, read by name and kept out of logs.
//!
//! Parts:
//! - [`read_credential`], [`read_credential_string`]: by name, from `$CREDENTIALS_DIRECTORY`.
//! - [`read_credential_in`], [`read_credential_string_in`]: the same from a given directory.
//! - [`read_credential_string_or_file`]: a credential, or a development file outside systemd.
//! - [`Secret`]: a value whose `Debug` and `Display` print `[redacted]`.
//!
//! No error carries a credential's value or any part of it.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The variable systemd sets to the directory holding the unit's credentials.
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The largest credential we read. systemd caps credentials at 1 MiB
/// (`CREDENTIAL_SIZE_MAX`), so a bigger file is not one.
pub const MAX_CREDENTIAL_BYTES: u64 = 1024 * 1024; // 1 MiB

/// The longest credential name (a file name: `NAME_MAX`).
const NAME_MAX: usize = 255;

/// Why a credential could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The name cannot be a credential's file name.
    #[error("bad credential name {name:?}: {reason}")]
    BadName {
        /// The name asked for.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `$CREDENTIALS_DIRECTORY` is unset or empty: the unit passes no credentials at all.
    #[error("no credentials were provided: CREDENTIALS_DIRECTORY is not set")]
    NotProvided,
    /// The unit passes credentials, but not this one.
    #[error("credential {name:?} is missing from the credentials directory")]
    Missing {
        /// The name asked for.
        name: String,
    },
    /// The credential is larger than [`MAX_CREDENTIAL_BYTES`].
    #[error("credential {name:?} is larger than {max} bytes")]
    TooLarge {
        /// The name asked for.
        name: String,
        /// [`MAX_CREDENTIAL_BYTES`].
        max: u64,
    },
    /// The credential is not UTF-8 (from the `_string` readers).
    #[error("credential {name:?} is not valid UTF-8")]
    NotUtf8 {
        /// The name asked for.
        name: String,
    },
    /// Reading the file failed.
    #[error("failed to read credential {name:?} at {}", path.display())]
    Read {
        /// The name asked for.
        name: String,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// A secret value. `Debug` and `Display` print `[redacted]`; [`Secret::expose`] is the only
/// way to the value, so each use is visible in review.
///
/// Deliberately not `PartialEq`: a secret compared with `==` leaks its prefix through timing;
/// compare exposed values in constant time (`subtle`).
#[derive(Clone, Default)]
pub struct Secret<T>(T);

// === impl Secret ===

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The secret value. Never log it or put it in an error.
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Unwraps the secret value.
    pub fn into_exposed(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Reads credential `name` from `$CREDENTIALS_DIRECTORY`.
pub fn read_credential(name: &str) -> Result<Vec<u8>, CredentialError> {
    read_credential_in(&credentials_directory()?, name)
}

/// Reads credential `name` from `$CREDENTIALS_DIRECTORY` as a UTF-8 string, without one
/// trailing newline (files written by `echo` or editors end with one).
pub fn read_credential_string(name: &str) -> Result<Secret<String>, CredentialError> {
    read_credential_string_in(&credentials_directory()?, name)
}

/// Reads credential `name` from the credentials directory `dir`.
pub fn read_credential_in(dir: &Path, name: &str) -> Result<Vec<u8>, CredentialError> {
    check_name(name)?;
    let path = dir.join(name);
    let read_error = |source| CredentialError::Read {
        name: name.to_owned(),
        path: path.clone(),
        source,
    };
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CredentialError::Missing {
                name: name.to_owned(),
            })
        }
        Err(e) => return Err(read_error(e)),
    };
    let mut value = Vec::new();
    // One byte past the cap tells "exactly the cap" from "larger".
    file.take(MAX_CREDENTIAL_BYTES + 1)
        .read_to_end(&mut value)
        .map_err(read_error)?;
    if value.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(CredentialError::TooLarge {
            name: name.to_owned(),
            max: MAX_CREDENTIAL_BYTES,
        });
    }
    Ok(value)
}

/// Reads credential `name` from `dir` as a UTF-8 string, without one trailing newline.
pub fn read_credential_string_in(
    dir: &Path,
    name: &str,
) -> Result<Secret<String>, CredentialError> {
    let mut bytes = read_credential_in(dir, name)?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    // `FromUtf8Error` would carry the bytes; the error must not.
    String::from_utf8(bytes)
        .map(Secret::new)
        .map_err(|_| CredentialError::NotUtf8 {
            name: name.to_owned(),
        })
}

/// Reads credential `name` as a string, or — only when the process was given no credentials at
/// all — the development `fallback` file. A credential always wins; `None` when neither exists.
pub fn read_credential_string_or_file(
    name: &str,
    fallback: Option<&Path>,
) -> Result<Option<Secret<String>>, CredentialError> {
    match credentials_directory() {
        Ok(dir) => read_credential_string_in(&dir, name).map(Some),
        Err(CredentialError::NotProvided) => fallback
            .map(|file| read_file_string(name, file))
            .transpose(),
        Err(e) => Err(e),
    }
}

/// Reads a development stand-in for credential `name` from `file`, with the same limits.
fn read_file_string(name: &str, file: &Path) -> Result<Secret<String>, CredentialError> {
    let (dir, file_name) = match (file.parent(), file.file_name().and_then(|f| f.to_str())) {
        (Some(dir), Some(file_name)) => (dir, file_name),
        _ => {
            return Err(CredentialError::Read {
                name: name.to_owned(),
                path: file.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a file path"),
            })
        }
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    read_credential_string_in(dir, file_name).map_err(|e| match e {
        CredentialError::Missing { .. } => CredentialError::Read {
            name: name.to_owned(),
            path: file.to_path_buf(),
            source: io::Error::from(io::ErrorKind::NotFound),
        },
        other => other,
    })
}

fn credentials_directory() -> Result<PathBuf, CredentialError> {
    match std::env::var_os(CREDENTIALS_DIRECTORY) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => Err(CredentialError::NotProvided),
    }
}

/// systemd's `credential_name_valid()`: a plain file name.
fn check_name(name: &str) -> Result<(), CredentialError> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name == "." || name == ".." {
        "is . or .."
    } else if name.contains('/') {
        "contains '/'"
    } else if name.contains('\0') {
        "contains NUL"
    } else if name.len() > NAME_MAX {
        "is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(CredentialError::BadName {
        name: name.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn dir_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, value) in files {
            fs::write(dir.path().join(name), value).expect("write");
        }
        dir
    }

    #[test]
    fn present_credential_is_read_byte_for_byte() {
        let dir = dir_with(&[
            ("token", b"s3cret\n"),
            ("binary", &[0, 159, 146, 150, b'\n']),
        ]);
        assert_eq!(
            read_credential_in(dir.path(), "token").expect("token"),
            b"s3cret\n"
        );
        assert_eq!(
            read_credential_in(dir.path(), "binary").expect("binary"),
            [0, 159, 146, 150, b'\n']
        );
    }

    #[test]
    fn string_trims_exactly_one_trailing_newline() {
        let dir = dir_with(&[
            ("one", b"s3cret\n"),
            ("none", b"s3cret"),
            ("two", b"s3cret\n\n"),
            ("crlf", b"s3cret\r\n"),
            ("inner", b"a\nb"),
            ("empty", b""),
            ("just-newline", b"\n"),
        ]);
        let cases = [
            ("one", "s3cret"),
            ("none", "s3cret"),
            ("two", "s3cret\n"),
            ("crlf", "s3cret\r"),
            ("inner", "a\nb"),
            ("empty", ""),
            ("just-newline", ""),
        ];
        for (name, want) in cases {
            let got = read_credential_string_in(dir.path(), name).expect(name);
            assert_eq!(got.expose(), want, "{name}");
        }
    }

    #[test]
    fn string_requires_utf8_and_does_not_echo_the_value() {
        let dir = dir_with(&[("latin1", b"caf\xe9\n")]);
        let err = read_credential_string_in(dir.path(), "latin1").expect_err("not UTF-8");
        assert!(matches!(&err, CredentialError::NotUtf8 { name } if name == "latin1"));
        assert!(!format!("{err:?}").contains("caf"), "{err:?}");
    }

    #[test]
    fn missing_credential_is_named() {
        let dir = dir_with(&[("other", b"x")]);
        let err = read_credential_in(dir.path(), "token").expect_err("missing");
        assert!(
            matches!(&err, CredentialError::Missing { name } if name == "token"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"credential "token" is missing from the credentials directory"#
        );
    }

    #[test]
    fn bad_names_are_refused_before_any_read() {
        let long = "n".repeat(256);
        let cases = [
            ("", "is empty"),
            (".", "is . or .."),
            ("..", "is . or .."),
            ("../token", "contains '/'"),
            ("sub/token", "contains '/'"),
            ("/etc/shadow", "contains '/'"),
            ("tok\0en", "contains NUL"),
            (long.as_str(), "is longer than 255 bytes"),
        ];
        // A file the traversal cases would reach if they were not refused.
        let outer = tempfile::tempdir().expect("tempdir");
        fs::write(outer.path().join("token"), b"outside").expect("write");
        let dir = outer.path().join("creds");
        fs::create_dir_all(dir.join("sub")).expect("mkdir");
        fs::write(dir.join("sub/token"), b"nested").expect("write");
        for (name, want) in cases {
            let err = read_credential_in(&dir, name).expect_err(name);
            assert!(
                matches!(&err, CredentialError::BadName { name: n, reason } if n == name && *reason == want),
                "{name:?}: {err:?}"
            );
        }
        let ok_dots = dir_with(&[("...", b"dots"), (".hidden", b"h")]);
        assert_eq!(
            read_credential_in(ok_dots.path(), "...").expect("..."),
            b"dots"
        );
        assert_eq!(
            read_credential_in(ok_dots.path(), ".hidden").expect("hidden"),
            b"h"
        );
    }

    #[test]
    fn too_large_is_refused_and_the_cap_itself_is_read() {
        let cap = usize::try_from(MAX_CREDENTIAL_BYTES).expect("fits");
        let at_cap = vec![b'a'; cap];
        let over = vec![b'a'; cap + 1];
        let dir = dir_with(&[("at-cap", &at_cap), ("over", &over)]);
        assert_eq!(
            read_credential_in(dir.path(), "at-cap")
                .expect("at cap")
                .len(),
            cap
        );
        let err = read_credential_in(dir.path(), "over").expect_err("over");
        assert!(matches!(err, CredentialError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn a_directory_is_a_read_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("token")).expect("mkdir");
        let err = read_credential_in(dir.path(), "token").expect_err("a directory");
        assert!(matches!(err, CredentialError::Read { .. }), "{err:?}");
    }

    #[test]
    fn not_provided_without_a_directory() {
        // The env wrapper only decides which directory; this tests that decision without
        // touching the process environment: the test runner does not set the variable.
        if std::env::var_os(CREDENTIALS_DIRECTORY).is_some() {
            eprintln!("CREDENTIALS_DIRECTORY is set for the tests; skipping");
            return;
        }
        let err = read_credential("token").expect_err("not provided");
        assert!(matches!(err, CredentialError::NotProvided), "{err:?}");
        let err = read_credential_string("token").expect_err("not provided");
        assert!(matches!(err, CredentialError::NotProvided), "{err:?}");
    }

    #[test]
    fn secret_never_prints_its_value() {
        let secret = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(&secret)), "Some([redacted])");
        assert_eq!(secret.expose(), "hunter2");
        let bytes = Secret::new(b"k".to_vec());
        assert_eq!(format!("{bytes:?} {bytes}"), "[redacted] [redacted]");
        assert_eq!(bytes.into_exposed(), b"k");
    }

    #[test]
    fn a_development_file_stands_in_with_the_same_rules() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "dev-token\n").expect("write");
        let secret = read_file_string("SERVICE_TOKEN", &file).expect("read");
        assert_eq!(secret.expose(), "dev-token");
        let err =
            read_file_string("SERVICE_TOKEN", &dir.path().join("absent")).expect_err("absent");
        assert!(
            matches!(&err, CredentialError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert!(!format!("{err}").contains("dev-token"));
    }
}
