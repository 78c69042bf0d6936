package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url   string
		path  string
		table string
		busy  time.Duration
	}{
		{"sqlite:tenure.db", "tenure.db", "", 0},
		{"sqlite:state/tenure.db", "state/tenure.db", "", 0},
		{"sqlite:/var/lib/tenure.db", "/var/lib/tenure.db", "", 0},
		{"sqlite:///var/lib/tenure.db", "/var/lib/tenure.db", "", 0},
		{"SQLITE:///var/lib/tenure.db", "/var/lib/tenure.db", "", 0},
		{"sqlite:///tmp/a%3Fb.db?table=jobs", "/tmp/a?b.db", "jobs", 0},
		{"sqlite:a%23b.db?busy_timeout=250ms&table=t2", "a#b.db", "t2", 250 * time.Millisecond},
	}
	for _, c := range good {
		path, opts, err := ParseURL(c.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if path != c.path || opts.Table != c.table || opts.BusyTimeout != c.busy {
			t.Errorf("ParseURL(%q) = %q, %+v; want %q, table %q, busy %v", c.url, path, opts, c.path, c.table, c.busy)
		}
	}
	bad := []string{
		"sqlite:",
		"sqlite://",
		"sqlite://relative/x.db", // a host: ambiguous, rejected
		"sqlite://localhost/x.db",
		"sqlite://user:hunter2@host/x.db",
		"postgres:///x.db",
		"tenure.db",
		"sqlite:x.db?table=bad-name",
		"sqlite:x.db?busy_timeout=5",
		"sqlite:x.db?busy_timeout=-1s",
		"sqlite:x.db?mode=ro",
		"sqlite:x.db?table=a&table=b",
		"sqlite:x.db#frag",
	}
	for _, u := range bad {
		_, _, err := ParseURL(u)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted", u)
			continue
		}
		if !errors.Is(err, store.ErrInvalidURL) && !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidURL or ErrInvalidName", u, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q): error %q shows the password", u, err)
		}
	}
}

func TestOpenURLOpensTheNamedFileAndTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "via-url.db")
	s, err := OpenURL(context.Background(), "sqlite://"+filepath.ToSlash(path)+"?table=url_leases")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != path || s.table != "url_leases" {
		t.Fatalf("opened %q table %q", s.Path(), s.table)
	}
}
