package poolkey_test

import (
	"errors"
	"math"
	"testing"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
)

func TestKeysAndMembershipsReadBackAsWritten(t *testing.T) {
	for _, prefix := range []string{"", "app/", "team.x:"} {
		k := poolkey.Key(prefix, "mail", "b/with/slashes@and~tilde")
		p, pool, key, ok := poolkey.ParseKey(k)
		if !ok || p != prefix || pool != "mail" || key != "b/with/slashes@and~tilde" {
			t.Errorf("ParseKey(%q) = %q %q %q %v", k, p, pool, key, ok)
		}
		for _, limit := range []int{0, 1, 250} {
			m := poolkey.Member{Prefix: prefix, Pool: "mail", Owner: "ops@host:12#0badcafe", Weight: 2.5, MaxKeys: limit}
			got, err := poolkey.ParseMember(m.Key())
			if err != nil || got != m {
				t.Errorf("ParseMember(%q) = %+v, %v; want %+v", m.Key(), got, err, m)
			}
		}
		m := poolkey.Member{Prefix: prefix, Pool: "mail", Owner: "ops@host:12#0badcafe", Weight: 2.5}
		if _, _, _, ok := poolkey.ParseKey(m.Key()); ok {
			t.Errorf("a membership key %q parsed as a pool key", m.Key())
		}
		if _, err := poolkey.ParseMember(k); !errors.Is(err, poolkey.ErrNotMember) {
			t.Errorf("a pool key %q parsed as a membership: %v", k, err)
		}
	}
}

func TestAMembershipWithABadWeightIsRefused(t *testing.T) {
	for _, w := range []string{"inf", "+Inf", "-1", "0", "NaN", "1e400", "x", ""} {
		key := poolkey.WorkersSegment + "mail/peer#01234567@" + w
		if m, err := poolkey.ParseMember(key); err == nil {
			t.Errorf("ParseMember(%q) accepted weight %v", key, m.Weight)
		}
	}
	for _, limit := range []string{"0", "-1", "+5", "1.5", "x", "", "1e3", "99999999999999999999", "5,max=6"} {
		key := poolkey.WorkersSegment + "mail/peer#01234567@1,max=" + limit
		if m, err := poolkey.ParseMember(key); err == nil {
			t.Errorf("ParseMember(%q) accepted key limit %d", key, m.MaxKeys)
		}
	}
	for _, w := range []float64{math.Inf(1), math.NaN(), 0, -2} {
		if poolkey.ValidWeight(w) {
			t.Errorf("ValidWeight(%v) = true", w)
		}
	}
}

// A worker without a key limit writes the key older versions wrote, so
// that a rollout that sets no limit mixes versions unharmed.
func TestAMembershipWithoutAKeyLimitKeepsTheOlderForm(t *testing.T) {
	m := poolkey.Member{Pool: "mail", Owner: "host:12#0badcafe", Weight: 1}
	if got, want := m.Key(), poolkey.WorkersSegment+"mail/host:12#0badcafe@1"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
	m.MaxKeys = 8
	if got, want := m.Key(), poolkey.WorkersSegment+"mail/host:12#0badcafe@1,max=8"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
}

func TestSingletonKeysAreNeverTakenForPoolKeys(t *testing.T) {
	for _, key := range []string{"telegram", "a~b", "~", "x~pool", "nightly~workers"} {
		if _, _, _, ok := poolkey.ParseKey(key); ok {
			t.Errorf("%q parsed as a pool key", key)
		}
		if _, err := poolkey.ParseMember(key); err == nil {
			t.Errorf("%q parsed as a membership", key)
		}
		if poolkey.Reserved(key) {
			t.Errorf("%q is reserved", key)
		}
	}
	for _, key := range []string{"~pool/x/y", "a~workers/p/o@1", "z~pool/"} {
		if !poolkey.Reserved(key) {
			t.Errorf("%q is not reserved", key)
		}
	}
}
