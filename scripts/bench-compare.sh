#!/usr/bin/env bash
# bench-compare.sh [OLD_REV] [NEW_REV] — the pfbench figures of two revisions,
# measured back to back on the same database server.
# bench-compare.sh --table DIR — print the tables again from a run's raw outputs.
#
#   OLD_REV  the revision to compare against (default 0725ed3, the tree before
#            the application-core refactor of the write path)
#   NEW_REV  the revision to compare (default: this checkout's working tree,
#            uncommitted changes included)
#
# It builds cmd/pfbench of each revision (the old one, and NEW_REV when given,
# from `git archive` exported under a temporary directory, so the checkout's
# git state is never touched), then runs the two binaries alternately —
# OLD, NEW, OLD, NEW — on the same server, so that the difference between two
# runs of the same binary (the noise) is printed beside the old/new change.
# Each pfbench run makes its own fresh databases on that server and drops them.
#
# The server: BENCH_DATABASE_URL, else DATABASE_URL, else the one at
# 127.0.0.1:5432 (what pfbench itself would pick), else a private throwaway
# cluster started here once for all four runs (pfbench alone would start one
# per run, which would not be the same database). It is passed to every run as
# BENCH_DATABASE_URL. PRIVATE_CLUSTER=1 forces the private cluster.
#
# Settings (environment):
#   SECTIONS       pfbench sections (default fleet,appends,read,projection:
#                  the action path, appends, the feed and the projections;
#                  gateway, forwarding and the tunnel; lag; mcp, MCP against
#                  REST; webhooks; copilot; and scale, each fleet size's steps
#                  (a step one run reached and another did not is shown as
#                  not measured in every run) are read too)
#   PFBENCH_FLAGS  extra pfbench flags for every run, e.g. "-cell 4s -events 500000"
#                  (make bench-compare: BENCHFLAGS)
#   OUT_DIR        where the raw outputs go (default: a temporary directory,
#                  kept and printed at the end)
#   GO             the go command (default go)
#
# Reading the tables: old 1/2 and new 1/2 are the four runs; noise is
# |run1 − run2| relative to their mean, for each binary; change is the new
# median against the old median. A change is called better/worse only when
# it exceeds both binaries' noise. Baseline rows (pgbench, COPY,
# INSERT…SELECT) are the same SQL in both columns: their change is the
# server's drift between the runs, not the code's. NEW runs second in each
# round, so a machine getting steadily quieter (or busier) favours (or
# penalises) it: the baselines show by how much. The noise of two runs is a
# rough estimate; on a shared machine repeat a surprising figure before
# believing it (SECTIONS=fleet, say).
#
# A pfbench run that fails exits without dropping its databases
# (pf_bench_<time>_<n>); on a shared server drop them by hand.
set -euo pipefail

say() { printf '%s\n' "$*" >&2; }

# --- the tables ---------------------------------------------------------------

# parse FILE prints one line per figure: section<TAB>figure<TAB>value<TAB>kind
# (kind: high = higher is better, low = lower is better, base = a baseline).
parse() {
  awk '
    function ms(d,   t, n, u, v) { # a Go duration string in milliseconds
      t = 0
      while (match(d, /[0-9.]+(h|ms|m|s|µs|us|ns)/)) {
        v = substr(d, RSTART, RLENGTH); d = substr(d, RSTART + RLENGTH)
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "h") t += n * 3600000; else if (u == "m") t += n * 60000; else if (u == "s") t += n * 1000
        else if (u == "ms") t += n; else if (u == "ns") t += n / 1e6; else t += n / 1000
      }
      return t
    }
    function sms(d) { return substr(d, 1, 1) == "-" ? -ms(substr(d, 2)) : ms(d) } # signed
    function word(s, marker, k,   i, w) { # the k-th word (default 1st) after marker in s
      i = index(s, marker); if (i == 0) return ""
      split(substr(s, i + length(marker)), w, " "); return w[k ? k : 1]
    }
    function put(sec, fig, v, kind) { printf "%s\t%s\t%s\t%s\n", sec, fig, v, kind }
    /^## / { sec = "" }
    /^## Device actions/ { sec = "fleet" }
    /^## Event store appends/ { sec = "appends" }
    /^## Catch-up read/ { sec = "read" }
    /^## Projection apply/ { sec = "projection" }
    /^## Live projection lag/ { sec = "lag" }
    /^## Forwarding between instances/ { sec = "gateway" }
    /^## Tool calls over MCP/ { sec = "mcp" }
    /^## Webhooks:/ { sec = "webhooks" }
    /^## Copilot:/ { sec = "copilot" }
    /^## Fleet scale:/ { sec = "scale" }
    sec == "fleet" && /^devices/ { dbtx = index($0, "db tx/action") > 0 } # a column of its own since 2026-11-28
    sec == "fleet" && $1 ~ /^[0-9]+$/ && NF >= 7 {
      d = $1 " device" ($1 == 1 ? "" : "s"); k = dbtx ? 1 : 0
      put(sec, d ": actions/s", $2, "high"); put(sec, d ": p50 ms", ms($3), "low"); put(sec, d ": p99 ms", ms($4), "low")
      put(sec, d ": errors", $5, "low"); if (dbtx) put(sec, d ": db tx/action", $6, "low")
      put(sec, d ": pgbench tx/s", $(6 + k), "base")
      r = $(7 + k); sub(/×.*/, "", r); put(sec, d ": ratio to pgbench", r, "high")
    }
    sec == "appends" && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {
      if ($3 == "gc") { c = $1 "w × 1, group commit"; s = $4; b = $5; r = $6 } else { c = $1 "w × " $2; s = $3; b = $4; r = $5 }
      sub(/×.*/, "", r)
      put(sec, c ": store ev/s", s, "high")
      if ($3 != "gc") put(sec, c ": pgbench ev/s", b, "base")
      put(sec, c ": ratio", r, "high")
    }
    sec == "read" && /^feed reader:/ {
      rd = word($0, "feed reader: ") / ms(word($0, "events in ")) * 1000
      cr = word($0, "baseline COPY: ") / ms(word($0, "rows in ")) * 1000
      put(sec, "feed reader ev/s", sprintf("%.0f", rd), "high"); put(sec, "COPY rows/s", sprintf("%.0f", cr), "base")
      put(sec, "ratio to COPY", sprintf("%.3f", rd / cr), "high")
    }
    sec == "projection" && /^baselines:/ { # since 2026-11-27 the baselines have a line of their own
      b = substr($0, index($0, "INSERT…SELECT ")); isr = word(b, "(") / ms(word(b, "rows in ")) * 1000
    }
    sec == "projection" && /^apply / {
      ar = word($0, "): ") / ms(word($0, "events in ")) * 1000
      if (index($0, "baseline ")) { b = word($0, "baseline ", 2); sub(/^\(/, "", b); br = b / ms(word($0, "rows in ")) * 1000 } else br = isr
      put(sec, "apply ev/s", sprintf("%.0f", ar), "high"); put(sec, "INSERT…SELECT rows/s", sprintf("%.0f", br), "base")
      put(sec, "apply ratio to INSERT…SELECT", sprintf("%.3f", ar / br), "high")
    }
    sec == "projection" && /^rebuild / {
      put(sec, "rebuild ev/s", sprintf("%.0f", word($0, "): ") / ms(word($0, "events in ")) * 1000), "high")
    }
    sec == "gateway" && /^(service|gateway)'"'"'s sim, via / { # a cell: its name, then tap p50 first
      c = $0; sub(/  +[0-9].*$/, "", c); sub(/ \(baseline\)$/, " (baseline A)", c) # the name before 2026-11-28
      v = substr($0, length(c) + 1); split(v, w, " "); put(sec, c ": tap p50 ms", ms(w[1]), "low")
    }
    sec == "gateway" && /^noise \(baseline B/ { put(sec, "noise (baseline B − A) ms", sms(word($0, "): ")), "base") }
    sec == "gateway" && /^forwarding cost/ { put(sec, "forwarding cost ms", sms(word($0, "): ")), "low") }
    sec == "gateway" && /^tunnel cost/ { put(sec, "tunnel cost ms", sms(word($0, "): ")), "low") }
    sec == "gateway" && /^of which the message bus/ { put(sec, "bare NATS request–reply p50 ms", ms(word($0, "p50 ")), "base") }
    sec == "mcp" && /[0-9.]+× +[0-9.]+× / { # a call: its name, REST p50 and p99, MCP p50 and p99, then the ratios
      c = $0; sub(/  +[0-9].*$/, "", c); split(substr($0, length(c) + 1), w, " ")
      put(sec, c ": REST p50 ms", ms(w[1]), "base"); put(sec, c ": MCP p50 ms", ms(w[3]), "low")
      r = w[5]; sub(/×.*/, "", r); put(sec, c ": MCP ÷ REST p50", r, "low")
    }
    sec == "webhooks" && /^throughput:/ {
      put(sec, "deliveries/s", sprintf("%.0f", word($0, "throughput: ") / ms(word($0, "recorded in ")) * 1000), "high")
      b = substr($0, index($0, "signed POSTs: ")); put(sec, "raw signed POSTs/s", sprintf("%.0f", word(b, "POSTs: ") / ms(word(b, " in ")) * 1000), "base")
    }
    sec == "webhooks" && /^event → first attempt/ {
      put(sec, "event → first attempt p50 ms", ms(word($0, " p50 ")), "low"); put(sec, "event → first attempt p99 ms", ms(word($0, " p99 ")), "low")
      put(sec, "not arrived", word($0, "max ", 2), "low")
    }
    sec == "copilot" && /^copilot.s own part/ { r = word($0, "receipt) ", 2); sub(/×.*/, "", r); put(sec, "own part ÷ REST p50", r, "low") }
    sec == "copilot" && /^REST action, p50/ { put(sec, "REST action p50 ms", ms(word($0, "(baseline) ")), "base") }
    sec == "copilot" && /^provider chunk/ { put(sec, "chunk → stream event p99 ms", ms(word($0, "chunks) ", 2)), "low") }
    sec == "scale" && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 15 { # a step: phones, target/s, then its figures
      c = $1 " phones at " $2 "/s"
      put(sec, c ": actions/s", $3, "high"); put(sec, c ": act p99 ms", ms($6), "low"); put(sec, c ": errors", $10, "low")
      put(sec, c ": RSS MB", $11, "low"); put(sec, c ": service CPU %", $12, "low"); put(sec, c ": PostgreSQL CPU %", $13, "low")
    }
    sec == "scale" && $1 ~ /^[0-9]+$/ && $2 == "pgbench" {
      put(sec, $1 " phones: best step within the goal, actions/s", word($0, "within the goal: "), "high")
      put(sec, $1 " phones: pgbench tx/s", word($0, "clients: "), "base")
    }
    sec == "lag" && /events: lag/ {
      if ($1 + 0 == 0) { put(sec, "lag p50 ms", "n/a", "low"); put(sec, "lag p99 ms", "n/a", "low"); next }
      put(sec, "events measured", $1, "base")
      put(sec, "lag p50 ms", ms(word($0, "p50 ")), "low"); put(sec, "lag p99 ms", ms(word($0, "p99 ")), "low")
    }
  ' "$1"
}

# table DIR prints the comparison tables (markdown) from DIR's raw outputs.
table() {
  local dir=$1 side round
  for side in old new; do for round in 1 2; do parse "$dir/$side-$round.txt" >"$dir/$side-$round.tsv"; done; done
  # shellcheck disable=SC1090
  . "$dir/meta"
  awk -F'\t' -v when="$when" -v cpus="$cpus" -v where="$db_where" \
    -v oldl="$old_label" -v newl="$new_label" '
  function num(x) { return x != "n/a" && x != "" }
  function fmt(x,   a) {
    if (!num(x)) return "n/a"
    a = x < 0 ? -x : x
    if (a >= 1000) return group(sprintf("%.0f", x))
    if (a >= 100) return sprintf("%.0f", x)
    if (a >= 10) return sprintf("%.1f", x)
    if (x == int(x)) return sprintf("%d", x)
    return sprintf("%.2f", x)
  }
  function group(s,   out, neg) { # 12345 -> 12,345
    neg = substr(s, 1, 1) == "-"; if (neg) s = substr(s, 2)
    while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
    return (neg ? "-" : "") s out
  }
  function apct(x) { return sprintf("%.0f%%", x * 100) }
  function pct(x) { return sprintf("%+.0f%%", x * 100) }
  function rel(a, b,   m) { m = (a + b) / 2; return m == 0 ? 0 : (a > b ? a - b : b - a) / m }
  FNR == 1 { file++ }
  {
    k = $1 SUBSEP $2
    if (!(k in seen)) { seen[k] = ++nk; key[nk] = k; secof[nk] = $1; fig[nk] = $2; kind[nk] = $4 }
    v[k, file] = $3
  }
  END {
    printf "pfbench, old %s vs new %s — %s, %s CPUs, database %s\n", oldl, newl, when, cpus, where
    printf "runs alternated old 1, new 1, old 2, new 2; noise = |run1 − run2| / mean; change = new median vs old median\n"
    for (i = 1; i <= nk; i++) {
      k = key[i]; s = secof[i]
      if (s != last) {
        printf "\n### %s\n\n| figure | old 1 | old 2 | new 1 | new 2 | noise old | noise new | change | reading |\n| - | - | - | - | - | - | - | - | - |\n", s
        last = s
      }
      o1 = v[k, 1]; o2 = v[k, 2]; n1 = v[k, 3]; n2 = v[k, 4]
      if (num(o1) && num(o2) && num(n1) && num(n2)) {
        no = rel(o1, o2); nn = rel(n1, n2); om = (o1 + o2) / 2; nm = (n1 + n2) / 2
        if (om == 0 && nm == 0) { ch = "0%"; c = 0 } else if (om == 0) { ch = "new > 0"; c = 1e9 } else { c = (nm - om) / om; ch = pct(c) }
        noise = no > nn ? no : nn
        if (kind[i] == "base") reading = "baseline (server drift)"
        else if ((c < 0 ? -c : c) <= noise) reading = "within noise"
        else reading = ((kind[i] == "high") == (c > 0) ? "better" : "worse") " beyond noise"
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", fig[i], fmt(o1), fmt(o2), fmt(n1), fmt(n2), apct(no), apct(nn), ch, reading
      } else {
        printf "| %s | %s | %s | %s | %s | | | | not measured in every run |\n", fig[i], fmt(o1), fmt(o2), fmt(n1), fmt(n2)
      }
    }
  }
' "$dir/old-1.tsv" "$dir/old-2.tsv" "$dir/new-1.tsv" "$dir/new-2.tsv"
  if [ -s "$dir/runs.txt" ]; then
    printf '\nRuns (wall time, 1/5/15-minute load average before and after):\n\n'
    sed 's/^/    /' "$dir/runs.txt"
  fi
}

if [ "${1:-}" = "--table" ]; then
  table "${2:?usage: bench-compare.sh --table DIR}"
  exit 0
fi

# --- settings -----------------------------------------------------------------

GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
old_rev=${1:-${OLD_REV:-0725ed3}}
new_rev=${2:-${NEW_REV:-}}
sections=${SECTIONS:-fleet,appends,read,projection}
read -r -a extra <<<"${PFBENCH_FLAGS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")
out=${OUT_DIR:-$work/out}
mkdir -p "$out"
pgdata=""
pg_ctl_bin=""
as_pg=()

cleanup() {
  if [ -n "$pgdata" ]; then
    "${as_pg[@]}" "$pg_ctl_bin" -D "$pgdata" -m fast -w stop >/dev/null 2>&1 || true
  fi
  # Keep the raw outputs (inside $work when OUT_DIR is unset), drop the rest.
  find "$work" -mindepth 1 -maxdepth 1 ! -path "$out" -exec rm -rf {} + 2>/dev/null || true
  if [ "$out" != "$work/out" ]; then rmdir "$work" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build ------------------------------------------------------------------

export_tree() { # rev dir: the tree of rev, exported without touching the checkout
  mkdir -p "$2"
  git -C "$root" archive "$1" | tar -x -C "$2"
}

git -C "$root" rev-parse --verify --quiet "$old_rev^{commit}" >/dev/null || { say "bench-compare: unknown revision $old_rev"; exit 2; }
old_label="$old_rev ($(git -C "$root" rev-parse --short "$old_rev^{commit}"))"
say "== building pfbench of $old_label"
export_tree "$old_rev" "$work/old"
(cd "$work/old" && "$GO" build -o "$work/pfbench-old" ./cmd/pfbench)

if [ -n "$new_rev" ]; then
  git -C "$root" rev-parse --verify --quiet "$new_rev^{commit}" >/dev/null || { say "bench-compare: unknown revision $new_rev"; exit 2; }
  new_label="$new_rev ($(git -C "$root" rev-parse --short "$new_rev^{commit}"))"
  say "== building pfbench of $new_label"
  export_tree "$new_rev" "$work/new"
  (cd "$work/new" && "$GO" build -o "$work/pfbench-new" ./cmd/pfbench)
  new_dir=$work/new
else
  new_label="working tree (HEAD $(git -C "$root" rev-parse --short HEAD)"
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    new_label="$new_label + uncommitted changes"
  fi
  new_label="$new_label)"
  say "== building pfbench of the $new_label"
  (cd "$root" && "$GO" build -o "$work/pfbench-new" ./cmd/pfbench)
  new_dir=$root
fi

# --- the database server ----------------------------------------------------

pgbin() { # the named PostgreSQL program: on PATH, else the newest packaged one
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return; fi
  ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1
}

# start_private_cluster runs a throwaway cluster for the four runs: room for
# pfbench's pools and pgbench's clients (max_connections 200), and no
# autovacuum (as on the server the figures in docs/performance.md come from;
# pfbench vacuums its loaded tables itself), so that autovacuum waking in
# one run and not in another is not part of the noise.
start_private_cluster() {
  local initdb port pw
  initdb=$(pgbin initdb)
  pg_ctl_bin=$(pgbin pg_ctl)
  if [ -z "$initdb" ] || [ -z "$pg_ctl_bin" ]; then
    say "bench-compare: no database server and no initdb/pg_ctl to start one (run make deps, or set DATABASE_URL)"
    exit 1
  fi
  chmod 755 "$work"
  mkdir -p "$work/pg"
  if [ "$(id -u)" = 0 ]; then # PostgreSQL refuses to run as root
    local user=postgres
    id "$user" >/dev/null 2>&1 || user=nobody
    chown "$user" "$work/pg"
    if command -v runuser >/dev/null 2>&1; then as_pg=(runuser -u "$user" --); else as_pg=(sudo -u "$user"); fi
  fi
  pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  printf '%s\n' "$pw" >"$work/pg/pw"
  chmod 600 "$work/pg/pw"
  [ "$(id -u)" = 0 ] && chown "$user" "$work/pg/pw"
  "${as_pg[@]}" "$initdb" -D "$work/pg/data" -U postgres --auth=scram-sha-256 --pwfile="$work/pg/pw" >"$work/pg/initdb.log" 2>&1 ||
    { cat "$work/pg/initdb.log" >&2; exit 1; }
  for port in $(seq 55432 55500); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # taken
    pgdata="$work/pg/data"
    if "${as_pg[@]}" "$pg_ctl_bin" -D "$pgdata" -l "$work/pg/log" -w -t 60 \
      -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=200 -c autovacuum=off" start >/dev/null; then
      db_url="postgres://postgres:$pw@127.0.0.1:$port/postgres?sslmode=disable"
      db_where="a private cluster started for this comparison (127.0.0.1:$port)"
      return
    fi
    pgdata=""
  done
  say "bench-compare: could not start a private cluster (see $work/pg/log)"
  exit 1
}

local_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
if [ -n "${PRIVATE_CLUSTER:-}" ]; then
  start_private_cluster
elif [ -n "${BENCH_DATABASE_URL:-}" ]; then
  db_url=$BENCH_DATABASE_URL db_where="BENCH_DATABASE_URL"
elif [ -n "${DATABASE_URL:-}" ]; then
  db_url=$DATABASE_URL db_where="DATABASE_URL"
elif psql_bin=$(pgbin psql) && [ -n "$psql_bin" ] &&
  PGCONNECT_TIMEOUT=2 PGPASSFILE=/dev/null PGPASSWORD='' "$psql_bin" "$local_url" -Atqc 'select 1' >/dev/null 2>&1; then
  db_url=$local_url db_where="127.0.0.1:5432"
elif [ -z "${psql_bin:-}" ] && (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  db_url=$local_url db_where="127.0.0.1:5432"
else
  start_private_cluster
fi
export BENCH_DATABASE_URL=$db_url
say "== database server: $db_where"

# --- the runs: OLD NEW OLD NEW ----------------------------------------------

cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo "?")
runlog="$out/runs.txt"
: >"$runlog"
for round in 1 2; do
  for side in old new; do
    f="$out/$side-$round.txt"
    load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
    t0=$(date +%s)
    say "== run $side $round: pfbench -only $sections ${extra[*]:-} (load average $load0)"
    note=""
    for attempt in 1 2; do
      # Each side runs in its own tree: the scale section builds the
      # service it drives (cmd/phonefleet) from the directory it runs in.
      tree=$work/old
      [ "$side" = new ] && tree=$new_dir
      (cd "$tree" && "$work/pfbench-$side" -only "$sections" "${extra[@]}") >"$f" 2>&1 && break
      # A shared server out of connections (other clients) is worth one
      # more try of the whole run; anything else is a failure.
      if [ "$attempt" = 1 ] && grep -q 'SQLSTATE 53300' "$f"; then
        say "   the server ran out of connections (shared with other clients?); running $side $round again in 15 s"
        note=" (run again: the first attempt found the server out of connections)"
        sleep 15
        continue
      fi
      say "bench-compare: run $side $round failed:"
      tail -n 20 "$f" >&2
      if grep -q 'SQLSTATE 53300' "$f"; then say "(the server is out of connections: PRIVATE_CLUSTER=1 uses a cluster of its own)"; fi
      exit 1
    done
    load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
    printf '%s %s: %ss, load average before %s, after %s%s\n' "$side" "$round" "$(($(date +%s) - t0))" "$load0" "$load1" "$note" | tee -a "$runlog" >&2
  done
done

# --- the tables ---------------------------------------------------------------

printf 'old_label=%q\nnew_label=%q\ndb_where=%q\ncpus=%q\nwhen=%q\n' "$old_label" "$new_label" "$db_where" "$cpus" \
  "$(date -u +%Y-%m-%dT%H:%MZ)" >"$out/meta"
table "$out" | tee "$out/table.md"

say "raw outputs and table: $out"
