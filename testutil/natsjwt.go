package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// NATSOperator is a NATS operator of a test's own (decentralised
// authentication): nats-server trusts the operator, the operator signs
// accounts, and an account signs its users, whose credentials files (user
// JWT and seed) are what SERVICE_NATS_CREDS names.
type NATSOperator struct {
	t        testing.TB
	operator nkeys.KeyPair
	opJWT    string
	accounts map[string]nkeys.KeyPair // by name
	accJWTs  map[string]string        // public key → JWT
}

// NewNATSOperator makes an operator.
func NewNATSOperator(t testing.TB) *NATSOperator {
	t.Helper()
	op, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(pub)
	oc.Name = "phonefleet-test"
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	return &NATSOperator{t: t, operator: op, opJWT: opJWT, accounts: map[string]nkeys.KeyPair{}, accJWTs: map[string]string{}}
}

// Account makes the account name, signed by the operator (signed says
// whether the server is told of it: an account it was not told of cannot
// be resolved, so its users are refused).
func (o *NATSOperator) Account(name string, signed bool) {
	o.t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		o.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	accJWT, err := ac.Encode(o.operator)
	if err != nil {
		o.t.Fatal(err)
	}
	o.accounts[name] = kp
	if signed {
		o.accJWTs[pub] = accJWT
	}
}

// ServerConf is the nats-server configuration trusting the operator, with
// the accounts it was told of preloaded in a memory resolver.
func (o *NATSOperator) ServerConf() string {
	o.t.Helper()
	path := filepath.Join(o.t.TempDir(), "operator.jwt")
	if err := os.WriteFile(path, []byte(o.opJWT), 0o600); err != nil {
		o.t.Fatal(err)
	}
	conf := fmt.Sprintf("operator: %q\nresolver: MEMORY\nresolver_preload: {\n", path)
	for pub, j := range o.accJWTs {
		conf += fmt.Sprintf("  %s: %q\n", pub, j)
	}
	return conf + "}\n"
}

// UserCreds makes a user of account and writes its credentials file
// (0600), returning its path.
func (o *NATSOperator) UserCreds(account string) string {
	o.t.Helper()
	akp, ok := o.accounts[account]
	if !ok {
		o.t.Fatalf("no account %q", account)
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		o.t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = account + "-user"
	userJWT, err := uc.Encode(akp)
	if err != nil {
		o.t.Fatal(err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		o.t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		o.t.Fatal(err)
	}
	path := filepath.Join(o.t.TempDir(), account+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		o.t.Fatal(err)
	}
	return path
}
