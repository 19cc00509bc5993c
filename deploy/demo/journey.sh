#!/usr/bin/env bash
# The demo's journey, run by scripts/demo inside a throw-away container whose PID 1 is systemd.
# An operator provisions the example instance from its declaration; then, with atelierctl as
# the engine would, a publisher creates a site, has the real Claude Code (its model a scripted
# lab server) edit its home page through the turn door, builds it through the build door,
# previews it through nginx, publishes it, publishes a second release and rolls back to the first. Every step is the real
# binary under the real PID 1 and checks what it claims: the first failure stops the demo,
# names the step and exits non-zero.
set -Eeuo pipefail

decl=/root/instance.json
inst=example
slug=collection
domain=www.example.org
pre_host=pre.$domain
creds=/etc/atelier/$inst/credentials
sited=atelier-sited@$inst.service
ws=/var/lib/atelier/$inst/sites/$slug
webspace=/srv/www/$domain
work=$(mktemp -d /tmp/demo.XXXXXX)

step_number=0
step_name="starting"
step() {
  step_number=$((step_number + 1))
  step_name="$*"
  printf '\n== %d. %s  [%d s]\n' "$step_number" "$*" "$SECONDS"
}
say() { printf '   %s\n' "$*"; }
# Indents a command's output under its step.
show() { sed 's/^/   | /'; }
# A claim the step makes; false stops the demo at this step.
check() {
  local claim=$1
  shift
  if "$@"; then
    say "ok: $claim"
  else
    say "NOT OK: $claim"
    return 1
  fi
}
# Runs a command every 0.1 s until it succeeds or $1 seconds have passed.
eventually() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

on_failure() {
  local status=$1 line=$2
  # A failure inside a pipeline's subshell is reported once, by the main shell.
  [ "$BASH_SUBSHELL" = 0 ] || exit "$status"
  trap - ERR
  printf '\nDEMO FAILED at step %d (%s): line %d of journey.sh exited %d\n' \
    "$step_number" "$step_name" "$line" "$status"
  printf '\n-- %s, the last 30 lines of its journal:\n' "$sited"
  journalctl -b -u "$sited" --no-pager -o cat -n 30 2>/dev/null | show || true
  printf '\n-- the door runs of site %s, the last 30 lines:\n' "$slug"
  journalctl -b -u "atelier-$inst-s1-*" --no-pager -o short-monotonic -n 30 2>/dev/null \
    | grep -v -e 'mount_setattr' -e 'Restricting' | show || true
  exit "$status"
}
trap 'on_failure $? $LINENO' ERR

# The engine's side: the provisioner's pairing fragment, the root-only token, one actor.
ctl() {
  atelierctl --engine-env /etc/atelier/$inst/engine.env.fragment \
    --token-file $creds/SERVICE_TOKEN --actor-id 1001 --actor-name ana "$@"
}
git_ws() { git -c safe.directory="*" -C $ws "$@"; }

# curl inside nginx's own network namespace (see the operator's step).
web() {
  nsenter --target "$(systemctl show -P MainPID nginx.service)" --net -- curl -sS "$@"
}
preprod_asks_for_a_password() {
  test "$(web -o /dev/null -w '%{http_code}' -H "Host: $pre_host" http://127.0.0.1/)" = 401
}
# GET / of preproduction by its Host with the declared basic auth; the body to $1.
get_preprod() {
  web -o "$1" -w '%{http_code}' -u "preview:$(cat $creds/PREPROD_PASSWORD)" \
    -H "Host: $pre_host" http://127.0.0.1/
}
# GET / of production over TLS, the certificate verified against the operator's own; to $1.
get_prod() {
  web -o "$1" -w '%{http_code}' --resolve "$domain:443:127.0.0.1" \
    --cacert /etc/letsencrypt/live/$domain/fullchain.pem "https://$domain/"
}
short_sha() { sha256sum "$1" | cut -c1-16; }
# The value of a `key  value` line of atelierctl's output on stdin.
field() { awk -v key="$1" '$1 == key { print $2; exit }'; }

# The door units PID 1 started for site 1's door $1, oldest first (journalctl refuses a unit
# pattern that matches nothing yet).
door_runs() {
  { journalctl -b -o cat --no-pager -u "atelier-$inst-s1-$1@*" 2>/dev/null || true; } \
    | awk '$1 == "Started" { print $2 }'
}
declare -A runs_before
mark_doors() {
  local door
  for door in turn build git; do runs_before[$door]=$(door_runs $door | wc -l); done
}
# The runs of door $1 since mark_doors, on one line.
new_runs() { door_runs "$1" | tail -n +$((runs_before[$1] + 1)) | paste -sd ' '; }
ran_through() { test -n "$(new_runs "$1")"; }
show_doors() {
  local door runs
  for door in turn build git; do
    runs=$(new_runs $door)
    [ -z "$runs" ] || say "PID 1 ran the $door door as User=$(systemctl show -P User "${runs%% *}"): $runs"
  done
}

# The agent is the real Claude Code; only its model is scripted: the lab model (a test fixture)
# looks the collection up with the Publication API's search (offered beside the five file
# tools the turn states), then answers with a `Write` of the page below, then with closing
# words.
# A /30 of the lab range taken at random: the demo's box shares the host's network, and a test
# box beside it must not answer for it.
lab_id=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
lab_prefix=198.18.$(( lab_id / 64 % 256 ))
lab_base=$(( lab_id % 64 * 4 ))
lab_ip=$lab_prefix.$(( lab_base + 2 ))
lab_ns=atelier-demo-lab$lab_id
lab_link=labd$lab_id
home_page_html() {
  local title=$1 line=$2
  printf '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>%s</title>\n<link rel="stylesheet" href="style.css">\n</head>\n<body>\n<main>\n<h1>%s</h1>\n<p>%s</p>\n</main>\n</body>\n</html>\n' \
    "$title" "$title" "$line"
}
# (Re)starts the lab model in its namespace, scripted to write the page for $1 and $2 and to
# close with $3 (its default closing words when absent).
lab_model() {
  [ -z "${lab_pid:-}" ] || { kill "$lab_pid"; wait "$lab_pid" 2>/dev/null || true; }
  rm -f /etc/atelier-lab/ca.pem
  ip netns exec $lab_ns /usr/local/bin/atelier-lab-model --listen $lab_ip:443 \
    --host model.lab.example --ca-out /etc/atelier-lab/ca.pem --record "$work/lab-requests" \
    --write-path $ws/src/index.html --write-content "$(home_page_html "$1" "$2")" \
    --call-mcp-tool publication_search ${3:+--final-text "$3"} \
    >> "$work/lab-model.log" 2>&1 &
  lab_pid=$!
  eventually 10 test -f /etc/atelier-lab/ca.pem
}
# The session $1 shows the search tool's call and the relay's requests answered by the stand-in.
searched_through_the_relay() {
  grep -q 'tool *mcp__dedalo_publication__publication_search' "$1" &&
    grep -q 'MCP relay POST /mcp 200' "$1"
}
# Every model request the lab recorded carried the declared Anthropic key as x-api-key: the
# gate's model relay added it. sited was not handed it, so no turn could have been.
key_reached_the_model() {
  local want
  want="sha256:$(sha256sum < $creds/ANTHROPIC_API_KEY | cut -d' ' -f1)"
  python3 - "$work/lab-requests" "$want" <<'PY'
import json, sys
calls = [json.loads(line) for line in open(sys.argv[1]) if '"/v1/messages"' in line]
keyed = all(c.get("keys", {}).get("x-api-key") == sys.argv[2] for c in calls)
sys.exit(0 if calls and keyed else 1)
PY
  [ ! -e /run/credentials/$sited/ANTHROPIC_API_KEY ]
}
# One turn, its stream followed live to its end; atelierctl fails unless it ends idle.
turn() {
  local out=$1 title=$2
  shift 2
  mark_doors
  ctl "$@" --follow | tee "$out" | show
  check "the agent ran through the turn door" ran_through turn
  show_doors
  check "src/index.html now says '$title'" grep -q "<h1>$title</h1>" $ws/src/index.html
  check "the agent reached its model through the site's gate (the session shows the model relay)" \
    grep -q 'model relay POST /model/anthropic 200' "$out"
  check "the lab model got the declared key, which the gate added (the agent never held it)" \
    key_reached_the_model
  check "it searched the Publication API through the door's MCP relay (the session shows both)" \
    searched_through_the_relay "$out"
  git_ws show --stat --format='commit %h by %an: %s' HEAD | show
}
# A build through the build door, waited for to its terminal record; the log sited wrote from
# the relayed frames is shown either way. $1 gets the record (its `release` line).
build_site() {
  local out=$1 waited=0 id
  mark_doors
  ctl build start $slug --wait > "$out" 2>&1 || waited=$?
  show < "$out"
  id=$(awk '$1 == "build" && $3 == "started" { print $2 }' "$out")
  : > "$out.log"
  [ -z "$id" ] || ctl build show $slug "$id" --log | sed -n '/--- log ---/,$p' > "$out.log"
  show < "$out.log"
  show_doors
  if [ "$waited" != 0 ] && grep -q 'Operation not permitted' "$out.log"; then
    say "note: EPERM inside the build door is the door unit's seccomp sandbox refusing a system"
    say "      call of the build step. One known cause: \`cp -R\` of a directory in the setgid"
    say "      workspace passes S_ISGID to mkdir, which RestrictSUIDSGID=yes refuses."
  fi
  check "the build ran through the build door" ran_through build
  check "the build succeeded and promoted release $(field release < "$out") into preproduction" \
    test "$waited/$(field outcome < "$out")" = 0/success
}

# The CMS stand-in's loopback ports (its routes, its Publication API), taken at random like the
# lab's addresses (the box shares the host's network).
cms_port=$(( 20000 + lab_id % 10000 ))
publication_port=$(( 30000 + lab_id % 10000 ))
# The example declaration, with the lab model's host as the turn door's one provider host and
# Claude Code pointed at it, and the CMS (and its Publication API) where its stand-in listens.
python3 - /root/instance.example.json $decl $cms_port $publication_port <<'PY'
import json, sys
decl = json.load(open(sys.argv[1]))
decl["agent"]["provider_hosts"] = ["model.lab.example"]
decl["agent"]["anthropic_base_url"] = "https://model.lab.example"
decl["chat"]["cms_origin"] = "http://127.0.0.1:" + sys.argv[3]
decl["publication_api"]["url"] = "http://127.0.0.1:" + sys.argv[4]
json.dump(decl, open(sys.argv[2], "w"), indent=2)
PY

step "the operator's part: the engine's group, credentials, certificates, a running nginx"
bash /root/operator-setup.sh
say "credentials: $(ls $creds | paste -sd ' ')"
say "certificates: $(ls /etc/letsencrypt/live | paste -sd ' ')"
# The box shares the host's network namespace: nginx gets one of its own, so the demo's web
# server never listens on the host; curl joins that namespace (web above).
mkdir -p /etc/systemd/system/nginx.service.d
printf '[Service]\nPrivateNetwork=yes\n' > /etc/systemd/system/nginx.service.d/demo-own-network.conf
systemctl daemon-reload
systemctl start nginx.service
check "nginx runs, in a network namespace of its own" \
  test "$(readlink /proc/"$(systemctl show -P MainPID nginx.service)"/ns/net)" \
  != "$(readlink /proc/self/ns/net)"

step "atelier-provision plan"
atelier-provision plan --declaration $decl > "$work/plan"
head -n 12 "$work/plan" | show
say "… $(wc -l < "$work/plan") lines in all"

step "atelier-provision apply"
atelier-provision apply --declaration $decl > "$work/apply"
tail -n 6 "$work/apply" | show
check "the preproduction password file holds the declared user's bcrypt hash" \
  grep -q '^preview:\$2y\$' /etc/atelier/$inst/preprod.htpasswd
# A reload is asynchronous: nginx's new workers take the vhosts shortly after systemctl returns.
check "nginx took the rendered vhosts (apply reloaded it): $pre_host asks for a password" \
  eventually 5 preprod_asks_for_a_password

step "a second apply plans nothing"
atelier-provision apply --declaration $decl > "$work/apply2"
show < "$work/apply2"
check "the second apply planned and did nothing" test "$(head -n 1 "$work/apply2")" = '0 actions'

step "atelier-provision check"
atelier-provision check --declaration $decl | tail -n 3 | show

step "the lab: a scripted model at https://model.lab.example, the real Claude Code as the agent"
say "the declaration is the example's, with the lab model's host as the agent's provider and the"
say "CMS stand-in's Publication API as the turn door's MCP server:"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ("agent", "publication_api")}, indent=2))' $decl | show
ip netns add $lab_ns
ip link add $lab_link type veth peer name ${lab_link}p
ip link set ${lab_link}p netns $lab_ns
ip addr add $lab_prefix.$(( lab_base + 1 ))/30 dev $lab_link && ip link set $lab_link up
ip -n $lab_ns addr add $lab_ip/30 dev ${lab_link}p && ip -n $lab_ns link set ${lab_link}p up
echo "$lab_ip model.lab.example" >> /etc/hosts
mkdir -p /etc/atelier-lab
lab_model 'The collection' 'Release one: twelve paintings.'
check "the lab model listens on $lab_ip:443 in a network namespace of its own" \
  test -f /etc/atelier-lab/ca.pem
# 198.18.0.0/15 is not public: the gate counts it so only in development; the gate's model
# relay trusts the lab's test CA (SSL_CERT_FILE), and so do sited's agents, only in development.
# Both are drop-ins; the door units stay as rendered.
gate=atelier-$inst-s1-gate.service
mkdir -p /etc/systemd/system/$gate.d /etc/systemd/system/$sited.d
printf '[Service]\nEnvironment=ATELIER_DEPLOYMENT=development SSL_CERT_FILE=/etc/atelier-lab/ca.pem\nExecStart=\nExecStart=%s --allow-benchmark-range\n' \
  "$(sed -n 's/^ExecStart=//p' /etc/systemd/system/$gate)" > /etc/systemd/system/$gate.d/50-lab.conf
printf '[Service]\nEnvironment=ATELIER_DEPLOYMENT=development ATELIER_AGENT_EXTRA_CA_CERTS=/etc/atelier-lab/ca.pem\n' \
  > /etc/systemd/system/$sited.d/50-lab.conf
systemctl daemon-reload
for dropin in /etc/systemd/system/$gate.d/50-lab.conf /etc/systemd/system/$sited.d/50-lab.conf; do
  say "$dropin:"
  show < "$dropin"
done
# The CMS is a TEST FIXTURE here, like the model: a stand-in for its session and read routes
# (the chat step below) and for its Publication API's MCP endpoint (what the turn door's relay
# reaches, adding the declared key), on the loopback ports the declaration names.
/usr/local/bin/atelier-lab-cms --listen 127.0.0.1:$cms_port \
  --publication-listen 127.0.0.1:$publication_port >> "$work/lab-cms.log" 2>&1 &
cms_pid=$!
check "the CMS stand-in's Publication API listens on 127.0.0.1:$publication_port" \
  eventually 10 grep -q 'publication API on' "$work/lab-cms.log"
say "the agent: $(grep -o '"claude_code": "[^"]*"' $decl) — $("$(sed -n 's/.*"claude_code": "\([^"]*\)".*/\1/p' $decl)" --version)"

step "sited starts on the first connection to its socket"
say "$sited before: $(systemctl is-active $sited || true)"
ctl health | show
check "sited is active, started by its socket, as the service user" \
  test "$(systemctl is-active $sited)/$(stat -c %U /proc/"$(systemctl show -P MainPID $sited)")" \
  = active/atelier-$inst
say "its status: $(systemctl show -P StatusText $sited)"

step "create the site '$slug'"
mark_doors
ctl sites create $slug --name 'The collection' --domain $domain | show
show_doors
check "its workspace has the template's first commit" \
  test "$(git_ws log --format=%s | tail -n 1)" = 'scaffold: initial template'

step "a turn: the real Claude Code edits src/index.html in the turn door"
turn "$work/turn1" 'The collection' session start $slug \
  'Give the collection a home page: The collection, release one.'
say "the lab model saw $(wc -l < "$work/lab-requests") requests; the first carried the prompt: $(head -n 1 "$work/lab-requests" | grep -c 'release one') time(s)"
session=$(head -n 1 "$work/turn1")

step "build through the build door (atelier-build)"
build_site "$work/build1"

step "preview through nginx: $pre_host, basic auth as declared"
ctl preview $slug | show
check "without the password preproduction is 401" preprod_asks_for_a_password
check "with it, 200" test "$(get_preprod "$work/preview1.html")" = 200
check "the preview is the edited page" grep -q '<h1>The collection</h1>' "$work/preview1.html"
grep -e '<title>' -e '<p>' "$work/preview1.html" | show

step "publish"
ctl publish $slug --note 'first release' --confirm | tee "$work/publish1" | show
release1=$(field release < "$work/publish1")

step "production through nginx: https://$domain/, TLS with the operator's certificate"
check "production is 200 over verified TLS" test "$(get_prod "$work/prod1.html")" = 200
check "production serves the very bytes previewed ($(short_sha "$work/prod1.html"))" \
  cmp -s "$work/preview1.html" "$work/prod1.html"
check "plain http redirects to https" \
  test "$(web -o /dev/null -w '%{http_code} %{redirect_url}' -H "Host: $domain" http://127.0.0.1/)" \
  = "301 https://$domain/"

step "a second turn, build and publish"
lab_model 'The collection, rehung' 'Release two: the spring rehang.'
# Each start of the lab makes a new test CA, and the gate's model relay reads its trust store
# when it starts, as after any change of the store: restart it for the next turn.
systemctl try-restart atelier-$inst-s1-gate.service
turn "$work/turn2" 'The collection, rehung' session send "$session" \
  'Rehang the home page for the spring: The collection, rehung.'

build_site "$work/build2"
ctl publish $slug --note 'spring rehang' --confirm | tee "$work/publish2" | show
release2=$(field release < "$work/publish2")
check "production serves the second release" test "$(get_prod "$work/prod2.html")" = 200
check "… whose page is the rehung one" grep -q '<h1>The collection, rehung</h1>' "$work/prod2.html"
ctl releases $slug | show

step "roll back to the first release"
ctl rollback $slug "$release1" --confirm | show
check "production is 200" test "$(get_prod "$work/prod3.html")" = 200
check "production serves the first release's bytes again ($(short_sha "$work/prod3.html"))" \
  cmp -s "$work/prod1.html" "$work/prod3.html"
check "preproduction still serves the second build" \
  test "$(get_preprod "$work/pre3.html")/$(grep -c 'rehung' "$work/pre3.html")" = 200/2
say "$webspace/web -> $(readlink $webspace/web)"
say "releases: first $release1, second $release2"

step "the audit log"
ctl audit --site $slug | show

step "the CMS's AI chat: an editor's turn through nginx at https://cms.example.org"
chatd=atelier-chatd@$inst.service
# The CMS stand-in (started with the lab) knows the editor by a fixed session cookie; the
# editor's browser sends only that cookie. The lab model, asked by chatd, answers in words: the
# chat offers no writer of files.
admin_cookie=lab-admin-session-00000000000000000000000000
lab_model 'The collection, rehung' 'Release two: the spring rehang.' \
  "Welcome to the collection: twelve paintings, rehung for the spring."
cms_knows_the_admin() {
  curl -sf -o /dev/null -H "Cookie: instatic_admin_session=$admin_cookie" \
    http://127.0.0.1:$cms_port/admin/api/cms/me
}
check "the CMS stand-in answers on 127.0.0.1:$cms_port" eventually 10 cms_knows_the_admin
# chatd trusts the lab's test CA only in this demo: a drop-in; its unit stays as rendered.
mkdir -p /etc/systemd/system/$chatd.d
printf '[Service]\nEnvironment=SSL_CERT_FILE=/etc/atelier-lab/ca.pem\n' \
  > /etc/systemd/system/$chatd.d/50-lab.conf
systemctl daemon-reload
say "$chatd before: $(systemctl is-active $chatd || true)"
chat_api() { # path body [curl options]: a POST as the editor's browser makes it
  web -k --resolve cms.example.org:443:127.0.0.1 -H "Cookie: instatic_admin_session=$admin_cookie" \
    -H 'Origin: https://cms.example.org' -H 'Content-Type: application/json' --data "$2" \
    "${@:3}" "https://cms.example.org/admin/api/ai/$1"
}
json_at() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]][sys.argv[2]])' "$@"; }
credential=$(chat_api credentials '{"providerId":"openai-compatible","authMode":"baseUrl","displayLabel":"Lab model","baseUrl":"https://model.lab.example/v1"}' \
  | json_at credential id)
check "chatd started on the first request through nginx, as its own dynamic user" \
  test "$(systemctl is-active $chatd)/$(stat -c %U /proc/"$(systemctl show -P MainPID $chatd)")" \
  = active/atelier-chatd-$inst
conversation=$(chat_api conversations "{\"scope\":\"data\",\"credentialId\":\"$credential\",\"modelId\":\"lab-model\"}" \
  | json_at conversation id)
chat_api chat/data "{\"conversationId\":\"$conversation\",\"content\":[{\"kind\":\"text\",\"text\":\"Greet the museum's visitors.\"}]}" \
  -N > "$work/chat.ndjson"
show < "$work/chat.ndjson"
say "the streamed text: $(python3 -c 'import json, sys; print("".join(l.get("text", "") for l in map(json.loads, sys.stdin) if l["type"] == "text"))' < "$work/chat.ndjson")"
check "the turn streamed NDJSON to its end" test "$(tail -n 1 "$work/chat.ndjson")" = '{"type":"done"}'
in_words() { grep -q 'Welcome to the collection' "$1" && ! grep -q '"type":"toolCall"' "$1"; }
check "… in the model's words, calling no tool (the editor's chat offers no file writer)" \
  in_words "$work/chat.ndjson"
check "chatd asked the lab model (through no gate: chatd is not a site's agent)" \
  grep -q '/v1/chat/completions' "$work/lab-requests"
kill "$cms_pid"

step "metrics: what the instance did, as its monitoring group reads it"
# Each daemon's own socket, for the declaration's monitoring group (prometheus) alone.
metrics() { curl -sS --unix-socket /run/atelier/$inst/metrics/$1.sock http://metrics/metrics; }
series() { metrics "$1" | awk -v s="$2" '$1 == s { print $2 }'; }
say "$(stat -c '%n %U:%G %a' /run/atelier/$inst/metrics/*.sock | paste -sd ' ')"
metrics sited | grep -E '^atelier_sited_(turns_started_total|turns_ended_total|builds_total|sites) ' | show
metrics s1-gate | grep -E '^atelier_gate_(model_requests_total|mcp_requests_total)' | show
metrics chatd | grep -E '^atelier_chatd_(turns_started_total|turns_ended_total|first_byte_seconds_count)' | show
check "sited counted two turns, both ended idle" \
  test "$(series sited atelier_sited_turns_started_total)/$(series sited 'atelier_sited_turns_ended_total{state="idle"}')" = 2/2
check "… and two successful builds" \
  test "$(series sited 'atelier_sited_builds_total{outcome="success"}')" = 2
relayed_series='atelier_gate_model_requests_total{api="anthropic",outcome="relayed"}'
check "the gate counted the agent's model requests it relayed (since its restart for turn 2)" \
  test "$(series s1-gate "$relayed_series")" -ge 1
check "chatd counted the editor's turn, done" \
  test "$(series chatd 'atelier_chatd_turns_ended_total{outcome="done"}')" = 1

step "systemctl stop $sited"
systemctl stop $sited 2>&1 | show
check "sited exited 0 (STOPPING, drained)" \
  test "$(systemctl show -P Result $sited)/$(systemctl show -P ExecMainStatus $sited)" = success/0
check "its socket still listens for the next connection" \
  test "$(systemctl is-active atelier-sited@$inst.socket)" = active

printf '\n== the whole journey passed in %d s\n' "$SECONDS"
rm -rf "$work"
