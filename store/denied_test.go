package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestDeniedKeepsTheMessageAndTheCause(t *testing.T) {
	cause := errors.New("ERROR: permission denied for schema public (SQLSTATE 42501)")
	err := fmt.Errorf("postgres: acquire %q: %w", "k", Denied(cause))
	if !errors.Is(err, ErrDenied) || !errors.Is(err, cause) {
		t.Errorf("%v: want it to be ErrDenied and keep its cause", err)
	}
	if err.Error() != `postgres: acquire "k": `+cause.Error() {
		t.Errorf("message %q changed", err)
	}
	if Denied(nil) != nil {
		t.Error("Denied(nil) is not nil")
	}
}

func TestPermanentErrorsAreTheOnesAnOperatorMustFix(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{Denied(errors.New("auth")), true},
		{fmt.Errorf("open: %w", ErrNotFound), true},
		{fmt.Errorf("renew: %w", ErrReadOnly), true},
		{ErrClosed, true},
		{errors.New("connection refused"), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := Permanent(c.err); got != c.want {
			t.Errorf("Permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
