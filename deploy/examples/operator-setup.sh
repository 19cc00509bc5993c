#!/usr/bin/env bash
# What an operator provides before `atelier-provision apply` of deploy/examples/instance.json:
# the engine's and the monitoring groups, the credential files the declaration names, TLS certificates
# (self-signed here) and, for the Apache twin, the Apache modules its vhosts use. Used by the
# demo and the systemd tests.
#   CREDENTIAL_VALUE  written into every credential file (when unset, a missing one gets a
#                     random value and an existing one is kept, so a second run changes nothing)
#   CERTIFICATES      self-signed (default), or none: no certificate at all, as on a fresh host
#                     where certbot has not run yet (the letsencrypt vhosts then serve only the
#                     ACME challenge until one is there). On a real host use none: the two-day
#                     self-signed ones fill /etc/letsencrypt/live/<domain>, where certbot then
#                     refuses to write its own
#   WEB_SERVER        nginx (default), or apache: enable mod_ssl (TLS) and mod_headers (the
#                     preproduction X-Robots-Tag); Debian's Apache ships with both disabled
#   arguments         extra domains to make certificates for
set -euo pipefail
getent group dedalo-example > /dev/null || groupadd --system dedalo-example
# The monitoring group may read the daemons' metrics sockets (Debian's prometheus package
# makes it; a host without one gets it here).
getent group prometheus > /dev/null || groupadd --system prometheus
install -d -m 0700 /etc/atelier/example/credentials
for id in PUBLICATION_API_KEY ANTHROPIC_API_KEY PREPROD_PASSWORD; do
  file=/etc/atelier/example/credentials/$id
  [ -z "${CREDENTIAL_VALUE:-}" ] && [ -s "$file" ] && continue
  value=${CREDENTIAL_VALUE:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
  printf '%s' "$value" > "$file"
  chmod 0600 "$file"
done
if [ "${WEB_SERVER:-nginx}" = apache ]; then
  a2enmod -q ssl headers
fi
if [ "${CERTIFICATES:-self-signed}" = self-signed ]; then
  for domain in www.example.org archive.example.net cms.example.org "$@"; do
    mkdir -p /etc/letsencrypt/live/$domain
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$domain" \
      -keyout /etc/letsencrypt/live/$domain/privkey.pem \
      -out /etc/letsencrypt/live/$domain/fullchain.pem 2>/dev/null
  done
fi
