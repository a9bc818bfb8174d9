package service

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/internal/config"
	"phonefleet/projections"
	"phonefleet/workers"
)

// webhookProjections are the read models of webhook subscriptions and delivery.
func webhookProjections() []projections.Projection {
	return []projections.Projection{projections.Webhooks{}}
}

// wireWebhooks builds the webhook capability and the dispatcher's
// settings (its client trusts what the deployment's receivers may be).
func (a *App) wireWebhooks(ctx context.Context) error {
	key, err := LoadOrCreateWebhookKey(a.cfg.DataDir)
	if err != nil {
		return err
	}
	box, err := domain.NewSecretBox(key)
	if err != nil {
		return err
	}
	roots, err := webhookRootCAs(a.cfg)
	if err != nil {
		return err
	}
	policy := webhookAddressPolicy(a.cfg)
	base := webhooks.Webhooks{Store: a.store, Box: box, ReadModels: a.runner}
	a.capabilities.Webhooks = &webhooks.Capability{Webhooks: base,
		Create: webhooks.CreateWebhookHandler{Addresses: policy}, Queries: projections.WebhookQueries{DB: a.db.Pool}}
	a.webhookDispatcher = workers.WebhookDispatcherConfig{Pool: a.db.Pool, Box: box,
		Client: workers.NewWebhookClient(workers.WebhookClientOptions{Addresses: policy, RootCAs: roots}),
		Logger: a.logger.With("worker", "webhook_dispatcher")}
	return nil
}

// serveWebhooks adds the webhook dispatcher, recording each attempt
// through the application object.
func (a *App) serveWebhooks(context.Context) error {
	cfg := a.webhookDispatcher
	cfg.Record = a.app.Webhooks.RecordWebhookAttempt
	a.workers = append(a.workers, workers.NewWebhookDispatcher(cfg).Run)
	return nil
}

// webhookAddressPolicy is where receivers may be. Local mode admits
// loopback receivers (a developer's forwarder, ARCHITECTURE.md); hosted
// mode admits no private address at all, and no setting changes that.
func webhookAddressPolicy(cfg config.Config) domain.AddressPolicy {
	return domain.AddressPolicy{AllowLoopback: cfg.Mode == "local"}
}

// webhookRootCAs returns the CAs trusted for receivers: the system's, plus
// SERVICE_WEBHOOK_CA_FILE in local mode (nil means the system's alone).
func webhookRootCAs(cfg config.Config) (*x509.CertPool, error) {
	if cfg.WebhookCAFile == "" {
		return nil, nil
	}
	if cfg.Mode != "local" {
		return nil, errors.New("invalid SERVICE_WEBHOOK_CA_FILE: it is for local mode only; hosted receivers need publicly trusted certificates")
	}
	pem, err := os.ReadFile(cfg.WebhookCAFile)
	if err != nil {
		return nil, fmt.Errorf("invalid SERVICE_WEBHOOK_CA_FILE: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("invalid SERVICE_WEBHOOK_CA_FILE %s: no PEM certificate in it", cfg.WebhookCAFile)
	}
	return pool, nil
}

// WebhookKeyFile is the server key that seals webhook signing secrets,
// under SERVICE_DATA_DIR. Every instance serving one database must hold the
// same file.
const WebhookKeyFile = "webhook-secrets.key"

// LoadOrCreateWebhookKey returns the 32-byte AES-GCM key in
// dataDir/WebhookKeyFile, creating it (mode 0600, atomically, so instances
// starting together agree on one key) on first start. A key file readable
// by others is refused.
func LoadOrCreateWebhookKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, WebhookKeyFile)
	key, err := readWebhookKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, WebhookKeyFile+".*")
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	defer os.Remove(tmp.Name())
	key = make([]byte, 32)
	_, _ = rand.Read(key)
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(key)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	// Link fails if another instance created the key first: then use theirs.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	return readWebhookKey(path)
}

func readWebhookKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("webhook key %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("webhook key %s: got %d bytes; want 32", path, len(key))
	}
	return key, nil
}
