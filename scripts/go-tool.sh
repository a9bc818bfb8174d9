# Sourced by the ensure-*.sh scripts: finding, and else installing with
# `go install`, a tool built from a Go module (stripe-mock, nats-server).
# GO names the go command.

gobin() {
  local d
  d=$("$GO" env GOBIN)
  if [ -z "$d" ]; then
    d=$("$GO" env GOPATH)
    d="${d%%:*}/bin"
  fi
  echo "$d"
}

# go_tool_find NAME VAR prints the path of the binary NAME: the one VAR
# names (which must then be it), else on PATH, else in GOBIN or
# GOPATH/bin. Status 1 when there is none, 2 when VAR names something else.
go_tool_find() {
  local name=$1 var=$2 val=${!2:-} p
  if [ -n "$val" ]; then
    if [ -f "$val" ] && [ -x "$val" ]; then
      echo "$val"
      return 0
    fi
    echo "$var=$val is not an executable file; unset it to have $name installed" >&2
    return 2
  fi
  if p=$(command -v "$name" 2>/dev/null); then
    echo "$p"
    return 0
  fi
  p="$(gobin)/$name"
  if [ -f "$p" ] && [ -x "$p" ]; then
    echo "$p"
    return 0
  fi
  return 1
}

# go_tool_install NAME VAR MODULE VERSION installs MODULE@VERSION with the
# local toolchain (through the Go module proxy) and prints the path of
# NAME, or says what to do and exits 1.
go_tool_install() {
  local name=$1 var=$2 module=$3 version=$4 p
  echo "installing $name $version (go install $module@$version)…" >&2
  (cd / && GOTOOLCHAIN=local "$GO" install "$module@$version") >&2
  p="$(gobin)/$name"
  if [ -f "$p" ] && [ -x "$p" ]; then
    echo "$p"
    return 0
  fi
  echo "$name not found after go install (looked for $p): install it with go install $module@$version and put it on PATH, or set $var to its path" >&2
  exit 1
}
