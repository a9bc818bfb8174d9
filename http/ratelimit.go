package httpapi

import (
	"net/http"
	"strconv"

	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/internal/identity"
)

// rateLimit counts every request against its caller's per-minute budget
// before any other work (spec 8; hosted only). The budget is chosen by
// whether the request carried Authorization, not by the route; the caller
// is the credential (by hash) or, without one, the client address. Every
// answer carries RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset and
// RateLimit-Policy; a request over budget is answered 429 rate_limited with
// Retry-After and goes no further.
//
// If the count cannot be taken (the database is unreachable) the request
// is let through without the headers: the limit protects the service, and
// the request will meet the same outage in whatever it does next.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	d := s.deps.Identity
	if s.mode != "hosted" || d.RateLimiter == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucket, authorized := identity.CallerBucket(r)
		limit := d.RateLimitAnonymous
		if authorized {
			limit = d.RateLimitAuthenticated
		}
		dec, err := d.RateLimiter.Take(r.Context(), bucket, limit)
		if err != nil {
			kernel.NoteFault(r.Context(), err)
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("RateLimit-Limit", strconv.Itoa(dec.Limit))
		h.Set("RateLimit-Remaining", strconv.Itoa(dec.Remaining))
		h.Set("RateLimit-Reset", strconv.Itoa(dec.Reset))
		h.Set("RateLimit-Policy", strconv.Itoa(dec.Limit)+";w=60")
		if !dec.Allowed {
			h.Set("Retry-After", strconv.Itoa(dec.Reset))
			kernel.Error(w, r, domain.Errorf(domain.CodeRateLimited, "too many requests this minute; wait as Retry-After says"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
