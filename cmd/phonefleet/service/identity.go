package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"phonefleet/commands/keys"
	httpapi "phonefleet/http"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/workers"
)

// identityProjections are the read models of API keys and OAuth verification.
func identityProjections() []projections.Projection {
	return []projections.Projection{projections.APIKeys{}}
}

// wireIdentity prepares API keys and OAuth verification: the authenticator,
// the key-management routes, CORS, discovery and (hosted) the shared rate
// limiter with its sweeper.
//
// In local mode without OAuth the unauthenticated local operator is a
// signed-in session for key management (domain.Auth.IsSession), so a local
// user can mint narrowed keys for an MCP client.
func (a *App) wireIdentity(ctx context.Context) error {
	pepper, path, err := identity.LoadOrCreatePepper(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("API key pepper: %w", err)
	}
	hasher, err := identity.NewHasher(pepper)
	if err != nil {
		return fmt.Errorf("API key pepper %s: %w", path, err)
	}
	if err := a.checkPepper(ctx, hasher, path); err != nil {
		return err
	}
	reader := projections.APIKeyReader{DB: a.db.Pool}
	auth := &identity.Authenticator{
		Mode:       a.cfg.Mode,
		LocalOrgID: a.orgID,
		DevToken:   a.cfg.DevToken,
		Keys:       &identity.KeyVerifier{Lookup: reader, Hasher: hasher},
	}
	hosted := a.cfg.Mode == "hosted"
	if a.cfg.OAuthIssuer != "" && a.cfg.OAuthJWKSURL != "" {
		var roles *identity.RoleClient
		if a.cfg.OAuthRoleURL != "" {
			roles = &identity.RoleClient{URL: a.cfg.OAuthRoleURL}
		}
		// The key set is refreshed in the background until ctx ends (for
		// serve, until shutdown); an unknown key id refreshes it on demand.
		auth.OAuth, err = identity.NewOAuthVerifier(ctx, identity.OAuthConfig{
			Issuer:            a.cfg.OAuthIssuer,
			JWKSURL:           a.cfg.OAuthJWKSURL,
			Audience:          a.cfg.PublicURL + "/mcp",
			FirstPartyClients: a.cfg.FirstPartyClients(),
			Roles:             roles,
		})
		if err != nil {
			return err
		}
	}
	if hosted {
		auth.Bindings = &identity.Bindings{Store: a.store}
	}
	a.deps.Auth = auth

	a.capabilities.APIKeys = &keys.Keys{Deps: keys.APIKeyDeps{Store: a.store, ReadModels: a.runner},
		Hasher: hasher, Grace: a.cfg.KeyRotationGrace, Reader: reader}
	a.deps.Console = httpapi.ConsoleDeps{Issuer: a.cfg.OAuthIssuer, ClientID: a.cfg.ConsoleClientID}
	a.deps.Identity = httpapi.IdentityDeps{PublicURL: a.cfg.PublicURL, CORSOrigins: a.cfg.Origins(),
		IdentityWebhookSecret: a.cfg.IdentityWebhookSecret}
	if hosted {
		limiter := &identity.RateLimiter{DB: a.db.Pool}
		a.deps.Identity.Issuer = a.cfg.OAuthIssuer
		a.deps.Identity.RateLimiter = limiter
		a.deps.Identity.RateLimitAuthenticated = a.cfg.RateLimitAuthenticated
		a.deps.Identity.RateLimitAnonymous = a.cfg.RateLimitAnonymous
		a.workers = append(a.workers, workers.Sweep[struct{}]{Worker: "rate-limits", Interval: time.Minute, Logger: a.logger,
			Pass: func(ctx context.Context) (struct{}, error) { return struct{}{}, limiter.Sweep(ctx) }}.Run)
	}
	return nil
}

// checkPepper makes every instance on one database hold the same pepper:
// the first records its fingerprint; one holding another refuses to start,
// since it would refuse every key minted elsewhere.
func (a *App) checkPepper(ctx context.Context, h *identity.Hasher, path string) error {
	var recorded string
	err := a.db.Pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO identity_settings (name, value) VALUES ('api_key_pepper', $1) ON CONFLICT (name) DO NOTHING RETURNING value)
		SELECT value FROM ins UNION ALL SELECT value FROM identity_settings WHERE name = 'api_key_pepper' LIMIT 1`,
		h.Fingerprint()).Scan(&recorded)
	if err != nil {
		return fmt.Errorf("API key pepper: %w", err)
	}
	if recorded != h.Fingerprint() {
		return errors.New("API key pepper: " + path + " differs from the pepper this database's keys were minted with; " +
			"copy that file from an instance already serving this database")
	}
	return nil
}
