package cluster

import (
	"context"
	"crypto/rand"
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
