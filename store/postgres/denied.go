package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenure-dev/tenure/store"
)

// denied marks as store.ErrDenied the errors by which PostgreSQL refuses
// credentials or rights: class 28 (invalid authorization), 42501
// (insufficient privilege: no CREATE on the schema, no grant on the
// table), 3D000 (no such database) and 3F000 (no such schema).
func denied(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch c := pgErr.Code; {
		case strings.HasPrefix(c, "28"), c == "42501", c == "3D000", c == "3F000":
			return store.Denied(err)
		}
	}
	return err
}
