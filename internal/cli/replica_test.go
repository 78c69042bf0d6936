package cli

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestFirstSignalStopsARepeatIsIgnoredAndALaterOneKills(t *testing.T) {
	var stops, hurries, hangups atomic.Int32
	hungUp := make(chan struct{}, 1)
	h := &signalHandler{
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		stop:  func() { stops.Add(1) },
		hurry: func() { hurries.Add(1) },
		// The handler reloads in a goroutine of its own (a reload whose
		// log blocks must not hold up a stop): wait for it, not for luck.
		hangup: func() { hangups.Add(1); hungUp <- struct{}{} },
	}
	sigs := make(chan os.Signal)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.handle(sigs, done) })

	sigs <- syscall.SIGHUP // with a hangup action, SIGHUP does not stop
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM // the same request delivered twice
	<-hungUp
	if stops.Load() != 1 || hurries.Load() != 0 || hangups.Load() != 1 || h.first() != syscall.SIGTERM {
		t.Fatalf("stops %d hurries %d hangups %d first %v; want 1, 0, 1, SIGTERM", stops.Load(), hurries.Load(), hangups.Load(), h.first())
	}
	time.Sleep(1100 * time.Millisecond)
	sigs <- syscall.SIGINT
	close(done)
	wg.Wait()
	if stops.Load() != 1 || hurries.Load() != 1 || h.first() != syscall.SIGTERM {
		t.Errorf("after a second signal: stops %d hurries %d first %v; want 1, 1, SIGTERM", stops.Load(), hurries.Load(), h.first())
	}
}

func TestAStopSignalStopsEvenWhenLoggingBlocks(t *testing.T) {
	jam, release := make(chan struct{}), make(chan struct{})
	close(jam)
	stopped := make(chan struct{})
	h := &signalHandler{
		log:   slog.New(&jamHandler{jammed: jam, release: release}),
		stop:  func() { close(stopped) },
		hurry: func() {},
	}
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.handle(sigs, done) })
	defer wg.Wait()
	defer close(done)
	defer close(release)

	sigs <- syscall.SIGTERM
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not stop the replica while its log was jammed")
	}
}
