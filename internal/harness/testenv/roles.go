package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresWithoutRights returns the test PostgreSQL server's URL for the
// role tenure_norights, which may log in and do nothing else (PostgreSQL 15
// grants no CREATE on schema public), creating the role if need be.
func PostgresWithoutRights(t testing.TB) string {
	t.Helper()
	base := Postgres.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Tests in other packages may create it at the same time.
	if _, err := conn.Exec(ctx, `DO $$BEGIN CREATE ROLE tenure_norights LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END$$`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("tenure_norights")
	return u.String()
}
