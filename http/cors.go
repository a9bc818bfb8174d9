package httpapi

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/internal/identity"
)

// corsAllowedHeaders are exactly the request headers a browser may send
// (spec 9.2).
const corsAllowedHeaders = "Authorization, Content-Type, x-service-step-up, Idempotency-Key"

// corsAllowedMethods are the methods the control surface serves.
const corsAllowedMethods = "GET, POST, PATCH, PUT, DELETE"

// corsExposedHeaders are the response headers a page may read. Deprecation,
// Sunset and Link are there for an operation on its way out (evolution.go),
// though nothing is deprecated today.
const corsExposedHeaders = "Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, RateLimit-Policy, " +
	"WWW-Authenticate, X-Request-Id, Idempotent-Replayed, Allow, Deprecation, Sunset, Link"

// corsMaxAge is how long a browser may reuse a preflight answer, in seconds.
const corsMaxAge = "600"

// cors answers browser preflights and marks answers to allowed origins
// (spec 9.2). A request carrying Origin is a web page's:
//
//   - a preflight from an origin not on the allow-list (SERVICE_CORS_ORIGINS)
//     is refused 403 origin_not_allowed;
//   - a request carrying an API key is refused 403
//     api_key_from_browser_origin whatever its origin and route (spec
//     5.3.7): the key is what is wrong, and the answer says so; an allowed
//     origin may read that answer;
//   - any other request from an origin not on the list is refused
//     origin_not_allowed too: a page of another origin gets nothing, which
//     keeps it from driving local mode's unauthenticated operator with a
//     simple request no preflight guards.
//
// Requests without Origin (every non-browser client) pass untouched.
func (s *Server) cors(next http.Handler) http.Handler {
	allowed := s.deps.Identity.CORSOrigins
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
		}
		ok := slices.Contains(allowed, strings.TrimRight(origin, "/")) || s.ownOrigin(r, origin)
		if !preflight && carriesAPIKey(r) {
			if ok {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Set("Access-Control-Expose-Headers", corsExposedHeaders)
			}
			kernel.Error(w, r, domain.Errorf(domain.CodeAPIKeyFromBrowserOrigin,
				"an API key must never be used from a web page; sign in with OAuth there instead"))
			return
		}
		if !ok {
			kernel.Error(w, r, domain.Errorf(domain.CodeOriginNotAllowed, "the origin %s may not call this service from a browser", clipHeader(origin)))
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if preflight {
			h.Set("Access-Control-Allow-Methods", corsAllowedMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowedHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposedHeaders)
		next.ServeHTTP(w, r)
	})
}

// ownOrigin reports whether origin is the service's own: the console's
// page calling the API it was served with. Hosted mode knows its origin
// ({base_url}); a local deployment is its own origin only at a loopback
// host (127.0.0.1, [::1], localhost) and only as the Host the request was
// sent to, so a page of another site that rebinds its name to 127.0.0.1
// (its Origin is its own name) is still refused.
func (s *Server) ownOrigin(r *http.Request, origin string) bool {
	origin = strings.TrimRight(origin, "/")
	if s.mode == "hosted" {
		u, err := url.Parse(s.deps.Identity.PublicURL)
		return err == nil && u.Host != "" && origin == u.Scheme+"://"+u.Host
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Host != r.Host {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// carriesAPIKey reports whether the request's bearer is an API key.
func carriesAPIKey(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if tok, err := identity.ParseBearer(v); err == nil && strings.HasPrefix(tok, identity.APIKeyPrefix) {
			return true
		}
	}
	return false
}

// clipHeader keeps a header echoed in a message short and printable.
func clipHeader(v string) string {
	var b strings.Builder
	for i := 0; i < len(v) && b.Len() < 100; i++ {
		if c := v[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
