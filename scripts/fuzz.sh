#!/usr/bin/env bash
# Runs every fuzz target (make fuzz) for FUZZTIME each and keeps what it
# found: after each target, the inputs the fuzzer added to Go's fuzz cache
# during that run ($(go env GOCACHE)/fuzz/<import path>/<Fuzz>) are copied
# into the package's testdata/fuzz/<Fuzz>, where `go test` runs them as
# seeds. A target's kept corpus is capped at FUZZKEEP files (the smallest
# new inputs first; a failing input the fuzzer wrote there itself is always
# kept). Every target runs even when one fails; the summary at the end
# names the failures and the exit status is non-zero when there was one.
#
# Usage: scripts/fuzz.sh [package pattern…]   (default ./...)
# Environment: GO (go), FUZZTIME (20s), FUZZKEEP (50), FUZZPARALLEL (the
# fuzzer's default: GOMAXPROCS), FUZZRUN (a regular expression the target
# names must match, default all).
set -uo pipefail
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-20s}"
FUZZKEEP="${FUZZKEEP:-50}"
FUZZRUN="${FUZZRUN:-.}"
parallel=()
[ -n "${FUZZPARALLEL:-}" ] && parallel=(-parallel "$FUZZPARALLEL")
[ $# -eq 0 ] && set -- ./...
cache="$("$GO" env GOCACHE)/fuzz"
stamp="$(mktemp)"
trap 'rm -f "$stamp"' EXIT

passed=() failed=()
while read -r pkg dir; do
  # A package whose tests do not build is a failure, not a package
  # without targets.
  if ! list="$("$GO" test -list '^Fuzz' "$pkg" 2>&1)"; then
    echo "== $pkg: the tests do not build"
    echo "$list"
    failed+=("$pkg (the tests do not build)")
    continue
  fi
  for f in $(echo "$list" | grep '^Fuzz' | grep -E -- "$FUZZRUN"); do
    echo "== $pkg $f ($FUZZTIME)"
    touch "$stamp"
    if "$GO" test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "${parallel[@]}" "$pkg"; then
      passed+=("$pkg $f")
    else
      failed+=("$pkg $f")
    fi
    keep="$dir/testdata/fuzz/$f"
    src="$cache/$pkg/$f"
    [ -d "$src" ] || continue
    have=0
    [ -d "$keep" ] && have=$(find "$keep" -type f | wc -l)
    room=$((FUZZKEEP - have))
    added=0
    # New inputs of this run only (the cache is shared with other
    # checkouts of the module), smallest first, not already kept.
    while read -r _ file; do
      [ "$room" -gt 0 ] || break
      name="$(basename "$file")"
      [ -e "$keep/$name" ] && continue
      mkdir -p "$keep"
      cp "$file" "$keep/$name"
      room=$((room - 1)) added=$((added + 1))
    done < <(find "$src" -type f -newer "$stamp" -printf '%s %p\n' | sort -n)
    echo "   kept $added new corpus entries in ${keep#"$PWD"/}"
  done
done < <("$GO" list -f '{{.ImportPath}} {{.Dir}}' "$@")

echo
echo "fuzz summary (FUZZTIME=$FUZZTIME per target): ${#passed[@]} passed, ${#failed[@]} failed"
for t in "${failed[@]}"; do echo "  FAIL $t"; done
[ ${#failed[@]} -eq 0 ]
