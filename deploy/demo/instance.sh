#!/usr/bin/env bash
# Runs inside the demo's container (PID 1 is systemd): an operator provisions the example
# instance from its declaration, then the engine's side pairs with sited over its socket and
# creates a site. Every step is the real binary under the real PID 1.
set -euo pipefail
step() { printf '\n== %s\n' "$*"; }
decl=/root/instance.json
sock=/run/atelier/example/sited.sock
base=http://sited/publication/site_builder

step "what the operator provides: the engine's group, credentials, certificates"
bash /root/operator-setup.sh

step "atelier-provision plan (first lines)"
atelier-provision plan --declaration $decl | head -n 15 || true
step "atelier-provision apply (last lines)"
atelier-provision apply --declaration $decl | tail -n 5
step "a second apply changes nothing"
atelier-provision apply --declaration $decl | head -n 1
step "atelier-provision check"
atelier-provision check --declaration $decl | tail -n 3

step "the socket listens; sited is not running until the first connection"
ls -l $sock
echo "atelier-sited@example.service: $(systemctl is-active atelier-sited@example.service || true)"

step "GET /health — the engine's pairing check (no token)"
token=$(cat /etc/atelier/example/credentials/SERVICE_TOKEN)
curl -sS --unix-socket $sock $base/health; echo
expected=$(printf 'dedalo-site-instance:example\n%s' "$token" | sha256sum | cut -d' ' -f1)
echo "expected instance_fingerprint: $expected"
echo "atelier-sited@example.service: $(systemctl is-active atelier-sited@example.service), $(systemctl show -P StatusText atelier-sited@example.service)"

step "without the token every route is the same 401"
curl -sS --unix-socket $sock $base/v1/sites; echo

step "POST /v1/sites — create the declared site 'collection'"
curl -sS --unix-socket $sock -H "Authorization: Bearer $token" \
  -d '{"slug":"collection","name":"The collection","domain":"www.example.org","actor":{"user_id":1,"username":"admin"}}' \
  $base/v1/sites; echo
ws=/var/lib/atelier/example/sites/collection
ls -la $ws
git -c safe.directory='*' -C $ws log --format='%h %an <%ae> %s'

step "GET /v1/sites"
curl -sS --unix-socket $sock -H "Authorization: Bearer $token" $base/v1/sites; echo

step "systemctl stop atelier-sited@example.service"
systemctl stop atelier-sited@example.service
systemctl show -p ActiveState -p Result -p ExecMainStatus atelier-sited@example.service
echo "socket still listening: $(systemctl is-active atelier-sited@example.socket)"

step "the daemon's journal"
journalctl -b -u atelier-sited@example.service --no-pager -o cat | grep -v -e '^mount_setattr' -e '^Restricting' || true
