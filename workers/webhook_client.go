// Package workers holds phonefleet's background loops: each reads read
// models or streams and issues commands, and is safe to run in several
// service instances at once.
package workers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"code.dny.dev/ssrf"

	"phonefleet/domain"
)

// WebhookClientOptions configure the HTTP client that sends deliveries.
type WebhookClientOptions struct {
	// Addresses decides which addresses a receiver may have; it is checked
	// on the address each connection actually dials.
	Addresses domain.AddressPolicy
	// RootCAs are the CAs trusted for receivers; nil means the system's.
	RootCAs *x509.CertPool
	// Resolver resolves receiver host names; nil means net.DefaultResolver.
	Resolver domain.HostResolver
	// Timeout bounds one attempt; zero means domain.WebhookAttemptTimeout.
	Timeout time.Duration
	// MaxConnsPerHost bounds connections to one receiver; zero means 64.
	MaxConnsPerHost int
}

// NewWebhookClient returns the client deliveries are sent with. Every
// connection resolves the host itself and dials each address through a
// net.Dialer whose Control is the code.dny.dev/ssrf guardian of
// o.Addresses, so the address checked is the address connected to (DNS
// rebinding gains nothing). No proxy is taken from the environment, and
// redirects are not followed: a 30x is the answer recorded.
func NewWebhookClient(o WebhookClientOptions) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = domain.WebhookAttemptTimeout
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = 64
	}
	var r domain.HostResolver = net.DefaultResolver
	if o.Resolver != nil {
		r = o.Resolver
	}
	d := &guardedDialer{
		dialer:   &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second, Control: o.Addresses.Guardian().Safe},
		resolver: r,
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   o.Timeout,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   o.MaxConnsPerHost,
		MaxConnsPerHost:       o.MaxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// guardedDialer resolves a host name itself and dials its addresses one by
// one; the dialer's Control refuses any address the policy does not allow.
type guardedDialer struct {
	dialer   *net.Dialer
	resolver domain.HostResolver
}

// DialContext dials addr; a host name is resolved here and each of its
// addresses dialled in turn, the first that connects winning.
func (g *guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return g.dialer.DialContext(ctx, network, addr)
	}
	ips, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var first error
	for _, ip := range ips {
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// classifyWebhookError says why an attempt got no answer, as one of the
// domain.WebhookError… values.
func classifyWebhookError(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	var alert tls.AlertError
	var netErr net.Error
	switch {
	case errors.Is(err, ssrf.ErrProhibitedIP), errors.Is(err, ssrf.ErrProhibitedPort), errors.Is(err, ssrf.ErrProhibitedNetwork):
		return domain.WebhookErrorPrivateAddress
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return domain.WebhookErrorUnresolvedName
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return domain.WebhookErrorTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return domain.WebhookErrorConnectionRefused
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &recordErr), errors.As(err, &alert):
		return domain.WebhookErrorTLS
	}
	return domain.WebhookErrorConnection
}
