//! The pages and completions of a small command with a hidden flag, a subcommand and a hidden
//! subcommand.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a failure is the test failing"
)]

use clap::{Arg, ArgAction, Command};

use super::*;

const DATE: &str = "2026-12-03";

fn command() -> Command {
    Command::new("atelier-sample")
        .version("1.2.3")
        .about("Does one sample thing")
        .arg(
            Arg::new("json")
                .long("json")
                .help("Print JSON")
                .action(ArgAction::SetTrue),
        )
        .arg(Arg::new("root").long("root").hide(true).help("Tests only"))
        .subcommand(
            Command::new("sites")
                .about("Lists the sites")
                .subcommand(Command::new("create").about("Creates a site")),
        )
        .subcommand(Command::new("internal").hide(true))
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_page_per_shown_command_and_no_completions_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let written = generate(command(), Docs::Manual, dir.path(), DATE).unwrap();
    assert_eq!(written.len(), 3, "{written:?}");
    assert_eq!(
        names(&dir.path().join("man")),
        [
            "atelier-sample-sites-create.1",
            "atelier-sample-sites.1",
            "atelier-sample.1"
        ]
    );
    assert!(!dir.path().join("completions").exists());
    let page = fs::read_to_string(dir.path().join("man/atelier-sample.1")).unwrap();
    // The title line with all five fields: name, section, date, source, manual.
    let title = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
    let fields = title.matches('"').count();
    assert!(
        title.starts_with(".TH atelier-sample 1 2026-12-03 "),
        "{title}"
    );
    assert!(title.ends_with(" Atelier"), "{title}");
    assert_eq!(fields, 2, "the source is the one quoted field: {title}");
    assert!(page.contains("Atelier"), "the manual's name: {page}");
    assert!(page.contains("Does one sample thing"), "{page}");
    assert!(page.contains("json"), "{page}");
    assert!(
        !page.contains("Tests only"),
        "a hidden flag is not documented: {page}"
    );
    assert!(page.contains("1.2.3"), "{page}");
}

#[test]
fn completions_are_named_as_each_shell_looks_them_up() {
    let dir = tempfile::tempdir().unwrap();
    generate(command(), Docs::ManualAndCompletions, dir.path(), DATE).unwrap();
    let completions = dir.path().join("completions");
    for (shell, file) in [
        ("bash", "atelier-sample"),
        ("zsh", "_atelier-sample"),
        ("fish", "atelier-sample.fish"),
    ] {
        let script = fs::read_to_string(completions.join(shell).join(file))
            .unwrap_or_else(|e| panic!("{shell}: {e}"));
        assert!(script.contains("sites"), "{shell}: {script}");
        assert!(script.contains("json"), "{shell}: {script}");
    }
}

#[test]
fn an_unwritable_directory_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, b"").unwrap();
    let error = generate(command(), Docs::Manual, &file, DATE).unwrap_err();
    assert!(error.to_string().contains("a-file"), "{error}");
}

#[test]
fn a_missing_or_malformed_date_is_refused_by_name_and_nothing_is_written() {
    for date in ["", "2026-1-03", "2026/12/03", "20261203XX", "2026-12-03 "] {
        let dir = tempfile::tempdir().unwrap();
        let error = generate(command(), Docs::Manual, dir.path(), date).unwrap_err();
        assert!(error.to_string().contains(DATE_ENV), "{error}");
        assert!(!dir.path().join("man").exists(), "{date:?}");
    }
}
