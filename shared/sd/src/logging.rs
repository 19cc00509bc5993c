//! One `tracing` setup for every daemon: journal entries when stderr is the journal, lines on
//! stderr otherwise.
//!
//! systemd sets `JOURNAL_STREAM=<dev>:<inode>` for a service whose stderr is connected to the
//! journal. When stderr's `fstat` matches (and not merely when the variable is set: a child
//! started with redirected stderr inherits it), events go to journald natively, with their
//! fields as journal fields (prefixed `F_`, so they cannot overwrite journald's own). If the
//! journald socket cannot be used, events go to stderr, without timestamps or colours, since
//! the journal adds its own.
//!
//! Parts: [`init`], the pure [`journal_stream_matches`] and [`build_filter`].

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use tracing_subscriber::filter::{EnvFilter, ParseError};
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};
use tracing_subscriber::{Layer, Registry};

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` is set but is not a valid filter.
    #[error("RUST_LOG is not a valid filter: {value:?}")]
    BadRustLog {
        /// The variable's value.
        value: String,
        /// The parse error.
        #[source]
        source: ParseError,
    },
    /// `RUST_LOG` is not valid UTF-8.
    #[error("RUST_LOG is not valid UTF-8")]
    RustLogNotUnicode,
    /// The caller's default directive is not a valid filter.
    #[error("the default log filter is not valid: {directive:?}")]
    BadDefault {
        /// The directive given to [`init`].
        directive: String,
        /// The parse error.
        #[source]
        source: ParseError,
    },
    /// A global subscriber (or `log` logger) was already installed.
    #[error("logging was already initialised")]
    AlreadyInitialised(#[source] TryInitError),
}

/// Installs the global subscriber, filtered by `RUST_LOG` when it is set and not empty, else
/// by `default_directive` (an `EnvFilter` directive such as `"info"` or
/// `"info,atelier_sited=debug"`).
///
/// Logs to the journal when `JOURNAL_STREAM` is stderr, else human-readable lines to stderr.
/// Fails if the filter does not parse or if logging is already initialised.
pub fn init(default_directive: &str) -> Result<(), LoggingError> {
    let rust_log = match std::env::var("RUST_LOG") {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => return Err(LoggingError::RustLogNotUnicode),
    };
    let filter = build_filter(rust_log.as_deref(), default_directive)?;
    let to_journal = std::env::var("JOURNAL_STREAM")
        .ok()
        .is_some_and(|value| stderr_is(&value));

    let (output, journald_error) = if to_journal {
        match tracing_journald::layer() {
            Ok(journald) => (journald.boxed(), None),
            Err(e) => (plain_stderr_layer(), Some(e)),
        }
    } else {
        (human_stderr_layer(), None)
    };
    Registry::default()
        .with(filter)
        .with(output)
        .try_init()
        .map_err(LoggingError::AlreadyInitialised)?;
    if let Some(e) = journald_error {
        tracing::warn!(error = %e, "journald is unreachable; logging to stderr instead");
    }
    Ok(())
}

type Output = Box<dyn Layer<Layered<EnvFilter, Registry>> + Send + Sync>;

/// Lines for a journal that we cannot reach natively: it stamps and colours them itself.
fn plain_stderr_layer() -> Output {
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .boxed()
}

/// Lines for a person at a terminal or reading a file.
fn human_stderr_layer() -> Output {
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .boxed()
}

/// The filter: `rust_log` when set and not empty, else `default_directive`.
pub fn build_filter(
    rust_log: Option<&str>,
    default_directive: &str,
) -> Result<EnvFilter, LoggingError> {
    match rust_log {
        Some(value) if !value.trim().is_empty() => {
            EnvFilter::try_new(value).map_err(|source| LoggingError::BadRustLog {
                value: value.to_owned(),
                source,
            })
        }
        _ => EnvFilter::try_new(default_directive).map_err(|source| LoggingError::BadDefault {
            directive: default_directive.to_owned(),
            source,
        }),
    }
}

/// Returns true if and only if `journal_stream` (`JOURNAL_STREAM`'s `<dev>:<inode>`, in
/// decimal) names the file with `stderr_dev` and `stderr_ino`.
pub fn journal_stream_matches(journal_stream: &str, stderr_dev: u64, stderr_ino: u64) -> bool {
    let Some((dev, ino)) = journal_stream.split_once(':') else {
        return false;
    };
    let is_decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !is_decimal(dev) || !is_decimal(ino) {
        return false;
    }
    dev.parse::<u64>() == Ok(stderr_dev) && ino.parse::<u64>() == Ok(stderr_ino)
}

/// Whether stderr is the file `journal_stream` names. A stderr that cannot be examined (closed)
/// is not the journal.
fn stderr_is(journal_stream: &str) -> bool {
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(meta) => journal_stream_matches(journal_stream, meta.dev(), meta.ino()),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use super::*;

    #[test]
    fn journal_stream_matches_table() {
        let cases = [
            ("match", "8:1234", 8, 1234, true),
            (
                "large numbers",
                "18446744073709551615:42",
                u64::MAX,
                42,
                true,
            ),
            ("other inode", "8:1235", 8, 1234, false),
            ("other device", "9:1234", 8, 1234, false),
            ("swapped", "1234:8", 8, 1234, false),
            ("empty", "", 8, 1234, false),
            ("no colon", "81234", 8, 1234, false),
            ("missing inode", "8:", 8, 1234, false),
            ("missing device", ":1234", 8, 1234, false),
            ("extra field", "8:1234:5", 8, 1234, false),
            ("not numbers", "a:b", 8, 1234, false),
            ("sign", "+8:1234", 8, 1234, false),
            ("whitespace", "8:1234\n", 8, 1234, false),
            ("overflow", "18446744073709551616:1234", 0, 1234, false),
        ];
        for (case, value, dev, ino, want) in cases {
            assert_eq!(
                journal_stream_matches(value, dev, ino),
                want,
                "case {case:?}"
            );
        }
    }

    #[test]
    fn stderr_is_compares_with_the_real_stderr() {
        let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
            return;
        };
        let meta = std::fs::File::from(fd).metadata().expect("fstat stderr");
        assert!(stderr_is(&format!("{}:{}", meta.dev(), meta.ino())));
        assert!(!stderr_is(&format!("{}:{}", meta.dev(), meta.ino() + 1)));
    }

    #[test]
    fn filter_prefers_rust_log_and_names_bad_directives() {
        let filter = build_filter(Some("warn,atelier=trace"), "info").expect("RUST_LOG");
        let shown = filter.to_string();
        assert!(
            shown.contains("atelier=trace") && shown.contains("warn"),
            "{shown}"
        );
        let filter = build_filter(None, "info").expect("default");
        assert_eq!(filter.to_string(), "info");
        let filter = build_filter(Some("  "), "debug").expect("blank RUST_LOG");
        assert_eq!(filter.to_string(), "debug");

        let err = build_filter(Some("atelier=loud"), "info").expect_err("bad RUST_LOG");
        assert!(
            matches!(&err, LoggingError::BadRustLog { value, .. } if value == "atelier=loud"),
            "{err:?}"
        );
        let err = build_filter(None, "atelier=loud").expect_err("bad default");
        assert!(matches!(err, LoggingError::BadDefault { .. }), "{err:?}");
    }

    const CHILD_MARKER: &str = "ATELIER_SD_LOGGING_CHILD";

    /// The child half of `init_picks_the_output_by_journal_stream`: initialises logging in a
    /// fresh process and logs one event. Ignored, and a no-op, unless run as that child.
    #[test]
    #[ignore = "run as a child by init_picks_the_output_by_journal_stream"]
    fn logging_child() {
        if std::env::var_os(CHILD_MARKER).is_none() {
            return;
        }
        init("info").expect("init");
        tracing::info!(site = "a", "hello from the child");
    }

    /// Runs `logging_child` with stderr on a socket and `JOURNAL_STREAM` set to that socket's
    /// identity (or, with `matching == false`, to another one), and returns what it wrote.
    fn child_stderr(matching: bool) -> String {
        use std::io::Read;
        use std::os::unix::net::UnixStream;
        use std::process::{Command, Stdio};

        let (mut ours, theirs) = UnixStream::pair().expect("pair");
        let meta = std::fs::File::from(OwnedFd::from(theirs.try_clone().expect("clone")))
            .metadata()
            .expect("fstat");
        let ino = if matching { meta.ino() } else { meta.ino() + 1 };
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args([
                "--exact",
                "logging::tests::logging_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_MARKER, "1")
            .env("JOURNAL_STREAM", format!("{}:{ino}", meta.dev()))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(OwnedFd::from(theirs)))
            .spawn()
            .expect("spawn the child");
        assert!(child.wait().expect("wait").success(), "the child failed");
        ours.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut out = String::new();
        ours.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn init_picks_the_output_by_journal_stream() {
        let human = child_stderr(false);
        let line = human
            .lines()
            .find(|l| l.contains("hello from the child"))
            .unwrap_or_else(|| panic!("no event on stderr: {human:?}"));
        assert!(
            line.starts_with(|c: char| c.is_ascii_digit()),
            "timestamped: {line:?}"
        );
        assert!(
            !line.contains('\x1b'),
            "no colours when not a terminal: {line:?}"
        );

        let journal = child_stderr(true);
        if Path::new("/run/systemd/journal/socket").exists() {
            assert!(
                !journal.contains("hello from the child"),
                "went to stderr: {journal:?}"
            );
        } else {
            // No journald here: the fallback is plain stderr, with the reason logged.
            assert!(journal.contains("journald is unreachable"), "{journal:?}");
            let line = journal
                .lines()
                .find(|l| l.contains("hello from the child"))
                .unwrap_or_else(|| panic!("no event on stderr: {journal:?}"));
            assert!(
                !line.starts_with(|c: char| c.is_ascii_digit()),
                "no timestamp: {line:?}"
            );
            assert!(line.contains("site=\"a\""), "{line:?}");
        }
    }

    #[test]
    fn init_installs_once() {
        // The only test that touches the global subscriber. The filter may come from the
        // runner's RUST_LOG; a bad one there is a reason for init to fail, not this test.
        match init("info") {
            Ok(()) | Err(LoggingError::BadRustLog { .. }) => {}
            Err(e) => panic!("first init: {e:?}"),
        }
        assert!(matches!(
            init("info"),
            Err(LoggingError::AlreadyInitialised(_) | LoggingError::BadRustLog { .. })
        ));
    }
}
