package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ClusterID returns the deployment's name on the message bus: 12 hex
// characters in table cluster_identity, written by the first instance to
// ask (the others, and later starts, read what it wrote). It is not
// written by the migration, so that every database, test databases cloned
// from one template among them, gets its own. Errors are the database's.
func ClusterID(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	if _, err := pool.Exec(ctx, `INSERT INTO cluster_identity (id, cluster_id) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`,
		hex.EncodeToString(b[:])); err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT cluster_id FROM cluster_identity WHERE id = 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	return id, nil
}

// clusterKeyLabel names what the key ClusterSecret derives is for.
const clusterKeyLabel = "phonefleet cluster key v2"

// ClusterSecret returns the key the instances of the deployment sign
// their calls and replies with (Config.Secret): HMAC-SHA-256 under pepper
// (the server pepper every instance holds) of a label and 32 random bytes
// in table cluster_secret, written by the first instance to ask, as
// ClusterID is. Reading it takes both the database and the pepper file.
// Errors are the database's.
func ClusterSecret(ctx context.Context, pool *pgxpool.Pool, pepper []byte) ([]byte, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	if _, err := pool.Exec(ctx, `INSERT INTO cluster_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`,
		b[:]); err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	var shared []byte
	if err := pool.QueryRow(ctx, `SELECT secret FROM cluster_secret WHERE id = 1`).Scan(&shared); err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	m := hmac.New(sha256.New, pepper)
	m.Write([]byte(clusterKeyLabel))
	m.Write(shared)
	return m.Sum(nil), nil
}
