package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func TestKeysAreOneTo512BytesOfPrintableUTF8(t *testing.T) {
	good := []string{"k", "telegram", "Job", "job ", "mail/äccount-42", strings.Repeat("é", 256)}
	for _, k := range good {
		if err := store.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	bad := []string{"", strings.Repeat("k", 513), "a\x00b", "new\nline", "del\x7f", string([]byte{0xc3}), "\u0085"}
	for _, k := range bad {
		if err := store.ValidateKey(k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := store.ValidateOwner(k); !errors.Is(err, store.ErrInvalidOwner) {
			t.Errorf("ValidateOwner(%q) = %v, want ErrInvalidOwner", k, err)
		}
	}
}

func TestLongBadKeysAreCutInErrorMessages(t *testing.T) {
	err := store.ValidateKey(strings.Repeat("x", 10000))
	if len(err.Error()) > 200 {
		t.Fatalf("error message of %d bytes", len(err.Error()))
	}
}

func TestNamesArePlainIdentifiers(t *testing.T) {
	for _, n := range []string{"tenure_leases", "_x", "T1", strings.Repeat("a", 63)} {
		if err := store.ValidateName("table", n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "1abc", "a-b", "x; drop table y", "a.b", `a"b`, strings.Repeat("a", 64)} {
		if err := store.ValidateName("table", n); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
}

func TestAcquireRequestsNeedAPositiveTTLAndNoNegativeGrace(t *testing.T) {
	base := store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second}
	if err := store.ValidateAcquire(base); err != nil {
		t.Fatal(err)
	}
	if err := store.ValidateAcquire(store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second, MaxElapsed: time.Second - 1}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []store.AcquireRequest{
		{Key: "k", Owner: "o", TTL: 0},
		{Key: "k", Owner: "o", TTL: time.Microsecond},
		{Key: "k", Owner: "o", TTL: time.Second, Grace: -1},
		{Key: "k", Owner: "o", TTL: time.Second, MaxElapsed: -1},
		{Key: "k", Owner: "o", TTL: time.Second, MaxElapsed: time.Second}, // a term dated a whole TTL back is over
	} {
		if err := store.ValidateAcquire(req); !errors.Is(err, store.ErrInvalidDuration) {
			t.Errorf("ValidateAcquire(%+v) = %v, want ErrInvalidDuration", req, err)
		}
	}
}
