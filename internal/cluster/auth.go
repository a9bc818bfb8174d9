package cluster

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Credentials are how an instance proves itself to the NATS server and
// how it checks the server: at most one of an NKEY user seed or a
// credentials file (user JWT and seed, decentralised authentication), and
// TLS. A user and password may instead be given in the URL
// (nats://user:password@host:4222). All fields are file paths.
type Credentials struct {
	// CredsFile is a NATS credentials file (SERVICE_NATS_CREDS).
	CredsFile string
	// NkeySeedFile holds an NKEY user seed, SU… (SERVICE_NATS_NKEY_SEED).
	NkeySeedFile string
	// CAFile holds the CA certificates the server's certificate is checked
	// against (SERVICE_NATS_TLS_CA); set, the connection must be TLS.
	CAFile string
	// CertFile and KeyFile are this instance's certificate and key for a
	// server that asks for one (SERVICE_NATS_TLS_CERT, SERVICE_NATS_TLS_KEY).
	CertFile, KeyFile string
}

// Options returns the NATS client options for c (none for the zero
// value). The files are read now, so that a wrong path or an unreadable
// seed stops the start instead of showing up as a bus that never
// answers; the credentials file and the certificates are read again at
// every connection, so renewing them in place needs no restart. Errors
// name the file and what is wrong with it.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.CredsFile != "" && c.NkeySeedFile != "":
		return nil, errors.New("a credentials file and an NKEY seed are both set; the server takes one")
	case c.CredsFile != "":
		if _, err := os.ReadFile(c.CredsFile); err != nil {
			return nil, fmt.Errorf("credentials file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.NkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("NKEY seed file %s: %w", c.NkeySeedFile, err)
		}
		opts = append(opts, o)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("a TLS certificate needs its key, and a key its certificate")
	}
	if c.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.CAFile))
	}
	if c.CertFile != "" {
		opts = append(opts, nats.ClientCert(c.CertFile, c.KeyFile))
	}
	return opts, nil
}
