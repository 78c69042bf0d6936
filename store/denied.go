package store

import "errors"

// ErrDenied: the store refused the credentials, or the rights a call
// needs (permission denied, an unknown database or user). Retrying will
// not help until an operator acts, so callers may give up after a few.
var ErrDenied = errors.New("store: access denied")

// Denied marks err as a refusal for lack of credentials or rights:
// errors.Is(err, ErrDenied) holds and the message stays err's. Backends
// call it on the driver errors that mean so. Denied(nil) is nil.
func Denied(err error) error {
	if err == nil || errors.Is(err, ErrDenied) {
		return err
	}
	return deniedError{err}
}

type deniedError struct{ err error }

func (e deniedError) Error() string   { return e.err.Error() }
func (e deniedError) Unwrap() []error { return []error{e.err, ErrDenied} }

// Permanent reports whether err will come back on every retry until an
// operator acts: access denied, a store or table that is not there for a
// store that may not create it, a write to a read-only store, a closed
// store.
func Permanent(err error) bool {
	for _, target := range []error{ErrDenied, ErrNotFound, ErrReadOnly, ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
