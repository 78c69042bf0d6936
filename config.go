package tenure

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Defaults applied to zero fields of Config.
const (
	DefaultTTL         = 15 * time.Second
	DefaultGrace       = 5 * time.Second
	DefaultStopTimeout = 5 * time.Second
)

// LeaseMode says whether a Supervisor arbitrates keys through leases.
type LeaseMode int

const (
	// LeasesAuto (the zero value) uses leases whenever a Store is
	// configured: a replica given a store never runs a key without its
	// lease, even if the application forgot to say it runs several
	// replicas. Without a Store every key runs locally, unless
	// Config.MultiInstance says several replicas run, which is then an
	// error (they would all run every key).
	LeasesAuto LeaseMode = iota
	// LeasesOn always uses leases; a Config without a Store is refused.
	LeasesOn
	// LeasesOff runs every key locally (single-instance mode), even with a
	// Store configured: the explicit way to run without leases.
	LeasesOff
)

func (m LeaseMode) String() string {
	switch m {
	case LeasesAuto:
		return "auto"
	case LeasesOn:
		return "on"
	case LeasesOff:
		return "off"
	}
	return fmt.Sprintf("LeaseMode(%d)", int(m))
}

// Config configures a Supervisor. The zero value of every field means its
// default; New validates the whole and names the field at fault.
type Config struct {
	// Store holds the leases. A configured Store means leases (unless
	// Leases is LeasesOff). Nil runs in single-instance mode (every key
	// runs locally), unless Leases is LeasesOn or MultiInstance is set,
	// which is then an error.
	Store store.Store

	// Leases turns lease arbitration on or off; see LeaseMode.
	Leases LeaseMode
	// MultiInstance is the application's signal that several replicas may
	// run (more than one worker, a replica count above one). Under
	// LeasesAuto it makes a missing Store an error instead of
	// single-instance mode.
	MultiInstance bool

	// Owner names this replica in logs, status and the store. Default:
	// hostname:pid. Names need not be unique: the id the store sees
	// (Supervisor.Owner) is the name, '#' and an incarnation drawn anew by
	// every New, so two processes given one name — a hostname shared by
	// host-networked containers, a copied unit file — never take a key from
	// each other, and a restarted process never mistakes an old term for
	// its own. A lease lost to a term held under this same name is logged
	// as an error, since it means a frozen or misconfigured twin. At most
	// 503 bytes, under the key rules of store.ValidateKey.
	Owner string

	// TTL is how long a lease lives without renewal. Default 15s.
	TTL time.Duration
	// Grace is how long past a lease's expiry a peer waits before taking it.
	// Default 5s. Zero grace is allowed only with NoGrace set, since grace
	// is the margin that absorbs clock-rate drift and scheduling delays.
	Grace time.Duration
	// NoGrace permits Grace == 0.
	NoGrace bool
	// RenewEvery is the renewal interval. Default TTL/3; must be < TTL/2.
	RenewEvery time.Duration
	// CallTimeout bounds every store call. Default RenewEvery/2; must be
	// <= RenewEvery/2 so a stalled call cannot push a renewal past the
	// deadline it protects.
	CallTimeout time.Duration
	// StopTimeout is how long a runner is given to return after its
	// context is cancelled. Default 5s.
	StopTimeout time.Duration

	// BackoffMin and BackoffMax bound the exponential delay between
	// restarts of a runner that returned while its lease was held. Defaults:
	// RenewEvery and 16×RenewEvery. A run that lasted at least BackoffMax
	// resets the delay.
	BackoffMin, BackoffMax time.Duration

	// MaxFailures, FailureWindow and Cooldown hand a crash-looping key to
	// a peer: when a key's runner fails MaxFailures times within
	// FailureWindow (it returned or panicked while the lease was held, or
	// its Reload failed), this replica releases the lease and does not
	// ask for it again for Cooldown, so a healthy peer takes it at once.
	// Defaults: 3 failures, 8×BackoffMin (room for three tries under the
	// backoff: at 0, BackoffMin and 3×BackoffMin) and 12×RenewEvery.
	// MaxFailures < 0 never hands a key over (it backs off forever, as a
	// single replica should). A Job may override each.
	MaxFailures   int
	FailureWindow time.Duration
	Cooldown      time.Duration

	// MaxRefused is how many supervision rounds (RenewEvery apart) in a
	// row the store may refuse calls for good, answering none
	// (store.Permanent: access denied, no lease table and no right to
	// create it, a read-only store), before Run gives up, stops what runs,
	// and returns an error wrapping ErrStoreRefused: a misconfigured
	// replica fails where an operator sees it instead of warning forever.
	// Default 5 (25 s with the default TTL); < 0 never gives up.
	MaxRefused int

	// Prefix is this supervisor's namespace in the store: every key given
	// to Set must start with it, and pools keep their keys and memberships
	// under it. Each round lists (and the push channel watches) only keys
	// under it, so a store shared by many applications is read in part.
	// It may not hold '~'. Default: the whole store.
	Prefix string

	// FullReadEvery is how often a replica whose pools follow the store's
	// push channel reads the whole lease table all the same. Between two
	// whole reads such a replica keeps its view of the pools' keys from
	// the pushed acquisitions and releases and reads only the pools'
	// memberships each round: its reads grow with the keys that change
	// and the workers, not with the keys. A whole read corrects what no
	// event reports (a term revoked without one, a release that failed
	// and left its term to expire), which at worst leaves such a key
	// unclaimed until then. A replica
	// reads the whole table every round when its store has no push
	// channel, when it runs singleton keys, or when its Prefix holds
	// other keys than its pools'. Default 1m; a value at most RenewEvery
	// reads the whole table every round.
	FullReadEvery time.Duration

	// Logger receives events (acquire, loss, release, start failure).
	// Default: slog.Default().
	Logger *slog.Logger
	// Observer is told what the supervisor does, for metrics (package
	// metrics has a Prometheus collector). Default: none.
	Observer Observer
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("tenure: invalid config")

// ConfigError says which Config field is invalid and why. It matches
// ErrConfig with errors.Is.
type ConfigError struct {
	Field  string // the Config field, e.g. "RenewEvery"
	Reason string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason + ": " + ErrConfig.Error() }

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks the configuration as New would, without needing a
// Store: the timing rule, the owner id and the lease mode. A Config
// without a Store that needs one is reported only by New.
func (c Config) Validate() error {
	if c.Leases != LeasesAuto && c.Leases != LeasesOn && c.Leases != LeasesOff {
		return configErr("Leases", "unknown mode %d", int(c.Leases))
	}
	_, err := c.withDefaults()
	return err
}

// leasesActive decides whether leases are on, or why the config is refused.
func (c Config) leasesActive() (bool, error) {
	switch c.Leases {
	case LeasesOff:
		return false, nil
	case LeasesOn:
		if c.Store == nil {
			return false, configErr("Store", "leases are on (Leases: LeasesOn) but no store is configured")
		}
		return true, nil
	case LeasesAuto:
		if c.Store != nil {
			return true, nil
		}
		if c.MultiInstance {
			return false, configErr("Store", "several replicas run (MultiInstance) but no store is configured: every replica would run every key")
		}
		return false, nil
	}
	return false, configErr("Leases", "unknown mode %d", int(c.Leases))
}

// withDefaults fills zero fields and validates the timing rule.
func (c Config) withDefaults() (Config, error) {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Grace == 0 && !c.NoGrace {
		c.Grace = DefaultGrace
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.RenewEvery / 2
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = c.RenewEvery
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 16 * c.RenewEvery
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = 3
	}
	if c.FailureWindow == 0 {
		c.FailureWindow = 8 * c.BackoffMin
	}
	if c.Cooldown == 0 {
		c.Cooldown = 12 * c.RenewEvery
	}
	if c.MaxRefused == 0 {
		c.MaxRefused = 5
	}
	if c.FullReadEvery == 0 {
		c.FullReadEvery = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Owner == "" {
		c.Owner = DefaultOwner()
	}
	switch {
	case c.TTL < 3*time.Millisecond:
		return c, configErr("TTL", "%v is too short (at least 3ms)", c.TTL)
	case c.TTL > store.MaxTTL:
		return c, configErr("TTL", "%v is too long (at most %v, ten years)", c.TTL, store.MaxTTL)
	case c.Grace < 0:
		return c, configErr("Grace", "%v is negative", c.Grace)
	case c.Grace > store.MaxTTL:
		return c, configErr("Grace", "%v is too long (at most %v, ten years)", c.Grace, store.MaxTTL)
	case c.RenewEvery <= 0:
		return c, configErr("RenewEvery", "%v must be positive", c.RenewEvery)
	case c.RenewEvery*2 >= c.TTL:
		return c, configErr("RenewEvery", "%v must be less than TTL/2 (%v): a lease must survive one missed renewal", c.RenewEvery, c.TTL/2)
	case c.CallTimeout <= 0:
		return c, configErr("CallTimeout", "%v must be positive", c.CallTimeout)
	case c.CallTimeout*2 > c.RenewEvery:
		return c, configErr("CallTimeout", "%v must be at most RenewEvery/2 (%v)", c.CallTimeout, c.RenewEvery/2)
	case c.StopTimeout < 0:
		return c, configErr("StopTimeout", "%v is negative", c.StopTimeout)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return c, configErr("BackoffMin", "%v..%v is not a valid range", c.BackoffMin, c.BackoffMax)
	case c.FullReadEvery < 0:
		return c, configErr("FullReadEvery", "%v is negative", c.FullReadEvery)
	case c.FailureWindow < 0 || c.Cooldown < 0:
		return c, configErr("FailureWindow", "%v and Cooldown %v must not be negative", c.FailureWindow, c.Cooldown)
	}
	if err := (crashLimits{MaxFailures: c.MaxFailures, FailureWindow: c.FailureWindow}).reachable(c); err != nil {
		return c, err
	}
	if strings.Contains(c.Prefix, "~") {
		return c, configErr("Prefix", "%q holds '~', which starts the segments reserved for pools", c.Prefix)
	}
	if c.Prefix != "" {
		if err := store.ValidateKey(c.Prefix); err != nil {
			return c, configErr("Prefix", "%v", err)
		}
	}
	if err := store.ValidateOwner(ownerID(c.Owner)); err != nil {
		return c, configErr("Owner", "%v", err)
	}
	return c, nil
}

// DefaultOwner returns hostname:pid, the owner name used when
// Config.Owner is empty.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// incarnationSep separates an owner name from its incarnation in an owner id.
const incarnationSep = "#"

// ownerID is name plus a fresh incarnation: 32 random bits, so two
// processes with one name collide once in four billion starts.
func ownerID(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + incarnationSep + hex.EncodeToString(b[:])
}

// OwnerName returns the name part of an owner id (Config.Owner of the
// process that holds it), or id itself when it has no incarnation.
func OwnerName(id string) string {
	if i := strings.LastIndex(id, incarnationSep); i >= 0 && isIncarnation(id[i+1:]) {
		return id[:i]
	}
	return id
}

func isIncarnation(s string) bool {
	if len(s) != 8 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
