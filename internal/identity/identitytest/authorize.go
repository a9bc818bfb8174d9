package identitytest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The authorization side of the fake provider: what a browser sign-in
// needs (authorization code + PKCE S256, RFC 6749, 7636, 8414, 8707).
//
//   - GET /.well-known/oauth-authorization-server: the metadata document
//     (any origin may read it).
//   - GET /authorize: checks the client, its redirect URI and the PKCE
//     challenge, then shows a one-click page ("Continue as …") for the
//     person SignInAs configured, or with AutoApprove redirects at once;
//     POST /authorize is that page's button.
//   - POST /token: the authorization-code grant. The code is single-use
//     and short-lived, bound to the client, the redirect URI, the
//     challenge and the resource; the answer is a console token for the
//     person (azp is the client id, org_id and org_role as Console makes)
//     with the resource as its audience and the person's auth_time. A page
//     whose origin is one of a registered redirect URI's may read the
//     answer (CORS).
//
// The provider keeps one session for the person: when they last
// authenticated. A sign-in reuses it (its auth_time is the session's),
// unless the request asks for a fresh identity check (OpenID Connect Core
// 1.0, 3.1.2.1): prompt=login, or max_age seconds the session is older
// than (max_age=0 always); then the person authenticates again at the
// approval and the session, and the token's auth_time, become that moment.
// The first sign-in of a person starts the session. SetAuthTime backdates
// it (a test's identity check made long ago).

// codeLifetime is how long an authorization code may be exchanged.
const codeLifetime = time.Minute

// tokenLifetime is the issued access token's lifetime (Claims makes an
// hour).
const tokenLifetime = time.Hour

// Person is whom the authorization endpoint signs in: a person (sub) in an
// organisation with a role (admin or member).
type Person struct {
	Sub, Org, Role string
}

// authorizer is the state of the authorization endpoints.
type authorizer struct {
	mu      sync.Mutex
	clients map[string][]string // public client id → its exact redirect URIs
	person  *Person
	codes   map[string]*grant
	issued  []string
	clock   func() time.Time // nil: time.Now
	// authTime is when the person last authenticated (the session); zero
	// until the first sign-in.
	authTime time.Time
}

// grant is one authorization code's binding.
type grant struct {
	clientID, redirectURI, challenge, resource, scope string
	person                                            Person
	expires                                           time.Time
	// authTime is when the person authenticated (the token's auth_time).
	authTime time.Time
}

// RegisterClient registers a public OAuth client (no secret; PKCE is
// required) with the exact redirect URIs it may use.
func (p *IdP) RegisterClient(clientID string, redirectURIs ...string) {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	if p.authz.clients == nil {
		p.authz.clients = map[string][]string{}
	}
	p.authz.clients[clientID] = append(p.authz.clients[clientID], redirectURIs...)
}

// SignInAs makes the authorization endpoint sign in sub as role in org;
// until it is called, every sign-in is refused with access_denied.
func (p *IdP) SignInAs(sub, org, role string) {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	p.authz.person = &Person{Sub: sub, Org: org, Role: role}
}

// SetAuthTime sets when the person last authenticated at the provider:
// the auth_time of the next sign-ins that ask for no fresh identity check
// (zero: the next sign-in authenticates afresh).
func (p *IdP) SetAuthTime(at time.Time) {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	p.authz.authTime = at
}

// AuthTime returns when the person last authenticated (zero: not yet).
func (p *IdP) AuthTime() time.Time {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	return p.authz.authTime
}

// Issued returns every access token the token endpoint has issued, oldest
// first.
func (p *IdP) Issued() []string {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	return slices.Clone(p.authz.issued)
}

// AuthorizationEndpoint is where a browser is sent to sign in.
func (p *IdP) AuthorizationEndpoint() string { return p.Issuer + "/authorize" }

// TokenEndpoint is where a code is exchanged for a token.
func (p *IdP) TokenEndpoint() string { return p.Issuer + "/token" }

// MetadataURL is the RFC 8414 metadata document's address.
func (p *IdP) MetadataURL() string { return p.Issuer + "/.well-known/oauth-authorization-server" }

// SetClock sets the clock of authorization codes and issued tokens (nil:
// time.Now), so a test can let a code expire without waiting.
func (p *IdP) SetClock(now func() time.Time) {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	p.authz.clock = now
}

func (p *IdP) now() time.Time {
	p.authz.mu.Lock()
	clock := p.authz.clock
	p.authz.mu.Unlock()
	if clock != nil {
		return clock()
	}
	return time.Now()
}

// routeAuthorize mounts the authorization side on the provider's mux.
func (p *IdP) routeAuthorize(mux *http.ServeMux) {
	mux.HandleFunc("/.well-known/oauth-authorization-server", p.serveMetadata)
	mux.HandleFunc("/authorize", p.serveAuthorize)
	mux.HandleFunc("/token", p.serveToken)
}

func (p *IdP) serveMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "GET")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                         p.Issuer,
		"authorization_endpoint":                         p.AuthorizationEndpoint(),
		"token_endpoint":                                 p.TokenEndpoint(),
		"jwks_uri":                                       p.JWKSURL,
		"response_types_supported":                       []string{"code"},
		"grant_types_supported":                          []string{"authorization_code"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"scopes_supported":                               []string{"openid", "profile"},
		"authorization_response_iss_parameter_supported": true,
	})
}

// authorizeRequest is an authorization request's parameters (from the
// query of GET, or the one-click form of POST).
type authorizeRequest struct {
	ResponseType, ClientID, RedirectURI, Challenge, Method, State, Resource, Scope string
	// MaxAge and Prompt ask for a fresh identity check (OpenID Connect
	// Core 1.0, 3.1.2.1): the allowed seconds since the person last
	// authenticated, and a space-separated list that may hold "login".
	MaxAge, Prompt string
}

func readAuthorizeRequest(v url.Values) authorizeRequest {
	return authorizeRequest{ResponseType: v.Get("response_type"), ClientID: v.Get("client_id"),
		RedirectURI: v.Get("redirect_uri"), Challenge: v.Get("code_challenge"), Method: v.Get("code_challenge_method"),
		State: v.Get("state"), Resource: v.Get("resource"), Scope: v.Get("scope"),
		MaxAge: v.Get("max_age"), Prompt: v.Get("prompt")}
}

// maxAgeShape is max_age: a non-negative number of seconds.
var maxAgeShape = regexp.MustCompile(`^[0-9]{1,9}$`)

// reauthenticate reports whether req asks the person to authenticate
// again, given when they last did (zero: never).
func (req authorizeRequest) reauthenticate(last, now time.Time) bool {
	if last.IsZero() || slices.Contains(strings.Fields(req.Prompt), "login") {
		return true
	}
	if req.MaxAge == "" {
		return false
	}
	secs, _ := strconv.Atoi(req.MaxAge)
	return now.Sub(last) >= time.Duration(secs)*time.Second
}

// challengeShape is an S256 challenge: 32 bytes, base64url without padding.
var challengeShape = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// verifierShape is RFC 7636's code_verifier.
var verifierShape = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

func (p *IdP) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	p.AuthorizeHits.Add(1)
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	values := r.URL.Query()
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "unreadable form", http.StatusBadRequest)
			return
		}
		values = r.PostForm
	}
	req := readAuthorizeRequest(values)

	// Until the client and its redirect URI are known, nothing may be sent
	// to that URI (RFC 6749 4.1.2.1): the answer is the provider's own.
	p.authz.mu.Lock()
	uris, known := p.authz.clients[req.ClientID]
	person := p.authz.person
	p.authz.mu.Unlock()
	if !known {
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	}
	if !slices.Contains(uris, req.RedirectURI) {
		http.Error(w, "redirect_uri is not registered for this client", http.StatusBadRequest)
		return
	}
	back := func(params url.Values) {
		if req.State != "" {
			params.Set("state", req.State)
		}
		iss := p.Issuer // RFC 9207
		if other := p.ImpersonatedIssuer.Load(); other != nil {
			iss = *other
		}
		params.Set("iss", iss)
		u, _ := url.Parse(req.RedirectURI)
		q := u.Query()
		for k, v := range params {
			q[k] = v
		}
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
	}
	refuse := func(code, description string) {
		back(url.Values{"error": {code}, "error_description": {description}})
	}
	switch {
	case req.ResponseType != "code":
		refuse("unsupported_response_type", "only the authorization code flow is served")
		return
	case req.Challenge == "" || req.Method != "S256":
		refuse("invalid_request", "PKCE with code_challenge_method S256 is required")
		return
	case !challengeShape.MatchString(req.Challenge):
		refuse("invalid_request", "code_challenge is not an S256 challenge")
		return
	case req.Resource == "":
		refuse("invalid_target", "name the resource the token is for (resource)")
		return
	case req.MaxAge != "" && !maxAgeShape.MatchString(req.MaxAge):
		refuse("invalid_request", "max_age is not a number of seconds")
		return
	}
	if u, err := url.Parse(req.Resource); err != nil || !u.IsAbs() || u.Fragment != "" {
		refuse("invalid_target", "resource must be an absolute URI without a fragment")
		return
	}
	if person == nil {
		refuse("access_denied", "no one is signed in at this provider")
		return
	}
	if r.Method == http.MethodPost && values.Get("decision") != "allow" {
		refuse("access_denied", "the person declined")
		return
	}
	if r.Method == http.MethodGet && !p.AutoApprove.Load() {
		p.showConsent(w, req, *person)
		return
	}
	now := p.now()
	code, expires := randomToken(), now.Add(codeLifetime)
	p.authz.mu.Lock()
	if p.authz.codes == nil {
		p.authz.codes = map[string]*grant{}
	}
	// The approval is where the person authenticates: asked for a fresh
	// identity check (or signing in for the first time), the session
	// starts now.
	if req.reauthenticate(p.authz.authTime, now) {
		p.authz.authTime = now.Truncate(time.Second)
	}
	p.authz.codes[code] = &grant{clientID: req.ClientID, redirectURI: req.RedirectURI, challenge: req.Challenge,
		resource: req.Resource, scope: req.Scope, person: *person, expires: expires, authTime: p.authz.authTime}
	p.authz.mu.Unlock()
	back(url.Values{"code": {code}})
}

var consentPage = template.Must(template.New("consent").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in — test identity provider</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem">
<h1>Sign in</h1>
<p>The test identity provider at {{.Issuer}} signs you in to <strong>{{.Req.ClientID}}</strong>
as <strong id="person">{{.Person.Sub}}</strong>, {{.Person.Role}} of <strong id="org">{{.Person.Org}}</strong>.</p>
{{if .Fresh}}<p id="reauthenticate">{{.Req.ClientID}} asks you to confirm your identity again: continuing counts as a fresh sign-in.</p>
{{end}}<form method="post" action="/authorize">
{{range $k, $v := .Fields}}<input type="hidden" name="{{$k}}" value="{{$v}}">
{{end}}<button type="submit" name="decision" value="allow" id="allow">Continue as {{.Person.Sub}}</button>
<button type="submit" name="decision" value="deny" id="deny">Cancel</button>
</form></body></html>
`))

// showConsent renders the one-click sign-in page; its buttons post the
// request back with the person's decision.
func (p *IdP) showConsent(w http.ResponseWriter, req authorizeRequest, person Person) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = consentPage.Execute(w, map[string]any{
		"Issuer": p.Issuer, "Req": req, "Person": person, "Fresh": req.reauthenticate(p.AuthTime(), p.now()),
		"Fields": map[string]string{"response_type": req.ResponseType, "client_id": req.ClientID,
			"redirect_uri": req.RedirectURI, "code_challenge": req.Challenge, "code_challenge_method": req.Method,
			"state": req.State, "resource": req.Resource, "scope": req.Scope, "max_age": req.MaxAge, "prompt": req.Prompt},
	})
}

// tokenError answers the token endpoint's refusal (RFC 6749 5.2).
func tokenError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

func (p *IdP) serveToken(w http.ResponseWriter, r *http.Request) {
	p.TokenHits.Add(1)
	if origin := r.Header.Get("Origin"); origin != "" {
		w.Header().Add("Vary", "Origin")
		if p.registeredOrigin(origin) {
			w.Header().Set("Access-Control-Allow-Origin", origin)
		}
	}
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "POST")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		tokenError(w, http.StatusMethodNotAllowed, "invalid_request", "the token endpoint takes POST")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		tokenError(w, http.StatusBadRequest, "invalid_request", "send the parameters form-encoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	f := r.PostForm
	if f.Get("grant_type") != "authorization_code" {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "only authorization_code is served")
		return
	}
	clientID := f.Get("client_id")
	p.authz.mu.Lock()
	_, known := p.authz.clients[clientID]
	g := p.authz.codes[f.Get("code")]
	if known && g != nil {
		// A code is good for one exchange whatever its outcome: a
		// stolen code tried with a guessed verifier is spent.
		delete(p.authz.codes, f.Get("code"))
	}
	p.authz.mu.Unlock()
	switch {
	case !known:
		tokenError(w, http.StatusUnauthorized, "invalid_client", "unknown client_id")
		return
	case g == nil:
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown or already used")
		return
	case !p.now().Before(g.expires):
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the code has expired")
		return
	case g.clientID != clientID:
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the code was issued to another client")
		return
	case g.redirectURI != f.Get("redirect_uri"):
		tokenError(w, http.StatusBadRequest, "invalid_grant", "redirect_uri differs from the authorization request's")
		return
	case !verifierShape.MatchString(f.Get("code_verifier")):
		tokenError(w, http.StatusBadRequest, "invalid_request", "code_verifier is missing or malformed")
		return
	}
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(g.challenge)) != 1 {
		tokenError(w, http.StatusBadRequest, "invalid_grant", "code_verifier does not match the code_challenge")
		return
	}
	if res := f.Get("resource"); res != "" && res != g.resource {
		tokenError(w, http.StatusBadRequest, "invalid_target", "resource differs from the authorization request's")
		return
	}
	claims := p.Claims(g.resource, g.person.Sub, g.person.Org, p.now())
	claims["azp"], claims["org_role"], claims["auth_time"] = g.clientID, g.person.Role, g.authTime.Unix()
	tok, err := signClaims(p, claims)
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	p.authz.mu.Lock()
	p.authz.issued = append(p.authz.issued, tok)
	p.authz.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int(tokenLifetime / time.Second), "scope": g.scope})
}

// registeredOrigin reports whether origin is that of a registered
// redirect URI: the pages that may read the token endpoint's answers.
func (p *IdP) registeredOrigin(origin string) bool {
	p.authz.mu.Lock()
	defer p.authz.mu.Unlock()
	for _, uris := range p.authz.clients {
		for _, s := range uris {
			if u, err := url.Parse(s); err == nil && u.Scheme+"://"+u.Host == origin {
				return true
			}
		}
	}
	return false
}

// randomToken returns 32 random bytes, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// signClaims signs claims as Sign does, for a handler (which has no test
// to fail).
func signClaims(p *IdP, claims jwt.MapClaims) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = p.KID
	return tok.SignedString(p.Key)
}
