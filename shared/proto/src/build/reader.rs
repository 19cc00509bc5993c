//! sited's side of atelier-build's output: the shim relays atelier-build's stdout as `O` frame
//! payloads, and their concatenation is itself a frame stream. [`EventReader`] decodes it from
//! chunks of any size into typed [`BuildItem`]s; [`BuildReport`] folds the events into the
//! build's outcome; [`BuildLog`] renders items in the build log's layout, one stream's
//! whole lines at a time.

use bytes::Bytes;

use crate::build::{BuildFailure, VerifiedOutput};
use crate::{BuildEvent, BuildStep, Decoder, Frame, FrameError, FrameKind, MessageError};

/// One decoded item of atelier-build's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildItem {
    /// A `T` frame: a step started or finished, the output was verified, or the build refused.
    Event(BuildEvent),
    /// An `O` frame: bytes a step wrote to its stdout.
    Stdout(Bytes),
    /// An `E` frame: bytes a step wrote to its stderr, or atelier-build's own diagnostic line
    /// (prefixed `atelier-build: `).
    Stderr(Bytes),
}

/// Why atelier-build's stream could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The bytes are not a frame stream: an unknown type byte, an over-cap length, or (at
    /// [`EventReader::finish`]) a stream cut inside a frame.
    #[error("atelier-build's stream is not well framed: {0}")]
    Frame(#[from] FrameError),
    /// A `T` frame that is not a valid build event.
    #[error("atelier-build sent a bad event: {0}")]
    Event(#[from] MessageError),
    /// A frame of a kind atelier-build never sends (`H`, `S`, `X`).
    #[error("atelier-build sent a {0} frame, which it never sends")]
    UnexpectedKind(FrameKind),
}

/// Decodes atelier-build's stream from byte chunks, e.g. the payloads of the shim's `O`
/// frames, in order.
///
/// A bad header fails the reader for good (every later call returns the error), as the inner
/// [`Decoder`] does: nothing after it can be framed reliably.
#[derive(Debug, Default)]
pub struct EventReader {
    decoder: Decoder,
}

// === impl EventReader ===

impl EventReader {
    /// A reader at the start of atelier-build's stream.
    pub fn new() -> EventReader {
        EventReader::default()
    }

    /// Takes the next chunk and appends every item it completed to `items`, in order.
    ///
    /// On an error, the items before the bad frame are already in `items` (the last output
    /// before a corrupt frame belongs in the log too).
    pub fn push(&mut self, mut chunk: &[u8], items: &mut Vec<BuildItem>) -> Result<(), ReadError> {
        while let Some(frame) = self.decoder.decode(&mut chunk)? {
            items.push(item_of(frame)?);
        }
        Ok(())
    }

    /// Checks that the stream ended between two frames; call it when the relay ended.
    pub fn finish(&self) -> Result<(), ReadError> {
        Ok(self.decoder.finish()?)
    }
}

fn item_of(frame: Frame) -> Result<BuildItem, ReadError> {
    match frame.kind {
        FrameKind::Event => Ok(BuildItem::Event(BuildEvent::from_frame(&frame)?)),
        FrameKind::Stdout => Ok(BuildItem::Stdout(frame.payload)),
        FrameKind::Stderr => Ok(BuildItem::Stderr(frame.payload)),
        kind @ (FrameKind::Hello | FrameKind::Spec | FrameKind::Exit) => {
            Err(ReadError::UnexpectedKind(kind))
        }
    }
}

/// The events of one build, folded: sited records [`BuildReport::outcome`] as the build's
/// result. Output bytes are not kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildReport {
    /// The steps started, in order.
    pub started: Vec<BuildStep>,
    /// The verified output, once atelier-build sent `output_verified`.
    pub verified: Option<VerifiedOutput>,
    /// The refusal's reason, once atelier-build sent `refused`.
    pub refused: Option<String>,
}

// === impl BuildReport ===

impl BuildReport {
    /// An empty report.
    pub fn new() -> BuildReport {
        BuildReport::default()
    }

    /// Takes one item into the report (output items change nothing).
    pub fn record(&mut self, item: &BuildItem) {
        let BuildItem::Event(event) = item else {
            return;
        };
        match event {
            BuildEvent::StepStarted { step, .. } => self.started.push(*step),
            BuildEvent::StepFinished { .. } => {}
            BuildEvent::OutputVerified { files, bytes, .. } => {
                self.verified = Some(VerifiedOutput {
                    files: *files,
                    bytes: *bytes,
                });
            }
            BuildEvent::Refused { reason } => self.refused = Some(reason.clone()),
        }
    }

    /// The build's result: the verified output, or the contract's `error` string.
    ///
    /// A refusal wins over anything else; a stream that ended with neither a refusal nor a
    /// verified output (atelier-build killed, the connection cut) is `build error`, never a
    /// success.
    pub fn outcome(&self) -> Result<VerifiedOutput, String> {
        match (&self.refused, self.verified) {
            (Some(reason), _) => Err(reason.clone()),
            (None, Some(verified)) => Ok(verified),
            (None, None) => Err(BuildFailure::BuildError.as_str().into_owned()),
        }
    }
}

/// `item` in the build log's layout: `# install: <argv>` before the install
/// step's output, `# build: <argv>` after a blank line before the build's, the output bytes as
/// they came, and `# refused: <reason>` after a blank line for a refusal. Other events add
/// nothing. sited appends the promote's lines (`# promote to preprod`, `released <id>`) itself.
pub fn log_bytes(item: &BuildItem) -> Vec<u8> {
    match item {
        BuildItem::Stdout(bytes) | BuildItem::Stderr(bytes) => bytes.to_vec(),
        BuildItem::Event(BuildEvent::StepStarted { step, argv }) => {
            let lead = match step {
                BuildStep::Install => "",
                BuildStep::Build => "\n",
            };
            let name = match step {
                BuildStep::Install => "install",
                BuildStep::Build => "build",
            };
            format!("{lead}# {name}: {}\n", argv.join(" ")).into_bytes()
        }
        BuildItem::Event(BuildEvent::Refused { reason }) => {
            format!("\n# refused: {reason}\n").into_bytes()
        }
        BuildItem::Event(BuildEvent::StepFinished { .. } | BuildEvent::OutputVerified { .. }) => {
            Vec::new()
        }
    }
}

/// The most of one stream's unfinished line held back; a longer one is written as it is.
const MAX_PENDING_LINE: usize = 64 * 1024;

/// Renders items into the build log with whole lines. A step's stdout and stderr arrive as
/// separate chunks in whatever order the pipes are read, so two streams written at the same
/// moment would splice into one line (`curl: (56) COthe build went on…`). Each stream's
/// unfinished line waits here for its newline (or for the step's next event, or a cap), so
/// every line in the log is one stream's.
#[derive(Debug, Default)]
pub struct BuildLog {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl BuildLog {
    /// A log with nothing held back.
    pub fn new() -> Self {
        Self::default()
    }

    /// The log bytes `item` adds now.
    pub fn push(&mut self, item: &BuildItem) -> Vec<u8> {
        match item {
            BuildItem::Stdout(bytes) => whole_lines(&mut self.stdout, bytes),
            BuildItem::Stderr(bytes) => whole_lines(&mut self.stderr, bytes),
            BuildItem::Event(_) => {
                let mut out = self.finish();
                out.extend(log_bytes(item));
                out
            }
        }
    }

    /// What is still held back: the streams' unfinished lines, each ended by a newline.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for pending in [&mut self.stdout, &mut self.stderr] {
            if !pending.is_empty() {
                out.append(pending);
                out.push(b'\n');
            }
        }
        out
    }
}

/// Adds `bytes` to a stream's `pending` line and takes out every line it completes (all of
/// it when the unfinished part outgrows its cap).
fn whole_lines(pending: &mut Vec<u8>, bytes: &[u8]) -> Vec<u8> {
    pending.extend_from_slice(bytes);
    if pending.len() > MAX_PENDING_LINE {
        return std::mem::take(pending);
    }
    match pending.iter().rposition(|&b| b == b'\n') {
        Some(end) => {
            let rest = pending.split_off(end + 1);
            std::mem::replace(pending, rest)
        }
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, StepOutcome};

    fn stream() -> (Vec<u8>, Vec<BuildItem>) {
        let items = vec![
            BuildItem::Event(BuildEvent::StepStarted {
                step: BuildStep::Build,
                argv: vec!["sh".into(), "build.sh".into()],
            }),
            BuildItem::Stdout(Bytes::from_static(b"building\n")),
            BuildItem::Stderr(Bytes::from_static(b"warn\n")),
            BuildItem::Event(BuildEvent::StepFinished {
                step: BuildStep::Build,
                outcome: StepOutcome::Ok,
                code: Some(0),
                duration_ms: 3,
            }),
            BuildItem::Event(BuildEvent::OutputVerified {
                output: "dist".into(),
                files: 2,
                bytes: 10,
            }),
        ];
        let mut wire = Vec::new();
        for item in &items {
            let frame = match item {
                BuildItem::Event(e) => e.to_frame().unwrap(),
                BuildItem::Stdout(b) => Frame::stdout(b.clone()),
                BuildItem::Stderr(b) => Frame::stderr(b.clone()),
            };
            wire.extend(encode(&frame).unwrap());
        }
        (wire, items)
    }

    #[test]
    fn chunks_of_every_size_decode_to_the_same_items() {
        let (wire, want) = stream();
        for size in 1..=wire.len() {
            let mut reader = EventReader::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(size) {
                reader.push(chunk, &mut got).unwrap();
            }
            reader.finish().unwrap();
            assert_eq!(got, want, "chunk size {size}");
        }
    }

    #[test]
    fn a_report_needs_a_terminal_event() {
        let (_, items) = stream();
        let mut report = BuildReport::new();
        for item in &items[..4] {
            report.record(item);
        }
        assert_eq!(report.outcome(), Err("build error".to_owned()));
        report.record(&items[4]);
        assert_eq!(
            report.outcome(),
            Ok(VerifiedOutput {
                files: 2,
                bytes: 10
            })
        );
        report.record(&BuildItem::Event(BuildEvent::Refused {
            reason: "build failed".into(),
        }));
        assert_eq!(report.outcome(), Err("build failed".to_owned()));
        assert_eq!(report.started, [BuildStep::Build]);
    }

    #[test]
    fn bad_streams_are_named() {
        let (wire, _) = stream();
        let mut items = Vec::new();
        let mut reader = EventReader::new();
        reader.push(&wire[..wire.len() - 1], &mut items).unwrap();
        assert_eq!(items.len(), 4, "every whole frame before the cut");
        assert!(matches!(
            reader.finish(),
            Err(ReadError::Frame(FrameError::Truncated { .. }))
        ));

        let mut reader = EventReader::new();
        let exit = encode(&Frame::new(FrameKind::Exit, &b"{}"[..])).unwrap();
        let mut items = Vec::new();
        let both = [wire.clone(), exit].concat();
        assert!(matches!(
            reader.push(&both, &mut items),
            Err(ReadError::UnexpectedKind(FrameKind::Exit))
        ));
        assert_eq!(items.len(), 5, "the items before the bad frame are kept");

        let mut reader = EventReader::new();
        let bad_event =
            encode(&Frame::new(FrameKind::Event, &b"{\"event\":\"nope\"}"[..])).unwrap();
        assert!(matches!(
            reader.push(&bad_event, &mut Vec::new()),
            Err(ReadError::Event(_))
        ));

        let mut reader = EventReader::new();
        assert!(matches!(
            reader.push(b"Z\0\0\0\0", &mut Vec::new()),
            Err(ReadError::Frame(_))
        ));
        assert!(
            reader.push(&wire, &mut Vec::new()).is_err(),
            "a failed reader stays failed"
        );
    }

    #[test]
    fn log_layout_matches_the_contract() {
        let install = BuildItem::Event(BuildEvent::StepStarted {
            step: BuildStep::Install,
            argv: vec!["bun".into(), "install".into()],
        });
        let build = BuildItem::Event(BuildEvent::StepStarted {
            step: BuildStep::Build,
            argv: vec!["bun".into(), "run".into(), "build".into()],
        });
        let refused = BuildItem::Event(BuildEvent::Refused {
            reason: "build failed".into(),
        });
        let log: Vec<u8> = [
            install,
            BuildItem::Stdout(Bytes::from_static(b"ok\n")),
            build,
            refused,
        ]
        .iter()
        .flat_map(log_bytes)
        .collect();
        assert_eq!(
            String::from_utf8(log).unwrap(),
            "# install: bun install\nok\n\n# build: bun run build\n\n# refused: build failed\n"
        );
    }

    #[test]
    fn two_streams_written_at_once_never_share_a_line() {
        let out = |text: &str| BuildItem::Stdout(Bytes::copy_from_slice(text.as_bytes()));
        let err = |text: &str| BuildItem::Stderr(Bytes::copy_from_slice(text.as_bytes()));
        let mut log = BuildLog::new();
        let mut text = Vec::new();
        for item in [
            err("curl: (56) CO"),
            out("the build went on without it\n"),
            err("NNECT tunnel failed, response 403\npart"),
            out("no newline yet"),
        ] {
            text.extend(log.push(&item));
        }
        text.extend(log.push(&BuildItem::Event(BuildEvent::StepFinished {
            step: BuildStep::Build,
            outcome: crate::StepOutcome::Ok,
            code: Some(0),
            duration_ms: 1,
        })));
        text.extend(log.finish());
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "the build went on without it",
                "curl: (56) CONNECT tunnel failed, response 403",
                "no newline yet",
                "part",
            ]
        );
    }

    #[test]
    fn an_endless_line_is_written_once_over_its_cap() {
        let mut log = BuildLog::new();
        let chunk = BuildItem::Stdout(Bytes::from(vec![b'x'; MAX_PENDING_LINE]));
        assert!(log.push(&chunk).is_empty());
        assert_eq!(log.push(&chunk).len(), 2 * MAX_PENDING_LINE);
        assert!(log.finish().is_empty());
    }
}
