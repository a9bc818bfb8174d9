package domain

import (
	"context"
	"net/netip"
	"net/url"
	"strings"

	"code.dny.dev/ssrf"
)

// Why a subscription URL is refused (spec 4.4); the refusal is
// invalid_argument with reason set to one of these.
const (
	URLNotAURL        = "not_a_url"
	URLSchemeNotHTTPS = "scheme_not_https"
	URLHasCredentials = "has_credentials"
	URLPrivateAddress = "private_address"
	URLTooLong        = "too_long"
)

// AddressPolicy decides which IP addresses a webhook may be delivered to.
// The zero policy refuses every private, loopback, link-local, NAT64,
// IPv4-mapped and otherwise reserved address (code.dny.dev/ssrf's deny
// lists) and allows any port. AllowLoopback additionally admits 127.0.0.0/8
// and ::1: local mode's developer receivers. Nothing admits other private
// ranges.
type AddressPolicy struct {
	AllowLoopback bool
}

var (
	loopbackV4 = netip.MustParsePrefix("127.0.0.0/8")
	loopbackV6 = netip.MustParsePrefix("::1/128")
)

// Guardian returns the connect-time check of p, for net.Dialer.Control.
func (p AddressPolicy) Guardian() *ssrf.Guardian {
	opts := []ssrf.Option{ssrf.WithAnyPort()}
	if p.AllowLoopback {
		opts = append(opts, ssrf.WithAllowedV4Prefixes(loopbackV4), ssrf.WithAllowedV6Prefixes(loopbackV6))
	}
	return ssrf.New(opts...)
}

// Allows reports whether p admits delivering to ip.
func (p AddressPolicy) Allows(ip netip.Addr) bool {
	return p.Guardian().SafeAddr(ip) == nil
}

// HostResolver resolves a host name to addresses; *net.Resolver is one.
type HostResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// urlRefusal is the invalid_argument answer naming reason.
func urlRefusal(reason, message string) *Error {
	return Errorf(CodeInvalidArgument, "url refused: %s", message).With("reason", reason)
}

// CheckWebhookURL checks a subscription URL's shape against p: at most
// MaxWebhookURLLength characters, an absolute https URL with a host, no
// user information, and not naming a refused address literally (an IP
// address p does not allow, or localhost). It returns the parsed URL or an
// invalid_argument error whose reason is one of the URL… values. A host
// name is checked by resolving it (CheckWebhookHost); the dispatcher checks
// again at connect time.
func CheckWebhookURL(raw string, p AddressPolicy) (*url.URL, error) {
	if len(raw) > MaxWebhookURLLength {
		return nil, urlRefusal(URLTooLong, "longer than 2000 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, urlRefusal(URLNotAURL, "not an absolute URL with a host")
	}
	if u.Scheme != "https" {
		return nil, urlRefusal(URLSchemeNotHTTPS, "the scheme must be https")
	}
	if u.User != nil {
		return nil, urlRefusal(URLHasCredentials, "the URL must not carry credentials")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		if !p.Allows(ip) {
			return nil, urlRefusal(URLPrivateAddress, "the host is a private, loopback or reserved address")
		}
		return u, nil
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if !p.AllowLoopback {
			return nil, urlRefusal(URLPrivateAddress, "the host is a loopback name")
		}
	}
	return u, nil
}

// CheckWebhookHost resolves a host name and refuses it (reason
// private_address) when any address it resolves to is one p does not
// allow. A name that does not resolve now is accepted: it may be set up
// later, and every connection is checked again.
func CheckWebhookHost(ctx context.Context, host string, p AddressPolicy, r HostResolver) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	g := p.Guardian()
	for _, a := range addrs {
		if g.SafeAddr(a) != nil {
			return urlRefusal(URLPrivateAddress, "the host resolves to a private, loopback or reserved address")
		}
	}
	return nil
}
