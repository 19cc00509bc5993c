//! The rendered vhosts pass the real web servers' configuration tests: `nginx -t` and
//! `apache2 -t`, each with a minimal main configuration that includes only our vhosts.
//! Every TLS mode and both preproduction auth modes are exercised, and letsencrypt's vhosts
//! both before their certificates exist (the stand-ins, tested with no certificate anywhere)
//! and after.

use std::path::{Path, PathBuf};
use std::process::Command;

use atelier_provision::artifact::{Artifact, ArtifactKind};

use crate::common;

/// Writes a self-signed certificate and key for `domain` under `dir`.
fn certificate(dir: &Path, domain: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-subj")
        .arg(format!("/CN={domain}"))
        .arg("-keyout")
        .arg(dir.join("privkey.pem"))
        .arg("-out")
        .arg(dir.join("fullchain.pem"))
        .output()
        .expect("openssl must be installed");
    assert!(status.status.success(), "{status:?}");
}

/// Variants of the example: (name, declaration text).
fn variants(server: &str, dir: &Path) -> Vec<(String, String)> {
    let example = match server {
        "nginx" => common::example_text(),
        _ => common::apache_text(),
    };
    let base = common::relocated_text(&example, dir).replace(
        "\"server\": \"nginx\"",
        &format!("\"server\": \"{server}\""),
    );
    let files_cert = dir.join("files-cert");
    certificate(&files_cert, "www.example.org");
    let files = base.replace(
        "\"tls\": { \"mode\": \"letsencrypt\", \"account_email\": \"ops@example.org\" }",
        &format!(
            "\"tls\": {{ \"mode\": \"files\", \"certificate\": \"{0}/fullchain.pem\", \"key\": \"{0}/privkey.pem\" }}",
            files_cert.display()
        ),
    );
    let none = base.replace(
        "\"tls\": { \"mode\": \"letsencrypt\", \"account_email\": \"ops@example.org\" }",
        "\"tls\": { \"mode\": \"none\" }",
    );
    let open_preprod = none.replace(
        "\"mode\": \"htpasswd\",\n        \"realm\": \"Example preprod\",\n        \"users\": [\n          { \"name\": \"preview\", \"password_file\": \"/etc/atelier/example/credentials/PREPROD_PASSWORD\" }\n        ]",
        "\"mode\": \"none\"",
    );
    for changed in [&files, &none] {
        assert_ne!(changed, &base);
    }
    assert_ne!(open_preprod, none);
    vec![
        ("letsencrypt".into(), base),
        ("files".into(), files),
        ("none".into(), none),
        ("open-preprod".into(), open_preprod),
    ]
}

/// Which form of a vhost with a stand-in is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Certificates {
    /// The vhost proper, with certificates made for it.
    Present,
    /// The stand-in, and no certificate at all.
    Awaited,
}

/// Writes the vhosts of one variant into `dir`; letsencrypt's live folder is moved under
/// `dir` (the only change to the rendered text) and given certificates, unless they are
/// awaited: then each vhost's stand-in is written instead, and no certificate is made.
fn write_vhosts(
    artifacts: &[Artifact],
    kind: ArtifactKind,
    dir: &Path,
    certificates: Certificates,
) -> usize {
    std::fs::create_dir_all(dir).unwrap();
    let live = dir.join("letsencrypt-live");
    let mut count = 0;
    for artifact in artifacts.iter().filter(|a| a.kind == kind) {
        let bytes = match (&artifact.stand_in, certificates) {
            (Some(stand_in), Certificates::Awaited) => &stand_in.bytes,
            _ => &artifact.bytes,
        };
        let text = String::from_utf8(bytes.clone()).unwrap();
        for domain in ["www.example.org", "archive.example.net", "cms.example.org"] {
            if certificates == Certificates::Present
                && text.contains(&format!("/etc/letsencrypt/live/{domain}/"))
            {
                certificate(&live.join(domain), domain);
            }
        }
        let text = text.replace("/etc/letsencrypt/live", &live.display().to_string());
        // The CMS's vhost includes the service token's directive, which apply writes.
        let text = text.replace(
            "/etc/atelier/example/chat-proxy-auth.conf",
            &dir.join("chat-proxy-auth.inc").display().to_string(),
        );
        std::fs::write(
            dir.join("chat-proxy-auth.inc"),
            atelier_provision::render::chat::proxy_auth_include(&"t".repeat(43)),
        )
        .unwrap();
        std::fs::write(dir.join(artifact.path.file_name().unwrap()), text).unwrap();
        count += 1;
    }
    count
}

fn run(command: &mut Command) -> (bool, String) {
    let output = command.output().expect("the web server must be installed");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn nginx_test(root: &Path, vhosts: &Path) -> (bool, String) {
    let r = root.display();
    let conf = root.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "pid {r}/nginx.pid;\nerror_log {r}/error.log;\nevents {{}}\nhttp {{\n\
             \x20   access_log off;\n\
             \x20   client_body_temp_path {r}/body;\n\
             \x20   proxy_temp_path {r}/proxy;\n\
             \x20   fastcgi_temp_path {r}/fastcgi;\n\
             \x20   uwsgi_temp_path {r}/uwsgi;\n\
             \x20   scgi_temp_path {r}/scgi;\n\
             \x20   include {}/*.conf;\n}}\n",
            vhosts.display()
        ),
    )
    .unwrap();
    run(Command::new("nginx")
        .arg("-t")
        .arg("-p")
        .arg(root)
        .arg("-c")
        .arg(&conf))
}

const APACHE_MODULES: [(&str, &str); 12] = [
    ("mpm_event_module", "mod_mpm_event.so"),
    ("authz_core_module", "mod_authz_core.so"),
    ("authn_core_module", "mod_authn_core.so"),
    ("authn_file_module", "mod_authn_file.so"),
    ("authz_user_module", "mod_authz_user.so"),
    ("auth_basic_module", "mod_auth_basic.so"),
    ("headers_module", "mod_headers.so"),
    ("alias_module", "mod_alias.so"),
    ("dir_module", "mod_dir.so"),
    ("mime_module", "mod_mime.so"),
    ("socache_shmcb_module", "mod_socache_shmcb.so"),
    ("ssl_module", "mod_ssl.so"),
];

fn apache_test(root: &Path, vhosts: &Path) -> (bool, String) {
    let r = root.display();
    let mut conf = format!(
        "ServerRoot \"/usr/lib/apache2\"\nPidFile \"{r}/apache.pid\"\nErrorLog \"{r}/error.log\"\n\
         Mutex file:{r} default\nDefaultRuntimeDir \"{r}\"\nServerName localhost\nListen 80\nListen 443\n"
    );
    for (name, file) in APACHE_MODULES {
        conf.push_str(&format!(
            "LoadModule {name} /usr/lib/apache2/modules/{file}\n"
        ));
    }
    conf.push_str(&format!("IncludeOptional {}/*.conf\n", vhosts.display()));
    let path = root.join("apache2.conf");
    std::fs::write(&path, conf).unwrap();
    run(Command::new("/usr/sbin/apache2")
        .arg("-t")
        .arg("-f")
        .arg(&path))
}

/// A configuration test: the scratch root and the vhost folder in, success and output out.
type ConfigTest = fn(&Path, &Path) -> (bool, String);

/// Checks every variant's vhosts of `server`: `vhosts_per_variant` of them, `awaiting` of which
/// wait for a certificate with letsencrypt.
fn check(
    server: &str,
    kind: ArtifactKind,
    test: ConfigTest,
    (vhosts_per_variant, awaiting): (usize, usize),
) {
    let dir = tempfile::tempdir().unwrap();
    let mut stand_ins = 0;
    for (name, text) in variants(server, dir.path()) {
        let artifacts = common::render_text(&text);
        stand_ins += artifacts.iter().filter(|a| a.stand_in.is_some()).count();
        for (form, certificates) in [
            ("", Certificates::Present),
            ("-awaiting-certificates", Certificates::Awaited),
        ] {
            let root = dir.path().join(format!("{server}-{name}{form}"));
            let vhosts = root.join("vhosts");
            let count = write_vhosts(&artifacts, kind, &vhosts, certificates);
            assert_eq!(
                count, vhosts_per_variant,
                "{name}: prod and preprod for two sites (and nginx's CMS vhost)"
            );
            let (ok, out) = test(&root, &vhosts);
            assert!(ok, "{server} refuses the {name}{form} vhosts:\n{out}");
            assert!(
                out.contains("test is successful") || out.contains("Syntax OK"),
                "{server} said nothing of success for {name}{form}:\n{out}"
            );
        }
    }
    assert_eq!(
        stand_ins, awaiting,
        "letsencrypt's production vhosts (and the CMS's) wait for certificates"
    );
}

#[test]
fn nginx_accepts_the_rendered_vhosts() {
    // Two sites' production and preproduction vhosts, and the CMS's.
    check("nginx", ArtifactKind::NginxVhost, nginx_test, (5, 3));
}

#[test]
fn apache_accepts_the_rendered_vhosts() {
    check("apache", ArtifactKind::ApacheVhost, apache_test, (4, 2));
}

#[test]
fn the_config_tests_refuse_a_broken_vhost() {
    // The checks above can fail: a vhost with an unclosed block is refused by both servers.
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, ConfigTest, &str); 2] = [
        ("nginx", nginx_test, "server {\n    listen 80;\n"),
        (
            "apache",
            apache_test,
            "<VirtualHost *:80>\n    ServerName x.example\n",
        ),
    ];
    for (name, test, broken) in cases {
        let root: PathBuf = dir.path().join(name);
        let vhosts = root.join("vhosts");
        std::fs::create_dir_all(&vhosts).unwrap();
        std::fs::write(vhosts.join("broken.conf"), broken).unwrap();
        let (ok, out) = test(&root, &vhosts);
        assert!(!ok, "{name} accepted a broken vhost:\n{out}");
    }
}
