package watchset

import (
	"context"
	"testing"
	"time"
)

func TestCloseCancelsEveryWatchAndWaitsForIt(t *testing.T) {
	var s Set
	var ended [3]chan struct{}
	for i := range ended {
		ctx, cancel := context.WithCancel(context.Background())
		done, ok := s.Add(cancel)
		if !ok {
			t.Fatal("Add on an open set refused")
		}
		ended[i] = make(chan struct{})
		go func() {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // releasing what it holds
			close(ended[i])
			done()
		}()
	}
	if !s.Close() {
		t.Fatal("the first Close reported the set closed already")
	}
	for i, ch := range ended {
		select {
		case <-ch:
		default:
			t.Errorf("watch %d had not ended when Close returned", i)
		}
	}
	if !s.Closed() || s.Close() {
		t.Fatal("a closed set does not say so")
	}
	if _, ok := s.Add(func() {}); ok {
		t.Fatal("Add on a closed set registered a watch")
	}
}

func TestAWatchThatEndsOnItsOwnIsForgotten(t *testing.T) {
	var s Set
	cancelled := 0
	done, _ := s.Add(func() { cancelled++ })
	done()
	if cancelled != 1 {
		t.Fatalf("done cancelled the watch %d times, want 1", cancelled)
	}
	if !s.Close() || cancelled != 1 {
		t.Fatalf("Close cancelled a watch that had ended (%d cancels)", cancelled)
	}
}
