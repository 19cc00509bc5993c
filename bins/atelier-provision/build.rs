//! The templates this crate compiles in (`units/`, `tmpfiles/`, `polkit/`) live outside its
//! package, and cargo records such a file by its absolute path: with a target folder shared
//! between checkouts (the CI cache), a binary built from another checkout's templates would
//! count as fresh. Named here, relative to the package, they are this checkout's inputs.

fn main() {
    for dir in ["../../units", "../../tmpfiles", "../../polkit"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
