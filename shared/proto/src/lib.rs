//! Atelier's frame codec and the typed messages of every framed conversation.
//!
//! Atelier's binaries talk over unix sockets in frames:
//! `[type: 1 byte ASCII][length: u32 big-endian][payload]`. Every frame type has a size cap, and
//! the cap is checked from the 5-byte header, before any payload is buffered, so a peer cannot
//! make us allocate more than one capped frame.
//!
//! Parts:
//! - [`frame`]: [`FrameKind`], [`Frame`], [`encode`] and [`FrameError`].
//! - [`decoder`]: the sans-IO [`Decoder`] (feed bytes, take frames, check the end).
//! - [`io`]: [`read_frame`] and [`write_frame`] over tokio's `AsyncRead`/`AsyncWrite`.
//! - [`message`]: the typed JSON messages carried in `H`, `S`, `X` and `T` frames, each with a
//!   closed key set and validation after parsing.
//! - [`egress`]: the gate's decisions socket, in JSON lines rather than frames: sited's
//!   [`Subscribe`] and the gate's [`Decision`]s.
//! - [`build`]: the build door's protocol between sited and atelier-build: the plan passed on
//!   its command line, the reader of its event stream, the failures it reports.

pub mod build;
pub mod decoder;
pub mod egress;
pub mod frame;
pub mod io;
pub mod message;

pub use decoder::Decoder;
pub use egress::{Decision, EgressError, Subscribe, Verdict};
pub use frame::{encode, Frame, FrameError, FrameKind, FramePart, HEADER_LEN};
pub use io::{read_frame, write_frame};
pub use message::{
    is_fixed_env_key, is_valid_env_key, BuildEvent, BuildStep, Door, ExitRecord, Hello,
    MessageError, Spec, StepOutcome, FIXED_ENV_KEYS, FIXED_ENV_KEY_PREFIXES, PROTOCOL_VERSION,
};
