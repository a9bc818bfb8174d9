package httpapi

import (
	"net/http"

	"phonefleet/domain"
)

// Authenticator resolves a request's credential to the one authorization
// context of spec 5. A refusal is a *domain.Error: unauthorized (with a
// reason), permission_denied, or a 503 when the authentication
// infrastructure cannot answer.
type Authenticator interface {
	Authenticate(r *http.Request) (domain.Auth, error)
}

// authenticate puts the request's authorization context on its context, or
// answers the refusal.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := s.auth.Authenticate(r)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(domain.WithAuth(r.Context(), a)))
	})
}

// localOperator is the authenticator of a local deployment without
// identity configured: every request is the local operator (spec 5.7).
type localOperator struct{ orgID string }

func (l localOperator) Authenticate(*http.Request) (domain.Auth, error) {
	return domain.LocalOperator(l.orgID), nil
}

// authOf returns the request's authorization context; routes under /v1
// always have one (authenticate put it there).
func authOf(r *http.Request) domain.Auth {
	a, _ := domain.AuthFrom(r.Context())
	return a
}
