package postgres

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func TestWatchEndsWhenItsConnectionBreaks(t *testing.T) {
	s := tables.New(t)
	ch, err := s.Watch(testenv.Context(t), "")
	if err != nil {
		t.Fatal(err)
	}
	var killed int
	err = s.pool.QueryRow(testenv.Context(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND query = $1`, "LISTEN "+s.ident).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listening backends: %v", killed, err)
	}
	testenv.WaitClosed(t, ch)
}

func TestWatchDoesNotTakeAConnectionFromThePool(t *testing.T) {
	s := tables.New(t)
	for range s.pool.Config().MaxConns + 1 {
		if _, err := s.Watch(testenv.Context(t), ""); err != nil {
			t.Fatal(err)
		}
	}
	testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)
}
