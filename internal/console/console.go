// Package console is Tenure's web console: one self-contained page, served
// by tenure run, tenure pool and tenure console, that shows every lease,
// every pool's workers and the recent handoffs, live, and — only when the
// process was started with --allow-actions, and only with its token —
// moves, pauses, resumes and releases keys.
//
// The page (assets/, embedded) polls nothing itself: it holds one
// server-sent events stream, and the server pushes a whole Snapshot after
// every read of the store (once a second, and at once after an action).
// The console reads the store with List, the same call tenure status
// makes, so it adds one List a second per open console process, whatever
// the number of viewers.
//
// What the console knows of the past it saw itself: handoffs and terms
// start with the console's first read, and a term that began and ended
// between two reads is not shown.
package console

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

// Local is the process serving the console, when it runs keys itself: a
// *tenure.Supervisor. Its view adds what the store does not hold: which
// keys are cooling after a crash loop here.
type Local interface {
	Owner() string
	Status() []tenure.KeyStatus
}

// Config configures a Console.
type Config struct {
	// Store is read with List; with Actions it is also written.
	Store store.Store
	// Prefix limits the console to keys that start with it.
	Prefix string
	// StoreShown is the store's URL without its password, shown on the
	// page.
	StoreShown string
	// Version is Tenure's version, shown on the page.
	Version string
	// Secrets are scrubbed from every error shown (store.RedactString).
	Secrets []string
	// Local is the supervisor of the serving process, nil for tenure
	// console.
	Local Local
	// Grace is drawn after each lease's expiry. Default
	// tenure.DefaultGrace.
	Grace time.Duration
	// Actions enables move, pause, resume and release, for requests that
	// carry Token. Token must then be set.
	Actions bool
	Token   string
	// Public serves requests for any Host header; otherwise only names
	// of this host (localhost, loopback addresses), so a web page
	// elsewhere cannot reach the console by pointing its own domain name
	// at 127.0.0.1 (DNS rebinding).
	Public bool
	// Interval is the time between reads of the store. Default 1s.
	Interval time.Duration
	// OnDemand reads the store only while a page is open (or the state
	// was asked for lately): for a console that every replica serves,
	// which nobody may be watching. Handoffs are then seen only while
	// someone watches.
	OnDemand bool
	// Log receives read failures (at debug: they are on the page).
	Log *slog.Logger
}

// Console serves the page and keeps its snapshot fresh.
type Console struct {
	cfg     Config
	hist    *history
	ttls    map[term]time.Duration
	refresh chan struct{}
	// done is closed when Run returns: it ends every stream, so a server
	// shutting down is not held up by open pages.
	done chan struct{}

	streams   atomic.Int64 // open streams
	lastAsked atomic.Int64 // when the state was last asked for, Unix ms

	mu      sync.Mutex
	snap    []byte // the last Snapshot, encoded
	frame   []byte // snap as a server-sent event, made once for every stream
	version uint64
	changed chan struct{}      // closed when snap changes, then replaced
	good    *snapshotWithTerms // the last successful read
}

// New returns a console for cfg; Run keeps it fresh.
func New(cfg Config) *Console {
	if cfg.Grace <= 0 {
		cfg.Grace = tenure.DefaultGrace
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Console{
		cfg: cfg, hist: newHistory(20, 200), ttls: map[term]time.Duration{},
		refresh: make(chan struct{}, 1), changed: make(chan struct{}), done: make(chan struct{}),
	}
}

// Run reads the store every Interval, and at once after an action, until
// ctx ends; then it ends every stream. Call it once.
func (c *Console) Run(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if c.wanted() {
			c.read(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.refresh:
		}
	}
}

// wanted reports whether a read is worth making now.
func (c *Console) wanted() bool {
	return !c.cfg.OnDemand || c.streams.Load() > 0 || time.Now().UnixMilli()-c.lastAsked.Load() < askedFor.Milliseconds()
}

const (
	// askedFor is how long an on-demand console goes on reading after a
	// state request.
	askedFor = 10 * time.Second
	// listTimeout bounds a read: a slow store is shown late rather than
	// never.
	listTimeout = 10 * time.Second
	// timelineSpan is how far back the page draws terms.
	timelineSpan = 5 * time.Minute
)

// read takes one snapshot. A failed read is published as the last good
// one with the error and when it happened.
func (c *Console) read(ctx context.Context) {
	local := c.local()
	rctx, cancel := context.WithTimeout(ctx, listTimeout)
	leases, err := c.cfg.Store.List(rctx, c.cfg.Prefix)
	cancel()
	now := time.Now().UnixMilli()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		msg := store.RedactString(err.Error(), c.cfg.Secrets...)
		c.cfg.Log.Debug("console: reading the store failed", "err", msg)
		c.mu.Lock()
		doc := c.good
		c.mu.Unlock()
		if doc == nil {
			doc = &snapshotWithTerms{Snapshot: c.empty(local)}
		}
		failed := *doc
		failed.Error, failed.ErrorAt = msg, now
		c.publish(failed)
		return
	}
	doc := snapshotWithTerms{Snapshot: c.empty(local)}
	doc.At = now
	doc.Leases, doc.Pools = build(leases, now, c.cfg.Grace, c.ttls, local)
	c.hist.observe(now, doc.Leases, local)
	doc.Terms, doc.Handoffs = c.hist.recent(doc.Leases, now-timelineSpan.Milliseconds())
	c.mu.Lock()
	c.good = &doc
	c.mu.Unlock()
	c.publish(doc)
}

// empty is a snapshot with nothing read yet.
func (c *Console) empty(local localState) Snapshot {
	return Snapshot{Version: c.cfg.Version, Store: c.cfg.StoreShown, Owner: local.owner, Actions: c.cfg.Actions,
		Leases: []Lease{}, Pools: []Pool{}, Handoffs: []Handoff{}}
}

// snapshotWithTerms is the document sent: the snapshot and, for the
// timeline, the recent terms of every key listed.
type snapshotWithTerms struct {
	Snapshot
	Terms []Term `json:"terms"`
}

func (c *Console) publish(doc snapshotWithTerms) {
	if doc.Terms == nil {
		doc.Terms = []Term{}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		// Never freeze the page on a value JSON cannot hold: say so.
		b, _ = json.Marshal(snapshotWithTerms{Snapshot: Snapshot{Version: doc.Version, Store: doc.Store, At: doc.At,
			Error: "the console could not encode the store's state: " + err.Error(), ErrorAt: time.Now().UnixMilli(),
			Leases: []Lease{}, Pools: []Pool{}, Handoffs: []Handoff{}}, Terms: []Term{}})
	}
	frame := append(append([]byte("event: snapshot\ndata: "), b...), "\n\n"...)
	c.mu.Lock()
	c.snap, c.frame = b, frame
	c.version++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// fresh returns a snapshot for a state request: on an on-demand console
// that was not reading, it asks for a read and waits for it (a little).
func (c *Console) fresh(ctx context.Context) []byte {
	idle := !c.wanted()
	c.lastAsked.Store(time.Now().UnixMilli())
	snap, _, changed := c.current()
	if !idle {
		return snap // nil until the first read: "not read yet"
	}
	c.readSoon()
	select {
	case <-changed:
	case <-ctx.Done():
	case <-c.done:
	case <-time.After(listTimeout):
	}
	snap, _, _ = c.current()
	return snap
}

// currentFrame is current's snapshot as a server-sent event.
func (c *Console) currentFrame() ([]byte, uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frame, c.version, c.changed
}

// current returns the last snapshot, its version, and a channel closed
// when a newer one is published.
func (c *Console) current() ([]byte, uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap, c.version, c.changed
}

// local reads the serving process's own state.
func (c *Console) local() localState {
	st := localState{paused: map[string]bool{}, cooling: map[string]bool{}}
	if c.cfg.Local == nil {
		return st
	}
	st.owner = c.cfg.Local.Owner()
	now := time.Now()
	for _, k := range c.cfg.Local.Status() {
		if k.Paused {
			st.paused[k.Key] = true
		}
		if k.CoolingUntil.After(now) {
			st.cooling[k.Key] = true
		}
	}
	return st
}

// readSoon asks Run for a read now (after an action).
func (c *Console) readSoon() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}
