package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"phonefleet/cmd/phonefleet/clisignin"
	"phonefleet/cmd/phonefleet/service"
	"phonefleet/domain"
)

const loginUsage = `usage: phonefleet login [-url URL] [-scopes SCOPE,...]

Signs this CLI in: prints a code and the console page where a signed-in
person approves it, waits for the approval, and stores the API key minted
for that person in $XDG_CONFIG_HOME/phonefleet/credentials.json (default
~/.config/phonefleet/credentials.json), readable by you only.
-url defaults to $PHONEFLEET_URL, else http://127.0.0.1:8080. -scopes
narrows what the key may do (default devices:read,devices:act,
devices:lease,runs:start); the key never carries a scope the approving
person lacks.`

const logoutUsage = `usage: phonefleet logout

Revokes the API key phonefleet login stored and removes its file.`

// defaultServiceURL is where login looks for the service when -url is not
// given: $PHONEFLEET_URL, else a local service at its default address.
func defaultServiceURL(getenv func(string) string) string {
	if u := getenv("PHONEFLEET_URL"); u != "" {
		return u
	}
	return "http://127.0.0.1:8080"
}

// parseScopes reads -scopes: a comma-separated list of the eight scopes;
// empty means the service's default.
func parseScopes(s string) ([]domain.Scope, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []domain.Scope
	for _, part := range strings.Split(s, ",") {
		sc := domain.Scope(strings.TrimSpace(part))
		if !slices.Contains(domain.AllScopes, sc) {
			return nil, usageError{fmt.Sprintf("phonefleet login: %q is not a scope; scopes are %v\n%s", sc, domain.AllScopes, loginUsage)}
		}
		out = append(out, sc)
	}
	return out, nil
}

// loginOptions are the flags of `phonefleet login`.
type loginOptions struct{ url, scopes string }

func (o *loginOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", defaultServiceURL(os.Getenv), "the service's base URL")
	fs.StringVar(&o.scopes, "scopes", "", "comma-separated scopes the key may carry (default: every scope of the approving session)")
}

// loginCmd runs `phonefleet login`.
func loginCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o loginOptions
	fs := flag.NewFlagSet("phonefleet login", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usageError{c.help}
	}
	scopes, err := parseScopes(o.scopes)
	if err != nil {
		return err
	}
	path, err := clisignin.CredentialsPath(os.Getenv)
	if err != nil {
		return err
	}
	if c, err := clisignin.Load(path); err == nil {
		fmt.Fprintf(out, "Replacing the credentials of API key %s (run phonefleet logout first to revoke it).\n", c.KeyID)
	}
	_, err = clisignin.Login(ctx, clisignin.Options{URL: o.url, Scopes: scopes, ClientName: "phonefleet CLI " + service.Version,
		Path: path, Out: out})
	return err
}

// logoutCmd runs `phonefleet logout`.
func logoutCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	if len(args) > 0 {
		return usageError{c.help}
	}
	path, err := clisignin.CredentialsPath(os.Getenv)
	if err != nil {
		return err
	}
	return clisignin.Logout(ctx, clisignin.LogoutOptions{Path: path, Out: out})
}
