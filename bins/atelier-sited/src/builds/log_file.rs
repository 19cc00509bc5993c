//! A build's log file as its pipeline writes it: sited's own lines in full, the build's
//! output (its steps' lines and stderr, its egress decisions) up to a bound. The output is the
//! agent's to choose (a step it wrote may print without end), and the log lies in a folder only
//! sited writes, counted against the site's quota only once the run is over: unbounded, one
//! build could fill the disk every site shares. So past [`KEPT_HEAD`] bytes of output, only
//! the last [`KEPT_TAIL`] are held, in memory, and written after a line saying how many were
//! left out, before sited's next line of its own or when the log is closed: a log keeps what
//! ran first and how the build ended. Each line of sited's own ends one such window, so the
//! pipeline writes its own lines between the run's output only where it must (the program's
//! end); a log holds at most one cut window per such line.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write as _;

use atelier_fs::{FsError, Root};
use atelier_layout::workspace::PRIVATE_FILE_MODE;

use super::log_path;

/// The bytes of a build's output written as they come, from its start.
pub const KEPT_HEAD: usize = 1024 * 1024;
/// The bytes of its output kept from the end, once past [`KEPT_HEAD`].
pub const KEPT_TAIL: usize = 4 * 1024 * 1024;

/// How far into the kept tail its first whole line is looked for: output without line ends
/// (a progress bar redrawn with `\r`) is kept from where it was cut instead.
const LINE_SEARCH: usize = 64 * 1024;

/// How the line saying how much output was left out starts; the count and
/// [`LEFT_OUT_SUFFIX`] follow.
pub const LEFT_OUT_PREFIX: &str = "\n# atelier: ";
/// How that line ends.
pub const LEFT_OUT_SUFFIX: &str = " bytes of the build's output are left out here\n";

/// One build's log, open for appending while its pipeline runs.
pub struct BuildLogFile<'a> {
    workspace: &'a Root,
    id: &'a str,
    /// Opened at the first write, and again after a write failed.
    file: Option<File>,
    /// Output bytes that may still be written as they come.
    head_room: usize,
    /// The last output bytes past the head, not yet written.
    tail: VecDeque<u8>,
    /// Output bytes dropped from the front of `tail`.
    left_out: u64,
    /// Whether the last byte dropped ended a line, so `tail` starts a whole one.
    cut_at_line: bool,
}

impl<'a> BuildLogFile<'a> {
    /// The log of build `id` in `workspace`.
    pub fn new(workspace: &'a Root, id: &'a str) -> BuildLogFile<'a> {
        BuildLogFile {
            workspace,
            id,
            file: None,
            head_room: KEPT_HEAD,
            tail: VecDeque::new(),
            left_out: 0,
            cut_at_line: false,
        }
    }

    /// Appends the build's own output, within the bound.
    pub fn output(&mut self, bytes: &[u8]) {
        let now = bytes.len().min(self.head_room);
        let (head, rest) = bytes.split_at(now);
        self.head_room -= now;
        self.write(head);
        self.tail.extend(rest);
        if let Some(over) = self.tail.len().checked_sub(KEPT_TAIL).filter(|&n| n > 0) {
            self.cut_at_line = self.tail.drain(..over).next_back() == Some(b'\n');
            self.left_out += over as u64;
        }
    }

    /// Appends a line of sited's own, after the output held back.
    pub fn note(&mut self, bytes: &[u8]) {
        self.flush_tail();
        self.write(bytes);
    }

    /// Writes the output held back: after the line saying how much was left out, from the
    /// first whole line of what was kept (within [`LINE_SEARCH`], and never past its end).
    fn flush_tail(&mut self) {
        let mut tail = std::mem::take(&mut self.tail);
        if self.left_out > 0 {
            let cut = if self.cut_at_line {
                0
            } else {
                tail.iter()
                    .take(LINE_SEARCH.min(tail.len().saturating_sub(1)))
                    .position(|&b| b == b'\n')
                    .map_or(0, |at| at + 1)
            };
            tail.drain(..cut);
            let left_out = self.left_out + cut as u64;
            self.left_out = 0;
            self.write(format!("{LEFT_OUT_PREFIX}{left_out}{LEFT_OUT_SUFFIX}").as_bytes());
        }
        let (front, back) = tail.as_slices();
        self.write(front);
        self.write(back);
    }

    /// Appends `bytes`; a failed append is logged, never the build's failure.
    fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let path = log_path(self.id);
        let file = match self.file.take() {
            Some(file) => Ok(file),
            None => self.workspace.open_append(&path, PRIVATE_FILE_MODE),
        };
        let written = file.and_then(|mut file| match file.write_all(bytes) {
            Ok(()) => Ok(file),
            Err(source) => Err(FsError::Io {
                op: "append to",
                path,
                source,
            }),
        });
        match written {
            Ok(file) => self.file = Some(file),
            Err(e) => {
                tracing::error!(build = %self.id, error = %e, "could not append to the build log")
            }
        }
    }
}

impl Drop for BuildLogFile<'_> {
    fn drop(&mut self) {
        self.flush_tail();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &tempfile::TempDir) -> Root {
        let root = Root::open(dir.path()).unwrap();
        root.create_dir_all(crate::build_record::BUILDS_DIR, 0o700)
            .unwrap();
        root
    }

    fn read(dir: &tempfile::TempDir, id: &str) -> String {
        std::fs::read_to_string(dir.path().join(log_path(id))).unwrap()
    }

    /// Output within the head is written whole, in order with sited's lines.
    #[test]
    fn a_log_within_the_bound_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(&dir);
        let mut log = BuildLogFile::new(&root, "b1");
        log.note(b"# install: npm ci\n");
        log.output(b"added 3 packages\n");
        log.note(b"\n# promote to preprod\n");
        drop(log);
        assert_eq!(
            read(&dir, "b1"),
            "# install: npm ci\nadded 3 packages\n\n# promote to preprod\n"
        );
    }

    /// Output without end keeps its head, a line counting what was left out, and its tail
    /// from a whole line, then sited's next line; every byte is either kept or counted.
    #[test]
    fn endless_output_keeps_its_head_and_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(&dir);
        let mut log = BuildLogFile::new(&root, "b2");
        let mut all = Vec::new();
        for n in 0..1_200_000u32 {
            let line = format!("line {n}\n");
            all.extend_from_slice(line.as_bytes());
            log.output(line.as_bytes());
        }
        log.note(b"\n# error: build failed\n");
        drop(log);
        let text = read(&dir, "b2");
        assert!(text.len() <= KEPT_HEAD + KEPT_TAIL + 100, "{}", text.len());
        let (head, rest) = text.split_once(LEFT_OUT_PREFIX).unwrap();
        let (count, tail) = rest.split_once(LEFT_OUT_SUFFIX).unwrap();
        let count: usize = count.parse().unwrap();
        assert_eq!(head.as_bytes(), &all[..KEPT_HEAD]);
        let tail = tail.strip_suffix("\n# error: build failed\n").unwrap();
        assert!(tail.starts_with("line "), "the tail starts at a whole line");
        assert!(tail.ends_with("line 1199999\n"));
        assert!(tail.len() <= KEPT_TAIL);
        assert_eq!(head.len() + count + tail.len(), all.len());
        assert_eq!(tail.as_bytes(), &all[all.len() - tail.len()..]);
    }

    /// A cut that fell at a line's end keeps the next line whole; output without line ends is
    /// kept from where it was cut, its end never dropped for want of a line.
    #[test]
    fn a_cut_keeps_whole_lines_and_never_the_tails_end_for_want_of_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(&dir);
        // Lines of exactly the sizes that make the cut fall at a line's end.
        let mut log = BuildLogFile::new(&root, "b4");
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..(KEPT_HEAD + KEPT_TAIL) / 1024 + 8 {
            log.output(line.as_bytes());
        }
        drop(log);
        let text = read(&dir, "b4");
        let (_, rest) = text.split_once(LEFT_OUT_PREFIX).unwrap();
        let (count, tail) = rest.split_once(LEFT_OUT_SUFFIX).unwrap();
        assert_eq!(
            count,
            (8 * 1024).to_string(),
            "only the lines past the bound"
        );
        assert_eq!(tail.len(), KEPT_TAIL, "no whole line dropped");

        // A progress bar redrawn with carriage returns, then the one line end at the close.
        let mut log = BuildLogFile::new(&root, "b5");
        log.output(&vec![b'#'; KEPT_HEAD]);
        for _ in 0..KEPT_TAIL / 1000 + 100 {
            log.output(&[b"\r"[..].to_vec(), vec![b'='; 999]].concat());
        }
        log.output(b"\rbuild failed: out of memory\n");
        drop(log);
        let text = read(&dir, "b5");
        assert!(
            text.ends_with("build failed: out of memory\n"),
            "the end is kept"
        );
        let (_, rest) = text.split_once(LEFT_OUT_PREFIX).unwrap();
        let (_, tail) = rest.split_once(LEFT_OUT_SUFFIX).unwrap();
        assert_eq!(tail.len(), KEPT_TAIL);
    }

    /// Output held back is written when the log is closed, even without a line of sited's.
    #[test]
    fn what_was_held_back_is_written_at_the_close() {
        let dir = tempfile::tempdir().unwrap();
        let root = open(&dir);
        let mut log = BuildLogFile::new(&root, "b3");
        log.output(&vec![b'a'; KEPT_HEAD]);
        log.output(b"the end\n");
        drop(log);
        let text = read(&dir, "b3");
        assert_eq!(text.len(), KEPT_HEAD + "the end\n".len());
        assert!(text.ends_with("athe end\n"));
    }
}
