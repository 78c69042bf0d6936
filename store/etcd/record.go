package etcd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Each lease key K owns three etcd keys under the store's root
// "/<prefix>/leases/". Keys never hold control characters, so the NUL
// separator cannot occur inside K, and it sorts before every byte a key
// may continue with: etcd's byte order of these names is the byte order
// of the lease keys.
//
//	root K "\x00g"  grace key of a term moved off its session without ending,
//	                or written before sessions; value: epoch (0 when unknown)
//	root K "\x00l"  live key, on the owner's session (or, written before
//	                sessions, a lease of ttl seconds); value: "epoch\towner"
//	root K "\x00m"  prune mark, no lease: "record revision\ttimer\ttimer TTL"
//	                (see prune.go)
//	root K "\x00r"  record, no lease, deleted only by Prune:
//	                "epoch\towner\tstate\trunning\tgrace seconds"
const (
	kindGrace  = 'g'
	kindLive   = 'l'
	kindMark   = 'm'
	kindRecord = 'r'
)

// Record states. A revoked record has the empty owner.
const (
	stateHeld     = "held"
	stateReleased = "released"
	stateRevoked  = "revoked"
)

// maxNestedOps is the most operations a nested per-key transaction holds
// (three puts, or a put and two deletes); etcd counts them against
// --max-txn-ops together with the top level's.
const maxNestedOps = 3

func (s *Store) keyPrefix(key string) string { return s.root + key + "\x00" }
func (s *Store) recordKey(key string) string { return s.root + key + "\x00r" }
func (s *Store) liveKey(key string) string   { return s.root + key + "\x00l" }
func (s *Store) graceKey(key string) string  { return s.root + key + "\x00g" }
func (s *Store) markKey(key string) string   { return s.root + key + "\x00m" }

// splitKey returns the lease key and the kind of an etcd key under root.
func (s *Store) splitKey(k []byte) (key string, kind byte, ok bool) {
	rest, found := strings.CutPrefix(string(k), s.root)
	i := strings.IndexByte(rest, 0)
	if !found || i < 0 || i+2 != len(rest) {
		return "", 0, false
	}
	return rest[:i], rest[i+1], true
}

// record is a lease key's permanent state.
type record struct {
	epoch   int64
	owner   string // "" once revoked
	state   string
	running bool
	// grace is the term's grace in seconds, rounded up and fixed at
	// acquisition: the last part of its session.
	grace int64
}

func (r record) encode() string {
	run := "0"
	if r.running {
		run = "1"
	}
	return strconv.FormatInt(r.epoch, 10) + "\t" + r.owner + "\t" + r.state + "\t" + run + "\t" + strconv.FormatInt(r.grace, 10)
}

func decodeRecord(key string, b []byte) (record, error) {
	f := strings.Split(string(b), "\t")
	if len(f) != 5 {
		return record{}, fmt.Errorf("corrupt record for key %q", key)
	}
	epoch, err1 := strconv.ParseInt(f[0], 10, 64)
	grace, err2 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return record{}, fmt.Errorf("corrupt record for key %q: %w", key, err)
	}
	switch f[2] {
	case stateHeld, stateReleased, stateRevoked:
	default:
		return record{}, fmt.Errorf("corrupt record for key %q: state %q", key, f[2])
	}
	return record{epoch: epoch, owner: f[1], state: f[2], running: f[3] == "1", grace: grace}, nil
}

// heldPrefix starts the encoding of the held term (epoch, owner) and no
// other record: owners hold no tab. A value v has this prefix exactly when
// heldPrefix < v < heldPrefixEnd, since every encoding continues past it —
// which is how a transaction tests "this term is still held" without
// knowing its running flag or grace.
func heldPrefix(epoch int64, owner string) string {
	return strconv.FormatInt(epoch, 10) + "\t" + owner + "\t" + stateHeld + "\t"
}

// heldPrefixEnd is heldPrefix with its final tab raised to the next byte.
func heldPrefixEnd(epoch int64, owner string) string {
	p := heldPrefix(epoch, owner)
	return p[:len(p)-1] + "\n"
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// liveValue is the value of a live key: the term it keeps alive.
func liveValue(epoch int64, owner string) string {
	return strconv.FormatInt(epoch, 10) + "\t" + owner
}

// view is what one read saw of a lease key's three etcd keys.
type view struct {
	key    string
	rec    *record
	recRev int64 // the record's mod revision; 0 without a record
	live   *mvccpb.KeyValue
	grace  *mvccpb.KeyValue
	mark   *mvccpb.KeyValue
}

// current reports whether (owner, epoch) is the key's held term and its
// live key is still there.
func (v *view) current(owner string, epoch int64) bool {
	return v.rec != nil && v.rec.state == stateHeld && v.rec.owner == owner && v.rec.epoch == epoch &&
		v.live != nil && string(v.live.Value) == liveValue(epoch, owner)
}

// views groups the key-ordered entries of a range read by lease key.
func (s *Store) views(kvs []*mvccpb.KeyValue, into []*view) ([]*view, error) {
	for _, kv := range kvs {
		key, kind, ok := s.splitKey(kv.Key)
		if !ok {
			continue // not ours: someone wrote under the namespace
		}
		if n := len(into); n == 0 || into[n-1].key != key {
			into = append(into, &view{key: key})
		}
		v := into[len(into)-1]
		switch kind {
		case kindRecord:
			rec, err := decodeRecord(key, kv.Value)
			if err != nil {
				return nil, err
			}
			v.rec, v.recRev = &rec, kv.ModRevision
		case kindLive:
			v.live = kv
		case kindGrace:
			v.grace = kv
		case kindMark:
			v.mark = kv
		}
	}
	return into, nil
}

// ceilSeconds rounds d up to whole seconds, the resolution of etcd leases:
// up, so a term never ends before the holder's deadline and a grace never
// ends early.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
