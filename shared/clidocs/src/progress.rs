//! The one-line progress display the operator commands show while a long step runs.
//!
//! On a terminal, a step that makes the operator wait (a unit restarting, a build between two
//! log lines) is shown as a single line redrawn in place: a spinner, the seconds elapsed and
//! what is running. The line is erased before any ordinary line is printed and when the step
//! ends, so the scrollback holds exactly the lines a pipe would get. Anywhere else (a pipe, a
//! file, `TERM=dumb`) nothing of it is written at all, so scripts and logs never see a carriage
//! return.
//!
//! [`render`] is the whole drawing: a pure function of the frame and the terminal's width.
//! [`ProgressLine`] only adds the pacing (at most one redraw per [`TICK`]) and remembers
//! whether something is on screen to erase. The line never uses colour, so `NO_COLOR` holds
//! by construction. The text it shows may come from elsewhere (a build's step, a unit's
//! name): every control or reordering character in it is replaced before it reaches the
//! terminal, and it is cut to fit one row.

use std::ffi::OsStr;
use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

/// The shortest time between two redraws: ten a second is smooth and cheap.
pub const TICK: Duration = Duration::from_millis(100);

/// The width assumed when the terminal does not say.
const DEFAULT_WIDTH: usize = 80;

/// Back to the start of the row.
const RETURN: &[u8] = b"\r";

/// Erase from the cursor to the end of the row.
const CLEAR_TO_END: &[u8] = b"\x1b[K";

/// The spinner's frames, in ASCII so every terminal font has them.
const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

/// Whether a stream gets the progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An interactive terminal: the line is drawn and erased in place.
    Terminal,
    /// A pipe, a file or a dumb terminal: nothing but the ordinary lines.
    Plain,
}

// === impl Mode ===

impl Mode {
    /// The mode for `stream`, given this process's `TERM`.
    pub fn detect(stream: &impl IsTerminal) -> Mode {
        Mode::of(stream.is_terminal(), std::env::var_os("TERM").as_deref())
    }

    /// The mode for a stream that `is_terminal`, under the terminal type `term`: a terminal
    /// that declares itself `dumb` cannot move the cursor back, so it is treated as a pipe.
    pub fn of(is_terminal: bool, term: Option<&OsStr>) -> Mode {
        if is_terminal && term != Some(OsStr::new("dumb")) {
            Mode::Terminal
        } else {
            Mode::Plain
        }
    }
}

/// What the line should show now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A step is running.
    Running {
        /// What is running, as it came (it is sanitized when drawn).
        label: &'a str,
        /// How long it has been running.
        elapsed: Duration,
        /// The redraw count, which turns the spinner.
        tick: u64,
    },
    /// The step ended: the row is emptied and the cursor left at its start.
    Erased,
}

/// The bytes that show `frame` on a terminal `width` columns wide, in `mode`. A plain stream
/// gets nothing. A running frame starts with a carriage return and ends by clearing the rest
/// of the row, never with a newline, and never takes more than `width - 1` columns (writing
/// the last column makes some terminals wrap).
pub fn render(mode: Mode, frame: &Frame<'_>, width: usize) -> Vec<u8> {
    if mode == Mode::Plain {
        return Vec::new();
    }
    let mut out = RETURN.to_vec();
    if let Frame::Running {
        label,
        elapsed,
        tick,
    } = frame
    {
        let spinner = SPINNER[(*tick % SPINNER.len() as u64) as usize];
        let text = format!("{spinner} {} {label}", seconds(*elapsed));
        out.extend_from_slice(fit(&text, width.saturating_sub(1)).as_bytes());
    }
    out.extend_from_slice(CLEAR_TO_END);
    out
}

/// `elapsed` as whole seconds, and minutes past the first.
fn seconds(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

/// `text` made safe for a terminal and cut to `columns`: every control or reordering character
/// becomes `?`, and a character outside ASCII counts as two columns, since it may be drawn
/// wide (the line may come out a little short, never long enough to wrap).
fn fit(text: &str, columns: usize) -> String {
    let mut out = String::with_capacity(text.len().min(columns));
    let mut used = 0;
    for c in text.chars() {
        let c = if c.is_control() || is_reordering(c) {
            '?'
        } else {
            c
        };
        let wide = if c.is_ascii() { 1 } else { 2 };
        if used + wide > columns {
            break;
        }
        used += wide;
        out.push(c);
    }
    out
}

/// Bidirectional embeddings, overrides, isolates and marks: they make a terminal show text in
/// another order than it is. Every CLI that prints text from elsewhere escapes them.
pub fn is_reordering(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// The terminal's width on standard error, or [`DEFAULT_WIDTH`] when it does not say.
pub fn stderr_width() -> usize {
    match rustix::termios::tcgetwinsize(io::stderr()) {
        Ok(size) if size.ws_col > 0 => usize::from(size.ws_col),
        _ => DEFAULT_WIDTH,
    }
}

/// A progress line on one stream: paces the redraws and remembers what is on screen.
#[derive(Debug)]
pub struct ProgressLine {
    mode: Mode,
    width: usize,
    /// Whether a frame is on screen, to be erased.
    shown: bool,
    /// When the last frame was drawn.
    drawn_at: Option<Instant>,
    /// Frames drawn so far.
    ticks: u64,
}

// === impl ProgressLine ===

impl ProgressLine {
    /// A line in `mode` on a terminal `width` columns wide.
    pub fn new(mode: Mode, width: usize) -> ProgressLine {
        ProgressLine {
            mode,
            width,
            shown: false,
            drawn_at: None,
            ticks: 0,
        }
    }

    /// A line for this process's standard error, as [`Mode::detect`] finds it.
    pub fn for_stderr() -> ProgressLine {
        let mode = Mode::detect(&io::stderr());
        ProgressLine::new(mode, stderr_width())
    }

    /// Whether anything is ever drawn.
    pub fn is_live(&self) -> bool {
        self.mode == Mode::Terminal
    }

    /// Shows `label` running for `elapsed`, unless the last frame is younger than [`TICK`].
    pub fn show(&mut self, out: &mut dyn Write, label: &str, elapsed: Duration) -> io::Result<()> {
        if !self.is_live() || self.drawn_at.is_some_and(|at| at.elapsed() < TICK) {
            return Ok(());
        }
        let frame = Frame::Running {
            label,
            elapsed,
            tick: self.ticks,
        };
        out.write_all(&render(self.mode, &frame, self.width))?;
        out.flush()?;
        self.shown = true;
        self.drawn_at = Some(Instant::now());
        self.ticks += 1;
        Ok(())
    }

    /// Erases the line if a frame is on screen, so an ordinary line can follow.
    pub fn clear(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if !self.shown {
            return Ok(());
        }
        self.shown = false;
        self.drawn_at = None;
        out.write_all(&render(self.mode, &Frame::Erased, self.width))?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ERASE: &[u8] = b"\r\x1b[K";

    fn running(label: &str, secs: u64, tick: u64) -> Frame<'_> {
        Frame::Running {
            label,
            elapsed: Duration::from_secs(secs),
            tick,
        }
    }

    #[test]
    fn render_draws_one_safe_row_on_a_terminal_and_nothing_elsewhere() {
        let long = "x".repeat(200);
        let cases: &[(&str, Mode, Frame<'_>, usize, &[u8])] = &[
            (
                "terminal, running",
                Mode::Terminal,
                running("service  run systemctl daemon-reload", 3, 0),
                80,
                b"\r| 3s service  run systemctl daemon-reload\x1b[K",
            ),
            (
                "the spinner turns with the tick",
                Mode::Terminal,
                running("build", 0, 5),
                80,
                b"\r/ 0s build\x1b[K",
            ),
            (
                "minutes past the first",
                Mode::Terminal,
                running("build", 125, 2),
                80,
                b"\r- 2m05s build\x1b[K",
            ),
            (
                "a long label is cut to one column short of the width",
                Mode::Terminal,
                running(&long, 1, 0),
                20,
                b"\r| 1s xxxxxxxxxxxxxx\x1b[K",
            ),
            (
                "a width of zero still erases",
                Mode::Terminal,
                running("build", 1, 0),
                0,
                ERASE,
            ),
            (
                "control characters from the label never reach the terminal",
                Mode::Terminal,
                running("# build: a\x1b]0;owned\x07b\r\nc\u{9b}d", 1, 0),
                80,
                b"\r| 1s # build: a?]0;owned?b??c?d\x1b[K",
            ),
            (
                "reordering characters are replaced",
                Mode::Terminal,
                running("a\u{202e}b\u{2066}c", 1, 0),
                80,
                b"\r| 1s a?b?c\x1b[K",
            ),
            (
                "a character outside ASCII counts two columns",
                Mode::Terminal,
                running("\u{e9}\u{e9}\u{e9}\u{e9}", 1, 0),
                12,
                "\r| 1s \u{e9}\u{e9}\u{e9}\x1b[K".as_bytes(),
            ),
            (
                "the end erases the row",
                Mode::Terminal,
                Frame::Erased,
                80,
                ERASE,
            ),
            (
                "plain, running",
                Mode::Plain,
                running("service  run systemctl daemon-reload", 3, 0),
                80,
                b"",
            ),
            ("plain, the end", Mode::Plain, Frame::Erased, 80, b""),
        ];
        for (name, mode, frame, width, want) in cases {
            let got = render(*mode, frame, *width);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "{name}"
            );
            let text = got
                .strip_prefix(b"\r")
                .and_then(|t| t.strip_suffix(CLEAR_TO_END))
                .unwrap_or_default();
            assert!(
                !text.iter().any(|b| b.is_ascii_control()),
                "{name}: a control byte inside the row"
            );
        }
    }

    #[test]
    fn mode_honours_the_terminal_and_a_dumb_term() {
        let cases: &[(&str, bool, Option<&str>, Mode)] = &[
            ("a terminal", true, Some("xterm-256color"), Mode::Terminal),
            ("a terminal without TERM", true, None, Mode::Terminal),
            ("a dumb terminal", true, Some("dumb"), Mode::Plain),
            ("a pipe", false, Some("xterm"), Mode::Plain),
        ];
        for (name, is_terminal, term, want) in cases {
            assert_eq!(
                Mode::of(*is_terminal, term.map(OsStr::new)),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn the_line_is_paced_and_erased_once() {
        let mut out = Vec::new();
        let mut line = ProgressLine::new(Mode::Terminal, 40);
        line.clear(&mut out).unwrap();
        assert!(out.is_empty(), "nothing shown, nothing to erase");
        line.show(&mut out, "a", Duration::ZERO).unwrap();
        line.show(&mut out, "b", Duration::ZERO).unwrap();
        assert_eq!(out, b"\r| 0s a\x1b[K", "a second frame within a tick waits");
        std::thread::sleep(TICK);
        line.show(&mut out, "b", Duration::from_secs(1)).unwrap();
        line.clear(&mut out).unwrap();
        line.clear(&mut out).unwrap();
        assert_eq!(out, b"\r| 0s a\x1b[K\r/ 1s b\x1b[K\r\x1b[K");

        let mut out = Vec::new();
        let mut plain = ProgressLine::new(Mode::Plain, 40);
        plain.show(&mut out, "a", Duration::ZERO).unwrap();
        plain.clear(&mut out).unwrap();
        assert!(out.is_empty(), "a plain stream gets nothing");
    }
}
