//! The lab's npm registry: the second role of the same server, so a test can run a real
//! `npm install` through the egress gate against a lab hostname over TLS, with no package
//! registry on the internet. Each `--package NAME@VERSION` becomes, in memory at start, a
//! tiny CommonJS package written for the test (a gzip'd tar of `package/package.json` and
//! `package/index.js`); the registry serves its packument (`GET /<name>`) and its tarball
//! (`GET /<name>/-/<name>-<version>.tgz`), and npm's own 404 shape for anything else of that
//! form.
//!
//! Only unscoped names: a scoped name (`@scope/name`) travels as `/@scope%2fname` and no
//! test needs one, so `--package` refuses them rather than serving them half-right.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::{json, Value};
use sha1::Sha1;
use sha2::{Digest as _, Sha512};

/// The longest package name npm publishes, in bytes.
pub const MAX_NAME_BYTES: usize = 214;

/// Every tar entry's modification time: the fixed date `npm pack` writes
/// (1985-10-26T08:15:00Z), so a package's bytes, hence its integrity, never change.
pub const MTIME: u64 = 499_162_500;

/// The largest version number npm's semver reads (JavaScript's `Number.MAX_SAFE_INTEGER`).
const MAX_VERSION_NUMBER: u64 = (1 << 53) - 1;

/// The package the shipped site template depends on, served as a working escaper.
const ESCAPE_HTML: &str = "escape-html";

/// Why a `--package` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing at all.
    #[error("the package is empty: give NAME@VERSION, e.g. escape-html@1.0.3")]
    Empty,
    /// A scoped name, which the lab registry does not serve.
    #[error("{0:?}: scoped package names (@scope/name) are not supported by the lab registry")]
    Scoped(String),
    /// No `@VERSION`.
    #[error("{0:?} names no version: give NAME@VERSION, e.g. escape-html@1.0.3")]
    NoVersion(String),
    /// A name npm would refuse.
    #[error(
        "{name:?} is not an npm package name: {why} (lowercase ASCII letters, digits, '-', '.' \
         and '_', not starting with '.' or '_', 1 to 214 bytes)"
    )]
    Name {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A version that is not plain `MAJOR.MINOR.PATCH`.
    #[error(
        "{0:?} is not a plain version: give MAJOR.MINOR.PATCH, numbers without leading zeros \
         (no pre-release or build part)"
    )]
    Version(String),
}

/// A plain semantic version, `MAJOR.MINOR.PATCH`; ordered as semver orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The major number.
    pub major: u64,
    /// The minor number.
    pub minor: u64,
    /// The patch number.
    pub patch: u64,
}

impl FromStr for Version {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Version, SpecError> {
        let refused = || SpecError::Version(text.to_owned());
        let number = |part: &str| {
            // Semver forbids leading zeros; npm's parser reads no more than a safe integer.
            let digits = !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
            if !digits || (part.len() > 1 && part.starts_with('0')) {
                return None;
            }
            part.parse::<u64>()
                .ok()
                .filter(|n| *n <= MAX_VERSION_NUMBER)
        };
        let mut parts = text.split('.');
        let (Some(major), Some(minor), Some(patch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(refused());
        };
        Ok(Version {
            major: number(major).ok_or_else(refused)?,
            minor: number(minor).ok_or_else(refused)?,
            patch: number(patch).ok_or_else(refused)?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One `--package NAME@VERSION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    /// An unscoped npm name.
    pub name: String,
    /// Its one version.
    pub version: Version,
}

impl FromStr for PackageSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<PackageSpec, SpecError> {
        if text.is_empty() {
            return Err(SpecError::Empty);
        }
        if text.starts_with('@') && text.contains('/') {
            return Err(SpecError::Scoped(text.to_owned()));
        }
        let Some((name, version)) = text.split_once('@') else {
            return Err(SpecError::NoVersion(text.to_owned()));
        };
        check_name(name)?;
        Ok(PackageSpec {
            name: name.to_owned(),
            version: version.parse()?,
        })
    }
}

impl fmt::Display for PackageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// Whether `name` is an unscoped npm package name (the rule for new packages).
pub fn check_name(name: &str) -> Result<(), SpecError> {
    let refused = |why| {
        Err(SpecError::Name {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return refused("it is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return refused("it is longer than 214 bytes");
    }
    if name.starts_with('.') || name.starts_with('_') {
        return refused("it starts with '.' or '_'");
    }
    if name.bytes().any(|byte| byte.is_ascii_uppercase()) {
        return refused("it has an uppercase letter");
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-._".contains(&byte))
    {
        return refused("it has a character npm does not allow");
    }
    Ok(())
}

/// Why the packages could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Writing the tar or the gzip stream failed (in memory, so only on a bug).
    #[error("cannot pack {package}: {source}")]
    Pack {
        /// `NAME@VERSION`.
        package: String,
        /// What the writer said.
        source: std::io::Error,
    },
}

/// One package as served: its tarball and npm's two checksums of it.
#[derive(Debug, Clone)]
pub struct Package {
    /// The gzip'd tar.
    pub tarball: Bytes,
    /// The SHA-1 of the tarball, lowercase hex (`dist.shasum`).
    pub shasum: String,
    /// `sha512-` and the base64 SHA-512 of the tarball (`dist.integrity`, SRI).
    pub integrity: String,
}

impl Package {
    /// Makes the package `spec` names.
    pub fn make(spec: &PackageSpec) -> Result<Package, RegistryError> {
        let tarball = pack(&[
            ("package/package.json", package_json(spec).as_bytes()),
            ("package/index.js", index_js(spec).as_bytes()),
        ])
        .map_err(|source| RegistryError::Pack {
            package: spec.to_string(),
            source,
        })?;
        Ok(Package {
            shasum: hex::encode(Sha1::digest(&tarball)),
            integrity: format!(
                "sha512-{}",
                base64::engine::general_purpose::STANDARD.encode(Sha512::digest(&tarball))
            ),
            tarball: Bytes::from(tarball),
        })
    }
}

/// What the registry answers to a request of its form.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A package document (`application/json`).
    Packument(Value),
    /// A tarball's bytes (`application/octet-stream`).
    Tarball(Bytes),
    /// No such package or version: npm's `{"error":"not found"}` with a 404.
    NotFound,
}

/// The packages served, by name, then by version.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    packages: BTreeMap<String, BTreeMap<Version, Package>>,
}

impl Registry {
    /// Makes every package `specs` names (a repeated spec once).
    pub fn new(specs: &[PackageSpec]) -> Result<Registry, RegistryError> {
        let mut packages: BTreeMap<String, BTreeMap<Version, Package>> = BTreeMap::new();
        for spec in specs {
            let versions = packages.entry(spec.name.clone()).or_default();
            if let Entry::Vacant(vacant) = versions.entry(spec.version) {
                vacant.insert(Package::make(spec)?);
            }
        }
        Ok(Registry { packages })
    }

    /// The answer to a GET of `path`, or `None` if `path` is not of the registry's form (then
    /// it is the model's to refuse). Tarball URLs name `authority` (`host[:port]`), the one
    /// the client asked, so it fetches them the way it fetched the packument.
    pub fn answer(&self, path: &str, authority: &str) -> Option<Reply> {
        let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let (name, file) = match segments.as_slice() {
            [name] => (*name, None),
            [name, "-", file] => (*name, Some(*file)),
            _ => return None,
        };
        check_name(name).ok()?;
        let Some(versions) = self.packages.get(name) else {
            return Some(Reply::NotFound);
        };
        let Some(file) = file else {
            return Some(Reply::Packument(packument(name, versions, authority)));
        };
        let version = file
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_suffix(".tgz"))
            .and_then(|version| version.parse::<Version>().ok());
        Some(match version.and_then(|version| versions.get(&version)) {
            Some(package) => Reply::Tarball(package.tarball.clone()),
            None => Reply::NotFound,
        })
    }
}

/// The body of npm's 404.
pub fn not_found() -> Value {
    json!({ "error": "not found" })
}

/// The full package document; npm takes it for the abbreviated one too.
fn packument(name: &str, versions: &BTreeMap<Version, Package>, authority: &str) -> Value {
    let manifests: serde_json::Map<String, Value> = versions
        .iter()
        .map(|(version, package)| {
            let manifest = json!({
                "name": name,
                "version": version.to_string(),
                "main": "index.js",
                "dist": {
                    "tarball": format!("https://{authority}/{name}/-/{name}-{version}.tgz"),
                    "shasum": package.shasum,
                    "integrity": package.integrity,
                },
            });
            (version.to_string(), manifest)
        })
        .collect();
    // The highest version is the latest, as a publish of each in order would leave it.
    let latest = versions.keys().next_back().map(Version::to_string);
    json!({
        "name": name,
        "dist-tags": { "latest": latest },
        "versions": manifests,
    })
}

/// `package.json`, fields in the order npm writes them.
fn package_json(spec: &PackageSpec) -> String {
    format!(
        "{{\n  \"name\": {},\n  \"version\": \"{}\",\n  \"main\": \"index.js\",\n  \
         \"license\": \"MIT\"\n}}\n",
        Value::from(spec.name.as_str()),
        spec.version,
    )
}

/// `index.js`: escape-html's escaper for `escape-html` (what the template's build calls),
/// else a function saying where it came from; either way `LAB_MARKER` tells a test the
/// module is the lab registry's and not one from elsewhere.
fn index_js(spec: &PackageSpec) -> String {
    // A JSON string is a JavaScript string literal.
    let marker = Value::from(format!("{spec} from the lab registry"));
    if spec.name == ESCAPE_HTML {
        format!(
            "'use strict';\n\
             \n\
             // The lab registry's escape-html: the five characters HTML gives meaning to.\n\
             var REPLACEMENTS = {{ '&': '&amp;', '<': '&lt;', '>': '&gt;', '\"': '&quot;', \"'\": \
             '&#39;' }};\n\
             \n\
             function escapeHtml(string) {{\n  \
             return String(string).replace(/[&<>\"']/g, function (character) {{\n    \
             return REPLACEMENTS[character];\n  \
             }});\n\
             }}\n\
             \n\
             module.exports = escapeHtml;\n\
             module.exports.LAB_MARKER = {marker};\n"
        )
    } else {
        format!(
            "'use strict';\n\
             \n\
             var MARKER = {marker};\n\
             \n\
             module.exports = function () {{\n  \
             return MARKER;\n\
             }};\n\
             module.exports.LAB_MARKER = MARKER;\n"
        )
    }
}

/// A gzip'd tar of regular files, byte-for-byte the same on every run: mode 0644, owner 0:0,
/// [`MTIME`], and a gzip header with no time or name.
fn pack(files: &[(&str, &[u8])]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    for (path, content) in files {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(MTIME);
        builder.append_data(&mut header, path, *content)?;
    }
    builder.into_inner()?.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Read as _;

    use super::*;

    fn spec(text: &str) -> PackageSpec {
        text.parse().unwrap()
    }

    fn registry(specs: &[&str]) -> Registry {
        let specs: Vec<PackageSpec> = specs.iter().map(|text| spec(text)).collect();
        Registry::new(&specs).unwrap()
    }

    /// One tar entry as a test looks at it.
    struct Unpacked {
        path: String,
        /// Mode, uid, gid, mtime.
        header: (u32, u64, u64, u64),
        content: String,
    }

    /// The tarball's entries, in order; all must be regular files.
    fn unpack(tarball: &[u8]) -> Vec<Unpacked> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tarball));
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let header = entry.header().clone();
                assert_eq!(header.entry_type(), tar::EntryType::Regular);
                let mut content = String::new();
                entry.read_to_string(&mut content).unwrap();
                Unpacked {
                    path: entry.path().unwrap().to_string_lossy().into_owned(),
                    header: (
                        header.mode().unwrap(),
                        header.uid().unwrap(),
                        header.gid().unwrap(),
                        header.mtime().unwrap(),
                    ),
                    content,
                }
            })
            .collect()
    }

    #[test]
    fn package_specs_are_parsed_or_refused() {
        type Expected = Result<(&'static str, Version), SpecError>;
        let cases: [(&str, &str, Expected); 12] = [
            (
                "good",
                "escape-html@1.0.3",
                Ok((
                    "escape-html",
                    Version {
                        major: 1,
                        minor: 0,
                        patch: 3,
                    },
                )),
            ),
            (
                "good, all allowed characters",
                "a.b_c-9@10.20.0",
                Ok((
                    "a.b_c-9",
                    Version {
                        major: 10,
                        minor: 20,
                        patch: 0,
                    },
                )),
            ),
            (
                "scoped refused",
                "@lab/escape-html@1.0.3",
                Err(SpecError::Scoped("@lab/escape-html@1.0.3".to_owned())),
            ),
            (
                "bad version: two parts",
                "escape-html@1.0",
                Err(SpecError::Version("1.0".to_owned())),
            ),
            (
                "bad version: pre-release",
                "escape-html@1.0.3-beta.1",
                Err(SpecError::Version("1.0.3-beta.1".to_owned())),
            ),
            (
                "bad version: leading zero",
                "escape-html@1.01.3",
                Err(SpecError::Version("1.01.3".to_owned())),
            ),
            (
                "bad version: a range",
                "escape-html@^1.0.3",
                Err(SpecError::Version("^1.0.3".to_owned())),
            ),
            (
                "no version",
                "escape-html",
                Err(SpecError::NoVersion("escape-html".to_owned())),
            ),
            (
                "uppercase refused",
                "Escape-HTML@1.0.3",
                Err(SpecError::Name {
                    name: "Escape-HTML".to_owned(),
                    why: "it has an uppercase letter",
                }),
            ),
            ("empty", "", Err(SpecError::Empty)),
            (
                "empty name",
                "@1.0.3",
                Err(SpecError::Name {
                    name: String::new(),
                    why: "it is empty",
                }),
            ),
            (
                "leading dot refused",
                ".hidden@1.0.0",
                Err(SpecError::Name {
                    name: ".hidden".to_owned(),
                    why: "it starts with '.' or '_'",
                }),
            ),
        ];
        for (case, text, expected) in cases {
            let parsed = text
                .parse::<PackageSpec>()
                .map(|spec| (spec.name, spec.version));
            let expected = expected.map(|(name, version)| (name.to_owned(), version));
            assert_eq!(parsed, expected, "case {case:?}: {text:?}");
        }
    }

    #[test]
    fn names_follow_npm() {
        assert!(check_name(&"a".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(check_name(&"a".repeat(MAX_NAME_BYTES + 1)).is_err());
        for bad in ["", "_x", "a b", "a/b", "a@b", "a~b", "café", "a%2fb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["x", "0", "lodash.merge", "a_b", "a-"] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn the_refusals_say_what_to_give() {
        let scoped = "@lab/x@1.0.0".parse::<PackageSpec>().unwrap_err();
        assert!(
            scoped.to_string().contains("scoped package names"),
            "{scoped}"
        );
        let version = "x@1".parse::<PackageSpec>().unwrap_err();
        assert!(
            version.to_string().contains("MAJOR.MINOR.PATCH"),
            "{version}"
        );
    }

    #[test]
    fn versions_order_as_semver_does_and_print_back() {
        let version = |text: &str| text.parse::<Version>().unwrap();
        assert!(version("1.10.0") > version("1.9.9"));
        assert!(version("2.0.0") > version("1.99.99"));
        assert_eq!(version("0.0.0").to_string(), "0.0.0");
        assert_eq!(version("9007199254740991.0.0").major, MAX_VERSION_NUMBER);
        assert!("9007199254740992.0.0".parse::<Version>().is_err());
    }

    #[test]
    fn the_tarball_holds_exactly_the_two_files() {
        let package = Package::make(&spec("escape-html@1.0.3")).unwrap();
        let entries = unpack(&package.tarball);
        let paths: Vec<&str> = entries.iter().map(|entry| entry.path.as_str()).collect();
        assert_eq!(paths, ["package/package.json", "package/index.js"]);
        for entry in &entries {
            assert_eq!(entry.header, (0o644, 0, 0, MTIME), "{}", entry.path);
        }
        let manifest: Value = serde_json::from_str(&entries[0].content).unwrap();
        assert_eq!(
            manifest,
            json!({
                "name": "escape-html",
                "version": "1.0.3",
                "main": "index.js",
                "license": "MIT",
            })
        );
        let index = &entries[1].content;
        assert!(index.contains("module.exports = escapeHtml;"), "{index}");
        assert!(
            index.contains(
                "module.exports.LAB_MARKER = \"escape-html@1.0.3 from the lab registry\";"
            ),
            "{index}"
        );
    }

    #[test]
    fn another_name_says_where_it_came_from() {
        let package = Package::make(&spec("left-pad@0.1.0")).unwrap();
        let entries = unpack(&package.tarball);
        let index = &entries[1].content;
        assert!(!index.contains("escapeHtml"), "{index}");
        assert_eq!(
            index
                .matches("\"left-pad@0.1.0 from the lab registry\"")
                .count(),
            1,
            "{index}"
        );
        assert!(
            index.contains("module.exports.LAB_MARKER = MARKER;"),
            "{index}"
        );
    }

    #[test]
    fn packages_are_the_same_bytes_every_time() {
        let first = Package::make(&spec("escape-html@1.0.3")).unwrap();
        let second = Package::make(&spec("escape-html@1.0.3")).unwrap();
        assert_eq!(first.tarball, second.tarball);
        assert_eq!(first.integrity, second.integrity);
    }

    #[test]
    fn the_checksums_are_of_the_served_bytes() {
        let registry = registry(&["escape-html@1.0.3"]);
        let Some(Reply::Packument(document)) = registry.answer("/escape-html", "lab.test") else {
            panic!("no packument");
        };
        let Some(Reply::Tarball(bytes)) =
            registry.answer("/escape-html/-/escape-html-1.0.3.tgz", "lab.test")
        else {
            panic!("no tarball");
        };
        let dist = &document["versions"]["1.0.3"]["dist"];
        assert_eq!(dist["shasum"], hex::encode(Sha1::digest(&bytes)));
        let integrity = dist["integrity"].as_str().unwrap();
        let digest = base64::engine::general_purpose::STANDARD
            .decode(integrity.strip_prefix("sha512-").unwrap())
            .unwrap();
        assert_eq!(digest, Sha512::digest(&bytes).to_vec());
        assert_eq!(dist["shasum"].as_str().unwrap().len(), 40);
    }

    #[test]
    fn the_packument_names_the_tarball_at_the_authority_asked() {
        let registry = registry(&["escape-html@1.0.3"]);
        let Some(Reply::Packument(document)) =
            registry.answer("/escape-html", "registry.lab.example:8443")
        else {
            panic!("no packument");
        };
        let package = Package::make(&spec("escape-html@1.0.3")).unwrap();
        assert_eq!(
            document,
            json!({
                "name": "escape-html",
                "dist-tags": { "latest": "1.0.3" },
                "versions": { "1.0.3": {
                    "name": "escape-html",
                    "version": "1.0.3",
                    "main": "index.js",
                    "dist": {
                        "tarball": "https://registry.lab.example:8443/escape-html/-/escape-html-1.0.3.tgz",
                        "shasum": package.shasum,
                        "integrity": package.integrity,
                    },
                } },
            })
        );
    }

    #[test]
    fn the_latest_is_the_highest_version() {
        let registry = registry(&["x@1.10.0", "x@1.9.0", "x@1.10.0"]);
        let Some(Reply::Packument(document)) = registry.answer("/x", "lab.test") else {
            panic!("no packument");
        };
        assert_eq!(document["dist-tags"]["latest"], "1.10.0");
        let versions = document["versions"].as_object().unwrap();
        assert_eq!(versions.len(), 2);
    }

    #[test]
    fn unknown_names_and_versions_are_not_found() {
        let registry = registry(&["escape-html@1.0.3"]);
        for path in [
            "/left-pad",
            "/left-pad/-/left-pad-1.0.0.tgz",
            "/escape-html/-/escape-html-1.0.4.tgz",
            "/escape-html/-/escape-html-1.0.3.tar",
            "/escape-html/-/left-pad-1.0.3.tgz",
            "/escape-html/-/escape-html-01.0.3.tgz",
        ] {
            assert_eq!(
                registry.answer(path, "lab.test"),
                Some(Reply::NotFound),
                "{path}"
            );
        }
        assert_eq!(not_found().to_string(), r#"{"error":"not found"}"#);
    }

    #[test]
    fn other_paths_are_not_the_registry_s() {
        let registry = registry(&["escape-html@1.0.3"]);
        for path in [
            "/",
            "/v1/messages",
            "/v1/models",
            "/@lab%2fescape-html",
            "/Escape-Html",
            "/escape-html/1.0.3",
            "escape-html",
        ] {
            assert_eq!(registry.answer(path, "lab.test"), None, "{path}");
        }
    }
}
