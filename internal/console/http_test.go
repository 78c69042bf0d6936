package console

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

func newConsole(t *testing.T, st store.Store, actions bool) (*Console, *httptest.Server) {
	t.Helper()
	c := New(Config{Store: st, StoreShown: "mem:", Version: "test", Actions: actions, Token: "tok", Secrets: []string{"hunter2"}})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return c, srv
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return res.StatusCode, b.String()
}

func get(t *testing.T, url, host string) (int, string) {
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	return do(t, req)
}

// The page and its files are served, for this host's names only.
func TestThePageIsServedOnlyForThisHost(t *testing.T) {
	_, srv := newConsole(t, memstore.New(memstore.Options{}), false)
	for path, want := range map[string]string{"/": "<title>Tenure console</title>", "/console/app.js": "EventSource", "/console/app.css": "--held"} {
		code, body := get(t, srv.URL+path, "")
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body without %q", path, code, want)
		}
	}
	for _, host := range []string{"localhost:80", "[::1]:9800", "127.0.0.2"} {
		if code, _ := get(t, srv.URL+"/", host); code != 200 {
			t.Errorf("Host %s: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"evil.example", "evil.example:80", "10.0.0.1"} {
		if code, _ := get(t, srv.URL+"/console/api/state", host); code != http.StatusMisdirectedRequest {
			t.Errorf("Host %s: %d, want 421", host, code)
		}
	}
	if code, _ := get(t, srv.URL+"/nothing", ""); code != 404 {
		t.Errorf("an unknown path: %d, want 404", code)
	}
}

// The state is the store's, with pause records shown on their key and
// pool members with their fair share and cap, which take each member's
// key limit into account.
func TestTheSnapshotShowsKeysPausesAndPools(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	acquire := func(key, owner string) {
		if res, err := st.Acquire(ctx, store.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute, Running: true}); err != nil || !res.Acquired {
			t.Fatalf("acquire %s: %v %+v", key, err, res)
		}
	}
	acquire("job", "a")
	if err := tenure.Pause(ctx, st, "job"); err != nil {
		t.Fatal(err)
	}
	acquire("~workers/mail/w1@1", "w1")
	acquire("~workers/mail/w2@3,max=5", "w2")
	for i, owner := range []string{"w1", "w2", "w2", "w2", "w2", "w2", "w2", "w2"} {
		acquire("~pool/mail/k"+string(rune('0'+i)), owner)
	}
	c, srv := newConsole(t, st, false)
	if code, _ := get(t, srv.URL+"/console/api/state", ""); code != http.StatusServiceUnavailable {
		t.Errorf("state before the first read: %d, want 503", code)
	}
	c.read(ctx)
	code, body := get(t, srv.URL+"/console/api/state", "")
	var snap snapshotWithTerms
	if err := json.Unmarshal([]byte(body), &snap); code != 200 || err != nil {
		t.Fatalf("state: %d %v", code, err)
	}
	if len(snap.Leases) != 9 || snap.Leases[0].Key != "job" || !snap.Leases[0].Paused || snap.Leases[0].State != "held" {
		t.Errorf("leases %+v: want job (held, paused) and 8 pool keys", snap.Leases)
	}
	if len(snap.Pools) != 1 || len(snap.Pools[0].Workers) != 2 {
		t.Fatalf("pools %+v", snap.Pools)
	}
	w1, w2 := snap.Pools[0].Workers[0], snap.Pools[0].Workers[1]
	// By weight alone w2's share is 6; its limit of 5 leaves 3 to w1.
	if snap.Pools[0].Keys != 8 || w1.Held != 1 || w2.Held != 7 || w1.Share != 3 || w2.Share != 5 || w1.Cap != 4 || w2.Cap != 5 || w2.MaxKeys != 5 {
		t.Errorf("pool %+v: want 8 keys, w1 1 held of share 3 cap 4, w2 (at most 5) 7 of 5 cap 5", snap.Pools[0])
	}
}

// failingStore fails every List with an error that names a secret.
type failingStore struct{ store.Store }

func (failingStore) List(context.Context, string) ([]store.Lease, error) {
	return nil, errors.New("dial postgres://u:hunter2@db: refused")
}

// A failed read is shown without the secret, over the last good read.
func TestAFailedReadIsShownWithoutSecrets(t *testing.T) {
	c, srv := newConsole(t, failingStore{memstore.New(memstore.Options{})}, false)
	c.read(context.Background())
	_, body := get(t, srv.URL+"/console/api/state", "")
	if !strings.Contains(body, "refused") || strings.Contains(body, "hunter2") {
		t.Errorf("state after a failed read: %s", body)
	}
}

// Actions need --allow-actions and the token; a bad one never reaches the
// store.
func TestActionsNeedTheTokenAndAGoodKey(t *testing.T) {
	st := memstore.New(memstore.Options{})
	post := func(srv *httptest.Server, token, body string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/console/api/action", strings.NewReader(body))
		if token != "" {
			req.Header.Set(TokenHeader, token)
		}
		return do(t, req)
	}
	_, off := newConsole(t, st, false)
	if code, _ := post(off, "tok", `{"op":"pause","key":"job"}`); code != http.StatusForbidden {
		t.Errorf("an action with actions off: %d, want 403", code)
	}
	_, on := newConsole(t, st, true)
	for _, tc := range []struct {
		token, body string
		want        int
	}{
		{"", `{"op":"pause","key":"job"}`, http.StatusUnauthorized},
		{"tok2", `{"op":"pause","key":"job"}`, http.StatusUnauthorized},
		{"tok", `{"op":"pause","key":""}`, http.StatusBadRequest},
		{"tok", `{"op":"pause","key":"job~paused"}`, http.StatusBadRequest},
		{"tok", `{"op":"pause","key":"~pool/mail/k1"}`, http.StatusBadRequest},
		{"tok", `{"op":"explode","key":"job"}`, http.StatusBadRequest},
		{"tok", `not json`, http.StatusBadRequest},
	} {
		if code, body := post(on, tc.token, tc.body); code != tc.want {
			t.Errorf("token %q, %s: %d %s, want %d", tc.token, tc.body, code, body, tc.want)
		}
	}
	if paused, _ := tenure.Paused(context.Background(), st, "job"); paused {
		t.Fatal("a refused action paused the key")
	}
	if code, body := post(on, "tok", `{"op":"pause","key":"job"}`); code != 200 || !strings.Contains(body, "paused job") {
		t.Errorf("pause with the token: %d %s", code, body)
	}
	if paused, _ := tenure.Paused(context.Background(), st, "job"); !paused {
		t.Error("the pause did not reach the store")
	}
	if code, body := post(on, "tok", `{"op":"resume","key":"job"}`); code != 200 || !strings.Contains(body, "resumed job") {
		t.Errorf("resume: %d %s", code, body)
	}
}

// The stream sends the current snapshot at once, then each new one.
func TestTheStreamSendsEachSnapshot(t *testing.T) {
	st := memstore.New(memstore.Options{})
	c, srv := newConsole(t, st, false)
	ctx := context.Background()
	c.read(ctx)
	res, err := http.Get(srv.URL + "/console/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	next := func() snapshotWithTerms {
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var s snapshotWithTerms
				if err := json.Unmarshal([]byte(data), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		t.Fatalf("the stream ended: %v", lines.Err())
		return snapshotWithTerms{}
	}
	if s := next(); len(s.Leases) != 0 {
		t.Fatalf("first snapshot %+v, want no leases", s.Leases)
	}
	if _, err := st.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c.read(ctx)
	if s := next(); len(s.Leases) != 1 || s.Leases[0].Owner != "a" {
		t.Fatalf("second snapshot %+v, want job held by a", s.Leases)
	}
}

// When Run ends, every stream ends: an open page must not hold up the
// server's shutdown (http.Server.Shutdown waits for open requests).
func TestStreamsEndWhenTheConsoleStops(t *testing.T) {
	c, srv := newConsole(t, memstore.New(memstore.Options{}), false)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); c.Run(ctx) }()
	res, err := http.Get(srv.URL + "/console/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "data: ") {
	} // the first snapshot came
	cancel()
	<-ran
	ended := make(chan error, 1)
	go func() {
		for lines.Scan() {
		}
		ended <- lines.Err()
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the stream broke instead of ending: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream went on after the console stopped")
	}
}

// countingStore counts List calls.
type countingStore struct {
	store.Store
	lists atomic.Int64
}

func (s *countingStore) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix)
}

// An on-demand console (the one every replica serves) reads the store
// only while a page is open.
func TestAnOnDemandConsoleReadsOnlyWhileWatched(t *testing.T) {
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	c := New(Config{Store: st, OnDemand: true, Interval: 10 * time.Millisecond})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	time.Sleep(200 * time.Millisecond) // twenty intervals with nobody watching
	if n := st.lists.Load(); n != 0 {
		t.Fatalf("%d reads with no page open", n)
	}
	res, err := http.Get(srv.URL + "/console/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(res.Body)
	for i := 0; i < 3; {
		if !lines.Scan() {
			t.Fatal("the stream ended")
		}
		if strings.HasPrefix(lines.Text(), "data: ") {
			i++
		}
	}
	res.Body.Close()
	if n := st.lists.Load(); n < 3 {
		t.Fatalf("%d reads while a page was open, want one a snapshot", n)
	}
}

// Actions stay inside the console's prefix.
func TestActionsStayInsideThePrefix(t *testing.T) {
	st := memstore.New(memstore.Options{})
	c := New(Config{Store: st, Prefix: "team-a/", Actions: true, Token: "tok"})
	if _, err := c.act(context.Background(), action{Op: "pause", Key: "team-b/job"}); err == nil {
		t.Fatal("a key outside the prefix was paused")
	}
	if _, err := c.act(context.Background(), action{Op: "pause", Key: "team-a/job"}); err != nil {
		t.Fatal(err)
	}
}

// A weight no share can be computed from (the CLI takes 1e308) must not
// freeze the page: the snapshot still encodes.
func TestAHugeWeightStillEncodes(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	for _, k := range []string{"~workers/p/a@1e308", "~workers/p/b@1e308", "~pool/p/k1", "~pool/p/k2"} {
		if _, err := st.Acquire(ctx, store.AcquireRequest{Key: k, Owner: "a", TTL: time.Minute, Running: true}); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Config{Store: st})
	c.read(ctx)
	var snap snapshotWithTerms
	if err := json.Unmarshal(c.snap, &snap); err != nil || snap.Error != "" || len(snap.Pools) != 1 {
		t.Fatalf("snapshot %s: %v", c.snap, err)
	}
	if w := snap.Pools[0].Workers[0]; w.Share != 1 || w.Cap != 2 {
		t.Errorf("worker %+v: want share 1, cap 2", w)
	}
}
