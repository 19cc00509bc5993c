//! Inherited descriptors end up close-on-exec, and stay open.

use rustix::fs::{Mode, OFlags};
use rustix::io::{fcntl_getfd, FdFlags};

use super::*;

/// A descriptor opened without close-on-exec, as a parent would hand one down.
fn inheritable() -> std::os::fd::OwnedFd {
    let fd = rustix::fs::open("/dev/null", OFlags::RDONLY, Mode::empty()).unwrap();
    assert!(!fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    fd
}

#[test]
fn inherited_descriptors_become_close_on_exec_and_stay_open() {
    let fd = inheritable();
    keep_inherited_fds_from_children().unwrap();
    assert!(fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    // Still open and usable.
    assert!(rustix::fs::fstat(&fd).is_ok());
}

#[test]
fn the_proc_walk_does_the_same() {
    let fd = inheritable();
    mark_each_listed_fd().unwrap();
    assert!(fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    assert!(rustix::fs::fstat(&fd).is_ok());
}

#[test]
fn stdio_is_left_alone() {
    // The range starts at 3: stdin, stdout and stderr keep whatever flags they came with.
    keep_inherited_fds_from_children().unwrap();
    let stderr = std::io::stderr();
    let flags = fcntl_getfd(std::os::fd::AsFd::as_fd(&stderr)).unwrap();
    assert!(!flags.contains(FdFlags::CLOEXEC));
}
