package storetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// BenchOwner owns every term the benchmarks make.
const BenchOwner = "bench-owner"

// BenchHarness tells the benchmarks how to drive one backend. Run them
// with go test -run '^$' -bench . -benchtime 5x.
type BenchHarness struct {
	// New returns an empty store, isolated as Harness.New's are.
	New func(b *testing.B) store.Store

	// Fill gives owner n live terms in s, of at least TTL, fast (a few
	// statements instead of n acquisitions), and returns them as renewal
	// items with Running true. Nil means n acquisitions through
	// Store.Acquire, sixteen at a time.
	Fill func(b *testing.B, s store.Store, owner string, n int) []store.RenewItem

	// Renewals are other ways of renewing the same terms, set against
	// Store.Renew by [BenchRenew]. "naive" is one statement and round trip
	// per key, as the reference design renews; without it, one Store.Renew
	// per key stands in.
	Renewals map[string]Renewal

	// TTL of the terms the benchmarks make and renew. Zero means an hour.
	TTL time.Duration
}

// A Renewal prepares, outside the timer, a way of renewing items of owner
// in s, and returns one round of it: a call that renews every item once
// and fails when one is not renewed.
type Renewal func(b *testing.B, s store.Store, owner string, items []store.RenewItem) (round func(ctx context.Context) error)

func (h BenchHarness) ttl() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return time.Hour
}

func (h BenchHarness) fill(b *testing.B, s store.Store, n int) []store.RenewItem {
	b.Helper()
	if h.Fill != nil {
		return h.Fill(b, s, BenchOwner, n)
	}
	items := make([]store.RenewItem, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key := fmt.Sprintf("bench/%06d", i+1)
			res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: BenchOwner, TTL: h.ttl(), Grace: time.Second, Running: true})
			if err == nil && !res.Acquired {
				err = fmt.Errorf("refused, held by %+v", res.Holder)
			}
			if err != nil {
				errs <- fmt.Errorf("fill: acquire %s: %w", key, err)
				return
			}
			items[i] = store.RenewItem{Key: key, Epoch: res.Epoch, Running: true}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return items
}

// BenchRenew times one renewal round of every term a process holds, for
// 1,000 and 10,000 terms: the harness's Renewals, "naive", then "store",
// Store.Renew (after one untimed round, so a store that binds a batch on
// first sight is timed in its steady state). Each reports µs/key.
func BenchRenew(b *testing.B, h BenchHarness) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := h.New(b)
			items := h.fill(b, s, n)
			// The harness's own rounds first, on the terms as Fill left
			// them; Store.Renew last, as it may regroup them.
			rounds := maps.Clone(h.Renewals)
			names := slices.Sorted(maps.Keys(rounds))
			if rounds == nil {
				rounds = map[string]Renewal{}
			}
			if _, ok := rounds["naive"]; !ok {
				rounds["naive"] = h.perKeyRound
				names = append(names, "naive")
			}
			rounds["store"] = h.storeRound
			names = append(names, "store")
			for _, name := range names {
				b.Run(name, func(b *testing.B) {
					round := rounds[name](b, s, BenchOwner, items)
					ctx := context.Background()
					for b.Loop() {
						if err := round(ctx); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
				})
			}
		})
	}
}

func (h BenchHarness) storeRound(b *testing.B, s store.Store, owner string, items []store.RenewItem) func(context.Context) error {
	round := func(ctx context.Context) error {
		ok, err := s.Renew(ctx, owner, h.ttl(), items)
		if err != nil {
			return err
		}
		for i, renewed := range ok {
			if !renewed {
				return fmt.Errorf("%s was not renewed", items[i].Key)
			}
		}
		return nil
	}
	if err := round(context.Background()); err != nil {
		b.Fatal(err)
	}
	return round
}

func (h BenchHarness) perKeyRound(_ *testing.B, s store.Store, owner string, items []store.RenewItem) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, it := range items {
			ok, err := s.Renew(ctx, owner, h.ttl(), []store.RenewItem{it})
			if err != nil {
				return err
			}
			if !ok[0] {
				return fmt.Errorf("%s was not renewed", it.Key)
			}
		}
		return nil
	}
}

// BenchAcquire times Store.Acquire of a key never seen ("free"), of its
// own live key again ("own-key-again", a new term) and of a key a peer
// holds ("held-by-peer", refused).
func BenchAcquire(b *testing.B, h BenchHarness) {
	ctx := context.Background()
	acquire := func(b *testing.B, s store.Store, key, owner string, want bool) {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: owner, TTL: h.ttl(), Grace: time.Second})
		if err != nil || res.Acquired != want {
			b.Fatalf("Acquire(%q, %q) = %+v, %v; want acquired %t", key, owner, res, err, want)
		}
	}
	b.Run("free", func(b *testing.B) {
		s := h.New(b)
		acquire(b, s, "warm-up", "a", true)
		i := 0
		for b.Loop() {
			i++
			acquire(b, s, fmt.Sprintf("free/%d", i), "a", true)
		}
	})
	b.Run("own-key-again", func(b *testing.B) {
		s := h.New(b)
		acquire(b, s, "mine", "a", true)
		for b.Loop() {
			acquire(b, s, "mine", "a", true)
		}
	})
	b.Run("held-by-peer", func(b *testing.B) {
		s := h.New(b)
		acquire(b, s, "held", "a", true)
		for b.Loop() {
			acquire(b, s, "held", "b", false)
		}
	})
}

// BenchList times a List of n live terms, as the engine reads the whole
// table every round to learn who leads each key.
func BenchList(b *testing.B, h BenchHarness, n int) {
	s := h.New(b)
	items := h.fill(b, s, n)
	ctx := context.Background()
	// Stores that keep a batch's terms together do so from the first
	// renewal on, which is how a running engine's terms sit.
	if _, err := s.Renew(ctx, BenchOwner, h.ttl(), items); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ls, err := s.List(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) != n || !ls[0].Live {
			b.Fatalf("listed %d leases, want %d live ones", len(ls), n)
		}
	}
}

// ReportQuantiles reports the median and the 99th percentile of a
// benchmark's samples, in milliseconds (p50-ms, p99-ms).
func ReportQuantiles(b *testing.B, ds []time.Duration) {
	b.Helper()
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
