package redis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

const unit = 200 * time.Millisecond

func TestFirstEpochIsAtLeastTheServerClockInMicroseconds(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	epoch := testenv.MustAcquire(t, s, "job", "a", unit, unit)
	if epoch < now.UnixMicro() {
		t.Fatalf("epoch %d is below server time %d µs", epoch, now.UnixMicro())
	}
	if epoch > now.UnixMicro()+int64(time.Minute/time.Microsecond) {
		t.Fatalf("epoch %d is far ahead of server time %d µs", epoch, now.UnixMicro())
	}
}

func TestOwnersMayHoldCommasAndSpaces(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const owner = "host-1, pid 42,0,1,"
	epoch := testenv.MustAcquire(t, s, "job", owner, time.Minute, 0)
	got, err := s.Renew(ctx, owner, time.Minute, []store.RenewItem{{Key: "job", Epoch: epoch, Running: true}})
	if err != nil || !got[0] {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	leases, _ := s.List(ctx, "")
	if len(leases) != 1 || leases[0].Owner != owner || !leases[0].Running {
		t.Fatalf("List = %+v, want owner %q running", leases, owner)
	}
}

func TestLargeBatchesRenewAndReleaseEveryTerm(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	n := 2*maxBatch + 7 // three script calls in one pipeline
	items := make([]store.RenewItem, n)
	terms := make([]store.Term, n)
	for i := range n {
		key := fmt.Sprintf("k%05d", i)
		epoch := testenv.MustAcquire(t, s, key, "me", time.Minute, time.Minute)
		if i%3 == 0 {
			epoch++ // every third is stale
		}
		items[i] = store.RenewItem{Key: key, Epoch: epoch}
		terms[i] = store.Term{Key: key, Epoch: epoch}
	}
	// The pipeline path must survive a server that lost its script cache.
	if err := s.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Renew(ctx, "me", time.Minute, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range got {
		if ok != (i%3 != 0) {
			t.Fatalf("item %d renewed = %v, want %v", i, ok, i%3 != 0)
		}
	}
	if err := s.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "me", terms); err != nil {
		t.Fatal(err)
	}
	leases, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		if l.Released != (i%3 != 0) {
			t.Fatalf("lease %s released = %v, want %v", l.Key, l.Released, i%3 != 0)
		}
	}
}

func TestListReadsEveryPageOfALargeNamespace(t *testing.T) {
	s := newTestStore(t)
	s.listPage = 3
	var want []string
	for _, i := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 10} {
		key := fmt.Sprintf("p/%02d", i)
		testenv.MustAcquire(t, s, key, "a", time.Minute, 0)
		want = append(want, key)
	}
	testenv.MustAcquire(t, s, "q", "a", time.Minute, 0)
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"p/", want},      // 3+3+3+1
		{"p/0", want[:9]}, // exactly three full pages
		{"", append(slices.Clone(want), "q")},
	} {
		leases, err := s.List(testenv.Context(t), tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range leases {
			got = append(got, l.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) in pages of 3 = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func TestNamespacesMustBePlainIdentifiers(t *testing.T) {
	s := newTestStore(t)
	testenv.CheckBadNamesAreRefused(t, func(name string) error {
		_, err := New(s.client, Options{Namespace: name})
		return err
	})
}

func TestNamespacesAreIsolatedAndShareOneHashSlotEach(t *testing.T) {
	a := newTestStore(t)
	b := newTestStore(t)
	testenv.MustAcquire(t, a, "job", "x", time.Minute, 0)
	testenv.MustAcquire(t, b, "job", "y", time.Minute, 0)
	la, _ := a.List(testenv.Context(t), "")
	if len(la) != 1 || la[0].Owner != "x" {
		t.Fatalf("namespace a sees %+v", la)
	}
	for _, name := range append(slices.Clone(a.keys), a.channel) {
		if !strings.HasPrefix(name, "{"+a.namespace+"}:") {
			t.Errorf("%q lacks the hash tag {%s}", name, a.namespace)
		}
	}
}
