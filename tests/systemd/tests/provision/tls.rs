//! letsencrypt on a fresh host, served for real by nginx and by Apache: `apply` succeeds with
//! no certificate anywhere, the port-80 vhost serves a token placed in the ACME webroot (as
//! `certbot certonly --webroot` places it) and answers 503 for the rest, and `check` names
//! every certificate still awaited (exit 1). Then a certificate for one domain appears, made by
//! the test's own CA (nothing reaches an ACME server), and certbot's deploy hook, run as
//! certbot runs it, brings that site's TLS server in: production answers over HTTPS, port 80
//! redirects to it and still serves the challenge, and `check` names only the other site.
//! Preproduction asks for basic auth: 401 without it, 200 with the operator's password.
#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test]: a failure is the test failing"
)]

use atelier_systemd_tests::{built_binaries_dir, repo_root, BoxRun, SystemdBox};

/// Planted in every credential file by the operator's setup: the preview password.
const PASSWORD: &str = "preview-password-4c1e";

/// Runs inside the box with `SERVER` (`nginx` or `apache2`) set. Prints `KEY=value` facts.
const SCRIPT: &str = r#"
set -uo pipefail
DECL=/root/instance.json
provision() { atelier-provision "$@" --declaration "$DECL"; }
acme=/var/lib/atelier/example/acme
hook=/etc/letsencrypt/renewal-hooks/deploy/atelier-example
live=/etc/letsencrypt/live/www.example.org
wait_for() { # tries `$2…` until it prints $1, for at most 5 s (a reload is asynchronous)
  local want=$1 got; shift
  for _ in $(seq 50); do got=$("$@" 2>/dev/null); [ "$got" = "$want" ] && break; sleep 0.1; done
  printf '%s' "$got"
}

# The operator's part, with no certificate: a host where certbot has not run yet.
web_server=nginx; [ "$SERVER" = apache2 ] && web_server=apache
WEB_SERVER=$web_server CERTIFICATES=none CREDENTIAL_VALUE=$PASSWORD bash /root/operator-setup.sh
echo "live_before=$(ls -A /etc/letsencrypt/live 2>/dev/null | wc -l)"
# The box shares the host's network: the web server gets a namespace of its own and curl
# joins it, so nothing listens on the host.
mkdir -p /etc/systemd/system/$SERVER.service.d
printf '[Service]\nPrivateNetwork=yes\n' > /etc/systemd/system/$SERVER.service.d/own-network.conf
systemctl daemon-reload
systemctl start $SERVER.service
echo "server_active=$(systemctl is-active $SERVER.service)"
web() { nsenter --target "$(systemctl show -P MainPID $SERVER.service)" --net -- curl -sS "$@"; }
status_of() { web -o /dev/null -w '%{http_code}' "$@"; }

provision apply > /tmp/apply1 2>&1; echo "apply1=$?"
sed 's/^/apply1| /' /tmp/apply1
echo "stat_acme=$(stat -c '%U:%G %a' $acme)"
echo "stat_hook=$(stat -c '%U:%G %a' $hook)"

# Something published on each surface, owned like a release (the served links need it).
for surface in web pre; do
  store=/srv/www/www.example.org/.releases/$surface
  printf '<h1>%s of the collection</h1>\n' $surface > /tmp/index.html
  install -o atelier-example -g www-data -m 0644 /tmp/index.html $store/index.html
done

# What certbot certonly --webroot writes into the webroot for the http-01 challenge.
token=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir -p $acme/.well-known/acme-challenge
printf 'challenge-%s' "$token" > $acme/.well-known/acme-challenge/$token
http() { echo "--resolve $1:80:127.0.0.1 http://$1$2"; }
challenge="$(http www.example.org /.well-known/acme-challenge/$token)"
echo "challenge=$(wait_for "challenge-$token" web $challenge)"
echo "waiting_root=$(status_of $(http www.example.org /))"
web -o /dev/null --resolve www.example.org:443:127.0.0.1 https://www.example.org/ 2>/dev/null
echo "https_before=$?"
pre() { status_of "$@" $(http pre.www.example.org /); }
echo "pre_without=$(pre)"
echo "pre_wrong=$(pre -u preview:wrong)"
echo "pre_with=$(pre -u preview:$PASSWORD)"

provision check > /tmp/check1 2>&1; echo "check1=$?"
sed 's/^/check1| /' /tmp/check1
echo "check1_awaiting=$(awk '$1 == "awaiting_certificate" { print $2 }' /tmp/check1 | sort | paste -sd, -)"
echo "check1_other=$(grep -vc -e '^awaiting_certificate ' -e ' drifted$' /tmp/check1)"
provision apply > /tmp/apply2 2>&1; echo "apply2=$?"
sed 's/^/apply2| /' /tmp/apply2
echo "apply2_head=$(head -n1 /tmp/apply2)"

# The test's own CA, and a certificate it signs for www.example.org where certbot puts one.
ca=/root/test-ca
mkdir -p $ca $live
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Atelier TLS test CA" \
  -keyout $ca/ca.key -out $ca/ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=www.example.org" \
  -keyout $live/privkey.pem -out $ca/www.csr 2>/dev/null
printf 'subjectAltName=DNS:www.example.org\nextendedKeyUsage=serverAuth\n' > $ca/ext
openssl x509 -req -in $ca/www.csr -CA $ca/ca.pem -CAkey $ca/ca.key -CAcreateserial -days 2 \
  -extfile $ca/ext -out $live/fullchain.pem 2>/dev/null
chmod 0600 $live/privkey.pem
# certbot runs its deploy hooks through a shell, with the renewed lineage in the environment.
RENEWED_LINEAGE=$live RENEWED_DOMAINS=www.example.org sh -c "$hook" > /tmp/hook 2>&1
echo "hook_run=$?"
sed 's/^/hook| /' /tmp/hook

https() { web "$@" --resolve www.example.org:443:127.0.0.1 --cacert $ca/ca.pem https://www.example.org/; }
echo "https_status=$(wait_for 200 https -o /dev/null -w '%{http_code}')"
echo "https_body=$(https)"
# The https answer is a worker of the new configuration; port 80 may still be answered by an
# old worker a moment longer, until the reload has retired them all.
echo "redirect=$(wait_for '301 https://www.example.org/' web -o /dev/null -w '%{http_code} %{redirect_url}' $(http www.example.org /))"
echo "challenge_after=$(web $challenge)"
web -o /dev/null --resolve www.example.org:443:127.0.0.1 https://www.example.org/ 2>/dev/null
echo "https_untrusted=$?"
provision check > /tmp/check2 2>&1; echo "check2=$?"
sed 's/^/check2| /' /tmp/check2
echo "check2_awaiting=$(awk '$1 == "awaiting_certificate" { print $2 }' /tmp/check2 | sort | paste -sd, -)"
echo "check2_other=$(grep -vc -e '^awaiting_certificate ' -e ' drifted$' /tmp/check2)"
echo "archive_waiting=$(status_of $(http archive.example.net /))"
exit 0
"#;

/// Boots a box with the provisioner where the layout installs it (certbot's hook runs it from
/// there) and runs [`SCRIPT`] for `server`.
fn run(server: &str, web_server: &str) -> BoxRun {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let example = std::fs::read_to_string(repo_root().join("deploy/examples/instance.json"))
        .expect("reading the example");
    // The CMS's vhost is rendered for nginx only: Apache serves the example without its chat
    // block.
    let example = match web_server {
        "nginx" => example,
        _ => {
            let start = example
                .find("  \"chat\": {")
                .expect("the example's chat block");
            let end = start + example[start..].find("\n  },\n").expect("its end") + 5;
            format!("{}{}", &example[..start], &example[end..])
        }
    };
    let declaration = example.replace(
        "\"server\": \"nginx\"",
        &format!("\"server\": \"{web_server}\""),
    );
    assert!(declaration.contains(&format!("\"server\": \"{web_server}\"")));
    assert!(declaration.contains("\"mode\": \"letsencrypt\""));
    let run = SystemdBox::new()
        .copy(bins.join("atelier-provision"), "/usr/bin/atelier-provision")
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .write("/root/instance.json", declaration, 0o644)
        .run(&format!("SERVER={server}\nPASSWORD={PASSWORD}\n{SCRIPT}"))
        .expect("booting systemd in a container");
    run.assert_success();
    run
}

/// What both web servers must show, before and after the certificate; `also_awaited` are the
/// certificates awaited beyond the two sites' (the CMS's, with nginx).
fn assert_bootstrap(run: &BoxRun, also_awaited: &[&str]) {
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");
    let live = "/etc/letsencrypt/live";
    let awaited = |domains: &[&str]| {
        let mut paths: Vec<String> = domains
            .iter()
            .chain(also_awaited)
            .map(|domain| format!("{live}/{domain}/fullchain.pem"))
            .collect();
        paths.sort();
        paths.join(",")
    };
    for (key, expected) in [
        ("live_before", "0"),
        ("server_active", "active"),
        ("apply1", "0"),
        ("stat_acme", "root:root 755"),
        ("stat_hook", "root:root 755"),
        ("waiting_root", "503"),
        ("pre_without", "401"),
        ("pre_wrong", "401"),
        ("pre_with", "200"),
        ("check1", "1"),
        (
            "check1_awaiting",
            &awaited(&["archive.example.net", "www.example.org"]),
        ),
        ("check1_other", "0"),
        ("apply2", "0"),
        // One awaited certificate action per letsencrypt vhost still waiting.
        (
            "apply2_head",
            &format!("{} actions", 2 + also_awaited.len()),
        ),
        ("hook_run", "0"),
        ("https_status", "200"),
        ("https_body", "<h1>web of the collection</h1>"),
        ("redirect", "301 https://www.example.org/"),
        ("check2", "1"),
        ("check2_awaiting", &awaited(&["archive.example.net"])),
        ("check2_other", "0"),
        ("archive_waiting", "503"),
    ] {
        assert_eq!(fact(key), expected, "{key}\n{run:?}");
    }
    let token = fact("challenge");
    assert!(token.starts_with("challenge-"), "{run:?}");
    assert_eq!(fact("challenge_after"), token, "{run:?}");
    assert_ne!(
        fact("https_before"),
        "0",
        "no TLS before the certificate\n{run:?}"
    );
    assert_ne!(
        fact("https_untrusted"),
        "0",
        "the certificate is the test CA's, not one the host trusts\n{run:?}"
    );
}

#[test]
fn letsencrypt_on_nginx_serves_the_challenge_then_takes_the_certificate_in() {
    assert_bootstrap(&run("nginx", "nginx"), &["cms.example.org"]);
}

#[test]
fn letsencrypt_on_apache_serves_the_challenge_preview_with_auth_and_production_over_tls() {
    assert_bootstrap(&run("apache2", "apache"), &[]);
}
