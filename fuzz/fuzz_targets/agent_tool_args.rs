//! Fuzzes what atelier-agent parses from a model: a tool name chosen by the first byte and the
//! rest as the call's raw argument text, through `atelier_agent::tools::parse_raw_call` with
//! the workspace at `/w` (so absolute paths below it are accepted, and cut to relative ones).
//! Checks: no panic; a refusal has a reason and a message naming it; an accepted call keeps
//! every path relative, free of `..` and of `.git`/`.builder` at any depth, and every string
//! to be written within its size limit.
#![no_main]

use std::path::{Component, Path};

use atelier_agent::tools::args::{out_of_reach, MAX_WRITE_BYTES, WORKSPACE_TOOLS};
use atelier_agent::tools::{parse_raw_call, ToolPath, WorkspaceCall, WorkspaceDir};
use libfuzzer_sys::fuzz_target;

fn check_path(path: &Path) {
    assert!(!path.as_os_str().is_empty());
    for component in path.components() {
        match component {
            Component::Normal(name) => assert!(out_of_reach(name).is_none(), "{path:?}"),
            other => panic!("{path:?} has {other:?}"),
        }
    }
}

fn check(path: Option<&ToolPath>) {
    if let Some(path) = path {
        check_path(path.as_path());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    // One choice past the tools: a name nobody offers.
    let name = WORKSPACE_TOOLS
        .get(usize::from(pick) % (WORKSPACE_TOOLS.len() + 1))
        .copied()
        .unwrap_or("shell");
    let raw = String::from_utf8_lossy(rest);
    let workspace = WorkspaceDir::new("/w");
    match parse_raw_call(name, &raw, workspace.as_ref()) {
        Ok(call) => {
            assert_eq!(call.tool(), name);
            match &call {
                WorkspaceCall::Read {
                    path,
                    offset,
                    limit,
                } => {
                    check_path(path.as_path());
                    assert!(*offset >= 1 && *limit >= 1);
                }
                WorkspaceCall::Write { path, content } => {
                    check_path(path.as_path());
                    assert!(content.len() <= MAX_WRITE_BYTES);
                }
                WorkspaceCall::Edit { path, old, new, .. } => {
                    check_path(path.as_path());
                    assert!(!old.is_empty() && old != new);
                    assert!(old.len() <= MAX_WRITE_BYTES && new.len() <= MAX_WRITE_BYTES);
                }
                WorkspaceCall::List { path } | WorkspaceCall::Glob { path, .. } => {
                    check(path.as_ref())
                }
                WorkspaceCall::Grep { path, .. } => check(path.as_ref()),
            }
        }
        Err(error) => {
            assert!(!error.reason().is_empty());
            assert!(!error.to_string().is_empty());
        }
    }
});
