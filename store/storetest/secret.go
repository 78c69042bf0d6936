package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// CheckNoSecret fails the test when err is nil or its message shows any of
// secrets: an error built from a store URL must never carry a credential.
func CheckNoSecret(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("the error shows the secret %q: %v", s, err)
		}
	}
}

// CheckOpenRefuses calls open with each URL of urls, a subtest per name,
// and checks that it fails without showing any of secrets and, when want is
// not nil, with an error that wraps want. open closes a store it managed to
// open. The errors are returned by name, for checks of their wording.
func CheckOpenRefuses(t *testing.T, open func(ctx context.Context, rawURL string) error, urls map[string]string, want error, secrets ...string) map[string]error {
	t.Helper()
	errs := make(map[string]error, len(urls))
	for name, raw := range urls {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := open(ctx, raw)
			errs[name] = err
			if err == nil {
				t.Fatal("Open worked")
			}
			CheckNoSecret(t, err, secrets...)
			if want != nil && !errors.Is(err, want) {
				t.Errorf("error %v, want one that wraps %v", err, want)
			}
			t.Log(err)
		})
	}
	return errs
}
