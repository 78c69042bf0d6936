package sqlite

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tenure-dev/tenure/store"
)

// codedError stands for the driver's error, which carries SQLite's
// (extended) result code.
type codedError int

func (e codedError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e codedError) Code() int     { return int(e) }

// TestUnusableFilesAreReportedAsDenied: a file SQLite may not open or
// write is store.ErrDenied — permanent, so the engine can give up — and
// a busy one is not. (The tests run as root on CI, which file modes do not
// stop, so the driver's codes are staged.)
func TestUnusableFilesAreReportedAsDenied(t *testing.T) {
	for code, want := range map[int]bool{
		3:          true,  // SQLITE_PERM
		8:          true,  // SQLITE_READONLY
		8 | 4<<8:   true,  // SQLITE_READONLY_DBMOVED
		14:         true,  // SQLITE_CANTOPEN
		23:         true,  // SQLITE_AUTH
		5:          false, // SQLITE_BUSY
		10 | 12<<8: false, // SQLITE_IOERR_…
	} {
		s := &Store{path: "/var/lib/app/tenure.db", closing: make(chan struct{})}
		err := s.fail("acquire", fmt.Errorf("exec: %w", codedError(code)))
		if got := errors.Is(err, store.ErrDenied); got != want {
			t.Errorf("code %d: errors.Is(%v, ErrDenied) = %v, want %v", code, err, got, want)
		}
	}
}
