#!/usr/bin/env bash
# Runs inside the demo's container (PID 1 is systemd): provisions a minimal instance "demo"
# by hand and walks atelier-sited through its life under socket activation.
set -euo pipefail
step() { printf '\n== %s\n' "$*"; }
sock=/run/atelier/demo/sited.sock
base=http://sited/publication/site_builder

step "provision instance 'demo': service user, SERVICE_TOKEN credential"
useradd --system --no-create-home --shell /usr/sbin/nologin atelier-demo
install -d -m 0700 /etc/atelier/demo/credentials
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s' "$token" > /etc/atelier/demo/credentials/SERVICE_TOKEN
chmod 0600 /etc/atelier/demo/credentials/SERVICE_TOKEN
systemctl daemon-reload

step "systemctl start atelier-sited@demo.socket"
systemctl start atelier-sited@demo.socket
ls -l "$sock"
echo "service before the first connection: $(systemctl is-active atelier-sited@demo.service || true)"

step "GET /health (public) — the first connection starts the daemon"
curl -sS --unix-socket "$sock" "$base/health"; echo
expected=$(printf 'dedalo-site-instance:demo\n%s' "$token" | sha256sum | cut -d' ' -f1)
echo "expected instance_fingerprint: $expected"
echo "service now: $(systemctl is-active atelier-sited@demo.service), status: $(systemctl show -P StatusText atelier-sited@demo.service)"

step "GET /v1/sites without a token, then with it"
curl -sS --unix-socket "$sock" "$base/v1/sites"; echo
curl -sS -H "Authorization: Bearer $token" --unix-socket "$sock" "$base/v1/sites"; echo

step "systemctl stop atelier-sited@demo.service"
systemctl stop atelier-sited@demo.service
systemctl show -p ActiveState -p Result -p ExecMainStatus atelier-sited@demo.service
echo "socket still listening: $(systemctl is-active atelier-sited@demo.socket)"

step "the daemon's journal"
journalctl -b -u atelier-sited@demo.service --no-pager -o cat
