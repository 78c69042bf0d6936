package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/redis/
//
// Store.Renew is one script call (on the owner's session once the terms
// are on it); "naive" is one script call and round trip per key, as the
// reference coordinator renews.
var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return newTestStore(b) },
	Fill: fillHeld,
	Renewals: map[string]storetest.Renewal{
		// One owner-checked script call per key, written out by hand into a
		// single pipeline: one round trip, but Redis parses and runs a
		// script per key.
		"raw": func(b *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			if err := perRecordRenewScript.Load(context.Background(), s.client).Err(); err != nil {
				b.Fatal(err)
			}
			ttl := micros(time.Hour)
			return func(ctx context.Context) error {
				cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, it := range items {
						perRecordRenewScript.EvalSha(ctx, p, s.keys, owner, ttl, it.Key, strconv.FormatInt(it.Epoch, 10), 1)
					}
					return nil
				})
				if err == nil && len(cmds) != len(items) {
					err = fmt.Errorf("%d replies for %d items", len(cmds), len(items))
				}
				return err
			}
		},
	},
}

// fillHeld acquires n keys for owner with pipelined acquisitions.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if err := acquireScript.Load(ctx, s.client).Err(); err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, 0, n)
	for start := 0; start < n; start += 1000 {
		var keys []string
		cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := start; i < min(start+1000, n); i++ {
				key := fmt.Sprintf("bench/%06d", i+1)
				keys = append(keys, key)
				acquireScript.EvalSha(ctx, p, s.keys, key, owner, micros(time.Hour), 0, 1, s.channel, 0, newTag())
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		for i, c := range cmds {
			res, err := parseAcquire(keys[i], c.(*goredis.Cmd).Val().([]any))
			if err != nil || !res.Acquired {
				b.Fatalf("fill: acquire %s: %+v %v", keys[i], res, err)
			}
			items = append(items, store.RenewItem{Key: keys[i], Epoch: res.Epoch, Running: true})
		}
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }

// perRecordRenewScript renews each listed live term of owner on its own
// record, as Store.Renew did before sessions: the figure sessions are
// measured against.
//
//	ARGV: owner, ttl µs, then key, epoch, running 0|1 for each item
//	→ one 1 (renewed) or 0 (lost) per item
var perRecordRenewScript = goredis.NewScript(prelude + `
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_us()
local res = {}
for i = 3, #ARGV, 3 do
  local key = ARGV[i]
  local ok = 0
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    if e == ARGV[i + 1] and o == owner and not rel and now < x then
      redis.call('HSET', KEYS[1], key, encode(e, now + ttl, false, ARGV[i + 2] == '1', o))
      ok = 1
    end
  end
  res[#res + 1] = ok
end
return res
`)

// offSessions puts every record back on its own, live for ttl µs, and
// deletes every session: the state before a first renewal.
var offSessions = goredis.NewScript(prelude + `
local now = now_us()
for _, key in ipairs(redis.call('HKEYS', KEYS[1])) do
  if key ~= '' and string.byte(key, 1) ~= 0 then
    local e, x, rel, run, o = decode(key, redis.call('HGET', KEYS[1], key))
    redis.call('HSET', KEYS[1], key, encode(e, now + tonumber(ARGV[1]), rel, run, o))
  end
end
redis.call('DEL', KEYS[3])
return 1
`)

// BenchmarkRenewOnASession is a process's steady renewal, its terms on its
// session, against the script that renewed each record before sessions
// (one call per 1,000 terms, as Store.Renew sent them) and against the
// session's script alone; and List of every term, on the session and then
// on their own records. The first renewal, which puts Fill's records on
// the session term by term, is timed apart.
//
//	go test -run '^$' -bench RenewOnASession -benchtime 10x ./store/redis/
func BenchmarkRenewOnASession(b *testing.B) {
	offSession := func(b *testing.B, st store.Store) {
		s := st.(*Store)
		if err := offSessions.Run(context.Background(), s.client, s.keys, micros(time.Hour)).Err(); err != nil {
			b.Fatal(err)
		}
		s.book = sessionbook.Book{}
	}
	list := func(b *testing.B, s store.Store, items []store.RenewItem) {
		for b.Loop() {
			if ls, err := s.List(context.Background(), ""); err != nil || len(ls) != len(items) || !ls[0].Live {
				b.Fatalf("List: %d leases, %v", len(ls), err)
			}
		}
	}
	sessiontest.BenchRenewOnASession(b, sessiontest.BenchHarness{
		Open: func(b *testing.B, n int) (store.Store, []store.RenewItem) {
			s := newTestStore(b)
			return s, fillHeld(b, s, storetest.BenchOwner, n)
		},
		OffSessions: offSession,
		More: []sessiontest.BenchStep{
			{Name: "List, every term on the session", Run: list},
			{Name: "its script alone", Run: func(b *testing.B, st store.Store, items []store.RenewItem) {
				s := st.(*Store)
				f, ok := s.book.Check(storetest.BenchOwner, time.Hour, items)
				if !ok {
					b.Fatal("the Book does not know the session")
				}
				for b.Loop() {
					reply, err := renewFastScript.Run(context.Background(), s.client, s.keys, f.ID, storetest.BenchOwner, micros(time.Hour),
						f.Version.N, strconv.FormatInt(f.Version.Tag, 10), newTag(), 0).Slice()
					if err != nil || reply[0] != int64(1) {
						b.Fatal(reply, err)
					}
				}
			}},
			{Name: "per-record script", Run: func(b *testing.B, st store.Store, items []store.RenewItem) {
				s := st.(*Store)
				offSession(b, s)
				var calls [][]any
				for start := 0; start < len(items); start += maxBatch {
					args := []any{storetest.BenchOwner, micros(time.Hour)}
					for _, it := range items[start:min(start+maxBatch, len(items))] {
						args = append(args, it.Key, strconv.FormatInt(it.Epoch, 10), 1)
					}
					calls = append(calls, args)
				}
				for b.Loop() {
					if _, err := s.runBatches(context.Background(), perRecordRenewScript, calls); err != nil {
						b.Fatal(err)
					}
				}
			}},
			{Name: "List, every term on its own record", Run: list},
		},
	})
}
