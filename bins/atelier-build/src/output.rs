//! Proving the build's output directory before anyone copies it: it exists, is a directory and
//! not a symbolic link, its real path lies inside the workspace, nothing on the way to it is a
//! link, and it holds only directories and singly-linked regular files, counted.
//!
//! The workspace is written by the site's identity, so every answer here is about the tree as
//! it was when asked; the promote reads the tree again through `atelier-fs` and refuses the
//! same things on its own. Checking here names the reason in the build record.

use std::path::{Component, Path};

use atelier_fs::{tree, FileKind, FsError, Root};
use atelier_proto::build::{BuildFailure, VerifiedOutput};

/// Directory levels the walk descends at most.
const MAX_DEPTH: usize = 64;

/// Entries the walk visits at most, so a tree of millions of names cannot pin the build.
const MAX_ENTRIES: u64 = 200_000;

/// A refused output: the contract's failure, and a sentence for the build log naming what was
/// found where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRefusal {
    /// The failure recorded.
    pub failure: BuildFailure,
    /// What was found, for the log.
    pub detail: String,
}

/// Proves `output` (the manifest's, relative) inside `workspace` and counts what it holds.
pub fn verify_output(workspace: &Path, output: &str) -> Result<VerifiedOutput, OutputRefusal> {
    let named = || output.to_owned();
    let refuse = |failure: BuildFailure, detail: String| OutputRefusal { failure, detail };
    let outside = |detail: String| {
        refuse(
            BuildFailure::OutputOutsideWorkspace { output: named() },
            detail,
        )
    };
    let error = |detail: String| refuse(BuildFailure::BuildError, detail);

    let rel = Path::new(output);
    if rel.is_absolute() || rel.components().any(|c| c == Component::ParentDir) {
        return Err(outside(format!(
            "{output} is not a path below the workspace"
        )));
    }
    if !rel.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(outside(format!("{output} names the workspace itself")));
    }
    let real_workspace = workspace
        .canonicalize()
        .map_err(|e| error(format!("cannot resolve the workspace: {e}")))?;
    let lexical = real_workspace.join(rel);
    let meta = match lexical.symlink_metadata() {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(
                BuildFailure::OutputMissing { output: named() },
                format!("nothing at {output}"),
            ))
        }
        Err(e) => return Err(error(format!("cannot inspect {output}: {e}"))),
    };
    if meta.file_type().is_symlink() {
        return Err(refuse(
            BuildFailure::OutputIsSymlink { output: named() },
            format!("{output} is a symbolic link"),
        ));
    }
    if !meta.is_dir() {
        return Err(refuse(
            BuildFailure::OutputNotDirectory { output: named() },
            format!("{output} is not a directory"),
        ));
    }
    let real = lexical
        .canonicalize()
        .map_err(|e| error(format!("cannot resolve {output}: {e}")))?;
    if !real.starts_with(&real_workspace) || real == real_workspace {
        return Err(outside(format!("{output} resolves to {}", real.display())));
    }

    let root = Root::open(&real_workspace)
        .map_err(|e| error(format!("cannot open the workspace: {e}")))?;
    let dir = match root.open_dir(rel) {
        Ok(dir) => dir,
        Err(FsError::SymlinkRefused { path }) => {
            return Err(refuse(
                BuildFailure::OutputThroughSymlink { output: named() },
                format!("{} is a symbolic link", path.display()),
            ))
        }
        Err(e) => return Err(error(format!("cannot open {output}: {e}"))),
    };
    let mut walk = Walk {
        output,
        counted: VerifiedOutput { files: 0, bytes: 0 },
        entries: 0,
    };
    walk.dir(&dir, rel, 0)?;
    Ok(walk.counted)
}

struct Walk<'a> {
    output: &'a str,
    counted: VerifiedOutput,
    entries: u64,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Root, shown: &Path, depth: usize) -> Result<(), OutputRefusal> {
        let named = || self.output.to_owned();
        let error = |detail: String| OutputRefusal {
            failure: BuildFailure::BuildError,
            detail,
        };
        if depth > MAX_DEPTH {
            return Err(error(format!(
                "{} is more than {MAX_DEPTH} directories deep",
                shown.display()
            )));
        }
        let entries = tree::list_dir(dir, None)
            .map_err(|e| error(format!("cannot list {}: {e}", shown.display())))?;
        for (name, kind) in entries {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(error(format!(
                    "{} holds more than {MAX_ENTRIES} entries",
                    self.output
                )));
            }
            let path = shown.join(&name);
            match kind {
                FileKind::Dir => {
                    let child = dir
                        .open_dir(&name)
                        .map_err(|e| error(format!("cannot open {}: {e}", path.display())))?;
                    self.dir(&child, &path, depth + 1)?;
                }
                FileKind::File => {
                    let meta = dir
                        .metadata(&name)
                        .map_err(|e| error(format!("cannot inspect {}: {e}", path.display())))?;
                    if meta.links > 1 {
                        return Err(OutputRefusal {
                            failure: BuildFailure::OutputContainsHardLink { output: named() },
                            detail: format!("{} has {} hard links", path.display(), meta.links),
                        });
                    }
                    self.counted.files += 1;
                    self.counted.bytes += meta.len;
                }
                FileKind::Symlink => {
                    return Err(OutputRefusal {
                        failure: BuildFailure::OutputContainsSymlink { output: named() },
                        detail: format!("{} is a symbolic link", path.display()),
                    })
                }
                FileKind::Other => {
                    return Err(OutputRefusal {
                        failure: BuildFailure::OutputContainsSpecialFile { output: named() },
                        detail: format!("{} is a FIFO, socket or device", path.display()),
                    })
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Builds a workspace with `setup`, then verifies `output` in it.
    fn verify(setup: impl FnOnce(&Path, &Path), output: &str) -> Result<VerifiedOutput, String> {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(outside.join("dist")).unwrap();
        std::fs::write(outside.join("dist/index.html"), "elsewhere").unwrap();
        setup(&ws, &outside);
        verify_output(&ws, output).map_err(|r| r.failure.code().to_owned())
    }

    fn site(ws: &Path) {
        std::fs::create_dir_all(ws.join("dist/assets")).unwrap();
        std::fs::write(ws.join("dist/index.html"), "12345").unwrap();
        std::fs::write(ws.join("dist/assets/app.css"), "abc").unwrap();
    }

    #[test]
    fn output_refusal_table() {
        type Setup = fn(&Path, &Path);
        let cases: Vec<(&str, Setup, &str, Result<VerifiedOutput, &str>)> = vec![
            (
                "counted",
                |ws, _| site(ws),
                "dist",
                Ok(VerifiedOutput { files: 2, bytes: 8 }),
            ),
            (
                "nested output",
                |ws, _| {
                    std::fs::create_dir_all(ws.join("build/site")).unwrap();
                    std::fs::write(ws.join("build/site/a"), "a").unwrap();
                },
                "build/site/",
                Ok(VerifiedOutput { files: 1, bytes: 1 }),
            ),
            (
                "empty dir",
                |ws, _| std::fs::create_dir(ws.join("dist")).unwrap(),
                "dist",
                Ok(VerifiedOutput { files: 0, bytes: 0 }),
            ),
            ("missing", |_, _| {}, "dist", Err("output_missing")),
            (
                "dangling link parent",
                |ws, _| symlink("/nonexistent", ws.join("out")).unwrap(),
                "out/dist",
                Err("output_missing"),
            ),
            (
                "output is a symlink",
                |ws, _| {
                    site(ws);
                    symlink("dist", ws.join("public")).unwrap();
                },
                "public",
                Err("output_is_symlink"),
            ),
            (
                "output is a file",
                |ws, _| std::fs::write(ws.join("dist"), "x").unwrap(),
                "dist",
                Err("output_not_directory"),
            ),
            (
                "absolute",
                |ws, _| site(ws),
                "/etc",
                Err("output_outside_workspace"),
            ),
            (
                "dot dot",
                |ws, _| site(ws),
                "dist/../dist",
                Err("output_outside_workspace"),
            ),
            (
                "the workspace itself",
                |ws, _| site(ws),
                "./",
                Err("output_outside_workspace"),
            ),
            (
                "escape via a symlinked parent",
                |ws, outside| symlink(outside, ws.join("out")).unwrap(),
                "out/dist",
                Err("output_outside_workspace"),
            ),
            (
                "inside link on the way",
                |ws, _| {
                    std::fs::create_dir_all(ws.join("real/dist")).unwrap();
                    symlink("real", ws.join("via")).unwrap();
                },
                "via/dist",
                Err("output_through_symlink"),
            ),
            (
                "contains a symlink",
                |ws, _| {
                    site(ws);
                    symlink("/etc/passwd", ws.join("dist/assets/passwd")).unwrap();
                },
                "dist",
                Err("output_contains_symlink"),
            ),
            (
                "contains a dangling symlink",
                |ws, _| {
                    site(ws);
                    symlink("nowhere", ws.join("dist/x")).unwrap();
                },
                "dist",
                Err("output_contains_symlink"),
            ),
            (
                "contains a fifo",
                |ws, _| {
                    site(ws);
                    rustix::fs::mknodat(
                        rustix::fs::CWD,
                        ws.join("dist/fifo"),
                        rustix::fs::FileType::Fifo,
                        rustix::fs::Mode::from_raw_mode(0o600),
                        0,
                    )
                    .unwrap();
                },
                "dist",
                Err("output_contains_special_file"),
            ),
            (
                "contains a socket",
                |ws, _| {
                    site(ws);
                    std::os::unix::net::UnixListener::bind(ws.join("dist/sock")).unwrap();
                },
                "dist",
                Err("output_contains_special_file"),
            ),
            (
                "contains a hard link",
                |ws, _| {
                    site(ws);
                    std::fs::write(ws.join("secret"), "s").unwrap();
                    std::fs::hard_link(ws.join("secret"), ws.join("dist/assets/copy")).unwrap();
                },
                "dist",
                Err("output_contains_hard_link"),
            ),
        ];
        for (name, setup, output, want) in cases {
            let got = verify(setup, output);
            assert_eq!(got, want.map_err(str::to_owned), "case {name}");
        }
    }
}
