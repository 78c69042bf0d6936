package store

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors; check them with errors.Is.
var (
	// ErrInvalidKey: a key is empty, too long, not UTF-8 or has control characters.
	ErrInvalidKey = errors.New("store: invalid key")
	// ErrInvalidOwner: an owner id breaks the same rules as a key.
	ErrInvalidOwner = errors.New("store: invalid owner")
	// ErrInvalidName: a table name or key prefix is not a plain identifier.
	ErrInvalidName = errors.New("store: invalid name")
	// ErrInvalidDuration: a TTL is not positive or a grace is negative.
	ErrInvalidDuration = errors.New("store: invalid duration")
	// ErrInvalidURL: a store URL cannot be parsed or lacks what the backend needs.
	ErrInvalidURL = errors.New("store: invalid URL")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrNotFound: a store opened read-only does not exist — no SQLite
	// file, no lease table — and a read-only open never creates one.
	ErrNotFound = errors.New("store: not found")
	// ErrReadOnly: a write to a store opened read-only.
	ErrReadOnly = errors.New("store: read-only")
)

// MaxKeyBytes is the longest key or owner id, in bytes.
const MaxKeyBytes = 512

// ValidateKey reports whether key is 1–512 bytes of valid UTF-8 without NUL
// or control characters.
func ValidateKey(key string) error {
	if err := validateID(key); err != nil {
		return fmt.Errorf("key %s: %w", quoteShort(key), errors.Join(ErrInvalidKey, err))
	}
	return nil
}

// ValidateOwner applies the key rules to an owner id.
func ValidateOwner(owner string) error {
	if err := validateID(owner); err != nil {
		return fmt.Errorf("owner %s: %w", quoteShort(owner), errors.Join(ErrInvalidOwner, err))
	}
	return nil
}

func validateID(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxKeyBytes:
		return fmt.Errorf("%d bytes, more than %d", len(s), MaxKeyBytes)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}

// quoteShort quotes s for an error message, cut to a readable length.
func quoteShort(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", strings.ToValidUTF8(s[:max], "\uFFFD"))
	}
	return fmt.Sprintf("%q", s)
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateName reports whether a table name or namespace is a plain
// identifier (^[A-Za-z_][A-Za-z0-9_]{0,62}$), so it can be put into SQL or a
// key prefix without quoting.
func ValidateName(what, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s %s: must match %s: %w", what, quoteShort(name), nameRE.String(), ErrInvalidName)
	}
	return nil
}

// ValidateAcquire checks an acquisition request's fields.
func ValidateAcquire(req AcquireRequest) error {
	if err := ValidateKey(req.Key); err != nil {
		return err
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return err
	}
	if err := ValidateTTL(req.TTL); err != nil {
		return err
	}
	switch {
	case req.Grace < 0:
		return fmt.Errorf("grace %v is negative: %w", req.Grace, ErrInvalidDuration)
	case req.Grace > MaxTTL:
		return fmt.Errorf("grace %v is longer than %v (ten years): %w", req.Grace, MaxTTL, ErrInvalidDuration)
	case req.MaxElapsed < 0 || req.MaxElapsed >= req.TTL:
		return fmt.Errorf("max elapsed %v is not in [0, ttl %v): %w", req.MaxElapsed, req.TTL, ErrInvalidDuration)
	}
	return nil
}

// MaxTTL is the longest TTL, and the longest grace, a store takes: ten
// years, long enough to mean "until told otherwise" (a pause is held that
// long). Stores mark terms with dates a century ahead (store/redis keeps a
// session's id in an expiry from 2126 on), which no term may reach.
const MaxTTL = 10 * 365 * 24 * time.Hour

// ValidateTTL reports whether ttl is at least a millisecond (the resolution
// every backend keeps) and at most MaxTTL.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("ttl %v is shorter than 1ms: %w", ttl, ErrInvalidDuration)
	case ttl > MaxTTL:
		return fmt.Errorf("ttl %v is longer than %v (ten years): %w", ttl, MaxTTL, ErrInvalidDuration)
	}
	return nil
}

// ValidateRenew checks a renewal's owner, ttl and items.
func ValidateRenew(owner string, ttl time.Duration, items []RenewItem) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	for _, it := range items {
		if err := ValidateKey(it.Key); err != nil {
			return err
		}
	}
	return nil
}

// ValidateRelease checks a release's owner and keys.
func ValidateRelease(owner string, terms []Term) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	for _, t := range terms {
		if err := ValidateKey(t.Key); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePrune checks a prune's age: at least a millisecond, the
// resolution every backend keeps.
func ValidatePrune(olderThan time.Duration) error {
	if olderThan < time.Millisecond {
		return fmt.Errorf("older-than %v is shorter than 1ms: %w", olderThan, ErrInvalidDuration)
	}
	return nil
}
