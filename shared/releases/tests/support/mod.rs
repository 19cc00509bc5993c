//! Test support shared by this crate's test targets: a webspace laid out like the
//! provisioner's (stores, placeholder links), source trees whose every file names its
//! release, and tree snapshots. The real nginx comes from `atelier-test-support`.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use atelier_releases::Store;

/// A temporary webspace: `.releases/{pre,web}` and the provisioner's placeholder links
/// `pre -> .releases/pre`, `web -> .releases/web`; sources and an `outside` directory beside
/// it.
pub struct Webspace {
    tmp: tempfile::TempDir,
}

impl Webspace {
    pub fn new() -> Webspace {
        let tmp = tempfile::tempdir().unwrap();
        let web = tmp.path().join("site.example");
        for surface in ["pre", "web"] {
            std::fs::create_dir_all(web.join(".releases").join(surface)).unwrap();
            symlink(Path::new(".releases").join(surface), web.join(surface)).unwrap();
        }
        Webspace { tmp }
    }

    /// The webspace directory.
    pub fn path(&self) -> PathBuf {
        self.tmp.path().join(self.name())
    }

    /// The webspace directory's own name.
    pub fn name(&self) -> &'static str {
        "site.example"
    }

    /// A directory beside the webspace, for escapes.
    pub fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    pub fn preprod(&self) -> Store {
        let web = self.path();
        Store::open(&web.join(".releases/pre"), &web.join("pre")).unwrap()
    }

    pub fn prod(&self) -> Store {
        let web = self.path();
        Store::open(&web.join(".releases/web"), &web.join("web")).unwrap()
    }

    /// A new source tree beside the webspace holding `files` (relative path, filler bytes),
    /// each file tagged with `tag` ([`file_bytes`]).
    pub fn source(&self, tag: &str, files: &[(&str, usize)]) -> PathBuf {
        static SEQUENCE: AtomicUsize = AtomicUsize::new(0);
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let dir = self.tmp.path().join(format!("src-{tag}-{n}"));
        write_site(&dir, tag, files);
        dir
    }
}

/// Writes `files` below `dir`, each holding [`file_bytes`].
pub fn write_site(dir: &Path, tag: &str, files: &[(&str, usize)]) {
    for (rel, filler) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, file_bytes(tag, rel, *filler)).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
}

/// `<tag> <rel> ` + `filler` bytes + ` <tag>\n`: any prefix, suffix or splice of two releases'
/// versions of a file fails [`is_whole_file`].
pub fn file_bytes(tag: &str, rel: &str, filler: usize) -> Vec<u8> {
    let mut bytes = format!("{tag} {rel} ").into_bytes();
    bytes.extend((0..filler).map(|i| b'a' + (i % 26) as u8));
    bytes.extend(format!(" {tag}\n").into_bytes());
    bytes
}

/// The release tag a file names first.
pub fn tag_of(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == b' ').unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Returns true if and only if `bytes` is exactly one release's version of a file: it starts
/// and ends with the same tag and has the filler length its header implies.
pub fn is_whole_file(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let mut words = text.splitn(3, ' ');
    let (Some(tag), Some(rel), Some(rest)) = (words.next(), words.next(), words.next()) else {
        return false;
    };
    let trailer = format!(" {tag}\n");
    let Some(filler) = rest.strip_suffix(&trailer) else {
        return false;
    };
    file_bytes(tag, rel, filler.len()) == bytes
}

/// Every regular file below `dir` (following a link at `dir` itself): relative path → bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &format!("{name}/"), out);
            } else {
                out.insert(name, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    walk(dir, "", &mut out);
    out
}
