package identity

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"phonefleet/domain"
)

// Gateway tokens (issue 14) have the shape of API key tokens with their own
// prefixes:
//
//	pfe_<code id: 32 hex>_<26 random base32 + 7 base32 checksum>     enrollment code
//	pfg_<gateway id: 32 hex>_<26 random base32 + 7 base32 checksum>  tunnel credential
//
// The id is the hex body of the code's (gwc_) or gateway's (gw_) id, so the
// token names its record without a lookup table; the secret carries 130
// bits from crypto/rand and a CRC-32 of everything before it, so a mistyped
// token is refused without touching the store. Only Hasher.Hash of the
// secret is stored.
const (
	// GatewayCodePrefix starts every enrollment code.
	GatewayCodePrefix = "pfe_"
	// GatewayCredentialPrefix starts every gateway credential.
	GatewayCredentialPrefix = "pfg_"
	gatewayTokenLen         = 4 + keyIDLen + 1 + secretLen
)

// ErrMalformedGatewayToken is returned for a value that is not a
// well-formed gateway token of the kind asked for.
var ErrMalformedGatewayToken = errors.New("malformed gateway token")

// GatewayToken is a freshly minted enrollment code or gateway credential:
// the whole token (shown once) and its parts.
type GatewayToken struct {
	// ID is the code's (gwc_…) or gateway's (gw_…) id.
	ID string
	// Secret is what the hasher hashes.
	Secret string
	// Token is the whole value.
	Token string
}

// NewGatewayCode mints an enrollment code with a fresh id.
func NewGatewayCode() (GatewayToken, error) {
	return mintGatewayToken(GatewayCodePrefix, domain.PrefixGatewayCode, domain.NewID(domain.PrefixGatewayCode))
}

// NewGatewayCredential mints the tunnel credential of gateway id.
func NewGatewayCredential(gatewayID string) (GatewayToken, error) {
	return mintGatewayToken(GatewayCredentialPrefix, domain.PrefixGateway, gatewayID)
}

// ParseGatewayCode splits an enrollment code into its id and secret.
func ParseGatewayCode(token string) (codeID, secret string, err error) {
	return parseGatewayToken(GatewayCodePrefix, domain.PrefixGatewayCode, token)
}

// ParseGatewayCredential splits a gateway credential into the gateway's id
// and the secret.
func ParseGatewayCredential(token string) (gatewayID, secret string, err error) {
	return parseGatewayToken(GatewayCredentialPrefix, domain.PrefixGateway, token)
}

// GatewayDummyHash is what a gateway token's hash is compared with when its
// id names nothing, so an unknown id costs the same work as a wrong secret.
func (h *Hasher) GatewayDummyHash() []byte { return h.dummy }

// GatewayCredentialFor is the tunnel credential of gateway id enrolled
// with the enrollment code whose secret is codeSecret. Its secret is the
// hasher's HMAC of the code's secret (labelled), so an exchange of the
// code retried because its first answer was lost gives the same
// credential again (EnrollGateway), and nobody without the server's key
// and the code can compute it.
func (h *Hasher) GatewayCredentialFor(gatewayID, codeSecret string) (GatewayToken, error) {
	mac := h.Hash("gateway-credential\x00" + codeSecret)
	return gatewayToken(GatewayCredentialPrefix, domain.PrefixGateway, gatewayID, mac[:secretRandom])
}

func mintGatewayToken(prefix, idPrefix, id string) (GatewayToken, error) {
	var raw [secretRandom]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return GatewayToken{}, err
	}
	return gatewayToken(prefix, idPrefix, id, raw[:])
}

// gatewayToken writes the token of id with secret raw (secretRandom
// bytes, each one base32 character).
func gatewayToken(prefix, idPrefix, id string, raw []byte) (GatewayToken, error) {
	if !domain.HasPrefix(id, idPrefix) {
		return GatewayToken{}, fmt.Errorf("identity: %q is not a %s_ id", id, idPrefix)
	}
	var b strings.Builder
	b.Grow(gatewayTokenLen)
	b.WriteString(prefix)
	b.WriteString(id[len(idPrefix)+1:])
	b.WriteByte('_')
	for _, r := range raw {
		b.WriteByte(base32Alphabet[r&31]) // 256 is a multiple of 32: uniform
	}
	b.WriteString(checksum(b.String()))
	tok := b.String()
	return GatewayToken{ID: id, Secret: tok[len(tok)-secretLen:], Token: tok}, nil
}

func parseGatewayToken(prefix, idPrefix, token string) (id, secret string, err error) {
	if len(token) != gatewayTokenLen || !strings.HasPrefix(token, prefix) || token[len(prefix)+keyIDLen] != '_' {
		return "", "", ErrMalformedGatewayToken
	}
	hexID := token[len(prefix) : len(prefix)+keyIDLen]
	for i := 0; i < len(hexID); i++ {
		if c := hexID[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", "", ErrMalformedGatewayToken
		}
	}
	secret = token[len(token)-secretLen:]
	for i := 0; i < len(secret); i++ {
		if strings.IndexByte(base32Alphabet, secret[i]) < 0 {
			return "", "", ErrMalformedGatewayToken
		}
	}
	if checksum(token[:len(token)-checksumLen]) != token[len(token)-checksumLen:] {
		return "", "", ErrMalformedGatewayToken
	}
	return idPrefix + "_" + hexID, secret, nil
}
